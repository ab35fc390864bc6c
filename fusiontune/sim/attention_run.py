"""Run a fused attention by its flash scheme inside the bounded buffer; count every byte.

The tiles are those :mod:`fusiontune.sim.attention` plans (its docstring): per head, Q tiles
of ``m`` rows, K/V tiles of ``n`` rows (fetched once per head when resident), the online
softmax of ``ops/attention.py`` (running max, running sum, rescaled accumulator) folding each
K/V tile into the Q tile's state. Every tile fetched from DRAM is allocated on the
:class:`~fusiontune.sim.runner.OnChip` buffer at its real size and counted by the DMA
(:class:`~fusiontune.sim.runner.Dram`); the score tile, the mask box and the state are
allocated as they are made. ``tests/test_attention.py`` checks the measured bytes and peak
against the model's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fusiontune.errors import IllegalPlanError
from fusiontune.ir.graph import Graph
from fusiontune.ops.attention import mask_block, online_finish, online_init, online_step, scale_of
from fusiontune.sim.attention import STATE_COLS
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
    bq, hq, nq, d = graph.tensors[q_name].shape
    nk, dv = graph.tensors[v_name].shape[2:]
    scale = scale_of(op, d)

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

    def mask_tile(b: int, h: int, rows: slice, cols: slice) -> Array | None:
        if mask_name is None:
            return mask_block(const_mask, b, h, rows, cols)
        full = (slice(b, b + 1), slice(h, h + 1), rows, cols)
        box = tuple(slice(0, 1) if s == 1 else full[lead + i] for i, s in enumerate(mask_shape))
        part = fetch(mask_name, box)
        return part.reshape((1,) * lead + part.shape)[0, 0]

    for b, h in np.ndindex(bq, hq):
        kv: tuple[Array, Array] | None = None
        if resident:
            head = (slice(b, b + 1), slice(h, h + 1), slice(None), slice(None))
            kv = (fetch(k_name, head)[0, 0], fetch(v_name, head)[0, 0])
        for r0 in range(0, nq, m):
            rows = slice(r0, min(r0 + m, nq))
            q = fetch(q_name, (slice(b, b + 1), slice(h, h + 1), rows, slice(None)))[0, 0]
            state_elems = acc * q.shape[0] * (dv + STATE_COLS)
            chip.alloc(state_elems * ab, out, "online-softmax state")
            state = online_init(q.shape[0], dv)
            for c0 in range(0, nk, n):
                cols = slice(c0, min(c0 + n, nk))
                if kv is not None:
                    k_tile, v_tile, streamed = kv[0][cols], kv[1][cols], 0
                else:
                    head = (slice(b, b + 1), slice(h, h + 1), cols, slice(None))
                    k_tile, v_tile = fetch(k_name, head)[0, 0], fetch(v_name, head)[0, 0]
                    streamed = k_tile.size + v_tile.size
                part = mask_tile(b, h, rows, cols)
                fetched_mask = 0 if part is None or mask_name is None else part.size
                score_elems = q.shape[0] * k_tile.shape[0]
                chip.alloc(score_elems * ab, out, "score tile")
                state = online_step(state, q, k_tile, v_tile, scale, part)
                chip.free((score_elems + fetched_mask + streamed) * ab)
            y = online_finish(state)
            if out in stored:
                dram.write_box(index, out, (slice(b, b + 1), slice(h, h + 1), rows, slice(None)),
                               y.reshape(1, 1, *y.shape).astype(np.float32))  # fmt: skip
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
