"""Normalizations, softmax and reductions: ops that need statistics over a domain (STATS).

BatchNormalization is the op whose class depends on how it runs: with its stored running
statistics it is a per-channel affine map (AFFINE, foldable into a convolution); in training
mode it computes batch statistics first (STATS, DESIGN §5 rule 3). Training mode is the
``training_mode`` attribute (opset >= 14) or, in the opset 9-13 form, having more than one
output (onnx.ai BatchNormalization-9: the running and saved statistics are outputs only in
training). The fused kernels of BatchNormalization and LayerNormalization compute their
statistics and coefficients in float64 and round once; the reference computes in float32.

Capacity (DESIGN §5 rule 7): a STATS op whose input is produced inside its group holds
what its statistics range over until the second pass: the whole input for a batch-statistics
BatchNormalization (N and the spatial axes of every channel), one sample for Instance and
Group normalization, one slice ``shape[axis:]`` for Layer- and RMSNormalization, Softmax,
LogSoftmax and LpNormalization, and an accumulator of the output's size for a Reduce*.

RMSNormalization (ONNX opset 23; Llama's RMSNorm) is one STATS op like LayerNormalization.
Below opset 23 it is written as its ONNX function body (``expand``), and
:func:`match_rms_norm` recognises that body and the exporters' other spellings of it
(``Pow(x, 2)`` or ``Mul(x, x)`` -> ``ReduceMean`` -> ``Add(eps)`` -> ``Sqrt`` ->
``Reciprocal`` + ``Mul(x, .)`` or ``Div(x, .)`` -> optional ``Mul(scale)``), so the importer
can give every form the one op back (``frontend/onnx_rmsnorm.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fusiontune.errors import FusiontuneError
from fusiontune.ir.opclass import OpClass
from fusiontune.ops.base import (
    DTYPE,
    Affine,
    AffineKind,
    Array,
    AttentionRole,
    Inputs,
    IsConstant,
    OpDef,
    OperandMove,
    Shapes,
    Tensors,
    arg,
    attr_f,
    attr_i,
    channel,
    kernel_axes,
    norm_axis,
    one_activation,
    same_shape,
    shape_axes,
)

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph, Op

BATCH_NORM = "BatchNormalization"
NORM_EPSILON = 1e-5  # ONNX default epsilon of Batch-, Instance-, Layer- and GroupNormalization
BN_MOMENTUM = 0.9  # ONNX BatchNormalization default momentum
BN_TRAINING_ATTR_SINCE = 14  # opset where training_mode became an attribute (3 outputs)
BN_TRAINING_OUTPUTS = 3  # Y, running_mean, running_var (BatchNormalization-14/15)
BN_LEGACY_TRAINING_OUTPUTS = 5  # + saved_mean, saved_var (BatchNormalization-9)


def is_training(op: Op) -> bool:
    """A BatchNormalization computes batch statistics (module docstring)."""
    return attr_i(op, "training_mode") == 1 or sum(1 for t in op.outputs if t) > 1


def _bn_rule(op: Op, is_constant: IsConstant) -> OpClass:
    """STATS in training mode; AFFINE on one activation with constant statistics."""
    if is_training(op):
        return OpClass.STATS
    acts = [name for name in op.inputs if name and not is_constant(name)]
    if len(acts) == 1 and not is_constant(op.inputs[0]):
        return OpClass.AFFINE
    return OpClass.OPAQUE


# ---- BatchNormalization ---------------------------------------------------------------------
def _batchnorm(op: Op, inputs: Inputs) -> list[Array]:
    """Reference: float32, biased batch variance over N and the spatial axes (ONNX spec).

    Training outputs: running mean and variance ``stored * momentum + batch * (1 -
    momentum)``; in the opset 9-13 form also ``saved_mean`` (the batch mean) and
    ``saved_var``, which onnxruntime fills with the inverse standard deviation
    ``1 / sqrt(batch_var + epsilon)`` (the ONNX spec only says "saved variance").
    """
    x, scale, bias, mean, var = inputs[:5]
    assert x is not None and scale is not None and bias is not None
    assert mean is not None and var is not None
    eps = attr_f(op, "epsilon")
    outs: list[Array] = []
    if is_training(op):
        axes = (0, *range(2, x.ndim))
        batch_mean = np.mean(x, axis=axes)
        batch_var = np.mean(np.square(x - channel(batch_mean, x.ndim)), axis=axes)
        momentum = attr_f(op, "momentum")
        saved_inv_std = 1.0 / np.sqrt(batch_var + np.asarray(eps, batch_var.dtype))
        outs = [
            (mean * momentum + batch_mean * (1 - momentum)).astype(x.dtype, copy=False),
            (var * momentum + batch_var * (1 - momentum)).astype(x.dtype, copy=False),
            batch_mean.astype(x.dtype, copy=False),
            saved_inv_std.astype(x.dtype, copy=False),
        ]
        mean, var = batch_mean, batch_var
    inv = scale / np.sqrt(var + np.asarray(eps, var.dtype))
    y = (x - channel(mean, x.ndim)) * channel(inv, x.ndim) + channel(bias, x.ndim)
    return [y.astype(x.dtype, copy=False), *outs][: len(op.outputs)]


def bn_inference_coeffs(op: Op, inputs: Inputs) -> tuple[Array, Array]:
    """Per-channel ``(scale, shift)`` of a BatchNormalization with its running statistics."""
    gamma, beta, mean, var = (np.asarray(t, dtype=np.float64) for t in inputs[1:5])
    scale = gamma / np.sqrt(var + attr_f(op, "epsilon"))
    return scale, beta - mean * scale


def batch_stats(x: Array) -> tuple[Array, Array]:
    """Pass 1 of a batch-statistics BN: per-channel mean and (population) variance, float64."""
    axes = (0, *range(2, x.ndim))
    return x.mean(axis=axes, dtype=np.float64), x.var(axis=axes, dtype=np.float64)


def _channel32(v: Array, ndim: int) -> Array:
    return channel(np.asarray(v, dtype=DTYPE), ndim)


def _batchnorm_fused(op: Op, inputs: Inputs) -> list[Array]:
    """Fused: float64 coefficients applied as one multiply-add (two passes in training)."""
    x = inputs[0]
    assert x is not None
    if not is_training(op):
        scale, shift = bn_inference_coeffs(op, inputs)
        return [x * _channel32(scale, x.ndim) + _channel32(shift, x.ndim)]
    mean, var = batch_stats(x)
    gamma, beta = (np.asarray(t, dtype=np.float64) for t in inputs[1:3])
    eps = attr_f(op, "epsilon")
    scale = gamma / np.sqrt(var + eps)
    y = x * _channel32(scale, x.ndim) + _channel32(beta - mean * scale, x.ndim)
    momentum = attr_f(op, "momentum")
    run_mean = np.asarray(inputs[3]) * momentum + mean * (1 - momentum)
    run_var = np.asarray(inputs[4]) * momentum + var * (1 - momentum)
    outs = [y, run_mean.astype(DTYPE), run_var.astype(DTYPE), mean.astype(DTYPE)]
    inv_std = 1.0 / np.sqrt(var + eps)
    return [*outs, inv_std.astype(DTYPE)][: len(op.outputs)]


def _bn_coeffs(graph: Graph, op: Op, axis: int, n: int) -> tuple[Array, Array] | None:
    if axis != 1:
        return None
    return bn_inference_coeffs(op, [graph.tensors[t].value for t in op.inputs])


def _bn_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    """Y like X; every statistics output (training) is per channel."""
    x = ins[0]
    assert x is not None
    out: Shapes = [tuple(x), *[(x[1],)] * (n_out - 1)]
    return out[:n_out]


def _bn_export(
    op: Op, graph: Graph, opset: int, inputs: list[str], attrs: dict[str, Any], outputs: list[str]
) -> tuple[list[str], dict[str, Any], list[str]]:
    """Training mode as the opset expects it: the attribute and 3 outputs from opset 14,
    5 outputs and no attribute before."""
    training = is_training(op)
    if opset < BN_TRAINING_ATTR_SINCE:
        attrs.pop("training_mode", None)
        n_outputs = BN_LEGACY_TRAINING_OUTPUTS if training else 1
    elif training:
        attrs["training_mode"] = 1
        used = [t for t in outputs[BN_TRAINING_OUTPUTS:] if t and _is_read(graph, t)]
        if used:
            raise FusiontuneError(
                f"to_onnx: op '{op.name}' ({BATCH_NORM}) output '{used[0]}' (saved batch "
                f"statistics) exists only up to opset {BN_TRAINING_ATTR_SINCE - 1}; export "
                f"with opset={BN_TRAINING_ATTR_SINCE - 1}"
            )
        n_outputs = BN_TRAINING_OUTPUTS
    else:
        return inputs, attrs, outputs
    if not training:
        return inputs, attrs, outputs[:n_outputs]
    outputs = (outputs + [""] * n_outputs)[:n_outputs]
    return inputs, attrs, [name or f"{op.name}.out{i}" for i, name in enumerate(outputs)]


def _is_read(graph: Graph, tensor: str) -> bool:
    return tensor in graph.outputs or bool(graph.consumer_map.get(tensor))


# ---- Layer/Instance/Group/Lp normalization and softmax ---------------------------------------
def _normalize(x: Array, axes: tuple[int, ...], eps: float) -> tuple[Array, Array, Array]:
    """(normalized x, mean, 1/std) over ``axes`` (biased variance), keepdims."""
    mean = np.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    inv_std = 1.0 / np.sqrt(np.mean(np.square(centered), axis=axes, keepdims=True) + eps)
    return centered * inv_std, mean, inv_std


def _layernorm(op: Op, inputs: Inputs) -> list[Array]:
    x, scale, bias = inputs[0], inputs[1], arg(inputs, 2)
    assert x is not None and scale is not None
    axis = attr_i(op, "axis") % x.ndim
    y, mean, inv_std = _normalize(x, tuple(range(axis, x.ndim)), attr_f(op, "epsilon"))
    y = y * scale
    if bias is not None:
        y = y + bias
    return [y.astype(x.dtype, copy=False), mean, inv_std][: len(op.outputs)]


def _layernorm_fused(op: Op, inputs: Inputs) -> list[Array]:
    """Fused: float64 mean, variance and 1/std, rounded once."""
    x = inputs[0]
    assert x is not None
    axes = tuple(range(attr_i(op, "axis") % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True, dtype=np.float64)
    var = x.var(axis=axes, keepdims=True, dtype=np.float64)
    inv = 1.0 / np.sqrt(var + attr_f(op, "epsilon"))
    y = (x - mean) * inv * inputs[1]
    bias = arg(inputs, 2)
    if bias is not None:
        y = y + bias
    outs = [y.astype(DTYPE), mean.astype(DTYPE), inv.astype(DTYPE)]
    return outs[: len(op.outputs)]


def _layernorm_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x = ins[0]
    assert x is not None
    axis = norm_axis(attr_i(op, "axis"), len(x), op)
    stat = tuple(x[:axis]) + (1,) * (len(x) - axis)
    out: Shapes = [tuple(x), stat, stat]
    return out[:n_out]


# ---- RMSNormalization (opset 23) -------------------------------------------------------------
RMS_NORM = "RMSNormalization"
"""Op type the zoo's decoders emit (``frontend/zoo_llm.py``)."""
RMS_NORM_OPSET = 23
"""The first ONNX opset with RMSNormalization."""


