"""Analytic cost model: hand-computed traffic, energy and cycles, capacity, monotonicity.

Default hardware (ISAAC-like, ``HardwareConfig()``): 128x128 crossbars, 2-bit cells and
8-bit weights (4 columns per weight), 8-bit activations (1 byte each) fed through 1-bit DACs
(8 slices per vector), 100 ns crossbar cycle at 1 GHz (100 cycles per slice), HBM2
3.9 pJ/bit at 15,200 Gbit/s, buffer 20.45/256 pJ/bit, 128 digital lanes.
"""

from __future__ import annotations

import itertools

import pytest

from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.planner.plan import Group, Mode, Plan
from fusiontune.sim.cost import clear_cache, group_cost, lower_bound, simulate
from fusiontune.sim.hardware import HardwareConfig
from fusiontune.sim.needs import group_needs

HW = HardwareConfig()
REL = 1e-12  # float energies: only summation-order rounding


def plan_of(*groups: tuple[str, ...], mode: Mode | None = None) -> Plan:
    def m(g: tuple[str, ...]) -> Mode:
        return mode or (Mode.SINGLE if len(g) == 1 else Mode.FUSED)

    return Plan(tuple(Group(g, m(g)) for g in groups))


@pytest.fixture(scope="module")
def cpr() -> Graph:
    """x (1,4,8,8) -> Conv 3x3 4->8 pad 1, no bias -> ReLU -> MaxPool 2x2/2 -> (1,8,4,4)."""
    b = GraphBuilder("cpr")
    x = b.input("x", (1, 4, 8, 8))
    c = b.conv(x, 8, 3, bias=False, name="conv")
    r = b.relu(c, name="relu")
    b.maxpool(r, 2, name="pool")
    return b.build()


@pytest.fixture(scope="module")
def resblock() -> Graph:
    """x (1,8,8,8) -> conv_a 3x3 -> relu_a -> conv_b 3x3 -> add(x) -> relu_out."""
    b = GraphBuilder("res")
    x = b.input("x", (1, 8, 8, 8))
    a = b.conv(x, 8, 3, bias=False, name="conv_a")
    a = b.relu(a, name="relu_a")
    c = b.conv(a, 8, 3, bias=False, name="conv_b")
    s = b.add(c, x, name="add")
    b.relu(s, name="relu_out")
    return b.build()


RES_OPS = ("conv_a", "relu_a", "conv_b", "add", "relu_out")


def test_conv_relu_pool_unfused_hand_computed(cpr: Graph) -> None:
    m = simulate(cpr, plan_of(("conv",), ("relu",), ("pool",)), HW)
    # traffic: conv reads x 256 B, writes 512 B; relu 512/512; pool reads 512, writes 128
    assert (m.act_read_bytes, m.act_write_bytes) == (1280, 1152)
    assert m.traffic_bytes == 2432 and m.weight_load_bytes == 0
    assert m.lower_bound_bytes == 256 + 128
    # conv matrix: rows 4*9 = 36, cols 8 -> 32 physical columns: one crossbar; 64 vectors
    assert m.macs == 64 * 36 * 8 == 18_432
    assert m.cell_ops == 64 * 8 * 36 * 32 == 589_824
    assert m.adc_conversions == 64 * 8 * 1 * 32 == 16_384  # 1 row tile x 32 columns
    assert m.dac_drives == 64 * 8 * 36 * 1 == 18_432  # 36 rows x 1 column tile
    assert m.digital_ops == 512 + 128 * 4  # relu: 1 per element; pool: 4 per output
    # buffer (one-row schedule): the conv holds its 3x3 window's 3 rows of x (3 x 4 ch x 8 cols
    # = 96 B) and its new output row (8 ch x 8 cols = 64 B); relu 64 + 64, pool 2 x 64 + 32
    assert m.crossbars_needed == 1 and m.buffer_needed_bytes == 96 + 64
    # buffer: DMA staging 2432 + conv (64 vectors x 36 reads + 512 out) + relu 1024 + pool 640
    assert m.buffer_access_bytes == 2432 + 2304 + 512 + 1024 + 640 == 6912
    # cycles: conv 64 x 8 x 100 = 51,200; relu 512/128 = 4; pool 512/128 = 4 (memory 1 each)
    assert (m.compute_cycles, m.cycles) == (51_208, 51_208)
    assert m.memory_cycles == 1 + 1 + 1  # ceil(768*8/15200), ceil(1024*8/15200), ceil(640*8/15200)
    assert m.dram_pj == pytest.approx(2432 * 8 * 3.9, rel=REL)
    assert m.feasible and m.violations == ()


