"""Driver-overhead benchmark -> results/bench_driver.{md,json}.

Where a trial's driver time goes (everything but the evaluation itself), measured on the
search as users run it, for this tree ("after") and for a base commit ("before", exported with
``git archive`` into a temporary folder and run with the same interpreter), case by case in
fresh processes, interleaved, so the ratios are same-run:

1. serial bilevel co-design of resnet18 (``search_spaces/codesign.yaml``, tpe);
2. plan-level search (default space) on resnet18 and resnet50 with tpe and random, serial;
3. the README main job, ``fusiontune search resnet18`` (300 trials, 2 local Ray workers,
   SQLite, baselines), phase by phase: interpreter and imports, graph load, problem, study
   open with the start plans, Ray start, trials, baselines and oracle, tables and files.

Each trial case runs twice: once with probes (exclusive time per part: the sampler's own
methods, the rest of Optuna's ask/suggest/tell, decode and plan repair, records, storage
writes, table checkpoints, evaluation) and once without (wall minus evaluation: the honest
driver time, no probe overhead). fusiontune's part of the driver is the driver less the
sampler and Optuna's bookkeeping.

Run from the repository root: ``python experiments/bench_driver.py [--quick] [--base REV]``
(``--base`` defaults to ``main``; about 6 minutes on 2 cores, ``--quick`` about 2).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"

TRIAL_CASES: dict[str, dict[str, Any]] = {
    "codesign_resnet18": {"model": "resnet18", "space": "search_spaces/codesign.yaml"},
    "plan_local_resnet18": {"model": "resnet18", "sampler": "local"},  # the default sampler
    "plan_tpe_resnet18": {"model": "resnet18", "sampler": "tpe"},
    "plan_random_resnet18": {"model": "resnet18", "sampler": "random"},
    "plan_tpe_resnet50": {"model": "resnet50", "sampler": "tpe"},
    "plan_random_resnet50": {"model": "resnet50", "sampler": "random"},
}
"""Serial searches whose driver time is broken down (baselines off)."""

TRIALS = {"codesign": 60, "plan": 150}
QUICK_TRIALS = {"codesign": 25, "plan": 60}

PARTS = ("sampler", "optuna", "decode", "records", "storage", "tables", "loop", "evaluation")
"""Exclusive-time labels of the probes (``loop``: run_trials' own lines)."""

PHASES = (
    ("imports", "interpreter start, imports, argparse (up to the model load)"),
    ("graph", "load the model"),
    ("problem", "decision variables (candidate edges)"),
    ("study", "open the study: SQLite, start plans (after: while Ray starts)"),
    ("ray_wait", "wait for local Ray (ray.init, graph put)"),
    ("trials", "300 trials"),
    ("ray_close", "last trial -> baselines start (before: Ray shutdown)"),
    ("baselines", "baselines, exact oracle, lower bounds"),
    ("files", "tables, groups, summary, files"),
    ("exit", "summary printed -> process exit (after: waits for Ray's shutdown)"),
)


# ---- probes (run in the child process) -----------------------------------------------------------
class Probes:
    """Exclusive wall time per label: a probed call pauses the label of its caller."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[list[Any]] = []  # [label, started]

    def wrap(self, owner: Any, attr: str, label: str) -> None:
        original = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr)
        if original is None:
            return
        probes = self

        def probed(*args: Any, **kwargs: Any) -> Any:
            now = time.perf_counter()
            if probes._stack:
                top = probes._stack[-1]
                probes.seconds[top[0]] += now - top[1]
            probes._stack.append([label, now])
            probes.calls[label] += 1
            try:
                return original(*args, **kwargs)
            finally:
                end = time.perf_counter()
                done = probes._stack.pop()
                probes.seconds[done[0]] += end - done[1]
                if probes._stack:
                    probes._stack[-1][1] = end

        setattr(owner, attr, probed)


def install_probes() -> Probes:
    import optuna

    from fusiontune.search import api, backends, loop, problem, samplers, store

    p = Probes()
    p.wrap(api, "run_trials", "loop")
    p.wrap(backends.SerialBackend, "wait", "evaluation")
    for name in ("ask", "tell"):
        p.wrap(optuna.study.Study, name, "optuna")
    for name in ("suggest_categorical", "suggest_int", "suggest_float", "set_user_attr"):
        p.wrap(optuna.trial.Trial, name, "optuna")
    p.wrap(optuna.trial.Trial, "set_constraint", "optuna")
    sampler_classes = [
        optuna.samplers.TPESampler,
        optuna.samplers.RandomSampler,
        optuna.samplers.NSGAIISampler,
        samplers.LocalSearchSampler,
    ]
    for cls in sampler_classes:
        for name in (
            "infer_relative_search_space",
            "sample_relative",
            "sample_independent",
            "before_trial",
            "after_trial",
        ):
            p.wrap(cls, name, "sampler")
    p.wrap(problem.Problem, "decode", "decode")
    p.wrap(problem.Problem, "decode_hardware", "decode")
    for name in ("make_record", "_duplicate"):
        p.wrap(loop, name, "records")
    p.wrap(store.StudyStore, "flush", "storage")
    p.wrap(api, "write_checkpoint", "tables")
    return p


def run_trial_case(case: str, trials: int, probed: bool) -> dict[str, Any]:
    """One serial search of ``case``: wall of its trial phase and the parts of it."""
    from fusiontune.frontend.loader import load_model
    from fusiontune.search.api import search
    from fusiontune.search.space import load_space, with_overrides

    spec = TRIAL_CASES[case]
    space = load_space(str(ROOT / spec["space"]) if "space" in spec else None)
    space = with_overrides(space, sampler=spec.get("sampler"), trials=trials)
    graph = load_model(spec["model"])
    import pandas  # noqa: F401  (imported once per process by the first table: not per trial)
    import pyarrow.parquet  # noqa: F401

    from fusiontune.search import api

    probes = install_probes() if probed else None
    records: list[Any] = []
    marks: dict[str, float] = {}
    run_trials = api.run_trials

    def timed_run_trials(*args: Any, **kwargs: Any) -> Any:
        try:
            return run_trials(*args, **kwargs)
        finally:
            marks["end"] = time.perf_counter()

    api.run_trials = timed_run_trials  # type: ignore[assignment]

    def on_start(n: int) -> None:
        marks["start"] = time.perf_counter()

    def on_record(record: Any) -> None:
        records.append(record)

    with tempfile.TemporaryDirectory() as out:
        search(
            graph,
            space=space,
            out=out,
            backend="serial",
            baselines=False,
            on_record=on_record,
            on_start=on_start,
        )
    end = marks["end"]
    eval_s = sum(r.eval_s for r in records if r.duplicate_of < 0)
    row: dict[str, Any] = {"trials": len(records)}
    if probes is None:
        # first ask .. run_trials returned (its last flush and table checkpoint included)
        row["wall_s"] = end - marks["start"]
        row["eval_s"] = eval_s
        row["driver_ms_per_trial"] = 1e3 * (row["wall_s"] - eval_s) / len(records)
        return row
    row.update({f"{k}_s": probes.seconds.get(k, 0.0) for k in PARTS})
    row["probe_calls"] = sum(probes.calls.values())
    return row


def run_main_job() -> dict[str, Any]:
    """``fusiontune search resnet18`` in this process, with phase marks (seconds since the
    process started importing fusiontune)."""
    start = time.perf_counter()
    marks: dict[str, list[float]] = defaultdict(list)

    def mark(owner: Any, attr: str, label: str) -> None:
        original = getattr(owner, attr)

        def marked(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter() - start
            try:
                return original(*args, **kwargs)
            finally:
                marks[label].append(t0)
                marks[label].append(time.perf_counter() - start)

        setattr(owner, attr, marked)

    from fusiontune.cli import main as cli_main

    marks["imports"] = [0.0, time.perf_counter() - start]
    from fusiontune.frontend import loader
    from fusiontune.search import api, backends, problem, store

    mark(loader, "load_model", "graph")
    mark(problem.Problem, "build", "problem")
    mark(api, "open_study", "study")
    mark(store.StudyStore, "flush", "flush")
    mark(backends.RayBackend, "start", "ray_start")
    try:
        from fusiontune.search import background
    except ImportError:  # before: Ray started in the main thread, inside open_study
        background = None
    if background is not None:
        mark(background.BackendThread, "ready", "ray_wait")
    mark(api, "run_trials", "trials")
    mark(api, "run_baselines", "baselines")
    mark(api, "_finish", "finish")
    with tempfile.TemporaryDirectory() as out:
        code = cli_main.main(["search", "resnet18", "--out", out])
    marks["end"] = [time.perf_counter() - start]
    if code:
        raise SystemExit(f"fusiontune search resnet18 exited {code}")
    return {k: v for k, v in marks.items()}


def child(args: argparse.Namespace) -> None:
    if args.child == "main_job":
        out = run_main_job()
        out["child_exit_s"] = time.perf_counter()
    else:
        out = run_trial_case(args.child, args.trials, args.probed)
    Path(args.json).write_text(json.dumps(out))


# ---- parent -----------------------------------------------------------------------------------
def export_base(rev: str, dest: Path) -> str:
    """``git archive`` of ``rev`` into ``dest``; returns the commit id."""
    commit = subprocess.run(
        ["git", "rev-parse", rev], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    archive = dest / "base.tar"
    subprocess.run(["git", "archive", "-o", str(archive), commit], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest / "src", filter="data")
    return commit


def run_child(root: Path, argv: list[str]) -> tuple[dict[str, Any], float]:
    """Run this script's child mode with ``root`` first on the path; (its JSON, wall s)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    env = dict(os.environ, PYTHONPATH=str(root), RAY_DEDUP_LOGS="0")
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *argv, "--json", str(out)],
        cwd=root,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - start
    data = json.loads(out.read_text())
    out.unlink()
    return data, wall


