"""Run a tiled singleton through the bounded buffer; count every byte at the DMA.

The schedules are those of :mod:`fusiontune.sim.tiling` (its docstring): this module takes
the tile sizes from a :class:`~fusiontune.sim.tiling.Tiling`, and then moves real arrays:
each box fetched from DRAM is allocated on the :class:`~fusiontune.sim.runner.OnChip`
buffer at its real size and counted by the DMA (:class:`~fusiontune.sim.runner.Dram`), each
output box is allocated, computed with the op's kernel, written and freed. The bytes and the
peak it measures are checked against the tiling's prediction by ``tests/test_tiling.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from fusiontune.errors import IllegalPlanError
from fusiontune.ir.graph import Graph, Op
from fusiontune.ops import DTYPE, AffineKind, PoolReduce, affine_kind, def_of, run_fused
from fusiontune.ops.base import attr_f
from fusiontune.ops.linear import LinearParams, MatmulFn, conv_nd, grid_columns, on_grid
from fusiontune.ops.window import Window
from fusiontune.sim.attention_run import run_flash
from fusiontune.sim.runner import (
    Dram,
    GroupStats,
    OnChip,
    matrix_rows,
    tensor_dtype,
)
from fusiontune.sim.structure import Node, node_row_map
from fusiontune.sim.tiling import (
    Scheme,
    Tiling,
    WindowGeometry,
    concat_chunks,
    input_box,
    matrix_axes,
    transpose_perm,
    window_geometry_of,
)

Array = np.ndarray
Box = tuple[slice, ...]


def run_tiled(
    graph: Graph,
    index: int,
    label: str,
    node: Node,
    tiling: Tiling,
    stored: Sequence[str],
    dram: Dram,
    capacity_bytes: int,
    matmul: MatmulFn,
    acc: int,
) -> GroupStats:
    """Run the singleton ``node`` by ``tiling`` inside ``capacity_bytes`` of buffer (``acc``:
    elements one partial sum takes, :func:`fusiontune.sim.tiling.acc_units`)."""
    if tiling.scheme is Scheme.ATTENTION:  # a fused attention: sim/attention_run.py
        return run_flash(graph, index, label, node, tiling, stored, dram, capacity_bytes, acc)
    chip = OnChip(capacity_bytes, label)
    run = _TiledRun(graph, index, node, stored, dram, chip, matmul, acc)
    scheme = {
        Scheme.POINT: run.point,
        Scheme.WINDOW: run.window,
        Scheme.REDUCE: run.reduce,
        Scheme.COPY: run.copy,
        Scheme.MATMUL: run.products,
        Scheme.MATRIX: run.matrix,
        Scheme.WINDOW_SPLIT: run.window_split,
        Scheme.MATRIX_SPLIT: run.matrix_split,
    }
    assert tiling.scheme is not None, tiling.reason
    scheme[tiling.scheme](tiling)
    assert run.chip.used == 0, f"{run.chip.used} B left allocated"
    return GroupStats(
        read_bytes=dram.read_bytes[index],
        write_bytes=dram.write_bytes[index],
        peak_bytes=run.chip.peak,
        band_rows=0,
        peak_rows={},
    )


class _TiledRun:
    def __init__(
        self,
        graph: Graph,
        index: int,
        node: Node,
        stored: Sequence[str],
        dram: Dram,
        chip: OnChip,
        matmul: MatmulFn,
        acc: int,
    ) -> None:
        self.graph, self.index, self.node = graph, index, node
        self.acc = acc
        self.op: Op = node.kernel_op
        self.stored = set(stored)
        self.dram, self.chip, self.matmul = dram, chip, matmul
        self.ab = dram.act_bytes

    # ---- DMA and buffer ------------------------------------------------------------------------
    def fetch(self, tensor: str, box: Box, view: tuple[int, ...] | None = None) -> Array:
        if not self.dram.ready(tensor):
            producer = self.graph.producer_map.get(tensor, "?")
            raise IllegalPlanError(
                f"tensor '{tensor}' (from op '{producer}') is read before its group ran: "
                "groups must be in topological order and convex (rule 1)"
            )
        part = self.dram.read_box(self.index, tensor, box, view)
        self.chip.alloc(part.size * self.ab, tensor, "DMA-in tile")
        return part

    def hold(self, elems: int, tensor: str, what: str) -> None:
        self.chip.alloc(elems * self.ab, tensor, what)

    def free(self, elems: int) -> None:
        self.chip.free(elems * self.ab)

    def put(self, tensor: str, box: Box, part: Array, view: tuple[int, ...] | None = None) -> None:
        if tensor in self.stored:
            dtype = tensor_dtype(self.graph, tensor)
            self.dram.write_box(self.index, tensor, box, np.asarray(part, dtype=dtype), view)

    # ---- point ---------------------------------------------------------------------------------
    def point(self, tiling: Tiling) -> None:
        op, graph = self.op, self.graph
        assert tiling.chunks is not None
        out = op.outputs[0]
        shape = graph.tensors[out].shape
        rank = len(shape)
        streamed = tiling.streamed
        held: dict[str, Array] = {}
        for t, s in zip(op.inputs, streamed):
            if t and not s and not graph.is_constant(t) and t not in held:
                held[t] = self.fetch(t, tuple(slice(None) for _ in graph.tensors[t].shape))
        for box in tiling.chunks.boxes(shape):
            args: list[Array | None] = []
            parts: dict[str, Array] = {}  # a tensor read twice (x * x) is fetched once
            for k, (t, s) in enumerate(zip(op.inputs, streamed)):
                if not t:
                    args.append(None)
                elif graph.is_constant(t):
                    args.append(_const_box(op, k, np.asarray(graph.tensors[t].value), rank, box))
                elif s:
                    if t not in parts:
                        parts[t] = self.fetch(t, input_box(graph.tensors[t].shape, rank, box))
                    args.append(parts[t])
                else:
                    args.append(held[t][input_box(held[t].shape, rank, box)])
            size = math.prod(b.stop - b.start for b in box)
            self.hold(size, out, "output tile")
            y = np.asarray(run_fused(op, args)[0], dtype=tensor_dtype(graph, out))
            assert y.size == size, f"{op.name}: tile computed {y.shape}"
            self.put(out, box, y)
            self.free(size + sum(v.size for v in parts.values()))
        self.free(sum(v.size for v in held.values()))

    # ---- window --------------------------------------------------------------------------------
    def window(self, tiling: Tiling) -> None:
        op, graph = self.op, self.graph
        rm = node_row_map(graph, self.node)
        geo = window_geometry_of(graph, op, self.node, rm)
        assert geo is not None
        x, out = graph.activation_inputs(op)[0], self.node.outputs[0]
        t_w, t_c = tiling.tile
        n, h = geo.x[0], geo.x[2]
        p: LinearParams | None = self.node.linear
        for c0 in range(0, geo.y[1], t_c):
            c1 = min(c0 + t_c, geo.y[1])
            i0, i1 = geo.in_channels(c0, c1)
            for w0, w1, f0, f1 in geo.strips(t_w):
                rows: dict[int, Array] = {}
                fetched = 0
                for r in range(geo.y[2]):
                    lo, hi = geo.row_span(r)
                    while fetched < hi:
                        part = self.fetch(x, _row_box(i0, i1, fetched, f0, f1))
                        if fetched < lo:
                            self.free(part.size)
                        else:
                            rows[fetched] = part
                        fetched += 1
                    band = np.concatenate([rows[j] for j in range(lo, hi)], axis=2)
                    start, end = geo.col_span(w0, w1)
                    band = band[..., max(start, 0) - f0 : min(end, geo.x[3]) - f0]
                    win = _box_window(geo, r, w0, w1)
                    size = n * (c1 - c0) * (w1 - w0)
                    self.hold(size, out, "output tile")
                    y = self._window_kernel(geo, p, band, win, c0, c1)
                    assert y.size == size, f"{op.name}: tile computed {y.shape}"
                    self.put(out, (slice(None), slice(c0, c1), slice(r, r + 1), slice(w0, w1)), y)
                    self.free(size)
                    keep = geo.row_span(r + 1)[0] if r + 1 < geo.y[2] else fetched
                    for j in [j for j in rows if j < keep]:
                        self.free(rows.pop(j).size)
                for j in list(rows):
                    self.free(rows.pop(j).size)
                while fetched < h:  # rows no window reads still stream in (read in full)
                    part = self.fetch(x, _row_box(i0, i1, fetched, f0, f1))
                    self.free(part.size)
                    fetched += 1

    def _window_kernel(
        self, geo: WindowGeometry, p: LinearParams | None, band: Array, win: Window, c0: int,
        c1: int,
    ) -> Array:  # fmt: skip
        if p is None:
            kernel = def_of(self.op).band
            assert kernel is not None
            return kernel(self.op, band, win)
        bias = None if p.bias is None else p.bias[c0:c1]
        group = 1 if geo.group == 1 else (c1 - c0) // geo.per_group_out
        mm = on_grid(self.matmul, p.grid, c0, c1)
        return conv_nd(band, p.weight[c0:c1], bias, win, group, mm)

    # ---- window_split --------------------------------------------------------------------------
    def window_split(self, tiling: Tiling) -> None:
        """Output tiles accumulated over ``t_k``-channel chunks of their input box."""
        op, graph = self.op, self.graph
        geo = window_geometry_of(graph, op, self.node, node_row_map(graph, self.node))
        assert geo is not None
        p = self.node.linear
        assert p is not None
        x, out = graph.activation_inputs(op)[0], self.node.outputs[0]
        t_w, t_c, t_r, t_k = tiling.tile
        n, c_in, height, width = geo.x
        win: Window = geo.window
        for c0 in range(0, geo.y[1], t_c):
            c1 = min(c0 + t_c, geo.y[1])
            for r0, r1, g0, g1 in geo.bands(t_r):
                start, end = win.input_rows(r0, r1)
                for w0, w1, f0, f1 in geo.strips(t_w):
                    left, right = geo.col_span(w0, w1)
                    tile_win = _box_window(geo, r0, w0, w1, r1)
                    shape = (n, c1 - c0, r1 - r0, w1 - w0)
                    self.hold(self.acc * math.prod(shape), out, "accumulator")
                    total = np.zeros(shape, dtype=DTYPE)
                    for k0 in range(0, c_in, t_k):
                        k1 = min(k0 + t_k, c_in)
                        part = self.fetch(x, (slice(None), slice(k0, k1), slice(g0, g1),
                                              slice(f0, f1)))  # fmt: skip
                        band = part[:, :, max(start, 0) - g0 : min(end, height) - g0,
                                    max(left, 0) - f0 : min(right, width) - f0]  # fmt: skip
                        total += conv_nd(band, p.weight[c0:c1, k0:k1], None, tile_win, 1,
                                         on_grid(self.matmul, p.grid, c0, c1))  # fmt: skip
                        self.free(part.size)
                    if p.bias is not None:  # the epilogue, once per output tile
                        total += p.bias[c0:c1].reshape(1, -1, 1, 1)
                    box = (slice(None), slice(c0, c1), slice(r0, r1), slice(w0, w1))
                    self.put(out, box, total)
                    self.free(self.acc * math.prod(shape))

    # ---- reduce --------------------------------------------------------------------------------
    def reduce(self, tiling: Tiling) -> None:
        op, graph = self.op, self.graph
        assert tiling.chunks is not None
        x, out = graph.activation_inputs(op)[0], op.outputs[0]
        xs = graph.tensors[x].shape
        n, c = xs[0], xs[1]
        (t_c,) = tiling.tile
        spatial = tuple(range(2, len(xs)))
        bn = def_of(op).two_pass_stats
        count = n * math.prod(xs[2:])
        for c0 in range(0, c, t_c):
            c1 = min(c0 + t_c, c)
            acc_elems = (2 if bn else n) * (c1 - c0)
            self.hold(acc_elems, out, "accumulators")
            tile_shape = (n, c1 - c0, *xs[2:])
            boxes = list(tiling.chunks.boxes(tile_shape))
            s1 = np.zeros(c1 - c0) if bn else None
            s2 = np.zeros(c1 - c0) if bn else None
            is_max = def_of(op).pool_reduce is PoolReduce.MAX
            pool = np.full((n, c1 - c0), -np.inf if is_max else 0.0)
            for box in boxes:  # pass 1: statistics
                part = self.fetch(x, _shift_channels(box, c0))
                v = part.astype(np.float64)
                if bn:
                    axes = (0, *spatial)
                    s1 += v.sum(axis=axes)
                    s2 += np.square(v).sum(axis=axes)
                elif is_max:
                    pool[box[0]] = np.maximum(pool[box[0]], v.max(axis=spatial))
                else:
                    pool[box[0]] += v.sum(axis=spatial)
                self.free(part.size)
            if not bn:
                value = pool if is_max else pool / math.prod(xs[2:])
                y = value.reshape(n, c1 - c0, *(1 for _ in spatial))
                self.put(out, (slice(None), slice(c0, c1), *(slice(0, 1) for _ in spatial)), y)
                self.free(acc_elems)
                continue
            assert s1 is not None and s2 is not None
            mean = s1 / count
            var = np.maximum(s2 / count - np.square(mean), 0.0)
            gamma, beta = (np.asarray(graph.tensors[t].value, dtype=np.float64)[c0:c1]
                           for t in op.inputs[1:3])  # fmt: skip
            scale = gamma / np.sqrt(var + attr_f(op, "epsilon"))
            shift = beta - mean * scale
            shape = (1, c1 - c0) + (1,) * len(spatial)
            scale32 = scale.astype(DTYPE).reshape(shape)
            shift32 = shift.astype(DTYPE).reshape(shape)
            for box in boxes:  # pass 2: normalize
                part = self.fetch(x, _shift_channels(box, c0))
                self.hold(part.size, out, "output tile")
                self.put(out, _shift_channels(box, c0), part * scale32 + shift32)
                self.free(2 * part.size)
            self.free(acc_elems)

    # ---- copy ----------------------------------------------------------------------------------
    def copy(self, tiling: Tiling) -> None:
        op, graph = self.op, self.graph
        out = next(t for t in op.outputs if t)
        if def_of(op).concatenates:
            axis = int(op.attr("axis"))
            axis %= len(graph.tensors[out].shape)
            offset = 0
            for t in (t for t in op.inputs if t):
                shape = graph.tensors[t].shape
                for box in concat_chunks(graph, t, self.chip.capacity // self.ab).boxes(shape):
                    part = self.fetch(t, box)
                    at = box[axis]
                    slot = slice(at.start + offset, at.stop + offset)
                    self.put(out, (*box[:axis], slot, *box[axis + 1 :]), part)
                    self.free(part.size)
                offset += shape[axis]
            return
        assert tiling.chunks is not None
        x = graph.activation_inputs(op)[0]
        xs = graph.tensors[x].shape
        if def_of(op).reorders:
            perm = transpose_perm(op, len(xs))
            for box in tiling.chunks.boxes(xs):
                part = self.fetch(x, box)
                self.put(out, tuple(box[a] for a in perm), part.transpose(perm))
                self.free(part.size)
            return
        flat = (math.prod(xs),)
        for box in tiling.chunks.boxes(flat):
            part = self.fetch(x, box, flat)
            self.put(out, box, part, flat)
            self.free(part.size)

    # ---- matrix ----------------------------------------------------------------------------------
    def _matrix_operands(self, tiling: Tiling) -> tuple[LinearParams, str, str, int]:
        """A matrix op's parameters, input, output and feature axis."""
        assert tiling.chunks is not None
        p = self.node.linear
        assert p is not None
        x, out = self.node.inputs[0], self.node.outputs[0]
        axes = matrix_axes(self.graph, self.node)
        assert axes is not None
        return p, x, out, axes[0]

    def matrix(self, tiling: Tiling) -> None:
        graph = self.graph
        p, x, out, axis = self._matrix_operands(tiling)
        assert tiling.chunks is not None
        held: tuple[Box, Array] | None = None  # the input box kept across column blocks
        for box in tiling.chunks.boxes(graph.tensors[out].shape):
            in_box = tuple(slice(None) if a == axis else b for a, b in enumerate(box))
            if held is None or held[0] != in_box:
                if held is not None:
                    self.free(held[1].size)
                held = (in_box, self.fetch(x, in_box))
            cols = box[axis]
            bias = p.bias if p.bias is None or p.bias.ndim == 0 else p.bias[cols]
            sub = replace(p, weight=p.weight[:, cols], bias=bias, grid=grid_columns(p, cols))
            size = math.prod(b.stop - b.start for b in box)
            self.hold(size, out, "output tile")
            self.put(out, box, matrix_rows(sub, held[1], self.matmul))
            self.free(size)
        if held is not None:
            self.free(held[1].size)

    def matrix_split(self, tiling: Tiling) -> None:
        """Output boxes accumulated over ``t_k``-feature chunks of their input rows."""
        graph = self.graph
        p, x, out, axis = self._matrix_operands(tiling)
        assert tiling.chunks is not None
        (t_k,) = tiling.tile
        k = graph.tensors[x].shape[axis]
        for box in tiling.chunks.boxes(graph.tensors[out].shape):
            cols = box[axis]
            size = math.prod(b.stop - b.start for b in box)
            self.hold(self.acc * size, out, "accumulator")
            total = np.zeros(tuple(b.stop - b.start for b in box), dtype=DTYPE)
            for k0 in range(0, k, t_k):
                feats = slice(k0, min(k0 + t_k, k))
                part = self.fetch(x, tuple(feats if a == axis else b for a, b in enumerate(box)))
                grid = grid_columns(p, cols)
                sub = replace(p, weight=p.weight[feats, cols], bias=None, grid=grid)
                total += matrix_rows(sub, part, self.matmul)
                self.free(part.size)
            if p.bias is not None:  # the epilogue, once per output box
                bias = p.bias if p.bias.ndim == 0 else p.bias[cols]
                total += np.moveaxis(np.broadcast_to(bias, np.moveaxis(total, axis, -1).shape),
                                     -1, axis)  # fmt: skip
            self.put(out, box, total)
            self.free(self.acc * size)

    # ---- matmul --------------------------------------------------------------------------------
    def products(self, tiling: Tiling) -> None:
        op, graph = self.op, self.graph
        a, b = graph.activation_inputs(op)
        out = op.outputs[0]
        sa, sb = graph.tensors[a].shape, graph.tensors[b].shape
        m, n = tiling.tile
        rows, cols = sa[-2], sb[-1]
        for idx in np.ndindex(*sa[:-2]):
            lead = tuple(slice(i, i + 1) for i in idx)
            for r0 in range(0, rows, m):
                r1 = min(r0 + m, rows)
                for q0 in range(0, cols, n):
                    q1 = min(q0 + n, cols)
                    left = self.fetch(a, (*lead, slice(r0, r1), slice(None)))
                    right = self.fetch(b, (*lead, slice(None), slice(q0, q1)))
                    size = (r1 - r0) * (q1 - q0)
                    self.hold(size, out, "output tile")
                    y = np.asarray(run_fused(op, [left, right])[0], dtype=tensor_dtype(graph, out))
                    self.put(out, (*lead, slice(r0, r1), slice(q0, q1)), y)
                    self.free(size + left.size + right.size)


