"""Execute a plan: every group runs as one fused kernel; only boundary tensors are stored.

Pipeline of one group (:func:`compile_group`, then :class:`_GroupRun`):

1. **merge** (mode ``merge``, DESIGN §4 P3): the chain from the group's first LINEAR op to
   its last becomes one matrix ``W = W1·W2``, ``b = b1·W2 + b2``; AFFINE ops in between fold
   in. The merge takes every op in the chain at its linear face: a batch-statistics BN with
   its running statistics, an ELEMWISE op as the identity. That is exactly the mistake the
   planner refuses (rules 2 and 3); only ``check=False`` reaches it, and ``verify`` shows it.
2. **fold**: an AFFINE op whose input is a LINEAR output read by nothing else folds into that
   op's weights and bias (Conv→BN: ``W' = W·γ/√(σ²+ε)``, ``b' = (b−μ)·γ/√(σ²+ε) + β``).
3. **run**: ops whose output is NCHW and row-local (Conv, Max/AveragePool, AFFINE, ELEMWISE,
   BINARY) run by bands of output rows through line buffers: a band pulls the rows it needs
   (with halos) from its producers, which compute only rows they have not computed yet and
   drop rows no consumer needs any more. Conv+Pool (P2) and ``stream`` groups (P4) therefore
   never hold a full intermediate. Other ops (Gemm chains, STATS two-pass ops, global pools,
   layout) run on whole local arrays. Nothing inside a group touches the store.

The :class:`_Store` is the only way tensors cross groups; its byte counters follow
DEVELOPERS.md "Activation traffic" and must equal ``simulate(...)``'s activation traffic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from fusiontune.errors import FusiontuneError, IllegalPlanError
from fusiontune.ir.graph import Graph, Op
from fusiontune.ir.opclass import OpClass
from fusiontune.ops import (
    DTYPE,
    affine_coeffs,
    def_of,
    has_fused_kernel,
    kernel_shape,
    run_fused,
)
from fusiontune.ops.linear import (
    LinearParams,
    MatmulFn,
    apply_matrix,
    conv_nd,
    linear_params,
    matmul_float,
)
from fusiontune.ops.window import window_geometry
from fusiontune.planner.plan import Group, Mode, Plan
from fusiontune.sim.hardware import HardwareConfig

BAND_ELEMS_TARGET = 16384  # elements of a group's output per band: keeps im2col bands in L2
MIN_BANDS = 4  # even a small map is split, so no banded intermediate ever exists whole
NUMERICS = ("float", "cim")
_SINK = "__sink__"  # consumer id of the band driver
ROW_AXIS = 2  # bands run over H of NCHW


class ExecutionInputError(FusiontuneError):
    """Inputs given to :func:`execute` do not match the graph's inputs."""


@dataclass(frozen=True)
class Execution:
    """What running a plan produced and moved.

    Attributes:
        outputs: graph output name -> array.
        act_read_bytes: activation bytes read by all groups (graph inputs included).
        act_write_bytes: activation bytes written by all groups (graph outputs included).
        group_read_bytes: per group (plan order), bytes read from outside the group.
        group_write_bytes: per group, bytes of tensors it stores.
        numerics: ``"float"`` or ``"cim"``.
        peak_band_rows: for each tensor computed by bands, the most rows (axis 2) held at
            once; below the tensor's height when it never existed whole.
        reference_kernel_ops: ops that ran on their own reference kernel (no distinct fused
            kernel, not folded or merged into weights): compared with the reference, they
            are compared with themselves.
    """

    outputs: dict[str, np.ndarray]
    act_read_bytes: int
    act_write_bytes: int
    group_read_bytes: tuple[int, ...]
    group_write_bytes: tuple[int, ...]
    numerics: str = "float"
    peak_band_rows: dict[str, int] = field(default_factory=dict)
    reference_kernel_ops: tuple[str, ...] = ()

    @property
    def act_traffic_bytes(self) -> int:
        """Reads plus writes."""
        return self.act_read_bytes + self.act_write_bytes


