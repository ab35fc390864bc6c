"""The structure of a compiled group: the nodes it runs, the tensors it stores, their rows.

The bottom of ``sim/``: the model files (:mod:`~fusiontune.sim.capacity`,
:mod:`~fusiontune.sim.tiling`, :mod:`~fusiontune.sim.groupmodel`) read a group's structure
from here, and the executor files (:mod:`~fusiontune.sim.runner`,
:mod:`~fusiontune.sim.tiled_run`, :mod:`~fusiontune.sim.execute`) run it, so the model and
the executor agree on which tensors exist on chip by construction.

:func:`compile_group` turns a group into a list of :class:`Node` in topological order:

1. **merge** (mode ``merge``, DESIGN §4 P3): the chain from the group's first LINEAR op to
   its last becomes one matrix ``W = W1·W2``, ``b = b1·W2 + b2``; AFFINE ops in between fold
   in (:mod:`fusiontune.sim.execute` says why an illegal merge still runs).
2. **fold**: an AFFINE op whose input is a LINEAR output read by nothing else folds into that
   op's weights and bias (Conv→BN: ``W' = W·γ/√(σ²+ε)``, ``b' = (b−μ)·γ/√(σ²+ε) + β``).
3. **band marks and epilogues**: a node whose row map (:func:`node_row_map`) streams runs by
   bands of rows, and the unary row-wise ops that alone read its output become its epilogue.

:func:`group_structure` makes the same nodes without computing folded or merged weights;
:func:`group_order` the order groups run in (the executor's and the placement's).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace

import numpy as np

from fusiontune.errors import IllegalPlanError
from fusiontune.ir.graph import Graph, Op
from fusiontune.ir.opclass import OpClass
from fusiontune.ops import DTYPE, affine_coeffs, def_of
from fusiontune.ops.linear import LinearParams, linear_params
from fusiontune.planner.plan import Group, Mode, Plan
from fusiontune.sim.rows import RowKind, RowMap, height, row_axes, row_map


# ---- nodes ----------------------------------------------------------------------
@dataclass(frozen=True)
class Node:
    """One step of a compiled group.

    Attributes:
        name: op name (the first op's name for a merged chain).
        op: the op it runs (``None`` for a merged chain).
        inputs: tensor names it reads (activation inputs; all op inputs for an op).
        outputs: tensor names it produces.
        linear: weights for a LINEAR step (folded/merged), else ``None``.
        banded: runs by bands of rows (its row map is POINT or WINDOW, ``sim/rows.py``).
        folded: names of the ops folded or merged into this step.
        epilogue: element-wise ops applied to each band of the step's output as it is
            computed (ReLU after a conv, a normalization over the last axis, ...): their
            inputs never exist on their own (DESIGN §4 P1).
    """

    name: str
    op: Op | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    linear: LinearParams | None = None
    banded: bool = False
    folded: tuple[str, ...] = ()
    epilogue: tuple[Op, ...] = ()

    @property
    def kernel_op(self) -> Op:
        """The op of a node that runs an op's own kernel (every node without weights: only
        a merged chain has no op, and it always has weights)."""
        assert self.op is not None, f"node '{self.name}' is a merged chain, it has no op"
        return self.op


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


def _merge_chain(graph: Graph, group: Group, weights: bool = True) -> tuple[Node, list[str]]:
    """The merged node of a ``merge`` group and the names of the ops it replaces.

    With ``weights=False`` only the structure is decided (the same checks, the same nodes);
    the merged matrix is a placeholder of the right shape.
    """
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
            if p.in_axis % len(x_shape) != axis:
                raise IllegalPlanError(
                    f"{where}: op '{nxt.name}' reads its features on axis "
                    f"{p.in_axis % len(x_shape)}, the chain before it gives them on axis "
                    f"{axis}: not a matrix chain"
                )
            if p.weight.shape[0] != acc.weight.shape[1] or rows_next != rows_acc:
                raise IllegalPlanError(
                    f"{where}: op '{nxt.name}' reads {p.weight.shape[0]} features per row, "
                    f"the chain before it gives {acc.weight.shape[1]}: not a matrix chain"
                )
            if weights:
                acc = acc.then(p)
            else:  # the shape of W1·W2 without computing it
                placeholder = np.empty((acc.weight.shape[0], p.weight.shape[1]), dtype=DTYPE)
                acc = replace(acc, weight=placeholder, out_axis=p.out_axis, out_shape=p.out_shape)
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
            if weights:
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


_PARAMS: dict[tuple[int, str, bool], LinearParams] = {}
_COEFFS: dict[tuple[int, str, int], tuple[np.ndarray, np.ndarray] | None] = {}
PARAMS_CACHE_MAX = 4096  # per-op weights and fold coefficients kept between compiles


def _params(graph: Graph, op: Op, as_matrix: bool = False) -> LinearParams:
    """:func:`linear_params` of one op, cached (a search compiles the same ops many times)."""
    key = (id(graph), op.name, as_matrix)
    hit = _PARAMS.get(key)
    if hit is None or hit.source_op is not op:
        if len(_PARAMS) >= PARAMS_CACHE_MAX:
            _PARAMS.clear()
        hit = _PARAMS[key] = linear_params(graph, op, as_matrix=as_matrix)
    return hit


def _coeffs(graph: Graph, op: Op, axis: int) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`affine_coeffs` of one op on one axis, cached."""
    key = (id(graph), op.name, axis)
    if key not in _COEFFS:
        if len(_COEFFS) >= PARAMS_CACHE_MAX:
            _COEFFS.clear()
        _COEFFS[key] = affine_coeffs(graph, op, axis)
    return _COEFFS[key]


