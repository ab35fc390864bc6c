"""Plans as chains of ideals, and every legal group between two ideals.

An *ideal* of the op graph is a set of ops closed under predecessors (everything computed
before some point of a schedule). The groups of a legal plan, taken in a topological order
of its acyclic quotient, add up to a chain of ideals ``∅ = D0 ⊂ D1 ⊂ ... ⊂ Dk = all ops``;
each group is the difference ``D' \\ D`` of two nested ideals, and every such difference is
convex (a path leaving it and re-entering it would pass through an op that is an ancestor of
``D'`` and a descendant of an op outside ``D``: inside ``D'`` and outside ``D``). Conversely
any chain of ideals whose steps are legal groups is a legal plan. So the planner needs one
engine: from an ideal ``D``, visit every ideal ``D' ⊃ D`` and say whether ``D' \\ D`` is a
legal group, in which modes.

:meth:`Lattice.walk` does that by reverse search: the parent of ``D'`` is ``D'`` minus the
highest-index *maximal* op of the group (one no other group member reads), so every ``D'`` is
visited exactly once, each from a state one op smaller. The state carries the facts the
legality rules need, updated in O(degree) per op, and an optional :class:`Accumulator` (the
cost model's incremental group cost). A subtree is cut when a monotone fact rules out every
larger group: an OPAQUE member (rule 6), a pooling WINDOW that no LINEAR member precedes once a
LINEAR joins (P2 needs the pool after the LINEAR), the user's size cap, a disabled pattern, or
the accumulator's verdict (capacity, rule 7). Everything hardware-free that needs "every legal
group" (counting and enumerating plans, candidate edges, ``--explain``) and the exact
optimizer run on this walk; its modes are checked against :func:`legal_modes` in the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from fusiontune.ir.graph import Graph
from fusiontune.ir.opclass import OpClass
from fusiontune.planner._index import GraphIndex, bits, graph_index
from fusiontune.planner.groups import Mode, PlannerConfig
from fusiontune.planner.legality import P1_CLASSES, GroupView, is_fc_like, view_refusals

PATTERN_BITS = {"P1": 1, "P2": 2, "P3": 4, "P4": 8}
"""Pattern labels as bits (``Walk.labels`` of a node)."""

_MERGE_STREAM = (Mode.MERGE, Mode.STREAM)
_ONLY_MERGE = (Mode.MERGE,)
_ONLY_STREAM = (Mode.STREAM,)
_ONLY_FUSED = (Mode.FUSED,)
_ONLY_SINGLE = (Mode.SINGLE,)
_NO_MODES: tuple[Mode, ...] = ()


class Accumulator(Protocol):
    """Incremental per-group quantity carried along a walk (the cost model implements it).

    ``start`` is called once per base ideal, before its walk; ``add`` once per visited state
    (the group grown by one op whose predecessors are all in the base or the group);
    ``dead`` tells whether no group containing the current one, grown from the same base, can
    be feasible (it must be monotone: if it says so, it says so for every superset);
    ``finish`` turns a state into the caller's payload for a legal group in one mode
    (``None``: the group is infeasible in that mode).
    """

    def start(self, base: int) -> Any: ...

    def add(self, state: Any, op: int, group_mask: int) -> Any: ...

    def dead(self, state: Any, merge_possible: bool) -> bool: ...

    def finish(self, state: Any, group_mask: int, mode: Mode) -> Any: ...


@dataclass(frozen=True, eq=False)
class WalkMasks:
    """Per-graph masks the walk reads (index = topological position)."""

    ix: GraphIndex
    n: int
    pred_mask: tuple[int, ...]
    linear: int
    window: int
    opaque: int
    p1: int
    chainable: int  # AFFINE | LAYOUT | LINEAR: what may lie on a P3 chain
    fc_like: int


@lru_cache(maxsize=16)
def walk_masks(graph: Graph) -> WalkMasks:
    """The per-graph masks of ``graph`` (cached); ``sim/bounds.py`` reads them too."""
    ix = graph_index(graph)
    masks = {cls: 0 for cls in OpClass}
    p1 = fc = 0
    for i, cls in enumerate(ix.classes):
        masks[cls] |= 1 << i
        if cls in P1_CLASSES:
            p1 |= 1 << i
        if cls is OpClass.LINEAR and is_fc_like(graph, graph.ops[i]):
            fc |= 1 << i
    return WalkMasks(
        ix=ix,
        n=ix.n,
        pred_mask=tuple(ix.mask(p) for p in ix.preds),
        linear=masks[OpClass.LINEAR],
        window=masks[OpClass.WINDOW],
        opaque=masks[OpClass.OPAQUE],
        p1=p1,
        chainable=masks[OpClass.AFFINE] | masks[OpClass.LAYOUT] | masks[OpClass.LINEAR],
        fc_like=fc,
    )


class Node:
    """One state of a walk: the group ``mask`` grown from the walk's base ideal.

    Attributes:
        mask: the group's ops.
        n: number of ops.
        maxel: maximal ops of the group (read by no other member).
        frontier: ops outside base and group whose predecessors are all in base or group.
        lin: LINEAR members.
        win: WINDOW members.
        lonely: WINDOW members with no LINEAR ancestor in the group.
        comps: connected components of the group (masks).
        merge_ok: no fact so far rules out a P3 merge of this group or any larger one.
        acc: the accumulator's state.
    """

    __slots__ = ("acc", "comps", "frontier", "lin", "lonely", "mask", "maxel", "merge_ok", "n",
                 "win")  # fmt: skip

    def __init__(
        self,
        mask: int,
        n: int,
        maxel: int,
        frontier: int,
        lin: int,
        win: int,
        lonely: int,
        comps: tuple[int, ...],
        merge_ok: bool,
        acc: Any,
    ) -> None:
        self.mask = mask
        self.n = n
        self.maxel = maxel
        self.frontier = frontier
        self.lin = lin
        self.win = win
        self.lonely = lonely
        self.comps = comps
        self.merge_ok = merge_ok
        self.acc = acc


@dataclass(frozen=True)
class Transition:
    """A legal group ``mask`` from a base ideal, its legal modes and the accumulator's payloads.

    ``payloads[k]`` belongs to ``modes[k]`` (``None`` where the accumulator found the group
    infeasible in that mode); without an accumulator the payloads are ``None``.
    """

    mask: int
    modes: tuple[Mode, ...]
    payloads: tuple[Any, ...]


class Lattice:
    """The walk over ideals of one graph under one planner configuration."""

    def __init__(self, graph: Graph, config: PlannerConfig | None = None) -> None:
        self.graph = graph
        self.config = config or PlannerConfig()
        self.s = walk_masks(graph)
        pats = self.config.patterns
        self._p1 = "P1" in pats
        self._p2 = "P2" in pats
        self._p3 = "P3" in pats
        self._p4 = "P4" in pats
        cap = self.config.max_group_size
        self._cap = cap if cap is not None else self.s.n
        self._merge_cache: dict[int, bool] = {}

    @property
    def full(self) -> int:
        """The ideal holding every op."""
        return (1 << self.s.n) - 1

    def frontier(self, base: int) -> int:
        """Ops outside ``base`` whose predecessors are all in ``base``."""
        out = 0
        pm = self.s.pred_mask
        rest = self.full & ~base
        for v in bits(rest):
            if not pm[v] & ~base:
                out |= 1 << v
        return out

    # ---- one step ---------------------------------------------------------------------------
    def _child(self, node: Node, v: int, base: int, acc: Accumulator | None) -> Node:
        s = self.s
        bit = 1 << v
        mask = node.mask | bit
        pm = s.pred_mask[v]
        inner_preds = pm & node.mask
        # components: v joins every component holding one of its in-group predecessors
        joined = bit
        comps = []
        for c in node.comps:
            if c & inner_preds:
                joined |= c
            else:
                comps.append(c)
        comps.append(joined)
        lin, win, lonely = node.lin, node.win, node.lonely
        merge_ok = node.merge_ok
        anc_in = s.ix.anc[v] & node.mask
        if s.linear & bit:
            lin |= bit
            if not s.fc_like & bit or anc_in & ~s.chainable:
                merge_ok = False
        else:
            if not anc_in & node.lin:
                merge_ok = False  # a member no LINEAR precedes: neither chain nor epilogue
            if s.window & bit:
                win |= bit
                merge_ok = False
                if not anc_in & node.lin:
                    lonely |= bit
            elif s.opaque & bit:
                merge_ok = False
        # frontier: v leaves it; successors whose predecessors are now all present join it
        done = base | mask
        frontier = node.frontier & ~bit
        for w in s.ix.succs[v]:
            # (a base need not be an ideal: a remainder's base holds its descendants too)
            if not s.pred_mask[w] & ~done and not base >> w & 1:
                frontier |= 1 << w
        maxel = (node.maxel & ~pm) | bit
        state = acc.add(node.acc, v, mask) if acc is not None else None
        return Node(mask, node.n + 1, maxel, frontier, lin, win, lonely, tuple(comps), merge_ok,
                    state)  # fmt: skip

    def _dead(self, node: Node, acc: Accumulator | None) -> bool:
        """No group containing this one (grown from the same base) is legal and feasible."""
        s = self.s
        if node.n > 1 and node.mask & s.opaque:
            return True
        if node.lonely and node.lin:
            return True  # a pool no LINEAR precedes, with a LINEAR: not P2, not P4, not P3
        multi_lin = node.lin & (node.lin - 1)
        if not node.merge_ok or not self._p3:
            if node.mask & s.p1 and not self._p1:
                return True
            if node.win & ~node.lonely and not self._p2:
                return True
            if multi_lin and not self._p4:
                return True
            if node.win & (node.win - 1) and not self._p4:
                return True
        return acc is not None and acc.dead(node.acc, node.merge_ok and self._p3)

    def _can_grow(self, node: Node) -> bool:
        return node.n < self._cap and not (node.mask & self.s.opaque)

    # ---- legality of an emitted group ----------------------------------------------------------
    def modes(self, node: Node) -> tuple[Mode, ...]:
        """Legal modes of the node's group (the walk's mirror of :func:`legal_modes`)."""
        if node.n == 1:
            return _ONLY_SINGLE
        if len(node.comps) != 1 or node.mask & self.s.opaque:
            return _NO_MODES
        if node.lonely and node.lin:
            return _NO_MODES
        has_p1 = bool(node.mask & self.s.p1)
        lin = node.lin
        if not lin & (lin - 1):  # at most one LINEAR: fused
            if node.win & (node.win - 1):
                return _NO_MODES
            if lin and node.win and not self._p2:
                return _NO_MODES
            if has_p1 and not self._p1:
                return _NO_MODES
            return _ONLY_FUSED
        stream = self._p4 and not (has_p1 and not self._p1) and not (node.win and not self._p2)
        merge = node.merge_ok and self._p3 and self._merge_legal(node.mask)
        if merge and stream:
            return _MERGE_STREAM
        if merge:
            return _ONLY_MERGE
        return _ONLY_STREAM if stream else _NO_MODES

    def _merge_legal(self, mask: int) -> bool:
        hit = self._merge_cache.get(mask)
        if hit is None:
            view = GroupView(self.s.ix, tuple(bits(mask)), mask, self.config)
            hit = self._merge_cache[mask] = not view_refusals(view, Mode.MERGE, first_only=True)
        return hit

    # ---- the walk -----------------------------------------------------------------------------
    def _root(self, base: int, acc: Accumulator | None) -> Node:
        state = acc.start(base) if acc is not None else None
        return Node(0, 0, 0, self.frontier(base), 0, 0, 0, (), True, state)

    def walk(
        self,
        base: int,
        acc: Accumulator | None = None,
        on_node: Callable[[Node, tuple[Mode, ...]], None] | None = None,
    ) -> Iterator[Transition]:
        """Every legal group ``G`` with ``base ∪ G`` an ideal, each once (reverse search).

        Args:
            base: an ideal (bitmask of ops), or every op outside a remainder
                (:mod:`fusiontune.planner.remainders`).
            acc: optional accumulator whose payloads come back with each transition; its
                ``dead`` verdicts prune the walk (so only feasible groups come back).
            on_node: optional callback for every visited node with its legal modes (empty
                tuple when illegal), in depth-first pre-order.
        """
        root = self._root(base, acc)
        stack: list[tuple[Node, list[int]]] = [(root, bits(root.frontier))]
        while stack:
            node, todo = stack[-1]
            if not todo:
                stack.pop()
                continue
            v = todo.pop()
            # reverse search: v must be the highest-index maximal op of the grown group
            if (node.maxel & ~self.s.pred_mask[v]) >> v:
                continue
            child = self._child(node, v, base, acc)
            if self._dead(child, acc):
                continue
            modes = self.modes(child)
            if on_node is not None:
                on_node(child, modes)
            if modes:
                if acc is None:
                    yield Transition(child.mask, modes, (None,) * len(modes))
                else:
                    payloads = tuple(acc.finish(child.acc, child.mask, m) for m in modes)
                    if any(p is not None for p in payloads):
                        yield Transition(child.mask, modes, payloads)
            if self._can_grow(child):
                stack.append((child, bits(child.frontier)))


def ideals(lattice: Lattice) -> list[int]:
    """Every ideal of the graph, by size then value (the lattice's nodes)."""
    s = lattice.s
    seen = {0}
    level = [0]
    out = [0]
    while level:
        nxt = []
        for d in level:
            for v in bits(lattice.full & ~d):
                if not s.pred_mask[v] & ~d:
                    e = d | 1 << v
                    if e not in seen:
                        seen.add(e)
                        nxt.append(e)
        nxt.sort()
        out += nxt
        level = nxt
    return out
