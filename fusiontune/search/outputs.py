"""What a search writes and prints (DESIGN §9): the ``groups`` table, the ``trials.parquet``
checkpoint, ``summary.json``'s headline numbers, ``best_hardware.yaml``, the Pareto front of a
``multi`` study and the best plan's verification. Stored plans are read back only through
:func:`plan_of` (``Plan.from_json``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fusiontune.search import results as res
from fusiontune.search.baseline_runs import baseline_rows, hardware_label
from fusiontune.search.problem import Problem
from fusiontune.search.records import TrialRecord
from fusiontune.search.space import ADDITIVE_OBJECTIVES
from fusiontune.search.store import StudyStore
from fusiontune.sim.cost import data_moved

if TYPE_CHECKING:
    import pandas as pd

    from fusiontune.ir.graph import Graph
    from fusiontune.planner.plan import Plan, PlannerConfig


def write_checkpoint(
    store: StudyStore,
    ctx: res.RowContext,
    out_dir: Path,
    rows: dict[tuple[int, str], dict[str, Any]] | None = None,
) -> None:
    """Rewrite ``trials.parquet`` with the finished search trials (atomic replace): a run
    killed at any moment leaves a readable table of the work stored so far. ``rows``: the
    rows built by earlier checkpoints (each stored trial's row is built once)."""
    frame = res.trials_frame(store.stored_records(), ctx, row_cache=rows)
    res.write_parquet(frame, out_dir / res.TRIALS_FILE)


def best_hardware_yaml(hw: Any, problem: Problem, best: TrialRecord) -> str:
    """``best_hardware.yaml``: every field of the best trial's hardware, loadable with
    ``--hardware`` (:func:`~fusiontune.sim.hardware.load_hardware`; same hash)."""
    from fusiontune.fileio import dump_yaml

    data = hw.to_dict()
    knobs = {k.name: data[k.name] for k in problem.space.knobs}
    if knobs:  # not the base preset any more (the name is not part of the hash)
        data["name"] = f"{hw.name}_best"
    head = [
        f"# best hardware of study trial {best.trial} ({problem.graph.name}, "
        f"objective {problem.space.objective}); hw_hash {hw.hash}",
        f"# base: {problem.base_hw.name} ({problem.base_hw.hash}); searched knobs: "
        + (", ".join(f"{k}={v}" for k, v in knobs.items()) or "none"),
        "# load with: fusiontune search MODEL --hardware best_hardware.yaml, "
        "fusiontune simulate MODEL --hardware best_hardware.yaml --plan best_plan.json",
    ]
    return "\n".join(head) + "\n" + dump_yaml(data)


def pareto_front(records: Sequence[TrialRecord], problem: Problem) -> list[dict[str, Any]]:
    """The non-dominated feasible trials of a ``multi`` study (one per distinct design and
    plan), each with its values, hardware knobs and its plan's certificate."""
    from fusiontune.search.report import pareto_mask

    done = [
        r
        for r in records
        if r.state == "COMPLETE"
        and r.duplicate_of < 0
        and r.feasible
        and all(v <= 0 for v in r.constraints.values())
    ]
    if not done:
        return []
    keep = pareto_mask([list(r.values) for r in done])
    names = problem.objective_metrics
    out = []
    for r, kept in zip(done, keep):
        if not kept:
            continue
        knobs = res.hardware_from_json(r.hw_json).to_dict() if r.hw_json else {}
        out.append(
            {
                "trial": r.trial,
                **dict(zip(names, r.values)),
                "hardware": {k.name: knobs.get(k.name) for k in problem.space.knobs},
                "plan_hash": r.plan_hash,
                "plan_proven": r.solver.get("proven"),
            }
        )
    return sorted(out, key=lambda p: [p[n] for n in names])


def plan_of(
    plan_json: str, graph: Graph, config: PlannerConfig | None, source: str = "stored plan"
) -> Plan:
    """A stored plan, through the one validating plan parser (``Plan.from_json``)."""
    from fusiontune.planner.plan import Plan

    return Plan.from_json(plan_json, graph, source, config)


def verify_plan(graph: Graph, plan: Plan, hw: Any) -> tuple[float, bool]:
    """Execute the plan with the fused kernels: (max relative output error, passed), where
    passed means outputs within tolerance and counted traffic equal to the analytic one."""
    from fusiontune.sim.verify import verify

    report = verify(graph, plan, hw)
    return float(report.max_rel_err), bool(report.passed)


def groups_table(
    graph: Graph,
    trials_df: pd.DataFrame,
    study: str,
    known: Mapping[tuple[str, str], list[dict[str, Any]]] | None = None,
    config: PlannerConfig | None = None,
) -> pd.DataFrame:
    """Groups of every distinct completed (plan, hardware) in the trials table; ``known``:
    group metrics already evaluated this run, by (plan hash, hardware hash) (the others,
    from earlier runs or other drivers, are simulated again)."""
    known = known or {}
    done = trials_df[trials_df["state"] == "COMPLETE"].drop_duplicates(["plan_hash", "hw_hash"])
    hw_cache: dict[str, Any] = {}
    items = []
    for row in done.itertuples(index=False):
        if row.hw_hash not in hw_cache:
            hw_cache[row.hw_hash] = res.hardware_from_json(row.hw_json)
        plan = plan_of(row.plan_json, graph, config, f"stored plan {row.plan_hash}")
        metrics = known.get((row.plan_hash, row.hw_hash))
        if metrics is None or len(metrics) != len(plan.groups):
            metrics = res.group_metrics_of(graph, plan, hw_cache[row.hw_hash])
        items.append((row.plan_hash, row.hw_hash, plan, metrics))
    return res.groups_frame(items, graph, study)


def _hardware_summary(record: TrialRecord, problem: Problem) -> dict[str, Any]:
    """The hardware of a trial for people: name, hash, area and the searched knobs' values."""
    data = res.hardware_from_json(record.hw_json).to_dict() if record.hw_json else {}
    return {
        "name": data.get("name"),
        "hw_hash": record.hw_hash,
        "area_mm2": record.metrics.get("area_mm2"),
        "knobs": {k.name: data.get(k.name) for k in problem.space.knobs},
    }


def _headline(
    problem: Problem,
    best: TrialRecord,
    base: dict[str, TrialRecord],
    oracle_info: dict[str, Any],
    records: Sequence[TrialRecord],
) -> dict[str, Any]:
    """``chip`` (DRAM bytes, NoC byte-hops, energy, images/s of best, trial 0 and the
    baselines, and the bounds) and ``search_moved`` (trial 0 vs best, or why not)."""
    from fusiontune.search import headline

    hw = problem.base_hw
    trial_0 = next((r for r in records if r.trial == 0), None)
    bounds = headline.chip_bounds(problem, hw, oracle_info.get("lower_bounds") or {})
    chip = {
        "hardware": hw.name,
        "cores": hw.cores,
        "replication": problem.replication,
        "columns": list(headline.CHIP_COLUMNS),
        "rows": headline.chip_rows(best, trial_0, base),
        "bounds": bounds,
    }
    moved = headline.search_moved(problem, records, best, oracle_info, bounds) if records else {}
    return {"chip": chip, "search_moved": moved}


def build_summary(
    problem: Problem,
    ctx: res.RowContext,
    best: TrialRecord,
    base: dict[str, TrialRecord],
    oracle_info: dict[str, Any],
    out_dir: Path,
    n_trials: int,
    records: Sequence[TrialRecord] = (),
) -> dict[str, Any]:
    """Headline numbers written to summary.json and printed by the CLI; ``records``: the
    study's trials (for trial 0 and ``search_moved``, :mod:`fusiontune.search.headline`)."""
    metric = "traffic_bytes"
    summary: dict[str, Any] = {
        "study": ctx.study,
        "model": ctx.model,
        "graph_hash": ctx.graph_hash,
        "objective": ctx.objective,
        "sampler": problem.space.sampler,
        "n_trials": n_trials,
        "n_edges": len(problem.edges),
        "n_merge_choices": len(problem.merge_keys),
        "knobs": [k.name for k in problem.space.knobs],
        "search": "bilevel" if problem.bilevel else "plan",
        "objective_metrics": list(problem.objective_metrics),
        "hardware_base": {"name": problem.base_hw.name, "hw_hash": problem.base_hw.hash},
        "best": {
            "trial": best.trial,
            "plan_hash": best.plan_hash,
            "values": list(best.values),
            "feasible": best.feasible,
            **{
                k: best.metrics.get(k)
                for k in (metric, "energy_pj", "cycles", "area_mm2", "lower_bound_bytes")
            },
            "data_moved": data_moved(best.metrics),
            "hardware": _hardware_summary(best, problem),
            **({"plan_certificate": best.solver} if best.solver else {}),
        },
        "baselines": baseline_rows(base, hardware_label(problem.base_hw, problem, "base")),
        "fusiontune_version": ctx.version,
        "files": {
            "trials": str(out_dir / res.TRIALS_FILE),
            "groups": str(out_dir / res.GROUPS_FILE),
            "best_plan": str(out_dir / res.BEST_PLAN_FILE),
        },
    }
    summary.update(oracle_info)
    summary.update(_headline(problem, best, base, oracle_info, records))
    unfused = base.get("unfused")
    if unfused is not None and unfused.metrics.get(metric):
        saved = 1.0 - float(best.metrics[metric]) / float(unfused.metrics[metric])
        summary["traffic_saved_vs_unfused"] = saved
    oracle = base.get("oracle")
    oracle = oracle if oracle is not None and oracle.state == "COMPLETE" else None
    same_hw = not problem.space.knobs or best.hw_hash == problem.base_hw.hash
    if oracle is not None and same_hw and problem.space.objective in ADDITIVE_OBJECTIVES:
        optimum = oracle.values[0]
        summary["best_over_optimum"] = best.values[0] / optimum if optimum else 1.0
    elif oracle is not None and same_hw:
        optimum = float(oracle.metrics[metric])
        summary["best_traffic_over_optimum"] = (
            float(best.metrics[metric]) / optimum if optimum else 1.0
        )
    return summary


__all__ = [
    "best_hardware_yaml",
    "build_summary",
    "groups_table",
    "pareto_front",
    "plan_of",
    "verify_plan",
    "write_checkpoint",
]