# ---- the instrumented store ---------------------------------------------------------------
class _Store:
    """Tensors that cross group boundaries, with byte counters per group."""

    def __init__(self, graph: Graph, act_bytes: int, n_groups: int) -> None:
        self.graph = graph
        self.act_bytes = act_bytes
        self.values: dict[str, np.ndarray] = {}
        self._rows_written: dict[str, int] = {}
        self.read_bytes = [0] * n_groups
        self.write_bytes = [0] * n_groups
        self.group = 0
        self._read_now: set[str] = set()

    def begin_group(self, index: int) -> None:
        self.group = index
        self._read_now = set()

    def read(self, name: str) -> np.ndarray:
        """Read a whole tensor from outside the group (each distinct tensor counted once)."""
        if name not in self.values or self._rows_written.get(name, -1) >= 0:
            producer = self.graph.producer_map.get(name, "?")
            raise IllegalPlanError(
                f"tensor '{name}' (from op '{producer}') is read before its group ran: "
                "groups must be in topological order and convex (rule 1)"
            )
        if name not in self._read_now:
            self._read_now.add(name)
            self.read_bytes[self.group] += self.values[name].size * self.act_bytes
        return self.values[name]

    def write(self, name: str, value: np.ndarray) -> None:
        """Store a whole tensor."""
        expect = self.graph.tensors[name].shape
        assert tuple(value.shape) == expect, f"{name}: computed {value.shape}, declared {expect}"
        self.values[name] = np.ascontiguousarray(value, dtype=DTYPE)
        self.write_bytes[self.group] += value.size * self.act_bytes

    def write_rows(self, name: str, start: int, rows: np.ndarray) -> None:
        """Store rows ``[start, start + len)`` (axis 2) of a tensor written by bands."""
        shape = self.graph.tensors[name].shape
        if name not in self.values:
            self.values[name] = np.empty(shape, dtype=DTYPE)
            self._rows_written[name] = 0
        assert start == self._rows_written[name], f"{name}: rows out of order"
        self.values[name][:, :, start : start + rows.shape[ROW_AXIS]] = rows
        self._rows_written[name] += rows.shape[ROW_AXIS]
        self.write_bytes[self.group] += rows.size * self.act_bytes
        if self._rows_written[name] == shape[ROW_AXIS]:
            self._rows_written[name] = -1  # complete

    def end_group(self, stored: list[str]) -> None:
        for name in stored:
            if self._rows_written.get(name, -1) >= 0:
                raise AssertionError(f"tensor '{name}' was stored incompletely")


# ---- compiled groups ----------------------------------------------------------------------
@dataclass(frozen=True)
class Node:
    """One step of a compiled group.

    Attributes:
        name: op name (the first op's name for a merged chain).
        op: the op it runs (``None`` for a merged chain).
        inputs: tensor names it reads (activation inputs; all op inputs for an op).
        outputs: tensor names it produces.
        linear: weights for a LINEAR step (folded/merged), else ``None``.
        banded: runs by bands of NCHW output rows.
        folded: names of the ops folded or merged into this step.
    """

    name: str
    op: Op | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    linear: LinearParams | None = None
    banded: bool = False
    folded: tuple[str, ...] = ()


def stored_tensors(graph: Graph, group: Group) -> list[str]:
    """Tensors produced in the group and consumed outside it or graph outputs (in order)."""
    inside = set(group.ops)
    out = []
    for op in graph.subgraph_ops(group.ops):
        for t in op.outputs:
            if not t:
                continue
            outside = any(c not in inside for c in graph.consumer_map.get(t, ()))
            if outside or t in graph.outputs:
                out.append(t)
    return out


def external_inputs(graph: Graph, group: Group) -> list[str]:
    """Distinct activation tensors the group reads from outside itself (in order)."""
    produced = {t for op in graph.subgraph_ops(group.ops) for t in op.outputs if t}
    out: dict[str, None] = {}
    for op in graph.subgraph_ops(group.ops):
        for t in graph.activation_inputs(op):
            if t not in produced:
                out[t] = None
    return list(out)


def _needed_outside(graph: Graph, inside: set[str], tensor: str) -> bool:
    return tensor in graph.outputs or any(
        c not in inside for c in graph.consumer_map.get(tensor, ())
    )


def _only_consumer(graph: Graph, inside: set[str], tensor: str) -> Op | None:
    """The single in-group consumer of ``tensor`` when nothing else needs it."""
    consumers = graph.consumers(tensor)
    if len(consumers) != 1 or consumers[0].name not in inside:
        return None
    if _needed_outside(graph, inside, tensor):
        return None
    return consumers[0]


