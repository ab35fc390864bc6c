"""The search driver: Optuna ask -> repair -> evaluate (backend) -> tell (DESIGN §8).

Decision variables of a trial:

- ``fuse:<src>-><dst>`` in {0, 1} for each edge of ``candidate_edges(graph, cfg)``;
- ``mode:<op>`` in {merge, stream} for each chain of ``merge_candidates(graph, cfg)``;
- ``hw:<field>`` for each hardware knob of the search space.

The assignment is repaired into a legal plan by ``plan_from_edges``; the repaired plan is what
is evaluated and recorded. A (plan, hardware) pair already evaluated is answered from a cache.
Each finished trial carries one user attribute, :data:`RECORD_ATTR`, holding everything the
tables need, so the study storage alone can rebuild them (``--resume``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fusiontune.errors import ConfigError, StorageError
from fusiontune.search.backends import Backend, EvalOutcome, EvalTask
from fusiontune.search.space import OBJECTIVE_METRICS, Knob, SearchSpace

if TYPE_CHECKING:
    import optuna

    from fusiontune.ir.graph import Graph
    from fusiontune.planner.candidates import PlannerConfig
    from fusiontune.planner.plan import Plan
    from fusiontune.sim.hardware import HardwareConfig

RECORD_ATTR = "fusiontune"
"""User attribute of each trial holding its record (plan, hardware, metrics)."""

BRUTEFORCE_MAX_POINTS = 65536
"""Largest grid the bruteforce sampler accepts (2^16 points; beyond that use tpe/random)."""

NSGA2_POPULATION = 20
"""NSGA-II population: small enough for several generations within a few hundred trials."""

MODE_CHOICES = ("merge", "stream")
"""Choices of a matrix chain (P3 merge or P4 stream)."""

CAPACITY_CONSTRAINT = "capacity"
"""Constraint key: number of hardware-capacity violations (rule 7), feasible when 0."""


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


@dataclass(frozen=True)
class Problem:
    """A fixed search problem: the graph, its decision variables and the base hardware."""

    graph: Graph
    space: SearchSpace
    config: PlannerConfig
    base_hw: HardwareConfig
    edges: tuple[tuple[str, str], ...]
    merge_keys: tuple[str, ...]

    @classmethod
    def build(cls, graph: Graph, space: SearchSpace, base_hw: HardwareConfig) -> Problem:
        from fusiontune.planner.candidates import (
            PlannerConfig,
            candidate_edges,
            merge_candidates,
        )

        config = PlannerConfig(max_group_size=space.max_group_size)
        edges = tuple(tuple(e) for e in candidate_edges(graph, config))
        merges = tuple(merge_candidates(graph, config))
        problem = cls(graph, space, config, base_hw, edges, merges)  # type: ignore[arg-type]
        problem.check_sampler()
        problem.check_knobs()
        return problem

    @property
    def directions(self) -> list[Any]:
        return ["minimize"] * self.space.n_objectives

    def check_sampler(self) -> None:
        """Refuse bruteforce on a grid too large to walk."""
        if self.space.sampler != "bruteforce":
            return
        points = 2 ** len(self.edges) * 2 ** len(self.merge_keys)
        for knob in self.space.knobs:
            if knob.kind == "categorical":
                points *= len(knob.choices)
            elif knob.kind == "int" or knob.step is not None:
                step = knob.step or 1.0
                points *= int((knob.high - knob.low) // step) + 1  # type: ignore[operator]
            else:
                raise ConfigError(
                    f"{self.space.source}: sampler bruteforce needs a step for float knob "
                    f"'{knob.name}'"
                )
        if points > BRUTEFORCE_MAX_POINTS:
            raise ConfigError(
                f"{self.space.source}: sampler bruteforce would walk {points} points "
                f"(more than {BRUTEFORCE_MAX_POINTS}); use tpe or random"
            )

    def check_knobs(self) -> None:
        """Apply each knob's extreme values to the base hardware once: a range the hardware
        refuses fails here, naming the search-space file, not in the middle of a search."""
        for knob in self.space.knobs:
            values = knob.choices if knob.kind == "categorical" else (knob.low, knob.high)
            for value in values:
                if knob.kind == "int":
                    value = int(value)
                try:
                    self.base_hw.replace(**{knob.name: value})
                except ConfigError as exc:
                    reason = str(exc).removeprefix("overrides: ")
                    raise ConfigError(
                        f"{self.space.source}: knobs.{knob.name} = {value!r}: {reason}"
                    ) from exc

    def distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
        """Optuna distribution of every decision variable (as :meth:`decode` suggests them)."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        out: dict[str, Any] = {edge_param(e): CategoricalDistribution((0, 1)) for e in self.edges}
        for key in self.merge_keys:
            out[f"mode:{key}"] = CategoricalDistribution(MODE_CHOICES)
        for k in self.space.knobs:
            if k.kind == "categorical":
                out[k.param] = CategoricalDistribution(k.choices)
            elif k.kind == "int":
                assert k.low is not None and k.high is not None
                out[k.param] = IntDistribution(
                    int(k.low), int(k.high), log=k.log, step=int(k.step or 1)
                )
            else:
                assert k.low is not None and k.high is not None
                out[k.param] = FloatDistribution(k.low, k.high, log=k.log, step=k.step)
        return out

    def greedy_params(self) -> dict[str, Any]:
        """Parameters that describe ``greedy_plan`` (the first trial of a new study)."""
        from fusiontune.planner.baselines import greedy_plan

        return self.plan_params(greedy_plan(self.graph, self.config))

    def start_params(self) -> list[dict[str, Any]]:
        """The trials a new study starts from: the greedy plan (maximal fusion, blind to the
        hardware) and the TVM-like plan (small groups: feasible on a tight chip where greedy
        overflows the buffer), so the search always has a good and a feasible incumbent."""
        from fusiontune.planner.baselines import tvm_like_plan

        starts = [self.greedy_params(), self.plan_params(tvm_like_plan(self.graph, self.config))]
        return [p for i, p in enumerate(starts) if p not in starts[:i]]

    def plan_params(self, plan: Plan) -> dict[str, Any]:
        """Parameters that describe ``plan``: an edge is fused when both ends share a group, a
        chain takes the mode of the group holding its first op."""
        group_of = plan.group_of()
        params: dict[str, Any] = {
            edge_param(e): int(group_of[e[0]] == group_of[e[1]]) for e in self.edges
        }
        for key in self.merge_keys:
            mode = plan.groups[group_of[key]].mode.value
            params[f"mode:{key}"] = mode if mode in MODE_CHOICES else MODE_CHOICES[0]
        return params

    def decode(self, trial: optuna.trial.Trial) -> tuple[Plan, HardwareConfig]:
        """Sample the trial's variables and repair them into a legal plan."""
        from fusiontune.planner.baselines import plan_from_edges

        fused = [e for e in self.edges if trial.suggest_categorical(edge_param(e), (0, 1)) == 1]
        merges = {
            k: str(trial.suggest_categorical(f"mode:{k}", MODE_CHOICES)) for k in self.merge_keys
        }
        knobs = {k.name: _suggest_knob(trial, k) for k in self.space.knobs}
        hw = self.base_hw.replace(**knobs) if knobs else self.base_hw
        plan = plan_from_edges(self.graph, fused, merges or None, self.config)
        return plan, hw

    def values(self, metrics: dict[str, Any]) -> tuple[float, ...]:
        """Objective value(s) of a plan's metrics."""
        names = OBJECTIVE_METRICS[self.space.objective]
        if self.space.objective == "edp":
            return (float(metrics[names[0]]) * float(metrics[names[1]]),)
        return tuple(float(metrics[n]) for n in names)

    def constraints(self, outcome: EvalOutcome) -> dict[str, float]:
        """Constraint values (feasible when all <= 0): capacity, then the space's caps."""
        out = {
            CAPACITY_CONSTRAINT: 0.0 if outcome.feasible else float(max(1, len(outcome.violations)))
        }
        for cap in self.space.constraints:
            if cap.metric not in outcome.metrics:
                allowed = sorted(
                    k for k, v in outcome.metrics.items() if isinstance(v, (int, float))
                )
                raise ConfigError(
                    f"{self.space.source}: constraints.{cap.metric} is not a metric; "
                    f"allowed: {', '.join(allowed)}"
                )
            value = float(outcome.metrics[cap.metric])
            out[cap.metric] = (
                value / cap.max_value - 1.0 if cap.max_value else value - cap.max_value
            )
        return out


