"""``fusiontune.search()``: the whole search as one call (DESIGN §8-§9).

Stages, in order:

1. load the model and the search space; build the hardware and the decision variables;
2. open (or resume) the Optuna study;
3. run the trials on the chosen backend;
4. evaluate the baselines at the base hardware: unfused, greedy, exhaustive (small graphs)
   and the exact oracle (additive objectives);
5. build the ``trials`` and ``groups`` tables, optionally verify the best plan by execution;
6. write ``trials.parquet``, ``groups.parquet``, ``best_plan.json``, ``summary.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fusiontune.errors import StorageError
from fusiontune.search import results as res
from fusiontune.search.backends import (
    DEFAULT_EVAL_TIMEOUT_S,
    EvalTask,
    evaluate_one,
    make_backend,
)
from fusiontune.search.driver import (
    FLUSH_INTERVAL_S,
    Problem,
    StudyStore,
    TrialRecord,
    _record,
    best_record,
    open_study,
    run_trials,
    storage_for,
)
from fusiontune.search.space import ADDITIVE_OBJECTIVES, SearchSpace, load_space, with_overrides

if TYPE_CHECKING:
    import pandas as pd

    from fusiontune.ir.graph import Graph
    from fusiontune.planner.plan import Plan

EXHAUSTIVE_MAX_PLANS = 2000
"""Largest ``count_plans`` for which the exhaustive baseline enumerates every plan."""

BASELINES = ("unfused", "tvm_like", "greedy", "exhaustive", "oracle")


class SearchInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`search`: the finished trials are stored; ``--resume`` continues.

    Attributes:
        out_dir: the results folder (``trials.parquet`` holds the finished trials).
        n_done: finished trials stored, earlier runs included.
    """

    def __init__(self, out_dir: Path, n_done: int) -> None:
        super().__init__(f"interrupted after {n_done} trials; saved in {out_dir}")
        self.out_dir = out_dir
        self.n_done = n_done


@dataclass(frozen=True, eq=False)
class SearchResult:
    """Outcome of a search.

    Attributes:
        best_plan: best feasible plan found by the search.
        trials: the ``trials`` table (search rows and baseline rows, column ``source``).
        groups: the ``groups`` table.
        summary: headline numbers (best, baselines, optimum, ratios, paths), as in summary.json.
        out_dir: folder holding the files.
    """

    best_plan: Plan
    trials: pd.DataFrame
    groups: pd.DataFrame
    summary: dict[str, Any]
    out_dir: Path

    @property
    def best_over_optimum(self) -> float | None:
        """Best found / proven optimum (1.0 = optimal); ``None`` without an oracle."""
        value = self.summary.get("best_over_optimum")
        return None if value is None else float(value)


def search(
    graph_or_name: Graph | str,
    *,
    space: SearchSpace | str | Path | None = None,
    trials: int | None = None,
    workers: int = 1,
    backend: str | None = None,
    address: str | None = None,
    sampler: str | None = None,
    objective: str | None = None,
    seed: int | None = 0,
    study: str | None = None,
    storage: str | None = None,
    out: str | Path = "results",
    resume: bool = False,
    verify_best: bool = False,
    input_size: int | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    baselines: bool = True,
    start_from_greedy: bool = True,
    on_record: Callable[[TrialRecord], None] | None = None,
    eval_timeout_s: float | None = DEFAULT_EVAL_TIMEOUT_S,
    checkpoint_s: float = FLUSH_INTERVAL_S,
) -> SearchResult:
    """Search fusion plans (and hardware knobs) for a model.

    Args:
        graph_or_name: a Graph, a zoo model name or an ONNX path.
        space: a SearchSpace, a YAML path, or ``None`` for the embedded default.
        trials: trial budget (overrides the space); with ``resume`` the total, not the extra.
        workers: evaluation processes (Ray CPUs).
        backend: ``ray`` or ``serial``; default ``serial`` for one worker, else ``ray``.
        address: join an existing Ray cluster.
        sampler: ``local`` (default), ``local-tpe``, ``tpe``, ``random``, ``nsga2`` or
            ``bruteforce`` (overrides the space).
        objective: ``traffic``, ``energy``, ``cycles``, ``edp`` or ``multi`` (overrides the space).
        seed: sampler seed (``None``: random).
        study: study name (default: the model's name).
        storage: Optuna storage URL or journal file (default: SQLite in the results folder).
        out: parent folder of the results folder ``<out>/<study>``.
        resume: continue an existing study up to ``trials``; trials left RUNNING are failed.
        verify_best: execute the best plan with the fused kernels and record the error.
        input_size: input resolution for zoo models.
        input_shapes: static input shapes for an ONNX file with dynamic dimensions.
        baselines: evaluate unfused/greedy/exhaustive/oracle rows.
        start_from_greedy: make the greedy plan the first trial of a new study.
        on_record: called with each finished trial (progress bars).
        eval_timeout_s: per-plan evaluation limit; a plan past it fails (``None``: no limit).
        checkpoint_s: finished trials are stored and ``trials.parquet`` rewritten (atomically)
            at most this often, so a killed run loses at most this much work.

    Raises:
        SearchInterrupted: on Ctrl-C, after storing the finished trials.
        FusiontuneError: bad model, space, hardware, storage or results folder.
    """
    from fusiontune import __version__
    from fusiontune.sim.hardware import load_hardware

    graph = _load_graph(graph_or_name, input_size, input_shapes)
    spc = space if isinstance(space, SearchSpace) else load_space(space)
    spc = with_overrides(spc, objective=objective, sampler=sampler, trials=trials)
    hw = load_hardware(spc.hardware)
    problem = Problem.build(graph, spc, hw)
    name = study or graph.name
    out_dir = Path(out) / name
    _check_writable(out_dir)
    store = open_study(
        name, storage_for(storage, out_dir), problem, seed, resume, start_from_greedy, checkpoint_s
    )
    ctx = res.RowContext(name, graph.name, graph.structural_hash, spc.objective, __version__)
    store.on_flush = lambda: _checkpoint(store, ctx, out_dir)

    done = len(store.records())
    remaining = max(0, spc.trials - done)
    try:
        if remaining:
            be = make_backend(
                backend or ("serial" if workers <= 1 and not address else "ray"),
                workers,
                address,
                eval_timeout_s=eval_timeout_s,
            )
            try:
                be.start(graph)
                run_trials(store, problem, be, remaining, on_record)
            finally:
                be.close()
        return _finish(problem, store, ctx, out_dir, baselines, verify_best)
    except KeyboardInterrupt:
        store.flush()
        _checkpoint(store, ctx, out_dir)  # the last flush may have been the interrupted one
        raise SearchInterrupted(out_dir, len(store.records())) from None


