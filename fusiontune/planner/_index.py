"""Integer view of a graph for the planner: adjacency and reachability as bitmasks.

Ops are numbered by topological position. Bit ``i`` of a mask stands for op ``i``.
Only activation edges count (producer op -> consumer op through a non-constant tensor).
Built once per graph and cached (graphs are immutable).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from fusiontune.ir.graph import Graph
from fusiontune.ir.opclass import OpClass

_CACHE_GRAPHS = 16  # graphs whose index is kept alive at once


@dataclass(frozen=True, eq=False)
class GraphIndex:
    """Bitmask adjacency of a graph's ops (index = topological position).

    Attributes:
        graph: the graph indexed.
        names: op names by index.
        classes: op classes by index.
        preds: distinct producer ops of each op's activation inputs.
        succs: distinct consumer ops of each op's outputs.
        neighbors: preds and succs together (undirected adjacency), sorted.
        desc: strict descendants of each op (bitmask).
        anc: strict ancestors of each op (bitmask).
        readers: ops reading any output of each op (bitmask).
        is_output: whether an op produces a graph output.
        edges: activation edges ``(producer, consumer, tensor)`` sorted by (producer, consumer);
            one entry per op pair (the first tensor joining them).
    """

    graph: Graph
    names: tuple[str, ...]
    classes: tuple[OpClass, ...]
    preds: tuple[tuple[int, ...], ...]
    succs: tuple[tuple[int, ...], ...]
    neighbors: tuple[tuple[int, ...], ...]
    desc: tuple[int, ...]
    anc: tuple[int, ...]
    readers: tuple[int, ...]
    is_output: tuple[bool, ...]
    edges: tuple[tuple[int, int, str], ...]

    @property
    def n(self) -> int:
        return len(self.names)

    def mask(self, members: tuple[int, ...] | list[int]) -> int:
        m = 0
        for i in members:
            m |= 1 << i
        return m

    def between(self, mask: int, members: tuple[int, ...]) -> int:
        """Ops outside ``mask`` lying on a path that leaves and re-enters it (0 = convex)."""
        d = a = 0
        for i in members:
            d |= self.desc[i]
            a |= self.anc[i]
        return d & a & ~mask

    def is_connected(self, mask: int, members: tuple[int, ...]) -> bool:
        """Whether the ops of ``mask`` form one component over activation edges."""
        seen = 1 << members[0]
        stack = [members[0]]
        while stack:
            i = stack.pop()
            for j in self.neighbors[i]:
                bit = 1 << j
                if mask & bit and not seen & bit:
                    seen |= bit
                    stack.append(j)
        return seen == mask

    def escapes(self, i: int, mask: int) -> bool:
        """Whether op ``i``'s output is read outside ``mask`` or is a graph output."""
        return self.is_output[i] or bool(self.readers[i] & ~mask)


def bits(mask: int) -> list[int]:
    """Indices of the set bits of ``mask``, ascending."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


@lru_cache(maxsize=_CACHE_GRAPHS)
def graph_index(graph: Graph) -> GraphIndex:
    """Build (once per graph) the bitmask index of ``graph``."""
    names = tuple(op.name for op in graph.ops)
    pos = {name: i for i, name in enumerate(names)}
    n = len(names)
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    edges: dict[tuple[int, int], str] = {}
    for c, op in enumerate(graph.ops):
        for t in graph.activation_inputs(op):
            p_name = graph.producer_map.get(t)
            if p_name is None:
                continue
            p = pos[p_name]
            if (p, c) not in edges:
                edges[(p, c)] = t
                preds[c].append(p)
                succs[p].append(c)
    desc = [0] * n
    for i in range(n - 1, -1, -1):
        m = 0
        for s in succs[i]:
            m |= desc[s] | (1 << s)
        desc[i] = m
    anc = [0] * n
    for i in range(n):
        m = 0
        for p in preds[i]:
            m |= anc[p] | (1 << p)
        anc[i] = m
    readers = [0] * n
    for i in range(n):
        for s in succs[i]:
            readers[i] |= 1 << s
    outputs = set(graph.outputs)
    is_output = tuple(any(t in outputs for t in op.outputs if t) for op in graph.ops)
    return GraphIndex(
        graph=graph,
        names=names,
        classes=tuple(op.op_class for op in graph.ops),
        preds=tuple(tuple(sorted(p)) for p in preds),
        succs=tuple(tuple(sorted(s)) for s in succs),
        neighbors=tuple(tuple(sorted(set(preds[i]) | set(succs[i]))) for i in range(n)),
        desc=tuple(desc),
        anc=tuple(anc),
        readers=tuple(readers),
        is_output=is_output,
        edges=tuple((p, c, t) for (p, c), t in sorted(edges.items())),
    )
