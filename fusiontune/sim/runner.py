"""Run one fusion group inside a bounded on-chip buffer; count every byte at the DMA.

The executor's measuring core (issue: "a simulator that measures"). A group's kernels see
data only through :class:`OnChip`, a buffer of ``hw.buffer_bytes``:

- **DMA in**: rows of a tensor in DRAM (a graph input, or a tensor an earlier group stored)
  are fetched when a kernel first needs them and stay resident until every reader in the
  group is past them, so halo rows are fetched once; a row is counted when fetched. A group
  reads each DRAM tensor it uses in full, in row order (rows no kernel needs stream through).
- **on chip**: every tensor the group produces lives as a window of rows (a line buffer); a
  row is released as soon as no reader in the group needs it. Ops that cannot stream
  (:class:`~fusiontune.sim.rows.RowKind` ``WHOLE``) hold their whole inputs and outputs; global
  pools fold rows into an accumulator.
- **DMA out**: a row of a tensor needed outside the group (or a graph output) is written to
  DRAM when produced, and counted then.
- **capacity**: an allocation beyond the buffer raises :class:`CapacityError` naming the group,
  the tensor and the bytes. The peak occupancy is measured.

Scheduling: the group's stored tensors (its sinks) advance in lockstep, one band of rows at a
time, the least advanced (as a fraction of its height) first; each band pulls the rows it needs
from its producers, recursively, which compute only rows they have not computed yet. So every
branch of a multi-branch group (residual blocks, downsample shortcuts, diamonds) streams band
by band, and a tensor read by two branches holds only the rows between them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from fusiontune.errors import CapacityError, IllegalPlanError
from fusiontune.ir.graph import Graph
from fusiontune.ops import DTYPE, PoolReduce, RowBand, def_of, run_fused
from fusiontune.ops.linear import (
    LinearParams,
    MatmulFn,
    apply_matrix,
    conv_nd,
    conv_transpose_rows,
    deconv_geometry,
    on_grid,
)
from fusiontune.ops.window import window_geometry
from fusiontune.sim.rows import RowKind, RowMap, height, row_axes
from fusiontune.sim.structure import Node, node_row_map

Array = np.ndarray
_OUT = "__dram__"  # consumer id: the DMA writing a stored tensor


def tensor_dtype(graph: Graph, tensor: str) -> np.dtype:
    """The dtype the graph declares for ``tensor``, which the executor keeps: an int64 index
    or a bool mask computed inside a model stays one (float32, :data:`DTYPE`, for every
    activation the crossbars and window kernels compute)."""
    return np.dtype(graph.tensors[tensor].dtype)


class OnChip:
    """The bounded on-chip buffer of one group: allocations, releases, the peak."""

    def __init__(self, capacity_bytes: int, group: str, key: str = "buffer_bytes") -> None:
        self.capacity = capacity_bytes
        self.group = group
        self.key = key  # the hardware key the capacity comes from (for the error)
        self.used = 0
        self.peak = 0

    def alloc(self, nbytes: int, tensor: str, what: str) -> None:
        if self.used + nbytes > self.capacity:
            raise CapacityError(
                f"group {self.group}: {what} of tensor '{tensor}' needs {nbytes:,} B more on "
                f"chip with {self.used:,} B in use; {self.key} is {self.capacity:,} B"
            )
        self.used += nbytes
        self.peak = max(self.peak, self.used)

    def free(self, nbytes: int, tensor: str = "", what: str = "") -> None:
        """Release ``nbytes`` (``tensor`` and ``what`` as given to :meth:`alloc`)."""
        self.used -= nbytes
        assert self.used >= 0, "freed more than allocated"


class Dram:
    """Tensors in DRAM and the DMA's byte counters (per group)."""

    def __init__(self, graph: Graph, act_bytes: int, n_groups: int) -> None:
        self.graph = graph
        self.act_bytes = act_bytes
        self.values: dict[str, Array] = {}
        self.rows_written: dict[str, int] = {}
        self.read_bytes = [0] * n_groups
        self.write_bytes = [0] * n_groups
        self._written_by: dict[int, list[str]] = {}
        self._box_elems: dict[str, int] = {}

    def ready(self, tensor: str) -> bool:
        return tensor in self.values and self.rows_written.get(tensor, -1) < 0

    def read_rows(self, group: int, tensor: str, axis: int | None, a: int, b: int) -> Array:
        value = self.values[tensor]
        rows = value if axis is None else _take(value, axis, a, b)
        self.read_bytes[group] += rows.size * self.act_bytes
        return rows

    def write_rows(self, group: int, tensor: str, axis: int | None, a: int, rows: Array) -> None:
        shape = self.graph.tensors[tensor].shape
        if tensor not in self.values:
            self.values[tensor] = np.empty(shape, dtype=tensor_dtype(self.graph, tensor))
            self.rows_written[tensor] = 0
            self._written_by.setdefault(group, []).append(tensor)
        if axis is None:
            self.values[tensor][...] = rows
            done, total = 1, 1
        else:
            assert a == self.rows_written[tensor], f"{tensor}: rows out of order"
            index = [slice(None)] * len(shape)
            index[axis] = slice(a, a + rows.shape[axis])
            self.values[tensor][tuple(index)] = rows
            done, total = a + rows.shape[axis], shape[axis]
        self.rows_written[tensor] = -1 if done >= total else done
        self.write_bytes[group] += rows.size * self.act_bytes

    def read_box(
        self, group: int, tensor: str, box: tuple[slice, ...], view: tuple[int, ...] | None = None
    ) -> Array:
        """Fetch one box of a DRAM tensor (of its reshaped ``view`` when given), counted."""
        value = self.values[tensor]
        part = (value if view is None else value.reshape(view))[box]
        self.read_bytes[group] += part.size * self.act_bytes
        return part

    def write_box(
        self,
        group: int,
        tensor: str,
        box: tuple[slice, ...],
        part: Array,
        view: tuple[int, ...] | None = None,
    ) -> None:
        """Write one box of a tensor (tiled singletons); it is ready once every element is."""
        shape = self.graph.tensors[tensor].shape
        if tensor not in self.values:
            self.values[tensor] = np.empty(shape, dtype=tensor_dtype(self.graph, tensor))
            self.rows_written[tensor] = 0
            self._box_elems[tensor] = 0
            self._written_by.setdefault(group, []).append(tensor)
        target = self.values[tensor]
        (target if view is None else target.reshape(view))[box] = part
        self._box_elems[tensor] += part.size
        if self._box_elems[tensor] >= math.prod(shape):
            self.rows_written[tensor] = -1
        self.write_bytes[group] += part.size * self.act_bytes

    def forget_group(self, group: int) -> None:
        """Undo a group's writes and counts (it runs again with smaller bands)."""
        for tensor in self._written_by.pop(group, []):
            self.values.pop(tensor, None)
            self.rows_written.pop(tensor, None)
        self.read_bytes[group] = 0
        self.write_bytes[group] = 0


