"""The analytic model of one fusion group, built op by op (the one implementation).

:func:`fusiontune.sim.cost.group_cost` and :func:`fusiontune.sim.needs.group_needs` evaluate a
whole group with it; the exact optimizer (:mod:`fusiontune.search.optimize`) grows groups one
op at a time along its walk of the ideal lattice (:class:`fusiontune.planner.lattice.Lattice`)
and reads the same numbers. The formulas are the ones documented in :mod:`fusiontune.sim.cost`
(traffic, crossbar mapping, buffer accesses, energy, cycles, capacity) and
:mod:`fusiontune.sim.needs` (weight matrices); the on-chip buffer a group needs is the peak of
its row schedule (:mod:`fusiontune.sim.capacity`).

Why op by op works: a group ``G`` is always grown from an ideal ``D`` (the ops before it) by
adding an op whose predecessors are all in ``D ∪ G``. Everything that depends on *which
ancestors of an op are in the group* — whether an AFFINE op folds into its LINEAR producer,
when a pipeline stage can start — is then fixed the moment the op joins (its ancestors in the
group are exactly its ancestors outside ``D``), so it is computed once per ``(D, op)``
(:class:`_Context`). What depends on later members (whether an output is still read outside
the group) is updated as they join. Each update costs O(degree).

Capacity along the walk: the exact peak needs the whole group, so the state carries two
bounds of it that only grow as ops join: a lower bound (the largest moment one op alone
needs: a window's input rows and its output row, or a WHOLE op's whole inputs and outputs)
and an upper bound (every tensor the group touches held whole). The optimizer prunes on the
first, accepts on the second, and replays the schedule only in between.

Pipeline fill is charged along the group's dataflow: a LINEAR stage ``c`` starts once each
LINEAR stage ``m`` feeding it (through non-LINEAR members) has produced the rows ``c``'s
window needs, ``start(c) = max_m start(m) + ceil(stage(m) · min(k0(c), rows(m)) / rows(m))``,
and a group's fill is its latest start (for a chain: the sum over consecutive stages).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

from fusiontune.ir.graph import Graph
from fusiontune.ir.opclass import OpClass
from fusiontune.ops import element_ops as op_element_ops  # per-op ALU counts: the op registry
from fusiontune.planner._index import bits, graph_index
from fusiontune.planner.plan import Group, Mode
from fusiontune.sim.capacity import Peak, cascade_elems, group_peak
from fusiontune.sim.hardware import BITS_PER_BYTE, HardwareConfig
from fusiontune.sim.matrices import WeightMatrix, crossbar_tiles, linear_matrix, window_rows
from fusiontune.sim.rows import RowKind, height, row_elems, row_map
from fusiontune.sim.tiling import PSUM_BITS_PER_ACT_BIT, Tiling, singleton_tiling

MAX_MODELS = 32  # (graph, hardware) models kept alive at once

# additive integer counts and additive float energies, in this order in a group's vector
INT_FIELDS = (
    "act_read_bytes", "act_write_bytes", "weight_load_bytes", "reload_bytes",
    "weight_reload_bytes", "act_traffic_bytes", "traffic_bytes", "dram_read_bytes",
    "dram_write_bytes", "buffer_access_bytes",
    "macs", "cell_ops", "adc_conversions", "dac_drives", "digital_ops", "programmed_cells",
    "compute_cycles", "memory_cycles", "cycles",
)  # fmt: skip
FLOAT_FIELDS = (
    "dram_pj", "buffer_pj", "cell_pj", "adc_pj", "dac_pj", "digital_pj", "weight_program_pj",
    "energy_pj",
)  # fmt: skip
FIELD_INDEX = {name: k for k, name in enumerate((*INT_FIELDS, *FLOAT_FIELDS))}
"""Position of each additive field in :attr:`GroupTotals.values`."""


# ---- per graph: structure (hardware-free) ---------------------------------------------------
@dataclass(frozen=True, eq=False)
class _Structure:
    """Per-op and per-tensor facts of one graph, by index (ops: topological position)."""

    graph: Graph
    n: int
    graph_names: tuple[str, ...]
    anc: tuple[int, ...]
    numel: tuple[int, ...]  # by tensor id
    producer: tuple[int, ...]  # op index, -1 for a graph input
    consumers: tuple[int, ...]  # op mask of activation readers
    is_output: tuple[bool, ...]
    single_reader: tuple[bool, ...]  # exactly one reader and not a graph output
    first_out: tuple[bool, ...]  # the first output of its producer
    acts: tuple[tuple[int, ...], ...]  # distinct activation inputs, by op
    used_outs: tuple[tuple[int, ...], ...]  # outputs that are read or are graph outputs
    cls: tuple[OpClass, ...]
    element_ops: tuple[int, ...]
    buffer_elems: tuple[int, ...]  # inputs + outputs of a non-LINEAR op, one access each
    out_elems: tuple[int, ...]  # first output
    has_bias: tuple[bool, ...]
    matrix: tuple[WeightMatrix | None, ...]
    cap_lb: tuple[int, ...]  # elements on chip at once while the op alone runs (a lower bound)
    acc_elems: tuple[int, ...]  # accumulator of a global pool
    stats: tuple[bool, ...]
    k0: tuple[int, ...]


@lru_cache(maxsize=MAX_MODELS)
def _structure(graph: Graph) -> _Structure:
    ix = graph_index(graph)
    tid: dict[str, int] = {}

    def tensor_id(name: str) -> int:
        k = tid.get(name)
        if k is None:
            k = tid[name] = len(tid)
        return k

    outputs = set(graph.outputs)
    acts, used_outs = [], []
    for op in graph.ops:
        acts.append(tuple(tensor_id(t) for t in graph.activation_inputs(op)))
        used_outs.append(
            tuple(
                tensor_id(t)
                for t in op.outputs
                if t and (t in outputs or graph.consumer_map.get(t))
            )
        )
    names = list(tid)
    pos = graph.op_index
    consumers = []
    for name in names:
        m = 0
        for c in graph.consumer_map.get(name, ()):
            m |= 1 << pos[c]
        consumers.append(m)
    shapes = [graph.tensors[t].shape for t in names]
    cap_lb, acc_elems, stats, k0s = [], [], [], []
    element_ops, buffer_elems, out_elems, has_bias = [], [], [], []
    matrix: list[WeightMatrix | None] = []
    for i, op in enumerate(graph.ops):
        cls = ix.classes[i]
        lb, acc = _op_capacity(graph, op)
        cap_lb.append(lb)
        acc_elems.append(acc)
        stats.append(cls is OpClass.STATS)
        k0s.append(window_rows(graph, op))
        out_elems.append(math.prod(graph.tensors[op.outputs[0]].shape))
        if cls is OpClass.LINEAR:
            matrix.append(linear_matrix(graph, op))
            has_bias.append(len(op.inputs) > 2 and bool(op.inputs[2]))
            element_ops.append(0)
            buffer_elems.append(0)
        else:
            matrix.append(None)
            has_bias.append(False)
            element_ops.append(op_element_ops(graph, op))
            buffer_elems.append(
                sum(math.prod(graph.tensors[t].shape) for t in graph.activation_inputs(op))
                + sum(math.prod(graph.tensors[t].shape) for t in op.outputs if t)
            )
    return _Structure(
        graph=graph,
        n=ix.n,
        graph_names=ix.names,
        anc=ix.anc,
        numel=tuple(math.prod(s) for s in shapes),
        producer=tuple(_producer_index(graph, pos, t) for t in names),
        consumers=tuple(consumers),
        is_output=tuple(t in outputs for t in names),
        single_reader=tuple(
            t not in outputs and len(graph.consumer_map.get(t, ())) == 1 for t in names
        ),
        first_out=tuple(
            t in graph.producer_map and graph.op(graph.producer_map[t]).outputs[0] == t
            for t in names
        ),
        acts=tuple(acts),
        used_outs=tuple(used_outs),
        cls=ix.classes,
        element_ops=tuple(element_ops),
        buffer_elems=tuple(buffer_elems),
        out_elems=tuple(out_elems),
        has_bias=tuple(has_bias),
        matrix=tuple(matrix),
        cap_lb=tuple(cap_lb),
        acc_elems=tuple(acc_elems),
        stats=tuple(stats),
        k0=tuple(k0s),
    )


_NEVER_FOLDED = frozenset({OpClass.ELEMWISE, OpClass.BINARY, OpClass.STATS, OpClass.WINDOW,
                           OpClass.OPAQUE})  # fmt: skip


def _op_capacity(graph: Graph, op: Any) -> tuple[int, int]:
    """(elements on chip at one moment of the op's own run, accumulator elements).

    The moment is one every schedule of every group holding the op goes through, whatever
    the group's mode: a sliding window (never folded or merged away) holds ``min(k, H)`` rows
    of its input (one, when it accumulates) and its new (or partial) output row; an op that
    cannot stream (and is never folded into weights) holds its whole inputs and outputs; a
    global pool its ``N x C`` accumulator and a row of its input. Other ops claim nothing
    (0), which keeps the bound valid.
    """
    rm = row_map(graph, op)
    acts = graph.activation_inputs(op)
    out = op.outputs[0]
    if rm.kind is RowKind.WINDOW and rm.window is not None and acts:
        x = acts[0]
        # an accumulating pool folds one input row at a time into its partial output row
        rows = 1 if rm.accumulate else min(height(graph, x), rm.window.effective[0])
        return rows * row_elems(graph, x) + row_elems(graph, out), 0
    if rm.kind is RowKind.REDUCE and acts:
        shape = graph.tensors[acts[0]].shape
        acc = shape[0] * shape[1]
        return acc + row_elems(graph, acts[0]), acc
    if rm.kind is RowKind.WHOLE and op.op_class in _NEVER_FOLDED:
        inside = sum(math.prod(graph.tensors[t].shape) for t in acts)
        made = sum(math.prod(graph.tensors[t].shape) for t in op.outputs if t)
        return inside + made, 0
    return 0, 0


def _producer_index(graph: Graph, pos: Any, tensor: str) -> int:
    name = graph.producer_map.get(tensor)
    return -1 if name is None else int(pos[name])


# ---- per (graph, hardware): crossbar costs of each LINEAR op --------------------------------
class _Linear(NamedTuple):
    crossbars: int
    cell_ops: int
    conversions: int
    drives: int
    programmed: int
    weight_bytes: int
    macs: int
    vector_reads: int
    stage_cycles: int
    out_rows: int
    psum_elems: int


def _map_matrix(m: WeightMatrix, hw: HardwareConfig) -> _Linear:
    """Crossbar mapping of one weight matrix (stage 2 of :mod:`fusiontune.sim.cost`)."""
    ws, ins = hw.weight_slices, hw.input_slices
    phys_cols = m.cols * ws
    tiles = crossbar_tiles(m, hw)  # block-diagonal packing of grouped matrices included
    row_tiles, col_tiles, crossbars = tiles.row_tiles, tiles.col_tiles, tiles.crossbars
    # the zero cells between a packed crossbar's diagonal blocks are programmed, but add no
    # cell reads, conversions or drives (each group's rows and columns are its own)
    return _Linear(
        crossbars=crossbars,
        cell_ops=m.vectors * ins * m.rows * phys_cols * m.count,
        conversions=m.vectors * ins * row_tiles * phys_cols * m.count,
        drives=m.vectors * ins * m.rows * col_tiles * m.count,
        programmed=tiles.programmed_cells,
        weight_bytes=hw.weight_bytes(m.n_weights),
        macs=m.macs,
        vector_reads=m.vectors * m.rows * m.count,
        stage_cycles=m.vectors * ins * hw.slice_cycles * _array_turns(crossbars, hw),
        out_rows=m.out_rows,
        psum_elems=_psum_elems(m, row_tiles, hw),
    )


def _array_turns(tiles: int, hw: HardwareConfig) -> int:
    """Turns a matrix's crossbar tiles take on ``hw.array_units`` arrays (1: all at once)."""
    return math.ceil(tiles / hw.array_units) if hw.array_units else 1


def _psum_elems(m: WeightMatrix, row_tiles: int, hw: HardwareConfig) -> int:
    """Partial-sum element accesses of the buffer between the turns of ``m``'s row tiles.

    With ``hw.psum_bits`` and ``hw.array_units`` set: ``array_units`` row tiles of a column
    tile compute at once, so each output element takes ``ceil(row_tiles / array_units)``
    turns and its partial sum is written to the buffer and read back once per extra turn.
    """
    if not hw.psum_bits or not hw.array_units:
        return 0
    extra_turns = math.ceil(row_tiles / hw.array_units) - 1
    return 2 * extra_turns * m.vectors * m.cols * m.count


def weight_reload(
    m: WeightMatrix, hw: HardwareConfig, input_bytes: int, crossbars: int
) -> tuple[int, int, int]:
    """DRAM re-reads of a tiled schedule: ``(weight bytes, input bytes, weight loads)``.

    Only with ``hw.weight_reload``, weights not resident and a group of one matrix ``m``
    needing more than ``n_crossbars`` crossbars (otherwise ``(0, 0, 1)``). The output is cut
    into ``t_s`` spatial tiles and ``t_k`` output-channel chunks so that a tile's input
    (``input_bytes / t_s``, halo ignored) and its partial sums (``psum_bits`` per output
    element, else ``PSUM_BITS_PER_ACT_BIT`` x ``act_bits``; split over ``t_s`` x ``t_k``)
    fit ``buffer_bytes``; every spatial tile re-loads the weights and every chunk re-reads
    the tile's input. The cheapest ``(t_s, t_k)`` is taken, as a mapper would; when not even
    one output vector fits, every vector re-loads the weights.
    """
    if not hw.weight_reload or hw.weights_resident or crossbars <= hw.n_crossbars:
        return 0, 0, 1
    w_bytes = hw.weight_bytes(m.n_weights)
    chunks = m.cols * m.count
    psum_bits = hw.psum_bits or PSUM_BITS_PER_ACT_BIT * hw.act_bits
    psum_bytes = m.vectors * chunks * math.ceil(psum_bits / BITS_PER_BYTE)
    best = (math.inf, m.vectors, chunks)
    for t_s in range(1, m.vectors + 1):
        if (t_s - 1) * w_bytes >= best[0]:
            break
        room = hw.buffer_bytes - input_bytes / t_s
        if room <= 0:
            continue
        t_k = max(1, math.ceil(psum_bytes / t_s / room))
        extra = (t_s - 1) * w_bytes + (t_k - 1) * input_bytes
        if t_k <= chunks and extra < best[0]:
            best = (extra, t_s, t_k)
    _, t_s, t_k = best
    return (t_s - 1) * w_bytes, (t_k - 1) * input_bytes, t_s


class _Context(NamedTuple):
    """What an op contributes given which of its ancestors are in the group (fixed per base)."""

    internal: tuple[int, ...]  # activation inputs produced inside the group
    folded: bool  # an AFFINE op folded into its LINEAR producer's weights
    source: bool  # its output comes straight out of a LINEAR op (through folds and views)
    ups: tuple[int, ...]  # LINEAR stages feeding its output through non-LINEAR members
    start: int  # cycle at which a LINEAR stage can start (pipeline fill)
    cascade: int  # a capacity lower bound: the op's cascade moment (capacity.cascade_elems)


class GroupState(NamedTuple):
    """Running totals of a group grown op by op (elements and counts, hardware-mapped)."""

    read_mask: int  # tensors read from outside
    read_elems: int
    write_elems: int
    lb_elems: int  # capacity lower bound: the largest one-op moment (grows with the group)
    ub_elems: int  # capacity upper bound: every tensor touched, whole, and accumulators
    digital: int  # ALU ops of non-LINEAR members
    buffer_elems: int  # buffer element accesses of non-LINEAR members
    lin_digital: int  # bias additions of LINEAR members
    lin_buffer: int  # LINEAR members: output writes + input vector reads
    crossbars: int
    cell_ops: int
    conversions: int
    drives: int
    programmed: int
    weight_bytes: int
    macs: int
    max_stage: int
    fill: int
    n_linear: int
    n_ops: int  # members so far (a singleton may run tiled: sim/tiling.py)
    last_op: int  # the op that joined last (the singleton's op when ``n_ops == 1``)


EMPTY = GroupState(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1)


class GroupTotals(NamedTuple):
    """A group's additive fields (:data:`INT_FIELDS` then :data:`FLOAT_FIELDS`) and capacity.

    ``over_buffer``/``over_crossbars`` say which capacity limit (rule 7) the group breaks;
    ``over_buffer`` is ``None`` while undecided (:meth:`GroupModel.finish` leaves the replay of
    the schedule to :meth:`GroupModel.fits`, which the optimizer calls only when it must).
    """

    values: tuple[float, ...]
    buffer_needed_bytes: int | None  # the peak (None: only known to fit or not to fit)
    crossbars_needed: int
    n_matrices: int
    over_buffer: bool | None
    over_crossbars: bool
    peak: Peak | None = None  # what the peak holds (elements), when replayed
    tiling: Tiling | None = None  # a singleton that runs tiled through DRAM (sim/tiling.py)

    @property
    def feasible(self) -> bool:
        """Not known to break a limit (an undecided buffer counts as fitting)."""
        return not (self.over_buffer or self.over_crossbars)


class GroupModel:
    """Incremental group costs of one graph on one hardware config (an ``Accumulator``).

    Use :func:`group_model` to get the cached instance of a (graph, hardware) pair.
    """

    def __init__(self, graph: Graph, hw: HardwareConfig) -> None:
        self.graph = graph
        self.hw = hw
        self.st = _structure(graph)
        self.lin = {i: _map_matrix(m, hw) for i, m in enumerate(self.st.matrix) if m is not None}
        # optional terms of the hardware (array_units, psum_bits, weight_reload) need the
        # group's matrices at the end; off by default, so the default path never lists them
        self._extra = bool(hw.array_units or hw.psum_bits or hw.weight_reload)
        self._base = -1
        self._ctx: dict[int, _Context] = {}
        self._solo: dict[int, Tiling | None] = {}

    # ---- the Accumulator protocol --------------------------------------------------------------
    def start(self, base: int) -> GroupState:
        """Begin groups grown from ideal ``base`` (contexts are cached per base)."""
        if base != self._base:
            self._base = base
            self._ctx = {}
        return EMPTY

    def add(self, state: GroupState, v: int, group_mask: int) -> GroupState:
        """The state after op ``v`` joins (``group_mask`` includes ``v``)."""
        st = self.st
        ctx = self._ctx.get(v)
        if ctx is None:
            ctx = self._context(v)
        read_mask, read_elems, write_elems = state.read_mask, state.read_elems, state.write_elems
        lb = max(state.lb_elems, st.cap_lb[v], ctx.cascade)
        ub = state.ub_elems + st.acc_elems[v]
        internal = ctx.internal
        for t in st.acts[v]:
            if t in internal:
                if not st.is_output[t] and not st.consumers[t] & ~group_mask:
                    write_elems -= st.numel[t]  # v was its last reader outside the group
            elif not read_mask >> t & 1:
                read_mask |= 1 << t
                read_elems += st.numel[t]
                ub += st.numel[t]
        for t in st.used_outs[v]:
            write_elems += st.numel[t]
            ub += st.numel[t]
        lin = self.lin.get(v)
        if lin is None:
            digital, buffer = state.digital, state.buffer_elems
            if not ctx.folded and st.cls[v] is not OpClass.LAYOUT:
                digital += st.element_ops[v]
                buffer += st.buffer_elems[v]
            return GroupState(read_mask, read_elems, write_elems, lb, ub, digital, buffer,
                              *state[7:-2], state.n_ops + 1, v)  # fmt: skip
        out = st.out_elems[v]
        return GroupState(
            read_mask, read_elems, write_elems, lb, ub, state.digital,
            state.buffer_elems,
            state.lin_digital + (out if st.has_bias[v] else 0),
            state.lin_buffer + out + lin.vector_reads,
            state.crossbars + lin.crossbars,
            state.cell_ops + lin.cell_ops,
            state.conversions + lin.conversions,
            state.drives + lin.drives,
            state.programmed + lin.programmed,
            state.weight_bytes + lin.weight_bytes,
            state.macs + lin.macs,
            max(state.max_stage, lin.stage_cycles),
            max(state.fill, ctx.start),
            state.n_linear + 1,
            state.n_ops + 1,
            v,
        )  # fmt: skip

    def dead(self, state: GroupState, merge_possible: bool) -> bool:
        """Whether no group containing this one (grown from the same base) is feasible.

        Monotone facts only: the capacity lower bound (one op's own moment) only grows, and
        without a merge the crossbars of the members only add up. A lone op over the buffer
        is alive when it can run tiled (:mod:`fusiontune.sim.tiling`); every group grown from
        it is then dead.
        """
        hw = self.hw
        if state.lb_elems * hw.act_bytes > hw.buffer_bytes:
            if state.n_ops != 1:
                return True
            solo = self.solo(state.last_op)
            if solo is not None and not solo.feasible:
                return True
        if merge_possible or state.crossbars <= hw.n_crossbars:
            return False
        return hw.weights_resident or state.n_linear >= 2

    def finish(self, state: GroupState, group_mask: int, mode: Mode) -> GroupTotals | None:
        """Totals of a legal group in ``mode``; ``None`` when it breaks a capacity limit.

        The buffer verdict takes the cheap way where it can: fits if even every tensor held
        whole fits, does not fit if one op's own moment does not; in between it is left
        undecided (``over_buffer is None``) for :meth:`fits`.
        """
        totals = self.totals(state, group_mask, mode, exact_buffer=False)
        return totals if totals.feasible else None

    def fits(self, group_mask: int, mode: Mode) -> bool:
        """Whether the group's schedule stays within the buffer (replayed, stopping early)."""
        ab, cap = self.hw.act_bytes, self.hw.buffer_bytes
        if not group_mask & (group_mask - 1):
            solo = self.solo(group_mask.bit_length() - 1)
            return solo is None or solo.feasible
        names = self.st.graph_names
        group = Group(tuple(names[i] for i in bits(group_mask)), mode)
        peak = group_peak(self.graph, group, limit=cap // ab)
        return peak.exact and peak.elems * ab <= cap

    # ---- whole groups --------------------------------------------------------------------------
    def evaluate(self, members: list[int], mode: Mode, exact_buffer: bool = True) -> GroupTotals:
        """Totals of the group ``members`` (op indices; a convex set) in ``mode``
        (``exact_buffer=False``: the buffer verdict from the bounds when they decide it)."""
        group = 0
        for v in members:
            group |= 1 << v
        base = 0
        for v in members:
            base |= self.st.anc[v]
        base &= ~group
        saved = (self._base, self._ctx)
        self._base, self._ctx = base, {}
        try:
            state = EMPTY
            mask = 0
            for v in sorted(members):
                mask |= 1 << v
                state = self.add(state, v, mask)
            return self.totals(state, group, mode, exact_buffer=exact_buffer)
        finally:
            self._base, self._ctx = saved

    def folded_ops(self, members: list[int]) -> list[int]:
        """Members folded into a LINEAR op's weights (no digital work left)."""
        group = 0
        base = 0
        for v in members:
            group |= 1 << v
        for v in members:
            base |= self.st.anc[v]
        saved = (self._base, self._ctx)
        self._base, self._ctx = base & ~group, {}
        try:
            out = []
            for v in sorted(members):
                if self._context(v).folded:
                    out.append(v)
            return out
        finally:
            self._base, self._ctx = saved

    def totals(
        self, s: GroupState, group_mask: int, mode: Mode, exact_buffer: bool = True
    ) -> GroupTotals:
        """Stage 4–6 of :mod:`fusiontune.sim.cost` from a group's running totals.

        ``exact_buffer``: replay the row schedule for the peak (else only decide whether the
        group fits, from the state's bounds when they decide it).
        """
        hw = self.hw
        lin_digital, lin_buffer = s.lin_digital, s.lin_buffer
        crossbars, cell_ops, conversions, drives = s.crossbars, s.cell_ops, s.conversions, s.drives
        programmed, weight_bytes, macs = s.programmed, s.weight_bytes, s.macs
        max_stage, fill, n_matrices = s.max_stage, s.fill, s.n_linear
        members = [self.lin[i] for i in bits(group_mask) if i in self.lin] if self._extra else []
        matrix = None
        if n_matrices == 1 and self._extra:
            matrix = next(self.st.matrix[i] for i in bits(group_mask) if i in self.lin)
        if mode is Mode.MERGE and s.n_linear >= 2:
            merged, last = self._merged(group_mask)
            lin = _map_matrix(merged, hw)
            members, matrix = [lin], merged
            crossbars, cell_ops, conversions = lin.crossbars, lin.cell_ops, lin.conversions
            drives, programmed, weight_bytes = lin.drives, lin.programmed, lin.weight_bytes
            macs, max_stage, fill, n_matrices = lin.macs, lin.stage_cycles, 0, 1
            out = self.st.out_elems[last]
            biased = any(self.st.has_bias[i] for i in bits(group_mask) if i in self.lin)
            lin_digital = out if biased else 0
            lin_buffer = out + lin.vector_reads
        ab = hw.act_bytes
        act_read, act_write = s.read_elems * ab, s.write_elems * ab
        solo = None
        if group_mask and not group_mask & (group_mask - 1):
            solo = self.solo(group_mask.bit_length() - 1)
        untiled_read = act_read
        if solo is not None:  # a singleton tiled through DRAM: its re-reads are DMA reads too
            assert solo.read_elems >= s.read_elems or not solo.feasible, solo
            act_read = max(act_read, solo.read_elems * ab)
        weight_load = 0 if hw.weights_resident else weight_bytes
        programmed = 0 if hw.weights_resident else programmed
        reload_weights = reload_inputs = psum_bytes = 0
        if matrix is not None:
            reload_weights, reload_inputs, loads = weight_reload(matrix, hw, untiled_read,
                                                                  crossbars)  # fmt: skip
            programmed *= loads
        reload = reload_weights + reload_inputs
        if members and hw.psum_bits:
            psum_elems = sum(m.psum_elems for m in members)
            psum_bytes = psum_elems * math.ceil(hw.psum_bits / BITS_PER_BYTE)
        digital = s.digital + lin_digital
        buffer_access = (s.buffer_elems + lin_buffer) * ab + act_read + act_write
        buffer_access += reload_inputs + psum_bytes
        dram_bytes = act_read + act_write + weight_load + reload
        dram_pj = dram_bytes * BITS_PER_BYTE * hw.dram_pj_per_bit
        buffer_pj = buffer_access * BITS_PER_BYTE * hw.buffer_pj_per_bit
        cell_pj = cell_ops * hw.cell_op_pj
        adc_pj = conversions * hw.adc_pj_per_conversion
        dac_pj = drives * hw.dac_pj_per_drive
        digital_pj = conversions * hw.shift_add_pj + digital * hw.digital_op_pj
        program_pj = programmed * hw.weight_program_pj_per_cell
        energy = dram_pj + buffer_pj + cell_pj + adc_pj + dac_pj + digital_pj + program_pj
        digital_cycles = math.ceil(digital / hw.digital_ops_per_cycle)
        compute = max(max_stage, digital_cycles) + fill
        if hw.array_units and n_matrices > 1 and crossbars > hw.array_units:
            compute = max(sum(m.stage_cycles for m in members), digital_cycles)  # stages share
        memory = math.ceil(dram_bytes * BITS_PER_BYTE * hw.clock_ghz / hw.dram_bandwidth_gbps)
        cycles = max(compute, memory) if hw.overlap_memory_compute else compute + memory
        buffer_needed: int | None
        over_buffer: bool | None
        if solo is not None:
            buffer_needed, peak, over_buffer = solo.peak_elems * ab, None, not solo.feasible
        else:
            buffer_needed, peak, over_buffer = self._buffer(s, group_mask, mode, exact_buffer)
        over_crossbars = crossbars > hw.n_crossbars and (hw.weights_resident or n_matrices > 1)
        values = (
            act_read, act_write, weight_load, reload, reload_weights, act_read + act_write,
            dram_bytes,
            act_read + weight_load + reload, act_write, buffer_access, macs, cell_ops,
            conversions, drives,
            digital, programmed, compute, memory, cycles,
            dram_pj, buffer_pj, cell_pj, adc_pj, dac_pj, digital_pj, program_pj, energy,
        )  # fmt: skip
        return GroupTotals(
            values=values,
            buffer_needed_bytes=buffer_needed,
            crossbars_needed=crossbars,
            n_matrices=n_matrices,
            over_buffer=over_buffer,
            over_crossbars=over_crossbars,
            peak=peak,
            tiling=solo,
        )

    def solo(self, v: int) -> Tiling | None:
        """The tiled schedule of op ``v`` alone (``None``: it fits one row at a time)."""
        if v not in self._solo:
            group = Group((self.st.graph_names[v],), Mode.SINGLE)
            self._solo[v] = singleton_tiling(self.graph, group, self.hw)
        return self._solo[v]

    def _buffer(
        self, s: GroupState, group_mask: int, mode: Mode, exact: bool
    ) -> tuple[int | None, Peak | None, bool | None]:
        """(peak bytes or None, the replayed peak or None, over the buffer? (None: undecided))."""
        ab, cap = self.hw.act_bytes, self.hw.buffer_bytes
        if not exact:
            if s.ub_elems * ab <= cap:
                return None, None, False
            if s.lb_elems * ab > cap:
                return None, None, True
            return None, None, None  # undecided: see fits()
        names = self.st.graph_names
        group = Group(tuple(names[i] for i in bits(group_mask)), mode)
        peak = group_peak(self.graph, group)
        return peak.elems * ab, peak, peak.elems * ab > cap

    def merged_matrix(self, members: list[int]) -> tuple[WeightMatrix, int]:
        """The one matrix of a P3 chain and the index of its last LINEAR op."""
        mask = 0
        for v in members:
            mask |= 1 << v
        return self._merged(mask)

    def _merged(self, group_mask: int) -> tuple[WeightMatrix, int]:
        linear = [i for i in bits(group_mask) if i in self.lin]
        matrices = [m for i in linear if (m := self.st.matrix[i]) is not None]
        assert len(matrices) == len(linear)
        first, last = matrices[0], matrices[-1]
        names = tuple(n for m in matrices for n in m.ops)
        merged = WeightMatrix(names, first.rows, last.cols, 1, first.vectors, first.out_rows, 1)
        return merged, linear[-1]

    # ---- contexts ------------------------------------------------------------------------------
    def _context(self, v: int) -> _Context:
        """Op ``v``'s contribution given the current base (its in-group ancestors are fixed)."""
        st = self.st
        base = self._base
        internal = tuple(t for t in st.acts[v] if st.producer[t] >= 0
                         and not base >> st.producer[t] & 1)  # fmt: skip
        ctxs = [self._ctx[st.producer[t]] for t in internal]
        cls = st.cls[v]
        # fold (AFFINE) and straight-from-LINEAR sources (LINEAR, folds, views)
        folded = source = False
        if cls is OpClass.LINEAR:
            source = True
        elif cls in (OpClass.AFFINE, OpClass.LAYOUT) and len(st.acts[v]) == 1 and internal:
            t = internal[0]
            if ctxs[0].source and st.first_out[t] and st.single_reader[t]:
                folded = cls is OpClass.AFFINE
                source = True
        # pipeline fill along the dataflow
        feeding: dict[int, None] = {}
        for c in ctxs:
            feeding.update(dict.fromkeys(c.ups))
        start = 0
        if cls is OpClass.LINEAR:
            for m in feeding:
                lm = self.lin[m]
                wait = math.ceil(lm.stage_cycles * min(st.k0[v], lm.out_rows) / lm.out_rows)
                start = max(start, self._ctx[m].start + wait)
            ups: tuple[int, ...] = (v,)
        else:
            ups = tuple(feeding)
        cascade = cascade_elems(self.graph, v, lambda u: not base >> u & 1)
        ctx = _Context(internal, folded, source, ups, start, cascade)
        self._ctx[v] = ctx
        return ctx


_MODELS: OrderedDict[tuple[str, str], GroupModel] = OrderedDict()


def group_model(graph: Graph, hw: HardwareConfig) -> GroupModel:
    """The (cached) :class:`GroupModel` of ``graph`` on ``hw``."""
    key = (graph.structural_hash, hw.hash)
    model = _MODELS.get(key)
    if model is None or model.graph is not graph:
        model = _MODELS[key] = GroupModel(graph, hw)
        while len(_MODELS) > MAX_MODELS:
            _MODELS.popitem(last=False)
    else:
        _MODELS.move_to_end(key)
    return model


def clear_models() -> None:
    """Drop every cached model (benchmarks measure the cold path with it)."""
    _MODELS.clear()
    _structure.cache_clear()
