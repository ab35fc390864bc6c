"""Quantized ONNX models: the operator forms spelled out, and the grids of dequantized weights.

Called by :mod:`fusiontune.frontend.onnx_import` at two points:

1. :func:`expand_quantized_ops` (before the nodes are imported) rewrites each quantized
   *operator* into the QDQ form it is defined by (the ONNX and onnxruntime specifications):
   ``QLinearConv`` -> DequantizeLinear(x) -> Conv(DequantizeLinear(w), DequantizeLinear(bias,
   x_scale * w_scale)) -> QuantizeLinear(y); ``QLinearMatMul`` likewise with MatMul;
   ``ConvInteger`` / ``MatMulInteger`` -> Conv / MatMul of the zero-point-shifted operands
   (DequantizeLinear with scale 1) -> Cast to int32 (or, when a Cast to float is its only
   reader, as onnxruntime's ``quantize_dynamic`` writes it, straight to that float output);
   and onnxruntime's ``com.microsoft`` ``QLinearAdd``, ``QLinearMul``,
   ``QLinearGlobalAveragePool`` (channels first), ``QLinearSoftmax`` and ``QGemm``.
   The dequantized weights are constants, so the importer folds them and the Conv/MatMul/Gemm
   is LINEAR like any float one. A ``QuantizeLinear`` without a zero point gets an explicit
   one (its type then says the code type).
2. :func:`folded_grid` (when a DequantizeLinear of constants is folded) gives the grid the
   folded weight lies on; the importer attaches it to the weight (``Tensor.quant``), where the
   CIM numerics find the model's integer codes.

And :func:`quantized_initializer` is the exporter's way back (``to_onnx``): a weight with a
grid is written as its integer codes and a DequantizeLinear.

Other quantized operators (``QLinearConcat``, ``QAttention``, ...) load as
OPAQUE with the importer's warning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from fusiontune.ir.graph import Op
from fusiontune.ir.quant import INTEGER_RANGES, QuantParams
from fusiontune.ops.base import attr_i

_MS = "com.microsoft"
_DEFAULT = ("", "ai.onnx")
_ONE = "fusiontune.quant.one"  # float32 1.0: the scale of a ConvInteger/MatMulInteger operand


def _attrs(node: onnx.NodeProto, drop: Sequence[str] = ()) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name not in drop}


class _Rewrite:
    """New nodes for one quantized operator, named after it."""

    def __init__(self, node: onnx.NodeProto) -> None:
        self.node = node
        self.nodes: list[onnx.NodeProto] = []

    def add(self, op_type: str, inputs: Sequence[str], suffix: str, name: str = "",
            **attrs: Any) -> str:  # fmt: skip
        out = f"{self.node.output[0]}/{suffix}"
        name = name or f"{self.node.name}/{suffix}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name, **attrs))
        return out

    def dq(self, x: str, scale: str, zp: str, suffix: str, axis: int = 1) -> str:
        ins = [x, scale] + ([zp] if zp else [])
        return self.add("DequantizeLinear", ins, suffix, axis=axis)

    def q(self, y: str, scale: str, zp: str) -> None:
        ins = [y, scale] + ([zp] if zp else [])
        self.nodes.append(
            helper.make_node("QuantizeLinear", ins, [self.node.output[0]], f"{self.node.name}/q")
        )

    def bias(self, b: str, x_scale: str, w_scale: str) -> str:
        scale = self.add("Mul", [x_scale, w_scale], "bias_scale")
        return self.dq(b, scale, "", "bias", axis=0)


def _input(node: onnx.NodeProto, i: int) -> str:
    return node.input[i] if len(node.input) > i else ""


def _qlinear_conv(node: onnx.NodeProto) -> list[onnx.NodeProto]:
    r = _Rewrite(node)
    x, xs, xz, w, ws, wz, ys, yz = (_input(node, i) for i in range(8))
    ins = [r.dq(x, xs, xz, "x"), r.dq(w, ws, wz, "w", axis=0)]
    if _input(node, 8):
        ins.append(r.bias(node.input[8], xs, ws))
    y = r.add("Conv", ins, "conv", name=node.name, **_attrs(node))
    r.q(y, ys, yz)
    return r.nodes


def _qlinear_matmul(node: onnx.NodeProto) -> list[onnx.NodeProto]:
    r = _Rewrite(node)
    a, a_s, az, b, bs, bz, ys, yz = (_input(node, i) for i in range(8))
    y = r.add("MatMul", [r.dq(a, a_s, az, "a"), r.dq(b, bs, bz, "b", axis=-1)], "matmul",
              name=node.name)  # fmt: skip
    r.q(y, ys, yz)
    return r.nodes


def _integer(op_type: str) -> Callable[[onnx.NodeProto], list[onnx.NodeProto]]:
    """ConvInteger / MatMulInteger: the float op of ``x - x_zero_point`` and ``w - w_zero_point``
    (exact integers in float32 while the sums stay below 2**24), cast to int32."""

    def rewrite(node: onnx.NodeProto) -> list[onnx.NodeProto]:
        return _integer_op(op_type, node, None)

    return rewrite


def _integer_op(op_type: str, node: onnx.NodeProto, float_out: str | None) -> list[onnx.NodeProto]:
    """The float form of an integer op; with ``float_out`` its result goes straight to the
    output of the ``Cast`` to float that alone read it (the int32 round trip is the identity
    on these integer values), so no OPAQUE Cast stands between the Conv and its epilogue."""
    r = _Rewrite(node)
    x, w, xz, wz = (_input(node, i) for i in range(4))
    axis = 0 if op_type == "Conv" else -1
    ins = [r.dq(x, _ONE, xz, "x"), r.dq(w, _ONE, wz, "w", axis=axis)]
    if float_out is not None:
        r.nodes.append(helper.make_node(op_type, ins, [float_out], node.name, **_attrs(node)))
        return r.nodes
    y = r.add(op_type, ins, op_type.lower(), name=node.name, **_attrs(node))
    cast = helper.make_node(
        "Cast", [y], [node.output[0]], f"{node.name}/cast", to=onnx.TensorProto.INT32
    )
    r.nodes.append(cast)
    return r.nodes


_INTEGER_OPS = {"ConvInteger": "Conv", "MatMulInteger": "MatMul"}


def _casts_to_float(
    nodes: Sequence[onnx.NodeProto], outputs: frozenset[str]
) -> dict[str, onnx.NodeProto]:
    """Integer op output -> the ``Cast`` to float32 that is its only reader (not a graph output)."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in nodes:
        for t in node.input:
            readers.setdefault(t, []).append(node)
    found = {}
    for node in nodes:
        if node.domain not in _DEFAULT or node.op_type not in _INTEGER_OPS:
            continue
        out = node.output[0]
        (cast, *more) = readers.get(out, [None])
        if more or cast is None or out in outputs or cast.op_type != "Cast":
            continue
        if int(_attrs(cast).get("to", 0)) == onnx.TensorProto.FLOAT:
            found[out] = cast
    return found