def edge_param(edge: tuple[str, str]) -> str:
    """Optuna parameter name of a candidate fusion edge."""
    return f"fuse:{edge[0]}->{edge[1]}"


def hw_json(hw: HardwareConfig) -> str:
    """Canonical JSON of a hardware configuration (stored with every row)."""
    return json.dumps(hw.to_dict(), sort_keys=True, default=str)


def _suggest_knob(trial: optuna.trial.Trial, knob: Knob) -> Any:
    if knob.kind == "categorical":
        return trial.suggest_categorical(knob.param, knob.choices)
    assert knob.low is not None and knob.high is not None
    if knob.kind == "int":
        return trial.suggest_int(
            knob.param, int(knob.low), int(knob.high), step=int(knob.step or 1), log=knob.log
        )
    return trial.suggest_float(knob.param, knob.low, knob.high, step=knob.step, log=knob.log)


def _bruteforce_class() -> type:
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)

        class AskTellBruteForce(optuna.samplers.BruteForceSampler):
            """BruteForceSampler for ask/tell: when the grid is exhausted Optuna calls
            ``study.stop()``, which raises outside ``optimize``; record it instead (the trial is
            already stored, Optuna sets its state in a ``finally``)."""

            exhausted = False

            def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
                try:
                    super().after_trial(study, trial, state, values)
                except RuntimeError as exc:
                    if "Study.stop" not in str(exc):
                        raise
                    self.exhausted = True

    return AskTellBruteForce


