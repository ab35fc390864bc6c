"""Hardware-free facts of every legal group: candidate edges, their patterns, merge chains.

Every legal group is a step of some *remainder* (:mod:`fusiontune.planner.remainders`), so
one walk per remainder reached from the whole graph visits them all; wide graphs have far
fewer remainders than ideals. :func:`walk_summary` is exact and unbounded (the search's
decision variables need every candidate edge). :func:`summary_within` stops after a work
budget; what it then reports is still proven (each pattern of an edge comes from a legal
group that holds it), completed by a bounded breadth-first walk around each edge not yet
labelled, and marked ``complete=False``: a pattern it lacks is unknown, not refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from fusiontune.ir.graph import Graph
from fusiontune.planner._index import bits
from fusiontune.planner.groups import Mode, PlannerConfig
from fusiontune.planner.lattice import PATTERN_BITS, Lattice, Node
from fusiontune.planner.remainders import NODE_UNITS, OverBudget, Remainders

LOCAL_WALK_MIN_NODES = 64
"""Nodes each edge's local walk may visit at least, once a budgeted summary ran out."""


@dataclass(frozen=True)
class WalkSummary:
    """Hardware-free facts of the legal groups of a graph.

    Attributes:
        edges: activation edges ``(producer, consumer)`` (indices) held by some legal group.
        edge_labels: pattern bits (:data:`PATTERN_BITS`) of the legal groups holding each edge.
        merge_firsts: first LINEAR op of every legal ``merge`` group.
        n_remainders: remainders walked.
        complete: every legal group was visited; ``False``: the budget ran out, and the
            edges, labels and merge chains are those of the legal groups visited (each one
            proven, some possibly missing).
    """

    edges: tuple[tuple[int, int], ...]
    edge_labels: dict[tuple[int, int], int]
    merge_firsts: tuple[int, ...]
    n_remainders: int
    complete: bool = True


@lru_cache(maxsize=16)
def walk_summary(graph: Graph, config: PlannerConfig) -> WalkSummary:
    """Every legal group visited once per remainder that can start it: the exact summary."""
    return _summarise(Lattice(graph, config), None)


@lru_cache(maxsize=16)
def summary_within(graph: Graph, config: PlannerConfig, budget: int) -> WalkSummary:
    """:func:`walk_summary` if it takes at most ``budget`` work units, else a proven partial
    summary (``complete=False``) from about that much work: half for the walks over
    remainders, half for the local walks around the edges still unlabelled."""
    return _summarise(Lattice(graph, config), budget)


