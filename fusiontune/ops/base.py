"""The :class:`OpDef` record, the plain registry dict it lives in, and helpers the families share.

One :class:`OpDef` per ONNX op type says everything fusiontune knows about that type: its
class rule (DESIGN §3), ONNX attribute defaults, shape inference, the reference kernel, the
fused kernel (or :data:`SAME_AS_REFERENCE`), element-op counts for the cost model and the
capacity facts of DESIGN §5 rule 7. The family modules (``pointwise``, ``window``,
``linear``, ``norm``, ``layout``, ``misc``) each define a tuple ``OPS`` of OpDefs; the
``registry`` module puts them into :data:`REGISTRY`. An op type without an entry gets
:data:`DEFAULT`: OPAQUE, shapes from ``onnx.shape_inference``, no kernel (ZigZag's
"parser mapping with a default fallback").

This module imports no other fusiontune module at run time except ``errors`` and
``ir.opclass``: ``ir.graph`` classifies ops through the registry.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from fusiontune.errors import FusiontuneError, ShapeError
from fusiontune.ir.opclass import OpClass

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph, Op, Tensor

Array = np.ndarray
Shape = tuple[int, ...]
Inputs = Sequence["Array | None"]
Kernel = Callable[["Op", Inputs], list[Array]]
"""``kernel(op, inputs) -> outputs``: inputs in ONNX order, constants included, ``None`` for an
omitted optional input; one array per output (trailing optional outputs may be left out)."""
Shapes = list["Shape | None"]
Tensors = Mapping[str, "Tensor"]
ShapeFn = Callable[["Op", Tensors, Shapes, int], Shapes]
"""``shape(op, tensors, input_shapes, n_outputs) -> output shapes`` (``None``: unknown)."""
IsConstant = Callable[[str], bool]
Classifier = Callable[["Op", IsConstant], OpClass]
GraphOpFn = Callable[["Graph", "Op"], int]
ExportFn = Callable[
    ["Op", "Graph", int, list[str], dict[str, Any], list[str]],
    tuple[list[str], dict[str, Any], list[str]],
]
"""``export(op, graph, opset, inputs, attrs, outputs)``: the op's ONNX form at ``opset``."""
ExpandFn = Callable[["Op", "Graph"], tuple[list["Op"], dict[str, "Array"]]]
"""``expand(op, graph) -> (ops, constants)``: the op spelled in ops every supported opset has
(their names and new tensors prefixed by the op's name, the op's own output last), and the
constants they read that the graph does not hold."""
FoldFn = Callable[[Sequence["Array | None"]], "int | None"]
"""``fold_elements(values)``: elements of the output of the op constant-folded on ``values``
(its inputs in ONNX order, ``None`` for an omitted optional input), for an op whose output
size is not bounded by its inputs' (``None``: unknown from these values)."""

DTYPE = np.float32
"""dtype of every activation the executor and the fused kernels compute (DESIGN §2)."""
ELEMENT_OPS_PER_ELEM = 1  # cost-model convention: one ALU op per output element
STATS_OPS_PER_ELEM = 2  # cost-model convention: one statistics pass + one normalising pass


class Marker(Enum):
    """Markers an :class:`OpDef` field can hold instead of a function."""

    SAME_AS_REFERENCE = "same as reference"


SAME_AS_REFERENCE = Marker.SAME_AS_REFERENCE
"""``OpDef.fused`` of an op whose fused execution runs its reference kernel: ``verify``
compares such ops only with themselves and says so."""


class AffineKind(str, Enum):
    """How an AFFINE op folds into an adjacent matrix (DESIGN §4 P3, §5 rule 5)."""

    SCALAR = "scalar"  # the same scale everywhere (Identity, Dropout, Neg): folds on any axis
    CHANNEL = "channel"  # per-channel on axis 1 from the op's own constants (BatchNormalization)
    CONSTANT = "constant"  # by a constant operand, which must be scalar or per-feature


AffineFn = Callable[["Graph", "Op", int, int], "tuple[Array, Array] | None"]
"""``coeffs(graph, op, axis, n)``: ``(scale, shift)`` vectors of length ``n`` along ``axis``
with ``op(x) == x * scale + shift``, or ``None`` when the op is not such a map there."""


