"""Study storage: the persistent Optuna study, its in-memory mirror and the trial records.

Each finished trial carries one user attribute, :data:`RECORD_ATTR`, holding everything the
tables need (:class:`TrialRecord`), so the study storage alone can rebuild them (``--resume``).

A study knows what it is: the identity of its problem (model graph, hardware, knobs,
objective, planner configuration; :meth:`~fusiontune.search.problem.Problem.identity`) is
stored as the study user attribute :data:`IDENTITY_ATTR` when it is created, and a driver that
resumes or joins it with anything different is refused.

Several drivers may share one study through a journal file or a database server: trial
numbers are assigned by the storage when a finished trial is stored, so they are unique across
drivers. A SQLite file takes one driver at a time (a lock file next to it says which).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fusiontune.errors import StorageError
from fusiontune.search.sampler_factory import make_sampler

if TYPE_CHECKING:
    import optuna

    from fusiontune.search.problem import Problem

RECORD_ATTR = "fusiontune"
"""User attribute of each trial holding its record (plan, hardware, metrics)."""

IDENTITY_ATTR = "fusiontune_identity"
"""Study user attribute holding the problem identity the study was created for."""

JOURNAL_SUFFIXES = (".log", ".journal", ".jsonl")
"""A ``--storage`` ending in one of these is an Optuna journal file."""

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
"""Database URLs without an explicit driver; fusiontune picks an installed one."""

POSTGRES_DRIVERS = (("psycopg", "postgresql+psycopg://"), ("psycopg2", "postgresql+psycopg2://"))
"""Python PostgreSQL drivers SQLAlchemy can use, in order of preference (module, URL scheme)."""

FLUSH_INTERVAL_S = 5.0
"""Finished trials are copied to the persistent storage at most this often (and at the end):
a crash loses at most this much work, and SQLite writes (~40 ms a trial) stay off the loop."""


@dataclass(frozen=True)
class TrialRecord:
    """What one finished trial contributes to the tables (JSON-able via :meth:`to_dict`).

    ``trial`` is the storage's trial number once the record is stored (unique across the
    drivers of a study); before that it is this driver's provisional number. ``uid`` names the
    record independently of numbering (driver id and provisional number), so a flush
    interrupted after the storage committed a trial never stores it twice.
    """

    trial: int
    state: str
    plan_json: str = ""
    plan_hash: str = ""
    hw_json: str = ""
    hw_hash: str = ""
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    feasible: bool = False
    violations: tuple[str, ...] = ()
    constraints: dict[str, float] = dataclasses.field(default_factory=dict)
    values: tuple[float, ...] = ()
    eval_s: float = 0.0
    worker: str = ""
    duplicate_of: int = -1
    error: str = ""
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    uid: str = ""
    solver: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Bilevel trials: the exact solver's certificate of ``plan_json`` on ``hw_json``
    (``status``, ``proven``, ``gap``, ``value``, ``solve_s``)."""

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-able data (every field; containers copied: their items are
        plain numbers and strings, so a shallow copy is a full one)."""
        data: dict[str, Any] = {}
        for name in _RECORD_FIELDS:
            value = getattr(self, name)
            if isinstance(value, dict):
                value = dict(value)
            elif isinstance(value, tuple):
                value = list(value)
            data[name] = value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        data["violations"] = tuple(data.get("violations", ()))
        data["values"] = tuple(data.get("values", ()))
        return cls(**data)


_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(TrialRecord))


# ---- where the study lives --------------------------------------------------------------------
@dataclass(frozen=True)
class StorageSpec:
    """An Optuna storage and how messages name it.

    Attributes:
        target: a database URL or an Optuna storage object (journal file).
        label: the storage for people (journal path, URL without its password).
        lock_path: file locked while a driver uses a SQLite study (``None``: no lock needed).
    """

    target: Any
    label: str
    lock_path: Path | None = None


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

        try:
            Path(journal).parent.mkdir(parents=True, exist_ok=True)
            backend = JournalFileBackend(journal)
        except OSError as exc:
            raise StorageError(
                f"journal file {journal} cannot be opened ({_reason(exc)}); "
                "check the path and that its folder is writable"
            ) from exc
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


def _reason(exc: BaseException) -> str:
    """Why a storage operation failed, in a few words (a full disk said so plainly)."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for e in chain:
        text = str(e)
        if (isinstance(e, OSError) and e.errno in _DISK_FULL_ERRNOS) or any(
            s in text for s in _DISK_FULL_TEXT
        ):
            return "disk full"
    for e in chain:
        if isinstance(e, OSError) and e.strerror:
            return e.strerror
    text = " ".join(str(exc).split())
    return text.split(" (Background on this error")[0] or type(exc).__name__