def test_conv_relu_pool_fused_hand_computed(cpr: Graph) -> None:
    m = simulate(cpr, plan_of(("conv", "relu", "pool")), HW)
    assert (m.act_read_bytes, m.act_write_bytes, m.traffic_bytes) == (256, 128, 384)
    assert m.traffic_bytes == m.lower_bound_bytes
    # peak: the conv (ReLU applied to its output rows) computes a row for the 2x2 pool, which
    # folds each row into its output row as it arrives: x's 3-row window (96 B), the new
    # relu row (64 B) and the pool's partial output row (8 ch x 4 cols = 32 B)
    assert m.buffer_needed_bytes == 96 + 64 + 32
    assert m.buffer_access_bytes == 384 + 2304 + 512 + 1024 + 640 == 4864
    assert m.cycles == 51_200  # max(51,200 crossbar, 1024/128 = 8 digital, 1 memory)
    # energy, component by component (pJ)
    assert m.dram_pj == pytest.approx(384 * 8 * 3.9, rel=REL)  # 11,980.8
    assert m.buffer_pj == pytest.approx(4864 * 8 * 20.45 / 256, rel=REL)  # 3,108.4
    assert m.cell_pj == pytest.approx(589_824 * 0.3e-3 * 100e-9 / 16384 * 1e12, rel=REL)  # 1080
    assert m.adc_pj == pytest.approx(16_384 * 1.67, rel=REL)  # 27,361.28
    assert m.dac_pj == pytest.approx(18_432 * 0.417, rel=REL)  # 7,686.144
    assert m.digital_pj == pytest.approx(16_384 * 0.021 + 1024 * 0.03, rel=REL)  # 374.784
    assert m.weight_program_pj == 0.0
    assert m.energy_pj == pytest.approx(51_591.408, rel=1e-9)


def test_weights_not_resident_are_loaded_once(cpr: Graph) -> None:
    hw = HW.replace(weights_resident=False)
    m = simulate(cpr, plan_of(("conv", "relu", "pool")), hw)
    assert m.weight_load_bytes == 8 * 4 * 9  # 288 int8 weights
    assert m.dram_read_bytes == 256 + 288 and m.dram_write_bytes == 128
    assert m.programmed_cells == 36 * 32
    assert m.weight_program_pj == pytest.approx(36 * 32 * 2.0, rel=REL)
    assert m.lower_bound_bytes == 256 + 128 + 288