class AttentionRole(str, Enum):
    """What an op can be inside an attention chain (DESIGN P5, ``planner/attention.py``):
    ``MatMul(Q, K^T) -> [scale] -> [Add(mask)] -> Softmax(last axis) -> MatMul(P, V)``."""

    MUL = "mul"  # x * c: a scale when c is a scalar constant (on the scores, or on Q and K)
    DIV = "div"  # x / c: a scale 1/c when c is a scalar constant
    ADD = "add"  # x + m: an additive mask when m does not depend on the scores
    WHERE = "where"  # where(c, x, y): a mask when one branch is the scores, the other a scalar
    SOFTMAX = "softmax"  # softmax along the ``axis`` attribute
    PASS = "pass"  # y = x when the output keeps the input's dtype (Identity, Dropout, Cast)
    FUSED = "fused"  # the fused attention op itself (ops/attention.py): runs by the flash scheme
    VIEW = "view"  # the same elements in row-major order, another shape (Reshape, Unsqueeze)
    BROADCAST = "broadcast"  # numpy broadcasting to a larger shape (Expand): GQA's repeat_kv
    NAN_TEST = "nan_test"  # isnan(x): with where(isnan(p), 0, p), the softmax's NaN guard


class PoolReduce(str, Enum):
    """How a pool folds the input rows of one window (or of the whole input) into a value."""

    MAX = "max"
    MEAN = "mean"


@dataclass(frozen=True)
class Affine:
    """An AFFINE op as ``y = x * scale + shift``.

    Attributes:
        kind: what a merge chain checks before folding it (:class:`AffineKind`).
        coeffs: the coefficients (:data:`AffineFn`).
    """

    kind: AffineKind
    coeffs: AffineFn


@dataclass(frozen=True)
class RowSpans:
    """The input rows (axis 2) each output row of an upsampling op reads.

    Output row ``r`` reads input rows ``[first[r], end[r])`` (possibly none: a transposed
    convolution's row of inserted zeros); both tuples are non-decreasing, so a band of output
    rows ``[a, b)`` reads ``[first[a], end[b - 1])``.

    Attributes:
        first: per output row, its first input row.
        end: per output row, one past its last input row.
        height: rows of the input.
    """

    first: tuple[int, ...]
    end: tuple[int, ...]
    height: int

    def rows(self, a: int, b: int) -> tuple[int, int]:
        """Input rows ``[lo, hi)`` that output rows ``[a, b)`` read."""
        return self.first[a], self.end[b - 1]

    def low_after(self, b: int) -> int:
        """The lowest input row still needed once output rows ``[0, b)`` exist."""
        return self.first[b] if b < len(self.first) else self.height


@dataclass(frozen=True)
class RowBand:
    """Where a band of an upsampling op lies: output rows ``[a, b)`` from the input rows
    ``[lo, lo + rows)`` it is given (axis 2) of an input ``in_height`` rows tall."""

    lo: int
    a: int
    b: int
    in_height: int


SpanKernel = Callable[["Op", Inputs, RowBand], Array]
"""``span_kernel(op, inputs, band)``: output rows ``[band.a, band.b)``; ``inputs[0]`` holds only
input rows from ``band.lo``, the other inputs (constants) are whole."""


@dataclass(frozen=True)
class OperandMove:
    """An operand that ONNX moved from an attribute to an input (onnx/docs/Changelog.md).

    Attributes:
        attr: the attribute name in older opsets.
        index: the input index in newer opsets.
        since: the first opset where it is an input.
    """

    attr: str
    index: int
    since: int


def opaque_rule(op: Op, is_constant: IsConstant) -> OpClass:
    """Always OPAQUE: a barrier, a group of its own."""
    return OpClass.OPAQUE


