"""Rows: the unit in which the executor streams tensors through the on-chip buffer.

A tensor is cut into *rows* along one axis, its **row axis**: axis 2 (the first spatial axis)
for tensors a sliding window or a global pool reads or writes (``NCHW``, ``NCL``,
``NCDHW``), otherwise the second-to-last axis (rows of a matrix: the tokens of a ``(B, S, H)``
transformer activation, the ``M`` of a ``(..., M, K)`` product, the batch of an ``(N, F)``
feature matrix). A tensor of rank <= 1 is one row. A row is everything else: ``numel / H``
elements.

How an op's output rows depend on its input rows (:class:`RowMap`):

- ``POINT``: output row ``r`` reads input row ``r`` of every streamed input (element-wise,
  AFFINE, BINARY, a matrix product over a non-row axis, a normalization or softmax whose
  reduction axes exclude the row axis); inputs broadcast along the row axis are read whole.
- ``WINDOW``: a Conv or pooling window along the row axis: output row ``r`` reads input rows
  ``[r·s − p, r·s − p + k_eff)`` (stride ``s``, leading pad ``p``, dilated kernel height
  ``k_eff``). A max or average pool whose windows do not overlap along rows (``s == k``, no
  padding, no partial window) *accumulates*: each input row is folded into the output row as
  it arrives and released at once (a reuse buffer of one output row, not ``k`` input rows).
- ``SPAN``: an upsampling op (ConvTranspose, Resize): output row ``r`` reads the input rows
  its :class:`~fusiontune.ops.RowSpans` names (``[first[r], end[r])``: the rows a transposed
  convolution's flipped kernel covers on the zero-inserted input, or the rows a nearest or
  linear Resize interpolates from); both ends grow with ``r``.
- ``REDUCE``: a global pool: input rows are folded into an accumulator as they arrive, the
  (one-row) output exists at the end.
- ``WHOLE``: every input row first, then the whole output at once (two-pass batch-statistics
  BN, layout changes across the row axis, OPAQUE ops, ...).

:mod:`fusiontune.sim.runner` executes groups by these maps; :mod:`fusiontune.sim.groupmodel`
predicts the buffer they need from the same maps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

from fusiontune.ir.graph import Graph, Op
from fusiontune.ir.opclass import OpClass
from fusiontune.ops import RowSpans, def_of, is_global_pool, kernel_shape, row_spans
from fusiontune.ops.window import Window, window_geometry

WINDOW_ROW_AXIS = 2  # the first spatial axis of NCHW-like tensors


class RowKind(str, Enum):
    """How an op's output rows depend on its input rows (module docstring)."""

    POINT = "point"
    WINDOW = "window"
    SPAN = "span"
    REDUCE = "reduce"
    WHOLE = "whole"


@dataclass(frozen=True)
class RowMap:
    """The row dependence of one op.

    Attributes:
        kind: see :class:`RowKind`.
        streamed: per op input: ``True`` when it is read by rows (the data input of a window,
            row-aligned inputs of a POINT op), ``False`` when read whole (or constant/absent).
        window: the geometry of a WINDOW op.
        accumulate: a WINDOW pool that folds input rows into its output row one at a time.
        spans: the input rows of each output row of a SPAN op.
    """

    kind: RowKind
    streamed: tuple[bool, ...]
    window: Window | None = None
    accumulate: bool = False
    spans: RowSpans | None = None

    def input_rows(self, a: int, b: int, height: int) -> tuple[int, int]:
        """Rows ``[lo, hi)`` of a streamed input that output rows ``[a, b)`` read."""
        if self.kind is RowKind.POINT:
            return a, b
        if self.spans is not None:
            return self.spans.rows(a, b)
        assert self.window is not None
        start, end = self.window.input_rows(a, b)
        return max(start, 0), min(end, height)

    def low_after(self, b: int, height: int) -> int:
        """The lowest row of a streamed input still needed once rows ``[0, b)`` are out."""
        if self.kind is RowKind.POINT:
            return b
        if self.spans is not None:
            return self.spans.low_after(b)
        assert self.window is not None
        start, _ = self.window.input_rows(b, b + 1)
        return min(max(start, 0), height)


@lru_cache(maxsize=16)
def row_axes(graph: Graph) -> dict[str, int | None]:
    """The row axis of every tensor of ``graph`` (``None``: a single row)."""
    windowed: set[str] = set()
    for op in graph.ops:
        if op.op_class is OpClass.OPAQUE:
            continue
        if _spatial_window(graph, op) or is_global_pool(op) or def_of(op).spans is not None:
            windowed.update(t for t in graph.activation_inputs(op)[:1])
            windowed.update(t for t in op.outputs[:1] if t)
    out: dict[str, int | None] = {}
    for name, tensor in graph.tensors.items():
        rank = len(tensor.shape)
        if name in windowed and rank >= 3:
            out[name] = WINDOW_ROW_AXIS
        elif rank >= 2:
            out[name] = rank - 2
        else:
            out[name] = None
    return out


def height(graph: Graph, tensor: str) -> int:
    """Rows of ``tensor`` along its row axis (1 without one)."""
    axis = row_axes(graph)[tensor]
    return 1 if axis is None else int(graph.tensors[tensor].shape[axis])