def _rms_axes(op: Op, rank: int) -> tuple[int, ...]:
    return tuple(range(attr_i(op, "axis") % rank, rank))


def _rmsnorm(op: Op, inputs: Inputs) -> list[Array]:
    """``x / sqrt(mean(x², axes) + epsilon) * scale`` over ``axis`` and the axes after it."""
    x, scale = inputs[0], inputs[1]
    assert x is not None and scale is not None
    mean_sq = np.mean(x * x, axis=_rms_axes(op, x.ndim), keepdims=True)
    rms = np.sqrt(mean_sq + np.asarray(attr_f(op, "epsilon"), x.dtype))
    return [(x / rms * scale).astype(x.dtype, copy=False)]


def _rmsnorm_fused(op: Op, inputs: Inputs) -> list[Array]:
    """Fused: float64 mean of squares and 1/rms, rounded once."""
    x, scale = inputs[0], inputs[1]
    assert x is not None and scale is not None
    mean_sq = np.mean(np.square(x, dtype=np.float64), axis=_rms_axes(op, x.ndim), keepdims=True)
    inv = (1.0 / np.sqrt(mean_sq + attr_f(op, "epsilon"))).astype(DTYPE)
    return [(x * inv * scale).astype(DTYPE)]


def _rmsnorm_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x = ins[0]
    assert x is not None
    norm_axis(attr_i(op, "axis"), len(x), op)
    return [tuple(x)]


