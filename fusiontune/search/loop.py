"""The search loop: Optuna ask -> decode -> evaluate (backend) -> tell (DESIGN §8).

A plan-level trial decodes into a repaired plan and its hardware; a bilevel trial into
hardware only, whose exact plan the worker solves. A (plan, hardware) pair — or, bilevel, a
hardware already solved — is answered from a cache.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fusiontune.errors import ConfigError
from fusiontune.search.backends import Backend, EvalOutcome, EvalTask
from fusiontune.search.problem import hw_json
from fusiontune.search.records import RECORD_ATTR, TrialRecord
from fusiontune.search.store import StudyStore

SOLVED = "solved"
"""Cache key part standing for "the exact plan of this hardware" (bilevel trials)."""

if TYPE_CHECKING:
    import optuna

    from fusiontune.planner.plan import Plan
    from fusiontune.search.problem import Problem
    from fusiontune.sim.hardware import HardwareConfig


def run_trials(
    store: StudyStore,
    problem: Problem,
    backend: Backend,
    n_trials: int,
    on_record: Callable[[TrialRecord], None] | None = None,
    groups: dict[tuple[str, str], list[dict[str, Any]]] | None = None,
) -> list[TrialRecord]:
    """Run ``n_trials`` more trials: ask a batch, submit it, tell results as they stream in.

    ``groups``: filled with the per-group metrics the evaluations returned, by (plan hash,
    hardware hash), for the groups table (not re-simulated at the end).

    Returns the records of the new trials in the order they were told.
    """
    study = store.memory
    offset = store.number_offset
    cache: dict[tuple[str, str], TrialRecord] = {
        _cache_key(problem, r.plan_hash, r.hw_hash): r
        for r in store.records()
        if r.state == "COMPLETE"
    }
    # key -> trials waiting for that evaluation (the first one was submitted)
    waiting: dict[tuple[str, str], list[tuple[optuna.trial.Trial, Plan | None, HardwareConfig]]]
    waiting = {}
    by_trial: dict[int, tuple[str, str]] = {}
    told: list[TrialRecord] = []

    def finish(trial: optuna.trial.Trial, record: TrialRecord) -> None:
        record = dataclasses.replace(record, params=dict(trial.params))
        _tell(study, trial, record)
        store.add(record)
        told.append(record)
        if on_record is not None:
            on_record(record)

    asked = 0
    try:
        while len(told) < n_trials:
            if getattr(study.sampler, "exhausted", False):  # bruteforce walked its whole grid
                n_trials = asked
            while asked < n_trials and backend.has_room():
                batch: list[EvalTask] = []
                while len(batch) < backend.plans_per_task and asked < n_trials:
                    trial = study.ask()
                    asked += 1
                    number = trial.number + offset
                    plan: Plan | None = None
                    try:
                        if problem.bilevel:
                            hw = problem.decode_hardware(trial)
                        else:
                            plan, hw = problem.decode(trial)
                    except ConfigError:
                        raise
                    except Exception as exc:  # repair or hardware rejected the assignment
                        error = f"{type(exc).__name__}: {exc}"
                        finish(trial, TrialRecord(number, "FAIL", error=error))
                        continue
                    key = _cache_key(problem, plan.hash if plan else "", hw.hash)
                    if key in cache:
                        finish(trial, _duplicate(cache[key], number))
                    elif key in waiting:
                        waiting[key].append((trial, plan, hw))
                    else:
                        waiting[key] = [(trial, plan, hw)]
                        by_trial[number] = key
                        solve = problem.solve_spec if plan is None else None
                        batch.append(EvalTask(number, plan, hw, solve, problem.replication))
                if batch:
                    backend.submit(batch)
            outcomes = backend.wait()
            if not outcomes and asked >= n_trials and not waiting:
                break
            for outcome in outcomes:
                key = by_trial.pop(outcome.trial)
                (trial, asked_plan, hw), *dupes = waiting.pop(key)
                solved = outcome.plan if asked_plan is None else asked_plan
                record = make_record(problem, outcome.trial, solved, hw, outcome)
                if record.state == "COMPLETE":
                    cache[key] = record
                    if groups is not None:
                        groups[(record.plan_hash, record.hw_hash)] = list(outcome.groups)
                finish(trial, record)
                for dupe, _, _ in dupes:
                    finish(dupe, _duplicate(record, dupe.number + offset))
    finally:
        store.flush()
    return told


def _cache_key(problem: Problem, plan_hash: str, hw_hash: str) -> tuple[str, str]:
    """What makes two trials the same evaluation: the plan and hardware, or (bilevel) the
    hardware alone, whose plan the solver fixes."""
    return (SOLVED if problem.bilevel else plan_hash, hw_hash)


def make_record(
    problem: Problem, number: int, plan: Plan | None, hw: HardwareConfig, outcome: EvalOutcome
) -> TrialRecord:
    """The record of one evaluated trial (``plan`` ``None``: a bilevel evaluation that failed
    before its plan was solved)."""
    base: dict[str, Any] = {
        "trial": number,
        "plan_json": plan.to_json() if plan is not None else "",
        "plan_hash": plan.hash if plan is not None else "",
        "hw_json": hw_json(hw),
        "hw_hash": hw.hash,
        "eval_s": outcome.eval_s,
        "worker": outcome.worker,
        "solver": dict(outcome.solver),
    }
    if outcome.failed:
        return TrialRecord(state="FAIL", error=outcome.error, **base)
    values = problem.values(outcome.metrics)
    if not all(math.isfinite(v) for v in values):
        return TrialRecord(state="FAIL", error=f"objective not finite: {values}", **base)
    return TrialRecord(
        state="COMPLETE",
        metrics=dict(outcome.metrics),
        feasible=outcome.feasible,
        violations=outcome.violations,
        constraints=problem.constraints(outcome),
        values=values,
        **base,
    )


def _duplicate(record: TrialRecord, number: int) -> TrialRecord:
    original = record.trial if record.duplicate_of < 0 else record.duplicate_of
    return dataclasses.replace(
        record, trial=number, duplicate_of=original, eval_s=0.0, worker="cache", uid=""
    )


def _tell(study: optuna.Study, trial: optuna.trial.Trial, record: TrialRecord) -> None:
    from optuna.trial import TrialState

    from fusiontune.search import optuna_adapter

    for key, value in record.constraints.items():
        trial.set_constraint(key, value)
    trial.set_user_attr(RECORD_ATTR, record.to_dict())
    values = list(record.values) if record.state == "COMPLETE" else None
    state = None if record.state == "COMPLETE" else TrialState.FAIL
    optuna_adapter.tell(study, trial, values, state)


def best_record(records: Sequence[TrialRecord], problem: Problem) -> TrialRecord | None:
    """Best feasible completed record (lowest objective; for ``multi``: lowest first value on
    the Pareto front, which is the lowest overall); infeasible ones only if none is feasible.
    Ties go to the smaller chip (``area_mm2``: designs of equal cost differ in silicon), then
    to the plan that moves the least data (``movement_bytes``, DRAM bytes on one core: many
    plans share the images/s of a ``throughput`` search), then to the earlier trial."""
    done = [r for r in records if r.state == "COMPLETE"]
    if not done:
        return None
    feasible = [r for r in done if r.feasible and all(v <= 0 for v in r.constraints.values())]
    pool = feasible or done
    return min(
        pool,
        key=lambda r: (
            r.values,
            r.metrics.get("area_mm2", 0.0),
            r.metrics.get("movement_bytes", r.metrics.get("traffic_bytes", 0)),
            r.trial,
        ),
    )