def test_residual_block_unfused_and_streamed(resblock: Graph) -> None:
    un = simulate(resblock, plan_of(*[(o,) for o in RES_OPS]), HW)
    # every tensor is 512 B; the add reads two of them
    assert (un.act_read_bytes, un.act_write_bytes) == (5 * 512 + 512, 5 * 512)
    assert un.cycles == 51_200 + 4 + 51_200 + 4 + 4  # convs 64x8x100; 512 ops / 128 lanes
    streamed = Plan((Group(RES_OPS, Mode.STREAM),))
    m = simulate(resblock, streamed, HW)
    assert (m.act_read_bytes, m.act_write_bytes) == (512, 512)  # x once, the output once
    needs = group_needs(resblock, streamed.groups[0])
    # 7 rows of 64 at the add's row: x from the add's row to conv_a's next window (3 rows),
    # relu_a for conv_b's window (3 rows), and the add's new row; streamed, nothing whole
    assert needs.buffer_elems == needs.stream_elems == 7 * 64
    assert needs.whole_elems == needs.accumulator_elems == 0
    assert m.buffer_needed_bytes == 448
    assert m.crossbars_needed == 2
    # pipeline: slowest stage 51,200 + fill of conv_a: 51,200 x 3 of its 8 rows = 19,200
    assert m.compute_cycles == 51_200 + 19_200
    # two fused halves: the add's x input is read from DRAM (delay 0) vs conv_b (+2 rows)
    halves = simulate(resblock, plan_of(("conv_a", "relu_a"), ("conv_b", "add", "relu_out")), HW)
    assert (halves.act_read_bytes, halves.act_write_bytes) == (512 + 1024, 1024)
    assert halves.buffer_needed_bytes == 5 * 64  # the second half: 3 rows of relu_a + x + add
    assert halves.cycles == 2 * 51_200


def test_buffer_and_crossbar_capacity(resblock: Graph) -> None:
    streamed = Plan((Group(RES_OPS, Mode.STREAM),))
    tight = HW.replace(buffer_bytes=400)
    m = simulate(resblock, streamed, tight)
    assert not m.feasible
    assert m.violations == (
        "group [conv_a .. relu_out] (5 ops): needs 448 B on chip at its peak (streamed rows "
        "448 B, whole tensors 0 B, accumulators 0 B, reached by tensor 'relu_out'), buffer_bytes "
        "is 400",
    )
    one_xbar = HW.replace(n_crossbars=1, weights_resident=False)
    m = simulate(resblock, streamed, one_xbar)
    assert m.violations == (
        "group [conv_a .. relu_out] (5 ops): needs 2 crossbars for its stages' weights at "
        "once, n_crossbars is 1",
    )
    unfused = simulate(resblock, plan_of(*[(o,) for o in RES_OPS]), one_xbar)
    assert unfused.feasible and unfused.crossbars_needed == 1  # one matrix at a time
    resident = simulate(resblock, plan_of(*[(o,) for o in RES_OPS]), HW.replace(n_crossbars=1))
    assert resident.violations == ("plan: resident weights need 2 crossbars, n_crossbars is 1",)


def test_training_bn_holds_its_input() -> None:
    b = GraphBuilder("bn")
    x = b.input("x", (2, 4, 6, 6))
    c = b.conv(x, 4, 1, bias=False, name="conv")
    b.bn(c, training=True, name="bn")
    g = b.build()
    whole = 2 * 4 * 6 * 6  # batch statistics need the whole input before the second pass
    needs = group_needs(g, Group(("conv", "bn"), Mode.FUSED))
    assert needs.whole_elems == 2 * whole  # the conv's output and the BN's output, both whole
    alone = group_needs(g, Group(("bn",), Mode.SINGLE))
    assert alone.whole_elems == 2 * whole  # staged from DRAM whole, or produced whole: the same


def test_merge_grows_bottleneck_and_shrinks_wide_chain() -> None:
    for hidden, merged in ((4, 16 * 16), (64, 16 * 16)):
        b = GraphBuilder("fc")
        x = b.input("x", (3, 16))
        h = b.gemm(x, hidden, name="fc1")
        b.gemm(h, 16, name="fc2")
        g = b.build()
        needs = group_needs(g, Group(("fc1", "fc2"), Mode.MERGE))
        (m,) = needs.matrices
        assert (m.rows, m.cols, m.vectors, m.ops) == (16, 16, 3, ("fc1", "fc2"))
        assert m.n_weights == merged
        streamed = group_needs(g, Group(("fc1", "fc2"), Mode.STREAM))
        assert [(s.rows, s.cols) for s in streamed.matrices] == [(16, hidden), (hidden, 16)]
        hw = HW.replace(weights_resident=False)
        unmerged_bytes = 2 * 16 * hidden
        assert simulate(g, Plan((Group(("fc1", "fc2"), Mode.MERGE),)), hw).weight_load_bytes == 256
        # compulsory bound: activations 3x16 in + 3x16 out, plus the cheaper weight split
        assert lower_bound(g, hw) == 48 + 48 + min(256, unmerged_bytes)


