"""Scale: plan evaluations per second serially and with 1 and 2 Ray workers, the per-task
overheads, and a projection of a 64-core cluster run.

Measured on resnet50 (224x224, 175 ops) with random legal plans (``random_plan``):

1. **backend throughput**: the same plans pushed through the search's own backends
   (``SerialBackend``; ``RayBackend`` with 1 and 2 workers, 4 plans per task, 2 batches in
   flight per worker), two passes: ``cold`` (every worker's group-cost cache empty) and
   ``warm`` (the same plans again);
2. **overheads**: ``ray.init``, shipping the graph (``ray.put``), the round trip of an
   empty Ray task, and the in-process cost of one plan evaluation (cold and warm);
3. **driver cost**: wall seconds per trial of a full serial search (Optuna ask, plan repair,
   evaluation, tell) for the random and tpe samplers, minus the evaluation itself;
4. **per-task overheads** of a co-design task on one Ray worker: empty-task round trip, a
   fresh worker's warm-up (imports, graph fetch), the same designs solved in-process and in
   the worker (cold and warm caches), a task's latency beyond its solve, pickled sizes;
5. **bilevel co-design** on resnet18 (``search_spaces/codesign.yaml``'s knobs and budget, the
   random sampler so every backend evaluates the same designs): the trial phase of the search
   serially and on Ray with 1 and 2 workers; each trial is an exact plan solve on a worker.
   Reported per run: the machine's load average before and after, the driver's CPU per trial,
   the workers' utilisation; in the notes the 2-worker / 1-worker speed-up and why.

The projections for 64 cores combine them (``results/exp_scale.md``). Writes
``results/exp_scale.csv``, ``results/exp_scale.md`` and ``results/exp_scale.json``. Usage:
``python experiments/exp_scale.py [--plans 400] [--model resnet50] [--codesign-trials 100]``;
``--only codesign`` (repeatable: ``throughput``, ``driver``, ``tasks``, ``codesign``) re-runs
one section and keeps the others' numbers from ``results/exp_scale.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from exp_common import print_rows, write_outputs

from fusiontune.frontend.zoo import build_zoo
from fusiontune.ir.graph import Graph
from fusiontune.planner.baselines import random_plan
from fusiontune.search.backends import (
    DEFAULT_PLANS_PER_TASK,
    Backend,
    EvalTask,
    RayBackend,
    SerialBackend,
)
from fusiontune.sim.cost import clear_cache
from fusiontune.sim.hardware import HardwareConfig, load_hardware

MODEL = "resnet50"
PRESET = "isaac_reram_flat"
DEFAULT_PLANS = 400
NOOP_TASKS = 400  # empty Ray tasks timed for the per-task overhead
DRIVER_TRIALS = 150  # trials of the serial searches timed for the driver cost
DRIVER_SAMPLERS = ("random", "tpe")
CLUSTER_CORES = 64  # the projection's target
CODESIGN_MODEL = "resnet18"
CODESIGN_TRIALS = 100  # search_spaces/codesign.yaml's budget
CODESIGN_KNOBS = {
    "buffer_bytes": {"low": 65536, "high": 11010048, "log": True},
    "n_crossbars": {"low": 1024, "high": 16128, "log": True},
    "adc_bits": {"choices": [6, 7, 8]},
    "dram_kind": {"choices": ["HBM2", "GDDR5"]},
}
"""search_spaces/codesign.yaml's knobs (without its area cap, so every design is solved)."""


@dataclass(frozen=True)
class Pass:
    """Throughput of one backend over one pass of the plans."""

    backend: str
    workers: int
    cache: str
    plans: int
    seconds: float

    @property
    def evals_per_s(self) -> float:
        return self.plans / self.seconds


def _drain(backend: Backend, tasks: Sequence[EvalTask]) -> float:
    """Push every task through ``backend`` (driver-style submit/wait loop); wall seconds."""
    per = backend.plans_per_task
    batches = [list(tasks[i : i + per]) for i in range(0, len(tasks), per)]
    start = time.perf_counter()
    done = 0
    while batches or done < len(tasks):
        while batches and backend.has_room():
            backend.submit(batches.pop(0))
        outcomes = backend.wait()
        if not outcomes and not batches:
            break
        failed = [o.error for o in outcomes if o.failed]
        if failed:
            raise RuntimeError(f"evaluation failed: {failed[0]}")
        done += len(outcomes)
    return time.perf_counter() - start


