"""Ops that read or write elements at positions given by an index tensor: GatherElements,
ScatterElements and ScatterND (onnx.ai/onnx/operators).

All are OPAQUE, like Gather: which input row an output row reads (GatherElements) or which
output row an update lands in (ScatterElements, ScatterND) is a *value* of the indices, not a
fact of the shapes, so no static row map exists and the op needs its whole input resident.
Exporters emit them on small integer and mask tensors (BERT's position ids, BART's shifted
decoder inputs), never on the convolution or matrix activations a group would stream, so a
barrier costs nothing there. Each has shape inference and a numpy reference kernel that the
executor also runs (``SAME_AS_REFERENCE``); negative indices count from the end of their axis,
as ONNX says, and an index out of range is an error naming the op, the index and the allowed
range.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from fusiontune.errors import FusiontuneError, ShapeError
from fusiontune.ops.base import (
    Array,
    Inputs,
    OpDef,
    Shapes,
    Tensors,
    attr_i,
    attr_s,
    norm_axis,
)

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph, Op

SCATTER_REDUCTION_SINCE = {"none": 11, "add": 16, "mul": 16, "max": 18, "min": 18}
"""The first ONNX opset whose ScatterND and ScatterElements take each ``reduction``."""

SCATTER_REDUCTIONS: dict[str, np.ufunc | None] = {
    "none": None,  # every opset; duplicate indices are undefined behaviour in ONNX
    "add": np.add,  # opset 16
    "mul": np.multiply,  # opset 16
    "max": np.maximum,  # opset 18
    "min": np.minimum,  # opset 18
}
"""The scatters' ``reduction`` attribute -> how an update meets the element it lands on."""


def _in_range(op: Op, index: Array, dims: Array, what: str) -> Array:
    """``index`` (broadcast against ``dims``) with negative entries counted from the end.

    Raises:
        FusiontuneError: an entry outside ``[-dim, dim - 1]``, named with its ``what``.
    """
    index = np.asarray(index, dtype=np.int64)
    bad = (index < -dims) | (index >= dims)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        value, dim = int(index[at]), int(np.broadcast_to(dims, index.shape)[at])
        raise FusiontuneError(
            f"op '{op.name}' ({op.op_type}): index {value} at {at} is out of range for "
            f"{what} of size {dim}; allowed: [{-dim}, {dim - 1}]"
        )
    return np.where(index < 0, index + dims, index)


# ---- GatherElements -------------------------------------------------------------------------
def _gather_elements(op: Op, inputs: Inputs) -> list[Array]:
    """``y[i0, .., ik, ..] = x[i0, .., indices[i0, .., ik, ..], ..]`` with ``k = axis``."""
    x, idx = inputs[0], inputs[1]
    assert x is not None and idx is not None
    axis = norm_axis(attr_i(op, "axis"), x.ndim, op)
    idx = _in_range(op, idx, np.int64(x.shape[axis]), f"axis {axis}")
    grid = list(np.ogrid[tuple(slice(d) for d in idx.shape)])
    grid[axis] = idx
    return [x[tuple(grid)]]


def _gather_elements_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x, idx = ins[0], ins[1]
    assert x is not None and idx is not None
    axis = norm_axis(int(op.attr("axis", 0)), len(x), op)
    if len(idx) != len(x) or any(i > d for a, (i, d) in enumerate(zip(idx, x)) if a != axis):
        raise ShapeError(
            f"op '{op.name}' (GatherElements): indices {tuple(idx)} must have the rank of the "
            f"data {tuple(x)} and no larger size outside axis {axis}"
        )
    return [tuple(idx)]


# ---- ScatterElements ------------------------------------------------------------------------
def _scatter_elements(op: Op, inputs: Inputs) -> list[Array]:
    """A copy of the data with ``updates[i0, .., ik, ..]`` written (or reduced) at
    ``[i0, .., indices[i0, .., ik, ..], ..]`` with ``k = axis``."""
    data, idx, updates = inputs[0], inputs[1], inputs[2]
    assert data is not None and idx is not None and updates is not None
    reduce = _reduction(op)
    axis = norm_axis(attr_i(op, "axis"), data.ndim, op)
    idx = _in_range(op, idx, np.int64(data.shape[axis]), f"axis {axis}")
    grid = list(np.ogrid[tuple(slice(d) for d in idx.shape)])
    grid[axis] = idx
    return [_scatter(data, tuple(grid), updates, reduce)]


