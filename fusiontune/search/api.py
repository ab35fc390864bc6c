"""``fusiontune.search()``: the whole search as one call (DESIGN §8-§9).

Stages, in order:

1. load the model and the search space; build the hardware and the decision variables
   (bilevel co-design when the space has knobs and an objective the exact solver covers:
   trials propose hardware, workers solve each design's plan exactly);
2. open (or resume) the Optuna study;
3. run the trials on the chosen backend;
4. evaluate the baselines at the base hardware: unfused, greedy, exhaustive (small graphs)
   and the exact oracle (additive objectives); with hardware knobs, again at the best trial's
   hardware (every baseline row says which hardware it used);
5. build the ``trials`` and ``groups`` tables, optionally verify the best plan by execution;
6. write ``trials.parquet``, ``groups.parquet``, ``best_plan.json``, ``best_hardware.yaml``
   (the best trial's hardware, loadable with ``--hardware``), ``summary.json``.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fusiontune.errors import ConfigError, StorageError
from fusiontune.search import results as res
from fusiontune.search.backends import (
    DEFAULT_EVAL_TIMEOUT_S,
    EvalTask,
    check_workers,
    evaluate_batch,
    make_backend,
)
from fusiontune.search.background import BackendThread
from fusiontune.search.loop import best_record, make_record, run_trials
from fusiontune.search.problem import Problem
from fusiontune.search.results import SearchResult
from fusiontune.search.space import ADDITIVE_OBJECTIVES, SearchSpace, load_space, with_overrides
from fusiontune.search.storage import (
    FLUSH_INTERVAL_S,
    StudyStore,
    TrialRecord,
    deferred_interrupt,
    open_study,
    storage_for,
)

if TYPE_CHECKING:
    import pandas as pd

    from fusiontune.ir.graph import Graph
    from fusiontune.planner.plan import Plan, PlannerConfig
    from fusiontune.sim.hardware import HardwareConfig

EXHAUSTIVE_MAX_PLANS = 2000
"""Largest ``count_plans`` for which the exhaustive baseline enumerates every plan."""

BASELINES = ("unfused", "tvm_like", "greedy", "exhaustive", "oracle")

AT_BEST_HW = "@best_hw"
"""Suffix of the ``source`` of a baseline row computed at the best trial's hardware (co-design:
``oracle@best_hw``); rows without it used the base hardware (column ``hw_role``)."""


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
    hardware: str | Path | None = None,
    seed: int | None = 0,
    study: str | None = None,
    storage: str | None = None,
    out: str | Path = "results",
    resume: bool = False,
    verify_best: bool = False,
    export_best: bool = False,
    input_size: int | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    baselines: bool = True,
    start_from_greedy: bool = True,
    on_record: Callable[[TrialRecord], None] | None = None,
    on_start: Callable[[int], None] | None = None,
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
        hardware: base hardware, a preset name or YAML file such as a run's
            ``best_hardware.yaml`` (overrides the space's ``hardware``).
        seed: sampler seed (``None``: random).
        study: study name (default: the model's name).
        storage: Optuna storage URL or journal file (default: SQLite in the results folder).
        out: parent folder of the results folder ``<out>/<study>``.
        resume: continue an existing study up to ``trials``; trials left RUNNING are failed.
        verify_best: execute the best plan with the fused kernels and record the error.
        export_best: also write the best plan as a fused ONNX model, ``best_model.onnx``
            (:func:`~fusiontune.export.plan_export.export_plan`, on the best trial's hardware).
        input_size: input resolution for zoo models.
        input_shapes: static input shapes for an ONNX file with dynamic dimensions.
        baselines: evaluate unfused/greedy/exhaustive/oracle rows.
        start_from_greedy: make the greedy plan the first trial of a new study.
        on_record: called with each finished trial (progress bars).
        on_start: called once with the number of trials this run will evaluate.
        eval_timeout_s: per-plan evaluation limit; a plan past it fails (``None``: no limit).
        checkpoint_s: finished trials are stored and ``trials.parquet`` rewritten (atomically)
            at most this often, so a killed run loses at most this much work.

    Raises:
        SearchInterrupted: on Ctrl-C, after storing the finished trials.
        FusiontuneError: bad model, space, hardware, storage or results folder.
    """
    from fusiontune import __version__
    from fusiontune.sim.hardware import load_hardware

    check_workers(workers)
    _check_seed(seed)
    _check_seconds("eval_timeout_s", eval_timeout_s, allow_none=True)
    _check_seconds("checkpoint_s", checkpoint_s, allow_none=False)
    if study is not None:
        check_study_name(study)
    graph = _load_graph(graph_or_name, input_size, input_shapes)
    if verify_best:  # refuse before searching, not after
        from fusiontune.limits import check_graph

        check_graph(graph, "verifying the best plan (--verify-best)")
    spc = space if isinstance(space, SearchSpace) else load_space(space)
    spc = with_overrides(
        spc, objective=objective, sampler=sampler, trials=trials, hardware=hardware
    )
    hw = load_hardware(spc.hardware)
    problem = Problem.build(graph, spc, hw)
    name = study if study is not None else default_study_name(graph.name)
    out_dir = Path(out) / name
    created = _first_missing(out_dir)  # removed again if nothing gets stored
    _check_writable(out_dir)
    be = make_backend(
        backend or ("serial" if workers <= 1 and not address else "ray"),
        workers,
        address,
        # a bilevel evaluation is an exact solve (tens of ms to seconds): one per Ray task
        plans_per_task=1 if problem.bilevel else None,
        eval_timeout_s=eval_timeout_s,
    )
    # the backend (a local Ray: seconds) starts in the background while the study opens and
    # the start plans are computed, and closes in the background while the baselines run
    starter = BackendThread(be, graph)
    try:
        store = open_study(
            name,
            storage_for(storage, out_dir),
            problem,
            seed,
            resume,
            start_from_greedy,
            checkpoint_s,
            before_create=starter.begin,
            # more than one trial in flight: the sampler must know (TPE's constant liar)
            parallel=be.name != "serial" or be.plans_per_task > 1,
            before_write=starter.ready,  # a backend that fails leaves no study
        )
    except BaseException:
        starter.join()
        if created is not None:  # nothing was stored: leave no empty folder or database behind
            shutil.rmtree(created, ignore_errors=True)
        raise
    ctx = res.RowContext(name, graph.name, graph.structural_hash, spc.objective, __version__)
    rows: dict[tuple[int, str], dict[str, Any]] = {}  # table rows of stored trials
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}  # the evaluations' group metrics
    store.on_flush = lambda: _checkpoint(store, ctx, out_dir, rows)
    try:
        remaining = max(0, spc.trials - len(store.records()))
        if on_start is not None:
            on_start(remaining)
        try:
            if remaining:
                run_trials(store, problem, be, remaining, on_record, groups)
        finally:
            starter.release()  # closes in the background
        result = _finish(
            problem, store, ctx, out_dir, baselines, verify_best, export_best, rows, groups
        )
        starter.join()
        return result
    except KeyboardInterrupt:
        with deferred_interrupt(reraise=False):  # a second Ctrl-C must not cut the save short
            store.flush(final=True)
            _checkpoint(store, ctx, out_dir)  # the last flush may have been the interrupted one
        raise SearchInterrupted(out_dir, len(store.stored_records())) from None
    finally:
        store.close()
        starter.join()


