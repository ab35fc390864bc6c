"""Vectorized numpy kernels, one per op type, registered in plain dicts.

A fused group (``sim/execute.py``) composes these pieces; nothing here knows about plans.

- :data:`KERNELS` maps an ONNX op type to ``kernel(op, inputs) -> outputs`` with the same
  contract as ``fusiontune.reference.run_op`` (inputs in ONNX order, constants included,
  ``None`` for an omitted optional input). Op types missing here fall back to ``run_op``.
- :func:`conv_nd` and :func:`pool_nd` take an explicit :class:`Window` so that a fused group
  can run them on a band of rows (the band's halo replaces part of the padding).
- :func:`affine_coeffs` turns an AFFINE op into a per-channel ``y = x * scale + shift``
  (the form that folds into a LINEAR op's weights, DESIGN §5 rule 5).
- :func:`linear_params` turns a LINEAR op into :class:`LinearParams`, the weight layout the
  fused kernels fold into and multiply with.

Everything runs in float32; folded or merged weights are computed in float64 and rounded once.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import special

from fusiontune.errors import IllegalPlanError
from fusiontune.ir.graph import Graph, Op
from fusiontune.ir.shapes import window_geometry

Array = np.ndarray
Kernel = Callable[[Op, Sequence["Array | None"]], list[Array]]
MatmulFn = Callable[[Array, Array], Array]  # (M, K) @ (K, N) -> (M, N)

DTYPE = np.float32
BN_EPSILON_DEFAULT = 1e-5  # ONNX BatchNormalization default epsilon
BN_MOMENTUM_DEFAULT = 0.9  # ONNX BatchNormalization default momentum
LEAKY_RELU_ALPHA_DEFAULT = 0.01  # ONNX LeakyRelu default alpha
HARD_SIGMOID_ALPHA_DEFAULT = 0.2  # ONNX HardSigmoid default alpha
HARD_SIGMOID_BETA_DEFAULT = 0.5  # ONNX HardSigmoid default beta
ELU_ALPHA_DEFAULT = 1.0  # ONNX Elu default alpha
SELU_ALPHA_DEFAULT = 1.67326319217681884765625  # ONNX Selu default alpha
SELU_GAMMA_DEFAULT = 1.05070102214813232421875  # ONNX Selu default gamma


def matmul_float(x: Array, w: Array) -> Array:
    """Plain float32 matrix product (the ``numerics="float"`` crossbar)."""
    return np.matmul(x, w)


# ---- windows: Conv and pooling ---------------------------------------------------------
@dataclass(frozen=True)
class Window:
    """Explicit sliding-window geometry over the spatial axes.

    ``pads_begin``/``pads_end`` are explicit padding (they count for ``count_include_pad``);
    rows a ceil-mode window needs beyond them are added as extension padding that never counts.
    """

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    out_spatial: tuple[int, ...]

    @property
    def effective(self) -> tuple[int, ...]:
        """Extent of the dilated kernel on each axis."""
        return tuple(d * (k - 1) + 1 for k, d in zip(self.kernel, self.dilations))

    def input_rows(self, a: int, b: int) -> tuple[int, int]:
        """Input rows (axis 2, unpadded coordinates, may reach outside) for output rows [a, b)."""
        start = a * self.strides[0] - self.pads_begin[0]
        end = (b - 1) * self.strides[0] - self.pads_begin[0] + self.effective[0]
        return start, end

    def band(self, a: int, b: int, height: int) -> tuple[Window, int, int]:
        """Geometry for output rows [a, b) computed from input rows [lo, hi) of ``height``.

        Returns the band window and ``(lo, hi)``, the rows of the real input it reads; the
        missing halo rows become padding (explicit padding where the full op had it).
        """
        start, end = self.input_rows(a, b)
        lo, hi = max(start, 0), min(end, height)
        pad_top = lo - start
        pad_bottom = max(0, min(end, height + self.pads_end[0]) - height) if end > height else 0
        win = replace(
            self,
            pads_begin=(pad_top, *self.pads_begin[1:]),
            pads_end=(pad_bottom, *self.pads_end[1:]),
            out_spatial=(b - a, *self.out_spatial[1:]),
        )
        return win, lo, hi


def op_window(op: Op, in_spatial: Sequence[int], kernel: Sequence[int]) -> Window:
    """The :class:`Window` of a Conv or pooling op on an input of spatial shape ``in_spatial``."""
    geo = window_geometry(op, in_spatial, kernel)
    return Window(
        geo.kernel, geo.strides, geo.dilations, geo.pads_begin, geo.pads_end, geo.out_spatial
    )


def _pad_spatial(x: Array, win: Window, fill: float) -> Array:
    """Pad the spatial axes of ``x`` with explicit padding plus ceil-mode extension."""
    widths = [(0, 0), (0, 0)]
    for i, (n, o, s, e, pb, pe) in enumerate(
        zip(x.shape[2:], win.out_spatial, win.strides, win.effective, win.pads_begin, win.pads_end)
    ):
        need = (o - 1) * s + e  # padded extent the windows touch
        widths.append((pb, max(pe, need - pb - n)))
        del i
    if all(w == (0, 0) for w in widths):
        return x
    return np.pad(x, widths, mode="constant", constant_values=fill)


def _offset_slices(win: Window) -> list[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """For each kernel offset, the strided slice of the padded input it multiplies."""
    out = []
    for offs in itertools.product(*(range(k) for k in win.kernel)):
        sl = tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s)
            for o, d, n, s in zip(offs, win.dilations, win.out_spatial, win.strides)
        )
        out.append((offs, (slice(None), slice(None), *sl)))
    return out


def im2col(x: Array, win: Window) -> Array:
    """Columns ``(N, C * prod(kernel), prod(out_spatial))`` of the zero-padded input."""
    xp = _pad_spatial(x, win, 0.0)
    n, c = x.shape[:2]
    nk = math.prod(win.kernel)
    npix = math.prod(win.out_spatial)
    cols = np.empty((n, c, nk, *win.out_spatial), dtype=x.dtype)
    for i, (_, sl) in enumerate(_offset_slices(win)):
        cols[:, :, i] = xp[sl]
    return cols.reshape(n, c * nk, npix)


def conv_nd(
    x: Array,
    weight: Array,
    bias: Array | None,
    win: Window,
    group: int = 1,
    matmul: MatmulFn = matmul_float,
) -> Array:
    """N-d convolution (NCHW...) by im2col + matmul; depthwise by kernel-offset accumulation.

    Args:
        x: input ``(N, C, *spatial)``.
        weight: ``(C_out, C / group, *kernel)``.
        bias: ``(C_out,)`` or ``None``.
        win: geometry (may describe a band of rows).
        group: ONNX ``group``.
        matmul: the crossbar product ``(M, K) @ (K, N)``; float by default, CIM numerics
            pass a quantized one.
    """
    n = x.shape[0]
    c_out = weight.shape[0]
    c_in_g = weight.shape[1]
    if group > 1 and c_in_g == 1 and c_out == group and matmul is matmul_float:
        xp = _pad_spatial(x, win, 0.0)
        out = np.zeros((n, c_out, *win.out_spatial), dtype=DTYPE)
        w_flat = weight.reshape(c_out, -1)
        shape = (1, c_out) + (1,) * len(win.out_spatial)
        for i, (_, sl) in enumerate(_offset_slices(win)):
            out += xp[sl] * w_flat[:, i].reshape(shape)
    else:
        cols = im2col(x, win)  # (N, C*K, P)
        ck = c_in_g * math.prod(win.kernel)
        npix = cols.shape[-1]
        cols = cols.reshape(n, group, ck, npix)
        w_mat = weight.reshape(group, c_out // group, ck)
        if matmul is matmul_float and group == 1:
            out = np.stack([w_mat[0] @ cols[i, 0] for i in range(n)])  # (N, C_out, P)
        elif matmul is matmul_float:
            out = np.matmul(w_mat[None], cols)  # (N, G, C_out/G, P)
        else:
            rows = cols.transpose(1, 0, 3, 2).reshape(group, n * npix, ck)
            prod = np.stack([matmul(rows[g], w_mat[g].T) for g in range(group)])
            out = prod.reshape(group, n, npix, c_out // group).transpose(1, 0, 3, 2)
        out = out.reshape(n, c_out, *win.out_spatial)
    out = out.astype(DTYPE, copy=False)
    if bias is not None:
        out += bias.reshape((1, c_out) + (1,) * len(win.out_spatial))
    return out


def pool_nd(x: Array, kind: str, win: Window, count_include_pad: bool = False) -> Array:
    """Max or average pooling (``kind`` is ``"max"`` or ``"avg"``) by kernel-offset reduction."""
    if kind == "max":
        xp = _pad_spatial(x, win, -np.inf)
        out = None
        for _, sl in _offset_slices(win):
            out = xp[sl].copy() if out is None else np.maximum(out, xp[sl], out=out)
        assert out is not None
        return out
    xp = _pad_spatial(x, win, 0.0)
    total = np.zeros((*x.shape[:2], *win.out_spatial), dtype=DTYPE)
    for _, sl in _offset_slices(win):
        total += xp[sl]
    # divisor: window cells inside the input (or inside explicit padding)
    ones = np.ones((1, 1, *x.shape[2:]), dtype=DTYPE)
    if count_include_pad:
        ones = np.pad(ones, [(0, 0), (0, 0), *zip(win.pads_begin, win.pads_end)], constant_values=1)
        inner = replace(win, pads_begin=(0,) * len(win.kernel), pads_end=(0,) * len(win.kernel))
        count = _window_sum(ones, inner)
    else:
        count = _window_sum(ones, win)
    return (total / count).astype(DTYPE, copy=False)


def _window_sum(x: Array, win: Window) -> Array:
    xp = _pad_spatial(x, win, 0.0)
    total = np.zeros((*x.shape[:2], *win.out_spatial), dtype=DTYPE)
    for _, sl in _offset_slices(win):
        total += xp[sl]
    return total


def _conv_kernel(op: Op, inputs: Sequence[Array | None]) -> list[Array]:
    x, w = inputs[0], inputs[1]
    assert x is not None and w is not None
    b = inputs[2] if len(inputs) > 2 else None
    win = op_window(op, x.shape[2:], w.shape[2:])
    return [conv_nd(x, w, b, win, int(op.attr("group", 1)))]


def _pool_kernel(op: Op, inputs: Sequence[Array | None]) -> list[Array]:
    x = inputs[0]
    assert x is not None
    win = op_window(op, x.shape[2:], op.attr("kernel_shape"))
    kind = "max" if op.op_type == "MaxPool" else "avg"
    return [pool_nd(x, kind, win, bool(int(op.attr("count_include_pad", 0))))]


def _global_pool_kernel(op: Op, inputs: Sequence[Array | None]) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axes = tuple(range(2, x.ndim))
    fn = np.mean if op.op_type == "GlobalAveragePool" else np.max
    return [fn(x, axis=axes, keepdims=True).astype(DTYPE, copy=False)]


# ---- element-wise ----------------------------------------------------------------------
def _f(op: Op, key: str, default: float) -> float:
    return float(op.attr(key, default))


def _clip(op: Op, inputs: Sequence[Array | None]) -> Array:
    x = inputs[0]
    assert x is not None
    lo = inputs[1] if len(inputs) > 1 and inputs[1] is not None else op.attr("min")
    hi = inputs[2] if len(inputs) > 2 and inputs[2] is not None else op.attr("max")
    return np.clip(x, lo, hi)


def _gelu(op: Op, x: Array) -> Array:
    if op.attr("approximate", "none") in ("tanh", b"tanh"):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + special.erf(x / np.sqrt(2)))


UNARY: dict[str, Callable[[Op, Array], Array]] = {
    "Relu": lambda op, x: np.maximum(x, 0),
    "LeakyRelu": lambda op, x: np.where(x >= 0, x, x * _f(op, "alpha", LEAKY_RELU_ALPHA_DEFAULT)),
    "Sigmoid": lambda op, x: special.expit(x),
    "HardSigmoid": lambda op, x: np.clip(
        x * _f(op, "alpha", HARD_SIGMOID_ALPHA_DEFAULT) + _f(op, "beta", HARD_SIGMOID_BETA_DEFAULT),
        0,
        1,
    ),
    "HardSwish": lambda op, x: x * np.clip(x / 6 + 0.5, 0, 1),
    "Tanh": lambda op, x: np.tanh(x),
    "Gelu": _gelu,
    "Erf": lambda op, x: special.erf(x),
    "Elu": lambda op, x: np.where(x >= 0, x, _f(op, "alpha", ELU_ALPHA_DEFAULT) * np.expm1(x)),
    "Selu": lambda op, x: (
        _f(op, "gamma", SELU_GAMMA_DEFAULT)
        * np.where(x > 0, x, _f(op, "alpha", SELU_ALPHA_DEFAULT) * np.expm1(x))
    ),
    "Softplus": lambda op, x: np.logaddexp(0, x),
    "Softsign": lambda op, x: x / (1 + np.abs(x)),
    "Silu": lambda op, x: x * special.expit(x),
    "Mish": lambda op, x: x * np.tanh(np.logaddexp(0, x)),
    "Abs": lambda op, x: np.abs(x),
    "Sqrt": lambda op, x: np.sqrt(x),
    "Exp": lambda op, x: np.exp(x),
    "Log": lambda op, x: np.log(x),
    "Reciprocal": lambda op, x: 1 / x,
    "Neg": lambda op, x: -x,
    "Identity": lambda op, x: x,
    "Floor": lambda op, x: np.floor(x),
    "Ceil": lambda op, x: np.ceil(x),
    "Sign": lambda op, x: np.sign(x),
    "Sin": lambda op, x: np.sin(x),
    "Cos": lambda op, x: np.cos(x),
}

BINARY: dict[str, Callable[[Array, Array], Array]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
    "Max": np.maximum,
    "Min": np.minimum,
    "Pow": np.power,
    "PRelu": lambda x, s: np.where(x >= 0, x, x * s),
}


def _unary_kernel(op: Op, inputs: Sequence[Array | None]) -> list[Array]:
    x = inputs[0]
    assert x is not None
    return [np.asarray(UNARY[op.op_type](op, x), dtype=DTYPE)]


def _binary_kernel(op: Op, inputs: Sequence[Array | None]) -> list[Array]:
    a, b = inputs[0], inputs[1]
    assert a is not None and b is not None
    return [np.asarray(BINARY[op.op_type](a, b), dtype=DTYPE)]


def _clip_kernel(op: Op, inputs: Sequence[Array | None]) -> list[Array]:
    return [np.asarray(_clip(op, inputs), dtype=DTYPE)]


def _dropout_kernel(op: Op, inputs: Sequence[Array | None]) -> list[Array]:
    x = inputs[0]
    assert x is not None
    return [x, np.ones(x.shape, dtype=bool)][: len(op.outputs)]


# ---- normalization ---------------------------------------------------------------------
def bn_inference_coeffs(op: Op, inputs: Sequence[Array | None]) -> tuple[Array, Array]:
    """Per-channel ``(scale, shift)`` of a BatchNormalization with its running statistics."""
    gamma, beta, mean, var = (np.asarray(t, dtype=np.float64) for t in inputs[1:5])
    scale = gamma / np.sqrt(var + _f(op, "epsilon", BN_EPSILON_DEFAULT))
    return scale, beta - mean * scale


def batch_stats(x: Array) -> tuple[Array, Array]:
    """Pass 1 of a batch-statistics BN: per-channel mean and (population) variance."""
    axes = (0, *range(2, x.ndim))
    mean = x.mean(axis=axes, dtype=np.float64)
    var = x.var(axis=axes, dtype=np.float64)
    return mean, var


def _channel(v: Array, ndim: int) -> Array:
    return np.asarray(v, dtype=DTYPE).reshape((1, -1) + (1,) * (ndim - 2))


def _bn_kernel(op: Op, inputs: Sequence[Array | None]) -> list[Array]:
    x = inputs[0]
    assert x is not None
    if int(op.attr("training_mode", 0)) != 1:
        scale, shift = bn_inference_coeffs(op, inputs)
        return [x * _channel(scale, x.ndim) + _channel(shift, x.ndim)]
    # two passes: statistics over (N, spatial), then the element-wise normalization
    mean, var = batch_stats(x)
    gamma, beta = (np.asarray(t, dtype=np.float64) for t in inputs[1:3])
    scale = gamma / np.sqrt(var + _f(op, "epsilon", BN_EPSILON_DEFAULT))
    y = x * _channel(scale, x.ndim) + _channel(beta - mean * scale, x.ndim)
    momentum = _f(op, "momentum", BN_MOMENTUM_DEFAULT)
    run_mean = np.asarray(inputs[3]) * momentum + mean * (1 - momentum)
    run_var = np.asarray(inputs[4]) * momentum + var * (1 - momentum)
    outs = [y, run_mean.astype(DTYPE), run_var.astype(DTYPE)]
    return outs[: len(op.outputs)]


def _layernorm_kernel(op: Op, inputs: Sequence[Array | None]) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axis = int(op.attr("axis", -1))
    axis = axis + x.ndim if axis < 0 else axis
    axes = tuple(range(axis, x.ndim))
    mean = x.mean(axis=axes, keepdims=True, dtype=np.float64)
    var = x.var(axis=axes, keepdims=True, dtype=np.float64)
    inv = 1.0 / np.sqrt(var + _f(op, "epsilon", BN_EPSILON_DEFAULT))
    y = (x - mean) * inv * inputs[1]
    if len(inputs) > 2 and inputs[2] is not None:
        y = y + inputs[2]
    outs = [y.astype(DTYPE), mean.astype(DTYPE), inv.astype(DTYPE)]
    return outs[: len(op.outputs)]


def _softmax_kernel(op: Op, inputs: Sequence[Array | None]) -> list[Array]:
    x = inputs[0]
    assert x is not None
    axis = int(op.attr("axis", -1))
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return [(e / e.sum(axis=axis, keepdims=True)).astype(DTYPE)]


# ---- linear: Gemm / MatMul ---------------------------------------------------------------
def _gemm_kernel(op: Op, inputs: Sequence[Array | None]) -> list[Array]:
    a, b = inputs[0], inputs[1]
    assert a is not None and b is not None
    a = a.T if int(op.attr("transA", 0)) else a
    b = b.T if int(op.attr("transB", 0)) else b
    y = _f(op, "alpha", 1.0) * (a @ b)
    if len(inputs) > 2 and inputs[2] is not None:
        y = y + _f(op, "beta", 1.0) * inputs[2]
    return [np.asarray(y, dtype=DTYPE)]


def _matmul_kernel(op: Op, inputs: Sequence[Array | None]) -> list[Array]:
    a, b = inputs[0], inputs[1]
    assert a is not None and b is not None
    return [np.matmul(a, b).astype(DTYPE, copy=False)]


# ---- layout --------------------------------------------------------------------------------
def _layout_kernel(op: Op, inputs: Sequence[Array | None], out_shape: tuple[int, ...]) -> Array:
    x = inputs[0]
    assert x is not None
    if op.op_type == "Transpose":
        perm = op.attr("perm", tuple(reversed(range(x.ndim))))
        return np.ascontiguousarray(np.transpose(x, perm))
    return x.reshape(out_shape)


KERNELS: dict[str, Kernel] = {
    "Conv": _conv_kernel,
    "MaxPool": _pool_kernel,
    "AveragePool": _pool_kernel,
    "GlobalAveragePool": _global_pool_kernel,
    "GlobalMaxPool": _global_pool_kernel,
    "BatchNormalization": _bn_kernel,
    "LayerNormalization": _layernorm_kernel,
    "Softmax": _softmax_kernel,
    "Gemm": _gemm_kernel,
    "MatMul": _matmul_kernel,
    "Clip": _clip_kernel,
    "Dropout": _dropout_kernel,
    **{t: _unary_kernel for t in UNARY},
    **{t: _binary_kernel for t in BINARY},
}

LAYOUT_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"})


def run_kernel(graph: Graph, op: Op, inputs: Sequence[Array | None]) -> list[Array]:
    """Run one op with the kernel registered for its type (``reference.run_op`` otherwise)."""
    if op.op_type in LAYOUT_OPS:
        return [_layout_kernel(op, inputs, graph.tensors[op.output].shape)]
    kernel = KERNELS.get(op.op_type)
    if kernel is None or (op.op_type in BINARY and len(inputs) != 2):
        from fusiontune.reference import run_op

        return [np.asarray(o) for o in run_op(op, list(inputs))]
    return kernel(op, inputs)


# ---- folding: AFFINE ops as per-channel scale and shift ------------------------------------
def affine_coeffs(
    graph: Graph, op: Op, axis: int, running_stats: bool = False
) -> tuple[Array, Array] | None:
    """``(scale, shift)`` vectors along ``axis`` with ``op(x) == x * scale + shift``.

    Returns ``None`` when the op is not such a per-channel map (a constant that varies along
    another axis, a constant numerator ``c / x``, a nonlinear op). With ``running_stats`` a
    batch-statistics BatchNormalization is taken with its running statistics, which is wrong
    (DESIGN §5 rule 3); only a merge that bypasses the planner asks for it.
    """
    y_shape = graph.tensors[op.output].shape
    act = [t for t in op.inputs if t and not graph.is_constant(t)]
    if len(act) != 1 or graph.tensors[act[0]].shape != y_shape:
        return None
    axis = axis % len(y_shape)
    n = y_shape[axis]
    ones = np.ones(n)
    if op.op_type == "BatchNormalization":
        if int(op.attr("training_mode", 0)) == 1 and not running_stats:
            return None
        if axis != 1:
            return None
        consts = [graph.tensors[t].value for t in op.inputs]
        return bn_inference_coeffs(op, consts)
    if op.op_type in ("Identity", "Dropout"):
        return ones, np.zeros(n)
    if op.op_type == "Neg":
        return -ones, np.zeros(n)
    if op.op_type not in ("Add", "Sub", "Mul", "Div") or len(op.inputs) != 2:
        return None
    const_first = graph.is_constant(op.inputs[0])
    c_name = op.inputs[0] if const_first else op.inputs[1]
    if graph.is_constant(op.inputs[0]) == graph.is_constant(op.inputs[1]):
        return None
    c = _per_channel(np.asarray(graph.tensors[c_name].value, dtype=np.float64), y_shape, axis)
    if c is None:
        return None
    if op.op_type == "Add":
        return ones, c
    if op.op_type == "Mul":
        return c, np.zeros(n)
    if op.op_type == "Sub":
        return (-ones, c) if const_first else (ones, -c)
    if const_first:  # c / x is not affine
        return None
    return 1.0 / c, np.zeros(n)


def _per_channel(c: Array, shape: tuple[int, ...], axis: int) -> Array | None:
    """``c`` as a vector along ``axis`` of ``shape`` if it broadcasts that way, else None."""
    rank = len(shape)
    if c.ndim > rank:
        return None
    full = (1,) * (rank - c.ndim) + c.shape
    for i, d in enumerate(full):
        if d != 1 and i != axis:
            return None
    if full[axis] not in (1, shape[axis]):
        return None
    return np.broadcast_to(c.reshape(-1) if c.size > 1 else c.reshape(()), (shape[axis],)).copy()


# ---- LINEAR ops as weights the fused kernels fold into -------------------------------------
@dataclass(frozen=True)
class LinearParams:
    """A LINEAR op (possibly with folded AFFINE ops, possibly merged) as weights.

    Attributes:
        kind: ``"conv"`` (``weight`` is ``(C_out, C_in/group, *kernel)``, channel axis 1) or
            ``"matrix"`` (``weight`` is ``(K, N)``; features of the input on ``in_axis``,
            of the output on ``out_axis``, the rows are every other index).
        weight: float32 weights.
        bias: float32 ``(C_out,)`` / ``(N,)``, or a full array for a Gemm bias ``(M, N)``, or None.
        window: conv geometry (``None`` for matrices); computed per call for bands.
        group: conv group count.
        in_axis: matrix input feature axis.
        out_axis: matrix output feature axis.
        out_shape: output shape of the (last) op.
        source_op: the op the params came from (conv window attributes).
    """

    kind: str
    weight: Array
    bias: Array | None
    group: int = 1
    in_axis: int = -1
    out_axis: int = -1
    out_shape: tuple[int, ...] = ()
    source_op: Op | None = None

    @property
    def out_channels(self) -> int:
        return int(self.weight.shape[0] if self.kind == "conv" else self.weight.shape[1])

    def fold(self, scale: Array, shift: Array) -> LinearParams:
        """Fold ``y * scale + shift`` (per output channel) into weights and bias (float64)."""
        w = self.weight.astype(np.float64)
        if self.kind == "conv":
            w = w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
        else:
            w = w * scale.reshape(1, -1)
        b = np.zeros(self.out_channels) if self.bias is None else self.bias.astype(np.float64)
        b = b * scale + shift
        return replace(self, weight=w.astype(DTYPE), bias=np.asarray(b, dtype=DTYPE))

    def then(self, nxt: LinearParams) -> LinearParams:
        """Merge two matrices: ``W = W1 @ W2``, ``b = b1 @ W2 + b2`` (DESIGN §4 P3)."""
        w1 = self.weight.astype(np.float64)
        w2 = nxt.weight.astype(np.float64)
        b = np.zeros(w2.shape[1]) if nxt.bias is None else nxt.bias.astype(np.float64)
        if self.bias is not None:
            b = self.bias.astype(np.float64) @ w2 + b
        return replace(
            self,
            weight=(w1 @ w2).astype(DTYPE),
            bias=np.asarray(b, dtype=DTYPE),
            out_axis=nxt.out_axis,
            out_shape=nxt.out_shape,
        )


def linear_params(graph: Graph, op: Op, as_matrix: bool = False) -> LinearParams:
    """Weights of a LINEAR op. ``as_matrix`` views a 1×1 stride-1 unpadded Conv as a matrix.

    Raises:
        IllegalPlanError: ``as_matrix`` for a Conv that is not a pointwise FC, or a MatMul
            with a batched weight.
    """
    consts = [graph.tensors[t].value if t else None for t in op.inputs]
    out_shape = graph.tensors[op.output].shape
    if op.op_type == "Conv":
        w = np.asarray(consts[1], dtype=DTYPE)
        b = None if len(consts) < 3 or consts[2] is None else np.asarray(consts[2], DTYPE)
        group = int(op.attr("group", 1))
        if not as_matrix:
            return LinearParams("conv", w, b, group, 1, 1, out_shape, op)
        x_shape = graph.tensors[op.inputs[0]].shape
        win = op_window(op, x_shape[2:], w.shape[2:])
        pointwise = (
            group == 1
            and all(k == 1 for k in win.kernel)
            and all(s == 1 for s in win.strides)
            and not any(win.pads_begin + win.pads_end)
        )
        if not pointwise:
            raise IllegalPlanError(
                f"op '{op.name}' (Conv): only 1x1 stride-1 unpadded convolutions can be merged"
            )
        w_mat = w.reshape(w.shape[0], w.shape[1]).T
        return LinearParams("matrix", w_mat, b, 1, 1, 1, out_shape, op)
    if op.op_type == "Gemm":
        w = np.asarray(consts[1], dtype=np.float64)
        w = w.T if int(op.attr("transB", 0)) else w
        w = w * _f(op, "alpha", 1.0)
        bias = None
        if len(consts) > 2 and consts[2] is not None:
            c = np.asarray(consts[2], dtype=np.float64) * _f(op, "beta", 1.0)
            n_out = w.shape[1]
            if c.size == 1:
                c = np.full(n_out, float(c.reshape(())))
            elif c.size == n_out and c.shape[-1] == n_out:
                c = c.reshape(-1)
            else:  # a full (M, N) bias
                c = np.broadcast_to(c, out_shape).copy()
            bias = c.astype(DTYPE)
        in_axis = 0 if int(op.attr("transA", 0)) else 1
        return LinearParams("matrix", w.astype(DTYPE), bias, 1, in_axis, 1, out_shape, op)
    # MatMul with a constant weight
    w = np.asarray(consts[1], dtype=DTYPE)
    if w.ndim != 2:
        raise IllegalPlanError(f"op '{op.name}' (MatMul): only a 2-d constant weight is supported")
    return LinearParams("matrix", w, None, 1, -1, -1, out_shape, op)


def apply_matrix(p: LinearParams, x: Array, matmul: MatmulFn = matmul_float) -> Array:
    """Run a ``"matrix"`` LinearParams on the full input ``x``."""
    xm = np.moveaxis(x, p.in_axis, -1)
    rows = xm.reshape(-1, xm.shape[-1])
    y = matmul(rows, p.weight)
    if p.bias is not None:
        y = y + (p.bias if p.bias.ndim == 1 else p.bias.reshape(-1, y.shape[-1]))
    n_out = p.weight.shape[1]
    out_moved = list(p.out_shape)
    del out_moved[p.out_axis if p.out_axis >= 0 else len(out_moved) + p.out_axis]
    y = y.reshape(*out_moved, n_out)
    return np.ascontiguousarray(np.moveaxis(y, -1, p.out_axis)).astype(DTYPE, copy=False)
