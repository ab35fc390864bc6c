"""Run a group on a many-core chip: one buffer per core, bytes counted at each core's port.

The executor's many-core measurement (``docs/cores.md``, "What the executor measures"). It
consumes a group's placement only as data (:class:`~fusiontune.sim.placement.PlacedGroup`:
each op's home core, the cores holding each tensor, the core of every crossbar tile) and
runs the group's kernels as :class:`~fusiontune.sim.runner.GroupRunner` does, with:

- **buffers**: one :class:`~fusiontune.sim.runner.OnChip` of ``hw.core_buffer_bytes`` per
  core (:class:`CoreBuffers`). The rows of a tensor are allocated on every core holding them
  (each reader keeps its own), an op's scratch (a pool's partial row, a global pool's
  accumulator) on the op's core; a core overflowing raises ``CapacityError`` naming it.
  Each core's peak is measured.
- **network** (:class:`Network`): every array a kernel appends to a tensor on its core is
  *sent* to each other core holding that tensor, counted at the sender's port with its hop
  count (:func:`~fusiontune.sim.placement.hops`).
- **crossbar tiles** (:meth:`Network.tile_products`): each band of a LINEAR node (a
  convolution's im2col vectors, a matrix op's rows) is dealt to the stage's copies in order
  and run tile by tile: each tile's core receives its rows of its copy's input vectors
  (scatter), computes its partial sums and sends them to the core of row tile 0 of its
  column tile, which adds them and sends the column tile's outputs home (gather); every
  transfer is counted from the array moved, and in float numerics the gathered products must
  equal the kernel's band. The kernel's own output flows on, so the numbers are the flat
  executor's. Bands without such operands (a transposed convolution, a LINEAR node run whole,
  a tiled singleton) are counted from the vectors of their output array (:meth:`Network.tiles`).
- **tiled singletons** (:mod:`fusiontune.sim.tiled_run`) run on their op's core, in that
  core's buffer; their vectors are the output elements the DMA wrote.

DRAM is as in the flat executor: reads arrive at the core that consumes them, writes leave
from the core that produced them, counted by :class:`~fusiontune.sim.runner.Dram` only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusiontune.errors import CapacityError
from fusiontune.ir.graph import Graph
from fusiontune.ops.linear import LinearParams, MatmulFn, im2col, matmul_float
from fusiontune.planner.plan import Group, Plan
from fusiontune.sim.hardware import HardwareConfig
from fusiontune.sim.placement import (
    ConvInput,
    Link,
    PlacedGroup,
    StagePlacement,
    conv_inputs,
    hops,
    noc_cycles,
    place_plan,
    route,
)
from fusiontune.sim.rows import RowKind, RowMap
from fusiontune.sim.runner import Dram, GroupRunner, GroupStats, OnChip, _Slot
from fusiontune.sim.structure import Node
from fusiontune.sim.tiled_run import run_tiled
from fusiontune.sim.tiling import Tiling, acc_units, singleton_tiling

Array = np.ndarray
SCRATCH = ("accumulated row", "accumulator")  # allocations that live on the computing op's core
TILE_RTOL = 1e-4  # the tiles' float64 sums against the float32 kernel, relative to its peak


class Network:
    """Bytes one group sends between cores, counted at the sender's port."""

    def __init__(self, hw: HardwareConfig) -> None:
        self.hw = hw
        self.bytes = 0
        self.byte_hops = 0
        self._dealt: dict[tuple[str, ...], int] = {}  # stage -> vectors computed so far
        self._received: dict[tuple[tuple[str, ...], int], Array] = {}  # input ids per core
        self.links: dict[Link, int] = {}  # bytes each link carried
        self._routes: dict[tuple[int, int], list[Link]] = {}

    def send(self, src: int, dst: int, n_bytes: int) -> None:
        """One transfer of ``n_bytes`` from core ``src`` to core ``dst``."""
        if src != dst and n_bytes:
            self.bytes += n_bytes
            self.byte_hops += n_bytes * hops(self.hw, src, dst)
            path = self._routes.get((src, dst))
            if path is None:
                path = self._routes[src, dst] = route(self.hw, src, dst)
            for link in path:
                self.links[link] = self.links.get(link, 0) + n_bytes

    @property
    def max_link_bytes(self) -> int:
        """The bytes of the busiest link (each transfer routed XY, link by link)."""
        return max(self.links.values(), default=0)

    def tiles(self, stage: StagePlacement, out_elems: int) -> None:
        """A LINEAR stage computed ``out_elems`` output elements: the transfers between its
        tiles (scatter, partial sums, gather) for the vectors those elements are."""
        self._check_tiles(stage)
        per_vector = sum(stage.col_outputs) * stage.count
        vectors, extra = divmod(out_elems, per_vector)
        assert not extra, f"{stage.ops[0]}: {out_elems} outputs are not whole vectors"
        done = self._dealt.get(stage.ops, 0)
        self._dealt[stage.ops] = done + vectors
        start = 0
        for copy, quota in enumerate(stage.copy_vectors):  # vectors [start, start+quota)
            lo, hi = max(start, done), min(start + quota, done + vectors)
            if hi > lo:
                self._copy(stage, copy, hi - lo)
            start += quota

    def tile_products(
        self,
        stage: StagePlacement,
        x: Array,
        w: Array,
        order: Array | None = None,
        ids: Array | None = None,
    ) -> Array:
        """Run the stage's crossbar tiles on one band: ``x`` ``(count, vectors, rows)`` the
        input vectors at the home, ``w`` ``(count, rows, cols)`` the matrices. Each tile's core
        receives its inputs (scatter), computes its partial sums and sends them to the core of
        row tile 0 of its column tile, which adds them and sends the column tile's outputs home
        (gather); every transfer is counted from the array moved. Returns the gathered products
        ``(count, vectors, cols)`` (no bias).

        ``order``: each vector's number in the whole op (a convolution's: image by image,
        pixels in row-major order; default: the vectors dealt so far, in order), which decides
        its copy. ``ids``: like ``x``, the input element each entry of a vector is (``-1`` for
        padding): the receiving core then gets each input element once (the first band that
        needs it) and forms its windows from its line buffer; without ``ids`` it receives its
        rows of every vector."""
        self._check_tiles(stage)
        count, vectors, _ = x.shape
        if order is None:
            done = self._dealt.get(stage.ops, 0)
            self._dealt[stage.ops] = done + vectors
            order = np.arange(done, done + vectors)
        starts = np.cumsum((0, *stage.copy_vectors))
        copy_of = np.searchsorted(starts, order, side="right") - 1
        rt, ct, ab = stage.row_tiles, stage.col_tiles, self.hw.act_bytes
        r_at = [sum(stage.tile_rows[:i]) for i in range(rt + 1)]
        c_at = [sum(stage.col_outputs[:j]) for j in range(ct + 1)]
        out = np.zeros((count, vectors, c_at[-1]), dtype=np.float64)
        for copy in range(stage.copies):
            sel = np.flatnonzero(copy_of == copy)
            if not sel.size:
                continue
            xs = x[:, sel]
            sent: list[dict[int, set[int]]] = [{} for _ in range(count)]  # core -> row tiles
            for j in range(ct):
                cols = slice(c_at[j], c_at[j + 1])
                acc = np.zeros((count, sel.size, c_at[j + 1] - c_at[j]), dtype=np.float64)
                for i in range(rt):
                    rows = slice(r_at[i], r_at[i + 1])
                    part = np.matmul(xs[:, :, rows], w[:, rows, cols], dtype=np.float64)
                    for g in range(count):  # partial sums to the reducer
                        core = stage.tile_cores[stage.tile_index(copy, g, j, i)]
                        sent[g].setdefault(core, set()).add(i)
                        reducer = stage.tile_cores[stage.tile_index(copy, g, j, 0)]
                        self.send(core, reducer, part[g].size * stage.psum_bytes)
                    acc += part
                for g in range(count):  # the column tile's outputs to the home
                    reducer = stage.tile_cores[stage.tile_index(copy, g, j, 0)]
                    self.send(reducer, stage.home, acc[g].size * ab)
                out[:, sel, cols] = acc
            for g in range(count):  # each core's inputs
                for core, tiles in sent[g].items():
                    at = np.concatenate([np.arange(r_at[i], r_at[i + 1]) for i in sorted(tiles)])
                    if ids is None:  # its rows of each vector
                        self.send(stage.home, core, xs[g][:, at].size * ab)
                    elif core != stage.home:
                        payload = self._new_inputs(stage, core, ids[g][sel][:, at], xs[g][:, at])
                        self.send(stage.home, core, payload.size * ab)
        return out

    def _new_inputs(self, stage: StagePlacement, core: int, ids: Array, values: Array) -> Array:
        """The input elements a core's windows read that it has not received yet (its line
        buffer keeps the rest): the values sent to it."""
        flat = ids.reshape(-1)
        real = flat >= 0
        uniq, first = np.unique(flat[real], return_index=True)
        key = (stage.ops, core)
        have = self._received.get(key)
        need = int(uniq[-1]) + 1 if uniq.size else 0
        if have is None or have.size < need:
            grown = np.zeros(max(need, 2 * (0 if have is None else have.size)), dtype=bool)
            if have is not None:
                grown[: have.size] = have
            have = self._received[key] = grown
        new = ~have[uniq]
        have[uniq[new]] = True
        return values.reshape(-1)[real][first[new]]

    def _check_tiles(self, stage: StagePlacement) -> None:
        assert len(stage.tile_cores) == (
            stage.copies * stage.tile_sets * stage.row_tiles * stage.col_tiles
        ), f"{stage.ops[0]}: the placement lists no core for some of its tiles (tile_cores)"

    def _copy(self, stage: StagePlacement, copy: int, vec: int) -> None:
        ab, home = self.hw.act_bytes, stage.home
        rt, ct = stage.row_tiles, stage.col_tiles
        for g in range(stage.count):
            row_tiles_on: dict[int, set[int]] = {}  # core -> row tiles it holds (inputs once)
            for j in range(ct):
                reducer = stage.tile_cores[stage.tile_index(copy, g, j, 0)]
                for i in range(rt):
                    core = stage.tile_cores[stage.tile_index(copy, g, j, i)]
                    row_tiles_on.setdefault(core, set()).add(i)
                    self.send(core, reducer, vec * stage.col_outputs[j] * stage.psum_bytes)
                self.send(reducer, home, vec * stage.col_outputs[j] * ab)
            for core, tiles in row_tiles_on.items():
                self.send(home, core, vec * sum(stage.tile_rows[i] for i in tiles) * ab)


