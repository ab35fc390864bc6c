"""From plan to artifact: every zoo model's plans exported as fused ONNX, run by onnxruntime.

Per zoo model (default input sizes; ``--small`` for the test sizes) and plan (the exact
optimizer's, the hardware-aware greedy one, and a merge-heavy one: every candidate edge fused
and every merge candidate merged), on each hardware preset given:

- node counts: the graph's ops (= nodes of ``to_onnx``), the exported model's top-level nodes
  (one per group) and group functions, the nodes of onnxruntime's optimized graph
  (``ORT_ENABLE_ALL``, ``optimized_model_filepath``) of the original and of the exported model,
  and TVM's kernels (``call_tir`` launches after Relax's ONNX front end and the "zero" fusion
  pipeline, ``experiments/peers/tvm_fuse_count.py`` in TVM's side venv) — or, without TVM,
  fusiontune's ``tvm_like_plan`` group count, a model of TVM's FuseOps and labelled so;
- parameters (float initializer elements) of the original and the exported model;
- the largest relative error of the exported model's outputs against the original's, both run
  by onnxruntime (CPU, float32): ``max |exported - original| / max |original|`` per output;
- round trip: the exported file re-imported with ``load_onnx_with_plan``; the traffic of the
  plan read back equals the exported plan's (``simulate`` on the same hardware);
- export time (``export_plan``: compile, write, full ONNX check).

Usage: ``python experiments/exp_export.py [--small] [--models a,b] [--hardware isaac_ddr,sram_edge]
[--tvm-python TVM_VENV/bin/python]``. Writes ``results/exp_export.{md,csv}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from exp_common import print_rows, write_outputs

from fusiontune.export.onnx_export import to_onnx
from fusiontune.export.plan_export import export_plan
from fusiontune.frontend.onnx_import import load_onnx_with_plan
from fusiontune.frontend.zoo import ZOO, build_zoo, zoo_models
from fusiontune.ir.graph import Graph
from fusiontune.planner.baselines import plan_from_edges, tvm_like_plan
from fusiontune.planner.candidates import candidate_edges, merge_candidates
from fusiontune.planner.plan import Plan
from fusiontune.reference import random_inputs
from fusiontune.search.optimize import optimal_plan
from fusiontune.sim.cost import simulate
from fusiontune.sim.greedy import greedy_plan
from fusiontune.sim.hardware import HardwareConfig, load_hardware

PLAN_KINDS = ("optimal", "greedy", "merge")
SMALL_INPUT = {  # the test sizes: CNNs at 32x32, BERT at 16 tokens
    "vgg11": 32, "vgg16": 32, "vgg19": 32, "resnet18": 32, "resnet50": 32,
    "resnet18_train": 32, "mobilenet_v2": 32, "bert_encoder": 16,
}  # fmt: skip
FLOAT_DTYPES = frozenset({"float16", "float32", "float64", "bfloat16"})
TOLERANCE = 1e-5  # the bar: relative, float numerics
DEFAULT_TVM_PYTHON = Path(os.environ.get("FUSIONTUNE_TVM_PYTHON", "tvm-venv/bin/python"))
TVM_RUNNER = Path(__file__).resolve().parent / "peers" / "tvm_fuse_count.py"
TVM_TIMEOUT_S = 3600


def merge_heavy_plan(graph: Graph) -> Plan:
    """Every candidate edge fused, every merge candidate merged (repaired into a legal plan)."""
    merges = {name: "merge" for name in merge_candidates(graph)}
    return plan_from_edges(graph, candidate_edges(graph), merges)


def make_plan(graph: Graph, kind: str, hw: HardwareConfig) -> Plan | None:
    """The plan of ``kind``; ``None`` when no plan fits ``hw`` (the optimizer's verdict)."""
    if kind == "greedy":
        return greedy_plan(graph, hw=hw)
    if kind == "merge":
        return merge_heavy_plan(graph)
    return optimal_plan(graph, hw).plan


ORT_LOG_ERRORS_ONLY = 3  # onnxruntime severity: 0 verbose ... 3 error, 4 fatal


def ort_run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, feeds)]


def ort_optimized_nodes(path: Path, work: Path) -> int:
    """Nodes of the graph onnxruntime runs (``ORT_ENABLE_ALL``, saved and counted)."""
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = ORT_LOG_ERRORS_ONLY  # not the NCHWc serialization warning
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    target = work / f"{path.stem}.ort.onnx"
    options.optimized_model_filepath = str(target)
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    n = len(onnx.load(str(target), load_external_data=False).graph.node)
    target.unlink()
    for extra in work.glob(f"{path.stem}.ort.onnx*"):
        extra.unlink()
    return n


def max_rel_err(got: Sequence[np.ndarray], ref: Sequence[np.ndarray]) -> float:
    """Largest ``max |got - ref| / max |ref|`` over the outputs."""
    worst = 0.0
    for a, b in zip(got, ref, strict=True):
        scale = float(np.max(np.abs(b))) if b.size else 0.0
        err = float(np.max(np.abs(a.astype(np.float64) - b))) if b.size else 0.0
        worst = max(worst, err / scale if scale else err)
    return worst


