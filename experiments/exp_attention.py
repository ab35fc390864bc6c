"""Fused attention (P5) on ``sram_edge`` at sequence 512: fused vs barrier, measured vs model.

1. **Fused vs barrier, same run.** Each BERT-base block of the zoo (``bert_block``:
   TorchScript form, ``bert_block_dynamo``: dynamo SDPA form; 12 heads, d = 64, an additive
   padding mask) at sequence 512: the exact optimum's traffic with every attention as the
   exporter wrote it (MatMuls of two activations are OPAQUE barriers, the 12 x 512 x 512 scores
   go to DRAM) and after ``fuse_attention`` (one fused attention group, flash scheme). Whole
   block, and the attention alone (the groups holding the ops from Q·Kᵀ to P·V; fused: the
   fused group).
2. **Measured vs model.** The fused attention alone (Q, K, V, mask ``[1, 1, 1, 512]`` as
   inputs) run by the executor at three buffer sizes: its DMA bytes and measured peak against
   the flash model's, its IO lower bound (``sim/bounds.attention_bounds``) and the variant
   taken (K/V resident or streamed, tile ``m x n``); outputs against the reference.

Writes ``results/exp_attention.csv``, ``exp_attention_2.csv`` and ``exp_attention.md``.
Usage: ``python experiments/exp_attention.py``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
from exp_common import print_rows, write_outputs

from fusiontune.frontend.zoo import build_zoo
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.ops import is_activation_matmul
from fusiontune.planner.attention import find_attention, fuse_attention
from fusiontune.planner.plan import Plan, singleton_plan
from fusiontune.reference import random_inputs, reference_run
from fusiontune.search.optimize import optimal_plan
from fusiontune.sim.bounds import attention_bounds
from fusiontune.sim.cost import group_cost, simulate
from fusiontune.sim.execute import execute
from fusiontune.sim.hardware import load_hardware
from fusiontune.sim.tiling import singleton_tiling

PRESET = "sram_edge"
SEQ = 512
MODELS = ("bert_block", "bert_block_dynamo")
HEADS, HEAD_DIM = 12, 64
BUFFERS = (8 * 1024, 32 * 1024, 128 * 1024)  # below, at and above sram_edge's 32 KiB
TIME_LIMIT_S = 600.0


def _attention_ops(graph: Graph) -> set[str]:
    """The ops from Q·Kᵀ to P·V of every attention chain (the scores path)."""
    out: set[str] = set()
    for chain in find_attention(graph):
        order = sorted(chain.ops, key=graph.op_index.__getitem__)
        first = next(n for n in order if is_activation_matmul(graph, graph.op(n)))
        out |= {n for n in order if graph.op_index[n] >= graph.op_index[first]}
    return out


def _group_traffic(graph: Graph, plan: Plan, ops: set[str], hw: Any) -> int:
    return sum(group_cost(graph, g, hw).traffic_bytes for g in plan.groups if set(g.ops) & ops)


def fused_vs_barrier(model: str) -> dict[str, Any]:
    hw = load_hardware(PRESET)
    barrier = build_zoo(model, input_size=SEQ)
    fused = fuse_attention(barrier)
    row: dict[str, Any] = {"model": model, "seq": SEQ}
    for label, graph in (("barrier", barrier), ("fused", fused)):
        t0 = time.perf_counter()
        result = optimal_plan(graph, hw, time_limit_s=TIME_LIMIT_S)
        assert result.plan is not None, (model, label, result.status)
        m = simulate(graph, result.plan, hw)
        core = _attention_ops(graph) if label == "barrier" else {
            op.name for op in graph.ops if op.name.endswith(".attention")
        }  # fmt: skip
        row[f"{label}_traffic_bytes"] = m.traffic_bytes
        row[f"{label}_attention_bytes"] = _group_traffic(graph, result.plan, core, hw)
        row[f"{label}_proven"] = result.proven
        row[f"{label}_s"] = round(time.perf_counter() - t0, 2)
    row["ratio_block"] = row["fused_traffic_bytes"] / row["barrier_traffic_bytes"]
    row["ratio_attention"] = row["fused_attention_bytes"] / row["barrier_attention_bytes"]
    return row


def attention_alone() -> Graph:
    b = GraphBuilder("attention512", seed=0)
    shape = (1, HEADS, SEQ, HEAD_DIM)
    q, k, v = (b.input(n, shape) for n in ("q", "k", "v"))
    mask = b.input("mask", (1, 1, 1, SEQ))
    kt = b.op("Transpose", [k], {"perm": (0, 1, 3, 2)}, name="kt")
    s = b.op("MatMul", [q, kt], name="scores")
    s = b.op("Mul", [s, b.const("scale_factor", np.float32(HEAD_DIM**-0.5))], name="scale")
    p = b.op("Softmax", [b.op("Add", [s, mask], name="mask_add")], {"axis": -1}, name="softmax")
    b.op("MatMul", [p, v], name="context")
    return fuse_attention(b.build())


def measured_vs_model() -> list[dict[str, Any]]:
    graph = attention_alone()
    plan = singleton_plan(graph)
    (group,) = plan.groups
    inputs = random_inputs(graph, seed=1)
    want = reference_run(graph, inputs)["context"]
    rows = []
    for buffer in BUFFERS:
        hw = dataclasses.replace(load_hardware(PRESET), buffer_bytes=buffer)
        tiling = singleton_tiling(graph, group, hw)
        assert tiling is not None
        (bound,) = attention_bounds(graph, hw)
        t0 = time.perf_counter()
        run = execute(graph, plan, inputs, hw=hw)
        err = float(np.abs(run.outputs["context"] - want).max() / np.abs(want).max())
        m, n, resident = tiling.tile
        rows.append({
            "buffer_bytes": buffer,
            "variant": "resident" if resident else "streamed",
            "tile_m": m,
            "tile_n": n,
            "model_read_bytes": tiling.read_elems * hw.act_bytes,
            "measured_read_bytes": run.dram_read_bytes,
            "model_write_bytes": tiling.write_elems * hw.act_bytes,
            "measured_write_bytes": run.dram_write_bytes,
            "model_peak_bytes": tiling.peak_elems * hw.act_bytes,
            "measured_peak_bytes": run.group_peak_buffer_bytes[0],
            "compulsory_bytes": bound["compulsory_bytes"],
            "bound_bytes": bound["bound_bytes"],
            "fused_over_bound": bound["fused_over_bound"],
            "max_rel_err": err,
            "run_s": round(time.perf_counter() - t0, 2),
        })  # fmt: skip
    return rows


def main() -> None:
    first = [fused_vs_barrier(m) for m in MODELS]
    print_rows("fused vs barrier", first)
    second = measured_vs_model()
    print_rows("measured vs model", second)
    notes = [
        f"Preset `{PRESET}` (32 KiB buffer, 8-bit activations, 16-bit accumulators). Both "
        "optima come from the same run of `optimal_plan` (proven); `ratio_block` is the whole "
        "block's traffic fused / barrier, `ratio_attention` that of the attention groups "
        "alone (barrier: every group holding an op from Q·Kᵀ to P·V; fused: the fused group).",
        "The rest of the block (Q/K/V/O projections, FFN and their weights, which `sram_edge` "
        "loads) is the same in both plans, so `ratio_block` cannot reach 0.25 on this block "
        "whatever the attention costs: its non-attention part alone exceeds a quarter of the "
        "barrier optimum.",
        "Measured = the executor's DMA counters and buffer peak for the fused attention run "
        "by its flash scheme; model = `sim/attention.py` (the same numbers `simulate` and the "
        "optimizer use). The bound is max(compulsory, Hong–Kung segment bound); at 8 and 32 "
        "KiB K and V (64 KiB a head) stream past each Q tile, and the accumulators (16-bit) "
        "limit the Q tile.",
    ]
    write_outputs(
        "attention",
        "Fused attention (P5) at sequence 512 on sram_edge",
        [
            ("Fused vs barrier (exact optimum, same run)", first),
            ("Measured vs model, fused attention alone", second),
        ],
        notes,
    )


if __name__ == "__main__":
    main()
