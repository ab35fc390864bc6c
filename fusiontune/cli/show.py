"""``fusiontune show MODEL``: one line per op with its class, shape, MACs, params and bytes.

MODEL is a zoo name or an ``.onnx`` path, read by :func:`fusiontune.frontend.loader.load_model`.
Output bytes follow DESIGN §6: ``ceil(act_bits / 8)`` bytes per activation element, counted
for each output that is used (read by another op or a graph output).
"""

from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING, Any

from fusiontune.cli._common import add_model_arguments, load_graph, positive_int
from fusiontune.cli.models import format_shape, format_table

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph, Op

DEFAULT_ACT_BITS = 8  # DESIGN §7: 8-bit activations
BITS_PER_BYTE = 8


def register(sub: Any) -> None:
    """Add the ``show`` subcommand to the CLI's subparsers."""
    parser = sub.add_parser(
        "show",
        help="show a model op by op",
        description="Show each op of a model: type, class, output shape, MACs, params, "
        "output bytes.",
    )
    add_model_arguments(parser)
    parser.add_argument(
        "--act-bits", type=positive_int, default=DEFAULT_ACT_BITS,
        help=f"bits per activation element; bytes = ceil(bits/8) (default {DEFAULT_ACT_BITS})",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Load the model and print its ops; returns the exit code."""

    graph = load_graph(args)
    report = describe(graph, args.act_bits)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(_as_text(report))
    return 0


def describe(graph: Graph, act_bits: int = DEFAULT_ACT_BITS) -> dict[str, Any]:
    """The per-op description of a graph as plain data (what ``--json`` prints).

    Args:
        graph: the model.
        act_bits: bits per activation element.
    """
    act_bytes = math.ceil(act_bits / BITS_PER_BYTE)
    ops = [_op_row(graph, op, act_bytes) for op in graph.ops]
    return {
        "model": graph.name,
        "act_bits": act_bits,
        "act_bytes_per_element": act_bytes,
        "inputs": {name: list(graph.tensors[name].shape) for name in graph.inputs},
        "outputs": {name: list(graph.tensors[name].shape) for name in graph.outputs},
        "totals": {
            "ops": len(ops),
            "macs": sum(r["macs"] for r in ops),
            "params": sum(r["params"] for r in ops),
            "output_bytes": sum(r["output_bytes"] for r in ops),
        },
        "ops": ops,
    }


def _op_row(graph: Graph, op: Op, act_bytes: int) -> dict[str, Any]:
    used = [t for t in op.outputs if t and (graph.consumer_map.get(t) or t in graph.outputs)]
    return {
        "name": op.name,
        "type": op.op_type,
        "class": str(op.op_class),
        "output_shape": list(graph.tensors[op.outputs[0]].shape),
        "macs": graph.op_macs(op),
        "params": graph.op_params(op),
        "output_bytes": sum(graph.tensors[t].numel for t in used) * act_bytes,
    }


def _as_text(report: dict[str, Any]) -> str:
    def shapes(named: dict[str, list[int]]) -> str:
        return ", ".join(f"{name} {format_shape(shape)}" for name, shape in named.items())

    totals = report["totals"]
    header = [
        f"model {report['model']}: {totals['ops']} ops, {totals['params']:,} params, "
        f"{totals['macs']:,} MACs",
        f"inputs: {shapes(report['inputs'])}; outputs: {shapes(report['outputs'])}",
        f"output bytes at {report['act_bits']}-bit activations "
        f"({report['act_bytes_per_element']} byte(s) per element)",
        "",
    ]
    headers = ("op", "type", "class", "output shape", "MACs", "params", "output bytes")
    rows = [
        (
            r["name"],
            r["type"],
            r["class"],
            format_shape(r["output_shape"]),
            f"{r['macs']:,}",
            f"{r['params']:,}",
            f"{r['output_bytes']:,}",
        )
        for r in report["ops"]
    ]
    rows.append(
        ("total", "", "", "", f"{totals['macs']:,}", f"{totals['params']:,}",
         f"{totals['output_bytes']:,}")
    )  # fmt: skip
    return "\n".join([*header, format_table(headers, rows, right_aligned=(4, 5, 6))])
