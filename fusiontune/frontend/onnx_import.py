"""ONNX importer: an ``.onnx`` file becomes a linted :class:`~fusiontune.ir.graph.Graph`.

The pipeline, top to bottom:

1. read and parse the file (missing, truncated or non-ONNX files give one clear error);
2. bring the default-domain opset into the supported range (older models are converted);
3. fix the graph inputs' shapes (dynamic dimensions need ``input_shapes``);
4. inline model-local functions (:mod:`fusiontune.frontend.onnx_functions`), then walk the
   nodes in topological order: ``Constant`` nodes and initializers become constant
   tensors, nodes whose inputs are all constant (and ``Shape``/``Size`` of a static tensor)
   are folded, every other node becomes an :class:`~fusiontune.ir.graph.Op` whose output
   shapes come from the op registry (:func:`~fusiontune.ops.infer_op_shapes`), or from
   ``onnx.shape_inference`` for the ops it does not know (a two-input ``Sum`` becomes the
   equivalent ``Add``, so residual sums are BINARY);
5. warn once about op types the IR does not know (they load as OPAQUE), build, give each
   decomposed RMSNorm back its one op (:mod:`fusiontune.frontend.onnx_rmsnorm`) and lint.

Ops newer than the opsets converted to (an OpDef's ``onnx_since``: RMSNormalization, opset
23) pass the version converter in a private domain (:data:`KEEP_DOMAIN`) and are read back
as the default-domain op.

:func:`load_onnx_with_plan` also reads back the plan a model exported by
:func:`~fusiontune.export.plan_export.export_plan` spells: each top-level node (a group's
function call, or a plain node) is one group of the ops it inlines to.

Activations are float32: a float graph input of another dtype is rejected (no silent cast).
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import numpy_helper

from fusiontune import limits
from fusiontune.errors import FusiontuneError, ModelLoadError
from fusiontune.frontend.onnx_attention import expand_attention_ops
from fusiontune.frontend.onnx_functions import inline_local_functions
from fusiontune.frontend.onnx_quant import expand_quantized_ops, folded_grid
from fusiontune.frontend.onnx_rmsnorm import collapse_rms_norms
from fusiontune.frontend.onnx_schema import node_problem
from fusiontune.ir.graph import Graph, Op, Tensor
from fusiontune.ir.opclass import OpClass
from fusiontune.ir.quant import QuantParams
from fusiontune.ops import KNOWN_OP_TYPES, def_of, fold_output_elements, infer_op_shapes, op_def

if TYPE_CHECKING:
    from fusiontune.planner.plan import Plan

MIN_OPSET = 11
"""Oldest default-domain opset read directly; older models go through the version converter."""
MAX_OPSET = 21
"""Newest default-domain opset read directly (opsets 11-21 are supported)."""

DEFAULT_DOMAINS = frozenset({"", "ai.onnx"})
KEEP_DOMAIN = "fusiontune.newer_ops"
"""Domain a default-domain op newer than :data:`MAX_OPSET` (OpDef ``onnx_since``) takes
through the version converter, which has no earlier version of it; read back as default."""
KEEP_DOMAIN_VERSION = 1

NONDETERMINISTIC_TYPES = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
     "Multinomial"}
)  # fmt: skip
"""Never constant-folded: their value changes from run to run."""

ACTIVATION_DTYPE = "float32"
_MODEL_PROTO_FIRST_TAG = 0x08  # (field 1 << 3) | varint wire type, per the protobuf encoding
_FLOAT_DTYPES = frozenset({"float16", "float32", "float64", "bfloat16"})
HINT_SIZES = (224, 128, 64, 32, 16, 8, 1)
"""Sizes tried for the non-batch dynamic dimensions of the shape a dynamic-shape error
suggests (the first the model loads with; 224 is the usual image side)."""


def load_onnx(
    path: str | Path,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    input_values: Mapping[str, Any] | None = None,
) -> Graph:
    """Load an ONNX model file into a linted Graph.

    Args:
        path: the ``.onnx`` file (external data is read from its folder).
        input_shapes: static shapes for graph inputs, by input name; required for inputs
            with dynamic dimensions, e.g. ``{"x": (1, 3, 224, 224)}``.
        input_values: graph inputs pinned to a value (``{"sr": 16000}``): each becomes a
            constant of its declared dtype and shape, no longer an input, so what depends on
            it folds; an ``If`` whose condition then folds becomes the branch it takes.

    Returns:
        The Graph, named after the file stem. Ops of types the IR does not know are OPAQUE;
        one ``UserWarning`` lists them.

    Raises:
        ModelLoadError: the file is missing, truncated or not ONNX; the opset cannot be
            brought into 11-21; an input has a dynamic dimension and no ``input_shapes``
            entry; a float input is not float32; a shape cannot be inferred; a pinned value
            does not fit its input; an ``If`` condition depends on an input not pinned.
    """
    path = Path(path)
    model, model_bytes = _read_model(path)
    model = _convert_opset(expand_attention_ops(model), path)
    pins = dict(input_values or {})
    return _Importer(model, path, dict(input_shapes or {}), model_bytes, pins=pins).run()


def load_onnx_with_plan(
    path: str | Path,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    input_values: Mapping[str, Any] | None = None,
) -> tuple[Graph, Plan | None]:
    """Load an ONNX model and the fusion plan it was exported with, if any.

    For a model written by :func:`~fusiontune.export.plan_export.export_plan` (its
    metadata holds the plan), every top-level node becomes one group: a group function's
    call groups the ops of its body (folded and merged weights included, so a merged chain
    is one LINEAR op now), a plain node is a group of one. Modes follow from the ops: one op
    ``single``, two or more LINEAR ops ``stream``, otherwise ``fused``.

    Returns:
        The graph (as :func:`load_onnx` gives it) and the plan, or ``None`` for a model that
        carries no fusiontune plan.

    Raises:
        ModelLoadError: as :func:`load_onnx`, or the groups read back are not a legal plan
            of the graph (the file was edited after the export).
    """
    from fusiontune.frontend.embedded_plan import embedded_plan_json
    from fusiontune.ir.opclass import OpClass
    from fusiontune.planner.plan import Group, Mode, Plan

    path = Path(path)
    model, model_bytes = _read_model(path)
    model = _convert_opset(expand_attention_ops(model), path)
    pins = dict(input_values or {})
    importer = _Importer(model, path, dict(input_shapes or {}), model_bytes, pins=pins)
    graph = importer.run()
    if embedded_plan_json(model) is None:
        return graph, None
    members: dict[int, list[str]] = {}
    for op in graph.ops:
        members.setdefault(importer.origin[op.name], []).append(op.name)
    groups = []
    for names in members.values():
        n_linear = sum(graph.op(n).op_class is OpClass.LINEAR for n in names)
        mode = Mode.SINGLE if len(names) == 1 else Mode.STREAM if n_linear > 1 else Mode.FUSED
        groups.append(Group(tuple(names), mode))
    plan = Plan.of(graph, groups)
    from fusiontune.planner.legality import check_plan

    try:
        check_plan(graph, plan, source=f"{path}: embedded plan")
    except FusiontuneError as exc:
        raise ModelLoadError(str(exc)) from None
    return graph, plan


# ---- 1. reading ------------------------------------------------------------------------------
def _read_model(path: Path) -> tuple[onnx.ModelProto, int]:
    """The model, and its size in bytes for the fold limit: the file's, unless tensors lived
    outside it (``ByteSize`` walks the whole message: ~1 s for a 128 MB detector)."""
    if not path.exists():
        raise ModelLoadError(f"{path}: no such file")
    if path.is_dir():
        raise ModelLoadError(f"{path}: is a directory, not an ONNX file")
    data = path.read_bytes()
    if not data:
        raise ModelLoadError(f"{path}: the file is empty, not an ONNX model")
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        # serialized ModelProtos start with field 1 (ir_version, varint): tag byte 0x08
        what = "is truncated or corrupt" if data[0] == _MODEL_PROTO_FIRST_TAG else "is not ONNX"
        raise ModelLoadError(f"{path}: {what}, protobuf parsing failed ({reason})") from None
    if not model.HasField("graph") or not model.opset_import or not model.graph.node:
        raise ModelLoadError(
            f"{path}: holds no ONNX graph (no nodes or no opset_import); not an ONNX model file"
        )
    external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    try:
        onnx.external_data_helper.load_external_data_for_model(model, str(path.parent))
    except Exception as exc:
        raise ModelLoadError(f"{path}: cannot read external tensor data ({exc})") from None
    return model, (model.ByteSize() if external else len(data))


# ---- 2. opset ------------------------------------------------------------------------------
def _default_opset(model: onnx.ModelProto) -> int | None:
    for imp in model.opset_import:
        if imp.domain in DEFAULT_DOMAINS:
            return int(imp.version)
    return None


def _keep_newer_ops(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its default-domain nodes of ops newer than :data:`MAX_OPSET` moved to
    :data:`KEEP_DOMAIN` (the model itself when there are none)."""

    def newer(node: onnx.NodeProto) -> bool:
        since = op_def(node.op_type).onnx_since
        return node.domain in DEFAULT_DOMAINS and since is not None and since > MAX_OPSET

    if not any(newer(n) for n in model.graph.node):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        if newer(node):
            node.domain = KEEP_DOMAIN
    out.opset_import.append(onnx.helper.make_opsetid(KEEP_DOMAIN, KEEP_DOMAIN_VERSION))
    return out


