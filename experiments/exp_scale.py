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
4. **bilevel co-design** on resnet18 (``search_spaces/codesign.yaml``'s knobs, the random
   sampler so every backend evaluates the same designs): the trial phase of the search
   serially and on Ray with 1 and 2 workers; each trial is an exact plan solve on a worker.
   Reported: the 2-worker / 1-worker speed-up, the driver's own time per trial (serial: wall
   minus evaluation) and the per-task overhead of Ray (1 worker: wall minus evaluation, per
   evaluation).

The projection for 64 cores combines them (``results/exp_scale.md``). Writes
``results/exp_scale.csv``, ``results/exp_scale.md`` and ``results/exp_scale.json``. Usage:
``python experiments/exp_scale.py [--plans 400] [--model resnet50] [--codesign-trials 60]``.
"""

from __future__ import annotations

import argparse
import json
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
PRESET = "isaac_reram"
DEFAULT_PLANS = 400
NOOP_TASKS = 400  # empty Ray tasks timed for the per-task overhead
DRIVER_TRIALS = 150  # trials of the serial searches timed for the driver cost
DRIVER_SAMPLERS = ("random", "tpe")
CLUSTER_CORES = 64  # the projection's target
CODESIGN_MODEL = "resnet18"
CODESIGN_TRIALS = 60
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
    ``backend`` with ``workers``; Ray start-up and the baselines are outside the timing."""
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

    def on_record(record: Any) -> None:
        records.append(record)
        marks["end"] = time.perf_counter()

    clear_cache()
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
            on_start=lambda n: marks.setdefault("start", time.perf_counter()),
        )
    wall = marks["end"] - marks["start"]
    evaluated = [r for r in records if r.duplicate_of < 0 and r.state == "COMPLETE"]
    eval_s = sum(r.eval_s for r in evaluated)
    return {
        "backend": backend,
        "workers": workers,
        "trials": len(records),
        "evaluations": len(evaluated),
        "wall_s": wall,
        "trials_per_s": len(records) / wall,
        "eval_s_total": eval_s,
        "eval_s_per_evaluation": eval_s / max(1, len(evaluated)),
        "other_s_per_trial": (wall - eval_s / workers) / len(records),
    }


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


def codesign_notes(rows: Sequence[dict[str, Any]]) -> list[str]:
    """What the co-design runs say, every number from ``rows`` (medians over rounds)."""
    rounds: dict[int, dict[tuple[str, int], dict[str, Any]]] = {}
    for r in rows:
        rounds.setdefault(r.get("round", 0), {})[(r["backend"], r["workers"])] = r
    speedups = [by[("ray", 1)]["wall_s"] / by[("ray", 2)]["wall_s"] for by in rounds.values()]
    speedup = float(np.median(speedups))

    def median(backend: str, workers: int, key: str) -> float:
        return float(np.median([by[(backend, workers)][key] for by in rounds.values()]))

    serial = rows[0]
    task_ms = 1e3 * float(
        np.median(
            [
                (by[("ray", 1)]["wall_s"] - by[("ray", 1)]["eval_s_total"])
                / max(1, by[("ray", 1)]["evaluations"])
                for by in rounds.values()
            ]
        )
    )
    return [
        f"Bilevel co-design of {CODESIGN_MODEL} ({serial['trials']} trials, "
        f"{serial['evaluations']} distinct designs, each an exact plan solve of "
        f"{1e3 * median('serial', 1, 'eval_s_per_evaluation'):.0f} ms serially, median): "
        f"Ray with 2 workers runs the trials {speedup:.2f}x as fast as with 1 worker (median "
        f"of {len(speedups)} rounds: {', '.join(f'{s:.2f}' for s in speedups)}; "
        f"{median('ray', 2, 'trials_per_s'):.2f} vs {median('ray', 1, 'trials_per_s'):.2f} "
        f"trials/s, serial {median('serial', 1, 'trials_per_s'):.2f}). With 2 workers one "
        f"solve takes {1e3 * median('ray', 2, 'eval_s_per_evaluation'):.0f} ms against "
        f"{1e3 * median('ray', 1, 'eval_s_per_evaluation'):.0f} ms with 1: the two workers "
        "do not get two cores of their own here.",
        f"Driver time per trial (serial: wall minus evaluation, median): "
        f"{1e3 * median('serial', 1, 'other_s_per_trial'):.1f} ms, mostly the SQLite "
        "checkpoints (a trial's record and knob params stored, trials.parquet rewritten). Per "
        "Ray task (1 worker: wall minus evaluation, per evaluation, driver included): "
        f"{task_ms:.1f} ms.",
        "The 2 cores of this machine are shared with the driver and with other jobs: the "
        "2-worker speed-up is bounded by the cores the workers actually get.",
    ]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--plans", type=int, default=DEFAULT_PLANS)
    parser.add_argument("--codesign-trials", type=int, default=CODESIGN_TRIALS)
    parser.add_argument("--codesign-repeats", type=int, default=CODESIGN_REPEATS)
    args = parser.parse_args()
    graph = build_zoo(args.model)
    hw = load_hardware(PRESET)
    tasks = make_tasks(graph, hw, args.plans)
    passes, overheads = backend_passes(graph, tasks, workers=(1, 2))
    rows = throughput_rows(passes)
    drivers = [driver_seconds(graph, s) for s in DRIVER_SAMPLERS]
    overhead_rows = [{"quantity": k, "seconds": v} for k, v in overheads.items()]
    print_rows("Evaluation throughput", rows)
    print_rows("Overheads", overhead_rows)
    print_rows("Driver cost per trial (serial search)", drivers)
    codesign = codesign_rows(build_zoo(CODESIGN_MODEL), args.codesign_trials, args.codesign_repeats)
    print_rows("Bilevel co-design trial phase", codesign)
    text = projection(rows, overheads, drivers) + codesign_notes(codesign)
    for line in text:
        print("-", line)
    notes = [
        f"Model {graph.name} at 224x224 ({len(graph.ops)} ops), preset {PRESET}, "
        f"{args.plans} random legal plans; Ray backends with {DEFAULT_PLANS_PER_TASK} plans "
        "per task and 2 batches in flight per worker, local Ray on this 2-core machine shared "
        "with other jobs (numbers are indicative). cold: every process's group-cost cache "
        "starts empty; warm: the same plans a second time.",
        *text,
    ]
    write_outputs(
        "scale",
        "Scale: evaluations per second, overheads and a 64-core projection",
        [
            ("Evaluation throughput", rows),
            ("Overheads", overhead_rows),
            ("Driver cost per trial", drivers),
            ("Bilevel co-design trial phase (resnet18)", codesign),
        ],
        notes,
    )
    data = {
        "throughput": rows,
        "overheads": overheads,
        "drivers": drivers,
        "codesign": codesign,
        "notes": notes,
    }
    path = Path(__file__).resolve().parents[1] / "results" / "exp_scale.json"
    path.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