def _fold_affine(graph: Graph, inside: set[str], node: Node, weights: bool = True) -> Node:
    """Fold following single-consumer AFFINE ops into a LINEAR node's weights (with
    ``weights=False``: decide which, leave the weights as they are)."""
    assert node.linear is not None
    p, out, folded = node.linear, node.outputs[0], list(node.folded or (node.name,))
    while True:
        nxt = _only_consumer(graph, inside, out)
        if nxt is None or nxt.op_class is not OpClass.AFFINE:
            break
        axis = p.out_axis if p.kind == "matrix" else 1
        coeffs = _coeffs(graph, nxt, axis)
        if coeffs is None:
            break
        if weights:
            p = p.fold(*coeffs)
        out = nxt.output
        folded.append(nxt.name)
    return Node(node.name, node.op, node.inputs, (out,), p, node.banded, tuple(folded))


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


_STRUCTURES: dict[tuple[str, tuple[tuple[str, ...], str]], list[Node]] = {}


def group_structure(graph: Graph, group: Group) -> list[Node]:
    """The nodes :func:`compile_group` makes, without computing folded or merged weights.

    Which tensors exist on chip and how their rows flow depend only on this structure; the
    capacity model (:mod:`fusiontune.sim.capacity`) reads it. Cached like compiled groups.
    """
    key = (graph.structural_hash, group.key)
    hit = _STRUCTURES.get(key)
    if hit is None:
        if len(_STRUCTURES) >= COMPILED_CACHE_MAX * 8:
            _STRUCTURES.pop(next(iter(_STRUCTURES)))
        hit = _STRUCTURES[key] = _compile_group(graph, group, weights=False)
    return hit


def _compile_group(graph: Graph, group: Group, weights: bool = True) -> list[Node]:
    inside = set(group.ops)
    ops = graph.subgraph_ops(group.ops)
    replaced: dict[str, Node | None] = {}  # op name -> node it starts, or None when absorbed
    if group.mode is Mode.MERGE:
        merged, chain = _merge_chain(graph, group, weights)
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
                params = _params(graph, op)
                node = Node(op.name, op, (op.inputs[0],), (op.output,), params)
            except IllegalPlanError:  # a batched MatMul weight: run the op as it is
                node = Node(op.name, op, op.inputs, op.outputs)
        else:
            node = Node(op.name, op, op.inputs, op.outputs)
        if node.linear is not None:
            node = _fold_affine(graph, inside, node, weights)
            for name in node.folded[1:]:
                replaced[name] = None
        node = _absorb_epilogue(graph, inside, node)
        for ep in node.epilogue:
            replaced[ep.name] = None
        nodes.append(node)
    return nodes


_EPILOGUE_CLASSES = frozenset({OpClass.ELEMWISE, OpClass.AFFINE, OpClass.STATS})


def _absorb_epilogue(graph: Graph, inside: set[str], node: Node) -> Node:
    """Take the unary row-wise ops that alone read a streaming node's output as its epilogue."""
    base = node_row_map(graph, node)
    streaming = base.kind in (RowKind.POINT, RowKind.WINDOW, RowKind.SPAN)
    if not streaming or len([t for t in node.outputs if t]) != 1:
        return replace(node, banded=False)
    out = node.outputs[0]
    epilogue: list[Op] = []
    while True:
        nxt = _only_consumer(graph, inside, out)
        if (
            nxt is None
            or nxt.op_class not in _EPILOGUE_CLASSES
            or graph.activation_inputs(nxt) != (out,)
            or not _row_aligned(graph, nxt, out)
        ):
            break
        epilogue.append(nxt)
        out = nxt.outputs[0]
    return replace(node, outputs=(out,), banded=True, epilogue=tuple(epilogue))