def row_elems(graph: Graph, tensor: str) -> int:
    """Elements of one row of ``tensor``."""
    return math.prod(graph.tensors[tensor].shape) // max(1, height(graph, tensor))


def _spatial_window(graph: Graph, op: Op) -> bool:
    """A Conv or pooling op sliding a window over spatial axes (1x1 included): a LINEAR or
    WINDOW op with a kernel window that is not an upsampling op's row spans."""
    if op.op_class not in (OpClass.LINEAR, OpClass.WINDOW) or is_global_pool(op):
        return False
    return def_of(op).spans is None and is_window_op(graph, op)


def is_window_op(graph: Graph, op: Op) -> bool:
    """Whether the registry knows a window (kernel) for ``op``."""
    try:
        return bool(kernel_shape(graph, op))
    except Exception:
        return False


@lru_cache(maxsize=4096)
def _cached_map(graph: Graph, op: Op) -> RowMap:
    return _row_map(graph, op)


def row_map(graph: Graph, op: Op) -> RowMap:
    """The :class:`RowMap` of ``op`` in ``graph``."""
    return _cached_map(graph, op)


def _row_map(graph: Graph, op: Op) -> RowMap:
    axes = row_axes(graph)
    out = op.outputs[0]
    whole = RowMap(RowKind.WHOLE, tuple(False for _ in op.inputs))
    if op.op_class is OpClass.OPAQUE or not out:
        return whole
    if any(t and axes.get(t) is not None for t in op.outputs[1:] if _used(graph, t)):
        return whole  # a second output (BN running stats, pool indices) that is read
    x = graph.activation_inputs(op)
    spans = row_spans(graph, op)
    if spans is not None:
        if not x or axes[x[0]] != WINDOW_ROW_AXIS or axes[out] != WINDOW_ROW_AXIS:
            return whole
        return RowMap(RowKind.SPAN, tuple(t == x[0] for t in op.inputs), spans=spans)
    if is_global_pool(op):
        if x and axes[x[0]] is not None and def_of(op).pool_reduce is not None:
            return RowMap(RowKind.REDUCE, tuple(t == x[0] for t in op.inputs))
        return whole
    if _spatial_window(graph, op):
        if not x or axes[x[0]] != WINDOW_ROW_AXIS or axes[out] != WINDOW_ROW_AXIS:
            return whole
        if op.op_class is OpClass.WINDOW and def_of(op).band is None:
            return whole
        shape = graph.tensors[x[0]].shape
        win = window_geometry(op, shape[2:], kernel_shape(graph, op))
        data = tuple(t == x[0] for t in op.inputs)
        accumulate = (
            def_of(op).pool_reduce is not None
            and win.strides[0] == win.effective[0]
            and win.pads_begin[0] == win.pads_end[0] == 0
            and win.out_spatial[0] * win.strides[0] == shape[2]
        )
        return RowMap(RowKind.WINDOW, data, win, accumulate)
    axis, h_out = axes[out], height(graph, out)
    if axis is None:
        return whole
    if op.op_class is OpClass.LINEAR:  # Gemm / MatMul with a constant weight
        row_local = def_of(op).row_local
        if row_local is not None and not row_local(graph, op):
            return whole
        ok = _aligned(graph, x[0], axis, h_out) and axes[x[0]] == len(graph.tensors[x[0]].shape) - 2
        return RowMap(RowKind.POINT, tuple(t == x[0] for t in op.inputs)) if ok else whole
    if op.op_class in (OpClass.AFFINE, OpClass.ELEMWISE, OpClass.BINARY) or (
        op.op_class is OpClass.STATS and _row_local_stats(graph, op, axis)
    ):
        flags: list[bool] = []
        for t in op.inputs:
            if not t or graph.is_constant(t):
                flags.append(False)
            elif _aligned(graph, t, axis, h_out):
                flags.append(True)
            elif _broadcast(graph, t, out, axis):
                flags.append(False)
            else:
                return whole
        return RowMap(RowKind.POINT, tuple(flags))
    return whole


def _used(graph: Graph, tensor: str) -> bool:
    return tensor in graph.outputs or bool(graph.consumer_map.get(tensor))


def _aligned(graph: Graph, tensor: str, axis: int, h_out: int) -> bool:
    """``tensor`` has the output's row axis and height (and as many axes)."""
    axes = row_axes(graph)
    return axes.get(tensor) == axis and height(graph, tensor) == h_out


def _broadcast(graph: Graph, tensor: str, out: str, axis: int) -> bool:
    """``tensor`` is broadcast along the output's row axis (size 1 there, or too few axes)."""
    shape = graph.tensors[tensor].shape
    rank_out = len(graph.tensors[out].shape)
    lead = rank_out - len(shape)
    return axis < lead or shape[axis - lead] == 1


def _row_local_stats(graph: Graph, op: Op, axis: int) -> bool:
    """A STATS op whose statistics are over axes that exclude the row axis."""
    reduced = stats_axes(graph, op)
    return reduced is not None and axis not in reduced


def stats_axes(graph: Graph, op: Op) -> frozenset[int] | None:
    """Axes a STATS op reduces over (``None``: unknown to the executor), from its
    :attr:`~fusiontune.ops.OpDef.stats_axes`."""
    x = graph.activation_inputs(op)
    fn = def_of(op).stats_axes
    if not x or fn is None:
        return None
    return fn(op, len(graph.tensors[x[0]].shape))