def test_bn_folds_into_conv_weights() -> None:
    b = GraphBuilder("cbr")
    x = b.input("x", (1, 4, 8, 8))
    c = b.conv(x, 8, 3, bias=False, name="conv")
    n = b.bn(c, name="bn")
    b.relu(n, name="relu")
    g = b.build()
    fused = group_cost(g, Group(("conv", "bn", "relu"), Mode.FUSED), HW)
    alone = group_cost(g, Group(("bn",), Mode.SINGLE), HW)
    assert fused.digital_ops == 512  # relu only: the BN is folded into the conv weights
    assert alone.digital_ops == 512


def contiguous_plans(ops: tuple[str, ...]) -> list[Plan]:
    """Every split of the op sequence into contiguous groups (2^(n-1) plans)."""
    plans = []
    for cuts in itertools.product((False, True), repeat=len(ops) - 1):
        groups, cur = [], [ops[0]]
        for op, cut in zip(ops[1:], cuts):
            if cut:
                groups.append(tuple(cur))
                cur = []
            cur.append(op)
        groups.append(tuple(cur))
        plans.append(plan_of(*groups, mode=None))
    return plans


def _mode(g: tuple[str, ...]) -> Mode:
    n_linear = sum(op.startswith("conv") for op in g)
    return Mode.SINGLE if len(g) == 1 else Mode.STREAM if n_linear > 1 else Mode.FUSED


def test_fusing_an_edge_never_increases_traffic(resblock: Graph) -> None:
    plans = contiguous_plans(RES_OPS)
    assert len(plans) == 16
    checked = 0
    for plan in plans:
        plan = Plan(tuple(Group(g.ops, _mode(g.ops)) for g in plan.groups))
        before = simulate(resblock, plan, HW)
        assert before.act_traffic_bytes >= before.lower_bound_bytes
        for i in range(len(plan.groups) - 1):
            ops = plan.groups[i].ops + plan.groups[i + 1].ops
            joined = (*plan.groups[:i], Group(ops, _mode(ops)), *plan.groups[i + 2 :])
            after = simulate(resblock, Plan(joined), HW)
            assert after.act_traffic_bytes <= before.act_traffic_bytes
            checked += 1
    assert checked == sum(len(p.groups) - 1 for p in plans) == 32


def test_more_buffer_never_makes_a_feasible_plan_infeasible(resblock: Graph) -> None:
    sizes = (1, 160, 256, 320, 448, 512, 4096)
    feasible_counts = []
    for plan in contiguous_plans(RES_OPS):
        plan = Plan(tuple(Group(g.ops, _mode(g.ops)) for g in plan.groups))
        flags = [simulate(resblock, plan, HW.replace(buffer_bytes=s)).feasible for s in sizes]
        first = flags.index(True)
        assert all(flags[first:]), (plan.to_json(), flags)
        feasible_counts.append(sum(flags))
    # no plan fits 1 B; at 160 B only the unfused plan does: a 3x3 conv holds 3 rows of x and
    # its output row (256 B) by rows, a singleton runs tiled (3 x 8 x 3 + 8 = 80 B a column)
    assert min(feasible_counts) < max(feasible_counts) == len(sizes) - 1
    assert feasible_counts.count(len(sizes) - 1) == 1