def _qlinear_binary(op_type: str) -> Callable[[onnx.NodeProto], list[onnx.NodeProto]]:
    def rewrite(node: onnx.NodeProto) -> list[onnx.NodeProto]:
        r = _Rewrite(node)
        a, a_s, az, b, bs, bz, ys, yz = (_input(node, i) for i in range(8))
        y = r.add(op_type, [r.dq(a, a_s, az, "a"), r.dq(b, bs, bz, "b")], op_type.lower(),
                  name=node.name)  # fmt: skip
        r.q(y, ys, yz)
        return r.nodes

    return rewrite


def _qlinear_global_pool(node: onnx.NodeProto) -> list[onnx.NodeProto] | None:
    if _attrs(node).get("channels_last", 0):
        return None  # NHWC: stays OPAQUE
    r = _Rewrite(node)
    x, xs, xz, ys, yz = (_input(node, i) for i in range(5))
    y = r.add("GlobalAveragePool", [r.dq(x, xs, xz, "x")], "pool", name=node.name)
    r.q(y, ys, yz)
    return r.nodes


def _qlinear_softmax(node: onnx.NodeProto) -> list[onnx.NodeProto]:
    r = _Rewrite(node)
    x, xs, xz, ys, yz = (_input(node, i) for i in range(5))
    attrs = _attrs(node, drop=("opset",))
    y = r.add("Softmax", [r.dq(x, xs, xz, "x")], "softmax", name=node.name, **attrs)
    r.q(y, ys, yz)
    return r.nodes


def _qgemm(node: onnx.NodeProto) -> list[onnx.NodeProto]:
    r = _Rewrite(node)
    a, a_s, az, b, bs, bz, c, ys, yz = (_input(node, i) for i in range(9))
    attrs = _attrs(node)
    trans_b = int(attrs.get("transB", 0))
    ins = [r.dq(a, a_s, az, "a"), r.dq(b, bs, bz, "b", axis=0 if trans_b else 1)]
    if c:
        ins.append(r.bias(c, a_s, bs))
    if ys:
        y = r.add("Gemm", ins, "gemm", name=node.name, **attrs)
        r.q(y, ys, yz)
    else:  # float output
        r.nodes.append(helper.make_node("Gemm", ins, [node.output[0]], node.name, **attrs))
    return r.nodes


_DEFAULT_REWRITES: dict[str, Callable[[onnx.NodeProto], list[onnx.NodeProto] | None]] = {
    "QLinearConv": _qlinear_conv,
    "QLinearMatMul": _qlinear_matmul,
    "ConvInteger": _integer("Conv"),
    "MatMulInteger": _integer("MatMul"),
}
_MS_REWRITES: dict[str, Callable[[onnx.NodeProto], list[onnx.NodeProto] | None]] = {
    "QLinearAdd": _qlinear_binary("Add"),
    "QLinearMul": _qlinear_binary("Mul"),
    "QLinearGlobalAveragePool": _qlinear_global_pool,
    "QLinearSoftmax": _qlinear_softmax,
    "QGemm": _qgemm,
}


