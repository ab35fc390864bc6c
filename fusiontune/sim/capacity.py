"""How much on-chip buffer a group needs (DESIGN §5 rule 7): its row schedule, on counters.

The executor (:mod:`fusiontune.sim.runner`) streams a group through the buffer by a fixed
schedule; this module predicts that schedule's peak occupancy without running a kernel, by
following only row counters. The schedule, one row per step (the least-buffer schedule):

1. The group's stored tensors (its *sinks*) advance one row at a time, the least advanced
   (as a fraction of its height) first.
2. A row is *pulled*: to compute rows ``[a, a+1)`` of a tensor, its producer first pulls the
   input rows its :class:`~fusiontune.sim.rows.RowMap` names (a window's rows, an upsampling
   op's span, or the same row), recursively, in input order; a tensor in DRAM is fetched row
   by row. The new output row is allocated, then every input row the producer will not read
   again is released once no other reader in the group needs it. A stored row goes to DRAM
   at once; a row nobody in the group reads is released right after. A non-overlapping pool
   allocates its output row first and folds its input rows in one at a time, releasing each.
3. A ``WHOLE`` op pulls every input row first and allocates its whole outputs; a ``REDUCE``
   op (global pool) folds rows into an ``N x C`` accumulator as they arrive.
4. Finally the rows of DRAM inputs nobody needed stream through (a group reads its inputs in
   full), one at a time.

The peak of the sum of resident rows is :attr:`Peak.elems`. The executor measures the same
quantity from the arrays it really holds; ``tests/test_capacity.py`` checks the two against
each other on many plans. Results are in elements (hardware-free) and cached per group.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from fusiontune.ir.graph import Graph
from fusiontune.planner.plan import Group
from fusiontune.sim.rows import RowKind, RowMap, height, row_elems, row_map
from fusiontune.sim.structure import Node, group_structure, node_row_map, stored_tensors

MAX_CACHED_GROUPS = 65536


@dataclass(frozen=True)
class Peak:
    """The most elements a group holds on chip at once, and what they are at that moment.

    Attributes:
        elems: the peak.
        whole_elems: of which, tensors held whole (inputs and outputs of WHOLE ops).
        accumulator_elems: of which, global-pool accumulators.
        tensor: the tensor whose allocation reached the peak.
    """

    elems: int
    whole_elems: int
    accumulator_elems: int
    tensor: str
    exact: bool = True  # False: the replay stopped once past a limit; ``elems`` is a bound

    @property
    def stream_elems(self) -> int:
        """Rows of streamed tensors (line buffers, staged DRAM rows) at the peak."""
        return self.elems - self.whole_elems - self.accumulator_elems


class _PastLimit(Exception):
    """The replay went past its limit: the group does not fit; the rest is not needed."""


class _Tensor:
    __slots__ = ("external", "hgt", "hi", "lo", "name", "readers", "row", "whole")

    def __init__(self, name: str, hgt: int, row: int, external: bool) -> None:
        self.name, self.hgt, self.row, self.external = name, hgt, row, external
        self.lo = self.hi = 0
        self.readers: dict[str, int] = {}
        self.whole = False


class _Replay:
    """One group's schedule on counters (module docstring)."""

    def __init__(
        self,
        graph: Graph,
        nodes: list[Node],
        stored: list[str],
        limit: int | None = None,
        detail: bool = False,
    ) -> None:
        self.graph = graph
        self.limit = limit
        self.detail = detail
        self.snapshot: dict[str, int] = {}  # rows per tensor at the peak (with ``detail``)
        self.used = self.peak = self.whole = self.acc = 0
        self.at_peak = (0, 0, "")
        self.maps: dict[str, RowMap] = {n.name: node_row_map(graph, n) for n in nodes}
        self.made_by = {t: n for n in nodes for t in n.outputs if t}
        self.ts: dict[str, _Tensor] = {}
        for n in nodes:
            for t in (*n.inputs, *n.outputs):
                if t and t not in self.ts and not graph.is_constant(t):
                    self.ts[t] = _Tensor(t, height(graph, t), row_elems(graph, t),
                                         t not in self.made_by)  # fmt: skip
        for n in nodes:
            for t in n.inputs:
                if t in self.ts:
                    self.ts[t].readers[n.name] = 0
        self.sinks = [t for t in stored if t in self.made_by]
        self.ran: set[str] = set()

    # ---- occupancy --------------------------------------------------------------------------
    def _grow(self, elems: int, tensor: str, whole: int = 0, acc: int = 0) -> None:
        self.used += elems
        self.whole += whole
        self.acc += acc
        if self.used > self.peak:
            self.peak = self.used
            self.at_peak = (self.whole, self.acc, tensor)
            if self.detail:
                self.snapshot = {t.name: t.hi - t.lo for t in self.ts.values() if t.hi > t.lo}
            if self.limit is not None and self.peak > self.limit:
                raise _PastLimit

    def _add_rows(self, t: _Tensor, rows: int) -> None:
        t.hi += rows
        self._grow(rows * t.row, t.name, whole=rows * t.row if t.whole else 0)

    def _drop_below(self, t: _Tensor, row: int) -> None:
        row = min(row, t.hi)
        if row > t.lo:
            freed = (row - t.lo) * t.row
            self.used -= freed
            if t.whole:
                self.whole -= freed
            t.lo = row

    def _scratch(self, node: Node, elems: int, tensor: str, acc: bool = False) -> None:
        """Elements an op holds while it computes (a pool's partial row, an accumulator)."""
        self._grow(elems, tensor, acc=elems if acc else 0)

    def _unscratch(self, node: Node, elems: int, acc: bool = False) -> None:
        self.used -= elems
        if acc:
            self.acc -= elems

    def _settle(self, t: _Tensor) -> None:
        self._drop_below(t, min(t.readers.values()) if t.readers else t.hi)

    # ---- the schedule -----------------------------------------------------------------------
    def run(self) -> Peak:
        order = {t: k for k, t in enumerate(self.sinks)}
        while True:
            todo = [s for s in self.sinks if self.ts[s].hi < self.ts[s].hgt]
            if not todo:
                break
            s = min(todo, key=lambda x: (self.ts[x].hi / self.ts[x].hgt, order[x]))
            self.pull(self.ts[s], self.ts[s].hi + 1)
        for t in self.ts.values():
            while t.external and t.hi < t.hgt:  # unread DRAM rows stream through
                self._add_rows(t, 1)
                self._drop_below(t, t.hi)
        whole, acc, tensor = self.at_peak
        return Peak(self.peak, whole, acc, tensor)

    def pull(self, t: _Tensor, upto: int) -> None:
        """Rows below ``upto`` of ``t`` exist (fetched or computed)."""
        if t.external:
            while t.hi < upto:
                self._add_rows(t, 1)
            return
        node = self.made_by[t.name]
        rm = self.maps[node.name]
        if rm.kind in (RowKind.WHOLE, RowKind.REDUCE):
            if node.name not in self.ran:
                self.ran.add(node.name)
                self._all_at_once(node, rm)
            return
        while t.hi < upto:
            self._step(node, rm, t, t.hi)

    def _step(self, node: Node, rm: RowMap, out: _Tensor, a: int) -> None:
        """Output row ``a`` of a POINT or WINDOW node."""
        if rm.accumulate:
            assert rm.window is not None
            x = self.ts[node.inputs[0]]
            k = rm.window.strides[0]
            self._scratch(node, out.row, out.name)  # the partial output row
            for j in range(a * k, a * k + k):
                self.pull(x, j + 1)
                x.readers[node.name] = j + 1
                self._settle(x)
            self._unscratch(node, out.row)  # it becomes the output row
            self._add_rows(out, 1)
            self._settle(out)
            return
        lows: list[tuple[_Tensor, int]] = []
        for k, name in enumerate(node.inputs):
            t = self.ts.get(name) if name else None
            if t is None:
                continue
            if rm.streamed[k]:
                _, top = rm.input_rows(a, a + 1, t.hgt)
                self.pull(t, top)
                lows.append((t, rm.low_after(a + 1, t.hgt)))
            else:
                t.whole = True
                self.pull(t, t.hgt)
                lows.append((t, t.hgt if a + 1 >= out.hgt else 0))
        self._add_rows(out, 1)
        for t, low in lows:
            t.readers[node.name] = max(t.readers[node.name], low)
            self._settle(t)
        self._settle(out)

    def _all_at_once(self, node: Node, rm: RowMap) -> None:
        inputs = [self.ts[n] for n in node.inputs if n in self.ts]
        if rm.kind is RowKind.REDUCE:
            x = inputs[0]
            shape = self.graph.tensors[x.name].shape
            acc = shape[0] * shape[1]
            self._scratch(node, acc, x.name, acc=True)
            for a in range(x.hgt):
                self.pull(x, a + 1)
                x.readers[node.name] = a + 1
                self._settle(x)
            self._unscratch(node, acc, acc=True)
        else:
            for t in inputs:
                t.whole = True
                self.pull(t, t.hgt)
        for name in node.outputs:
            if name in self.ts:
                out = self.ts[name]
                out.whole = True
                self._add_rows(out, out.hgt)
        for t in inputs:
            t.readers[node.name] = t.hgt
            self._settle(t)
        for name in node.outputs:
            if name in self.ts:
                self._settle(self.ts[name])