def _rmsnorm_expand(op: Op, graph: Graph) -> tuple[list[Op], dict[str, Array]]:
    """The ONNX function body of RMSNormalization-23: ``Mul(x, x)`` -> ``ReduceMean`` ->
    ``Add(epsilon)`` -> ``Sqrt`` -> ``Div(x, rms)`` -> ``Mul(scale)``."""
    from fusiontune.ir.graph import Op

    x, scale = op.inputs[0], op.inputs[1]
    rank = len(graph.tensors[x].shape)
    p = op.name
    eps = f"{p}.epsilon"

    def step(kind: str, ins: tuple[str, ...], out: str, **attrs: Any) -> Op:
        return Op(f"{p}.{kind.lower()}", kind, ins, (out,), attrs)

    ops = [
        step("Mul", (x, x), f"{p}.square"),
        step("ReduceMean", (f"{p}.square",), f"{p}.mean", axes=_rms_axes(op, rank), keepdims=1),
        step("Add", (f"{p}.mean", eps), f"{p}.mean_eps"),
        step("Sqrt", (f"{p}.mean_eps",), f"{p}.rms"),
        step("Div", (x, f"{p}.rms"), f"{p}.normalized"),
        Op(p, "Mul", (f"{p}.normalized", scale), op.outputs),  # the op's name: a re-import
    ]  # gives the one op back under it
    return ops, {eps: np.asarray(attr_f(op, "epsilon"), DTYPE)}