@dataclass(frozen=True)
class OpDef:
    """Everything fusiontune knows about one ONNX op type.

    Semantics:
        op_type: the ONNX op type (default domain).
        classify: ``classify(op, is_constant) -> OpClass``; how inputs, attributes and
            outputs decide the class (a MatMul with a constant weight is LINEAR, of two
            activations OPAQUE).
        defaults: ONNX attribute defaults (onnx.ai/onnx/operators); kernels read attributes
            through :func:`attr` so that a default lives here only. Rank-dependent defaults
            (``strides``, ``pads``) are resolved by the code that knows the rank.
        shape: shape inference (:data:`ShapeFn`); ``None``: the IR does not know the type's
            shapes (the importer asks ``onnx.shape_inference`` and warns).
        lint_opaque: ``Graph.lint`` checks the shapes even when the op is OPAQUE (the rule
            does not need constant operands).
        reference: the numpy reference kernel, the numerical ground truth (:data:`Kernel`).
        fused: the kernel the executor runs for the op on whole arrays, or
            :data:`SAME_AS_REFERENCE`.
        band: ``band(op, x_rows, window) -> output rows`` for an op the executor runs by
            bands of NCHW rows with a halo (pooling); Conv bands go through its weights.
        spans: ``spans(graph, op) -> RowSpans`` of an upsampling op (ConvTranspose, Resize):
            which input rows each output row reads; the executor streams it by these spans.
        span_kernel: the kernel that computes a band of such an op from its input rows
            (:data:`SpanKernel`); ConvTranspose bands go through its weights.
        unsupported: ``unsupported(op, tensors) -> reason or None``: attributes, constant
            operands or shapes outside what the class rule's class supports; the op is then
            OPAQUE and the reason is what ``explain`` says.

    Cost model and capacity (DESIGN §5 rule 7, §6):
        element_ops: ALU ops of the op outside the crossbars; ``None``: one per output element
            (two per input element for STATS ops).
        kernel_shape: ``kernel_shape(graph, op)`` of a sliding-window op (Conv, spatial pools):
            its window height sets line buffers and pipeline delay.
        global_pool: reduces every spatial position at once: an ``N * C`` accumulator, and its
            output waits for the whole input.
        held: elements a STATS op holds between its statistics pass and its second pass;
            ``None``: an accumulator of the output's size.
        matrix: ``matrix(graph, op) -> (rows, cols, count, vectors, out_rows)`` of a LINEAR op
            on crossbars (see ``sim/needs.py``).
        fc_like: a LINEAR op a P3 merge can chain (``None``: never).
        affine: how the op folds as an AFFINE map (:class:`Affine`).
        linear_map: a WINDOW op that is a linear map of its input (average pools): not a
            nonlinearity for rule 2.
        training: the op normalizes with batch statistics (rule 3), not stored ones.
        reorders: a LAYOUT op that moves elements (Transpose); the other LAYOUT ops are views
            that keep the element order (a merge chain follows its feature axis through them).

    Executor schemes (``sim/rows.py``, ``sim/runner.py``, ``sim/tiling.py``, ``sim/tiled_run.py``):
        pool_reduce: a pool the executor folds row by row (:class:`PoolReduce`, the max or
            the mean of the rows): a global pool then streams into an accumulator and is
            tiled by channels, a window pool whose windows do not overlap along rows folds
            each input row into its output row. ``None``: no row-wise fold (LpPool).
        two_pass_stats: per-channel mean and variance over ``(N, spatial)``, then
            ``y = x * scale + shift`` with ``scale = γ/√(σ²+ε)`` from inputs 1, 2 and
            ``epsilon`` (BatchNormalization with batch statistics): tiled as a statistics pass
            and a normalizing pass over channel tiles.
        stats_axes: ``stats_axes(op, rank) -> axes`` a STATS op reduces over, for an input of
            that rank; ``None``: unknown to the executor (it then never streams the op by rows).
        row_local: ``row_local(graph, op)`` of a LINEAR matrix op (Gemm, MatMul): output row
            ``r`` reads input row ``r`` only; ``None``: always.
        concatenates: joins its inputs along its ``axis`` attribute (Concat): tiled as a copy
            of each input into its slot.
        activation_matmul: with two activation operands, a numpy matrix product
            ``(..., M, K) x (..., K, N)`` (MatMul): tiled by boxes of the output.

    ONNX files:
        operand: an attribute that became an input at some opset (the exporter moves it).
        export: the op's ONNX form at an opset, where it is more than moving ``operand``.
        onnx_since: the first ONNX opset that has the op, for an op newer than the opsets the
            importer converts to: the importer keeps its nodes through the conversion, and the
            exporter writes ``expand`` at an opset before it.
        expand: the op spelled in older ops (:data:`ExpandFn`), for ``onnx_since``.
        out_dtypes: dtype of an output by index where it is not the data input's dtype.
        dtype_attr: attribute holding the ONNX element type of output 0 (Cast's ``to``).
        data_input: the input whose dtype the outputs take (Where: 1).
        static_value: the output computed from the input's *shape* alone (Shape, Size): the
            importer folds it without the input's values.

    Planner and constant folding (the legality rules and ``limits`` ask these, never the type):
        nonlinear_form: ``nonlinear_form(op, is_constant)``: an op its class rule makes AFFINE
            that is nonlinear in its activation in this form (Div of a constant by the
            activation, ``c / x``): rule 2 refuses it between two merged LINEAR ops.
        channel_matrix: a LINEAR op that applies its matrix along the channel axis (axis 1:
            Conv), where a merge chain of a rank-4 tensor carries its features; the other
            FC-like ops (Gemm, MatMul) work on the last axis.
        permutation: ``permutation(op, rank)``: the axis permutation of a LAYOUT op that
            reorders elements (Transpose's ``perm``); a merge chain follows its features
            through it.
        fold_elements: the size of the op's folded output, for ops whose output is not
            bounded by their inputs' size (:data:`FoldFn`); the importer folds no larger one.
        attention_role: what the op can be in an attention chain (:class:`AttentionRole`);
            the attention pattern (P5) is recognised from these roles, ``activation_matmul``
            and ``permutation`` only.
        moved_axes: ``moved_axes(op, tensors, rank)``: the axes along which the op selects or
            joins elements (Slice's axes, Split's and Concat's axis), each element otherwise
            staying where it is; ``None`` from it: not known (a non-constant operand). P5
            moves a head split past such ops when they touch the last (head-dim) axis only.
        barrier: why every op of this OPAQUE type is a barrier to fusion, for ``explain``
            (LSTM: a recurrent op); ``None``: the generic reason.
    """

    op_type: str
    classify: Classifier = opaque_rule
    defaults: Mapping[str, Any] = field(default_factory=dict)
    shape: ShapeFn | None = None
    lint_opaque: bool = False
    reference: Kernel | None = None
    fused: Kernel | Literal[Marker.SAME_AS_REFERENCE] = SAME_AS_REFERENCE
    band: Callable[[Op, Array, Any], Array] | None = None  # Any: window.Window
    spans: Callable[[Graph, Op], RowSpans] | None = None
    span_kernel: SpanKernel | None = None
    unsupported: Callable[[Op, Tensors], str | None] | None = None
    element_ops: GraphOpFn | None = None
    kernel_shape: Callable[[Graph, Op], Shape] | None = None
    global_pool: bool = False
    held: GraphOpFn | None = None
    matrix: Callable[[Graph, Op], tuple[int, int, int, int, int]] | None = None
    fc_like: Callable[[Graph, Op], bool] | None = None
    affine: Affine | None = None
    linear_map: bool = False
    training: Callable[[Op], bool] | None = None
    reorders: bool = False
    operand: OperandMove | None = None
    export: ExportFn | None = None
    onnx_since: int | None = None
    expand: ExpandFn | None = None
    out_dtypes: Mapping[int, str] = field(default_factory=dict)
    dtype_attr: str | None = None
    data_input: int = 0
    static_value: Callable[[Op, Shape], Array] | None = None
    pool_reduce: PoolReduce | None = None
    two_pass_stats: bool = False
    stats_axes: Callable[[Op, int], frozenset[int]] | None = None
    row_local: Callable[[Graph, Op], bool] | None = None
    concatenates: bool = False
    activation_matmul: bool = False
    # planner and constant folding (block of its own)
    nonlinear_form: Callable[[Op, IsConstant], bool] | None = None
    channel_matrix: bool = False
    permutation: Callable[[Op, int], Shape] | None = None
    fold_elements: FoldFn | None = None
    attention_role: AttentionRole | None = None
    moved_axes: Callable[[Op, Tensors, int], frozenset[int] | None] | None = None
    barrier: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "defaults", MappingProxyType(dict(self.defaults)))
        object.__setattr__(self, "out_dtypes", MappingProxyType(dict(self.out_dtypes)))

    @property
    def has_fused_kernel(self) -> bool:
        """A fused kernel distinct from the reference (``verify`` then compares two codes)."""
        return self.fused is not SAME_AS_REFERENCE


