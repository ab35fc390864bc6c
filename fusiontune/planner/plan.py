"""Plans: a partition of a graph's ops into fusion groups (DESIGN §5, last paragraph).

A :class:`Group` lists its ops (by name, topological order) and its :class:`Mode` (both from
``groups``, re-exported here). A :class:`Plan` lists its groups ordered by first op (see
:meth:`Plan.of`). The canonical JSON ``{"groups": [{"ops": [...], "mode": "..."}]}`` gives a
stable hash used for de-duplication and storage. :meth:`Plan.from_json` and
:meth:`Plan.from_dict` are the one validating reader of plan JSON: its shape
(``plan_schema``), op names, then legality (:func:`fusiontune.planner.legality.check_plan`).

Imports run one way: ``groups`` <- ``legality`` <- ``plan``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from fusiontune.errors import IllegalPlanError, closest
from fusiontune.fileio import parse_json
from fusiontune.planner.groups import ALL_PATTERNS, Group, Mode, PlannerConfig
from fusiontune.planner.legality import check_plan
from fusiontune.planner.plan_schema import check_plan_data

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph

__all__ = ["ALL_PATTERNS", "Group", "Mode", "Plan", "PlannerConfig", "singleton_plan"]


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
        check_plan(graph, plan, config, source=source)
        return plan

    @classmethod
    def from_json(
        cls, text: str, graph: Graph, source: str = "plan", config: PlannerConfig | None = None
    ) -> Plan:
        return cls.from_dict(parse_json(text, source, IllegalPlanError), graph, source, config)


def singleton_plan(graph: Graph, names: Sequence[str] | None = None) -> Plan:
    """Every op in a group of its own (the unfused plan)."""
    names = names if names is not None else [op.name for op in graph.ops]
    return Plan(tuple(Group((n,), Mode.SINGLE) for n in names))
