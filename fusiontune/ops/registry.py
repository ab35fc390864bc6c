"""The registry proper: every family's OpDefs in one dict, and the questions the rest of
fusiontune asks about an op, answered from its :class:`~fusiontune.ops.base.OpDef`.

The planner, the simulator, the executor, the reference executor and the ONNX front ends
call these functions and nothing else for op knowledge: what class an op is, its shapes,
its kernels, its element ops, its window and held elements, whether a merge can chain or
fold it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from fusiontune.errors import FusiontuneError, closest
from fusiontune.ir.opclass import OpClass
from fusiontune.ops import (
    attention,
    indexing,
    layout,
    linear,
    misc,
    norm,
    pointwise,
    quant,
    recurrent,
    resize,
    window,
)
from fusiontune.ops.base import (
    DEFAULT_DOMAINS,
    ELEMENT_OPS_PER_ELEM,
    REGISTRY,
    SAME_AS_REFERENCE,
    STATS_OPS_PER_ELEM,
    AffineKind,
    Array,
    AttentionRole,
    FoldFn,
    IsConstant,
    OpDef,
    RowSpans,
    Shape,
    Tensors,
    def_of,
    numel,
    op_def,
    rows_of,
)

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph, Op, Tensor

FAMILIES = (
    pointwise,
    window,
    linear,
    norm,
    layout,
    resize,
    misc,
    indexing,
    quant,
    attention,
    recurrent,
)


def _register() -> None:
    for family in FAMILIES:
        for d in family.OPS:
            if d.op_type in REGISTRY:
                raise AssertionError(f"op type '{d.op_type}' is registered twice")
            if d.reference is None:
                raise AssertionError(f"op type '{d.op_type}' has no reference kernel")
            REGISTRY[d.op_type] = d


_register()

KNOWN_OP_TYPES = frozenset(t for t, d in REGISTRY.items() if d.shape is not None)
"""Op types whose shapes the IR infers itself (the importer warns about every other type)."""


# ---- class, shapes, kernels -----------------------------------------------------------------
def classify(op: Op, is_constant: IsConstant, tensors: Tensors | None = None) -> OpClass:
    """The class of ``op`` (DESIGN §3); ``is_constant(name)`` tells constants apart.

    An op the class rule puts in a fusable class but whose attributes, constant operands or
    shapes (``tensors``) lie outside what fusiontune supports there is OPAQUE
    (:func:`unsupported_reason` says why).
    """
    d = def_of(op)
    cls = d.classify(op, is_constant)
    unsupported = d.unsupported
    if cls is not OpClass.OPAQUE and unsupported and unsupported(op, tensors or {}):
        return OpClass.OPAQUE
    return cls


def unsupported_reason(graph: Graph, op: Op) -> str | None:
    """Why ``op`` is OPAQUE although its type has a fusable class (``None``: it is not)."""
    d = def_of(op)
    if d.unsupported is None or d.classify(op, graph.is_constant) is OpClass.OPAQUE:
        return None
    return d.unsupported(op, graph.tensors)


def barrier_reason(op: Op) -> str | None:
    """Why every op of ``op``'s type is OPAQUE, where its OpDef says (``None``: not said)."""
    return def_of(op).barrier


def row_spans(graph: Graph, op: Op) -> RowSpans | None:
    """The :class:`RowSpans` of an upsampling op (ConvTranspose, Resize), else ``None``."""
    fn = def_of(op).spans
    return None if fn is None or op.op_class is OpClass.OPAQUE else fn(graph, op)


def infer_op_shapes(op: Op, tensors: Mapping[str, Tensor]) -> list[Shape | None]:
    """Output shapes of ``op`` given the shapes (and constant values) of its inputs.

    Returns one shape per output, ``None`` where the op type's shapes are not known here
    (the ONNX importer then asks ``onnx.shape_inference``).

    Raises:
        ShapeError: the attributes or input shapes are inconsistent, naming the op.
    """
    rule = def_of(op).shape
    if rule is None:
        return [None] * len(op.outputs)
    ins = [tensors[t].shape if t else None for t in op.inputs]
    return rule(op, tensors, ins, len(op.outputs))


def _no_kernel(op: Op) -> FusiontuneError:
    where = f" in domain '{op.domain}'" if op.domain not in DEFAULT_DOMAINS else ""
    return FusiontuneError(
        f"op '{op.name}': the reference executor has no kernel for op type "
        f"'{op.op_type}'{where}{closest(op.op_type, REGISTRY)}"
    )


