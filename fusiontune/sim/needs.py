"""What a fusion group needs, independent of the hardware (DESIGN §5 rule 7).

:func:`group_needs` returns the on-chip buffer a group needs, in activation *elements*, and
the weight matrices its LINEAR ops put on crossbars. The cost model turns elements into
bytes and matrices into crossbars for a given :class:`~fusiontune.sim.hardware.HardwareConfig`.

Notation: a tensor of shape ``(N, C, S0, S1, ...)`` has ``rows = S0`` and a *row* of
``N * C * S1 * ...`` elements; a tensor of rank <= 2 is one row. ``k0 = d0 * (K0 - 1) + 1``
is the effective window height (kernel ``K0``, dilation ``d0``) of a Conv or pooling op.
Only tensors produced *inside* the group need buffering; tensors read from DRAM are staged
by the DMA as in the unfused plan and are not counted.
The per-op facts (window height, held elements, delay, matrix shape) come from the op
registry (``fusiontune/ops``); this module combines them over a group.

Buffer elements (summed):

- **line buffers**: for each intermediate tensor consumed inside the group by a sliding
  window (Conv or pooling with a kernel larger than 1x1):
  ``max over those consumers of min(k0, S0) * row``; consumed by a global pool: an
  accumulator of ``N * C`` elements. Point-wise consumers (1x1 convs, FCs, element-wise ops)
  pass elements straight through and need none.
- **held tensors** of STATS ops whose input is produced inside the group (two-pass groups,
  rule 3): a batch norm in training mode holds its whole input (statistics over N and
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

from fusiontune.ops import registry

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph, Op
    from fusiontune.planner.plan import Group


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


def window_rows(graph: Graph, op: Op) -> int:
    """Effective window height ``k0`` of a Conv or spatial pool (1 for other ops)."""
    return registry.window_rows(graph, op)


def _is_window(graph: Graph, op: Op) -> bool:
    return registry.is_window(graph, op)


def _rows(shape: tuple[int, ...]) -> int:
    return shape[2] if len(shape) >= 3 else 1


def _row_elems(shape: tuple[int, ...]) -> int:
    return math.prod(shape) // _rows(shape)


def linear_matrix(graph: Graph, op: Op) -> WeightMatrix:
    """The weight matrix of one LINEAR op (module docstring formulas)."""
    rows, cols, count, vectors, out_rows = registry.matrix_shape(graph, op)
    return WeightMatrix((op.name,), rows, cols, count, vectors, out_rows, window_rows(graph, op))


def _held_elems(graph: Graph, op: Op) -> int:
    return registry.held_elems(graph, op)


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


@dataclass(frozen=True)
class LineBuffer:
    """One line buffer of a group: the rows of an in-group tensor a window keeps on chip.

    Attributes:
        tensor: the buffered tensor (produced inside the group).
        consumer: the in-group op whose window sets the size (the largest one).
        rows: rows held (``min(k0, S0)``); 0 for a global pool's ``N * C`` accumulator.
        elems: activation elements held.
    """

    tensor: str
    consumer: str
    rows: int
    elems: int


def line_buffers(graph: Graph, group: Group) -> tuple[LineBuffer, ...]:
    """The group's line buffers, one per buffered tensor (module docstring, "line buffers").

    Their elements add up to :func:`group_needs`' ``line_buffer_elems`` (the group model's
    total; ``tests/test_export.py`` checks it): this is the per-tensor breakdown a schedule
    lists.
    """
    inside = set(group.ops)
    best: dict[str, LineBuffer] = {}
    for op in graph.subgraph_ops(group.ops):
        window, pool = _is_window(graph, op), registry.is_global_pool(op)
        if not (window or pool):
            continue
        acts = graph.activation_inputs(op)
        for t in acts:
            if graph.producer_map.get(t) not in inside:
                continue
            shape = graph.tensors[t].shape
            if window:
                rows = min(window_rows(graph, op), _rows(shape))
                need = LineBuffer(t, op.name, rows, rows * _row_elems(shape))
            else:
                first = graph.tensors[acts[0]].shape
                need = LineBuffer(t, op.name, 0, first[0] * first[1])
            if t not in best or need.elems > best[t].elems:
                best[t] = need
    return tuple(best.values())


def graph_names(graph: Graph) -> tuple[str, ...]:
    """Op names by topological position."""
    return tuple(op.name for op in graph.ops)