MAX_SEED = 2**32 - 1
"""Largest sampler seed (numpy's RandomState, which Optuna's samplers use, takes 32 bits)."""

MAX_STUDY_NAME_CHARS = 100
"""Longest study name (a folder name under ``out``)."""

_STUDY_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def check_study_name(name: object) -> str:
    """A study name is one safe folder name: letters, digits, ``_ . + -``, not starting with a
    dot, at most :data:`MAX_STUDY_NAME_CHARS` characters (so ``<out>/<study>`` stays inside
    ``out``: no ``..``, ``/``, absolute paths, newlines or NUL).

    Raises:
        ConfigError: naming the value and what is allowed.
    """
    if (
        not isinstance(name, str)
        or not _STUDY_NAME.fullmatch(name)
        or len(name) > MAX_STUDY_NAME_CHARS
    ):
        raise ConfigError(
            f"study name {name!r} is not allowed; use 1 to {MAX_STUDY_NAME_CHARS} letters, "
            "digits and _ . + - (not starting with '.'): it names a folder under --out"
        )
    return name


def default_study_name(model: str) -> str:
    """The study name for a model: its name with every character a study name does not
    allow replaced by ``_``."""
    name = re.sub(r"[^A-Za-z0-9_.+-]", "_", model).lstrip(".") or "study"
    if not name[0].isalnum() and name[0] != "_":
        name = "_" + name
    return name[:MAX_STUDY_NAME_CHARS]


