"""What a fusion group needs, independent of the hardware (DESIGN §5 rule 7).

:func:`group_needs` returns the on-chip buffer a group needs, in activation *elements*, and
the weight matrices its LINEAR ops put on crossbars. The cost model turns elements into
bytes and matrices into crossbars for a given :class:`~fusiontune.sim.hardware.HardwareConfig`.

Buffer: the peak of the group's row schedule (:mod:`fusiontune.sim.capacity`), which the
executor measures: rows of tensors staged from DRAM, line buffers of windows, rows a tensor
keeps while a second reader lags (residual shortcuts), whole tensors of ops that cannot stream
(two-pass batch statistics, layout changes across the row axis), global-pool accumulators.
The per-op facts (window height, matrix shape) come from the op registry (``fusiontune/ops``).

Weight matrices: one :class:`~fusiontune.sim.matrices.WeightMatrix` per LINEAR op (``merge``
groups: one merged matrix), the formulas in :mod:`fusiontune.sim.matrices`.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusiontune.ir.graph import Graph
from fusiontune.planner.plan import Group
from fusiontune.sim.capacity import group_peak, peak_rows
from fusiontune.sim.groupmodel import group_model
from fusiontune.sim.hardware import HardwareConfig
from fusiontune.sim.matrices import WeightMatrix, linear_matrix, window_rows
from fusiontune.sim.rows import row_elems

__all__ = [
    "GroupNeeds",
    "LineBuffer",
    "WeightMatrix",
    "graph_names",
    "group_needs",
    "line_buffers",
    "linear_matrix",
    "window_rows",
]


@dataclass(frozen=True)
class GroupNeeds:
    """On-chip needs of one group (elements and matrices; see the module docstring).

    Attributes:
        buffer_elems: the peak of the group's row schedule.
        stream_elems: of which, rows of streamed tensors (line buffers, staged rows, lags).
        whole_elems: of which, tensors held whole.
        accumulator_elems: of which, global-pool accumulators.
        matrices: weight matrices on crossbars.
        folded_ops: AFFINE ops folded into a LINEAR op's weights.
    """

    buffer_elems: int
    stream_elems: int
    whole_elems: int
    accumulator_elems: int
    matrices: tuple[WeightMatrix, ...]
    folded_ops: frozenset[str]


def group_needs(graph: Graph, group: Group) -> GroupNeeds:
    """Buffer elements and weight matrices of one group (formulas in the module docstring).

    Computed by the group model (:mod:`fusiontune.sim.groupmodel`), the one implementation the
    cost model and the optimizer share; elements do not depend on the hardware.
    """
    model = group_model(graph, HardwareConfig())
    pos = graph.op_index
    members = [pos[n] for n in group.ops]
    peak = group_peak(graph, group)
    names = graph_names(graph)
    return GroupNeeds(
        buffer_elems=peak.elems,
        stream_elems=peak.stream_elems,
        whole_elems=peak.whole_elems,
        accumulator_elems=peak.accumulator_elems,
        matrices=group_matrices(graph, group),
        folded_ops=frozenset(names[i] for i in model.folded_ops(members)),
    )


def group_matrices(graph: Graph, group: Group) -> tuple[WeightMatrix, ...]:
    """The crossbar matrices of one group (``GroupNeeds.matrices``) without its buffer replay:
    one per LINEAR op in topological order, or the one merged matrix of a ``merge`` chain."""
    model = group_model(graph, HardwareConfig())
    pos = graph.op_index
    members = [pos[n] for n in group.ops]
    linear = [i for i in sorted(members) if model.st.matrix[i] is not None]
    if group.mode.value == "merge" and len(linear) >= 2:
        return (model.merged_matrix(members)[0],)
    return tuple(m for i in linear if (m := model.st.matrix[i]) is not None)


@dataclass(frozen=True)
class LineBuffer:
    """Rows of one tensor on chip at the peak of the group's schedule.

    Attributes:
        tensor: the tensor (produced in the group, or staged from DRAM).
        rows: rows it holds at that moment (along its row axis, ``sim/rows.py``).
        elems: activation elements held.
    """

    tensor: str
    rows: int
    elems: int


def line_buffers(graph: Graph, group: Group) -> tuple[LineBuffer, ...]:
    """What the group holds on chip at its peak, tensor by tensor (a schedule lists it).

    The elements add up to the peak less global-pool accumulators (and a non-overlapping
    pool's partial output row), which are not tensors' rows.
    """
    return tuple(
        LineBuffer(t, rows, rows * row_elems(graph, t))
        for t, rows in peak_rows(graph, group).items()
        if rows
    )


def graph_names(graph: Graph) -> tuple[str, ...]:
    """Op names by topological position."""
    return tuple(op.name for op in graph.ops)