def _check_writable(out_dir: Path) -> None:
    """Create the results folder and prove a file can be written there, before any work."""
    import tempfile

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise StorageError(
            f"{out_dir}: cannot write results there ({reason}); choose a writable folder with --out"
        ) from exc


def _checkpoint(store: StudyStore, ctx: res.RowContext, out_dir: Path) -> None:
    """Rewrite ``trials.parquet`` with the finished search trials (atomic replace): a run
    killed at any moment leaves a readable table of the work stored so far."""
    res.write_parquet(res.trials_frame(store.records(), ctx), out_dir / res.TRIALS_FILE)


def _finish(
    problem: Problem,
    store: StudyStore,
    ctx: res.RowContext,
    out_dir: Path,
    baselines: bool,
    verify_best: bool,
) -> SearchResult:
    """Stages 4-6: baselines, tables, verification, files."""
    graph, name = problem.graph, ctx.study
    records = store.records()
    best = best_record(records, problem)
    if best is None:
        from fusiontune.errors import FusiontuneError

        raise FusiontuneError(
            f"study '{name}': no trial completed; see the 'error' column of the trials"
        )
    frames = [res.trials_frame(records, ctx)]
    base_records: dict[str, TrialRecord] = {}
    oracle_info: dict[str, Any] = {}
    if baselines:
        base_records, oracle_info = _baselines(problem)
        frames += [res.trials_frame([r], ctx, source=k) for k, r in base_records.items()]
    import pandas as pd

    trials_df = pd.concat(frames, ignore_index=True)
    best_plan = _plan_of(best.plan_json)
    if verify_best:
        err, passed = _verify(graph, best_plan, res.hardware_from_json(best.hw_json))
        mask = (trials_df["plan_hash"] == best.plan_hash) & (trials_df["hw_hash"] == best.hw_hash)
        trials_df.loc[mask, "verify_error"] = err
        trials_df.loc[mask, "verify_passed"] = passed
        summary_extra = {"verify_best": {"max_rel_err": err, "passed": passed}}
    else:
        summary_extra = {}
    groups_df = _groups_table(graph, trials_df, name)
    summary = _summary(problem, ctx, best, base_records, oracle_info, out_dir, len(records))
    summary.update(summary_extra)

    res.write_parquet(trials_df, out_dir / res.TRIALS_FILE)
    res.write_parquet(groups_df, out_dir / res.GROUPS_FILE)
    res.write_text(best_plan.to_json(indent=2) + "\n", out_dir / res.BEST_PLAN_FILE)
    oracle = base_records.get("oracle")
    if oracle is not None:
        optimal = _plan_of(oracle.plan_json).to_json(indent=2) + "\n"
        res.write_text(optimal, out_dir / res.OPTIMAL_PLAN_FILE)
    res.write_text(json.dumps(summary, indent=2, default=str) + "\n", out_dir / res.SUMMARY_FILE)
    return SearchResult(best_plan, trials_df, groups_df, summary, out_dir)


def _load_graph(
    graph_or_name: Graph | str,
    input_size: int | None,
    input_shapes: Mapping[str, Sequence[int]] | None,
) -> Graph:
    if not isinstance(graph_or_name, (str, Path)):
        return graph_or_name
    from fusiontune.frontend.loader import load_model

    return load_model(str(graph_or_name), input_shapes, input_size=input_size)


