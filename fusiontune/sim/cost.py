"""Analytic cost of a fusion plan: traffic, energy, cycles, capacity (DESIGN §6).

The evaluation reads as a short list of stages, per group:

1. **traffic** — bytes of each *distinct* activation tensor the group reads from outside
   itself (graph inputs included) plus bytes of each tensor it produces that is consumed
   outside it or is a graph output (unused optional outputs cost nothing);
   ``act_bytes = ceil(act_bits / 8)`` per element. Weights are programmed from DRAM once
   per inference (``weight_load_bytes``) unless ``hw.weights_resident``. A group of one op
   that does not fit the buffer one row at a time runs tiled through DRAM
   (:mod:`fusiontune.sim.tiling`); the inputs its tiles re-read count as activation reads
   (the executor's DMA counts them). With
   ``hw.weight_reload``, a matrix larger than the crossbars adds the re-reads of a tiled
   schedule (``reload_bytes``, of which ``weight_reload_bytes`` are weights, the rest
   inputs; :func:`fusiontune.sim.groupmodel.weight_reload`). :func:`data_moved` splits the
   traffic into weight and activation bytes (the numbers an LLM's weight streaming needs).
2. **crossbar mapping** — each weight matrix (:mod:`fusiontune.sim.needs`) of ``rows x cols``
   is bit-sliced into ``cols * weight_slices`` physical columns and tiled onto
   ``ceil(rows / R) * ceil(cols * weight_slices / C)`` crossbars (times ``count`` for grouped
   convolutions; when one group fits a crossbar, ``groups_per_tile`` of them are packed
   block-diagonally on each: :func:`fusiontune.sim.matrices.crossbar_tiles`). Per
   matrix-vector product and input bit-slice (``input_slices = ceil(act_bits / dac_bits)``):
   every mapped cell operates once (cell ops), every physical column of every row tile is
   converted once (ADC conversions, one shift-add each), every row of every column tile is
   driven once (DAC drives).
3. **on-chip buffer accesses** — DMA staging of every DRAM byte, each LINEAR op reading one
   input vector of ``rows`` elements per product and writing its output, every other
   non-LAYOUT op reading its inputs and writing its output once; with ``hw.psum_bits`` and
   ``hw.array_units``, the partial sums of row tiles that take turns
   (:func:`fusiontune.sim.groupmodel._psum_elems`). AFFINE ops folded into a LINEAR op's
   weights (and LAYOUT views) cost nothing.
4. **energy** — DRAM bytes x 8 x E_dram + buffer bytes x 8 x E_buf + cell ops x E_cell +
   conversions x E_adc + drives x E_dac + (shift-adds x E_shift_add + element ops x E_alu)
   + programmed cells x E_program (only when weights are not resident).
5. **cycles** — ``max(compute, memory)`` (double buffering; ``compute + memory`` when
   ``hw.overlap_memory_compute`` is False). On a many-core chip a group's network joins
   them: ``max(compute, memory, noc)`` (or the sum), ``noc`` the cycles of its busiest link
   (``docs/cores.md``, "NoC bandwidth"); added by ``simulate`` from the placement, so
   ``group_cost`` and the optimizer's additive cycles leave it out. A LINEAR stage takes
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
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from fusiontune.ir.opclass import OpClass
from fusiontune.ops import element_ops, is_fc_like
from fusiontune.sim.area import chip_area_mm2
from fusiontune.sim.groupmodel import (
    FLOAT_FIELDS,
    INT_FIELDS,
    GroupTotals,
    clear_models,
    group_model,
)
from fusiontune.sim.hardware import HardwareConfig
from fusiontune.sim.matrices import linear_matrix
from fusiontune.sim.placement import PlacedPlan, clear_placements, place_plan

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph, Op
    from fusiontune.planner.plan import Group, Plan

MAX_CACHED_PAIRS = 32  # (graph, hardware) pairs whose group costs stay cached


@dataclass(frozen=True)
class CostFields:
    """The cost fields shared by a group and a whole plan: the additive counts and energies
    (:data:`INT_FIELDS`, :data:`FLOAT_FIELDS`), then capacity and feasibility."""

    act_read_bytes: int
    act_write_bytes: int
    weight_load_bytes: int
    reload_bytes: int
    weight_reload_bytes: int
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
    ``traffic_bytes`` counts DRAM bytes only; on a many-core chip (``hw.cores > 1``,
    ``docs/cores.md``) the bytes between cores are ``noc_bytes`` / ``noc_byte_hops`` from
    :func:`fusiontune.sim.placement.place_plan`, and its violations (a core's buffer overflowing)
    join ``violations``. On one core they are 0 and ``core_peak_buffer_bytes`` is empty.
    """

    graph_name: str
    graph_hash: str
    hw_hash: str
    n_groups: int
    lower_bound_bytes: int
    groups: tuple[GroupMetrics, ...] = field(repr=False)
    area_mm2: float = 0.0
    """Chip area of the hardware (:mod:`fusiontune.sim.area`; the same for every plan)."""
    noc_bytes: int = 0
    """Bytes crossing cores on the network (0 on a one-core chip)."""
    noc_cycles: int = 0
    """Per group the cycles of its busiest network link (``ceil(bytes /
    noc_link_bytes_per_cycle)``, XY routes), summed; ``cycles`` takes each group's
    ``max(compute, memory, noc)`` (0 on a one-core chip). The per-group rows (``groups``) keep
    the group model's cycles, without the network."""
    noc_byte_hops: int = 0
    """Those bytes times the router hops they take."""
    noc_energy_pj: float = 0.0
    """``noc_byte_hops x 8 x noc_pj_per_bit_hop``; not part of ``energy_pj`` (the group model's
    additive energy, which the optimizer sums): the chip's total is their sum."""
    movement_bytes: float = 0.0
    """DRAM bytes + byte-hops x ``noc_pj_per_bit_hop / dram_pj_per_bit``: every byte moved, the
    network's in DRAM bytes of equal energy (``traffic_bytes`` on one core)."""
    core_peak_buffer_bytes: tuple[int, ...] = field(default=(), repr=False)
    """Per core, the most it holds in any group (empty on a one-core chip)."""

    def as_dict(self) -> dict[str, Any]:
        """Flat row for the ``trials`` table (no per-group rows; violations joined by ``; ``)."""
        head = {
            "graph_name": self.graph_name,
            "graph_hash": self.graph_hash,
            "hw_hash": self.hw_hash,
            "n_groups": self.n_groups,
        }
        tail = {
            "lower_bound_bytes": self.lower_bound_bytes,
            "area_mm2": self.area_mm2,
            "noc_bytes": self.noc_bytes,
            "noc_byte_hops": self.noc_byte_hops,
            "noc_cycles": self.noc_cycles,
            "noc_energy_pj": self.noc_energy_pj,
            "movement_bytes": self.movement_bytes,
            "core_peak_max_bytes": max(self.core_peak_buffer_bytes, default=0),
        }
        return {**head, **self.cost_dict(), **tail}

    def group_rows(self) -> list[dict[str, Any]]:
        """One flat dict per group (the ``groups`` table)."""
        return [g.as_dict() for g in self.groups]


