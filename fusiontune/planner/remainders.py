"""The plans of a graph as plans of independent *remainders* (what the counters walk).

A plan's groups are connected, so once some ops are scheduled (an ideal ``D``), the ops left
fall apart into weakly connected components that no later group, and no cycle of the
quotient, can join: a group lies in one component and every path between two components
would have to run through ``D``, where no edge leads back. So the plans of the ops left are
the products of the plans of each component (``h(D) = Π h(C)``).

One more set never matters: the *opaque tail*, OPAQUE ops whose descendants are all OPAQUE
(the final ``Concat``/``Reshape`` joins of detection heads). They are singletons in every
plan (rule 6) and no path leaves them and comes back, so removing them changes no count and
no group; but they are what holds the independent heads of a detector together.

A *remainder* is then one component: a set of ops, free of the opaque tail, closed under
successors (outside the tail), connected. Its walk base is everything else; the steps of
that walk are exactly the steps from every ideal whose remaining ops contain it as a
component. Wide graphs (detector heads, parallel branches) have exponentially many ideals
but few remainders, because each branch becomes its own remainder once its input is done.

:class:`Remainders` holds the split (components of a set), the walk of a remainder and a
work budget shared by everything that walks (:class:`OverBudget` when spent).
"""

from __future__ import annotations

from collections.abc import Callable

from fusiontune.planner.groups import Mode
from fusiontune.planner.lattice import Lattice, Node, Transition

NODE_UNITS = 10
"""Work units of one walked node (a unit is about a microsecond of an idle core; one op
visited while splitting a set into components costs one)."""


class OverBudget(Exception):
    """The work budget of a :class:`Remainders` ran out (internal: callers fall back)."""


def opaque_tail(lat: Lattice) -> int:
    """OPAQUE ops all of whose descendants are OPAQUE (mask)."""
    s = lat.s
    tail = 0
    for i in range(s.n - 1, -1, -1):
        if s.opaque >> i & 1 and not s.ix.readers[i] & ~tail:
            tail |= 1 << i
    return tail


class Remainders:
    """Components of the ops left, and the walk from each, within a work budget.

    Args:
        lattice: the graph's lattice (planner configuration included).
        budget: work units allowed (:data:`NODE_UNITS` per walked node, one per op visited
            while splitting, a few per inclusion-exclusion term); ``None``: unbounded.
    """

    def __init__(self, lattice: Lattice, budget: int | None = None) -> None:
        self.lat = lattice
        self.budget = budget
        self.spent = 0
        self.tail = opaque_tail(lattice)
        ix = lattice.s.ix
        self._nbr = tuple(ix.mask(ix.neighbors[i]) for i in range(ix.n))
        self._split: dict[int, tuple[int, ...]] = {0: ()}

    def tick(self, units: int = 1) -> None:
        """Spend work units; raises :class:`OverBudget` past the budget."""
        self.spent += units
        if self.budget is not None and self.spent > self.budget:
            raise OverBudget

    def roots(self) -> tuple[int, ...]:
        """The remainders of the whole graph (nothing scheduled yet)."""
        return self.split(self.lat.full & ~self.tail)

    def split(self, rest: int) -> tuple[int, ...]:
        """Weakly connected components of the ops ``rest`` (a set free of the tail)."""
        hit = self._split.get(rest)
        if hit is not None:
            return hit
        out = []
        left = rest
        nbr = self._nbr
        while left:
            comp = front = left & -left
            while front:
                grow = 0
                while front:  # the neighbours of every op of the front (bits inlined: hot)
                    low = front & -front
                    grow |= nbr[low.bit_length() - 1]
                    front ^= low
                front = grow & left & ~comp
                comp |= front
            out.append(comp)
            left &= ~comp
        self.tick(rest.bit_count())
        result = self._split[rest] = tuple(out)
        return result

    def base(self, remainder: int) -> int:
        """The walk base of a remainder: every op outside it."""
        return self.lat.full & ~remainder

    def steps(
        self,
        remainder: int,
        on_node: Callable[[Node, tuple[Mode, ...]], None] | None = None,
    ) -> list[Transition]:
        """Every legal group that can be scheduled first in ``remainder``."""

        def visit(node: Node, modes: tuple[Mode, ...]) -> None:
            self.tick(NODE_UNITS)
            if on_node is not None:
                on_node(node, modes)

        return list(self.lat.walk(self.base(remainder), on_node=visit))