class CoreBuffers:
    """One :class:`OnChip` per core; the interface of one (``alloc``, ``free``, ``used``,
    ``peak``), with each allocation on the cores holding its tensor."""

    def __init__(
        self,
        capacity_bytes: int,
        label: str,
        holders: Mapping[str, tuple[int, ...]],
        scratch_core: Mapping[str, int],
        shares: Mapping[str, Mapping[int, int]] | None = None,
        row_bytes: Mapping[str, int] | None = None,
    ) -> None:
        self.capacity = capacity_bytes
        self.label = label
        self.holders = holders
        self.scratch_core = scratch_core
        self.shares = shares or {}  # tensor -> core -> bytes of each row (a line buffer)
        self.row_bytes = row_bytes or {}
        self.cores: dict[int, OnChip] = {}
        self.used = 0
        self.peak = 0

    def _cores(self, tensor: str, what: str, nbytes: int) -> list[tuple[int, int]]:
        """``(core, bytes)`` an allocation of ``nbytes`` of ``tensor`` puts on each core."""
        if what in SCRATCH:
            return [(self.scratch_core[tensor], nbytes)]
        out = [(core, nbytes) for core in self.holders[tensor]]
        share = self.shares.get(tensor)
        if share:
            rows, extra = divmod(nbytes, self.row_bytes[tensor])
            assert not extra, f"{tensor}: {nbytes} B are not whole rows"
            out.extend((core, rows * per_row) for core, per_row in share.items())
        return out

    def _chip(self, core: int) -> OnChip:
        chip = self.cores.get(core)
        if chip is None:
            chip = self.cores[core] = OnChip(
                self.capacity, f"{self.label} core {core}", "core_buffer_bytes"
            )
        return chip

    def alloc(self, nbytes: int, tensor: str, what: str) -> None:
        for core, n in self._cores(tensor, what, nbytes):
            self._chip(core).alloc(n, tensor, what)
            self.used += n
        self.peak = max(self.peak, self.used)

    def free(self, nbytes: int, tensor: str = "", what: str = "") -> None:
        for core, n in self._cores(tensor, what, nbytes):
            self._chip(core).free(n)
            self.used -= n

    def core_peaks(self) -> dict[int, int]:
        return {core: chip.peak for core, chip in sorted(self.cores.items())}