def test_totals_are_sums_of_groups_and_cache_is_consistent(resblock: Graph) -> None:
    plan = plan_of(("conv_a", "relu_a"), ("conv_b", "add", "relu_out"))
    clear_cache()
    cold = simulate(resblock, plan, HW)
    warm = simulate(resblock, plan, HW)
    assert cold.as_dict() == warm.as_dict()
    assert warm.groups[0] is group_cost(resblock, plan.groups[0], HW)  # served from the cache
    for name in ("traffic_bytes", "cycles", "macs", "adc_conversions", "buffer_access_bytes"):
        assert getattr(cold, name) == sum(getattr(g, name) for g in cold.groups)
    parts = ("dram_pj", "buffer_pj", "cell_pj", "adc_pj", "dac_pj", "digital_pj")
    assert cold.energy_pj == pytest.approx(sum(getattr(cold, p) for p in parts), rel=REL)
    row = cold.as_dict()
    assert row["n_groups"] == 2 and row["violations"] == "" and "groups" not in row
    assert cold.group_rows()[1]["ops"] == "conv_b+add+relu_out"


def test_cli_simulate_json_and_text(tmp_path, capsys) -> None:
    """`fusiontune simulate` on the zoo's lenet5: JSON totals agree with simulate()."""
    import json

    from fusiontune.cli.main import main
    from fusiontune.frontend.loader import load_model
    from fusiontune.planner.baselines import unfused_plan

    assert main(["simulate", "lenet5", "--plan", "unfused", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    graph = load_model("lenet5")
    want = simulate(graph, unfused_plan(graph), HW)
    assert report["totals"]["traffic_bytes"] == want.traffic_bytes
    assert len(report["groups"]) == want.n_groups == len(graph.ops)
    assert report["savings_vs_unfused_pct"]["traffic_bytes"] == 0.0
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(unfused_plan(graph).to_json())
    assert main(["simulate", "lenet5", "--plan", str(plan_file), "--hw", "sram_edge"]) == 0
    text = capsys.readouterr().out
    from fusiontune.sim.hardware import load_hardware

    edge = simulate(graph, unfused_plan(graph), load_hardware("sram_edge"))
    assert edge.weight_load_bytes > 0  # sram_edge programs its weights from DRAM
    assert "hardware sram_edge" in text and f"weights {edge.weight_load_bytes:,} B" in text
    assert sum(line.split()[1:2] == ["single"] for line in text.splitlines()) == len(graph.ops)
    assert main(["simulate", "lenet5", "--hw", "nope"]) == 2
    assert "hardware preset 'nope' not found" in capsys.readouterr().err


def test_unused_optional_outputs_cost_nothing() -> None:
    b = GraphBuilder("pool_indices")
    x = b.input("x", (1, 4, 4, 4))
    attrs = {"kernel_shape": (2, 2), "strides": (2, 2)}
    y = b.op("MaxPool", [x], attrs, name="pool", n_outputs=2)  # Indices output never read
    b.relu(y, name="relu")
    g = b.build()
    m = simulate(g, plan_of(("pool",), ("relu",)), HW)
    # pool reads x (64 B) and writes 16 B; relu reads 16 B, writes 16 B; indices: nothing
    assert (m.act_read_bytes, m.act_write_bytes) == (64 + 16, 16 + 16)


@pytest.mark.parametrize("model", ["lenet5", "mlp_relu", "mlp_bottleneck", "mlp_wide"])
def test_every_legal_plan_lies_between_bound_and_unfused(model: str) -> None:
    """All legal plans of small zoo models: lower bound <= traffic, and activation traffic
    <= unfused. (Total traffic may exceed unfused: merging a bottleneck 1024->64->1024
    programs a 1024x1024 matrix instead of two 64x1024 ones when weights are loaded.)"""
    from fusiontune.frontend.loader import load_model
    from fusiontune.planner.baselines import unfused_plan
    from fusiontune.planner.enumerate import count_plans, enumerate_plans

    graph = load_model(model)
    for hw in (HW, HW.replace(weights_resident=False)):
        worst = simulate(graph, unfused_plan(graph), hw).act_traffic_bytes
        seen = 0
        for plan in enumerate_plans(graph):
            m = simulate(graph, plan, hw)
            assert m.lower_bound_bytes <= m.traffic_bytes, plan.to_json()
            assert m.act_traffic_bytes <= worst, plan.to_json()
            seen += 1
        assert seen == count_plans(graph)