DEFAULT = OpDef("<unknown>")
"""What an unregistered op type (or any op of a non-default domain) is: OPAQUE, no shapes,
no kernel."""

REGISTRY: dict[str, OpDef] = {}
"""ONNX op type -> :class:`OpDef`; filled once by ``fusiontune.ops`` from the family modules."""

DEFAULT_DOMAINS = frozenset({"", "ai.onnx"})


def op_def(op_type: str, domain: str = "") -> OpDef:
    """The :class:`OpDef` of an op type (:data:`DEFAULT` when unknown or in another domain)."""
    if domain not in DEFAULT_DOMAINS:
        return DEFAULT
    return REGISTRY.get(op_type, DEFAULT)


def def_of(op: Op) -> OpDef:
    """The :class:`OpDef` of an op (its type and domain)."""
    return op_def(op.op_type, op.domain)


# ---- attributes ---------------------------------------------------------------------------
def attr(op: Op, key: str) -> Any:
    """The op's attribute ``key``, or its ONNX default from the op's :class:`OpDef`.

    Raises:
        FusiontuneError: the attribute is absent and has no default (a required attribute).
    """
    value = op.attrs.get(key)
    if value is not None:
        return value
    defaults = def_of(op).defaults
    if key not in defaults:
        raise FusiontuneError(f"op '{op.name}' ({op.op_type}): attribute '{key}' is required")
    return defaults[key]