def backend_passes(
    graph: Graph, tasks: Sequence[EvalTask], workers: Sequence[int]
) -> tuple[list[Pass], dict[str, float]]:
    """Cold and warm passes for the serial backend and a Ray backend per worker count;
    also the Ray start-up times (``ray.init`` + ``ray.put`` of the graph) per worker count."""
    passes: list[Pass] = []
    startup: dict[str, float] = {}
    clear_cache()
    serial = SerialBackend()
    serial.start(graph)
    for cache in ("cold", "warm"):
        passes.append(Pass("serial", 1, cache, len(tasks), _drain(serial, tasks)))
    serial.close()
    for w in workers:
        ray_backend = RayBackend(workers=w)
        start = time.perf_counter()
        _start_local_ray(w)
        ray_backend.start(graph)
        startup[f"ray_start_{w}w_s"] = time.perf_counter() - start
        try:
            for cache in ("cold", "warm"):
                seconds = _drain(ray_backend, tasks)
                passes.append(Pass("ray", w, cache, len(tasks), seconds))
            startup[f"noop_task_{w}w_s"] = noop_task_seconds(w)
        finally:
            ray_backend.close()
            _stop_ray()
    return passes, startup


def _start_local_ray(workers: int) -> None:
    """A private local Ray with ``workers`` CPUs. ``address="local"`` makes sure a cluster
    someone else started on this machine (``ray start``) is never joined; the backend then
    finds Ray running and uses it as is."""
    import ray

    from fusiontune.search.backends import _runtime_env

    ray.init(
        address="local",
        num_cpus=workers,
        include_dashboard=False,
        runtime_env=_runtime_env(),
        log_to_driver=False,
    )


def _stop_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


def _noop(tasks: list[Any]) -> list[Any]:
    return tasks


def noop_task_seconds(workers: int, n_tasks: int = NOOP_TASKS) -> float:
    """Wall seconds per empty Ray task with ``workers`` in use (Ray must be running):
    ``2 x workers`` in flight, as the backend keeps them."""
    import ray

    remote = ray.remote(num_cpus=1, max_retries=0)(_noop)
    ray.get([remote.remote([]) for _ in range(workers)])  # warm the worker processes
    in_flight: list[Any] = []
    start = time.perf_counter()
    submitted = 0
    while submitted < n_tasks or in_flight:
        while submitted < n_tasks and len(in_flight) < 2 * workers:
            in_flight.append(remote.remote([]))
            submitted += 1
        _, in_flight = ray.wait(in_flight, num_returns=1)
    return (time.perf_counter() - start) / n_tasks


def driver_seconds(graph: Graph, sampler: str, trials: int = DRIVER_TRIALS) -> dict[str, Any]:
    """Per-trial wall time of a full serial search, and the part spent evaluating."""
    from fusiontune.search.api import search
    from fusiontune.search.space import parse_space

    space = parse_space(
        {"hardware": PRESET, "objective": "traffic", "sampler": sampler, "trials": trials},
        source="exp_scale",
    )
    records: list[Any] = []
    clear_cache()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        search(graph, space=space, seed=0, out=out, baselines=False, on_record=records.append)
    wall = time.perf_counter() - start
    eval_s = sum(r.eval_s for r in records if r.duplicate_of < 0)
    return {
        "sampler": sampler,
        "trials": len(records),
        "wall_s": wall,
        "s_per_trial": wall / len(records),
        "eval_s_per_trial": eval_s / len(records),
        "driver_s_per_trial": (wall - eval_s) / len(records),
    }


