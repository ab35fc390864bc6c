"""Planner benchmark: plans streamed per second and count_plans time; plan counts of the zoo.

Counts and candidate groups are those of the default planner (no cap on group size), with
the former cap of 12 ops per group beside them (``*_capped12``). ``greedy`` is the
hardware-blind greedy plan (``greedy_plan(graph)``: maximal legal fusion); ``greedy_hw`` the
hardware-aware one on the default ``isaac_reram_flat``.

Run: ``python experiments/bench_planner.py [--stream-seconds S]``. Writes
``results/bench_planner.json`` and prints a table. Timings are wall-clock on whatever
machine runs it (record the machine with the numbers).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path
from typing import Any

TIMED_MODELS = ("vgg16", "resnet50", "bert_encoder")
CAP = 12  # the former rule 8: at most 12 ops per group
DEFAULT_STREAM_SECONDS = 3.0  # how long to stream plans per model
LEADING_DIGITS = 15  # digits of a huge count kept for its log10 (float precision)
RESULTS = Path(__file__).resolve().parent.parent / "results" / "bench_planner.json"


def bench_model(name: str, stream_seconds: float) -> dict[str, Any]:
    """Time candidate generation, counting, streaming, greedy and repair on one zoo model."""
    from fusiontune.frontend.zoo import build_zoo
    from fusiontune.planner.baselines import plan_from_edges
    from fusiontune.planner.candidates import candidate_edges, candidate_groups
    from fusiontune.planner.enumerate import count_plans, enumerate_plans
    from fusiontune.planner.plan import PlannerConfig
    from fusiontune.sim.greedy import greedy_plan
    from fusiontune.sim.hardware import load_hardware

    graph = build_zoo(name)
    capped = PlannerConfig(max_group_size=CAP)
    t0 = time.perf_counter()
    n_plans = count_plans(graph)  # cold: includes building the candidate table
    cold_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    assert count_plans(graph) == n_plans
    warm_s = time.perf_counter() - t0
    streamed = 0
    t0 = time.perf_counter()
    for _ in enumerate_plans(graph):
        streamed += 1
        if streamed % 256 == 0 and time.perf_counter() - t0 >= stream_seconds:
            break
    stream_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    greedy = greedy_plan(graph)
    greedy_s = time.perf_counter() - t0
    hw = load_hardware("isaac_reram_flat")
    t0 = time.perf_counter()
    greedy_hw = greedy_plan(graph, hw=hw)
    greedy_hw_s = time.perf_counter() - t0
    edges = candidate_edges(graph)
    t0 = time.perf_counter()
    plan_from_edges(graph, edges)
    repair_s = time.perf_counter() - t0
    return {
        "model": name,
        "ops": len(graph.ops),
        "candidate_groups": len(candidate_groups(graph)),
        "candidate_groups_capped12": len(candidate_groups(graph, capped)),
        "candidate_edges": len(edges),
        "plans": str(n_plans),
        "plans_log10": round(_log10(n_plans), 2),
        "plans_capped12_log10": round(_log10(count_plans(graph, capped)), 2),
        "count_plans_cold_s": round(cold_s, 3),
        "count_plans_warm_s": round(warm_s, 4),
        "plans_streamed": streamed,
        "plans_per_s": round(streamed / stream_s, 1),
        "greedy_groups": greedy.n_groups,
        "greedy_s": round(greedy_s, 3),
        "greedy_hw_groups": greedy_hw.n_groups,
        "greedy_hw_s": round(greedy_hw_s, 3),
        "plan_from_edges_all_s": round(repair_s, 3),
    }


def zoo_counts() -> list[dict[str, Any]]:
    """Plan counts, unfused and greedy group counts of every zoo model (default sizes)."""
    from fusiontune.frontend.zoo import build_zoo, zoo_models
    from fusiontune.planner.enumerate import count_plans
    from fusiontune.planner.plan import PlannerConfig
    from fusiontune.sim.greedy import greedy_plan
    from fusiontune.sim.hardware import load_hardware

    hw = load_hardware("isaac_reram_flat")
    rows = []
    for name in zoo_models():
        graph = build_zoo(name)
        n = count_plans(graph)
        n_capped = count_plans(graph, PlannerConfig(max_group_size=CAP))
        rows.append(
            {
                "model": name,
                "ops": len(graph.ops),
                "plans": str(n),
                "plans_log10": round(_log10(n), 2),
                "plans_capped12": str(n_capped),
                "plans_capped12_log10": round(_log10(n_capped), 2),
                "greedy_groups": greedy_plan(graph).n_groups,
                "greedy_hw_groups": greedy_plan(graph, hw=hw).n_groups,
            }
        )
    return rows


def _log10(n: int) -> float:
    """log10 of a Python int too large for a float."""
    text = str(n)
    lead = text[:LEADING_DIGITS]
    return math.log10(int(lead)) + len(text) - len(lead)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stream-seconds", type=float, default=DEFAULT_STREAM_SECONDS)
    args = parser.parse_args()
    timed = [bench_model(name, args.stream_seconds) for name in TIMED_MODELS]
    counts = zoo_counts()
    result = {
        "machine": {"python": platform.python_version(), "processor": platform.machine()},
        "stream_seconds": args.stream_seconds,
        "timed": timed,
        "zoo_counts": counts,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'model':<14}{'ops':>5}{'cands':>7}{'log10 plans':>13}{'count cold s':>14}"
          f"{'warm s':>9}{'plans/s':>10}{'greedy':>8}{'greedy hw':>11}")  # fmt: skip
    for r in timed:
        print(f"{r['model']:<14}{r['ops']:>5}{r['candidate_groups']:>7}{r['plans_log10']:>13}"
              f"{r['count_plans_cold_s']:>14}{r['count_plans_warm_s']:>9}{r['plans_per_s']:>10}"
              f"{r['greedy_groups']:>8}{r['greedy_hw_groups']:>11}")  # fmt: skip
    print()
    for r in counts:
        print(f"{r['model']:<16}{r['ops']:>5} ops  plans {r['plans_log10']:>7} (log10; capped "
              f"at {CAP}: {r['plans_capped12_log10']})  greedy {r['greedy_groups']} groups, "
              f"hardware-aware {r['greedy_hw_groups']}")  # fmt: skip
    print("written to results/bench_planner.json")


if __name__ == "__main__":
    main()