_CACHE: OrderedDict[tuple[str, tuple[tuple[str, ...], str]], Peak] = OrderedDict()


def group_peak(graph: Graph, group: Group, limit: int | None = None) -> Peak:
    """The peak on-chip elements of ``group`` under the one-row schedule (cached).

    With ``limit``, the replay may stop as soon as the occupancy passes it: the answer is
    then not exact (``Peak.exact`` is False) and ``elems`` is only known to exceed ``limit``.
    """
    key = (graph.structural_hash, group.key)
    hit = _CACHE.get(key)
    if hit is not None and (hit.exact or (limit is not None and hit.elems > limit)):
        return hit
    replay = _Replay(graph, group_structure(graph, group), stored_tensors(graph, group), limit)
    try:
        hit = replay.run()
    except _PastLimit:
        whole, acc, tensor = replay.at_peak
        hit = Peak(replay.peak, whole, acc, tensor, exact=False)
    _CACHE[key] = hit
    while len(_CACHE) > MAX_CACHED_GROUPS:
        _CACHE.popitem(last=False)
    return hit


def peak_rows(graph: Graph, group: Group) -> dict[str, int]:
    """Rows each tensor holds at the peak moment of the group's schedule."""
    replay = _Replay(
        graph, group_structure(graph, group), stored_tensors(graph, group), detail=True
    )
    replay.run()
    return dict(replay.snapshot)


