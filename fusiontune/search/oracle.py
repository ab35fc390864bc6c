"""The exact oracle: the proven-optimal plan for an additive objective at fixed hardware.

Costs are additive over groups (DEVELOPERS.md), so the best plan is a set partitioning of the
ops by the legal groups of ``candidate_groups(graph, cfg)``::

    minimise   sum_g cost_g x_g
    subject to sum_{g contains op} x_g = 1              for every op
               sum_g crossbars_g x_g <= n_crossbars     (resident weights: rule 7, plan level)
               x_g in {0, 1}

solved with :func:`scipy.optimize.milp` (HiGHS). Groups infeasible on the hardware on their own
(rule 7) are left out. A partition of individually legal groups can still be illegal as a whole
(two groups that depend on each other both ways); such a solution is cut off with a no-good
constraint and the MILP solved again, so the answer is a legal plan whose optimality is proven.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph
    from fusiontune.planner.candidates import PlannerConfig
    from fusiontune.planner.plan import Plan
    from fusiontune.sim.hardware import HardwareConfig

ORACLE_METRIC = {"traffic": "traffic_bytes", "energy": "energy_pj", "cycles": "cycles"}
"""GroupMetrics field minimised for each additive objective."""

MAX_CUTS = 50
"""No-good cuts tried before giving up on a legal partition (never reached on the zoo)."""

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
    from scipy.optimize import Bounds, LinearConstraint, milp

    from fusiontune.errors import IllegalPlanError
    from fusiontune.planner.candidates import candidate_groups
    from fusiontune.planner.legality import check_plan
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
        plan = Plan.of(graph, [groups[j] for j in chosen])
        try:
            check_plan(graph, plan, config)
        except IllegalPlanError:  # legal groups, illegal partition: cut this combination off
            cut = np.zeros((1, len(groups)))
            cut[0, chosen] = 1.0
            rows.append(cut)
            lower.append(np.array([0.0]))
            upper.append(np.array([len(chosen) - 1.0]))
            continue
        return OracleResult(
            plan=plan,
            objective=objective,
            optimum=float(cost[chosen].sum()),
            n_groups_considered=len(groups),
            n_cuts=n_cuts,
            solve_s=time.perf_counter() - start,
        )
    return None
