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

This module is the orchestration; the baseline rows (stage 4) live in
:mod:`fusiontune.search.baseline_runs`, the tables and files (stages 5-6) in
:mod:`fusiontune.search.outputs`.
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
from fusiontune.search.backends import DEFAULT_EVAL_TIMEOUT_S, check_workers, make_backend
from fusiontune.search.background import BackendThread
from fusiontune.search.baseline_runs import (
    baselines_at_best,
    run_baselines,
)
from fusiontune.search.loop import best_record, run_trials
from fusiontune.search.outputs import (
    best_hardware_yaml,
    build_summary,
    groups_table,
    pareto_front,
    plan_of,
    verify_plan,
    write_checkpoint,
)
from fusiontune.search.problem import Problem
from fusiontune.search.records import TrialRecord
from fusiontune.search.results import SearchResult
from fusiontune.search.space import SearchSpace, load_space, with_overrides
from fusiontune.search.storage import open_study, storage_for
from fusiontune.search.store import (
    FLUSH_INTERVAL_S,
    StudyStore,
    StudyTakenError,
    deferred_interrupt,
)

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph


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
    model_bits: bool = False,
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
        model_bits: price a quantized model at its own bit widths (``at_model_bits`` on the
            base hardware, before any knob); the preset's widths otherwise.

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
    if model_bits:  # a quantized model priced at its own widths (sim/model_bits.py)
        from fusiontune.sim.model_bits import at_model_bits

        hw = at_model_bits(graph, hw)
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
    except BaseException as exc:
        starter.join()
        # nothing was stored: leave no empty folder or database behind, unless the folder is
        # another driver's (it took the study after this one found the folder missing)
        if created is not None and not isinstance(exc, StudyTakenError):
            shutil.rmtree(created, ignore_errors=True)
        raise
    ctx = res.RowContext(name, graph.name, graph.structural_hash, spc.objective, __version__)
    rows: dict[tuple[int, str], dict[str, Any]] = {}  # table rows of stored trials
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}  # the evaluations' group metrics
    store.on_flush = lambda: write_checkpoint(store, ctx, out_dir, rows)
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
            # the last flush may have been the interrupted one
            write_checkpoint(store, ctx, out_dir)
            n_done = len(store.stored_records())
            store.close()  # and not the close or the backend's shutdown (both idempotent)
            starter.join()
        raise SearchInterrupted(out_dir, n_done) from None
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
        base_records, oracle_info = run_baselines(problem, problem.base_hw)
        frames += [
            res.trials_frame([r], ctx, source=k, hw_role="base") for k, r in base_records.items()
        ]
        if problem.space.knobs:
            at_best, best_frames = baselines_at_best(problem, best, best_hw, ctx)
            frames += best_frames
    import pandas as pd

    trials_df = pd.concat(frames, ignore_index=True)
    best_plan = plan_of(best.plan_json, graph, problem.config, f"trial {best.trial}'s plan")
    if verify_best:
        err, passed = verify_plan(graph, best_plan, res.hardware_from_json(best.hw_json))
        mask = (trials_df["plan_hash"] == best.plan_hash) & (trials_df["hw_hash"] == best.hw_hash)
        trials_df.loc[mask, "verify_error"] = err
        trials_df.loc[mask, "verify_passed"] = passed
        summary_extra = {"verify_best": {"max_rel_err": err, "passed": passed}}
    else:
        summary_extra = {}
    groups_df = groups_table(graph, trials_df, name, groups, problem.config)
    summary = build_summary(
        problem, ctx, best, base_records, oracle_info, out_dir, len(records), records
    )
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
            plan_of(oracle.plan_json, graph, problem.config, "oracle plan").to_json(indent=2) + "\n"
        )
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


__all__ = [
    "MAX_SEED",
    "SearchInterrupted",
    "SearchResult",
    "check_study_name",
    "default_study_name",
    "search",
]
