"""Export a fusion plan as an ONNX model: one call per group, weights folded and merged.

The pipeline of :func:`plan_to_onnx`, top to bottom:

1. check the plan (a legal partition of this graph) and put its groups in execution order
   (:func:`~fusiontune.sim.execute.group_order`);
2. compile each group with the executor's compile step
   (:func:`~fusiontune.sim.execute.compile_group`): a ``merge`` chain becomes one matrix
   ``W = W1·W2`` with the AFFINE ops inside it folded in, and AFFINE ops after a LINEAR op
   (Conv→BN, Gemm→BN, bias Adds) fold into its weights and bias — the very weights
   ``execute`` runs, so the exported model computes what was verified;
3. write each compiled step as ONNX nodes: an op left as it was in the form the opset wants
   (as :func:`~fusiontune.export.onnx_export.to_onnx` writes it), a folded Conv as a Conv
   with the new weight and bias, a folded or merged matrix as one Gemm, one 1x1 Conv or a
   MatMul (+ Add);
4. wrap every group of two or more ops in a model-local ONNX function of the domain
   :data:`PLAN_DOMAIN`, called once from the main graph; a group of one op stays a plain
   node. Every top-level node (call or plain) carries the group's mode, pattern and cost on
   the given hardware in its ``metadata_props`` (keys :data:`META_KEYS`), plus a one-line
   ``doc_string``; the model's ``metadata_props`` hold the plan's JSON and the hardware;
5. check the model (``onnx.checker``, full check) and write it.

Where the metadata lives: ``metadata_props`` (NodeProto field, ONNX IR version 10) is a
string map that ``onnx.load``/``save``, the checker, shape inference and Netron keep, and that
ONNX defines as carrying no semantics. Attributes on a call node would have to be declared by
the function as parameters (semantics) and ``doc_string`` is free text, so it only repeats the
numbers for a human reader. Runtimes inline functions and drop both, which is fine: the
metadata is for the compiler that maps a group to a kernel.

Weights are graph initializers passed to the function as inputs (an ONNX function has no
initializers), after the group's activation inputs. Function bodies keep the graph's tensor
names and op names; a folded or merged step is named after its ops joined by ``+``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fusiontune.errors import FusiontuneError
from fusiontune.export.onnx_export import (
    _DEFAULT_DOMAINS,
    CUSTOM_DOMAIN_VERSION,
    MIN_OPSET,
    _attribute,
    _check_schema,
    _fill_tensor,
    _form_for_opset,
    _value_info,
    opset_for,
    spelled_ops,
)
from fusiontune.frontend.embedded_plan import META, PLAN_DOMAIN, PLAN_DOMAIN_VERSION
from fusiontune.ir.graph import Graph, Op
from fusiontune.planner.plan import Group, Plan
from fusiontune.sim.hardware import HardwareConfig

if TYPE_CHECKING:
    import onnx

    from fusiontune.ops.linear import LinearParams
    from fusiontune.sim.execute import Node

NODE_METADATA_IR_VERSION = 10
"""First ONNX IR version with ``NodeProto.metadata_props`` (onnx 1.16, IR version 10)."""
GROUP_PREFIX = "group"
"""Functions and call nodes are named ``group<k>``, ``k`` the group's execution position."""
META_KEYS = (
    "group", "mode", "pattern", "ops", "folded", "act_traffic_bytes", "weight_load_bytes",
    "traffic_bytes", "buffer_needed_bytes", "crossbars_needed", "cycles", "energy_pj",
    "feasible",
)  # fmt: skip
"""Per-node metadata keys (each prefixed with :data:`META`); see docs/export.md."""
FORMATS = ("onnx", "schedule")


@dataclass(frozen=True)
class ExportSummary:
    """What :func:`export_plan` wrote.

    Attributes:
        format: ``"onnx"`` or ``"schedule"``.
        paths: files written.
        n_groups: groups of the plan.
        n_nodes: top-level nodes of the exported model (one per group; ONNX only).
        n_functions: group functions (groups of two or more ops; ONNX only).
        n_params: float parameters of the exported model's initializers (ONNX only).
    """

    format: str
    paths: tuple[Path, ...]
    n_groups: int
    n_nodes: int = 0
    n_functions: int = 0
    n_params: int = 0