def _row_aligned(graph: Graph, op: Op, tensor: str) -> bool:
    """``op`` maps rows one to one and reads ``tensor`` by rows: an epilogue keeps its
    producer's bands (an op that broadcasts ``tensor`` along the row axis, a (1, 1, C) scale
    times a (1, R, 1) constant, makes R rows of each one and cannot be its epilogue)."""
    rm = row_map(graph, op)
    return rm.kind is RowKind.POINT and rm.streamed[op.inputs.index(tensor)]


# ---- row maps of nodes -------------------------------------------------------------------
_NODE_MAPS: dict[tuple[object, ...], RowMap] = {}


def node_row_map(graph: Graph, node: Node) -> RowMap:
    """The row map of a compiled node (an op, a folded LINEAR op or a merged chain)."""
    p: LinearParams | None = node.linear
    key = (
        id(graph),
        node.name,
        node.inputs,
        None if p is None else (p.kind, p.in_axis, p.out_axis, p.bias is not None and p.bias.ndim),
    )
    hit = _NODE_MAPS.get(key)
    if hit is None:
        if len(_NODE_MAPS) >= NODE_MAPS_MAX:
            _NODE_MAPS.clear()
        hit = _NODE_MAPS[key] = _node_row_map(graph, node)
    return hit


NODE_MAPS_MAX = 65536


def _node_row_map(graph: Graph, node: Node) -> RowMap:
    p: LinearParams | None = node.linear
    if p is None:
        return row_map(graph, node.kernel_op)
    if p.kind in ("conv", "conv_transpose"):
        assert p.source_op is not None
        rm = row_map(graph, p.source_op)
        streamed = tuple(i == 0 for i in range(len(node.inputs)))
        return RowMap(rm.kind, streamed, rm.window, spans=rm.spans)
    x, out = node.inputs[0], node.outputs[0]
    axes = row_axes(graph)
    ax, ao = axes[x], axes[out]
    rank_x, rank_o = len(graph.tensors[x].shape), len(graph.tensors[out].shape)
    whole = RowMap(RowKind.WHOLE, tuple(False for _ in node.inputs))
    if ax is None or ao is None or ax != ao or rank_x != rank_o:
        return whole
    if p.in_axis % rank_x == ax or p.out_axis % rank_o == ao:
        return whole
    if height(graph, x) != height(graph, out):
        return whole
    if p.bias is not None and p.bias.ndim > 1:
        return whole
    streamed = tuple(i == 0 for i in range(len(node.inputs)))
    return RowMap(RowKind.POINT, streamed)


def group_order(graph: Graph, plan: Plan) -> list[int]:
    """Indices of the plan's groups in an order that respects their data dependences.

    Usually plan order; a convex group may still need a later-listed group's output (groups
    ``{a, c}`` and ``{b}`` with ``c`` reading ``b``), so this sorts topologically (stable).

    Raises:
        IllegalPlanError: the groups depend on each other in a cycle (a non-convex group).
    """
    group_of = plan.group_of()
    n = len(plan.groups)
    needs: list[set[int]] = [set() for _ in plan.groups]
    for i, g in enumerate(plan.groups):
        for name in g.ops:
            for pred in graph.predecessors(name):
                if group_of[pred] != i:
                    needs[i].add(group_of[pred])
    waiting = [len(s) for s in needs]
    users: list[list[int]] = [[] for _ in plan.groups]
    for i, s in enumerate(needs):
        for j in s:
            users[j].append(i)
    ready = [i for i in range(n) if not waiting[i]]  # a heap: the first ready group in plan order
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for k in users[i]:
            waiting[k] -= 1
            if not waiting[k]:
                heapq.heappush(ready, k)
    if len(order) < n:
        done = set(order)
        stuck = [plan.groups[i].ops[0] for i in range(n) if i not in done]
        raise IllegalPlanError(
            "groups starting at "
            + ", ".join(f"'{s}'" for s in stuck[:4])
            + " depend on each other in a cycle: a group is not convex (rule 1)"
        )
    return order
