"""Candidate groups and edges: what some legal group of a graph can fuse.

Everything here comes from one hardware-free walk of the ideal lattice
(:func:`fusiontune.planner.summary.walk_summary`): every legal group is visited once, with no
cap on its size (DESIGN §5: groups are bounded by legality and capacity only).
"""

from __future__ import annotations

from fusiontune.ir.graph import Graph
from fusiontune.planner._index import bits, graph_index
from fusiontune.planner.groups import ALL_PATTERNS, Group, Mode, PlannerConfig
from fusiontune.planner.lattice import Lattice, ideals
from fusiontune.planner.legality import GroupView
from fusiontune.planner.summary import walk_summary

__all__ = [
    "ALL_PATTERNS",
    "PlannerConfig",
    "candidate_edges",
    "candidate_groups",
    "group_pattern",
    "merge_candidates",
]


def candidate_groups(graph: Graph, config: PlannerConfig | None = None) -> tuple[Group, ...]:
    """Every legal group, each legal mode its own entry, singletons included.

    Complete (every group of every legal plan is here) and unbounded: on a deep network
    this is every convex legal set of ops, tens of thousands of groups; the optimizer and the
    counters do not need the list. Ordered by first op (topological), then size, then ops,
    then mode.
    """
    lat = Lattice(graph, config)
    names = lat.s.ix.names
    seen: dict[tuple[int, Mode], None] = {}
    for base in ideals(lat):
        for t in lat.walk(base):
            for m in t.modes:
                seen[(t.mask, m)] = None
    rows = sorted(
        seen,
        key=lambda k: ((k[0] & -k[0]).bit_length(), k[0].bit_count(), bits(k[0]),
                       _MODE_ORDER[k[1]]),
    )  # fmt: skip
    return tuple(Group(tuple(names[i] for i in bits(mask)), mode) for mask, mode in rows)


_MODE_ORDER = {Mode.SINGLE: 0, Mode.FUSED: 1, Mode.MERGE: 2, Mode.STREAM: 3}


def candidate_edges(
    graph: Graph, config: PlannerConfig | None = None
) -> tuple[tuple[str, str], ...]:
    """Activation edges ``(producer op, consumer op)`` that some legal group fuses.

    Sorted by (producer, consumer) topological position: deterministic.
    """
    names = graph_index(graph).names
    return tuple((names[p], names[c]) for p, c in edge_index(graph, config))


def edge_index(graph: Graph, config: PlannerConfig | None = None) -> tuple[tuple[int, int], ...]:
    """:func:`candidate_edges` as op indices."""
    return walk_summary(graph, config or PlannerConfig()).edges


def merge_candidates(graph: Graph, config: PlannerConfig | None = None) -> tuple[str, ...]:
    """Names of LINEAR ops that start some legal P3 merge chain (topological order)."""
    names = graph_index(graph).names
    return tuple(names[i] for i in walk_summary(graph, config or PlannerConfig()).merge_firsts)


def group_pattern(graph: Graph, group: Group) -> str:
    """Label of a group for result tables: "single", "P1", "P2", "P1+P2", "P3", "P1+P4", ...

    P1 is present when element-wise ops ride along (in a merge: an epilogue after the last
    LINEAR; the AFFINE/LAYOUT ops folded inside the chain belong to P3); P2 when a WINDOW
    follows a LINEAR; P3 for ``merge``; P4 for ``stream``.
    """
    if group.mode is Mode.SINGLE:
        return "single"
    ix = graph_index(graph)
    pos = graph.op_index
    view = GroupView.of(ix, (pos[n] for n in group.ops), PlannerConfig())
    parts = set()
    if group.mode is Mode.MERGE:
        parts.add("P3")
        chain = set(view.linear) | set(view.between)
        if any(i not in chain for i in view.members):
            parts.add("P1")
    else:
        if view.has_p1:
            parts.add("P1")
        if any(view.ix.anc[w] & view.linear_mask for w in view.windows):
            parts.add("P2")
        if group.mode is Mode.STREAM:
            parts.add("P4")
    return "+".join(sorted(parts))
