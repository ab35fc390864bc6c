"""Op classes: the legality lattice of DESIGN §3.

The class of an op depends on its type, its attributes and on which inputs are constants
(a MatMul with a constant weight is LINEAR, a MatMul of two activations is OPAQUE).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any


class OpClass(str, Enum):
    """What an op means for fusion (DESIGN §3)."""

    LINEAR = "LINEAR"  # Conv, Gemm, MatMul with a constant weight: runs on crossbars
    AFFINE = "AFFINE"  # inference BN, Add/Sub/Mul/Div with a constant, Identity, Dropout
    ELEMWISE = "ELEMWISE"  # one-to-one nonlinear (Relu, Sigmoid, Gelu, ...)
    BINARY = "BINARY"  # one-to-one of two activations (residual Add, gates)
    WINDOW = "WINDOW"  # pooling
    STATS = "STATS"  # needs statistics over a reduction domain first
    LAYOUT = "LAYOUT"  # no arithmetic
    OPAQUE = "OPAQUE"  # barrier: always a group of its own

    def __str__(self) -> str:
        return self.value


LINEAR_TYPES = frozenset({"Conv", "Gemm", "MatMul"})
ARITH_TYPES = frozenset({"Add", "Sub", "Mul", "Div"})
AFFINE_TYPES = frozenset({"Identity", "Dropout", "Neg"})
ELEMWISE_TYPES = frozenset(
    {
        "Relu", "LeakyRelu", "PRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh",
        "Gelu", "Erf", "Elu", "Selu", "Celu", "Softplus", "Softsign", "Mish", "ThresholdedRelu",
        "Abs", "Sqrt", "Exp", "Log", "Reciprocal", "Pow", "Sin", "Cos", "Floor", "Ceil",
        "Round", "Sign",
    }
)  # fmt: skip
BINARY_ONLY_TYPES = frozenset({"Max", "Min"})
WINDOW_TYPES = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool"})
STATS_TYPES = frozenset(
    {
        "LayerNormalization", "InstanceNormalization", "GroupNormalization", "Softmax",
        "LogSoftmax", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
        "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp", "LpNormalization",
    }
)  # fmt: skip
LAYOUT_TYPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"})


def classify(
    op_type: str, attrs: Mapping[str, Any], inputs: tuple[str, ...], is_constant: Any
) -> OpClass:
    """Derive the class of one op.

    Args:
        op_type: ONNX op type.
        attrs: the op's attributes.
        inputs: input tensor names ("" for an omitted optional input).
        is_constant: callable ``name -> bool`` telling whether a tensor is a constant.
    """
    present = [name for name in inputs if name]
    n_const = sum(1 for name in present if is_constant(name))
    n_act = len(present) - n_const
    if op_type in LINEAR_TYPES:
        # weight (input 1) must be a constant, the data input (0) an activation (rule 6);
        # Gemm/Conv bias, when present, must be constant too.
        if (
            len(present) >= 2
            and not is_constant(inputs[0])
            and is_constant(inputs[1])
            and all(is_constant(name) for name in inputs[2:] if name)
        ):
            return OpClass.LINEAR
        return OpClass.OPAQUE
    if op_type == "BatchNormalization":
        if int(attrs.get("training_mode", 0)) == 1:
            return OpClass.STATS
        if n_act == 1 and not is_constant(inputs[0]):
            return OpClass.AFFINE
        return OpClass.OPAQUE
    if op_type in ARITH_TYPES:
        if n_act == 1 and n_const == 1:
            return OpClass.AFFINE
        if n_act == 2:
            return OpClass.BINARY
        return OpClass.OPAQUE
    if op_type in BINARY_ONLY_TYPES:
        if n_act == 2 and len(present) == 2:
            return OpClass.BINARY
        if n_act == 1:
            return OpClass.ELEMWISE
        return OpClass.OPAQUE
    if n_act != 1:
        return OpClass.OPAQUE
    if op_type in AFFINE_TYPES:
        return OpClass.AFFINE
    if op_type in ELEMWISE_TYPES:
        return OpClass.ELEMWISE
    if op_type in WINDOW_TYPES:
        return OpClass.WINDOW
    if op_type in STATS_TYPES:
        return OpClass.STATS
    if op_type in LAYOUT_TYPES:
        return OpClass.LAYOUT
    return OpClass.OPAQUE
