"""A study knows what it is and cannot be corrupted: identity checks on resume, one SQLite
writer, trial numbers unique across drivers, idempotent flushes, tables readable while they
are rewritten.

Drivers are real: in-process stores interleaved step by step (deterministic), and driver
subprocesses sharing one journal file at the same time.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fusiontune.errors import StorageError
from fusiontune.search import store as store_module
from fusiontune.search.api import search
from fusiontune.search.backends import SerialBackend
from fusiontune.search.loop import run_trials
from fusiontune.search.problem import Problem
from fusiontune.search.records import study_records
from fusiontune.search.results import read_parquet, write_parquet
from fusiontune.search.storage import open_study, storage_for
from fusiontune.search.store import StudyStore

REPO = Path(__file__).resolve().parents[1]

SUBPROCESS_TIMEOUT_S = 300.0
"""Longest a driver subprocess may take (generous: the suite also runs on a busy machine)."""


def _problem(model: str = "mlp_relu", objective: str = "traffic", **kw: Any) -> Problem:
    from fusiontune.frontend.loader import load_model
    from fusiontune.search.space import load_space, with_overrides
    from fusiontune.sim.hardware import load_hardware

    space = with_overrides(load_space(None), sampler="random", objective=objective)
    return Problem.build(load_model(model, **kw), space, load_hardware(space.hardware))


def _open(spec: Any, problem: Problem, resume: bool, name: str = "s") -> StudyStore:
    return open_study(name, spec, problem, 0, resume, start_from_greedy=False)


def _run(store: StudyStore, problem: Problem, n: int) -> None:
    backend = SerialBackend()
    backend.start(problem.graph)
    run_trials(store, problem, backend, n)


def _stored(store: StudyStore) -> pd.DataFrame:
    rows = [(r.trial, r.uid, r.duplicate_of) for r in store.stored_records()]
    return pd.DataFrame(rows, columns=["trial", "uid", "duplicate_of"])


# ---- identity -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changed", "expect_old", "expect_new"),
    [
        ({"input_size": 128}, "inputs input 1x784", "inputs input 1x128"),
        ({"objective": "energy"}, "objective traffic", "objective energy"),
        ({"model": "mlp_linear"}, "model mlp_relu", "model mlp_linear"),
    ],
)
def test_resume_with_another_problem_is_refused_naming_both(
    tmp_path: Path, changed: dict[str, Any], expect_old: str, expect_new: str
) -> None:
    search("mlp_relu", trials=3, out=tmp_path, study="s", sampler="random", baselines=False)
    kwargs: dict[str, Any] = {"trials": 6, "out": tmp_path, "study": "s", "resume": True}
    model = changed.pop("model", "mlp_relu")
    with pytest.raises(StorageError) as err:
        search(model, sampler="random", baselines=False, **kwargs, **changed)
    message = str(err.value)
    assert "\n" not in message
    was, _, now = message.partition(", not ")
    assert "was created for" in was and expect_old in was and expect_new in now
    stored = read_parquet(tmp_path / "s" / "trials.parquet")
    assert len(stored) == 3  # nothing relabelled, nothing added


def test_resume_with_other_knobs_is_refused(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text("sampler: random\nknobs:\n  adc_bits: {choices: [6, 8]}\n")
    search("mlp_relu", trials=3, out=tmp_path, study="s", sampler="random", baselines=False)
    with pytest.raises(StorageError, match=r"was created for knobs none,.* not knobs adc_bits"):
        search("mlp_relu", space=space, trials=6, out=tmp_path, study="s", resume=True)


def test_resume_of_a_missing_study_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="study 'nothere' does not exist") as err:
        search("mlp_relu", trials=3, out=tmp_path, study="nothere", resume=True)
    assert "leave out --resume" in str(err.value)
    assert not (tmp_path / "nothere").exists()  # no empty folder or database left behind


# ---- one SQLite writer -------------------------------------------------------------------------
def test_sqlite_takes_one_driver_and_says_what_to_use_instead(tmp_path: Path) -> None:
    problem = _problem()
    spec = storage_for(None, tmp_path)
    first = _open(spec, problem, resume=False)
    try:
        with pytest.raises(
            StorageError, match=f"in use by another fusiontune driver .pid {os.getpid()}"
        ):
            _open(spec, problem, resume=True)
    finally:
        first.close()
    second = _open(spec, problem, resume=True)  # released: the next driver may continue
    second.close()


def test_a_killed_driver_leaves_no_stale_sqlite_lock(tmp_path: Path) -> None:
    code = (
        "import os, signal, sys; from pathlib import Path\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from fusiontune.search.store import WriterLock\n"
        "WriterLock(Path(sys.argv[1]), 'x'); os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    lock = tmp_path / "study.db.lock"
    proc = subprocess.run([sys.executable, "-c", code, str(lock), str(REPO)], timeout=60)
    assert proc.returncode == -signal.SIGKILL and lock.exists()
    problem = _problem()
    store = _open(storage_for(None, tmp_path), problem, resume=False)
    store.close()


# ---- several drivers on one journal ------------------------------------------------------------
@pytest.mark.parametrize("kind", ["journal", "database"])
def test_interleaved_drivers_number_trials_uniquely(tmp_path: Path, kind: str) -> None:
    """Journal: one trial per write; database: one transaction per flush (SQLite without
    the one-driver lock stands in for PostgreSQL here)."""
    from fusiontune.search.store import StorageSpec

    problem = _problem("mlp_relu")  # few plans: random trials repeat some
    if kind == "journal":
        spec_a = storage_for(str(tmp_path / "s.log"), tmp_path)
        spec_b = storage_for(str(tmp_path / "s.log"), tmp_path)
    else:
        url = f"sqlite:///{tmp_path / 's.db'}"
        spec_a = spec_b = StorageSpec(url, "s.db")  # no lock: two drivers
    a = _open(spec_a, problem, resume=False)
    b = _open(spec_b, problem, resume=True)
    for _ in range(3):  # both drivers' provisional numbers start at 0: they collide
        _run(a, problem, 5)
        _run(b, problem, 5)
    for store in (a, b):
        table = _stored(store)
        assert len(table) == 30 and table["trial"].is_unique and table["uid"].is_unique
        assert sorted(table["trial"]) == list(range(30))
        records = {r.trial: r for r in store.stored_records()}
        dups = [r for r in records.values() if r.duplicate_of >= 0]
        assert dups
        for dup in dups:  # each names its original by the storage's number
            original = records[dup.duplicate_of]
            assert original.plan_hash == dup.plan_hash and original.duplicate_of < 0
            assert original.uid.split(":")[0] == dup.uid.split(":")[0]  # same driver
    assert {u.split(":")[0] for u in _stored(a)["uid"]} == {a.driver_id, b.driver_id}


def _driver(out: Path, journal: Path, trials: int, resume: bool) -> subprocess.Popen[str]:
    argv = ["search", "lenet5", "--backend", "serial", "--workers", "1", "--sampler", "random",
            "--trials", str(trials), "--storage", str(journal), "--out", str(out),
            "--study", "shared", "--checkpoint-every", "0.5"]  # fmt: skip
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.Popen(
        [sys.executable, "-m", "fusiontune.cli.main", *argv, *(["--resume"] if resume else [])],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_driver_processes_share_a_journal_study(tmp_path: Path) -> None:
    journal = tmp_path / "shared.log"
    first = _driver(tmp_path / "a", journal, 300, resume=False)
    import time

    deadline = time.monotonic() + SUBPROCESS_TIMEOUT_S
    while b"fusiontune_identity" not in (journal.read_bytes() if journal.exists() else b""):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.1)
    second = _driver(tmp_path / "b", journal, 360, resume=True)  # at least 60 of its own
    for proc in (first, second):
        _, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)
        assert proc.returncode == 0, err
        assert "Traceback" not in err
    tables = [read_parquet(tmp_path / d / "shared" / "trials.parquet") for d in ("a", "b")]
    problem = _problem("lenet5")
    store = _open(storage_for(str(journal), tmp_path), problem, resume=True, name="shared")
    stored = _stored(store)
    assert stored["trial"].is_unique and stored["uid"].is_unique
    assert sorted(stored["trial"]) == list(range(len(stored)))
    assert len({u.split(":")[0] for u in stored["uid"]}) == 2  # both drivers stored trials
    last = max(tables, key=len)
    search_rows = last[last["source"] == "search"]
    assert sorted(search_rows["trial"]) == sorted(stored["trial"])  # every trial, once


# ---- flushes -------------------------------------------------------------------------------------
def test_a_flush_interrupted_twice_stores_every_trial_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C arrives while the storage commits a trial, in two flushes in a row."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # even in a background job
    try:
        _interrupted_twice(tmp_path, monkeypatch)
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupted_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    problem = _problem()
    store = _open(storage_for(None, tmp_path), problem, resume=False)
    store.flush_interval_s = 1e9  # flushed at the end of each run, then by hand
    original = store_module.insert_trials
    calls = {"n": 0}

    def commit_then_ctrl_c(*args: Any, **kwargs: Any) -> Any:
        numbers = original(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] in (1, 2):  # the signal lands right after the batch commits
            os.kill(os.getpid(), signal.SIGINT)
        return numbers

    monkeypatch.setattr(store_module, "insert_trials", commit_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        _run(store, problem, 6)  # the final flush is interrupted
    with pytest.raises(KeyboardInterrupt):
        _run(store, problem, 6)  # and the next one too
    store.flush()
    table = _stored(store)
    assert calls["n"] == 2  # one transaction per flush, not one per trial
    assert len(table) == len(store.records()) == 12
    assert table["trial"].is_unique and table["uid"].is_unique
    assert list(table["trial"]) == [r.trial for r in store.records()]  # Optuna's numbers
    store.close()


def test_a_failed_write_is_not_stored_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The storage commits, then the connection fails: the next flush finds the trials by uid."""
    problem = _problem()
    store = _open(storage_for(None, tmp_path), problem, resume=False)
    store.flush_interval_s = 1e9
    original = store_module.insert_trials
    calls = {"n": 0}

    def commit_then_fail(*args: Any, **kwargs: Any) -> Any:
        numbers = original(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 2:
            raise ConnectionError("server closed the connection unexpectedly")
        return numbers

    monkeypatch.setattr(store_module, "insert_trials", commit_then_fail)
    _run(store, problem, 3)
    with pytest.raises(StorageError, match="server closed the connection"):
        _run(store, problem, 3)
    monkeypatch.setattr(store_module, "insert_trials", original)
    store.flush()
    table = _stored(store)
    assert len(table) == 6 and table["uid"].is_unique and table["trial"].is_unique
    store.close()


# ---- batched checkpoints -------------------------------------------------------------------------
def test_a_batch_that_fails_midway_stores_none_of_its_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One transaction per flush: a write that fails at its third trial leaves the earlier
    flushes intact and none of its own trials; the next flush stores them all, in order."""
    from optuna.storages._rdb.models import TrialValueModel

    problem = _problem()
    store = _open(storage_for(None, tmp_path), problem, resume=False)
    store.flush_interval_s = 1e9
    _run(store, problem, 4)  # first flush: trials 0-3
    original = TrialValueModel.value_to_stored_repr  # called once per stored trial here
    calls = {"n": 0}

    def fail_third(value: float) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device")
        return original(value)

    monkeypatch.setattr(TrialValueModel, "value_to_stored_repr", fail_third)
    with pytest.raises(StorageError, match="disk full"):
        _run(store, problem, 5)
    assert calls["n"] == 3  # the third trial of the batch failed
    assert len(_stored(store)) == 4  # the failed batch rolled back whole
    monkeypatch.setattr(TrialValueModel, "value_to_stored_repr", original)
    store.flush()
    table = _stored(store)
    assert list(table["trial"]) == list(range(9)) == [r.trial for r in store.records()]
    assert store.stored_records() == study_records(store.persistent, stored=True)
    store.close()


def test_a_study_killed_between_checkpoints_resumes_with_the_checkpointed_trials(
    tmp_path: Path,
) -> None:
    """Trials told after the last checkpoint die with the driver; the resumed study holds the
    checkpointed ones under the numbers, parameters and values Optuna gave them, and numbers
    the next trials after them."""
    problem = _problem()
    store = _open(storage_for(None, tmp_path), problem, resume=False)
    store.flush_interval_s = 1e9
    _run(store, problem, 5)  # checkpoint: trials 0-4
    checkpointed = {t.number: (t.params, t.values) for t in store.memory.get_trials()}
    store.flush = lambda final=False: None  # type: ignore[method-assign]  # killed before
    _run(store, problem, 3)  # the next checkpoint: trials 5-7 told, never stored
    assert len(store.memory.get_trials()) == 8
    store._lock.release()  # what the kill does to the flock  # type: ignore[union-attr]

    resumed = _open(storage_for(None, tmp_path), problem, resume=True)
    stored = resumed.persistent.get_trials()
    assert [t.number for t in stored] == list(range(5))
    assert {t.number: (t.params, t.values) for t in resumed.memory.get_trials()} == {
        n: (p, v) for n, (p, v) in checkpointed.items()
    }
    assert [r.trial for r in resumed.stored_records()] == list(range(5))
    _run(resumed, problem, 4)
    numbers = [r.trial for r in resumed.stored_records()]
    assert numbers == list(range(9))  # the new trials continue the numbering
    # the locked SQLite study's records, kept as written, are what the storage reads back
    assert resumed.stored_records() == study_records(resumed.persistent, stored=True)
    memory = [t.number for t in resumed.memory.get_trials()]
    assert memory == numbers  # and the mirror's (Optuna's) numbers are the stored ones
    resumed.close()


# ---- tables readable while rewritten -------------------------------------------------------------
def _rewrite_forever(path: str, stop: Any) -> None:
    i = 0
    while not stop.is_set():
        i += 1
        n = 1 + i % 40
        write_parquet(pd.DataFrame({"trial": range(n), "plan": ["x" * (i % 9)] * n}), Path(path))


def test_tables_read_whole_while_a_search_rewrites_them(tmp_path: Path) -> None:
    table = tmp_path / "trials.parquet"
    write_parquet(pd.DataFrame({"trial": [0], "plan": [""]}), table)
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    writer = ctx.Process(target=_rewrite_forever, args=(str(table), stop))
    writer.start()
    try:
        versions = set()
        for _ in range(1500):
            frame = read_parquet(table)  # one open: never the footer of one file, pages of another
            assert list(frame["trial"]) == list(range(len(frame)))
            versions.add(len(frame))
    finally:
        stop.set()
        writer.join(timeout=60)
    assert len(versions) > 1  # the file really was replaced while being read


def test_result_files_are_readable_by_the_group(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        search("mlp_relu", trials=3, out=tmp_path, study="s", sampler="random")
    finally:
        os.umask(old)
    for name in ("trials.parquet", "groups.parquet", "best_plan.json", "summary.json"):
        assert (tmp_path / "s" / name).stat().st_mode & 0o777 == 0o644, name
    os.umask(0o077)
    try:
        search("mlp_relu", trials=4, out=tmp_path, study="s", resume=True)
    finally:
        os.umask(old)
    assert (tmp_path / "s" / "trials.parquet").stat().st_mode & 0o777 == 0o600  # umask respected
