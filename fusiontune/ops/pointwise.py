"""Element-wise ops: nonlinear activations (ELEMWISE), Identity/Dropout/Neg (AFFINE), the
arithmetic that is AFFINE with a constant and BINARY of two activations, and the comparisons
and logic ops (OPAQUE).

Each op has one kernel, the reference; the executor runs it too (``SAME_AS_REFERENCE``), on
whole arrays or on bands of rows. Kernels compute in the dtype of their inputs (float32 for
every zoo model), like onnxruntime. Nonlinear functions are written to stay finite where the
mathematical value is (no ``exp`` of a large positive number that is then discarded).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from fusiontune.errors import FusiontuneError
from fusiontune.ir.opclass import OpClass
from fusiontune.ops.base import (
    Affine,
    AffineKind,
    Array,
    AttentionRole,
    Inputs,
    IsConstant,
    Kernel,
    OpDef,
    Shapes,
    Tensors,
    arg,
    arith_rule,
    attr_f,
    attr_i,
    attr_s,
    broadcast_rule,
    min_max_rule,
    one_activation,
    same_shape,
)

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph, Op

# Constants of ONNX functions that have no attribute for them (onnx.ai/onnx/operators)
HARD_SWISH_ALPHA = 1.0 / 6.0  # HardSwish = x * HardSigmoid(x; alpha=1/6, beta=0.5)
HARD_SWISH_BETA = 0.5
SELU_ALPHA = 1.67326319217681884765625  # Selu default alpha
SELU_GAMMA = 1.05070102214813232421875  # Selu default gamma
GELU_TANH_COEFF = 0.044715  # Gelu approximate="tanh"

UnaryFn = Callable[[Array, "Op"], Array]
BinaryFn = Callable[[Array, Array], Array]


# ---- unary functions ----------------------------------------------------------------------
def _erf(x: Array) -> Array:
    from scipy.special import erf  # scipy is a runtime dependency (pyproject.toml)

    return erf(x).astype(x.dtype, copy=False)


def _gelu(x: Array, op: Op) -> Array:
    if attr_s(op, "approximate") == "tanh":
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


def _celu(x: Array, op: Op) -> Array:
    alpha = attr_f(op, "alpha")  # max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
    return np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(np.minimum(x, 0) / alpha))


def _unary(fn: UnaryFn) -> Kernel:
    def kernel(op: Op, inputs: Inputs) -> list[Array]:
        x = inputs[0]
        assert x is not None
        return [np.asarray(fn(x, op)).astype(x.dtype, copy=False)]

    return kernel


def _binary(fn: BinaryFn) -> Kernel:
    def kernel(op: Op, inputs: Inputs) -> list[Array]:
        a, b = inputs[0], inputs[1]
        assert a is not None and b is not None
        return [np.asarray(fn(a, b))]

    return kernel


def _predicate(fn: Callable[[Array], Array]) -> Kernel:
    """A test of each element (IsNaN): a bool output, whatever the input's dtype."""

    def kernel(op: Op, inputs: Inputs) -> list[Array]:
        x = inputs[0]
        assert x is not None
        return [np.asarray(fn(x), dtype=np.bool_)]

    return kernel


def _variadic(fn: BinaryFn) -> Kernel:
    def kernel(op: Op, inputs: Inputs) -> list[Array]:
        arrays = [a for a in inputs if a is not None]
        y = arrays[0]
        for a in arrays[1:]:
            y = fn(y, a)
        return [np.asarray(y)]

    return kernel


_ELEMWISE = one_activation(OpClass.ELEMWISE)
_AFFINE = one_activation(OpClass.AFFINE)


def _elementwise(op_type: str, fn: UnaryFn, **defaults: object) -> OpDef:
    """A one-input nonlinear op of the input's shape."""
    return OpDef(op_type, _ELEMWISE, defaults, shape=same_shape, reference=_unary(fn))


def _clip(op: Op, inputs: Inputs) -> list[Array]:
    """Bounds from inputs 1, 2 (opset >= 11) or the ``min``/``max`` attributes (opset 6)."""
    x = inputs[0]
    assert x is not None
    lo, hi = arg(inputs, 1), arg(inputs, 2)
    lo_v = lo if lo is not None else op.attr("min")
    hi_v = hi if hi is not None else op.attr("max")
    y = x
    if lo_v is not None:
        y = np.maximum(y, np.asarray(lo_v, x.dtype))
    if hi_v is not None:
        y = np.minimum(y, np.asarray(hi_v, x.dtype))
    return [y]