def main_job_phases(marks: dict[str, Any], wall_s: float) -> dict[str, float]:
    """Seconds per phase of the main job, along the main thread's timeline (marks from
    :func:`run_main_job`); ``ray_start_total`` is Ray's start-up wherever it ran."""

    def first(label: str) -> float:
        return float(marks[label][0])

    def last(label: str) -> float:
        return float(marks[label][-1])

    def span(label: str) -> float:
        return last(label) - first(label) if label in marks else 0.0

    # after: the study waits for Ray started in the background; before: Ray starts inside
    # open_study, on the main thread
    ray_wait = span("ray_wait") if "ray_wait" in marks else span("ray_start")
    return {
        "imports": wall_s - marks["end"][0] + first("graph"),  # interpreter, imports, argparse
        "graph": span("graph"),
        "problem": span("problem"),
        "study": span("study") - ray_wait,
        "ray_wait": ray_wait,
        "trials": span("trials"),
        "ray_close": first("finish") - last("trials"),
        "baselines": span("baselines"),
        "files": span("finish") - span("baselines"),
        "exit": marks["end"][0] - last("finish"),
        "total": wall_s,
        "ray_start_total": span("ray_start"),
    }


def summarise_case(probed: dict[str, Any], plain: dict[str, Any]) -> dict[str, Any]:
    """Per-trial milliseconds of each part, the driver, and fusiontune's part of it."""
    n = plain["trials"]
    ms = {k: 1e3 * probed[f"{k}_s"] / probed["trials"] for k in PARTS}
    driver = plain["driver_ms_per_trial"]
    # the probed parts, scaled to the unprobed driver time (probes add ~1 us a call)
    probed_driver = sum(v for k, v in ms.items() if k != "evaluation")
    scale = driver / probed_driver if probed_driver else 1.0
    row = {"trials": n, "driver_ms": driver, "eval_ms": 1e3 * plain["eval_s"] / n}
    for k in PARTS[:-1]:
        row[f"{k}_ms"] = ms[k] * scale
    row["fusiontune_ms"] = driver - row["sampler_ms"] - row["optuna_ms"]
    row["probe_calls_per_trial"] = probed["probe_calls"] / probed["trials"]
    return row


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def parent(args: argparse.Namespace) -> None:
    trials = QUICK_TRIALS if args.quick else TRIALS
    cases = list(TRIAL_CASES)
    with tempfile.TemporaryDirectory() as tmp:
        base_commit = export_base(args.base, Path(tmp))
        roots = {"before": Path(tmp) / "src", "after": ROOT}
        results: dict[str, dict[str, Any]] = {"before": {}, "after": {}}
        for case in cases:
            n = trials["codesign" if case.startswith("codesign") else "plan"]
            for version in ("before", "after"):  # interleaved: same machine state
                argv = ["--child", case, "--trials", str(n)]
                probed, _ = run_child(roots[version], [*argv, "--probed"])
                plain, _ = run_child(roots[version], argv)
                results[version][case] = summarise_case(probed, plain)
                print(version, case, json.dumps(results[version][case]), flush=True)
        for version in ("before", "after"):
            runs = []
            for _ in range(args.repeats):
                marks, wall = run_child(roots[version], ["--child", "main_job"])
                runs.append(main_job_phases(marks, wall))
                print(version, "main_job", json.dumps(runs[-1]), flush=True)
            results[version]["main_job"] = {
                k: statistics.median(r[k] for r in runs) for k in runs[0]
            }
    write_results(results, base_commit, args)


