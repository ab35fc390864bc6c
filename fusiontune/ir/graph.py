"""The graph IR: immutable tensors, ops and graphs (DESIGN §2).

A :class:`Graph` holds tensors by name and ops in topological order. Activations have
``value is None``; constants (weights, shape vectors) carry a read-only numpy array.
Layout is NCHW as in ONNX; the batch dimension is explicit.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any

import numpy as np

from fusiontune.errors import GraphLintError
from fusiontune.ir.opclass import OpClass
from fusiontune.ir.quant import QuantParams
from fusiontune.ops import classify, def_of, infer_op_shapes, matrix_shape

AttrValue = Any  # int | float | str | tuple[int, ...] | tuple[float, ...] | np.ndarray


@dataclass(frozen=True, eq=False)
class Tensor:
    """A named tensor.

    Attributes:
        name: unique name within the graph.
        shape: static shape, every dimension a positive int.
        dtype: numpy dtype name ("float32", "int64", ...).
        value: the constant's data (read-only) for weights and other constants; ``None``
            for activations, which are computed at run time.
        quant: the integer grid of a constant the importer dequantized (a QDQ model's
            weight: ``value`` is ``scale * (code - zero_point)`` exactly), else ``None``.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    value: np.ndarray | None = None
    quant: QuantParams | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if self.value is not None:
            value = np.asarray(self.value)
            # copy unless the data can never change: a read-only view of a writable base
            # could still change under us, a read-only view of read-only data cannot (the
            # zoo's placeholder weights are such views of one frozen zero)
            if not _frozen(value):
                value = value.copy()
                value.flags.writeable = False
            object.__setattr__(self, "value", value)

    @property
    def is_constant(self) -> bool:
        return self.value is not None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def _frozen(value: np.ndarray) -> bool:
    """Whether ``value`` and every array it is a view of are read-only, down to data that
    owns itself or an immutable ``bytes`` (ONNX raw data): then nobody can change it."""
    arr: object = value
    while isinstance(arr, np.ndarray):
        if arr.flags.writeable:
            return False
        if arr.base is None:
            return True
        arr = arr.base
    return isinstance(arr, bytes)


@dataclass(frozen=True, eq=False)
class Op:
    """One operator.

    Attributes:
        name: unique op name.
        op_type: ONNX op type ("Conv", "Relu", ...).
        inputs: input tensor names in ONNX order; "" marks an omitted optional input.
        outputs: output tensor names; "" marks an omitted optional output.
        attrs: ONNX attributes (read-only mapping).
        op_class: derived class (DESIGN §3), filled in by :class:`Graph`.
        domain: ONNX domain ("" is the default domain).
    """

    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, AttrValue] = field(default_factory=dict)
    op_class: OpClass = OpClass.OPAQUE
    domain: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "attrs", MappingProxyType(dict(self.attrs)))

    def attr(self, key: str, default: AttrValue = None) -> AttrValue:
        return self.attrs.get(key, default)

    @property
    def output(self) -> str:
        """The first output (most ops have exactly one)."""
        return self.outputs[0]


