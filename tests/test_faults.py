"""Fault injection (issue 7): failing, slow and killed evaluations, a killed or interrupted
driver, re-simulation of stored rows from the Parquet files alone, and safe loading.

Faults are real: evaluations raise, sleep or kill their own process (``SIGKILL``), and the
driver runs in a subprocess that receives ``SIGKILL`` or ``SIGINT``. Nothing is mocked.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from procs import POLL_S, REPO, SUBPROCESS_TIMEOUT_S, start_cli

from fusiontune.cli.main import main
from fusiontune.ir.graph import Graph
from fusiontune.search.backends import (
    WORKER_DIED,
    EvalOutcome,
    EvalTask,
    RayBackend,
    SerialBackend,
    evaluate_one,
)
from fusiontune.search.loop import run_trials
from fusiontune.search.problem import Problem
from fusiontune.search.records import TrialRecord
from fusiontune.search.results import read_parquet
from fusiontune.search.storage import open_study, storage_for

PACKAGE = REPO / "fusiontune"

CHECKPOINT_S = "0.2"
"""--checkpoint-every of the driver subprocesses: several checkpoints within a second."""


# ---- evaluators with injected faults (module-level so Ray can ship them) -------------------
INJECTED = "injected fault"


def _raise_every_fifth(graph: Graph, task: EvalTask) -> EvalOutcome:
    if task.trial % 5 == 2:
        raise RuntimeError(INJECTED)
    return evaluate_one(graph, task)


def _hang_every_fourth(graph: Graph, task: EvalTask) -> EvalOutcome:
    if task.trial % 4 == 1:
        time.sleep(60)  # far past the limit: only the alarm ends it
    return evaluate_one(graph, task)


def _kill_on_marker(folder: str, graph: Graph, task: EvalTask) -> EvalOutcome:
    """SIGKILL this worker process when ``<folder>/kill-<trial>`` exists, writing the PID to
    ``<folder>/pid-<trial>-<n>``; a ``once`` marker is removed first, so the retry succeeds."""
    marker = Path(folder) / f"kill-{task.trial}"
    if marker.exists():
        n = len(list(Path(folder).glob(f"pid-{task.trial}-*")))
        (Path(folder) / f"pid-{task.trial}-{n}").write_text(str(os.getpid()))
        if marker.read_text() == "once":
            marker.unlink()
        os.kill(os.getpid(), signal.SIGKILL)
    return evaluate_one(graph, task)


# ---- helpers ----------------------------------------------------------------------------------
def _problem(model: str = "mlp_relu") -> Problem:
    from fusiontune.frontend.loader import load_model
    from fusiontune.search.space import load_space, with_overrides
    from fusiontune.sim.hardware import load_hardware

    # the flat chip: these tests time evaluations against a 2 s limit, and a cold evaluation
    # on the 168 tiles (placement, network-aware replication) can take longer on a busy machine
    space = with_overrides(load_space(None), sampler="random", hardware="isaac_reram_flat")
    return Problem.build(load_model(model), space, load_hardware(space.hardware))


def _run(tmp: Path, backend: object, n_trials: int, model: str = "mlp_relu") -> list[TrialRecord]:
    problem = _problem(model)
    store = open_study("s", storage_for(None, tmp), problem, 0, False, start_from_greedy=False)
    backend.start(problem.graph)  # type: ignore[attr-defined]
    try:
        return run_trials(store, problem, backend, n_trials)  # type: ignore[arg-type]
    finally:
        backend.close()  # type: ignore[attr-defined]
        store.close()


def _evaluated(records: list[TrialRecord]) -> list[TrialRecord]:
    """Records actually evaluated (not answered from the cache of earlier trials)."""
    return [r for r in records if r.duplicate_of < 0]


# ---- evaluations that raise, hang or kill their worker ----------------------------------------
def test_evaluation_that_raises_fails_only_its_trial(tmp_path: Path) -> None:
    records = _run(tmp_path, SerialBackend(evaluate=_raise_every_fifth), 20)
    assert sorted(r.trial for r in records) == list(range(20))
    failed = [r for r in records if r.state == "FAIL"]
    assert failed and {r.trial % 5 for r in failed} == {2}
    assert all(r.error == f"RuntimeError: {INJECTED}" for r in failed)
    assert all(r.plan_json and r.hw_json for r in failed)  # the failed plan is recorded
    for r in _evaluated(records):
        assert (r.state == "FAIL") == (r.trial % 5 == 2)


def test_eval_timeout_fails_slow_trials(tmp_path: Path) -> None:
    limit_s = 2.0  # seconds: a normal evaluation stays far below it on a busy machine
    start = time.monotonic()
    records = _run(tmp_path, SerialBackend(eval_timeout_s=limit_s, evaluate=_hang_every_fourth), 8)
    assert time.monotonic() - start < 40  # cut short: two 60 s sleeps would take 120 s
    evaluated = _evaluated(records)
    slow = [r for r in evaluated if r.trial % 4 == 1]
    assert slow and all(r.state == "FAIL" for r in slow)
    assert all(
        r.error == f"evaluation timed out after {limit_s:g} s (--eval-timeout)" for r in slow
    )
    assert all(r.state == "COMPLETE" for r in evaluated if r.trial % 4 != 1)


@pytest.mark.ray
def test_killed_ray_worker_is_retried_and_the_search_finishes(
    ray_local: None, tmp_path: Path
) -> None:
    import ray
    from ray import cloudpickle  # Ray's own copy pickles task arguments

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests
    folder = tmp_path / "markers"
    folder.mkdir()
    (folder / "kill-3").write_text("once")  # dies once: the retry completes it
    (folder / "kill-6").write_text("always")  # dies on every attempt: fails after the retry
    evaluate = functools.partial(_kill_on_marker, str(folder))
    backend = RayBackend(workers=2, plans_per_task=2, evaluate=evaluate)
    records = _run(tmp_path, backend, 12, "lenet5")

    by_trial = {r.trial: r for r in records}
    assert sorted(by_trial) == list(range(12))
    assert all(r.duplicate_of < 0 for r in records)  # lenet5: 12 distinct random plans
    assert by_trial[3].state == "COMPLETE", by_trial[3].error
    assert by_trial[6].state == "FAIL" and by_trial[6].error.startswith(WORKER_DIED)
    assert all(r.state == "COMPLETE" for t, r in by_trial.items() if t != 6)
    pids = [int(p.read_text()) for p in sorted(folder.glob("pid-*"))]
    assert len(pids) == 3  # trial 3 once, trial 6 twice
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # the worker really died
    assert ray.get(ray.remote(lambda: 41 + 1).remote()) == 42  # shared Ray still usable


@pytest.mark.ray
def test_ray_eval_timeout_fails_only_the_slow_plan(ray_local: None, tmp_path: Path) -> None:
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    limit_s = 2.0
    start = time.monotonic()
    backend = RayBackend(2, None, 2, eval_timeout_s=limit_s, evaluate=_hang_every_fourth)
    records = _run(tmp_path, backend, 8, "lenet5")
    assert time.monotonic() - start < 30  # cut short in the worker, not by the 30 s grace
    by_trial = {r.trial: r for r in records}
    assert sorted(by_trial) == list(range(8))
    for trial, r in by_trial.items():
        assert (r.state == "FAIL") == (trial % 4 == 1), (trial, r.error)
    assert by_trial[1].error == f"evaluation timed out after {limit_s:g} s (--eval-timeout)"


# ---- the driver killed or interrupted ----------------------------------------------------------
def _driver_argv(out: Path, trials: int) -> list[str]:
    return [
        "search",
        "lenet5",
        "--backend",
        "serial",
        "--workers",
        "1",
        "--sampler",
        "random",
        "--trials",
        str(trials),
        "--checkpoint-every",
        CHECKPOINT_S,
        "--out",
        str(out),
    ]


def _wait_for_rows(proc: subprocess.Popen[str], table: Path, rows: int) -> list[int]:
    """Read the table as often as possible until it has ``rows`` rows and has been rewritten
    at least once; every read must succeed (atomic replace). Returns the row counts seen."""
    seen: list[int] = []
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        if table.exists():
            n = len(read_parquet(table))  # raises on a half-written file
            if not seen or seen[-1] != n:
                seen.append(n)
            if n >= rows and len(seen) >= 2:
                return seen
        time.sleep(POLL_S)
    proc.kill()
    raise AssertionError(f"driver ended or stalled before {rows} rows: {proc.communicate()}")


def _search_rows(table: Path) -> pd.DataFrame:
    frame = read_parquet(table)
    return frame[frame["source"] == "search"].set_index("trial").sort_index()


def _stored_rows(study_dir: Path) -> pd.DataFrame:
    """The finished trials in the study storage (SQLite under ``study_dir``), as table rows."""
    import optuna

    from fusiontune.search.records import study_records

    study = optuna.load_study(
        study_name=study_dir.name, storage=storage_for(None, study_dir).target
    )
    records = study_records(study, stored=True)
    frame = pd.DataFrame(
        {"trial": r.trial, "state": r.state, "plan_hash": r.plan_hash, "hw_hash": r.hw_hash}
        for r in records
    )
    return frame.set_index("trial").sort_index()


def test_sigkill_mid_search_then_resume_loses_nothing(tmp_path: Path) -> None:
    """What the design guarantees after a SIGKILL: the table is rewritten after each commit to
    the study storage, so the table left by the kill holds only stored trials (it may trail
    the storage by the flush the kill cut short), and ``--resume`` rebuilds it from the
    storage: every stored trial exactly once, unchanged, and the budget counted from the
    storage. The in-flight trial was never stored and is run again."""
    out = tmp_path / "out"
    table = out / "lenet5" / "trials.parquet"
    proc = start_cli(_driver_argv(out, 100000), tmp_path)
    seen = _wait_for_rows(proc, table, 30)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=SUBPROCESS_TIMEOUT_S)
    assert len(seen) >= 2, seen  # written periodically during the run, not only at the end
    killed = _search_rows(table)  # readable right after the kill
    assert len(killed) >= 30 and (killed["state"] == "COMPLETE").any()
    stored = _stored_rows(out / "lenet5")
    assert set(killed.index) <= set(stored.index)  # the table never runs ahead of the storage
    columns = ["state", "plan_hash", "hw_hash"]
    pd.testing.assert_frame_equal(stored.loc[killed.index, columns], killed[columns])

    total = len(stored) + 10
    assert main([*_driver_argv(out, total), "--resume"]) == 0
    final = _search_rows(table)
    assert len(final) == total and final.index.is_unique
    pd.testing.assert_frame_equal(final.loc[stored.index, columns], stored[columns])
    columns += ["value_0", "duplicate_of"]
    after = final.loc[killed.index, columns]
    pd.testing.assert_frame_equal(after, killed[columns])  # every row of the table survived


def test_ctrl_c_saves_the_work_and_says_how_to_resume(tmp_path: Path) -> None:
    out = tmp_path / "out"
    table = out / "lenet5" / "trials.parquet"
    argv = _driver_argv(out, 100000)
    proc = start_cli(argv, tmp_path)
    _wait_for_rows(proc, table, 10)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    saved = re.search(r"interrupted; (\d+) finished trials are saved", err)
    assert saved, err
    rows = _search_rows(table)
    assert len(rows) == int(saved.group(1))  # the table holds every finished trial
    resume = shlex.join(["fusiontune", *argv, "--resume"])
    assert f"to continue, run: {resume}" in err

    again = shlex.split(resume)[1:]
    again[again.index("--trials") + 1] = str(len(rows) + 5)  # a smaller budget than asked
    assert main(again) == 0
    final = _search_rows(table)
    assert len(final) == len(rows) + 5
    assert (final.loc[rows.index, "plan_hash"] == rows["plan_hash"]).all()


# ---- reproducibility: rows re-simulate from the Parquet files alone ---------------------------
def test_stored_rows_resimulate_from_the_parquet_alone(tmp_path: Path) -> None:
    from fusiontune import __version__
    from fusiontune.frontend.loader import load_model
    from fusiontune.planner.plan import Plan
    from fusiontune.search.api import search
    from fusiontune.search.results import hardware_from_json
    from fusiontune.sim.cost import simulate

    space = tmp_path / "space.yaml"
    space.write_text(
        "hardware: isaac_reram_flat\nsampler: random\ntrials: 12\n"
        "knobs:\n  adc_bits: {choices: [6, 8]}\n"
        "  buffer_bytes: {low: 4096, high: 1048576, log: true}\n"
    )
    search("mlp_relu", space=space, out=tmp_path, backend="serial", seed=3)
    frame = pd.read_parquet(tmp_path / "mlp_relu" / "trials.parquet")
    done = frame[frame["state"] == "COMPLETE"]
    assert len(done) >= 12 and done["hw_hash"].nunique() >= 2
    assert (frame["fusiontune_version"] == __version__).all()
    graphs: dict[str, Graph] = {}
    for row in done.itertuples(index=False):
        graph = graphs.setdefault(row.model, load_model(row.model))
        assert graph.structural_hash == row.graph_hash
        hw = hardware_from_json(row.hw_json)
        assert hw.hash == row.hw_hash
        plan = Plan.from_json(row.plan_json, graph)
        assert plan.hash == row.plan_hash
        metrics = simulate(graph, plan, hw)
        assert metrics.traffic_bytes == row.traffic_bytes
        assert metrics.energy_pj == pytest.approx(row.energy_pj, rel=1e-12)
        assert metrics.cycles == row.cycles


# ---- safety ----------------------------------------------------------------------------------
UNSAFE_LOADS = re.compile(
    r"yaml\.(load|unsafe_load|full_load)\(|Loader\s*=\s*yaml\.(Unsafe|Full)?Loader"
    r"|pickle\.loads?\(|cloudpickle\.loads?\(|marshal\.loads?\(|\beval\(|\bexec\("
)


def test_no_unsafe_loading_of_user_files() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{i}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if UNSAFE_LOADS.search(line)
    ]
    assert offenders == []
    uses_yaml = [
        p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py") if "import yaml" in p.read_text()
    ]
    assert uses_yaml == [Path("fileio.py")]  # one reader of YAML: the limited safe loader
    assert "(yaml.SafeLoader)" in (PACKAGE / "fileio.py").read_text()


def test_ray_starts_local_only_without_dashboard() -> None:
    import inspect

    source = inspect.getsource(RayBackend.start)
    assert 'address="local"' in source and "include_dashboard=False" in source
    assert "check_ray_address(self.address)" in source  # --address is probed first


# ---- baselines, full disks, Ray processes --------------------------------------------------------
def test_a_failing_baseline_is_recorded_and_the_search_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fusiontune.search.optimize as optimize
    import fusiontune.sim.cost as cost
    from fusiontune.search.api import search

    real = cost.simulate

    def unfused_raises(graph: Graph, plan: object, hw: object, *args: Any, **kwargs: Any) -> object:
        if all(len(g.ops) == 1 for g in plan.groups):  # type: ignore[attr-defined]
            raise RuntimeError(INJECTED)
        return real(graph, plan, hw, *args, **kwargs)  # type: ignore[arg-type]

    def oracle_raises(*args: object, **kwargs: object) -> object:
        raise MemoryError("solver ran out of memory")

    monkeypatch.setattr(cost, "simulate", unfused_raises)
    monkeypatch.setattr(optimize, "optimal_plan", oracle_raises)
    result = search("mlp_relu", trials=6, out=tmp_path, sampler="random", seed=1)
    rows = result.trials.set_index("source")
    assert rows.loc["unfused", "state"] == "FAIL"
    assert rows.loc["unfused", "error"] == f"RuntimeError: {INJECTED}"
    assert rows.loc["oracle", "state"] == "FAIL" and "solver ran out" in rows.loc["oracle", "error"]
    assert rows.loc["greedy", "state"] == "COMPLETE"
    assert (result.trials["source"] == "search").sum() == 6
    assert "traffic_saved_vs_unfused" not in result.summary
    from fusiontune.cli.search import format_summary

    text = format_summary(result.summary)
    assert f"unfused:          failed: RuntimeError: {INJECTED}" in text


def _mount_small_disk(path: Path, size: str) -> bool:
    """Mount a tmpfs of ``size`` at ``path`` (root on Linux); False when that is not allowed."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def test_disk_full_is_a_clear_error_and_resume_works_after_freeing_space(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    if not _mount_small_disk(disk, "3m"):
        pytest.skip("cannot mount a small tmpfs here (needs root on Linux)")
    try:
        argv = [*_driver_argv(disk, 20), "--checkpoint-every", "0"]
        assert main(argv) == 0
        filler = _fill(disk)
        capsys.readouterr()
        assert main([*argv[:-2], "--trials", "300", "--resume"]) == 2
        err = capsys.readouterr().err  # progress lines, then the error
        errors = [line for line in err.splitlines() if line.startswith("fusiontune:")]
        assert len(errors) == 1 and "Traceback" not in err, err
        assert "(disk full)" in errors[0] and "rerun with --resume" in errors[0]
        filler.unlink()
        assert main([*argv[:-2], "--trials", "60", "--resume"]) == 0
        rows = _search_rows(disk / "lenet5" / "trials.parquet")
        assert len(rows) == 60 and rows.index.is_unique
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=False)


