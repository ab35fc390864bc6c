"""Candidate groups: every legal fusion group of a graph, and the edges they can fuse.

The recipe (STYLE §3): connected sets of ops up to the size cap are enumerated once per
graph (each exactly once, by the ESU algorithm of Wernicke 2006, anchored at the set's
first op in topological order); the rules of :mod:`fusiontune.planner.legality` keep the
legal ones, each legal mode as its own entry. Everything else in the planner (edges, merge
candidates, plan enumeration and counting) is derived from this table.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache

from fusiontune.errors import ConfigError
from fusiontune.ir.graph import Graph
from fusiontune.ir.opclass import OpClass
from fusiontune.planner._index import GraphIndex, graph_index
from fusiontune.planner.legality import GroupView, legal_modes
from fusiontune.planner.plan import Group, Mode

ALL_PATTERNS = frozenset({"P1", "P2", "P3", "P4"})
DEFAULT_MAX_GROUP_SIZE = 12  # rule 8: bounds enumeration (DESIGN §5)
_CACHE_TABLES = 16


@dataclass(frozen=True)
class PlannerConfig:
    """Knobs of the planner.

    Attributes:
        max_group_size: rule 8, the most ops in one group.
        patterns: enabled fusion patterns (DESIGN §4), for ablations such as
            ``{"P1"}`` or ``{"P1", "P2"}``. P1 element-wise, P2 conv+pool, P3 merge, P4 stream.
    """

    max_group_size: int = DEFAULT_MAX_GROUP_SIZE
    patterns: frozenset[str] = field(default_factory=lambda: ALL_PATTERNS)

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", frozenset(self.patterns))
        if (
            isinstance(self.max_group_size, bool)
            or not isinstance(self.max_group_size, int)
            or self.max_group_size < 1
        ):
            raise ConfigError(
                f"PlannerConfig.max_group_size: expected an integer >= 1, got "
                f"{self.max_group_size!r}"
            )
        unknown = sorted(self.patterns - ALL_PATTERNS)
        if unknown:
            raise ConfigError(
                f"PlannerConfig.patterns: unknown pattern(s) {unknown}; allowed: "
                + ", ".join(sorted(ALL_PATTERNS))
            )


@dataclass(frozen=True)
class CandidateSet:
    """One legal set of ops with all its legal modes (index form, for the planner's loops)."""

    members: tuple[int, ...]
    mask: int
    modes: tuple[Mode, ...]


def candidate_table(graph: Graph, config: PlannerConfig | None = None) -> tuple[CandidateSet, ...]:
    """Every legal op set (size <= cap) with its legal modes, ordered by first op, then size."""
    return _table(graph, config or PlannerConfig())


@lru_cache(maxsize=_CACHE_TABLES)
def _table(graph: Graph, config: PlannerConfig) -> tuple[CandidateSet, ...]:
    ix = graph_index(graph)
    fusable = 0
    for i, cls in enumerate(ix.classes):
        if cls is not OpClass.OPAQUE:
            fusable |= 1 << i
    neighbor_masks = tuple(ix.mask(nb) for nb in ix.neighbors)
    stop_multi_linear = not ({"P3", "P4"} & config.patterns)
    linear = 0
    for i, cls in enumerate(ix.classes):
        if cls is OpClass.LINEAR:
            linear |= 1 << i
    table: list[CandidateSet] = []
    for v in range(ix.n):
        if not fusable >> v & 1:
            table.append(CandidateSet((v,), 1 << v, (Mode.SINGLE,)))
            continue
        found = []
        stop = linear if stop_multi_linear else 0
        for mask, desc, anc in _connected_sets(ix, v, config.max_group_size, fusable,
                                               neighbor_masks, stop):  # fmt: skip
            if desc & anc & ~mask:
                continue  # not convex (rule 1): the common case, decided without a view
            members = _bits_sorted(mask)
            modes = legal_modes(GroupView(ix, members, mask, config), structure_checked=True)
            if modes:
                found.append(CandidateSet(members, mask, modes))
        found.sort(key=lambda c: (len(c.members), c.members))
        table.extend(found)
    return tuple(table)


def _connected_sets(
    ix: GraphIndex,
    v: int,
    cap: int,
    fusable: int,
    neighbor_masks: tuple[int, ...],
    stop_linear: int,
) -> Iterator[tuple[int, int, int]]:
    """Connected sets of fusable ops whose smallest index is ``v`` (ESU, each set once).

    Yields ``(set, descendants, ancestors)`` masks (the set is convex iff
    ``descendants & ancestors`` lies inside it). ``stop_linear`` marks LINEAR ops when no
    multi-LINEAR pattern is enabled: a set holding two of them is never legal, nor is any
    superset, so it is not extended.
    """
    above = ~((1 << (v + 1)) - 1) & fusable
    desc, anc = ix.desc, ix.anc

    def extend(
        sub: int, size: int, ext: list[int], nbhd: int, d: int, a: int
    ) -> Iterator[tuple[int, int, int]]:
        yield sub, d, a
        if size == cap:
            return
        ext = list(ext)
        while ext:
            w = ext.pop()
            bit = 1 << w
            if stop_linear & bit and sub & stop_linear:
                continue
            new = neighbor_masks[w] & above & ~nbhd
            new_ext = ext + list(_bits_sorted(new))
            yield from extend(sub | bit, size + 1, new_ext, nbhd | new | bit, d | desc[w],
                              a | anc[w])  # fmt: skip

    start_nbhd = neighbor_masks[v] | (1 << v)
    first_ext = list(_bits_sorted(neighbor_masks[v] & above))
    yield from extend(1 << v, 1, first_ext, start_nbhd, desc[v], anc[v])


def _bits_sorted(mask: int) -> tuple[int, ...]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return tuple(out)


def candidate_groups(graph: Graph, config: PlannerConfig | None = None) -> tuple[Group, ...]:
    """Every legal group up to the size cap, each legal mode its own entry, singletons included.

    Complete: every group of every legal plan is in this tuple (the exact oracle solves a set
    partitioning over it). Ordered by first op (topological), then size, then ops, then mode.
    """
    names = graph_index(graph).names
    return tuple(
        Group(tuple(names[i] for i in c.members), m)
        for c in candidate_table(graph, config)
        for m in c.modes
    )


def candidate_edges(
    graph: Graph, config: PlannerConfig | None = None
) -> tuple[tuple[str, str], ...]:
    """Activation edges ``(producer op, consumer op)`` that some legal group fuses.

    Sorted by (producer, consumer) topological position: deterministic.
    """
    ix = graph_index(graph)
    return tuple(
        (ix.names[p], ix.names[c]) for p, c in _edge_index(graph, config or PlannerConfig())
    )


@lru_cache(maxsize=_CACHE_TABLES)
def _edge_index(graph: Graph, config: PlannerConfig) -> tuple[tuple[int, int], ...]:
    ix = graph_index(graph)
    pairs: set[tuple[int, int]] = set()
    for c in candidate_table(graph, config):
        if len(c.members) < 2:
            continue
        for i in c.members:
            for s in ix.succs[i]:
                if c.mask >> s & 1:
                    pairs.add((i, s))
    return tuple(sorted(pairs))


def merge_candidates(graph: Graph, config: PlannerConfig | None = None) -> tuple[str, ...]:
    """Names of LINEAR ops that start some legal P3 merge chain (topological order)."""
    ix = graph_index(graph)
    firsts = set()
    for c in candidate_table(graph, config):
        if Mode.MERGE in c.modes:
            firsts.add(next(i for i in c.members if ix.classes[i] is OpClass.LINEAR))
    return tuple(ix.names[i] for i in sorted(firsts))


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
