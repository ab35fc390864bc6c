"""What a plan is made of: a :class:`Group` of ops and its :class:`Mode`, and the planner's
knobs (:class:`PlannerConfig`).

The bottom of the planner: the legality rules (``legality``) and the plans built from groups
(``plan``) both import this module, and it imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from fusiontune.errors import ConfigError

ALL_PATTERNS = frozenset({"P1", "P2", "P3", "P4"})


@dataclass(frozen=True)
class PlannerConfig:
    """Knobs of the planner.

    Attributes:
        max_group_size: an optional cap on the ops of one group (``None``, the default: no
            cap). Groups are bounded by legality (DESIGN §5 rules 1–6) and capacity (rule 7);
            a cap is a user knob for experiments, never part of "the optimum".
        patterns: enabled fusion patterns (DESIGN §4), for ablations such as
            ``{"P1"}`` or ``{"P1", "P2"}``. P1 element-wise, P2 conv+pool, P3 merge, P4 stream.
    """

    max_group_size: int | None = None
    patterns: frozenset[str] = field(default_factory=lambda: ALL_PATTERNS)

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", frozenset(self.patterns))
        cap = self.max_group_size
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ConfigError(
                f"PlannerConfig.max_group_size: expected an integer >= 1 or None (no cap), "
                f"got {cap!r}"
            )
        unknown = sorted(self.patterns - ALL_PATTERNS)
        if unknown:
            raise ConfigError(
                f"PlannerConfig.patterns: unknown pattern(s) {unknown}; allowed: "
                + ", ".join(sorted(ALL_PATTERNS))
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain form (stored with studies and results)."""
        return {"max_group_size": self.max_group_size, "patterns": sorted(self.patterns)}


class Mode(str, Enum):
    """How a group executes.

    - ``single``: one op on its own.
    - ``fused``: several ops, at most one LINEAR among them, one pass, nothing stored in
      between (P1 element-wise epilogues/prologues, P2 conv+pool, two-pass STATS groups).
    - ``merge``: P3 matrix chain, the LINEAR ops become one matmul with merged weights.
    - ``stream``: P4 layer pipeline, two or more LINEAR stages passing row bands through
      on-chip line buffers; arithmetic unchanged.
    """

    SINGLE = "single"
    FUSED = "fused"
    MERGE = "merge"
    STREAM = "stream"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Group:
    """One fusion group: op names in topological order and the group's mode."""

    ops: tuple[str, ...]
    mode: Mode

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", tuple(self.ops))
        object.__setattr__(self, "mode", Mode(self.mode))

    def to_dict(self) -> dict[str, Any]:
        return {"ops": list(self.ops), "mode": self.mode.value}

    @property
    def key(self) -> tuple[tuple[str, ...], str]:
        """Hashable identity of the group (used to cache group costs)."""
        return (self.ops, self.mode.value)


class Partition(Protocol):
    """What :func:`~fusiontune.planner.legality.check_plan` reads of a plan: its groups
    (a :class:`~fusiontune.planner.plan.Plan` is one)."""

    @property
    def groups(self) -> tuple[Group, ...]: ...