def _feature_axis(shape: tuple[int, ...], features: int, op: Op) -> int:
    """Feature axis in an FC-like chain: channels of an NCHW tensor, else the last axis."""
    axis = 1 if len(shape) == 4 else len(shape) - 1
    if shape[axis] != features:
        raise IllegalPlanError(
            f"op '{op.name}' ({op.op_type}): output {shape} does not keep {features} features "
            "on its feature axis, cannot be merged into a matrix chain"
        )
    return axis


def _merge_chain(graph: Graph, group: Group) -> tuple[Node, list[str]]:
    """The merged node of a ``merge`` group and the names of the ops it replaces."""
    inside = set(group.ops)
    ops = graph.subgraph_ops(group.ops)
    linear = [op for op in ops if op.op_class is OpClass.LINEAR]
    where = f"merge group starting at '{group.ops[0]}'"
    if len(linear) < 2:
        raise IllegalPlanError(f"{where}: needs at least 2 LINEAR ops, has {len(linear)}")
    first, last = linear[0], linear[-1]
    acc = linear_params(graph, first, as_matrix=True)
    chain = [first.name]
    cur = first
    axis = acc.out_axis % len(acc.out_shape)
    while cur is not last:
        nxt = _only_consumer(graph, inside, cur.output)
        if nxt is None:
            raise IllegalPlanError(
                f"{where}: '{cur.output}' of op '{cur.name}' is needed outside the chain "
                "(rule 4: a merge needs a single-consumer chain)"
            )
        chain.append(nxt.name)
        cls = nxt.op_class
        if cls is OpClass.LINEAR:
            p = linear_params(graph, nxt, as_matrix=True)
            x_shape = graph.tensors[nxt.inputs[0]].shape
            rows_next = math.prod(x_shape) // p.weight.shape[0]
            rows_acc = math.prod(acc.out_shape) // acc.weight.shape[1]
            if p.weight.shape[0] != acc.weight.shape[1] or rows_next != rows_acc:
                raise IllegalPlanError(
                    f"{where}: op '{nxt.name}' reads {p.weight.shape[0]} features per row, "
                    f"the chain before it gives {acc.weight.shape[1]}: not a matrix chain"
                )
            acc = acc.then(p)
            axis = acc.out_axis % len(acc.out_shape)
        elif cls is OpClass.LAYOUT and not def_of(nxt).reorders:
            axis = _feature_axis(graph.tensors[nxt.output].shape, acc.weight.shape[1], nxt)
        elif cls in (OpClass.AFFINE, OpClass.STATS, OpClass.ELEMWISE):
            if cls is OpClass.ELEMWISE:  # taken as the identity: the rule-2 trap
                coeffs: tuple[np.ndarray, np.ndarray] | None = (
                    np.ones(acc.weight.shape[1]),
                    np.zeros(acc.weight.shape[1]),
                )
            else:  # AFFINE exactly; a batch-statistics BN with running stats: the rule-3 trap
                coeffs = affine_coeffs(graph, nxt, axis, running_stats=True)
            if coeffs is None:
                raise IllegalPlanError(
                    f"{where}: op '{nxt.name}' ({nxt.op_type}) is not a per-feature affine map"
                )
            acc = acc.fold(*coeffs)
        else:
            raise IllegalPlanError(
                f"{where}: op '{nxt.name}' ({nxt.op_type}, {cls}) cannot be merged into a matrix"
            )
        cur = nxt
    out_shape = graph.tensors[last.output].shape
    acc = LinearParams(
        "matrix", acc.weight, acc.bias, 1, acc.in_axis, acc.out_axis, out_shape, first
    )
    node = Node(first.name, None, (first.inputs[0],), (last.output,), acc, False, tuple(chain))
    return node, chain


def _fold_affine(graph: Graph, inside: set[str], node: Node) -> Node:
    """Fold following single-consumer AFFINE ops into a LINEAR node's weights."""
    assert node.linear is not None
    p, out, folded = node.linear, node.outputs[0], list(node.folded or (node.name,))
    while True:
        nxt = _only_consumer(graph, inside, out)
        if nxt is None or nxt.op_class is not OpClass.AFFINE:
            break
        axis = 1 if p.kind == "conv" else p.out_axis
        coeffs = affine_coeffs(graph, nxt, axis)
        if coeffs is None:
            break
        p = p.fold(*coeffs)
        out = nxt.output
        folded.append(nxt.name)
    return Node(node.name, node.op, node.inputs, (out,), p, node.banded, tuple(folded))


