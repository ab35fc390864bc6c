"""Fused attention (P5) on ``sram_edge`` at sequence 512: fused vs barrier, measured vs model.

1. **Fused vs barrier, same run.** Each BERT-base block of the zoo (``bert_block``:
   TorchScript form, ``bert_block_dynamo``: dynamo SDPA form; 12 heads, d = 64, an additive
   padding mask) at sequence 512: the exact optimum's traffic with every attention as the
   exporter wrote it (MatMuls of two activations are OPAQUE barriers, the 12 x 512 x 512 scores
   go to DRAM) and after ``fuse_attention`` (one fused attention group, flash scheme). Whole
   block, and the attention alone (the groups holding the ops from Q·Kᵀ to P·V; fused: the
   fused group).
   Also the zoo decoder ``llama_tiny`` (2 layers, 4 query heads over 2 K/V heads, RoPE,
   a constant causal mask, which P5 turns into ``is_causal``) at sequence 512 with a 128 KiB
   buffer (at 32 KiB its RoPE ``Split`` alone does not fit).
2. **Where the fused block's bytes go.** The groups of the fused ``bert_block`` optimum, each
   with its weight and activation bytes: what a join of the attention with its projection
   groups could still remove (``docs/attention.md`` §5).
3. **Measured vs model.** The fused attention alone (Q, K, V as inputs) run by the executor
   at three buffer sizes, in two forms: BERT's (12 heads, mask ``[1, 1, 1, 512]``) and a
   decoder's (12 query heads over 4 K/V heads, causal): its DMA bytes and measured peak
   against the flash model's, its IO lower bound (``sim/bounds.attention_bounds``) and the
   variant taken (K/V resident or streamed, tile ``m x n``); outputs against the reference.

Writes ``results/exp_attention.csv``, ``exp_attention_2.csv`` to ``exp_attention_4.csv`` and
``exp_attention.md``.
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
from fusiontune.sim.bounds import attention_bounds, capacity_bound
from fusiontune.sim.cost import group_cost, lower_bound, simulate
from fusiontune.sim.execute import execute
from fusiontune.sim.hardware import load_hardware
from fusiontune.sim.tiling import singleton_tiling

PRESET = "sram_edge"
SEQ = 512
MODELS = ("bert_block", "bert_block_dynamo")
DECODER, DECODER_BUFFER = "llama_tiny", 128 * 1024
HEADS, HEAD_DIM = 12, 64
KV_HEADS = 4  # the decoder form: 12 query heads over 4 K/V heads (GQA), causal
BUFFERS = (8 * 1024, 32 * 1024, 128 * 1024)  # below, at and above sram_edge's 32 KiB
TIME_LIMIT_S = 600.0
GOAL = 0.25  # issue 22: the fused optimum <= 0.25x the barrier optimum
SWEEP = ((PRESET, (512, 1024, 2048)), ("isaac_reram_flat", (512, 1024, 2048)))


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


PLANS: dict[str, tuple[Graph, Plan]] = {}  # the fused optima, for the breakdown


def fused_vs_barrier(
    model: str, buffer: int | None = None, seq: int = SEQ, preset: str = PRESET, four: bool = True
) -> dict[str, Any]:
    hw = load_hardware(preset)
    if buffer is not None:
        hw = dataclasses.replace(hw, buffer_bytes=buffer)
    barrier = build_zoo(model, input_size=seq)
    fused = fuse_attention(barrier)
    four_d = fuse_attention(barrier, absorb_heads=False)
    row: dict[str, Any] = {"model": model, "seq": seq, "buffer_bytes": hw.buffer_bytes}
    if preset != PRESET:
        row = {"model": model, "preset": preset, **row}
    # lower bounds: of every schedule (graph inputs and outputs once, every weight byte once:
    # sim.cost.lower_bound) and of every plan of the group model over the fused graph (the
    # fused attention a group of its own: sim.bounds.capacity_bound)
    any_bound = lower_bound(barrier, hw)
    assert any_bound == lower_bound(fused, hw), model
    row["bound_any_bytes"] = any_bound
    row["bound_plans_bytes"] = capacity_bound(fused, hw)
    labels = (("barrier", barrier), ("fused4d", four_d), ("fused", fused))
    for label, graph in labels if four else (labels[0], labels[2]):
        t0 = time.perf_counter()
        result = optimal_plan(graph, hw, time_limit_s=TIME_LIMIT_S)
        assert result.plan is not None, (model, label, result.status)
        m = simulate(graph, result.plan, hw)
        core = _attention_ops(graph) if label == "barrier" else {
            op.name for op in graph.ops if op.name.endswith(".attention")
        }  # fmt: skip
        row[f"{label}_traffic_bytes"] = m.traffic_bytes
        if label != "fused4d":
            row[f"{label}_attention_bytes"] = _group_traffic(graph, result.plan, core, hw)
        row[f"{label}_proven"] = result.proven
        if label != "fused4d":
            row[f"{label}_s"] = round(time.perf_counter() - t0, 2)
        row["weight_bytes"] = m.weight_load_bytes  # the same in both plans
        if label == "fused" and four:
            PLANS[model] = (graph, result.plan)
    assert row["bound_plans_bytes"] <= row["fused_traffic_bytes"], row
    assert any_bound <= row["bound_plans_bytes"], row
    row["ratio_block"] = row["fused_traffic_bytes"] / row["barrier_traffic_bytes"]
    if four:
        row["ratio_block_4d"] = row["fused4d_traffic_bytes"] / row["barrier_traffic_bytes"]
    row["ratio_bound_any"] = any_bound / row["barrier_traffic_bytes"]
    row["ratio_bound_plans"] = row["bound_plans_bytes"] / row["barrier_traffic_bytes"]
    row["ratio_attention"] = row["fused_attention_bytes"] / row["barrier_attention_bytes"]
    rest = row["barrier_traffic_bytes"] - row["barrier_attention_bytes"]
    row["rest_over_barrier"] = rest / row["barrier_traffic_bytes"]
    row["weights_over_barrier"] = row["weight_bytes"] / row["barrier_traffic_bytes"]
    return row


def sweep() -> list[dict[str, Any]]:
    """``bert_block`` at the sweep's chips and sequence lengths: where the whole block's
    fused optimum is within :data:`GOAL` of the barrier optimum (the scores grow as N², the
    weights stay)."""
    rows = []
    for preset, seqs in SWEEP:
        for seq in seqs:
            r = fused_vs_barrier(MODELS[0], seq=seq, preset=preset, four=False)
            rows.append({
                "preset": preset,
                "seq": seq,
                "barrier_traffic_bytes": r["barrier_traffic_bytes"],
                "fused_traffic_bytes": r["fused_traffic_bytes"],
                "bound_any_bytes": r["bound_any_bytes"],
                "bound_plans_bytes": r["bound_plans_bytes"],
                "weight_bytes": r["weight_bytes"],
                "ratio_block": r["ratio_block"],
                "ratio_attention": r["ratio_attention"],
                "ratio_bound_any": r["ratio_bound_any"],
                "ratio_bound_plans": r["ratio_bound_plans"],
                "proven": r["barrier_proven"] and r["fused_proven"],
                "goal_met": r["ratio_block"] <= GOAL,
            })  # fmt: skip
    return rows


def goal_table(bert: dict[str, Any], removable: int) -> list[dict[str, Any]]:
    """``bert_block`` at :data:`SEQ` on :data:`PRESET`: the two proven optima, an ideal join
    (an estimate) and the two lower bounds, each over the barrier optimum."""
    base = bert["barrier_traffic_bytes"]
    rows = [
        ("barrier optimum (attention as exported)", base, "proven optimum"),
        ("fused optimum (P5)", bert["fused_traffic_bytes"], "proven optimum"),
        ("fused + ideal join of Q and the output", bert["fused_traffic_bytes"] - removable,
         "estimate (docs/attention.md §5), not built"),
        ("bound: every plan of the group model", bert["bound_plans_bytes"],
         "lower bound (sim.bounds.capacity_bound of the fused graph)"),
        ("bound: every schedule", bert["bound_any_bytes"],
         "lower bound (graph inputs, outputs and weights once: sim.cost.lower_bound)"),
        (f"goal ({GOAL}x)", int(GOAL * base), "issue 22"),
    ]  # fmt: skip
    return [
        {"row": name, "traffic_bytes": b, "over_barrier": b / base, "kind": kind}
        for name, b, kind in rows
    ]


def breakdown(model: str) -> list[dict[str, Any]]:
    """The groups of the fused optimum of ``model`` with their weight and activation bytes."""
    graph, plan = PLANS[model]
    hw = load_hardware(PRESET)
    rows = []
    for g in plan.groups:
        c = group_cost(graph, g, hw)
        kinds = {graph.op(n).op_class.value for n in g.ops}
        rows.append({
            "first_op": g.ops[0],
            "last_op": g.ops[-1],
            "ops": len(g.ops),
            "mode": g.mode.value,
            "classes": "+".join(sorted(kinds)),
            "weight_bytes": c.weight_load_bytes,
            "act_read_bytes": c.act_read_bytes,
            "act_write_bytes": c.act_write_bytes,
            "traffic_bytes": c.traffic_bytes,
        })  # fmt: skip
    return rows


def attention_alone(decoder: bool = False) -> Graph:
    """BERT's attention (12 heads, a padding mask input) or a decoder's (12 query heads over
    4 K/V heads by repeat_kv, a constant causal mask), fused."""
    b = GraphBuilder("attention512", seed=0)
    shape = (1, HEADS, SEQ, HEAD_DIM)
    q = b.input("q", shape)
    kv_shape = (1, KV_HEADS, SEQ, HEAD_DIM) if decoder else shape
    k, v = b.input("k", kv_shape), b.input("v", kv_shape)
    if decoder:  # HF's repeat_kv: view, Expand, view
        group = HEADS // KV_HEADS

        def repeat(t: str) -> str:
            t = b.reshape(t, (1, KV_HEADS, 1, SEQ, HEAD_DIM), name=f"{t}.unsqueeze")
            to = b.const(f"{t}.shape", np.asarray((1, KV_HEADS, group, SEQ, HEAD_DIM), np.int64))
            return b.reshape(b.op("Expand", [t, to], name=f"{t}.expand"), shape, name=f"{t}.rep")

        k, v = repeat(k), repeat(v)
    kt = b.op("Transpose", [k], {"perm": (0, 1, 3, 2)}, name="kt")
    s = b.op("MatMul", [q, kt], name="scores")
    s = b.op("Mul", [s, b.const("scale_factor", np.float32(HEAD_DIM**-0.5))], name="scale")
    if decoder:
        causal = np.triu(np.full((SEQ, SEQ), np.finfo(np.float32).min, np.float32), k=1)
        mask = b.const("causal", causal)
    else:
        mask = b.input("mask", (1, 1, 1, SEQ))
    p = b.op("Softmax", [b.op("Add", [s, mask], name="mask_add")], {"axis": -1}, name="softmax")
    b.op("MatMul", [p, v], name="context")
    return fuse_attention(b.build())


def measured_vs_model() -> list[dict[str, Any]]:
    rows = []
    for decoder in (False, True):
        rows += _measured(decoder)
    return rows


def _measured(decoder: bool) -> list[dict[str, Any]]:
    graph = attention_alone(decoder)
    plan = singleton_plan(graph)
    (group,) = plan.groups
    (op,) = (graph.op(n) for n in group.ops)
    assert bool(op.attrs.get("is_causal")) == decoder, op.attrs
    inputs = random_inputs(graph, seed=1)
    want = reference_run(graph, inputs)["context"]
    rows = []
    form = f"GQA {HEADS}/{KV_HEADS}, causal" if decoder else f"MHA {HEADS}, padding mask"
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
            "form": form,
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
    first.append(fused_vs_barrier(DECODER, DECODER_BUFFER))
    print_rows("fused vs barrier", first)
    parts = breakdown(MODELS[0])
    print_rows("fused bert_block by group", parts)
    third = measured_vs_model()
    print_rows("measured vs model", third)
    fourth = sweep()
    print_rows("where the goal is met", fourth)
    bert = first[0]
    q_bytes = next(p["act_write_bytes"] for p in parts if p["first_op"] == "attn.q")
    removable = 4 * q_bytes  # Q and Y, each written once and read once
    rest_fused = bert["fused_traffic_bytes"] - bert["fused_attention_bytes"]
    fused_graph, _ = PLANS[MODELS[0]]
    (att,) = attention_bounds(fused_graph, load_hardware(PRESET))
    kv_rereads = bert["fused_attention_bytes"] - att["compulsory_bytes"]
    ffn_bytes = next(p["act_write_bytes"] for p in parts if p["first_op"] == "ffn.fc1")
    fifth = goal_table(bert, removable)
    notes = [
        f"Preset `{PRESET}` (32 KiB buffer, 8-bit activations, 16-bit accumulators). Both "
        "optima come from the same run of `optimal_plan` (proven); `ratio_block` is the whole "
        "block's traffic fused / barrier, `ratio_attention` that of the attention groups "
        "alone (barrier: every group holding an op of an attention chain from Q·Kᵀ on; "
        "fused: the fused group).",
        "`fused4d`: the attention fused with the head split and merge left as ops of their "
        "own (`fuse_attention(graph, absorb_heads=False)`; the form of the first version of "
        "P5): their Reshape/Transpose are singletons in its optimum, each writing and reading "
        "the whole 786,432 B tensor (the row model keeps a view that splits the heads, and a "
        "Transpose of the sequence axis, as whole tensors, larger than 32 KiB). `fused`: P5 "
        "absorbs them (the fused op reads Q, K, V from the projections' `[B, N, H·d]` and "
        "writes its output there for the O projection): "
        f"`ratio_block` {bert['ratio_block_4d']:.3f} -> {bert['ratio_block']:.3f}. The "
        "barrier's attention groups count the ops from Q·Kᵀ to the head merge.",
        f"**The {GOAL}x goal at sequence {SEQ} on `{PRESET}`.** No plan of the group model "
        f"reaches it, and a lower bound proves it: the fused optimum is proven optimal "
        f"({bert['ratio_block']:.3f}x; dynamo {first[1]['ratio_block']:.3f}x), and "
        "`bound_plans` (every plan of the fused graph in the group model: "
        f"`sim.bounds.capacity_bound`) is {bert['bound_plans_bytes']:,} B = "
        f"{bert['ratio_bound_plans']:.3f}x the barrier optimum, above {GOAL}x. It charges "
        "what no plan avoids: Q, K, V and the attention output written and read once (the "
        "fused attention is a group of its own); K and V re-read by every Q tile "
        f"({kv_rereads:,} B in the optimum: the 16-bit accumulators of a Q tile fill the "
        "32 KiB buffer, `sim/attention.py`); and the FFN's 4x-wide intermediate written and "
        f"read back ({2 * ffn_bytes:,} B): fc1 -> GELU -> fc2 is no P3 merge (rule 2), so a "
        "group holding both needs the crossbars of both, more than the chip's. The proven "
        f"optimum is {bert['ratio_block'] / bert['ratio_bound_plans']:.3f}x `bound_plans`; the "
        "gap is the block input read by the Q, K and V projections separately (the bound "
        "allows one read). Outside the group model, `bound_any` (graph inputs and outputs "
        "once and every weight byte once, `sim.cost.lower_bound`) is "
        f"{bert['bound_any_bytes']:,} B = {bert['ratio_bound_any']:.3f}x (weights "
        f"{bert['weights_over_barrier']:.3f}x): a schedule that kept the FFN intermediate on "
        "chip would reprogram the crossbars per row band of it, far more weight bytes than "
        "the fusion saves (docs/attention.md §5). The attention's IO bound adds nothing at "
        "this size (its Hong–Kung term is below its compulsory bytes, third table). "
        f"The fused attention groups alone are {bert['ratio_attention']:.3f}x the barrier's. "
        f"The part outside the attention is {rest_fused:,} B = "
        f"{rest_fused / bert['barrier_traffic_bytes']:.3f}x the barrier optimum in the fused "
        "plan (second table).",
        "Where the goal is met (fourth table, `bert_block`, the same run): the scores grow "
        "as N² while the weights stay, so the fused/barrier ratio falls with the sequence: "
        + "; ".join(
            f"`{r['preset']}` N = {r['seq']}: {r['ratio_block']:.3f}x"
            + (" (met)" if r["goal_met"] else "")
            for r in fourth
        )
        + ". On `isaac_reram_flat` the weights stay in the crossbars (0 B), so the activation "
        "traffic outside the attention weighs more at short sequences.",
        "A join of the attention with its projection groups in one stream is not built "
        "(`docs/attention.md` §5). At most it could remove the round trips of Q and of the "
        f"attention's output ({removable:,} B: each written once and read back once), "
        f"leaving {bert['fused_traffic_bytes'] - removable:,} B = "
        f"{(bert['fused_traffic_bytes'] - removable) / bert['barrier_traffic_bytes']:.3f}x "
        "the barrier optimum, still above 0.25x.",
        f"`{DECODER}` (the zoo decoder: 4 query heads over 2 K/V heads, RoPE, a constant "
        "causal mask) at sequence 512 with a 128 KiB buffer: every attention fused with "
        "`is_causal` and grouped K/V heads; at 32 KiB neither plan exists (its RoPE `Split` "
        "needs its tensor whole).",
        "Measured = the executor's DMA counters and buffer peak for the fused attention run "
        "by its flash scheme; model = `sim/attention.py` (the same numbers `simulate` and the "
        "optimizer use). The bound is max(compulsory, Hong–Kung segment bound); at 8 and 32 "
        "KiB K and V (64 KiB a head) stream past each Q tile, and the accumulators (16-bit) "
        "limit the Q tile.",
        f"Decoder form (GQA {HEADS}/{KV_HEADS}, causal): a Q tile holds its positions of the "
        f"{HEADS // KV_HEADS} query heads that share a K/V head, so each K/V tile is fetched "
        "once for them; the K/V tiles wholly after a Q tile's last query are skipped (neither "
        "fetched nor computed), and the bound counts the scores a query sees "
        "(N(N+1)/2 a head).",
    ]
    write_outputs(
        "attention",
        "Fused attention (P5) at sequence 512 on sram_edge",
        [
            ("Fused vs barrier (exact optimum, same run)", first),
            ("The fused bert_block optimum by group", parts),
            ("Measured vs model, fused attention alone", third),
            (f"Where the {GOAL}x goal is met (bert_block, exact optima, same run)", fourth),
            (f"The {GOAL}x goal at sequence {SEQ} on {PRESET}: plans and lower bounds", fifth),
        ],
        notes,
    )


if __name__ == "__main__":
    main()
