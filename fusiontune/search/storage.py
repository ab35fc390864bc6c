"""Study storage: the persistent Optuna study, its in-memory mirror and the trial records.

Each finished trial carries one user attribute, :data:`RECORD_ATTR`, holding everything the
tables need (:class:`TrialRecord`), so the study storage alone can rebuild them (``--resume``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
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


@dataclass(frozen=True)
class TrialRecord:
    """What one finished trial contributes to the tables (JSON-able via :meth:`to_dict`)."""

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

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["violations"] = list(self.violations)
        data["values"] = list(self.values)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialRecord:
        data = dict(data)
        data["violations"] = tuple(data.get("violations", ()))
        data["values"] = tuple(data.get("values", ()))
        return cls(**data)


def storage_for(storage: str | None, study_dir: Path) -> Any:
    """Optuna storage: SQLite under ``study_dir`` by default, a journal file for ``*.log`` /
    ``*.journal`` / ``journal:PATH``, otherwise a database URL (e.g. PostgreSQL)."""
    import optuna

    if storage is None:
        return f"sqlite:///{(study_dir / 'study.db').resolve()}"
    journal = storage[len("journal:") :] if storage.startswith("journal:") else None
    if journal is None and storage.endswith((".log", ".journal", ".jsonl")):
        journal = storage
    if journal is not None:
        from optuna.storages.journal import JournalFileBackend

        Path(journal).parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(JournalFileBackend(journal))
    return storage


FLUSH_INTERVAL_S = 5.0
"""Finished trials are copied to the persistent storage at most this often (and at the end):
a crash loses at most this much work, and SQLite writes (~40 ms a trial) stay off the loop."""


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
        number_offset: added to in-memory trial numbers to give the recorded trial numbers
            (non-zero when a resumed study has gaps left by a crash).
    """

    def __init__(
        self,
        persistent: optuna.Study,
        memory: optuna.Study,
        number_offset: int,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        stored: set[int] | None = None,
    ) -> None:
        self.persistent = persistent
        self.memory = memory
        self.number_offset = number_offset
        self.flush_interval_s = flush_interval_s
        self.on_flush: Callable[[], None] | None = None
        """Called after each flush that stored trials (the API checkpoints its tables)."""
        self._stored = set(stored or ())  # trial numbers already in the persistent study
        self._last_flush_s = time.monotonic()

    def add(self, record: TrialRecord) -> None:
        """Note a finished trial (already told to :attr:`memory`); flush when it is time."""
        if time.monotonic() - self._last_flush_s >= self.flush_interval_s:
            self.flush()

    def flush(self) -> None:
        """Copy every finished trial of the mirror not yet stored to the persistent study,
        then call :attr:`on_flush`. Reading the mirror, not a queue, means a Ctrl-C anywhere
        between telling a trial and queueing it cannot lose it; stored one at a time, so a
        Ctrl-C during the flush leaves the rest for the next one."""
        new = [r for r in self.records() if r.trial not in self._stored]
        for record in new:
            self.persistent.add_trial(_stored_trial(record))
            self._stored.add(record.trial)
        if new and self.on_flush is not None:
            self.on_flush()
        self._last_flush_s = time.monotonic()

    def records(self) -> list[TrialRecord]:
        """Every finished trial's record (earlier runs included), by trial number."""
        return study_records(self.memory)


def open_study(
    name: str,
    storage: Any,
    problem: Problem,
    seed: int | None,
    resume: bool,
    start_from_greedy: bool = True,
    flush_interval_s: float = FLUSH_INTERVAL_S,
) -> StudyStore:
    """Create the study, or load it with ``resume``: trials left RUNNING are failed and the
    finished ones replayed into the in-memory mirror the sampler works on. A new study's
    first trials are the greedy and TVM-like plans unless ``start_from_greedy`` is false."""
    import optuna
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        existing = optuna.get_all_study_names(storage=storage)
    except Exception as exc:
        raise StorageError(f"study storage '{storage}' cannot be opened: {exc}") from exc
    if name in existing and not resume:
        raise StorageError(
            f"study '{name}' already exists in {storage}; pass --resume to continue it, "
            "or --study NAME / --out DIR for a new one"
        )
    persistent = optuna.create_study(
        storage=storage,
        sampler=optuna.samplers.RandomSampler(seed=seed),  # never asked: the mirror samples
        study_name=name,
        directions=problem.directions,
        load_if_exists=resume,
    )
    memory = optuna.create_study(
        sampler=make_sampler(problem.space.sampler, seed), directions=problem.directions
    )
    if name not in existing:
        persistent.set_user_attr("space", problem.space.to_dict())
        if start_from_greedy:
            for params in problem.start_params():
                memory.enqueue_trial(params)
        return StudyStore(persistent, memory, 0, flush_interval_s)
    if len(persistent.directions) != len(problem.directions):
        raise StorageError(
            f"study '{name}' has {len(persistent.directions)} objective(s); objective "
            f"'{problem.space.objective}' needs {len(problem.directions)}"
        )
    for t in persistent.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        persistent.tell(t.number, state=TrialState.FAIL)
    old = study_records(persistent)
    memory.add_trials([_mirrored_trial(r, problem) for r in old])
    offset = (old[-1].trial + 1 - len(old)) if old else 0
    return StudyStore(persistent, memory, offset, flush_interval_s, {r.trial for r in old})


def study_records(study: optuna.Study) -> list[TrialRecord]:
    """Records of every finished trial that the driver evaluated, by trial number."""
    records = []
    for t in study.get_trials(deepcopy=False):
        data = t.user_attrs.get(RECORD_ATTR)
        if data is not None:
            records.append(TrialRecord.from_dict(data))
    return sorted(records, key=lambda r: r.trial)


def _stored_trial(record: TrialRecord) -> optuna.trial.FrozenTrial:
    """The compact persistent form of a finished trial."""
    import optuna

    done = record.state == "COMPLETE"
    return optuna.trial.create_trial(
        state=optuna.trial.TrialState.COMPLETE if done else optuna.trial.TrialState.FAIL,
        values=list(record.values) if done else None,
        user_attrs={RECORD_ATTR: record.to_dict()},
        system_attrs=_constraint_attrs(record),
    )


def _mirrored_trial(record: TrialRecord, problem: Problem) -> optuna.trial.FrozenTrial:
    """A stored trial with its parameters restored, for the sampler's history."""
    import optuna

    dists = problem.distributions()
    params = {k: v for k, v in record.params.items() if k in dists}
    done = record.state == "COMPLETE"
    return optuna.trial.create_trial(
        state=optuna.trial.TrialState.COMPLETE if done else optuna.trial.TrialState.FAIL,
        values=list(record.values) if done else None,
        params=params,
        distributions={k: dists[k] for k in params},
        user_attrs={RECORD_ATTR: record.to_dict()},
        system_attrs=_constraint_attrs(record),
    )


def _constraint_attrs(record: TrialRecord) -> dict[str, float]:
    """System attributes in the form ``Trial.set_constraint`` writes them."""
    try:
        from optuna.study._constrained_optimization import _CONSTRAINTS_KEY as key
    except ImportError:  # pragma: no cover - Optuna moved it: fall back to the 5.0 name
        key = "constraints"
    return {f"{key}:{k}": float(v) for k, v in record.constraints.items()}
