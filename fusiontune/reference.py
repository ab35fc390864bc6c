"""Reference executor: op-by-op numpy, the numerical ground truth for the fused kernels.

The executor is an interpreter (STYLE habit 4): one numpy kernel per ONNX op type,
registered in the plain dict :data:`KERNELS`. :func:`reference_run` walks the graph in
topological order and calls :func:`run_op` for each op.

Kernels compute in the dtype of their inputs (float32 for every zoo model), like onnxruntime.
Tolerance achieved against onnxruntime, as ``max|ref - ort| / max|ort|``: at most 1.1e-6 on
the single-op tests and 1.8e-6 on the zoo models; 2.8e-6 for resnet18_train against
``onnx.reference`` (tests/test_reference.py and tests/test_zoo_onnxruntime.py assert 1e-5).
Convolutions and pools are vectorized with :func:`numpy.lib.stride_tricks.sliding_window_view`
(no Python loop over pixels); ONNX attribute semantics (pads, strides, dilations, groups,
``auto_pad``, ``ceil_mode``, ``count_include_pad``, ...) follow the ONNX operator
specification, with operands accepted in both their attribute form (old opsets) and their
input form (new opsets).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from fusiontune.errors import FusiontuneError, ShapeError, closest
from fusiontune.ir.graph import Graph, Op
from fusiontune.ir.shapes import WindowGeometry, reshape_target, window_geometry

Array = np.ndarray
Inputs = list[Array | None]
Kernel = Callable[[Op, Inputs], list[Array]]

# Default attribute values from the ONNX operator specification (onnx.ai/onnx/operators).
BN_EPSILON = 1e-5  # BatchNormalization, InstanceNormalization, LayerNormalization, GroupNorm
BN_MOMENTUM = 0.9  # BatchNormalization (training_mode=1 running statistics)
LEAKY_RELU_ALPHA = 0.01
HARD_SIGMOID_ALPHA = 0.2
HARD_SIGMOID_BETA = 0.5
HARD_SWISH_ALPHA = 1.0 / 6.0  # HardSwish = x * HardSigmoid(x; alpha=1/6, beta=0.5)
SELU_ALPHA = 1.67326319217681884765625
SELU_GAMMA = 1.05070102214813232421875
GELU_TANH_COEFF = 0.044715  # Gelu approximate="tanh"
CUBIC_COEFF_A = -0.75  # Resize cubic_coeff_a default
RANDOM_INT_HIGH = 8  # random_inputs: integer inputs are drawn from [0, RANDOM_INT_HIGH)


def _f(op: Op, key: str, default: float) -> float:
    return float(op.attr(key, default))


def _i(op: Op, key: str, default: int) -> int:
    return int(op.attr(key, default))


def _s(op: Op, key: str, default: str) -> str:
    value = op.attr(key, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def _ints(value: Array | Sequence[int] | None) -> list[int] | None:
    return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


def _axes_of(op: Op, inputs: Inputs, index: int, key: str = "axes") -> list[int] | None:
    """Axes from the attribute (older opsets) or from input ``index`` (newer opsets)."""
    if op.attr(key) is not None:
        return _ints(op.attr(key))
    return _ints(inputs[index]) if len(inputs) > index else None


def _arg(inputs: Inputs, index: int) -> Array | None:
    return inputs[index] if len(inputs) > index else None


# ---- element-wise -------------------------------------------------------------------------
def _erf(x: Array) -> Array:
    from scipy.special import erf  # scipy is a runtime dependency (pyproject.toml)

    return erf(x).astype(x.dtype, copy=False)


def _gelu(x: Array, op: Op) -> Array:
    if _s(op, "approximate", "none") == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + GELU_TANH_COEFF * x**3)
        return 0.5 * x * (1.0 + np.tanh(inner))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _sigmoid(x: Array) -> Array:
    # numerically stable for large |x|: exp of a non-positive number only
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype, copy=False)


def _hard_sigmoid(x: Array, alpha: float, beta: float) -> Array:
    return np.clip(alpha * x + beta, 0.0, 1.0).astype(x.dtype, copy=False)


def _softplus(x: Array) -> Array:
    return np.logaddexp(np.zeros((), x.dtype), x)


def _elu(x: Array, alpha: float) -> Array:
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))).astype(x.dtype, copy=False)


UnaryFn = Callable[[Array, Op], Array]

UNARY: dict[str, UnaryFn] = {
    "Relu": lambda x, op: np.maximum(x, np.zeros((), x.dtype)),
    "LeakyRelu": lambda x, op: np.where(x >= 0, x, _f(op, "alpha", LEAKY_RELU_ALPHA) * x),
    "Sigmoid": lambda x, op: _sigmoid(x),
    "HardSigmoid": lambda x, op: _hard_sigmoid(
        x, _f(op, "alpha", HARD_SIGMOID_ALPHA), _f(op, "beta", HARD_SIGMOID_BETA)
    ),
    "HardSwish": lambda x, op: x * _hard_sigmoid(x, HARD_SWISH_ALPHA, HARD_SIGMOID_BETA),
    "Tanh": lambda x, op: np.tanh(x),
    "Gelu": _gelu,
    "Erf": lambda x, op: _erf(x),
    "Elu": lambda x, op: _elu(x, _f(op, "alpha", 1.0)),
    "Selu": lambda x, op: _f(op, "gamma", SELU_GAMMA) * _elu(x, _f(op, "alpha", SELU_ALPHA)),
    "Celu": lambda x, op: (
        np.maximum(x, 0) + np.minimum(0, _f(op, "alpha", 1.0) * np.expm1(x / _f(op, "alpha", 1.0)))
    ),
    "Softplus": lambda x, op: _softplus(x),
    "Softsign": lambda x, op: x / (1 + np.abs(x)),
    "Mish": lambda x, op: x * np.tanh(_softplus(x)),
    "ThresholdedRelu": lambda x, op: np.where(x > _f(op, "alpha", 1.0), x, 0).astype(x.dtype),
    "Abs": lambda x, op: np.abs(x),
    "Neg": lambda x, op: np.negative(x),
    "Sqrt": lambda x, op: np.sqrt(x),
    "Exp": lambda x, op: np.exp(x),
    "Log": lambda x, op: np.log(x),
    "Reciprocal": lambda x, op: np.reciprocal(x),
    "Sin": lambda x, op: np.sin(x),
    "Cos": lambda x, op: np.cos(x),
    "Floor": lambda x, op: np.floor(x),
    "Ceil": lambda x, op: np.ceil(x),
    "Round": lambda x, op: np.round(x),  # half to even, as ONNX specifies
    "Sign": lambda x, op: np.sign(x),
    "Not": lambda x, op: np.logical_not(x),
    "Identity": lambda x, op: x,
    "Softmax": lambda x, op: _softmax(x, _i(op, "axis", -1)),
    "LogSoftmax": lambda x, op: _log_softmax(x, _i(op, "axis", -1)),
}


def _softmax(x: Array, axis: int) -> Array:
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax(x: Array, axis: int) -> Array:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _clip(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    lo, hi = _arg(inputs, 1), _arg(inputs, 2)
    lo_v = lo if lo is not None else op.attr("min")
    hi_v = hi if hi is not None else op.attr("max")
    y = x
    if lo_v is not None:
        y = np.maximum(y, np.asarray(lo_v, x.dtype))
    if hi_v is not None:
        y = np.minimum(y, np.asarray(hi_v, x.dtype))
    return [y]


# ---- broadcasting binaries ----------------------------------------------------------------
BinaryFn = Callable[[Array, Array], Array]

BINARY: dict[str, BinaryFn] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": lambda a, b: _int_div(a, b) if np.issubdtype(a.dtype, np.integer) else a / b,
    "Pow": lambda a, b: np.power(a, b).astype(a.dtype, copy=False),
    "PRelu": lambda x, slope: np.where(x >= 0, x, x * slope),
    "Equal": np.equal,
    "Less": np.less,
    "LessOrEqual": np.less_equal,
    "Greater": np.greater,
    "GreaterOrEqual": np.greater_equal,
    "And": np.logical_and,
    "Or": np.logical_or,
    "Xor": np.logical_xor,
}


def _int_div(a: Array, b: Array) -> Array:
    """Integer division truncating toward zero (C semantics, as onnxruntime computes it)."""
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q).astype(np.result_type(a, b), copy=False)


def _mod(op: Op, inputs: Inputs) -> list[Array]:
    a, b = inputs[0], inputs[1]
    assert a is not None and b is not None
    return [np.fmod(a, b) if _i(op, "fmod", 0) else np.mod(a, b)]


def _einsum(op: Op, inputs: Inputs) -> list[Array]:
    arrays = [a for a in inputs if a is not None]
    return [np.asarray(np.einsum(_s(op, "equation", ""), *arrays))]


def _cumsum(op: Op, inputs: Inputs) -> list[Array]:
    x, axis_in = inputs[0], inputs[1]
    assert x is not None and axis_in is not None
    axis = int(np.asarray(axis_in).reshape(-1)[0]) % x.ndim
    y = np.flip(x, axis) if _i(op, "reverse", 0) else x
    total = np.cumsum(y, axis=axis, dtype=x.dtype)
    if _i(op, "exclusive", 0):
        total = total - y
    return [np.flip(total, axis) if _i(op, "reverse", 0) else total]


VARIADIC: dict[str, BinaryFn] = {
    "Max": np.maximum,
    "Min": np.minimum,
    "Sum": np.add,
}


# ---- linear -------------------------------------------------------------------------------
def _window_view(xp: Array, geo: WindowGeometry) -> Array:
    """Windows of a padded NC* array: shape (N, C, *out_spatial, *kernel), a view."""
    nd = len(geo.kernel)
    eff = tuple(d * (k - 1) + 1 for k, d in zip(geo.kernel, geo.dilations))
    view = sliding_window_view(xp, eff, axis=tuple(range(2, 2 + nd)))
    out_idx = tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(geo.out_spatial, geo.strides))
    win_idx = tuple(slice(None, None, d) for d in geo.dilations)
    index = (slice(None), slice(None), *out_idx, *win_idx)
    return view[index]


def _pad_for_window(x: Array, geo: WindowGeometry, value: float) -> Array:
    """Pad the spatial dims with the op's pads plus what ceil_mode's last window needs."""
    widths = [(0, 0), (0, 0)]
    for i, size in enumerate(x.shape[2:]):
        eff = geo.dilations[i] * (geo.kernel[i] - 1) + 1
        needed = (geo.out_spatial[i] - 1) * geo.strides[i] + eff
        extra = max(0, needed - (size + geo.pads_begin[i] + geo.pads_end[i]))
        widths.append((geo.pads_begin[i], geo.pads_end[i] + extra))
    return np.pad(x, widths, mode="constant", constant_values=value)


def _conv(op: Op, inputs: Inputs) -> list[Array]:
    x, w, b = inputs[0], inputs[1], _arg(inputs, 2)
    assert x is not None and w is not None
    geo = window_geometry(op, x.shape[2:], w.shape[2:])
    return [_conv_core(_pad_for_window(x, geo, 0.0), w, b, _i(op, "group", 1), geo)]


def _conv_core(xp: Array, w: Array, b: Array | None, group: int, geo: WindowGeometry) -> Array:
    """Grouped convolution of an already padded input (im2col + one batched matmul)."""
    nd = xp.ndim - 2
    win = _window_view(xp, geo)  # (N, C, *out, *k)
    n = xp.shape[0]
    m, cg = w.shape[:2]
    out_sp = geo.out_spatial
    p, k = math.prod(out_sp), math.prod(geo.kernel)
    # im2col per group: (G, N*P, Cg*K) @ (G, Cg*K, M/G) -> (G, N*P, M/G)
    win = win.reshape(n, group, cg, *out_sp, *geo.kernel)
    perm = (1, 0, *range(3, 3 + nd), 2, *range(3 + nd, 3 + 2 * nd))
    cols = win.transpose(perm).reshape(group, n * p, cg * k)
    wg = w.reshape(group, m // group, cg * k).transpose(0, 2, 1)
    y = np.matmul(cols, wg)  # (G, N*P, M/G)
    y = y.reshape(group, n, p, m // group).transpose(1, 0, 3, 2).reshape(n, m, *out_sp)
    if b is not None:
        y = y + b.reshape((m,) + (1,) * nd)
    return np.ascontiguousarray(y)


def _conv_transpose(op: Op, inputs: Inputs) -> list[Array]:
    """ConvTranspose as a stride-1 convolution of the zero-upsampled input.

    The input is upsampled by ``strides`` (zeros between samples), padded by
    ``eff - 1 - pads`` on each side (+ ``output_padding`` at the end; negative amounts crop)
    and convolved with the spatially flipped kernel whose in/out channels are swapped per
    group. ``auto_pad`` and ``output_shape`` are not supported.
    """
    x, w, b = inputs[0], inputs[1], _arg(inputs, 2)
    assert x is not None and w is not None
    if _s(op, "auto_pad", "NOTSET") not in ("NOTSET", "") or op.attr("output_shape") is not None:
        raise FusiontuneError(
            f"op '{op.name}' (ConvTranspose): auto_pad and output_shape are not supported; "
            "give explicit pads (and output_padding)"
        )
    nd, group = x.ndim - 2, _i(op, "group", 1)
    kernel = tuple(w.shape[2:])
    strides = tuple(int(v) for v in op.attr("strides", (1,) * nd))
    dilations = tuple(int(v) for v in op.attr("dilations", (1,) * nd))
    pads = tuple(int(v) for v in op.attr("pads", (0,) * (2 * nd)))
    out_pad = tuple(int(v) for v in op.attr("output_padding", (0,) * nd))
    up_shape = [(i - 1) * s + 1 for i, s in zip(x.shape[2:], strides)]
    up = np.zeros((*x.shape[:2], *up_shape), dtype=x.dtype)
    every_stride = (slice(None), slice(None), *(slice(None, None, s) for s in strides))
    up[every_stride] = x
    eff = [d * (k - 1) + 1 for k, d in zip(kernel, dilations)]
    begin = [e - 1 - p for e, p in zip(eff, pads[:nd])]
    end = [e - 1 - p + o for e, p, o in zip(eff, pads[nd:], out_pad)]
    xp = np.pad(up, [(0, 0), (0, 0), *((max(a, 0), max(z, 0)) for a, z in zip(begin, end))])
    crop = [slice(-min(a, 0), size + min(z, 0)) for size, a, z in zip(xp.shape[2:], begin, end)]
    keep = (slice(None), slice(None), *crop)  # negative amounts crop
    xp = xp[keep]
    c, mg = w.shape[:2]
    wt = w.reshape(group, c // group, mg, *kernel).swapaxes(1, 2)
    wt = np.flip(wt, axis=tuple(range(3, 3 + nd))).reshape(group * mg, c // group, *kernel)
    out_sp = tuple(size - e + 1 for size, e in zip(xp.shape[2:], eff))
    zeros = (0,) * nd
    geo = WindowGeometry(kernel, (1,) * nd, dilations, zeros, zeros, out_sp)
    return [_conv_core(xp, np.ascontiguousarray(wt), b, group, geo)]


def _gemm(op: Op, inputs: Inputs) -> list[Array]:
    a, b, c = inputs[0], inputs[1], _arg(inputs, 2)
    assert a is not None and b is not None
    a = a.T if _i(op, "transA", 0) else a
    b = b.T if _i(op, "transB", 0) else b
    y = np.matmul(a, b)
    alpha, beta = _f(op, "alpha", 1.0), _f(op, "beta", 1.0)
    if alpha != 1.0:
        y = alpha * y
    if c is not None:
        y = y + (c if beta == 1.0 else beta * c)
    return [y.astype(a.dtype, copy=False)]


# ---- pooling ------------------------------------------------------------------------------
def _pool_geometry(op: Op, x: Array) -> WindowGeometry:
    kernel = op.attr("kernel_shape")
    if kernel is None:
        raise ShapeError(f"op '{op.name}' ({op.op_type}): kernel_shape is required")
    return window_geometry(op, x.shape[2:], kernel)


def _spatial_axes(geo: WindowGeometry) -> tuple[int, ...]:
    nd = len(geo.kernel)
    return tuple(range(2 + nd, 2 + 2 * nd))


def _maxpool(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    geo = _pool_geometry(op, x)
    win = _window_view(_pad_for_window(x, geo, -np.inf), geo)
    y = np.max(win, axis=_spatial_axes(geo))
    if len(op.outputs) > 1 and op.outputs[1]:
        raise FusiontuneError(f"op '{op.name}' (MaxPool): the Indices output is not supported")
    return [y.astype(x.dtype, copy=False)]


def _averagepool(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    geo = _pool_geometry(op, x)
    axes = _spatial_axes(geo)
    total = np.sum(_window_view(_pad_for_window(x, geo, 0.0), geo), axis=axes)
    # divisor: the input region, plus the explicit pads when count_include_pad=1; the extra
    # region ceil_mode adds beyond the pads is never counted (onnxruntime, onnx reference)
    ones = np.ones((1, 1, *x.shape[2:]), dtype=x.dtype)
    if _i(op, "count_include_pad", 0):
        widths = [(0, 0), (0, 0), *zip(geo.pads_begin, geo.pads_end)]
        ones = np.pad(ones, widths, constant_values=1.0)
        inner = WindowGeometry(
            geo.kernel, geo.strides, geo.dilations, (0,) * len(geo.kernel),
            (0,) * len(geo.kernel), geo.out_spatial,
        )  # fmt: skip
        count = np.sum(_window_view(_pad_for_window(ones, inner, 0.0), inner), axis=axes)
    else:
        count = np.sum(_window_view(_pad_for_window(ones, geo, 0.0), geo), axis=axes)
    return [(total / count).astype(x.dtype, copy=False)]


def _lppool(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    geo = _pool_geometry(op, x)
    p = _f(op, "p", 2.0)
    win = _window_view(_pad_for_window(np.abs(x) ** p, geo, 0.0), geo)
    return [(np.sum(win, axis=_spatial_axes(geo)) ** (1.0 / p)).astype(x.dtype, copy=False)]


def _global_lp(x: Array, axis: tuple[int, ...], keepdims: bool, p: float) -> Array:
    return np.sum(np.abs(x) ** p, axis=axis, keepdims=keepdims) ** (1.0 / p)


def _global_lppool(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    y = _global_lp(x, tuple(range(2, x.ndim)), True, _f(op, "p", 2.0))
    return [y.astype(x.dtype, copy=False)]


def _global_pool(reduce: Callable[..., Array]) -> Kernel:
    def kernel(op: Op, inputs: Inputs) -> list[Array]:
        x = inputs[0]
        assert x is not None
        return [reduce(x, axis=tuple(range(2, x.ndim)), keepdims=True)]

    return kernel


# ---- normalizations -----------------------------------------------------------------------
def _channel(v: Array, ndim: int) -> Array:
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def _batchnorm(op: Op, inputs: Inputs) -> list[Array]:
    x, scale, bias, mean, var = inputs[:5]
    assert x is not None and scale is not None and bias is not None
    assert mean is not None and var is not None
    eps = _f(op, "epsilon", BN_EPSILON)
    outs: list[Array] = []
    if _i(op, "training_mode", 0):
        # batch statistics over N and the spatial dims, biased variance (ONNX opset 15)
        axes = (0, *range(2, x.ndim))
        batch_mean = np.mean(x, axis=axes)
        batch_var = np.mean(np.square(x - _channel(batch_mean, x.ndim)), axis=axes)
        momentum = _f(op, "momentum", BN_MOMENTUM)
        outs = [
            (mean * momentum + batch_mean * (1 - momentum)).astype(x.dtype, copy=False),
            (var * momentum + batch_var * (1 - momentum)).astype(x.dtype, copy=False),
        ]
        mean, var = batch_mean, batch_var
    inv = scale / np.sqrt(var + np.asarray(eps, var.dtype))
    y = (x - _channel(mean, x.ndim)) * _channel(inv, x.ndim) + _channel(bias, x.ndim)
    return [y.astype(x.dtype, copy=False), *outs][: len(op.outputs)]


def _normalize(x: Array, axes: tuple[int, ...], eps: float) -> tuple[Array, Array, Array]:
    """(normalized x, mean, 1/std) over ``axes`` (biased variance), keepdims."""
    mean = np.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    inv_std = 1.0 / np.sqrt(np.mean(np.square(centered), axis=axes, keepdims=True) + eps)
    return centered * inv_std, mean, inv_std


def _layernorm(op: Op, inputs: Inputs) -> list[Array]:
    x, scale, bias = inputs[0], inputs[1], _arg(inputs, 2)
    assert x is not None and scale is not None
    axis = _i(op, "axis", -1) % x.ndim
    y, mean, inv_std = _normalize(x, tuple(range(axis, x.ndim)), _f(op, "epsilon", BN_EPSILON))
    y = y * scale
    if bias is not None:
        y = y + bias
    return [y.astype(x.dtype, copy=False), mean, inv_std][: len(op.outputs)]


def _instancenorm(op: Op, inputs: Inputs) -> list[Array]:
    x, scale, bias = inputs[:3]
    assert x is not None and scale is not None and bias is not None
    y, _, _ = _normalize(x, tuple(range(2, x.ndim)), _f(op, "epsilon", BN_EPSILON))
    return [(y * _channel(scale, x.ndim) + _channel(bias, x.ndim)).astype(x.dtype, copy=False)]


def _groupnorm(op: Op, inputs: Inputs) -> list[Array]:
    x, scale, bias = inputs[:3]
    assert x is not None and scale is not None and bias is not None
    groups = _i(op, "num_groups", 1)
    n, c = x.shape[:2]
    grouped = x.reshape(n, groups, -1)
    y, _, _ = _normalize(grouped, (2,), _f(op, "epsilon", BN_EPSILON))
    if scale.size == groups and groups != c:  # opset 18: scale and bias per group
        y = y * scale.reshape(1, groups, 1) + bias.reshape(1, groups, 1)
        return [y.reshape(x.shape).astype(x.dtype, copy=False)]
    y = y.reshape(x.shape) * _channel(scale, x.ndim) + _channel(bias, x.ndim)  # opset 21
    return [y.astype(x.dtype, copy=False)]


def _lpnorm(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axis, p = _i(op, "axis", -1), _i(op, "p", 2)
    norm = np.sum(np.abs(x) ** p, axis=axis, keepdims=True) ** (1.0 / p)
    return [(x / norm).astype(x.dtype, copy=False)]


ReduceFn = Callable[[Array, tuple[int, ...]], Array]

REDUCE: dict[str, ReduceFn] = {
    "ReduceSum": lambda x, a: np.sum(x, axis=a, keepdims=True),
    "ReduceMean": lambda x, a: np.mean(x, axis=a, keepdims=True),
    "ReduceMax": lambda x, a: np.max(x, axis=a, keepdims=True),
    "ReduceMin": lambda x, a: np.min(x, axis=a, keepdims=True),
    "ReduceProd": lambda x, a: np.prod(x, axis=a, keepdims=True),
    "ReduceL1": lambda x, a: np.sum(np.abs(x), axis=a, keepdims=True),
    "ReduceL2": lambda x, a: np.sqrt(np.sum(np.square(x), axis=a, keepdims=True)),
    "ReduceSumSquare": lambda x, a: np.sum(np.square(x), axis=a, keepdims=True),
    "ReduceLogSumExp": lambda x, a: _logsumexp(x, a),
}


def _logsumexp(x: Array, axes: tuple[int, ...]) -> Array:
    top = np.max(x, axis=axes, keepdims=True)
    return top + np.log(np.sum(np.exp(x - top), axis=axes, keepdims=True))


def _reduce(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axes = _axes_of(op, inputs, 1)
    if not axes:
        if _i(op, "noop_with_empty_axes", 0):
            return [x]
        axes = list(range(x.ndim))
    norm = tuple(sorted(a % x.ndim for a in axes))
    y = REDUCE[op.op_type](x, norm)
    if not _i(op, "keepdims", 1):
        y = np.squeeze(y, axis=norm)
    return [np.asarray(y, dtype=x.dtype)]


def _argreduce(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axis = _i(op, "axis", 0) % x.ndim
    fn = np.argmax if op.op_type == "ArgMax" else np.argmin
    if _i(op, "select_last_index", 0):
        flipped = np.flip(x, axis=axis)
        idx = x.shape[axis] - 1 - fn(flipped, axis=axis, keepdims=True)
    else:
        idx = fn(x, axis=axis, keepdims=True)
    if not _i(op, "keepdims", 1):
        idx = np.squeeze(idx, axis=axis)
    return [idx.astype(np.int64)]


# ---- layout -------------------------------------------------------------------------------
def _reshape(op: Op, inputs: Inputs) -> list[Array]:
    x, shape = inputs[0], inputs[1]
    assert x is not None and shape is not None
    return [x.reshape(reshape_target(op, x.shape, _ints(shape) or []))]


def _flatten(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axis = _i(op, "axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    return [x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))]


def _squeeze(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axes = _axes_of(op, inputs, 1)
    if axes is None:
        return [np.squeeze(x)]
    return [np.squeeze(x, axis=tuple(a % x.ndim for a in axes))]


def _unsqueeze(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axes = _axes_of(op, inputs, 1) or []
    rank = x.ndim + len(axes)
    return [np.expand_dims(x, axis=tuple(sorted(a % rank for a in axes)))]


def _transpose(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    perm = op.attr("perm")
    return [np.transpose(x, None if perm is None else tuple(int(p) for p in perm))]


# ---- structural ---------------------------------------------------------------------------
def _concat(op: Op, inputs: Inputs) -> list[Array]:
    arrays = [a for a in inputs if a is not None]
    return [np.concatenate(arrays, axis=_i(op, "axis", 0))]


def _shape(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    start, end = op.attr("start"), op.attr("end")
    dims = x.shape[None if start is None else int(start) : None if end is None else int(end)]
    return [np.asarray(dims, dtype=np.int64)]


def _size(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    return [np.asarray(x.size, dtype=np.int64)]


def _gather(op: Op, inputs: Inputs) -> list[Array]:
    x, idx = inputs[0], inputs[1]
    assert x is not None and idx is not None
    axis = _i(op, "axis", 0) % x.ndim
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
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
        starts, ends = _ints(op.attr("starts")) or [], _ints(op.attr("ends")) or []
        axes, steps = _ints(op.attr("axes")), None
    else:
        starts, ends = _ints(inputs[1]) or [], _ints(inputs[2]) or []
        axes, steps = _ints(_arg(inputs, 3)), _ints(_arg(inputs, 4))
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[a % x.ndim] = _slice_bounds(s, e, st, x.shape[a % x.ndim])
    return [x[tuple(index)]]


def _split(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axis = _i(op, "axis", 0) % x.ndim
    sizes = _ints(op.attr("split")) or _ints(_arg(inputs, 1))
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
    pads = _ints(op.attr("pads")) or _ints(_arg(inputs, 1)) or []
    value_in = _arg(inputs, 2)
    value = float(op.attr("value", 0.0)) if value_in is None else value_in.reshape(-1)[0]
    axes = _ints(_arg(inputs, 3))
    axes = [a % x.ndim for a in axes] if axes is not None else list(range(x.ndim))
    n = len(axes)
    widths = [(0, 0)] * x.ndim
    for i, a in enumerate(axes):
        widths[a] = (pads[i], pads[i + n])
    grow = [(max(b, 0), max(e, 0)) for b, e in widths]
    mode = _s(op, "mode", "constant")
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
    return [x.astype(helper.tensor_dtype_to_np_dtype(_i(op, "to", 1)))]


def _expand(op: Op, inputs: Inputs) -> list[Array]:
    x, shape = inputs[0], inputs[1]
    assert x is not None and shape is not None
    target = np.broadcast_shapes(x.shape, tuple(_ints(shape) or []))
    return [np.array(np.broadcast_to(x, target))]


def _tile(op: Op, inputs: Inputs) -> list[Array]:
    x, reps = inputs[0], inputs[1]
    assert x is not None and reps is not None
    return [np.tile(x, tuple(_ints(reps) or []))]


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
    shape = _ints(inputs[0]) or []
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


def _dropout(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    training = _arg(inputs, 2)
    if training is not None and bool(np.asarray(training).reshape(-1)[0]):
        raise FusiontuneError(
            f"op '{op.name}' (Dropout): training_mode=True is random; only inference is supported"
        )
    return [x, np.ones(x.shape, dtype=bool)][: len(op.outputs)]


def _matmul(op: Op, inputs: Inputs) -> list[Array]:
    a, b = inputs[0], inputs[1]
    assert a is not None and b is not None
    return [np.matmul(a, b)]


# ---- Resize -------------------------------------------------------------------------------
def _source_coords(mode: str, out_len: int, in_len: int, scale: float) -> Array:
    """Input coordinate of each output index (ONNX coordinate_transformation_mode)."""
    x = np.arange(out_len, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out_len > 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return x / scale
    if mode == "align_corners":
        return x * (in_len - 1) / (out_len - 1) if out_len > 1 else np.zeros(out_len)
    if mode == "half_pixel_symmetric":
        adjustment = out_len / (scale * in_len)
        center = in_len / 2 * (1 - adjustment)
        return center + (x + 0.5) / scale - 0.5
    raise FusiontuneError(
        f"Resize coordinate_transformation_mode '{mode}' is not supported; allowed: "
        "half_pixel, pytorch_half_pixel, asymmetric, align_corners, half_pixel_symmetric"
    )


def _nearest_index(coords: Array, mode: str, in_len: int) -> Array:
    if mode == "round_prefer_floor":
        idx = np.where(coords - np.floor(coords) == 0.5, np.floor(coords), np.round(coords))
    elif mode == "round_prefer_ceil":
        idx = np.where(coords - np.floor(coords) == 0.5, np.ceil(coords), np.round(coords))
    elif mode == "floor":
        idx = np.floor(coords)
    elif mode == "ceil":
        idx = np.ceil(coords)
    else:
        raise FusiontuneError(f"Resize nearest_mode '{mode}' is not supported")
    return np.clip(idx, 0, in_len - 1).astype(np.int64)


def _resize(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    scales_in, sizes_in = _arg(inputs, 2), _arg(inputs, 3)
    axes = _ints(op.attr("axes")) or list(range(x.ndim))
    axes = [a % x.ndim for a in axes]
    if sizes_in is not None and sizes_in.size:
        sizes = _ints(sizes_in) or []
        scales = [s / x.shape[a] for a, s in zip(axes, sizes)]
    elif scales_in is not None and scales_in.size:
        scales = [float(s) for s in scales_in.reshape(-1)]
        sizes = [math.floor(x.shape[a] * s) for a, s in zip(axes, scales)]
    else:
        raise FusiontuneError(f"op '{op.name}' (Resize): needs scales or sizes")
    mode = _s(op, "mode", "nearest")
    coord_mode = _s(op, "coordinate_transformation_mode", "half_pixel")
    policy = _s(op, "keep_aspect_ratio_policy", "stretch")
    if _i(op, "antialias", 0) or policy != "stretch":
        raise FusiontuneError(
            f"op '{op.name}' (Resize): antialias=1 and keep_aspect_ratio_policy other than "
            "'stretch' are not supported"
        )
    y = x
    for a, scale, out_len in zip(axes, scales, sizes):
        in_len = x.shape[a]
        if out_len == in_len and scale == 1.0:
            continue
        coords = _source_coords(coord_mode, out_len, in_len, scale)
        if mode == "nearest":
            idx = _nearest_index(coords, _s(op, "nearest_mode", "round_prefer_floor"), in_len)
            y = np.take(y, idx, axis=a)
        elif mode == "linear":
            coords = np.clip(coords, 0, in_len - 1)
            lo = np.floor(coords).astype(np.int64)
            hi = np.minimum(lo + 1, in_len - 1)
            shape = [1] * x.ndim
            shape[a] = out_len
            frac = (coords - lo).astype(x.dtype).reshape(shape)
            y = np.take(y, lo, axis=a) * (1 - frac) + np.take(y, hi, axis=a) * frac
        elif mode == "cubic":
            y = _cubic_resize_axis(y, a, coords, op)
        else:
            raise FusiontuneError(
                f"op '{op.name}' (Resize): mode '{mode}' is not one of nearest, linear, cubic"
            )
    return [y.astype(x.dtype, copy=False)]


def _cubic_resize_axis(y: Array, axis: int, coords: Array, op: Op) -> Array:
    """Cubic convolution along one axis: 4 taps, edge-clamped indices (ONNX Resize)."""
    a = _f(op, "cubic_coeff_a", CUBIC_COEFF_A)
    in_len = y.shape[axis]
    base = np.floor(coords)
    r = (coords - base)[:, None]
    d = np.concatenate([r + 1, r, 1 - r, 2 - r], axis=1)  # distance of each tap, (out, 4)
    near = ((a + 2) * d - (a + 3)) * d * d + 1  # |d| <= 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a  # 1 < |d| < 2
    weights = np.where(d <= 1, near, far)
    taps = base[:, None].astype(np.int64) + np.arange(-1, 3)
    if _i(op, "exclude_outside", 0):
        weights = np.where((taps >= 0) & (taps < in_len), weights, 0.0)
        weights = weights / weights.sum(axis=1, keepdims=True)
    moved = np.moveaxis(y, axis, -1)[..., np.clip(taps, 0, in_len - 1)]  # (..., out, 4)
    out = np.sum(moved * weights.astype(y.dtype), axis=-1)
    return np.moveaxis(out, -1, axis)


# ---- registry -----------------------------------------------------------------------------
def _unary_kernel(fn: UnaryFn) -> Kernel:
    def kernel(op: Op, inputs: Inputs) -> list[Array]:
        x = inputs[0]
        assert x is not None
        return [np.asarray(fn(x, op)).astype(x.dtype, copy=False)]

    return kernel


def _binary_kernel(fn: BinaryFn) -> Kernel:
    def kernel(op: Op, inputs: Inputs) -> list[Array]:
        a, b = inputs[0], inputs[1]
        assert a is not None and b is not None
        return [np.asarray(fn(a, b))]

    return kernel


def _variadic_kernel(fn: BinaryFn) -> Kernel:
    def kernel(op: Op, inputs: Inputs) -> list[Array]:
        arrays = [a for a in inputs if a is not None]
        y = arrays[0]
        for a in arrays[1:]:
            y = fn(y, a)
        return [np.asarray(y)]

    return kernel


KERNELS: dict[str, Kernel] = {
    **{t: _unary_kernel(fn) for t, fn in UNARY.items()},
    **{t: _binary_kernel(fn) for t, fn in BINARY.items()},
    **{t: _variadic_kernel(fn) for t, fn in VARIADIC.items()},
    **{t: _reduce for t in REDUCE},
    "Clip": _clip,
    "Mod": _mod,
    "Einsum": _einsum,
    "CumSum": _cumsum,
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "Gemm": _gemm,
    "MatMul": _matmul,
    "MaxPool": _maxpool,
    "AveragePool": _averagepool,
    "LpPool": _lppool,
    "GlobalAveragePool": _global_pool(np.mean),
    "GlobalMaxPool": _global_pool(np.max),
    "GlobalLpPool": _global_lppool,
    "BatchNormalization": _batchnorm,
    "LayerNormalization": _layernorm,
    "InstanceNormalization": _instancenorm,
    "GroupNormalization": _groupnorm,
    "LpNormalization": _lpnorm,
    "ArgMax": _argreduce,
    "ArgMin": _argreduce,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Transpose": _transpose,
    "Concat": _concat,
    "Shape": _shape,
    "Size": _size,
    "Gather": _gather,
    "Slice": _slice,
    "Split": _split,
    "Pad": _pad,
    "Cast": _cast,
    "Expand": _expand,
    "Tile": _tile,
    "Where": _where,
    "Constant": _constant,
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "Resize": _resize,
    "Dropout": _dropout,
}
"""ONNX op type -> numpy kernel ``(op, inputs) -> outputs`` (one array per op output)."""


def run_op(op: Op, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
    """Run one op on numpy arrays.

    Args:
        op: the op (its type and attributes select and configure the kernel).
        inputs: one array per op input in ONNX order; ``None`` for an omitted optional input.

    Returns:
        One array per op output (trailing optional outputs the kernel does not compute are
        omitted).

    Raises:
        FusiontuneError: no kernel exists for the op type (names the op and its type).
    """
    kernel = KERNELS.get(op.op_type) if op.domain in ("", "ai.onnx") else None
    if kernel is None:
        where = f" in domain '{op.domain}'" if op.domain not in ("", "ai.onnx") else ""
        raise FusiontuneError(
            f"op '{op.name}': the reference executor has no kernel for op type "
            f"'{op.op_type}'{where}{closest(op.op_type, KERNELS)}"
        )
    return kernel(op, inputs)


def _check_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, Array]:
    unknown = [name for name in inputs if name not in graph.inputs]
    if unknown:
        raise FusiontuneError(
            f"graph '{graph.name}': '{unknown[0]}' is not a graph input"
            f"{closest(unknown[0], graph.inputs)}; inputs are {list(graph.inputs)}"
        )
    values: dict[str, Array] = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        if name not in inputs:
            raise FusiontuneError(
                f"graph '{graph.name}': input '{name}' is missing; expected shape {t.shape} "
                f"dtype {t.dtype}"
            )
        value = np.asarray(inputs[name])
        if value.shape != t.shape or value.dtype != np.dtype(t.dtype):
            raise FusiontuneError(
                f"graph '{graph.name}': input '{name}' has shape {value.shape} dtype "
                f"{value.dtype}; expected shape {t.shape} dtype {t.dtype}"
            )
        values[name] = value
    return values


def reference_run(
    graph: Graph, inputs: Mapping[str, np.ndarray], keep_intermediates: bool = False
) -> dict[str, np.ndarray]:
    """Run a graph op by op in topological order.

    Args:
        graph: the graph.
        inputs: one array per graph input, with the input's exact shape and dtype.
        keep_intermediates: also return every activation tensor (graph inputs and the
            outputs of every op), not just the graph outputs.

    Returns:
        Graph outputs by name (or every activation tensor when ``keep_intermediates``).

    Raises:
        FusiontuneError: an input is missing, unknown or has the wrong shape or dtype; an op
            has no kernel; an op computes a shape that differs from the graph's.
    """
    env: dict[str, Array] = {
        name: t.value for name, t in graph.tensors.items() if t.value is not None
    }
    env.update(_check_inputs(graph, inputs))
    activations = {name: env[name] for name in graph.inputs}
    for op in graph.ops:
        args = [env[name] if name else None for name in op.inputs]
        outs = run_op(op, args)
        for name, value in zip(op.outputs, outs):
            if not name:
                continue
            expected = graph.tensors[name].shape
            if value.shape != expected:
                raise ShapeError(
                    f"op '{op.name}' ({op.op_type}): computed output '{name}' of shape "
                    f"{value.shape}, the graph says {expected}"
                )
            env[name] = value
            activations[name] = value
        needed = [n for n in op.outputs[len(outs) :] if n]
        missing = [n for n in needed if n in graph.consumer_map or n in graph.outputs]
        if missing:
            raise FusiontuneError(
                f"op '{op.name}' ({op.op_type}): the reference kernel does not compute "
                f"output '{missing[0]}'"
            )
    if keep_intermediates:
        return activations
    return {name: env[name] for name in graph.outputs}


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random values for every graph input.

    Float inputs are standard normal (in the input's dtype, float32 for the zoo); integer
    inputs are uniform in ``[0, RANDOM_INT_HIGH)``; boolean inputs are fair coin flips.
    """
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        dtype = np.dtype(t.dtype)
        if np.issubdtype(dtype, np.floating):
            out[name] = rng.standard_normal(t.shape).astype(dtype)
        elif dtype == np.bool_:
            out[name] = rng.random(t.shape) < 0.5
        else:
            out[name] = rng.integers(0, RANDOM_INT_HIGH, size=t.shape).astype(dtype)
    return out