def attr_f(op: Op, key: str) -> float:
    return float(attr(op, key))


def attr_i(op: Op, key: str) -> int:
    return int(attr(op, key))


def attr_s(op: Op, key: str) -> str:
    value = attr(op, key)
    return value.decode() if isinstance(value, bytes) else str(value)


# ---- classification rules (DESIGN §3) -----------------------------------------------------
def _counts(op: Op, is_constant: IsConstant) -> tuple[int, int]:
    """(constant inputs, activation inputs) among the present inputs."""
    present = [name for name in op.inputs if name]
    n_const = sum(1 for name in present if is_constant(name))
    return n_const, len(present) - n_const


def one_activation(cls: OpClass) -> Classifier:
    """``cls`` when exactly one input is an activation, else OPAQUE."""

    def rule(op: Op, is_constant: IsConstant) -> OpClass:
        return cls if _counts(op, is_constant)[1] == 1 else OpClass.OPAQUE

    return rule


def linear_rule(op: Op, is_constant: IsConstant) -> OpClass:
    """LINEAR when the data input (0) is an activation and the weight (1) and bias are
    constants (rule 6); else OPAQUE."""
    present = [name for name in op.inputs if name]
    ins = op.inputs
    if (
        len(present) >= 2
        and not is_constant(ins[0])
        and is_constant(ins[1])
        and all(is_constant(name) for name in ins[2:] if name)
    ):
        return OpClass.LINEAR
    return OpClass.OPAQUE


def arith_rule(op: Op, is_constant: IsConstant) -> OpClass:
    """Add/Sub/Mul/Div: AFFINE with one constant, BINARY of two activations, else OPAQUE."""
    n_const, n_act = _counts(op, is_constant)
    if n_act == 1 and n_const == 1:
        return OpClass.AFFINE
    if n_act == 2:
        return OpClass.BINARY
    return OpClass.OPAQUE