@dataclass
class ModelResult:
    rows: list[dict[str, Any]]
    onnx_path: Path


def run_model(
    name: str,
    input_size: int,
    hws: Sequence[HardwareConfig],
    work: Path,
    kinds: Sequence[str] = PLAN_KINDS,
    seed: int = 0,
) -> ModelResult:
    """Export ``name``'s plans on each hardware and measure them (rows without TVM)."""
    graph = build_zoo(name, input_size=input_size)
    original = work / f"{name}.onnx"
    to_onnx(graph, original)
    feeds = random_inputs(graph, seed=seed)
    reference = ort_run(original, feeds)
    params_before = sum(
        t.numel for t in graph.tensors.values() if t.value is not None and t.dtype in FLOAT_DTYPES
    )  # = onnx_params of the to_onnx file: every constant is an initializer there
    tvm_like = tvm_like_plan(graph).n_groups
    ort_nodes = ort_optimized_nodes(original, work)
    rows = []
    for hw, kind in ((hw, kind) for hw in hws for kind in kinds):
        plan = make_plan(graph, kind, hw)
        head = {"model": name, "input_size": input_size, "hardware": hw.name, "plan": kind}
        if plan is None:
            rows.append({**head, "ops": len(graph.ops), "note": "no plan fits the hardware"})
            continue
        path = work / f"{name}.{kind}.fused.onnx"
        start = time.perf_counter()
        summary = export_plan(graph, plan, path, hw)
        export_s = time.perf_counter() - start
        err = max_rel_err(ort_run(path, feeds), reference)
        back, back_plan = load_onnx_with_plan(path)
        assert back_plan is not None
        traffic = simulate(graph, plan, hw).traffic_bytes
        rows.append(
            {
                **head,
                "ops": len(graph.ops),
                "groups": plan.n_groups,
                "exported_nodes": summary.n_nodes,
                "functions": summary.n_functions,
                "ort_nodes": ort_nodes,
                "ort_nodes_of_export": ort_optimized_nodes(path, work),
                "tvm_like_groups": tvm_like,
                "params_before": params_before,
                "params_after": summary.n_params,
                "params_ratio": summary.n_params / params_before,
                "max_rel_err": err,
                "within_1e-5": err <= TOLERANCE,
                "traffic_bytes": traffic,
                "roundtrip_traffic_equal": simulate(back, back_plan, hw).traffic_bytes == traffic,
                "export_s": round(export_s, 3),
            }
        )
        path.unlink()
    return ModelResult(rows, original)


