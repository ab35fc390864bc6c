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

The 3-D (sequence-major) form ``[B, N, H·d]`` (the projections' own layout, P5 absorbs the
head split and merge into it) moves the same elements: a tile's box of a head group is
``[rows, g·d]`` of the 3-D tensor instead of ``[g, rows, d]``.

Grouped heads (GQA/MQA, ``group`` query heads per K/V head): the loop runs over the K/V
heads and a Q tile holds ``m`` positions of every query head of the group, so each K/V tile
is fetched once for the group (``Hk`` instead of ``H`` K/V passes). Causal
(``is_causal``): a Q tile ending at position ``p1`` runs only the K/V tiles starting before
``p1`` (the rest are wholly masked and skipped: neither fetched nor computed), and keys after
the last query are never read; the diagonal tiles are masked on chip (no traffic).

The output tile (``m x dv`` per head) is written once; an activation mask is read box by box
(its part of each score tile; a mask broadcast along heads or query rows is re-read there).
On chip at the innermost step: the Q tile, the K and V tiles (or the whole K and V), the
score tile, the mask box and the state. The variant and ``(m, n)`` with the least traffic
are taken (ties: fewest tiles). ``sim/attention_run.py`` runs the same tiles on real arrays
and measures both.

:func:`attention_io_bound` is the IO lower bound of one attention (module docstring there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fusiontune.ir.graph import Graph, Op
from fusiontune.ops import fused_attention_problem
from fusiontune.ops.attention import causal_keys, heads_shapes, is_causal, kv_group

STATE_COLS = 2  # running max and running sum per query row


@dataclass(frozen=True)
class FlashShape:
    """The sizes of one fused attention: ``heads = B·H``, ``Q [nq, d]`` per head,
    ``K [nk, d]`` and ``V [nk, dv]`` per key/value head (``group`` query heads read each),
    ``causal`` (query ``i`` sees keys ``j <= i``), and the mask (``None``: none, or a
    constant) right-aligned to ``[B, H, Nq, Nk]``.

    A tile of ``m`` *positions* holds those query rows of all ``group`` heads that share a
    K/V head (``group·m`` rows), so each K/V tile fetched serves the whole group."""

    batch: int
    heads_per: int
    nq: int
    nk: int
    d: int
    dv: int
    mask: tuple[int, int, int, int] | None
    group: int = 1
    causal: bool = False

    @property
    def heads(self) -> int:
        return self.batch * self.heads_per

    @property
    def kv_heads(self) -> int:
        """Key/value heads over the batch (``B·Hk``): the flash loop's outer count."""
        return self.heads // self.group

    @property
    def keys_used(self) -> int:
        """Keys any query sees (causal: not those after the last query)."""
        return causal_keys(self.nq - 1, self.nk) if self.causal else self.nk

    def keys_seen(self, stop: int) -> int:
        """Keys the queries before position ``stop`` need."""
        return causal_keys(stop - 1, self.nk) if self.causal else self.nk

    def q_tiles(self, m: int) -> list[tuple[int, int]]:
        """``(start, stop)`` positions of the Q tiles of ``m`` positions."""
        return [(p, min(p + m, self.nq)) for p in range(0, self.nq, m)]

    def kv_tiles(self, stop: int, n: int) -> list[tuple[int, int]]:
        """``(start, stop)`` keys of the K/V tiles a Q tile ending at ``stop`` runs (the
        causal ones wholly after its last query are skipped)."""
        return [(c, min(c + n, self.nk)) for c in range(0, self.keys_seen(stop), n)]

    def mask_box(self, m: int, n: int) -> int:
        """Mask elements one ``m x n`` tile reads (all the group's heads when the mask has
        heads)."""
        if self.mask is None:
            return 0
        h = self.group if self.mask[1] > 1 else 1
        return h * (m if self.mask[2] > 1 else 1) * (n if self.mask[3] > 1 else 1)

    def compulsory(self) -> int:
        """Elements every schedule moves: Q, the keys and values a query sees, the mask once,
        the output."""
        mask = 0 if self.mask is None else math.prod(self.mask)
        kv = self.kv_heads * self.keys_used * (self.d + self.dv)
        return self.heads * self.nq * (self.d + self.dv) + kv + mask

    def scores(self) -> int:
        """Scores a query must see over all heads (causal: those at or before it)."""
        if not self.causal:
            return self.heads * self.nq * self.nk
        return self.heads * sum(causal_keys(i, self.nk) for i in range(self.nq))


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
    four = heads_shapes(op, *(graph.tensors[t].shape for t in op.inputs[:3]))
    assert four is not None, f"op '{op.name}': not a supported fused attention"
    q, k, v = four
    mask = None
    if len(op.inputs) > 3 and op.inputs[3] and not graph.is_constant(op.inputs[3]):
        s = graph.tensors[op.inputs[3]].shape
        mask = tuple((1,) * (4 - len(s)) + tuple(s))
    return FlashShape(q[0], q[1], q[2], k[2], q[3], v[3], mask,  # type: ignore[arg-type]
                      kv_group(q[1], k[1]), is_causal(op))  # fmt: skip


def tile_need(f: FlashShape, m: int, n: int, resident: bool, acc: int) -> int:
    """Elements on chip at a full tile's innermost step (``m`` positions of ``group``
    heads)."""
    rows = f.group * m
    kv = (f.keys_used if resident else n) * (f.d + f.dv)
    return rows * f.d + kv + rows * n + f.mask_box(m, n) + acc * rows * (f.dv + STATE_COLS)


def tile_counts(f: FlashShape, m: int, n: int, resident: bool) -> tuple[int, int]:
    """``(elements the DMA fetches, score tiles)`` of the schedule (re-reads included)."""
    kv_rows = mask = tiles = 0
    mh = 1 if f.mask is None or f.mask[1] == 1 else f.group
    for p0, p1 in f.q_tiles(m):
        kvt = f.kv_tiles(p1, n)
        tiles += len(kvt)
        if not resident:
            kv_rows += kvt[-1][1] if kvt else 0
        if f.mask is not None:
            rows = p1 - p0 if f.mask[2] > 1 else 1
            cols = sum(c1 - c0 if f.mask[3] > 1 else 1 for c0, c1 in kvt)
            mask += mh * rows * cols
    if resident:
        kv_rows = f.keys_used
    reads = f.heads * f.nq * f.d + f.kv_heads * (kv_rows * (f.d + f.dv) + mask)
    return reads, f.kv_heads * tiles


def plan_flash(graph: Graph, op: Op, cap: int, acc: int) -> FlashPlan:
    """The least-traffic flash schedule of ``op`` in ``cap`` elements (``acc``: elements one
    accumulator value takes)."""
    problem = fused_attention_problem(graph, op)
    if problem:
        return FlashPlan(0, 0, False, 0, 0, 0, problem)
    f = flash_shape(graph, op)
    writes = f.heads * f.nq * f.dv
    best: tuple[int, int, int, int, bool] | None = None  # (reads, tiles, m, n, resident)
    keys = f.keys_used
    widths = sorted({math.ceil(keys / j) for j in range(1, keys + 1)}, reverse=True)
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
            reads, tiles = tile_counts(f, lo, n, resident)
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
    segment = f.scores() * f.d * f.d / (cap + 2 * f.d * f.d) - cap
    return max(f.compulsory(), math.floor(segment))