def codesign_run(
    graph: Graph, backend: str, workers: int, trials: int = CODESIGN_TRIALS
) -> dict[str, Any]:
    """One bilevel co-design search's trial phase (from its first ask to its last tell) on
    ``backend`` with ``workers``; Ray start-up and the baselines are outside the timing.

    Besides wall time: the driver process's CPU seconds per trial over the same phase (Optuna,
    SQLite, Ray submit/wait/get: what one driver pays per trial, whatever the worker count),
    the workers' utilisation (evaluation seconds / (workers x wall)) and the 1-minute load
    average before and after (the machine may be shared)."""
    from fusiontune.search.api import search
    from fusiontune.search.space import parse_space

    space = parse_space(
        {
            "hardware": PRESET,
            "objective": "energy",
            "sampler": "random",
            "trials": trials,
            "knobs": CODESIGN_KNOBS,
        },
        source="exp_scale",
    )
    records: list[Any] = []
    marks: dict[str, float] = {}

    cpu: dict[int, list[float]] = {}  # worker pid -> CPU seconds at its first and last tell
    solving: dict[int, list[float]] = {}  # worker pid -> its evaluations' seconds

    def on_record(record: Any) -> None:
        records.append(record)
        marks["end"] = time.perf_counter()
        marks.setdefault("first", marks["end"])
        marks["end_cpu"] = time.process_time()
        if backend != "serial" and record.duplicate_of < 0 and ":" in record.worker:
            pid = int(record.worker.rsplit(":", 1)[1])
            seconds = process_cpu_s(pid)
            if seconds is not None:
                cpu.setdefault(pid, [seconds, seconds])[1] = seconds
                solving.setdefault(pid, []).append(record.eval_s)

    def on_start(n: int) -> None:
        marks.setdefault("start", time.perf_counter())
        marks.setdefault("start_cpu", time.process_time())

    clear_cache()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as out:
        search(
            graph,
            space=space,
            seed=0,
            out=out,
            backend=backend,
            workers=workers,
            baselines=False,
            on_record=on_record,
            on_start=on_start,
        )
    wall = marks["end"] - marks["start"]
    evaluated = [r for r in records if r.duplicate_of < 0 and r.state == "COMPLETE"]
    eval_s = sum(r.eval_s for r in evaluated)
    per_worker: dict[str, float] = {}
    for r in evaluated:
        per_worker[r.worker] = per_worker.get(r.worker, 0.0) + r.eval_s
    # CPU a worker got while solving, over the wall its solves took (its first solve, which
    # the first reading closes, left out): 1.0 = a core of its own; less = it waited for one
    worker_cpu = sum(last - first for first, last in cpu.values())
    worker_wall = sum(sum(times[1:]) for times in solving.values())
    # the serial driver evaluates in its own process: its CPU is not the driver's alone
    driver_cpu = marks["end_cpu"] - marks["start_cpu"] if backend != "serial" else math.nan
    return {
        "backend": backend,
        "workers": workers,
        "trials": len(records),
        "evaluations": len(evaluated),
        "wall_s": wall,
        "trials_per_s": len(records) / wall,
        # from the first told trial to the last: without the workers' start-up and first solve
        "steady_trials_per_s": (len(records) - 1) / max(marks["end"] - marks["first"], 1e-9),
        "eval_s_total": eval_s,
        "eval_s_per_evaluation": eval_s / max(1, len(evaluated)),
        "other_s_per_trial": (wall - eval_s / workers) / len(records),
        "driver_cpu_s_per_trial": driver_cpu / len(records),
        "utilisation": eval_s / (workers * wall),
        "worker_cpu_share": worker_cpu / worker_wall if worker_wall > 0 else math.nan,
        "busiest_worker_share": max(per_worker.values()) / eval_s if eval_s else float("nan"),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used (``/proc``; ``None`` when gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


CODESIGN_REPEATS = 3
"""Rounds of (serial, Ray 1 worker, Ray 2 workers): the machine is shared, so the speed-up
is reported per round (same-run ratios) and as their median."""


def codesign_rows(
    graph: Graph, trials: int = CODESIGN_TRIALS, repeats: int = CODESIGN_REPEATS
) -> list[dict[str, Any]]:
    """Serial, Ray 1 worker and Ray 2 workers on the same designs, ``repeats`` rounds."""
    return [
        {"round": i, **codesign_run(graph, backend, workers, trials)}
        for i in range(repeats)
        for backend, workers in (("serial", 1), ("ray", 1), ("ray", 2))
    ]


SPEEDUP_TARGET = 1.8
"""Issue 14's target for Ray 2 vs 1 workers on the co-design trial phase."""


def codesign_notes(rows: Sequence[dict[str, Any]]) -> list[str]:
    """What the co-design runs say, every number from ``rows`` (medians over rounds).

    The 2-vs-1-worker speed-up factors exactly as ``wall1 / wall2 = 2 x (U2 / U1) x (E1 /
    E2)``: U the workers' utilisation (evaluation seconds / (workers x wall)), E the total
    evaluation seconds; so the notes say whether idle workers or slower solves cost the rest.
    """
    rounds: dict[int, dict[tuple[str, int], dict[str, Any]]] = {}
    for r in rows:
        rounds.setdefault(r.get("round", 0), {})[(r["backend"], r["workers"])] = r
    speedups = [by[("ray", 1)]["wall_s"] / by[("ray", 2)]["wall_s"] for by in rounds.values()]
    speedup = float(np.median(speedups))
    steady = [
        by[("ray", 2)].get("steady_trials_per_s", np.nan)
        / by[("ray", 1)].get("steady_trials_per_s", np.nan)
        for by in rounds.values()
    ]
    steady_speedup = float(np.median(steady))

    def median(backend: str, workers: int, key: str) -> float:
        return float(np.median([by[(backend, workers)].get(key, np.nan) for by in rounds.values()]))

    serial = rows[0]
    util1, util2 = median("ray", 1, "utilisation"), median("ray", 2, "utilisation")
    solve1 = median("ray", 1, "eval_s_per_evaluation")
    solve2 = median("ray", 2, "eval_s_per_evaluation")
    solve_serial = median("serial", 1, "eval_s_per_evaluation")
    loads = [r[k] for r in rows for k in ("load_before", "load_after") if k in r]

    def verdict(value: float) -> str:
        met = value >= SPEEDUP_TARGET
        return f"{'meets' if met else 'below'} the {SPEEDUP_TARGET}x target"

    lines = [
        f"Bilevel co-design of {CODESIGN_MODEL} ({serial['trials']} trials, "
        f"{serial['evaluations']} distinct designs, each an exact plan solve of "
        f"{1e3 * solve_serial:.0f} ms serially, median): "
        f"Ray with 2 workers runs the trials {speedup:.2f}x as fast as with 1 worker (median "
        f"of {len(speedups)} rounds: {', '.join(f'{s:.2f}' for s in speedups)}; "
        f"{median('ray', 2, 'trials_per_s'):.2f} vs {median('ray', 1, 'trials_per_s'):.2f} "
        f"trials/s, serial {median('serial', 1, 'trials_per_s'):.2f}): {verdict(speedup)}. "
        f"In steady state (first told trial to last: without the workers' start-up and first "
        f"solve) {steady_speedup:.2f}x ({', '.join(f'{s:.2f}' for s in steady)}): "
        f"{verdict(steady_speedup)}.",
        f"Why (medians; speed-up = 2 x (U2/U1) x (E1/E2)): the workers are busy "
        f"{100 * util1:.0f}% of the trial phase with 1 worker and {100 * util2:.0f}% with 2 "
        f"(the rest: the driver between trials, the last long solves of the phase on one "
        f"worker — the busiest of the 2 did {100 * median('ray', 2, 'busiest_worker_share'):.0f}"
        f"% of the solving); one solve takes {1e3 * solve1:.0f} ms with 1 worker, "
        f"{1e3 * solve2:.0f} ms with 2 and {1e3 * solve_serial:.0f} ms in-process, so "
        f"2 x {util2 / util1:.2f} x {solve1 / solve2:.2f} = "
        f"{2 * (util2 / util1) * (solve1 / solve2):.2f}. While solving, a worker process was "
        f"on a CPU {100 * median('ray', 1, 'worker_cpu_share'):.0f}% of the time with 1 worker "
        f"and {100 * median('ray', 2, 'worker_cpu_share'):.0f}% with 2 (/proc CPU time over "
        "solve wall time): a solve slower with 2 workers is time spent waiting for a core "
        "(the driver, Ray's own processes and other jobs share the 2 cores), not Ray work.",
    ]
    if loads:
        lines.append(
            f"Machine load (1-minute average) during the rounds: {min(loads):.1f} to "
            f"{max(loads):.1f} on {os.cpu_count()} cores (before/after each run in the table); "
            "above ~1 the workers compete with other jobs and the speed-up is indicative. "
            "Re-run just this section on a quiet machine: "
            "`python experiments/exp_scale.py --only codesign`."
        )
    driver_cpu = median("ray", 2, "driver_cpu_s_per_trial")
    if math.isfinite(driver_cpu) and driver_cpu > 0:
        knee = solve1 / driver_cpu
        rate = min(CLUSTER_CORES / solve1, 1 / driver_cpu)
        lines.append(
            f"Driver: {1e3 * driver_cpu:.1f} ms of driver CPU per trial with 2 Ray workers "
            f"({1e3 * median('ray', 1, 'driver_cpu_s_per_trial'):.1f} ms with 1; the serial "
            f"driver, wall minus evaluation: {1e3 * median('serial', 1, 'other_s_per_trial'):.1f}"
            " ms): Optuna ask/tell, SQLite, Ray submit/wait/get. On 2 cores the driver's share "
            f"of a core while 2 workers solve, 2 x {1e3 * driver_cpu:.0f} / "
            f"{1e3 * solve1:.0f} ms = {2 * driver_cpu / solve1:.2f}, bounds the speed-up by "
            f"2 / (1 + {driver_cpu / solve1:.2f}) = {2 / (1 + driver_cpu / solve1):.2f} before "
            "Ray's own processes and other jobs. One driver feeds at most "
            f"{1 / driver_cpu:.0f} trials/s. 64-core projection for this study: workers keep "
            f"scaling while workers / solve time < driver rate, i.e. up to {solve1:.3f} s / "
            f"{driver_cpu:.4f} s = {knee:.0f} workers; 64 cores would give min(64 / "
            f"{solve1:.3f} s, {1 / driver_cpu:.0f}/s) = {rate:.0f} trials/s "
            f"({rate * solve1:.0f} workers busy), {rate / median('ray', 1, 'trials_per_s'):.0f}x "
            "one worker. Past the knee, more cores pay only for more studies (one driver each) "
            "or a cheaper driver."
        )
    return lines


TASK_DESIGNS = 12
"""Co-design points solved in-process and on one Ray worker for the per-task table."""


def _solve_designs(graph_box: list[Any], tasks: list[EvalTask]) -> list[Any]:
    """Ray task body (pickled by value): solve ``tasks`` on this worker; returns each
    evaluation's seconds and its outcome's pickled bytes."""
    from ray import cloudpickle

    from fusiontune.search.backends import _worker_graph, evaluate_one

    graph = _worker_graph(graph_box[0])
    out = []
    for task in tasks:
        outcome = evaluate_one(graph, task)
        out.append((outcome.eval_s, len(cloudpickle.dumps(outcome))))
    return out


def codesign_tasks(graph: Graph, n: int) -> list[EvalTask]:
    """``n`` co-design points (the random sampler's first, seed 0) as solve tasks."""
    import optuna

    from fusiontune.search.problem import Problem
    from fusiontune.search.space import parse_space

    space = parse_space(
        {"hardware": PRESET, "objective": "energy", "knobs": CODESIGN_KNOBS}, source="exp_scale"
    )
    problem = Problem.build(graph, space, load_hardware(PRESET))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    return [
        EvalTask(i, None, problem.decode_hardware(study.ask()), problem.solve_spec)
        for i in range(n)
    ]


def task_overheads(graph: Graph, n_designs: int = TASK_DESIGNS) -> list[dict[str, Any]]:
    """The per-task table: what one co-design task costs through Ray beyond its solve.

    On a private local Ray with 1 CPU: the round trip of an empty task; the warm-up of a fresh
    worker (imports, graph fetch, static tables); ``n_designs`` designs each solved in-process
    and in the worker, alternating (new to both processes, then once more); the wall of one
    solve task at a time minus its solve (submit, schedule, return); the driver's CPU per
    task; the pickled sizes of a task and of its outcome.
    """
    import ray
    from ray import cloudpickle

    from fusiontune.search.backends import _remote_warm_up, evaluate_one

    tasks = codesign_tasks(graph, n_designs)
    rows: list[dict[str, Any]] = []

    def row(quantity: str, value: float, unit: str, note: str = "") -> None:
        rows.append({"quantity": quantity, "value": value, "unit": unit, "note": note})

    load_before = os.getloadavg()[0]
    _start_local_ray(1)
    try:
        graph_ref = ray.put(graph)
        warm = ray.remote(num_cpus=1, max_retries=0)(_remote_warm_up)
        start = time.perf_counter()
        report = ray.get(warm.remote([graph_ref]))
        row(
            "worker warm-up, wall (first task of a fresh worker)",
            1e3 * (time.perf_counter() - start),
            "ms",
            "RayBackend.start runs it per slot",
        )
        row("  of which imports (optimizer, simulator)", 1e3 * report["import_s"], "ms")
        row(
            "  of which graph fetch + deserialise",
            1e3 * report["fetch_s"],
            "ms",
            f"{len(cloudpickle.dumps(graph)) / 1e6:.1f} MB pickled (weights included)",
        )
        row("  of which static tables", 1e3 * report["tables_s"], "ms")
        threads = ray.get(ray.remote(num_cpus=1)(_thread_env).remote())
        for name, setting in threads.items():
            number = float(setting) if setting and setting.isdigit() else math.nan
            row(f"{name} in a Ray worker", number, "", setting or "unset")
        row("empty task round trip (2 in flight)", 1e3 * noop_task_seconds(1), "ms")
        cpu0, n0 = time.process_time(), NOOP_TASKS
        noop_task_seconds(1, n0)
        row("driver CPU per empty task", 1e3 * (time.process_time() - cpu0) / n0, "ms")
        solve = ray.remote(num_cpus=1, max_retries=0)(_solve_designs)
        ratios: dict[str, list[float]] = {"new": [], "again": []}
        local: dict[str, list[float]] = {"new": [], "again": []}
        remote: dict[str, list[float]] = {"new": [], "again": []}
        sizes: list[int] = []
        # design by design, in-process then in the worker, so a pair shares the machine's
        # load; both processes have solved the same designs before (same cache state)
        for task in tasks:
            for cache in ("new", "again"):
                here = evaluate_one(graph, task).eval_s
                ((there, size),) = ray.get(solve.remote([graph_ref], [task]))
                local[cache].append(here)
                remote[cache].append(there)
                sizes.append(size)
                ratios[cache].append(there / here)
        for cache, label in (("new", "a design new to the process"), ("again", "solved again")):
            row(
                f"one solve in-process, {label} (median)",
                1e3 * float(np.median(local[cache])),
                "ms",
            )
            row(
                f"one solve in a Ray worker, {label} (median)",
                1e3 * float(np.median(remote[cache])),
                "ms",
            )
            row(
                f"worker / in-process solve seconds, {label} (median of {len(tasks)} pairs)",
                float(np.median(ratios[cache])),
                "x",
                f"quartiles {np.percentile(ratios[cache], 25):.2f}-"
                f"{np.percentile(ratios[cache], 75):.2f}",
            )
        one = ray.remote(num_cpus=1, max_retries=0)(_remote_evaluate_probe)
        gaps = []
        for task in tasks:  # warm designs, one task in flight: the pure latency overhead
            start = time.perf_counter()
            (outcome,) = ray.get(one.remote([graph_ref], [task]))
            gaps.append(time.perf_counter() - start - outcome.eval_s)
        row(
            "solve task wall minus its solve, 1 in flight (median)",
            1e3 * float(np.median(gaps)),
            "ms",
            "submit, schedule, args and outcome transfer",
        )
        row(
            "task arguments pickled (one co-design task)",
            float(len(cloudpickle.dumps(tasks[0]))),
            "bytes",
        )
        row("outcome pickled (solved plan + metrics, median)", float(np.median(sizes)), "bytes")
    finally:
        _stop_ray()
    row("load average (1 min) before / after", load_before, "", f"{os.getloadavg()[0]:.2f}")
    return rows


def task_notes(rows: Sequence[dict[str, Any]]) -> list[str]:
    """What the per-task table says (every number from ``rows``)."""
    value = {r["quantity"]: r for r in rows}

    def find(prefix: str) -> dict[str, Any]:
        return next(r for q, r in value.items() if q.startswith(prefix))

    warm, fetch = find("worker warm-up"), find("  of which graph fetch")
    new, again = (
        find("worker / in-process solve seconds, a design new"),
        find("worker / in-process solve seconds, solved again"),
    )
    latency, rtt = find("solve task wall minus"), find("empty task round trip")
    nice = value.get("niceness in a Ray worker", {}).get("note", "(not measured)")
    return [
        f"Why a solve looked slower through Ray: not the transfer (a task's latency beyond its "
        f"solve is {latency['value']:.1f} ms, an empty task {rtt['value']:.1f} ms, the outcome "
        f"{find('outcome pickled')['value'] / 1e3:.1f} KB; the graph is fetched once per worker "
        f"in {fetch['value']:.0f} ms, zero-copy) and not cold caches: the same designs solved "
        f"in-process and in the worker, pair by pair, take {new['value']:.2f}x as long in the "
        f"worker for a design new to both and {again['value']:.2f}x solved again (quartiles "
        f"{new['note'][10:]} and {again['note'][10:]}), with the same caches on both sides. "
        f"A Ray worker runs at niceness {nice} (Ray's default; the driver at 0). A fresh worker's "
        f"first task costs {warm['value'] / 1e3:.1f} s (process start, imports, static tables); "
        "it used to fall inside the trial phase and the first solve, and now overlaps the "
        f"study's set-up (RayBackend.start). A worker runs with OMP_NUM_THREADS="
        f"{value.get('OMP_NUM_THREADS in a Ray worker', {}).get('note', 'not measured')} (Ray "
        "sets it from the task's CPUs) and the solver is pure Python: no numeric library "
        "oversubscribes the cores.",
    ]


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
"""Thread counts numeric libraries read (OpenBLAS falls back to OMP_NUM_THREADS)."""


def _thread_env() -> dict[str, str | None]:
    """Ray task body: the thread settings and the niceness a worker process runs with."""
    return {
        **{name: os.environ.get(name) for name in THREAD_VARIABLES},
        "niceness": str(os.nice(0)),
    }


def _remote_evaluate_probe(graph_box: list[Any], tasks: list[EvalTask]) -> list[Any]:
    """The backend's own task body (imported on the worker)."""
    from fusiontune.search.backends import _remote_evaluate

    return _remote_evaluate(graph_box, tasks)


def make_tasks(graph: Graph, hw: HardwareConfig, n_plans: int, seed: int = 0) -> list[EvalTask]:
    """``n_plans`` random legal plans as evaluation tasks."""
    rng = np.random.default_rng(seed)
    return [EvalTask(i, random_plan(graph, rng), hw) for i in range(n_plans)]


def throughput_rows(passes: Sequence[Pass]) -> list[dict[str, Any]]:
    """One row per pass, with the speed-up over the serial pass of the same cache state."""
    serial = {p.cache: p.evals_per_s for p in passes if p.backend == "serial"}
    return [
        {
            "backend": p.backend,
            "workers": p.workers,
            "cache": p.cache,
            "plans": p.plans,
            "seconds": p.seconds,
            "evals_per_s": p.evals_per_s,
            "ms_per_eval": 1e3 * p.seconds / p.plans,
            "vs_serial": p.evals_per_s / serial[p.cache],
        }
        for p in passes
    ]


def projection(
    rows: Sequence[dict[str, Any]], overheads: dict[str, float], drivers: Sequence[dict]
) -> list[str]:
    """The written 64-core projection, every number taken from the measurements."""
    serial = {r["cache"]: r for r in rows if r["backend"] == "serial"}
    cold_ms, warm_ms = serial["cold"]["ms_per_eval"], serial["warm"]["ms_per_eval"]
    task_ms = 1e3 * overheads.get("noop_task_1w_s", float("nan"))
    start_s = overheads.get("ray_start_2w_s", float("nan"))
    lines = [
        f"Serial evaluation costs {cold_ms:.2f} ms per plan with a cold group-cost cache and "
        f"{warm_ms:.3f} ms warm (resnet50, 175 ops). An empty Ray task round trip costs "
        f"{task_ms:.2f} ms here; Ray start-up (ray.init + ray.put of the graph) "
        f"{start_s:.1f} s.",
    ]
    for d in drivers:
        lines.append(
            f"Full serial search with the {d['sampler']} sampler: {d['s_per_trial'] * 1e3:.1f} "
            f"ms per trial, of which {d['eval_s_per_trial'] * 1e3:.2f} ms evaluation and "
            f"{d['driver_s_per_trial'] * 1e3:.1f} ms driver (Optuna ask/tell, plan repair, "
            f"records): at most {1 / d['driver_s_per_trial']:.0f} trials/s from one driver, "
            "whatever the number of workers."
        )
    ray1 = {r["cache"]: r for r in rows if r["backend"] == "ray" and r["workers"] == 1}
    if ray1:
        extra_ms = ray1["warm"]["ms_per_eval"] - warm_ms
        why = (
            "more than the empty-task round trip divided by "
            f"{DEFAULT_PLANS_PER_TASK} plans per task, because every outcome carries one dict "
            "per group of the plan, pickled back to the driver"
            if extra_ms > task_ms / DEFAULT_PLANS_PER_TASK
            else "within the noise of this shared machine: the worker simulates while the "
            "driver asks and tells, which the serial backend does one after the other"
        )
        lines.append(
            f"Through Ray each plan costs {ray1['cold']['ms_per_eval']:.2f} ms cold and "
            f"{ray1['warm']['ms_per_eval']:.2f} ms warm on one worker: {extra_ms:+.2f} ms per "
            f"plan against in-process, {why}."
        )
        for cache in ("cold", "warm"):
            cap = CLUSTER_CORES / (ray1[cache]["ms_per_eval"] / 1e3)
            lines.append(
                f"64-core evaluation capacity ({cache} caches, per-plan cost as measured "
                f"through Ray here): 64 / {ray1[cache]['ms_per_eval']:.2f} ms = "
                f"{cap:,.0f} evaluations/s."
            )
    slowest = max(drivers, key=lambda d: d["driver_s_per_trial"]) if drivers else None
    ray2_warm = next(
        (r["vs_serial"] for r in rows if r["backend"] == "ray" and r["workers"] == 2
         and r["cache"] == "warm"),
        float("nan"),
    )  # fmt: skip
    if slowest is not None:
        lines.append(
            "Projection: one study on 64 cores is bound by its single Optuna driver, not by "
            f"evaluation (the driver's {1 / slowest['driver_s_per_trial']:.0f}-"
            f"{max(1 / d['driver_s_per_trial'] for d in drivers):.0f} trials/s is far below the "
            "cluster's evaluation capacity), so more workers do not speed one analytic study "
            f"up; here Ray with 2 workers evaluates warm plans at {ray2_warm:.2f}x the serial "
            "rate (shipping a plan and its per-group outcome costs about as much as "
            "evaluating it, and the 2 cores are shared with the driver). A 64-core run pays "
            "off as (a) many "
            "independent studies at once (one per model x hardware preset or co-design "
            "point, each with its own driver: near-linear, 64 x "
            f"{1 / slowest['s_per_trial']:.0f}-{max(1 / d['s_per_trial'] for d in drivers):.0f}"
            " = "
            f"{CLUSTER_CORES / slowest['s_per_trial']:,.0f}-"
            f"{max(CLUSTER_CORES / d['s_per_trial'] for d in drivers):,.0f} trials/s in total, "
            "minus Ray start-up once), or (b) expensive evaluations (verify/execute with the "
            "numeric kernels, seconds per plan) where the per-task overhead is negligible "
            "and throughput scales with workers until the driver's rate above is reached."
        )
    return lines


SECTIONS = ("throughput", "driver", "tasks", "codesign")
"""Sections of the experiment; ``--only`` re-runs some and keeps the others' stored numbers."""

RESULTS_JSON = Path(__file__).resolve().parents[1] / "results" / "exp_scale.json"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--plans", type=int, default=DEFAULT_PLANS)
    parser.add_argument("--codesign-trials", type=int, default=CODESIGN_TRIALS)
    parser.add_argument("--codesign-repeats", type=int, default=CODESIGN_REPEATS)
    parser.add_argument(
        "--only",
        action="append",
        choices=SECTIONS,
        help="run only this section (repeatable); the others keep the numbers stored in "
        "results/exp_scale.json",
    )
    args = parser.parse_args(argv)
    sections = args.only or list(SECTIONS)
    data: dict[str, Any] = {}
    if args.only and RESULTS_JSON.exists():
        data = json.loads(RESULTS_JSON.read_text())
    graph = build_zoo(args.model)
    if "throughput" in sections:
        tasks = make_tasks(graph, load_hardware(PRESET), args.plans)
        passes, overheads = backend_passes(graph, tasks, workers=(1, 2))
        data["throughput"], data["overheads"] = throughput_rows(passes), overheads
        data["throughput_setup"] = {"model": graph.name, "ops": len(graph.ops), "plans": args.plans}
    if "driver" in sections:
        data["drivers"] = [driver_seconds(graph, s) for s in DRIVER_SAMPLERS]
    codesign_graph = build_zoo(CODESIGN_MODEL)
    if "tasks" in sections:
        data["tasks"] = task_overheads(codesign_graph)
    if "codesign" in sections:
        data["codesign"] = codesign_rows(
            codesign_graph, args.codesign_trials, args.codesign_repeats
        )
    write_results(data)


def write_results(data: dict[str, Any]) -> None:
    """Print and write ``results/exp_scale.{md,csv,json}`` from every section in ``data``."""
    rows, overheads = data.get("throughput", []), data.get("overheads", {})
    drivers, codesign = data.get("drivers", []), data.get("codesign", [])
    overhead_rows = [{"quantity": k, "seconds": v} for k, v in overheads.items()]
    tables = [
        ("Evaluation throughput", rows),
        ("Overheads", overhead_rows),
        ("Driver cost per trial", drivers),
        ("Per-task overheads of a co-design task (resnet18, 1 Ray worker)", data.get("tasks", [])),
        ("Bilevel co-design trial phase (resnet18)", codesign),
    ]
    tables = [(title, t) for title, t in tables if t]
    for title, table in tables:
        print_rows(title, table)
    text: list[str] = []
    if rows and drivers:
        text += projection(rows, overheads, drivers)
    if data.get("tasks"):
        text += task_notes(data["tasks"])
    if codesign:
        text += codesign_notes(codesign)
    for line in text:
        print("-", line)
    setup = data.get("throughput_setup", {"model": MODEL, "ops": 175, "plans": DEFAULT_PLANS})
    notes = [
        f"Model {setup['model']} at 224x224 ({setup['ops']} ops), preset {PRESET}, "
        f"{setup['plans']} random legal plans; Ray backends with {DEFAULT_PLANS_PER_TASK} plans "
        "per task and 2 batches in flight per worker, local Ray on this 2-core machine shared "
        "with other jobs (numbers are indicative). cold: every process's group-cost cache "
        "starts empty; warm: the same plans a second time.",
        *text,
    ]
    write_outputs(
        "scale", "Scale: evaluations per second, overheads and a 64-core projection", tables, notes
    )
    data["notes"] = notes
    RESULTS_JSON.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
