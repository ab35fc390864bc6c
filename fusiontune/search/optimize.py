"""The exact optimizer: the least-cost legal, feasible plan over all partitions, certified.

For an additive objective (traffic, energy or cycles: sums over groups) at fixed hardware,
the best plan is a shortest path in the lattice of ideals (:mod:`fusiontune.planner.lattice`):
a plan is a chain ``∅ = D0 ⊂ D1 ⊂ ... ⊂ Dk = all ops`` whose steps ``D(i+1) \\ D(i)`` are legal
groups, and a group's cost depends on the group alone. So::

    cost(D') = min over legal, feasible groups G = D' \\ D of  cost(D) + cost(G)

over every ideal, with no cap on group size. The lattice of a chain-like network is small
(resnet50: 240 ideals), and each ideal's groups come from one incremental walk
(:meth:`Lattice.walk` with the group model as accumulator), pruned by monotone facts: an
OPAQUE member, a pool no LINEAR precedes once a LINEAR joins, line buffers and held tensors
that already overflow the buffer (rule 7), crossbars that already overflow without a merge.

Search order and certificate. Ideals are expanded by size; an ideal is skipped when its best
cost plus an admissible bound on what remains (:meth:`_Search.remaining`: bytes that must
still cross DRAM) cannot beat the best complete plan (A*). When every ideal has been
expanded the plan is **proven optimal** (``gap == 0``). With a time limit, the search stops
early and reports the best plan found (or the capacity-aware greedy plan) with a **proven
gap**: every complete chain passes through an ideal reached but not yet expanded, so
``min(cost + remaining)`` over those ideals is a lower bound.

Ties on the objective are broken by a secondary metric (:data:`TIE_BREAK`): labels compare
``(primary, secondary)`` lexicographically, which sums compatibly along a path. With weights
resident in crossbars the plan's total crossbars must fit (rule 7, plan level); merges change
them, so each ideal keeps its Pareto set of (cost, crossbars) labels.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import NamedTuple

from fusiontune.errors import ConfigError
from fusiontune.ir.graph import Graph
from fusiontune.planner._index import bits
from fusiontune.planner.lattice import Lattice
from fusiontune.planner.plan import Group, Mode, Plan, PlannerConfig
from fusiontune.sim.groupmodel import BITS_PER_BYTE, FIELD_INDEX, GroupModel, group_model
from fusiontune.sim.hardware import HardwareConfig
from fusiontune.sim.placement import group_on_cores, spread_crossbars

OBJECTIVE_METRIC = {"traffic": "traffic_bytes", "energy": "energy_pj", "cycles": "cycles"}
"""Field minimised for each additive objective."""

PRUNE_REL = 1e-9
"""A label is pruned only when its bound exceeds the incumbent by more than this share: the
bound and a label's cost are float sums in different orders, and where the bound is tight (a
singleton LINEAR group costs exactly its fixed cost plus its bytes) rounding must not prune
the optimum's own path (it did: ``infeasible`` with a feasible optimal incumbent)."""


def _above(value: float, incumbent: float) -> bool:
    """``value`` exceeds ``incumbent`` beyond rounding (:data:`PRUNE_REL`)."""
    return value > incumbent + PRUNE_REL * abs(incumbent)


TIE_BREAK = {"traffic_bytes": "energy_pj", "energy_pj": "traffic_bytes", "cycles": "energy_pj"}
"""Secondary metric minimised among the plans of optimal primary cost."""


