"""Search spaces: which hardware, which knobs, which objective (DESIGN §8).

A search space is a small YAML file. It is validated first (every error names the file, the
key and what is allowed) and built into a frozen :class:`SearchSpace` second. The default
space (:data:`DEFAULT_SPACE_YAML`, the package data ``fusiontune/presets/spaces/default.yaml``)
ships with the package so ``fusiontune search resnet18`` works with no file at all.

Format::

    hardware: isaac_reram     # preset name or YAML path (left out: isaac_reram, ISAAC's 168
                              # tiles); null = the simulator's default, isaac_reram_flat
    objective: traffic        # traffic | energy | cycles | edp | movement | throughput | multi
    replication: exact        # exact | balance | uniform | none: weight copies of each trial
    sampler: local            # local | local-tpe | tpe | random | nsga2 | bruteforce
    trials: 300
    max_group_size: null      # optional cap on ops per group (null: none, the default)
    knobs:                    # optional hardware knobs, each a HardwareConfig field
      buffer_bytes: {low: 65536, high: 4194304, log: true}
      adc_bits: {choices: [6, 7, 8]}
    constraints:              # optional caps on numeric Metrics fields (feasible when <= max)
      energy_pj: {max: 1.0e9}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fusiontune import presets
from fusiontune.errors import ConfigError, check_keys, closest

OBJECTIVES = ("traffic", "energy", "cycles", "edp", "movement", "throughput", "multi")
"""Objective names; ``multi`` minimises traffic, energy and cycles together; ``movement`` the
DRAM bytes plus the NoC byte-hops at their energy ratio (``movement_bytes``, docs/cores.md);
``throughput`` the cycles per image of the batch pipeline with the trial's replication
(``pipeline_cycles``; images/s = clock / it)."""

REPLICATIONS = ("exact", "balance", "uniform", "none")
"""Replication strategies of a search (``fusiontune.sim.replication.STRATEGIES``): every trial's
plan gets its weight copies by this strategy before it is placed and priced."""

DEFAULT_REPLICATION = "exact"
"""The proven least bottleneck for each plan (``sim/replication.DEFAULT_STRATEGY``)."""

SAMPLERS = ("tpe", "random", "nsga2", "bruteforce", "local", "local-tpe")
"""Sampler names: Optuna's TPE, random, NSGA-II and brute force; ``local`` is the iterated
local search of :mod:`fusiontune.search.samplers` (random knobs), ``local-tpe`` the same with
TPE for the hardware knobs."""

DEFAULT_SAMPLER = "local"
"""Best/optimum traffic after 300 trials, mean of 3 seeds (results/bench_search.json): local
1.000 / 1.036 / 1.169 on bert_encoder / resnet18 / mobilenet_v2, tpe 1.000 / 1.147 / 3.411."""

OBJECTIVE_METRICS: Mapping[str, tuple[str, ...]] = {
    "traffic": ("traffic_bytes",),
    "energy": ("energy_pj",),
    "cycles": ("cycles",),
    "edp": ("energy_pj", "cycles"),  # product: energy-delay product (pJ x cycles)
    "movement": ("movement_bytes",),  # DRAM bytes + NoC byte-hops in DRAM-byte energy; not additive
    "throughput": ("pipeline_cycles",),  # cycles per image, batch pipeline; not additive
    "multi": ("traffic_bytes", "energy_pj", "cycles"),
}
"""Metrics fields each objective reads."""

ADDITIVE_OBJECTIVES = ("traffic", "energy", "cycles")
"""Objectives that are sums of per-group costs (the exact oracle solves these)."""

DEFAULT_TRIALS = 300
"""Default budget: ``fusiontune search resnet18`` (Ray, 2 workers) takes well under a minute
on 2 cores, inside the two-minute target (measured; see results/bench_search.json)."""

DEFAULT_MAX_GROUP_SIZE: int | None = None
"""No cap on group size (PlannerConfig.max_group_size): groups are bounded by legality and
capacity only; a cap is a user knob for experiments."""

DEFAULT_SPACE_YAML = presets.default_space_yaml()
"""The default space: ``fusiontune/presets/spaces/default.yaml`` (package data)."""

DEFAULT_HARDWARE = "isaac_reram"
"""The chip of the default space, and of a space file that leaves ``hardware`` out: ISAAC's 168
tiles (docs/cores.md). ``hardware: null`` is the simulator's default, ``isaac_reram_flat``."""

_TOP_KEYS = (
    "hardware",
    "objective",
    "sampler",
    "trials",
    "max_group_size",
    "knobs",
    "constraints",
    "replication",
)
_KNOB_KEYS = ("low", "high", "step", "log", "choices")


