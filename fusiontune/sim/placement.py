"""Placement of a plan on a many-core chip: cores, network bytes, per-core buffers.

The model of ``docs/cores.md`` (read it first), in five stages per group of the plan:

1. **node partition** — each LINEAR stage's matrix (:func:`fusiontune.sim.needs.group_matrices`;
   one merged matrix for a ``merge`` group) is cut into crossbar tiles, ``row_tiles x col_tiles``
   per matrix, ``count`` matrices, ``r`` copies (replication);
2. **packing** — tiles fill the crossbars of consecutive cores (network order: a snake over
   the routers of a mesh), the whole plan at once when weights are resident;
3. **homes** — a stage's home is the core of its first tile (its input line buffer and its
   gathered output live there); a non-crossbar op runs on its producer's core;
4. **network** — input scatter to the other cores of a stage, partial sums of row-split
   matrices to the core of row tile 0, output gather to the home, tensors between ops on
   different cores: ``noc_bytes`` and ``noc_byte_hops`` (hops from :func:`hops`);
5. **buffers** — each core's peak over the group's row schedule
   (:func:`fusiontune.sim.capacity.core_peaks`: a tensor's rows on the cores that read it,
   an op's accumulators on its core); a core over ``core_buffer_bytes`` makes the group
   infeasible with a reason. The executor (:mod:`fusiontune.sim.cores_run`) measures both
   the network bytes and these peaks.

A one-core chip gives no network bytes and one core whose peak is the flat model's
``buffer_needed_bytes`` (the reduction ``tests/test_manycore.py`` checks).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from fusiontune.errors import ConfigError
from fusiontune.ops.window import Window, pad_for_window
from fusiontune.sim.capacity import core_peaks
from fusiontune.sim.groupmodel import group_model
from fusiontune.sim.hardware import BITS_PER_BYTE, HardwareConfig
from fusiontune.sim.matrices import crossbar_tiles
from fusiontune.sim.needs import WeightMatrix, group_matrices
from fusiontune.sim.rows import RowKind, row_elems
from fusiontune.sim.structure import Node, group_order, group_structure, node_row_map
from fusiontune.sim.tiling import singleton_tiling

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph
    from fusiontune.planner.plan import Group, Plan

PSUM_BITS_PER_ACT_BIT = 2
"""Partial sums default to twice the activation bits (as ``groupmodel.PSUM_BITS_PER_ACT_BIT``)."""


# ---- topology -------------------------------------------------------------------------------
def router_xy(hw: HardwareConfig, core: int) -> tuple[int, int]:
    """Grid position of ``core``'s router: routers in snake order over ``hw.mesh_shape``."""
    width, _ = hw.mesh_shape
    router = core // hw.concentration
    y, x = divmod(router, width)
    return (x if y % 2 == 0 else width - 1 - x), y


def hops(hw: HardwareConfig, a: int, b: int) -> int:
    """Router traversals between cores ``a`` and ``b`` (0 for the same core or router)."""
    if a == b:
        return 0
    if hw.topology == "bus":
        return 1
    (xa, ya), (xb, yb) = router_xy(hw, a), router_xy(hw, b)
    return abs(xa - xb) + abs(ya - yb)


Link = tuple[tuple[int, int], tuple[int, int]]
"""A directed link between two neighbouring routers, by grid position (``BUS`` on a bus)."""
BUS: Link = ((-1, -1), (-1, -1))


def route(hw: HardwareConfig, a: int, b: int) -> list[Link]:
    """The links a transfer from core ``a`` to core ``b`` crosses: dimension-order (XY)
    routing over the router grid (x first, then y); on a bus the one shared link; none for
    two cores under one router."""
    if a == b:
        return []
    if hw.topology == "bus":
        return [BUS]
    (x, y), (xb, yb) = router_xy(hw, a), router_xy(hw, b)
    links: list[Link] = []
    while x != xb:
        nx = x + (1 if xb > x else -1)
        links.append(((x, y), (nx, y)))
        x = nx
    while y != yb:
        ny = y + (1 if yb > y else -1)
        links.append(((x, y), (x, ny)))
        y = ny
    return links


def link_bytes(hw: HardwareConfig, pairs: Mapping[tuple[int, int], int]) -> dict[Link, int]:
    """Bytes each link carries, for ``pairs``: ``(source core, destination core) -> bytes``."""
    out: dict[Link, int] = {}
    for (a, b), n_bytes in pairs.items():
        for link in route(hw, a, b):
            out[link] = out.get(link, 0) + n_bytes
    return out