def min_max_rule(op: Op, is_constant: IsConstant) -> OpClass:
    """Max/Min: BINARY of exactly two activations, ELEMWISE with one, else OPAQUE."""
    n_const, n_act = _counts(op, is_constant)
    if n_act == 2 and n_const == 0:
        return OpClass.BINARY
    if n_act == 1:
        return OpClass.ELEMWISE
    return OpClass.OPAQUE


# ---- shape helpers ------------------------------------------------------------------------
def broadcast_shapes(*shapes: Sequence[int]) -> Shape:
    """Numpy/ONNX multidirectional broadcasting."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError as exc:
        raise ShapeError(f"shapes {list(map(tuple, shapes))} do not broadcast") from exc


def norm_axis(axis: int, rank: int, op: Op, extra: int = 0) -> int:
    """``axis`` in ``[0, rank + extra)``; ``extra = 1`` where ONNX allows ``axis == rank``."""
    if not -rank <= axis < max(rank, 1) + extra:
        raise ShapeError(f"op '{op.name}' ({op.op_type}): axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def const_input(op: Op, tensors: Tensors, index: int) -> np.ndarray | None:
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


def int_list(value: np.ndarray | None, attr_value: object) -> list[int] | None:
    """Integers from a constant input (newer opsets) or else an attribute (older opsets)."""
    if value is not None:
        return [int(v) for v in value]
    if attr_value is not None:
        return [int(v) for v in attr_value]  # type: ignore[attr-defined]
    return None


def same_shape(op: Op, tensors: Tensors, ins: Shapes, n: int) -> Shapes:
    """Output 0 has the shape of input 0 (element-wise ops)."""
    x = ins[0]
    assert x is not None
    return [tuple(x)] + [None] * (n - 1)


def broadcast_rule(op: Op, tensors: Tensors, ins: Shapes, n: int) -> Shapes:
    """Output 0 has the broadcast shape of every present input."""
    try:
        return [broadcast_shapes(*[s for s in ins if s is not None])] + [None] * (n - 1)
    except ShapeError as exc:
        raise ShapeError(f"op '{op.name}' ({op.op_type}): {exc}") from None


def shape_axes(op: Op, tensors: Tensors, index: int) -> list[int] | None:
    """``axes`` from the attribute (older opsets) or the constant input ``index`` (newer)."""
    if op.attr("axes") is not None:
        return [int(a) for a in op.attr("axes")]
    if len(op.inputs) > index and op.inputs[index]:
        t = tensors[op.inputs[index]]
        if t.value is None:
            raise ShapeError(f"op '{op.name}' ({op.op_type}): axes input must be a constant")
        return [int(a) for a in np.asarray(t.value).reshape(-1)]
    return None


# ---- kernel helpers -----------------------------------------------------------------------
def ints(value: Array | Sequence[int] | None) -> list[int] | None:
    """A constant operand or attribute as a list of ints (``None`` stays ``None``)."""
    return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


def fold_ints(value: Array | None) -> list[int]:
    """A folded op's constant operand as a list of ints (``[]`` when omitted)."""
    return [int(v) for v in np.asarray(value).reshape(-1)] if value is not None else []


def arg(inputs: Inputs, index: int) -> Array | None:
    """Input ``index`` or ``None`` when it is omitted."""
    return inputs[index] if len(inputs) > index else None


def kernel_axes(op: Op, inputs: Inputs, index: int) -> list[int] | None:
    """``axes`` from the attribute (older opsets) or from input ``index`` (newer opsets)."""
    if op.attr("axes") is not None:
        return ints(op.attr("axes"))
    return ints(inputs[index]) if len(inputs) > index else None


def channel(v: Array, ndim: int) -> Array:
    """A per-channel vector shaped to broadcast over axis 1 of an ``ndim``-d NC... tensor."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def numel(graph: Graph, tensor: str) -> int:
    return math.prod(graph.tensors[tensor].shape)


def rows_of(shape: Shape) -> int:
    """Rows ``S0`` of an ``(N, C, S0, ...)`` tensor; a tensor of rank <= 2 is one row."""
    return shape[2] if len(shape) >= 3 else 1
