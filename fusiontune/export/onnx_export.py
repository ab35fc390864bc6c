"""Export a :class:`~fusiontune.ir.graph.Graph` to ONNX so onnxruntime can check it.

Constants become initializers; attributes are converted to ONNX attributes (tuples become
int/float lists, ndarrays become tensors). Operands that moved from attributes to inputs
between opsets (an OpDef's ``operand``: Reduce*/Squeeze/Unsqueeze ``axes``, Split ``split``)
are rewritten for the target opset, and ops whose form changed otherwise (an OpDef's
``export``: a training-mode batch norm, Split's ``num_outputs``) are written as the
target opset wants them, so a graph imported from an old model exports to a new one. An op
newer than the target opset that has an ``expand`` (RMSNormalization before opset 23) is
written as the older ops it expands to (:func:`spelled_ops`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fusiontune.errors import FusiontuneError
from fusiontune.ir.graph import Graph, Op, Tensor
from fusiontune.ops import def_of

if TYPE_CHECKING:
    import onnx

DEFAULT_OPSET = 21  # Gelu needs >= 20 (onnx.ai/onnx/operators/onnx__Gelu.html)
MIN_OPSET = 13  # Reduce/Squeeze/Unsqueeze/Split operand forms are written for >= 13

ATTENTION_OPSET = 23  # ONNX has Attention (a fused attention, pattern P5) from opset 23 on


def opset_for(graph: Graph) -> int:
    """The default opset to export ``graph`` at: :data:`DEFAULT_OPSET`, or
    :data:`ATTENTION_OPSET` when it holds a fused attention (``fuse_attention``; the command
    line fuses by default)."""
    from fusiontune.ops import AttentionRole, attention_role

    fused = any(attention_role(op) is AttentionRole.FUSED for op in graph.ops)
    return max(DEFAULT_OPSET, ATTENTION_OPSET) if fused else DEFAULT_OPSET


CUSTOM_DOMAIN_VERSION = 1  # opset version declared for any non-default op domain
_DEFAULT_DOMAINS = frozenset({"", "ai.onnx"})


def to_onnx(
    graph: Graph, path: str | Path | None = None, opset: int = DEFAULT_OPSET
) -> onnx.ModelProto:
    """Convert a graph to a checked ONNX model.

    Args:
        graph: the graph to export.
        path: where to write the ``.onnx`` file (not written when ``None``).
        opset: default-domain opset to target (``MIN_OPSET`` up to what onnx knows).

    Returns:
        The model, which passes ``onnx.checker.check_model``.

    Raises:
        FusiontuneError: the opset is out of range, an op does not exist at that opset, an
            operand that must be constant for the conversion is not, the model fails the
            ONNX checker, or ``path`` cannot be written.
    """
    import onnx
    from onnx import helper

    latest = onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= opset <= latest:
        raise FusiontuneError(
            f"to_onnx: opset {opset} is not supported; allowed: {MIN_OPSET}..{latest}"
        )
    model = onnx.ModelProto()
    model.producer_name = "fusiontune"
    opsets = [helper.make_opsetid("", opset)]
    custom = sorted({op.domain for op in graph.ops} - _DEFAULT_DOMAINS)
    opsets += [helper.make_opsetid(d, CUSTOM_DOMAIN_VERSION) for d in custom]
    model.ir_version = helper.find_min_ir_version_for(opsets[:1])
    model.opset_import.extend(opsets)
    # fill the model's graph in place: weights are copied once (make_graph and make_model
    # would copy every initializer twice more, seconds for VGG's fully connected layers)
    out = model.graph
    out.name = graph.name
    for name, t in graph.tensors.items():
        if t.value is not None and t.quant is not None:  # a dequantized weight: its codes
            from fusiontune.frontend.onnx_quant import quantized_initializer

            parts, dequantize = quantized_initializer(name, np.asarray(t.value), t.quant)
            for part, value in parts:
                _fill_tensor(out.initializer.add(), part, value)
            out.node.append(dequantize)
        elif t.value is not None:
            _fill_tensor(out.initializer.add(), name, np.asarray(t.value))
    for graph_op in graph.ops:
        spelled, constants = spelled_ops(graph_op, graph, opset)
        for name, value in constants.items():
            _fill_tensor(out.initializer.add(), name, value)
        for op in spelled:
            inputs, attrs, outputs, extra = _form_for_opset(op, graph, opset)
            for name, value in extra.items():
                _fill_tensor(out.initializer.add(), name, value)
            _check_schema(op, opset)
            domain = None if op.domain in _DEFAULT_DOMAINS else op.domain
            node = helper.make_node(op.op_type, inputs, outputs, name=op.name, domain=domain)
            node.attribute.extend(_attribute(op, k, v) for k, v in sorted(attrs.items()))
            out.node.append(node)
    out.input.extend(_value_info(graph.tensors[n]) for n in graph.inputs)
    out.output.extend(_value_info(graph.tensors[n]) for n in graph.outputs)
    data = model.SerializeToString()  # once, for the checker and the file
    try:
        onnx.checker.check_model(data)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FusiontuneError(f"to_onnx: graph '{graph.name}' is not valid ONNX: {first}") from None
    if path is not None:
        try:
            Path(path).write_bytes(data)
        except OSError as exc:
            raise FusiontuneError(f"to_onnx: cannot write '{path}': {exc.strerror}") from None
    return model


def _fill_tensor(proto: onnx.TensorProto, name: str, value: np.ndarray) -> None:
    """Write ``value`` into an empty TensorProto (raw little-endian bytes for numbers)."""
    from onnx import helper, numpy_helper

    if value.dtype.kind not in "biuf":
        proto.CopyFrom(numpy_helper.from_array(value, name))
        return
    proto.name = name
    proto.data_type = helper.np_dtype_to_tensor_dtype(value.dtype)
    proto.dims.extend(value.shape)
    proto.raw_data = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes()


def _value_info(t: Tensor) -> onnx.ValueInfoProto:
    from onnx import helper

    elem = helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype))
    return helper.make_tensor_value_info(t.name, elem, list(t.shape))


def spelled_ops(op: Op, graph: Graph, opset: int) -> tuple[list[Op], dict[str, np.ndarray]]:
    """The ops ``op`` is written as at ``opset`` and the constants they add: the op itself, or
    its OpDef's ``expand`` when the opset is older than the op (``onnx_since``)."""
    d = def_of(op)
    if d.expand is not None and d.onnx_since is not None and opset < d.onnx_since:
        return d.expand(op, graph)
    return [op], {}


