"""OPAQUE ops the IR still knows: shape inference and a reference kernel, no fusion.

Concat, Slice, Gather, Split, Pad, Expand, Where, Cast, Shape, Size and DepthToSpace have shape
inference (constant operands in their ONNX input or attribute forms); the others (Tile,
Range, Constant, ConstantOfShape, Einsum, CumSum) have only a reference kernel, so the
importer takes their shapes from ``onnx.shape_inference`` and warns about them. Every op
here is a barrier: always a group of its own, run by its reference kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from fusiontune.errors import FusiontuneError, ShapeError
from fusiontune.ops.base import (
    Array,
    AttentionRole,
    FoldFn,
    Inputs,
    Kernel,
    OpDef,
    OperandMove,
    Shape,
    Shapes,
    Tensors,
    arg,
    attr_f,
    attr_i,
    attr_s,
    broadcast_rule,
    broadcast_shapes,
    const_input,
    fold_ints,
    int_list,
    ints,
    norm_axis,
    same_shape,
)

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph, Op

SPLIT_INPUT_SINCE = 13  # Split takes 'split' as an input since opset 13
SPLIT_NUM_OUTPUTS_SINCE = 18  # Split-18 needs the 'split' input or 'num_outputs'


# ---- structural ---------------------------------------------------------------------------
def _concat(op: Op, inputs: Inputs) -> list[Array]:
    arrays = [a for a in inputs if a is not None]
    return [np.concatenate(arrays, axis=attr_i(op, "axis"))]


def _axis_moved(op: Op, tensors: Tensors, rank: int) -> frozenset[int] | None:
    """Concat's and Split's ``axis`` (normalized for ``rank``)."""
    return frozenset({attr_i(op, "axis") % rank})


def _slice_moved(op: Op, tensors: Tensors, rank: int) -> frozenset[int] | None:
    """Slice's axes (``None`` unless they and the starts are constants or attributes)."""

    def value(index: int) -> list[int] | None:
        t = tensors.get(op.inputs[index]) if len(op.inputs) > index and op.inputs[index] else None
        return None if t is None or t.value is None else ints(np.asarray(t.value).reshape(-1))

    if op.attr("starts") is not None:  # opset < 10
        starts, axes = ints(op.attr("starts")), ints(op.attr("axes"))
    else:
        starts, axes = value(1), value(3)
        if len(op.inputs) > 3 and op.inputs[3] and axes is None:
            return None
    if starts is None:
        return None
    return frozenset(a % rank for a in (axes if axes is not None else range(len(starts))))


def _shape_value(op: Op, shape: Shape) -> Array:
    """Shape's output from the input's shape: ``shape[start:end]``."""
    end = op.attr("end")
    return np.asarray(shape[attr_i(op, "start") : None if end is None else int(end)], np.int64)


def _size_value(op: Op, shape: Shape) -> Array:
    return np.asarray(math.prod(shape), dtype=np.int64)


def _from_shape(value: Callable[[Op, Shape], Array]) -> Kernel:
    def kernel(op: Op, inputs: Inputs) -> list[Array]:
        x = inputs[0]
        assert x is not None
        return [value(op, x.shape)]

    return kernel


def _gather(op: Op, inputs: Inputs) -> list[Array]:
    x, idx = inputs[0], inputs[1]
    assert x is not None and idx is not None
    axis = attr_i(op, "axis") % x.ndim
    dim = x.shape[axis]
    outside = (np.asarray(idx) < -dim) | (np.asarray(idx) >= dim)
    if outside.any():  # numpy's IndexError would name neither the op nor the range
        raise FusiontuneError(
            f"op '{op.name}' (Gather): index {int(np.asarray(idx)[outside].flat[0])} is out of "
            f"range for axis {axis} of size {dim}; allowed: [{-dim}, {dim - 1}]"
        )
    idx = np.where(idx < 0, idx + dim, idx)
    return [np.take(x, idx, axis=axis)]


