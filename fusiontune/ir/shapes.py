"""Shape inference with ONNX semantics for every op of DESIGN §3.

:func:`infer_op_shapes` returns one shape per output (``None`` where an op is not known
here; the ONNX importer then falls back to ``onnx.shape_inference``). :func:`window_geometry`
resolves Conv/Pool pads, strides, dilations, ``auto_pad`` and ``ceil_mode`` once, for shape
inference, the reference executor and the simulator alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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
                f"op '{op.name}' ({op.op_type}): window {e} is larger than padded input {i + b + p_end}"
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
            raise ShapeError(f"op '{op.name}' (Reshape): cannot reshape {in_shape} to {list(target)}")
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

    if t in UNARY_SAME_SHAPE:
        assert x is not None
        return single(x)
    if t == "Dropout":
        assert x is not None
        return [x, x][:n_out]
    if t in BROADCAST_TYPES:
        return single(broadcast_shapes(*[s for s in ins if s is not None]))
    if t == "BatchNormalization":
        assert x is not None
        c = (x[1],)
        return [x, c, c][:n_out]
    if t == "LayerNormalization":
        assert x is not None
        axis = _norm_axis(int(op.attr("axis", -1)), len(x), op)
        stat = tuple(x[:axis]) + (1,) * (len(x) - axis)
        return [x, stat, stat][:n_out]
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
            raise ShapeError(f"op '{op.name}' (Conv): {w[0]} output channels not divisible by group {group}")
        kernel = op.attr("kernel_shape", w[2:])
        if tuple(kernel) != tuple(w[2:]):
            raise ShapeError(f"op '{op.name}' (Conv): kernel_shape {kernel} != weight shape {w[2:]}")
        geo = window_geometry(op, x[2:], w[2:])
        return single((x[0], w[0], *geo.out_spatial))
    if t in POOL_TYPES:
        assert x is not None
        kernel = op.attr("kernel_shape")
        if kernel is None:
            raise ShapeError(f"op '{op.name}' ({t}): kernel_shape is required")
        geo = window_geometry(op, x[2:], kernel)
        out = (x[0], x[1], *geo.out_spatial)
        return [out, out][:n_out]
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
        if len(ins) > 2 and ins[2] is not None:
            broadcast_shapes(ins[2], (m, n))
        return single((m, n))
    if t == "MatMul":
        a, b = ins[0], ins[1]
        assert a is not None and b is not None
        a2 = (1, *a) if len(a) == 1 else a
        b2 = (*b, 1) if len(b) == 1 else b
        if a2[-1] != b2[-2]:
            raise ShapeError(f"op '{op.name}' (MatMul): inner dimensions differ ({a2[-1]} vs {b2[-2]})")
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
        for a in axes:
            if x[a] != 1:
                raise ShapeError(f"op '{op.name}' (Squeeze): axis {a} has size {x[a]}, not 1")
        return single(tuple(d for i, d in enumerate(x) if i not in axes))
    if t == "Unsqueeze":
        assert x is not None
        axes = _axes(op, tensors, 1)
        if axes is None:
            raise ShapeError(f"op '{op.name}' (Unsqueeze): axes are required")
        rank = len(x) + len(axes)
        norm = sorted(a + rank if a < 0 else a for a in axes)
        out = list(x)
        for a in norm:
            out.insert(a, 1)
        return single(tuple(out))
    if t == "Transpose":
        assert x is not None
        perm = op.attr("perm", tuple(reversed(range(len(x)))))
        if sorted(perm) != list(range(len(x))):
            raise ShapeError(f"op '{op.name}' (Transpose): perm {perm} is not a permutation of rank {len(x)}")
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
        axis = _norm_axis(int(op.attr("axis")), len(shapes[0]), op)
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        return single(tuple(out))
    if t == "Shape":
        assert x is not None
        return single((len(x),))
    return [None] * n_out
