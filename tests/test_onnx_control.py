"""``If`` at import (a pinned input folds it to its branch) and LSTM models, vs onnxruntime.

The model mirrors silero-vad's (a held-out wheel model, issue 23): an ``If`` on a run-time
scalar (the sample rate ``sr``) whose branches each hold an LSTM, and inside the taken branch an
``If`` on a condition computed from a static shape, which folds without a pin. Built with
``onnx.helper``; tolerance of the reference against onnxruntime as in ``test_reference.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusiontune.cli.main import main
from fusiontune.errors import ModelLoadError
from fusiontune.frontend.loader import load_model, parse_input_values
from fusiontune.frontend.onnx_import import load_onnx
from fusiontune.ir.opclass import OpClass
from fusiontune.planner.baselines import unfused_plan
from fusiontune.reference import random_inputs, reference_run
from fusiontune.sim.cost import simulate
from fusiontune.sim.execute import execute
from fusiontune.sim.greedy import greedy_plan
from fusiontune.sim.hardware import load_hardware

REL_TOL = 1e-5
SEQ, BATCH, N_IN, HIDDEN = 6, 2, 3, 4
RATE = 16000


def _init(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _lstm_branch(tag: str, seed: int, nested: bool) -> onnx.GraphProto:
    """LSTM(x) -> Y_h squeezed to [batch, hidden]; with ``nested``, then an If on
    ``shape(x)[0] == SEQ`` (static: folds at import) choosing Relu or Neg of it."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((1, 4 * HIDDEN, N_IN)) * 0.5).astype(np.float32)
    r = (rng.standard_normal((1, 4 * HIDDEN, HIDDEN)) * 0.5).astype(np.float32)
    b = rng.standard_normal((1, 8 * HIDDEN)).astype(np.float32)
    inits = [_init(f"{tag}_w", w), _init(f"{tag}_r", r), _init(f"{tag}_b", b),
             _init(f"{tag}_axes", np.asarray([0], np.int64))]  # fmt: skip
    nodes = [
        helper.make_node("LSTM", ["x", f"{tag}_w", f"{tag}_r", f"{tag}_b", "", "h0"],
                         [f"{tag}_y", f"{tag}_yh", ""], hidden_size=HIDDEN, name=f"{tag}/lstm"),
        helper.make_node("Squeeze", [f"{tag}_yh", f"{tag}_axes"], [f"{tag}_h"]),
    ]  # fmt: skip
    out = f"{tag}_h"
    if nested:
        inits.append(_init(f"{tag}_seq", np.asarray(SEQ, np.int64)))
        inits.append(_init(f"{tag}_zero", np.asarray(0, np.int64)))
        relu = helper.make_graph(
            [helper.make_node("Relu", [out], [f"{tag}_relu"])], f"{tag}_then", [],
            [helper.make_tensor_value_info(f"{tag}_relu", TensorProto.FLOAT, None)],
        )  # fmt: skip
        neg = helper.make_graph(
            [helper.make_node("Neg", [out], [f"{tag}_neg"])], f"{tag}_else", [],
            [helper.make_tensor_value_info(f"{tag}_neg", TensorProto.FLOAT, None)],
        )  # fmt: skip
        nodes += [
            helper.make_node("Shape", ["x"], [f"{tag}_shape"]),
            helper.make_node("Gather", [f"{tag}_shape", f"{tag}_zero"], [f"{tag}_len"]),
            helper.make_node("Equal", [f"{tag}_len", f"{tag}_seq"], [f"{tag}_full"]),
            helper.make_node("If", [f"{tag}_full"], [f"{tag}_out"], then_branch=relu,
                             else_branch=neg, name=f"{tag}/if_len"),
        ]  # fmt: skip
        out = f"{tag}_out"
    return helper.make_graph(
        nodes, tag, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits
    )


def if_model(tmp_path: Path) -> Path:
    """``y = If(sr == 16000, then: relu(LSTM_a(x)), else: LSTM_b(x))``, opset 17."""
    nodes = [
        helper.make_node("Equal", ["sr", "rate"], ["is_16k"]),
        helper.make_node("If", ["is_16k"], ["y"], then_branch=_lstm_branch("a", 1, True),
                         else_branch=_lstm_branch("b", 2, False), name="if_rate"),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "vad_like",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [SEQ, BATCH, N_IN]),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, BATCH, HIDDEN]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, HIDDEN])],
        [_init("rate", np.asarray(RATE, np.int64))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = tmp_path / "vad_like.onnx"
    onnx.save(model, path)
    return path


def _ort(path: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(["y"], feeds)[0])


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b).max() / np.abs(b).max())


