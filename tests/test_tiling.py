"""Tiled singletons: one op over the buffer runs tiled through DRAM, measured and modelled.

For each scheme of ``sim/tiling.py`` a one-op graph runs on a buffer too small for its
one-row schedule: the executor must stay within the buffer, count exactly the bytes the group
model predicts (re-reads included), reach exactly the predicted peak, and compute what the
reference computes. Zoo models that no untiled plan could run on ``sram_edge`` become
feasible, and run at reduced size on correspondingly tiny buffers with the model's bytes.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_capacity import check_measurement

from fusiontune.errors import CapacityError
from fusiontune.frontend.zoo import build_zoo
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.planner.baselines import unfused_plan
from fusiontune.planner.plan import Group, Mode, Plan
from fusiontune.reference import random_inputs, reference_run
from fusiontune.search.optimize import optimal_plan
from fusiontune.sim.bounds import capacity_bound
from fusiontune.sim.capacity import group_peak
from fusiontune.sim.cost import group_cost, simulate
from fusiontune.sim.execute import execute
from fusiontune.sim.hardware import HardwareConfig, load_hardware
from fusiontune.sim.tiling import Scheme, singleton_tiling
from fusiontune.sim.verify import CIM_RTOL_DEFAULT

RTOL = 1e-4  # tiled float32 vs the reference (sim/verify.py)
HW = HardwareConfig()  # act_bits 8: one byte per element


def _one_op(build: str) -> Graph:
    """A graph of one op (plus the constants it needs), by name."""
    b = GraphBuilder(f"tiling_{build}", seed=1)
    x = b.input("x", (1, 16, 12, 12))
    if build == "add":
        b.add(x, b.input("y", (1, 16, 12, 12)))
    elif build == "relu":
        b.relu(x)
    elif build == "bn":
        b.bn(x)
    elif build == "mul_broadcast":  # a (1, C, 1, 1) activation: held whole, read once
        b.op("Mul", [x, b.input("s", (1, 16, 1, 1))])
    elif build == "square":  # one tensor read twice: fetched once per box
        b.op("Mul", [x, x])
    elif build == "softmax":
        b.op("Softmax", [x], {"axis": -1})
    elif build == "softmax_rows":  # over the row axis: not row-local, boxes keep it whole
        b.op("Softmax", [x], {"axis": 2})
    elif build == "add_other_rank":  # operands of different row axes: not row-aligned
        b.add(b.input("u", (3, 4, 6)), b.input("w", (4, 1)))
    elif build in ("conv3x3", "conv3x3_split"):
        b.conv(x, 24, 3)
    elif build == "conv3x3_s2":
        b.conv(x, 8, 3, stride=2)
    elif build in ("conv1x1_s2", "conv1x1_s2_split"):
        b.conv(x, 32, 1, stride=2, pad=0)
    elif build == "depthwise":
        b.conv(x, 16, 3, group=16)
    elif build == "grouped":
        b.conv(x, 8, 3, group=4)
    elif build == "maxpool":
        b.maxpool(x, 3, stride=2, pad=1)
    elif build == "avgpool":
        b.avgpool(x, 2)
    elif build == "bn_training":
        b.bn(b.input("z", (2, 16, 12, 12)), training=True)
    elif build == "global_pool":
        b.global_avgpool(x)
    elif build == "reshape":
        b.reshape(x, (1, 16, 144))
    elif build == "transpose":
        b.op("Transpose", [x], {"perm": (0, 2, 3, 1)})
    elif build == "concat":
        b.op("Concat", [x, b.input("y", (1, 8, 12, 12))], {"axis": 1})
    elif build == "matmul":
        b.op("MatMul", [b.input("q", (1, 2, 24, 16)), b.input("k", (1, 2, 16, 24))])
    elif build in ("gemm", "gemm_split"):
        b.gemm(b.input("v", (4, 96)), 40)
    elif build == "matmul_const_split":  # a MatMul with a constant weight over (B, T, K) rows
        b.matmul(b.input("v", (2, 3, 64)), 24, bias=False)
    else:
        raise AssertionError(build)
    return _drop_unused_inputs(b.build())


def _drop_unused_inputs(graph: Graph) -> Graph:
    used = {t for op in graph.ops for t in op.inputs}
    return Graph(graph.name, graph.tensors, graph.ops,
                 tuple(t for t in graph.inputs if t in used), graph.outputs).lint()  # fmt: skip


CASES = {  # build -> (scheme, buffer bytes below its one-row need)
    "add": (Scheme.POINT, 400),
    "relu": (Scheme.POINT, 200),
    "bn": (Scheme.POINT, 200),
    "mul_broadcast": (Scheme.POINT, 200),
    "square": (Scheme.POINT, 200),
    "softmax": (Scheme.POINT, 200),
    "softmax_rows": (Scheme.POINT, 200),
    "add_other_rank": (Scheme.POINT, 100),
    "conv3x3": (Scheme.WINDOW, 700),
    "conv3x3_s2": (Scheme.WINDOW, 500),
    "conv1x1_s2": (Scheme.WINDOW, 300),
    "depthwise": (Scheme.WINDOW, 300),
    "grouped": (Scheme.WINDOW, 300),
    "maxpool": (Scheme.WINDOW, 300),
    "avgpool": (Scheme.WINDOW, 200),
    "bn_training": (Scheme.REDUCE, 1024),
    "global_pool": (Scheme.REDUCE, 64),
    "reshape": (Scheme.COPY, 100),
    "transpose": (Scheme.COPY, 100),
    "concat": (Scheme.COPY, 100),
    "matmul": (Scheme.MATMUL, 400),
    "gemm": (Scheme.MATRIX, 120),
    "conv3x3_split": (Scheme.WINDOW_SPLIT, 100),  # one column (3 x 16 x 3 = 144) does not fit
    "conv1x1_s2_split": (Scheme.WINDOW_SPLIT, 40),
    "gemm_split": (Scheme.MATRIX_SPLIT, 50),  # one input row (96 features) + an output: 97
    "matmul_const_split": (Scheme.MATRIX_SPLIT, 40),
}


def _run_single(graph: Graph, hw: HardwareConfig) -> None:
    """Run the one group; measured bytes and peak equal the model's; outputs the reference's."""
    plan = unfused_plan(graph)
    (group,) = plan.groups
    cost = group_cost(graph, group, hw)
    assert cost.feasible, cost.violations
    inputs = random_inputs(graph)
    run = execute(graph, plan, inputs, hw=hw, band_rows=1)
    assert run.peak_buffer_bytes <= hw.buffer_bytes
    assert (run.dram_read_bytes, run.dram_write_bytes) == (cost.act_read_bytes,
                                                           cost.act_write_bytes)  # fmt: skip
    assert run.peak_buffer_bytes == cost.buffer_needed_bytes
    want = reference_run(graph, inputs)
    for t in graph.outputs:
        scale = float(np.abs(want[t]).max()) or 1.0
        assert float(np.abs(run.outputs[t] - want[t]).max()) <= RTOL * scale + 1e-6


@pytest.mark.parametrize("build", list(CASES))
def test_a_single_op_over_the_buffer_runs_tiled_as_modelled(build: str) -> None:
    graph = _one_op(build)
    scheme, buffer = CASES[build]
    hw = HW.replace(buffer_bytes=buffer)
    (group,) = unfused_plan(graph).groups
    assert group_peak(graph, group).elems * hw.act_bytes > buffer  # rows alone do not fit
    tiling = singleton_tiling(graph, group, hw)
    assert tiling is not None and tiling.scheme is scheme, tiling
    _run_single(graph, hw)


def test_traffic_of_each_scheme_by_hand() -> None:
    """Point and copy move what the op moves; windows re-read halos; BN reads twice."""
    hw = HW.replace(buffer_bytes=400)
    add = _one_op("add")
    assert group_cost(add, unfused_plan(add).groups[0], hw).act_read_bytes == 2 * 16 * 144
    square = _one_op("square")
    assert group_cost(square, unfused_plan(square).groups[0], hw).act_read_bytes == 16 * 144
    bn = _one_op("bn_training")
    c = group_cost(bn, unfused_plan(bn).groups[0], HW.replace(buffer_bytes=1024))
    assert (c.act_read_bytes, c.act_write_bytes) == (2 * 2 * 16 * 144, 2 * 16 * 144)
    conv = _one_op("conv3x3")  # 12 x 12, 3 x 3, pad 1: strips of t_w columns re-read 2 halos
    hw = HW.replace(buffer_bytes=700)
    t = singleton_tiling(conv, unfused_plan(conv).groups[0], hw)
    assert t is not None and t.scheme is Scheme.WINDOW
    t_w, t_c = t.tile
    strips, passes = math.ceil(12 / t_w), math.ceil(24 / t_c)
    assert t.read_elems == passes * 16 * 12 * (12 + 2 * (strips - 1))
    mm = _one_op("matmul")  # the right operand re-read once per row block
    t = singleton_tiling(mm, unfused_plan(mm).groups[0], HW.replace(buffer_bytes=400))
    assert t is not None
    m, n = t.tile
    left, right = 2 * 24 * 16, 2 * 16 * 24
    assert t.read_elems == left * math.ceil(24 / n) + right * math.ceil(24 / m)


def test_split_reduction_traffic_and_peak_by_hand() -> None:
    """A 3 x 3 Conv (16 -> 24 channels, 12 x 12, pad 1) on 60 B: one output column needs 144.

    Tiles of one row x one column x every output channel: 24 16-bit partial sums (48 B), then
    t_k = (60 - 48) // 9 = 1 input channel of the 3 x 3 box at a time. Each of the 12 strips
    fetches its columns (2 + 10 x 3 + 2 = 34 with the halos), each of the 12 bands its rows
    (34 too), every input channel once (one output-channel tile).
    """
    graph = _one_op("conv3x3_split")
    hw = HW.replace(buffer_bytes=60)
    (group,) = unfused_plan(graph).groups
    t = singleton_tiling(graph, group, hw)
    assert t is not None and t.scheme is Scheme.WINDOW_SPLIT
    assert t.tile == (1, 24, 1, 1)
    assert (t.read_elems, t.write_elems, t.peak_elems) == (16 * 34 * 34, 24 * 144, 2 * 24 + 9)
    _run_single(graph, hw)
    wide = HW.replace(buffer_bytes=60, psum_bits=32)  # 4-byte partial sums: 12 channels a tile
    t = singleton_tiling(graph, group, wide)
    assert t is not None and t.tile[1] == (60 - 9) // 4
    _run_single(graph, wide)


def test_split_matrix_traffic_and_peak_by_hand() -> None:
    """Gemm (4, 96) x (96, 40) on 50 B: one input row needs 96 + 1. Boxes of one row x 24
    columns (48 B of 16-bit partial sums) take (50 - 48) // 1 = 2 features a chunk; the input
    is read once per column block (2)."""
    graph = _one_op("gemm_split")
    hw = HW.replace(buffer_bytes=50)
    t = singleton_tiling(graph, unfused_plan(graph).groups[0], hw)
    assert t is not None and t.scheme is Scheme.MATRIX_SPLIT and t.tile == (2,)
    assert t.chunks is not None and t.chunks.box_shape((4, 40)) == (1, 24)
    assert (t.read_elems, t.write_elems, t.peak_elems) == (2 * 4 * 96, 4 * 40, 48 + 2)
    _run_single(graph, hw)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["Gemm", "MatMul"]),
    st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(3, 40), st.integers(1, 12)),
    st.booleans(),
    st.integers(0, 10**6),
)
def test_split_matrices_run_as_modelled_below_one_input_row(
    kind: str, shape: tuple[int, int, int, int], bias: bool, draw: int
) -> None:
    """Gemm / MatMul with a constant weight on buffers below one input row plus one output:
    prediction == measurement, outputs equal the reference (float32: RTOL)."""
    batch, rows, k, n_out = shape
    b = GraphBuilder("split_matrix", seed=draw % 7)
    if kind == "Gemm":
        b.gemm(b.input("v", (batch * rows, k)), n_out, bias=bias)
    else:
        b.matmul(b.input("v", (batch, rows, k)), n_out, bias=False)
    graph = b.build()
    (group,) = unfused_plan(graph).groups
    least = singleton_tiling(graph, group, HW.replace(buffer_bytes=2))
    assert least is not None and not least.feasible
    assert "accumulator" in least.reason and least.peak_elems == 2 + 1
    buffers = range(least.peak_elems, k + 1)  # below one input row + one output
    hw = HW.replace(buffer_bytes=buffers[draw % len(buffers)])
    t = singleton_tiling(graph, group, hw)
    assert t is not None and t.scheme is Scheme.MATRIX_SPLIT, t
    assert t.peak_elems <= hw.buffer_bytes
    _run_single(graph, hw)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.tuples(st.integers(1, 2), st.integers(2, 6), st.integers(3, 8), st.integers(3, 8)),
    st.tuples(st.integers(1, 5), st.integers(1, 3), st.integers(1, 3), st.integers(0, 2)),
    st.integers(0, 10**6),
)
def test_split_reductions_run_as_modelled_below_one_column(
    shape: tuple[int, int, int, int], geometry: tuple[int, int, int, int], draw: int
) -> None:
    """Convs on buffers below their one output column: prediction == measurement, outputs
    equal the reference (float32, summation order changed: RTOL)."""
    c_out, k, stride, pad = geometry
    b = GraphBuilder("split", seed=draw % 7)
    b.conv(b.input("x", shape), c_out, k, stride=stride, pad=min(pad, k - 1))
    graph = b.build()
    (group,) = unfused_plan(graph).groups
    hw = HW.replace(buffer_bytes=2)
    least = singleton_tiling(graph, group, hw)
    assert least is not None and not least.feasible and "accumulator" in least.reason
    column = shape[0] * shape[1] * k * k  # one output column's window, every input channel
    splits = [c for c in range(least.peak_elems, column)
              if (t := singleton_tiling(graph, group, HW.replace(buffer_bytes=c))) is not None
              and t.scheme is Scheme.WINDOW_SPLIT]  # fmt: skip
    assume(splits)
    assert splits[0] == least.peak_elems  # the refusal names exactly the least buffer
    hw = HW.replace(buffer_bytes=splits[draw % len(splits)])
    t = singleton_tiling(graph, group, hw)
    assert t is not None and t.peak_elems <= hw.buffer_bytes
    _run_single(graph, hw)


HYPOTHESIS_BUILDS = ["conv3x3", "conv3x3_s2", "depthwise", "maxpool", "add", "matmul", "gemm",
                     "transpose", "bn_training", "softmax_rows", "concat"]  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(HYPOTHESIS_BUILDS), st.integers(0, 10**6))
def test_any_buffer_that_admits_a_tile_runs_as_modelled(build: str, draw: int) -> None:
    graph = _one_op(build)
    (group,) = unfused_plan(graph).groups
    rows = group_peak(graph, group).elems
    least = next(b for b in range(16, rows + 1, 16)
                 if (t := singleton_tiling(graph, group, HW.replace(buffer_bytes=b))) is None
                 or t.feasible)  # fmt: skip
    buffer = least + draw % max(1, rows - least)
    _run_single(graph, HW.replace(buffer_bytes=buffer))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["conv", "depthwise", "MaxPool", "AveragePool"]),
    st.tuples(st.integers(1, 2), st.sampled_from([2, 4]), st.integers(3, 9), st.integers(3, 9)),
    st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(0, 2), st.integers(0, 1)),
    st.integers(0, 10**6),
)
def test_window_geometries_tile_as_modelled(
    kind: str, shape: tuple[int, int, int, int], geometry: tuple[int, int, int, int], draw: int
) -> None:
    """Strides, pads, ceil mode and borders: every strip and row of a window tile."""
    k, stride, pad, ceil = geometry
    pad = min(pad, k - 1) if kind in ("conv", "depthwise") else min(pad, k // 2)
    b = GraphBuilder("window", seed=draw % 7)
    x = b.input("x", shape)
    if kind == "conv":
        b.conv(x, 5, k, stride=stride, pad=pad)
    elif kind == "depthwise":
        b.conv(x, shape[1], k, stride=stride, pad=pad, group=shape[1])
    else:
        attrs = {"kernel_shape": (k, k), "strides": (stride, stride), "pads": (pad,) * 4,
                 "ceil_mode": ceil}  # fmt: skip
        b.op(kind, [x], attrs)
    graph = b.build()
    (group,) = unfused_plan(graph).groups
    rows = group_peak(graph, group).elems
    fits = [c for c in range(2, rows)
            if (t := singleton_tiling(graph, group, HW.replace(buffer_bytes=c))) is not None
            and t.feasible]  # fmt: skip
    if fits:
        _run_single(graph, HW.replace(buffer_bytes=fits[draw % len(fits)]))


@pytest.mark.parametrize(("build", "buffer", "need"), [
    ("conv3x3", 10, 11),  # one 16-bit partial sum + one channel of its 3 x 3 window
    ("maxpool", 8, 10),  # a pool has nothing to accumulate: one channel's 3 x 3 window + output
    ("gemm", 2, 3),  # one 16-bit partial sum + one input feature
])  # fmt: skip
def test_an_op_that_cannot_tile_names_itself_and_its_bytes(
    build: str, buffer: int, need: int
) -> None:
    graph = _one_op(build)
    (group,) = unfused_plan(graph).groups
    hw = HW.replace(buffer_bytes=buffer)
    cost = group_cost(graph, group, hw)
    assert not cost.feasible
    op = graph.ops[0]
    head = f"op '{op.name}' ({op.op_type}) cannot run in {buffer} B even tiled"
    assert head in cost.violations[0]
    assert re.search(rf"needs? {need:,} elements", cost.violations[0])
    with pytest.raises(CapacityError, match=rf"op '{op.name}' \({op.op_type}\) cannot run"):
        execute(graph, unfused_plan(graph), random_inputs(graph), hw=hw)


def test_fused_groups_keep_their_rule() -> None:
    """Only singletons tile: a fused group over the buffer is still infeasible."""
    b = GraphBuilder("conv_relu", seed=0)
    b.relu(b.conv(b.input("x", (1, 16, 12, 12)), 24, 3))
    graph = b.build()
    hw = HW.replace(buffer_bytes=700)
    names = tuple(op.name for op in graph.ops)
    fused = Plan.of(graph, [Group(names, Mode.FUSED)])
    assert not simulate(graph, fused, hw).feasible
    with pytest.raises(CapacityError):
        execute(graph, fused, random_inputs(graph), hw=hw, band_rows=1)
    assert simulate(graph, unfused_plan(graph), hw).feasible


# ---- the zoo models no plan could run on sram_edge -----------------------------------------------
ZOO_SMALL = {  # model -> (input size, buffer bytes): small enough that every kind tiles
    "resnet50": (64, 6144),
    "mobilenet_v2": (32, 2048),
    "resnet18_train": (64, 12288),
    "bert_encoder": (16, 4096),
}


@pytest.mark.parametrize("model", list(ZOO_SMALL))
def test_zoo_unfused_plans_are_feasible_on_sram_edge(model: str) -> None:
    graph = build_zoo(model)
    hw = load_hardware("sram_edge")
    metrics = simulate(graph, unfused_plan(graph), hw)
    assert metrics.feasible, metrics.violations[:2]
    assert metrics.buffer_needed_bytes <= hw.buffer_bytes
    tiled = [g for g in unfused_plan(graph).groups if singleton_tiling(graph, g, hw) is not None]
    assert tiled  # the ops that did not fit one row at a time


@pytest.mark.parametrize("model", list(ZOO_SMALL))
def test_zoo_runs_tiled_on_a_tiny_buffer_with_the_models_bytes(model: str) -> None:
    size, buffer = ZOO_SMALL[model]
    graph = build_zoo(model, input_size=size)
    hw = HW.replace(buffer_bytes=buffer)
    plan = unfused_plan(graph)
    assert any(singleton_tiling(graph, g, hw) is not None for g in plan.groups)
    inputs = random_inputs(graph)
    run = execute(graph, plan, inputs, hw=hw, band_rows=1)
    check_measurement(graph, plan, run, hw)
    assert run.peak_buffer_bytes <= buffer
    want = reference_run(graph, inputs)
    for t in graph.outputs:
        scale = float(np.abs(want[t]).max()) or 1.0
        assert float(np.abs(run.outputs[t] - want[t]).max()) <= RTOL * scale + 1e-6


CIM_RTOL = CIM_RTOL_DEFAULT  # quantized crossbar numerics vs the reference


@pytest.mark.parametrize(("build", "buffer"), [("conv3x3_split", 60), ("gemm_split", 50)])
def test_split_reductions_under_cim_numerics_stay_within_its_tolerance(
    build: str, buffer: int
) -> None:
    """Each input chunk is a separately quantized crossbar product: the error changes with
    the chunking but stays within the CIM tolerance."""
    graph = _one_op(build)
    inputs = random_inputs(graph)
    hw = HW.replace(buffer_bytes=buffer)
    run = execute(graph, unfused_plan(graph), inputs, hw=hw, band_rows=1, numerics="cim")
    want = reference_run(graph, inputs)
    for t in graph.outputs:
        err = float(np.abs(run.outputs[t] - want[t]).max()) / float(np.abs(want[t]).max())
        assert 0 < err < CIM_RTOL


def test_resnet18_runs_on_1_kib_with_split_reductions() -> None:
    """Its 3 x 3 x 512 convolutions need more than 4 KiB a column: they split their channels."""
    graph = build_zoo("resnet18", input_size=32)
    hw = HW.replace(buffer_bytes=1024)
    plan = unfused_plan(graph)
    schemes = {t.scheme for g in plan.groups if (t := singleton_tiling(graph, g, hw)) is not None}
    assert Scheme.WINDOW_SPLIT in schemes
    inputs = random_inputs(graph)
    run = execute(graph, plan, inputs, hw=hw, band_rows=1)
    check_measurement(graph, plan, run, hw)
    assert run.peak_buffer_bytes <= hw.buffer_bytes
    want = reference_run(graph, inputs)
    for t in graph.outputs:
        scale = float(np.abs(want[t]).max()) or 1.0
        assert float(np.abs(run.outputs[t] - want[t]).max()) <= RTOL * scale + 1e-6


def test_optimum_with_tiled_singletons_is_bounded_and_runs() -> None:
    graph = build_zoo("mobilenet_v2", input_size=32)
    hw = HW.replace(buffer_bytes=2048)
    result = optimal_plan(graph, hw)
    assert result.proven and result.plan is not None and result.value is not None
    metrics = simulate(graph, result.plan, hw)
    assert metrics.feasible and metrics.traffic_bytes == result.value
    assert capacity_bound(graph, hw) <= result.value
    assert result.value <= simulate(graph, unfused_plan(graph), hw).act_traffic_bytes
    run = execute(graph, result.plan, random_inputs(graph), hw=hw, band_rows=1)
    check_measurement(graph, result.plan, run, hw)