@dataclass(frozen=True)
class RmsNormMatch:
    """A decomposed RMSNorm found by :func:`match_rms_norm`.

    Attributes:
        ops: the decomposition's op names, in the graph's order (the last one writes
            ``output``).
        x: the normalized activation.
        axis: the first normalized axis, negative (``-1``: the last axis only).
        epsilon: the constant added to the mean of squares.
        scale: the weight over the normalized axes (``x.shape[axis:]``; ones without a
            weight ``Mul``).
        scale_tensor: the graph's constant holding exactly ``scale``, if there is one.
        output: the tensor the decomposition writes.
    """

    ops: tuple[str, ...]
    x: str
    axis: int
    epsilon: float
    scale: Array
    scale_tensor: str | None
    output: str


def _scalar_const(graph: Graph, name: str) -> float | None:
    t = graph.tensors.get(name)
    if t is None or t.value is None or np.asarray(t.value).size != 1:
        return None
    return float(np.asarray(t.value).reshape(-1)[0])


def _sole_consumer(graph: Graph, tensor: str, op_types: tuple[str, ...]) -> Op | None:
    """The one op reading ``tensor`` when its type is one of ``op_types`` and the tensor is
    not a graph output (it then lives inside the decomposition only)."""
    readers = graph.consumers(tensor)
    if tensor in graph.outputs or len(readers) != 1 or readers[0].domain:
        return None
    return readers[0] if readers[0].op_type in op_types else None


def _other(op: Op, tensor: str) -> str | None:
    """The other input of a two-input op one of whose inputs is ``tensor``."""
    if len(op.inputs) != 2 or tensor not in op.inputs:
        return None
    a, b = op.inputs
    return b if a == tensor else a


def _square_of(graph: Graph, op: Op | None) -> str | None:
    """x of ``Pow(x, 2)`` or ``Mul(x, x)``."""
    if op is None or op.domain:
        return None
    if op.op_type == "Pow" and len(op.inputs) == 2 and _scalar_const(graph, op.inputs[1]) == 2.0:
        return op.inputs[0]
    if op.op_type == "Mul" and len(op.inputs) == 2 and op.inputs[0] == op.inputs[1]:
        return op.inputs[0]
    return None


def _trailing_axes(graph: Graph, mean: Op, rank: int) -> int | None:
    """The first axis of a ReduceMean over the trailing axes with keepdims, negative."""
    if attr_i(mean, "keepdims") != 1:
        return None
    axes = mean.attr("axes")
    if axes is None and len(mean.inputs) > 1 and mean.inputs[1]:
        value = graph.tensors[mean.inputs[1]].value
        axes = None if value is None else np.asarray(value).reshape(-1)
    if axes is None or not len(axes):
        return None
    norm = sorted(int(a) % rank for a in axes)
    if norm != list(range(norm[0], rank)):
        return None
    return norm[0] - rank


