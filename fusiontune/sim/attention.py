"""The flash scheme of a fused attention op: its tiles, the bytes it moves and holds, its bound.

A fused attention (``ops/attention.py``, pattern P5 of ``planner/attention.py``) runs on the
digital units, one head ``(b, h)`` after the other. Per head, ``Q [Nq, d]`` is cut into tiles
of ``m`` rows; each Q tile keeps an online-softmax state on chip (running max and sum, and the
``m x dv`` output accumulator, each element :func:`fusiontune.sim.tiling.acc_units` wide) while
K and V stream past it in tiles of ``n`` rows; the ``m x n`` score tile lives only on chip.
Two variants:

- **resident** — K and V of the head are fetched once and stay while every Q tile passes:
  per head ``Nq·d + Nk·(d + dv)`` elements read (the compulsory traffic);
- **streamed** — the buffer cannot hold K and V: each Q tile re-reads them, per head
  ``Nq·d + ceil(Nq/m)·Nk·(d + dv)``: the ``Θ(N²d²/M)`` of FlashAttention (Dao et al. 2022,
  Theorem 2).

The output tile (``m x dv``) is written once; an activation mask is read box by box (its part
of each score tile; a mask broadcast along heads or query rows is re-read there). On chip at
the innermost step: the Q tile, the K and V tiles (or the whole K and V), the score tile, the
mask box and the state. The variant and ``(m, n)`` with the least traffic are taken (ties:
fewest tiles). ``sim/attention_run.py`` runs the same tiles on real arrays and measures both.

:func:`attention_io_bound` is the IO lower bound of one attention (module docstring there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fusiontune.ir.graph import Graph, Op
from fusiontune.ops import fused_attention_problem

STATE_COLS = 2  # running max and running sum per query row


@dataclass(frozen=True)
class FlashShape:
    """The sizes of one fused attention: ``heads = B·H``, ``Q [nq, d]``, ``K [nk, d]``,
    ``V [nk, dv]`` per head, and the mask (``None``: none, or a constant) right-aligned to
    ``[B, H, Nq, Nk]``."""

    batch: int
    heads_per: int
    nq: int
    nk: int
    d: int
    dv: int
    mask: tuple[int, int, int, int] | None

    @property
    def heads(self) -> int:
        return self.batch * self.heads_per

    def mask_box(self, m: int, n: int) -> int:
        """Mask elements one ``m x n`` score tile reads."""
        if self.mask is None:
            return 0
        return (m if self.mask[2] > 1 else 1) * (n if self.mask[3] > 1 else 1)

    def mask_reads(self, m: int, n: int) -> int:
        """Mask elements all tiles of every head read."""
        if self.mask is None:
            return 0
        rows = self.nq if self.mask[2] > 1 else math.ceil(self.nq / m)
        cols = self.nk if self.mask[3] > 1 else math.ceil(self.nk / n)
        return self.heads * rows * cols

    def compulsory(self) -> int:
        """Elements every schedule moves: Q, K, V, the mask once, the output."""
        mask = 0 if self.mask is None else math.prod(self.mask)
        per_head = self.nq * self.d + self.nk * (self.d + self.dv) + self.nq * self.dv
        return self.heads * per_head + mask


@dataclass(frozen=True)
class FlashPlan:
    """The flash schedule of one fused attention (elements; ``None`` tiles: it cannot run)."""

    m: int
    n: int
    resident: bool
    read_elems: int
    write_elems: int
    peak_elems: int
    reason: str = ""


def flash_shape(graph: Graph, op: Op) -> FlashShape:
    """The sizes of ``op`` (a fused attention whose form is supported)."""
    q, k, v = (graph.tensors[t].shape for t in op.inputs[:3])
    mask = None
    if len(op.inputs) > 3 and op.inputs[3] and not graph.is_constant(op.inputs[3]):
        s = graph.tensors[op.inputs[3]].shape
        mask = tuple((1,) * (4 - len(s)) + tuple(s))
    return FlashShape(q[0], q[1], q[2], k[2], q[3], v[3], mask)  # type: ignore[arg-type]


def tile_need(f: FlashShape, m: int, n: int, resident: bool, acc: int) -> int:
    """Elements on chip at a full tile's innermost step."""
    kv = (f.nk if resident else n) * (f.d + f.dv)
    return m * f.d + kv + m * n + f.mask_box(m, n) + acc * m * (f.dv + STATE_COLS)


