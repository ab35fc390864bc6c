"""Many-core chips (docs/cores.md): placement, network bytes, per-core buffers, replication."""

from __future__ import annotations

import dataclasses
import itertools
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import conv_chain, dag_graphs

from fusiontune.errors import ConfigError
from fusiontune.frontend.zoo import build_zoo
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.planner.baselines import random_plan, unfused_plan
from fusiontune.planner.plan import Group, Mode, Plan, PlannerConfig
from fusiontune.sim.cost import group_cost, simulate
from fusiontune.sim.greedy import greedy_plan
from fusiontune.sim.hardware import HardwareConfig, load_hardware
from fusiontune.sim.placement import (
    BUS,
    core_aligned,
    group_on_cores,
    hops,
    link_bytes,
    place_group,
    place_plan,
    route,
    router_xy,
    spread_crossbars,
)
from fusiontune.sim.replication import (
    Stage,
    balance_replication,
    exact_replication,
    images_per_s,
    plan_stages,
    uniform_replication,
)

V = 16  # vectors of a 4 x 4 feature map


def _chip(cores: int, **kw: object) -> HardwareConfig:
    """``cores`` cores of one 128 x 128 crossbar each (8-bit weights in 2-bit cells)."""
    return HardwareConfig(n_crossbars=cores, buffer_bytes=cores * 65536, cores=cores, **kw)


def test_two_stage_chain_on_a_2x2_mesh_hand_computed() -> None:
    graph, hw = conv_chain(), _chip(4, mesh_width=2)
    plan = Plan((Group(("conv1", "conv2"), Mode.STREAM),))
    placed = place_plan(graph, plan, hw)
    (group,) = placed.groups
    conv1, conv2 = group.stages
    # conv1: 64 columns x 4 slices = 256 physical columns -> tiles on cores 0 and 1; conv2: core 2
    assert (conv1.cores, conv1.home, conv2.cores, conv2.home) == ((0, 1), 0, (2,), 2)
    # snake: core 0 at (0,0), 1 at (1,0), 2 at (1,1), 3 at (0,1)
    assert [hops(hw, 0, c) for c in range(4)] == [0, 1, 2, 1]
    scatter = 128 * V  # conv1's input rows to core 1, 1 hop
    gather = 32 * V  # conv1's column tile 1 back to its home, 1 hop
    forward = 64 * V  # conv1's output, core 0 -> conv2 on core 2, 2 hops
    assert placed.noc_bytes == scatter + gather + forward == 3584
    assert placed.noc_byte_hops == scatter + gather + 2 * forward == 4608
    assert placed.noc_energy_pj == pytest.approx(4608 * 8 * hw.noc_pj_per_bit_hop)
    assert placed.core_crossbars_used == (1, 1, 1, 0)
    m = simulate(graph, plan, hw)
    assert (m.noc_bytes, m.noc_byte_hops) == (3584, 4608)
    ratio = hw.noc_pj_per_bit_hop / hw.dram_pj_per_bit
    assert m.movement_bytes == pytest.approx(m.traffic_bytes + 4608 * ratio)


def test_row_split_matrix_sends_partial_sums() -> None:
    """1x1 conv 256->32: two row tiles on two cores; partial sums at 2 x 8 bits."""
    b = GraphBuilder("rows")
    b.conv(b.input("x", (1, 256, 4, 4)), 32, 1, bias=False, name="conv")
    graph = b.build()
    plan = Plan((Group(("conv",), Mode.SINGLE),))
    for topology in ("mesh", "bus"):
        placed = place_plan(graph, plan, _chip(2, topology=topology))
        scatter, psums = 128 * V, 32 * V * 2
        assert (placed.noc_bytes, placed.noc_byte_hops) == (scatter + psums, scatter + psums)