def expand_quantized_ops(
    nodes: Sequence[onnx.NodeProto],
    origin: Sequence[int],
    constants: dict[str, np.ndarray],
    outputs: Sequence[str] = (),
) -> tuple[list[onnx.NodeProto], list[int]]:
    """The nodes with each quantized operator replaced by its QDQ form (module docstring).

    Args:
        nodes: the model's nodes (functions inlined).
        origin: each node's top-level node index (kept for every node it becomes).
        constants: the importer's constants; gains the float 1.0 the integer forms need and
            the zero points made explicit.
        outputs: the graph's outputs (an integer op's int32 output that is one keeps its Cast).

    Returns:
        The new nodes and their origins; the model itself is not changed.
    """
    out: list[onnx.NodeProto] = []
    out_origin: list[int] = []
    casts = _casts_to_float(nodes, frozenset(outputs))
    dropped = {id(cast) for cast in casts.values()}
    for node, where in zip(nodes, origin):
        new: list[onnx.NodeProto] | None = None
        if id(node) in dropped:
            continue
        if node.output and node.output[0] in casts:
            cast = casts[node.output[0]]
            new = _integer_op(_INTEGER_OPS[node.op_type], node, cast.output[0])
        elif node.domain in _DEFAULT and node.op_type in _DEFAULT_REWRITES:
            new = _DEFAULT_REWRITES[node.op_type](node)
        elif node.domain == _MS and node.op_type in _MS_REWRITES:
            new = _MS_REWRITES[node.op_type](node)
        elif node.domain in _DEFAULT and node.op_type == "QuantizeLinear":
            new = [_explicit_zero_point(node, constants)]
        if new is None:
            new = [node]
        if any(_ONE in n.input for n in new):
            constants.setdefault(_ONE, np.array(1.0, np.float32))
        out += new
        out_origin += [where] * len(new)
    return out, out_origin


def _explicit_zero_point(node: onnx.NodeProto, constants: dict[str, np.ndarray]) -> onnx.NodeProto:
    """A QuantizeLinear with its zero point as an input (its type is the output's type)."""
    if len(node.input) > 2 and node.input[2]:
        return node
    attrs = _attrs(node, drop=("output_dtype",))
    elem = int(_attrs(node).get("output_dtype", 0) or onnx.TensorProto.UINT8)
    name = f"{node.output[0]}/zero_point"
    constants[name] = np.zeros((), onnx.helper.tensor_dtype_to_np_dtype(elem))
    inputs = [node.input[0], node.input[1], name]
    return helper.make_node("QuantizeLinear", inputs, list(node.output), node.name, **attrs)


def folded_grid(op: Op, values: Sequence[np.ndarray | None]) -> QuantParams | None:
    """The grid of a folded DequantizeLinear's output (its codes were constants), else None."""
    if op.op_type != "DequantizeLinear" or len(values) < 2 or values[0] is None:
        return None
    codes, scale = np.asarray(values[0]), values[1]
    dtype = str(codes.dtype)
    if scale is None or dtype not in INTEGER_RANGES:
        return None
    zp = values[2] if len(values) > 2 else None
    axis = attr_i(op, "axis") % max(codes.ndim, 1) if np.asarray(scale).size > 1 else None
    return QuantParams.of(np.asarray(scale), zp, dtype, axis)


def quantized_initializer(
    name: str, value: np.ndarray, grid: QuantParams
) -> tuple[list[tuple[str, np.ndarray]], onnx.NodeProto]:
    """A dequantized weight written back as its codes: the initializers (codes, scale, zero
    point) and the DequantizeLinear that makes ``name`` from them, so an exported quantized
    model is quantized again (onnxruntime runs its integer kernels, the importer finds the
    grid). The codes reproduce ``value`` exactly (it is ``scale * (code - zero_point)``)."""
    axis = grid.axis
    shape = [1] * value.ndim
    if axis is not None:
        shape[axis] = -1
    scale = grid.scale.astype(np.float32)
    zero = grid.zero_point
    codes = np.rint(value.astype(np.float64) / scale.reshape(shape).astype(np.float64))
    codes = codes + zero.reshape(shape)
    lo, hi = grid.code_range
    codes = np.clip(codes, lo, hi).astype(grid.dtype)
    stem = f"{name}/quantized"
    flat = -1 if axis is not None else ()
    tensors = [(f"{stem}/codes", codes), (f"{stem}/scale", scale.reshape(flat))]
    if grid.dtype != "int32":  # ONNX: an int32 DequantizeLinear (a bias) has no zero point
        tensors.append((f"{stem}/zero_point", zero.astype(grid.dtype).reshape(flat)))
    attrs: dict[str, Any] = {} if axis is None else {"axis": axis}
    node = helper.make_node(
        "DequantizeLinear", [t for t, _ in tensors], [name], f"{stem}/dequantize", **attrs
    )
    return tensors, node