def _dropout(op: Op, inputs: Inputs) -> list[Array]:
    x = inputs[0]
    assert x is not None
    training = arg(inputs, 2)
    if training is not None and bool(np.asarray(training).reshape(-1)[0]):
        raise FusiontuneError(
            f"op '{op.name}' (Dropout): training_mode=True is random; only inference is supported"
        )
    return [x, np.ones(x.shape, dtype=bool)][: len(op.outputs)]


def _dropout_shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    """Output and mask have the input's shape."""
    x = ins[0]
    assert x is not None
    out: Shapes = [tuple(x), tuple(x)]
    return out[:n_out]


# ---- binary -------------------------------------------------------------------------------
def _int_div(a: Array, b: Array) -> Array:
    """Integer division truncating toward zero (C semantics, as onnxruntime computes it)."""
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q).astype(np.result_type(a, b), copy=False)


def _div(a: Array, b: Array) -> Array:
    return _int_div(a, b) if np.issubdtype(a.dtype, np.integer) else a / b


def _mod(op: Op, inputs: Inputs) -> list[Array]:
    a, b = inputs[0], inputs[1]
    assert a is not None and b is not None
    return [np.fmod(a, b) if attr_i(op, "fmod") else np.mod(a, b)]


# ---- folding: AFFINE ops as per-channel scale and shift ------------------------------------
def _scalar(sign: float) -> Affine:
    def coeffs(graph: Graph, op: Op, axis: int, n: int) -> tuple[Array, Array]:
        return sign * np.ones(n), np.zeros(n)

    return Affine(AffineKind.SCALAR, coeffs)


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


def _with_constant(graph: Graph, op: Op, axis: int, n: int) -> tuple[Array, Array] | None:
    """Add/Sub/Mul/Div by a constant that is scalar or varies along ``axis`` only."""
    if len(op.inputs) != 2 or graph.is_constant(op.inputs[0]) == graph.is_constant(op.inputs[1]):
        return None
    const_first = graph.is_constant(op.inputs[0])
    c_name = op.inputs[0] if const_first else op.inputs[1]
    y_shape = graph.tensors[op.output].shape
    c = _per_channel(np.asarray(graph.tensors[c_name].value, dtype=np.float64), y_shape, axis)
    if c is None:
        return None
    ones, zeros = np.ones(n), np.zeros(n)
    if op.op_type == "Add":
        return ones, c
    if op.op_type == "Mul":
        return c, zeros
    if op.op_type == "Sub":
        return (-ones, c) if const_first else (ones, -c)
    if const_first:  # c / x is not affine
        return None
    return 1.0 / c, zeros


_BY_CONSTANT = Affine(AffineKind.CONSTANT, _with_constant)


def _arithmetic(
    op_type: str,
    fn: BinaryFn,
    nonlinear_form: Callable[[Op, IsConstant], bool] | None = None,
    attention_role: AttentionRole | None = None,
) -> OpDef:
    """Add/Sub/Mul/Div: AFFINE with a constant, BINARY of two activations."""
    return OpDef(
        op_type,
        arith_rule,
        shape=broadcast_rule,
        lint_opaque=True,
        reference=_binary(fn),
        affine=_BY_CONSTANT,
        nonlinear_form=nonlinear_form,
        attention_role=attention_role,
    )


RELU = "Relu"
ADD = "Add"
"""Op types the graph builder (``ir/builder.py``) emits."""


def _constant_numerator(op: Op, is_constant: IsConstant) -> bool:
    """``c / x``: classed AFFINE by its operands, but nonlinear in ``x``."""
    return is_constant(op.inputs[0])