def clear_cache() -> None:
    """Forget every replayed group."""
    _CACHE.clear()


# ---- the same schedule, core by core (many-core chips, docs/cores.md) -----------------------
class _CoreReplay(_Replay):
    """The replay with each tensor's rows on the cores holding them (every holder keeps its
    own copy), a share of them on the cores of ``shares`` (a convolution's line buffers on
    its other cores: elements of each row) and an op's scratch (partial row, accumulator) on
    the op's core."""

    def __init__(
        self,
        graph: Graph,
        nodes: list[Node],
        stored: list[str],
        holders: Mapping[str, tuple[int, ...]],
        node_core: Mapping[str, int],
        shares: Mapping[str, Mapping[int, int]] | None = None,
    ) -> None:
        super().__init__(graph, nodes, stored)
        self.holders = holders
        self.node_core = node_core
        self.shares = shares or {}
        self.core_used: dict[int, int] = {}
        self.core_peak: dict[int, int] = {}
        self.core_limit: int | None = None

    def _charge(self, cores: tuple[int, ...], elems: int) -> None:
        for c in cores:
            used = self.core_used.get(c, 0) + elems
            self.core_used[c] = used
            if used > self.core_peak.get(c, 0):
                self.core_peak[c] = used
                if self.core_limit is not None and used > self.core_limit:
                    raise _PastLimit

    def _add_rows(self, t: _Tensor, rows: int) -> None:
        super()._add_rows(t, rows)
        self._charge(self.holders[t.name], rows * t.row)
        for core, per_row in self.shares.get(t.name, {}).items():
            self._charge((core,), rows * per_row)

    def _drop_below(self, t: _Tensor, row: int) -> None:
        rows = min(row, t.hi) - t.lo
        super()._drop_below(t, row)
        if rows > 0:
            self._charge(self.holders[t.name], -rows * t.row)
            for core, per_row in self.shares.get(t.name, {}).items():
                self._charge((core,), -rows * per_row)

    def _scratch(self, node: Node, elems: int, tensor: str, acc: bool = False) -> None:
        super()._scratch(node, elems, tensor, acc)
        self._charge((self.node_core[node.name],), elems)

    def _unscratch(self, node: Node, elems: int, acc: bool = False) -> None:
        super()._unscratch(node, elems, acc)
        self._charge((self.node_core[node.name],), -elems)