_ROW_LOCAL_CLASSES = frozenset({OpClass.AFFINE, OpClass.ELEMWISE, OpClass.BINARY})


def _used(graph: Graph, tensor: str) -> bool:
    return bool(tensor) and (tensor in graph.outputs or bool(graph.consumer_map.get(tensor)))


def _row_local(graph: Graph, node: Node) -> bool:
    """Whether a node can run by bands of NCHW output rows."""
    out_shape = graph.tensors[node.outputs[0]].shape
    if len(out_shape) != 4:
        return False
    if node.linear is not None:
        return node.linear.kind == "conv"
    op = node.op
    assert op is not None
    if any(_used(graph, t) for t in op.outputs[1:]):
        return False
    if def_of(op).band is not None:
        return True
    if op.op_class not in _ROW_LOCAL_CLASSES:
        return False
    for t in op.inputs:
        if not t:
            continue
        shape = graph.tensors[t].shape
        aligned = (1,) * (4 - len(shape)) + shape if len(shape) <= 4 else None
        if aligned is None or aligned[ROW_AXIS] not in (1, out_shape[ROW_AXIS]):
            return False
    return True


_COMPILED: dict[tuple[str, tuple[tuple[str, ...], str]], list[Node]] = {}
COMPILED_CACHE_MAX = 512  # compiled groups kept (merged weights can be large to recompute)


def compile_group(graph: Graph, group: Group) -> list[Node]:
    """The group as a list of nodes in topological order (merge, fold, band marks).

    Cached per (graph hash, group): a search re-executing similar plans folds and merges
    each group's weights once.
    """
    key = (graph.structural_hash, group.key)
    hit = _COMPILED.get(key)
    if hit is None:
        if len(_COMPILED) >= COMPILED_CACHE_MAX:
            _COMPILED.pop(next(iter(_COMPILED)))
        hit = _COMPILED[key] = _compile_group(graph, group)
    return hit


def _compile_group(graph: Graph, group: Group) -> list[Node]:
    inside = set(group.ops)
    ops = graph.subgraph_ops(group.ops)
    replaced: dict[str, Node | None] = {}  # op name -> node it starts, or None when absorbed
    if group.mode is Mode.MERGE:
        merged, chain = _merge_chain(graph, group)
        for name in chain:
            replaced[name] = None
        replaced[chain[0]] = merged
    nodes: list[Node] = []
    for op in ops:
        if op.name in replaced:
            node = replaced[op.name]
            if node is None:
                continue
        elif op.op_class is OpClass.LINEAR:
            try:
                params = linear_params(graph, op)
                node = Node(op.name, op, (op.inputs[0],), (op.output,), params)
            except IllegalPlanError:  # a batched MatMul weight: run the op as it is
                node = Node(op.name, op, op.inputs, op.outputs)
        else:
            node = Node(op.name, op, op.inputs, op.outputs)
        if node.linear is not None:
            node = _fold_affine(graph, inside, node)
            for name in node.folded[1:]:
                replaced[name] = None
        nodes.append(node)
    return [
        Node(n.name, n.op, n.inputs, n.outputs, n.linear, _row_local(graph, n), n.folded)
        for n in nodes
    ]


