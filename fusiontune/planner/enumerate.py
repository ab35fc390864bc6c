"""Every legal plan, streamed one at a time, and their exact number without listing them.

A plan is built by repeatedly taking the group that holds the lowest op not yet covered
(so each partition is produced exactly once). A partial plan is summarised by a small
state: the ops already covered ahead of that lowest op and, for each *open* group (one
holding such ops), what it reaches in the graph where chosen groups are contracted to
single nodes. A new group is acceptable only if it is convex in that contracted graph,
which is exactly the condition that the quotient graph of the final plan is acyclic
(contracting a set of a DAG leaves a DAG iff no path leaves the set and re-enters it).

``count_plans`` runs the same transitions as a forward dynamic programme over states
(states merge when partial plans look alike to the rest of the graph), so it is exact and
fast on chain-like networks; ``enumerate_plans`` walks them depth-first and yields plans.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from fusiontune.ir.graph import Graph
from fusiontune.planner._index import graph_index
from fusiontune.planner.candidates import PlannerConfig, candidate_table
from fusiontune.planner.plan import Group, Mode, Plan

Opens = tuple[tuple[int, int], ...]  # (members at/after the frontier, reach) per open group
State = tuple[int, int, Opens]  # (lowest uncovered op, covered ops ahead of it, open groups)


@dataclass(frozen=True)
class _Move:
    """A candidate op set seen from the enumeration (index form)."""

    members: tuple[int, ...]
    mask: int
    modes: tuple[Mode, ...]
    out_reach: int  # ops reachable from the set by a path that leaves it
    jump: int  # the set and everything reachable from any member
    groups: tuple[Group, ...]  # the set as a Group, one per legal mode


@dataclass(frozen=True, eq=False)
class _Space:
    n: int
    names: tuple[str, ...]
    moves: tuple[tuple[_Move, ...], ...]  # by lowest member


@lru_cache(maxsize=16)
def _space(graph: Graph, config: PlannerConfig) -> _Space:
    ix = graph_index(graph)
    by_min: list[list[_Move]] = [[] for _ in range(ix.n)]
    for c in candidate_table(graph, config):
        out = jump = 0
        for i in c.members:
            jump |= (1 << i) | ix.desc[i]
            for s in ix.succs[i]:
                if not c.mask >> s & 1:
                    out |= (1 << s) | ix.desc[s]
        ops = tuple(ix.names[i] for i in c.members)
        groups = tuple(Group(ops, mode) for mode in c.modes)
        by_min[c.members[0]].append(_Move(c.members, c.mask, c.modes, out, jump, groups))
    return _Space(ix.n, ix.names, tuple(tuple(m) for m in by_min))


def _step(state: State, move: _Move, n: int) -> State | None:
    """The state after adding ``move`` (None when it would close a cycle of groups)."""
    u, covered, opens = state
    if move.mask & covered:
        return None
    reach = _close(move.out_reach, opens)
    if reach & move.mask:
        return None
    new_reach = _close(move.jump, opens)
    grown = [(h, r | new_reach) if r & move.mask else (h, r) for h, r in opens]
    grown.append((move.mask, new_reach))
    cov = covered | move.mask
    shifted = cov >> u
    u_next = u + ((shifted + 1) & ~shifted).bit_length() - 1
    if u_next >= n:
        return (n, 0, ())
    keep = ~((1 << u_next) - 1)
    new_opens = tuple(sorted((h & keep, r & keep) for h, r in grown if h & keep))
    return (u_next, cov & keep, new_opens)


def _close(reach: int, opens: Opens) -> int:
    """Extend ``reach`` through the open groups it touches (contracted-graph reachability)."""
    used = 0
    changed = True
    while changed:
        changed = False
        for k, (h, r) in enumerate(opens):
            if not used >> k & 1 and reach & h:
                reach |= r
                used |= 1 << k
                changed = True
    return reach


def count_plans(graph: Graph, config: PlannerConfig | None = None) -> int:
    """Exact number of legal plans (partitions into legal groups times mode choices).

    Never enumerates: a forward dynamic programme over partial-plan states. Returns a Python
    int (astronomically large for deep networks).
    """
    space = _space(graph, config or PlannerConfig())
    n = space.n
    if n == 0:
        return 1
    layers: list[dict[State, int]] = [defaultdict(int) for _ in range(n + 1)]
    layers[0][(0, 0, ())] = 1
    for u in range(n):
        layer = layers[u]
        moves = space.moves[u]
        for state, ways in layer.items():
            for move in moves:
                nxt = _step(state, move, n)
                if nxt is not None:
                    layers[nxt[0]][nxt] += ways * len(move.modes)
        layers[u] = {}  # free memory as we go
    return sum(layers[n].values())


def enumerate_plans(
    graph: Graph, limit: int | None = None, config: PlannerConfig | None = None
) -> Iterator[Plan]:
    """Yield every legal plan exactly once (at most ``limit``), streaming.

    Depth-first over the same states as :func:`count_plans`; memory grows with the depth
    (number of groups), never with the number of plans. Deterministic order: the group of
    the lowest uncovered op is tried by size, then ops, then mode.
    """
    if limit is not None and limit <= 0:
        return
    space = _space(graph, config or PlannerConfig())
    n = space.n
    produced = 0
    path: list[_Move] = []
    stack: list[tuple[State, Iterator[_Move]]] = [((0, 0, ()), iter(space.moves[0] if n else ()))]
    if n == 0:
        yield Plan(())
        return
    while stack:
        state, moves = stack[-1]
        move = next(moves, None)
        if move is None:
            stack.pop()
            if path:
                path.pop()
            continue
        nxt = _step(state, move, n)
        if nxt is None:
            continue
        path.append(move)
        if nxt[0] >= n:
            # groups come in order of their first op, ops sorted: already canonical
            for groups in itertools.product(*(m.groups for m in path)):
                yield Plan(groups)
                produced += 1
                if limit is not None and produced >= limit:
                    return
            path.pop()
            continue
        stack.append((nxt, iter(space.moves[nxt[0]])))