def _scatter_elements_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    data, idx, updates = ins[0], ins[1], ins[2]
    assert data is not None and idx is not None and updates is not None
    axis = norm_axis(int(op.attr("axis", 0)), len(data), op)
    if len(idx) != len(data) or any(i > d for a, (i, d) in enumerate(zip(idx, data)) if a != axis):
        raise ShapeError(
            f"op '{op.name}' (ScatterElements): indices {tuple(idx)} must have the rank of the "
            f"data {tuple(data)} and no larger size outside axis {axis}"
        )
    if tuple(updates) != tuple(idx):
        raise ShapeError(
            f"op '{op.name}' (ScatterElements): updates have shape {tuple(updates)}; they "
            f"need the indices' shape {tuple(idx)}"
        )
    return [tuple(data)]


# ---- ScatterND (and what both scatters share) ----------------------------------------------
def _scatter(
    data: Array, where: tuple[Array, ...], values: Array, reduce: np.ufunc | None
) -> Array:
    """A copy of ``data`` with ``values`` written (or reduced, duplicates included) at ``where``."""
    out = np.array(data, copy=True)
    if reduce is None:
        out[where] = values
    else:
        reduce.at(out, where, values)
    return out


def _reduction(op: Op) -> np.ufunc | None:
    name = attr_s(op, "reduction")
    if name not in SCATTER_REDUCTIONS:
        raise FusiontuneError(
            f"op '{op.name}' ({op.op_type}): reduction '{name}' is not one of "
            f"{', '.join(SCATTER_REDUCTIONS)}"
        )
    return SCATTER_REDUCTIONS[name]


def _scatter_nd(op: Op, inputs: Inputs) -> list[Array]:
    """A copy of the data with the updates written (or reduced) at the index tuples: each of
    the ``indices.shape[:-1]`` tuples of length ``k`` addresses a slice ``data[tuple]`` of shape
    ``data.shape[k:]``."""
    data, idx, updates = inputs[0], inputs[1], inputs[2]
    assert data is not None and idx is not None and updates is not None
    reduce = _reduction(op)
    k = idx.shape[-1]
    dims = np.asarray(data.shape[:k], dtype=np.int64)
    tuples = _in_range(op, idx.reshape(-1, k), dims, "the data's leading axes").T
    return [_scatter(data, tuple(tuples), updates.reshape((-1, *data.shape[k:])), reduce)]


def _scatter_nd_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    data, idx, updates = ins[0], ins[1], ins[2]
    assert data is not None and idx is not None and updates is not None
    k = idx[-1] if idx else 0
    if not idx or not 1 <= k <= len(data):
        raise ShapeError(
            f"op '{op.name}' (ScatterND): the indices' last axis ({k}) must be in "
            f"[1, {len(data)}], the data's rank (data {tuple(data)}, indices {tuple(idx)})"
        )
    want = (*idx[:-1], *data[k:])
    if tuple(updates) != want:
        raise ShapeError(
            f"op '{op.name}' (ScatterND): updates have shape {tuple(updates)}; data "
            f"{tuple(data)} and indices {tuple(idx)} need {want}"
        )
    return [tuple(data)]


def _scatter_export(
    op: Op, graph: Graph, opset: int, inputs: list[str], attrs: dict[str, Any], outputs: list[str]
) -> tuple[list[str], dict[str, Any], list[str]]:
    """A reduction the target opset's scatter does not have is refused by name (``none`` is the
    default, written only where the attribute exists)."""
    reduction = str(attrs.get("reduction", "none"))
    since = SCATTER_REDUCTION_SINCE.get(reduction, 0)
    if opset < since:
        raise FusiontuneError(
            f"to_onnx: op '{op.name}' ({op.op_type}) has reduction '{reduction}', which ONNX "
            f"opset {opset} does not define; use opset >= {since}"
        )
    if reduction == "none" and opset < SCATTER_REDUCTION_SINCE["add"]:
        attrs.pop("reduction", None)
    return inputs, attrs, outputs


OPS: tuple[OpDef, ...] = (
    OpDef(
        "GatherElements",
        defaults={"axis": 0},
        shape=_gather_elements_shape,
        reference=_gather_elements,
    ),
    OpDef(
        "ScatterElements",
        defaults={"axis": 0, "reduction": "none"},
        shape=_scatter_elements_shape,
        reference=_scatter_elements,
        export=_scatter_export,
    ),
    OpDef(
        "ScatterND",
        defaults={"reduction": "none"},
        shape=_scatter_nd_shape,
        reference=_scatter_nd,
        export=_scatter_export,
    ),
)
