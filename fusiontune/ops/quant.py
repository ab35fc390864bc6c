"""Quantization ops: QuantizeLinear and DequantizeLinear (ELEMWISE), DynamicQuantizeLinear
(OPAQUE: its scale is a reduction over the whole tensor), and the integer grid a
DequantizeLinear puts a tensor on (:class:`~fusiontune.ir.quant.QuantParams`).

Both are ELEMWISE, never AFFINE: ``QuantizeLinear`` rounds and saturates (a nonlinearity, so
rule 2 refuses a P3 merge across it), and ``DequantizeLinear`` reads integer codes (folding it
into a LINEAR op would make the crossbar read codes as floats). In a QDQ model the pair after a
Conv is the Conv's epilogue; a DequantizeLinear of a constant (a weight) is folded by the
importer, which records its grid on the folded weight (:mod:`fusiontune.frontend.onnx_quant`).

Kernels follow onnxruntime's CPU kernels: ``saturate(rint(x / scale) + zero_point)`` in float32
(round half to even) and ``(q - zero_point) * scale`` in float32. Per-axis parameters broadcast
along ``axis``. Blocked quantization (``block_size``), float8 and 4-bit types are outside the
supported forms (the op is then OPAQUE with the reason).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fusiontune.errors import FusiontuneError
from fusiontune.ir.opclass import OpClass
from fusiontune.ir.quant import INTEGER_RANGES, QuantParams
from fusiontune.ops.base import (
    Array,
    Inputs,
    OpDef,
    Shapes,
    Tensors,
    arg,
    attr_i,
    one_activation,
    same_shape,
)

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph, Op

QUANT_DEFAULTS = {"axis": 1, "saturate": 1, "block_size": 0}
DEFAULT_QUANT_DTYPE = "uint8"  # ONNX: the output type when QuantizeLinear has no zero point
_ELEMWISE = one_activation(OpClass.ELEMWISE)


def _along(param: Array, x: Array, op: Op) -> Array:
    """A scale or zero point broadcast against ``x``: a scalar, or 1-D along ``axis``."""
    param = np.asarray(param)
    if param.size == 1:
        return param.reshape(())
    axis = attr_i(op, "axis") % x.ndim
    if param.ndim != 1 or param.shape[0] != x.shape[axis]:
        raise FusiontuneError(
            f"op '{op.name}' ({op.op_type}): scale/zero point of shape {param.shape} does not "
            f"match axis {axis} of input {x.shape}"
        )
    shape = [1] * x.ndim
    shape[axis] = param.shape[0]
    return param.reshape(shape)


def _quantize(op: Op, inputs: Inputs) -> list[Array]:
    x, scale = inputs[0], inputs[1]
    assert x is not None and scale is not None
    zp = arg(inputs, 2)
    dtype = np.dtype(DEFAULT_QUANT_DTYPE) if zp is None else np.asarray(zp).dtype
    lo, hi = INTEGER_RANGES[str(dtype)]
    s = _along(scale, x, op).astype(np.float32)
    z = np.zeros((), np.float32) if zp is None else _along(zp, x, op).astype(np.float32)
    q = np.rint(x.astype(np.float32) / s) + z
    return [np.clip(q, lo, hi).astype(dtype)]


def _dequantize(op: Op, inputs: Inputs) -> list[Array]:
    q, scale = inputs[0], inputs[1]
    assert q is not None and scale is not None
    zp = arg(inputs, 2)
    s = _along(scale, q, op)
    diff = q.astype(np.int64) if zp is None else q.astype(np.int64) - _along(zp, q, op)
    return [(diff.astype(np.float32) * s.astype(np.float32)).astype(s.dtype)]


def _dynamic_quantize(op: Op, inputs: Inputs) -> list[Array]:
    """ONNX DynamicQuantizeLinear: uint8 codes of ``x`` on the range ``[min(x, 0), max(x, 0)]``,
    with the scale and zero point it computed (float32, as onnxruntime)."""
    x = inputs[0]
    assert x is not None
    x = x.astype(np.float32)
    lo = np.float32(min(float(x.min(initial=0.0)), 0.0))
    hi = np.float32(max(float(x.max(initial=0.0)), 0.0))
    q_lo, q_hi = INTEGER_RANGES["uint8"]
    scale = np.float32((hi - lo) / np.float32(q_hi - q_lo))
    if scale == 0:
        zp = np.float32(0.0)
        q = np.zeros(x.shape, np.float32)
    else:
        zp = np.clip(np.rint(np.float32(q_lo) - lo / scale), q_lo, q_hi)
        q = np.clip(np.rint(x / scale) + zp, q_lo, q_hi)
    return [q.astype(np.uint8), np.asarray(scale, np.float32), np.asarray(zp).astype(np.uint8)]


def _dynamic_shape(op: Op, tensors: Tensors, ins: Shapes, n: int) -> Shapes:
    x = ins[0]
    assert x is not None
    out: Shapes = [tuple(x), (), ()]
    return out[:n]


def _unsupported(op: Op, tensors: Tensors) -> str | None:
    """Blocked quantization, integer types other than 8/16-bit (32-bit for DequantizeLinear),
    and per-axis parameters of an activation along another axis than the channels (1)."""
    if len(op.inputs) < 2 or not op.inputs[1]:
        return "a scale input is required"
    if attr_i(op, "block_size"):
        return f"blocked quantization (block_size={attr_i(op, 'block_size')}) is not supported"
    codes = op.inputs[0] if op.op_type == "DequantizeLinear" else (op.inputs[2:3] or ("",))[0]
    dtype = tensors[codes].dtype if codes in tensors else DEFAULT_QUANT_DTYPE
    if dtype not in INTEGER_RANGES or (dtype == "int32" and op.op_type == "QuantizeLinear"):
        return f"quantized type {dtype} is not supported (int8, uint8, int16, uint16)"
    scale = tensors.get(op.inputs[1])
    x = tensors.get(op.inputs[0])
    per_axis = scale is not None and x is not None and scale.numel > 1
    if per_axis and x is not None and attr_i(op, "axis") % max(len(x.shape), 1) != 1:
        return "per-axis quantization of an activation along another axis than 1"
    return None


def grid_of(graph: Graph, op: Op) -> QuantParams | None:
    """The integer grid a DequantizeLinear's output lies on (constant scale and zero point),
    or ``None`` (not a dequantization, or its parameters are not constants)."""
    if op.op_type != "DequantizeLinear":
        return None
    return quant_params(graph, op)


def quant_params(graph: Graph, op: Op) -> QuantParams | None:
    """Scale, zero point, axis and code range of a Q or DQ op whose scale is a constant (a
    zero point computed at run time, as DynamicQuantizeLinear's, leaves only its range)."""
    scale = graph.tensors[op.inputs[1]].value
    zp_name = op.inputs[2] if len(op.inputs) > 2 else ""
    zp = graph.tensors[zp_name].value if zp_name else None
    if scale is None:
        return None
    if op.op_type == "DequantizeLinear":
        dtype = graph.tensors[op.inputs[0]].dtype
    else:
        dtype = str(zp.dtype) if zp is not None else DEFAULT_QUANT_DTYPE
    if dtype not in INTEGER_RANGES:
        return None
    rank = len(graph.tensors[op.inputs[0]].shape)
    axis = attr_i(op, "axis") % max(rank, 1) if np.asarray(scale).size > 1 else None
    return QuantParams.of(scale, zp, dtype, axis, runtime_zero_point=bool(zp_name) and zp is None)


OPS = (
    OpDef("QuantizeLinear", _ELEMWISE, QUANT_DEFAULTS, shape=same_shape, reference=_quantize,
          unsupported=_unsupported, data_input=2),
    OpDef("DequantizeLinear", _ELEMWISE, QUANT_DEFAULTS, shape=same_shape,
          reference=_dequantize, unsupported=_unsupported, data_input=1),
    OpDef("DynamicQuantizeLinear", shape=_dynamic_shape, reference=_dynamic_quantize,
          out_dtypes={0: "uint8", 1: "float32", 2: "uint8"}),
)  # fmt: skip
