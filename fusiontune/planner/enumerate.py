"""Every legal plan, streamed one at a time, and their exact number without listing them.

Both run on the ideal lattice of :mod:`fusiontune.planner.lattice`: a plan is a chain of
ideals whose steps are legal groups. A plan whose quotient has several topological orders is
many chains, so:

- :func:`enumerate_plans` walks chains depth-first and keeps only the one in *lexicographic
  normal form* (Anisimov & Knuth 1979): order groups by their first op; a chain is kept iff
  every group it adds is preceded, after the last group it reads from, only by groups of
  smaller first op. Each plan has exactly one such chain.
- :func:`count_plans` counts plans, not chains, by inclusion–exclusion over the groups that
  start a plan: with ``h(D)`` the number of plans of the ops outside ideal ``D``,
  ``h(D) = Σ_F (-1)^(|F|+1) · Π_{g∈F} modes(g) · h(D ∪ ⋃F)`` over non-empty families ``F`` of
  pairwise disjoint legal groups ``g`` with ``D ∪ g`` an ideal (each plan's set ``S`` of
  source groups contributes ``Σ_{∅≠F⊆S} (-1)^(|F|+1) = 1``). Two such groups never read each
  other (a group that reads another is not a step from ``D``), so disjointness is enough.

Neither needs a cap on group size; both are exact (checked against brute force over all set
partitions in the tests).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from functools import lru_cache

from fusiontune.ir.graph import Graph
from fusiontune.planner._index import bits
from fusiontune.planner.lattice import Lattice, Transition, ideals
from fusiontune.planner.plan import Group, Plan, PlannerConfig


def count_plans(graph: Graph, config: PlannerConfig | None = None) -> int:
    """Exact number of legal plans (partitions into legal groups, times mode choices).

    Never enumerates plans: a dynamic programme over the ideals of the graph. Returns a
    Python int (astronomically large for deep networks).
    """
    return _count(graph, config or PlannerConfig())


@lru_cache(maxsize=16)
def _count(graph: Graph, config: PlannerConfig) -> int:
    lat = Lattice(graph, config)
    if lat.s.n == 0:
        return 1
    full = lat.full
    h: dict[int, int] = {full: 1}
    for base in reversed(ideals(lat)):
        if base == full:
            continue
        steps = [(t.mask, len(t.modes)) for t in lat.walk(base)]
        frontier = lat.frontier(base)
        # only groups missing part of the frontier can share a family with another group
        partial = [(m, w) for m, w in steps if frontier & ~m]
        total = 0
        for m, w in steps:
            total += w * h[base | m]
        if len(partial) > 1:
            total += _families(partial, h, base)
        h[base] = total
    return h[0]


def _families(steps: list[tuple[int, int]], h: dict[int, int], base: int) -> int:
    """Signed sum over families of >= 2 pairwise disjoint steps (see the module docstring)."""
    total = 0
    stack: list[tuple[int, int, int, int]] = []  # (next index, union, sign, weight)
    for k, (m, w) in enumerate(steps):
        stack.append((k + 1, m, 1, w))
        while stack:
            start, union, sign, weight = stack.pop()
            for j in range(start, len(steps)):
                mj, wj = steps[j]
                if mj & union:
                    continue
                u2, w2 = union | mj, weight * wj
                total -= sign * w2 * h[base | u2]
                stack.append((j + 1, u2, -sign, w2))
    return total


def enumerate_plans(
    graph: Graph, limit: int | None = None, config: PlannerConfig | None = None
) -> Iterator[Plan]:
    """Yield every legal plan exactly once (at most ``limit``), streaming.

    Depth-first over chains of ideals in lexicographic normal form (module docstring);
    memory grows with the number of groups of a plan, never with the number of plans.
    Deterministic order.
    """
    if limit is not None and limit <= 0:
        return
    lat = Lattice(graph, config or PlannerConfig())
    n = lat.s.n
    if n == 0:
        yield Plan(())
        return
    names = lat.s.ix.names
    pred_mask = lat.s.pred_mask
    full = lat.full
    cache: dict[int, list[Transition]] = {}

    def steps(base: int) -> list[Transition]:
        hit = cache.get(base)
        if hit is None:
            hit = cache[base] = list(lat.walk(base))
        return hit

    groups: dict[int, tuple[Group, ...]] = {}  # group mask -> one Group per legal mode

    def as_groups(t: Transition) -> tuple[Group, ...]:
        hit = groups.get(t.mask)
        if hit is None:
            ops = tuple(names[i] for i in bits(t.mask))
            hit = groups[t.mask] = tuple(Group(ops, m) for m in t.modes)
        return hit

    produced = 0
    # path entries: (group mask, first op); frames: (ideal, index into its steps)
    path: list[tuple[int, int, Transition]] = []
    frames: list[tuple[int, int]] = [(0, 0)]
    while frames:
        base, k = frames[-1]
        options = steps(base)
        if k >= len(options):
            frames.pop()
            if path:
                path.pop()
            continue
        frames[-1] = (base, k + 1)
        t = options[k]
        first = (t.mask & -t.mask).bit_length() - 1
        if not _normal(path, t.mask, first, pred_mask):
            continue
        if base | t.mask == full:
            chosen = sorted([*path, (t.mask, first, t)], key=lambda c: c[1])
            for combo in itertools.product(*(as_groups(c[2]) for c in chosen)):
                plan = Plan(combo)
                yield plan
                produced += 1
                if limit is not None and produced >= limit:
                    return
            continue
        path.append((t.mask, first, t))
        frames.append((base | t.mask, 0))


def _normal(
    path: list[tuple[int, int, Transition]], mask: int, first: int, pred_mask: tuple[int, ...]
) -> bool:
    """Whether adding group ``mask`` keeps the chain in lexicographic normal form."""
    reads = 0
    for i in bits(mask):
        reads |= pred_mask[i]
    reads &= ~mask
    for g_mask, g_first, _ in reversed(path):
        if g_mask & reads:
            return True
        if g_first > first:
            return False
    return True