def _bruteforce_sampler(seed: int | None) -> optuna.samplers.BaseSampler:
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return _bruteforce_class()(seed=seed)


# ---- study -----------------------------------------------------------------------------------
def make_sampler(name: str, seed: int | None) -> optuna.samplers.BaseSampler:
    """The Optuna sampler for a name of :data:`fusiontune.search.space.SAMPLERS`.

    Constraints reach every sampler through ``trial.set_constraint`` (Optuna 5).
    """
    import optuna

    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=NSGA2_POPULATION, seed=seed)
    if name == "bruteforce":
        return _bruteforce_sampler(seed)
    if name in ("local", "local-tpe"):
        from fusiontune.search.samplers import LocalSearchSampler

        knobs = optuna.samplers.TPESampler(seed=seed) if name == "local-tpe" else None
        return LocalSearchSampler(seed=seed, independent_sampler=knobs)
    from fusiontune.search.space import SAMPLERS

    raise ConfigError(f"sampler '{name}' is not known; allowed: {', '.join(SAMPLERS)}")


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


# ---- the loop ----------------------------------------------------------------------------------
def run_trials(
    store: StudyStore,
    problem: Problem,
    backend: Backend,
    n_trials: int,
    on_record: Callable[[TrialRecord], None] | None = None,
) -> list[TrialRecord]:
    """Run ``n_trials`` more trials: ask a batch, submit it, tell results as they stream in.

    Returns the records of the new trials in the order they were told.
    """
    study = store.memory
    offset = store.number_offset
    cache: dict[tuple[str, str], TrialRecord] = {
        (r.plan_hash, r.hw_hash): r for r in store.records() if r.state == "COMPLETE"
    }
    # key -> trials waiting for that evaluation (the first one was submitted)
    waiting: dict[tuple[str, str], list[tuple[optuna.trial.Trial, Plan, HardwareConfig]]] = {}
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
                    try:
                        plan, hw = problem.decode(trial)
                    except ConfigError:
                        raise
                    except Exception as exc:  # repair or hardware rejected the assignment
                        error = f"{type(exc).__name__}: {exc}"
                        finish(trial, TrialRecord(number, "FAIL", error=error))
                        continue
                    key = (plan.hash, hw.hash)
                    if key in cache:
                        finish(trial, _duplicate(cache[key], number))
                    elif key in waiting:
                        waiting[key].append((trial, plan, hw))
                    else:
                        waiting[key] = [(trial, plan, hw)]
                        by_trial[number] = key
                        batch.append(EvalTask(number, plan, hw))
                if batch:
                    backend.submit(batch)
            outcomes = backend.wait()
            if not outcomes and asked >= n_trials and not waiting:
                break
            for outcome in outcomes:
                key = by_trial.pop(outcome.trial)
                (trial, plan, hw), *dupes = waiting.pop(key)
                record = _record(problem, outcome.trial, plan, hw, outcome)
                if record.state == "COMPLETE":
                    cache[key] = record
                finish(trial, record)
                for dupe, _, _ in dupes:
                    finish(dupe, _duplicate(record, dupe.number + offset))
    finally:
        store.flush()
    return told


def _record(
    problem: Problem, number: int, plan: Plan, hw: HardwareConfig, outcome: EvalOutcome
) -> TrialRecord:
    base: dict[str, Any] = {
        "trial": number,
        "plan_json": plan.to_json(),
        "plan_hash": plan.hash,
        "hw_json": hw_json(hw),
        "hw_hash": hw.hash,
        "eval_s": outcome.eval_s,
        "worker": outcome.worker,
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
        record, trial=number, duplicate_of=original, eval_s=0.0, worker="cache"
    )


def _tell(study: optuna.Study, trial: optuna.trial.Trial, record: TrialRecord) -> None:
    from optuna.trial import TrialState

    for key, value in record.constraints.items():
        trial.set_constraint(key, value)
    trial.set_user_attr(RECORD_ATTR, record.to_dict())
    if record.state == "COMPLETE":
        study.tell(trial, values=list(record.values))
    else:
        study.tell(trial, state=TrialState.FAIL)


def best_record(records: Sequence[TrialRecord], problem: Problem) -> TrialRecord | None:
    """Best feasible completed record (lowest objective; for ``multi``: lowest traffic on the
    Pareto front, which is the lowest traffic overall); infeasible ones only if none is feasible."""
    done = [r for r in records if r.state == "COMPLETE"]
    if not done:
        return None
    feasible = [r for r in done if r.feasible and all(v <= 0 for v in r.constraints.values())]
    pool = feasible or done
    return min(pool, key=lambda r: (r.values, r.trial))