def export_plan(
    graph: Graph,
    plan: Plan,
    path: str | Path,
    hw: HardwareConfig | None = None,
    format: str = "onnx",
    opset: int | None = None,
) -> ExportSummary:
    """Write ``plan`` of ``graph`` as an ONNX model or as a schedule.

    Args:
        graph: the model.
        plan: a legal plan of ``graph``.
        path: the ``.onnx`` file, or for ``format="schedule"`` the JSON file (a CSV with the
            same stem is written next to it).
        hw: hardware whose costs go into the metadata/schedule (the default chip if None).
        format: ``"onnx"`` or ``"schedule"``.
        opset: default-domain opset of the ONNX model (``None``:
            :func:`~fusiontune.export.onnx_export.opset_for`, 21, or 23 for a graph with a
            fused attention).

    Raises:
        FusiontuneError: unknown format, illegal plan or plan of another graph, a model that
            fails the ONNX checker, or a path that cannot be written.
    """
    if format not in FORMATS:
        from fusiontune.errors import closest

        raise FusiontuneError(
            f"export: format '{format}' is not one of {', '.join(FORMATS)}"
            f"{closest(format, FORMATS)}"
        )
    path = Path(path)
    if format == "schedule":
        from fusiontune.export.schedule import plan_schedule, write_schedule

        schedule = plan_schedule(graph, plan, hw)
        paths = write_schedule(schedule, path)
        return ExportSummary("schedule", paths, plan.n_groups)
    model, data = _plan_model(graph, plan, hw, opset)
    _write(data, path)
    return ExportSummary(
        "onnx",
        (path,),
        plan.n_groups,
        n_nodes=len(model.graph.node),
        n_functions=len(model.functions),
        n_params=onnx_params(model),
    )


def _write(data: bytes, path: Path) -> None:
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise FusiontuneError(f"export: cannot write '{path}': {exc.strerror}") from None


def onnx_params(model: onnx.ModelProto) -> int:
    """Float elements of a model's initializers (its parameters)."""
    from onnx import TensorProto

    floats = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}
    return sum(math.prod(t.dims) for t in model.graph.initializer if t.data_type in floats)


def plan_to_onnx(
    graph: Graph, plan: Plan, hw: HardwareConfig | None = None, opset: int | None = None
) -> onnx.ModelProto:
    """The plan as a checked ONNX model (module docstring: pipeline and metadata); ``opset``
    as :func:`export_plan`'s.

    Raises:
        FusiontuneError: the opset is out of range, the plan is illegal or names ops of
            another graph, or the model fails the ONNX checker.
    """
    return _plan_model(graph, plan, hw, opset)[0]