def _convert_opset(model: onnx.ModelProto, path: Path) -> onnx.ModelProto:
    version = _default_opset(model)
    if version is None:
        raise ModelLoadError(f"{path}: imports no default-domain (ai.onnx) opset")
    if MIN_OPSET <= version <= MAX_OPSET:
        return model
    if version > MAX_OPSET:
        model = _keep_newer_ops(model)
    target = MIN_OPSET if version < MIN_OPSET else MAX_OPSET
    try:
        from onnx import version_converter

        converted = version_converter.convert_version(model, target)
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelLoadError(
            f"{path}: opset {version} is outside {MIN_OPSET}-{MAX_OPSET} and the ONNX version "
            f"converter cannot convert it to {target} ({reason}); re-export with "
            f"opset_version between {MIN_OPSET} and {MAX_OPSET}"
        ) from None
    return converted


# ---- helpers ---------------------------------------------------------------------------------
def _np_dtype_name(elem_type: int) -> str:
    if elem_type == onnx.TensorProto.BFLOAT16:
        return "bfloat16"
    return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))


def _attr_value(attr: onnx.AttributeProto) -> Any:
    """An ONNX attribute as an immutable Python value (graphs kept as serialized bytes)."""
    kind = onnx.AttributeProto
    if attr.type == kind.INT:
        return int(attr.i)
    if attr.type == kind.FLOAT:
        return _short_float(attr.f)
    if attr.type == kind.STRING:
        return attr.s.decode("utf-8", "replace")
    if attr.type == kind.INTS:
        return tuple(int(v) for v in attr.ints)
    if attr.type == kind.FLOATS:
        return tuple(_short_float(v) for v in attr.floats)
    if attr.type == kind.STRINGS:
        return tuple(s.decode("utf-8", "replace") for s in attr.strings)
    if attr.type == kind.TENSOR:
        return _read_only(numpy_helper.to_array(attr.t))
    if attr.type == kind.TENSORS:
        return tuple(_read_only(numpy_helper.to_array(t)) for t in attr.tensors)
    if attr.type == kind.GRAPH:
        return attr.g.SerializeToString(deterministic=True)
    if attr.type == kind.GRAPHS:
        return tuple(g.SerializeToString(deterministic=True) for g in attr.graphs)
    return onnx.helper.get_attribute_value(attr).SerializeToString(deterministic=True)