def data_moved(totals: Mapping[str, Any]) -> dict[str, Any]:
    """DRAM traffic split into weights and activations, from a plan's totals (``as_dict``).

    ``weight_bytes`` = weights programmed from DRAM (``weight_load_bytes``) + their re-loads
    by a weight-tiled schedule (``weight_reload_bytes``); ``activation_bytes`` = the rest of
    ``traffic_bytes`` (activations read and written, inputs re-read by tiles);
    ``weight_share`` = ``weight_bytes / traffic_bytes`` (0 for no traffic). Totals stored
    before ``weight_reload_bytes`` existed count every re-read as an activation byte.
    """
    traffic = int(totals.get("traffic_bytes") or 0)
    weights = int(totals.get("weight_load_bytes") or 0) + int(
        totals.get("weight_reload_bytes") or 0
    )
    return {
        "weight_bytes": weights,
        "activation_bytes": traffic - weights,
        "weight_share": weights / traffic if traffic else 0.0,
    }


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
    clear_placements()
    _CACHE.clear()
    _LOWER.clear()
    clear_models()


def default_hw() -> HardwareConfig:
    """The DESIGN §7 default :class:`HardwareConfig`, built once."""
    if not _DEFAULT_HW:
        _DEFAULT_HW.append(HardwareConfig())
    return _DEFAULT_HW[0]