def tile_reads(f: FlashShape, m: int, n: int, resident: bool) -> int:
    """Elements the DMA fetches (re-reads included)."""
    kv_passes = 1 if resident else math.ceil(f.nq / m)
    return f.heads * (f.nq * f.d + kv_passes * f.nk * (f.d + f.dv)) + f.mask_reads(m, n)


def plan_flash(graph: Graph, op: Op, cap: int, acc: int) -> FlashPlan:
    """The least-traffic flash schedule of ``op`` in ``cap`` elements (``acc``: elements one
    accumulator value takes)."""
    problem = fused_attention_problem(graph, op)
    if problem:
        return FlashPlan(0, 0, False, 0, 0, 0, problem)
    f = flash_shape(graph, op)
    writes = f.heads * f.nq * f.dv
    best: tuple[int, int, int, int, bool] | None = None  # (reads, tiles, m, n, resident)
    widths = sorted({math.ceil(f.nk / j) for j in range(1, f.nk + 1)}, reverse=True)
    for resident in (True, False):
        for n in widths:
            if tile_need(f, 1, n, resident, acc) > cap:
                continue
            lo, hi = 1, f.nq  # the most query rows that fit (need grows with m)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if tile_need(f, mid, n, resident, acc) <= cap:
                    lo = mid
                else:
                    hi = mid - 1
            reads = tile_reads(f, lo, n, resident)
            tiles = f.heads * math.ceil(f.nq / lo) * math.ceil(f.nk / n)
            if best is None or (reads, tiles) < best[:2]:
                best = (reads, tiles, lo, n, resident)
    if best is None:
        need = tile_need(f, 1, 1, False, acc)
        return FlashPlan(0, 0, False, 0, 0, need,
                         f"one query row and one key row need {need:,} elements")  # fmt: skip
    reads, _, m, n, resident = best
    return FlashPlan(m, n, resident, reads, writes, tile_need(f, m, n, resident, acc))


def attention_io_bound(graph: Graph, op: Op, cap: int) -> int:
    """A lower bound (elements) on the DRAM traffic of ``op`` in ``cap`` elements of buffer.

    ``max(compulsory, S)``: every schedule reads Q, K, V and the mask and writes the output
    once (compulsory); and ``S`` by Hong–Kung's segment argument (the one behind
    FlashAttention's Proposition 3): cut any schedule into segments of ``cap`` DMA transfers.
    A score ``q_i·k_j`` whose whole dot product falls in one segment needs all ``d`` elements
    of ``q_i`` and of ``k_j`` on chip during it; at most ``2·cap`` elements are (``cap`` held
    at its start, ``cap`` fetched), so ``a`` query and ``b`` key rows with ``a + b <= 2·cap/d``
    and at most ``a·b <= (cap/d)²`` such scores. A score begun in a segment and finished
    later is a partial sum at the segment's end, on chip (at most ``cap``) or written during
    it (at most ``cap``). ``T`` segments thus cover at most ``T·((cap/d)² + 2·cap)`` of the
    ``P = heads·Nq·Nk`` scores, and the traffic is at least ``cap·(T - 1) >=
    P·d²/(cap + 2·d²) - cap`` elements. Constants (a constant mask) are not traffic.
    """
    f = flash_shape(graph, op)
    scores = f.heads * f.nq * f.nk
    segment = scores * f.d * f.d / (cap + 2 * f.d * f.d) - cap
    return max(f.compulsory(), math.floor(segment))