def _slice_bounds(start: int, end: int, step: int, dim: int) -> slice:
    """ONNX Slice clamping (differs from Python slices for negative steps)."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start = min(max(start, 0), dim - 1)
    end = min(max(end, -1), dim - 1)
    return slice(start, None if end < 0 else end, step)


def _slice(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    if op.attr("starts") is not None:  # opset < 10
        starts, ends = ints(op.attr("starts")) or [], ints(op.attr("ends")) or []
        axes, steps = ints(op.attr("axes")), None
    else:
        starts, ends = ints(inputs[1]) or [], ints(inputs[2]) or []
        axes, steps = ints(arg(inputs, 3)), ints(arg(inputs, 4))
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[a % x.ndim] = _slice_bounds(s, e, st, x.shape[a % x.ndim])
    return [x[tuple(index)]]


def _split(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axis = attr_i(op, "axis") % x.ndim
    sizes = ints(op.attr("split")) or ints(arg(inputs, 1))
    n_out = len(op.outputs)
    if sizes is None:
        dim = x.shape[axis]
        if op.attr("num_outputs") is not None:  # opset 18: last chunk may be smaller
            chunk = math.ceil(dim / n_out)
            sizes = [min(chunk, dim - i * chunk) for i in range(n_out)]
        else:
            sizes = [dim // n_out] * n_out
    return np.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis)


_PAD_MODES: dict[str, Literal["reflect", "edge", "wrap"]] = {
    "reflect": "reflect",
    "edge": "edge",
    "wrap": "wrap",
}


def _pad(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    pads = ints(op.attr("pads")) or ints(arg(inputs, 1)) or []
    value_in = arg(inputs, 2)
    value = attr_f(op, "value") if value_in is None else value_in.reshape(-1)[0]
    axes = ints(arg(inputs, 3))
    axes = [a % x.ndim for a in axes] if axes is not None else list(range(x.ndim))
    n = len(axes)
    widths = [(0, 0)] * x.ndim
    for i, a in enumerate(axes):
        widths[a] = (pads[i], pads[i + n])
    grow = [(max(b, 0), max(e, 0)) for b, e in widths]
    mode = attr_s(op, "mode")
    if mode == "constant":
        y = np.pad(x, grow, mode="constant", constant_values=value)
    elif mode in _PAD_MODES:
        y = np.pad(x, grow, mode=_PAD_MODES[mode])
    else:
        raise FusiontuneError(
            f"op '{op.name}' (Pad): mode '{mode}' is not one of constant, reflect, edge, wrap"
        )
    crop = tuple(
        slice(-min(b, 0), y.shape[i] + min(e, 0)) for i, (b, e) in enumerate(widths)
    )  # negative pads remove elements
    return [y[crop]]


def _cast(op: Op, inputs: Inputs) -> list[Array]:
    from onnx import helper

    x = inputs[0]
    assert x is not None
    return [x.astype(helper.tensor_dtype_to_np_dtype(attr_i(op, "to")))]


def _expand(op: Op, inputs: Inputs) -> list[Array]:
    x, shape = inputs[0], inputs[1]
    assert x is not None and shape is not None
    target = np.broadcast_shapes(x.shape, tuple(ints(shape) or []))
    return [np.array(np.broadcast_to(x, target))]


def _tile(op: Op, inputs: Inputs) -> list[Array]:
    x, reps = inputs[0], inputs[1]
    assert x is not None and reps is not None
    return [np.tile(x, tuple(ints(reps) or []))]


def _where(op: Op, inputs: Inputs) -> list[Array]:
    cond, a, b = inputs[:3]
    assert cond is not None and a is not None and b is not None
    return [np.where(cond, a, b)]


def _constant_value(op: Op) -> Array:
    for key, dtype in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):  # fmt: skip
        if op.attr(key) is not None:
            return np.asarray(op.attr(key), dtype=dtype)
    raise FusiontuneError(f"op '{op.name}' ({op.op_type}): needs a 'value' attribute")


def _constant(op: Op, inputs: Inputs) -> list[Array]:
    return [_constant_value(op)]


def _constant_of_shape(op: Op, inputs: Inputs) -> list[Array]:
    shape = ints(inputs[0]) or []
    value = (
        np.asarray(op.attr("value")).reshape(-1)
        if op.attr("value") is not None
        else np.zeros(1, np.float32)
    )
    return [np.full(tuple(shape), value[0], dtype=value.dtype)]


def _range(op: Op, inputs: Inputs) -> list[Array]:
    start, limit, delta = inputs[:3]
    assert start is not None and limit is not None and delta is not None
    return [np.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype)]


def _einsum(op: Op, inputs: Inputs) -> list[Array]:
    arrays = [a for a in inputs if a is not None]
    return [np.asarray(np.einsum(attr_s(op, "equation"), *arrays))]


def _cumsum(op: Op, inputs: Inputs) -> list[Array]:
    x, axis_in = inputs[0], inputs[1]
    assert x is not None and axis_in is not None
    axis = int(np.asarray(axis_in).reshape(-1)[0]) % x.ndim
    y = np.flip(x, axis) if attr_i(op, "reverse") else x
    total = np.cumsum(y, axis=axis, dtype=x.dtype)
    if attr_i(op, "exclusive"):
        total = total - y
    return [np.flip(total, axis) if attr_i(op, "reverse") else total]


# ---- shapes -------------------------------------------------------------------------------
def _concat_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    shapes = [s for s in ins if s is not None]
    if op.attr("axis") is None:
        raise ShapeError(f"op '{op.name}' (Concat): attribute 'axis' is required")
    axis = norm_axis(int(op.attr("axis")), len(shapes[0]), op)
    for s in shapes[1:]:
        if len(s) != len(shapes[0]) or any(
            a != b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != axis
        ):
            raise ShapeError(
                f"op '{op.name}' (Concat): input shapes {[tuple(s) for s in shapes]} differ "
                f"outside axis {axis}"
            )
    dims = list(shapes[0])
    dims[axis] = sum(s[axis] for s in shapes)
    return [tuple(dims)]


def _value_shape(value: Callable[[Op, Shape], Array]) -> Callable[..., Shapes]:
    def rule(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
        x = ins[0]
        assert x is not None
        return [tuple(value(op, x).shape)]

    return rule


def _slice_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x = ins[0]
    assert x is not None
    starts = int_list(const_input(op, tensors, 1), op.attr("starts"))
    ends = int_list(const_input(op, tensors, 2), op.attr("ends"))
    if starts is None or ends is None or len(starts) != len(ends):
        raise ShapeError(f"op '{op.name}' (Slice): starts and ends must be given, of equal length")
    axes = int_list(const_input(op, tensors, 3), op.attr("axes")) or list(range(len(starts)))
    steps = int_list(const_input(op, tensors, 4), None) or [1] * len(starts)
    out = list(x)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if step == 0:
            raise ShapeError(f"op '{op.name}' (Slice): step 0 is not allowed")
        a = norm_axis(axis, len(x), op)
        # Python slicing clamps exactly as ONNX specifies (incl. INT64_MAX / INT64_MIN ends)
        out[a] = len(range(x[a])[slice(start, end, step)])
    return [tuple(out)]


def _gather_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x, idx = ins[0], ins[1]
    assert x is not None and idx is not None
    axis = norm_axis(int(op.attr("axis", 0)), len(x), op)
    return [(*x[:axis], *idx, *x[axis + 1 :])]


def _split_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x = ins[0]
    assert x is not None
    axis = norm_axis(int(op.attr("axis", 0)), len(x), op)
    dim = x[axis]
    sizes = int_list(const_input(op, tensors, 1), op.attr("split"))
    if sizes is None:
        n = int(op.attr("num_outputs", n_out))
        if op.attr("num_outputs") is None and dim % n:
            raise ShapeError(f"op '{op.name}' (Split): axis size {dim} is not divisible by {n}")
        chunk = -(-dim // n)  # opset 18: the last chunk may be smaller
        sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
    if sum(sizes) != dim or len(sizes) != n_out or min(sizes) < 0:
        raise ShapeError(
            f"op '{op.name}' (Split): sizes {sizes} must be {n_out} non-negative entries "
            f"summing to axis size {dim}"
        )
    return [(*x[:axis], s, *x[axis + 1 :]) for s in sizes]


def _pad_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x = ins[0]
    assert x is not None
    pads = int_list(const_input(op, tensors, 1), op.attr("pads"))
    if pads is None:
        raise ShapeError(f"op '{op.name}' (Pad): pads are required")
    axes = int_list(const_input(op, tensors, 3), None) or list(range(len(x)))
    if len(pads) != 2 * len(axes):
        raise ShapeError(f"op '{op.name}' (Pad): {len(pads)} pads for {len(axes)} axes")
    out = list(x)
    for i, axis in enumerate(axes):
        a = norm_axis(axis, len(x), op)
        out[a] = x[a] + pads[i] + pads[i + len(axes)]
        if out[a] < 0:
            raise ShapeError(f"op '{op.name}' (Pad): negative output size on axis {a}")
    return [tuple(out)]


def _expand_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x = ins[0]
    assert x is not None
    shape = const_input(op, tensors, 1)
    if shape is None:
        raise ShapeError(f"op '{op.name}' (Expand): the shape input is required")
    return [broadcast_shapes(x, [int(d) for d in shape])]


def _split_export(
    op: Op, graph: Graph, opset: int, inputs: list[str], attrs: dict[str, Any], outputs: list[str]
) -> tuple[list[str], dict[str, Any], list[str]]:
    """An equal split names its output count explicitly from opset 18."""
    if opset >= SPLIT_NUM_OUTPUTS_SINCE:
        has_split = "split" in attrs or (len(inputs) > 1 and bool(inputs[1]))
        if not has_split and "num_outputs" not in attrs:
            attrs["num_outputs"] = len(outputs)
    return inputs, attrs, outputs


# ---- DepthToSpace ---------------------------------------------------------------------------
DEPTH_TO_SPACE_MODES = ("DCR", "CRD")
"""DepthToSpace's ``mode`` (opset 11+; DCR before): the order of (depth, column, row) in C."""