def _plan_of(plan_json: str) -> Plan:
    from fusiontune.planner.plan import Group, Mode, Plan

    data = json.loads(plan_json)
    return Plan(tuple(Group(tuple(g["ops"]), Mode(g["mode"])) for g in data["groups"]))


def _evaluate(problem: Problem, plan: Plan, number: int = -1) -> TrialRecord:
    outcome = evaluate_one(problem.graph, EvalTask(number, plan, problem.base_hw))
    return _record(problem, number, plan, problem.base_hw, outcome)


def _baselines(problem: Problem) -> tuple[dict[str, TrialRecord], dict[str, Any]]:
    """Unfused, TVM-like, greedy, exhaustive best (small graphs) and the exact oracle, at base
    hardware."""
    from fusiontune.planner.baselines import greedy_plan, tvm_like_plan, unfused_plan
    from fusiontune.planner.enumerate import count_plans, enumerate_plans
    from fusiontune.search.optimize import optimal_plan
    from fusiontune.sim.bounds import capacity_bound
    from fusiontune.sim.cost import lower_bound

    graph, cfg, hw = problem.graph, problem.config, problem.base_hw
    out = {
        "unfused": _evaluate(problem, unfused_plan(graph)),
        "tvm_like": _evaluate(problem, tvm_like_plan(graph, cfg)),
        "greedy": _evaluate(problem, greedy_plan(graph, cfg, hw)),
    }
    n_plans = count_plans(graph, cfg)
    info: dict[str, Any] = {"count_plans": int(n_plans)}
    if n_plans <= EXHAUSTIVE_MAX_PLANS:
        candidates = [_evaluate(problem, p) for p in enumerate_plans(graph, config=cfg)]
        best = best_record(candidates, problem)
        if best is not None:
            out["exhaustive"] = best
    objective = problem.space.objective
    oracle_objective = objective if objective in ADDITIVE_OBJECTIVES else "traffic"
    oracle = optimal_plan(graph, hw, oracle_objective, config=cfg)
    info["lower_bounds"] = {
        "compulsory_bytes": lower_bound(graph, hw),
        "capacity_bytes": capacity_bound(graph, hw),
    }
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
        out["oracle"] = _evaluate(problem, oracle.plan)
        info["optimum"] = oracle.value
    return out, info


def _verify(graph: Graph, plan: Plan, hw: Any) -> tuple[float, bool]:
    """Execute the plan with the fused kernels: (max relative output error, passed), where
    passed means outputs within tolerance and counted traffic equal to the analytic one."""
    from fusiontune.sim.verify import verify

    report = verify(graph, plan, hw)
    return float(report.max_rel_err), bool(report.passed)


def _groups_table(graph: Graph, trials_df: pd.DataFrame, study: str) -> pd.DataFrame:
    """Groups of every distinct completed (plan, hardware) in the trials table."""
    done = trials_df[trials_df["state"] == "COMPLETE"].drop_duplicates(["plan_hash", "hw_hash"])
    hw_cache: dict[str, Any] = {}
    items = []
    for row in done.itertuples(index=False):
        if row.hw_hash not in hw_cache:
            hw_cache[row.hw_hash] = res.hardware_from_json(row.hw_json)
        plan = _plan_of(row.plan_json)
        items.append(
            (
                row.plan_hash,
                row.hw_hash,
                plan,
                res.group_metrics_of(graph, plan, hw_cache[row.hw_hash]),
            )
        )
    return res.groups_frame(items, graph, study)


def _summary(
    problem: Problem,
    ctx: res.RowContext,
    best: TrialRecord,
    base: dict[str, TrialRecord],
    oracle_info: dict[str, Any],
    out_dir: Path,
    n_trials: int,
) -> dict[str, Any]:
    """Headline numbers written to summary.json and printed by the CLI."""
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
        "best": {
            "trial": best.trial,
            "plan_hash": best.plan_hash,
            "values": list(best.values),
            "feasible": best.feasible,
            **{
                k: best.metrics.get(k) for k in (metric, "energy_pj", "cycles", "lower_bound_bytes")
            },
        },
        "baselines": {
            k: {m: r.metrics.get(m) for m in (metric, "energy_pj", "cycles")}
            | {"values": list(r.values)}
            for k, r in base.items()
        },
        "fusiontune_version": ctx.version,
        "files": {
            "trials": str(out_dir / res.TRIALS_FILE),
            "groups": str(out_dir / res.GROUPS_FILE),
            "best_plan": str(out_dir / res.BEST_PLAN_FILE),
        },
    }
    summary.update(oracle_info)
    unfused = base.get("unfused")
    if unfused is not None and unfused.metrics.get(metric):
        saved = 1.0 - float(best.metrics[metric]) / float(unfused.metrics[metric])
        summary["traffic_saved_vs_unfused"] = saved
    oracle = base.get("oracle")
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


__all__ = ["SearchResult", "search"]