def _short_float(value: float) -> float:
    """The shortest decimal that is the same float32 (ONNX stores float attributes as float32).

    ``epsilon=1e-5`` written to ONNX reads back as 9.99999974e-06; this returns 1e-05 again,
    so a zoo graph exported with ``to_onnx`` and imported keeps its structural hash.
    """
    return float(str(np.float32(value)))


def _read_only(array: np.ndarray) -> np.ndarray:
    array = np.array(array)
    array.flags.writeable = False
    return array


def _constant_node_value(node: onnx.NodeProto) -> np.ndarray:
    """The value of a ``Constant`` node (any of its value_* attributes)."""
    attr = node.attribute[0]
    if attr.name == "value":
        return numpy_helper.to_array(attr.t)
    if attr.name == "value_float":
        return np.array(attr.f, dtype=np.float32)
    if attr.name == "value_floats":
        return np.array(list(attr.floats), dtype=np.float32)
    if attr.name == "value_int":
        return np.array(attr.i, dtype=np.int64)
    if attr.name == "value_ints":
        return np.array(list(attr.ints), dtype=np.int64)
    if attr.name == "sparse_value":
        dense = np.zeros(tuple(attr.sparse_tensor.dims), dtype=np.float32)
        values = numpy_helper.to_array(attr.sparse_tensor.values)
        indices = numpy_helper.to_array(attr.sparse_tensor.indices)
        dense = dense.astype(values.dtype)
        if indices.ndim == 1:
            dense.reshape(-1)[indices] = values
        else:
            dense[tuple(indices.T)] = values
        return dense
    raise ValueError(f"Constant attribute '{attr.name}' is not supported")


