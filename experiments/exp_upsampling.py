"""Upsampling inside fused groups: the exporter corpus's ConvTranspose/Resize graphs, planned
with the upsampling ops streaming (LINEAR ConvTranspose, ELEMWISE Resize) and, in the same run,
with them as barriers (the same graph with those ops in an unknown domain: OPAQUE, alone).

For each file: activation traffic of the unfused plan, of the optimum with barriers and of the
greedy plan and the optimum with streaming upsampling, groups, and the optimum's buffer;
ratios are same-run. Writes ``results/exp_upsampling.{md,csv}``.

Usage: ``python experiments/exp_upsampling.py``
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from exp_common import RESULTS_DIR, machine_line, markdown_table, write_csv

import fusiontune as ft
from fusiontune.ir.graph import Graph
from fusiontune.search.optimize import optimal_plan

FORMS_DIR = Path(__file__).resolve().parents[1] / "tests" / "data" / "onnx_forms"
FILES = ("fpn_neck", "fpn_neck_dynamo", "conv_transpose", "resize_nearest", "resize_linear")
UPSAMPLING = frozenset({"ConvTranspose", "Resize"})
BARRIER_DOMAIN = "exp.barrier"  # an unknown domain: the registry's OPAQUE default


def as_barriers(graph: Graph) -> Graph:
    """``graph`` with every upsampling op OPAQUE (analytic costs need only shapes)."""
    ops = tuple(
        replace(op, domain=BARRIER_DOMAIN) if op.op_type in UPSAMPLING else op for op in graph.ops
    )
    return Graph(graph.name, graph.tensors, ops, graph.inputs, graph.outputs)


def row(name: str, hw: ft.HardwareConfig) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        graph = ft.load_model(FORMS_DIR / f"{name}.onnx")
    unfused = ft.simulate(graph, ft.unfused_plan(graph), hw).act_traffic_bytes
    barrier = as_barriers(graph)
    barrier_opt = optimal_plan(barrier, hw).plan
    greedy = ft.greedy_plan(graph, hw=hw)
    opt = optimal_plan(graph, hw).plan
    assert barrier_opt is not None and opt is not None
    b_bytes = ft.simulate(barrier, barrier_opt, hw).act_traffic_bytes
    g_bytes = ft.simulate(graph, greedy, hw).act_traffic_bytes
    o_metrics = ft.simulate(graph, opt, hw)
    return {
        "file": name,
        "ops": len(graph.ops),
        "unfused_B": unfused,
        "optimum_barriers_B": b_bytes,
        "groups_barriers": len(barrier_opt.groups),
        "greedy_B": g_bytes,
        "optimum_B": o_metrics.act_traffic_bytes,
        "groups": len(opt.groups),
        "optimum_vs_barriers": o_metrics.act_traffic_bytes / b_bytes,
        "optimum_vs_unfused": o_metrics.act_traffic_bytes / unfused,
        "buffer_B": o_metrics.buffer_needed_bytes,
    }


def main() -> int:
    hw = ft.HardwareConfig()
    rows = [row(name, hw) for name in FILES]
    print(markdown_table(rows))
    write_csv(rows, RESULTS_DIR / "exp_upsampling.csv")
    (RESULTS_DIR / "exp_upsampling.md").write_text(
        "# Upsampling inside fused groups (issue 13)\n\n"
        f"Hardware: `{hw.name}` defaults. `optimum_barriers_B`: the exact optimum with "
        "ConvTranspose and Resize as OPAQUE barriers (same run); `greedy_B`, `optimum_B`: "
        "with them streaming. Activation traffic in bytes.\n\n"
        + markdown_table(rows)
        + "\n"
        + machine_line()
        + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
