"""Shape inference with ONNX semantics for every op of DESIGN §3.

:func:`infer_op_shapes` returns one shape per output (``None`` where an op is not known
here; the ONNX importer then falls back to ``onnx.shape_inference``). :func:`window_geometry`
resolves Conv/Pool pads, strides, dilations, ``auto_pad`` and ``ceil_mode`` once, for shape
inference, the reference executor and the simulator alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fusiontune.errors import ShapeError
from fusiontune.ir.graph import Op, Tensor

Shape = tuple[int, ...]


@dataclass(frozen=True)
class WindowGeometry:
    """Resolved geometry of a sliding-window op over the spatial dimensions."""

    kernel: Shape
    strides: Shape
    dilations: Shape
    pads_begin: Shape
    pads_end: Shape
    out_spatial: Shape


def window_geometry(op: Op, in_spatial: Sequence[int], kernel: Sequence[int]) -> WindowGeometry:
    """Resolve the window geometry of a Conv or pooling op (ONNX semantics)."""
    nd = len(in_spatial)
    kernel = tuple(int(k) for k in kernel)
    strides = tuple(int(s) for s in op.attr("strides", (1,) * nd))
    dilations = tuple(int(d) for d in op.attr("dilations", (1,) * nd))
    ceil_mode = bool(int(op.attr("ceil_mode", 0)))
    auto_pad = op.attr("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if len(strides) != nd or len(dilations) != nd or len(kernel) != nd:
        raise ShapeError(
            f"op '{op.name}' ({op.op_type}): kernel/strides/dilations must have {nd} entries, "
            f"got kernel={kernel}, strides={strides}, dilations={dilations}"
        )
    eff = [d * (k - 1) + 1 for k, d in zip(kernel, dilations)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [math.ceil(i / s) for i, s in zip(in_spatial, strides)]
        total = [max((o - 1) * s + e - i, 0) for o, s, e, i in zip(out, strides, eff, in_spatial)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        begin, end = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
        return WindowGeometry(kernel, strides, dilations, tuple(begin), tuple(end), tuple(out))
    if auto_pad == "VALID":
        begin = end = [0] * nd
    elif auto_pad in ("NOTSET", "", None):
        pads = tuple(int(p) for p in op.attr("pads", (0,) * (2 * nd)))
        if len(pads) != 2 * nd:
            raise ShapeError(f"op '{op.name}' ({op.op_type}): pads must have {2 * nd} entries")
        begin, end = list(pads[:nd]), list(pads[nd:])
    else:
        raise ShapeError(
            f"op '{op.name}' ({op.op_type}): auto_pad '{auto_pad}' is not one of "
            "NOTSET, SAME_UPPER, SAME_LOWER, VALID"
        )
    out = []
    for i, s, e, b, p_end in zip(in_spatial, strides, eff, begin, end):
        span = i + b + p_end - e
        if span < 0:
            raise ShapeError(
                f"op '{op.name}' ({op.op_type}): window {e} is larger than padded input "
                f"{i + b + p_end}"
            )
        o = (math.ceil(span / s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= i + b:
            o -= 1  # the last window must start inside the input or the left padding
        out.append(o)
    return WindowGeometry(kernel, strides, dilations, tuple(begin), tuple(end), tuple(out))


def broadcast_shapes(*shapes: Sequence[int]) -> Shape:
    """Numpy/ONNX multidirectional broadcasting."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError as exc:
        raise ShapeError(f"shapes {list(map(tuple, shapes))} do not broadcast") from exc


def _axes(op: Op, tensors: Mapping[str, Tensor], input_index: int) -> list[int] | None:
    """Axes from the attribute (older opsets) or the constant input (newer opsets)."""
    if op.attr("axes") is not None:
        return [int(a) for a in op.attr("axes")]
    if len(op.inputs) > input_index and op.inputs[input_index]:
        t = tensors[op.inputs[input_index]]
        if t.value is None:
            raise ShapeError(f"op '{op.name}' ({op.op_type}): axes input must be a constant")
        return [int(a) for a in np.asarray(t.value).reshape(-1)]
    return None


def reshape_target(op: Op, in_shape: Shape, target: Sequence[int]) -> Shape:
    """Resolve a Reshape target with ONNX 0 (copy) and -1 (infer) semantics."""
    allowzero = int(op.attr("allowzero", 0))
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


