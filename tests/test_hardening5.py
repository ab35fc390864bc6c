"""Regression tests for what the hostile harness (``experiments/hostile.py``, issue 24) found:
each case failed on main before its fix (a traceback, a wrong exit or an unnamed fault)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusiontune.cli.main import main

REPO = Path(__file__).resolve().parents[1]
F = TensorProto.FLOAT


def _one_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fusiontune: error: "), err
    return lines[0]


def _save(
    tmp_path: Path,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    inits: list[TensorProto] | None = None,
) -> str:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path)


def _w(name: str, *shape: int, dtype: type = np.float32) -> TensorProto:
    return numpy_helper.from_array(np.ones(shape, dtype), name)


vi = helper.make_tensor_value_info
X4, Y4 = vi("x", F, [1, 4]), vi("y", F, [1, 4])
XCONV, YANY = vi("x", F, [1, 3, 8, 8]), vi("y", F, None)


# ---- malformed ONNX ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("nodes", "inputs", "outputs", "inits", "expect"),
    [
        (
            [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=1.5)],
            [XCONV], [YANY], [_w("w", 4, 3, 3, 3)],
            "op 'conv' (Conv): attribute 'kernel_shape' must be INTS, got FLOAT",
        ),
        (
            [helper.make_node("Relu", [""], ["y"], name="relu")], [X4], [Y4], [],
            "op 'relu' (Relu): input 0 ('X') is required but missing",
        ),
        (
            [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")], [X4], [YANY],
            [_w("w", 4, 4, dtype=np.int64)],
            "op 'fc' (MatMul): inputs 'x' (float32) and 'w' (int64) must have the same element",
        ),
        (
            [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[3, 3])],
            [vi("x", F, [])], [YANY], [_w("w", 4, 3, 3, 3)],
            "op 'conv' (Conv) cannot take its inputs ('x' scalar, 'w' 4x3x3x3)",
        ),
        (
            [helper.make_node("Relu", ["t"], ["t"], name="loop"),
             helper.make_node("Relu", ["t"], ["y"], name="out")], [X4], [Y4], [],
            "the graph has a cycle",
        ),
        (
            [helper.make_node("Relu", ["x"], ["y"], name="relu")], [X4], [], [],
            "the graph declares no outputs",
        ),
        (
            [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")], [X4], [YANY],
            [_w("w", 4, 4), _w("w", 4, 4)],
            "initializer 'w' is given twice",
        ),
    ],
    ids=["attribute-type", "required-input-empty", "input-types-differ", "scalar-into-conv",
         "self-loop", "no-outputs", "initializer-twice"],
)  # fmt: skip
def test_malformed_onnx_is_one_line_naming_the_op_or_tensor(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    inits: list[TensorProto],
    expect: str,
) -> None:
    path = _save(tmp_path, nodes, inputs, outputs, inits)
    line = _one_error(["show", path], capsys)
    assert f"{path}: {expect}" in line


def test_gather_index_out_of_range_names_the_op_and_the_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A constant Gather with index 7 on an axis of 4 is not folded; running it (``--verify``)
    was numpy's IndexError, an internal error."""
    index = numpy_helper.from_array(np.array([7], np.int64), "i")
    nodes = [helper.make_node("Gather", ["w", "i"], ["y"], name="gather")]
    path = _save(tmp_path, nodes, [X4], [YANY], [_w("w", 4, 4), index])
    line = _one_error(["simulate", path, "--verify"], capsys)
    assert "op 'gather' (Gather): index 7 is out of range for axis 0 of size 4" in line
    assert "allowed: [-4, 3]" in line


