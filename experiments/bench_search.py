"""Search benchmark -> results/bench_search.json.

1. Throughput: trials per second of the same search (random sampler, no duplicates to speak
   of) on the serial backend and on Ray with 2 workers; the ratio Ray / serial.
2. Quality: best-so-far traffic of tpe, random, nsga2 and local (fusiontune's local-search
   sampler) against the exact optimum (MILP oracle) on three zoo models, as best/optimum
   ratios at a few checkpoints, for several seeds; ``quality_summary`` gives the mean, min and
   max over the seeds.
3. Co-design: best energy of tpe, local and local-tpe on ``search_spaces/codesign.yaml``
   (hardware knobs, so no oracle), relative to tpe.

Run from the repository root: ``python experiments/bench_search.py [--quick] [--seeds N]
[--keep-throughput]`` (the full run takes about 8 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import statistics
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
QUALITY_SAMPLERS = ("tpe", "random", "nsga2", "local")
QUALITY_TRIALS = 300
QUALITY_SEEDS = 3
CHECKPOINTS = (10, 30, 100, 300)
CODESIGN_MODEL = "resnet18"
CODESIGN_SAMPLERS = ("tpe", "local", "local-tpe")
CODESIGN_TRIALS = 150
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


def quality(models: tuple[str, ...], trials: int, seeds: int) -> list[dict[str, Any]]:
    """Best-so-far / exact optimum per model, sampler and seed."""
    from fusiontune.search.api import search

    rows = []
    for model in models:
        for sampler in QUALITY_SAMPLERS:
            for seed in range(seeds):
                with tempfile.TemporaryDirectory() as tmp:
                    start = time.perf_counter()
                    result = search(
                        model, trials=trials, sampler=sampler, seed=seed, backend="serial", out=tmp
                    )
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
                        "seed": seed,
                        "trials": trials,
                        "seconds": seconds,
                        "optimum_bytes": optimum,
                        "greedy_over_optimum": _baseline(t, "greedy") / optimum,
                        "unfused_over_optimum": _baseline(t, "unfused") / optimum,
                        "best_over_optimum": result.best_over_optimum,
                        "best_over_optimum_at": {
                            str(k): best_so_far[k - 1] / optimum for k in CHECKPOINTS if k <= trials
                        },
                        "distinct_plans": int(search_rows["plan_hash"].nunique()),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    return rows


def _baseline(trials: Any, source: str) -> float:
    return float(trials.loc[trials["source"] == source, "value_0"].iloc[0])


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean, min and max best/optimum over the seeds at each checkpoint, per model and sampler."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["sampler"]), []).append(row)
    out = []
    for (model, sampler), runs in groups.items():
        at: dict[str, dict[str, float]] = {}
        for k in runs[0]["best_over_optimum_at"]:
            values = [r["best_over_optimum_at"][k] for r in runs]
            at[k] = {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}
        out.append(
            {
                "model": model,
                "sampler": sampler,
                "seeds": len(runs),
                "best_over_optimum_at": at,
                "seconds_mean": statistics.fmean(r["seconds"] for r in runs),
            }
        )
    return out


def codesign(trials: int) -> dict[str, Any]:
    """Best energy of each sampler on the co-design space (knobs searched, no oracle)."""
    from fusiontune.search.api import search

    space = ROOT / "search_spaces" / "codesign.yaml"
    best: dict[str, float] = {}
    for sampler in CODESIGN_SAMPLERS:
        with tempfile.TemporaryDirectory() as tmp:
            result = search(
                CODESIGN_MODEL,
                space=space,
                trials=trials,
                sampler=sampler,
                seed=0,
                backend="serial",
                out=tmp,
                baselines=False,
            )
        rows = result.trials[(result.trials["source"] == "search") & result.trials["feasible"]]
        best[sampler] = float(rows["value_0"].min())
        print(f"codesign {sampler}: best energy {best[sampler]:.4g} pJ", flush=True)
    return {
        "model": CODESIGN_MODEL,
        "space": "search_spaces/codesign.yaml",
        "trials": trials,
        "best_energy_pj": best,
        "best_over_tpe": {k: v / best["tpe"] for k, v in best.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small budgets (smoke run)")
    parser.add_argument("--seeds", type=int, default=QUALITY_SEEDS, help="seeds per sampler")
    parser.add_argument(
        "--keep-throughput",
        action="store_true",
        help="keep the throughput section of the existing results file instead of re-measuring",
    )
    args = parser.parse_args()
    n_tp = 40 if args.quick else THROUGHPUT_TRIALS
    n_q = 30 if args.quick else QUALITY_TRIALS
    out = ROOT / "results" / "bench_search.json"
    if args.keep_throughput and out.is_file():
        tp = json.loads(out.read_text())["throughput"]
    else:
        tp = throughput(n_tp)
    rows = quality(QUALITY_MODELS, n_q, args.seeds)
    report = {
        "throughput": tp,
        "quality_summary": summarize(rows),
        "codesign": codesign(30 if args.quick else CODESIGN_TRIALS),
        "quality": rows,
    }
    print(json.dumps(report["throughput"], indent=2))
    print(json.dumps(report["quality_summary"], indent=2))
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