def core_peaks(
    graph: Graph,
    group: Group,
    nodes: list[Node],
    holders: Mapping[str, tuple[int, ...]],
    node_core: Mapping[str, int],
    shares: Mapping[str, Mapping[int, int]] | None = None,
    limit: int | None = None,
) -> dict[int, int] | None:
    """Each core's peak elements under the one-row schedule (not cached; the placement is).

    With ``limit`` (elements), ``None`` as soon as some core passes it (a verdict, not peaks).

    Args:
        graph: the graph.
        group: the group.
        nodes: its compiled nodes (:func:`~fusiontune.sim.structure.group_structure`).
        holders: tensor -> the cores holding its rows (each holder keeps its own copy).
        node_core: node name -> the core it computes on (its scratch lives there).
        shares: tensor -> core -> elements of each of its rows that core also keeps (a
            convolution's line buffer on a core holding some of its tiles).
        limit: stop when a core holds more than this many elements.
    """
    replay = _CoreReplay(graph, nodes, stored_tensors(graph, group), holders, node_core, shares)
    replay.core_limit = limit
    try:
        replay.run()
    except _PastLimit:
        return None
    return dict(replay.core_peak)


# ---- a moment every schedule goes through (lower bounds for pruning) ------------------------
def cascade_elems(graph: Graph, v: int, inside: Callable[[int], bool]) -> int:
    """Elements on chip at one moment of every schedule of a group holding op ``v`` and the
    ops ``inside`` accepts (0 unless ``v`` is a sliding window).

    The moment: ``v`` computes its middle output row; the row pulls the top row of its window
    from its producer, which pulls in turn, up a chain of window ops (through point-wise ops)
    of the group. When the deepest op of the chain computes, every window op below it still
    holds the rows of its window other than the one being made (an accumulating pool: its
    partial output row), and the computing op holds its whole window and its new output row.
    Only tensors read by exactly one op in the whole graph are followed (no other reader can
    have pulled them ahead), only window ops count rows (never folded, merged or run as an
    epilogue, their tensors exist in every group), and a step up is taken only when the row
    pulled lies inside its tensor. The value grows with the group (more of the chain inside),
    so it prunes soundly.
    """
    op = graph.ops[v]
    if row_map(graph, op).kind is not RowKind.WINDOW:
        return 0
    return _climb(graph, inside, v, height(graph, op.outputs[0]) // 2, 0)


def _climb(graph: Graph, inside: Callable[[int], bool], v: int, j: int, below: int) -> int:
    op = graph.ops[v]
    rm = row_map(graph, op)
    if rm.kind is not RowKind.WINDOW or rm.window is None:
        return below
    x = graph.activation_inputs(op)[0]
    h, row_x = height(graph, x), row_elems(graph, x)
    out_row = row_elems(graph, op.outputs[0])
    if rm.accumulate:
        lo = top = j * rm.window.strides[0]  # the row being folded in
        here = below + row_x + out_row
        rest = below + out_row  # the partial output row waits for the pulled row
    else:
        lo, end = rm.window.input_rows(j, j + 1)
        top = end - 1
        here = below + (min(top, h - 1) - max(lo, 0) + 1) * row_x + out_row
        rest = below + (top - max(lo, 0)) * row_x
    u = _single_producer(graph, x)
    if u is None or not inside(u) or not 0 <= top <= h - 1 or lo < 0:
        return here
    while row_map(graph, graph.ops[u]).kind is RowKind.POINT:  # point-wise ops count nothing
        ys = graph.activation_inputs(graph.ops[u])
        if len(ys) != 1:
            return here
        nxt = _single_producer(graph, ys[0])
        if nxt is None or not inside(nxt):
            return here
        u = nxt
    return max(here, _climb(graph, inside, u, top, rest))


def _single_producer(graph: Graph, tensor: str) -> int | None:
    """The op making ``tensor`` when it is that op's only use (one reader, not an output)."""
    name = graph.producer_map.get(tensor)
    if name is None or tensor in graph.outputs or len(graph.consumer_map.get(tensor, ())) != 1:
        return None
    return graph.op_index[name]