@dataclass(frozen=True)
class OptimalPlan:
    """The optimizer's answer.

    Attributes:
        plan: the best legal, feasible plan found (``None`` when no feasible plan exists).
        objective: ``traffic``, ``energy`` or ``cycles``.
        metric: the field minimised (``traffic_bytes``, ``energy_pj``, ``cycles``).
        value: the plan's cost in that metric (``None`` without a plan).
        lower_bound: a proven lower bound on every feasible plan's cost (equals ``value``
            when proven optimal).
        gap: ``(value - lower_bound) / value``; 0.0 when proven.
        proven: the plan is optimal over all legal partitions (no cap on group size).
        solve_s: wall seconds.
        status: ``optimal``, ``time_limit`` (a plan and a proven gap) or ``infeasible``
            (no partition into feasible groups exists; proven).
        n_ideals: ideals expanded.
        n_groups: feasible (group, mode) pairs evaluated.
    """

    plan: Plan | None
    objective: str
    metric: str
    value: float | None
    lower_bound: float
    gap: float
    proven: bool
    solve_s: float
    status: str
    n_ideals: int
    n_groups: int

    def to_dict(self) -> dict[str, object]:
        """Plain form for summaries (the plan as its canonical JSON object)."""
        return {
            "objective": self.objective,
            "metric": self.metric,
            "value": self.value,
            "lower_bound": self.lower_bound,
            "gap": self.gap,
            "proven": self.proven,
            "status": self.status,
            "solve_s": round(self.solve_s, 4),
            "n_ideals": self.n_ideals,
            "n_groups": self.n_groups,
            "plan": None if self.plan is None else self.plan.to_dict(),
        }


class _Label(NamedTuple):
    primary: float
    secondary: float
    crossbars: int
    prev: int  # ideal this step came from
    prev_label: int  # index of the label there
    group: int  # the step's group (mask)
    mode: Mode


def optimal_plan(
    graph: Graph,
    hw: HardwareConfig | None = None,
    objective: str = "traffic",
    time_limit_s: float | None = None,
    config: PlannerConfig | None = None,
) -> OptimalPlan:
    """The least-cost legal, feasible plan of ``graph`` on ``hw``, with a certificate.

    Args:
        graph: the graph.
        hw: hardware (default: the flat ISAAC-like chip, ``isaac_reram_flat``).
        objective: ``traffic``, ``energy`` or ``cycles`` (additive over groups).
        time_limit_s: stop after this many seconds with the best plan and a proven gap
            (``None``: run to proven optimality).
        config: planner configuration (patterns; an optional size cap).

    Raises:
        ConfigError: unknown objective or a non-positive time limit.
    """
    if objective not in OBJECTIVE_METRIC:
        raise ConfigError(
            f"optimal_plan: objective '{objective}' is not additive over groups; allowed: "
            + ", ".join(OBJECTIVE_METRIC)
        )
    if time_limit_s is not None and not time_limit_s > 0:
        raise ConfigError(f"optimal_plan: time_limit_s must be > 0, got {time_limit_s!r}")
    hw = hw or HardwareConfig()
    return _Search(graph, hw, objective, config or PlannerConfig(), time_limit_s).run()


