"""Search benchmark -> results/bench_search.json.

1. Throughput: trials per second of the same search (random sampler, no duplicates to speak
   of) on the serial backend and on Ray with 2 workers; the ratio Ray / serial.
2. Quality: best-so-far traffic of tpe, random and nsga2 against the exact optimum (MILP
   oracle) on three zoo models, as best/optimum ratios at a few checkpoints.

Run from the repository root: ``python experiments/bench_search.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

THROUGHPUT_MODEL = "resnet18"
THROUGHPUT_TRIALS = 200
QUALITY_MODELS = ("bert_encoder", "resnet18", "mobilenet_v2")
QUALITY_SAMPLERS = ("tpe", "random", "nsga2")
QUALITY_TRIALS = 300
CHECKPOINTS = (10, 30, 100, 300)
RAY_WORKERS = 2
WARMUP_TRIALS = 5


def throughput(trials: int) -> dict[str, Any]:
    """Trials/s serial vs Ray (the Ray start-up is timed separately, not in the rate)."""
    import ray

    from fusiontune.search.api import search

    out: dict[str, Any] = {"model": THROUGHPUT_MODEL, "trials": trials, "sampler": "random"}
    with tempfile.TemporaryDirectory() as tmp:  # warm-up: imports and model build not timed
        search(THROUGHPUT_MODEL, trials=WARMUP_TRIALS, backend="serial", out=tmp, baselines=False)
    for backend in ("serial", "ray"):
        if backend == "ray":
            start = time.perf_counter()
            ray.init(
                address="local", num_cpus=RAY_WORKERS, include_dashboard=False, log_to_driver=False
            )
            out["ray_init_s"] = time.perf_counter() - start
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            result = search(
                THROUGHPUT_MODEL,
                trials=trials,
                sampler="random",
                backend=backend,
                workers=RAY_WORKERS,
                out=tmp,
                baselines=False,
            )
            seconds = time.perf_counter() - start
        rows = result.trials[result.trials["source"] == "search"]
        out[backend] = {
            "seconds": seconds,
            "trials_per_s": trials / seconds,
            "eval_s_total": float(rows["eval_s"].sum()),
            "workers": sorted(set(rows["worker"]) - {"cache"}),
        }
    ray.shutdown()
    out["ray_over_serial"] = out["ray"]["trials_per_s"] / out["serial"]["trials_per_s"]
    return out


def quality(models: tuple[str, ...], trials: int) -> list[dict[str, Any]]:
    """Best-so-far / exact optimum per sampler and model."""
    from fusiontune.search.api import search

    rows = []
    for model in models:
        for sampler in QUALITY_SAMPLERS:
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                result = search(model, trials=trials, sampler=sampler, backend="serial", out=tmp)
                seconds = time.perf_counter() - start
            t = result.trials
            optimum = float(t.loc[t["source"] == "oracle", "value_0"].iloc[0])
            search_rows = t[t["source"] == "search"].sort_values("trial")
            feasible = search_rows["value_0"].where(search_rows["feasible"])
            best_so_far = feasible.cummin().ffill().tolist()
            rows.append(
                {
                    "model": model,
                    "sampler": sampler,
                    "trials": trials,
                    "seconds": seconds,
                    "optimum_bytes": optimum,
                    "greedy_over_optimum": float(t.loc[t["source"] == "greedy", "value_0"].iloc[0])
                    / optimum,
                    "unfused_over_optimum": float(
                        t.loc[t["source"] == "unfused", "value_0"].iloc[0]
                    )
                    / optimum,
                    "best_over_optimum": result.best_over_optimum,
                    "best_over_optimum_at": {
                        str(k): best_so_far[k - 1] / optimum for k in CHECKPOINTS if k <= trials
                    },
                    "distinct_plans": int(search_rows["plan_hash"].nunique()),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small budgets (smoke run)")
    args = parser.parse_args()
    n_tp = 40 if args.quick else THROUGHPUT_TRIALS
    n_q = 30 if args.quick else QUALITY_TRIALS
    report = {"throughput": throughput(n_tp), "quality": quality(QUALITY_MODELS, n_q)}
    print(json.dumps(report["throughput"], indent=2))
    out = ROOT / "results" / "bench_search.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