def test_a_full_disk_while_writing_a_table_is_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from fusiontune.errors import StorageError
    from fusiontune.search.results import write_parquet

    def full(self: pd.DataFrame, path: object, **kwargs: object) -> None:
        Path(str(path)).write_bytes(b"PAR1")  # a part was written
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full)
    with pytest.raises(StorageError, match=r"trials.parquet: cannot write \(disk full\)"):
        write_parquet(pd.DataFrame({"a": [1]}), tmp_path / "trials.parquet")
    assert list(tmp_path.iterdir()) == []  # neither the part nor a temporary file is left


def _ray_processes_of(pid: int) -> set[tuple[int, str]]:
    from fusiontune.search.ray_reaper import _is_ray, _table, descendants

    return {k for k in descendants({pid}, _table()) if _is_ray(k[0]) and "reaper" not in
            Path(f"/proc/{k[0]}/cmdline").read_bytes().decode(errors="replace")}  # fmt: skip


@pytest.mark.skipif(sys.platform != "linux", reason="process tables read from /proc")
def test_ray_processes_die_within_seconds_of_a_killed_driver(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = _driver_argv(out, 100000)
    argv[argv.index("--backend") + 1] = "ray"
    argv[argv.index("--workers") + 1] = "2"
    proc = start_cli(argv, tmp_path)
    _wait_for_rows(proc, out / "lenet5" / "trials.parquet", 5)
    ray_procs = _ray_processes_of(proc.pid)
    names = {Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] for pid, _ in ray_procs}
    assert any(b"raylet" in n for n in names) and b"ray::DashboardAgent" in names, names
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=SUBPROCESS_TIMEOUT_S)
    from fusiontune.search.ray_reaper import _table

    deadline = time.monotonic() + 30  # seconds, on a busy machine
    while ray_procs & set(_table()) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = ray_procs & set(_table())
    assert not left, [Path(f"/proc/{pid}/cmdline").read_bytes()[:60] for pid, _ in left]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(sys.platform != "linux", reason="process tables read from /proc")
