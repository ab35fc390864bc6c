"""Problem encoding: a search problem's decision variables and how a trial decodes into a plan.

Two kinds of problem (DESIGN §8, division of labour):

- **bilevel co-design** (:attr:`Problem.bilevel`: the space has hardware knobs and the
  objective is ``traffic``, ``energy``, ``cycles`` or ``multi``): a trial's only decision
  variables are ``hw:<field>``, one per knob. Its evaluation solves the plan exactly for that
  hardware (:func:`~fusiontune.search.optimize.optimal_plan`, objective
  :attr:`Problem.plan_objective`), so every trial pairs a design with its proven-optimal plan;
  ``multi`` minimises (energy, cycles, area) over designs.
- **plan-level search** (fixed hardware, or ``edp``, which no exact solver covers): the
  decision variables are

  - ``fuse:<src>-><dst>`` in {0, 1} for each edge of ``candidate_edges(graph, cfg)``;
  - ``mode:<op>`` in {merge, stream} for each chain of ``merge_candidates(graph, cfg)``;
  - ``hw:<field>`` for each hardware knob of the search space,

  and the assignment is repaired into a legal plan by ``plan_from_edges``; the repaired plan
  is what is evaluated and recorded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fusiontune.errors import ConfigError
from fusiontune.planner.plan import PlannerConfig
from fusiontune.search.space import (
    ADDITIVE_OBJECTIVES,
    DEFAULT_REPLICATION,
    OBJECTIVE_METRICS,
    Knob,
    SearchSpace,
)

if TYPE_CHECKING:
    import optuna

    from fusiontune.ir.graph import Graph
    from fusiontune.planner.plan import Plan
    from fusiontune.search.backends import EvalOutcome
    from fusiontune.sim.hardware import HardwareConfig

BRUTEFORCE_MAX_POINTS = 65536
"""Largest grid the bruteforce sampler accepts (2^16 points; beyond that use tpe/random)."""

MODE_CHOICES = ("merge", "stream")
"""Choices of a matrix chain (P3 merge or P4 stream)."""

IDENTITY_KEYS = ("graph", "hardware", "space", "objective", "planner")
"""What a study is (:meth:`Problem.identity`): a study resumed or joined with any of these
different is refused."""

CAPACITY_CONSTRAINT = "capacity"
"""Constraint key: number of hardware-capacity violations (rule 7), feasible when 0."""

BILEVEL_OBJECTIVES = ("traffic", "energy", "cycles", "multi")
"""Objectives of a bilevel co-design (an exact plan per design point)."""

MULTI_CODESIGN_METRICS = ("energy_pj", "cycles", "area_mm2")
"""What ``multi`` minimises in a bilevel co-design: the plan is fixed by the hardware, so the
trade-off is energy, latency and silicon."""

MULTI_PLAN_OBJECTIVE = "energy"
"""The plan solved per design point of a ``multi`` co-design (the energy optimum; its cycles
are those of that plan)."""


@dataclass(frozen=True)
class SolveSpec:
    """What a worker solves for a bilevel trial: ``optimal_plan(graph, hw, objective,
    config=config)``."""

    objective: str
    config: PlannerConfig


SMALL_INT_RANGE = 16
"""An integer knob with at most this many values is checked at every value, not only at its
ends (divisibility rules such as ``cores`` dividing ``n_crossbars`` are not monotonic)."""


CHIP_DIVISOR_KNOBS = ("cores", "concentration", "mesh_width")
"""Knobs of the many-core layout (docs/cores.md): valid only where they divide their partners,
so a range of them is checked at every value."""

CHIP_DIVIDED_KNOBS = ("n_crossbars", "buffer_bytes")
"""Knobs that ``cores`` must divide: on a chip of more than one core, checked at every value."""

CHIP_RANGE_MAX_VALUES = 4096
"""Largest range of a chip-layout knob checked value by value; a longer one is refused (give
``choices`` or a ``step``) rather than failing in the middle of a search."""


def knob_extremes(knob: Knob) -> tuple[Any, ...]:
    """The values of ``knob`` :meth:`Problem.check_knobs` tries: every choice of a categorical
    knob, every value of a small integer range, else the two ends."""
    if knob.kind == "categorical":
        return tuple(knob.choices)
    assert knob.low is not None and knob.high is not None
    if knob.kind == "int":
        low, high, step = int(knob.low), int(knob.high), int(knob.step or 1)
        values = range(low, high + 1, step)
        if len(values) <= SMALL_INT_RANGE:
            return tuple(values)
        return (values[0], values[-1])
    return (knob.low, knob.high)


@dataclass(frozen=True)
class Problem:
    """A fixed search problem: the graph, its decision variables and the base hardware."""

    graph: Graph
    space: SearchSpace
    config: PlannerConfig
    base_hw: HardwareConfig
    edges: tuple[tuple[str, str], ...]
    merge_keys: tuple[str, ...]

    @property
    def bilevel(self) -> bool:
        """Trials propose hardware only; each is evaluated with its exact optimal plan."""
        return is_bilevel(self.space)

    @property
    def replication(self) -> str:
        """The replication strategy every trial's plan gets (``SearchSpace.replication``)."""
        return self.space.replication

    @property
    def plan_objective(self) -> str:
        """The additive objective the exact solver minimises for this problem."""
        objective = self.space.objective
        return objective if objective in ADDITIVE_OBJECTIVES else MULTI_PLAN_OBJECTIVE

    @property
    def solve_spec(self) -> SolveSpec:
        return SolveSpec(self.plan_objective, self.config)

    @property
    def objective_metrics(self) -> tuple[str, ...]:
        """Metrics fields the objective values are made of."""
        return objective_metrics(self.space)

    @classmethod
    def build(cls, graph: Graph, space: SearchSpace, base_hw: HardwareConfig) -> Problem:
        from fusiontune.planner.candidates import (
            PlannerConfig,
            candidate_edges,
            merge_candidates,
        )

        config = PlannerConfig(max_group_size=space.max_group_size)
        edges = candidate_edges(graph, config)
        merges = merge_candidates(graph, config)
        problem = cls(graph, space, config, base_hw, edges, merges)
        problem.check_sampler()
        problem.check_knobs()
        return problem

    def identity(self) -> dict[str, str]:
        """What a study of this problem is, stored with the study: for each of
        :data:`IDENTITY_KEYS` a hash (compared on resume) and a ``<key>_text`` for messages."""
        import dataclasses
        import hashlib

        graph = self.graph
        inputs = ", ".join(
            f"{n} {'x'.join(str(d) for d in graph.tensors[n].shape)}" for n in graph.inputs
        )
        short = graph.structural_hash[:16]
        hw = self.base_hw
        space = {k: v for k, v in self.space.to_dict().items() if k in ("knobs", "constraints")}
        if self.space.replication != DEFAULT_REPLICATION:  # hashed only when set: old studies
            space["replication"] = self.space.replication  # keep their identity
        space_json = json.dumps(space, sort_keys=True, default=str)
        space_hash = hashlib.sha256(space_json.encode()).hexdigest()[:16]
        knobs = ", ".join(k.name for k in self.space.knobs) or "none"
        caps = ", ".join(c.metric for c in self.space.constraints) or "none"
        planner = {
            k: sorted(v) if isinstance(v, (set, frozenset)) else v
            for k, v in dataclasses.asdict(self.config).items()
        }
        planner_text = ", ".join(
            f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in planner.items()
        )
        from fusiontune.ops import AttentionRole, attention_role

        fused = sum(attention_role(op) is AttentionRole.FUSED for op in graph.ops)
        attention = ""
        if fused:  # the commands fuse by default; a study made before resumes with the switch
            attention = f"; {fused} attention(s) fused, --no-fuse-attention keeps barriers"
        return {
            "graph": graph.structural_hash,
            "graph_text": f"model {graph.name} (inputs {inputs}; graph {short}{attention})",
            "hardware": hw.hash,
            "hardware_text": f"hardware {hw.name} ({hw.hash})",
            "space": space_hash,
            "space_text": f"knobs {knobs}, constraints {caps} and replication "
            f"{self.space.replication} (space {space_hash})",
            "objective": self.space.objective,
            "objective_text": f"objective {self.space.objective}",
            "planner": json.dumps(planner, sort_keys=True, default=str),
            "planner_text": f"planner config {planner_text}",
        }

    @property
    def directions(self) -> list[Any]:
        return ["minimize"] * self.space.n_objectives

    def check_sampler(self) -> None:
        """Refuse bruteforce on a grid too large to walk."""
        if self.space.sampler != "bruteforce":
            return
        points = 1 if self.bilevel else 2 ** len(self.edges) * 2 ** len(self.merge_keys)
        for knob in self.space.knobs:
            if knob.kind == "categorical":
                points *= len(knob.choices)
            elif knob.kind == "int" or knob.step is not None:
                step = knob.step or 1.0
                assert knob.low is not None and knob.high is not None  # numeric: parse_space
                points *= int((knob.high - knob.low) // step) + 1
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
        """Apply each knob's extreme values to the base hardware, then every pair of knobs at
        their extreme values together (:func:`knob_extremes`): a range, or a combination of
        two ranges (``dac_bits`` up to 8 with ``act_bits`` down to 4), that the hardware
        refuses fails here, naming the search-space file, not in the middle of a search."""
        import itertools

        for knob in self.space.knobs:
            self._check_chip_range(knob)
        extremes = [(knob, knob_extremes(knob)) for knob in self.space.knobs]
        for knob, values in extremes:
            for value in values:
                self._check_chip(
                    {knob.name: value}, f"{self.space.source}: knobs.{knob.name} = {value!r}"
                )
        for (a, a_values), (b, b_values) in itertools.combinations(extremes, 2):
            for va, vb in itertools.product(a_values, b_values):
                self._check_chip(
                    {a.name: va, b.name: vb},
                    f"{self.space.source}: knobs.{a.name} = {va!r} with knobs.{b.name} = "
                    f"{vb!r} makes an invalid chip",
                    "; narrow the two ranges so every combination is valid",
                )

    def _check_chip(self, overrides: dict[str, Any], where: str, advice: str = "") -> None:
        """Refuse ``overrides`` of the base chip that make an invalid chip: the message is
        ``where: <the hardware's reason><advice>``."""
        try:
            self.base_hw.replace(**overrides)
        except ConfigError as exc:
            reason = str(exc).removeprefix("overrides: ")
            raise ConfigError(f"{where}: {reason}{advice}") from exc

    def _check_chip_range(self, knob: Knob) -> None:
        """Every value of an integer range on a chip-layout key must give a chip the placement
        model can lay out (``cores`` 130 in 84..168 does not divide 16,128 crossbars)."""
        chip_knob = knob.name in CHIP_DIVISOR_KNOBS or (
            knob.name in CHIP_DIVIDED_KNOBS
            and (self.base_hw.cores > 1 or any(k.name == "cores" for k in self.space.knobs))
        )
        if not chip_knob or knob.kind != "int":
            return
        assert knob.low is not None and knob.high is not None  # numeric: parse_space
        values = range(int(knob.low), int(knob.high) + 1, int(knob.step or 1))
        where = f"{self.space.source}: knobs.{knob.name}"
        if len(values) > CHIP_RANGE_MAX_VALUES:
            raise ConfigError(
                f"{where} spans {len(values)} values; a many-core layout key is valid only "
                f"where cores divides n_crossbars and buffer_bytes (docs/cores.md): give "
                f"choices, or a step so that at most {CHIP_RANGE_MAX_VALUES} values are checked"
            )
        for value in values:
            self._check_chip(
                {knob.name: value},
                f"{where} = {value!r} (inside {values[0]} .. {values[-1]})",
                "; give choices or a step that keep every value valid",
            )

    def distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
        """Optuna distribution of every decision variable (as :meth:`decode` suggests them)."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        out: dict[str, Any] = {}
        if not self.bilevel:
            out.update({edge_param(e): CategoricalDistribution((0, 1)) for e in self.edges})
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
        """Parameters that describe ``greedy_plan`` (maximal fusion, blind to the hardware)."""
        from fusiontune.planner.baselines import greedy_plan

        return self.plan_params(greedy_plan(self.graph, self.config))

    def start_params(self) -> list[dict[str, Any]]:
        """The trials a new study starts from: the hardware-aware greedy plan (groups join
        only when the union fits the base hardware), the hardware-blind greedy plan (maximal
        fusion), the TVM-like plan and the unfused plan (every op alone runs, tiled through
        DRAM where it must), so the search always has a good and a feasible incumbent."""
        from fusiontune.planner.baselines import tvm_like_plan, unfused_plan
        from fusiontune.sim.greedy import greedy_plan

        if self.bilevel:
            base = self.base_knob_params()
            return [base] if base else []
        starts = [
            self.plan_params(greedy_plan(self.graph, self.config, self.base_hw)),
            self.greedy_params(),
            self.plan_params(tvm_like_plan(self.graph, self.config)),
            self.plan_params(unfused_plan(self.graph)),
        ]
        seed = self.exact_seed_params()
        if seed is not None:
            starts.insert(0, seed)
        return [p for i, p in enumerate(starts) if p not in starts[:i]]

    def base_knob_params(self) -> dict[str, Any]:
        """The base hardware's value of every knob whose range holds it (the first design a
        bilevel study evaluates); empty when some knob's range excludes the base value."""
        params: dict[str, Any] = {}
        for knob in self.space.knobs:
            value = getattr(self.base_hw, knob.name)
            if knob.kind == "categorical":
                if value not in knob.choices:
                    return {}
            else:
                assert knob.low is not None and knob.high is not None
                if isinstance(value, bool) or not knob.low <= value <= knob.high:
                    return {}
                if knob.step is not None and (value - knob.low) % knob.step:
                    return {}
            params[knob.param] = value
        return params

    def exact_seed_params(self) -> dict[str, Any] | None:
        """For ``edp`` (no exact solver): the energy-optimal plan at base hardware, the
        nearest additive optimum, as the first trial; ``None`` for other objectives (their
        exact optimum is the oracle row) or when no plan fits the base hardware."""
        if self.space.objective != "edp":
            return None
        from fusiontune.search.optimize import optimal_plan

        answer = optimal_plan(self.graph, self.base_hw, MULTI_PLAN_OBJECTIVE, config=self.config)
        if answer.plan is None:
            return None
        return {**self.plan_params(answer.plan), **self.base_knob_params()}

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

    def decode_hardware(self, trial: optuna.trial.Trial) -> HardwareConfig:
        """Sample a bilevel trial's knobs (stored as Optuna params) into a hardware config."""
        knobs = {k.name: _suggest_knob(trial, k) for k in self.space.knobs}
        return self.base_hw.replace(**knobs)

    def values(self, metrics: dict[str, Any]) -> tuple[float, ...]:
        """Objective value(s) of a plan's metrics."""
        names = self.objective_metrics
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


def is_bilevel(space: SearchSpace) -> bool:
    """Whether a space is searched bilevel: hardware knobs and an objective the exact solver
    covers (``multi``: its energy)."""
    return bool(space.knobs) and space.objective in BILEVEL_OBJECTIVES


def objective_metrics(space: SearchSpace) -> tuple[str, ...]:
    """Metrics fields a space's objective values are made of."""
    if is_bilevel(space) and space.objective == "multi":
        return MULTI_CODESIGN_METRICS
    return tuple(OBJECTIVE_METRICS[space.objective])


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