@pytest.mark.parametrize(("rate", "types"), [(RATE, ["LSTM", "Squeeze", "Relu"]),
                                             (8000, ["LSTM", "Squeeze"])])  # fmt: skip
def test_a_pinned_input_takes_the_branch_and_meets_onnxruntime(
    rate: int, types: list[str], tmp_path: Path
) -> None:
    path = if_model(tmp_path)
    graph = load_onnx(path, input_values={"sr": rate})
    assert graph.inputs == ("x", "h0")  # sr is a constant now
    assert [op.op_type for op in graph.ops] == types  # the nested If folded too (Relu, not Neg)
    lstm = graph.ops[0]
    assert lstm.op_class is OpClass.OPAQUE and lstm.name == ("a/lstm" if rate == RATE else "b/lstm")
    feeds = random_inputs(graph, seed=3)
    got = reference_run(graph, feeds)["y"]
    want = _ort(path, {**feeds, "sr": np.asarray(rate, np.int64)})
    assert got.shape == want.shape == (BATCH, HIDDEN)
    assert _rel(got, want) <= REL_TOL


def test_an_unused_optional_output_places_on_many_cores(tmp_path: Path) -> None:
    """The LSTM's third output is named "" (not produced): placement and the per-core
    executor skip it, and the executor measures the model's network bytes."""
    graph = load_onnx(if_model(tmp_path), input_values={"sr": RATE})
    hw = load_hardware("isaac_reram")
    feeds = random_inputs(graph, seed=3)
    for plan in (greedy_plan(graph, hw=hw), unfused_plan(graph)):
        model = simulate(graph, plan, hw)
        run = execute(graph, plan, feeds, hw=hw, band_rows=1)
        assert (run.noc_bytes, run.noc_byte_hops) == (model.noc_bytes, model.noc_byte_hops)
        assert _rel(run.outputs["y"], reference_run(graph, feeds)["y"]) <= REL_TOL


def test_an_if_on_an_input_not_pinned_names_the_input(tmp_path: Path) -> None:
    path = if_model(tmp_path)
    with pytest.raises(
        ModelLoadError,
        match=r"op 'if_rate' \(If\): its condition 'is_16k' "
        r"depends on graph input 'sr', known only at run time; .*"
        r"input_values=\{'sr': \.\.\.\} in Python, --pin sr=VALUE on the CLI",
    ):
        load_onnx(path)  # fmt: skip


@pytest.mark.parametrize(
    ("pins", "message"),
    [({"rate": 1}, r"input_values pins 'rate', which is a constant \(initializer\)"),
     ({"s": 1}, r"input_values pins 's', which is not a graph input.*graph inputs: x, h0, sr"),
     ({"sr": 16000.5}, r"pins 'sr' to 16000.5, which int64 cannot hold exactly"),
     ({"sr": [1, 2]}, r"pins 'sr' to 2 value\(s\); the model declares it \(\) \(1 value\(s\)\)"),
     ({"sr": "fast"}, r"pins 'sr' to 'fast', which is not numeric")],
    ids=["initializer", "unknown", "inexact", "count", "text"],
)  # fmt: skip
def test_bad_pins_name_the_input(pins: dict[str, object], message: str, tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=message):
        load_onnx(if_model(tmp_path), input_values=pins)


def test_pins_apply_to_onnx_files_only() -> None:
    with pytest.raises(ModelLoadError, match=r"zoo model 'lenet': input_values applies to ONNX"):
        load_model("lenet", input_values={"x": 1})


def test_parse_input_values() -> None:
    assert parse_input_values(["sr=16000", "m=1,0.5"]) == {"sr": 16000, "m": [1, 0.5]}
    for bad in ("sr", "=3", "sr=", "sr=a"):
        with pytest.raises(ModelLoadError, match=r"--pin '.*': expected NAME=VALUE"):
            parse_input_values([bad])
    with pytest.raises(ModelLoadError, match=r"--pin: input 'sr' is given twice"):
        parse_input_values(["sr=1", "sr=2"])


def test_cli_pin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(if_model(tmp_path))
    assert main(["plans", path, "--pin", f"sr={RATE}", "--count"]) == 0
    assert main(["plans", path, "--count"]) != 0
    assert "--pin sr=VALUE" in capsys.readouterr().err


def test_cli_search_pin(tmp_path: Path) -> None:
    path = str(if_model(tmp_path))
    out = tmp_path / "runs"
    args = ["search", path, "--pin", f"sr={RATE}", "--trials", "2", "--workers", "1"]
    assert main([*args, "--out", str(out)]) == 0
    assert (out / "vad_like" / "summary.json").is_file()