def _plan_model(
    graph: Graph, plan: Plan, hw: HardwareConfig | None, opset: int | None
) -> tuple[onnx.ModelProto, bytes]:
    """The checked model and its serialized bytes (serialized once, for the check and file)."""
    import onnx
    from onnx import helper

    opset = opset_for(graph) if opset is None else opset
    from fusiontune.planner.legality import check_plan
    from fusiontune.sim.execute import group_order

    latest = onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= opset <= latest:
        raise FusiontuneError(
            f"export: opset {opset} is not supported; allowed: {MIN_OPSET}..{latest}"
        )
    check_plan(graph, plan, source=f"plan of '{graph.name}'")
    hw = hw or HardwareConfig()
    names = _Names(graph)
    model = onnx.ModelProto()
    model.producer_name = "fusiontune"
    out = model.graph
    out.name = graph.name
    initializers: dict[str, np.ndarray] = {}
    custom_domains: set[str] = set()
    for position, index in enumerate(group_order(graph, plan)):
        group = plan.groups[index]
        body = _GroupBody(graph, group, opset, names)
        initializers.update(body.initializers)
        custom_domains |= body.domains
        meta = _group_metadata(graph, group, position, hw, body.folded)
        if len(group.ops) == 1 and len(body.nodes) == 1:
            node = body.nodes[0]
        else:
            fname = names.fresh(f"{GROUP_PREFIX}{position}")
            inputs = [*body.act_inputs, *body.const_inputs]
            fn = helper.make_function(
                PLAN_DOMAIN,
                fname,
                inputs,
                body.outputs,
                body.nodes,
                opset_imports=_opsets(opset, body.domains),
                doc_string=_doc(meta),
            )
            model.functions.append(fn)
            node = helper.make_node(fname, inputs, body.outputs, name=fname, domain=PLAN_DOMAIN)
        node.doc_string = _doc(meta)
        for key, value in meta.items():
            node.metadata_props.add(key=META + key, value=value)
        out.node.append(node)
    used = {t for n in out.node for t in n.input if t}
    for t in graph.outputs:  # a constant graph output (the importer keeps folded outputs)
        const = graph.tensors[t].value
        if const is not None:
            initializers[t] = np.asarray(const)
            used.add(t)
    for name in sorted(used & set(initializers)):
        _fill_tensor(out.initializer.add(), name, initializers[name])
    out.input.extend(_value_info(graph.tensors[n]) for n in graph.inputs)
    out.output.extend(_value_info(graph.tensors[n]) for n in graph.outputs)
    boundary = {t for n in out.node for t in n.output if t} - set(graph.outputs)
    out.value_info.extend(
        _value_info(graph.tensors[t]) for t in graph.activation_tensors if t in boundary
    )
    opsets = _opsets(opset, custom_domains)
    opsets.append(helper.make_opsetid(PLAN_DOMAIN, PLAN_DOMAIN_VERSION))
    model.opset_import.extend(opsets)
    model.ir_version = max(helper.find_min_ir_version_for(opsets[:1]), NODE_METADATA_IR_VERSION)
    from fusiontune import __version__

    for key, value in (
        ("plan", plan.to_json()),
        ("graph", graph.name),
        ("graph_hash", graph.structural_hash),
        ("hardware", hw.name),
        ("hw_hash", hw.hash),
        ("version", __version__),
    ):
        model.metadata_props.add(key=META + key, value=value)
    data = model.SerializeToString()
    try:
        onnx.checker.check_model(data, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FusiontuneError(
            f"export: the fused model of '{graph.name}' is not valid ONNX: {first}"
        ) from None
    return model, data


def _opsets(opset: int, domains: set[str]) -> list[onnx.OperatorSetIdProto]:
    from onnx import helper

    ids = [helper.make_opsetid("", opset)]
    ids += [helper.make_opsetid(d, CUSTOM_DOMAIN_VERSION) for d in sorted(domains)]
    return ids


# ---- names ----------------------------------------------------------------------------------
class _Names:
    """Fresh tensor and node names that clash with nothing in the graph."""

    def __init__(self, graph: Graph) -> None:
        self.taken = set(graph.tensors) | set(graph.op_by_name)

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name


# ---- one group ------------------------------------------------------------------------------
@dataclass
class _GroupBody:
    """The ONNX nodes of one compiled group and what they read and write.

    ``act_inputs`` are the group's activation inputs (execute's ``external_inputs``),
    ``const_inputs`` the initializers its nodes read, ``outputs`` the tensors it stores.
    """

    graph: Graph
    group: Group
    opset: int
    names: _Names
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    act_inputs: list[str] = field(default_factory=list)
    const_inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    initializers: dict[str, np.ndarray] = field(default_factory=dict)
    domains: set[str] = field(default_factory=set)
    folded: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        from fusiontune.sim.execute import compile_group, external_inputs, stored_tensors

        self.act_inputs = external_inputs(self.graph, self.group)
        self.outputs = stored_tensors(self.graph, self.group)
        for node in compile_group(self.graph, self.group):
            self._emit(node)
        consts: dict[str, None] = {}
        for n in self.nodes:
            consts.update(dict.fromkeys(t for t in n.input if t in self.initializers))
        self.const_inputs = list(consts)

    # -- constants ----------------------------------------------------------------------
    def _const(self, name: str) -> str:
        """An initializer of the graph, read by a node of the group."""
        value = self.graph.tensors[name].value
        assert value is not None
        self.initializers[name] = np.asarray(value)
        return name

    def _new_const(self, base: str, value: np.ndarray) -> str:
        name = self.names.fresh(base)
        self.initializers[name] = np.ascontiguousarray(value)
        return name

    def _node(
        self,
        op_type: str,
        inputs: list[str],
        outputs: list[str],
        name: str,
        attrs: dict[str, Any] | None = None,
        source: Op | None = None,
    ) -> None:
        from onnx import helper

        node = helper.make_node(op_type, inputs, outputs, name=name)
        for key, value in sorted((attrs or {}).items()):
            node.attribute.append(_attribute(source or _label_op(name, op_type), key, value))
        self.nodes.append(node)

    # -- compiled steps -----------------------------------------------------------------
    def _emit(self, node: Node) -> None:
        self._emit_step(node)
        for op in node.epilogue:  # element-wise ops the executor applies to each band
            self._emit_op(op)

    def _emit_step(self, node: Node) -> None:
        p = node.linear
        if p is None or (node.op is not None and len(node.folded) <= 1):
            assert node.op is not None
            self._emit_op(node.op)
            return
        self.folded += node.folded[1:]
        label = self.names.fresh("+".join(node.folded))
        # the step's own output: what its epilogue reads, else the node's output
        out = (
            self.graph.activation_inputs(node.epilogue[0])[0] if node.epilogue else node.outputs[0]
        )
        x = node.inputs[0]
        if p.kind in ("conv", "conv_transpose"):  # the source op's type, folded weights
            assert p.source_op is not None
            inputs = [x, self._new_const(f"{label}.weight", p.weight)]
            if p.bias is not None:
                inputs.append(self._new_const(f"{label}.bias", p.bias))
            op_type = "Conv" if p.kind == "conv" else "ConvTranspose"
            self._node(op_type, inputs, [out], label, dict(p.source_op.attrs), p.source_op)
            return
        self._emit_matrix(p, x, out, label)

    def _emit_op(self, graph_op: Op) -> None:
        """An op as it was, in the form the opset wants (as ``to_onnx`` writes it)."""
        spelled, constants = spelled_ops(graph_op, self.graph, self.opset)
        self.initializers.update(constants)
        for op in spelled:
            self._emit_node(op)

    def _emit_node(self, op: Op) -> None:
        from onnx import helper

        inputs, attrs, outputs, extra = _form_for_opset(op, self.graph, self.opset)
        _check_schema(op, self.opset)
        for t in inputs:
            if t and self.graph.is_constant(t):
                self._const(t)
        for name, value in extra.items():
            self.initializers[name] = value
        domain = None if op.domain in _DEFAULT_DOMAINS else op.domain
        if domain:
            self.domains.add(domain)
        node = helper.make_node(op.op_type, inputs, outputs, name=op.name, domain=domain)
        node.attribute.extend(_attribute(op, k, v) for k, v in sorted(attrs.items()))
        self.nodes.append(node)

    def _emit_matrix(self, p: LinearParams, x: str, out: str, label: str) -> None:
        """``apply_matrix`` as ONNX: one Gemm, one 1x1 Conv, or MatMul with Add/views."""
        x_shape = self.graph.tensors[x].shape
        out_shape = p.out_shape
        rank, out_rank = len(x_shape), len(out_shape)
        in_axis, out_axis = p.in_axis % rank, p.out_axis % out_rank
        k_in, n_out = p.weight.shape
        bias = p.bias
        if rank == 2 and out_rank == 2 and out_axis == 1:
            inputs = [x, self._new_const(f"{label}.weight", p.weight)]
            if bias is not None:
                inputs.append(self._new_const(f"{label}.bias", bias))
            attrs = {"transA": 1} if in_axis == 0 else {}
            self._node("Gemm", inputs, [out], label, attrs)
            return
        same_pixels = rank == out_rank == 4 and x_shape[2:] == out_shape[2:]
        if same_pixels and in_axis == 1 and out_axis == 1 and (bias is None or bias.ndim == 1):
            w = np.ascontiguousarray(p.weight.T).reshape(n_out, k_in, 1, 1)
            inputs = [x, self._new_const(f"{label}.weight", w)]
            if bias is not None:
                inputs.append(self._new_const(f"{label}.bias", bias))
            self._node("Conv", inputs, [out], label, {"kernel_shape": (1, 1)})
            return
        # general case, step by step as apply_matrix: features last, (rows x K) @ (K x N),
        # + bias, back to the output's shape with features on out_axis
        steps: list[tuple[str, list[str], dict[str, Any]]] = []
        moved = list(x_shape)
        if in_axis != rank - 1:
            perm = [a for a in range(rank) if a != in_axis] + [in_axis]
            steps.append(("Transpose", [], {"perm": tuple(perm)}))
            moved = [x_shape[a] for a in perm]
        full_bias = bias is not None and bias.ndim > 1
        if full_bias and len(moved) > 2:
            steps.append(("Reshape", [self._shape_const(label, [-1, k_in])], {}))
            moved = [math.prod(moved) // k_in, k_in]
        steps.append(("MatMul", [self._new_const(f"{label}.weight", p.weight)], {}))
        if bias is not None:
            b = bias.reshape(-1, n_out) if full_bias else bias
            steps.append(("Add", [self._new_const(f"{label}.bias", b)], {}))
        out_moved = [d for a, d in enumerate(out_shape) if a != out_axis] + [n_out]
        if moved[:-1] != out_moved[:-1]:
            steps.append(("Reshape", [self._shape_const(label, out_moved)], {}))
        if out_axis != out_rank - 1:
            perm = list(range(out_rank - 1))
            perm.insert(out_axis, out_rank - 1)
            steps.append(("Transpose", [], {"perm": tuple(perm)}))
        cur = x
        for k, (op_type, consts, attrs) in enumerate(steps):
            last = k == len(steps) - 1
            name = label if last else self.names.fresh(f"{label}/{op_type}")
            result = out if last else self.names.fresh(f"{label}/{op_type}.out")
            self._node(op_type, [cur, *consts], [result], name, attrs)
            cur = result

    def _shape_const(self, label: str, shape: list[int]) -> str:
        return self._new_const(f"{label}.shape", np.asarray(shape, dtype=np.int64))


def _label_op(name: str, op_type: str) -> Op:
    """A stand-in op for attribute conversion messages of a generated node."""
    return Op(name, op_type, (), ())


# ---- metadata -----------------------------------------------------------------------------
def _group_metadata(
    graph: Graph, group: Group, position: int, hw: HardwareConfig, folded: list[str]
) -> dict[str, str]:
    """The string metadata of one group (keys :data:`META_KEYS`, without the prefix)."""
    from fusiontune.planner.candidates import group_pattern
    from fusiontune.sim.cost import group_cost

    cost = group_cost(graph, group, hw)
    return {
        "group": str(position),
        "mode": group.mode.value,
        "pattern": group_pattern(graph, group),
        "ops": ",".join(group.ops),
        "folded": ",".join(folded),
        "act_traffic_bytes": str(cost.act_traffic_bytes),
        "weight_load_bytes": str(cost.weight_load_bytes),
        "traffic_bytes": str(cost.traffic_bytes),
        "buffer_needed_bytes": str(cost.buffer_needed_bytes),
        "crossbars_needed": str(cost.crossbars_needed),
        "cycles": str(cost.cycles),
        "energy_pj": repr(float(cost.energy_pj)),
        "feasible": json.dumps(cost.feasible),
    }


def _doc(meta: dict[str, str]) -> str:
    """One line for a human reader (Netron shows ``doc_string``)."""
    return (
        f"fusiontune group {meta['group']}: {meta['mode']} ({meta['pattern']}) of "
        f"{len(meta['ops'].split(','))} op(s); traffic {meta['traffic_bytes']} B, buffer "
        f"{meta['buffer_needed_bytes']} B, crossbars {meta['crossbars_needed']}, cycles "
        f"{meta['cycles']}"
    )
