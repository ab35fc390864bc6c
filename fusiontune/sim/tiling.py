"""Tiled singletons: one op that does not fit the buffer one row at a time runs through DRAM.

A group of several ops needs its intermediates on chip (that is what fusion is), so it must
fit the buffer under the row schedule of :mod:`fusiontune.sim.capacity`. A group of **one**
op needs nothing on chip between ops: a real accelerator runs any single layer by tiling it
through DRAM (the mappers of ZigZag and Timeloop always find a mapping). When a singleton's
one-row schedule overflows its buffer (``hw.core_buffer_bytes``: the whole ``buffer_bytes``
on a flat chip, its home core's share on a many-core chip, where a singleton's rows all sit
on that core, ``docs/cores.md``), the executor runs it by one of the schemes below instead,
and this module predicts what that moves and holds; the executor
(:mod:`fusiontune.sim.tiled_run`) measures the same schedule on real arrays, and
``tests/test_tiling.py`` checks the two against each other.

Schemes (a *box* is one index along some axes, a range along one, full along the rest;
:class:`Chunks`):

- ``point`` — element-wise, per-channel and other row-local ops (``RowKind.POINT``), and
  element-wise ops, softmax and normalizations that are not row-aligned: the output is cut
  into boxes (rows outermost, then the other axes in order; axes a STATS op reduces over, and
  axes a streamed input is broadcast along, stay whole); each box reads the same box of every
  streamed input. Inputs not streamed are held whole for the op's duration, read once.
  Traffic is unchanged.
- ``window`` — Conv, depthwise/grouped Conv, pools on NCHW: the output is cut into
  ``t_w``-column strips and ``t_c``-channel tiles; each (channel tile, strip) streams down
  the rows through a line buffer of its input columns (halo columns included, so the halo
  is re-read by the neighbouring strip) and its input channels (all of them for a Conv with
  ``group == 1``, so the input is re-read once per output-channel tile; the channel tile's
  own groups otherwise). Input rows and columns no window reads are still fetched (a DRAM
  tensor is read in full). The pair with the least traffic is taken (ties: fewest tiles).
- ``window_split`` — a Conv with ``group == 1`` whose one output column (every input channel
  of its window) does not fit: the reduction axis is split. The output is cut into
  ``t_c``-channel x ``t_r``-row x ``t_w``-column tiles; each tile's partial sums live in an
  on-chip accumulator (:func:`acc_units` elements each) while its input box (the rows and
  columns its windows read, halos included) is fetched ``t_k`` input channels at a time and
  accumulated; the bias is added once and the tile written. Halo rows and columns are re-read
  by the neighbouring tiles, the input once per output-channel tile; the least traffic is taken
  (ties: fewest tiles). Taken only when no ``window`` tile fits. A tile shrinks to one output
  element, which is its own accumulator, so partial sums are never spilled to DRAM.
- ``reduce`` — batch-statistics BatchNormalization and global pools: per channel tile, a
  statistics pass reads the input box by box into per-channel accumulators; BatchNorm then
  reads it again to normalize and write the output (traffic ``2 x input + output``).
- ``copy`` — layout ops: a DMA copy through one staging chunk (flat for Reshape-like views,
  a box of the input for Transpose; for Concat, boxes of each input into its slot of the
  output): bytes in = bytes out.
- ``matrix`` — a LINEAR op applied by rows (Gemm, MatMul with a constant weight): the
  output is cut into boxes with its feature axis innermost; each input box (all its
  features) is fetched once and stays while its output columns are computed block by
  block. Traffic is unchanged.
- ``matrix_split`` — a ``matrix`` op whose one input vector (all its features) does not fit:
  the output boxes hold partial sums (:func:`acc_units` elements each) while the box's input
  rows are fetched ``t_k`` features at a time and accumulated; the bias is added once and the
  box written. The input is re-read once per output-column block. Taken only when no
  ``matrix`` box fits.
- ``attention`` — a fused attention (P5): the flash scheme of :mod:`fusiontune.sim.attention`
  (Q tiles, K/V streamed past them or resident, online softmax). Always taken for such an op,
  whether or not it would fit one row at a time: it is how the op runs.
- ``matmul`` — MatMul of two activations ``(..., M, K) @ (..., K, N)``: per batch index,
  output blocks of ``m`` rows and ``n`` columns; each block reads its rows of the left
  operand and its columns of the right one, so the right operand is re-read once per row
  block (and the left once per column block).

Anything else cannot be tiled: the group is infeasible and :attr:`Tiling.reason` says which
op and how many bytes it needs.
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from fusiontune.ir.graph import Graph, Op
from fusiontune.ir.opclass import OpClass
from fusiontune.ops import (
    AttentionRole,
    attention_role,
    def_of,
    fused_attention_problem,
    is_global_pool,
    uses_batch_stats,
)
from fusiontune.ops.base import attr
from fusiontune.ops.window import Window
from fusiontune.planner.plan import Group, Mode
from fusiontune.sim.attention import plan_flash
from fusiontune.sim.capacity import group_peak
from fusiontune.sim.hardware import BITS_PER_BYTE, HardwareConfig
from fusiontune.sim.rows import WINDOW_ROW_AXIS, RowKind, RowMap, row_axes, stats_axes
from fusiontune.sim.structure import Node, group_structure, node_row_map, stored_tensors

Shape = tuple[int, ...]
Box = tuple[slice, ...]
MAX_CACHED = 65536
# Partial sums of a tiled schedule, when hw.psum_bits leaves them unset, are held at twice the
# activation precision (ZigZag 3.9.1, parser/onnx/onnx_operator_parser.py: intermediate output
# precision = 2 x activation bits).
PSUM_BITS_PER_ACT_BIT = 2
PSUM_UNITS_DEFAULT = 2  # acc_units of the default hardware (8-bit activations, 16-bit sums)


class Scheme(str, Enum):
    """How a tiled singleton runs (module docstring)."""

    POINT = "point"
    WINDOW = "window"
    REDUCE = "reduce"
    COPY = "copy"
    MATMUL = "matmul"
    MATRIX = "matrix"
    WINDOW_SPLIT = "window_split"
    MATRIX_SPLIT = "matrix_split"
    ATTENTION = "attention"


@dataclass(frozen=True)
class Chunks:
    """Boxes of a shape: one index along ``order[:j]``, ranges of ``t`` along ``order[j]``,
    everything along the other axes (those not in ``order`` included)."""

    order: tuple[int, ...]
    j: int
    t: int

    def box_shape(self, shape: Shape, t: int | None = None) -> Shape:
        """The shape of a full box (``t`` along ``order[j]``)."""
        out = list(shape)
        for k, a in enumerate(self.order):
            if k < self.j:
                out[a] = 1
            elif k == self.j:
                out[a] = min(self.t if t is None else t, shape[a])
        return tuple(out)

    def boxes(self, shape: Shape) -> Iterator[Box]:
        """Every box, in order (the last along ``order[j]`` may be shorter)."""
        full = [slice(0, n) for n in shape]
        if not self.order:
            yield tuple(full)
            return
        outer = self.order[: self.j]
        a = self.order[self.j]
        for idx in itertools.product(*(range(shape[o]) for o in outer)):
            box = list(full)
            for o, i in zip(outer, idx):
                box[o] = slice(i, i + 1)
            for c0 in range(0, shape[a], self.t):
                box[a] = slice(c0, min(c0 + self.t, shape[a]))
                yield tuple(box)

    def count(self, shape: Shape) -> int:
        if not self.order:
            return 1
        outer = math.prod(shape[o] for o in self.order[: self.j])
        return outer * math.ceil(shape[self.order[self.j]] / self.t)


def fit_chunks(
    shape: Shape, order: Sequence[int], need: Callable[[Shape], int], cap: int
) -> Chunks | None:
    """The largest boxes whose ``need(box_shape)`` fits ``cap``: the outermost split position
    ``j`` at which a one-long box fits, then the longest range there (``need`` grows with the
    box)."""
    order = tuple(order)
    if not order:
        return Chunks((), 0, 1) if need(shape) <= cap else None
    for j in range(len(order)):
        probe = Chunks(order, j, 1)
        if need(probe.box_shape(shape)) > cap:
            continue
        lo, hi = 1, shape[order[j]]
        while lo < hi:  # the longest range that fits
            mid = (lo + hi + 1) // 2
            if need(probe.box_shape(shape, mid)) <= cap:
                lo = mid
            else:
                hi = mid - 1
        return Chunks(order, j, lo)
    return None


@dataclass(frozen=True)
class Tiling:
    """A tiled singleton's schedule and what it moves and holds (elements).

    Attributes:
        op: the op's name.
        scheme: how it runs; ``None`` when it cannot run tiled (``reason`` says why).
        read_elems: elements the DMA fetches (re-reads included).
        write_elems: elements the DMA writes.
        peak_elems: the most elements on chip at once (for an infeasible op: what it needs).
        chunks: the boxes of the ``point``, ``reduce``, ``copy``, ``matrix`` and
            ``matrix_split`` schemes.
        tile: ``window``: ``(t_w, t_c)``; ``reduce``: ``(t_c,)``; ``matmul``: ``(m, n)``;
            ``attention``: ``(m, n, resident)`` (:mod:`fusiontune.sim.attention`);
            ``window_split``: ``(t_w, t_c, t_r, t_k)``; ``matrix_split``: ``(t_k,)``.
        reason: why the op cannot run even tiled (empty when it can).
        streamed: ``point``: per op input, read box by box (else held whole, read once).
    """

    op: str
    scheme: Scheme | None
    read_elems: int = 0
    write_elems: int = 0
    peak_elems: int = 0
    chunks: Chunks | None = None
    tile: tuple[int, ...] = ()
    reason: str = ""
    streamed: tuple[bool, ...] = ()

    @property
    def feasible(self) -> bool:
        return self.scheme is not None


# ---- the decision and the cache -----------------------------------------------------------------
_CACHE: OrderedDict[tuple[str, str, int, int, int], Tiling | None] = OrderedDict()


def acc_units(hw: HardwareConfig) -> int:
    """Buffer elements (of ``hw.act_bytes`` each) one partial sum takes: ``hw.psum_bits``, or
    when unset :data:`PSUM_BITS_PER_ACT_BIT` x ``hw.act_bits`` (ZigZag's convention),
    rounded up to whole activation elements."""
    bits = hw.psum_bits or PSUM_BITS_PER_ACT_BIT * hw.act_bits
    return math.ceil(math.ceil(bits / BITS_PER_BYTE) / hw.act_bytes)


def singleton_tiling(graph: Graph, group: Group, hw: HardwareConfig) -> Tiling | None:
    """The tiled schedule of ``group`` on ``hw``, or ``None`` when it runs by rows.

    Only a group of one op whose one-row schedule (:func:`fusiontune.sim.capacity.group_peak`)
    overflows the buffer of the core it runs on (``hw.core_buffer_bytes``, which is
    ``buffer_bytes`` on a one-core chip) is tiled, and a fused attention always (its flash
    scheme). Cached per (graph, op, buffer, act_bytes, partial-sum size).
    """
    if len(group.ops) != 1:
        return None
    ab = hw.act_bytes
    cap = hw.core_buffer_bytes // ab
    acc = acc_units(hw)
    key = (graph.structural_hash, group.ops[0], cap, ab, acc)
    if key in _CACHE:
        return _CACHE[key]
    solo = Group(group.ops, Mode.SINGLE)
    hit: Tiling | None = None
    op = graph.op_by_name[group.ops[0]]
    tensors = (*graph.activation_inputs(op), *(t for t in op.outputs if t))
    whole = 2 * sum(_numel(graph, t) for t in tensors)  # > every tensor whole + accumulators
    if _is_flash(graph, op) or (whole > cap and not _fits_by_rows(graph, solo, cap)):
        (node,) = group_structure(graph, solo)
        hit = plan_tiling(graph, node, stored_tensors(graph, solo), cap, ab, acc)
        if not hit.feasible and hit.peak_elems == 0:
            full = group_peak(graph, solo)
            hit = Tiling(hit.op, None, peak_elems=full.elems,
                         reason=f"{hit.reason}; one row at a time it needs "
                                f"{full.elems * ab:,} B")  # fmt: skip
    _CACHE[key] = hit
    while len(_CACHE) > MAX_CACHED:
        _CACHE.popitem(last=False)
    return hit


def _fits_by_rows(graph: Graph, group: Group, cap: int) -> bool:
    peak = group_peak(graph, group, limit=cap)
    return peak.exact and peak.elems <= cap


def clear_cache() -> None:
    """Forget every tiling decision."""
    _CACHE.clear()


def plan_tiling(
    graph: Graph,
    node: Node,
    stored: Sequence[str],
    cap: int,
    act_bytes: int = 1,
    acc: int = PSUM_UNITS_DEFAULT,
) -> Tiling:
    """The tiled schedule of a compiled singleton ``node`` in ``cap`` elements of buffer
    (``acc``: elements one partial sum takes, :func:`acc_units`)."""
    op: Op | None = node.op
    name: str = node.name
    if op is None:
        return _refuse(name, "a merged chain is never a singleton")
    rm = node_row_map(graph, node)
    p = node.linear
    writes = sum(_numel(graph, t) for t in stored)
    if (p is not None and p.kind == "conv") or (
        op.op_class is OpClass.WINDOW and rm.kind is RowKind.WINDOW
    ):
        plan = _plan_window(graph, op, node, rm, cap, acc)
    elif uses_batch_stats(op) or rm.kind is RowKind.REDUCE:
        plan = _plan_reduce(graph, op, stored, cap)
    elif op.op_class is OpClass.LAYOUT:
        plan = _plan_copy(graph, op, cap)
    elif def_of(op).concatenates:
        plan = _plan_concat(graph, op, cap)
    elif _is_flash(graph, op):
        plan = _plan_attention(graph, op, cap, acc)
    elif def_of(op).activation_matmul and p is None and len(graph.activation_inputs(op)) == 2:
        plan = _plan_matmul(graph, op, cap)
    elif rm.kind is RowKind.POINT and p is not None and p.kind == "matrix":
        plan = _plan_matrix(graph, node, cap, acc)
    elif rm.kind is RowKind.POINT and p is None:
        plan = _plan_point(graph, op, rm.streamed, stored, cap)
    elif p is None and (
        op.op_class in (OpClass.ELEMWISE, OpClass.AFFINE, OpClass.BINARY)
        or (op.op_class is OpClass.STATS and stats_axes(graph, op) is not None)
    ):  # not row-aligned (a softmax over the row axis, an operand of another height): boxes
        # read the inputs shaped like the output and hold the others whole
        out = _shape(graph, op.outputs[0])
        aligned = tuple(bool(t) and not graph.is_constant(t) and _shape(graph, t) == out
                        for t in op.inputs)  # fmt: skip
        plan = _plan_point(graph, op, aligned, stored, cap)
    else:
        plan = _refuse(name, f"{op.op_type} ({op.op_class.name}) has no tiled schedule")
    if not plan.feasible:
        why = plan.reason
        head = f"op '{name}' ({op.op_type}) cannot run in {cap * act_bytes:,} B even tiled"
        return Tiling(name, None, peak_elems=plan.peak_elems, reason=f"{head}: {why}")
    return replace(plan, write_elems=writes)


def _refuse(name: str, why: str, need: int = 0) -> Tiling:
    return Tiling(name, None, peak_elems=need, reason=why)


def _numel(graph: Graph, tensor: str) -> int:
    return math.prod(graph.tensors[tensor].shape)


def _shape(graph: Graph, tensor: str) -> Shape:
    return tuple(int(d) for d in graph.tensors[tensor].shape)


# ---- point ------------------------------------------------------------------------------------
POINT_CLASSES = frozenset({OpClass.ELEMWISE, OpClass.AFFINE, OpClass.BINARY, OpClass.STATS})
"""Op classes whose row-local (POINT) singletons split their rows into boxes."""


def input_box(in_shape: Shape, out_rank: int, box: Box) -> Box:
    """The box of an input broadcast (right-aligned, numpy rules) to an output box."""
    lead = out_rank - len(in_shape)
    return tuple(slice(0, 1) if n == 1 else box[lead + i] for i, n in enumerate(in_shape))


def box_elems(in_shape: Shape, out_rank: int, out_box: Shape) -> int:
    lead = out_rank - len(in_shape)
    return math.prod(1 if n == 1 else out_box[lead + i] for i, n in enumerate(in_shape))


def _plan_point(
    graph: Graph, op: Op, streamed: tuple[bool, ...], stored: Sequence[str], cap: int
) -> Tiling:
    if op.op_class not in POINT_CLASSES:
        return _refuse(op.name, f"{op.op_class.name} ops are not split into boxes")
    used = [t for t in op.outputs if t and t in stored]
    out = op.outputs[0]
    if len(used) > 1 or (used and used[0] != out):
        return _refuse(op.name, "only the first output of a row-local op is split")
    shape = _shape(graph, out)
    rank = len(shape)
    rows = row_axes(graph)[out]
    order = ([] if rows is None else [rows]) + [a for a in range(rank) if a != rows]
    banned = stats_axes(graph, op) if op.op_class is OpClass.STATS else frozenset()
    if banned is None:
        return _refuse(op.name, "its statistics axes are unknown")
    pairs = dict(zip(op.inputs, streamed))  # a tensor read twice (x * x) is fetched once
    ins = [_shape(graph, t) for t, s in pairs.items() if t and s]
    held = sum(_numel(graph, t) for t, s in pairs.items()
               if t and not s and not graph.is_constant(t))  # fmt: skip

    def cut(a: int) -> bool:  # boxes may partition axis a: nothing reduced or broadcast there
        return a not in banned and all(
            shape[a] == 1 or (a >= rank - len(s) and s[a - rank + len(s)] == shape[a]) for s in ins
        )

    order = [a for a in order if cut(a)]  # the other axes are whole in every box

    def need(box: Shape) -> int:
        return held + sum(box_elems(s, rank, box) for s in ins) + math.prod(box)

    chunks = fit_chunks(shape, order, need, cap)
    if chunks is None:
        least = need(Chunks(tuple(order), max(len(order) - 1, 0), 1).box_shape(shape))
        return _refuse(op.name, f"its smallest box needs {least:,} elements", least)
    reads = held + sum(math.prod(s) for s in ins)
    return Tiling(op.name, Scheme.POINT, reads, sum(_numel(graph, t) for t in used),
                  need(chunks.box_shape(shape)), chunks, streamed=streamed)  # fmt: skip


# ---- window -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class WindowGeometry:
    """What the window scheme needs of a Conv or pool on ``(N, C, H, W)``."""

    x: Shape
    y: Shape
    group: int  # ONNX group (pools: one per channel)
    per_group_out: int  # output channels per group
    per_group_in: int  # input channels per group
    window: Window

    def row_span(self, r: int) -> tuple[int, int]:
        """Input rows (clipped) output row ``r`` reads."""
        start, end = self.window.input_rows(r, r + 1)
        return max(start, 0), min(end, self.x[2])

    def col_span(self, w0: int, w1: int) -> tuple[int, int]:
        """Input columns (unclipped) output columns ``[w0, w1)`` read."""
        win = self.window
        s, p, e = win.strides[1], win.pads_begin[1], win.effective[1]
        return w0 * s - p, (w1 - 1) * s - p + e

    def strips(self, t_w: int) -> list[tuple[int, int, int, int]]:
        """``(w0, w1, f0, f1)``: output columns and the input columns fetched for them;
        fetched ranges cover the input's width without gaps (a DRAM tensor is read in full)."""
        width, w_out = self.x[3], self.y[3]
        out: list[tuple[int, int, int, int]] = []
        for w0 in range(0, w_out, t_w):
            w1 = min(w0 + t_w, w_out)
            start, end = self.col_span(w0, w1)
            f0 = 0 if not out else min(max(start, 0), out[-1][3])
            f1 = width if w1 == w_out else min(max(end, 0), width)
            out.append((w0, w1, f0, max(f1, f0)))
        return out

    def bands(self, t_r: int) -> list[tuple[int, int, int, int]]:
        """``(r0, r1, g0, g1)``: output rows and the input rows fetched for them, covering the
        input's height without gaps (as :meth:`strips` does for columns)."""
        height, h_out = self.x[2], self.y[2]
        out: list[tuple[int, int, int, int]] = []
        for r0 in range(0, h_out, t_r):
            r1 = min(r0 + t_r, h_out)
            start, end = self.window.input_rows(r0, r1)
            g0 = 0 if not out else min(max(start, 0), out[-1][3])
            g1 = height if r1 == h_out else min(max(end, 0), height)
            out.append((r0, r1, g0, max(g1, g0)))
        return out

    def in_channels(self, c0: int, c1: int) -> tuple[int, int]:
        """Input channels output channels ``[c0, c1)`` read."""
        if self.group == 1:
            return 0, self.x[1]
        g0, g1 = c0 // self.per_group_out, (c1 - 1) // self.per_group_out + 1
        return g0 * self.per_group_in, g1 * self.per_group_in

    @property
    def line_rows(self) -> int:
        """The most input rows one output row holds."""
        return max(b - a for a, b in (self.row_span(r) for r in range(self.y[2])))


def window_geometry_of(graph: Graph, op: Op, node: Node, rm: RowMap) -> WindowGeometry | None:
    """The geometry of a 2-D Conv or pool singleton (``None``: not NCHW)."""
    x = graph.activation_inputs(op)[0]
    xs, ys = _shape(graph, x), _shape(graph, op.outputs[0])
    win = rm.window
    if len(xs) != 4 or win is None:
        return None
    p = node.linear
    if p is not None:
        c_out, c_in_g = int(p.weight.shape[0]), int(p.weight.shape[1])
        group = int(p.group)
        return WindowGeometry(xs, ys, group, c_out // group, c_in_g, win)
    return WindowGeometry(xs, ys, xs[1], 1, 1, win)


def _plan_window(
    graph: Graph, op: Op, node: Node, rm: RowMap, cap: int, acc: int = PSUM_UNITS_DEFAULT
) -> Tiling:
    geo = window_geometry_of(graph, op, node, rm)
    if geo is None or row_axes(graph)[op.outputs[0]] != WINDOW_ROW_AXIS:
        return _refuse(op.name, "only 2-D windows over NCHW rows are tiled")
    n, c_in, h = geo.x[0], geo.x[1], geo.x[2]
    c_out = geo.y[1]
    m = geo.line_rows
    best: tuple[int, int, int, int] | None = None  # (traffic, tiles, t_w, t_c)
    least = math.inf
    widths = sorted({math.ceil(geo.y[3] / k) for k in range(1, geo.y[3] + 1)}, reverse=True)
    for t_w in widths:
        strips = geo.strips(t_w)
        if geo.group == 1:  # t_c output channels read every input channel
            room = min((cap - m * n * c_in * (f1 - f0)) // (n * (w1 - w0))
                       for w0, w1, f0, f1 in strips)  # fmt: skip
            t_c = min(c_out, room)
            least = min(least, max(m * n * c_in * (f1 - f0) + n * (w1 - w0)
                                   for w0, w1, f0, f1 in strips))  # fmt: skip
        else:  # whole groups: their own input channels
            per = [m * n * geo.per_group_in * (f1 - f0) + n * geo.per_group_out * (w1 - w0)
                   for w0, w1, f0, f1 in strips]  # fmt: skip
            t_c = min(geo.group, cap // max(per)) * geo.per_group_out
            least = min(least, max(per))
        if t_c < 1:
            continue
        passes = math.ceil(c_out / t_c) if geo.group == 1 else 1
        traffic = passes * n * c_in * h * sum(f1 - f0 for _, _, f0, f1 in strips)
        tiles = math.ceil(c_out / t_c) * len(strips)
        if best is None or (traffic, tiles) < best[:2]:
            best = (traffic, tiles, t_w, t_c)
    if best is None and geo.group == 1 and node.linear is not None:
        return _plan_window_split(op.name, geo, cap, acc)
    if best is None:
        need = int(least)
        return _refuse(op.name, f"one output column of one channel needs {need:,} elements", need)
    traffic, _, t_w, t_c = best
    return Tiling(op.name, Scheme.WINDOW, traffic, math.prod(geo.y),
                  window_peak(geo, t_w, t_c), tile=(t_w, t_c))  # fmt: skip


def window_peak(geo: WindowGeometry, t_w: int, t_c: int) -> int:
    """The window scheme's peak: the line buffer of the widest strip plus its output row."""
    n, m = geo.x[0], geo.line_rows
    c0, c1 = 0, min(t_c, geo.y[1])
    i0, i1 = geo.in_channels(c0, c1)
    return max(m * n * (i1 - i0) * (f1 - f0) + n * (c1 - c0) * (w1 - w0)
               for w0, w1, f0, f1 in geo.strips(t_w))  # fmt: skip


def _extents(spans: Sequence[tuple[int, int, int, int]]) -> set[tuple[int, int]]:
    """The distinct (output length, fetched length) of strips or bands."""
    return {(b - a, g1 - g0) for a, b, g0, g1 in spans}


def _plan_window_split(name: str, geo: WindowGeometry, cap: int, acc: int) -> Tiling:
    """``window_split`` (module docstring): the least-traffic (t_w, t_r, t_c, t_k)."""
    n, c_in, c_out = geo.x[0], geo.x[1], geo.y[1]
    best: tuple[int, int, tuple[int, int, int, int]] | None = None  # (traffic, tiles, tile)

    def lengths(size: int) -> list[int]:  # one per tile count, longest first
        return sorted({math.ceil(size / k) for k in range(1, size + 1)}, reverse=True)

    for t_w in lengths(geo.y[3]):
        strips = geo.strips(t_w)
        cols = sum(f1 - f0 for *_, f0, f1 in strips)
        for t_r in lengths(geo.y[2]):
            bands = geo.bands(t_r)
            pairs = [(ro * wo, gi * fi) for ro, gi in _extents(bands)
                     for wo, fi in _extents(strips)]  # fmt: skip
            # the most output channels with one input channel, then the most input channels
            t_c = min([c_out] + [(cap - n * box) // (acc * n * out) for out, box in pairs])
            if t_c < 1:
                continue
            t_k = min([c_in] + [(cap - acc * n * t_c * out) // (n * box) for out, box in pairs])
            passes = math.ceil(c_out / t_c)
            traffic = passes * n * c_in * cols * sum(g1 - g0 for *_, g0, g1 in bands)
            tiles = passes * len(strips) * len(bands) * math.ceil(c_in / t_k)
            if best is None or (traffic, tiles) < best[:2]:
                best = (traffic, tiles, (t_w, t_c, t_r, t_k))
    if best is None:
        need = window_split_peak(geo, (1, 1, 1, 1), acc)
        return _refuse(name, f"one output's accumulator and one input channel of its window "
                             f"need {need:,} elements", need)  # fmt: skip
    traffic, _, tile = best
    return Tiling(name, Scheme.WINDOW_SPLIT, traffic, math.prod(geo.y),
                  window_split_peak(geo, tile, acc), tile=tile)  # fmt: skip


def window_split_peak(geo: WindowGeometry, tile: tuple[int, ...], acc: int) -> int:
    """The ``window_split`` peak: the largest accumulator plus input box held together."""
    t_w, t_c, t_r, t_k = tile
    n, t_c, t_k = geo.x[0], min(t_c, geo.y[1]), min(t_k, geo.x[1])
    return max(acc * n * t_c * ro * wo + n * t_k * gi * fi
               for ro, gi in _extents(geo.bands(t_r))
               for wo, fi in _extents(geo.strips(t_w)))  # fmt: skip


# ---- reduce -----------------------------------------------------------------------------------
def _plan_reduce(graph: Graph, op: Op, stored: Sequence[str], cap: int) -> Tiling:
    x = graph.activation_inputs(op)
    if not x or len(_shape(graph, x[0])) < 3:
        return _refuse(op.name, "only (N, C, ...) inputs are reduced by channel tiles")
    two_pass = def_of(op).two_pass_stats
    if not two_pass and not (is_global_pool(op) and def_of(op).pool_reduce is not None):
        return _refuse(op.name, f"{op.op_type} has no channel-tiled statistics pass")
    out = op.outputs[0]
    if any(t != out for t in stored):
        return _refuse(op.name, "only the normalized output is written by the tiled passes")
    xs = _shape(graph, x[0])
    n, c = xs[0], xs[1]
    # per channel: BN holds (sum, sum of squares), a pool one value per sample
    acc_per_c = 2 if two_pass else n
    per_box = 2 if two_pass else 1  # BN's second pass holds an input and an output box
    t_c = min(c, cap // (acc_per_c + per_box))
    if t_c < 1:
        return _refuse(op.name, "one channel's accumulators do not fit", acc_per_c + per_box)
    tile_shape = (n, t_c, *xs[2:])
    order = (0, *range(2, len(xs)))

    def need(box: Shape) -> int:
        return acc_per_c * t_c + per_box * math.prod(box)

    chunks = fit_chunks(tile_shape, order, need, cap)
    assert chunks is not None
    reads = (2 if two_pass else 1) * math.prod(xs)
    return Tiling(op.name, Scheme.REDUCE, reads, _numel(graph, out) if stored else 0,
                  need(chunks.box_shape(tile_shape)), chunks, (t_c,))  # fmt: skip


# ---- copy -------------------------------------------------------------------------------------
def _plan_copy(graph: Graph, op: Op, cap: int) -> Tiling:
    x = graph.activation_inputs(op)
    if len(x) != 1 or len([t for t in op.outputs if t]) != 1:
        return _refuse(op.name, "a layout copy moves one tensor")
    xs = _shape(graph, x[0])
    total = math.prod(xs)
    if def_of(op).reorders:
        order = tuple(range(len(xs)))
        chunks = fit_chunks(xs, order, math.prod, cap)
    else:  # a view: the flat element order is unchanged
        chunks = fit_chunks((total,), (0,), math.prod, cap)
    assert chunks is not None  # a one-element box always fits a buffer of >= 1 element
    shape = xs if def_of(op).reorders else (total,)
    return Tiling(op.name, Scheme.COPY, total, total, math.prod(chunks.box_shape(shape)), chunks)


def _plan_concat(graph: Graph, op: Op, cap: int) -> Tiling:
    ins = [t for t in op.inputs if t]
    if any(graph.is_constant(t) for t in ins):
        return _refuse(op.name, "a constant operand has no DRAM copy to stream")
    chunk = 0
    for t in ins:
        chunk = max(chunk, math.prod(concat_chunks(graph, t, cap).box_shape(_shape(graph, t))))
    reads = sum(_numel(graph, t) for t in ins)
    return Tiling(op.name, Scheme.COPY, reads, _numel(graph, op.outputs[0]), chunk)


def concat_chunks(graph: Graph, tensor: str, cap: int) -> Chunks:
    """The staging boxes of one Concat operand (the largest that fit ``cap``)."""
    shape = _shape(graph, tensor)
    found = fit_chunks(shape, range(len(shape)), math.prod, cap)
    assert found is not None
    return found


def transpose_perm(op: Op, rank: int) -> tuple[int, ...]:
    """The permutation of a Transpose (ONNX default: reversed axes)."""
    perm = attr(op, "perm")
    return tuple(int(p) for p in perm) if perm else tuple(reversed(range(rank)))


# ---- matmul -----------------------------------------------------------------------------------
def _plan_matmul(graph: Graph, op: Op, cap: int) -> Tiling:
    a_name, b_name = graph.activation_inputs(op)
    a, b = _shape(graph, a_name), _shape(graph, b_name)
    if len(a) < 2 or len(b) < 2 or a[:-2] != b[:-2]:
        return _refuse(op.name, f"operands {a} and {b} are not equal-batch matrices")
    m_rows, k, n_cols = a[-2], a[-1], b[-1]
    batch = math.prod(a[:-2])
    best: tuple[int, int, int, int] | None = None  # (traffic, tiles, m, n)
    for n_blocks in range(1, n_cols + 1):
        n = math.ceil(n_cols / n_blocks)
        m = min(m_rows, (cap - k * n) // (k + n)) if cap > k * n else 0
        if m < 1:
            continue
        col_blocks, row_blocks = math.ceil(n_cols / n), math.ceil(m_rows / m)
        traffic = batch * (m_rows * k * col_blocks + k * n_cols * row_blocks)
        if best is not None and batch * m_rows * k * col_blocks > best[0]:
            break
        tiles = col_blocks * row_blocks
        if best is None or (traffic, tiles) < best[:2]:
            best = (traffic, tiles, m, n)
    if best is None:
        need = 2 * k + 1
        return _refuse(op.name, f"one row by one column needs {need:,} elements", need)
    traffic, _, m, n = best
    out = batch * m_rows * n_cols
    return Tiling(op.name, Scheme.MATMUL, traffic, out, m * k + k * n + m * n, tile=(m, n))


# ---- attention (the flash scheme, sim/attention.py) ---------------------------------------------
def _is_flash(graph: Graph, op: Op) -> bool:
    """A fused attention in the form its flash scheme runs."""
    return attention_role(op) is AttentionRole.FUSED and fused_attention_problem(graph, op) is None


def _plan_attention(graph: Graph, op: Op, cap: int, acc: int) -> Tiling:
    f = plan_flash(graph, op, cap, acc)
    if f.reason:
        return _refuse(op.name, f.reason, f.peak_elems)
    return Tiling(op.name, Scheme.ATTENTION, f.read_elems, f.write_elems, f.peak_elems,
                  tile=(f.m, f.n, int(f.resident)))  # fmt: skip


# ---- matrix (a constant weight, by rows) ------------------------------------------------------
def matrix_axes(graph: Graph, node: Node) -> tuple[int, int] | None:
    """``(feature axis, row axis or -1)`` of a LINEAR-by-rows node whose input and output
    differ only along the feature axis (``None`` otherwise)."""
    p = node.linear
    assert p is not None
    x, out = node.inputs[0], node.outputs[0]
    xs, ys = _shape(graph, x), _shape(graph, out)
    rank = len(ys)
    if len(xs) != rank:
        return None
    axis = p.out_axis % rank
    if p.in_axis % rank != axis or any(xs[a] != ys[a] for a in range(rank) if a != axis):
        return None
    rows = row_axes(graph)[out]
    if rows == axis:
        return None
    return axis, -1 if rows is None else rows


def _plan_matrix(graph: Graph, node: Node, cap: int, acc: int = PSUM_UNITS_DEFAULT) -> Tiling:
    name: str = node.name
    axes = matrix_axes(graph, node)
    if axes is None:
        return _refuse(name, "its input and output differ beyond the feature axis")
    axis, rows = axes
    x, out = node.inputs[0], node.outputs[0]
    xs, ys = _shape(graph, x), _shape(graph, out)
    order = ([] if rows < 0 else [rows]) + [a for a in range(len(ys)) if a not in (rows, axis)]
    order.append(axis)

    def need(box: Shape) -> int:
        return math.prod(xs[a] if a == axis else n for a, n in enumerate(box)) + math.prod(box)

    chunks = fit_chunks(ys, order, need, cap)
    if chunks is None:
        return _plan_matrix_split(node, ys, tuple(order), xs[axis], cap, acc)
    return Tiling(name, Scheme.MATRIX, math.prod(xs), math.prod(ys),
                  need(chunks.box_shape(ys)), chunks)  # fmt: skip


def _plan_matrix_split(
    node: Node, ys: Shape, order: tuple[int, ...], k: int, cap: int, acc: int
) -> Tiling:
    """``matrix_split`` (module docstring): the largest output boxes whose partial sums and
    one input feature of their rows fit, then the most features a chunk."""
    name: str = node.name
    p = node.linear
    assert p is not None
    axis = order[-1]
    if p.bias is not None and p.bias.ndim > 1:
        return _refuse(name, "a full Gemm bias is not split by output columns")

    def need(box: Shape, t_k: int = 1) -> int:
        rows = math.prod(n for a, n in enumerate(box) if a != axis)
        return acc * math.prod(box) + rows * t_k

    chunks = fit_chunks(ys, order, need, cap)
    if chunks is None:
        least = acc + 1
        return _refuse(name, f"one output's accumulator and one input feature need {least:,} "
                             "elements", least)  # fmt: skip
    box = chunks.box_shape(ys)
    rows = math.prod(n for a, n in enumerate(box) if a != axis)
    t_k = min(k, (cap - acc * math.prod(box)) // rows)
    blocks = math.ceil(ys[axis] / box[axis])  # the input is re-read once per column block
    reads = blocks * math.prod(ys) // ys[axis] * k  # the input differs only along axis
    return Tiling(name, Scheme.MATRIX_SPLIT, reads, math.prod(ys),
                  need(box, t_k), chunks, (t_k,))  # fmt: skip