def _summarise(lat: Lattice, budget: int | None) -> WalkSummary:
    half = None if budget is None else max(1, budget // 2)  # remainders, then local walks
    rem = Remainders(lat, half)
    labeller = _EdgeLabeller(lat)
    seen: set[int] = set()
    queue: list[int] = []
    complete = True
    try:
        queue += rem.roots()
        seen.update(queue)
        while queue:
            key = queue.pop()
            for t in rem.steps(key, on_node=labeller.visit):
                for sub in rem.split(key & ~t.mask):
                    if sub not in seen:
                        seen.add(sub)
                        queue.append(sub)
            labeller.finish_walk()
    except OverBudget:
        labeller.finish_walk()
        complete = False
        _local_walks(lat, labeller, half or 0)
    labels = labeller.labels
    edges = tuple(sorted(e for e, lab in labels.items() if lab))
    return WalkSummary(
        edges=edges,
        edge_labels={e: labels[e] for e in edges},
        merge_firsts=tuple(sorted(labeller.merge_firsts)),
        n_remainders=len(seen),
        complete=complete,
    )


def _local_walks(lat: Lattice, labeller: _EdgeLabeller, budget: int) -> None:
    """Label edges no visited group held, each from a bounded walk around it.

    For edge ``p -> c``: breadth-first (smallest groups first) over the groups grown from
    ``{p}`` in the walk from the ideal of ``p``'s ancestors, up to an even share of
    ``budget`` nodes; each legal group found labels every edge inside it.
    """
    s = lat.s
    todo = sorted(
        {p for p, c, _ in s.ix.edges if not labeller.labels.get((p, c)) and _may_fuse(lat, p, c)}
    )
    if not todo:
        return
    cap = max(LOCAL_WALK_MIN_NODES, budget // NODE_UNITS // len(todo))
    for p in todo:
        base = s.ix.anc[p]
        root = lat._root(base, None)
        if not root.frontier >> p & 1:
            continue
        level = [lat._child(root, p, base, None)]
        visited = 1
        while level and visited < cap:
            nxt: list[Node] = []
            for node in level:
                modes = lat.modes(node)
                if modes:
                    labeller.label_group(node, modes)
                if not lat._can_grow(node):
                    continue
                for v in bits(node.frontier):
                    if (node.maxel & ~s.pred_mask[v]) >> v:
                        continue  # reverse search: each group from one parent only
                    child = lat._child(node, v, base, None)
                    if lat._dead(child, None):
                        continue
                    nxt.append(child)
                    visited += 1
                    if visited >= cap:
                        break
                if visited >= cap:
                    break
            level = nxt
        for node in level:  # the last level was built but not yet looked at
            modes = lat.modes(node)
            if modes:
                labeller.label_group(node, modes)


def _may_fuse(lat: Lattice, p: int, c: int) -> bool:
    """False when no group can hold ``p -> c``: an end or an op between them is OPAQUE."""
    s = lat.s
    hull = (1 << p) | (1 << c) | (s.ix.desc[p] & s.ix.anc[c])
    return not hull & s.opaque


class _EdgeLabeller:
    """Labels each edge with the patterns of the legal groups holding it, during walks.

    An edge added at a walk node lies inside every group of that node's subtree, and every
    legal group holding it is in the subtree of the node that added it on its path. So an
    edge's labels are the union, over the nodes adding it, of their subtrees' group labels:
    a post-order pass over the walk (rebuilt here from its pre-order callbacks).
    """

    def __init__(self, lattice: Lattice) -> None:
        self.lat = lattice
        self.labels: dict[tuple[int, int], int] = {}
        self.merge_firsts: set[int] = set()
        self._path: list[tuple[int, int, int, list[tuple[int, int]]]] = []  # mask, n, label, edges

    def visit(self, node: Node, modes: tuple[Mode, ...]) -> None:
        path = self._path
        while path and not (node.n == path[-1][1] + 1 and node.mask & path[-1][0] == path[-1][0]):
            self._pop()
        parent = path[-1][0] if path else 0
        v = (node.mask & ~parent).bit_length() - 1
        new_edges = [(p, v) for p in bits(self.lat.s.pred_mask[v] & node.mask)]
        label = 0
        if modes and node.n > 1:
            for m in modes:
                label |= _label(self.lat, node, m)
                if m is Mode.MERGE:
                    self.merge_firsts.add(_first_linear(self.lat, node.lin))
        path.append((node.mask, node.n, label, new_edges))

    def label_group(self, node: Node, modes: tuple[Mode, ...]) -> None:
        """Label every edge inside one legal group (outside a walk)."""
        label = 0
        if node.n > 1:
            for m in modes:
                label |= _label(self.lat, node, m)
                if m is Mode.MERGE:
                    self.merge_firsts.add(_first_linear(self.lat, node.lin))
        if not label:
            return
        pm = self.lat.s.pred_mask
        for v in bits(node.mask):
            for p in bits(pm[v] & node.mask):
                self.labels[(p, v)] = self.labels.get((p, v), 0) | label

    def finish_walk(self) -> None:
        while self._path:
            self._pop()

    def _pop(self) -> None:
        _, _, label, new_edges = self._path.pop()
        for e in new_edges:
            self.labels[e] = self.labels.get(e, 0) | label
        if self._path:
            mask, n, parent_label, edges = self._path[-1]
            self._path[-1] = (mask, n, parent_label | label, edges)


def _first_linear(lat: Lattice, lin: int) -> int:
    """The LINEAR member no other LINEAR member precedes (the head of a P3 chain)."""
    for i in bits(lin):
        if not lat.s.ix.anc[i] & lin:
            return i
    raise AssertionError("internal: a merge group without a first LINEAR op")


def _label(lat: Lattice, node: Node, mode: Mode) -> int:
    """Pattern bits of a legal multi-op group (as :func:`group_pattern` names them)."""
    s = lat.s
    out = 0
    if mode is Mode.MERGE:
        # the chain: LINEAR members and members some LINEAR member follows; the rest is the
        # P1 epilogue after the last LINEAR (every member of a legal merge follows a LINEAR)
        chain = node.lin
        for i in bits(node.mask & ~node.lin):
            if s.ix.desc[i] & node.lin:
                chain |= 1 << i
        out |= PATTERN_BITS["P3"]
        if node.mask & ~chain:
            out |= PATTERN_BITS["P1"]
        return out
    if node.mask & s.p1:
        out |= PATTERN_BITS["P1"]
    if node.win & ~node.lonely:
        out |= PATTERN_BITS["P2"]
    if mode is Mode.STREAM:
        out |= PATTERN_BITS["P4"]
    return out
