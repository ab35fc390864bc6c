"""``fusiontune export``: write a plan of a model as a fused ONNX model or as a schedule."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fusiontune.cli._common import add_model_arguments, load_graph

FORMAT_SUFFIXES = {"onnx": ".onnx", "schedule": ".json"}


def register(sub: Any) -> None:
    """Add the ``export`` subcommand."""
    p = sub.add_parser(
        "export",
        help="write a fusion plan as a fused ONNX model or a simulator schedule",
        description="Export a plan of a model: an ONNX model with one function call per "
        "group (folded and merged weights, the group's mode and costs in the node metadata), "
        "or a JSON/CSV schedule (docs/export.md).",
    )
    add_model_arguments(p)
    p.add_argument(
        "--plan",
        default="greedy",
        metavar="PLAN.json|greedy|optimal|unfused|tvm_like",
        help="a plan JSON file (e.g. a search's best_plan.json), the greedy plan "
        "that fits --hardware, or the proven-optimal traffic plan (default greedy)",
    )
    p.add_argument(
        "--hardware",
        "--hw",
        dest="hw",
        default=None,
        metavar="PRESET|FILE",
        help="hardware preset or YAML file for the plan and the costs in the "
        "metadata (default isaac_reram_flat)",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE",
        help="output file: fused.onnx, or schedule.json (+ schedule.csv beside it)",
    )
    p.add_argument(
        "--format",
        choices=tuple(FORMAT_SUFFIXES),
        default=None,
        help="onnx or schedule (default: from the output suffix, .json = schedule)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Load model, plan and hardware; write the files; print what was written."""
    from fusiontune.cli.simulate import _load_plan
    from fusiontune.export.plan_export import export_plan
    from fusiontune.sim.hardware import load_hardware

    fmt = args.format or ("schedule" if Path(args.output).suffix == ".json" else "onnx")
    graph = load_graph(args)
    hw = load_hardware(args.hw)
    _refuse_schedule(args.plan)
    plan = _load_plan(graph, args.plan, hw)
    summary = export_plan(graph, plan, args.output, hw=hw, format=fmt)
    written = ", ".join(str(p) for p in summary.paths)
    if fmt == "onnx":
        print(
            f"{graph.name}: plan {args.plan} ({summary.n_groups} groups, {len(graph.ops)} ops) "
            f"-> {written}: {summary.n_nodes} nodes, {summary.n_functions} group functions, "
            f"{summary.n_params:,} parameters (the graph holds {graph.total_params:,})"
        )
    else:
        print(f"{graph.name}: plan {args.plan} ({summary.n_groups} groups) -> {written}")
    return 0


def _refuse_schedule(spec: str) -> None:
    """A schedule file passed as ``--plan``: say what it is instead of failing on its fields."""
    import json

    from fusiontune.errors import ConfigError
    from fusiontune.export.schedule import SCHEDULE_FORMAT

    path = Path(spec)
    if path.suffix != ".json" or not path.is_file():
        return
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # the plan loader reports it
    if isinstance(data, dict) and data.get("format") == SCHEDULE_FORMAT:
        raise ConfigError(
            f"--plan '{spec}': is a schedule written by `fusiontune export --format schedule`, "
            "not a plan; pass a plan JSON such as best_plan.json"
        )
