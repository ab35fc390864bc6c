"""The study store: the persistent Optuna study and its in-memory mirror
(:class:`StudyStore`), with batched flushes (one database transaction a flush,
:func:`insert_trials`), Ctrl-C deferred around each write (:func:`deferred_interrupt`), and
the SQLite writer lock (:class:`WriterLock`). Opening a study: :mod:`fusiontune.search.storage`.

Several drivers may share one study through a journal file or a database server: trial
numbers are assigned by the storage when a finished trial is stored, so they are unique across
drivers. A SQLite file takes one driver at a time (the lock file next to it says which).
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
from fusiontune.search.records import RECORD_ATTR, TrialRecord, stored_trial, study_records

if TYPE_CHECKING:
    import optuna


FLUSH_INTERVAL_S = 5.0
"""Finished trials are copied to the persistent storage at most this often (and at the end):
a crash loses at most this much work, and SQLite writes (~40 ms a trial) stay off the loop."""


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


def reason_of(exc: BaseException) -> str:
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
        if (isinstance(e, OSError) and e.errno == _FILE_TOO_LARGE_ERRNO) or any(
            s in str(e) for s in _FILE_TOO_LARGE_TEXT
        ):
            return FILE_TOO_LARGE
        if "disk I/O error" in str(e):  # SQLite's word for a write the kernel refused
            return DISK_IO_ERROR
    for e in chain:
        if isinstance(e, OSError) and e.strerror:
            return e.strerror
    text = " ".join(str(exc).split())
    return text.split(" (Background on this error")[0] or type(exc).__name__


_DISK_FULL_ERRNOS = frozenset({28, 122})  # ENOSPC, EDQUOT (Linux)
_DISK_FULL_TEXT = ("database or disk is full", "No space left on device", "Disk quota exceeded")
_FILE_TOO_LARGE_ERRNO = 27  # EFBIG: past the process's file-size limit (ulimit -f)
_FILE_TOO_LARGE_TEXT = ("File too large",)
FILE_TOO_LARGE = "file too large: over the file-size limit, ulimit -f"
DISK_IO_ERROR = "disk I/O error: a full disk, a file-size limit or a failing device"
_OUT_OF_SPACE = frozenset({"disk full", FILE_TOO_LARGE, DISK_IO_ERROR})


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) reports a full disk, or a write
    refused as one would be (a file-size limit; SQLite's "disk I/O error")."""
    return reason_of(exc) in _OUT_OF_SPACE


class StudyTakenError(StorageError):
    """Another driver holds this study (a SQLite study's lock) or has just created it: the
    results folder is that driver's, and a refused driver removes nothing from it."""


class WriterLock:
    """An exclusive lock on a SQLite study (``<db>.lock`` holding the owner's pid): SQLite takes
    one fusiontune driver at a time. Released by :meth:`release` or by the process's death."""

    def __init__(self, path: Path, label: str, study: str | None = None) -> None:
        """``label``: the storage as messages name it; ``study``: the study being opened."""
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
                f"study storage {label} cannot be opened ({reason_of(exc)}); "
                "check the path and that its folder is writable"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            which = f" (study '{study}')" if study else ""
            then = " and continue it with --resume" if study else ""
            raise StudyTakenError(
                f"study storage {label}{which} is in use by another fusiontune driver (pid "
                f"{owner}); SQLite takes one driver at a time: wait for it to finish{then}, or "
                "share a study between drivers with a journal file (--storage NAME.log) or "
                "PostgreSQL"
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
        lock: WriterLock | None = None,
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
                    f"cannot store finished trials in {self.spec.label} ({reason_of(exc)}); "
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
            return stored_trial(stored, self.param_dists)

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
                f"cannot read the study from {self.spec.label} ({reason_of(exc)})"
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
    """Hold Ctrl-C (SIGINT) until the block is done, then hand it to the handler that was in
    place (``reraise``; Python's default raises ``KeyboardInterrupt``) or drop it:
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
        if callable(previous):  # the handler in place takes it (default: raises)
            previous(signal.SIGINT, None)
        raise KeyboardInterrupt  # a handler that only noted it: the block is still stopped


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


__all__ = [
    "FLUSH_INTERVAL_S",
    "StorageSpec",
    "StudyStore",
    "WriterLock",
    "deferred_interrupt",
    "insert_trials",
    "is_disk_full",
    "reason_of",
]
