"""``fusiontune models`` and ``fusiontune show``, driven through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from fusiontune.cli.main import main
from fusiontune.frontend.zoo import zoo_models


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---- models ---------------------------------------------------------------------------------
def test_models_json_lists_the_zoo_with_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "models", "--json")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)}
    assert list(rows) == zoo_models()
    assert set(rows["vgg16"]) == {
        "name", "description", "input_shape", "input_size", "input_size_meaning", "ops",
        "params", "macs",
    }  # fmt: skip
    # vgg16: 138,357,544 params (torchvision), 37 ops (see test_zoo), 15,470,264,320 MACs
    assert (rows["vgg16"]["ops"], rows["vgg16"]["params"], rows["vgg16"]["macs"]) == (
        37,
        138_357_544,
        15_470_264_320,
    )
    assert rows["resnet18"]["input_shape"] == [1, 3, 224, 224]
    assert rows["resnet18_train"]["input_shape"] == [2, 3, 224, 224]
    assert rows["lenet5"]["input_shape"] == [1, 1, 32, 32]
    assert rows["bert_encoder"]["input_shape"] == [1, 128, 768]
    assert rows["bert_encoder"]["input_size_meaning"] == "sequence length"
    assert rows["mlp_wide"]["params"] == 1_118_224  # 256*4096 + 4096 + 4096*16 + 16


def test_models_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "models")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["model", "input", "shape", "ops", "params"]
    assert set(lines[1]) == {"-", " "}
    body = {line.split()[0]: line.split() for line in lines[2 : 2 + len(zoo_models())]}
    assert list(body) == zoo_models()
    assert body["resnet18"][1:5] == ["1x3x224x224", "69", "11,699,112", "1,814,073,344"]
    # numbers are right-aligned: every row's params column ends at the same position
    ends = {line.index(row[3]) + len(row[3]) for line, row in zip(lines[2:], body.values())}
    assert len(ends) == 1


# ---- show -----------------------------------------------------------------------------------
def test_show_json_per_op_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "show", "lenet5", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["model"] == "lenet5"
    assert (report["act_bits"], report["act_bytes_per_element"]) == (8, 1)
    assert report["inputs"] == {"input": [1, 1, 32, 32]}
    ops = {r["name"]: r for r in report["ops"]}
    assert len(ops) == 12
    # conv1: 6 x 28 x 28 = 4,704 outputs, each 1 x 5 x 5 = 25 MACs; 6*25 weights + 6 biases
    assert ops["conv1"] == {
        "name": "conv1", "type": "Conv", "class": "LINEAR", "output_shape": [1, 6, 28, 28],
        "macs": 117_600, "params": 156, "output_bytes": 4_704,
    }  # fmt: skip
    assert ops["pool2"]["output_shape"] == [1, 16, 5, 5]
    assert (ops["pool2"]["class"], ops["pool2"]["macs"], ops["pool2"]["params"]) == ("WINDOW", 0, 0)
    assert ops["fc3"]["output_bytes"] == 10  # the graph output is written too
    assert report["totals"] == {
        "ops": 12,
        "macs": sum(r["macs"] for r in ops.values()),
        "params": 61_706,
        "output_bytes": sum(r["output_bytes"] for r in ops.values()),
    }
    # 117,600 + 16*10*10*150 + 400*120 + 120*84 + 84*10
    assert report["totals"]["macs"] == 117_600 + 240_000 + 48_000 + 10_080 + 840


@pytest.mark.parametrize(("bits", "bytes_per_element"), [(4, 1), (12, 2), (16, 2), (32, 4)])
def test_show_act_bits_sets_bytes_per_element(
    capsys: pytest.CaptureFixture[str], bits: int, bytes_per_element: int
) -> None:
    code, out, _ = run_cli(capsys, "show", "lenet5", "--json", "--act-bits", str(bits))
    assert code == 0
    report = json.loads(out)
    assert report["act_bytes_per_element"] == bytes_per_element
    conv1 = next(r for r in report["ops"] if r["name"] == "conv1")
    assert conv1["output_bytes"] == 4_704 * bytes_per_element


def test_show_table_with_input_size_and_batch(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "show", "resnet18", "--input-size", "32", "--batch", "2")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("model resnet18: 69 ops, 11,699,112 params")
    assert "input 2x3x32x32" in lines[1]
    assert "8-bit" in lines[2] and "1 byte(s) per element" in lines[2]
    header = lines[4].split()
    assert header == ["op", "type", "class", "output", "shape", "MACs", "params", "output", "bytes"]
    rows = {line.split()[0]: line.split() for line in lines[6:]}
    assert len(rows) == 69 + 1  # ops + total
    # stem conv at 32x32, batch 2: 2 x 64 x 16 x 16 outputs, each 3*7*7 = 147 MACs
    assert rows["stem.conv"] == ["stem.conv", "Conv", "LINEAR", "2x64x16x16", "4,816,896",
                                 "9,408", "32,768"]  # fmt: skip
    assert rows["stem.bn"][1:3] == ["BatchNormalization", "AFFINE"]
    assert rows["total"][2] == "11,699,112"


def test_show_unknown_model_fails_with_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "show", "resnet19")
    assert code == 2
    assert err.startswith("fusiontune: error: ")
    assert "did you mean 'resnet18'" in err
    assert len(err.strip().splitlines()) == 1


def test_show_too_small_input_size_fails_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "show", "vgg16", "--input-size", "16")
    assert code == 2
    assert "input_size 16" in err and ">= 32" in err


@pytest.mark.parametrize("argv", [["--act-bits", "0"], ["--batch", "x"], ["--input-size", "-4"]])
def test_show_rejects_bad_numbers(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main(["show", "lenet5", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fusiontune: error: argument") and len(err.strip().splitlines()) == 1


def _dynamic_relu_onnx(path: Path) -> Path:
    """x[N, 4] -> Relu -> y: a file whose batch dimension is dynamic."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path


def test_show_onnx_file_with_input_shape(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _dynamic_relu_onnx(tmp_path / "relu.onnx")
    code, out, _ = run_cli(capsys, "show", str(path), "--input-shape", "x=3,4", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["inputs"] == {"x": [3, 4]}
    assert report["ops"] == [
        {"name": "relu", "type": "Relu", "class": "ELEMWISE", "output_shape": [3, 4],
         "macs": 0, "params": 0, "output_bytes": 12},
    ]  # fmt: skip


def test_show_exported_zoo_model_matches_the_zoo(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from fusiontune.export.onnx_export import to_onnx
    from fusiontune.frontend.zoo import build_zoo

    path = tmp_path / "lenet5.onnx"
    to_onnx(build_zoo("lenet5"), path)
    _, zoo_out, _ = run_cli(capsys, "show", "lenet5", "--json")
    code, file_out, _ = run_cli(capsys, "show", str(path), "--json")
    assert code == 0
    zoo_report, file_report = json.loads(zoo_out), json.loads(file_out)
    assert file_report["totals"] == zoo_report["totals"]
    assert [(r["type"], r["class"], r["output_shape"]) for r in file_report["ops"]] == [
        (r["type"], r["class"], r["output_shape"]) for r in zoo_report["ops"]
    ]