def match_rms_norm(graph: Graph, mean: Op) -> RmsNormMatch | None:
    """The decomposed RMSNorm whose ``ReduceMean`` is ``mean``, or ``None`` (module docstring).

    Every intermediate tensor must be read by the next op of the chain only (and be no graph
    output); the epsilon is a one-element constant; the weight, a constant that varies over
    the normalized axes only (anything else is left as the chain's output, unscaled).
    """
    if mean.op_type != "ReduceMean" or mean.domain or not mean.inputs:
        return None
    sq = mean.inputs[0]
    x = _square_of(graph, graph.producer(sq))
    if x is None or graph.is_constant(x) or len(graph.consumers(sq)) != 1 or sq in graph.outputs:
        return None
    shape = graph.tensors[x].shape
    if graph.tensors[x].dtype != "float32" or not shape:
        return None
    axis = _trailing_axes(graph, mean, len(shape))
    add = _sole_consumer(graph, mean.outputs[0], ("Add",))
    if axis is None or add is None:
        return None
    eps_name = _other(add, mean.outputs[0])
    eps = None if eps_name is None else _scalar_const(graph, eps_name)
    sqrt = _sole_consumer(graph, add.outputs[0], ("Sqrt",))
    if eps is None or sqrt is None:
        return None
    ops = [graph.producer_map[sq], mean.name, add.name, sqrt.name]
    step = _sole_consumer(graph, sqrt.outputs[0], ("Reciprocal", "Div"))
    if step is None:
        return None
    if step.op_type == "Reciprocal":  # x * (1 / rms)
        ops.append(step.name)
        inv = step.outputs[0]
        step = _sole_consumer(graph, inv, ("Mul",))
        if step is None or sorted(step.inputs) != sorted((x, inv)):
            return None
    elif step.inputs != (x, sqrt.outputs[0]):  # x / rms
        return None
    ops.append(step.name)
    normalized = step.outputs[0]
    norm_shape = shape[len(shape) + axis :]
    scale, scale_tensor = np.ones(norm_shape, DTYPE), None
    weigh = _sole_consumer(graph, normalized, ("Mul",))
    w_name = None if weigh is None else _other(weigh, normalized)
    w = None if w_name is None else graph.tensors[w_name]
    if weigh is not None and w is not None and w.value is not None:
        value = np.asarray(w.value)
        lead = value.shape[: max(0, value.ndim - len(norm_shape))]
        try:
            fits = np.broadcast_shapes(value.shape, shape) == shape
        except ValueError:
            fits = False
        if fits and value.dtype == DTYPE and all(d == 1 for d in lead):
            trailing = value.reshape(value.shape[len(lead) :])
            scale = np.ascontiguousarray(np.broadcast_to(trailing, norm_shape))
            scale_tensor = w_name if value.shape == norm_shape else None
            ops.append(weigh.name)
            normalized = weigh.outputs[0]
    return RmsNormMatch(tuple(ops), x, axis, eps, scale, scale_tensor, normalized)


def _instancenorm(op: Op, inputs: Inputs) -> list[Array]:
    x, scale, bias = inputs[:3]
    assert x is not None and scale is not None and bias is not None
    y, _, _ = _normalize(x, tuple(range(2, x.ndim)), attr_f(op, "epsilon"))
    return [(y * channel(scale, x.ndim) + channel(bias, x.ndim)).astype(x.dtype, copy=False)]


def _groupnorm(op: Op, inputs: Inputs) -> list[Array]:
    x, scale, bias = inputs[:3]
    assert x is not None and scale is not None and bias is not None
    groups = attr_i(op, "num_groups")
    n, c = x.shape[:2]
    y, _, _ = _normalize(x.reshape(n, groups, -1), (2,), attr_f(op, "epsilon"))
    if scale.size == groups and groups != c:  # opset 18: scale and bias per group
        y = y * scale.reshape(1, groups, 1) + bias.reshape(1, groups, 1)
        return [y.reshape(x.shape).astype(x.dtype, copy=False)]
    y = y.reshape(x.shape) * channel(scale, x.ndim) + channel(bias, x.ndim)  # opset 21
    return [y.astype(x.dtype, copy=False)]


