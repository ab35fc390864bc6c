"""Export a :class:`~fusiontune.ir.graph.Graph` to ONNX so onnxruntime can check it.

Constants become initializers; attributes are converted to ONNX attributes (tuples become
int/float lists, ndarrays become tensors). Operands that moved from attributes to inputs
between opsets (Reduce*/Squeeze/Unsqueeze ``axes``, Split ``split``) are rewritten for the
target opset, so a graph imported from an old model exports to a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
        FusiontuneError: the opset is out of range, an op does not exist at that opset, or an
            operand that must be constant for the conversion is not.
    """
    import onnx
    from onnx import helper, numpy_helper

    latest = onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= opset <= latest:
        raise FusiontuneError(
            f"to_onnx: opset {opset} is not supported; allowed: {MIN_OPSET}..{latest}"
        )
    initializers = [
        numpy_helper.from_array(np.asarray(t.value), name)
        for name, t in graph.tensors.items()
        if t.value is not None
    ]
    nodes = []
    for op in graph.ops:
        inputs, attrs, extra = _operands_for_opset(op, graph, opset)
        initializers.extend(numpy_helper.from_array(v, n) for n, v in extra.items())
        _check_schema(op, opset)
        nodes.append(
            helper.make_node(
                op.op_type, inputs, _outputs(op), name=op.name, domain=op.domain or None,
                **{k: _attr_value(op, k, v) for k, v in attrs.items()},
            )
        )  # fmt: skip
    onnx_graph = helper.make_graph(
        nodes,
        graph.name,
        [_value_info(graph.tensors[n]) for n in graph.inputs],
        [_value_info(graph.tensors[n]) for n in graph.outputs],
        initializer=initializers,
    )
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, 1) for d in sorted({op.domain for op in graph.ops} - {""})]
    model = helper.make_model(
        onnx_graph,
        opset_imports=opsets,
        producer_name="fusiontune",
        ir_version=helper.find_min_ir_version_for(opsets[:1]),
    )
    onnx.checker.check_model(model)
    if path is not None:
        onnx.save(model, str(path))
    return model


def _value_info(t: Tensor) -> onnx.ValueInfoProto:
    from onnx import helper

    elem = helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype))
    return helper.make_tensor_value_info(t.name, elem, list(t.shape))


def _check_schema(op: Op, opset: int) -> None:
    import onnx

    if op.domain not in ("", "ai.onnx"):
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
    default_domain = op.domain in ("", "ai.onnx")
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


def _attr_value(op: Op, key: str, value: Any) -> Any:
    """One IR attribute value as something ``onnx.helper.make_attribute`` accepts."""
    from onnx import numpy_helper

    if isinstance(value, np.ndarray):
        return numpy_helper.from_array(value, f"{op.name}.{key}")
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, (tuple, list)):
        items = [_SCALAR.get(type(v), lambda v: v)(v) for v in value]
        if not items:
            raise FusiontuneError(
                f"to_onnx: op '{op.name}' attribute '{key}' is an empty list; ONNX needs a type"
            )
        return items
    return value


_SCALAR: Mapping[type, Callable[[Any], Any]] = {
    np.int64: int,
    np.int32: int,
    np.float32: float,
    np.float64: float,
    bool: int,
    np.bool_: int,
}
