"""The capacity-aware lower bound (``capacity_bound``): admissible, and what it charges.

Admissible: on random DAGs and residual chains at buffer sizes from "nothing fuses" to
"everything fits", the bound never exceeds the least traffic of any feasible plan, found by
brute force over every set partition (small graphs) and by the exact optimizer (proven).
Charged: a skip connection whose two ends lie on the graph's longest path is paid for
whenever the path is cut between its ends (written once, read by every later group).
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import dag_graphs, set_partitions

from fusiontune.errors import IllegalPlanError
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.planner.baselines import unfused_plan
from fusiontune.planner.legality import check_group, check_plan
from fusiontune.planner.plan import Group, Mode, Plan
from fusiontune.search.optimize import optimal_plan
from fusiontune.sim.bounds import capacity_bound
from fusiontune.sim.cost import lower_bound, simulate
from fusiontune.sim.hardware import HardwareConfig

PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BRUTE_FORCE_MAX_OPS = 6  # Bell(6) = 203 partitions, each in every legal mode
BUFFERS = (16, 48, 96, 160, 256, 384, 640, 1024, 4096, 1 << 20)  # bytes: 16-element rows
MODES = (Mode.SINGLE, Mode.FUSED, Mode.MERGE, Mode.STREAM)


def _brute_force_traffic(graph: Graph, hw: HardwareConfig) -> int | None:
    """Least traffic over every legal, feasible plan (every set partition, every mode)."""
    best: int | None = None
    for parts in set_partitions([op.name for op in graph.ops]):
        choices = [[m for m in MODES if not check_group(graph, p, m)] for p in parts]
        for modes in itertools.product(*choices):
            plan = Plan.of(graph, [Group(tuple(p), m) for p, m in zip(parts, modes)])
            try:
                check_plan(graph, plan)
            except IllegalPlanError:
                continue
            m = simulate(graph, plan, hw)
            if m.feasible and (best is None or m.traffic_bytes < best):
                best = m.traffic_bytes
    return best


@st.composite
def residual_graphs(draw: st.DrawFn, max_blocks: int = 2) -> Graph:
    """A 3x3 stem and 1..``max_blocks`` residual blocks (conv-relu-conv + skip add), with an
    optional max pool between blocks: skip tensors whose two ends lie on the longest path."""
    side = draw(st.sampled_from((4, 8)))
    b = GraphBuilder("residual", seed=draw(st.integers(0, 2**16)))
    x = b.relu(b.conv(b.input("x", (1, 4, side, side)), 4, 3, pad=1))
    for k in range(draw(st.integers(1, max_blocks))):
        y = b.conv(b.relu(b.conv(x, 4, 3, pad=1)), 4, 3, pad=1)
        x = b.add(x, y) if draw(st.booleans()) else b.relu(b.add(y, x))
        if k == 0 and side == 8 and draw(st.booleans()):
            x = b.maxpool(x, 2, 2)
    b.output(x)
    return b.build()


@PROPS
@given(dag_graphs(max_ops=BRUTE_FORCE_MAX_OPS), st.sampled_from(BUFFERS), st.booleans())
def test_bound_is_below_brute_force_on_random_dags(
    graph: Graph, buffer_bytes: int, resident: bool
) -> None:
    hw = HardwareConfig(buffer_bytes=buffer_bytes, weights_resident=resident)
    best = _brute_force_traffic(graph, hw)
    if best is not None:
        assert lower_bound(graph, hw) <= capacity_bound(graph, hw) <= best


@PROPS
@given(residual_graphs(max_blocks=1), st.sampled_from(BUFFERS))
def test_bound_is_below_brute_force_on_residual_blocks(graph: Graph, buffer_bytes: int) -> None:
    hw = HardwareConfig(buffer_bytes=buffer_bytes)
    best = _brute_force_traffic(graph, hw)
    if best is not None:
        assert capacity_bound(graph, hw) <= best


@PROPS
@given(st.one_of(residual_graphs(), dag_graphs(max_ops=9)), st.sampled_from(BUFFERS))
def test_bound_is_below_the_proven_optimum(graph: Graph, buffer_bytes: int) -> None:
    hw = HardwareConfig(buffer_bytes=buffer_bytes)
    result = optimal_plan(graph, hw)
    if result.plan is not None:
        assert result.proven
        assert capacity_bound(graph, hw) <= result.value


def _block() -> Graph:
    b = GraphBuilder("block", seed=0)
    x = b.relu(b.conv(b.input("x", (1, 4, 8, 8)), 4, 3, pad=1))
    y = b.conv(b.relu(b.conv(x, 4, 3, pad=1)), 4, 3, pad=1)
    b.output(b.add(x, y))
    return b.build()


def test_a_skip_cut_by_every_group_is_written_once_and_read_by_each_reader() -> None:
    # a buffer below every 3x3 convolution's window: no group of two ops or more can hold a
    # conv, so every tensor crosses groups: six 256-byte tensors written once, read by seven
    # groups (the skip tensor by two: the conv and the add). Before skips were priced on the
    # path the bound charged one read of the skip (3,072 B).
    graph = _block()
    hw = HardwareConfig(buffer_bytes=64)
    tensor_bytes = 4 * 8 * 8
    assert capacity_bound(graph, hw) == (6 + 7) * tensor_bytes
    result = optimal_plan(graph, hw)
    assert result.plan is not None and result.plan.n_groups == len(graph.ops)
    assert capacity_bound(graph, hw) <= result.value  # the tiled singletons re-read halos


@pytest.mark.parametrize("buffer_bytes", BUFFERS)
def test_the_block_bound_is_admissible_at_every_buffer(buffer_bytes: int) -> None:
    graph = _block()
    hw = HardwareConfig(buffer_bytes=buffer_bytes)
    best = _brute_force_traffic(graph, hw)
    if best is None:  # not even the smallest tile of a 3x3 conv fits
        assert optimal_plan(graph, hw).status == "infeasible"
        return
    assert capacity_bound(graph, hw) <= best


# ---- weight re-reads of oversized convolutions (weights loaded per inference) ----------------
def _reload_hw(buffer_bytes: int, n_crossbars: int) -> HardwareConfig:
    return HardwareConfig(
        buffer_bytes=buffer_bytes, weights_resident=False, weight_reload=True,
        n_crossbars=n_crossbars,
    )  # fmt: skip


@PROPS
@given(
    st.one_of(dag_graphs(max_ops=BRUTE_FORCE_MAX_OPS), residual_graphs(max_blocks=1)),
    st.sampled_from(BUFFERS),
    st.sampled_from((1, 2)),
)
def test_bound_with_weight_reloads_is_below_brute_force(
    graph: Graph, buffer_bytes: int, n_crossbars: int
) -> None:
    hw = _reload_hw(buffer_bytes, n_crossbars)
    best = _brute_force_traffic(graph, hw)
    if best is not None:
        assert capacity_bound(graph, hw) <= best


@pytest.mark.parametrize("model", ["resnet18", "vgg11", "mobilenet_v2"])
def test_bound_with_weight_reloads_is_below_the_zoo_optimum(model: str) -> None:
    from fusiontune.frontend.zoo import build_zoo
    from fusiontune.sim.hardware import load_hardware

    graph, hw = build_zoo(model, input_size=32), load_hardware("zigzag_aimc")
    assert hw.weight_reload and not hw.weights_resident
    result = optimal_plan(graph, hw)
    assert result.proven and result.value is not None
    metrics = simulate(graph, result.plan, hw)
    bound = capacity_bound(graph, hw)
    assert bound <= result.value
    # the re-reads are most of the optimum's traffic; the bound now sees a share of them
    assert bound > capacity_bound(graph, hw.replace(weight_reload=False))
    assert metrics.reload_bytes > 0


def test_reloads_of_a_lone_oversized_conv_are_charged_exactly() -> None:
    # one 3x3 conv over a graph input needs more crossbars than the chip has: its only group
    # is itself, and the bound is the singleton's traffic to the byte
    b = GraphBuilder("one_conv", seed=0)
    b.output(b.conv(b.input("x", (1, 64, 8, 8)), 64, 3, pad=1))
    graph = b.build()
    hw = _reload_hw(2048, 1)
    metrics = simulate(graph, unfused_plan(graph), hw)
    assert metrics.feasible and metrics.reload_bytes > 0
    assert capacity_bound(graph, hw) == metrics.traffic_bytes


@pytest.mark.parametrize(
    ("model", "preset"), [("resnet50", "zigzag_aimc"), ("resnet18", "sram_edge")]
)
def test_a_time_limited_search_is_certified_by_the_capacity_bound(model: str, preset: str) -> None:
    from fusiontune.frontend.zoo import build_zoo
    from fusiontune.sim.hardware import load_hardware

    graph, hw = build_zoo(model), load_hardware(preset)
    early = optimal_plan(graph, hw, time_limit_s=1e-6)
    assert early.status == "time_limit" and early.value is not None
    bound = capacity_bound(graph, hw)
    assert lower_bound(graph, hw) < bound == early.lower_bound <= early.value
    assert early.gap == pytest.approx((early.value - bound) / early.value)


# ---- what no plan can avoid: merges the rules refuse, and re-reads of OPAQUE ops --------------
def _ffn(activation: str | None) -> Graph:
    b = GraphBuilder("ffn", seed=0)
    h = b.matmul(b.input("x", (16, 32)), 64, bias=False)
    b.output(b.matmul(b.act(activation, h) if activation else h, 32, bias=False))
    return b.build()


@pytest.mark.parametrize("n_crossbars", [1, 2, 4, 8])
@pytest.mark.parametrize("buffer_bytes", [256, 4096, 1 << 16])
def test_a_nonlinearity_between_two_fcs_is_charged_when_the_crossbars_cannot_hold_both(
    n_crossbars: int, buffer_bytes: int
) -> None:
    # fc1 -> Relu -> fc2: no P3 merge across the Relu (rule 2), so one group holding both FCs
    # needs the crossbars of both (4 on this chip); with fewer, the 16x64 intermediate crosses
    # DRAM (written once, read once) in every plan, and the bound says so. Without the Relu
    # the merge (one 32x32 matrix) keeps it on chip at every crossbar count.
    hw = HardwareConfig(buffer_bytes=buffer_bytes, weights_resident=False, n_crossbars=n_crossbars)
    graph, linear = _ffn("Relu"), _ffn(None)
    best = _brute_force_traffic(graph, hw)
    assert best is not None
    intermediate = 2 * 16 * 64 * hw.act_bytes
    crosses = n_crossbars < 4
    assert capacity_bound(graph, hw) == best == lower_bound(graph, hw) + crosses * intermediate
    assert capacity_bound(linear, hw) == _brute_force_traffic(linear, hw) == lower_bound(linear, hw)


def _bare_attention(seq: int = 24, d: int = 8, heads: int = 4) -> Graph:
    b = GraphBuilder("bare_attention", seed=0)
    q = b.input("q", (1, heads, seq, d))
    kt = b.input("kt", (1, heads, d, seq))
    v = b.input("v", (1, heads, seq, d))
    p = b.op("Softmax", [b.op("MatMul", [q, kt], name="scores")], {"axis": -1}, name="softmax")
    b.output(b.op("MatMul", [p, v], name="context"))
    return b.build()


@pytest.mark.parametrize("buffer_bytes", [8192, 400, 120])
def test_the_k_and_v_rereads_of_a_fused_attention_are_charged_to_the_byte(
    buffer_bytes: int,
) -> None:
    # a fused attention is OPAQUE, a group of its own in every plan: K and V stream past each
    # Q tile (more tiles at a smaller buffer), and the bound charges every re-read; with the
    # keys' transpose its only other group, the bound is the optimum
    from fusiontune.planner.attention import fuse_attention
    from fusiontune.sim.attention import plan_flash

    graph = fuse_attention(_bare_attention())
    (attention,) = (op for op in graph.ops if op.op_type == "Attention")
    hw = HardwareConfig(buffer_bytes=buffer_bytes)
    flash = plan_flash(graph, attention, buffer_bytes, 2)
    once = 3 * 4 * 24 * 8  # q, k and v, each read once
    result = optimal_plan(graph, hw)
    assert result.proven and result.value is not None
    bound = capacity_bound(graph, hw)
    assert bound == result.value
    assert bound - lower_bound(graph, hw) >= (flash.read_elems - once) * hw.act_bytes
    if buffer_bytes < 8192:  # several Q tiles: K and V are read more than once
        assert flash.read_elems > once