def test_cmesh_cores_under_one_router_are_zero_hops_apart() -> None:
    hw = _chip(8, topology="cmesh", concentration=4)  # 2 routers
    assert hw.mesh_shape == (2, 1)
    assert [hops(hw, 0, c) for c in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_one_core_chip_is_the_flat_model(name: str) -> None:
    graph = build_zoo(name)
    flat = load_hardware("isaac_reram_flat")
    assert flat.cores == 1 and HardwareConfig(cores=1).hash == HardwareConfig().hash
    for plan in (unfused_plan(graph), greedy_plan(graph, PlannerConfig(), flat)):
        m = simulate(graph, plan, flat)
        assert (m.noc_bytes, m.noc_byte_hops, m.noc_energy_pj) == (0, 0, 0.0)
        assert m.core_peak_buffer_bytes == () and m.movement_bytes == m.traffic_bytes
        placed = place_plan(graph, plan, flat)
        assert (placed.noc_bytes, placed.noc_byte_hops) == (0, 0)
        assert placed.core_peak_buffer_bytes == (m.buffer_needed_bytes,)
        # the DRAM model is the same on the 168-core chip (same totals)
        many = simulate(graph, plan, load_hardware("isaac_168"))
        assert (many.traffic_bytes, many.energy_pj, many.cycles) == (
            m.traffic_bytes,
            m.energy_pj,
            m.cycles,
        )
        assert many.noc_bytes > 0


def test_resnet18_per_core_buffers_on_isaac_168() -> None:
    graph, hw = build_zoo("resnet18"), load_hardware("isaac_168")
    assert (hw.cores, hw.core_crossbars, hw.core_buffer_bytes) == (168, 96, 64 * 1024)
    unfused = unfused_plan(graph)
    placed = place_plan(graph, unfused, hw)
    over = set()
    for pg in placed.groups:  # a singleton's whole peak sits on its op's core; the other
        (op,) = pg.ops  # cores of a convolution keep line buffers of the channels they read
        needed = group_cost(graph, Group(pg.ops, Mode.SINGLE), hw).buffer_needed_bytes
        assert pg.core_buffer_bytes[pg.home[op]] == needed
        others = [b for c, b in pg.core_buffer_bytes.items() if c != pg.home[op]]
        assert all(0 < b < needed for b in others)
        if max([needed, *others]) > hw.core_buffer_bytes:
            over.add(pg.ops)
    flagged = {tuple(v.split("[")[1].split("]")[0].split(" .. ")) for v in placed.violations}
    assert flagged == over
    # greedy fuses all of resnet18 into one group: packed densely, core 0 (stem and layer1)
    # overflows (the default ``spread`` placement fits: the test below)
    greedy = greedy_plan(graph, PlannerConfig(), hw)
    gp = place_plan(graph, greedy, hw, policy="dense")
    (pg,) = gp.groups
    assert sum(pg.core_buffer_bytes.values()) >= simulate(graph, greedy, hw).buffer_needed_bytes
    assert [c for c, b in pg.core_buffer_bytes.items() if b > hw.core_buffer_bytes] == [0]
    assert any("core 0 holds" in v for v in gp.violations)
    metrics = simulate(graph, greedy, hw)  # simulate places with the default (spread)
    assert metrics.feasible and max(metrics.core_peak_buffer_bytes) <= hw.core_buffer_bytes


# ---- replication ------------------------------------------------------------------------
def _milp(c: list[int], x: list[int], budget: int) -> float:
    """Least bottleneck by scipy's milp (HiGHS): z[i][k] = 1 iff stage i has k copies."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    n = len(c)
    ks = [list(range(1, budget // x[i] + 1)) for i in range(n)]
    cols = [(i, k) for i in range(n) for k in ks[i]]
    nz = len(cols)  # variables: z..., then T
    obj = np.zeros(nz + 1)
    obj[-1] = 1.0
    rows, lo, hi = [], [], []
    for i in range(n):
        one = np.zeros(nz + 1)
        slow = np.zeros(nz + 1)
        for col, (j, k) in enumerate(cols):
            if j == i:
                one[col] = 1.0
                slow[col] = c[i] / k
        slow[-1] = -1.0
        rows += [one, slow]
        lo += [1.0, -np.inf]
        hi += [1.0, 0.0]
    cap = np.array([k * x[j] for j, k in cols] + [0.0])
    rows.append(cap)
    lo.append(-np.inf)
    hi.append(float(budget))
    integrality = np.array([1] * nz + [0])
    bounds = Bounds(np.zeros(nz + 1), np.array([1.0] * nz + [np.inf]))
    res = milp(obj, constraints=LinearConstraint(np.array(rows), lo, hi),
               integrality=integrality, bounds=bounds)  # fmt: skip
    assert res.success
    return float(res.fun)


def _brute(c: list[int], x: list[int], budget: int) -> float:
    ranges = [range(1, budget // xi + 1) for xi in x]
    return min(
        max(ci / ri for ci, ri in zip(c, r))
        for r in itertools.product(*ranges)
        if sum(ri * xi for ri, xi in zip(r, x)) <= budget
    )


@pytest.mark.parametrize("seed", range(12))
def test_exact_replication_matches_milp_and_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 4)
    c = [rng.randint(1, 400) for _ in range(n)]
    x = [rng.randint(1, 5) for _ in range(n)]
    budget = sum(x) + rng.randint(0, 14)
    stages = [Stage(f"s{i}", 0, c[i], x[i], c[i], False) for i in range(n)]
    rep = exact_replication(stages, budget)
    assert rep.proven and rep.feasible
    assert rep.bottleneck_cycles == pytest.approx(_brute(c, x, budget), rel=1e-12)
    assert rep.bottleneck_cycles == pytest.approx(_milp(c, x, budget), rel=1e-7)


def test_exact_replication_beats_pimcomp_baselines_on_resnet18() -> None:
    graph, hw = build_zoo("resnet18"), load_hardware("isaac_168")
    stages = plan_stages(graph, unfused_plan(graph), hw)
    exact = exact_replication(stages, hw.n_crossbars)
    balance = balance_replication(stages, hw.n_crossbars)
    uniform = uniform_replication(stages, hw.n_crossbars)
    for rep in (exact, balance, uniform):
        assert rep.feasible and all(r >= 1 for r in rep.copies)
    assert exact.bottleneck_cycles <= min(balance.bottleneck_cycles, uniform.bottleneck_cycles)
    assert images_per_s(exact, hw) >= images_per_s(balance, hw)
    # PIMCOMP never copies FC layers; balance stops at half of the crossbars left
    assert all(r == 1 for s, r in zip(stages, balance.copies) if s.fc)
    fc = sum(s.crossbars for s in stages if s.fc)
    assert balance.crossbars - sum(s.crossbars for s in stages) <= (hw.n_crossbars - fc) / 2 + max(
        s.crossbars for s in stages
    )
    placed = place_plan(graph, unfused_plan(graph), hw, exact.as_map(stages))
    assert sum(placed.core_crossbars_used) == exact.crossbars <= hw.n_crossbars


# ---- bad input ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "key", "allowed"),
    [
        ({"cores": 168, "topology": "torus"}, "topology", "mesh, cmesh, bus"),
        ({"cores": 168, "topology": "cmesh", "concentration": 5}, "concentration", "cores"),
        ({"cores": 168, "topology": "cmesh", "concentration": 4, "mesh_width": 5}, "mesh_width",
         "width x height x concentration = cores"),
        ({"cores": 168, "concentration": 4}, "concentration", "cmesh"),
        ({"cores": 5}, "cores", "divide"),
        ({"cores": 4, "topology": "bus", "mesh_width": 2}, "topology", "mesh_width 0"),
    ],
)  # fmt: skip
def test_bad_chip_names_the_key(overrides: dict[str, object], key: str, allowed: str) -> None:
    with pytest.raises(ConfigError, match=f"overrides: key '{key}'") as err:
        load_hardware("isaac_reram_flat", overrides)
    assert allowed in str(err.value)


def test_more_crossbars_than_the_chip_is_a_violation() -> None:
    graph = conv_chain()  # 3 crossbars on a 2-core chip of 1 crossbar each
    plan = Plan((Group(("conv1", "conv2"), Mode.STREAM),))
    placed = place_plan(graph, plan, _chip(2))
    assert not placed.feasible
    assert "need 3 crossbars, the chip has 2 (2 cores x 1)" in placed.violations[-1]


def test_chip_keys_are_hashed_only_when_set() -> None:
    flat, many = load_hardware("isaac_reram_flat"), load_hardware("isaac_reram")
    assert many.hash != flat.hash
    assert many.replace(cores=1, topology="mesh", concentration=1, mesh_width=0).hash == flat.hash
    row = simulate(conv_chain(), unfused_plan(conv_chain()), flat).as_dict()
    assert row["noc_bytes"] == 0 and row["movement_bytes"] == row["traffic_bytes"]


@pytest.mark.parametrize(
    ("cores", "chip"),
    [(2, {}), (4, {"topology": "bus"}), (6, {"mesh_width": 3}), (8, {"topology": "cmesh",
     "concentration": 2})],
)  # fmt: skip
def test_placement_invariants_on_small_chips(cores: int, chip: dict[str, object]) -> None:
    graph = build_zoo("resnet18", input_size=32)
    flat = HardwareConfig()
    hw = flat.replace(cores=cores, n_crossbars=cores * 2048, buffer_bytes=cores * 2**20, **chip)
    for plan in (unfused_plan(graph), greedy_plan(graph, PlannerConfig(), flat)):
        placed = place_plan(graph, plan, hw)
        m = simulate(graph, plan, flat)
        assert placed.feasible and sum(placed.core_crossbars_used) == m.crossbars_needed
        assert sum(g.noc_bytes for g in placed.groups) == placed.noc_bytes > 0
        if hw.topology == "bus":
            assert placed.noc_byte_hops == placed.noc_bytes  # one hop between any two cores
        elif hw.concentration == 1:
            assert placed.noc_byte_hops >= placed.noc_bytes  # distinct cores: >= 1 hop
        by_ops = {g.ops: g for g in plan.groups}
        for pg in placed.groups:  # the cores' charges together cover the group's peak
            needed = group_cost(graph, by_ops[pg.ops], hw).buffer_needed_bytes
            assert sum(pg.core_buffer_bytes.values()) >= needed


def test_exact_replication_respects_copy_caps() -> None:
    rng = random.Random(7)
    for _ in range(20):
        n = rng.randint(1, 3)
        c = [rng.randint(1, 300) for _ in range(n)]
        x = [rng.randint(1, 4) for _ in range(n)]
        caps = [rng.randint(1, 4) for _ in range(n)]
        budget = sum(x) + rng.randint(0, 12)
        stages = [Stage(f"s{i}", 0, c[i], x[i], c[i], False) for i in range(n)]
        rep = exact_replication(stages, budget, caps)
        best = min(
            max(ci / ri for ci, ri in zip(c, r))
            for r in itertools.product(*(range(1, u + 1) for u in caps))
            if sum(ri * xi for ri, xi in zip(r, x)) <= budget
        )
        assert rep.bottleneck_cycles == pytest.approx(best, rel=1e-12)
        assert all(1 <= r <= u for r, u in zip(rep.copies, caps)) and rep.feasible


def test_spread_placement_fits_resnet18_on_isaac_168() -> None:
    """``spread`` starts each stage on a fresh core: the one-group greedy plan that overflows
    core 0 under ``dense`` packing has no core above 64 KB (and the same crossbars)."""
    graph, hw = build_zoo("resnet18"), load_hardware("isaac_168")
    greedy = greedy_plan(graph, PlannerConfig(), hw)
    dense = place_plan(graph, greedy, hw, policy="dense")
    spread = place_plan(graph, greedy, hw)
    assert dense.violations and not spread.violations
    assert max(spread.core_peak_buffer_bytes) <= hw.core_buffer_bytes
    assert sum(spread.core_crossbars_used) == sum(dense.core_crossbars_used)
    assert max(spread.core_crossbars_used) <= hw.core_crossbars
    (pg,) = spread.groups
    for stage in pg.stages:  # every stage starts on a core boundary
        assert stage.first_crossbar % hw.core_crossbars == 0
        assert stage.home == stage.first_crossbar // hw.core_crossbars
    # every byte the group model holds is charged to some core (a tensor read on two cores
    # is held by both)
    assert sum(pg.core_buffer_bytes.values()) >= simulate(graph, greedy, hw).buffer_needed_bytes


def test_spread_on_one_core_is_dense_and_bad_policy_names_it() -> None:
    graph, hw = conv_chain(), HardwareConfig()
    plan = greedy_plan(graph, PlannerConfig(), hw)
    assert place_plan(graph, plan, hw, policy="dense") == place_plan(graph, plan, hw)
    with pytest.raises(ConfigError, match="policy 'tight' is not one of dense, spread"):
        place_plan(graph, plan, hw, policy="tight")


# ---- NoC link bandwidth in cycles -----------------------------------------------------------
def test_noc_bound_group_takes_its_busiest_links_cycles() -> None:
    """The two-conv chain on a 2 x 2 mesh (cores 0, 1 on routers (0, 0), (1, 0); core 2 on
    (1, 1)) with fast crossbars: the link (0, 0) -> (1, 0) carries conv1's row scatter to
    core 1 (128 x 16 B) and conv1's output on its XY way to conv2 on core 2 (64 x 16 B):
    3,072 B. At 32 B per cycle the network (96 cycles) hides under the compute (160); at 4
    and 1 B per cycle it is the bottleneck and the group takes 768 and 3,072 cycles. On one
    core nothing changes."""
    b = GraphBuilder("chain")
    x = b.input("x", (1, 128, 4, 4))
    a = b.conv(x, 64, 1, bias=False, name="conv1")
    b.conv(a, 32, 1, bias=False, name="conv2")
    graph = b.build()
    plan = Plan((Group(("conv1", "conv2"), Mode.STREAM),))
    fast = {"crossbar_cycle_ns": 1.0, "cols_per_adc": 1, "n_crossbars": 4, "buffer_bytes": 1 << 18}
    got = {}
    for bw in (32, 4, 1):
        hw = HardwareConfig(cores=4, mesh_width=2, noc_link_bytes_per_cycle=bw, **fast)
        (pg,) = place_plan(graph, plan, hw).groups
        assert pg.noc_max_link_bytes == 3072
        m = simulate(graph, plan, hw)
        assert m.groups[0].cycles == 160  # the group model's max(compute, memory)
        got[bw] = (m.noc_cycles, m.cycles)
        flat = simulate(graph, plan, HardwareConfig(noc_link_bytes_per_cycle=bw, **fast))
        assert (flat.noc_cycles, flat.cycles) == (0, 160)
    assert got == {32: (96, 160), 4: (768, 768), 1: (3072, 3072)}
    serial = HardwareConfig(cores=4, mesh_width=2, noc_link_bytes_per_cycle=4,
                            overlap_memory_compute=False, **fast)  # fmt: skip
    assert (
        simulate(graph, plan, serial).cycles
        == simulate(graph, plan, dataclasses.replace(serial, cores=1, mesh_width=0)).cycles + 768
    )


def test_xy_routes_and_the_bus() -> None:
    """Dimension-order routes follow x first, then y, one link per hop; a bus is one link."""
    hw = HardwareConfig(n_crossbars=8, buffer_bytes=8 << 16, cores=8, mesh_width=4)
    for a in range(8):
        for c in range(8):
            path = route(hw, a, c)
            assert len(path) == hops(hw, a, c)
            if path:
                assert path[0][0] == router_xy(hw, a) and path[-1][1] == router_xy(hw, c)
                ys = [link[0][1] for link in path]
                assert ys == sorted(ys) or ys == sorted(ys, reverse=True)
    bus = dataclasses.replace(hw, topology="bus", mesh_width=0)
    assert link_bytes(bus, {(0, 5): 10, (3, 1): 7}) == {BUS: 17}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dag_graphs(max_ops=7),
    st.integers(0, 2**16),
    st.sampled_from((16, 32, 64, 128, 1024)),  # per core: about a third of the groups overflow
    st.integers(0, 8 * 64 - 1),
)
def test_a_groups_verdict_on_fresh_cores_is_its_verdict_in_every_plan(
    graph: Graph, seed: int, core_buffer: int, start: int
) -> None:
    """``group_on_cores`` (what the optimizer and the greedy baseline judge a group by on a
    many-core chip) equals the group's verdict where ``place_plan`` puts it, and where
    ``place_group`` puts it from any crossbar: the charges are the same multiset of core
    peaks moved by whole cores (spread packing), and the whole-tensor shortcut never
    accepts a group the replay refuses."""
    hw = HardwareConfig(cores=8, n_crossbars=8 * 64, buffer_bytes=8 * core_buffer,
                        mesh_width=4, crossbar_rows=16, crossbar_cols=16)  # fmt: skip
    plan = random_plan(graph, np.random.default_rng(seed))
    fits = {g.ops: group_on_cores(graph, g, hw) for g in plan.groups}
    placed = place_plan(graph, plan, hw)
    spread = spread_crossbars(graph, plan, hw) <= hw.n_crossbars
    for group in plan.groups:
        fresh = place_group(graph, group, hw, 0)
        assert bool(fits[group.ops].violations) == bool(fresh.violations) or (
            fits[group.ops].crossbars > hw.n_crossbars
        )
        moved = place_group(graph, group, hw, start)
        if core_aligned(start, hw) + fits[group.ops].crossbars <= hw.n_crossbars:
            assert sorted(moved.core_buffer_bytes.values()) == sorted(
                fresh.core_buffer_bytes.values()
            )
    if spread:
        for pg in placed.groups:
            assert bool(pg.violations) == bool(fits[pg.ops].violations)
