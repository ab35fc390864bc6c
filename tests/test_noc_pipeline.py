"""NoC time in the batch pipeline (``docs/cores.md``, "NoC in the batch pipeline").

Each LINEAR stage's time is ``max(c_i / r_i, n_i(r_i))`` with ``n_i`` its own transfers'
busiest port; the pipeline also waits for the busiest link; ``exact_replication`` minimises the
slowest stage time exactly, whatever ``n_i`` does as the copies grow.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from typing import Any

import pytest

from fusiontune.frontend.zoo import build_zoo
from fusiontune.planner.baselines import unfused_plan
from fusiontune.planner.plan import PlannerConfig
from fusiontune.sim.greedy import greedy_plan
from fusiontune.sim.hardware import load_hardware
from fusiontune.sim.needs import group_needs
from fusiontune.sim.placement import place_plan, stage_port_bytes, stage_port_floor
from fusiontune.sim.replication import (
    STRATEGIES,
    Stage,
    _result,
    exact_replication,
    plan_stages,
    simulate_replicated,
    stage_noc,
    throughput_of,
)


def _brute(
    c: Sequence[int], x: Sequence[int], budget: int, noc: Any
) -> tuple[float, tuple[int, ...]]:
    """The least slowest stage time over every replication within the budget."""
    best: tuple[float, tuple[int, ...]] = (float("inf"), ())
    ranges = [range(1, budget // xi + 1) for xi in x]
    for r in itertools.product(*ranges):
        if sum(ri * xi for ri, xi in zip(r, x)) <= budget:
            t = max(max(ci / ri, noc(i, ri)) for i, (ci, ri) in enumerate(zip(c, r)))
            if t < best[0]:
                best = (t, r)
    return best


@pytest.mark.parametrize("seed", range(16))
def test_exact_with_noc_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 4)
    c = [rng.randint(1, 400) for _ in range(n)]
    x = [rng.randint(1, 4) for _ in range(n)]
    budget = sum(x) + rng.randint(0, 12)
    table = {(i, r): float(rng.randint(0, 300)) for i in range(n) for r in range(1, budget + 1)}

    def noc(i: int, r: int) -> float:  # any shape: rising, falling, jagged
        return table[i, r]

    def floor(i: int, r: int) -> float:  # non-decreasing, at most noc: min over r' >= r
        return min(table[i, k] for k in range(r, budget + 1))

    stages = [Stage(f"s{i}", 0, c[i], x[i], c[i], False) for i in range(n)]
    want, _ = _brute(c, x, budget, noc)
    for fl in (None, floor):
        rep = exact_replication(stages, budget, noc=noc, noc_floor=fl)
        assert rep.proven and rep.feasible
        assert rep.bottleneck_cycles == want
        assert rep.bottleneck_cycles == max(
            max(ci / r, noc(i, r)) for i, (ci, r) in enumerate(zip(c, rep.copies))
        )


def test_a_binding_network_changes_the_exact_choice() -> None:
    """Two equal stages, 6 crossbars: blind, 3 + 3 copies (33.3 cycles); stage 0's network
    time grows 20 cycles a copy, so it takes 2 copies (50) and stage 1 the rest."""
    stages = [Stage("a", 0, 100, 1, 100, False), Stage("b", 0, 100, 1, 100, False)]

    def noc(i: int, r: int) -> float:
        return 20.0 * r if i == 0 else 0.0

    blind = exact_replication(stages, 6)
    aware = exact_replication(stages, 6, noc=noc)
    assert blind.copies == (3, 3)
    assert aware.copies[0] == 2 and aware.bottleneck_cycles == 50.0
    assert aware.noc_bound_stages == 0  # 2 copies: compute 50 >= network 40
    want, _ = _brute([100, 100], [1, 1], 6, noc)
    assert aware.bottleneck_cycles == want
    assert blind.copies != aware.copies
    # the blind copies priced with the network are slower: stage 0's 3 copies need 60
    priced = _result("exact", stages, blind.copies, 6, False, noc)
    assert priced.bottleneck_cycles == 60.0 > aware.bottleneck_cycles
    assert priced.noc_bound_stages == 1


@pytest.fixture(scope="module")
def resnet18() -> Any:
    return build_zoo("resnet18", input_size=32)


@pytest.mark.parametrize("chip", ["isaac_168", "puma_138"])
def test_network_never_speeds_up_the_same_copies(resnet18: Any, chip: str) -> None:
    hw = load_hardware(chip)
    for plan in (unfused_plan(resnet18), greedy_plan(resnet18, PlannerConfig(), hw)):
        for strategy in STRATEGIES:  # fixed copies (balance, uniform, none) or the blind optimum
            metrics, blind = simulate_replicated(resnet18, plan, hw, strategy, noc=False)
            _, aware = simulate_replicated(resnet18, plan, hw, strategy, noc=True)
            stages = plan_stages(resnet18, plan, hw)
            net = stage_noc(resnet18, plan, hw, stages)
            copies = blind.replication.copies
            placed = place_plan(resnet18, plan, hw, blind.copies())
            link = placed.max_link_bytes / hw.noc_link_bytes_per_cycle
            ports = max(placed.core_port_bytes, default=0)
            rep = _result(strategy, stages, copies, hw.n_crossbars, False, net)
            priced = throughput_of(stages, rep, hw, metrics.traffic_bytes, ports, link)
            assert priced.pipeline_cycles >= blind.pipeline_cycles  # the same copies
            assert priced.images_per_s <= blind.images_per_s
            if strategy != "exact":  # same copies either way
                assert aware.replication.copies == copies
                assert aware.pipeline_cycles == priced.pipeline_cycles
            else:  # exact: never slower than the blind copies priced with the network
                assert aware.pipeline_cycles <= priced.pipeline_cycles
            assert aware.pipeline_cycles >= aware.link_cycles > 0
            for i, s in enumerate(aware.stages):  # stage times hold their network time
                r = aware.replication.copies[i]
                assert aware.replication.stage_noc_cycles[i] == net(i, r)
                assert aware.replication.bottleneck_cycles >= max(s.cycles / r, net(i, r))


@pytest.mark.parametrize("chip", ["isaac_168", "puma_138"])
def test_port_floor_is_a_rising_lower_bound(resnet18: Any, chip: str) -> None:
    hw = load_hardware(chip)
    plan = unfused_plan(resnet18)
    for group in plan.groups[:12]:
        for m in group_needs(resnet18, group).matrices:
            floors = [stage_port_floor(m, hw, r) for r in range(1, 9)]
            assert floors == sorted(floors)
            for r, f in enumerate(floors, start=1):
                if r * matrix_xb(m, hw) <= hw.n_crossbars:
                    assert f <= stage_port_bytes(resnet18, group, hw, m.ops[0], r)


def matrix_xb(m: Any, hw: Any) -> int:
    from fusiontune.sim.placement import matrix_crossbars

    return matrix_crossbars(m, hw)
