"""Analytic cost of a fusion plan: traffic, energy, cycles, capacity (DESIGN §6).

The evaluation reads as a short list of stages, per group:

1. **traffic** — bytes of each *distinct* activation tensor the group reads from outside
   itself (graph inputs included) plus bytes of each tensor it produces that is consumed
   outside it or is a graph output (unused optional outputs cost nothing);
   ``act_bytes = ceil(act_bits / 8)`` per element. Weights are programmed from DRAM once
   per inference (``weight_load_bytes``) unless ``hw.weights_resident``. With
   ``hw.weight_reload``, a matrix larger than the crossbars adds the re-reads of a tiled
   schedule (``reload_bytes``, see :func:`_weight_reload`).
2. **crossbar mapping** — each weight matrix (:mod:`fusiontune.sim.needs`) of ``rows x cols``
   is bit-sliced into ``cols * weight_slices`` physical columns and tiled onto
   ``ceil(rows / R) * ceil(cols * weight_slices / C)`` crossbars (times ``count`` for grouped
   convolutions). Per matrix-vector product and input bit-slice (``input_slices =
   ceil(act_bits / dac_bits)``): every mapped cell operates once (cell ops), every physical
   column of every row tile is converted once (ADC conversions, one shift-add each), every
   row of every column tile is driven once (DAC drives).
3. **on-chip buffer accesses** — DMA staging of every DRAM byte, each LINEAR op reading one
   input vector of ``rows`` elements per product and writing its output, every other
   non-LAYOUT op reading its inputs and writing its output once; with ``hw.psum_bits`` and
   ``hw.array_units``, the partial sums of row tiles that take turns (:func:`_psum_bytes`).
   AFFINE ops folded into a LINEAR op's weights (and LAYOUT views) cost nothing.
4. **energy** — DRAM bytes x 8 x E_dram + buffer bytes x 8 x E_buf + cell ops x E_cell +
   conversions x E_adc + drives x E_dac + (shift-adds x E_shift_add + element ops x E_alu)
   + programmed cells x E_program (only when weights are not resident).
5. **cycles** — ``max(compute, memory)`` (double buffering; ``compute + memory`` when
   ``hw.overlap_memory_compute`` is False). A LINEAR stage takes
   ``vectors x input_slices x slice_cycles`` (``slice_cycles``: the crossbar read or the
   ADCs shared by ``cols_per_adc`` columns, the slower), times ``ceil(tiles / array_units)``
   when its crossbar tiles take turns on ``hw.array_units`` arrays; element ops run on
   ``digital_ops_per_cycle`` lanes alongside. A group runs at the pace of its slowest stage
   plus the pipeline fill of a ``stream`` group: each stage but the last must first produce
   ``k0`` of its ``out_rows`` rows for the next stage's window. Stages that share the arrays
   (their tiles together exceed ``array_units``) run one after the other instead.
6. **capacity** (rule 7) — line buffers, held and skip tensors must fit ``buffer_bytes``;
   resident weights of the whole plan must fit ``n_crossbars``; with weights loaded per
   inference a single matrix is time-multiplexed over the crossbars, but the stages of a
   ``stream`` group must all be resident at once.

Every count and energy is **additive over groups** (the exact oracle relies on it); the
exceptions are ``buffer_needed_bytes`` (a max over groups) and ``crossbars_needed`` (a sum
over groups when weights are resident, else a max), and ``lower_bound_bytes`` (per graph).
Group costs are cached by ``(graph.structural_hash, group.key, hw.hash)``.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from fusiontune.ir.opclass import OpClass
from fusiontune.sim.hardware import HardwareConfig
from fusiontune.sim.needs import (
    GLOBAL_POOLS,
    SPATIAL_POOLS,
    GroupNeeds,
    group_needs,
    linear_matrix,
)

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph, Op
    from fusiontune.planner.plan import Group, Plan

BITS_PER_BYTE = 8
STATS_OPS_PER_ELEM = 2  # modelling convention: one statistics pass + one normalising pass
ELEMENT_OPS_PER_ELEM = 1  # modelling convention: one ALU op per output element
MAX_CACHED_PAIRS = 32  # (graph, hardware) pairs whose group costs stay cached
# Partial sums of a tiled schedule, when hw.psum_bits leaves them unset, are held at twice the
# activation precision (ZigZag 3.9.1, parser/onnx/onnx_operator_parser.py: intermediate output
# precision = 2 x activation bits).
PSUM_BITS_PER_ACT_BIT = 2

# additive integer counts and additive float energies, in this order in the cached vectors
INT_FIELDS = (
    "act_read_bytes", "act_write_bytes", "weight_load_bytes", "reload_bytes", "act_traffic_bytes",
    "traffic_bytes", "dram_read_bytes", "dram_write_bytes", "buffer_access_bytes",
    "macs", "cell_ops", "adc_conversions", "dac_drives", "digital_ops", "programmed_cells",
    "compute_cycles", "memory_cycles", "cycles",
)  # fmt: skip
FLOAT_FIELDS = (
    "dram_pj", "buffer_pj", "cell_pj", "adc_pj", "dac_pj", "digital_pj", "weight_program_pj",
    "energy_pj",
)  # fmt: skip


@dataclass(frozen=True)
class CostFields:
    """The cost fields shared by a group and a whole plan: the additive counts and energies
    (:data:`INT_FIELDS`, :data:`FLOAT_FIELDS`), then capacity and feasibility."""

    act_read_bytes: int
    act_write_bytes: int
    weight_load_bytes: int
    reload_bytes: int
    act_traffic_bytes: int
    traffic_bytes: int
    dram_read_bytes: int
    dram_write_bytes: int
    buffer_access_bytes: int
    macs: int
    cell_ops: int
    adc_conversions: int
    dac_drives: int
    digital_ops: int
    programmed_cells: int
    compute_cycles: int
    memory_cycles: int
    cycles: int
    dram_pj: float
    buffer_pj: float
    cell_pj: float
    adc_pj: float
    dac_pj: float
    digital_pj: float
    weight_program_pj: float
    energy_pj: float
    buffer_needed_bytes: int
    crossbars_needed: int
    feasible: bool
    violations: tuple[str, ...]

    def cost_dict(self) -> dict[str, Any]:
        """The cost fields as a flat dict (violations joined by ``; ``)."""
        out = {f.name: getattr(self, f.name) for f in fields(CostFields)}
        out["violations"] = "; ".join(self.violations)
        return out


@dataclass(frozen=True)
class GroupMetrics(CostFields):
    """Cost of one group on one hardware config (fields as in the module docstring)."""

    ops: tuple[str, ...]
    mode: str
    vector: np.ndarray = field(repr=False, compare=False)  # see _group_cost

    def as_dict(self) -> dict[str, Any]:
        """Flat row for the ``groups`` table (ops joined by ``+``, violations by ``; ``)."""
        head = {"ops": "+".join(self.ops), "n_ops": len(self.ops), "mode": self.mode}
        return {**head, **self.cost_dict()}


@dataclass(frozen=True)
class Metrics(CostFields):
    """Totals of a plan on one hardware config; ``groups`` holds the per-group rows.

    Additive fields are sums over groups; ``buffer_needed_bytes`` is the max over groups,
    ``crossbars_needed`` the sum (resident weights) or the max (weights loaded per
    inference); ``lower_bound_bytes`` is the compulsory traffic of the graph.
    """

    graph_name: str
    graph_hash: str
    hw_hash: str
    n_groups: int
    lower_bound_bytes: int
    groups: tuple[GroupMetrics, ...] = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        """Flat row for the ``trials`` table (no per-group rows; violations joined by ``; ``)."""
        head = {
            "graph_name": self.graph_name,
            "graph_hash": self.graph_hash,
            "hw_hash": self.hw_hash,
            "n_groups": self.n_groups,
        }
        return {**head, **self.cost_dict(), "lower_bound_bytes": self.lower_bound_bytes}

    def group_rows(self) -> list[dict[str, Any]]:
        """One flat dict per group (the ``groups`` table)."""
        return [g.as_dict() for g in self.groups]


# ---- cache --------------------------------------------------------------------------------
_CACHE: OrderedDict[tuple[str, str], dict[Any, GroupMetrics]] = OrderedDict()
_LOWER: dict[tuple[str, str], int] = {}
_DEFAULT_HW: list[HardwareConfig] = []


def _cache_for(graph: Graph, hw: HardwareConfig) -> dict[Any, GroupMetrics]:
    key = (graph.structural_hash, hw.hash)
    table = _CACHE.get(key)
    if table is None:
        table = _CACHE[key] = {}
        while len(_CACHE) > MAX_CACHED_PAIRS:
            old, _ = _CACHE.popitem(last=False)
            _LOWER.pop(old, None)
    return table


def clear_cache() -> None:
    """Drop every cached group cost (benchmarks measure the cold path with it)."""
    _CACHE.clear()
    _LOWER.clear()


def _default_hw() -> HardwareConfig:
    if not _DEFAULT_HW:
        _DEFAULT_HW.append(HardwareConfig())
    return _DEFAULT_HW[0]


# ---- per group ----------------------------------------------------------------------------
def group_cost(graph: Graph, group: Group, hw: HardwareConfig | None = None) -> GroupMetrics:
    """Cost of one group (cached by graph structure, group and hardware)."""
    hw = hw or _default_hw()
    table = _cache_for(graph, hw)
    key = _key(group)
    hit = table.get(key)
    if hit is None:
        hit = table[key] = _group_cost(graph, group, hw)
    return hit


def _key(group: Group) -> tuple[tuple[str, ...], str]:
    """The cache key: equal to ``group.key`` (ops, mode value), without the Enum property."""
    return (group.ops, group.mode._value_)


def _numel(graph: Graph, tensor: str) -> int:
    return math.prod(graph.tensors[tensor].shape)


def _element_ops(graph: Graph, op: Op) -> int:
    """ALU ops of a non-crossbar op (module docstring conventions)."""
    out = _numel(graph, op.outputs[0])
    if op.op_class is OpClass.LAYOUT:
        return 0
    if op.op_type in SPATIAL_POOLS:
        return out * math.prod(int(k) for k in op.attr("kernel_shape"))
    if op.op_type in GLOBAL_POOLS:
        return _numel(graph, op.inputs[0])
    if op.op_class is OpClass.STATS:
        return STATS_OPS_PER_ELEM * _numel(graph, op.inputs[0])
    return ELEMENT_OPS_PER_ELEM * out


def _traffic(graph: Graph, ops: tuple[Op, ...], inside: set[str]) -> tuple[int, int]:
    """Activation elements read from outside and written for outside (DESIGN §6)."""
    produced = {t for op in ops for t in op.outputs if t}
    reads: dict[str, None] = {}
    for op in ops:
        for t in graph.activation_inputs(op):
            if t not in produced:
                reads[t] = None
    graph_outputs = set(graph.outputs)
    consumers = graph.consumer_map
    writes = [
        t
        for t in produced
        if t in graph_outputs or any(c not in inside for c in consumers.get(t, ()))
    ]
    return sum(_numel(graph, t) for t in reads), sum(_numel(graph, t) for t in writes)


def _group_cost(graph: Graph, group: Group, hw: HardwareConfig) -> GroupMetrics:
    ops = graph.subgraph_ops(group.ops)
    inside = set(group.ops)
    needs = group_needs(graph, group)
    ab = hw.act_bytes
    read_elems, write_elems = _traffic(graph, ops, inside)
    act_read, act_write = read_elems * ab, write_elems * ab

    # crossbar mapping
    ws, ins = hw.weight_slices, hw.input_slices
    macs = cell_ops = conversions = drives = crossbars = programmed = weight_bytes = 0
    vector_reads = 0
    stages: list[int] = []
    tiles: list[int] = []
    for m in needs.matrices:
        phys_cols = m.cols * ws
        row_tiles = math.ceil(m.rows / hw.crossbar_rows)
        col_tiles = math.ceil(phys_cols / hw.crossbar_cols)
        crossbars += row_tiles * col_tiles * m.count
        macs += m.macs
        cell_ops += m.vectors * ins * m.rows * phys_cols * m.count
        conversions += m.vectors * ins * row_tiles * phys_cols * m.count
        drives += m.vectors * ins * m.rows * col_tiles * m.count
        programmed += m.rows * phys_cols * m.count
        weight_bytes += hw.weight_bytes(m.n_weights)
        vector_reads += m.vectors * m.rows * m.count
        stages.append(m.vectors * ins * hw.slice_cycles)
        tiles.append(row_tiles * col_tiles * m.count)
    weight_load = 0 if hw.weights_resident else weight_bytes
    programmed = 0 if hw.weights_resident else programmed
    reload_weights, reload_inputs, weight_loads = _weight_reload(needs, hw, act_read, crossbars)
    reload = reload_weights + reload_inputs
    programmed *= weight_loads

    # digital work and buffer accesses of the ops
    merged = group.mode.value == "merge" and len(needs.matrices) < sum(
        1 for op in ops if op.op_class is OpClass.LINEAR
    )
    last_linear = max((op.name for op in ops if op.op_class is OpClass.LINEAR),
                      key=graph.op_index.__getitem__, default=None)  # fmt: skip
    digital = 0
    buffer_elems = vector_reads
    for op in ops:
        if op.op_class is OpClass.LINEAR:
            if merged and op.name != last_linear:
                continue  # the merged matrix has no intermediate output
            out = _numel(graph, op.outputs[0])
            buffer_elems += out
            has_bias = any(
                len(o.inputs) > 2 and o.inputs[2] for o in ops if o.op_class is OpClass.LINEAR
            ) if merged else len(op.inputs) > 2 and bool(op.inputs[2])  # fmt: skip
            digital += out if has_bias else 0
            continue
        if op.op_class is OpClass.LAYOUT or op.name in needs.folded_ops:
            continue
        digital += _element_ops(graph, op)
        buffer_elems += sum(_numel(graph, t) for t in graph.activation_inputs(op))
        buffer_elems += sum(_numel(graph, t) for t in op.outputs if t)
    buffer_access = buffer_elems * ab + act_read + act_write + reload_inputs
    buffer_access += _psum_bytes(needs, hw)

    # energy
    dram_bytes = act_read + act_write + weight_load + reload
    dram_pj = dram_bytes * BITS_PER_BYTE * hw.dram_pj_per_bit
    buffer_pj = buffer_access * BITS_PER_BYTE * hw.buffer_pj_per_bit
    cell_pj = cell_ops * hw.cell_op_pj
    adc_pj = conversions * hw.adc_pj_per_conversion
    dac_pj = drives * hw.dac_pj_per_drive
    digital_pj = conversions * hw.shift_add_pj + digital * hw.digital_op_pj
    program_pj = programmed * hw.weight_program_pj_per_cell
    energy = dram_pj + buffer_pj + cell_pj + adc_pj + dac_pj + digital_pj + program_pj

    # cycles
    stages, shared = _array_turns(stages, tiles, hw)
    fill = 0
    for m, nxt, stage in zip(needs.matrices, needs.matrices[1:], stages):
        fill += math.ceil(stage * min(nxt.window_rows, m.out_rows) / m.out_rows)
    digital_cycles = math.ceil(digital / hw.digital_ops_per_cycle)
    compute = max(sum(stages), digital_cycles) if shared else max([*stages, digital_cycles]) + fill
    memory = math.ceil(dram_bytes * BITS_PER_BYTE * hw.clock_ghz / hw.dram_bandwidth_gbps)
    cycles = max(compute, memory) if hw.overlap_memory_compute else compute + memory

    # capacity (rule 7)
    violations: list[str] = []
    buffer_needed = needs.buffer_elems * ab
    name = _group_name(group)
    if buffer_needed > hw.buffer_bytes:
        violations.append(
            f"group {name}: needs {buffer_needed} B on chip (line buffers "
            f"{needs.line_buffer_elems * ab} B, held {needs.held_elems * ab} B, skip "
            f"{needs.skip_elems * ab} B), buffer_bytes is {hw.buffer_bytes}"
        )
    stream_stages = len(needs.matrices) > 1
    if crossbars > hw.n_crossbars and (hw.weights_resident or stream_stages):
        what = "its stages' weights at once" if stream_stages else "its weights"
        violations.append(
            f"group {name}: needs {crossbars} crossbars for {what}, n_crossbars is {hw.n_crossbars}"
        )

    ints = (
        act_read, act_write, weight_load, reload, act_read + act_write, dram_bytes,
        act_read + weight_load + reload, act_write, buffer_access, macs, cell_ops, conversions,
        drives, digital, programmed, compute, memory, cycles,
    )  # fmt: skip
    floats = (dram_pj, buffer_pj, cell_pj, adc_pj, dac_pj, digital_pj, program_pj, energy)
    values: dict[str, Any] = {**dict(zip(INT_FIELDS, ints)), **dict(zip(FLOAT_FIELDS, floats))}
    return GroupMetrics(
        ops=group.ops,
        mode=group.mode.value,
        **values,
        buffer_needed_bytes=buffer_needed,
        crossbars_needed=crossbars,
        feasible=not violations,
        violations=tuple(violations),
        # additive counts (< 2**53: exact in float64) and energies, then the non-additive
        # buffer bytes and crossbars and an infeasibility flag (see simulate)
        vector=np.array(
            (*ints, *floats, buffer_needed, crossbars, float(bool(violations))), dtype=np.float64
        ),
    )


def _array_turns(stages: list[int], tiles: list[int], hw: HardwareConfig) -> tuple[list[int], bool]:
    """Stage cycles when crossbar tiles take turns on ``hw.array_units`` arrays, and whether
    the stages share the arrays (their tiles together do not fit them at once)."""
    if not hw.array_units:
        return stages, False
    turns = [math.ceil(t / hw.array_units) for t in tiles]
    return [s * k for s, k in zip(stages, turns)], sum(tiles) > hw.array_units


def _psum_bytes(needs: GroupNeeds, hw: HardwareConfig) -> int:
    """Buffer bytes of partial sums passed between the turns of a matrix's row tiles.

    With ``hw.psum_bits`` and ``hw.array_units`` set: ``array_units`` row tiles of a column
    tile compute at once, so each output element takes ``ceil(row_tiles / array_units)``
    turns and its partial sum is written to the buffer and read back once per extra turn.
    """
    if not hw.psum_bits or not hw.array_units:
        return 0
    elems = 0
    for m in needs.matrices:
        extra_turns = math.ceil(math.ceil(m.rows / hw.crossbar_rows) / hw.array_units) - 1
        elems += 2 * extra_turns * m.vectors * m.cols * m.count
    return elems * math.ceil(hw.psum_bits / BITS_PER_BYTE)


def _weight_reload(
    needs: GroupNeeds, hw: HardwareConfig, input_bytes: int, crossbars: int
) -> tuple[int, int, int]:
    """DRAM re-reads of a tiled schedule: ``(weight bytes, input bytes, weight loads)``.

    Only with ``hw.weight_reload``, weights not resident and one matrix that needs more than
    ``n_crossbars`` crossbars (otherwise ``(0, 0, 1)``). The output is cut into ``t_s``
    spatial tiles and ``t_k`` output-channel chunks so that a tile's input (``input_bytes /
    t_s``, halo ignored) and its partial sums (``psum_bits`` per output element, else
    ``PSUM_BITS_PER_ACT_BIT`` x ``act_bits``; split over ``t_s`` x ``t_k``) fit
    ``buffer_bytes``; every spatial tile re-loads the weights and every chunk re-reads the
    tile's input. The cheapest ``(t_s, t_k)`` is taken, as a mapper would; when not even one
    output vector fits, every vector re-loads the weights.
    """
    if not hw.weight_reload or hw.weights_resident or len(needs.matrices) != 1:
        return 0, 0, 1
    if crossbars <= hw.n_crossbars:
        return 0, 0, 1
    m = needs.matrices[0]
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


def _group_name(group: Group) -> str:
    ops = group.ops
    return f"[{ops[0]}]" if len(ops) == 1 else f"[{ops[0]} .. {ops[-1]}] ({len(ops)} ops)"


# ---- plans --------------------------------------------------------------------------------
def simulate(graph: Graph, plan: Plan, hw: HardwareConfig | None = None) -> Metrics:
    """Totals and per-group costs of ``plan`` on ``hw`` (default: the ISAAC-like chip).

    The plan is not checked for legality here (``check_plan`` does that); capacity
    violations are reported in ``violations`` and ``feasible``, never raised.
    """
    hw = hw or _default_hw()
    table = _cache_for(graph, hw)
    rows: list[GroupMetrics] = []
    for g in plan.groups:
        key = (g.ops, g.mode._value_)  # == _key(g), inlined: the hot loop of a search
        hit = table.get(key)
        if hit is None:
            hit = table[key] = _group_cost(graph, g, hw)
        rows.append(hit)
    stack = np.array([r.vector for r in rows])
    total = stack.sum(axis=0).tolist()
    n_int, n_add = len(INT_FIELDS), len(INT_FIELDS) + len(FLOAT_FIELDS)
    values: dict[str, Any] = {k: int(v) for k, v in zip(INT_FIELDS, total[:n_int])}
    values.update(zip(FLOAT_FIELDS, total[n_int:n_add]))
    buffer_col, crossbar_col, infeasible_col = n_add, n_add + 1, n_add + 2
    violations = [v for r in rows for v in r.violations] if total[infeasible_col] else []
    if hw.weights_resident:
        crossbars = int(total[crossbar_col])
        if crossbars > hw.n_crossbars:
            violations.append(
                f"plan: resident weights need {crossbars} crossbars, n_crossbars is "
                f"{hw.n_crossbars}"
            )
    else:
        crossbars = int(stack[:, crossbar_col].max())
    return Metrics(
        graph_name=graph.name,
        graph_hash=graph.structural_hash,
        hw_hash=hw.hash,
        n_groups=len(rows),
        **values,
        buffer_needed_bytes=int(stack[:, buffer_col].max()),
        crossbars_needed=crossbars,
        lower_bound_bytes=lower_bound(graph, hw),
        feasible=not violations,
        violations=tuple(violations),
        groups=tuple(rows),
    )


# ---- compulsory traffic -------------------------------------------------------------------
def lower_bound(graph: Graph, hw: HardwareConfig | None = None) -> int:
    """Compulsory traffic in bytes: no plan of ``graph`` on ``hw`` moves less.

    Graph inputs read once plus graph outputs written once (distinct activations), plus,
    when weights are not resident, the least weight bytes any plan programs: each LINEAR
    op's matrix, except that chains a ``merge`` could combine (FC-like ops linked through
    single-consumer AFFINE/LAYOUT ops) take their cheapest split into merged segments.
    """
    hw = hw or _default_hw()
    key = (graph.structural_hash, hw.hash)
    cached = _LOWER.get(key)
    if cached is not None:
        return cached
    acts = dict.fromkeys(t for t in (*graph.inputs, *graph.outputs) if not graph.is_constant(t))
    total = sum(_numel(graph, t) for t in acts) * hw.act_bytes
    if not hw.weights_resident:
        total += _min_weight_bytes(graph, hw)
    _LOWER[key] = total
    return total


def _fc_like(graph: Graph, op: Op) -> bool:
    if op.op_class is not OpClass.LINEAR:
        return False
    if op.op_type == "Conv":
        w = graph.tensors[op.inputs[1]].shape
        flat = all(d == 1 for d in w[2:]) and int(op.attr("group", 1)) == 1
        strides = all(int(s) == 1 for s in op.attr("strides") or ())
        pads = all(int(p) == 0 for p in op.attr("pads") or ())
        return flat and strides and pads
    return len(graph.tensors[op.inputs[1]].shape) == 2


def _chain_next(graph: Graph, op: Op) -> Op | None:
    """The FC-like op a merge could join ``op`` with, through AFFINE/LAYOUT ops."""
    outputs = set(graph.outputs)
    t = op.outputs[0]
    while True:
        users = graph.consumer_map.get(t, ())
        if t in outputs or len(users) != 1:
            return None
        nxt = graph.op_by_name[users[0]]
        if _fc_like(graph, nxt) and nxt.inputs[0] == t:
            return nxt
        if nxt.op_class not in (OpClass.AFFINE, OpClass.LAYOUT):
            return None
        t = nxt.outputs[0]


def _min_weight_bytes(graph: Graph, hw: HardwareConfig) -> int:
    nxt = {}
    has_prev: set[str] = set()
    for op in graph.ops:
        if _fc_like(graph, op):
            n = _chain_next(graph, op)
            if n is not None:
                nxt[op.name] = n
                has_prev.add(n.name)
    total = 0
    for op in graph.ops:
        if op.op_class is not OpClass.LINEAR or op.name in has_prev:
            continue
        chain = [linear_matrix(graph, op)]
        cur = op
        while cur.name in nxt:
            cur = nxt[cur.name]
            chain.append(linear_matrix(graph, cur))
        best = [0] * (len(chain) + 1)  # best[j]: cheapest split of chain[:j]
        for j in range(1, len(chain) + 1):
            best[j] = min(
                best[i] + hw.weight_bytes(chain[i].rows * chain[j - 1].cols * chain[i].count)
                if i < j - 1
                else best[i] + hw.weight_bytes(chain[i].n_weights)
                for i in range(j)
            )
        total += best[-1]
    return total
