"""experiments/exp_heldout.py: the static copy of a wheel's model and the table rows (offline)."""

from __future__ import annotations

import importlib
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import onnx
from onnx import TensorProto, helper

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def _load() -> ModuleType:
    if str(EXPERIMENTS) not in sys.path:
        sys.path.insert(0, str(EXPERIMENTS))
    return importlib.import_module("exp_heldout")


def _wheel(tmp_path: Path) -> Path:
    """A fake wheel holding one model with a dynamic batch dimension (Relu of x)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/m.onnx", model.SerializeToString())
    return wheel


def test_static_copy_fixes_the_dynamic_dimensions_and_keeps_the_nodes(tmp_path: Path) -> None:
    mod = _load()
    spec = mod.HeldOut("pkg", "1.0", "pkg/m.onnx", {"x": (2, 4)}, "test")
    path = mod.static_copy(spec, _wheel(tmp_path), tmp_path / "cache")
    model = onnx.load(str(path))
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 4]
    assert [n.op_type for n in model.graph.node] == ["Relu"]


def test_row_names_every_failed_step_and_computes_ratios() -> None:
    mod = _load()
    spec = mod.HeldOut("pkg", "1.0", "pkg/m.onnx", {}, "test")
    steps = {
        "load": {"ok": True, "ops": 3, "op_types": {"Relu": 3}, "opaque_ops": 0},
        "ort": {"ok": False, "error": "FusiontuneError: no kernel for 'LSTM'"},
        "greedy": {"ok": True, "unfused_bytes": 200, "greedy_bytes": 100},
        "optimum": {"ok": True, "optimum_bytes": 50.0, "optimum_proven": True},
        "verify_optimum": {"ok": True, "verify_optimum_ok": False},
    }
    row = mod.row_of(spec, 5, steps)
    assert row["load"] is True and row["ops"] == 3 and row["nodes"] == 5
    assert row["greedy_vs_unfused"] == 0.5 and row["optimum_vs_unfused"] == 0.25
    assert row["optimum"] == "proven"
    assert "ort: FusiontuneError: no kernel for 'LSTM'" in row["failures"]
    assert "verify_optimum: check failed" in row["failures"]
    assert "greedy" not in row["failures"]


def test_read_rows_round_trips_the_csv(tmp_path: Path) -> None:
    mod = _load()
    from exp_common import write_csv

    rows = [{"model": "a", "ops": 3, "ratio": 0.5, "load": True, "optimum": None}]
    write_csv(rows, tmp_path / "t.csv")
    assert mod.read_rows(tmp_path / "t.csv") == rows


def test_a_model_with_pins_is_copied_as_shipped_and_loaded_with_shapes(tmp_path: Path) -> None:
    """A pinned model keeps its dynamic dimensions in the copy (onnxruntime reads it as
    shipped); fusiontune gets the shapes and the pinned values through ``load_args``."""
    mod = _load()
    spec = mod.HeldOut("pkg", "1.0", "pkg/m.onnx", {"x": (2, 4)}, "test", pins={"sr": 16000})
    path = mod.static_copy(spec, _wheel(tmp_path), tmp_path / "cache")
    dims = [d.dim_param for d in onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", ""]
    assert spec.load_args == {"input_shapes": {"x": [2, 4]}, "input_values": {"sr": 16000}}
    assert mod.HeldOut("pkg", "1.0", "pkg/m.onnx", {}, "test").load_args is None
