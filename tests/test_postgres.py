"""A real PostgreSQL server: ``postgresql://`` URLs work as given, and two drivers share one
study on it at the same time.

The server comes from the ``pgserver`` package (a self-contained PostgreSQL, in the ``test``
extra) or, without it, from a system PostgreSQL (``initdb``/``pg_ctl`` on PATH, not as root).
The tests are skipped only where neither can run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fusiontune.errors import StorageError
from fusiontune.search.results import read_parquet
from fusiontune.search.storage import storage_for
from fusiontune.search.store import StorageSpec

REPO = Path(__file__).resolve().parents[1]

SUBPROCESS_TIMEOUT_S = 300.0
"""Longest a driver subprocess may take (generous: the suite also runs on a busy machine)."""


def _pgserver(folder: Path) -> tuple[str, object] | None:
    try:
        import pgserver
    except ImportError:
        return None
    server = pgserver.get_server(folder, cleanup_mode="delete")
    return server.get_uri(), server


def _system_postgres(folder: Path) -> tuple[str, object] | None:
    if not (shutil.which("initdb") and shutil.which("pg_ctl")) or os.geteuid() == 0:
        return None
    data, sock = folder / "data", folder / "sock"
    sock.mkdir()
    subprocess.run(["initdb", "-D", str(data), "-U", "postgres", "-A", "trust"], check=True,
                   capture_output=True)  # fmt: skip
    opts = f"-k {sock} -c listen_addresses=''"
    subprocess.run(["pg_ctl", "-D", str(data), "-o", opts, "-w", "start"], check=True,
                   capture_output=True)  # fmt: skip
    return f"postgresql://postgres@/postgres?host={sock}", data


@pytest.fixture(scope="module")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("pg")
    started = _pgserver(folder) or _system_postgres(folder)
    if started is None:
        pytest.skip("no PostgreSQL: install the test extra (pgserver) or a system PostgreSQL")
    url, handle = started
    yield url
    if isinstance(handle, Path):
        subprocess.run(["pg_ctl", "-D", str(handle), "-m", "fast", "stop"], check=False)
    else:
        handle.cleanup()  # type: ignore[attr-defined]


def test_a_plain_postgresql_url_gets_an_installed_driver(postgres_url: str) -> None:
    spec = storage_for(postgres_url, Path("unused"))
    assert spec.target.startswith(("postgresql+psycopg://", "postgresql+psycopg2://"))
    assert spec.label == postgres_url.replace("postgres:@", "postgres:***@")


def test_a_postgresql_url_without_a_driver_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(StorageError, match=r"pip install 'fusiontune\[postgres\]'") as err:
        storage_for("postgresql://me:secret@db.example/studies", Path("unused"))
    assert "secret" not in str(err.value) and "me:***@db.example" in str(err.value)


def _driver(
    url: str, out: Path, trials: int, resume: bool, study: str = "shared"
) -> subprocess.Popen[str]:
    argv = ["search", "lenet5", "--backend", "serial", "--workers", "1", "--sampler", "random",
            "--trials", str(trials), "--storage", url, "--out", str(out), "--study", study,
            "--checkpoint-every", "0.5", *(["--resume"] if resume else [])]  # fmt: skip
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.Popen(
        [sys.executable, "-m", "fusiontune.cli.main", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _has_study(url: str, name: str) -> bool:
    """Whether the study exists yet (False while the driver is still creating the tables)."""
    import optuna

    try:
        return name in optuna.get_all_study_names(storage=url)
    except Exception:
        return False


def test_drivers_started_together_on_a_new_database_both_open_it(
    postgres_url: str, tmp_path: Path
) -> None:
    """Two drivers race to create Optuna's tables in a new database: neither fails."""
    import subprocess as sp

    db = f"race{os.getpid()}"
    base, _, query = postgres_url.partition("?")
    admin = base.rsplit("/", 1)[0]
    code = (
        "import sys, psycopg; c = psycopg.connect(sys.argv[1], autocommit=True); "
        "c.execute(f'CREATE DATABASE {sys.argv[2]}')"
    )
    conninfo = f"dbname=postgres user=postgres host={query.removeprefix('host=')}"
    sp.run([sys.executable, "-c", code, conninfo, db], check=True, timeout=60)
    url = f"{admin}/{db}?{query}"
    procs = [_driver(url, tmp_path / name, 5, resume=False, study=name) for name in "ab"]
    for proc in procs:
        _, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)
        assert proc.returncode == 0, err


def test_two_drivers_share_one_study_on_postgresql(postgres_url: str, tmp_path: Path) -> None:
    import optuna

    spec: StorageSpec = storage_for(postgres_url, tmp_path)
    first = _driver(postgres_url, tmp_path / "a", 200, resume=False)
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT_S
    while not _has_study(spec.target, "shared"):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.2)
    second = _driver(postgres_url, tmp_path / "b", 260, resume=True)  # at least 60 of its own
    for proc in (first, second):
        _, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)
        assert proc.returncode == 0, err
        assert "Traceback" not in err

    study = optuna.load_study(study_name="shared", storage=spec.target)
    records = [t.user_attrs["fusiontune"] for t in study.get_trials(deepcopy=False)]
    numbers = [t.number for t in study.get_trials(deepcopy=False)]
    uids = [r["uid"] for r in records]
    assert len(set(numbers)) == len(numbers) == len(set(uids))
    assert len({u.split(":")[0] for u in uids}) == 2  # both drivers stored trials
    tables = [read_parquet(tmp_path / d / "shared" / "trials.parquet") for d in ("a", "b")]
    last = max(tables, key=len)
    rows = last[last["source"] == "search"]
    assert sorted(rows["trial"]) == sorted(numbers)  # every driver's trials, once each

    third = _driver(postgres_url, tmp_path / "c", 5, resume=False)
    _, err = third.communicate(timeout=SUBPROCESS_TIMEOUT_S)
    assert third.returncode == 2 and "study 'shared' already exists" in err
    assert "JournalStorage object" not in err and "postgres:***@" in err
