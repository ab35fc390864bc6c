"""Export a :class:`~fusiontune.ir.graph.Graph` to ONNX so onnxruntime can check it.

Constants become initializers; attributes are converted to ONNX attributes (tuples become
int/float lists, ndarrays become tensors). Operands that moved from attributes to inputs
between opsets (Reduce*/Squeeze/Unsqueeze ``axes``, Split ``split``) are rewritten for the
target opset, so a graph imported from an old model exports to a new one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fusiontune.errors import FusiontuneError
from fusiontune.ir.graph import Graph, Op, Tensor

if TYPE_CHECKING:
    import onnx

DEFAULT_OPSET = 21  # Gelu needs >= 20 (onnx.ai/onnx/operators/onnx__Gelu.html)
MIN_OPSET = 13  # Reduce/Squeeze/Unsqueeze/Split operand forms below are written for >= 13

BN_TRAINING_OUTPUTS = 3  # Y, running_mean, running_var (onnx.ai BatchNormalization-15)

CUSTOM_DOMAIN_VERSION = 1  # opset version declared for any non-default op domain
_DEFAULT_DOMAINS = frozenset({"", "ai.onnx"})
SPLIT_NUM_OUTPUTS_SINCE = 18  # Split-18 needs the 'split' input or 'num_outputs'

_REDUCE_AXES_INPUT_SINCE_18 = (
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceSumSquare", "ReduceLogSumExp",
)  # fmt: skip

# op type -> (attribute, input index, first opset where the operand is an input)
# Source: ONNX operator changelog (onnx/docs/Changelog.md).
ATTR_TO_INPUT: dict[str, tuple[str, int, int]] = {
    "ReduceSum": ("axes", 1, 13),
    "Squeeze": ("axes", 1, 13),
    "Unsqueeze": ("axes", 1, 13),
    "Split": ("split", 1, 13),
    **{t: ("axes", 1, 18) for t in _REDUCE_AXES_INPUT_SINCE_18},
}


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
        if t.value is not None:
            _fill_tensor(out.initializer.add(), name, np.asarray(t.value))
    for op in graph.ops:
        inputs, attrs, extra = _operands_for_opset(op, graph, opset)
        for name, value in extra.items():
            _fill_tensor(out.initializer.add(), name, value)
        _check_schema(op, opset)
        domain = None if op.domain in _DEFAULT_DOMAINS else op.domain
        node = helper.make_node(op.op_type, inputs, _outputs(op), name=op.name, domain=domain)
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


def _operands_for_opset(
    op: Op, graph: Graph, opset: int
) -> tuple[list[str], dict[str, Any], dict[str, np.ndarray]]:
    """Inputs, attributes and new initializers of ``op`` in the form ``opset`` expects."""
    inputs, attrs = list(op.inputs), dict(op.attrs)
    extra: dict[str, np.ndarray] = {}
    default_domain = op.domain in _DEFAULT_DOMAINS
    if default_domain and op.op_type == "Split" and opset >= SPLIT_NUM_OUTPUTS_SINCE:
        has_split = "split" in attrs or (len(inputs) > 1 and bool(inputs[1]))
        if not has_split and "num_outputs" not in attrs:
            attrs["num_outputs"] = len(op.outputs)  # equal split must be explicit since 18
    rule = ATTR_TO_INPUT.get(op.op_type) if default_domain else None
    if rule is None:
        return inputs, attrs, extra
    key, index, since = rule
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
    return _trim(inputs), attrs, extra


def _outputs(op: Op) -> list[str]:
    """Output names; a training-mode BatchNormalization must name all three (ONNX >= 14)."""
    outputs = list(op.outputs)
    if op.op_type == "BatchNormalization" and int(op.attr("training_mode", 0)):
        outputs += [""] * (BN_TRAINING_OUTPUTS - len(outputs))
        outputs = [name or f"{op.name}.out{i}" for i, name in enumerate(outputs)]
    return outputs


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
