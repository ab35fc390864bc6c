"""``fusiontune report DIR``: markdown summary and PNG plots of a search results folder."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="summarise a search results folder (markdown + PNG plots)",
        description="Write report.md, history.png, groups.png (and pareto.png for multi) "
        "into a folder written by `fusiontune search`.",
    )
    p.add_argument("dir", help="results folder, e.g. results/resnet18")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fusiontune.search.report import write_report

    path = write_report(args.dir)
    print(f"wrote {path}")
    return 0
