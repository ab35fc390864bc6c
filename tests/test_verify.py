"""verify(): the lecture's two traps fail, legal plans pass; CIM numerics are visible per plan."""

from __future__ import annotations

import numpy as np
import pytest

from fusiontune.errors import IllegalPlanError
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.planner.plan import Group, Mode, Plan
from fusiontune.sim.cim import CimNumerics, cim_matmul, quantize_symmetric
from fusiontune.sim.verify import FLOAT_RTOL_DEFAULT, output_error, verify

WRONG_REL_ERR_MIN = 1e-2  # a wrong fold/merge moves outputs by far more than float32 noise


def fc_relu_fc() -> Graph:
    b = GraphBuilder("fc_relu_fc", seed=21)
    x = b.input("x", (4, 32))
    b.gemm(b.relu(b.gemm(x, 24, name="f1"), name="r"), 16, name="f2")
    return b.build()


def fc_trainbn_fc() -> Graph:
    b = GraphBuilder("fc_trainbn_fc", seed=22)
    x = b.input("x", (8, 32))
    b.gemm(b.bn(b.gemm(x, 24, name="f1"), training=True, name="bn"), 16, name="f2")
    return b.build()


def fc_bn_fc() -> Graph:
    b = GraphBuilder("fc_bn_fc", seed=23)
    x = b.input("x", (4, 96))
    b.gemm(b.bn(b.gemm(x, 64, name="f1"), name="bn"), 48, name="f2")
    return b.build()


def whole(graph: Graph, mode: Mode) -> Plan:
    return Plan.of(graph, [Group(tuple(op.name for op in graph.ops), mode)])


# ---- trap 1: merging FC -> ReLU -> FC ------------------------------------------------------------
def test_merge_across_relu_is_refused_and_fails_verify_when_forced() -> None:
    graph = fc_relu_fc()
    merged = whole(graph, Mode.MERGE)
    with pytest.raises(IllegalPlanError):
        verify(graph, merged)  # the planner refuses it (rule 2)
    forced = verify(graph, merged, check=False)
    assert not forced.passed and not forced.outputs_ok
    assert forced.max_rel_err > WRONG_REL_ERR_MIN
    assert forced.traffic_ok  # the bytes are right, the numbers are not
    streamed = verify(graph, whole(graph, Mode.STREAM))
    assert streamed.passed
    assert streamed.max_rel_err < FLOAT_RTOL_DEFAULT


# ---- trap 2: folding batch-statistics BN with running statistics ---------------------------------
def test_batch_stats_bn_folded_with_running_stats_fails_verify() -> None:
    graph = fc_trainbn_fc()
    merged = whole(graph, Mode.MERGE)
    with pytest.raises(IllegalPlanError):
        verify(graph, merged)  # rule 3
    forced = verify(graph, merged, check=False)
    assert not forced.outputs_ok
    assert forced.max_rel_err > WRONG_REL_ERR_MIN
    streamed = verify(graph, whole(graph, Mode.STREAM))  # two-pass statistics: exact
    assert streamed.passed


def test_legal_merge_passes_with_inference_bn() -> None:
    report = verify(fc_bn_fc(), whole(fc_bn_fc(), Mode.MERGE))
    assert report.passed
    assert report.counted_act_bytes == report.analytic_act_bytes == 4 * 96 + 4 * 48
    assert "PASS" in report.summary() and "equal" in report.summary()


# ---- CIM numerics -------------------------------------------------------------------------------
def test_cim_error_small_nonzero_and_differs_between_merge_and_stream() -> None:
    graph = fc_bn_fc()
    merge = verify(graph, whole(graph, Mode.MERGE), numerics="cim")
    stream = verify(graph, whole(graph, Mode.STREAM), numerics="cim")
    for report in (merge, stream):
        assert report.passed, report.summary()  # within the CIM tolerance (5e-2)
        assert 1e-4 < report.max_rel_err < 5e-2  # quantization shows, but is small
    # one quantized matmul vs two: the user sees different errors
    assert abs(merge.max_rel_err - stream.max_rel_err) > 0.1 * min(
        merge.max_rel_err, stream.max_rel_err
    )
    float_merge = verify(graph, whole(graph, Mode.MERGE))
    assert float_merge.max_rel_err < 1e-5 < merge.max_rel_err