@dataclass(frozen=True)
class Knob:
    """One hardware knob: a HardwareConfig field and the range the sampler may choose from.

    Attributes:
        name: HardwareConfig field name (also the Optuna parameter ``hw:<name>``).
        kind: ``int``, ``float`` or ``categorical``.
        low, high: inclusive bounds (numeric kinds).
        step: grid step (numeric kinds, optional).
        log: sample on a log scale (numeric kinds).
        choices: allowed values (categorical).
    """

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()

    @property
    def param(self) -> str:
        """Optuna parameter name."""
        return f"hw:{self.name}"


@dataclass(frozen=True)
class Constraint:
    """A cap on a numeric Metrics field: the plan is feasible when ``metric <= max``."""

    metric: str
    max_value: float


@dataclass(frozen=True)
class SearchSpace:
    """A validated search space.

    Attributes:
        hardware: preset name or path of a hardware YAML (``None``: the default preset).
        objective: one of :data:`OBJECTIVES`.
        replication: one of :data:`REPLICATIONS` (weight copies of every trial's plan).
        sampler: one of :data:`SAMPLERS`.
        trials: trial budget.
        max_group_size: optional cap on the ops of one group (``None``: no cap).
        knobs: hardware knobs to search (empty: fixed hardware).
        constraints: caps on Metrics fields.
        source: file the space came from (``<default>`` for the embedded one).
    """

    hardware: str | None = None
    objective: str = "traffic"
    replication: str = DEFAULT_REPLICATION
    sampler: str = DEFAULT_SAMPLER
    trials: int = DEFAULT_TRIALS
    max_group_size: int | None = DEFAULT_MAX_GROUP_SIZE
    knobs: tuple[Knob, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    source: str = "<default>"

    @property
    def n_objectives(self) -> int:
        return 3 if self.objective == "multi" else 1

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (the YAML format), for storing with a study."""
        knobs: dict[str, Any] = {}
        for k in self.knobs:
            if k.kind == "categorical":
                knobs[k.name] = {"choices": list(k.choices)}
            else:
                entry: dict[str, Any] = {"low": k.low, "high": k.high, "log": k.log}
                if k.step is not None:
                    entry["step"] = k.step
                knobs[k.name] = entry
        return {
            "hardware": self.hardware,
            "objective": self.objective,
            "replication": self.replication,
            "sampler": self.sampler,
            "trials": self.trials,
            "max_group_size": self.max_group_size,
            "knobs": knobs,
            "constraints": {c.metric: {"max": c.max_value} for c in self.constraints},
        }


def load_space(path: str | Path | None = None) -> SearchSpace:
    """Read and validate a search space; ``None`` gives the embedded default.

    Raises:
        ConfigError: naming the file, the key and the allowed values.
    """
    from fusiontune.fileio import load_yaml, parse_yaml

    if path is None:
        return parse_space(parse_yaml(DEFAULT_SPACE_YAML, "<default>", ConfigError), "<default>")
    if not isinstance(path, (str, Path)):
        raise ConfigError(f"search space must be a YAML path or a SearchSpace, got {path!r}")
    data = load_yaml(path, ConfigError, "search space file", lambda d: parse_space(d, str(path)))
    return parse_space(data, source=str(path))


def parse_space(data: Any, source: str = "<space>") -> SearchSpace:
    """Validate plain data (a parsed YAML mapping) and build a :class:`SearchSpace`."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of keys {', '.join(_TOP_KEYS)}")
    check_keys(data, _TOP_KEYS, source)
    hardware = data.get("hardware", DEFAULT_HARDWARE)
    if hardware is not None and not isinstance(hardware, str):
        raise ConfigError(f"{source}: hardware must be a preset name, a YAML path or null")
    objective = _choice(data, "objective", OBJECTIVES, "traffic", source)
    replication = _choice(data, "replication", REPLICATIONS, DEFAULT_REPLICATION, source)
    sampler = _choice(data, "sampler", SAMPLERS, DEFAULT_SAMPLER, source)
    trials = _positive_int(data, "trials", DEFAULT_TRIALS, source)
    max_group_size = (
        None
        if data.get("max_group_size") is None
        else _positive_int(data, "max_group_size", 1, source)
    )
    knobs = tuple(_parse_knob(name, spec, source) for name, spec in _mapping(data, "knobs", source))
    constraints = tuple(
        _parse_constraint(name, spec, source)
        for name, spec in _mapping(data, "constraints", source)
    )
    if hardware is not None and source not in ("<default>", "<space>"):
        candidate = Path(source).parent / hardware
        if hardware.endswith((".yaml", ".yml")) and candidate.is_file():
            hardware = str(candidate)
    space = SearchSpace(
        hardware=hardware,
        objective=objective,
        replication=replication,
        sampler=sampler,
        trials=trials,
        max_group_size=max_group_size,
        knobs=knobs,
        constraints=constraints,
        source=source,
    )
    check_knobs_against_hardware(space)
    return space