# ---- per group ----------------------------------------------------------------------------
def group_cost(graph: Graph, group: Group, hw: HardwareConfig | None = None) -> GroupMetrics:
    """Cost of one group (cached by graph structure, group and hardware)."""
    hw = hw or default_hw()
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
    """ALU ops of a non-crossbar op (the op registry's count)."""
    return element_ops(graph, op)


def _group_cost(graph: Graph, group: Group, hw: HardwareConfig) -> GroupMetrics:
    model = group_model(graph, hw)
    pos = graph.op_index
    totals = model.evaluate([pos[n] for n in group.ops], group.mode)
    return group_metrics(group, totals, hw)


def group_metrics(group: Group, totals: GroupTotals, hw: HardwareConfig) -> GroupMetrics:
    """A :class:`GroupMetrics` row from a group's totals (rule-7 violations in words)."""
    ab = hw.act_bytes
    name = _group_name(group)
    violations: list[str] = []
    if totals.over_buffer and totals.tiling is not None:
        violations.append(f"group {name}: {totals.tiling.reason}")
    elif totals.over_buffer:
        peak = totals.peak
        assert peak is not None, "group_metrics needs the exact peak (evaluate, not finish)"
        violations.append(
            f"group {name}: needs {totals.buffer_needed_bytes} B on chip at its peak "
            f"(streamed rows {peak.stream_elems * ab} B, whole tensors {peak.whole_elems * ab} "
            f"B, accumulators {peak.accumulator_elems * ab} B, reached by tensor "
            f"'{peak.tensor}'), buffer_bytes is {hw.buffer_bytes}"
        )
    if totals.over_crossbars:
        what = "its stages' weights at once" if totals.n_matrices > 1 else "its weights"
        violations.append(
            f"group {name}: needs {totals.crossbars_needed} crossbars for {what}, n_crossbars "
            f"is {hw.n_crossbars}"
        )
    n_int = len(INT_FIELDS)
    ints = tuple(int(v) for v in totals.values[:n_int])
    floats = tuple(float(v) for v in totals.values[n_int:])
    values: dict[str, Any] = {**dict(zip(INT_FIELDS, ints)), **dict(zip(FLOAT_FIELDS, floats))}
    return GroupMetrics(
        ops=group.ops,
        mode=group.mode.value,
        **values,
        buffer_needed_bytes=int(totals.buffer_needed_bytes or 0),
        crossbars_needed=totals.crossbars_needed,
        feasible=not violations,
        violations=tuple(violations),
        # additive counts (< 2**53: exact in float64) and energies, then the non-additive
        # buffer bytes and crossbars and an infeasibility flag (see simulate)
        vector=np.array(
            (
                *ints,
                *floats,
                totals.buffer_needed_bytes or 0,
                totals.crossbars_needed,
                float(bool(violations)),
            ),
            dtype=np.float64,
        ),
    )


def _group_name(group: Group) -> str:
    ops = group.ops
    return f"[{ops[0]}]" if len(ops) == 1 else f"[{ops[0]} .. {ops[-1]}] ({len(ops)} ops)"


# ---- plans --------------------------------------------------------------------------------
def simulate(
    graph: Graph,
    plan: Plan,
    hw: HardwareConfig | None = None,
    replication: Mapping[str, int] | None = None,
) -> Metrics:
    """Totals and per-group costs of ``plan`` on ``hw`` (default: the flat ISAAC-like chip,
    ``isaac_reram_flat``).

    The plan is not checked for legality here (``check_plan`` does that); capacity
    violations are reported in ``violations`` and ``feasible``, never raised.
    ``replication`` (copies per LINEAR op, :mod:`fusiontune.sim.replication`) places those
    copies on a many-core chip: the network fields and per-core peaks are the replicated
    placement's; the group model's fields (traffic, energy, cycles) do not depend on it, and
    on one core it changes nothing.
    """
    hw = hw or default_hw()
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
    chip: dict[str, Any] = {"movement_bytes": float(values["traffic_bytes"])}
    if hw.cores > 1:
        placed = place_plan(graph, plan, hw, replication)
        chip = _chip_fields(placed, hw, values["traffic_bytes"], violations)
        values["cycles"] = _with_noc_cycles(plan, rows, placed, hw)
    return Metrics(
        graph_name=graph.name,
        graph_hash=graph.structural_hash,
        hw_hash=hw.hash,
        n_groups=len(rows),
        **values,
        buffer_needed_bytes=int(stack[:, buffer_col].max()),
        crossbars_needed=crossbars,
        lower_bound_bytes=lower_bound(graph, hw),
        area_mm2=chip_area_mm2(hw),
        feasible=not violations,
        violations=tuple(violations),
        groups=tuple(rows),
        **chip,
    )


