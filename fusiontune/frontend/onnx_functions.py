"""Inline the model-local ONNX functions of a model (calls become their bodies).

Used by the importer: a model whose nodes call local functions (fusiontune's exported plans,
exporters that keep modules as functions) loads as the ops of the function bodies. Each
body's formal inputs and outputs are bound to the call's arguments; attribute references
(``ref_attr_name``) take the call's attribute or the function's default, and are dropped
when neither exists (an absent attribute, as ONNX defines it). Names of tensors and nodes
inside a body are kept unless they clash with a name already in use, then suffixed
``__<k>``; names inside control-flow subgraphs of a body are not renamed. Calls inside a
body are inlined too, up to :data:`MAX_FUNCTION_DEPTH` levels (recursion is refused).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import onnx

from fusiontune.errors import ModelLoadError

MAX_FUNCTION_DEPTH = 32
"""Deepest nesting of function calls inlined (a deeper chain is taken as recursion)."""

FunctionKey = tuple[str, str, str]  # (domain, name, overload)


def function_key(node: onnx.NodeProto) -> FunctionKey:
    """The key of the local function a node calls (if any function has it)."""
    return (node.domain, node.op_type, getattr(node, "overload", ""))


def inline_local_functions(
    model: onnx.ModelProto, where: str = "model"
) -> tuple[list[onnx.NodeProto], list[int]]:
    """The model's nodes with every local-function call replaced by its body.

    Returns:
        The nodes, and for each one the index of the top-level node of ``model.graph`` it
        comes from (a call's body nodes share the call's index).

    Raises:
        ModelLoadError: functions call each other deeper than :data:`MAX_FUNCTION_DEPTH`.
    """
    top = list(model.graph.node)
    if not model.functions:
        return top, list(range(len(top)))
    functions = {(f.domain, f.name, getattr(f, "overload", "")): f for f in model.functions}
    inliner = _Inliner(functions, where)
    inliner.reserve(_graph_names(model.graph))
    inliner.node_names.update(n.name for n in top if n.name)
    nodes: list[onnx.NodeProto] = []
    origin: list[int] = []
    for i, node in enumerate(top):
        for expanded in inliner.expand(node, 0):
            nodes.append(expanded)
            origin.append(i)
    return nodes, origin


def _graph_names(graph: onnx.GraphProto) -> Iterable[str]:
    yield from (v.name for v in graph.input)
    yield from (v.name for v in graph.output)
    yield from (t.name for t in graph.initializer)
    for node in graph.node:
        yield from (t for t in node.output if t)
        yield from (t for t in node.input if t)


@dataclass
class _Inliner:
    functions: dict[FunctionKey, onnx.FunctionProto]
    where: str
    tensor_names: set[str] = field(default_factory=set)
    node_names: set[str] = field(default_factory=set)

    def reserve(self, names: Iterable[str]) -> None:
        self.tensor_names.update(names)

    def _fresh(self, name: str, taken: set[str]) -> str:
        if name not in taken:
            taken.add(name)
            return name
        k = 1
        while f"{name}__{k}" in taken:
            k += 1
        taken.add(f"{name}__{k}")
        return f"{name}__{k}"

    def expand(self, node: onnx.NodeProto, depth: int) -> list[onnx.NodeProto]:
        fn = self.functions.get(function_key(node))
        if fn is None:
            return [node]
        if depth >= MAX_FUNCTION_DEPTH:
            raise ModelLoadError(
                f"{self.where}: local function '{fn.domain}::{fn.name}' calls functions "
                f"{MAX_FUNCTION_DEPTH} levels deep (recursion?); such models are not supported"
            )
        rename: dict[str, str] = {"": ""}
        for k, formal in enumerate(fn.input):
            rename[formal] = node.input[k] if k < len(node.input) else ""
        for k, formal in enumerate(fn.output):
            rename[formal] = node.output[k] if k < len(node.output) else ""
        given = {a.name: a for a in node.attribute}
        defaults = {a.name: a for a in fn.attribute_proto}
        out: list[onnx.NodeProto] = []
        for body_node in fn.node:
            inner = onnx.NodeProto()
            inner.CopyFrom(body_node)
            for names in (inner.input, inner.output):
                for k, name in enumerate(names):
                    if name not in rename:
                        rename[name] = self._fresh(name, self.tensor_names)
                    names[k] = rename[name]
            if inner.name:
                inner.name = self._fresh(inner.name, self.node_names)
            del inner.attribute[:]
            for attr in body_node.attribute:
                if not attr.ref_attr_name:
                    inner.attribute.append(attr)
                    continue
                source = given.get(attr.ref_attr_name) or defaults.get(attr.ref_attr_name)
                if source is not None:
                    bound = inner.attribute.add()
                    bound.CopyFrom(source)
                    bound.name = attr.name
            out += self.expand(inner, depth + 1)
        return out