def check_knobs_against_hardware(space: SearchSpace) -> None:
    """Check every knob names a HardwareConfig field (once the simulator is importable)."""
    if not space.knobs:
        return
    import dataclasses

    try:
        from fusiontune.sim.hardware import HardwareConfig
    except ModuleNotFoundError:  # simulator not built yet: checked again when evaluating
        return
    fields = [f.name for f in dataclasses.fields(HardwareConfig)]
    for knob in space.knobs:
        if knob.name not in fields:
            raise ConfigError(
                f"{space.source}: knobs.{knob.name} is not a hardware field"
                f"{closest(knob.name, fields)}; allowed: {', '.join(fields)}"
            )


def with_overrides(
    space: SearchSpace,
    *,
    objective: str | None = None,
    sampler: str | None = None,
    trials: int | None = None,
    hardware: str | Path | None = None,
    replication: str | None = None,
) -> SearchSpace:
    """The space with command-line overrides applied (validated like the file; ``hardware``
    is checked when it is loaded)."""
    import dataclasses

    changes: dict[str, Any] = {}
    if hardware is not None:
        changes["hardware"] = str(hardware)
    if objective is not None:
        changes["objective"] = _choice(
            {"objective": objective}, "objective", OBJECTIVES, "", "--objective"
        )
    if replication is not None:
        changes["replication"] = _choice(
            {"replication": replication}, "replication", REPLICATIONS, "", "--replication"
        )
    if sampler is not None:
        changes["sampler"] = _choice({"sampler": sampler}, "sampler", SAMPLERS, "", "--sampler")
    if trials is not None:
        changes["trials"] = _positive_int({"trials": trials}, "trials", 1, "--trials")
    return dataclasses.replace(space, **changes)


# ---- validation helpers ----------------------------------------------------------------------
def _choice(
    data: Mapping[str, Any], key: str, allowed: tuple[str, ...], default: str, source: str
) -> str:
    value = data.get(key, default)
    if value not in allowed:
        raise ConfigError(
            f"{source}: {key} '{value}' is not allowed{closest(str(value), allowed)}; "
            f"allowed: {', '.join(allowed)}"
        )
    return str(value)


def _positive_int(data: Mapping[str, Any], key: str, default: int, source: str) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{source}: {key} must be a positive integer, got {value!r}")
    return value


def _mapping(data: Mapping[str, Any], key: str, source: str) -> list[tuple[str, Any]]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {key} must be a mapping of name -> spec, got {value!r}")
    return [(str(k), v) for k, v in value.items()]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _parse_knob(name: str, spec: Any, source: str) -> Knob:
    where = f"{source}: knobs.{name}"
    if not isinstance(spec, dict):
        raise ConfigError(f"{where} must be a mapping with 'choices' or 'low'/'high', got {spec!r}")
    check_keys(spec, _KNOB_KEYS, where)
    if "choices" in spec:
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{where}.choices must be a non-empty list")
        if any(not isinstance(c, (int, float, str, bool)) or c is None for c in choices):
            raise ConfigError(f"{where}.choices may hold only numbers, strings or booleans")
        if len(set(choices)) != len(choices):
            raise ConfigError(f"{where}.choices has repeated values")
        if set(spec) - {"choices"}:
            raise ConfigError(f"{where}: 'choices' cannot be combined with low/high/step/log")
        return Knob(name, "categorical", choices=tuple(choices))
    if "low" not in spec or "high" not in spec:
        raise ConfigError(f"{where} needs 'choices' or both 'low' and 'high'")
    low, high, step, log = spec["low"], spec["high"], spec.get("step"), spec.get("log", False)
    if not _number(low) or not _number(high):
        raise ConfigError(f"{where}: low and high must be numbers, got {low!r} and {high!r}")
    if low > high:
        raise ConfigError(f"{where}: low ({low}) must not exceed high ({high})")
    if not isinstance(log, bool):
        raise ConfigError(f"{where}.log must be true or false, got {log!r}")
    if step is not None and (not _number(step) or step <= 0):
        raise ConfigError(f"{where}.step must be a positive number, got {step!r}")
    if log and low <= 0:
        raise ConfigError(f"{where}: log scale needs low > 0, got {low}")
    if log and step is not None:
        raise ConfigError(f"{where}: step and log cannot be combined")
    integral = all(isinstance(v, int) for v in (low, high) + ((step,) if step is not None else ()))
    return Knob(
        name,
        "int" if integral else "float",
        float(low),
        float(high),
        None if step is None else float(step),
        log,
    )


def _parse_constraint(name: str, spec: Any, source: str) -> Constraint:
    where = f"{source}: constraints.{name}"
    if not isinstance(spec, dict) or set(spec) != {"max"} or not _number(spec["max"]):
        raise ConfigError(f"{where} must be {{max: <number>}}, got {spec!r}")
    return Constraint(name, float(spec["max"]))