# ---- running one group --------------------------------------------------------------------
class _LineBuffer:
    """Rows ``[lo, hi)`` of one banded tensor; rows no consumer needs any more are dropped."""

    def __init__(self, consumers: set[str]) -> None:
        self.chunks: list[tuple[int, np.ndarray]] = []
        self.hi = 0
        self.consumers = set(consumers)
        self.last: dict[str, int] = {}
        self.peak_rows = 0  # most rows held at once (the line buffer's size)

    @property
    def lo(self) -> int:
        return self.chunks[0][0] if self.chunks else self.hi

    def append(self, rows: np.ndarray) -> None:
        self.chunks.append((self.hi, rows))
        self.hi += rows.shape[ROW_AXIS]
        self.peak_rows = max(self.peak_rows, self.hi - self.lo)

    def get(self, a: int, b: int) -> np.ndarray:
        parts = []
        for start, arr in self.chunks:
            stop = start + arr.shape[ROW_AXIS]
            if stop <= a or start >= b:
                continue
            parts.append(arr[:, :, max(a, start) - start : min(b, stop) - start])
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=ROW_AXIS)

    def release(self, consumer: str, a: int) -> None:
        """``consumer`` will not ask for rows below ``a`` again: drop rows nobody needs."""
        self.consumers.add(consumer)
        self.last[consumer] = a
        keep_from = min(self.last.get(c, 0) for c in self.consumers)
        while self.chunks and self.chunks[0][0] < keep_from:
            start, arr = self.chunks[0]
            if start + arr.shape[ROW_AXIS] <= keep_from:
                self.chunks.pop(0)
            else:  # keep only the rows still needed (a copy, so the old band is freed)
                self.chunks[0] = (keep_from, arr[:, :, keep_from - start :].copy())