def test_a_token_auth_cluster_is_explained_in_one_line_within_seconds(tmp_path: Path) -> None:
    """A Ray head with token authentication (Ray 2.60's default) and a driver without the
    token: one line naming the cause, in seconds (ray.init alone retries ~20 s and blames the
    address), and no empty results folder."""
    import secrets
    import shutil
    import tempfile

    from fusiontune.search.ray_reaper import _table, descendants, reap

    port = _free_port()
    temp = tempfile.mkdtemp(prefix="ft-ray-", dir="/tmp")  # short: Ray's socket paths
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    ray_cli = Path(sys.executable).parent / "ray"
    head = subprocess.Popen(
        [str(ray_cli), "start", "--head", "--block", f"--port={port}", "--num-cpus=1",
         "--include-dashboard=false", f"--temp-dir={temp}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + SUBPROCESS_TIMEOUT_S
        while True:
            assert head.poll() is None and time.monotonic() < deadline, "ray head did not start"
            try:
                import socket

                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        out = tmp_path / "out"
        code = (
            "import sys, time; sys.path.insert(0, sys.argv[1])\n"
            "from fusiontune.cli.main import main\n"
            "start = time.monotonic(); code = main(sys.argv[2:])\n"
            "print(f'elapsed {time.monotonic() - start:.1f}'); sys.exit(code)\n"
        )
        argv = ["search", "mlp_relu", "--trials", "4", "--out", str(out),
                "--address", f"127.0.0.1:{port}"]  # fmt: skip
        clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
        done = subprocess.run(
            [sys.executable, "-c", code, str(REPO), *argv],
            env=clean, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "requires token authentication" in lines[0], done.stderr
        assert "RAY_AUTH_MODE=token" in lines[0]
        elapsed_s = float(done.stdout.split()[-1])
        assert elapsed_s < 10, elapsed_s  # the probe waits 3 s at most; ray.init took ~20 s
        assert not out.exists()
    finally:
        procs = descendants({head.pid}, _table())
        head.kill()  # SIGTERM would drain for 30 s; the head's processes are stopped below
        head.wait(timeout=30)
        reap(procs)
        shutil.rmtree(temp, ignore_errors=True)
