"""Plans: a partition of a graph's ops into fusion groups (DESIGN §5, last paragraph).

A :class:`Group` lists its ops (by name, topological order) and its :class:`Mode`. A
:class:`Plan` lists its groups ordered by first op (see :meth:`Plan.of`). The canonical JSON
``{"groups": [{"ops": [...], "mode": "..."}]}`` gives a stable hash used for
de-duplication and storage. Legality is checked by :func:`fusiontune.planner.check_plan`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING, Any

from fusiontune.errors import ConfigError, IllegalPlanError

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph

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


@dataclass(frozen=True)
class Plan:
    """A partition of all ops of a graph into groups, ordered by their first op."""

    groups: tuple[Group, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", tuple(self.groups))

    @classmethod
    def of(cls, graph: Graph, groups: Iterable[Group]) -> Plan:
        """Canonical plan: ops sorted topologically inside each group, groups ordered by
        their first op.

        The canonical order is not always an execution order: a legal group ``{a, c}`` may
        need the output of a group ``{b}`` listed after it (``a < b < c``, ``b -> c``). An
        executor sorts the groups topologically (the quotient graph of a legal plan is
        acyclic).
        """
        idx = graph.op_index
        canon = [Group(tuple(sorted(g.ops, key=idx.__getitem__)), g.mode) for g in groups]
        canon.sort(key=lambda g: idx[g.ops[0]])
        return cls(tuple(canon))

    def to_dict(self) -> dict[str, Any]:
        return {"groups": [g.to_dict() for g in self.groups]}

    def to_json(self, indent: int | None = None) -> str:
        """Canonical JSON (compact by default; the hash is over the compact form)."""
        if indent is None:
            return json.dumps(self.to_dict(), separators=(",", ":"))
        return json.dumps(self.to_dict(), indent=indent)

    @cached_property
    def hash(self) -> str:
        """First 16 hex digits of the SHA-256 of the canonical JSON."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @property
    def n_groups(self) -> int:
        return len(self.groups)

    def group_of(self) -> dict[str, int]:
        """Op name -> index of its group."""
        return {op: i for i, g in enumerate(self.groups) for op in g.ops}

    @classmethod
    def from_dict(
        cls, data: Any, graph: Graph, source: str = "plan", config: PlannerConfig | None = None
    ) -> Plan:
        """Build and validate a plan; raise :class:`IllegalPlanError` naming what is wrong.

        Args:
            data: ``{"groups": [{"ops": [...], "mode": ...}, ...]}``.
            graph: the graph the plan partitions.
            source: where the data came from (file name), for messages.
            config: planner configuration the plan must satisfy (default: the default one).
        """
        from fusiontune.frontend.plan_schema import check_plan_data

        check_plan_data(data, source)
        groups: list[Group] = []
        seen: dict[str, int] = {}
        for i, entry in enumerate(data["groups"]):
            if (
                not isinstance(entry, dict)
                or not isinstance(entry.get("ops"), list)
                or not entry["ops"]
            ):
                raise IllegalPlanError(f"{source}: groups[{i}] needs a non-empty 'ops' list")
            mode = entry.get(
                "mode", Mode.SINGLE.value if len(entry["ops"]) == 1 else Mode.FUSED.value
            )
            if mode not in {m.value for m in Mode}:
                raise IllegalPlanError(
                    f"{source}: groups[{i}].mode '{mode}' is not one of "
                    f"{', '.join(m.value for m in Mode)}"
                )
            for op in entry["ops"]:
                if op not in graph.op_by_name:
                    from fusiontune.errors import closest

                    raise IllegalPlanError(
                        f"{source}: groups[{i}] names op '{op}', which is not in graph "
                        f"'{graph.name}'{closest(str(op), graph.op_by_name)}"
                    )
                if op in seen:
                    raise IllegalPlanError(
                        f"{source}: op '{op}' is in two groups (groups[{seen[op]}] and groups[{i}])"
                    )
                seen[op] = i
            groups.append(Group(tuple(entry["ops"]), Mode(mode)))
        missing = [op.name for op in graph.ops if op.name not in seen]
        if missing:
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise IllegalPlanError(f"{source}: {len(missing)} op(s) are in no group: {shown}")
        plan = cls.of(graph, groups)
        from fusiontune.planner.legality import check_plan

        check_plan(graph, plan, config, source=source)
        return plan

    @classmethod
    def from_json(
        cls, text: str, graph: Graph, source: str = "plan", config: PlannerConfig | None = None
    ) -> Plan:
        from fusiontune.fileio import parse_json

        return cls.from_dict(parse_json(text, source, IllegalPlanError), graph, source, config)


def singleton_plan(graph: Graph, names: Sequence[str] | None = None) -> Plan:
    """Every op in a group of its own (the unfused plan)."""
    names = names if names is not None else [op.name for op in graph.ops]
    return Plan(tuple(Group((n,), Mode.SINGLE) for n in names))