def test_schema_checks_keep_valid_models_loading(tmp_path: Path) -> None:
    """Optional inputs left out, a variadic Concat, a QDQ pair with integer codes: all load."""
    from fusiontune.frontend.onnx_import import load_onnx

    nodes = [
        helper.make_node("Conv", ["x", "w", ""], ["c"], name="conv", kernel_shape=[1, 1]),
        helper.make_node("Concat", ["c", "c", "c"], ["cat"], name="cat", axis=1),
        helper.make_node("QuantizeLinear", ["cat", "s", "z"], ["q"], name="q"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq"),
    ]
    scale = numpy_helper.from_array(np.array(0.1, np.float32), "s")
    zero = numpy_helper.from_array(np.array(0, np.int8), "z")
    path = _save(tmp_path, nodes, [XCONV], [YANY], [_w("w", 4, 3, 1, 1), scale, zero])
    graph = load_onnx(path)
    assert graph.tensors["y"].shape == (1, 12, 8, 8)


# ---- YAML: a key given twice --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expect"),
    [
        (
            "buffer_bytes: 1024\nbuffer_bytes: 2048\n",
            "key 'buffer_bytes' is given twice (lines 1 and 2)",
        ),
        ("adc_pj_by_bits: {8: 1.0, 8: 2.0}\n", "key '8' is given twice (lines 1 and 1)"),
    ],
    ids=["block", "flow"],
)  # fmt: skip
def test_hardware_key_given_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expect: str
) -> None:
    """PyYAML keeps the last of two equal keys silently: a second ``buffer_bytes`` meant as a
    change of the first went unnoticed."""
    hw = tmp_path / "hw.yaml"
    hw.write_text(text)
    line = _one_error(["simulate", "mlp_relu", "--hw", str(hw)], capsys)
    assert f"{hw}: {expect}; keep one" in line


def test_search_space_key_given_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    space = tmp_path / "space.yaml"
    space.write_text("trials: 2\nknobs:\n  adc_bits: {low: 4, high: 8}\ntrials: 3000\n")
    argv = ["search", "mlp_relu", "--workers", "1", "--out", str(tmp_path / "o")]
    line = _one_error([*argv, "--space", str(space)], capsys)
    assert f"{space}: key 'trials' is given twice (lines 1 and 4)" in line


def test_merge_keys_may_still_be_overridden() -> None:
    from fusiontune.errors import ConfigError
    from fusiontune.fileio import parse_yaml

    data = parse_yaml("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\n", "s.yaml", ConfigError)
    assert data["c"] == {"x": 3, "y": 2}


def test_empty_hardware_name_says_what_to_give(capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_error(["simulate", "mlp_relu", "--hw", ""], capsys)
    assert "hardware '' is empty; give a preset (" in line and "isaac_reram" in line


# ---- warnings as one line ------------------------------------------------------------------------
def _cli(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run(
        [sys.executable, "-m", "fusiontune.cli.main", *argv],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_a_warning_is_one_fusiontune_line(tmp_path: Path) -> None:
    """An op of a type the IR does not know: Python's two-line warning (file, line, source)
    becomes one ``fusiontune: warning:`` line."""
    nodes = [helper.make_node("FooBar", ["x"], ["y"], name="foo")]
    path = _save(tmp_path, nodes, [X4], [Y4])
    done = _cli(["show", path], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"fusiontune: warning: {path}: 1 op(s) of types the IR does not know load as OPAQUE: "
        "FooBar (1)"
    ]


def test_torn_journal_repair_is_one_warning_line(tmp_path: Path) -> None:
    """The repair of a torn journal tail says so in one ``fusiontune: warning:`` line."""
    argv = ["search", "mlp_relu", "--workers", "1", "--trials", "3", "--seed", "0"]
    argv += ["--out", str(tmp_path / "out"), "--storage", str(tmp_path / "s.log")]
    assert main(argv) == 0
    journal = tmp_path / "s.log"
    journal.write_bytes(journal.read_bytes()[:-40])
    argv[argv.index("--trials") + 1] = "4"
    done = _cli([*argv, "--resume"], tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if not ln.startswith("search: ")]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"fusiontune: warning: {journal}: dropped a torn final write (")