def _lpnorm(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axis, p = attr_i(op, "axis"), attr_i(op, "p")
    norm = np.sum(np.abs(x) ** p, axis=axis, keepdims=True) ** (1.0 / p)
    return [(x / norm).astype(x.dtype, copy=False)]


def _softmax(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axis = attr_i(op, "axis")
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return [(e / np.sum(e, axis=axis, keepdims=True)).astype(x.dtype, copy=False)]


def _log_softmax(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axis = attr_i(op, "axis")
    shifted = x - np.max(x, axis=axis, keepdims=True)
    y = shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    return [y.astype(x.dtype, copy=False)]


# ---- reductions -----------------------------------------------------------------------------
ReduceFn = Callable[[Array, tuple[int, ...]], Array]


def _logsumexp(x: Array, axes: tuple[int, ...]) -> Array:
    top = np.max(x, axis=axes, keepdims=True)
    return top + np.log(np.sum(np.exp(x - top), axis=axes, keepdims=True))


def _reduce(fn: ReduceFn) -> Callable[[Op, Inputs], list[Array]]:
    def kernel(op: Op, inputs: Inputs) -> list[Array]:
        x = inputs[0]
        assert x is not None
        axes = kernel_axes(op, inputs, 1)
        if not axes:
            if attr_i(op, "noop_with_empty_axes"):
                return [x]
            axes = list(range(x.ndim))
        norm = tuple(sorted(a % x.ndim for a in axes))
        y = fn(x, norm)
        if not attr_i(op, "keepdims"):
            y = np.squeeze(y, axis=norm)
        return [np.asarray(y, dtype=x.dtype)]

    return kernel


def _reduce_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    x = ins[0]
    assert x is not None
    axes = shape_axes(op, tensors, 1)
    if not axes:
        if attr_i(op, "noop_with_empty_axes"):
            return [tuple(x)]
        axes = list(range(len(x)))
    axes = [norm_axis(a, len(x), op) for a in axes]
    if attr_i(op, "keepdims"):
        return [tuple(1 if i in axes else d for i, d in enumerate(x))]
    return [tuple(d for i, d in enumerate(x) if i not in axes)]


def _argreduce(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axis = attr_i(op, "axis") % x.ndim
    fn = np.argmax if op.op_type == "ArgMax" else np.argmin
    if attr_i(op, "select_last_index"):
        idx = x.shape[axis] - 1 - fn(np.flip(x, axis=axis), axis=axis, keepdims=True)
    else:
        idx = fn(x, axis=axis, keepdims=True)
    if not attr_i(op, "keepdims"):
        idx = np.squeeze(idx, axis=axis)
    return [idx.astype(np.int64)]


# ---- capacity: what a STATS op holds between its two passes ---------------------------------
def _whole_input(graph: Graph, op: Op) -> int:
    return math.prod(graph.tensors[op.inputs[0]].shape)


def _one_sample(graph: Graph, op: Op) -> int:
    return math.prod(graph.tensors[op.inputs[0]].shape[1:])


def _one_slice(graph: Graph, op: Op) -> int:
    shape = graph.tensors[op.inputs[0]].shape
    axis = attr_i(op, "axis")
    return math.prod(shape[axis + len(shape) if axis < 0 else axis :])


_STATS = one_activation(OpClass.STATS)
_AXIS_LAST = {"axis": -1}  # ONNX default axis of LayerNormalization, (Log)Softmax (opset 13+)
_NORM_EPS = {"epsilon": NORM_EPSILON}
_REDUCE_DEFAULTS = {"keepdims": 1, "noop_with_empty_axes": 0}
REDUCE_AXES_INPUT_SINCE = 18  # Reduce* (but ReduceSum, 13) take axes as an input since opset 18
REDUCE_SUM_AXES_INPUT_SINCE = 13

REDUCERS: dict[str, ReduceFn] = {
    "ReduceSum": lambda x, a: np.sum(x, axis=a, keepdims=True),
    "ReduceMean": lambda x, a: np.mean(x, axis=a, keepdims=True),
    "ReduceMax": lambda x, a: np.max(x, axis=a, keepdims=True),
    "ReduceMin": lambda x, a: np.min(x, axis=a, keepdims=True),
    "ReduceProd": lambda x, a: np.prod(x, axis=a, keepdims=True),
    "ReduceL1": lambda x, a: np.sum(np.abs(x), axis=a, keepdims=True),
    "ReduceL2": lambda x, a: np.sqrt(np.sum(np.square(x), axis=a, keepdims=True)),
    "ReduceSumSquare": lambda x, a: np.sum(np.square(x), axis=a, keepdims=True),
    "ReduceLogSumExp": _logsumexp,
}


def _reduce_def(op_type: str, fn: ReduceFn) -> OpDef:
    since = REDUCE_SUM_AXES_INPUT_SINCE if op_type == "ReduceSum" else REDUCE_AXES_INPUT_SINCE
    return OpDef(
        op_type,
        _STATS,
        _REDUCE_DEFAULTS,
        shape=_reduce_shape,
        reference=_reduce(fn),
        operand=OperandMove("axes", 1, since),
    )


_ARG_DEFAULTS = {"axis": 0, "keepdims": 1, "select_last_index": 0}


def _axis(op: Op, rank: int) -> int:
    a = attr_i(op, "axis")
    return a + rank if a < 0 else a


def _from_axis(op: Op, rank: int) -> frozenset[int]:
    """LayerNormalization's statistics axes: ``axis`` and every axis after it."""
    return frozenset(range(_axis(op, rank), rank))


def _one_axis(op: Op, rank: int) -> frozenset[int]:
    """The one ``axis`` of a softmax or an Lp normalization (as the reference kernels)."""
    return frozenset({_axis(op, rank)})


LAYER_NORM = "LayerNormalization"
"""Op type the graph builder (``ir/builder.py``) emits (with :data:`BATCH_NORM`)."""

OPS: tuple[OpDef, ...] = (
    OpDef(
        BATCH_NORM,
        _bn_rule,
        {**_NORM_EPS, "momentum": BN_MOMENTUM, "training_mode": 0},
        shape=_bn_shape,
        lint_opaque=True,
        reference=_batchnorm,
        fused=_batchnorm_fused,
        held=_whole_input,
        affine=Affine(AffineKind.CHANNEL, _bn_coeffs),
        training=is_training,
        export=_bn_export,
        two_pass_stats=True,
    ),
    OpDef(
        LAYER_NORM,
        _STATS,
        {**_NORM_EPS, **_AXIS_LAST, "stash_type": 1},
        shape=_layernorm_shape,
        reference=_layernorm,
        fused=_layernorm_fused,
        held=_one_slice,
        stats_axes=_from_axis,
    ),
    OpDef(
        RMS_NORM,
        _STATS,
        {**_NORM_EPS, **_AXIS_LAST, "stash_type": 1},
        shape=_rmsnorm_shape,
        reference=_rmsnorm,
        fused=_rmsnorm_fused,
        held=_one_slice,
        stats_axes=_from_axis,
        onnx_since=RMS_NORM_OPSET,
        expand=_rmsnorm_expand,
    ),
    OpDef(
        "InstanceNormalization",
        _STATS,
        _NORM_EPS,
        shape=same_shape,
        reference=_instancenorm,
        held=_one_sample,
    ),
    OpDef(
        "GroupNormalization",
        _STATS,
        {**_NORM_EPS, "stash_type": 1},
        shape=same_shape,
        reference=_groupnorm,
        held=_one_sample,
    ),
    OpDef(
        "LpNormalization",
        _STATS,
        {"axis": -1, "p": 2},
        shape=same_shape,
        reference=_lpnorm,
        held=_one_slice,
        stats_axes=_one_axis,
    ),
    OpDef(
        "Softmax",
        _STATS,
        _AXIS_LAST,
        shape=same_shape,
        reference=_softmax,
        held=_one_slice,
        stats_axes=_one_axis,
        attention_role=AttentionRole.SOFTMAX,
    ),
    OpDef(
        "LogSoftmax",
        _STATS,
        _AXIS_LAST,
        shape=same_shape,
        reference=_log_softmax,
        held=_one_slice,
        stats_axes=_one_axis,
    ),
    *(_reduce_def(t, fn) for t, fn in REDUCERS.items()),
    OpDef("ArgMax", defaults=_ARG_DEFAULTS, reference=_argreduce),
    OpDef("ArgMin", defaults=_ARG_DEFAULTS, reference=_argreduce),
)