@dataclass(eq=False)
class _Slot:
    """The resident rows ``[lo, hi)`` of one tensor on chip."""

    name: str
    axis: int | None
    height: int
    row_bytes: int
    external: bool
    stored: bool
    shape: tuple[int, ...] = ()
    dtype: np.dtype = field(default_factory=lambda: np.dtype(DTYPE))
    readers: dict[str, int] = field(default_factory=dict)  # consumer -> lowest row it needs
    chunks: list[tuple[int, Array]] = field(default_factory=list)
    lo: int = 0
    hi: int = 0
    peak_rows: int = 0

    def get(self, a: int, b: int) -> Array:
        if self.axis is None:
            return self.chunks[0][1]
        if a < self.lo or b > self.hi:
            raise AssertionError(
                f"{self.name}: rows [{a}, {b}) not resident ([{self.lo}, {self.hi}))"
            )
        parts = []
        for start, arr in self.chunks:
            stop = start + arr.shape[self.axis]
            if stop <= a or start >= b:
                continue
            parts.append(_take(arr, self.axis, max(a, start) - start, min(b, stop) - start))
        if not parts:  # no rows (a transposed convolution's row of inserted zeros)
            empty = list(self.shape)
            empty[self.axis] = 0
            return np.empty(empty, dtype=self.dtype)
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=self.axis)


@dataclass(frozen=True)
class GroupStats:
    """What running one group measured."""

    read_bytes: int
    write_bytes: int
    peak_bytes: int
    band_rows: int
    peak_rows: dict[str, int]


