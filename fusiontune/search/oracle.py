"""The exact oracle: the proven-optimal plan for an additive objective at fixed hardware.

Costs are additive over groups (DEVELOPERS.md), so the best plan is a set partitioning of the
ops by the legal groups of ``candidate_groups(graph, cfg)``::

    minimise   sum_g cost_g x_g
    subject to sum_{g contains op} x_g = 1              for every op
               sum_g crossbars_g x_g <= n_crossbars     (resident weights: rule 7, plan level)
               x_g in {0, 1}

solved with :func:`scipy.optimize.milp` (HiGHS). Ties on the objective are broken by a
second MILP on a secondary metric (:data:`TIE_BREAK`) with the primary cost held at its
optimum. Groups infeasible on the hardware on their own (rule 7) are left out. A partition of
individually legal groups can still be illegal as a whole (two groups that depend on each
other both ways); such a solution is cut off with a no-good constraint and the MILP solved
again, so the answer is a legal plan whose optimality is proven.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph
    from fusiontune.planner.candidates import PlannerConfig
    from fusiontune.planner.plan import Group, Plan
    from fusiontune.sim.hardware import HardwareConfig

ORACLE_METRIC = {"traffic": "traffic_bytes", "energy": "energy_pj", "cycles": "cycles"}
"""GroupMetrics field minimised for each additive objective."""

MAX_CUTS = 50
"""No-good cuts tried before giving up on a legal partition (never reached on the zoo)."""

TIE_BREAK = {"traffic_bytes": "energy_pj", "energy_pj": "traffic_bytes", "cycles": "energy_pj"}
"""Secondary metric minimised among the plans of optimal primary cost."""

TIE_TOLERANCE = 1e-9
"""Relative slack on the primary optimum in the tie-breaking MILP (float round-off only)."""

COST_TOLERANCE = 1e-6
"""Relative tolerance when checking the MILP objective against the re-simulated plan."""


@dataclass(frozen=True)
class OracleResult:
    """The proven optimum.

    Attributes:
        plan: the optimal legal plan.
        objective: ``traffic``, ``energy`` or ``cycles``.
        optimum: its cost (sum of group costs, same unit as the metric).
        n_groups_considered: candidate groups that entered the MILP.
        n_cuts: illegal partitions cut off before the optimum.
        solve_s: wall seconds (group costs + MILP).
    """

    plan: Plan
    objective: str
    optimum: float
    n_groups_considered: int
    n_cuts: int
    solve_s: float


def _group_feasible(gm: object) -> bool:
    return bool(getattr(gm, "feasible", True))


def exact_optimum(
    graph: Graph,
    hw: HardwareConfig,
    objective: str = "traffic",
    config: PlannerConfig | None = None,
) -> OracleResult | None:
    """Solve the set partitioning; ``None`` when no partition of feasible groups exists."""
    from fusiontune.planner.candidates import candidate_groups
    from fusiontune.planner.plan import Plan
    from fusiontune.sim.cost import group_cost

    metric = ORACLE_METRIC[objective]
    start = time.perf_counter()
    groups = []
    costs = []
    crossbars = []
    for group in candidate_groups(graph, config):
        gm = group_cost(graph, group, hw)
        if _group_feasible(gm):
            groups.append(group)
            costs.append(float(getattr(gm, metric)))
            crossbars.append(float(getattr(gm, "crossbars_needed", 0)))
    if not groups:
        return None
    index = graph.op_index
    cover = np.zeros((len(graph.ops), len(groups)))
    for j, group in enumerate(groups):
        for op in group.ops:
            cover[index[op], j] = 1.0
    rows = [cover]
    lower = [np.ones(len(graph.ops))]
    upper = [np.ones(len(graph.ops))]
    if hw.weights_resident:
        rows.append(np.asarray([crossbars]))
        lower.append(np.array([0.0]))
        upper.append(np.array([float(hw.n_crossbars)]))
    cost = np.asarray(costs)
    primary = _solve_legal(graph, groups, cost, rows, lower, upper, config)
    if primary is None:
        return None
    chosen, n_cuts = primary
    optimum = float(cost[chosen].sum())
    # Ties: among the plans of optimal cost, take the one best on the secondary metric
    # (traffic-optimal plans can differ several-fold in energy), by a second MILP that keeps
    # the primary cost at its optimum.
    tie = np.asarray([float(getattr(group_cost(graph, g, hw), TIE_BREAK[metric])) for g in groups])
    slack = max(abs(optimum) * TIE_TOLERANCE, TIE_TOLERANCE)
    secondary = _solve_legal(
        graph,
        groups,
        tie,
        [*rows, cost[np.newaxis, :]],
        [*lower, np.array([-np.inf])],
        [*upper, np.array([optimum + slack])],
        config,
    )
    if secondary is not None:
        chosen, extra_cuts = secondary
        n_cuts += extra_cuts
    return OracleResult(
        plan=Plan.of(graph, [groups[j] for j in chosen]),
        objective=objective,
        optimum=float(cost[chosen].sum()),
        n_groups_considered=len(groups),
        n_cuts=n_cuts,
        solve_s=time.perf_counter() - start,
    )


def _solve_legal(
    graph: Graph,
    groups: list[Group],
    cost: np.ndarray,
    rows: list[np.ndarray],
    lower: list[np.ndarray],
    upper: list[np.ndarray],
    config: PlannerConfig | None,
) -> tuple[list[int], int] | None:
    """Minimise ``cost`` over partitions; cut off illegal partitions until one is legal.

    Returns the chosen group indices and the number of cuts, or ``None`` when infeasible.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    from fusiontune.errors import IllegalPlanError
    from fusiontune.planner.legality import check_plan
    from fusiontune.planner.plan import Plan

    rows, lower, upper = list(rows), list(lower), list(upper)
    for n_cuts in range(MAX_CUTS + 1):
        res = milp(
            c=cost,
            constraints=LinearConstraint(
                np.vstack(rows), np.concatenate(lower), np.concatenate(upper)
            ),
            integrality=np.ones(len(groups)),
            bounds=Bounds(0, 1),
        )
        if res.status != 0 or res.x is None:
            return None
        chosen = [j for j in range(len(groups)) if res.x[j] > 0.5]
        try:
            check_plan(graph, Plan.of(graph, [groups[j] for j in chosen]), config)
        except IllegalPlanError:  # legal groups, illegal partition: cut this combination off
            cut = np.zeros((1, len(groups)))
            cut[0, chosen] = 1.0
            rows.append(cut)
            lower.append(np.array([0.0]))
            upper.append(np.array([len(chosen) - 1.0]))
            continue
        return chosen, n_cuts
    return None