@dataclass(frozen=True)
class CoreStats:
    """What one group measured on the cores.

    Attributes:
        stats: what the flat runner measures (DRAM bytes, the sum over cores at its peak).
        core_peak_bytes: each core's peak (cores holding anything).
        noc_bytes: bytes sent between cores.
        noc_byte_hops: those bytes times their hops.
        noc_max_link_bytes: the bytes of its busiest link.
    """

    stats: GroupStats
    core_peak_bytes: Mapping[int, int]
    noc_bytes: int
    noc_byte_hops: int
    noc_max_link_bytes: int = 0


class CoreGroupRunner(GroupRunner):
    """A :class:`GroupRunner` whose nodes run on their home cores (module docstring)."""

    def __init__(
        self,
        graph: Graph,
        index: int,
        label: str,
        nodes: Sequence[Node],
        stored: Sequence[str],
        dram: Dram,
        placed: PlacedGroup,
        hw: HardwareConfig,
        network: Network,
        band_rows: int | None,
        matmul: MatmulFn,
        band_elems: int = 0,
    ) -> None:
        super().__init__(graph, index, label, nodes, stored, dram, hw.core_buffer_bytes,
                         band_rows, matmul, band_elems)  # fmt: skip
        self.network = network
        self.core_of = {node.name: placed.home[node.name] for node in self.nodes}
        self.holders: dict[str, tuple[int, ...]] = {}
        for t, slot in self.slots.items():  # the cores of the nodes that read it, or its maker's
            readers = {self.core_of[r] for r in slot.readers}
            self.holders[t] = tuple(sorted(readers or {self.core_of[self.producer[t].name]}))
        scratch = {t: self.core_of[n.name] for t, n in self.producer.items()}
        stage_of = {s.ops[0]: s for s in placed.stages}
        self.stage_of = {n.name: stage_of[n.name] for n in self.nodes if n.name in stage_of}
        self.convs = {n: c for n, c in conv_inputs(graph, self.nodes).items() if n in self.stage_of}
        shares: dict[str, dict[int, int]] = {}  # tensor -> core -> bytes of each row it keeps
        for name, conv in self.convs.items():
            row_bytes = self.slots[conv.tensor].row_bytes
            mine = shares.setdefault(conv.tensor, {})
            for core, channels in line_channels(self.stage_of[name], conv).items():
                if core not in self.holders[conv.tensor]:
                    mine[core] = mine.get(core, 0) + row_bytes // conv.shape[1] * channels
        row_of = {t: self.slots[t].row_bytes for t in shares}
        self.chip = CoreBuffers(hw.core_buffer_bytes, label, self.holders, scratch,  # type: ignore[assignment]
                                shares, row_of)  # fmt: skip
        self._tiles_ran: set[str] = set()

    def _compute_rows(
        self, node: Node, rm: RowMap, args: list[Array | None], a: int, b: int, out: _Slot
    ) -> Array:
        y = super()._compute_rows(node, rm, args, a, b, out)
        stage = self.stage_of.get(node.name)
        if stage is None:
            return y
        x_height = self.slots[node.inputs[0]].height
        operands = matrix_operands(node, rm, args, a, b, x_height)
        if operands is None:  # counted from its output vectors (a transposed convolution)
            return y
        x, w, as_products = operands
        order = ids = None
        if node.name in self.convs:  # its cores receive input rows and form their windows
            order, ids = conv_vector_ids(node, rm, a, b, self.convs[node.name].shape)
        got = self.network.tile_products(stage, x, w, order, ids)
        self._tiles_ran.add(node.name)
        if self.matmul is matmul_float:  # the tiles computed the kernel's product
            want = as_products(y)
            bias = _bias(node.linear, got.shape)
            if bias is not None:
                got = got + bias
            scale = float(np.abs(want).max(initial=0.0)) or 1.0
            err = float(np.abs(got - want).max(initial=0.0))
            assert err <= TILE_RTOL * scale, f"{node.name}: tiles differ from the kernel by {err}"
        return y

    def _append(self, slot: _Slot, a: int, rows: Array, what: str) -> None:
        super()._append(slot, a, rows, what)
        if slot.external:  # a DMA read: it arrives at the cores holding the tensor
            return
        node = self.producer[slot.name]
        src = self.core_of[node.name]
        n_bytes = int(rows.size) * self.dram.act_bytes
        for core in self.holders[slot.name]:
            self.network.send(src, core, n_bytes)
        stage = self.stage_of.get(node.name)
        if stage is not None:
            _check_columns(node, stage, rows)
            if node.name in self._tiles_ran:  # this band's tiles ran in _compute_rows
                self._tiles_ran.discard(node.name)
            else:
                self.network.tiles(stage, int(rows.size))

    def core_peaks(self) -> dict[int, int]:
        chip = self.chip
        assert isinstance(chip, CoreBuffers)
        return chip.core_peaks()


