"""Trial records: what one finished trial contributes to the tables (:class:`TrialRecord`),
its JSON form (the trial user attribute :data:`RECORD_ATTR`, so the study storage alone can
rebuild the tables on ``--resume``), and its compact Optuna trial form."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

    from fusiontune.search.problem import Problem

RECORD_ATTR = "fusiontune"
"""User attribute of each trial holding its record (plan, hardware, metrics)."""


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


def stored_trial(
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


def mirrored_trial(record: TrialRecord, problem: Problem) -> optuna.trial.FrozenTrial:
    """A stored trial with its parameters restored, for the sampler's history."""
    return stored_trial(record, problem.distributions())


def _constraint_attrs(record: TrialRecord) -> dict[str, float]:
    """System attributes in the form ``Trial.set_constraint`` writes them."""
    from fusiontune.search.optuna_adapter import constraints_key

    key = constraints_key()
    return {f"{key}:{k}": float(v) for k, v in record.constraints.items()}


__all__ = ["RECORD_ATTR", "TrialRecord", "mirrored_trial", "stored_trial", "study_records"]