def _chip_fields(
    placed: PlacedPlan, hw: HardwareConfig, traffic_bytes: int, violations: list[str]
) -> dict[str, Any]:
    """The many-core fields of :class:`Metrics` (``docs/cores.md``) from the plan's
    placement; adds its violations to ``violations``."""
    violations.extend(v for v in placed.violations if not v.startswith("plan:"))
    ratio = hw.noc_pj_per_bit_hop / hw.dram_pj_per_bit if hw.dram_pj_per_bit else 0.0
    return {
        "noc_cycles": sum(pg.noc_cycles for pg in placed.groups),
        "noc_bytes": placed.noc_bytes,
        "noc_byte_hops": placed.noc_byte_hops,
        "noc_energy_pj": placed.noc_energy_pj,
        "movement_bytes": traffic_bytes + placed.noc_byte_hops * ratio,
        "core_peak_buffer_bytes": placed.core_peak_buffer_bytes,
    }


def _with_noc_cycles(
    plan: Plan, rows: list[GroupMetrics], placed: PlacedPlan, hw: HardwareConfig
) -> int:
    """The plan's cycles with each group's network in them (module docstring, stage 5):
    ``max(cycles, noc_cycles)`` per group (double buffering), their sum without overlap."""
    noc = {pg.ops: pg.noc_cycles for pg in placed.groups}
    total = 0
    for group, row in zip(plan.groups, rows):
        n = noc.get(group.ops, 0)
        total += max(row.cycles, n) if hw.overlap_memory_compute else row.cycles + n
    return total


# ---- compulsory traffic -------------------------------------------------------------------
def lower_bound(graph: Graph, hw: HardwareConfig | None = None) -> int:
    """Compulsory traffic in bytes: no plan of ``graph`` on ``hw`` moves less.

    Graph inputs read once plus graph outputs written once (distinct activations), plus,
    when weights are not resident, the least weight bytes any plan programs: each LINEAR
    op's matrix, except that chains a ``merge`` could combine (FC-like ops linked through
    single-consumer AFFINE/LAYOUT ops) take their cheapest split into merged segments.
    """
    hw = hw or default_hw()
    key = (graph.structural_hash, hw.hash)
    cached = _LOWER.get(key)
    if cached is not None:
        return cached
    acts = dict.fromkeys(t for t in (*graph.inputs, *graph.outputs) if not graph.is_constant(t))
    total = sum(_numel(graph, t) for t in acts) * hw.act_bytes
    if not hw.weights_resident:
        total += min_weight_bytes(graph, hw)
    _LOWER[key] = total
    return total


def _chain_next(graph: Graph, op: Op) -> Op | None:
    """The FC-like op a merge could join ``op`` with, through AFFINE/LAYOUT ops."""
    outputs = set(graph.outputs)
    t = op.outputs[0]
    while True:
        users = graph.consumer_map.get(t, ())
        if t in outputs or len(users) != 1:
            return None
        nxt = graph.op_by_name[users[0]]
        if is_fc_like(graph, nxt) and nxt.inputs[0] == t:
            return nxt
        if nxt.op_class not in (OpClass.AFFINE, OpClass.LAYOUT):
            return None
        t = nxt.outputs[0]


def min_weight_bytes(graph: Graph, hw: HardwareConfig) -> int:
    """Weight bytes every plan loads at least (a lower bound's weight term): each LINEAR
    op's matrix, a chain of FC-like ops a merge could join at its cheapest split into
    merged matrices."""
    nxt = {}
    has_prev: set[str] = set()
    for op in graph.ops:
        if is_fc_like(graph, op):
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
