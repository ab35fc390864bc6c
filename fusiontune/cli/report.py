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
    p.add_argument(
        "--rebuild",
        action="store_true",
        help="first rewrite trials.parquet from the study storage (the search trials; the "
        "baseline rows are not stored: rerun the search with --resume for those)",
    )
    p.add_argument(
        "--storage",
        default=None,
        help="with --rebuild: the study storage URL or journal file, if summary.json does "
        "not record it (a database URL)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fusiontune.search.report import write_report

    if args.rebuild:
        from fusiontune.search.rebuild import rebuild_trials

        done = rebuild_trials(args.dir, args.storage)
        print(
            f"rebuilt {done.path} from {done.storage}: {done.n_trials} search trials; the "
            "baseline rows (unfused, greedy, ...) are not in the study storage: rerun the "
            "search with --resume to recompute them"
        )
    path = write_report(args.dir)
    print(f"wrote {path}")
    return 0
