"""How many legal plans a graph has: exact when affordable, else a proven lower bound.

The exact count is the inclusion–exclusion of :mod:`fusiontune.planner.enumerate` run over
*remainders* (:mod:`fusiontune.planner.remainders`) instead of ideals: ``h(X)`` is the number
of plans of the ops of remainder ``X``,

    h(X) = Σ_F (-1)^(|F|+1) · Π_{g∈F} modes(g) · Π_{C ∈ split(X \\ ⋃F)} h(C)

over non-empty families ``F`` of pairwise disjoint legal groups that can be scheduled first
in ``X``, and the count of the graph is the product of ``h`` over its remainders. On a
chain this is the ideal lattice again; on a detector it visits each head once instead of
every combination of head positions.

Some graphs still have too many legal groups for any walk (a stream group may take any
prefix of each of ten parallel heads: 10^10 groups). :func:`count_within` stops after a
work budget and returns a :class:`PlanCount` that says so, with a proven lower bound: the
exact count under the planner configuration without P4 (every such plan is legal with P4
too, with no more modes per group), when that fits the budget, else the product over the
graph's *chains* (maximal runs of ops joined by single-successor, single-predecessor edges)
of the plans made of intervals of each chain (no set of such intervals closes a cycle).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from fusiontune.ir.graph import Graph
from fusiontune.ir.opclass import OpClass
from fusiontune.planner._index import GraphIndex, graph_index
from fusiontune.planner.groups import PlannerConfig
from fusiontune.planner.lattice import Lattice
from fusiontune.planner.legality import GroupView, legal_modes
from fusiontune.planner.remainders import OverBudget, Remainders

DEFAULT_COUNT_BUDGET = 1_600_000
"""Work units (:mod:`fusiontune.planner.remainders`: about a microsecond of an idle core
each: exact counts of the sweep's classifiers need 0.2-1.2 million) of :func:`count_within`
and ``fusiontune plans`` by default; times measured by ``experiments/bench_cli.py``."""


EXACT_SHARE_NUM, EXACT_SHARE_DEN = 3, 4
"""Share of :func:`count_within`'s budget for the exact count (the rest: without P4)."""

CHAIN_INTERVAL_MAX_OPS = 32
"""Longest interval :func:`chain_plans` tries (shorter ones only: still a lower bound, and
linear in the chain's length)."""

TERM_UNITS = 2
"""Work units of one inclusion-exclusion term (its split into remainders costs apart)."""


@dataclass(frozen=True)
class PlanCount:
    """The number of legal plans, or a proven lower bound on it.

    Attributes:
        value: the exact count when ``exact``, else a number of plans proven legal and
            distinct (the true count is at least this).
        exact: whether ``value`` is the count.
        reason: when not exact, why, and what ``value`` counts.
    """

    value: int
    exact: bool
    reason: str = ""

    def __str__(self) -> str:
        return str(self.value) if self.exact else f"at least {self.value} ({self.reason})"


def count_exact(graph: Graph, config: PlannerConfig | None = None) -> int:
    """Exact number of legal plans, however long it takes (see the module docstring)."""
    return _count(graph, config or PlannerConfig(), None)


def count_within(
    graph: Graph, config: PlannerConfig | None = None, budget: int = DEFAULT_COUNT_BUDGET
) -> PlanCount:
    """The exact count if it takes at most ``budget`` work units, else a proven lower bound.

    Memory and time grow with the budget, never with the graph's number of ideals.
    """
    cfg = config or PlannerConfig()
    # the exact count first (most of the budget), the lower bound without P4 second
    first = max(1, budget * EXACT_SHARE_NUM // EXACT_SHARE_DEN)
    try:
        return PlanCount(_count(graph, cfg, first), True)
    except OverBudget:
        pass
    why = f"the exact count needs more than {first:,} units of work"
    if "P4" in cfg.patterns:
        try:
            no_p4 = replace(cfg, patterns=cfg.patterns - {"P4"})
            value = _count(graph, no_p4, max(1, budget - first))
            return PlanCount(value, False, f"{why}; counted: plans without P4 stream groups")
        except OverBudget:
            pass
    value = chain_plans(graph, cfg)
    return PlanCount(value, False, f"{why}; counted: plans whose groups are chain intervals")


@lru_cache(maxsize=16)
def _count(graph: Graph, config: PlannerConfig, budget: int | None) -> int:
    lat = Lattice(graph, config)
    rem = Remainders(lat, budget)
    memo: dict[int, int] = {}
    # remainders whose terms wait for their sub-remainders: (coefficient, sub-remainders)
    pending: dict[int, list[tuple[int, tuple[int, ...]]]] = {}
    roots = rem.roots()
    stack = list(roots)
    while stack:
        key = stack[-1]
        if key in memo:
            stack.pop()
            continue
        terms = pending.get(key)
        if terms is None:
            terms = pending[key] = _terms(rem, key)
            missing = {c for _, subs in terms for c in subs if c not in memo}
            if missing:
                stack.extend(sorted(missing))
                continue
        memo[key] = sum(coef * math.prod(memo[c] for c in subs) for coef, subs in terms)
        del pending[key]
        stack.pop()
    return math.prod(memo[c] for c in roots)


def _terms(rem: Remainders, key: int) -> list[tuple[int, tuple[int, ...]]]:
    """The inclusion–exclusion terms of ``h(key)``: (signed weight, remainders left)."""
    steps = [(t.mask, len(t.modes)) for t in rem.steps(key)]
    terms = [(w, rem.split(key & ~m)) for m, w in steps]
    frontier = rem.lat.frontier(rem.base(key))
    # only groups missing part of the frontier can share a family with another group
    partial = [(m, w) for m, w in steps if frontier & ~m]
    if len(partial) < 2:
        return terms
    stack: list[tuple[int, int, int, int]] = []  # (next index, union, sign, weight)
    for k, (m, w) in enumerate(partial):
        stack.append((k + 1, m, 1, w))
        while stack:
            start, union, sign, weight = stack.pop()
            for j in range(start, len(partial)):
                mj, wj = partial[j]
                if mj & union:
                    continue
                u2, w2 = union | mj, weight * wj
                rem.tick(TERM_UNITS)
                terms.append((-sign * w2, rem.split(key & ~u2)))
                stack.append((j + 1, u2, -sign, w2))
    return terms


def chain_plans(graph: Graph, config: PlannerConfig | None = None) -> int:
    """Plans whose every group is an interval of one chain (a lower bound on the count).

    A chain is a maximal path whose inner edges join an op with one successor to an op with
    one predecessor; an interval of it is entered only at its first op and left only at its
    last, so groups that are intervals never close a cycle of the quotient and any choice
    of legal intervals is a legal plan. Linear: one interval DP per chain, intervals of at
    most :data:`CHAIN_INTERVAL_MAX_OPS` ops (exact for shorter chains).
    """
    cfg = config or PlannerConfig()
    ix = graph_index(graph)
    total = 1
    for chain in _chains(ix):
        total *= _interval_plans(ix, chain, cfg)
    return total


def _chains(ix: GraphIndex) -> list[list[int]]:
    def linked(a: int, b: int) -> bool:  # a -> b is an inner edge of a chain
        return ix.succs[a] == (b,) and ix.preds[b] == (a,)

    chains = []
    for i in range(ix.n):
        if len(ix.preds[i]) == 1 and linked(ix.preds[i][0], i):
            continue  # not the head of its chain
        chain = [i]
        while len(ix.succs[chain[-1]]) == 1 and linked(chain[-1], ix.succs[chain[-1]][0]):
            chain.append(ix.succs[chain[-1]][0])
        chains.append(chain)
    return chains


def _interval_plans(ix: GraphIndex, chain: list[int], cfg: PlannerConfig) -> int:
    """Partitions of a chain into legal intervals, each weighted by its number of modes."""
    ways = [1] + [0] * len(chain)  # ways[k]: partitions of the first k ops
    cap = min(cfg.max_group_size or len(chain), CHAIN_INTERVAL_MAX_OPS)
    for end in range(1, len(chain) + 1):
        for start in range(end - 1, max(0, end - cap) - 1, -1):
            if start < end - 1 and ix.classes[chain[start]] is OpClass.OPAQUE:
                break  # this interval and every longer one hold an OPAQUE op (rule 6)
            modes = legal_modes(GroupView.of(ix, chain[start:end], cfg))
            ways[end] += ways[start] * len(modes)
            if end - start == 2 and ix.classes[chain[end - 1]] is OpClass.OPAQUE:
                break
    return ways[-1]
