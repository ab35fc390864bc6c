"""``fusiontune plans``: count, list and explain the legal fusion plans of a model."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fusiontune.cli._common import add_model_arguments, load_graph, positive_int
from fusiontune.errors import ConfigError, FusiontuneError
from fusiontune.ir.graph import Graph
from fusiontune.planner.counting import DEFAULT_COUNT_BUDGET


def register(sub: Any) -> None:
    """Add the ``plans`` subcommand."""
    p = sub.add_parser(
        "plans",
        help="count, list and explain the legal fusion plans of a model",
        description="Count the legal fusion plans of a model (exactly), show the unfused and "
        "greedy plans, list plans, or explain why each edge can or cannot be fused.",
    )
    add_model_arguments(p)
    p.add_argument("--count", action="store_true", help="print only the number of legal plans")
    p.add_argument("--limit", type=positive_int, metavar="N", help="list the first N plans")
    p.add_argument("--explain", action="store_true", help="explain every activation edge")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--out", metavar="PLAN.json", help="write the greedy plan's JSON here")
    p.add_argument("--max-group-size", type=positive_int, default=None, metavar="N",
                   help="optional cap on ops per group (default: none)")  # fmt: skip
    p.add_argument("--patterns", default=None, metavar="P1,P2,...",
                   help="enabled patterns, e.g. P1 or P1,P2 (default P1,P2,P3,P4)")  # fmt: skip
    p.add_argument("--budget", type=positive_int, default=DEFAULT_COUNT_BUDGET, metavar="N",
                   help="work units (about a microsecond each) for counting (shared with the "
                   "walk over legal groups unless --count); past them the count is a proven "
                   "lower bound and the explanation lists the "
                   f"patterns found (default {DEFAULT_COUNT_BUDGET:,})")  # fmt: skip
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Load the model, then print what was asked; returns the exit code."""
    from fusiontune.planner.attention import explain_attention, format_attention
    from fusiontune.planner.baselines import greedy_plan, unfused_plan
    from fusiontune.planner.candidates import PlannerConfig, group_pattern
    from fusiontune.planner.counting import count_within
    from fusiontune.planner.enumerate import enumerate_plans
    from fusiontune.planner.explain import explain, format_explanations
    from fusiontune.planner.summary import summary_within

    graph = load_graph(args)
    cfg_kwargs: dict[str, Any] = {}
    if args.max_group_size is not None:
        cfg_kwargs["max_group_size"] = args.max_group_size
    if args.patterns is not None:
        cfg_kwargs["patterns"] = _parse_patterns(args.patterns)
    cfg = PlannerConfig(**cfg_kwargs)

    # --count spends the whole budget on counting; otherwise counting and the walk over
    # legal groups (candidate edges, --explain) share it
    count = count_within(graph, cfg, args.budget if args.count else max(1, args.budget // 2))
    counted: dict[str, Any] = {"plans": count.value, "plans_exact": count.exact}
    if not count.exact:
        counted["plans_note"] = f"at least this many: {count.reason}"
    if args.count:
        print(json.dumps({"model": graph.name, **counted}) if args.json else count)
        return 0
    greedy = greedy_plan(graph, cfg)
    summary = summary_within(graph, cfg, max(1, args.budget // 2))
    report: dict[str, Any] = {
        "model": graph.name,
        "ops": len(graph.ops),
        **counted,
        "candidate_edges": len(summary.edges),
        "candidate_edges_exact": summary.complete,
        "unfused_groups": unfused_plan(graph).n_groups,
        "greedy_groups": greedy.n_groups,
        "greedy": [{**g.to_dict(), "pattern": group_pattern(graph, g)} for g in greedy.groups],
    }
    if args.limit:
        report["first_plans"] = [p.to_dict() for p in enumerate_plans(graph, args.limit, cfg)]
    explained = explain(graph, cfg, max(1, args.budget // 2)) if args.explain else []
    attention = explain_attention(graph) if args.explain else []
    if args.explain:
        report["explain"] = [e.to_dict() for e in explained]
        if attention:
            report["attention"] = [a.to_dict() for a in attention]
    if args.out:
        try:
            Path(args.out).write_text(greedy.to_json(indent=2) + "\n")
        except OSError as exc:
            raise FusiontuneError(
                f"plans --out: cannot write '{args.out}': {exc.strerror or type(exc).__name__}"
            ) from None
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(_as_text(graph, report))
    if args.explain:
        print()
        print(format_explanations(explained))
        if attention:
            print(format_attention(attention))
    if args.out:
        print(f"greedy plan written to {args.out}")
    return 0


def _as_text(graph: Graph, report: dict[str, Any]) -> str:
    n = report["plans"]
    edges = report["candidate_edges"]
    if not report["candidate_edges_exact"]:
        edges = f"at least {edges}"  # the walk stopped at --budget
    at_least = "" if report["plans_exact"] else "at least "
    lines = [
        f"model {report['model']}: {report['ops']} ops, {edges} candidate edges",
        f"legal plans: {at_least}{n}" + (f" (~{n:.3e})" if n >= 10**6 else ""),
        *([f"  ({report['plans_note']})"] if "plans_note" in report else []),
        f"groups: unfused {report['unfused_groups']}, greedy {report['greedy_groups']}",
        "greedy plan:",
    ]
    for i, g in enumerate(report["greedy"]):
        lines.append(f"  [{i}] {g['mode']:<6} {g['pattern']:<10} {' '.join(g['ops'])}")
    for k, plan in enumerate(report.get("first_plans", [])):
        groups = " | ".join(
            " ".join(g["ops"]) + (f" ({g['mode']})" if len(g["ops"]) > 1 else "")
            for g in plan["groups"]
        )
        lines.append(f"plan {k}: {groups}")
    return "\n".join(lines)


def _parse_patterns(text: str) -> frozenset[str]:
    parts = frozenset(p.strip().upper() for p in text.replace("+", ",").split(",") if p.strip())
    if not parts:
        raise ConfigError("--patterns: give at least one of P1, P2, P3, P4 (e.g. P1,P2)")
    return parts