def tvm_counts(python: Path | None, paths: Sequence[Path]) -> tuple[dict[str, Any], str]:
    """TVM's kernel counts per ONNX file, and TVM's version (empty dict when unavailable)."""
    if python is None or not python.exists():
        return {}, ""
    done = subprocess.run(
        [str(python), str(TVM_RUNNER), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=TVM_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        print(f"TVM runner failed: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return {}, ""
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return data["models"], str(data["tvm_version"])


def run(
    models: Sequence[str],
    hws: Sequence[HardwareConfig],
    small: bool,
    tvm_python: Path | None,
    kinds: Sequence[str] = PLAN_KINDS,
) -> tuple[list[dict[str, Any]], str]:
    """All rows (TVM columns filled in) and TVM's version ("" when TVM did not run).

    Each model runs in a fresh process: fusiontune's caches keep each graph's weights (and
    compiled weights) alive, which at the default sizes (VGG: 0.5 GB of weights) adds up.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    rows: list[dict[str, Any]] = []
    version = ""
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in models:
            size = SMALL_INPUT.get(name) if small else None
            size = size or ZOO[name].default_input_size
            print(f"{name} @ {size} ...", file=sys.stderr, flush=True)
            with ProcessPoolExecutor(1, mp_context=context) as pool:
                result = pool.submit(run_model, name, size, hws, work, kinds).result()
            counts, found = tvm_counts(tvm_python, [result.onnx_path])
            version = version or found
            tvm = counts.get(str(result.onnx_path), {})
            for row in result.rows:
                row["tvm_kernels"] = tvm.get("kernels")
            result.onnx_path.unlink()
            rows += result.rows
    return rows, version


COLUMNS = (
    "model", "input_size", "hardware", "plan", "ops", "groups", "exported_nodes", "functions",
    "ort_nodes", "ort_nodes_of_export", "tvm_kernels", "tvm_like_groups", "params_before",
    "params_after", "params_ratio", "max_rel_err", "within_1e-5", "traffic_bytes",
    "roundtrip_traffic_equal", "export_s", "note",
)  # fmt: skip


def summary_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per model: kernel counts side by side, parameters, worst error."""
    head = ("model", "input_size", "ops", "ort_nodes", "tvm_kernels", "tvm_like_groups")
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r.get("max_rel_err") is None:
            continue
        s = out.setdefault(r["model"], {k: r[k] for k in head})
        if r["plan"] == "optimal":
            s[f"groups_optimal_{r['hardware']}"] = r["groups"]
        if r["plan"] == "merge":
            s["params_before"] = r["params_before"]
            s["params_after_merge"] = r["params_after"]
        s["max_rel_err"] = max(s.get("max_rel_err", 0.0), r["max_rel_err"])
    tail = ("params_before", "params_after_merge", "max_rel_err")
    order = [*head, *sorted({k for s in out.values() for k in s} - {*head, *tail}), *tail]
    return [{k: s.get(k) for k in order} for s in out.values()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="test sizes (CNNs 32, BERT 16)")
    parser.add_argument("--models", default=None, help="comma-separated zoo models (default all)")
    parser.add_argument(
        "--hardware", default="isaac_ddr,sram_edge", help="comma-separated presets or YAML files"
    )
    parser.add_argument(
        "--tvm-python",
        type=Path,
        default=DEFAULT_TVM_PYTHON,
        help="Python of a venv with apache-tvm (tvm_like_plan when missing)",
    )
    args = parser.parse_args()
    models = args.models.split(",") if args.models else zoo_models()
    hws = [load_hardware(h) for h in args.hardware.split(",")]
    rows, version = run(models, hws, args.small, args.tvm_python)
    rows = [{c: r.get(c) for c in COLUMNS} for r in rows]
    print_rows("Exported plans", rows)
    done = [r for r in rows if r.get("max_rel_err") is not None]
    worst = max(r["max_rel_err"] for r in done)
    tvm = f"TVM {version} (Relax)" if version else "TVM (not installed for this run)"
    notes = [
        f"Hardware {', '.join(f'`{h.name}`' for h in hws)}; sizes: "
        f"{'test sizes (--small)' if args.small else 'the zoo defaults'}. Worst relative error "
        f"over {len(done)} exports: {worst:.3g} (bar {TOLERANCE:g}); all round trips equal: "
        f"{all(r['roundtrip_traffic_equal'] for r in done)}.",
        "Hardware: `isaac_ddr` is the ISAAC-like chip with weights loaded per inference from "
        "DDR (every model has a plan; its 11 MB buffer fuses whole networks), `sram_edge` an "
        "edge chip with a 32 KiB buffer and 64 macros (many small groups).",
        "`ops`: ops of the graph (= nodes of `ft.to_onnx`); `exported_nodes`: top-level nodes "
        "of the exported model, one per group (a group of 2+ ops is a call of a function in "
        "the `fusiontune` domain, `functions` counts them; a group of one op is a plain node).",
        "`ort_nodes`: nodes of onnxruntime's optimized graph of the original model "
        "(ORT_ENABLE_ALL, CPU; includes its layout nodes such as ReorderInput/ReorderOutput); "
        "`ort_nodes_of_export`: the same for the exported model (ORT inlines the functions and "
        "optimizes again).",
        f"`tvm_kernels`: {tvm}: `call_tir` launches in `main` after Relax's ONNX front end, "
        "DecomposeOpsForInference and the zero pipeline (LegalizeOps, AnnotateTIROpPattern, "
        "FoldConstant, FuseOps, FuseTIR) — `experiments/peers/tvm_fuse_count.py`; empty when "
        "TVM is not installed or cannot take the model. `tvm_like_groups`: the groups of "
        "fusiontune's `tvm_like_plan`, a model of TVM's FuseOps (not TVM), for comparison.",
        "`params_*`: float initializer elements; merge groups multiply the matrices out "
        "(W1·W2: smaller for a wide middle layer, larger for a bottleneck), folds drop the batch "
        "norms' four vectors for one bias.",
        "`max_rel_err`: onnxruntime on the exported model vs onnxruntime on `ft.to_onnx` of the "
        "original graph, same random inputs, `max|a-b| / max|b|` per output.",
        "`roundtrip_traffic_equal`: `load_onnx_with_plan` of the exported file gives a graph and "
        "the plan its function calls spell; its `simulate` traffic equals the exported plan's.",
        "Second table (`exp_export_2.csv`): per model, the kernels onnxruntime and TVM run "
        "next to the groups of the optimal plan on each hardware (one kernel each), the "
        "parameters before and after the merge-heavy plan, and the worst error of the model.",
        "`export_s`: `export_plan` wall time (compile groups, ONNX check with full_check, "
        "write); a plan whose groups an earlier plan of the model had reuses the executor's "
        "compiled (folded/merged) weights from its cache, so the first plan's time is the cold "
        "one.",
    ]
    summary = summary_rows(rows)
    print_rows("Kernels and parameters per model", summary)
    sections = [("Exported plans", rows), ("Kernels and parameters per model", summary)]
    write_outputs("export", "Plans exported as fused ONNX models", sections, notes)


if __name__ == "__main__":
    main()