def _check_seed(seed: object) -> None:
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"seed = {seed!r} is out of range; allowed 0 .. {MAX_SEED} (or None)")


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (``None``: it exists)."""
    missing = None
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing = folder
    return missing


def _check_seconds(name: str, value: object, allow_none: bool) -> None:
    """A duration in seconds: a finite number (> 0 for a time limit, >= 0 for an interval)."""
    if value is None and allow_none:
        return
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value < 0
        or (allow_none and value == 0)
    ):
        allowed = "a number of seconds > 0, or None for no limit" if allow_none else "seconds >= 0"
        raise ConfigError(f"{name} = {value!r} is not allowed; give {allowed}")


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


def _checkpoint(
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


def _finish(
    problem: Problem,
    store: StudyStore,
    ctx: res.RowContext,
    out_dir: Path,
    baselines: bool,
    verify_best: bool,
    export_best: bool = False,
    rows: dict[tuple[int, str], dict[str, Any]] | None = None,
    groups: dict[tuple[str, str], list[dict[str, Any]]] | None = None,
) -> SearchResult:
    """Stages 4-6: baselines, tables, verification, files (``rows``: table rows the
    checkpoints built; ``groups``: group metrics the evaluations returned)."""
    graph, name = problem.graph, ctx.study
    store.flush(final=True)
    records = store.stored_records()  # every driver's trials, numbered by the storage
    best = best_record(records, problem)
    if best is None:
        from fusiontune.errors import FusiontuneError

        raise FusiontuneError(
            f"study '{name}': no trial completed; see the 'error' column of the trials"
        )
    frames = [res.trials_frame(records, ctx, row_cache=rows)]
    base_records: dict[str, TrialRecord] = {}
    oracle_info: dict[str, Any] = {}
    best_hw = res.hardware_from_json(best.hw_json)
    at_best: dict[str, Any] | None = None
    if baselines:
        base_records, oracle_info = _baselines(problem, problem.base_hw)
        frames += [
            res.trials_frame([r], ctx, source=k, hw_role="base") for k, r in base_records.items()
        ]
        if problem.space.knobs:
            at_best, best_frames = _baselines_at_best(problem, best, best_hw, ctx)
            frames += best_frames
    import pandas as pd

    trials_df = pd.concat(frames, ignore_index=True)
    best_plan = _plan_of(best.plan_json, graph, problem.config, f"trial {best.trial}'s plan")
    if verify_best:
        err, passed = _verify(graph, best_plan, res.hardware_from_json(best.hw_json))
        mask = (trials_df["plan_hash"] == best.plan_hash) & (trials_df["hw_hash"] == best.hw_hash)
        trials_df.loc[mask, "verify_error"] = err
        trials_df.loc[mask, "verify_passed"] = passed
        summary_extra = {"verify_best": {"max_rel_err": err, "passed": passed}}
    else:
        summary_extra = {}
    groups_df = _groups_table(graph, trials_df, name, groups, problem.config)
    summary = _summary(problem, ctx, best, base_records, oracle_info, out_dir, len(records))
    if at_best is not None:
        summary["at_best_hardware"] = at_best
    summary.update(summary_extra)
    summary["storage"] = store.spec.label
    if isinstance(store.spec.target, str) and store.spec.target.startswith("sqlite:"):
        summary["storage_url"] = store.spec.target  # other URLs may hold a password
    if problem.space.objective == "multi":
        summary["pareto_front"] = pareto_front(records, problem)
    res.write_text(best_hardware_yaml(best_hw, problem, best), out_dir / res.BEST_HARDWARE_FILE)
    summary["files"]["best_hardware"] = str(out_dir / res.BEST_HARDWARE_FILE)

    res.write_parquet(trials_df, out_dir / res.TRIALS_FILE)
    res.write_parquet(groups_df, out_dir / res.GROUPS_FILE)
    res.write_text(best_plan.to_json(indent=2) + "\n", out_dir / res.BEST_PLAN_FILE)
    if export_best:
        from fusiontune.export.plan_export import export_plan

        export_plan(graph, best_plan, out_dir / res.BEST_MODEL_FILE, hw=best_hw)
        summary["files"]["best_model"] = str(out_dir / res.BEST_MODEL_FILE)
    oracle = base_records.get("oracle")
    if oracle is not None and oracle.plan_json:
        optimal = (
            _plan_of(oracle.plan_json, graph, problem.config, "oracle plan").to_json(indent=2)
            + "\n"
        )
        res.write_text(optimal, out_dir / res.OPTIMAL_PLAN_FILE)
    res.write_text(json.dumps(summary, indent=2, default=str) + "\n", out_dir / res.SUMMARY_FILE)
    return SearchResult(best_plan, trials_df, groups_df, summary, out_dir)


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
        knobs = json.loads(r.hw_json) if r.hw_json else {}
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


def _load_graph(
    graph_or_name: Graph | str,
    input_size: int | None,
    input_shapes: Mapping[str, Sequence[int]] | None,
) -> Graph:
    if not isinstance(graph_or_name, (str, Path)):
        return graph_or_name
    from fusiontune.frontend.loader import load_model

    return load_model(str(graph_or_name), input_shapes, input_size=input_size)


def _plan_of(
    plan_json: str, graph: Graph, config: PlannerConfig | None, source: str = "stored plan"
) -> Plan:
    """A stored plan, through the one validating plan parser (``Plan.from_json``)."""
    from fusiontune.planner.plan import Plan

    return Plan.from_json(plan_json, graph, source, config)


def _evaluate(problem: Problem, plan: Plan, hw: HardwareConfig) -> TrialRecord:
    """A row for ``plan`` at ``hw``; an evaluation that raises is a failed row."""
    outcome = evaluate_batch(problem.graph, [EvalTask(-1, plan, hw)])[0]
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
    return _evaluate(problem, plan, hw)


def _baselines(
    problem: Problem, hw: HardwareConfig
) -> tuple[dict[str, TrialRecord], dict[str, Any]]:
    """Unfused, TVM-like, greedy, exhaustive best (small graphs) and the exact oracle, at
    ``hw`` (the base hardware, or the best trial's). A baseline that fails is recorded as
    failed; the others go on."""
    from fusiontune.planner.baselines import tvm_like_plan, unfused_plan
    from fusiontune.planner.counting import count_within
    from fusiontune.planner.enumerate import enumerate_plans
    from fusiontune.search.optimize import optimal_plan
    from fusiontune.sim.bounds import capacity_bound
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
            candidates = [_evaluate(problem, p, hw) for p in enumerate_plans(graph, config=cfg)]
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
        out["oracle"] = _evaluate(problem, oracle.plan, hw)
        info["optimum"] = oracle.value
    return out, info


def _baselines_at_best(
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

    label = _hardware_label(best_hw, problem, "best")
    if best.hw_hash == problem.base_hw.hash:
        return {"hardware": label, "same_as_base": True}, []
    records, info = _baselines(problem, best_hw)
    frames = [
        res.trials_frame([r], ctx, source=name + AT_BEST_HW, hw_role="best")
        for name, r in records.items()
    ]
    block: dict[str, Any] = {"hardware": label, "baselines": _baseline_rows(records, label)}
    block.update(info)
    oracle = records.get("oracle")
    metric = OBJECTIVE_METRIC.get(str(info.get("oracle_objective")))
    if oracle is not None and oracle.state == "COMPLETE" and metric is not None:
        optimum = float(oracle.metrics[metric])
        block["best_over_optimum"] = float(best.metrics[metric]) / optimum if optimum else 1.0
    return block, frames


def _hardware_label(hw: HardwareConfig, problem: Problem, role: str) -> dict[str, Any]:
    """Which hardware a baseline row used: ``role`` (``base`` or ``best``), name, hash and the
    searched knobs' values."""
    data = hw.to_dict()
    return {
        "role": role,
        "name": hw.name,
        "hw_hash": hw.hash,
        "knobs": {k.name: data[k.name] for k in problem.space.knobs},
    }


def _baseline_rows(records: Mapping[str, TrialRecord], hardware: dict[str, Any]) -> dict[str, Any]:
    """Baseline rows for summary.json: metrics, values, error, and the hardware they used."""
    metrics = ("traffic_bytes", "energy_pj", "cycles")
    return {
        name: {m: r.metrics.get(m) for m in metrics}
        | {"values": list(r.values), "hardware": hardware}
        | ({"error": r.error} if r.state != "COMPLETE" else {})
        for name, r in records.items()
    }


def _verify(graph: Graph, plan: Plan, hw: Any) -> tuple[float, bool]:
    """Execute the plan with the fused kernels: (max relative output error, passed), where
    passed means outputs within tolerance and counted traffic equal to the analytic one."""
    from fusiontune.sim.verify import verify

    report = verify(graph, plan, hw)
    return float(report.max_rel_err), bool(report.passed)


def _groups_table(
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
        plan = _plan_of(row.plan_json, graph, config, f"stored plan {row.plan_hash}")
        metrics = known.get((row.plan_hash, row.hw_hash))
        if metrics is None or len(metrics) != len(plan.groups):
            metrics = res.group_metrics_of(graph, plan, hw_cache[row.hw_hash])
        items.append((row.plan_hash, row.hw_hash, plan, metrics))
    return res.groups_frame(items, graph, study)


def _hardware_summary(record: TrialRecord, problem: Problem) -> dict[str, Any]:
    """The hardware of a trial for people: name, hash, area and the searched knobs' values."""
    data = json.loads(record.hw_json) if record.hw_json else {}
    return {
        "name": data.get("name"),
        "hw_hash": record.hw_hash,
        "area_mm2": record.metrics.get("area_mm2"),
        "knobs": {k.name: data.get(k.name) for k in problem.space.knobs},
    }


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
            "hardware": _hardware_summary(best, problem),
            **({"plan_certificate": best.solver} if best.solver else {}),
        },
        "baselines": _baseline_rows(base, _hardware_label(problem.base_hw, problem, "base")),
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


__all__ = ["SearchResult", "search"]