def _check_schema(op: Op, opset: int) -> None:
    import onnx

    if op.domain not in _DEFAULT_DOMAINS:
        return
    try:
        onnx.defs.get_schema(op.op_type, opset, "")
    except onnx.defs.SchemaError:
        raise FusiontuneError(
            f"to_onnx: op '{op.name}' has type '{op.op_type}', which ONNX opset {opset} "
            "does not define; choose a newer opset"
        ) from None


def _form_for_opset(
    op: Op, graph: Graph, opset: int
) -> tuple[list[str], dict[str, Any], list[str], dict[str, np.ndarray]]:
    """Inputs, attributes, outputs and new initializers of ``op`` as ``opset`` expects them."""
    inputs, attrs, outputs = list(op.inputs), dict(op.attrs), list(op.outputs)
    extra: dict[str, np.ndarray] = {}
    d = def_of(op)
    if d.export is not None:
        inputs, attrs, outputs = d.export(op, graph, opset, inputs, attrs, outputs)
    if d.operand is None:
        return inputs, attrs, outputs, extra
    key, index, since = d.operand.attr, d.operand.index, d.operand.since
    has_input = len(inputs) > index and bool(inputs[index])
    if opset >= since and key in attrs:
        name = f"{op.name}.{key}"
        extra[name] = np.asarray(attrs.pop(key), dtype=np.int64).reshape(-1)
        inputs += [""] * (index + 1 - len(inputs))
        inputs[index] = name
    elif opset < since and has_input:
        value = graph.tensors[inputs[index]].value
        if value is None:
            raise FusiontuneError(
                f"to_onnx: op '{op.name}' ({op.op_type}) reads '{key}' from a computed tensor; "
                f"opset {opset} needs it as a constant attribute (use opset >= {since})"
            )
        attrs[key] = tuple(int(v) for v in np.asarray(value).reshape(-1))
        inputs = inputs[:index] + inputs[index + 1 :]
    return _trim(inputs), attrs, outputs, extra


def _trim(inputs: list[str]) -> list[str]:
    while inputs and not inputs[-1]:
        inputs.pop()
    return inputs


def _attribute(op: Op, key: str, value: Any) -> onnx.AttributeProto:
    """One IR attribute as an ONNX attribute.

    ndarrays become TENSOR, tuples of ints/floats/strings become INTS/FLOATS/STRINGS (an
    empty tuple becomes an empty INTS), scalars INT/FLOAT/STRING. Serialized subgraphs
    (bytes) are not supported.
    """
    import onnx
    from onnx import helper, numpy_helper

    if isinstance(value, bytes):
        raise FusiontuneError(
            f"to_onnx: op '{op.name}' ({op.op_type}) attribute '{key}' holds bytes (a "
            "subgraph?); only ints, floats, strings, their tuples and ndarrays are exported"
        )
    if isinstance(value, np.ndarray):
        return helper.make_attribute(key, numpy_helper.from_array(value, f"{op.name}.{key}"))
    if isinstance(value, (tuple, list)):
        if not value:
            return helper.make_attribute(key, [], attr_type=onnx.AttributeProto.INTS)
        if all(isinstance(v, np.ndarray) for v in value):
            return helper.make_attribute(
                key,
                [numpy_helper.from_array(v, f"{op.name}.{key}{i}") for i, v in enumerate(value)],
            )
        return helper.make_attribute(key, [_scalar(v) for v in value])
    return helper.make_attribute(key, _scalar(value))


def _scalar(value: Any) -> Any:
    """numpy scalars and bools as the Python int/float make_attribute expects."""
    if isinstance(value, (bool, np.bool_, np.integer)):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value
