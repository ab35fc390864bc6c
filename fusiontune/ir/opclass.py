"""Op classes: the legality lattice of DESIGN §3.

Which class an op has is decided by its :class:`~fusiontune.ops.OpDef` (``fusiontune.ops``):
it depends on the op's type, its attributes, its outputs and on which inputs are constants
(a MatMul with a constant weight is LINEAR, a MatMul of two activations is OPAQUE).
"""

from __future__ import annotations

from enum import Enum


class OpClass(str, Enum):
    """What an op means for fusion (DESIGN §3)."""

    LINEAR = "LINEAR"  # Conv, Gemm, MatMul with a constant weight: runs on crossbars
    AFFINE = "AFFINE"  # inference BN, Add/Sub/Mul/Div with a constant, Identity, Dropout
    ELEMWISE = "ELEMWISE"  # one-to-one nonlinear (Relu, Sigmoid, Gelu, ...); streamable Resize
    # (rows by spans, not one-to-one: like a nonlinearity, it is never folded nor merged across)
    BINARY = "BINARY"  # one-to-one of two activations (residual Add, gates)
    WINDOW = "WINDOW"  # pooling
    STATS = "STATS"  # needs statistics over a reduction domain first
    LAYOUT = "LAYOUT"  # no arithmetic
    OPAQUE = "OPAQUE"  # barrier: always a group of its own

    def __str__(self) -> str:
        return self.value