def noc_cycles(hw: HardwareConfig, max_link_bytes: int) -> int:
    """Cycles the busiest link needs: ``ceil(max_link_bytes / noc_link_bytes_per_cycle)``."""
    return -(-max_link_bytes // hw.noc_link_bytes_per_cycle) if max_link_bytes else 0


def matrix_tiles(m: WeightMatrix, hw: HardwareConfig) -> tuple[int, int]:
    """``(row_tiles, col_tiles)`` of one of ``m``'s ``count`` matrices on ``hw``'s crossbars."""
    tiles = crossbar_tiles(m, hw)
    return tiles.row_tiles, tiles.col_tiles


def matrix_crossbars(m: WeightMatrix, hw: HardwareConfig) -> int:
    """Crossbars of one copy of ``m`` (the flat model's count; grouped matrices packed
    block-diagonally, :func:`~fusiontune.sim.matrices.crossbar_tiles`)."""
    return crossbar_tiles(m, hw).crossbars


def _col_tile_outputs(cols: int, col_tiles: int, hw: HardwareConfig) -> list[int]:
    """Logical output columns per column tile (a column belongs to its first physical one)."""
    ws, width = hw.weight_slices, hw.crossbar_cols
    starts = [min(cols, -(-j * width // ws)) for j in range(col_tiles + 1)]
    return [starts[j + 1] - starts[j] for j in range(col_tiles)]


# ---- results --------------------------------------------------------------------------------
@dataclass(frozen=True)
class StagePlacement:
    """One LINEAR stage on the chip.

    Attributes:
        ops: the LINEAR op(s) of its matrix (several for a merged chain).
        copies: replication ``r``.
        crossbars: crossbars it occupies (all copies).
        first_crossbar: index of its first crossbar on the chip (packing order).
        cores: the cores holding its tiles, in order.
        home: the core of its first tile (input line buffer, gathered output).
        tile_cores: the core of each tile, in packing order (copy, tile set, column tile,
            row tile; a tile set holds ``groups_per_tile`` matrices, one when not packed):
            what the executor reads to run each tile on its core (:meth:`tile_index`).
        row_tiles: row tiles per matrix.
        col_tiles: column tiles per matrix.
        count: independent matrices per copy (groups of a grouped convolution).
        groups_per_tile: matrices packed block-diagonally on one crossbar (1: not packed).
        tile_rows: matrix rows of each row tile.
        col_outputs: logical output columns of each column tile.
        copy_vectors: matrix-vector products each copy computes (per matrix).
        psum_bytes: bytes of one partial sum sent between cores.
        line_channels: for a convolution whose cores form their own windows, ``(core,
            channels)`` per core other than the home: the input channels its line buffer
            keeps (the rows of those channels it receives from the home).
    """

    ops: tuple[str, ...]
    copies: int
    crossbars: int
    first_crossbar: int
    cores: tuple[int, ...]
    home: int
    tile_cores: tuple[int, ...] = ()
    row_tiles: int = 0
    col_tiles: int = 0
    count: int = 1
    tile_rows: tuple[int, ...] = ()
    col_outputs: tuple[int, ...] = ()
    copy_vectors: tuple[int, ...] = ()
    psum_bytes: int = 0
    groups_per_tile: int = 1
    line_channels: tuple[tuple[int, int], ...] = ()

    @property
    def tile_sets(self) -> int:
        """Tile sets per copy: ``ceil(count / groups_per_tile)``."""
        return -(-self.count // self.groups_per_tile)

    def tile_index(self, copy: int, matrix: int, col_tile: int, row_tile: int) -> int:
        """Position in :attr:`tile_cores` of one tile of matrix ``matrix`` of copy ``copy``."""
        tile_set = copy * self.tile_sets + matrix // self.groups_per_tile
        return (tile_set * self.col_tiles + col_tile) * self.row_tiles + row_tile


@dataclass(frozen=True)
class PlacedGroup:
    """One group of a plan placed on the chip (fields in ``docs/cores.md``).

    Attributes:
        ops: the group's ops.
        stages: its LINEAR stages.
        home: each op's core.
        noc_bytes: bytes crossing cores inside the group.
        noc_byte_hops: those bytes times their hops.
        core_buffer_bytes: each core's peak over the group's schedule (cores holding any).
        violations: why the group does not fit (empty when it does).
        tensor_cores: the cores holding each tensor's rows in the group (its readers' cores;
            the producer's for a tensor no op of the group reads).
        core_sent_bytes: bytes each core sends on the network in the group (at its port).
        core_received_bytes: bytes each core receives in the group.
        noc_max_link_bytes: the bytes of the group's busiest link (XY routes).
        noc_cycles: ``ceil(noc_max_link_bytes / noc_link_bytes_per_cycle)``: the cycles the
            network needs for the group (``docs/cores.md``, "NoC bandwidth").
    """

    ops: tuple[str, ...]
    stages: tuple[StagePlacement, ...]
    home: Mapping[str, int]
    noc_bytes: int
    noc_byte_hops: int
    core_buffer_bytes: Mapping[int, int]
    violations: tuple[str, ...]
    tensor_cores: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    core_sent_bytes: Mapping[int, int] = field(default_factory=dict)
    core_received_bytes: Mapping[int, int] = field(default_factory=dict)
    noc_max_link_bytes: int = 0
    noc_cycles: int = 0


@dataclass(frozen=True)
class PlacedPlan:
    """A plan placed on a many-core chip.

    Attributes:
        groups: the placed groups, in execution order.
        noc_bytes: bytes crossing cores (sum over groups).
        noc_byte_hops: byte-hops (sum over groups).
        noc_energy_pj: ``noc_byte_hops x 8 x noc_pj_per_bit_hop``.
        core_peak_buffer_bytes: per core, its largest peak over the groups.
        core_crossbars_used: per core, crossbars the plan's weights occupy (resident weights;
            else the most any group occupies).
        violations: groups over a core's buffer, or more crossbars than the chip has.
        core_port_bytes: per core, the larger of the bytes it sends and receives over all
            groups (one image; a core's network port carries ``noc_link_bytes_per_cycle`` each
            way, so the batch pipeline needs at least ``max / noc_link_bytes_per_cycle``
            cycles per image).
    """

    groups: tuple[PlacedGroup, ...]
    noc_bytes: int
    noc_byte_hops: int
    noc_energy_pj: float
    core_peak_buffer_bytes: tuple[int, ...]
    core_crossbars_used: tuple[int, ...]
    violations: tuple[str, ...]
    core_port_bytes: tuple[int, ...] = ()

    @property
    def feasible(self) -> bool:
        return not self.violations


# ---- placement ------------------------------------------------------------------------------
class _Flow:
    """Network transfers of one group: bytes, byte-hops and bytes per (source, destination)."""

    def __init__(self, hw: HardwareConfig) -> None:
        self.hw = hw
        self.bytes = 0
        self.byte_hops = 0
        self.sent: dict[int, int] = {}
        self.received: dict[int, int] = {}
        self.pairs: dict[tuple[int, int], int] = {}

    def send(self, src: int, dst: int, n_bytes: int) -> None:
        if src != dst and n_bytes:
            self.bytes += n_bytes
            self.byte_hops += n_bytes * hops(self.hw, src, dst)
            self.sent[src] = self.sent.get(src, 0) + n_bytes
            self.received[dst] = self.received.get(dst, 0) + n_bytes
            self.pairs[src, dst] = self.pairs.get((src, dst), 0) + n_bytes

    @property
    def max_link_bytes(self) -> int:
        """The bytes of the busiest link (XY routes, :func:`route`)."""
        return max(link_bytes(self.hw, self.pairs).values(), default=0)


def _copy_vectors(vectors: int, copies: int) -> list[int]:
    base, extra = divmod(vectors, copies)
    return [base + (k < extra) for k in range(copies)]


@dataclass(frozen=True)
class ConvInput:
    """The input of a convolution whose windows the receiving cores form themselves.

    Attributes:
        tensor: its input tensor.
        shape: that tensor's shape ``(N, C, *spatial)``.
        window: the op's full window geometry.
        channels_per_matrix: input channels of one of its ``count`` matrices (``C / group``).
    """

    tensor: str
    shape: tuple[int, ...]
    window: Window
    channels_per_matrix: int

    @property
    def kernel_elems(self) -> int:
        return math.prod(self.window.kernel)


def conv_inputs(graph: Graph, nodes: list[Node]) -> dict[str, ConvInput]:
    """The convolutions among a group's compiled nodes whose bands run tile by tile (a
    ``WINDOW`` node with a convolution's weights), by node name; the executor's
    ``cores_run.matrix_operands`` takes the same ones."""
    out: dict[str, ConvInput] = {}
    for node in nodes:
        p = node.linear
        if p is None or p.kind != "conv":
            continue
        rm = node_row_map(graph, node)
        if rm.kind is not RowKind.WINDOW or rm.window is None:
            continue
        x = node.inputs[0]
        shape = tuple(graph.tensors[x].shape)
        out[node.name] = ConvInput(x, shape, rm.window, int(p.weight.shape[1]))
    return out


def touched_inputs(conv: ConvInput, first: int, last: int, offsets: int = -1) -> np.ndarray:
    """Which input positions ``(N, *spatial)`` the windows of output vectors
    ``[first, last)`` read (vectors numbered image by image, pixels in row-major order) at the
    kernel offsets of the bit mask ``offsets`` (bit ``o``: offset ``o`` in row-major order;
    default all). Each image's vectors are followed over the band of rows they span only."""
    n, spatial, win = conv.shape[0], conv.shape[2:], conv.window
    per_row = math.prod(win.out_spatial[1:])
    per_image = win.out_spatial[0] * per_row
    touched = np.zeros((n, *spatial), dtype=bool)
    for image in range(first // per_image, min(n, -(-last // per_image))):
        f = max(first - image * per_image, 0)
        t = min(last - image * per_image, per_image)
        if t <= f:
            continue
        a, b = f // per_row, -(-t // per_row)
        band, lo, hi = win.band(a, b, spatial[0])
        out = np.zeros((1, 1, *band.out_spatial), dtype=bool)
        out.reshape(-1)[f - a * per_row : t - a * per_row] = True
        rows = np.zeros((1, 1, hi - lo, *spatial[1:]), dtype=bool)
        padded = pad_for_window(rows, band, 0.0).copy()
        for o, offs in enumerate(itertools.product(*(range(k) for k in band.kernel))):
            if offsets >> o & 1:  # the strided slice of the padded input offset ``o`` reads
                sl = tuple(
                    slice(q * d, q * d + (m - 1) * st + 1, st)
                    for q, d, m, st in zip(offs, band.dilations, band.out_spatial, band.strides)
                )
                at = (slice(None), slice(None), *sl)
                padded[at] |= out
        crop = tuple(slice(p, p + d) for p, d in zip(band.pads_begin, rows.shape[2:]))
        inside = (0, 0, *crop)
        touched[image, lo:hi] |= padded[inside]
    return touched


@functools.lru_cache(maxsize=4096)
def _row_reads(kk: int, lo: int, hi: int) -> tuple[tuple[int, int], ...]:
    """``(channel, kernel offsets as a bit mask)`` matrix rows ``[lo, hi)`` read."""
    out = []
    for c in range(lo // kk, (hi - 1) // kk + 1):
        a, b = max(lo, c * kk) - c * kk, min(hi, (c + 1) * kk) - c * kk
        out.append((c, ((1 << b) - 1) ^ ((1 << a) - 1)))
    return tuple(out)


def _tile_reads(conv: ConvInput, g: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """``(input channel, kernel offsets as a bit mask)`` that matrix rows ``[lo, hi)`` of
    matrix ``g`` read (im2col rows are channel-major: ``channel * kernel + offset``)."""
    base = g * conv.channels_per_matrix
    return [(base + c, bits) for c, bits in _row_reads(conv.kernel_elems, lo, hi)]


def _scatter_rows(
    conv: ConvInput,
    wants: Mapping[int, Mapping[int, Mapping[int, int]]],
    copy_vectors: list[int],
) -> dict[int, int]:
    """Input elements each receiving core gets, once each: ``wants`` core -> input channel ->
    copy -> the kernel offsets (bit mask) its tiles on that core read; a core receives, per
    channel, the union of the positions those windows read (``docs/cores.md``)."""
    starts = [sum(copy_vectors[:k]) for k in range(len(copy_vectors) + 1)]
    masks: dict[tuple[int, int], np.ndarray] = {}
    union: dict[frozenset[tuple[int, int]], int] = {}
    out: dict[int, int] = {}
    for core, channels in wants.items():
        by_reads: dict[frozenset[tuple[int, int]], int] = {}
        for reads in channels.values():
            key = frozenset(reads.items())
            by_reads[key] = by_reads.get(key, 0) + 1
        total = 0
        for key, n_channels in by_reads.items():
            if key not in union:
                acc = None
                for k, offsets in key:
                    if (k, offsets) not in masks:
                        masks[k, offsets] = touched_inputs(conv, starts[k], starts[k + 1], offsets)
                    mask = masks[k, offsets]
                    acc = mask if acc is None else acc | mask
                union[key] = int(acc.sum()) if acc is not None else 0
            total += n_channels * union[key]
        out[core] = total
    return out


def _place_stage(
    m: WeightMatrix,
    copies: int,
    start: int,
    hw: HardwareConfig,
    flow: _Flow,
    conv: ConvInput | None = None,
) -> StagePlacement:
    """Tiles of ``m`` (``copies`` copies) from crossbar ``start``; its transfers into ``flow``.

    ``conv``: the stage is a convolution whose other cores receive input *rows* (each input
    element once per core, :func:`_scatter_rows`) and form their windows in their own line
    buffers; without it each core receives its rows of every vector it computes."""
    per_core, cores = hw.core_crossbars, hw.cores
    packing = crossbar_tiles(m, hw)
    row_tiles, col_tiles, per_set = packing.row_tiles, packing.col_tiles, packing.groups_per_tile
    outs = _col_tile_outputs(m.cols, col_tiles, hw)
    ab = hw.act_bytes
    psum_bytes = math.ceil((hw.psum_bits or PSUM_BITS_PER_ACT_BIT * hw.act_bits) / BITS_PER_BYTE)
    rows = [min(hw.crossbar_rows, m.rows - i * hw.crossbar_rows) for i in range(row_tiles)]
    row_at = [i * hw.crossbar_rows for i in range(row_tiles)]
    home = (start // per_core) % cores
    used: dict[int, None] = {}
    tile_cores: list[int] = []
    tile = start
    copy_vectors = _copy_vectors(m.vectors, copies)
    wants: dict[int, dict[int, dict[int, int]]] = {}  # core -> channel -> copy -> offsets
    for k, vec in enumerate(copy_vectors):
        for first in range(0, m.count, per_set):  # a tile set: its matrices side by side
            q = min(per_set, m.count - first)
            needed: dict[int, set[int]] = {}  # core -> row tiles of these matrices it holds
            for j in range(col_tiles):
                reducer = (tile // per_core) % cores
                for i in range(row_tiles):
                    core = (tile // per_core) % cores
                    tile_cores.append(core)
                    used[core] = None
                    needed.setdefault(core, set()).add(i)
                    flow.send(core, reducer, q * vec * outs[j] * psum_bytes)  # partial sums
                    tile += 1
                flow.send(reducer, home, q * vec * outs[j] * ab)  # output gather
            for core, tiles in needed.items():  # input scatter from the home's line buffer
                if conv is None:
                    flow.send(home, core, q * vec * sum(rows[i] for i in tiles) * ab)
                elif core != home:
                    mine = wants.setdefault(core, {})
                    for g in range(first, first + q):
                        for i in tiles:
                            for c, bits in _tile_reads(conv, g, row_at[i], row_at[i] + rows[i]):
                                reads = mine.setdefault(c, {})
                                reads[k] = reads.get(k, 0) | bits
    line_channels: tuple[tuple[int, int], ...] = ()
    if conv is not None:
        assert m.vectors == math.prod((conv.shape[0], *conv.window.out_spatial)), m.ops
        for core, elems in _scatter_rows(conv, wants, copy_vectors).items():
            flow.send(home, core, elems * ab)
        line_channels = tuple((core, len(chs)) for core, chs in sorted(wants.items()))
    return StagePlacement(
        m.ops, copies, tile - start, start, tuple(used), home,
        tile_cores=tuple(tile_cores), row_tiles=row_tiles, col_tiles=col_tiles, count=m.count,
        tile_rows=tuple(rows), col_outputs=tuple(outs), copy_vectors=tuple(copy_vectors),
        psum_bytes=psum_bytes, groups_per_tile=per_set, line_channels=line_channels,
    )  # fmt: skip


POLICIES = ("dense", "spread")
"""Packing policies (``docs/cores.md``, placement step 2): ``dense`` fills the crossbars of
consecutive cores; ``spread`` starts every LINEAR stage on a fresh core, so line buffers of
different stages never share a core's buffer."""


def _check_policy(policy: str) -> None:
    if policy not in POLICIES:
        raise ConfigError(f"placement: policy {policy!r} is not one of {', '.join(POLICIES)}")


def core_aligned(crossbar: int, hw: HardwareConfig) -> int:
    """The first crossbar of the first core at or after ``crossbar`` (``spread`` packing)."""
    per_core = hw.core_crossbars
    return -(-crossbar // per_core) * per_core


MAX_CACHED_PAIRS = 32  # (graph, hardware) pairs whose placed groups stay cached
_CACHE: OrderedDict[tuple[str, str], dict[Any, Any]] = OrderedDict()


def clear_placements() -> None:
    """Drop every cached placed group (``cost.clear_cache`` calls it)."""
    _CACHE.clear()


def _table(graph: Graph, hw: HardwareConfig) -> dict[Any, Any]:
    """The cache of placed groups and verdicts of one (graph, hardware) pair."""
    pair = (graph.structural_hash, hw.hash)
    table = _CACHE.get(pair)
    if table is None:
        table = _CACHE[pair] = {}
        while len(_CACHE) > MAX_CACHED_PAIRS:
            _CACHE.popitem(last=False)
    return table


def place_group(
    graph: Graph,
    group: Group,
    hw: HardwareConfig,
    start: int = 0,
    replication: Mapping[str, int] | None = None,
    policy: str = "spread",
) -> PlacedGroup:
    """Place one group from crossbar ``start`` (see the module docstring); cached by graph
    structure, hardware, group, ``start`` and the copies of the group's ops.

    Args:
        graph: the graph.
        group: one group of a plan.
        hw: the chip.
        start: the first free crossbar (packing order).
        replication: copies per LINEAR op name (default 1); a merged chain takes its first op's.
        policy: ``dense`` (tiles fill on from ``start``) or ``spread`` (each stage starts on a
            fresh core, the default; :data:`POLICIES`).
    """
    _check_policy(policy)
    table = _table(graph, hw)
    reps = replication or {}
    copies = tuple((n, reps[n]) for n in group.ops if reps.get(n, 1) != 1) if reps else ()
    key = (group.ops, group.mode.value, start, copies, policy)
    hit = table.get(key)
    if hit is None:
        hit = table[key] = _place_group(graph, group, hw, start, reps, policy == "spread")
    return hit


class _Layout(NamedTuple):
    """Where a group's stages and ops sit, and what crosses the network (no buffers yet)."""

    stages: tuple[StagePlacement, ...]
    home: dict[str, int]
    holders: dict[str, tuple[int, ...]]
    flow: _Flow
    shares: dict[str, dict[int, int]]  # tensor -> core -> elements of each row it keeps


def _layout(
    graph: Graph,
    group: Group,
    hw: HardwareConfig,
    start: int,
    reps: Mapping[str, int],
    spread: bool,
) -> _Layout:
    """Placement steps 1-4 of the module docstring for one group."""
    flow = _Flow(hw)
    stages: list[StagePlacement] = []
    home: dict[str, int] = {}
    cursor = start
    tiled = len(group.ops) == 1 and singleton_tiling(graph, group, hw) is not None
    convs = {} if tiled else conv_inputs(graph, group_structure(graph, group))
    shares: dict[str, dict[int, int]] = {}  # tensor -> core -> elements per row it keeps
    for m in group_matrices(graph, group):
        if spread:
            cursor = core_aligned(cursor, hw)
        conv = convs.get(m.ops[0]) if len(m.ops) == 1 else None
        stage = _place_stage(m, max(1, int(reps.get(m.ops[0], 1))), cursor, hw, flow, conv)
        cursor += stage.crossbars
        stages.append(stage)
        home.update(dict.fromkeys(m.ops, stage.home))
        if conv is not None:
            per_channel = row_elems(graph, conv.tensor) // conv.shape[1]
            mine = shares.setdefault(conv.tensor, {})
            for core, channels in stage.line_channels:
                mine[core] = mine.get(core, 0) + channels * per_channel
    members = set(group.ops)
    ops = [op for op in graph.ops if op.name in members]
    producer = graph.producer_map
    consumers = graph.consumer_map

    def internal(t: str) -> bool:
        return producer.get(t) in members and not graph.is_constant(t)

    deferred = []
    for op in ops:  # a non-crossbar op runs on the core of its producer
        if op.name in home:
            continue
        src = next((t for t in op.inputs if t and internal(t)), None)
        if src is None or producer[src] not in home:
            deferred.append(op)  # inputs from DRAM (or from such an op only)
        else:
            home[op.name] = home[producer[src]]
    fallback = stages[0].home if stages else (start // hw.core_crossbars) % hw.cores
    for op in reversed(deferred):  # on the core of its first consumer in the group
        readers = [c for t in op.outputs for c in consumers.get(t, ()) if c in home]
        home[op.name] = home[readers[0]] if readers else fallback
    for op in ops:  # tensors between ops on different cores, once per reading core
        for t in (t for t in op.outputs if t):  # an unused optional output is named ""
            reading = {home[c] for c in consumers.get(t, ()) if c in members}
            n_bytes = math.prod(graph.tensors[t].shape) * hw.act_bytes
            for core in reading:
                flow.send(home[op.name], core, n_bytes)
    holders = tensor_cores(graph, group, home)
    for t, mine in shares.items():  # a core holding the whole rows needs no share of them
        for core in holders.get(t, ()):
            mine.pop(core, None)
    shares = {t: mine for t, mine in shares.items() if mine}
    return _Layout(tuple(stages), home, holders, flow, shares)


def _singleton_bytes(graph: Graph, group: Group, hw: HardwareConfig) -> int:
    """The group model's ``buffer_needed_bytes`` of a group (a singleton's, maybe tiled)."""
    pos = graph.op_index
    totals = group_model(graph, hw).evaluate([pos[n] for n in group.ops], group.mode)
    return int(totals.buffer_needed_bytes or 0)


def _violations(group: Group, hw: HardwareConfig, charge: Mapping[int, int]) -> tuple[str, ...]:
    return tuple(
        f"group {_name(group)}: core {core} holds {b} B at its peak, its buffer "
        f"(core_buffer_bytes = buffer_bytes / cores) is {hw.core_buffer_bytes} B"
        for core, b in sorted(charge.items())
        if b > hw.core_buffer_bytes
    )


def _place_group(
    graph: Graph,
    group: Group,
    hw: HardwareConfig,
    start: int,
    reps: Mapping[str, int],
    spread: bool = False,
) -> PlacedGroup:
    lay = _layout(graph, group, hw, start, reps, spread)
    needed = _singleton_bytes(graph, group, hw) if len(group.ops) == 1 else 0
    charge = _charge_buffers(graph, group, hw, lay.home, lay.holders, needed, lay.shares)
    busiest = lay.flow.max_link_bytes
    return PlacedGroup(
        ops=group.ops,
        stages=lay.stages,
        home=lay.home,
        noc_bytes=lay.flow.bytes,
        noc_byte_hops=lay.flow.byte_hops,
        core_buffer_bytes=charge,
        violations=_violations(group, hw, charge),
        tensor_cores=lay.holders,
        core_sent_bytes=lay.flow.sent,
        core_received_bytes=lay.flow.received,
        noc_max_link_bytes=busiest,
        noc_cycles=noc_cycles(hw, busiest),
    )


class CoreFit(NamedTuple):
    """A group's verdict on a many-core chip, a property of the group alone
    (:func:`group_on_cores`).

    Attributes:
        violations: why the group does not fit (a core over its buffer, or more cores than
            the chip has for its stages); empty when it fits.
        crossbars: crossbars its stages take with each stage on fresh cores (whole cores:
            what the group adds to a ``spread`` plan's fill).
    """

    violations: tuple[str, ...]
    crossbars: int


def group_on_cores(graph: Graph, group: Group, hw: HardwareConfig) -> CoreFit:
    """Whether ``group`` fits every core's buffer on ``hw``, whatever plan it is part of.

    Under the default ``spread`` packing every LINEAR stage starts on a fresh core, so a group
    placed from any crossbar is the one placed from crossbar 0 moved by whole cores (the
    first stage is rounded up to a core boundary; a group without stages sits on one core).
    Moving the cores moves the hops but not which ops and tensors share a core, so each
    core's peak, and hence the verdict, is the group's own — as long as the plan's stages fit
    the chip without wrapping, which :func:`spread_crossbars` tells. The exact optimizer and
    the greedy baseline use this verdict on chips with ``cores > 1`` (``docs/cores.md``).

    Cached like :func:`place_group`. A core whose tensors held whole (plus its ops'
    accumulators and outputs) fit its buffer needs no replay; otherwise its peak is the
    replay's, as in :func:`place_group`.
    """
    table = _table(graph, hw)
    key = ("fit", group.ops, group.mode.value)
    hit = table.get(key)
    if hit is not None:
        assert isinstance(hit, CoreFit)
        return hit
    lay = _layout(graph, group, hw, 0, {}, True)
    crossbars = sum(core_aligned(st.crossbars, hw) for st in lay.stages)
    violations: tuple[str, ...] = ()
    if crossbars > hw.n_crossbars:
        violations = (
            f"group {_name(group)}: its stages need {crossbars // hw.core_crossbars} cores "
            f"of {hw.core_crossbars} crossbars each on fresh cores, the chip has {hw.cores}",
        )
    elif len(group.ops) == 1:
        needed = _singleton_bytes(graph, group, hw)
        charge = _charge_buffers(graph, group, hw, lay.home, lay.holders, needed, lay.shares)
        violations = _violations(group, hw, charge)
    elif any(b > hw.core_buffer_bytes for b in _whole_bytes(graph, hw, lay).values()):
        nodes = group_structure(graph, group)
        limit = hw.core_buffer_bytes // hw.act_bytes  # stop at the first core past its buffer
        peaks = core_peaks(graph, group, nodes, lay.holders,
                           {n.name: lay.home[n.name] for n in nodes}, lay.shares,
                           limit)  # fmt: skip
        if peaks is None:
            violations = (
                f"group {_name(group)}: a core holds more than its buffer "
                f"(core_buffer_bytes = buffer_bytes / cores, {hw.core_buffer_bytes} B)",
            )
    fit = table[key] = CoreFit(violations, crossbars)
    return fit


def _whole_bytes(graph: Graph, hw: HardwareConfig, lay: _Layout) -> dict[int, int]:
    """Per core, an upper bound on its peak: every tensor it holds, whole, plus the
    accumulators and outputs of the ops it runs (their scratch)."""
    acc = group_model(graph, hw).st.acc_elems
    pos = graph.op_index
    out: dict[int, int] = {}
    for t, cores in lay.holders.items():
        n = math.prod(graph.tensors[t].shape)
        for c in cores:
            out[c] = out.get(c, 0) + n
    for t, mine in lay.shares.items():  # line buffers: a share of every row, held whole
        rows = math.prod(graph.tensors[t].shape) // max(1, row_elems(graph, t))
        for c, per_row in mine.items():
            out[c] = out.get(c, 0) + rows * per_row
    for name, c in lay.home.items():
        op = graph.op_by_name[name]
        scratch = acc[pos[name]] + sum(math.prod(graph.tensors[t].shape) for t in op.outputs if t)
        out[c] = out.get(c, 0) + scratch
    return {c: n * hw.act_bytes for c, n in out.items()}


def spread_crossbars(graph: Graph, plan: Plan, hw: HardwareConfig) -> int:
    """Crossbars a ``spread`` placement of ``plan`` takes, counted in whole cores per stage
    (resident weights: the sum over the groups; else the largest group's). At most
    ``n_crossbars`` exactly when ``place_plan`` packs the plan ``spread`` (no dense fallback)."""
    per_group = [group_on_cores(graph, g, hw).crossbars for g in plan.groups]
    return sum(per_group) if hw.weights_resident else max(per_group, default=0)


def tensor_cores(graph: Graph, group: Group, home: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
    """The cores holding each (non-constant) tensor a group's ops read or write: the cores
    of its readers in the group (each keeps its own rows), else its producer's core."""
    members = set(group.ops)
    consumers, producer = graph.consumer_map, graph.producer_map
    out: dict[str, tuple[int, ...]] = {}
    for op in graph.subgraph_ops(group.ops):
        for t in (*op.inputs, *op.outputs):
            if not t or t in out or graph.is_constant(t):
                continue
            cores = sorted({home[c] for c in consumers.get(t, ()) if c in members})
            if not cores and producer.get(t) in members:
                cores = [home[producer[t]]]
            if cores:
                out[t] = tuple(cores)
    return out


def _charge_buffers(
    graph: Graph,
    group: Group,
    hw: HardwareConfig,
    home: Mapping[str, int],
    holders: Mapping[str, tuple[int, ...]],
    needed: int,
    shares: Mapping[str, Mapping[int, int]],
) -> dict[int, int]:
    """Each core's peak bytes over the group's schedule (``docs/cores.md``, placement step
    5): the row-counter replay of :mod:`fusiontune.sim.capacity` with each tensor's rows on
    the cores holding it, a convolution's line buffers on its other cores (``shares``: tensor
    -> core -> elements of each row it keeps) and an op's accumulators on its own core.
    ``needed``: the group model's ``buffer_needed_bytes`` (a singleton's, maybe tiled through
    DRAM: all on its core; its other cores hold their line buffers).
    """
    if len(group.ops) == 1 and not shares:
        return {home[group.ops[0]]: needed}
    nodes = group_structure(graph, group)
    node_core = {n.name: home[n.name] for n in nodes}
    peaks = core_peaks(graph, group, nodes, holders, node_core, shares)
    assert peaks is not None  # no limit: every core's peak
    charge = {core: elems * hw.act_bytes for core, elems in sorted(peaks.items())}
    if len(group.ops) == 1:
        charge[home[group.ops[0]]] = needed
    return charge


def _name(group: Group) -> str:
    ops = group.ops
    return f"[{ops[0]}]" if len(ops) == 1 else f"[{ops[0]} .. {ops[-1]}] ({len(ops)} ops)"


def _fill(used: list[int], first: int, n: int, hw: HardwareConfig) -> None:
    """Add crossbars ``first .. first + n - 1`` (wrapping over the chip) to ``used`` per core."""
    per_core = hw.core_crossbars
    for xb in range(first, first + n):
        used[(xb // per_core) % hw.cores] += 1


def place_plan(
    graph: Graph,
    plan: Plan,
    hw: HardwareConfig,
    replication: Mapping[str, int] | None = None,
    policy: str = "spread",
) -> PlacedPlan:
    """Place every group of ``plan`` on ``hw`` (``docs/cores.md``).

    Groups go in execution order; with weights resident the crossbars fill on from group to
    group (the whole plan stays mapped), else each group starts at core 0. More crossbars than
    the chip has is a violation (the fill wraps around so the counts stay defined).

    Args:
        graph: the graph.
        plan: the plan (not checked for legality).
        hw: the chip (any core count; one core gives no network bytes).
        replication: copies per LINEAR op name (default 1 each).
        policy: ``spread`` (default) or ``dense`` packing (:data:`POLICIES`); a ``spread``
            placement whose core-aligned stages need more crossbars than the chip has falls
            back to ``dense`` when that fits.
    """
    _check_policy(policy)
    placed = _place_plan(graph, plan, hw, replication, policy)
    if policy == "spread" and any(v.startswith("plan:") for v in placed.violations):
        dense = _place_plan(graph, plan, hw, replication, "dense")
        if not any(v.startswith("plan:") for v in dense.violations):
            return dense  # fresh cores per stage do not fit the chip: pack densely
    return placed


def _place_plan(
    graph: Graph,
    plan: Plan,
    hw: HardwareConfig,
    replication: Mapping[str, int] | None,
    policy: str,
) -> PlacedPlan:
    peaks = [0] * hw.cores
    used = [0] * hw.cores
    placed: list[PlacedGroup] = []
    violations: list[str] = []
    cursor = 0
    for gi in group_order(graph, plan):
        group = plan.groups[gi]
        start = cursor if hw.weights_resident else 0
        pg = place_group(graph, group, hw, start, replication, policy)
        placed.append(pg)
        violations.extend(pg.violations)
        for core, b in pg.core_buffer_bytes.items():
            peaks[core] = max(peaks[core], b)
        end = pg.stages[-1].first_crossbar + pg.stages[-1].crossbars if pg.stages else start
        cursor = end if hw.weights_resident else max(cursor, end)
    total = cursor
    if total > hw.n_crossbars:
        what = "resident weights" if hw.weights_resident else "a group's stages"
        violations.append(
            f"plan: {what} need {total} crossbars, the chip has {hw.n_crossbars} "
            f"({hw.cores} cores x {hw.core_crossbars})"
        )
    if policy == "dense":
        for core in range(hw.cores):
            used[core] = max(0, min(hw.core_crossbars, total - core * hw.core_crossbars))
    else:  # spread leaves the tail of a stage's last core free: count the stages' tiles
        for pg in placed:
            mine = [0] * hw.cores
            for st in pg.stages:
                _fill(mine, st.first_crossbar, st.crossbars, hw)
            for core in range(hw.cores):
                used[core] = (
                    used[core] + mine[core] if hw.weights_resident else max(used[core], mine[core])
                )
    noc_bytes = sum(g.noc_bytes for g in placed)
    byte_hops = sum(g.noc_byte_hops for g in placed)
    sent, received = [0] * hw.cores, [0] * hw.cores
    for pg in placed:
        for core, b in pg.core_sent_bytes.items():
            sent[core] += b
        for core, b in pg.core_received_bytes.items():
            received[core] += b
    return PlacedPlan(
        groups=tuple(placed),
        noc_bytes=noc_bytes,
        noc_byte_hops=byte_hops,
        noc_energy_pj=byte_hops * BITS_PER_BYTE * hw.noc_pj_per_bit_hop,
        core_peak_buffer_bytes=tuple(peaks),
        core_crossbars_used=tuple(used),
        violations=tuple(violations),
        core_port_bytes=tuple(max(a, b) for a, b in zip(sent, received)),
    )