def run_reference(op: Op, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """Run one op's reference kernel.

    Args:
        op: the op (its type and attributes select and configure the kernel).
        inputs: one array per op input in ONNX order; ``None`` for an omitted optional input.

    Returns:
        One array per op output (trailing optional outputs the kernel does not compute are
        omitted).

    Raises:
        FusiontuneError: no kernel exists for the op type (names the op and its type).
    """
    kernel = def_of(op).reference
    if kernel is None:
        raise _no_kernel(op)
    return kernel(op, list(inputs))


def run_fused(op: Op, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """Run one op with its fused kernel (its reference kernel where they are the same)."""
    d = def_of(op)
    kernel = d.reference if d.fused is SAME_AS_REFERENCE else d.fused
    if kernel is None:
        raise _no_kernel(op)
    return kernel(op, list(inputs))


def has_fused_kernel(op: Op) -> bool:
    """Whether ``op`` has a fused kernel distinct from its reference kernel."""
    return def_of(op).has_fused_kernel


# ---- cost model and capacity (DESIGN §5 rule 7, §6) -----------------------------------------
def element_ops(graph: Graph, op: Op) -> int:
    """ALU ops of a non-crossbar op: none for LAYOUT, the op's own count where it has one,
    else two per input element for STATS and one per output element otherwise."""
    if op.op_class is OpClass.LAYOUT:
        return 0
    count = def_of(op).element_ops
    if count is not None:
        return count(graph, op)
    if op.op_class is OpClass.STATS:
        return STATS_OPS_PER_ELEM * numel(graph, op.inputs[0])
    return ELEMENT_OPS_PER_ELEM * numel(graph, op.outputs[0])


def kernel_shape(graph: Graph, op: Op) -> Shape:
    """The window of a sliding-window op (Conv, spatial pools); ``()`` for other ops."""
    fn = def_of(op).kernel_shape
    return fn(graph, op) if fn is not None else ()


def window_rows(graph: Graph, op: Op) -> int:
    """Effective window height ``k0 = d0 * (K0 - 1) + 1`` of a sliding-window op (else 1)."""
    return _effective_rows(op, kernel_shape(graph, op))


def _effective_rows(op: Op, kernel: Shape) -> int:
    if not kernel:
        return 1
    dil = op.attr("dilations") or (1,) * len(kernel)
    return int(dil[0]) * (kernel[0] - 1) + 1


def is_window(graph: Graph, op: Op) -> bool:
    """A sliding-window op whose kernel is larger than 1x1 (it needs line buffers)."""
    return any(k > 1 for k in kernel_shape(graph, op))


def is_global_pool(op: Op) -> bool:
    """A global pool: an ``N * C`` accumulator, its output waits for the whole input."""
    return def_of(op).global_pool


def held_elems(graph: Graph, op: Op) -> int:
    """Elements a STATS op holds between its two passes (``OpDef.held``, else an
    accumulator of its output's size)."""
    held = def_of(op).held
    if held is not None:
        return held(graph, op)
    return numel(graph, op.outputs[0])


def delay_rows(graph: Graph, op: Op, input_inside: bool) -> int:
    """Rows by which the op's output lags its input inside a pipelined group.

    ``k0 - 1`` for windowed ops, the input's rows ``S0`` for global pools and, when its
    input is produced inside the group, for STATS ops (they need the whole input first);
    0 otherwise.
    """
    d = def_of(op)
    if d.kernel_shape is not None:
        kernel = d.kernel_shape(graph, op)
        if any(k > 1 for k in kernel):
            return _effective_rows(op, kernel) - 1
    if d.global_pool or (input_inside and op.op_class is OpClass.STATS):
        acts = graph.activation_inputs(op)
        if acts:
            return rows_of(graph.tensors[acts[0]].shape)
    return 0


def matrix_shape(graph: Graph, op: Op) -> tuple[int, int, int, int, int]:
    """``(rows, cols, count, vectors, out_rows)`` of a LINEAR op's weights on crossbars."""
    fn = def_of(op).matrix
    if fn is None:
        raise FusiontuneError(f"op '{op.name}' ({op.op_type}) has no crossbar matrix")
    return fn(graph, op)


def is_fc_like(graph: Graph, op: Op) -> bool:
    """A LINEAR op a P3 merge can chain: Gemm (transA=0), MatMul with a 2-D constant weight,
    or Conv 1x1 / stride 1 / no padding / group 1."""
    fc_like = def_of(op).fc_like
    return op.op_class is OpClass.LINEAR and fc_like is not None and fc_like(graph, op)


# ---- folding and rules 2, 3 ---------------------------------------------------------------
def affine_kind(op: Op) -> AffineKind | None:
    """How the op folds as an affine map (``None``: it does not)."""
    a = def_of(op).affine
    return None if a is None else a.kind


def affine_coeffs(
    graph: Graph, op: Op, axis: int, running_stats: bool = False
) -> tuple[Array, Array] | None:
    """``(scale, shift)`` vectors along ``axis`` with ``op(x) == x * scale + shift``.

    Returns ``None`` when the op is not such a per-channel map (a constant that varies along
    another axis, a constant numerator ``c / x``, a nonlinear op). With ``running_stats`` a
    batch-statistics BatchNormalization is taken with its running statistics, which is wrong
    (DESIGN §5 rule 3); only a merge that bypasses the planner asks for it.
    """
    affine = def_of(op).affine
    if affine is None or (uses_batch_stats(op) and not running_stats):
        return None
    y_shape = graph.tensors[op.output].shape
    acts = [t for t in op.inputs if t and not graph.is_constant(t)]
    if len(acts) != 1 or graph.tensors[acts[0]].shape != y_shape:
        return None
    axis = axis % len(y_shape)
    return affine.coeffs(graph, op, axis, y_shape[axis])


def uses_batch_stats(op: Op) -> bool:
    """The op normalizes with statistics of the batch (rule 3: never folded)."""
    training = def_of(op).training
    return training is not None and training(op)


def is_linear_map(op: Op) -> bool:
    """A WINDOW op that is linear in its input (average pools): rule 2 lets a merge cross it."""
    return def_of(op).linear_map


# ---- planner facts and folded sizes (OpDef fields of their own block) ----------------------
def is_nonlinear_form(graph: Graph, op: Op) -> bool:
    """An op classed AFFINE that is nonlinear in its activation in this form (``c / x``)."""
    form = def_of(op).nonlinear_form
    return form is not None and form(op, graph.is_constant)


def matrix_on_channels(op: Op) -> bool:
    """A LINEAR op that applies its matrix along the channel axis (Conv), not the last."""
    return def_of(op).channel_matrix


def axis_permutation(op: Op, rank: int) -> Shape | None:
    """The axis permutation of a reordering LAYOUT op of a rank-``rank`` input (``None``: the
    op keeps the element order, or is no such op)."""
    permutation = def_of(op).permutation
    return None if permutation is None else permutation(op, rank)


def moved_axes(graph: Graph, op: Op) -> frozenset[int] | None:
    """The axes along which ``op`` selects or joins elements of its first input (Slice,
    Split, Concat; ``OpDef.moved_axes``), ``None`` for an op without that fact."""
    fn = def_of(op).moved_axes
    if fn is None or not op.inputs or op.inputs[0] not in graph.tensors:
        return None
    return fn(op, graph.tensors, len(graph.tensors[op.inputs[0]].shape))


def attention_role(op: Op) -> AttentionRole | None:
    """What ``op`` can be in an attention chain (DESIGN P5; ``planner/attention.py``)."""
    return def_of(op).attention_role


def is_activation_matmul(graph: Graph, op: Op) -> bool:
    """A matrix product of two activations (``(..., M, K) x (..., K, N)``)."""
    return def_of(op).activation_matmul and len(graph.activation_inputs(op)) == 2


def fused_attention_problem(graph: Graph, op: Op) -> str | None:
    """Why a fused attention op (``AttentionRole.FUSED``) is outside the form its flash
    scheme runs (``None``: it runs fused)."""
    d = def_of(op)
    if d.attention_role is not AttentionRole.FUSED:
        return f"op '{op.name}' ({op.op_type}) is not a fused attention"
    return None if d.unsupported is None else d.unsupported(op, graph.tensors)


FOLD_ONLY: Mapping[str, FoldFn] = {
    t: fn for family in FAMILIES for t, fn in getattr(family, "FOLD_ONLY", {}).items()
}
"""Folded-size estimators of op types that have no OpDef (each family's ``FOLD_ONLY``)."""


def fold_output_elements(op_type: str, values: Sequence[Array | None]) -> int | None:
    """Elements of the output of a constant-folded op whose size is not bounded by its inputs'
    (``None``: bounded by its inputs, or unknown). ``values`` are the constant inputs (numpy
    arrays or ``None`` for omitted optional inputs)."""
    fn = op_def(op_type).fold_elements or FOLD_ONLY.get(op_type)
    return None if fn is None else fn(values)


def op_types() -> Mapping[str, OpDef]:
    """Every registered op type and its :class:`OpDef` (read-only view)."""
    from types import MappingProxyType

    return MappingProxyType(REGISTRY)