def matrix_operands(
    node: Node, rm: RowMap, args: Sequence[Array | None], a: int, b: int, x_height: int
) -> tuple[Array, Array, Callable[[Array], Array]] | None:
    """The crossbar operands of one band of a LINEAR node: input vectors
    ``(count, vectors, rows)``, matrices ``(count, rows, cols)`` and how to read the kernel's
    output band as ``(count, vectors, cols)``; ``None`` for a transposed convolution."""
    p = node.linear
    x = args[0]
    if p is None or x is None or rm.kind is RowKind.SPAN:
        return None
    if p.kind == "matrix":
        xm = np.moveaxis(x, p.in_axis, -1)
        flat = xm.reshape(1, -1, xm.shape[-1])

        def matrix_out(y: Array) -> Array:
            return np.moveaxis(y, p.out_axis, -1).reshape(1, -1, p.weight.shape[1])

        return flat, np.asarray(p.weight)[None], matrix_out
    if p.kind != "conv" or rm.window is None:
        return None
    win, _, _ = rm.window.band(a, b, x_height)
    n, group = x.shape[0], p.group
    c_out, ck = p.weight.shape[0], math.prod(p.weight.shape[1:])
    cols = im2col(x, win)  # (N, C * K, P)
    npix = cols.shape[-1]
    vecs = cols.reshape(n, group, ck, npix).transpose(1, 0, 3, 2).reshape(group, n * npix, ck)
    mats = p.weight.reshape(group, c_out // group, ck).transpose(0, 2, 1)

    def conv_out(y: Array) -> Array:
        per = c_out // group
        return y.reshape(n, group, per, npix).transpose(1, 0, 3, 2).reshape(group, -1, per)

    return vecs, mats, conv_out


def conv_vector_ids(
    node: Node, rm: RowMap, a: int, b: int, x_shape: Sequence[int]
) -> tuple[Array, Array]:
    """For one band (output rows ``[a, b)``) of a convolution: each vector's number in the
    whole op (image by image, pixels row-major) and, shaped as its input vectors
    ``(count, vectors, rows)``, the input element each entry reads (``-1``: padding)."""
    p = node.linear
    assert p is not None and rm.window is not None
    win, lo, hi = rm.window.band(a, b, x_shape[2])
    ids = np.arange(1, math.prod(x_shape) + 1, dtype=np.float64).reshape(x_shape)[:, :, lo:hi]
    n, group = x_shape[0], p.group
    ck = math.prod(p.weight.shape[1:])
    cols = im2col(ids, win).astype(np.int64) - 1  # (N, C * K, P)
    npix = cols.shape[-1]
    vecs = cols.reshape(n, group, ck, npix).transpose(1, 0, 3, 2).reshape(group, n * npix, ck)
    per_row = math.prod(rm.window.out_spatial[1:])
    full = math.prod(rm.window.out_spatial)
    order = (np.arange(n)[:, None] * full + a * per_row + np.arange(npix)[None, :]).reshape(-1)
    return order, vecs


def line_channels(stage: StagePlacement, conv: ConvInput) -> dict[int, int]:
    """Input channels each core other than the home keeps in its line buffer: those its tiles
    read (matrix rows are channel-major: ``channel * kernel + offset``)."""
    kk, cpm = conv.kernel_elems, conv.channels_per_matrix
    r_at = [sum(stage.tile_rows[:i]) for i in range(stage.row_tiles + 1)]
    per_matrix = stage.row_tiles * stage.col_tiles
    have: dict[int, set[int]] = {}
    for t, core in enumerate(stage.tile_cores):
        if core == stage.home:
            continue
        g = (t // per_matrix) % stage.count
        i = t % stage.row_tiles
        lo, hi = r_at[i] // kk, (r_at[i + 1] - 1) // kk + 1
        have.setdefault(core, set()).update(range(g * cpm + lo, g * cpm + hi))
    return {core: len(chs) for core, chs in sorted(have.items())}


def _bias(p: LinearParams | None, shape: tuple[int, ...]) -> Array | None:
    """The bias as ``(count, 1, cols)`` (``None`` without one)."""
    if p is None or p.bias is None:
        return None
    return np.asarray(p.bias).reshape(shape[0], 1, shape[2])


def _check_columns(node: Node, stage: StagePlacement, rows: Array) -> None:
    """The stage's column tiles cover the output features of the array its kernel made."""
    p = node.linear
    assert p is not None, f"{node.name}: a crossbar stage without weights"
    cols = sum(stage.col_outputs)
    if p.kind == "matrix":  # (..., features): the other matrices lie along the batch axes
        have, want = rows.shape[p.out_axis], cols
    else:  # a convolution's channels: ``count`` groups of ``cols`` each
        have, want = rows.shape[1], cols * stage.count
    assert have == want, f"{node.name}: {have} output features, its column tiles hold {want}"


def run_group_on_cores(
    graph: Graph,
    index: int,
    label: str,
    nodes: list[Node],
    stored: list[str],
    dram: Dram,
    placed: PlacedGroup,
    hw: HardwareConfig,
    tiling: Tiling | None,
    band_rows: int | None,
    matmul: MatmulFn,
    band_elems: int,
) -> CoreStats:
    """Run one group on its cores (module docstring); ``tiling``: a tiled singleton's
    schedule (``None`` for a group that streams rows)."""
    network = Network(hw)
    if tiling is not None:  # one op tiled through DRAM, on its op's core
        (node,) = nodes
        core = placed.home[node.name]
        stats = run_tiled(graph, index, f"{label} core {core}", node, tiling, stored, dram,
                          hw.core_buffer_bytes, matmul, acc_units(hw))  # fmt: skip
        stage = next((s for s in placed.stages if s.ops[0] == node.name), None)
        if stage is not None:  # its output elements, as the DMA wrote them
            network.tiles(stage, dram.write_bytes[index] // dram.act_bytes)
        return CoreStats(stats, {core: stats.peak_bytes}, network.bytes, network.byte_hops,
                         network.max_link_bytes)  # fmt: skip
    runner = CoreGroupRunner(graph, index, label, nodes, stored, dram, placed, hw, network,
                             band_rows, matmul, band_elems=band_elems)  # fmt: skip
    stats = runner.run()
    return CoreStats(stats, runner.core_peaks(), network.bytes, network.byte_hops,
                     network.max_link_bytes)  # fmt: skip


class ManyCore:
    """A plan's run on a many-core chip: its placement, and what the groups measured."""

    def __init__(self, graph: Graph, plan: Plan, hw: HardwareConfig, band_elems: int) -> None:
        self.graph = graph
        self.hw = hw
        self.band_elems = band_elems
        self.placed = {pg.ops: pg for pg in place_plan(graph, plan, hw).groups}
        self.core_peaks = [0] * hw.cores
        self.noc_bytes = 0
        self.noc_byte_hops = 0
        self.noc_cycles = 0

    def run(
        self,
        index: int,
        group: Group,
        nodes: list[Node],
        stored: list[str],
        dram: Dram,
        band_rows: int | None,
        matmul: MatmulFn,
    ) -> GroupStats:
        """Run one group on its cores; without a given band height, halve the bands until
        every core's buffer holds its share (as the flat executor does)."""
        ops = group.ops
        label = f"[{ops[0]}]" if len(ops) == 1 else f"[{ops[0]} .. {ops[-1]}] ({len(ops)} ops)"
        placed = self.placed[ops]
        tiling = singleton_tiling(self.graph, group, self.hw)
        if tiling is not None and not tiling.feasible:
            raise CapacityError(f"group {label}: {tiling.reason}")
        elems = self.band_elems
        while True:
            try:
                got = run_group_on_cores(self.graph, index, label, nodes, stored, dram, placed,
                                         self.hw, tiling, band_rows, matmul, elems)  # fmt: skip
                break
            except CapacityError:
                if tiling is not None or band_rows is not None or elems <= 1:
                    raise
                dram.forget_group(index)
                elems //= 2
        for core, peak in got.core_peak_bytes.items():
            self.core_peaks[core] = max(self.core_peaks[core], peak)
        self.noc_bytes += got.noc_bytes
        self.noc_byte_hops += got.noc_byte_hops
        self.noc_cycles += noc_cycles(self.hw, got.noc_max_link_bytes)
        return got.stats

    def measured(self) -> dict[str, Any]:
        """The fields of :class:`~fusiontune.sim.execute.Execution` it measured."""
        return {
            "noc_bytes": self.noc_bytes,
            "noc_byte_hops": self.noc_byte_hops,
            "noc_cycles": self.noc_cycles,
            "core_peak_buffer_bytes": tuple(self.core_peaks),
        }
