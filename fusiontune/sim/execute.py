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
   BINARY, and the upsampling ConvTranspose and Resize by their row spans) run by bands of
   output rows through line buffers: a band pulls the rows it needs (with halos) from its
   producers, which compute only rows they have not computed yet and drop rows no consumer
   needs any more. Conv+Pool (P2) and ``stream`` groups (P4) therefore
   never hold a full intermediate. Other ops (Gemm chains, STATS two-pass ops, global pools,
   layout) run on whole local arrays. Nothing inside a group touches the store.

The :class:`_Store` is the only way tensors cross groups; its byte counters follow
DEVELOPERS.md "Activation traffic" and must equal ``simulate(...)``'s activation traffic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from fusiontune.errors import CapacityError, FusiontuneError, IllegalPlanError
from fusiontune.ir.graph import Graph, Op
from fusiontune.ir.opclass import OpClass
from fusiontune.ops import (
    DTYPE,
    affine_coeffs,
    def_of,
    has_fused_kernel,
)
from fusiontune.ops.linear import (
    LinearParams,
    MatmulFn,
    linear_params,
    matmul_float,
)
from fusiontune.planner.plan import Group, Mode, Plan
from fusiontune.sim.hardware import HardwareConfig
from fusiontune.sim.rows import RowKind, row_map
from fusiontune.sim.runner import Dram, GroupRunner, GroupStats, node_row_map
from fusiontune.sim.tiled_run import run_tiled
from fusiontune.sim.tiling import acc_units, singleton_tiling

BAND_ELEMS_TARGET = 65536  # elements per band of each tensor (halved until a group fits the buffer)
NUMERICS = ("float", "cim")


class ExecutionInputError(FusiontuneError):
    """Inputs given to :func:`execute` do not match the graph's inputs."""


@dataclass(frozen=True)
class Execution:
    """What running a plan produced, moved and held.

    Attributes:
        outputs: graph output name -> array.
        dram_read_bytes: bytes the DMA fetched from DRAM, all groups (graph inputs included).
        dram_write_bytes: bytes the DMA wrote to DRAM, all groups (graph outputs included).
        group_read_bytes: per group (plan order), bytes fetched.
        group_write_bytes: per group (plan order), bytes written.
        group_peak_buffer_bytes: per group, in execution order, the most bytes on chip at once.
        group_band_rows: per group, in execution order, the rows per band it ran with
            (0: a singleton that ran tiled through DRAM, ``sim/tiling.py``).
        numerics: ``"float"`` or ``"cim"``.
        peak_band_rows: for each tensor on chip, the most rows (along its row axis) held at
            once; below the tensor's height when it never existed whole.
        reference_kernel_ops: ops that ran on their own reference kernel (no distinct fused
            kernel, not folded or merged into weights): compared with the reference, they
            are compared with themselves.
    """

    outputs: dict[str, np.ndarray]
    dram_read_bytes: int
    dram_write_bytes: int
    group_read_bytes: tuple[int, ...]
    group_write_bytes: tuple[int, ...]
    group_peak_buffer_bytes: tuple[int, ...] = ()
    group_band_rows: tuple[int, ...] = ()
    numerics: str = "float"
    peak_band_rows: dict[str, int] = field(default_factory=dict)
    reference_kernel_ops: tuple[str, ...] = ()

    @property
    def peak_buffer_bytes(self) -> int:
        """The most bytes any group held on chip at once."""
        return max(self.group_peak_buffer_bytes, default=0)

    @property
    def act_read_bytes(self) -> int:
        """Activation bytes read (every DRAM read of the executor is an activation)."""
        return self.dram_read_bytes

    @property
    def act_write_bytes(self) -> int:
        """Activation bytes written."""
        return self.dram_write_bytes

    @property
    def act_traffic_bytes(self) -> int:
        """Reads plus writes."""
        return self.dram_read_bytes + self.dram_write_bytes


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
            or row_map(graph, nxt).kind is not RowKind.POINT
        ):
            break
        epilogue.append(nxt)
        out = nxt.outputs[0]
    return replace(node, outputs=(out,), banded=True, epilogue=tuple(epilogue))


