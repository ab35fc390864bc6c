"""Run a fused attention by its flash scheme inside the bounded buffer; count every byte.

The tiles are those :mod:`fusiontune.sim.attention` plans (its docstring): per head, Q tiles
of ``m`` rows, K/V tiles of ``n`` rows (fetched once per head when resident), the online
softmax of ``ops/attention.py`` (running max, running sum, rescaled accumulator) folding each
K/V tile into the Q tile's state. Every tile fetched from DRAM is allocated on the
:class:`~fusiontune.sim.runner.OnChip` buffer at its real size and counted by the DMA
(:class:`~fusiontune.sim.runner.Dram`); the score tile, the mask box and the state are
allocated as they are made. Grouped heads: a Q tile is the tile's positions of every query
head sharing the K/V head, stacked; causal: the K/V tiles after a Q tile's last query are
skipped and the diagonal ones masked on chip. ``tests/test_attention.py`` checks the
measured bytes and peak against the model's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fusiontune.errors import IllegalPlanError
from fusiontune.ir.graph import Graph
from fusiontune.ops.attention import (
    causal_bias,
    heads_of,
    mask_block,
    nan_guarded,
    online_finish,
    online_init,
    online_step,
    scale_of,
)
from fusiontune.sim.attention import STATE_COLS, flash_shape
from fusiontune.sim.runner import Dram, GroupStats, OnChip
from fusiontune.sim.structure import Node
from fusiontune.sim.tiling import Tiling

Array = np.ndarray


def run_flash(
    graph: Graph,
    index: int,
    label: str,
    node: Node,
    tiling: Tiling,
    stored: Sequence[str],
    dram: Dram,
    capacity_bytes: int,
    acc: int,
) -> GroupStats:
    """Run the fused attention ``node`` by ``tiling`` (scheme ``attention``) inside
    ``capacity_bytes`` (``acc``: elements one accumulator value takes)."""
    op = node.kernel_op
    chip = OnChip(capacity_bytes, label)
    ab = dram.act_bytes
    m, n, resident = tiling.tile
    q_name, k_name, v_name = op.inputs[:3]
    mask_name = op.inputs[3] if len(op.inputs) > 3 and op.inputs[3] else None
    const_mask = None
    if mask_name is not None and graph.is_constant(mask_name):
        const_mask, mask_name = graph.tensors[mask_name].value, None  # a constant: no traffic
    out = op.outputs[0]
    f = flash_shape(graph, op)
    bq, hq, d, dv = f.batch, f.heads_per, f.d, f.dv
    scale = scale_of(op, d)
    seq_major = heads_of(op) is not None  # the 3-D form [B, N, H·d]

    def head_box(b: int, heads: slice, rows: slice, width: int) -> tuple[slice, ...]:
        """The box of ``heads`` x ``rows`` of a Q, K, V or output tensor."""
        if seq_major:
            cols = slice(heads.start * width, heads.stop * width)
            return (slice(b, b + 1), rows, cols)
        return (slice(b, b + 1), heads, rows, slice(None))

    def fetch_heads(tensor: str, b: int, heads: slice, rows: slice, width: int) -> Array:
        """``[heads, rows, width]`` of ``tensor``."""
        part = fetch(tensor, head_box(b, heads, rows, width))[0]
        if seq_major:
            n = rows.stop - rows.start
            return part.reshape(n, heads.stop - heads.start, width).transpose(1, 0, 2)
        return part

    def fetch(tensor: str, box: tuple[slice, ...]) -> Array:
        if not dram.ready(tensor):
            producer = graph.producer_map.get(tensor, "?")
            raise IllegalPlanError(
                f"tensor '{tensor}' (from op '{producer}') is read before its group ran: "
                "groups must be in topological order and convex (rule 1)"
            )
        part = dram.read_box(index, tensor, box)
        chip.alloc(part.size * ab, tensor, "DMA-in tile")
        return np.asarray(part, np.float32)

    mask_shape = graph.tensors[mask_name].shape if mask_name else ()
    lead = 4 - len(mask_shape)
    g = f.group

    def mask_tile(b: int, heads: slice, rows: slice, cols: slice) -> tuple[Array | None, int]:
        """The mask of a tile as ``[g·rows, cols]`` (query head major) and the elements
        fetched for it."""
        shape = (g, rows.stop - rows.start, cols.stop - cols.start)
        if mask_name is None:
            if const_mask is None:
                return None, 0
            hs = range(heads.start, heads.stop)
            parts = [mask_block(const_mask, b, h, rows, cols) for h in hs]
            full = np.stack([np.broadcast_to(p, shape[1:]) for p in parts if p is not None])
            return full.reshape(-1, shape[2]), 0
        box4 = (slice(b, b + 1), heads, rows, cols)
        box = tuple(slice(0, 1) if s == 1 else box4[lead + i] for i, s in enumerate(mask_shape))
        part = fetch(mask_name, box)
        part4 = part.reshape((1,) * lead + part.shape)[0]
        return np.broadcast_to(part4, shape).reshape(-1, shape[2]), part.size

    for b, kh in np.ndindex(bq, hq // g):
        heads = slice(kh * g, kh * g + g)
        kv: tuple[Array, Array] | None = None
        kvh = slice(kh, kh + 1)
        if resident:
            keys = slice(0, f.keys_used)
            kv = (fetch_heads(k_name, b, kvh, keys, d)[0], fetch_heads(v_name, b, kvh, keys, dv)[0])
        for p0, p1 in f.q_tiles(m):
            rows = slice(p0, p1)
            q = fetch_heads(q_name, b, heads, rows, d).reshape(-1, d)
            positions = np.tile(np.arange(p0, p1), g)
            state_elems = acc * q.shape[0] * (dv + STATE_COLS)
            chip.alloc(state_elems * ab, out, "online-softmax state")
            state = online_init(q.shape[0], dv)
            for c0, c1 in f.kv_tiles(p1, n):
                cols = slice(c0, c1)
                if kv is not None:
                    k_tile, v_tile, streamed = kv[0][cols], kv[1][cols], 0
                else:
                    k_tile = fetch_heads(k_name, b, kvh, cols, d)[0]
                    v_tile = fetch_heads(v_name, b, kvh, cols, dv)[0]
                    streamed = k_tile.size + v_tile.size
                part, fetched_mask = mask_tile(b, heads, rows, cols)
                if f.causal and c1 - 1 > p0:  # a key after some query of the tile: masked
                    bias = causal_bias(positions, c0, c1)
                    part = bias if part is None else part + bias
                score_elems = q.shape[0] * k_tile.shape[0]
                chip.alloc(score_elems * ab, out, "score tile")
                state = online_step(state, q, k_tile, v_tile, scale, part)
                chip.free((score_elems + fetched_mask + streamed) * ab)
            y = online_finish(state, nan_guarded(op)).reshape(g, p1 - p0, dv)
            if out in stored:
                if seq_major:  # [g, rows, dv] -> [rows, g·dv]
                    y = y.transpose(1, 0, 2).reshape(p1 - p0, g * dv)
                dram.write_box(index, out, head_box(b, heads, rows, dv),
                               y.reshape(1, *y.shape).astype(np.float32))  # fmt: skip
            chip.free((state_elems + q.size) * ab)
        if kv is not None:
            chip.free((kv[0].size + kv[1].size) * ab)
    assert chip.used == 0, f"{chip.used} B left allocated"
    return GroupStats(
        read_bytes=dram.read_bytes[index],
        write_bytes=dram.write_bytes[index],
        peak_bytes=chip.peak,
        band_rows=0,
        peak_rows={},
    )
