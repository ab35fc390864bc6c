"""``fusiontune models``: list the zoo with input shape, ops, parameters and MACs.

Sizes come from :func:`fusiontune.frontend.zoo.zoo_summary`, which builds each model with
placeholder weights, so listing vgg19 does not allocate its 575 MB of weights.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

TABLE_GAP = "  "  # between table columns


def register(sub: Any) -> None:
    """Add the ``models`` subcommand to the CLI's subparsers."""
    parser = sub.add_parser(
        "models",
        help="list the built-in model zoo",
        description="List the built-in zoo models with input shape, ops, parameters and MACs "
        "(at each model's default input size).",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the zoo as a table or as JSON; returns the exit code."""
    from fusiontune.frontend.zoo import ZOO, zoo_models, zoo_summary

    rows: list[dict[str, Any]] = []
    for name in zoo_models():
        summary = zoo_summary(name)
        entry = ZOO[name]
        rows.append(
            {
                "name": name,
                "description": summary.description,
                "input_shape": list(summary.input_shape),
                "input_size": entry.default_input_size,
                "input_size_meaning": entry.input_size_meaning,
                "ops": summary.ops,
                "params": summary.params,
                "macs": summary.macs,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    headers = ("model", "input shape", "ops", "params", "MACs", "description")
    table = [
        (
            r["name"],
            format_shape(r["input_shape"]),
            f"{r['ops']:,}",
            f"{r['params']:,}",
            f"{r['macs']:,}",
            r["description"],
        )
        for r in rows
    ]
    print(format_table(headers, table, right_aligned=(2, 3, 4)))
    print("params count every constant an op reads (BatchNorm running statistics included)")
    return 0


def format_shape(shape: Sequence[int]) -> str:
    """``(1, 3, 224, 224)`` -> ``1x3x224x224`` (``scalar`` for rank 0)."""
    return "x".join(str(d) for d in shape) or "scalar"


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right_aligned: Sequence[int] = ()
) -> str:
    """Plain aligned text table: a header, a rule, one line per row.

    Args:
        headers: column titles.
        rows: cells as strings, one sequence per row.
        right_aligned: indices of the columns to right-align (numbers).
    """
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(w) if i in right_aligned else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(cells, widths))
        ]
        return TABLE_GAP.join(parts).rstrip()

    rule = TABLE_GAP.join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])
