"""The baseline and oracle rows of a search (DESIGN §9): unfused, TVM-like, greedy,
exhaustive (small graphs) and the exact optimum, at the base hardware and again at the best
trial's hardware (``<name>@best_hw`` rows of a co-design run), and the hardware label every
baseline row carries in ``summary.json``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fusiontune.search import results as res
from fusiontune.search.backends import EvalTask, evaluate_batch
from fusiontune.search.loop import best_record, make_record
from fusiontune.search.problem import Problem
from fusiontune.search.records import TrialRecord
from fusiontune.search.space import ADDITIVE_OBJECTIVES

if TYPE_CHECKING:
    import pandas as pd

    from fusiontune.planner.plan import Plan
    from fusiontune.sim.hardware import HardwareConfig

EXHAUSTIVE_MAX_PLANS = 2000
"""Largest ``count_plans`` for which the exhaustive baseline enumerates every plan."""

BASELINES = ("unfused", "tvm_like", "greedy", "exhaustive", "oracle")

AT_BEST_HW = "@best_hw"
"""Suffix of the ``source`` of a baseline row computed at the best trial's hardware (co-design:
``oracle@best_hw``); rows without it used the base hardware (column ``hw_role``)."""


def evaluate_at(problem: Problem, plan: Plan, hw: HardwareConfig) -> TrialRecord:
    """A row for ``plan`` at ``hw``; an evaluation that raises is a failed row."""
    task = EvalTask(-1, plan, hw, replication=problem.replication)
    outcome = evaluate_batch(problem.graph, [task])[0]
    return make_record(problem, -1, plan, hw, outcome)


def _baseline(
    problem: Problem, hw: HardwareConfig, name: str, make_plan: Callable[[], Plan]
) -> TrialRecord:
    """A baseline row; a baseline whose plan cannot be built is recorded as failed (the
    search's own results stand without it)."""
    try:
        plan = make_plan()
    except Exception as exc:
        return TrialRecord(-1, "FAIL", error=f"{name} plan: {type(exc).__name__}: {exc}")
    return evaluate_at(problem, plan, hw)


def run_baselines(
    problem: Problem, hw: HardwareConfig
) -> tuple[dict[str, TrialRecord], dict[str, Any]]:
    """Unfused, TVM-like, greedy, exhaustive best (small graphs) and the exact oracle, at
    ``hw`` (the base hardware, or the best trial's). A baseline that fails is recorded as
    failed; the others go on."""
    from fusiontune.planner.baselines import tvm_like_plan, unfused_plan
    from fusiontune.planner.counting import count_within
    from fusiontune.planner.enumerate import enumerate_plans
    from fusiontune.search.optimize import optimal_plan
    from fusiontune.sim.bounds import attention_bounds, capacity_bound
    from fusiontune.sim.cost import lower_bound
    from fusiontune.sim.greedy import greedy_plan

    graph, cfg = problem.graph, problem.config
    out = {
        "unfused": _baseline(problem, hw, "unfused", lambda: unfused_plan(graph)),
        "tvm_like": _baseline(problem, hw, "tvm_like", lambda: tvm_like_plan(graph, cfg)),
        "greedy": _baseline(problem, hw, "greedy", lambda: greedy_plan(graph, cfg, hw)),
    }
    info: dict[str, Any] = {}
    try:
        counted = count_within(graph, cfg)  # bounded: a wide graph gets a lower bound
        info["count_plans"] = int(counted.value)
        info["count_plans_exact"] = counted.exact
        if counted.exact and counted.value <= EXHAUSTIVE_MAX_PLANS:
            candidates = [evaluate_at(problem, p, hw) for p in enumerate_plans(graph, config=cfg)]
            best = best_record(candidates, problem)
            if best is not None:
                out["exhaustive"] = best
    except Exception as exc:
        info["exhaustive_error"] = f"{type(exc).__name__}: {exc}"
    objective = problem.space.objective
    oracle_objective = objective if objective in ADDITIVE_OBJECTIVES else "traffic"
    if problem.bilevel:
        oracle_objective = problem.plan_objective
    try:
        oracle = optimal_plan(graph, hw, oracle_objective, config=cfg)
        info["lower_bounds"] = {
            "compulsory_bytes": lower_bound(graph, hw),
            "capacity_bytes": capacity_bound(graph, hw),
        }
        attention = attention_bounds(graph, hw)  # per fused attention (P5), when there is one
        if attention:
            info["lower_bounds"]["attention"] = attention
    except Exception as exc:
        out["oracle"] = TrialRecord(-1, "FAIL", error=f"oracle: {type(exc).__name__}: {exc}")
        return out, info
    info.update(
        oracle_objective=oracle_objective,
        oracle_status=oracle.status,
        oracle_proven=oracle.proven,
        oracle_gap=oracle.gap,
        oracle_lower_bound=oracle.lower_bound,
        oracle_s=oracle.solve_s,
        oracle_ideals=oracle.n_ideals,
        oracle_groups=oracle.n_groups,
    )
    if oracle.plan is not None:
        out["oracle"] = evaluate_at(problem, oracle.plan, hw)
        info["optimum"] = oracle.value
    return out, info


def baselines_at_best(
    problem: Problem, best: TrialRecord, best_hw: HardwareConfig, ctx: res.RowContext
) -> tuple[dict[str, Any], list[pd.DataFrame]]:
    """The baselines again at the best trial's hardware (a co-design run): the summary block
    ``at_best_hardware`` and the rows (source ``<name>@best_hw``, ``hw_role`` ``best``).

    The block holds the hardware's label, the rows, the oracle's certificate and
    ``best_over_optimum``: the best trial's value of the oracle's objective over the optimum
    at the same hardware (1.0 for a bilevel trial, whose plan is that optimum). When the best
    trial kept the base hardware, the base rows stand (``same_as_base``).
    """
    from fusiontune.search.optimize import OBJECTIVE_METRIC

    label = hardware_label(best_hw, problem, "best")
    if best.hw_hash == problem.base_hw.hash:
        return {"hardware": label, "same_as_base": True}, []
    records, info = run_baselines(problem, best_hw)
    frames = [
        res.trials_frame([r], ctx, source=name + AT_BEST_HW, hw_role="best")
        for name, r in records.items()
    ]
    block: dict[str, Any] = {"hardware": label, "baselines": baseline_rows(records, label)}
    block.update(info)
    oracle = records.get("oracle")
    metric = OBJECTIVE_METRIC.get(str(info.get("oracle_objective")))
    if oracle is not None and oracle.state == "COMPLETE" and metric is not None:
        optimum = float(oracle.metrics[metric])
        block["best_over_optimum"] = float(best.metrics[metric]) / optimum if optimum else 1.0
    return block, frames


def hardware_label(hw: HardwareConfig, problem: Problem, role: str) -> dict[str, Any]:
    """Which hardware a baseline row used: ``role`` (``base`` or ``best``), name, hash and the
    searched knobs' values."""
    data = hw.to_dict()
    return {
        "role": role,
        "name": hw.name,
        "hw_hash": hw.hash,
        "knobs": {k.name: data[k.name] for k in problem.space.knobs},
    }


def baseline_rows(records: Mapping[str, TrialRecord], hardware: dict[str, Any]) -> dict[str, Any]:
    """Baseline rows for summary.json: metrics, values, error, and the hardware they used."""
    metrics = ("traffic_bytes", "energy_pj", "cycles")
    return {
        name: {m: r.metrics.get(m) for m in metrics}
        | {"values": list(r.values), "hardware": hardware}
        | ({"error": r.error} if r.state != "COMPLETE" else {})
        for name, r in records.items()
    }


__all__ = [
    "AT_BEST_HW",
    "BASELINES",
    "EXHAUSTIVE_MAX_PLANS",
    "baseline_rows",
    "baselines_at_best",
    "evaluate_at",
    "hardware_label",
    "run_baselines",
]
