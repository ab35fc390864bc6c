"""The op registry: one :class:`OpDef` per ONNX op type, the only place op knowledge lives.

Families: ``pointwise`` (activations, arithmetic, comparisons), ``window`` (pools and the
window geometry of Conv and pools), ``linear`` (Conv, ConvTranspose, Gemm, MatMul and their
crossbar weights), ``norm`` (normalizations, softmax, reductions), ``layout`` (reshapes and
transposes), ``resize`` (Resize, streamable in its common forms), ``misc`` (OPAQUE ops with
shapes and a reference kernel), ``indexing`` (GatherElements, ScatterND: OPAQUE, positions
from an index tensor). ``base`` holds the
:class:`OpDef` record and shared helpers; ``registry`` fills :data:`REGISTRY` and answers
questions about an op. An op type that is not registered is OPAQUE (:data:`DEFAULT`).
"""

from fusiontune.ops.base import (
    DEFAULT,
    DTYPE,
    REGISTRY,
    SAME_AS_REFERENCE,
    Affine,
    AffineKind,
    Kernel,
    OpDef,
    OperandMove,
    RowBand,
    RowSpans,
    attr,
    def_of,
    op_def,
)
from fusiontune.ops.registry import (
    KNOWN_OP_TYPES,
    affine_coeffs,
    affine_kind,
    axis_permutation,
    classify,
    delay_rows,
    element_ops,
    fold_output_elements,
    has_fused_kernel,
    held_elems,
    infer_op_shapes,
    is_fc_like,
    is_global_pool,
    is_linear_map,
    is_nonlinear_form,
    is_window,
    kernel_shape,
    matrix_on_channels,
    matrix_shape,
    op_types,
    row_spans,
    run_fused,
    run_reference,
    unsupported_reason,
    uses_batch_stats,
    window_rows,
)

__all__ = [
    "DEFAULT",
    "DTYPE",
    "KNOWN_OP_TYPES",
    "REGISTRY",
    "SAME_AS_REFERENCE",
    "Affine",
    "AffineKind",
    "Kernel",
    "OpDef",
    "OperandMove",
    "RowBand",
    "RowSpans",
    "affine_coeffs",
    "affine_kind",
    "attr",
    "axis_permutation",
    "classify",
    "def_of",
    "delay_rows",
    "element_ops",
    "fold_output_elements",
    "has_fused_kernel",
    "held_elems",
    "infer_op_shapes",
    "is_fc_like",
    "is_global_pool",
    "is_linear_map",
    "is_nonlinear_form",
    "is_window",
    "kernel_shape",
    "matrix_on_channels",
    "matrix_shape",
    "op_def",
    "op_types",
    "row_spans",
    "run_fused",
    "run_reference",
    "unsupported_reason",
    "uses_batch_stats",
    "window_rows",
]
