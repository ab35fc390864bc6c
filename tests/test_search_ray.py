"""The Ray backend (one shared local Ray, fixture ``ray_local``): same answers as serial, and a
task whose worker dies becomes failed trials while the search goes on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fusiontune.search.api import search
from fusiontune.search.backends import EvalTask, RayBackend, SerialBackend

pytestmark = pytest.mark.ray


def test_ray_search_finds_the_serial_best(ray_local: None, tmp_path: Path) -> None:
    common = {"trials": 40, "seed": 0, "start_from_greedy": False}  # no head start
    serial = search("mlp_relu", backend="serial", out=tmp_path / "s", **common)  # type: ignore[arg-type]
    ray_result = search("mlp_relu", backend="ray", workers=2, out=tmp_path / "r", **common)  # type: ignore[arg-type]
    rows = ray_result.trials[ray_result.trials["source"] == "search"]
    assert len(rows) == 40 and rows["trial"].is_unique
    assert (rows["state"] == "COMPLETE").all()
    assert rows["worker"].nunique() >= 2  # cache + at least one Ray worker process
    assert ray_result.best_over_optimum == serial.best_over_optimum == 1.0
    assert ray_result.summary["best"]["values"] == serial.summary["best"]["values"]
    if (serial.trials["value_0"] == serial.summary["best"]["values"][0]).sum() == 1:
        assert ray_result.best_plan == serial.best_plan


class _KillsWorker:
    """Unpickling this on a Ray worker ends the worker process (a crashed evaluation)."""

    def __reduce__(self) -> tuple[object, tuple[int]]:
        return (os._exit, (1,))


def test_dead_task_becomes_failed_outcomes(ray_local: None) -> None:
    from fusiontune.frontend.loader import load_model
    from fusiontune.planner.baselines import unfused_plan
    from fusiontune.sim.hardware import HardwareConfig

    graph = load_model("mlp_relu")
    good = [EvalTask(0, unfused_plan(graph), HardwareConfig())]
    bad = [EvalTask(1, _KillsWorker(), HardwareConfig())]  # type: ignore[arg-type]
    backend = RayBackend(workers=2, plans_per_task=1)
    backend.start(graph)
    try:
        backend.submit(bad)
        backend.submit(good)
        outcomes = []
        while len(outcomes) < 2:
            outcomes += backend.wait()
    finally:
        backend.close()
    by_trial = {o.trial: o for o in outcomes}
    assert by_trial[1].failed and "ray task failed" in by_trial[1].error
    assert not by_trial[0].failed
    serial = SerialBackend()
    serial.start(graph)
    serial.submit(good)
    assert serial.wait()[0].metrics == by_trial[0].metrics


def test_search_joins_a_running_cluster_by_address(ray_local: None, tmp_path: Path) -> None:
    """``address`` (``--address``) joins the Ray that runs: its CPUs are the workers, every
    worker slot is warmed (graph fetched on the worker) and the trials run there; closing the
    backend leaves that Ray running (the search did not start it)."""
    import ray

    address = ray.get_runtime_context().gcs_address
    result = search("mlp_relu", address=address, trials=12, seed=0, out=tmp_path, study="joined")
    rows = result.trials[result.trials["source"] == "search"]
    assert len(rows) == 12 and (rows["state"] == "COMPLETE").all()
    workers = set(rows["worker"]) - {"cache"}
    assert workers and all(int(w.rsplit(":", 1)[1]) != os.getpid() for w in workers)
    assert ray.is_initialized()
    backend = RayBackend(address=address)
    from fusiontune.frontend.loader import load_model

    backend.start(load_model("mlp_relu"))
    try:
        assert backend.workers == int(ray.cluster_resources()["CPU"])
        reports = ray.get(backend.warm_ups)
        assert len(reports) == backend.workers
        assert all(r["fetch_s"] >= 0 and r["worker"].count(":") == 1 for r in reports)
    finally:
        backend.close()
    assert ray.is_initialized()