class _Search:
    """One shortest-path search over the ideals of a graph (see the module docstring)."""

    def __init__(
        self,
        graph: Graph,
        hw: HardwareConfig,
        objective: str,
        config: PlannerConfig,
        time_limit_s: float | None,
    ) -> None:
        self.graph = graph
        self.hw = hw
        self.objective = objective
        self.metric = OBJECTIVE_METRIC[objective]
        self.p = FIELD_INDEX[self.metric]
        self.s = FIELD_INDEX[TIE_BREAK[self.metric]]
        self.config = config
        self.deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
        self.lattice = Lattice(graph, config)
        self.model: GroupModel = group_model(graph, hw)
        self.resident = hw.weights_resident
        self.many_core = hw.cores > 1
        # ideal -> (crossing tensors, their bytes, output bytes to write, fixed costs inside)
        self._crossing: dict[int, tuple[int, int, int, float]] = {}
        self._static_bounds()

    # ---- admissible bound on what an ideal still has to pay ----------------------------------
    def _static_bounds(self) -> None:
        st = self.model.st
        hw = self.hw
        ab = hw.act_bytes
        self.out_bytes_of_op = [sum(st.numel[t] * ab for t in st.used_outs[v] if st.is_output[t])
                                for v in range(st.n)]  # fmt: skip
        # per op: cost its group pays whatever the grouping (non-mergeable weights, arrays)
        fixed = [0.0] * st.n
        for v, lin in self.model.lin.items():
            if self.lattice.s.fc_like >> v & 1:
                continue  # a merge may change its matrix: no fixed cost claimed
            if self.metric == "traffic_bytes":
                fixed[v] = 0 if self.resident else lin.weight_bytes
            elif self.metric == "energy_pj":
                fixed[v] = (
                    lin.cell_ops * hw.cell_op_pj
                    + lin.conversions * (hw.adc_pj_per_conversion + hw.shift_add_pj)
                    + lin.drives * hw.dac_pj_per_drive
                )
                if not self.resident:
                    fixed[v] += (lin.weight_bytes * BITS_PER_BYTE * hw.dram_pj_per_bit
                                 + lin.programmed * hw.weight_program_pj_per_cell)  # fmt: skip
        self.fixed = fixed
        if self.metric == "traffic_bytes":
            self.per_byte = 1.0
        elif self.metric == "energy_pj":
            self.per_byte = BITS_PER_BYTE * (hw.dram_pj_per_bit + hw.buffer_pj_per_bit)
        else:
            self.per_byte = BITS_PER_BYTE * hw.clock_ghz / hw.dram_bandwidth_gbps
        total_out = 0
        for v in range(st.n):
            total_out += self.out_bytes_of_op[v]
        self.total_out = total_out
        inputs = 0
        in_bytes = 0
        for t in range(len(st.numel)):
            if st.producer[t] < 0 and st.consumers[t]:
                inputs |= 1 << t
                in_bytes += st.numel[t] * ab
        self.fixed_total = sum(fixed)
        self._crossing[0] = (inputs, in_bytes, total_out, 0.0)

    def crossing(self, ideal: int, parent: int, group: int) -> None:
        """Record what crosses the cut of ``ideal`` (reached from ``parent`` by ``group``)."""
        st = self.model.st
        ab = self.hw.act_bytes
        tensors, nbytes, outs, fixed_in = self._crossing[parent]
        for v in bits(group):
            outs -= self.out_bytes_of_op[v]
            fixed_in += self.fixed[v]
            for t in st.acts[v]:
                if tensors >> t & 1 and not st.consumers[t] & ~ideal:
                    tensors &= ~(1 << t)
                    nbytes -= st.numel[t] * ab
            for t in st.used_outs[v]:
                if st.consumers[t] & ~ideal and not tensors >> t & 1:
                    tensors |= 1 << t
                    nbytes += st.numel[t] * ab
        self._crossing[ideal] = (tensors, nbytes, outs, fixed_in)

    def remaining(self, ideal: int) -> float:
        """Admissible lower bound on the cost of the groups still to come after ``ideal``.

        Every tensor crossing the cut is read by a later group, every graph output not yet
        produced is written; each DRAM byte costs at least ``per_byte`` in the metric; LINEAR
        ops that cannot be merged pay their fixed costs.
        """
        _, nbytes, outs, fixed_in = self._crossing[ideal]
        value = (nbytes + outs) * self.per_byte + (self.fixed_total - fixed_in)
        return math.floor(value) if self.metric == "cycles" else value

    # ---- the search ----------------------------------------------------------------------------
    def run(self) -> OptimalPlan:
        start = time.perf_counter()
        # a time-limited traffic search certifies its plan against the capacity-aware bound
        # too (computed first, inside the time limit: it can close the gap the frontier leaves)
        capacity = 0
        if self.deadline is not None and self.metric == "traffic_bytes":
            from fusiontune.sim.bounds import capacity_bound

            capacity = capacity_bound(self.graph, self.hw)
        lat, model = self.lattice, self.model
        full = lat.full
        n_crossbars = self.hw.n_crossbars
        labels: dict[int, list[_Label]] = {0: [_Label(0.0, 0.0, 0, -1, -1, 0, Mode.SINGLE)]}
        buckets: dict[int, list[int]] = {0: [0]}
        expanded: set[int] = set()
        best: tuple[float, float] = self._incumbent()
        n_groups = 0
        timed_out = False
        if full == 0:
            return self._result(Plan(()), 0.0, 0.0, True, start, "optimal", 0, 0)
        for size in range(lat.s.n):
            for ideal in buckets.pop(size, ()):
                if self.deadline is not None and time.perf_counter() > self.deadline:
                    timed_out = True
                    break
                here = labels[ideal]
                floor_here = min(lb.primary for lb in here) + self.remaining(ideal)
                if _above(floor_here, best[0]):
                    expanded.add(ideal)
                    continue
                expanded.add(ideal)
                for t in lat.walk(ideal, acc=model):
                    # one walk can be exponential on a wide graph: the limit holds inside it
                    # too; a walk cut short leaves its ideal unexpanded (it bounds the gap)
                    if self.deadline is not None and time.perf_counter() > self.deadline:
                        expanded.discard(ideal)
                        timed_out = True
                        break
                    nxt = ideal | t.mask
                    for mode, totals in zip(t.modes, t.payloads):
                        if totals is None:
                            continue
                        undecided = totals.over_buffer is None
                        n_groups += 1
                        pc = totals.values[self.p]
                        sc = totals.values[self.s]
                        xb = totals.crossbars_needed if self.resident else 0
                        if nxt not in self._crossing:
                            self.crossing(nxt, ideal, t.mask)
                        rest = self.remaining(nxt)
                        taken = False  # the group's per-core verdict (many cores only)
                        for k, lb in enumerate(here):
                            cand = _Label(lb.primary + pc, lb.secondary + sc, lb.crossbars + xb,
                                          ideal, k, t.mask, mode)  # fmt: skip
                            if self.resident and cand.crossbars > n_crossbars:
                                continue
                            if _above(cand.primary + rest, best[0]) or _dominated(
                                labels, nxt, cand
                            ):
                                continue
                            if self.many_core and not taken:  # the group on fresh cores
                                aligned = self._on_cores(t.mask, mode)
                                if aligned < 0:
                                    break
                                taken = True
                                if self.resident:  # whole cores per stage (spread packing)
                                    xb = aligned
                                    cand = cand._replace(crossbars=lb.crossbars + xb)
                                    if cand.crossbars > n_crossbars or _dominated(
                                        labels, nxt, cand
                                    ):
                                        continue
                            if undecided:  # replay the group's schedule only now
                                if not model.fits(t.mask, mode):
                                    break
                                undecided = False
                            if _insert(labels, buckets, nxt, cand) and nxt == full:
                                best = min(best, (cand.primary, cand.secondary))
            if timed_out:
                break
        final = labels.get(full, [])
        if not timed_out:
            if not final:
                return self._result(None, None, math.inf, True, start, "infeasible",
                                    len(expanded), n_groups)  # fmt: skip
            top = min(final, key=lambda lb: (lb.primary, lb.secondary))
            return self._result(self._plan(labels, top), top.primary, top.primary, True, start,
                                "optimal", len(expanded), n_groups)  # fmt: skip
        # time limit: every complete chain passes through a reached, unexpanded ideal
        bound = math.inf
        for ideal, ls in labels.items():
            if ideal not in expanded:
                bound = min(bound, min(lb.primary for lb in ls) + self.remaining(ideal))
        if math.isfinite(bound):  # the frontier's bound can be looser than the plan-wide ones
            bound = max(bound, self.remaining(0))
            if self.metric == "traffic_bytes":
                from fusiontune.sim.cost import lower_bound

                bound = max(bound, lower_bound(self.graph, self.hw), capacity)
        plan: Plan | None = None
        value = None
        if final:
            top = min(final, key=lambda lb: (lb.primary, lb.secondary))
            plan, value = self._plan(labels, top), top.primary
            bound = min(bound, top.primary)
        else:  # no complete chain yet: the greedy plan that fits, if it fits as a whole
            plan, value = self._greedy()
        return self._result(plan, value, bound, False, start, "time_limit", len(expanded),
                            n_groups)  # fmt: skip

    def _on_cores(self, group_mask: int, mode: Mode) -> int:
        """On a many-core chip: the crossbars the group takes in whole cores per stage, or -1
        when a core's buffer (or the chip's cores) cannot hold it
        (:func:`fusiontune.sim.placement.group_on_cores`: a property of the group alone)."""
        names = self.lattice.s.ix.names
        group = Group(tuple(names[i] for i in bits(group_mask)), mode)
        fit = group_on_cores(self.graph, group, self.hw)
        return -1 if fit.violations else fit.crossbars

    def _incumbent(self) -> tuple[float, float]:
        """(cost, secondary) of the hardware-aware greedy plan when it fits: a first bound
        that prunes the search (the optimum is never worse)."""
        plan, value = self._greedy()
        if plan is None or value is None:
            return (math.inf, math.inf)
        from fusiontune.sim.cost import simulate

        metrics = simulate(self.graph, plan, self.hw)
        return (value, float(getattr(metrics, TIE_BREAK[self.metric])))

    def _greedy(self) -> tuple[Plan | None, float | None]:
        from fusiontune.sim.cost import simulate
        from fusiontune.sim.greedy import greedy_plan

        plan = greedy_plan(self.graph, self.config, self.hw)
        metrics = simulate(self.graph, plan, self.hw)
        if not metrics.feasible:
            return None, None
        if self.many_core and spread_crossbars(self.graph, plan, self.hw) > self.hw.n_crossbars:
            return None, None  # placed densely: outside the plans the search compares
        return plan, float(getattr(metrics, self.metric))

    def _plan(self, labels: dict[int, list[_Label]], top: _Label) -> Plan:
        names = self.lattice.s.ix.names
        groups = []
        lb = top
        while lb.prev >= 0:
            groups.append(Group(tuple(names[i] for i in bits(lb.group)), lb.mode))
            lb = labels[lb.prev][lb.prev_label]
        return Plan.of(self.graph, groups)

    def _result(
        self,
        plan: Plan | None,
        value: float | None,
        bound: float,
        proven: bool,
        start: float,
        status: str,
        n_ideals: int,
        n_groups: int,
    ) -> OptimalPlan:
        if value is not None and self.metric != "energy_pj":
            value = int(value)
        if math.isfinite(bound) and self.metric != "energy_pj":
            bound = math.floor(bound) if not proven else int(bound)
        if value is None or not math.isfinite(bound):
            gap = math.inf if value is not None else (0.0 if proven else math.inf)
        elif proven:
            gap = 0.0
        else:
            gap = (value - bound) / value if value else 0.0
        return OptimalPlan(
            plan=plan,
            objective=self.objective,
            metric=self.metric,
            value=value,
            lower_bound=bound,
            gap=max(gap, 0.0),
            proven=proven,
            solve_s=time.perf_counter() - start,
            status=status,
            n_ideals=n_ideals,
            n_groups=n_groups,
        )


def _dominated(labels: dict[int, list[_Label]], ideal: int, cand: _Label) -> bool:
    """An existing label of ``ideal`` is at least as good on cost and crossbars."""
    key = (cand.primary, cand.secondary)
    return any(
        (lb.primary, lb.secondary) <= key and lb.crossbars <= cand.crossbars
        for lb in labels.get(ideal, ())
    )


def _insert(
    labels: dict[int, list[_Label]], buckets: dict[int, list[int]], ideal: int, cand: _Label
) -> bool:
    """Add ``cand`` to the ideal's Pareto set of (primary, secondary) x crossbars labels."""
    here = labels.get(ideal)
    if here is None:
        labels[ideal] = [cand]
        buckets.setdefault(ideal.bit_count(), []).append(ideal)
        return True
    key = (cand.primary, cand.secondary)
    for lb in here:
        if (lb.primary, lb.secondary) <= key and lb.crossbars <= cand.crossbars:
            return False
    kept = [
        lb
        for lb in here
        if not ((lb.primary, lb.secondary) >= key and lb.crossbars >= cand.crossbars)
    ]
    # labels are referenced by index from later ideals only after this ideal is expanded
    kept.append(cand)
    labels[ideal] = kept
    return True