_DISK_FULL_ERRNOS = frozenset({28, 122})  # ENOSPC, EDQUOT (Linux)
_DISK_FULL_TEXT = ("database or disk is full", "No space left on device", "Disk quota exceeded")


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) reports a full disk."""
    return _reason(exc) == "disk full"


class _WriterLock:
    """An exclusive lock on a SQLite study (``<db>.lock`` holding the owner's pid): SQLite takes
    one fusiontune driver at a time. Released by :meth:`release` or by the process's death."""

    def __init__(self, path: Path, label: str) -> None:
        self.path = path
        self._fd: int | None = None
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no lock, SQLite's own locking only
            return
        if not path.parent.is_dir():
            return  # SQLite cannot open the database either and says so
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise StorageError(
                f"study storage {label} cannot be opened ({_reason(exc)}); "
                "check the path and that its folder is writable"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StorageError(
                f"study storage {label} is in use by another fusiontune driver (pid {owner}); "
                "SQLite takes one driver at a time: wait for it to finish, or share a study "
                "between drivers with a journal file (--storage NAME.log) or PostgreSQL"
            ) from None
        with contextlib.suppress(OSError):  # the pid is for messages only (the disk may be full)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None


# ---- the study and its mirror ------------------------------------------------------------------
class StudyStore:
    """The persistent study (SQLite, journal file or database URL) and its in-memory mirror.

    The sampler works on the in-memory study: Optuna writes every ``suggest`` to its storage,
    and on SQLite that costs ~10 ms per parameter, far more than simulating a plan. Finished
    trials are copied to the persistent study in batches, compactly: state, objective values
    and one user attribute (:data:`RECORD_ATTR`) holding the record, which includes the
    parameters. On resume the mirror is rebuilt from those records.

    Attributes:
        persistent: the stored study.
        memory: the in-memory study the sampler asks and is told.
        spec: where the study is stored.
        number_offset: added to in-memory trial numbers to give provisional trial numbers
            (the storage's count of trials when the study was opened, less the replayed ones).
    """

    def __init__(
        self,
        persistent: optuna.Study,
        memory: optuna.Study,
        number_offset: int,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        stored: set[int] | None = None,
        spec: StorageSpec | None = None,
        lock: _WriterLock | None = None,
        param_dists: dict[str, Any] | None = None,
    ) -> None:
        self.persistent = persistent
        self.param_dists = dict(param_dists or {})
        """Distributions of the parameters stored on each persistent trial (the hardware
        knobs: what optuna-dashboard draws as axes; a plan's hundreds of fusion edges are in
        the record only)."""
        self.memory = memory
        self.number_offset = number_offset
        self.flush_interval_s = flush_interval_s
        self.spec = spec or StorageSpec(None, "the study storage")
        self.driver_id = uuid.uuid4().hex[:12]
        self.on_flush: Callable[[], None] | None = None
        """Called after each flush that stored trials (the API checkpoints its tables)."""
        # provisional (this driver's) trial number -> the storage's number, for every record
        # already stored; replayed records keep their number
        self._number = {n: n for n in stored or ()}
        self._check_uids = False  # a flush failed: look for records it may have committed
        self._lock = lock
        self._last_flush_s = time.monotonic()
        self._scanned = 0  # mirror trials before this index are all stored
        # what this driver stored, by storage number (None: unknown, read the storage); a
        # study only this driver writes (SQLite, locked) needs no read-back at checkpoints
        self._stored: list[TrialRecord] | None = None

    def add(self, record: TrialRecord) -> None:
        """Note a finished trial (already told to :attr:`memory`); flush when it is time."""
        if time.monotonic() - self._last_flush_s >= self.flush_interval_s:
            self.flush()

    def uid(self, number: int) -> str:
        """The record id of this driver's provisional trial ``number``."""
        return f"{self.driver_id}:{number}"

    def flush(self, final: bool = False) -> None:
        """Copy the finished trials of the mirror not yet stored to the persistent study,
        then call :attr:`on_flush`.

        Trials are stored in trial-number order and only up to the first one still running
        (unless ``final``: a run that stops with trials in flight), so the storage numbers
        each trial as this driver did: a trial's number in the tables, in the record and in
        Optuna is the same (for one driver; several drivers sharing a study interleave).

        A database study (SQLite, PostgreSQL) takes the whole batch in one transaction: a
        flush commits all of its trials or none, at the cost of one commit, not one per
        trial. Other storages take one trial at a time.

        Reading the mirror, not a queue, means a Ctrl-C anywhere between telling a trial and
        queueing it cannot lose it. Each write runs with Ctrl-C deferred, so an interrupted
        flush leaves the rest for the next one and never stores a trial twice; a failed
        write (disk full, server gone) is re-checked by record id before the next one.

        Raises:
            StorageError: the storage refused a write; names the storage and the reason.
        """
        new = self._unstored(final)
        if new:
            try:
                if self._check_uids:
                    self._adopt_committed()
                    new = [r for r in new if r.trial not in self._number]
                self._store(new)
                self._check_uids = False
            except (KeyboardInterrupt, StorageError):
                raise
            except Exception as exc:
                self._check_uids = True
                self._stored = None  # what was committed is known only to the storage now
                raise StorageError(
                    f"cannot store finished trials in {self.spec.label} ({_reason(exc)}); "
                    "the trials stored so far are safe: fix the cause (free disk space, "
                    "restart the server) and rerun with --resume"
                ) from exc
            if self.on_flush is not None:
                self.on_flush()
        self._last_flush_s = time.monotonic()

    def _unstored(self, final: bool) -> list[TrialRecord]:
        """Records of the mirror's finished trials not stored yet, by trial number: up to the
        first trial still running, or all of them (``final``). Trials before
        :attr:`_scanned` are all stored: a flush reads only the trials after them."""
        from optuna.trial import TrialState

        trials = self.memory.get_trials(deepcopy=False)
        new: list[TrialRecord] = []
        prefix = True  # every trial so far is stored (the scan may start after them)
        for index in range(self._scanned, len(trials)):
            t = trials[index]
            if not t.state.is_finished():
                if t.state == TrialState.RUNNING and not final:
                    break
                prefix = False  # enqueued (WAITING), or running in a final flush
                continue
            data = t.user_attrs.get(RECORD_ATTR)
            record = TrialRecord.from_dict(data) if data is not None else None
            if record is not None and record.trial not in self._number:
                new.append(record)
            elif prefix:
                self._scanned = index + 1
        return new

    def _store(self, records: list[TrialRecord]) -> None:
        """Store ``records`` (in order) and note the storage's number of each."""
        storage, study_id = self.persistent._storage, self.persistent._study_id

        done: dict[int, TrialRecord] = {}  # provisional number -> record as stored

        def template(record: TrialRecord, numbers: dict[int, int]) -> optuna.trial.FrozenTrial:
            dup = record.duplicate_of  # the original's stored number (maybe in this batch)
            stored = done[record.trial] = dataclasses.replace(
                record,
                uid=record.uid or self.uid(record.trial),
                duplicate_of=numbers.get(dup, self._number.get(dup, dup)),
            )
            return _stored_trial(stored, self.param_dists)

        def templates(first: int) -> list[optuna.trial.FrozenTrial]:
            batch = {r.trial: first + i for i, r in enumerate(records)}
            return [template(r, batch) for r in records]

        rdb = _rdb_of(storage)
        if rdb is not None:
            with deferred_interrupt():
                numbers = insert_trials(rdb, study_id, templates)
                self._number.update(zip((r.trial for r in records), numbers))
                self._note_stored(done)
            return
        for record in records:
            with deferred_interrupt():
                trial_id = storage.create_new_trial(study_id, template_trial=template(record, {}))
                self._number[record.trial] = storage.get_trial_number_from_id(trial_id)
                self._note_stored(done)

    def _note_stored(self, done: dict[int, TrialRecord]) -> None:
        """Add the records just stored, numbered by the storage, to :attr:`_stored`."""
        if self._stored is not None:
            for provisional, record in done.items():
                self._stored.append(dataclasses.replace(record, trial=self._number[provisional]))
        done.clear()

    def _adopt_committed(self) -> None:
        """Map records a failed flush committed after all (found by their uid)."""
        prefix = f"{self.driver_id}:"
        for t in self.persistent.get_trials(deepcopy=False):
            uid = str(t.user_attrs.get(RECORD_ATTR, {}).get("uid", ""))
            if uid.startswith(prefix):
                self._number[int(uid[len(prefix) :])] = t.number

    def records(self) -> list[TrialRecord]:
        """This driver's view: every finished trial of the mirror (earlier runs included,
        trials of this run by provisional number)."""
        return study_records(self.memory)

    def stored_records(self) -> list[TrialRecord]:
        """Every stored trial of the study, of every driver, by the storage's trial number.

        A SQLite study this driver holds the lock of has no other writer: its records are
        the ones this driver stored (kept as they were written), not read back."""
        if self._lock is not None and self._stored is not None and not self._check_uids:
            return sorted(self._stored, key=lambda r: r.trial)
        try:
            return study_records(self.persistent, stored=True)
        except Exception as exc:
            raise StorageError(
                f"cannot read the study from {self.spec.label} ({_reason(exc)})"
            ) from exc

    def close(self) -> None:
        """Release the SQLite writer lock and the database connections."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        engine = getattr(getattr(self.persistent._storage, "_backend", None), "engine", None)
        if engine is not None:
            engine.dispose()


_deferring = threading.local()


@contextlib.contextmanager
def deferred_interrupt(reraise: bool = True) -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) until the block is done, then raise it (``reraise``) or drop it:
    a trial is either stored and numbered, or not stored at all. Nested blocks defer to the
    outermost one; outside the main thread this does nothing (signals go to the main thread),
    and a process that ignores SIGINT (started in the background) keeps ignoring it.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or getattr(_deferring, "active", False)
        or not callable(signal.getsignal(signal.SIGINT))  # ignored (a background job): keep it so
    ):
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    _deferring.active = True
    try:
        yield
    finally:
        _deferring.active = False
        signal.signal(signal.SIGINT, previous)
    if caught and reraise:
        raise KeyboardInterrupt


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
    lock = _WriterLock(spec.lock_path, spec.label) if spec.lock_path is not None else None
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
        raise StorageError(
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
            raise StorageError(
                f"study '{name}' was just created in {spec.label} by another driver; "
                "pass --resume to join it"
            ) from None
        except Exception as exc:
            raise StorageError(
                f"study '{name}' cannot be created in {spec.label} ({_reason(exc)})"
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
    memory.add_trials([_mirrored_trial(r, problem) for r in old])
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


def _rdb_of(storage: Any) -> Any:
    """The Optuna ``RDBStorage`` behind ``storage`` (SQLite, PostgreSQL); ``None`` for other
    storages (journal files: one trial at a time through the public API)."""
    from optuna.storages import RDBStorage

    rdb = getattr(storage, "_backend", storage)  # optuna wraps an RDBStorage in a cache
    return rdb if isinstance(rdb, RDBStorage) else None


def insert_trials(
    rdb: Any, study_id: int, templates: Callable[[int], list[optuna.trial.FrozenTrial]]
) -> list[int]:
    """Store finished trials in ONE database transaction, numbered after the study's trials;
    returns their numbers. ``templates(first)`` gives the trials (state, values, params,
    attributes) once the number of the first is known (a record names its original by
    number, and the original may be in the same batch).

    What ``RDBStorage.create_new_trial(study_id, template_trial=...)`` writes for one trial,
    with Optuna's own table models, for a whole flush: that call costs a commit (an fsync on
    SQLite) and a dozen ORM round trips per trial, ~20-30 ms; here a flush pays one commit
    and batched inserts. The study row is locked first (``FOR UPDATE``, as Optuna does), so
    numbers are unique across drivers; every trial is committed or none (rollback).
    """
    import json

    from optuna.distributions import distribution_to_json
    from sqlalchemy import func

    from fusiontune.search import optuna_adapter

    models = optuna_adapter.rdb_models()
    value_repr = models.TrialValueModel.value_to_stored_repr
    with optuna_adapter.scoped_session(rdb) as session:
        models.StudyModel.find_or_raise_by_id(study_id, session, for_update=True)
        first = (
            session.query(func.count(models.TrialModel.trial_id))
            .filter(models.TrialModel.study_id == study_id)
            .scalar()
        )
        numbers = []
        for i, t in enumerate(templates(first)):
            trial = models.TrialModel(study_id=study_id, number=first + i, state=t.state)
            trial.datetime_start = t.datetime_start
            trial.datetime_complete = t.datetime_complete
            for objective, value in enumerate(t.values or ()):
                stored, kind = value_repr(value)
                trial.values.append(
                    models.TrialValueModel(objective=objective, value=stored, value_type=kind)
                )
            for name, value in t.params.items():
                dist = t.distributions[name]
                trial.params.append(
                    models.TrialParamModel(
                        param_name=name,
                        param_value=dist.to_internal_repr(value),
                        distribution_json=distribution_to_json(dist),
                    )
                )
            for key, value in t.user_attrs.items():
                trial.user_attributes.append(
                    models.TrialUserAttributeModel(key=key, value_json=json.dumps(value))
                )
            for key, value in t.system_attrs.items():
                trial.system_attributes.append(
                    models.TrialSystemAttributeModel(key=key, value_json=json.dumps(value))
                )
            session.add(trial)
            numbers.append(first + i)
        return numbers


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


def study_records(study: optuna.Study, stored: bool = False) -> list[TrialRecord]:
    """Records of every finished trial that the driver evaluated, by trial number.

    With ``stored`` the study is a persistent one: each record takes the storage's trial
    number (records are stored with their driver's provisional number)."""
    records = []
    for t in study.get_trials(deepcopy=False):
        data = t.user_attrs.get(RECORD_ATTR)
        if data is not None:
            record = TrialRecord.from_dict(data)
            if stored and record.trial != t.number:
                record = dataclasses.replace(record, trial=t.number)
            records.append(record)
    return sorted(records, key=lambda r: r.trial)


def _stored_trial(
    record: TrialRecord, param_dists: dict[str, Any] | None = None
) -> optuna.trial.FrozenTrial:
    """The compact persistent form of a finished trial: state, values, constraints, the
    parameters of ``param_dists`` and the record."""
    import optuna

    done = record.state == "COMPLETE"
    dists = param_dists or {}
    params = {k: v for k, v in record.params.items() if k in dists}
    return optuna.trial.create_trial(
        state=optuna.trial.TrialState.COMPLETE if done else optuna.trial.TrialState.FAIL,
        values=list(record.values) if done else None,
        params=params,
        distributions={k: dists[k] for k in params},
        user_attrs={RECORD_ATTR: record.to_dict()},
        system_attrs=_constraint_attrs(record),
    )


def _mirrored_trial(record: TrialRecord, problem: Problem) -> optuna.trial.FrozenTrial:
    """A stored trial with its parameters restored, for the sampler's history."""
    return _stored_trial(record, problem.distributions())


def _constraint_attrs(record: TrialRecord) -> dict[str, float]:
    """System attributes in the form ``Trial.set_constraint`` writes them."""
    from fusiontune.search.optuna_adapter import constraints_key

    key = constraints_key()
    return {f"{key}:{k}": float(v) for k, v in record.constraints.items()}