OPS: tuple[OpDef, ...] = (
    _elementwise(RELU, lambda x, op: np.maximum(x, np.zeros((), x.dtype))),
    _elementwise(
        "LeakyRelu", lambda x, op: np.where(x >= 0, x, attr_f(op, "alpha") * x), alpha=0.01
    ),
    _elementwise("Sigmoid", lambda x, op: _sigmoid(x)),
    _elementwise(
        "HardSigmoid",
        lambda x, op: _hard_sigmoid(x, attr_f(op, "alpha"), attr_f(op, "beta")),
        alpha=0.2,
        beta=0.5,
    ),
    _elementwise(
        "HardSwish", lambda x, op: x * _hard_sigmoid(x, HARD_SWISH_ALPHA, HARD_SWISH_BETA)
    ),
    _elementwise("Tanh", lambda x, op: np.tanh(x)),
    _elementwise("Gelu", _gelu, approximate="none"),
    _elementwise("Erf", lambda x, op: _erf(x)),
    _elementwise("Elu", lambda x, op: _elu(x, attr_f(op, "alpha")), alpha=1.0),
    _elementwise(
        "Selu",
        lambda x, op: attr_f(op, "gamma") * _elu(x, attr_f(op, "alpha")),
        alpha=SELU_ALPHA,
        gamma=SELU_GAMMA,
    ),
    _elementwise("Celu", _celu, alpha=1.0),
    _elementwise("Softplus", lambda x, op: _softplus(x)),
    _elementwise("Softsign", lambda x, op: x / (1 + np.abs(x))),
    _elementwise("Mish", lambda x, op: x * np.tanh(_softplus(x))),
    _elementwise(
        "ThresholdedRelu",
        lambda x, op: np.where(x > attr_f(op, "alpha"), x, 0).astype(x.dtype),
        alpha=1.0,
    ),
    _elementwise("Abs", lambda x, op: np.abs(x)),
    _elementwise("Sqrt", lambda x, op: np.sqrt(x)),
    _elementwise("Exp", lambda x, op: np.exp(x)),
    _elementwise("Log", lambda x, op: np.log(x)),
    _elementwise("Reciprocal", lambda x, op: np.reciprocal(x)),
    _elementwise("Sin", lambda x, op: np.sin(x)),
    _elementwise("Cos", lambda x, op: np.cos(x)),
    _elementwise("Floor", lambda x, op: np.floor(x)),
    _elementwise("Ceil", lambda x, op: np.ceil(x)),
    _elementwise("Round", lambda x, op: np.round(x)),  # half to even, as ONNX specifies
    _elementwise("Sign", lambda x, op: np.sign(x)),
    OpDef("Clip", _ELEMWISE, shape=same_shape, reference=_clip),
    OpDef(
        "PRelu",
        _ELEMWISE,
        shape=broadcast_rule,
        reference=_binary(lambda x, slope: np.where(x >= 0, x, x * slope)),
    ),
    OpDef(
        "Pow",
        _ELEMWISE,
        shape=broadcast_rule,
        reference=_binary(lambda a, b: np.power(a, b).astype(a.dtype, copy=False)),
    ),
    OpDef(
        "Identity",
        _AFFINE,
        shape=same_shape,
        reference=_unary(lambda x, op: x),
        affine=_scalar(1.0),
        attention_role=AttentionRole.PASS,
    ),
    OpDef(
        "Neg",
        _AFFINE,
        shape=same_shape,
        reference=_unary(lambda x, op: np.negative(x)),
        affine=_scalar(-1.0),
    ),
    OpDef(
        "Dropout",
        _AFFINE,
        shape=_dropout_shape,
        reference=_dropout,
        affine=_scalar(1.0),
        out_dtypes={1: "bool"},
        attention_role=AttentionRole.PASS,
    ),
    _arithmetic(ADD, np.add, attention_role=AttentionRole.ADD),
    _arithmetic("Sub", np.subtract),
    _arithmetic("Mul", np.multiply, attention_role=AttentionRole.MUL),
    _arithmetic("Div", _div, _constant_numerator, AttentionRole.DIV),
    OpDef("Max", min_max_rule, shape=broadcast_rule, reference=_variadic(np.maximum)),
    OpDef("Min", min_max_rule, shape=broadcast_rule, reference=_variadic(np.minimum)),
    OpDef("Sum", shape=broadcast_rule, reference=_variadic(np.add)),
    OpDef("Mod", defaults={"fmod": 0}, reference=_mod),
    OpDef("Not", reference=_unary(lambda x, op: np.logical_not(x))),
    OpDef("IsNaN", reference=_predicate(np.isnan), attention_role=AttentionRole.NAN_TEST),
    OpDef("Equal", reference=_binary(np.equal)),
    OpDef("Less", reference=_binary(np.less)),
    OpDef("LessOrEqual", reference=_binary(np.less_equal)),
    OpDef("Greater", reference=_binary(np.greater)),
    OpDef("GreaterOrEqual", reference=_binary(np.greater_equal)),
    OpDef("And", reference=_binary(np.logical_and)),
    OpDef("Or", reference=_binary(np.logical_or)),
    OpDef("Xor", reference=_binary(np.logical_xor)),
)