# ---- the public entry point ------------------------------------------------------------------
def _check_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for name in graph.inputs:
        if name not in inputs:
            raise ExecutionInputError(
                f"graph '{graph.name}' input '{name}' is missing "
                f"(given: {', '.join(inputs) or 'none'})"
            )
        value = np.asarray(inputs[name], dtype=graph.tensors[name].dtype)  # int64 ids stay ids
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
    band_rows: int | None = None,
) -> Execution:
    """Run ``plan`` on ``inputs`` inside a ``hw.buffer_bytes`` on-chip buffer.

    Every group runs as one fused kernel (:mod:`fusiontune.sim.runner`): rows stream through
    the buffer, the DMA counts every byte fetched and written, and the peak occupancy of each
    group is measured.

    Args:
        graph: the model.
        plan: a partition of its ops into groups (topological order of groups).
        inputs: graph input name -> array of the declared shape (cast to its declared dtype:
            float32 activations, int64 token ids stay integers).
        numerics: ``"float"`` (float32) or ``"cim"`` (crossbar quantization, ``sim/cim.py``).
        hw: the hardware (act_bits for byte counts, bit widths for CIM); the DESIGN §7
            default :class:`HardwareConfig` when ``None``.
        check: run the planner's ``check_plan`` first. ``False`` executes any partition,
            legal or not (how the lecture's traps are shown).
        band_rows: rows of every tensor produced or fetched per step. ``None``: about
            ``BAND_ELEMS_TARGET`` elements per step (at least a row), halved until the group
            fits the buffer; ``1`` is the least-buffer schedule the analytic model predicts.

    Raises:
        IllegalPlanError: the plan is illegal (with ``check``) or cannot be executed.
        CapacityError: a group does not fit ``hw.buffer_bytes`` even one row at a time (or
            at the given ``band_rows``).
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
    if band_rows is not None and (isinstance(band_rows, bool) or not isinstance(band_rows, int)
                                  or band_rows < 1):  # fmt: skip
        raise FusiontuneError(f"band_rows must be an integer >= 1 or None, got {band_rows!r}")
    matmul: MatmulFn = matmul_float
    if numerics == "cim":
        from fusiontune.sim.cim import CimNumerics, cim_matmul_fn

        matmul = cim_matmul_fn(CimNumerics.from_hw(hw))
    dram = Dram(graph, hw.act_bytes, plan.n_groups)
    dram.values.update(_check_inputs(graph, inputs))
    peak_rows: dict[str, int] = {}
    self_compared: list[str] = []
    peaks: list[int] = []
    bands: list[int] = []
    for index in group_order(graph, plan):
        group = plan.groups[index]
        nodes = compile_group(graph, group)
        self_compared += [name for n in nodes for name in _self_compared(n)]
        stored = stored_tensors(graph, group)
        stats = _run_group(graph, index, group, nodes, stored, dram, hw, band_rows, matmul)
        peaks.append(stats.peak_bytes)
        bands.append(stats.band_rows)
        peak_rows.update(stats.peak_rows)
    outputs = {t: dram.values[t] for t in graph.outputs}
    return Execution(
        outputs=outputs,
        dram_read_bytes=sum(dram.read_bytes),
        dram_write_bytes=sum(dram.write_bytes),
        group_read_bytes=tuple(dram.read_bytes),
        group_write_bytes=tuple(dram.write_bytes),
        group_peak_buffer_bytes=tuple(peaks),
        group_band_rows=tuple(bands),
        numerics=numerics,
        peak_band_rows=peak_rows,
        reference_kernel_ops=tuple(sorted(self_compared, key=graph.op_index.__getitem__)),
    )


def _run_group(
    graph: Graph,
    index: int,
    group: Group,
    nodes: list[Node],
    stored: list[str],
    dram: Dram,
    hw: HardwareConfig,
    band_rows: int | None,
    matmul: MatmulFn,
) -> GroupStats:
    """Run one group; without a given band height, halve the bands until the group fits.

    A group of one op whose one-row schedule overflows the buffer runs tiled through DRAM
    (:mod:`fusiontune.sim.tiling`); ``band_rows`` does not apply to it.
    """
    label = (
        f"[{group.ops[0]}]"
        if len(group.ops) == 1
        else (f"[{group.ops[0]} .. {group.ops[-1]}] ({len(group.ops)} ops)")
    )
    tiling = singleton_tiling(graph, group, hw)
    if tiling is not None:  # one op that does not fit one row at a time: tiled through DRAM
        if not tiling.feasible:
            raise CapacityError(f"group {label}: {tiling.reason}")
        (node,) = nodes
        return run_tiled(graph, index, label, node, tiling, stored, dram, hw.buffer_bytes,
                         matmul, acc_units(hw))  # fmt: skip
    elems = BAND_ELEMS_TARGET
    while True:
        runner = GroupRunner(graph, index, label, nodes, stored, dram, hw.buffer_bytes,
                             band_rows, matmul, band_elems=elems)  # fmt: skip
        try:
            return runner.run()
        except CapacityError:
            if band_rows is not None or elems <= 1:
                raise
            dram.forget_group(index)
            elems //= 2


def _self_compared(node: Node) -> list[str]:
    """Ops of the node run by their own reference kernel (no fused kernel, not in weights)."""
    out = [op.name for op in node.epilogue if not has_fused_kernel(op)]
    if node.linear is None and node.op is not None and not has_fused_kernel(node.op):
        out.insert(0, node.name)
    return out