def write_results(results: dict[str, Any], base_commit: str, args: argparse.Namespace) -> None:
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    rows = []
    for case in TRIAL_CASES:
        for version in ("before", "after"):
            rows.append({"case": case, "version": version, **results[version][case]})
    ratio_rows = []
    for case in TRIAL_CASES:
        b, a = results["before"][case], results["after"][case]
        ratio_rows.append(
            {
                "case": case,
                "driver_ms_before": b["driver_ms"],
                "driver_ms_after": a["driver_ms"],
                "driver_after_over_before": a["driver_ms"] / b["driver_ms"],
                "fusiontune_ms_before": b["fusiontune_ms"],
                "fusiontune_ms_after": a["fusiontune_ms"],
                "sampler_ms_after": a["sampler_ms"],
                "optuna_ms_after": a["optuna_ms"],
            }
        )
    phase_rows = []
    for key, what in [*PHASES, ("total", "wall, end to end"), ("ray_start_total", "ray start")]:
        b = results["before"]["main_job"].get(key, 0.0)
        a = results["after"]["main_job"].get(key, 0.0)
        phase_rows.append(
            {
                "phase": key,
                "what": what,
                "before_s": b,
                "after_s": a,
                "after_over_before": a / b if b else float("nan"),
            }
        )
    parts = ["trials", "driver_ms", "eval_ms", *[f"{k}_ms" for k in PARTS[:-1]], "fusiontune_ms"]
    md = [
        "# Driver overhead per trial, and the README main job phase by phase",
        "",
        f"before: `{args.base}` ({base_commit[:10]}); after: this tree ({head}). Each case in a "
        "fresh process, before and after interleaved; serial backend, baselines off; "
        "milliseconds per trial.",
        "",
        "## Driver per trial: before vs after",
        "",
        table(ratio_rows, list(ratio_rows[0])),
        "## Where the driver's time goes (ms per trial)",
        "",
        table(rows, ["case", "version", *parts]),
        "`driver_ms`: wall of the trial phase (first ask to the last table write) minus "
        "evaluation, unprobed run. Parts from a probed run (exclusive time), scaled to it: "
        "`sampler` = the sampler's own methods (ask's sample_relative/independent, "
        "after_trial); `optuna` = the rest of ask/suggest/tell (Optuna's in-memory "
        "bookkeeping); `decode` = decode and plan repair; `records` = make_record; `storage` = "
        "flushes to the persistent study; `tables` = trials.parquet checkpoints; `loop` = "
        "run_trials' own lines. `fusiontune_ms` = driver - sampler - optuna.",
        "",
        "## `fusiontune search resnet18` (README main job), phase by phase (s, median)",
        "",
        table(phase_rows, list(phase_rows[0])),
    ]
    notes = results.get("notes", [])
    md += [*(f"- {n}" for n in notes)]
    md.append(
        f"\nMeasured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average at "
        f"the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (shared machine)."
    )
    (RESULTS / "bench_driver.md").write_text("\n".join(md) + "\n")
    (RESULTS / "bench_driver.json").write_text(
        json.dumps({"base": base_commit, "head": head, **results}, indent=2) + "\n"
    )
    print("\n".join(md))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer trials, one main-job run")
    ap.add_argument("--base", default="main", help="git revision measured as 'before'")
    ap.add_argument("--repeats", type=int, default=None, help="main-job runs per version")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--trials", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--probed", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    parent(args)


if __name__ == "__main__":
    main()

_ = Callable  # typing only
