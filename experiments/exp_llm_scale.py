"""Scale: Llama-style decoders of 2 to 64 layers through the planner and the exact optimizer.

Each model is the zoo's Llama builder (``frontend/zoo_llm.py``; ``llama_tiny``'s widths:
hidden 64, 4 heads over 2 KV heads, SwiGLU 128; RMSNorm as one STATS op) in two phases:
``prefill`` (16 tokens, causal mask) and ``decode`` (one token against a KV cache of 16, the
caches graph inputs and outputs). Per model, phase and attention form (``barrier``: the
graph as built; ``fused``: after ``ft.fuse_attention``) and per hardware:

- ``ops``, ``build_s`` (the builder with placeholder weights, as ``zoo_summary`` builds);
- ``count_s``: ``count_within`` at the CLI's default budget (what ``fusiontune plans
  --count`` spends), exact or a proven lower bound (``plans``: digits of the count);
- ``greedy``, ``unfused``, ``optimum``: DRAM traffic of ``greedy_plan(hw)``, the unfused
  plan and ``optimal_plan`` (stopped after ``TIME_LIMIT_S`` with a proven gap); ``opt_s``,
  ``proven``, ``gap``; the ratios ``greedy/opt`` and ``unfused/opt`` (same run);
- ``weight_B``, ``act_B``: the optimum's traffic split by ``sim.cost.data_moved``.

Hardware: ``sram_edge_stream`` (``sram_edge`` with ``weight_reload: true``: weights are
programmed from DRAM per inference, a matrix over the crossbars re-loaded by tiles) and the
default preset (``HardwareConfig()``, ISAAC-like, weights resident).

Also loads ``experiments/.sweep_cache/llama32_dynamo.onnx`` when present (a 32-layer
``transformers.LlamaModel`` exported by dynamo: ``experiments/make_llama_dynamo.py`` in the
torch environment) and runs the same measurements on it.

Rows accumulate in ``results/exp_llm_scale.json`` (re-running a subset replaces its rows),
rendered to ``results/exp_llm_scale.md`` and ``.csv``. Usage::

    python experiments/exp_llm_scale.py [--layers 2 8 32 64] [--phase prefill decode]
        [--hw sram_edge_stream default] [--attention barrier fused] [--dynamo] [--render]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import time
from pathlib import Path
from typing import Any

from exp_common import RESULTS_DIR, print_rows, write_outputs

import fusiontune as ft
from fusiontune.frontend.onnx_import import load_onnx
from fusiontune.frontend.zoo import _ZooBuilder
from fusiontune.frontend.zoo_llm import (
    TINY_FFN,
    TINY_HEADS,
    TINY_HIDDEN,
    TINY_KV_HEADS,
    TINY_SEQ,
    build_llama_decode,
    build_llama_prefill,
)
from fusiontune.ir.graph import Graph
from fusiontune.planner.baselines import unfused_plan
from fusiontune.planner.counting import DEFAULT_COUNT_BUDGET, count_within
from fusiontune.planner.groups import PlannerConfig
from fusiontune.search.optimize import optimal_plan
from fusiontune.sim.cost import clear_cache, data_moved, simulate
from fusiontune.sim.greedy import greedy_plan
from fusiontune.sim.hardware import HardwareConfig, load_hardware

TIME_LIMIT_S = 600.0  # the goal: proven or <= 1 % gap within 10 minutes
LAYERS = (2, 8, 32, 64)
PHASES = ("prefill", "decode")
ATTENTION = ("barrier", "fused")
HARDWARE = ("sram_edge_stream", "default")
STORE = RESULTS_DIR / "exp_llm_scale.json"
DYNAMO_FILE = Path(__file__).resolve().parent / ".sweep_cache" / "llama32_dynamo.onnx"


def hardware(name: str) -> HardwareConfig:
    if name == "sram_edge_stream":
        return load_hardware("sram_edge", {"weight_reload": True}).replace(name=name)
    return HardwareConfig()


def build(layers: int, phase: str, rms_op: bool = True) -> tuple[Graph, float]:
    start = time.perf_counter()
    b = _ZooBuilder(f"llama{layers}_{phase}", placeholder=True)
    sizes = (TINY_HIDDEN, TINY_HEADS, TINY_KV_HEADS, TINY_SEQ, TINY_FFN)
    if phase == "prefill":
        build_llama_prefill(b, layers, *sizes, rms_op=rms_op)
    else:
        build_llama_decode(b, layers, *sizes, rms_op=rms_op)
    graph = b.build()
    return graph, time.perf_counter() - start


def measure(
    graph: Graph,
    base: dict[str, Any],
    attention: str,
    hw_names: list[str],
    time_limit_s: float = TIME_LIMIT_S,
) -> list[dict[str, Any]]:
    """One row per hardware for ``graph`` (attention as a barrier or fused)."""
    if attention == "fused":
        start = time.perf_counter()
        graph = ft.fuse_attention(graph)
        base = {**base, "fuse_s": round(time.perf_counter() - start, 2)}
    cfg = PlannerConfig()
    start, cpu = time.perf_counter(), time.process_time()
    count = count_within(graph, cfg, DEFAULT_COUNT_BUDGET)
    count_s, count_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    plans = f"{len(str(count.value))} digits" + ("" if count.exact else " (lower bound)")
    head = {
        **base,
        "attention": attention,
        "ops": len(graph.ops),
        "attn_ops": sum(op.op_type == "Attention" for op in graph.ops),
        "count_s": round(count_s, 2),
        "count_cpu_s": round(count_cpu_s, 2),
        "count_exact": count.exact,
        "plans": plans,
    }
    rows = []
    for hw_name in hw_names:
        hw = hardware(hw_name)
        clear_cache()
        start = time.perf_counter()
        greedy = simulate(graph, greedy_plan(graph, hw=hw), hw)
        greedy_s = time.perf_counter() - start
        unfused = simulate(graph, unfused_plan(graph), hw)
        start, cpu = time.perf_counter(), time.process_time()
        result = optimal_plan(graph, hw, time_limit_s=time_limit_s)
        opt_s, opt_cpu_s = time.perf_counter() - start, time.process_time() - cpu
        row: dict[str, Any] = {**head, "hw": hw_name, "greedy_s": round(greedy_s, 2),
                               "opt_cpu_s": round(opt_cpu_s, 1),
                               "limit_s": time_limit_s}  # fmt: skip
        if result.plan is None:
            row.update(status=result.status, opt_s=round(opt_s, 1))
            rows.append(row)
            continue
        opt = simulate(graph, result.plan, hw)
        moved = data_moved(opt.as_dict())
        row.update(
            greedy=greedy.traffic_bytes,
            greedy_feasible=greedy.feasible,
            unfused=unfused.traffic_bytes,
            optimum=opt.traffic_bytes,
            opt_s=round(opt_s, 1),
            proven=result.proven,
            gap=result.gap,
            status=result.status,
            greedy_over_opt=greedy.traffic_bytes / opt.traffic_bytes,
            unfused_over_opt=unfused.traffic_bytes / opt.traffic_bytes,
            weight_B=moved["weight_bytes"],
            act_B=moved["activation_bytes"],
            weight_share=moved["weight_share"],
            groups=opt.n_groups,
        )
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["model"], row["phase"], row["attention"], row["hw"])


def store(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge ``rows`` into the stored rows (same key: replaced) and save them (under a lock:
    several runs of the script may share the file)."""
    STORE.parent.mkdir(parents=True, exist_ok=True)
    with open(STORE.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        old = json.loads(STORE.read_text()) if STORE.exists() else []
        new_keys = {_key(r) for r in rows}
        merged = [r for r in old if _key(r) not in new_keys] + rows
        order = {"prefill": 0, "decode": 1}
        merged.sort(key=lambda r: (r["model"].startswith("dynamo"), r.get("layers", 0),
                                   order.get(r["phase"], 2), r["attention"], r["hw"]))  # fmt: skip
        STORE.write_text(json.dumps(merged, indent=1) + "\n")
    return merged


COLUMNS = (
    "model", "phase", "attention", "hw", "ops", "attn_ops", "build_s", "count_s", "count_cpu_s",
    "count_exact", "plans", "greedy_s", "opt_s", "opt_cpu_s", "proven", "gap", "status",
    "limit_s", "greedy_over_opt", "unfused_over_opt", "optimum", "weight_B", "act_B",
    "weight_share", "groups",
)  # fmt: skip


def growth(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """How the optimizer's time grows with layers: zoo rows, per phase, attention and hw."""
    out = []
    for r in rows:
        if not r["model"].startswith("zoo") or r["model"].endswith("_rms7"):
            continue
        out.append({
            "phase": r["phase"], "attention": r["attention"], "hw": r["hw"],
            "layers": r["layers"], "ops": r["ops"], "opt_cpu_s": r.get("opt_cpu_s"),
            "cpu_s_per_op": (r["opt_cpu_s"] / r["ops"]) if r.get("opt_cpu_s") else None,
            "opt_s": r.get("opt_s"), "proven": r.get("proven"), "gap": r.get("gap"),
        })  # fmt: skip
    out.sort(key=lambda g: (g["phase"] != "prefill", g["attention"], g["hw"], g["layers"]))
    return out


def fused_vs_barrier(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The optimum with fused attention over the optimum with attention as barriers."""
    by_key = {_key(r): r for r in rows}
    out = []
    for r in rows:
        if r["attention"] != "barrier" or not r.get("optimum"):
            continue
        f = by_key.get((r["model"], r["phase"], "fused", r["hw"]))
        if f is None or not f.get("optimum"):
            continue
        out.append({
            "model": r["model"], "phase": r["phase"], "hw": r["hw"],
            "barrier_opt": r["optimum"], "fused_opt": f["optimum"],
            "fused_over_barrier": f["optimum"] / r["optimum"],
            "act_fused_over_barrier": f["act_B"] / r["act_B"] if r.get("act_B") else None,
            "both_proven": bool(r.get("proven") and f.get("proven")),
        })  # fmt: skip
    return out


def render(rows: list[dict[str, Any]]) -> None:
    table = [{c: r.get(c) for c in COLUMNS} for r in rows]
    notes = [
        "Zoo builder widths: hidden 64, 4 heads over 2 KV heads (GQA), SwiGLU 128, RMSNorm as "
        "one STATS op; prefill 16 tokens, decode 1 token against a 16-token KV cache. "
        "Placeholder weights (the costs depend on shapes only). `zoo32_rms7`: the same "
        "decoder with each RMSNorm decomposed into seven ops (Pow, ReduceMean, Add, Sqrt, "
        "Reciprocal, Mul, Mul: HF's TorchScript form, what a graph holds before the "
        "importer collapses it), for the issue's >= 1,500-op size.",
        "`sram_edge_stream`: the `sram_edge` preset with `weight_reload: true` (weights "
        "programmed from DRAM per inference); `default`: `HardwareConfig()` (ISAAC-like, "
        "weights resident in the crossbars, so no weight bytes).",
        "`opt_s`: `optimal_plan(graph, hw, time_limit_s=limit_s)` (wall clock; "
        f"{TIME_LIMIT_S:.0f} s unless the row says otherwise); `proven` true "
        "means the optimum over all legal partitions is certified (gap 0). `count_s`: "
        f"`count_within` at the CLI's default budget ({DEFAULT_COUNT_BUDGET:,} units).",
        "Ratios are of DRAM traffic in bytes, measured in the same run: greedy / optimum and "
        "unfused / optimum. `weight_B` + `act_B` = `optimum` (`sim.cost.data_moved`).",
        "`fused`: after `ft.fuse_attention` (P5); `attn_ops` counts the fused attentions.",
        "`dynamo32`: `transformers.LlamaModel` (32 layers, the same widths) exported by "
        "`torch.onnx.export(dynamo=True)` (`experiments/make_llama_dynamo.py`; not committed, "
        "8 MB) and loaded by `load_onnx` (`build_s`: the load). Its 65 decomposed RMSNorms "
        "import as RMSNormalization ops.",
        "Findings (run of 2026-12-03 17:00-17:45, after the NaN-guard merge and the head "
        "split moved past RoPE): at 32 layers every optimum is proven on both presets: zoo "
        "builder with attention as barriers (1,473 ops prefill, 1,505 decode) in 22-35 CPU "
        "seconds, fused (993 prefill, 1,185 decode) in 3.6-14; the dynamo export (1,666 ops "
        "as barriers, 1,474 fused, 32 of 32 attentions) in 52-53 and 48-49 CPU seconds "
        "(wall 54-260 s). `zoo32_rms7` is from the earlier run (barrier only, "
        "which P5 does not change).",
        "Growth: with attention as barriers CPU seconds per op rise from about 0.01 at 8 "
        "layers to 0.016 at 32 and 0.026-0.030 at 64 (mildly superlinear: the ideals grow with the "
        "layers, each mask with the ops); fused, the optimizer is 6-8x faster in prefill (0.5, "
        "3.7 and 12 CPU s at 8, 32, 64 layers) and 1.7-2.6x in decode (2.2, 13 and 38), "
        "each attention one OPAQUE group cutting the graph. 64 layers (1,985-3,009 ops) are "
        "proven in 12-92 CPU seconds. The budgeted count takes under 1 CPU second at every "
        "size.",
        "Traffic: greedy is within 2.7 % of the optimum in prefill and 0.2 % in decode on "
        "`sram_edge_stream` (7.5 % and 2.1 % on the default preset); unfused is 1.9-2.0x "
        "(prefill) and 1.1x (decode) the optimum on `sram_edge_stream`, 2.7-3.4x and 1.4-1.8x "
        "on the default preset, where weights are resident and only activations move.",
        "Weights: on `sram_edge_stream` they are 48-64 % of the optimum's traffic in prefill "
        "and 70-89 % in decode (one token uses each weight once). Every plan programs each "
        "matrix once; at these widths no single matrix exceeds the 64 crossbars and the buffer "
        "holds a tile's inputs and partial sums, so nothing is re-loaded "
        "(`weight_reload_bytes` 0; `tests/test_llm.py` checks the re-loads on a 4-crossbar "
        "chip at 256 tokens).",
        "Fused attention: the fused optimum moves 0.625-0.631x the barrier optimum's "
        "activation bytes in prefill and 0.287-0.288x in decode (zoo builder, every size: "
        "each attention's scores and repeat_kv stay on chip, in prefill its head split and "
        "merge too); 0.767x for the dynamo export.",
        "RoPE: in Llama the head split of Q and K stands before the rotary embedding; P5 now "
        "moves it past RoPE and absorbs it (`docs/attention.md` §1.1): 4 ops fewer per layer "
        "in prefill (8 layers: 281 -> 249 fused ops). The traffic is the same as with the "
        "4-D form at these widths (8 layers: 459,776 B on `sram_edge_stream`, both proven; "
        "2 layers at hidden 256, 512 tokens, default preset: 5,373,952 B both), the "
        "optimizer's time falls (8 layers: 1.7 -> 0.5 CPU s). The decode step keeps the "
        "4-D form (K's RoPE output also feeds the cache).",
        "The dynamo export (2,056 ONNX nodes): torch's scaled_dot_product_attention "
        "decomposition guards the probabilities with `Where(IsNaN(p), 0, p)`; P5 absorbs the "
        "guard (`nan_guard=1`) and fuses all 32 attentions, in the 3-D form.",
        "Timings: `*_s` wall seconds, `*_cpu_s` the process's CPU seconds (one core; the "
        "optimizer is single-threaded), on 2 cores shared with up to a dozen other jobs "
        "(load average 3-7 during this run): the CPU seconds are the fair figure.",
    ]
    sections = [
        ("Rows", table),
        ("Optimizer time against layers (zoo builder)", growth(rows)),
        (
            "Fused attention against attention as barriers (optima, same run)",
            fused_vs_barrier(rows),
        ),
    ]
    title = "Llama-style decoders at 2-64 layers: planning and exact-optimum times"
    write_outputs("llm_scale", title, sections, notes)
    print_rows("exp_llm_scale", table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="*", default=list(LAYERS))
    parser.add_argument("--phase", nargs="*", default=list(PHASES), choices=PHASES)
    parser.add_argument("--attention", nargs="*", default=list(ATTENTION), choices=ATTENTION)
    parser.add_argument("--hw", nargs="*", default=list(HARDWARE), choices=HARDWARE)
    parser.add_argument("--dynamo", action="store_true", help="also the dynamo export")
    parser.add_argument(
        "--decomposed", action="store_true", help="RMSNorm as seven ops (model zoo<L>_rms7)"
    )
    parser.add_argument("--render", action="store_true", help="only rewrite the tables")
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT_S, metavar="S",
                        help="optimal_plan's wall-clock limit")  # fmt: skip
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    if not args.render:
        for layers in args.layers:
            for phase in args.phase:
                graph, build_s = build(layers, phase, not args.decomposed)
                name = f"zoo{layers}" + ("_rms7" if args.decomposed else "")
                base = {"model": name, "layers": layers, "phase": phase,
                        "build_s": round(build_s, 2)}  # fmt: skip
                for attention in args.attention:
                    rows += measure(graph, base, attention, args.hw, args.time_limit)
                    store(rows)
        if args.dynamo and DYNAMO_FILE.exists():
            start = time.perf_counter()
            graph = load_onnx(DYNAMO_FILE)
            base = {"model": "dynamo32", "layers": 32, "phase": "prefill",
                    "build_s": round(time.perf_counter() - start, 2)}  # fmt: skip
            for attention in args.attention:
                rows += measure(graph, base, attention, args.hw, args.time_limit)
                store(rows)
    merged = store(rows)
    render(merged)


if __name__ == "__main__":
    main()
