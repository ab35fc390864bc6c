"""Analytic plan evaluations per second on resnet50: cold vs warm group-cost cache.

Random legal plans come from the planner's ``random_plan(graph, rng)``. Three passes over
the same plans:

- ``cold``: the cache is cleared before every plan (every group costed from scratch);
- ``first pass``: one shared cache filling up, as at the start of a search;
- ``warm``: every group already cached, as a search re-evaluating similar plans.

Prints the table and writes ``results/bench_simulate.json``. Usage:
``python experiments/bench_simulate.py [--plans N] [--model resnet50] [--repeats R]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from fusiontune.frontend.loader import load_model
from fusiontune.ir.graph import Graph
from fusiontune.planner.baselines import random_plan
from fusiontune.planner.plan import Plan
from fusiontune.sim.cost import clear_cache, simulate
from fusiontune.sim.hardware import HardwareConfig

RESULTS = Path(__file__).resolve().parents[1] / "results" / "bench_simulate.json"
TARGET_WARM_PLANS_PER_S = 5_000  # project target: >= 5,000 warm plans/s on one core


def _rate(
    graph: Graph, plans: list[Plan], hw: HardwareConfig, clear_each: bool, repeats: int
) -> float:
    """Plans per second over ``plans`` (best of ``repeats`` passes)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for plan in plans:
            if clear_each:
                clear_cache()
            simulate(graph, plan, hw)
        best = min(best, time.perf_counter() - start)
    return len(plans) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--plans", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    graph = load_model(args.model)
    hw = HardwareConfig()
    rng = np.random.default_rng(args.seed)
    plans = [random_plan(graph, rng) for _ in range(args.plans)]
    graph.structural_hash  # noqa: B018 - computed once per graph, outside the timings

    cold = _rate(graph, plans, hw, clear_each=True, repeats=1)
    clear_cache()
    start = time.perf_counter()
    for plan in plans:
        simulate(graph, plan, hw)
    first = len(plans) / (time.perf_counter() - start)
    warm = _rate(graph, plans, hw, clear_each=False, repeats=args.repeats)

    groups = [p.n_groups for p in plans]
    result = {
        "model": graph.name,
        "ops": len(graph.ops),
        "plans": len(plans),
        "groups_per_plan_mean": float(np.mean(groups)),
        "distinct_groups": len({g.key for p in plans for g in p.groups}),
        "cold_plans_per_s": round(cold, 1),
        "first_pass_plans_per_s": round(first, 1),
        "warm_plans_per_s": round(warm, 1),
        "warm_us_per_plan": round(1e6 / warm, 2),
        "warm_over_cold": round(warm / cold, 1),
        "target_warm_plans_per_s": TARGET_WARM_PLANS_PER_S,
        "meets_target": warm >= TARGET_WARM_PLANS_PER_S,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    for key, value in result.items():
        print(f"{key:>24}: {value}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(RESULTS.parents[1])}")


if __name__ == "__main__":
    main()
