"""A node checked against its ONNX schema before it is imported (issue 24).

The op registry's shape rules and kernels assume a well-formed node: an attribute of the type
the operator declares, its required inputs present, the inputs one type variable binds of one
kind (float, integer, boolean; a folded constant may be wider than the exporter's). A
hand-edited or broken export can break each, and the rule then fails deep inside with a bare
``TypeError`` or ``IndexError``. :func:`node_problem` names the op, the attribute or input and
what the schema allows instead. Ops of other domains, and types the installed ``onnx`` has no
schema for, are not checked (they load as OPAQUE).
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
from onnx import defs

_ATTR_NAMES = {int(v): k for k, v in onnx.AttributeProto.AttributeType.items()}


def node_problem(
    node: onnx.NodeProto, name: str, opset: int, dtype_of: Callable[[str], str]
) -> str | None:
    """What is wrong with ``node`` by its schema at ``opset`` (``None``: nothing found).

    Args:
        node: the ONNX node (default domain).
        name: its name as messages give it.
        opset: the model's default-domain opset.
        dtype_of: the element type of an input already imported (``""``: not known).
    """
    try:
        schema = defs.get_schema(node.op_type, opset, "")
    except defs.SchemaError:
        return None
    where = f"op '{name}' ({node.op_type})"
    for attr in node.attribute:
        declared = schema.attributes.get(attr.name)
        if declared is None:
            continue  # not the schema's: left to the op's rules
        want = getattr(declared.type, "name", "")  # OpSchema.AttrType: INT, INTS, FLOAT, ...
        got = _ATTR_NAMES.get(int(attr.type), "")
        if want and want != got:
            return f"{where}: attribute '{attr.name}' must be {want}, got {got}"
    formal = list(schema.inputs)
    single = defs.OpSchema.FormalParameterOption.Single
    for k, param in enumerate(formal):
        given = k < len(node.input) and node.input[k] != ""
        if param.option == single and not given:
            return f"{where}: input {k} ('{param.name}') is required but missing"
    bound: dict[str, tuple[str, str]] = {}
    for k, tensor in enumerate(node.input):
        if not tensor or not formal:
            continue
        param = formal[min(k, len(formal) - 1)]
        if k >= len(formal) and param.option != defs.OpSchema.FormalParameterOption.Variadic:
            continue
        if param.option == defs.OpSchema.FormalParameterOption.Variadic and not (
            param.is_homogeneous
        ):
            continue
        dtype = dtype_of(tensor)
        if not dtype:
            continue
        first = bound.setdefault(param.type_str, (tensor, dtype))
        if _kind(first[1]) != _kind(dtype) and _is_type_variable(schema, param.type_str):
            return (
                f"{where}: inputs '{first[0]}' ({first[1]}) and '{tensor}' ({dtype}) must have "
                f"the same element type (type variable {param.type_str} of the ONNX schema)"
            )
    return None


def _kind(dtype: str) -> str:
    """Float, integer, boolean or other: the width of a folded constant may differ from the
    exporter's (float64 from a fold), its kind may not."""
    if dtype.startswith(("float", "bfloat")):
        return "float"
    if dtype.startswith(("int", "uint")):
        return "integer"
    return dtype


def _is_type_variable(schema: defs.OpSchema, type_str: str) -> bool:
    return any(c.type_param_str == type_str for c in schema.type_constraints)


__all__ = ["node_problem"]
