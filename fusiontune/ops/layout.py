"""Layout ops (LAYOUT): Reshape, Flatten, Squeeze, Unsqueeze, Transpose. No arithmetic.

The executor runs their reference kernels (``SAME_AS_REFERENCE``); the cost model counts no
element ops for them and a fused group treats them as views.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from fusiontune.errors import ShapeError
from fusiontune.ir.opclass import OpClass
from fusiontune.ops.base import (
    Array,
    AttentionRole,
    Inputs,
    OpDef,
    OperandMove,
    Shape,
    Shapes,
    Tensors,
    attr_i,
    ints,
    kernel_axes,
    norm_axis,
    one_activation,
    shape_axes,
)

if TYPE_CHECKING:
    from fusiontune.ir.graph import Op

SQUEEZE_AXES_INPUT_SINCE = 13  # Squeeze/Unsqueeze take axes as an input since opset 13


def reshape_target(op: Op, in_shape: Shape, target: Sequence[int]) -> Shape:
    """Resolve a Reshape target with ONNX 0 (copy) and -1 (infer) semantics."""
    allowzero = attr_i(op, "allowzero")
    out = []
    for i, d in enumerate(int(x) for x in target):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ShapeError(f"op '{op.name}' (Reshape): 0 at axis {i} beyond input rank")
            out.append(in_shape[i])
        else:
            out.append(d)
    if out.count(-1) > 1:
        raise ShapeError(f"op '{op.name}' (Reshape): more than one -1 in {list(target)}")
    total = math.prod(in_shape)
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or total % known:
            raise ShapeError(
                f"op '{op.name}' (Reshape): cannot reshape {in_shape} to {list(target)}"
            )
        out[out.index(-1)] = total // known
    if math.prod(out) != total:
        raise ShapeError(f"op '{op.name}' (Reshape): cannot reshape {in_shape} to {list(target)}")
    return tuple(out)


# ---- shapes ---------------------------------------------------------------------------------
def _reshape_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x = ins[0]
    assert x is not None
    target = tensors[op.inputs[1]].value
    if target is None:
        raise ShapeError(f"op '{op.name}' (Reshape): the shape input must be a constant")
    return [reshape_target(op, x, np.asarray(target).reshape(-1).tolist())]


def _flatten_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x = ins[0]
    assert x is not None
    axis = norm_axis(attr_i(op, "axis"), len(x), op, extra=1)
    return [(math.prod(x[:axis]), math.prod(x[axis:]))]


def _squeeze_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x = ins[0]
    assert x is not None
    axes = shape_axes(op, tensors, 1)
    if axes is None:
        return [tuple(d for d in x if d != 1)]
    axes = [norm_axis(a, len(x), op) for a in axes]
    for ax in axes:
        if x[ax] != 1:
            raise ShapeError(f"op '{op.name}' (Squeeze): axis {ax} has size {x[ax]}, not 1")
    return [tuple(d for i, d in enumerate(x) if i not in axes)]


def _unsqueeze_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x = ins[0]
    assert x is not None
    axes = shape_axes(op, tensors, 1)
    if axes is None:
        raise ShapeError(f"op '{op.name}' (Unsqueeze): axes are required")
    rank = len(x) + len(axes)
    dims = list(x)
    for ax in sorted(ax + rank if ax < 0 else ax for ax in axes):
        dims.insert(ax, 1)
    return [tuple(dims)]


def _transpose_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x = ins[0]
    assert x is not None
    perm = op.attr("perm", tuple(reversed(range(len(x)))))  # ONNX: reverse the axes
    if sorted(perm) != list(range(len(x))):
        raise ShapeError(
            f"op '{op.name}' (Transpose): perm {perm} is not a permutation of rank {len(x)}"
        )
    return [tuple(x[p] for p in perm)]


# ---- reference kernels ----------------------------------------------------------------------
def _reshape(op: Op, inputs: Inputs) -> list[Array]:
    x, shape = inputs[0], inputs[1]
    assert x is not None and shape is not None
    return [x.reshape(reshape_target(op, x.shape, ints(shape) or []))]


def _flatten(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axis = attr_i(op, "axis")
    axis = axis + x.ndim if axis < 0 else axis
    return [x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))]


def _squeeze(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axes = kernel_axes(op, inputs, 1)
    if axes is None:
        return [np.squeeze(x)]
    return [np.squeeze(x, axis=tuple(a % x.ndim for a in axes))]


def _unsqueeze(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axes = kernel_axes(op, inputs, 1) or []
    rank = x.ndim + len(axes)
    return [np.expand_dims(x, axis=tuple(sorted(a % rank for a in axes)))]


def _transpose_perm(op: Op, rank: int) -> Shape:
    """``perm`` (ONNX default: the axes reversed)."""
    return tuple(int(p) for p in op.attr("perm", tuple(range(rank - 1, -1, -1))))


def _transpose(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    perm = op.attr("perm")
    return [np.transpose(x, None if perm is None else tuple(int(p) for p in perm))]


_LAYOUT = one_activation(OpClass.LAYOUT)
_AXES_INPUT = OperandMove("axes", 1, SQUEEZE_AXES_INPUT_SINCE)
_VIEW = AttentionRole.VIEW  # GQA's repeat_kv reshapes around an Expand (planner/attention.py)

RESHAPE = "Reshape"
FLATTEN = "Flatten"
"""Op types the graph builder (``ir/builder.py``) emits."""

OPS: tuple[OpDef, ...] = (
    OpDef(
        RESHAPE,
        _LAYOUT,
        {"allowzero": 0},
        shape=_reshape_shape,
        reference=_reshape,
        attention_role=_VIEW,
    ),
    OpDef(
        FLATTEN,
        _LAYOUT,
        {"axis": 1},
        shape=_flatten_shape,
        reference=_flatten,
        attention_role=_VIEW,
    ),
    OpDef(
        "Squeeze",
        _LAYOUT,
        shape=_squeeze_shape,
        reference=_squeeze,
        operand=_AXES_INPUT,
        attention_role=_VIEW,
    ),
    OpDef(
        "Unsqueeze",
        _LAYOUT,
        shape=_unsqueeze_shape,
        reference=_unsqueeze,
        operand=_AXES_INPUT,
        attention_role=_VIEW,
    ),
    OpDef(
        "Transpose",
        _LAYOUT,
        shape=_transpose_shape,
        reference=_transpose,
        reorders=True,
        permutation=_transpose_perm,
    ),
)