# ---- helpers -----------------------------------------------------------------------------------
def _const_box(op: Op, k: int, value: Array, rank: int, box: Box) -> Array:
    """A constant input's part for an output box (the vectors of a per-channel affine op,
    BatchNormalization, along axis 1)."""
    if value.ndim == 0:
        return value
    if affine_kind(op) is AffineKind.CHANNEL and k >= 1 and value.ndim == 1:
        return value[box[1]]
    return value[input_box(value.shape, rank, box)]


def _row_box(i0: int, i1: int, row: int, f0: int, f1: int) -> Box:
    """One input row of a window tile: channels ``[i0, i1)``, columns ``[f0, f1)``."""
    return (slice(None), slice(i0, i1), slice(row, row + 1), slice(f0, f1))


def _shift_channels(box: Box, c0: int) -> Box:
    """A box of a channel tile as a box of the whole tensor."""
    ch = box[1]
    return (box[0], slice(ch.start + c0, ch.stop + c0), *box[2:])


def _box_window(geo: WindowGeometry, r: int, w0: int, w1: int, r1: int | None = None) -> Window:
    """The geometry of output rows ``[r, r1)`` (default: row ``r``), columns ``[w0, w1)`` over
    their clipped input box (missing halo becomes padding only where the full op had it, as in
    :meth:`Window.band`)."""
    win: Window = geo.window
    r1 = r + 1 if r1 is None else r1
    spans = (win.input_rows(r, r1), geo.col_span(w0, w1))
    sizes = (geo.x[2], geo.x[3])
    begin, end = [], []
    for axis, ((start, stop), size) in enumerate(zip(spans, sizes)):
        begin.append(max(start, 0) - start)
        end.append(max(0, min(stop, size + win.pads_end[axis]) - size) if stop > size else 0)
    return replace(win, pads_begin=tuple(begin), pads_end=tuple(end),
                   out_spatial=(r1 - r, w1 - w0))  # fmt: skip
