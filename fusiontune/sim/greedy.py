"""The hardware-aware greedy baseline: the planner's greedy fusion, each union taken only when
the joined group is feasible on the hardware (DESIGN §5 rule 7).

The planner knows no hardware: :func:`fusiontune.planner.baselines.greedy_plan` takes a
feasibility predicate on groups, which this module builds from the simulator's cost model.
"""

from __future__ import annotations

from fusiontune.ir.graph import Graph
from fusiontune.planner import baselines
from fusiontune.planner.groups import Group, PlannerConfig
from fusiontune.planner.plan import Plan
from fusiontune.sim.cost import group_cost
from fusiontune.sim.hardware import HardwareConfig
from fusiontune.sim.placement import group_on_cores


def greedy_plan(
    graph: Graph, config: PlannerConfig | None = None, hw: HardwareConfig | None = None
) -> Plan:
    """Deterministic maximal legal (and, given ``hw``, feasible) fusion.

    Without ``hw``: :func:`fusiontune.planner.baselines.greedy_plan` (nothing bounds a group
    but legality). With ``hw`` a union is taken only when the joined group fits that hardware
    on its own (rule 7: buffer, and crossbars of a stream's stages; on a chip with
    ``cores > 1`` also every core's buffer, :func:`fusiontune.sim.placement.group_on_cores`),
    so every group of the result is feasible (the plan-level crossbar total is not checked).
    """
    if hw is None:
        return baselines.greedy_plan(graph, config)
    return baselines.greedy_plan(graph, config, fits=feasible_on(graph, hw))


def feasible_on(graph: Graph, hw: HardwareConfig) -> baselines.GroupPredicate:
    """``fits(group)``: the group of ``graph`` is feasible on ``hw`` on its own (on a
    many-core chip: on its own fresh cores, :func:`fusiontune.sim.placement.group_on_cores`)."""

    def fits(group: Group) -> bool:
        return group_cost(graph, group, hw).feasible

    if hw.cores == 1:
        return fits

    def fits_cores(group: Group) -> bool:
        return fits(group) and not group_on_cores(graph, group, hw).violations

    return fits_cores
