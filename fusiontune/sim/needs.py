"""What a fusion group needs, independent of the hardware (DESIGN §5 rule 7).

:func:`group_needs` returns the on-chip buffer a group needs, in activation *elements*, and
the weight matrices its LINEAR ops put on crossbars. The cost model turns elements into
bytes and matrices into crossbars for a given :class:`~fusiontune.sim.hardware.HardwareConfig`.

Notation: a tensor of shape ``(N, C, S0, S1, ...)`` has ``rows = S0`` and a *row* of
``N * C * S1 * ...`` elements; a tensor of rank <= 2 is one row. ``k0 = d0 * (K0 - 1) + 1``
is the effective window height (kernel ``K0``, dilation ``d0``) of a Conv or pooling op.
Only tensors produced *inside* the group need buffering; tensors read from DRAM are staged
by the DMA as in the unfused plan and are not counted.

Buffer elements (summed):

- **line buffers**: for each intermediate tensor consumed inside the group by a sliding
  window (Conv or pooling with a kernel larger than 1x1):
  ``max over those consumers of min(k0, S0) * row``; consumed by a global pool: an
  accumulator of ``N * C`` elements. Point-wise consumers (1x1 convs, FCs, element-wise ops)
  pass elements straight through and need none.
- **held tensors** of STATS ops whose input is produced inside the group (two-pass groups,
  rule 3): BatchNormalization in training mode holds its whole input (statistics over N and
  the spatial axes of every channel); Instance/GroupNormalization hold one sample
  (``prod(shape[1:])``); LayerNormalization, Softmax, LogSoftmax and LpNormalization hold one
  slice ``prod(shape[axis:])``; Reduce* ops keep an accumulator of their output's size.
- **skip tensors**: a BINARY op (residual Add, gate Mul) whose two inputs arrive with
  different delays must hold the earlier one. The delay ``D(t)`` of a tensor, in rows, is 0
  for tensors read from outside the group and ``max(D(inputs)) + delay(op)`` for the others,
  with ``delay = k0 - 1`` for windowed ops, ``S0`` (the whole input) for global pools and
  held STATS ops, 0 otherwise. The BINARY op holds ``min(numel(a), row(a) * |D(a) - D(b)|)``
  elements of its earlier input ``a`` (strides are ignored: a conservative row count).

Weight matrices (one :class:`WeightMatrix` per LINEAR op; ``merge`` groups one merged matrix):

- Conv, weight ``(C_out, C_in/g, K...)``: ``rows = C_in/g * prod(K)``, ``cols = C_out/g``,
  ``count = g`` independent matrices, ``vectors = N * prod(out spatial)``.
- Gemm ``(M, K) x (K, N)``: ``rows = K``, ``cols = N``, ``vectors = M``; MatMul with a constant
  weight ``(..., K, N)``: ``count = prod(batch dims)``, ``vectors = numel(out) / N / count``.
- ``merge`` (P3): the chain ``L1 ... Lk`` becomes one matrix ``rows(L1) x cols(Lk)`` with the
  vectors of ``L1``: a bottleneck (512->64->512) grows to 512x512, a wide chain
  (64->512->64) shrinks to 64x64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph, Op
    from fusiontune.planner.plan import Group

SPATIAL_POOLS = frozenset({"MaxPool", "AveragePool", "LpPool"})
GLOBAL_POOLS = frozenset({"GlobalAveragePool", "GlobalMaxPool"})
SAMPLE_STATS = frozenset({"InstanceNormalization", "GroupNormalization"})
SLICE_STATS = frozenset({"LayerNormalization", "Softmax", "LogSoftmax", "LpNormalization"})
# ONNX default axes: LayerNormalization -1, Softmax/LogSoftmax -1 (opset 13), LpNormalization -1
DEFAULT_STATS_AXIS = -1


@dataclass(frozen=True)
class WeightMatrix:
    """One weight matrix on crossbars.

    Attributes:
        ops: the LINEAR op(s) it implements (several for a merged chain).
        rows: matrix rows (the input vector length).
        cols: matrix columns (outputs per vector), before bit slicing.
        count: independent matrices of this shape (groups of a grouped convolution).
        vectors: matrix-vector products per inference, per matrix.
        out_rows: rows ``S0`` of the output (``vectors`` for an FC), for pipeline fill.
        window_rows: effective window height ``k0`` of the op (1 for point-wise ops).
    """

    ops: tuple[str, ...]
    rows: int
    cols: int
    count: int
    vectors: int
    out_rows: int
    window_rows: int

    @property
    def n_weights(self) -> int:
        return self.rows * self.cols * self.count

    @property
    def macs(self) -> int:
        return self.vectors * self.n_weights


@dataclass(frozen=True)
class GroupNeeds:
    """On-chip needs of one group (elements and matrices; see the module docstring)."""

    line_buffer_elems: int
    held_elems: int
    skip_elems: int
    matrices: tuple[WeightMatrix, ...]
    folded_ops: frozenset[str]

    @property
    def buffer_elems(self) -> int:
        return self.line_buffer_elems + self.held_elems + self.skip_elems


def _kernel(graph: Graph, op: Op) -> tuple[int, ...]:
    kernel = op.attr("kernel_shape")
    if not kernel and op.op_type == "Conv":  # ONNX: inferred from the weight when omitted
        kernel = graph.tensors[op.inputs[1]].shape[2:]
    return tuple(int(k) for k in kernel or ())


def window_rows(graph: Graph, op: Op) -> int:
    """Effective window height ``k0`` of a Conv or spatial pool (1 for other ops)."""
    if op.op_type not in SPATIAL_POOLS and op.op_type != "Conv":
        return 1
    kernel = _kernel(graph, op)
    if not kernel:
        return 1
    dil = op.attr("dilations") or (1,) * len(kernel)
    return int(dil[0]) * (kernel[0] - 1) + 1


def _is_window(graph: Graph, op: Op) -> bool:
    if op.op_type not in SPATIAL_POOLS and op.op_type != "Conv":
        return False
    return any(k > 1 for k in _kernel(graph, op))


def _rows(shape: tuple[int, ...]) -> int:
    return shape[2] if len(shape) >= 3 else 1


def _row_elems(shape: tuple[int, ...]) -> int:
    return math.prod(shape) // _rows(shape)


def linear_matrix(graph: Graph, op: Op) -> WeightMatrix:
    """The weight matrix of one LINEAR op (module docstring formulas)."""
    w = graph.tensors[op.inputs[1]].shape
    out = graph.tensors[op.outputs[0]].shape
    if op.op_type == "Conv":
        g = int(op.attr("group", 1))
        rows, cols, count = math.prod(w[1:]), w[0] // g, g
        vectors = out[0] * math.prod(out[2:])
        out_rows = _rows(out)
    elif op.op_type == "Gemm":
        trans_b = int(op.attr("transB", 0))
        rows, cols = (w[1], w[0]) if trans_b else (w[0], w[1])
        count, vectors = 1, math.prod(out) // cols
        out_rows = vectors
    else:  # MatMul with a constant weight (..., K, N)
        if len(w) == 1:
            rows, cols = w[0], 1
        else:
            rows, cols = w[-2], w[-1]
        count = math.prod(w[:-2]) if len(w) > 2 else 1
        vectors = math.prod(out) // cols // count
        out_rows = vectors
    return WeightMatrix((op.name,), rows, cols, count, vectors, out_rows, window_rows(graph, op))


def _held_elems(graph: Graph, op: Op) -> int:
    shape = graph.tensors[op.inputs[0]].shape
    if op.op_type == "BatchNormalization":
        return math.prod(shape)
    if op.op_type in SAMPLE_STATS:
        return math.prod(shape[1:])
    if op.op_type in SLICE_STATS:
        axis = int(op.attr("axis", DEFAULT_STATS_AXIS))
        axis = axis + len(shape) if axis < 0 else axis
        return math.prod(shape[axis:])
    return math.prod(graph.tensors[op.outputs[0]].shape)  # Reduce*: an accumulator


def group_needs(graph: Graph, group: Group) -> GroupNeeds:
    """Buffer elements and weight matrices of one group (formulas in the module docstring).

    Computed by the group model (:mod:`fusiontune.sim.groupmodel`), the one implementation the
    cost model and the optimizer share; elements do not depend on the hardware.
    """
    from fusiontune.sim.groupmodel import group_model
    from fusiontune.sim.hardware import HardwareConfig

    model = group_model(graph, HardwareConfig())
    pos = graph.op_index
    members = [pos[n] for n in group.ops]
    totals = model.evaluate(members, group.mode)
    linear = [i for i in sorted(members) if model.st.matrix[i] is not None]
    if group.mode.value == "merge" and len(linear) >= 2:
        matrices: tuple[WeightMatrix, ...] = (model.merged_matrix(members)[0],)
    else:
        matrices = tuple(m for i in linear if (m := model.st.matrix[i]) is not None)
    names = graph_names(graph)
    return GroupNeeds(
        line_buffer_elems=totals.line_elems,
        held_elems=totals.held_elems,
        skip_elems=totals.skip_elems,
        matrices=matrices,
        folded_ops=frozenset(names[i] for i in model.folded_ops(members)),
    )


def graph_names(graph: Graph) -> tuple[str, ...]:
    """Op names by topological position."""
    return tuple(op.name for op in graph.ops)
