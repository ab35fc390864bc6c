"""Weight replication of LINEAR stages under a crossbar budget (``docs/cores.md``).

A stage ``i`` (one LINEAR op, or a merged chain) takes ``c_i`` cycles on ``x_i`` crossbars; with
``r_i`` copies of its weights each copy computes ``1 / r_i`` of its matrix-vector products, so it
takes ``c_i / r_i`` cycles on ``r_i x_i`` crossbars. Two pipeline modes:

- **throughput** (batch pipeline, PIMCOMP-NN's "batch pipeline"): every stage works on a
  different image, images/s = 1 / (slowest stage time) — :func:`images_per_s`;
- **latency** (element pipeline): the plan's groups run one after the other, each at the pace of
  its slowest stage (pipeline fill left out, so a lower bound) — :func:`latency_cycles`.

Strategies: :func:`exact_replication` (the least bottleneck, proven), and PIMCOMP-NN's
``balance`` and ``uniform`` (``backend/WeightReplication.cpp``) as baselines. Non-crossbar ops
(digital units) are not stages here: their time overlaps the crossbars' in the pipeline.

A search trial (``fusiontune.search.backends.evaluate_one``) replicates its plan by the search
space's ``replication`` strategy (:func:`plan_replication`), places the copies (``simulate``
with ``replication``) and records :meth:`PlanThroughput.as_dict`; throughput mode also waits
for the plan's DRAM bytes at the DRAM bandwidth and for the busiest core's network port
(:func:`throughput_of`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fusiontune.ops.registry import kernel_shape
from fusiontune.sim.hardware import BITS_PER_BYTE, HardwareConfig
from fusiontune.sim.needs import group_needs
from fusiontune.sim.placement import matrix_crossbars

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph
    from fusiontune.planner.plan import Plan
    from fusiontune.sim.cost import Metrics

NS_PER_S = 1e9
BALANCE_MARGIN = 0.5
"""PIMCOMP-NN ``ReplicationByBalance``: replication stops once half the crossbars left after
the FC layers are spent (``margin_factor = 0.5``)."""
UNIFORM_MARGIN = 1.2
"""PIMCOMP-NN ``ReplicateUniformly``: the common factor is floored after dividing by 1.2."""


@dataclass(frozen=True)
class Stage:
    """One LINEAR stage of a plan.

    Attributes:
        name: its (first) op.
        group: index of its group in the plan.
        cycles: clock cycles of one copy (``vectors x input_slices x slice_cycles``, the group
            model's stage cycles).
        crossbars: crossbars of one copy.
        windows: matrix-vector products (PIMCOMP's sliding windows, its balance key).
        fc: a fully connected layer (a LINEAR op with no kernel window: PIMCOMP-NN's `OP_FC`,
            which it never replicates; every convolution, 1x1 included, is its `OP_CONV`).
    """

    name: str
    group: int
    cycles: int
    crossbars: int
    windows: int
    fc: bool


@dataclass(frozen=True)
class Replication:
    """Copies per stage chosen by one strategy.

    Attributes:
        strategy: ``exact``, ``balance``, ``uniform`` or ``none``.
        copies: ``r_i`` per stage (the order of the stages given).
        crossbars: ``sum r_i x_i``.
        budget: the crossbar budget.
        bottleneck_cycles: ``max c_i / r_i``.
        proven: the bottleneck is the least any replication within the budget reaches.
    """

    strategy: str
    copies: tuple[int, ...]
    crossbars: int
    budget: int
    bottleneck_cycles: float
    proven: bool

    @property
    def feasible(self) -> bool:
        return self.crossbars <= self.budget

    def as_map(self, stages: Sequence[Stage]) -> dict[str, int]:
        """Copies by op name (what :func:`fusiontune.sim.placement.place_plan` takes)."""
        return {s.name: r for s, r in zip(stages, self.copies)}


def plan_stages(graph: Graph, plan: Plan, hw: HardwareConfig) -> tuple[Stage, ...]:
    """The LINEAR stages of ``plan`` on ``hw``, in plan order."""
    out = []
    for gi, group in enumerate(plan.groups):
        for m in group_needs(graph, group).matrices:
            x = matrix_crossbars(m, hw)
            turns = math.ceil(x / hw.array_units) if hw.array_units else 1
            fc = not any(kernel_shape(graph, graph.op_by_name[n]) for n in m.ops)  # PIMCOMP OP_FC
            cycles = m.vectors * hw.input_slices * hw.slice_cycles * turns
            out.append(Stage(m.ops[0], gi, cycles, x, m.vectors, fc))
    return tuple(out)


def _result(
    strategy: str, stages: Sequence[Stage], copies: Sequence[int], budget: int, proven: bool
) -> Replication:
    return Replication(
        strategy=strategy,
        copies=tuple(int(r) for r in copies),
        crossbars=sum(r * s.crossbars for s, r in zip(stages, copies)),
        budget=budget,
        bottleneck_cycles=max((s.cycles / r for s, r in zip(stages, copies)), default=0.0),
        proven=proven,
    )


def no_replication(stages: Sequence[Stage], budget: int) -> Replication:
    """One copy of every stage."""
    return _result("none", stages, [1] * len(stages), budget, False)


def exact_replication(
    stages: Sequence[Stage], budget: int, max_copies: Sequence[int] | None = None
) -> Replication:
    """The replication with the least bottleneck ``max_i c_i / r_i`` under the budget.

    Problem: minimise ``T(r) = max_i c_i / r_i`` subject to ``sum_i r_i x_i <= B``,
    ``1 <= r_i <= u_i`` integer (``u_i``: ``max_copies``, default unbounded).

    Proof that the answer is exact. (1) For a target ``T > 0`` the least copies with
    ``c_i / r_i <= T`` are ``r_i(T) = ceil(c_i / T)`` (at least 1), and every ``r`` with
    ``T(r) <= T`` has ``r >= r(T)`` componentwise; as ``x_i > 0``, ``T`` is reachable iff
    ``f(T) = sum_i x_i r_i(T) <= B`` and ``r_i(T) <= u_i``. (2) ``r_i(T)`` is non-increasing in
    ``T``, so the reachable targets form an up-set ``[T*, inf)``; it is closed because the optimum
    is attained (finitely many ``r`` fit the budget). (3) ``T* = T(r*)`` for an optimal ``r*``,
    i.e. ``T* = c_j / k`` for some stage ``j`` and some ``k = r*_j``, with
    ``k <= K_j = min(u_j, (B - sum_{i != j} x_i) // x_j)`` (every other stage keeps at least one
    copy). So ``T*`` is the least reachable value of the finite candidate set
    ``{c_j / k : 1 <= k <= K_j}``, which a binary search over the sorted candidates finds with
    the exact test of (1) (integer arithmetic: ``ceil(c_i k / c_j)``). The copies returned are
    ``r(T*)``, the fewest crossbars among the optimal replications. When even one copy each
    exceeds the budget, one copy each is returned (``feasible`` False, ``proven`` False).
    """
    n = len(stages)
    c = np.array([s.cycles for s in stages], dtype=np.int64)
    x = np.array([s.crossbars for s in stages], dtype=np.int64)
    u = np.array(max_copies if max_copies is not None else [budget] * n, dtype=np.int64)
    ones = int(x.sum())
    if n == 0 or ones > budget or (c == 0).all():
        return _result("exact", stages, [1] * n, budget, ones <= budget)
    k_max = np.minimum(u, (budget - (ones - x)) // x)
    nums, dens = [], []
    for j in range(n):
        if c[j] > 0:
            k = np.arange(1, int(k_max[j]) + 1, dtype=np.int64)
            nums.append(np.full(k.size, c[j], dtype=np.int64))
            dens.append(k)
    num, den = np.concatenate(nums), np.concatenate(dens)
    order = np.argsort(num / den, kind="stable")
    num, den = num[order], den[order]

    def copies_at(i: int) -> np.ndarray | None:
        """``r(T)`` for ``T = num[i] / den[i]`` when reachable, else None."""
        r = np.maximum(1, -((-c * den[i]) // num[i]))  # ceil(c * k / c_j), exact integers
        return r if (r <= u).all() and int((r * x).sum()) <= budget else None

    lo, hi = 0, len(num) - 1  # the largest candidate, max_j c_j, is reachable with r = 1
    while lo < hi:
        mid = (lo + hi) // 2
        if copies_at(mid) is not None:
            hi = mid
        else:
            lo = mid + 1
    best = copies_at(lo)
    assert best is not None
    return _result("exact", stages, best.tolist(), budget, True)


def balance_replication(
    stages: Sequence[Stage], budget: int, margin: float = BALANCE_MARGIN
) -> Replication:
    """PIMCOMP-NN's ``balance``: greedily copy the stage with the most windows per copy.

    As ``ReplicationByBalance``: FC stages keep one copy and their crossbars are set aside; the
    others start at one copy (not charged against what is left, as there); while what is left
    exceeds both the top stage's crossbars and ``margin`` x the initial amount, the stage with the
    largest ``ceil(windows / r)`` gets one more copy (ties: the earlier stage).
    """
    copies = [1] * len(stages)
    available = budget - sum(s.crossbars for s in stages if s.fc)
    floor = int(available * margin)
    heap = [(-s.windows, i) for i, s in enumerate(stages) if not s.fc]
    heapq.heapify(heap)
    while heap and available > stages[heap[0][1]].crossbars and available > floor:
        _, i = heapq.heappop(heap)
        copies[i] += 1
        available -= stages[i].crossbars
        heapq.heappush(heap, (-math.ceil(stages[i].windows / copies[i]), i))
    return _result("balance", stages, copies, budget, False)


def uniform_replication(
    stages: Sequence[Stage], budget: int, margin: float = UNIFORM_MARGIN
) -> Replication:
    """PIMCOMP-NN's ``uniform``: one factor for every non-FC stage.

    As ``ReplicateUniformly``: ``floor((budget - FC crossbars) / conv crossbars / margin)``
    copies of each non-FC stage (at least 1 here; PIMCOMP aborts below 1), FC stages one.
    """
    fc = sum(s.crossbars for s in stages if s.fc)
    conv = sum(s.crossbars for s in stages if not s.fc)
    factor = max(1, math.floor((budget - fc) / conv / margin)) if conv else 1
    copies = [1 if s.fc else factor for s in stages]
    return _result("uniform", stages, copies, budget, False)


def images_per_s(rep: Replication, hw: HardwareConfig) -> float:
    """Throughput mode: images per second at the pace of the slowest stage."""
    if rep.bottleneck_cycles <= 0:
        return math.inf
    return NS_PER_S * hw.clock_ghz / rep.bottleneck_cycles


def latency_cycles(stages: Sequence[Stage], copies: Sequence[int]) -> float:
    """Latency mode: per group its slowest stage, summed over groups (fill left out)."""
    slowest: dict[int, float] = {}
    for s, r in zip(stages, copies):
        slowest[s.group] = max(slowest.get(s.group, 0.0), s.cycles / r)
    return sum(slowest.values())


# ---- a plan's throughput (what a search trial records) ---------------------------------------
STRATEGIES = ("exact", "balance", "uniform", "none")
"""Replication strategies a search applies to every trial's plan (``replication`` of the search
space): the proven least bottleneck, PIMCOMP-NN's two, or one copy of every stage."""

DEFAULT_STRATEGY = "exact"
"""A search replicates with :func:`exact_replication`: for a given plan it is the most images/s
any replication within the crossbars reaches, so sampling another strategy could only lose
throughput (the others are baselines)."""


@dataclass(frozen=True)
class PlanThroughput:
    """A plan with its weights replicated by one strategy, in both pipeline modes.

    Attributes:
        stages: the plan's LINEAR stages (:func:`plan_stages`).
        replication: the copies chosen (``replication.strategy`` names the strategy).
        dram_cycles: clock cycles the plan's DRAM bytes per image take at the DRAM bandwidth.
        port_cycles: clock cycles the busiest core's network port needs per image (the larger
            of the bytes it sends and receives, at ``noc_link_bytes_per_cycle``; 0 on one core).
        pipeline_cycles: throughput mode, cycles per image: the slowest replicated stage, the
            DRAM time or the busiest port's time, whichever is longest (weights resident); with
            weights loaded per inference there is no batch pipeline across groups, so the
            stages' part is ``latency_cycles``. Links between routers are not priced, so it is
            a lower bound on the cycles per image.
        latency_cycles: latency mode with these copies (:func:`latency_cycles`).
        images_per_s: ``clock / pipeline_cycles``.
    """

    stages: tuple[Stage, ...]
    replication: Replication
    dram_cycles: float
    port_cycles: float
    pipeline_cycles: float
    latency_cycles: float
    images_per_s: float

    def copies(self) -> dict[str, int]:
        """Copies by LINEAR op name (``place_plan``'s and ``simulate``'s ``replication``)."""
        return self.replication.as_map(self.stages)

    def as_dict(self) -> dict[str, Any]:
        """The columns a search records (``trials`` table, ``docs/cores.md``)."""
        rep = self.replication
        return {
            "replication": rep.strategy,
            "replication_copies": sum(rep.copies),
            "replication_crossbars": rep.crossbars,
            "replication_proven": rep.proven,
            "stage_cycles": rep.bottleneck_cycles,
            "dram_cycles": self.dram_cycles,
            "port_cycles": self.port_cycles,
            "pipeline_cycles": self.pipeline_cycles,
            "latency_cycles": self.latency_cycles,
            "images_per_s": self.images_per_s,
        }


def replicate(stages: Sequence[Stage], budget: int, strategy: str) -> Replication:
    """``stages`` replicated by ``strategy`` (one of :data:`STRATEGIES`) within ``budget``."""
    if strategy == "exact":
        return exact_replication(stages, budget)
    if strategy == "balance":
        return balance_replication(stages, budget)
    if strategy == "uniform":
        return uniform_replication(stages, budget)
    if strategy == "none":
        return no_replication(stages, budget)
    raise ValueError(f"replication strategy {strategy!r}; allowed: {', '.join(STRATEGIES)}")


def plan_replication(stages: Sequence[Stage], hw: HardwareConfig, strategy: str) -> Replication:
    """The copies a plan's ``stages`` get on ``hw``: ``strategy`` within the chip's crossbars
    (``n_crossbars``) when weights are resident; with weights loaded per inference the groups
    take turns on the crossbars and nothing is replicated (strategy ``none``)."""
    return replicate(stages, hw.n_crossbars, strategy if hw.weights_resident else "none")


def throughput_of(
    stages: Sequence[Stage],
    rep: Replication,
    hw: HardwareConfig,
    traffic_bytes: int,
    port_bytes: int = 0,
) -> PlanThroughput:
    """Both pipeline modes of ``stages`` with ``rep``'s copies; ``traffic_bytes``: the plan's
    DRAM bytes per image (``simulate``'s ``traffic_bytes``), for the DRAM time; ``port_bytes``:
    the busiest core port's bytes per image (``max(PlacedPlan.core_port_bytes)``)."""
    dram = traffic_bytes * BITS_PER_BYTE * hw.clock_ghz / hw.dram_bandwidth_gbps
    port = port_bytes / hw.noc_link_bytes_per_cycle
    latency = latency_cycles(stages, rep.copies)
    compute = rep.bottleneck_cycles if hw.weights_resident else latency
    pipeline = max(compute, dram, port)
    ips = NS_PER_S * hw.clock_ghz / pipeline if pipeline > 0 else math.inf
    return PlanThroughput(tuple(stages), rep, dram, port, pipeline, latency, ips)


def plan_throughput(
    graph: Graph,
    plan: Plan,
    hw: HardwareConfig,
    strategy: str = DEFAULT_STRATEGY,
    traffic_bytes: int = 0,
) -> PlanThroughput:
    """``plan`` replicated by ``strategy`` (:func:`plan_replication`), priced in both pipeline
    modes (:func:`throughput_of`)."""
    stages = plan_stages(graph, plan, hw)
    return throughput_of(stages, plan_replication(stages, hw, strategy), hw, traffic_bytes)


def simulate_replicated(
    graph: Graph, plan: Plan, hw: HardwareConfig, strategy: str = DEFAULT_STRATEGY
) -> tuple[Metrics, PlanThroughput]:
    """What a search trial evaluates: ``plan``'s weights replicated by ``strategy``
    (:func:`plan_replication`), the copies placed on a many-core chip (``simulate`` with
    ``replication``; one core: plain ``simulate``), and both pipeline modes priced."""
    from fusiontune.sim.cost import simulate
    from fusiontune.sim.placement import place_plan

    stages = plan_stages(graph, plan, hw)
    rep = plan_replication(stages, hw, strategy)
    if hw.cores == 1:
        metrics = simulate(graph, plan, hw)
        return metrics, throughput_of(stages, rep, hw, metrics.traffic_bytes)
    copies = rep.as_map(stages)
    metrics = simulate(graph, plan, hw, copies)
    ports = place_plan(graph, plan, hw, copies).core_port_bytes  # its groups are cached
    return metrics, throughput_of(stages, rep, hw, metrics.traffic_bytes, max(ports, default=0))
