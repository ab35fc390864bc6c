"""The cost model at a quantized model's own bit widths (``sim/model_bits.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusiontune import load_onnx
from fusiontune.frontend.zoo import build_zoo
from fusiontune.planner.baselines import unfused_plan
from fusiontune.sim.cost import simulate
from fusiontune.sim.hardware import HardwareConfig, load_hardware
from fusiontune.sim.model_bits import ModelBits, at_model_bits, model_bits
from fusiontune.sim.verify import verify

QDQ = Path(__file__).parent / "data" / "qdq"


def _int16_conv(tmp_path: Path) -> Path:
    """x -> Q/DQ (int16) -> Conv (int8 weight, int32 bias DQ) -> Relu -> Q/DQ (int16)."""
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    inits = [
        numpy_helper.from_array(w, "wq"), numpy_helper.from_array(np.float32(0.01), "ws"),
        numpy_helper.from_array(np.int8(0), "wz"),
        numpy_helper.from_array(np.arange(4, dtype=np.int32), "bq"),
        numpy_helper.from_array(np.float32(1e-4), "bs"),
        numpy_helper.from_array(np.float32(1e-3), "xs"), numpy_helper.from_array(np.int16(0), "xz"),
        numpy_helper.from_array(np.float32(2e-3), "ys"), numpy_helper.from_array(np.int16(0), "yz"),
    ]  # fmt: skip
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"]),
        helper.make_node("DequantizeLinear", ["bq", "bs"], ["bd"]),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], "conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes, "int16_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 8, 8))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, 4, 8, 8))], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    path = tmp_path / "int16_conv.onnx"
    onnx.save(model, str(path))
    return path


def test_int16_activations_cost_two_bytes_and_twice_the_input_passes(tmp_path: Path) -> None:
    graph = load_onnx(_int16_conv(tmp_path))
    assert model_bits(graph) == ModelBits(act_bits=16, weight_bits=8)  # the int32 bias: not
    hw = load_hardware("isaac_reram_flat")
    at = at_model_bits(graph, hw)
    assert (at.act_bits, at.weight_bits, at.act_bytes) == (16, 8, 2)
    assert at.input_slices == 2 * hw.input_slices
    plan = unfused_plan(graph)
    preset, model = simulate(graph, plan, hw), simulate(graph, plan, at)
    assert model.traffic_bytes == 2 * preset.traffic_bytes
    assert model.cycles > preset.cycles
    # planned, simulated and executed on the same hardware: counted bytes = the model's
    report = verify(graph, plan, at)
    assert report.traffic_ok and report.passed


def test_int8_models_and_float_models_keep_the_preset() -> None:
    hw = HardwareConfig()
    for name in ("resnet18n_qdq_channel", "resnet18n_qop", "encoder_qdq"):
        graph = load_onnx(QDQ / f"{name}.onnx")
        assert model_bits(graph) == ModelBits(8, 8), name
        assert at_model_bits(graph, hw) is hw
    graph = build_zoo("lenet5")
    assert model_bits(graph) == ModelBits(None, None)
    narrow = hw.replace(act_bits=4, weight_bits=4)
    assert at_model_bits(graph, narrow) is narrow


# ---- the user surface: facade, simulate --model-bits, search(model_bits=True) --------------------
def test_the_facade_exports_model_bits() -> None:
    import fusiontune as ft

    assert ft.at_model_bits is at_model_bits and ft.model_bits is model_bits
    assert ft.ModelBits is ModelBits


def test_cli_simulate_model_bits_prices_a_committed_qdq_file_at_its_widths(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An int8 QDQ resnet18 on a 16-bit preset (puma_138): ``--model-bits`` prices one byte per
    activation, as ``at_model_bits`` does; without it the preset's two bytes, and a note."""
    import json

    from fusiontune.cli.main import main
    from fusiontune.sim.greedy import greedy_plan

    path = QDQ / "resnet18n_qdq_tensor.onnx"
    graph = load_onnx(path)
    preset = load_hardware("puma_138")
    at = at_model_bits(graph, preset)
    assert (at.act_bits, at.weight_bits, at.act_bytes) == (8, 8, 1)
    totals = {}
    for flag, hw in (([], preset), (["--model-bits"], at)):
        assert main(["simulate", str(path), "--hw", "puma_138", "--json", *flag]) == 0
        captured = capsys.readouterr()
        report = json.loads(captured.out)
        want = simulate(graph, greedy_plan(graph, hw=hw), hw)
        assert report["totals"]["traffic_bytes"] == want.traffic_bytes
        totals[bool(flag)] = report["totals"]["act_traffic_bytes"]
        line = (
            "model bits: activations 8, weights 8 bits (the model's grids; puma_138 prices 16/16)"
            if flag
            else "note: the model's grids are activations 8 / weights 8 bits; puma_138 prices "
            "16/16 (--model-bits prices the model's)"
        )
        assert line in captured.err
    assert totals[True] * 2 == totals[False]  # one byte per activation instead of two


def test_cli_model_bits_on_a_float_model_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    from fusiontune.cli.main import main

    assert main(["simulate", "lenet5", "--model-bits"]) == 0
    assert "model bits: 'lenet5' has no integer grids; isaac_reram_flat prices 8/8 kept" in (
        capsys.readouterr().err
    )


def test_search_model_bits_searches_on_the_models_widths(tmp_path: Path) -> None:
    """``search(model_bits=True)``: the trials run on the model's 16-bit activations (the
    preset's 8 otherwise), so the best plan's traffic is two bytes per element, not one."""
    from fusiontune.search.api import search

    graph = load_onnx(_int16_conv(tmp_path))
    elements = 1 * 3 * 8 * 8 + 1 * 4 * 8 * 8  # the input read and the output written
    for on, act_bits, act_bytes in ((False, 8, 1), (True, 16, 2)):
        result = search(graph, trials=3, workers=1, backend="serial", baselines=False,
                        out=tmp_path / "runs", study=f"bits_{on}", model_bits=on)  # fmt: skip
        assert set(result.trials["hw.act_bits"]) == {act_bits}
        assert result.summary["best"]["traffic_bytes"] == elements * act_bytes