def _depth_to_space_geometry(op: Op, shape: Shape) -> tuple[int, str]:
    """``(blocksize, mode)`` of a DepthToSpace on an NCHW input of ``shape``.

    Raises:
        ShapeError: not rank 4, a mode outside :data:`DEPTH_TO_SPACE_MODES`, or channels
            that ``blocksize**2`` does not divide.
    """
    b, mode = attr_i(op, "blocksize"), attr_s(op, "mode")
    if mode not in DEPTH_TO_SPACE_MODES:
        raise ShapeError(
            f"op '{op.name}' (DepthToSpace): mode '{mode}' is not one of "
            f"{', '.join(DEPTH_TO_SPACE_MODES)}"
        )
    if len(shape) != 4 or b < 1 or shape[1] % (b * b):
        raise ShapeError(
            f"op '{op.name}' (DepthToSpace): input {tuple(shape)} must be NCHW with channels "
            f"divisible by blocksize**2 = {b * b}"
        )
    return b, mode


def _depth_to_space_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x = ins[0]
    assert x is not None
    b, _ = _depth_to_space_geometry(op, x)
    n, c, h, w = x
    return [(n, c // (b * b), h * b, w * b)]


def _depth_to_space(op: Op, inputs: Inputs) -> list[Array]:
    """Channels ``(b, b, C')`` (DCR) or ``(C', b, b)`` (CRD) moved into ``b x b`` blocks of
    rows and columns (torch's ``pixel_shuffle`` is CRD)."""
    x = inputs[0]
    assert x is not None
    b, mode = _depth_to_space_geometry(op, x.shape)
    n, c, h, w = x.shape
    if mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return [np.ascontiguousarray(y.reshape(n, c // (b * b), h * b, w * b))]


# ---- folded output sizes (``limits``: the importer folds no output larger than its bound) ----
def _constant_of_shape_elements(values: Inputs) -> int | None:
    return math.prod(fold_ints(values[0])) if values else None


def _expand_elements(values: Inputs) -> int | None:
    if len(values) < 2 or values[0] is None:
        return None
    target = fold_ints(values[1])
    data = [int(d) for d in values[0].shape]
    rank = max(len(target), len(data))
    target = [1] * (rank - len(target)) + target
    data = [1] * (rank - len(data)) + data
    return math.prod(max(a, b) for a, b in zip(data, target))


def _tile_elements(values: Inputs) -> int | None:
    if len(values) < 2 or values[0] is None:
        return None
    return int(values[0].size) * math.prod(fold_ints(values[1]))


def _range_elements(values: Inputs) -> int | None:
    if len(values) < 3 or any(v is None for v in values[:3]):
        return None
    start, limit, delta = (float(np.asarray(v).reshape(-1)[0]) for v in values[:3])
    if delta == 0 or not all(map(math.isfinite, (start, limit, delta))):
        return None
    return max(0, math.ceil((limit - start) / delta))


def _pad_elements(values: Inputs) -> int | None:
    if len(values) < 2 or values[0] is None:
        return None
    pads = fold_ints(values[1])
    rank = values[0].ndim
    if len(pads) != 2 * rank:
        return None
    return math.prod(d + pads[i] + pads[i + rank] for i, d in enumerate(values[0].shape))


def _eye_like_elements(values: Inputs) -> int | None:
    return int(values[0].size) if values and values[0] is not None else None


def _one_hot_elements(values: Inputs) -> int | None:
    if len(values) < 2 or values[0] is None or not fold_ints(values[1]):
        return None
    return int(values[0].size) * max(1, abs(fold_ints(values[1])[0]))


FOLD_ONLY: dict[str, FoldFn] = {"EyeLike": _eye_like_elements, "OneHot": _one_hot_elements}
"""Folded sizes of op types without an OpDef (ONNX's reference evaluator folds them)."""


OPS: tuple[OpDef, ...] = (
    OpDef(
        "Concat",
        shape=_concat_shape,
        lint_opaque=True,
        reference=_concat,
        concatenates=True,
        moved_axes=_axis_moved,
    ),
    OpDef(
        "Shape",
        defaults={"start": 0},
        shape=_value_shape(_shape_value),
        reference=_from_shape(_shape_value),
        static_value=_shape_value,
    ),
    OpDef(
        "Size",
        shape=_value_shape(_size_value),
        reference=_from_shape(_size_value),
        static_value=_size_value,
    ),
    OpDef("Gather", defaults={"axis": 0}, shape=_gather_shape, reference=_gather),
    OpDef("Slice", shape=_slice_shape, reference=_slice, moved_axes=_slice_moved),
    OpDef(
        "Split",
        defaults={"axis": 0},
        shape=_split_shape,
        reference=_split,
        operand=OperandMove("split", 1, SPLIT_INPUT_SINCE),
        export=_split_export,
        moved_axes=_axis_moved,
    ),
    OpDef(
        "Pad",
        defaults={"mode": "constant", "value": 0.0},
        shape=_pad_shape,
        reference=_pad,
        fold_elements=_pad_elements,
    ),
    OpDef(
        "Expand",
        shape=_expand_shape,
        reference=_expand,
        fold_elements=_expand_elements,
        attention_role=AttentionRole.BROADCAST,
    ),
    OpDef(
        "Where",
        shape=broadcast_rule,
        reference=_where,
        data_input=1,
        attention_role=AttentionRole.WHERE,
    ),
    OpDef(
        "Cast",
        shape=same_shape,
        reference=_cast,
        dtype_attr="to",
        attention_role=AttentionRole.PASS,
    ),
    OpDef("Tile", reference=_tile, fold_elements=_tile_elements),
    OpDef("Constant", reference=_constant),
    OpDef(
        "ConstantOfShape",
        reference=_constant_of_shape,
        fold_elements=_constant_of_shape_elements,
    ),
    OpDef("Range", reference=_range, fold_elements=_range_elements),
    OpDef("Einsum", reference=_einsum),
    OpDef("CumSum", defaults={"exclusive": 0, "reverse": 0}, reference=_cumsum),
    OpDef(
        "DepthToSpace",
        defaults={"mode": "DCR"},
        shape=_depth_to_space_shape,
        reference=_depth_to_space,
    ),
)
