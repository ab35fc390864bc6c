"""Study storage: where a study lives (``--storage``: :func:`storage_for`) and opening it
(:func:`open_study`: create, or resume and replay into the mirror).

The records are in :mod:`fusiontune.search.records`, the open study and its flushes in
:mod:`fusiontune.search.store`.

A study knows what it is: the identity of its problem (model graph, hardware, knobs,
objective, planner configuration; :meth:`~fusiontune.search.problem.Problem.identity`) is
stored as the study user attribute :data:`IDENTITY_ATTR` when it is created, and a driver that
resumes or joins it with anything different is refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fusiontune.errors import StorageError
from fusiontune.search.records import mirrored_trial, study_records
from fusiontune.search.sampler_factory import make_sampler
from fusiontune.search.store import (
    FLUSH_INTERVAL_S,
    StorageSpec,
    StudyStore,
    StudyTakenError,
    WriterLock,
    is_disk_full,
    reason_of,
)

if TYPE_CHECKING:
    from fusiontune.search.problem import Problem

IDENTITY_ATTR = "fusiontune_identity"
"""Study user attribute holding the problem identity the study was created for."""

JOURNAL_SUFFIXES = (".log", ".journal", ".jsonl")
"""A ``--storage`` ending in one of these is an Optuna journal file."""

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
"""Database URLs without an explicit driver; fusiontune picks an installed one."""

POSTGRES_DRIVERS = (("psycopg", "postgresql+psycopg://"), ("psycopg2", "postgresql+psycopg2://"))
"""Python PostgreSQL drivers SQLAlchemy can use, in order of preference (module, URL scheme)."""


def storage_for(storage: str | None, study_dir: Path) -> StorageSpec:
    """Optuna storage: SQLite under ``study_dir`` by default, a journal file for ``*.log`` /
    ``*.journal`` / ``*.jsonl`` / ``journal:PATH``, otherwise a database URL. A plain
    ``postgresql://`` URL gets the installed driver (psycopg 3, else psycopg2).

    Raises:
        StorageError: a PostgreSQL URL and no driver installed.
    """
    import optuna

    if storage is None:
        db = (study_dir / "study.db").resolve()
        return StorageSpec(f"sqlite:///{db}", str(study_dir / "study.db"), _lock_of(db))
    journal = storage[len("journal:") :] if storage.startswith("journal:") else None
    if journal is None and storage.endswith(JOURNAL_SUFFIXES) and "://" not in storage:
        journal = storage
    if journal is not None:
        from optuna.storages.journal import JournalFileBackend

        from fusiontune.search.journal import bad_record, refusal, repair_torn_tail

        if Path(journal).is_dir():
            raise StorageError(f"journal file {journal} is a directory; give the path of a file")
        try:
            Path(journal).parent.mkdir(parents=True, exist_ok=True)
            dropped = repair_torn_tail(journal)
            broken = bad_record(journal) if Path(journal).is_file() else None
            backend = JournalFileBackend(journal)
        except OSError as exc:
            raise StorageError(
                f"journal file {journal} cannot be opened ({reason_of(exc)}); "
                "check the path and that its folder is writable"
            ) from exc
        if broken is not None:
            raise StorageError(refusal(journal, *broken))
        if dropped:
            import warnings

            warnings.warn(
                f"{journal}: dropped a torn final write ({dropped:,} bytes of a record a "
                "killed driver did not finish; Optuna never read it, so no stored trial "
                "changes)",
                UserWarning,
                stacklevel=2,
            )
        return StorageSpec(optuna.storages.JournalStorage(backend), f"journal file {journal}")
    url = _with_postgres_driver(storage)
    lock = None
    if url.startswith("sqlite:///") and not url.endswith(":memory:"):
        lock = _lock_of(Path(url[len("sqlite:///") :]).resolve())
    return StorageSpec(url, _mask_password(storage), lock)


def _lock_of(db: Path) -> Path:
    return db.with_name(db.name + ".lock")


def _with_postgres_driver(url: str) -> str:
    """``postgresql://`` with the installed driver's scheme (SQLAlchemy's default, psycopg2,
    is often missing); URLs naming a driver are left alone."""
    import importlib.util

    scheme = next((s for s in POSTGRES_SCHEMES if url.startswith(s)), None)
    if scheme is None:
        return url
    for module, driver_scheme in POSTGRES_DRIVERS:
        if importlib.util.find_spec(module) is not None:
            return driver_scheme + url[len(scheme) :]
    raise StorageError(
        f"study storage '{_mask_password(url)}' needs a PostgreSQL driver; "
        "install one with: pip install 'fusiontune[postgres]'"
    )


def _mask_password(url: str) -> str:
    """The URL with its password replaced by ``***``."""
    head, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    creds, _, host = rest.rpartition("@")
    user, colon, _ = creds.partition(":")
    return f"{head}://{user}{':***' if colon else ''}@{host}"


def open_study(
    name: str,
    storage: StorageSpec | str,
    problem: Problem,
    seed: int | None,
    resume: bool,
    start_from_greedy: bool = True,
    flush_interval_s: float = FLUSH_INTERVAL_S,
    before_create: Callable[[], None] | None = None,
    parallel: bool = False,
    before_write: Callable[[], None] | None = None,
) -> StudyStore:
    """Create the study, or load it with ``resume``: trials left RUNNING are failed and the
    finished ones replayed into the in-memory mirror the sampler works on. A new study's
    first trials are the greedy and TVM-like plans unless ``start_from_greedy`` is false.
    ``before_create`` runs once the request is known to be valid, ``before_write`` right
    before the first write, after the start plans are computed or the stored trials replayed
    (the API starts its backend in the background at the first and waits for it at the
    second, so a failing backend leaves no empty study).
    ``parallel``: the backend keeps several trials in flight (the sampler is told so:
    :func:`~fusiontune.search.sampler_factory.make_sampler`).

    Raises:
        StorageError: the storage cannot be opened; the study exists and ``resume`` is false,
            or does not exist and ``resume`` is true; the stored study was created for another
            problem (graph, hardware, knobs, objective or planner configuration); a SQLite
            study is in use by another driver.
    """
    import optuna

    spec = storage if isinstance(storage, StorageSpec) else StorageSpec(storage, str(storage))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    lock = WriterLock(spec.lock_path, spec.label, name) if spec.lock_path is not None else None
    try:
        store = _open(
            name,
            spec,
            problem,
            seed,
            resume,
            start_from_greedy,
            flush_interval_s,
            before_create,
            parallel,
            before_write,
        )
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    store._lock = lock
    return store


def _open(
    name: str,
    spec: StorageSpec,
    problem: Problem,
    seed: int | None,
    resume: bool,
    start_from_greedy: bool,
    flush_interval_s: float,
    before_create: Callable[[], None] | None,
    parallel: bool = False,
    before_write: Callable[[], None] | None = None,
) -> StudyStore:
    import optuna
    from optuna.trial import TrialState

    if before_create is not None and not resume and _is_new_sqlite(spec):
        before_create()  # no file, no study: the request is valid; start before connecting
        before_create = None
    storage = _connect(spec)
    existing = optuna.get_all_study_names(storage=storage)
    if name in existing and not resume:
        raise StudyTakenError(
            f"study '{name}' already exists in {spec.label}; pass --resume to continue it, "
            "or --study NAME / --out DIR for a new one"
        )
    if name not in existing and resume:
        raise StorageError(
            f"study '{name}' does not exist in {spec.label}, so --resume has nothing to "
            "continue; leave out --resume to start it, or check --study, --out and --storage"
        )
    memory = optuna.create_study(
        sampler=make_sampler(problem.space.sampler, seed, parallel), directions=problem.directions
    )
    sampler = optuna.samplers.RandomSampler(seed=seed)  # never asked: the mirror samples
    identity = problem.identity()
    dists = problem.distributions()
    knob_dists = {k.param: dists[k.param] for k in problem.space.knobs}
    if name not in existing:
        if before_create is not None:
            before_create()
        starts = problem.start_params() if start_from_greedy else []
        if before_write is not None:
            before_write()
        try:
            persistent = optuna.create_study(
                storage=storage, sampler=sampler, study_name=name, directions=problem.directions
            )
            persistent.set_user_attr(IDENTITY_ATTR, identity)
            for key, value in study_attrs(problem).items():
                persistent.set_user_attr(key, value)
        except optuna.exceptions.DuplicatedStudyError:
            raise StudyTakenError(
                f"study '{name}' was just created in {spec.label} by another driver; "
                "pass --resume to join it"
            ) from None
        except Exception as exc:
            raise StorageError(
                f"study '{name}' cannot be created in {spec.label} ({reason_of(exc)})"
            ) from exc
        for params in starts:
            memory.enqueue_trial(params)
        store = StudyStore(
            persistent, memory, 0, flush_interval_s, spec=spec, param_dists=knob_dists
        )
        store._stored = []
        return store
    persistent = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    _check_identity(name, spec, persistent.user_attrs.get(IDENTITY_ATTR), identity)
    if before_create is not None:
        before_create()
    old = study_records(persistent, stored=True)
    memory.add_trials([mirrored_trial(r, problem) for r in old])
    if before_write is not None:
        before_write()
    for t in persistent.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        persistent.tell(t.number, state=TrialState.FAIL)
    offset = len(persistent.get_trials(deepcopy=False)) - len(old)
    stored = {r.trial for r in old}
    store = StudyStore(
        persistent, memory, offset, flush_interval_s, stored, spec=spec, param_dists=knob_dists
    )
    store._stored = list(old)
    return store


def _is_new_sqlite(spec: StorageSpec) -> bool:
    """Whether ``spec`` is a SQLite file that does not exist yet (so holds no study; opening
    it creates Optuna's tables, most of a second)."""
    target = spec.target
    if not isinstance(target, str) or not target.startswith("sqlite:///"):
        return False
    path = target[len("sqlite:///") :]
    return path != ":memory:" and not Path(path).exists()


def study_attrs(problem: Problem) -> dict[str, Any]:
    """Study user attributes for people and dashboards: what was searched, on what."""
    graph, hw = problem.graph, problem.base_hw
    return {
        "model": graph.name,
        "graph_hash": graph.structural_hash,
        "space": problem.space.to_dict(),
        "space_file": problem.space.source,
        "hardware_base": hw.name,
        "hardware_base_hash": hw.hash,
        "search": "bilevel (exact plan per design)" if problem.bilevel else "plan-level",
        "objective_metrics": list(problem.objective_metrics),
    }


SCHEMA_RACE_TEXT = ("alembic_version", "duplicate key", "already exists", "UniqueViolation")
"""Errors of two processes creating Optuna's tables in one new database at the same moment."""

CONNECT_ATTEMPTS = 4
"""Tries to open a storage whose tables another driver is creating right now."""


def _connect(spec: StorageSpec) -> Any:
    """The Optuna storage object, opened once. Drivers started together on a new database
    race to create Optuna's tables (one gets a duplicate-key error): retry after a pause.

    Raises:
        StorageError: the storage cannot be opened (names it and the reason).
    """
    import random

    import optuna

    for attempt in range(CONNECT_ATTEMPTS):
        try:
            storage = optuna.storages.get_storage(spec.target)
            optuna.get_all_study_names(storage=storage)  # proves the tables are there
            return storage
        except Exception as exc:
            racing = any(text in str(exc) for text in SCHEMA_RACE_TEXT)
            if racing and attempt + 1 < CONNECT_ATTEMPTS:
                time.sleep(0.5 + random.random())
                continue
            if is_disk_full(exc):  # creating Optuna's tables: the SQL statement helps nobody
                raise StorageError(
                    f"study storage '{spec.label}' cannot be opened ({reason_of(exc)}); the trials "
                    "stored so far are safe: free disk space and run the command again"
                ) from exc
            raise StorageError(f"study storage '{spec.label}' cannot be opened: {exc}") from exc
    raise AssertionError("unreachable")


def _check_identity(name: str, spec: StorageSpec, stored: Any, identity: dict[str, str]) -> None:
    """Refuse to continue a study created for another problem, naming both."""
    if not isinstance(stored, dict):
        raise StorageError(
            f"study '{name}' in {spec.label} records no model, hardware or objective (made by "
            "an older fusiontune, or still being created); start a new one with --study NAME"
        )
    from fusiontune.search.problem import IDENTITY_KEYS

    for key in IDENTITY_KEYS:
        if stored.get(key) != identity.get(key):
            was = stored.get(f"{key}_text", stored.get(key))
            now = identity.get(f"{key}_text", identity.get(key))
            raise StorageError(
                f"study '{name}' in {spec.label} was created for {was}, not {now}; "
                "start a new study with --study NAME"
            )


__all__ = [
    "IDENTITY_ATTR",
    "JOURNAL_SUFFIXES",
    "POSTGRES_DRIVERS",
    "POSTGRES_SCHEMES",
    "open_study",
    "storage_for",
    "study_attrs",
]