def _norm_axis(axis: int, rank: int, op: Op) -> int:
    if not -rank <= axis < max(rank, 1) + (1 if op.op_type in ("Flatten", "Unsqueeze") else 0):
        raise ShapeError(f"op '{op.name}' ({op.op_type}): axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


UNARY_SAME_SHAPE = frozenset(
    {
        "Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Gelu",
        "Erf", "Elu", "Selu", "Celu", "Softplus", "Softsign", "Mish", "ThresholdedRelu", "Abs",
        "Sqrt", "Exp", "Log", "Reciprocal", "Neg", "Sin", "Cos", "Floor", "Ceil", "Round",
        "Sign", "Identity", "Softmax", "LogSoftmax", "InstanceNormalization",
        "GroupNormalization", "LpNormalization", "Cast",
    }
)  # fmt: skip
BROADCAST_TYPES = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu", "Sum"})
REDUCE_TYPES = frozenset(
    {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
     "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"}
)  # fmt: skip
POOL_TYPES = frozenset({"MaxPool", "AveragePool", "LpPool"})


def infer_op_shapes(op: Op, tensors: Mapping[str, Tensor]) -> list[Shape | None]:
    """Output shapes of ``op`` given the shapes (and constant values) of its inputs.

    Raises:
        ShapeError: the attributes or input shapes are inconsistent, naming the op.
    """
    ins = [tensors[t].shape if t else None for t in op.inputs]
    x = ins[0] if ins else None
    t = op.op_type
    n_out = len(op.outputs)

    def single(shape: Shape) -> list[Shape | None]:
        return [tuple(shape)] + [None] * (n_out - 1)

    def first(*shapes: Shape) -> list[Shape | None]:
        out: list[Shape | None] = [*shapes]
        return out[:n_out]

    if t in UNARY_SAME_SHAPE:
        assert x is not None
        return single(x)
    if t == "Dropout":
        assert x is not None
        return first(x, x)
    if t in BROADCAST_TYPES:
        try:
            return single(broadcast_shapes(*[s for s in ins if s is not None]))
        except ShapeError as exc:
            raise ShapeError(f"op '{op.name}' ({t}): {exc}") from None
    if t == "BatchNormalization":
        # opset 14+ training outputs: running mean/var; opset 9-13: mean, var, saved mean/var
        assert x is not None
        return first(x, *[(x[1],)] * (n_out - 1))
    if t == "LayerNormalization":
        assert x is not None
        axis = _norm_axis(int(op.attr("axis", -1)), len(x), op)
        stat = tuple(x[:axis]) + (1,) * (len(x) - axis)
        return first(x, stat, stat)
    if t == "Conv":
        x, w = ins[0], ins[1]
        assert x is not None and w is not None
        group = int(op.attr("group", 1))
        if x[1] != w[1] * group:
            raise ShapeError(
                f"op '{op.name}' (Conv): input has {x[1]} channels, weight expects "
                f"{w[1]} x group {group} = {w[1] * group}"
            )
        if w[0] % group:
            raise ShapeError(
                f"op '{op.name}' (Conv): {w[0]} output channels not divisible by group {group}"
            )
        kernel = op.attr("kernel_shape", w[2:])
        if tuple(kernel) != tuple(w[2:]):
            raise ShapeError(
                f"op '{op.name}' (Conv): kernel_shape {kernel} != weight shape {w[2:]}"
            )
        geo = window_geometry(op, x[2:], w[2:])
        return single((x[0], w[0], *geo.out_spatial))
    if t in POOL_TYPES:
        assert x is not None
        kernel = op.attr("kernel_shape")
        if kernel is None:
            raise ShapeError(f"op '{op.name}' ({t}): kernel_shape is required")
        geo = window_geometry(op, x[2:], kernel)
        pooled = (x[0], x[1], *geo.out_spatial)
        return first(pooled, pooled)
    if t in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"):
        assert x is not None
        return single((x[0], x[1]) + (1,) * (len(x) - 2))
    if t == "Gemm":
        a, b = ins[0], ins[1]
        assert a is not None and b is not None
        m, k = (a[1], a[0]) if int(op.attr("transA", 0)) else (a[0], a[1])
        k2, n = (b[1], b[0]) if int(op.attr("transB", 0)) else (b[0], b[1])
        if k != k2:
            raise ShapeError(f"op '{op.name}' (Gemm): inner dimensions differ ({k} vs {k2})")
        if len(ins) > 2 and ins[2] is not None and broadcast_shapes(ins[2], (m, n)) != (m, n):
            raise ShapeError(
                f"op '{op.name}' (Gemm): bias shape {ins[2]} does not broadcast to {(m, n)}"
            )
        return single((m, n))
    if t == "MatMul":
        a, b = ins[0], ins[1]
        assert a is not None and b is not None
        a2 = (1, *a) if len(a) == 1 else a
        b2 = (*b, 1) if len(b) == 1 else b
        if a2[-1] != b2[-2]:
            raise ShapeError(
                f"op '{op.name}' (MatMul): inner dimensions differ ({a2[-1]} vs {b2[-2]})"
            )
        batch = broadcast_shapes(a2[:-2], b2[:-2])
        out = (*batch, a2[-2], b2[-1])
        if len(a) == 1:
            out = out[:-2] + out[-1:]
        if len(b) == 1:
            out = out[:-1]
        return single(tuple(out))
    if t == "Reshape":
        assert x is not None
        target = tensors[op.inputs[1]].value
        if target is None:
            raise ShapeError(f"op '{op.name}' (Reshape): the shape input must be a constant")
        return single(reshape_target(op, x, np.asarray(target).reshape(-1).tolist()))
    if t == "Flatten":
        assert x is not None
        axis = _norm_axis(int(op.attr("axis", 1)), len(x), op)
        return single((math.prod(x[:axis]), math.prod(x[axis:])))
    if t == "Squeeze":
        assert x is not None
        axes = _axes(op, tensors, 1)
        if axes is None:
            return single(tuple(d for d in x if d != 1))
        axes = [_norm_axis(a, len(x), op) for a in axes]
        for ax in axes:
            if x[ax] != 1:
                raise ShapeError(f"op '{op.name}' (Squeeze): axis {ax} has size {x[ax]}, not 1")
        return single(tuple(d for i, d in enumerate(x) if i not in axes))
    if t == "Unsqueeze":
        assert x is not None
        axes = _axes(op, tensors, 1)
        if axes is None:
            raise ShapeError(f"op '{op.name}' (Unsqueeze): axes are required")
        rank = len(x) + len(axes)
        norm = sorted(ax + rank if ax < 0 else ax for ax in axes)
        dims = list(x)
        for ax in norm:
            dims.insert(ax, 1)
        return single(tuple(dims))
    if t == "Transpose":
        assert x is not None
        perm = op.attr("perm", tuple(reversed(range(len(x)))))
        if sorted(perm) != list(range(len(x))):
            raise ShapeError(
                f"op '{op.name}' (Transpose): perm {perm} is not a permutation of rank {len(x)}"
            )
        return single(tuple(x[p] for p in perm))
    if t in REDUCE_TYPES:
        assert x is not None
        axes = _axes(op, tensors, 1)
        keepdims = int(op.attr("keepdims", 1))
        if not axes:
            if int(op.attr("noop_with_empty_axes", 0)):
                return single(x)
            axes = list(range(len(x)))
        axes = [_norm_axis(a, len(x), op) for a in axes]
        if keepdims:
            return single(tuple(1 if i in axes else d for i, d in enumerate(x)))
        return single(tuple(d for i, d in enumerate(x) if i not in axes))
    if t == "Concat":
        shapes = [s for s in ins if s is not None]
        if op.attr("axis") is None:
            raise ShapeError(f"op '{op.name}' (Concat): attribute 'axis' is required")
        axis = _norm_axis(int(op.attr("axis")), len(shapes[0]), op)
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
        return single(tuple(dims))
    if t == "Shape":
        assert x is not None
        start, end = int(op.attr("start", 0)), op.attr("end")
        return single((len(range(len(x))[start : None if end is None else int(end)]),))
    if t == "Size":
        return single(())
    if t in _EXTRA_RULES:
        return _EXTRA_RULES[t](op, tensors, ins, n_out)
    return [None] * n_out


# ---- ops whose output shape depends on constant inputs (ONNX opset 11+ input forms) --------
_Ins = list[Shape | None]
_Tensors = Mapping[str, Tensor]
_Out = list[Shape | None]
_Rule = Callable[[Op, _Tensors, _Ins, int], _Out]


def _const_input(op: Op, tensors: Mapping[str, Tensor], index: int) -> np.ndarray | None:
    """The value of constant input ``index``; ``None`` when omitted; error when not constant."""
    if len(op.inputs) <= index or not op.inputs[index]:
        return None
    value = tensors[op.inputs[index]].value
    if value is None:
        raise ShapeError(
            f"op '{op.name}' ({op.op_type}): input {index} ('{op.inputs[index]}') must be a "
            "constant for static shape inference"
        )
    return np.asarray(value).reshape(-1)


def _int_list(value: np.ndarray | None, attr: object) -> list[int] | None:
    """Integers from a constant input (newer opsets) or else an attribute (older opsets)."""
    if value is not None:
        return [int(v) for v in value]
    if attr is not None:
        return [int(v) for v in attr]  # type: ignore[attr-defined]
    return None


def _slice_shape(op: Op, tensors: _Tensors, ins: _Ins, n_out: int) -> _Out:
    x = ins[0]
    assert x is not None
    starts = _int_list(_const_input(op, tensors, 1), op.attr("starts"))
    ends = _int_list(_const_input(op, tensors, 2), op.attr("ends"))
    if starts is None or ends is None or len(starts) != len(ends):
        raise ShapeError(f"op '{op.name}' (Slice): starts and ends must be given, of equal length")
    axes = _int_list(_const_input(op, tensors, 3), op.attr("axes")) or list(range(len(starts)))
    steps = _int_list(_const_input(op, tensors, 4), None) or [1] * len(starts)
    out = list(x)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if step == 0:
            raise ShapeError(f"op '{op.name}' (Slice): step 0 is not allowed")
        a = _norm_axis(axis, len(x), op)
        # Python slicing clamps exactly as ONNX specifies (incl. INT64_MAX / INT64_MIN ends)
        out[a] = len(range(x[a])[slice(start, end, step)])
    return [tuple(out)]


def _gather_shape(op: Op, tensors: _Tensors, ins: _Ins, n_out: int) -> _Out:
    x, idx = ins[0], ins[1]
    assert x is not None and idx is not None
    axis = _norm_axis(int(op.attr("axis", 0)), len(x), op)
    return [(*x[:axis], *idx, *x[axis + 1 :])]


def _split_shape(op: Op, tensors: _Tensors, ins: _Ins, n_out: int) -> _Out:
    x = ins[0]
    assert x is not None
    axis = _norm_axis(int(op.attr("axis", 0)), len(x), op)
    dim = x[axis]
    sizes = _int_list(_const_input(op, tensors, 1), op.attr("split"))
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


def _pad_shape(op: Op, tensors: _Tensors, ins: _Ins, n_out: int) -> _Out:
    x = ins[0]
    assert x is not None
    pads = _int_list(_const_input(op, tensors, 1), op.attr("pads"))
    if pads is None:
        raise ShapeError(f"op '{op.name}' (Pad): pads are required")
    axes = _int_list(_const_input(op, tensors, 3), None) or list(range(len(x)))
    if len(pads) != 2 * len(axes):
        raise ShapeError(f"op '{op.name}' (Pad): {len(pads)} pads for {len(axes)} axes")
    out = list(x)
    for i, axis in enumerate(axes):
        a = _norm_axis(axis, len(x), op)
        out[a] = x[a] + pads[i] + pads[i + len(axes)]
        if out[a] < 0:
            raise ShapeError(f"op '{op.name}' (Pad): negative output size on axis {a}")
    return [tuple(out)]


def _resize_shape(op: Op, tensors: _Tensors, ins: _Ins, n_out: int) -> _Out:
    x = ins[0]
    assert x is not None
    policy = op.attr("keep_aspect_ratio_policy", "stretch")
    if isinstance(policy, bytes):
        policy = policy.decode()
    if policy != "stretch":
        return [None]  # not_larger / not_smaller: left to onnx.shape_inference
    scales = _const_input(op, tensors, 2)
    sizes = _const_input(op, tensors, 3)
    axes = [_norm_axis(int(a), len(x), op) for a in op.attr("axes", range(len(x)))]
    out = list(x)
    if sizes is not None and sizes.size:
        for a, s in zip(axes, sizes, strict=True):
            out[a] = int(s)
    elif scales is not None and scales.size:
        for a, s in zip(axes, scales, strict=True):
            out[a] = math.floor(x[a] * float(s))
    else:
        raise ShapeError(f"op '{op.name}' (Resize): one of scales or sizes is required")
    return [tuple(out)]


def _expand_shape(op: Op, tensors: _Tensors, ins: _Ins, n_out: int) -> _Out:
    x = ins[0]
    assert x is not None
    shape = _const_input(op, tensors, 1)
    if shape is None:
        raise ShapeError(f"op '{op.name}' (Expand): the shape input is required")
    return [broadcast_shapes(x, [int(d) for d in shape])]


def _where_shape(op: Op, tensors: _Tensors, ins: _Ins, n_out: int) -> _Out:
    return [broadcast_shapes(*[s for s in ins if s is not None])]


_EXTRA_RULES: dict[str, _Rule] = {
    "Slice": _slice_shape,
    "Gather": _gather_shape,
    "Split": _split_shape,
    "Pad": _pad_shape,
    "Resize": _resize_shape,
    "Expand": _expand_shape,
    "Where": _where_shape,
}

SHAPE_OP_TYPES = frozenset(
    UNARY_SAME_SHAPE | BROADCAST_TYPES | REDUCE_TYPES | POOL_TYPES | set(_EXTRA_RULES)
    | {
        "Dropout", "BatchNormalization", "LayerNormalization", "Conv", "GlobalAveragePool",
        "GlobalMaxPool", "GlobalLpPool", "Gemm", "MatMul", "Reshape", "Flatten", "Squeeze",
        "Unsqueeze", "Transpose", "Concat", "Shape", "Size",
    }
)  # fmt: skip
"""Op types :func:`infer_op_shapes` knows (the importer warns about every other type)."""