class _GroupRun:
    """Evaluates a compiled group on local arrays; stores only the group's boundary tensors."""

    def __init__(
        self,
        graph: Graph,
        nodes: list[Node],
        inputs: Mapping[str, np.ndarray],
        stored: list[str],
        store: _Store,
        matmul: MatmulFn,
    ) -> None:
        self.graph = graph
        self.matmul = matmul
        self.store = store
        self.stored = set(stored)
        self.producer: dict[str, Node] = {t: n for n in nodes for t in n.outputs if t}
        self.full_values: dict[str, np.ndarray] = dict(inputs)
        self.buffers: dict[str, _LineBuffer] = {}
        for n in nodes:
            if n.banded:
                users = {m.name for m in nodes if n.outputs[0] in m.inputs}
                self.buffers[n.outputs[0]] = _LineBuffer(users)

    # -- values --------------------------------------------------------------------------
    def shape(self, tensor: str) -> tuple[int, ...]:
        return self.graph.tensors[tensor].shape

    def full(self, tensor: str, consumer: str = _SINK) -> np.ndarray:
        """The whole tensor (constants, inputs, whole-op results, or all rows of a band)."""
        if self.graph.is_constant(tensor):
            return np.asarray(self.graph.tensors[tensor].value)
        if tensor in self.full_values:
            return self.full_values[tensor]
        if tensor in self.buffers:
            return self.rows(tensor, 0, self.shape(tensor)[ROW_AXIS], consumer)
        node = self.producer[tensor]
        args = [self.full(t, node.name) if t else None for t in node.inputs]
        outs = self._compute(node, args)
        for t, v in zip(node.outputs, outs):
            if t:
                self.full_values[t] = v
                if t in self.stored:
                    self.store.write(t, v)
        return self.full_values[tensor]

    def rows(self, tensor: str, a: int, b: int, consumer: str) -> np.ndarray:
        """Rows ``[a, b)`` of an NCHW tensor, computing missing rows of a banded producer."""
        buf = self.buffers.get(tensor)
        if buf is None:
            return self.full(tensor, consumer)[:, :, a:b]
        if a >= buf.lo:
            buf.release(consumer, a)
        if b > buf.hi:
            start = buf.hi
            new = self._band(self.producer[tensor], start, b)
            buf.append(new)
            if tensor in self.stored:
                self.store.write_rows(tensor, start, new)
        if a < buf.lo:  # rows already dropped (an unusual access order): recompute them
            value = np.concatenate(
                [self._band(self.producer[tensor], a, buf.lo), buf.get(buf.lo, b)], axis=ROW_AXIS
            )
        else:
            value = buf.get(a, b)
        buf.release(consumer, a)
        return value

    # -- kernels -------------------------------------------------------------------------
    def _compute(self, node: Node, args: list[np.ndarray | None]) -> list[np.ndarray]:
        p = node.linear
        if p is None:
            assert node.op is not None
            return run_fused(node.op, args)
        x = args[0]
        assert x is not None
        if p.kind == "matrix":
            return [apply_matrix(p, x, self.matmul)]
        assert p.source_op is not None
        win = window_geometry(p.source_op, x.shape[2:], p.weight.shape[2:])
        return [conv_nd(x, p.weight, p.bias, win, p.group, self.matmul)]

    def _band(self, node: Node, a: int, b: int) -> np.ndarray:
        """Output rows ``[a, b)`` of a banded node."""
        p = node.linear
        band = def_of(node.op).band if node.op is not None else None
        if p is not None or band is not None:
            x_name = node.inputs[0]
            x_shape = self.shape(x_name)
            op = p.source_op if p is not None else node.op
            assert op is not None
            kernel = p.weight.shape[2:] if p is not None else kernel_shape(self.graph, op)
            win = window_geometry(op, x_shape[2:], kernel)
            band_win, lo, hi = win.band(a, b, x_shape[ROW_AXIS])
            x = self.rows(x_name, lo, hi, node.name)
            if p is not None:
                return conv_nd(x, p.weight, p.bias, band_win, p.group, self.matmul)
            assert band is not None
            return band(op, x, band_win)
        op = node.op
        assert op is not None
        height = self.shape(node.outputs[0])[ROW_AXIS]
        args: list[np.ndarray | None] = []
        for t in op.inputs:
            if not t:
                args.append(None)
            elif self.graph.is_constant(t):
                args.append(_slice_rows(np.asarray(self.graph.tensors[t].value), height, a, b))
            elif len(self.shape(t)) == 4 and self.shape(t)[ROW_AXIS] == height:
                args.append(self.rows(t, a, b, node.name))
            else:
                args.append(self.full(t, node.name))
        return run_fused(op, args)[0]

    # -- driver --------------------------------------------------------------------------
    def run(self, stored: list[str]) -> None:
        banded = [t for t in stored if t in self.buffers]
        if banded:
            primary = banded[-1]
            self.buffers[primary].consumers.add(_SINK)
            shape = self.shape(primary)
            height = shape[ROW_AXIS]
            per_row = math.prod(shape) // height
            step = max(1, min(BAND_ELEMS_TARGET // per_row, math.ceil(height / MIN_BANDS)))
            for a in range(0, height, step):
                self.rows(primary, a, min(height, a + step), _SINK)
            for t in banded:
                buf, h = self.buffers[t], self.shape(t)[ROW_AXIS]
                if buf.hi < h:
                    self.rows(t, buf.hi, h, _SINK)
        for t in stored:
            if t not in self.buffers:
                self.full(t)


def _slice_rows(value: np.ndarray, height: int, a: int, b: int) -> np.ndarray:
    """Rows [a, b) of a constant broadcast against an NCHW output of ``height`` rows."""
    if value.ndim == 0 or value.ndim > 4 or height == 1:
        return value
    axis = ROW_AXIS - (4 - value.ndim)
    if axis < 0 or value.shape[axis] != height:
        return value
    index = [slice(None)] * value.ndim
    index[axis] = slice(a, b)
    return value[tuple(index)]


# ---- the public entry point ------------------------------------------------------------------
def _check_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for name in graph.inputs:
        if name not in inputs:
            raise ExecutionInputError(
                f"graph '{graph.name}' input '{name}' is missing "
                f"(given: {', '.join(inputs) or 'none'})"
            )
        value = np.asarray(inputs[name], dtype=DTYPE)
        expect = graph.tensors[name].shape
        if value.shape != expect:
            raise ExecutionInputError(
                f"graph '{graph.name}' input '{name}' has shape {value.shape}, expected {expect}"
            )
        out[name] = value
    return out


def group_order(graph: Graph, plan: Plan) -> list[int]:
    """Indices of the plan's groups in an order that respects their data dependences.

    Usually plan order; a convex group may still need a later-listed group's output (groups
    ``{a, c}`` and ``{b}`` with ``c`` reading ``b``), so this sorts topologically (stable).

    Raises:
        IllegalPlanError: the groups depend on each other in a cycle (a non-convex group).
    """
    group_of = plan.group_of()
    needs: list[set[int]] = [set() for _ in plan.groups]
    for i, g in enumerate(plan.groups):
        for name in g.ops:
            for pred in graph.predecessors(name):
                if group_of[pred] != i:
                    needs[i].add(group_of[pred])
    order: list[int] = []
    done: set[int] = set()
    while len(order) < len(plan.groups):
        ready = [i for i in range(len(plan.groups)) if i not in done and needs[i] <= done]
        if not ready:
            stuck = [plan.groups[i].ops[0] for i in range(len(plan.groups)) if i not in done]
            raise IllegalPlanError(
                "groups starting at "
                + ", ".join(f"'{s}'" for s in stuck[:4])
                + " depend on each other in a cycle: a group is not convex (rule 1)"
            )
        order.append(ready[0])
        done.add(ready[0])
    return order


def _check_partition(graph: Graph, plan: Plan) -> None:
    seen: set[str] = set()
    for g in plan.groups:
        for name in g.ops:
            if name not in graph.op_by_name:
                raise IllegalPlanError(
                    f"plan names op '{name}', which is not in graph '{graph.name}'"
                )
            if name in seen:
                raise IllegalPlanError(f"plan puts op '{name}' in two groups")
            seen.add(name)
    missing = [op.name for op in graph.ops if op.name not in seen]
    if missing:
        shown = ", ".join(missing[:5])
        raise IllegalPlanError(f"plan leaves {len(missing)} op(s) in no group: {shown}")


def execute(
    graph: Graph,
    plan: Plan,
    inputs: Mapping[str, np.ndarray],
    numerics: str = "float",
    hw: HardwareConfig | None = None,
    check: bool = True,
) -> Execution:
    """Run ``plan`` on ``inputs``: one fused kernel per group, bytes counted at the store.

    Args:
        graph: the model.
        plan: a partition of its ops into groups (topological order of groups).
        inputs: graph input name -> array of the declared shape (cast to float32).
        numerics: ``"float"`` (float32) or ``"cim"`` (crossbar quantization, ``sim/cim.py``).
        hw: the hardware (act_bits for byte counts, bit widths for CIM); the DESIGN §7
            default :class:`HardwareConfig` when ``None``.
        check: run the planner's ``check_plan`` first. ``False`` executes any partition,
            legal or not (how the lecture's traps are shown).

    Raises:
        IllegalPlanError: the plan is illegal (with ``check``) or cannot be executed.
        ExecutionInputError: an input is missing or has the wrong shape.
        ResourceLimitError: the graph's tensors need more than the memory limit.
    """
    if numerics not in NUMERICS:
        from fusiontune.errors import closest

        raise FusiontuneError(
            f"numerics '{numerics}' is not one of {', '.join(NUMERICS)}"
            f"{closest(numerics, NUMERICS)}"
        )
    _check_partition(graph, plan)
    if check:
        from fusiontune.planner.legality import check_plan

        check_plan(graph, plan)
    from fusiontune.limits import check_graph

    check_graph(graph, "executing it")
    hw = hw or HardwareConfig()
    matmul: MatmulFn = matmul_float
    if numerics == "cim":
        from fusiontune.sim.cim import CimNumerics, cim_matmul_fn

        matmul = cim_matmul_fn(CimNumerics.from_hw(hw))
    store = _Store(graph, hw.act_bytes, plan.n_groups)
    store.values.update(_check_inputs(graph, inputs))
    peak_rows: dict[str, int] = {}
    self_compared: list[str] = []
    for index in group_order(graph, plan):
        group = plan.groups[index]
        store.begin_group(index)
        nodes = compile_group(graph, group)
        self_compared += [n.name for n in nodes if _runs_reference_kernel(n)]
        ext = {t: store.read(t) for t in external_inputs(graph, group)}
        stored = stored_tensors(graph, group)
        run = _GroupRun(graph, nodes, ext, stored, store, matmul)
        run.run(stored)
        store.end_group(stored)
        peak_rows.update({t: buf.peak_rows for t, buf in run.buffers.items()})
    outputs = {t: store.values[t] for t in graph.outputs}
    return Execution(
        outputs=outputs,
        act_read_bytes=sum(store.read_bytes),
        act_write_bytes=sum(store.write_bytes),
        group_read_bytes=tuple(store.read_bytes),
        group_write_bytes=tuple(store.write_bytes),
        numerics=numerics,
        peak_band_rows=peak_rows,
        reference_kernel_ops=tuple(sorted(self_compared, key=graph.op_index.__getitem__)),
    )


def _runs_reference_kernel(node: Node) -> bool:
    """The node is one op run by its reference kernel (no fused kernel, no folded weights)."""
    return node.linear is None and node.op is not None and not has_fused_kernel(node.op)
