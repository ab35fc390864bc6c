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

from fusiontune.ir.graph import Graph
from fusiontune.planner._index import bits
from fusiontune.planner.counting import count_exact
from fusiontune.planner.groups import Group, PlannerConfig
from fusiontune.planner.lattice import Lattice, Transition
from fusiontune.planner.plan import Plan


def count_plans(graph: Graph, config: PlannerConfig | None = None) -> int:
    """Exact number of legal plans (partitions into legal groups, times mode choices).

    Never enumerates plans: the dynamic programme of :mod:`fusiontune.planner.counting`
    (over remainders; the inclusion–exclusion above). Returns a Python int (astronomically
    large for deep networks). Unbounded in time on wide graphs: ``count_within`` stops at a
    budget with a proven lower bound.
    """
    return count_exact(graph, config)


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