def _topological(nodes: Sequence[onnx.NodeProto]) -> list[int] | None:
    """Node indices in a stable topological order; ``None`` when the nodes hold a cycle."""
    produced_by: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for out in node.output:
            if out:
                produced_by.setdefault(out, i)
    order: list[int] = []
    state = [0] * len(nodes)  # 0 new, 1 on stack, 2 done
    for root in range(len(nodes)):
        if state[root]:
            continue
        stack: list[tuple[int, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            i, k = stack.pop()
            deps = [produced_by[n] for n in nodes[i].input if n and n in produced_by]
            if k < len(deps):
                stack.append((i, k + 1))
                j = deps[k]
                if state[j] == 1:  # on the stack: a cycle (j == i: it reads its own output)
                    return None
                if state[j] == 0:
                    state[j] = 1
                    stack.append((j, 0))
                continue
            state[i] = 2
            order.append(i)
    return order


def _type_name(value: onnx.ValueInfoProto) -> str:
    elem = value.type.tensor_type.elem_type
    return str(onnx.TensorProto.DataType.Name(elem)).lower()


def _itemsize(elem_type: int) -> int:
    """Bytes per element of an ONNX tensor type (8 for strings: a pointer each)."""
    try:
        return int(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize) or 1
    except Exception:
        return 8


def _check_constant(node: onnx.NodeProto, where: str) -> None:
    """Refuse a ``Constant`` whose value exceeds the memory limit (a sparse value is densified,
    so its dense shape counts)."""
    for attr in node.attribute:
        if attr.name == "value":
            dims, elem = list(attr.t.dims), attr.t.data_type
        elif attr.name == "sparse_value":
            dims, elem = list(attr.sparse_tensor.dims), attr.sparse_tensor.values.data_type
        else:
            continue
        limits.check_shape(node.output[0], dims, where)
        limits.check_tensor(node.output[0], dims, _itemsize(elem), where)


def _fold_bytes(op: Op, values: Sequence[np.ndarray | None]) -> int:
    """Estimated bytes of a folded op's output, for the ops whose output is not bounded by
    their inputs' size (ConstantOfShape, Expand, Tile, ...); 0 for the others."""
    n = fold_output_elements(op.op_type, values)
    if n is None:
        return 0
    if op.op_type == "ConstantOfShape":
        value = op.attr("value")
        itemsize = int(value.itemsize) if value is not None else 4  # float32 zeros by default
    else:
        first = values[0] if values and values[0] is not None else None
        itemsize = int(first.itemsize) if first is not None else 8
    return n * itemsize


_ZERO_SIZE_CLASSES = frozenset({OpClass.LINEAR, OpClass.AFFINE})
"""Classes whose constant operands are weights: an empty one of any rank is refused."""


def _check_zero_size(
    op: Op, constants: Mapping[str, np.ndarray], initializers: frozenset[str], where: str
) -> None:
    """Refuse an empty constant input of ``op`` (imported, not folded) that cannot be meant.

    A constant with a 0 dimension is refused when its rank is >= 2 (a weight matrix or kernel),
    or when ``op`` is LINEAR or AFFINE (a bias, a scale). Empty 1-D constants of other ops stay
    allowed: ONNX spells absent lists that way (Resize's ``roi``, Reshape to a scalar).

    Raises:
        ModelLoadError: naming the initializer/Constant, its shape, the axis that is 0 and the op.
    """
    empty = [t for t in op.inputs if t in constants and constants[t].size == 0]
    if not empty:
        return
    op_class: OpClass | None = None
    for t in empty:
        shape = tuple(int(d) for d in constants[t].shape)
        if len(shape) < 2:
            if op_class is None:
                op_class = def_of(op).classify(op, lambda name: name in constants)
            if op_class not in _ZERO_SIZE_CLASSES:
                continue
        axis = shape.index(0)
        kind = "initializer" if t in initializers else "Constant"
        raise ModelLoadError(
            f"{where}: {kind} '{t}' ({limits.shape_text(shape)}) has dimension {axis} = 0, "
            f"read by op '{op.name}' ({op.op_type}); a weight, bias or scale must not be "
            "empty (fix the export)"
        )


# ---- 3-5. the import proper -------------------------------------------------------------------
@dataclass
class _Importer:
    """State of one import: constants found so far and the Graph being built."""

    model: onnx.ModelProto
    path: Path
    input_shapes: dict[str, Sequence[int]]
    model_bytes: int  # size of the model for the fold limit (``_read_model``)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    tensors: dict[str, Tensor] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    unknown: Counter[str] = field(default_factory=Counter)
    origin: dict[str, int] = field(default_factory=dict)  # op name -> top-level node index
    grids: dict[str, QuantParams] = field(default_factory=dict)  # dequantized constants
    fold_limit_bytes: int = 0
    pins: dict[str, Any] = field(default_factory=dict)  # input name -> pinned value
    _initializer_names: frozenset[str] = frozenset()
    _taken_names: set[str] = field(default_factory=set)  # op names in use (branches inlined)
    _origin_now: int = 0  # the top-level node being imported
    _model_shapes: dict[str, tuple[tuple[int, ...] | None, int]] | None = None

    @property
    def opset(self) -> int:
        version = _default_opset(self.model)
        assert version is not None
        return version

    def fail(self, message: str) -> ModelLoadError:
        return ModelLoadError(f"{self.path}: {message}")

    def _tensor_value(self, proto: onnx.TensorProto, what: str) -> np.ndarray:
        """A stored tensor as an array, its size checked against the memory limit first."""
        dims = [int(d) for d in proto.dims]
        name = proto.name or what
        limits.check_shape(name, dims, str(self.path))
        limits.check_tensor(name, dims, _itemsize(proto.data_type), str(self.path))
        try:
            return numpy_helper.to_array(proto)
        except Exception as exc:
            raise self.fail(
                f"{what} '{name}' ({limits.shape_text(dims)}) cannot be read ({exc})"
            ) from None

    def run(self) -> Graph:
        graph = self.model.graph
        self.fold_limit_bytes = limits.fold_limit_bytes(self.model_bytes)
        if graph.sparse_initializer:
            raise self.fail("sparse initializers are not supported; densify them first")
        if not graph.output:
            raise self.fail("the graph declares no outputs, so nothing it computes is used")
        twice = [n for n, k in Counter(i.name for i in graph.initializer).items() if k > 1]
        if twice:
            raise self.fail(f"initializer '{twice[0]}' is given twice; names must be unique")
        for init in graph.initializer:
            self.constants[init.name] = self._tensor_value(init, "initializer")
        self._initializer_names = frozenset(init.name for init in graph.initializer)
        self._pin_inputs()
        self._read_inputs()
        nodes, origin = inline_local_functions(self.model, str(self.path))
        outs = [o.name for o in graph.output]
        nodes, origin = expand_quantized_ops(nodes, origin, self.constants, outs)
        order = _topological(nodes)
        if order is None:
            raise self.fail("the graph has a cycle")
        names = self._op_names(nodes)
        self._taken_names = set(names)
        for i in order:
            self._origin_now = origin[i]
            self._import_node(nodes[i], names[i])
        outputs = [o.name for o in graph.output]
        for name in outputs:
            if name in self.constants:
                self._constant_tensor(name)
            elif name not in self.tensors:
                raise self.fail(f"graph output '{name}' is never produced")
        if self.unknown:
            listed = ", ".join(f"{t} ({n})" for t, n in sorted(self.unknown.items()))
            warnings.warn(
                f"{self.path}: {sum(self.unknown.values())} op(s) of types the IR does not "
                f"know load as OPAQUE: {listed}",
                UserWarning,
                stacklevel=3,
            )
        g = Graph(self.path.stem, self.tensors, tuple(self.ops), tuple(self.inputs), tuple(outputs))
        try:
            return collapse_rms_norms(g).lint()
        except FusiontuneError as exc:
            raise self.fail(f"the imported graph is inconsistent: {exc}") from None

    # ---- inputs -------------------------------------------------------------------------
    def _read_inputs(self) -> None:
        graph_inputs = [v for v in self.model.graph.input if v.name not in self.constants]
        names = [v.name for v in graph_inputs]
        for name in self.input_shapes:
            if name not in names:
                from fusiontune.errors import closest

                kind = "a constant (initializer)" if name in self.constants else "not a graph input"
                raise self.fail(
                    f"input_shapes names '{name}', which is {kind}{closest(name, names)}; "
                    f"graph inputs: {', '.join(names)}"
                )
        for value in graph_inputs:
            shape = self._input_shape(value, graph_inputs)
            dtype = _np_dtype_name(value.type.tensor_type.elem_type)
            if np.dtype(dtype if dtype != "bfloat16" else "float32").kind not in "biuf":
                raise self.fail(
                    f"input '{value.name}' has dtype {_type_name(value)}; fusiontune models "
                    f"numeric inputs ({ACTIVATION_DTYPE} activations, integer ids, booleans)"
                )
            if dtype in _FLOAT_DTYPES and dtype != ACTIVATION_DTYPE:
                raise self.fail(
                    f"input '{value.name}' has dtype {dtype}; fusiontune models {ACTIVATION_DTYPE} "
                    "activations, re-export the model in float32"
                )
            self.tensors[value.name] = Tensor(value.name, shape, dtype)
            self.inputs.append(value.name)

    def _input_shape(
        self, value: onnx.ValueInfoProto, graph_inputs: Sequence[onnx.ValueInfoProto]
    ) -> tuple[int, ...]:
        if not value.type.HasField("tensor_type"):
            raise self.fail(f"input '{value.name}' is not a tensor (sequences/maps unsupported)")
        ttype = value.type.tensor_type
        declared: list[int | str | None] = []
        given = self.input_shapes.get(value.name)
        if ttype.HasField("shape"):
            for axis, d in enumerate(ttype.shape.dim):
                if d.HasField("dim_value") and d.dim_value > 0:
                    declared.append(int(d.dim_value))
                elif d.HasField("dim_value") and given is None:
                    raise self.fail(
                        f"input '{value.name}' dimension {axis} is {d.dim_value}; dimensions "
                        f"must be >= 1 (fix the export, or give --input-shape {value.name}=...)"
                    )
                else:
                    declared.append(d.dim_param or None)
        if given is not None:
            shape = tuple(int(d) for d in given)
            limits.check_shape(value.name, shape, str(self.path))
            if ttype.HasField("shape") and len(shape) != len(declared):
                raise self.fail(
                    f"input_shapes gives '{value.name}' rank {len(shape)} {shape}, the model "
                    f"declares rank {len(declared)}"
                )
            for axis, (g, d) in enumerate(zip(shape, declared)):
                if g <= 0:
                    raise self.fail(
                        f"input_shapes gives '{value.name}' dimension {axis} = {g}; "
                        "dimensions must be positive"
                    )
                if isinstance(d, int) and g != d:
                    raise self.fail(
                        f"input_shapes gives '{value.name}' dimension {axis} = {g}, the model "
                        f"fixes it to {d}"
                    )
            return shape
        if not ttype.HasField("shape") or any(not isinstance(d, int) for d in declared):
            self._dynamic_error(value.name, declared, ttype.HasField("shape"), graph_inputs)
        return tuple(int(d) for d in declared)  # type: ignore[arg-type]

    def _dynamic_error(
        self,
        name: str,
        declared: list[int | str | None],
        has_shape: bool,
        graph_inputs: Sequence[onnx.ValueInfoProto],
    ) -> None:
        if not has_shape:
            what = "has no shape (unknown rank)"
        else:
            axis = next(i for i, d in enumerate(declared) if not isinstance(d, int))
            label = f" ('{declared[axis]}')" if declared[axis] else ""
            what = f"dimension {axis}{label} is dynamic"
        shapes = self._suggest_shapes(graph_inputs)
        if shapes is None:
            raise self.fail(
                f"input '{name}' {what}; give static shapes: input_shapes={{'{name}': (...)}} in "
                f"Python or --input-shape {name}=D,D,... on the CLI (the sizes the model was "
                f"exported for; none of {', '.join(map(str, HINT_SIZES))} loads)"
            )
        cli = " ".join(f"--input-shape {n}={','.join(map(str, s))}" for n, s in shapes.items())
        py = ", ".join(f"'{n}': {tuple(s)}" for n, s in shapes.items())
        raise self.fail(
            f"input '{name}' {what}; give static shapes: input_shapes={{{py}}} in Python or "
            f"{cli} on the CLI (checked: the model loads with these)"
        )

    def _suggest_shapes(
        self, graph_inputs: Sequence[onnx.ValueInfoProto]
    ) -> dict[str, tuple[int, ...]] | None:
        """Static shapes for every input with a dynamic dimension that the model really loads
        with: batch (axis 0) 1, the other dynamic dimensions the first of :data:`HINT_SIZES`
        that works; ``None`` when none does or a rank is unknown."""
        for size in HINT_SIZES:
            shapes = dict(self.input_shapes)
            for value in graph_inputs:
                ttype = value.type.tensor_type
                if value.name in shapes:
                    continue
                if not ttype.HasField("shape"):
                    return None
                dims = [d.dim_value if d.HasField("dim_value") else 0 for d in ttype.shape.dim]
                if all(d > 0 for d in dims):
                    continue
                shapes[value.name] = tuple(
                    d if d > 0 else (1 if axis == 0 else size) for axis, d in enumerate(dims)
                )
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _Importer(self.model, self.path, shapes, self.model_bytes, pins=self.pins).run()
            except FusiontuneError:
                continue
            return {
                n: tuple(int(d) for d in s) for n, s in shapes.items() if n not in self.input_shapes
            }
        return None

    def _pin_inputs(self) -> None:
        """Pinned inputs become constants of their declared dtype and shape."""
        declared = {v.name: v for v in self.model.graph.input if v.name not in self.constants}
        for name, given in self.pins.items():
            if name not in declared:
                from fusiontune.errors import closest

                kind = "a constant (initializer)" if name in self.constants else "not a graph input"
                raise self.fail(
                    f"input_values pins '{name}', which is {kind}{closest(name, list(declared))}; "
                    f"graph inputs: {', '.join(declared)}"
                )
            if name in self.input_shapes:
                raise self.fail(f"input '{name}' is given both a shape and a pinned value")
            self.constants[name] = self._pinned_value(declared[name], given)

    def _pinned_value(self, value: onnx.ValueInfoProto, given: Any) -> np.ndarray:
        name, ttype = value.name, value.type.tensor_type
        dtype = np.dtype(_np_dtype_name(ttype.elem_type))
        raw = np.asarray(given)
        if raw.dtype.kind not in "biuf":
            raise self.fail(f"input_values pins '{name}' to {given!r}, which is not numeric")
        array = raw.astype(dtype)
        if not np.array_equal(array.astype(np.float64), raw.astype(np.float64)):
            raise self.fail(
                f"input_values pins '{name}' to {raw.tolist()}, which {dtype} cannot hold exactly"
            )
        dims = list(ttype.shape.dim) if ttype.HasField("shape") else None
        if dims is not None and all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
            shape = tuple(int(d.dim_value) for d in dims)
            if array.size != int(np.prod(shape)):
                raise self.fail(
                    f"input_values pins '{name}' to {array.size} value(s); the model declares "
                    f"it {shape} ({int(np.prod(shape))} value(s))"
                )
            return _read_only(array.reshape(shape))
        if dims is not None and len(dims) != array.ndim:
            raise self.fail(
                f"input_values pins '{name}' to a value of rank {array.ndim} {array.shape}; the "
                f"model declares rank {len(dims)}"
            )
        return _read_only(array)

    def _take_branch(self, node: onnx.NodeProto, name: str) -> None:
        """An ``If`` whose condition is a constant becomes the branch it takes (its nodes
        imported in place, its outputs named as the If's); any other ``If`` is refused."""
        cond = node.input[0] if node.input else ""
        if cond not in self.constants:
            raise self.fail(self._runtime_condition(name, cond))
        value = np.asarray(self.constants[cond])
        if value.size != 1:
            raise self.fail(f"op '{name}' (If): condition '{cond}' has {value.size} elements")
        key = "then_branch" if bool(value.reshape(-1)[0]) else "else_branch"
        branch = next((a.g for a in node.attribute if a.name == key), None)
        if branch is None:
            raise self.fail(f"op '{name}' (If) has no {key}")
        if branch.sparse_initializer:
            raise self.fail(f"op '{name}' (If): sparse initializers are not supported")
        for init in branch.initializer:
            self.constants[init.name] = self._tensor_value(init, "initializer")
        produced = {out for n in branch.node for out in n.output if out}
        rename: dict[str, str] = {}
        aliases: list[tuple[str, str]] = []
        for if_out, br_out in zip(node.output, [o.name for o in branch.output]):
            if not if_out:
                continue
            if br_out in produced and br_out not in rename:
                rename[br_out] = if_out
            else:
                aliases.append((if_out, br_out))
        nodes = [_renamed(n, rename) for n in branch.node]
        order = _topological(nodes)
        if order is None:
            raise self.fail(f"op '{name}' (If): its {key} has a cycle")
        for i in order:
            self._import_node(nodes[i], self._branch_op_name(nodes[i], name, i))
        for if_out, br_out in aliases:
            source = rename.get(br_out, br_out)
            if source in self.constants:
                self.constants[if_out] = self.constants[source]
            else:
                identity = onnx.helper.make_node("Identity", [source], [if_out])
                self._import_node(identity, self._branch_op_name(identity, name, len(nodes)))

    def _branch_op_name(self, node: onnx.NodeProto, if_name: str, index: int) -> str:
        """The node's own name, or ``<If>/<OpType>_<index>``, made unique among all ops."""
        name = node.name or f"{if_name}/{node.op_type}_{index}"
        while name in self._taken_names:
            name += "_"
        self._taken_names.add(name)
        return name

    def _runtime_condition(self, name: str, cond: str) -> str:
        """Why an If cannot be taken at import: the graph inputs its condition depends on."""
        producer = {out: op for op in self.ops for out in op.outputs if out}
        seen: set[str] = set()
        todo = [cond]
        found: list[str] = []
        while todo:
            t = todo.pop()
            if t in seen or not t:
                continue
            seen.add(t)
            if t in self.inputs:
                found.append(t)
            elif t in producer:
                todo.extend(producer[t].inputs)
        if not found:
            return (
                f"op '{name}' (If): its condition '{cond}' is known only at run time; "
                "fusiontune needs one static graph"
            )
        listed = ", ".join(f"'{t}'" for t in sorted(found))
        pins = ", ".join(f"'{t}': ..." for t in sorted(found))
        cli = " ".join(f"--pin {t}=VALUE" for t in sorted(found))
        return (
            f"op '{name}' (If): its condition '{cond}' depends on graph input {listed}, known "
            f"only at run time; fusiontune needs one static graph: pin the input to the value "
            f"you deploy with (input_values={{{pins}}} in Python, {cli} on the CLI) and the If "
            "becomes the branch it takes"
        )

    # ---- nodes --------------------------------------------------------------------------
    @staticmethod
    def _op_names(nodes: Sequence[onnx.NodeProto]) -> list[str]:
        """ONNX node names, or ``<OpType>_<index>`` where a name is empty or taken."""
        given = Counter(n.name for n in nodes if n.name)
        taken: set[str] = set()
        names = []
        for i, node in enumerate(nodes):
            name = node.name if node.name and given[node.name] == 1 else ""
            if not name:
                name = f"{node.op_type}_{i}"
                while name in taken or name in given:
                    name += "_"
            taken.add(name)
            names.append(name)
        return names

    def _import_node(self, node: onnx.NodeProto, name: str) -> None:
        domain = "" if node.domain in DEFAULT_DOMAINS | {KEEP_DOMAIN} else node.domain
        for t in node.input:
            if t and t not in self.constants and t not in self.tensors:
                raise self.fail(
                    f"op '{name}' ({node.op_type}) reads '{t}', which is never produced"
                )
        if node.op_type == "Constant" and not domain:
            _check_constant(node, str(self.path))
            try:
                self.constants[node.output[0]] = _constant_node_value(node)
            except Exception as exc:
                raise self.fail(f"op '{name}' (Constant): {exc}") from None
            return
        if not domain:
            problem = node_problem(node, name, self.opset, self._dtype_of)
            if problem is not None:
                raise self.fail(problem)
        attrs = {a.name: _attr_value(a) for a in node.attribute}
        op_type = node.op_type
        if op_type == "Sum" and not domain and len(node.input) == 2:
            op_type = "Add"  # same semantics; a two-input Sum is a residual Add (BINARY)
        if op_type == "If" and not domain:
            self._take_branch(node, name)
            return
        op = Op(name, op_type, tuple(node.input), tuple(node.output), attrs, domain=domain)
        if not domain and self._fold(node, op):
            return
        _check_zero_size(op, self.constants, self._initializer_names, str(self.path))
        if domain or node.op_type not in KNOWN_OP_TYPES:
            self.unknown[f"{domain}::{node.op_type}" if domain else node.op_type] += 1
        for t in op.inputs:
            if t in self.constants:
                self._constant_tensor(t)
        shapes = self._output_shapes(node, op)
        for out, (shape, dtype) in zip(op.outputs, shapes):
            if out:
                limits.check_shape(out, shape, str(self.path))
                self.tensors[out] = Tensor(out, shape, dtype)
        self.ops.append(op)
        self.origin[name] = self._origin_now

    def _dtype_of(self, name: str) -> str:
        """Element type of an imported tensor or constant (``""``: not known yet)."""
        if name in self.tensors:
            return self.tensors[name].dtype
        if name in self.constants:
            return str(self.constants[name].dtype)
        return ""

    def _constant_tensor(self, name: str) -> None:
        if name not in self.tensors:
            value = self.constants[name]
            grid = self.grids.get(name)
            self.tensors[name] = Tensor(name, value.shape, str(value.dtype), value, grid)

    def _fold(self, node: onnx.NodeProto, op: Op) -> bool:
        """Fold ``op`` into constants when its value is known now; True when folded."""
        present = [t for t in node.input if t]
        static_value = def_of(op).static_value
        if static_value is not None and present and present[0] in self.tensors:
            self.constants[node.output[0]] = static_value(op, self.tensors[present[0]].shape)
            return True
        if not present or op.op_type in NONDETERMINISTIC_TYPES:
            return False
        if any(t not in self.constants for t in present):
            return False
        if any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
            for a in node.attribute
        ):
            return False
        values = [self.constants[t] if t else None for t in node.input]
        if _fold_bytes(op, values) > self.fold_limit_bytes:
            return False  # too large to hold as a constant: the op runs instead
        results = self._evaluate(node, op, values)
        if results is None or sum(r.nbytes for r in results) > self.fold_limit_bytes:
            return False
        for out, value in zip(node.output, results):
            if out:
                self.constants[out] = np.asarray(value)
        grid = folded_grid(op, values)  # a dequantized weight: keep its integer grid
        if grid is not None:
            self.grids[node.output[0]] = grid
        return True

    def _evaluate(
        self, node: onnx.NodeProto, op: Op, values: list[np.ndarray | None]
    ) -> list[np.ndarray] | None:
        """Run one op on constants: our reference executor first, then ONNX's."""
        try:
            from fusiontune.reference import run_op

            results = [np.asarray(v) for v in run_op(op, values)]
            if len(results) >= sum(1 for out in node.output if out):
                return results
        except Exception:
            pass
        try:
            from onnx.reference import ReferenceEvaluator

            feeds = {t: v for t, v in zip(node.input, values) if t}
            ref = ReferenceEvaluator(node, opsets={"": self.opset})
            return [np.asarray(v) for v in ref.run(None, feeds)]
        except Exception:
            return None

    def _output_shapes(self, node: onnx.NodeProto, op: Op) -> list[tuple[tuple[int, ...], str]]:
        """(shape, dtype) of each output: our inference, else onnx.shape_inference."""
        ours: list[tuple[int, ...] | None] = [None] * len(op.outputs)
        our_error: FusiontuneError | None = None
        if def_of(op).shape is not None:
            try:
                ours = list(infer_op_shapes(op, self.tensors))
            except FusiontuneError as exc:
                our_error = exc  # e.g. a shape input that did not fold: ask ONNX below
            except (IndexError, TypeError, ValueError) as exc:  # inputs the op cannot take
                shapes = ", ".join(
                    f"'{t}' {limits.shape_text(self.tensors[t].shape)}"
                    for t in op.inputs
                    if t in self.tensors
                )
                raise self.fail(
                    f"op '{op.name}' ({op.op_type}) cannot take its inputs ({shapes}): "
                    f"{type(exc).__name__}: {exc}"
                ) from None
        result: list[tuple[tuple[int, ...], str]] = []
        onnx_shapes: dict[str, tuple[tuple[int, ...] | None, int]] | None = None
        for k, out in enumerate(op.outputs):
            if not out:
                result.append(((), ""))
                continue
            shape, elem = ours[k], 0
            if shape is None:
                if onnx_shapes is None:
                    onnx_shapes = self._onnx_node_shapes(node)
                shape, elem = onnx_shapes.get(out, (None, 0))
                if shape is None:
                    shape, elem = self._onnx_model_shapes().get(out, (None, 0))
            if our_error is not None and shape is None:
                raise self.fail(str(our_error))
            if shape is None or any(d <= 0 for d in shape):
                raise self.fail(
                    f"cannot infer a static shape for output '{out}' of op '{op.name}' "
                    f"({op.op_type}); fusiontune needs static shapes"
                )
            result.append((tuple(shape), self._dtype(op, k, elem)))
        return result

    def _dtype(self, op: Op, k: int, elem_type: int) -> str:
        d = def_of(op)
        if d.dtype_attr is not None:
            return _np_dtype_name(int(op.attr(d.dtype_attr)))
        if elem_type:
            return _np_dtype_name(elem_type)
        if k in d.out_dtypes:
            return d.out_dtypes[k]
        data = op.inputs[d.data_input] if len(op.inputs) > d.data_input else ""
        return self.tensors[data].dtype if data in self.tensors else ACTIVATION_DTYPE

    def _onnx_node_shapes(
        self, node: onnx.NodeProto
    ) -> dict[str, tuple[tuple[int, ...] | None, int]]:
        """onnx.shape_inference on a one-node model whose inputs have our shapes/constants."""
        from onnx import helper

        inputs, inits = [], []
        for t in dict.fromkeys(x for x in node.input if x):
            if t in self.constants:
                inits.append(numpy_helper.from_array(self.constants[t], t))
            else:
                tensor = self.tensors[t]
                elem = helper.np_dtype_to_tensor_dtype(np.dtype(tensor.dtype))
                inputs.append(helper.make_tensor_value_info(t, elem, tensor.shape))
        outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
        graph = helper.make_graph([node], "node", inputs, outputs, initializer=inits)
        model = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        model.ir_version = self.model.ir_version
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
        except Exception:
            return {}
        return _value_shapes(inferred.graph)

    def _onnx_model_shapes(self) -> dict[str, tuple[tuple[int, ...] | None, int]]:
        """onnx.shape_inference on the whole model with static input shapes (computed once)."""
        if self._model_shapes is None:
            model = onnx.ModelProto()
            model.CopyFrom(self.model)
            for value in model.graph.input:
                if value.name in self.tensors:
                    dims = value.type.tensor_type.shape.dim
                    del dims[:]
                    for d in self.tensors[value.name].shape:
                        dims.add().dim_value = d
            try:
                inferred = onnx.shape_inference.infer_shapes(
                    model, strict_mode=False, data_prop=True
                )
                self._model_shapes = _value_shapes(inferred.graph)
            except Exception:
                self._model_shapes = {}
        return self._model_shapes


def _renamed(node: onnx.NodeProto, rename: Mapping[str, str]) -> onnx.NodeProto:
    """A copy of ``node`` with value names mapped by ``rename`` (in its inputs and outputs,
    and in the nodes and outputs of its subgraphs, which may read outer values)."""
    if not rename:
        return node
    out = onnx.NodeProto()
    out.CopyFrom(node)
    _rename_in(out, rename)
    return out


def _rename_in(node: onnx.NodeProto, rename: Mapping[str, str]) -> None:
    for k, t in enumerate(node.input):
        node.input[k] = rename.get(t, t)
    for k, t in enumerate(node.output):
        node.output[k] = rename.get(t, t)
    for a in node.attribute:
        for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
            for inner in g.node:
                _rename_in(inner, rename)
            for value in g.output:
                value.name = rename.get(value.name, value.name)


def _value_shapes(graph: onnx.GraphProto) -> dict[str, tuple[tuple[int, ...] | None, int]]:
    """Static shapes (or None) and element types of every value_info/output of a graph."""
    out: dict[str, tuple[tuple[int, ...] | None, int]] = {}
    for value in [*graph.value_info, *graph.output]:
        ttype = value.type.tensor_type
        shape: tuple[int, ...] | None = None
        if ttype.HasField("shape") and all(d.HasField("dim_value") for d in ttype.shape.dim):
            shape = tuple(int(d.dim_value) for d in ttype.shape.dim)
        out[value.name] = (shape, int(ttype.elem_type))
    return out