class GroupRunner:
    """Runs the compiled nodes of one group through an :class:`OnChip` buffer."""

    def __init__(
        self,
        graph: Graph,
        index: int,
        label: str,
        nodes: Sequence[Node],
        stored: Sequence[str],
        dram: Dram,
        capacity_bytes: int,
        band_rows: int | None,
        matmul: MatmulFn,
        band_elems: int = 0,
    ) -> None:
        self.graph = graph
        self.index = index
        self.dram = dram
        self.chip = OnChip(capacity_bytes, label)
        self.band_rows = band_rows  # fixed rows per step for every tensor, or
        self.band_elems = band_elems  # about this many elements per step (at least one row)
        self.matmul = matmul
        self.nodes = list(nodes)
        self.axes = row_axes(graph)
        self.producer: dict[str, Node] = {}
        self.maps: dict[str, RowMap] = {}
        for node in self.nodes:
            self.maps[node.name] = node_row_map(graph, node)
            for t in node.outputs:
                if t:
                    self.producer[t] = node
        self.stored = list(stored)
        self.slots: dict[str, _Slot] = {}
        ab = dram.act_bytes
        for node in self.nodes:
            for t in (*node.inputs, *node.outputs):
                if not t or t in self.slots or graph.is_constant(t):
                    continue
                shape = graph.tensors[t].shape
                h = height(graph, t)
                self.slots[t] = _Slot(
                    name=t,
                    axis=self.axes[t],
                    height=h,
                    row_bytes=math.prod(shape) // max(h, 1) * ab,
                    external=t not in self.producer,
                    stored=t in self.stored,
                    shape=shape,
                    dtype=tensor_dtype(graph, t),
                )
        for node in self.nodes:
            for t in node.inputs:
                if t in self.slots:
                    self.slots[t].readers[node.name] = 0
        self._done_whole: set[str] = set()

    # ---- the driver ----------------------------------------------------------------------------
    def run(self) -> GroupStats:
        sinks = [t for t in self.stored if t in self.producer]
        order = {t: k for k, t in enumerate(sinks)}
        while True:
            todo = [t for t in sinks if self.slots[t].hi < self.slots[t].height]
            if not todo:
                break
            t = min(todo, key=lambda s: (self.slots[s].hi / self.slots[s].height, order[s]))
            slot = self.slots[t]
            self.ensure(t, min(slot.height, slot.hi + self.step(slot)))
        for slot in self.slots.values():  # DRAM tensors are read in full, in row order
            if slot.external:
                self._drain(slot)
        for slot in self.slots.values():
            self._release(slot, slot.height)
        assert self.chip.used == 0, f"{self.chip.used} B left allocated"
        return GroupStats(
            read_bytes=self.dram.read_bytes[self.index],
            write_bytes=self.dram.write_bytes[self.index],
            peak_bytes=self.chip.peak,
            band_rows=self.band_rows or 0,
            peak_rows={t: s.peak_rows for t, s in self.slots.items()},
        )

    def step(self, slot: _Slot) -> int:
        """Rows of ``slot`` computed or fetched per step."""
        if self.band_rows is not None:
            return self.band_rows
        return max(1, self.band_elems * self.dram.act_bytes // max(1, slot.row_bytes))

    # ---- rows on demand ------------------------------------------------------------------------
    def ensure(self, tensor: str, hi: int) -> None:
        """Make rows ``[.., hi)`` of ``tensor`` resident (fetching or computing them)."""
        slot = self.slots[tensor]
        if slot.hi >= hi:
            return
        assert hi <= slot.height, f"{tensor}: rows up to {hi} asked of {slot.height}"
        if slot.external:
            self._fetch(slot, hi)
            return
        node = self.producer[tensor]
        rm = self.maps[node.name]
        if rm.kind in (RowKind.WHOLE, RowKind.REDUCE):
            self._run_whole(node, rm)
            return
        while slot.hi < hi:  # step by step: each band releases the rows it no longer needs
            a = slot.hi
            self._band(node, rm, a, min(slot.height, a + self.step(slot)))

    def _fetch(self, slot: _Slot, hi: int) -> None:
        if not self.dram.ready(slot.name):
            producer = self.graph.producer_map.get(slot.name, "?")
            raise IllegalPlanError(
                f"tensor '{slot.name}' (from op '{producer}') is read before its group ran: "
                "groups must be in topological order and convex (rule 1)"
            )
        while slot.hi < hi:
            a = slot.hi
            b = slot.height if slot.axis is None else min(slot.height, a + self.step(slot))
            rows = self.dram.read_rows(self.index, slot.name, slot.axis, a, b)
            self._append(slot, a, rows, "DMA-in rows")

    def _drain(self, slot: _Slot) -> None:
        """Fetch the rows nobody needed (a DRAM tensor streams in full) and drop them."""
        while slot.hi < slot.height:
            self._fetch(slot, slot.hi + 1)
            self._release(slot, slot.hi)

    # ---- computing -----------------------------------------------------------------------------
    def _band(self, node: Node, rm: RowMap, a: int, b: int) -> None:
        """Compute output rows ``[a, b)`` of a POINT or WINDOW node."""
        out = node.outputs[0]
        out_slot = self.slots[out]
        if rm.accumulate:
            for r in range(a, b):
                self._accumulate_row(node, rm, r, out_slot)
            return
        args: list[Array | None] = []
        ranges: list[tuple[_Slot, int] | None] = []
        for i, t in enumerate(node.inputs):
            if not t:
                args.append(None)
                ranges.append(None)
            elif self.graph.is_constant(t):
                args.append(_const_rows(self.graph, t, out_slot, a, b, rm.kind))
                ranges.append(None)
            elif rm.streamed[i]:
                slot = self.slots[t]
                lo, hi = rm.input_rows(a, b, slot.height)
                self.ensure(t, hi)
                args.append(slot.get(lo, hi))
                ranges.append((slot, rm.low_after(b, slot.height)))
            else:
                slot = self.slots[t]
                self.ensure(t, slot.height)
                args.append(slot.get(0, slot.height))
                ranges.append((slot, slot.height if b >= out_slot.height else 0))
        rows = self._epilogue(node, self._compute_rows(node, rm, args, a, b, out_slot), a, b)
        self._append(out_slot, a, rows, "computed rows")
        if out_slot.stored:
            self.dram.write_rows(self.index, out, out_slot.axis, a, rows)
        name = node.name
        for entry in ranges:
            if entry is not None:
                reader, low = entry
                reader.readers[name] = max(reader.readers[name], low)
                self._release_to_readers(reader)
        self._release_to_readers(out_slot)

    def _compute_rows(
        self, node: Node, rm: RowMap, args: list[Array | None], a: int, b: int, out: _Slot
    ) -> Array:
        p: LinearParams | None = node.linear
        if rm.kind is RowKind.SPAN:
            x = args[0]
            assert x is not None and rm.spans is not None
            rows = RowBand(rm.input_rows(a, b, rm.spans.height)[0], a, b, rm.spans.height)
            if p is not None:
                return transposed_rows(p, x, rows, self.matmul)
            op = node.kernel_op
            span_kernel = def_of(op).span_kernel
            assert span_kernel is not None
            return np.asarray(
                span_kernel(op, args, rows), dtype=tensor_dtype(self.graph, op.outputs[0])
            )
        if rm.kind is RowKind.WINDOW:
            x = args[0] if p is not None else next(v for v in args if v is not None)
            assert x is not None and rm.window is not None
            win, _, _ = rm.window.band(a, b, self.slots[node.inputs[0]].height)
            if p is not None:
                return conv_nd(x, p.weight, p.bias, win, p.group, on_grid(self.matmul, p.grid))
            op = node.kernel_op
            band = def_of(op).band
            assert band is not None
            return band(op, x, win)
        if p is not None:  # a matrix by rows
            x = args[0]
            assert x is not None
            return matrix_rows(p, x, self.matmul)
        op = node.kernel_op
        result = run_fused(op, args)[0]
        return np.asarray(result, dtype=tensor_dtype(self.graph, op.outputs[0]))

    def _accumulate_row(self, node: Node, rm: RowMap, r: int, out_slot: _Slot) -> None:
        """Output row ``r`` of a non-overlapping pool, its input rows folded in one by one."""
        op = node.kernel_op
        assert rm.window is not None
        x = self.slots[node.inputs[0]]
        k = rm.window.strides[0]
        one_row = replace(
            rm.window,
            kernel=(1, *rm.window.kernel[1:]),
            strides=(1, *rm.window.strides[1:]),
            dilations=(1, *rm.window.dilations[1:]),
            out_spatial=(1, *rm.window.out_spatial[1:]),
        )
        band, is_max = def_of(op).band, def_of(op).pool_reduce is PoolReduce.MAX
        assert band is not None
        self.chip.alloc(out_slot.row_bytes, out_slot.name, "accumulated row")
        acc: Array | None = None
        for j in range(r * k, r * k + k):
            self.ensure(x.name, j + 1)
            part = band(op, x.get(j, j + 1), one_row)
            acc = part if acc is None else (np.maximum(acc, part) if is_max else acc + part)
            x.readers[node.name] = j + 1
            self._release_to_readers(x)
        assert acc is not None
        rows = acc if is_max else (acc / k).astype(DTYPE)
        self.chip.free(out_slot.row_bytes, out_slot.name, "accumulated row")  # now the output
        rows = self._epilogue(node, rows, r, r + 1)
        self._append(out_slot, r, rows, "computed rows")
        if out_slot.stored:
            self.dram.write_rows(self.index, out_slot.name, out_slot.axis, r, rows)
        self._release_to_readers(out_slot)

    def _epilogue(self, node: Node, rows: Array, a: int, b: int) -> Array:
        """Apply the node's element-wise epilogue ops to its fresh output rows."""
        epilogue = node.epilogue
        if not epilogue:
            return rows
        out_slot = self.slots[node.outputs[0]]
        current = rows
        for op in epilogue:
            args: list[Array | None] = []
            for t in op.inputs:
                if not t:
                    args.append(None)
                elif self.graph.is_constant(t):
                    args.append(_const_rows(self.graph, t, out_slot, a, b, RowKind.POINT))
                else:
                    args.append(current)
            current = np.asarray(
                run_fused(op, args)[0], dtype=tensor_dtype(self.graph, op.outputs[0])
            )
        return current

    def _run_whole(self, node: Node, rm: RowMap) -> None:
        """Run a WHOLE or REDUCE node once: all input rows, then every used output."""
        name = node.name
        if name in self._done_whole:
            return
        self._done_whole.add(name)
        p: LinearParams | None = node.linear
        if rm.kind is RowKind.REDUCE:
            outs = [self._reduce(node)]
        else:
            args: list[Array | None] = []
            for t in node.inputs:
                if not t:
                    args.append(None)
                elif self.graph.is_constant(t):
                    args.append(np.asarray(self.graph.tensors[t].value))
                else:
                    slot = self.slots[t]
                    self.ensure(t, slot.height)
                    args.append(slot.get(0, slot.height))
            if p is not None:
                x = args[0]
                assert x is not None
                if p.kind == "conv":
                    assert p.source_op is not None
                    win = window_geometry(p.source_op, x.shape[2:], p.weight.shape[2:])
                    mm = on_grid(self.matmul, p.grid)
                    outs = [conv_nd(x, p.weight, p.bias, win, p.group, mm)]
                elif p.kind == "conv_transpose":
                    outs = [transposed_rows(p, x, None, self.matmul)]
                else:
                    outs = [apply_matrix(p, x, self.matmul)]
            else:
                op = node.kernel_op
                outs = [
                    np.asarray(v, dtype=tensor_dtype(self.graph, t) if t else None)
                    for t, v in zip(op.outputs, run_fused(op, args))
                ]
        for t, value in zip(node.outputs, outs):
            if not t or t not in self.slots:
                continue
            slot = self.slots[t]
            expect = self.graph.tensors[t].shape
            assert tuple(value.shape) == expect, f"{t}: computed {value.shape}, declared {expect}"
            self._append(slot, 0, value, "whole result")
            if slot.stored:
                self.dram.write_rows(self.index, t, slot.axis, 0, value)
        for t in node.inputs:
            if t in self.slots:
                slot = self.slots[t]
                slot.readers[name] = slot.height
                self._release_to_readers(slot)
        for t in node.outputs:
            if t in self.slots:
                self._release_to_readers(self.slots[t])

    def _reduce(self, node: Node) -> Array:
        """A global pool folded over its input's rows (an ``N x C`` accumulator on chip)."""
        op = node.kernel_op
        x_name = next(t for t in node.inputs if t and not self.graph.is_constant(t))
        slot = self.slots[x_name]
        shape = self.graph.tensors[x_name].shape
        acc_shape = (shape[0], shape[1]) + (1,) * (len(shape) - 2)
        acc_bytes = shape[0] * shape[1] * self.dram.act_bytes
        self.chip.alloc(acc_bytes, op.outputs[0], "accumulator")
        is_max = def_of(op).pool_reduce is PoolReduce.MAX
        acc = np.full(acc_shape, -np.inf if is_max else 0.0, dtype=np.float64)
        spatial = tuple(range(2, len(shape)))
        a = 0
        while a < slot.height:
            b = min(slot.height, a + self.step(slot))
            self.ensure(x_name, b)
            rows = slot.get(a, b)
            if is_max:
                acc = np.maximum(acc, rows.max(axis=spatial, keepdims=True))
            else:
                acc = acc + rows.sum(axis=spatial, keepdims=True, dtype=np.float64)
            slot.readers[node.name] = b
            self._release_to_readers(slot)
            a = b
        self.chip.free(acc_bytes, op.outputs[0], "accumulator")
        if not is_max:
            acc = acc / math.prod(shape[2:])
        return acc.astype(DTYPE)

    # ---- residency -----------------------------------------------------------------------------
    def _append(self, slot: _Slot, a: int, rows: Array, what: str) -> None:
        n = 1 if slot.axis is None else rows.shape[slot.axis]
        assert a == slot.hi, f"{slot.name}: rows appended out of order"
        self.chip.alloc(n * slot.row_bytes, slot.name, what)
        if not slot.chunks:
            slot.lo = a
        slot.chunks.append((a, rows))
        slot.hi = a + n
        slot.peak_rows = max(slot.peak_rows, slot.hi - slot.lo)

    def _release_to_readers(self, slot: _Slot) -> None:
        """Drop rows no reader in the group needs any more."""
        low = min(slot.readers.values()) if slot.readers else slot.hi
        self._release(slot, min(low, slot.hi))

    def _release(self, slot: _Slot, below: int) -> None:
        if below <= slot.lo:
            return
        if slot.axis is None:
            if below >= slot.hi and slot.chunks:
                self.chip.free(slot.row_bytes * (slot.hi - slot.lo), slot.name)
                slot.chunks.clear()
                slot.lo = slot.hi
            return
        freed = min(below, slot.hi) - slot.lo
        self.chip.free(freed * slot.row_bytes, slot.name)
        keep: list[tuple[int, Array]] = []
        for start, arr in slot.chunks:
            stop = start + arr.shape[slot.axis]
            if stop <= below:
                continue
            if start < below:
                arr = _take(arr, slot.axis, below - start, stop - start).copy()
                start = below
            keep.append((start, arr))
        slot.chunks = keep
        slot.lo = min(below, slot.hi)


# ---- helpers -----------------------------------------------------------------------------------
def transposed_rows(p: LinearParams, x: Array, band: RowBand | None, matmul: MatmulFn) -> Array:
    """A ``"conv_transpose"`` LinearParams on a band of input rows (``None``: the whole
    input, every output row)."""
    assert p.source_op is not None
    height = x.shape[2] if band is None else band.in_height
    geo = deconv_geometry(p.source_op, (height, *x.shape[3:]), p.weight.shape[2:])
    band = band or RowBand(0, 0, geo.out_spatial[0], height)
    return conv_transpose_rows(x, p.weight, p.bias, p.group, geo, band, matmul)


def matrix_rows(p: LinearParams, x: Array, matmul: MatmulFn) -> Array:
    """A ``"matrix"`` LinearParams applied to a band of rows (any rows axis but its own)."""
    xm = np.moveaxis(x, p.in_axis, -1)
    flat = xm.reshape(-1, xm.shape[-1])
    y = on_grid(matmul, p.grid)(flat, p.weight)
    if p.bias is not None:
        y = y + p.bias
    y = y.reshape(*xm.shape[:-1], p.weight.shape[1])
    return np.ascontiguousarray(np.moveaxis(y, -1, p.out_axis)).astype(DTYPE, copy=False)


def _take(value: Array, axis: int, a: int, b: int) -> Array:
    index: list[slice] = [slice(None)] * value.ndim
    index[axis] = slice(a, b)
    return value[tuple(index)]


def _const_rows(graph: Graph, tensor: str, out: _Slot, a: int, b: int, kind: RowKind) -> Array:
    """A constant input of a band: its rows ``[a, b)`` where it is as tall as the output."""
    value = np.asarray(graph.tensors[tensor].value)
    if kind is not RowKind.POINT or out.axis is None or value.ndim == 0:
        return value
    rank_out = len(graph.tensors[out.name].shape)
    axis = out.axis - (rank_out - value.ndim)
    if axis < 0 or value.shape[axis] != out.height or out.height == 1:
        return value
    return _take(value, axis, a, b)