@dataclass(frozen=True, eq=False)
class Graph:
    """An operator graph with static shapes.

    Attributes:
        name: model name.
        tensors: every tensor (activations and constants) by name.
        ops: ops in topological order; their ``op_class`` is derived on construction.
        inputs: graph inputs (activations fed by the user).
        outputs: graph outputs.
    """

    name: str
    tensors: Mapping[str, Tensor]
    ops: tuple[Op, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def __post_init__(self) -> None:
        tensors = MappingProxyType(dict(self.tensors))
        object.__setattr__(self, "tensors", tensors)
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))

        def is_constant(name: str) -> bool:
            t = tensors.get(name)
            return t is not None and t.is_constant

        classified = tuple(
            replace(op, op_class=classify(op, is_constant, tensors)) for op in self.ops
        )
        object.__setattr__(self, "ops", classified)

    # ---- derived maps -------------------------------------------------------------------
    @cached_property
    def op_by_name(self) -> Mapping[str, Op]:
        return MappingProxyType({op.name: op for op in self.ops})

    @cached_property
    def op_index(self) -> Mapping[str, int]:
        """Position of each op in topological order."""
        return MappingProxyType({op.name: i for i, op in enumerate(self.ops)})

    @cached_property
    def producer_map(self) -> Mapping[str, str]:
        """Tensor name -> name of the op producing it."""
        out: dict[str, str] = {}
        for op in self.ops:
            for t in op.outputs:
                if t:
                    out.setdefault(t, op.name)
        return MappingProxyType(out)

    @cached_property
    def consumer_map(self) -> Mapping[str, tuple[str, ...]]:
        """Tensor name -> names of the ops reading it (each op once, in topological order)."""
        out: dict[str, list[str]] = {}
        for op in self.ops:
            for t in dict.fromkeys(op.inputs):
                if t:
                    out.setdefault(t, []).append(op.name)
        return MappingProxyType({k: tuple(v) for k, v in out.items()})

    def op(self, name: str) -> Op:
        return self.op_by_name[name]

    def tensor(self, name: str) -> Tensor:
        return self.tensors[name]

    def producer(self, tensor: str) -> Op | None:
        name = self.producer_map.get(tensor)
        return None if name is None else self.op_by_name[name]

    def consumers(self, tensor: str) -> tuple[Op, ...]:
        return tuple(self.op_by_name[n] for n in self.consumer_map.get(tensor, ()))

    def is_constant(self, tensor: str) -> bool:
        t = self.tensors.get(tensor)
        return t is not None and t.is_constant

    def activation_inputs(self, op: Op) -> tuple[str, ...]:
        """Distinct non-constant inputs of ``op``, in input order."""
        return tuple(t for t in dict.fromkeys(op.inputs) if t and not self.is_constant(t))

    def constant_inputs(self, op: Op) -> tuple[str, ...]:
        return tuple(t for t in op.inputs if t and self.is_constant(t))

    def predecessors(self, op_name: str) -> tuple[str, ...]:
        """Ops producing an activation input of ``op_name`` (distinct, topological order)."""
        op = self.op_by_name[op_name]
        preds = {self.producer_map[t] for t in self.activation_inputs(op) if t in self.producer_map}
        return tuple(sorted(preds, key=self.op_index.__getitem__))

    def successors(self, op_name: str) -> tuple[str, ...]:
        """Ops reading an output of ``op_name`` (distinct, topological order)."""
        op = self.op_by_name[op_name]
        succ = {c for t in op.outputs if t for c in self.consumer_map.get(t, ())}
        return tuple(sorted(succ, key=self.op_index.__getitem__))

    @cached_property
    def activation_tensors(self) -> tuple[str, ...]:
        """Graph inputs then every op output, in topological order."""
        names = list(self.inputs)
        names += [t for op in self.ops for t in op.outputs if t]
        return tuple(names)

    # ---- sizes --------------------------------------------------------------------------
    def op_params(self, op: Op) -> int:
        """Number of constant parameters an op holds (weights, biases, BN statistics)."""
        if op.op_class is OpClass.LAYOUT:
            return 0
        return sum(self.tensors[t].numel for t in self.constant_inputs(op))

    def op_macs(self, op: Op) -> int:
        """Multiply-accumulates of a LINEAR op (0 for other classes): one per weight per
        matrix-vector product of its crossbar matrix."""
        if op.op_class is not OpClass.LINEAR:
            return 0
        rows, cols, count, vectors, _ = matrix_shape(self, op)
        return rows * cols * count * vectors

    @cached_property
    def total_macs(self) -> int:
        return sum(self.op_macs(op) for op in self.ops)

    @cached_property
    def total_params(self) -> int:
        return sum(self.op_params(op) for op in self.ops)

    # ---- invariants ---------------------------------------------------------------------
    def lint(self) -> Graph:
        """Check the IR invariants; raise :class:`GraphLintError` listing every problem.

        Checks: every op input is a graph input, a constant or produced by an earlier op
        (topological order, no cycle); every tensor is produced once; names are unique;
        every output tensor is known; shapes agree with shape inference. Returns ``self``.
        """
        problems: list[str] = []
        seen_ops: set[str] = set()
        available = set(self.inputs) | {n for n, t in self.tensors.items() if t.is_constant}
        produced: dict[str, str] = {}
        for name in self.inputs:
            if name not in self.tensors:
                problems.append(f"graph input '{name}' has no tensor entry")
            elif self.tensors[name].is_constant:
                problems.append(f"graph input '{name}' is a constant")
        for op in self.ops:
            if op.name in seen_ops:
                problems.append(f"op name '{op.name}' is used twice")
            seen_ops.add(op.name)
            for t in op.inputs:
                if t and t not in available:
                    later = any(t in o.outputs for o in self.ops)
                    why = (
                        "is produced later (cycle or ops out of order)"
                        if later
                        else ("is never produced")
                    )
                    problems.append(f"op '{op.name}' reads '{t}', which {why}")
            for t in op.outputs:
                if not t:
                    continue
                if t in produced:
                    problems.append(
                        f"tensor '{t}' is produced twice (by '{produced[t]}' and '{op.name}')"
                    )
                elif t in self.inputs or self.is_constant(t):
                    problems.append(f"op '{op.name}' overwrites input/constant '{t}'")
                produced[t] = op.name
                available.add(t)
                if t not in self.tensors:
                    problems.append(f"op '{op.name}' output '{t}' has no tensor entry")
        for t in self.outputs:
            if t not in available:
                problems.append(f"graph output '{t}' is never produced")
        if not problems:
            for op in self.ops:
                if op.op_class is OpClass.OPAQUE and not def_of(op).lint_opaque:
                    continue
                try:
                    shapes = infer_op_shapes(op, self.tensors)
                except Exception as exc:  # reported as a lint problem
                    named = str(exc).startswith(f"op '{op.name}'")  # ShapeErrors name the op
                    problems.append(str(exc) if named else f"op '{op.name}' ({op.op_type}): {exc}")
                    continue
                for t, shape in zip(op.outputs, shapes):
                    if t and shape is not None and self.tensors[t].shape != tuple(shape):
                        problems.append(
                            f"op '{op.name}' ({op.op_type}) output '{t}' has shape "
                            f"{self.tensors[t].shape}, shape inference gives {tuple(shape)}"
                        )
        if problems:
            raise GraphLintError(f"graph '{self.name}': " + "; ".join(problems))
        return self

    # ---- identity -----------------------------------------------------------------------
    @cached_property
    def structural_hash(self) -> str:
        """SHA-256 over op types, attributes, wiring, shapes, dtypes and constant bytes.

        Stable across processes and Python versions (no ``hash()``); changes when a shape,
        an attribute or a weight changes. Tensor names are part of the wiring.
        """
        h = hashlib.sha256()
        for name in sorted(self.tensors):
            t = self.tensors[name]
            h.update(json.dumps([name, list(t.shape), t.dtype]).encode())
            if t.value is not None:
                h.update(np.ascontiguousarray(t.value).tobytes())
            if t.quant is not None:  # absent from the hash of every unquantized graph
                h.update(t.quant.key())
        for op in self.ops:
            attrs = {k: _attr_for_hash(v) for k, v in sorted(op.attrs.items())}
            record = [op.name, op.domain, op.op_type, list(op.inputs), list(op.outputs), attrs]
            h.update(json.dumps(record, sort_keys=True).encode())
        h.update(json.dumps([list(self.inputs), list(self.outputs)]).encode())
        return h.hexdigest()

    def replace(self, **changes: Any) -> Graph:
        """A new Graph with some fields changed (ops are re-classified)."""
        return replace(self, **changes)

    def subgraph_ops(self, names: Iterable[str]) -> tuple[Op, ...]:
        """The named ops in topological order."""
        return tuple(
            sorted((self.op_by_name[n] for n in names), key=lambda o: self.op_index[o.name])
        )


def _attr_for_hash(value: AttrValue) -> Any:
    if isinstance(value, np.ndarray):
        return [
            "ndarray",
            value.dtype.str,
            list(value.shape),
            hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest(),
        ]
    if isinstance(value, (tuple, list)):
        return [_attr_for_hash(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    return value