def test_cim_on_a_conv_block() -> None:
    b = GraphBuilder("cim_conv", seed=24)
    x = b.input("x", (1, 8, 8, 8))
    b.maxpool(b.relu(b.bn(b.conv(x, 16, 3, name="c"), name="bn"), name="r"), 2, name="p")
    graph = b.build()
    report = verify(graph, whole(graph, Mode.FUSED), numerics="cim")
    assert report.traffic_ok
    assert 1e-4 < report.max_rel_err < 5e-2


def test_cim_matmul_exact_when_wide_and_adc_saturation_hurts() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 300)).astype(np.float32)  # 300 rows: 3 crossbar tiles
    w = rng.standard_normal((300, 20)).astype(np.float32)
    ref = x.astype(np.float64) @ w
    peak = np.abs(ref).max()

    def rel(cfg: CimNumerics) -> float:
        return float(np.abs(cim_matmul(x, w, cfg) - ref).max() / peak)

    wide = CimNumerics(act_bits=16, weight_bits=16, adc_bits=24)
    assert rel(wide) < 1e-3
    default = rel(CimNumerics())
    assert 1e-4 < default < 3e-2
    assert rel(CimNumerics(adc_bits=3)) > 5 * default  # partial sums clipped at 7


def test_quantize_symmetric_exact_codes() -> None:
    q, scale = quantize_symmetric(np.array([1.0, -0.5, 0.25]), bits=3, axis=None)
    # q_max = 3, scale = 1/3: codes rint(3, -1.5, 0.75) = (3, -2, 1)
    assert float(scale) == pytest.approx(1 / 3)
    assert q.tolist() == [3.0, -2.0, 1.0]
    q2, s2 = quantize_symmetric(np.array([[2.0, -1.0], [-4.0, 0.5]]), bits=4, axis=0)
    # per column: peaks (4, 1), q_max 7
    np.testing.assert_allclose(s2, [[4 / 7, 1 / 7]])
    assert q2.tolist() == [[4.0, -7.0], [-7.0, 4.0]]


def test_output_error_numbers() -> None:
    err = output_error("y", np.array([1.0, 2.0, 3.5]), np.array([1.0, 2.0, 3.0]), 0.1, 0.0)
    assert err.max_abs_err == pytest.approx(0.5)
    assert err.max_rel_err == pytest.approx(0.5 / 3)
    assert not err.ok  # 0.5 > 0.1 * 3
    assert output_error("y", np.zeros(3), np.zeros(3), 1e-4, 1e-6).ok
    nan = output_error("y", np.array([np.nan]), np.array([1.0]), 1e-4, 1e-6)
    assert not nan.ok


def test_cim_reads_bit_widths_from_the_hardware() -> None:
    from fusiontune.sim.hardware import HardwareConfig

    graph = fc_bn_fc()
    plan = whole(graph, Mode.STREAM)
    default = verify(graph, plan, numerics="cim")
    coarse = verify(graph, plan, hw=HardwareConfig(adc_bits=4), numerics="cim")
    fine = verify(graph, plan, hw=HardwareConfig(act_bits=16, weight_bits=16), numerics="cim")
    assert coarse.max_rel_err > 5 * default.max_rel_err  # partial sums clip at 15
    assert fine.max_rel_err < default.max_rel_err / 10
    assert fine.counted_act_bytes == 2 * default.counted_act_bytes  # 16-bit activations
    assert fine.traffic_ok


def test_verify_on_a_many_core_chip_checks_every_cores_peak() -> None:
    """On ``isaac_reram`` (168 tiles) the buffer check is per core: each core's measured peak
    against the placement's (a group's peak over all cores is not what any buffer holds)."""
    from fusiontune.frontend.zoo import build_zoo
    from fusiontune.sim.greedy import greedy_plan
    from fusiontune.sim.hardware import load_hardware

    graph, hw = build_zoo("resnet18", input_size=32), load_hardware("isaac_reram")
    report = verify(graph, greedy_plan(graph, hw=hw), hw)
    assert report.passed, report.summary()
    assert len(report.model_peak_bytes) == hw.cores and "per core" in report.summary()
    assert report.measured_peak_bytes == max(report.execution.core_peak_buffer_bytes)
