"""Search quality: best-so-far traffic vs trials for tpe, random and nsga2 against the optimum.

For three zoo models on the default hardware (``isaac_reram``), each sampler runs with three
seeds through ``fusiontune.search.search`` (serial backend, traffic objective, fusion decisions
only); the best feasible traffic after every trial is divided by the proven optimum of
``fusiontune.optimal_plan``. Reported per (model, sampler, seed): the final
ratio and the trials needed to come within 1 % of the optimum; per (model, sampler): the
median over seeds.

Writes ``results/exp_search_quality.csv`` (per run), ``results/exp_search_quality_2.csv``
(medians), ``results/exp_search_quality.md`` and ``results/exp_search_quality.png``. Usage:
``python experiments/exp_search_quality.py [--trials 300]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exp_common import RESULTS_DIR, print_rows, write_outputs

from fusiontune.frontend.zoo import build_zoo
from fusiontune.ir.graph import Graph
from fusiontune.sim.hardware import load_hardware

MODELS: tuple[tuple[str, int | None], ...] = (
    ("resnet18", None),  # 224x224
    ("mobilenet_v2", None),  # 224x224
    ("bert_encoder", None),  # sequence length 128
)
SAMPLERS = ("tpe", "random", "nsga2", "local")
SEEDS = (0, 1, 2)
DEFAULT_TRIALS = 300  # the default search budget (search_spaces/default.yaml)
PRESET = "isaac_reram"
WITHIN = 0.01  # "within 1 % of the optimum"
PLOT_DPI = 80
PLOT_SIZE_IN = (10.0, 3.4)


@dataclass(frozen=True)
class Curve:
    """Best feasible traffic after each trial of one search run (None before the first)."""

    model: str
    sampler: str
    seed: int
    best_bytes: tuple[int | None, ...]
    seconds: float


def run_search(graph: Graph, sampler: str, seed: int, trials: int) -> Curve:
    """One search; the best-so-far curve in trial order."""
    from fusiontune.search.api import search
    from fusiontune.search.space import parse_space

    space = parse_space(
        {"hardware": PRESET, "objective": "traffic", "sampler": sampler, "trials": trials},
        source="exp_search_quality",
    )
    records: list[Any] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        search(graph, space=space, seed=seed, out=out, baselines=False, on_record=records.append)
    seconds = time.perf_counter() - start
    records.sort(key=lambda r: r.trial)
    best: int | None = None
    curve: list[int | None] = []
    for r in records:
        if r.state == "COMPLETE" and r.feasible:
            value = int(r.metrics["traffic_bytes"])
            best = value if best is None else min(best, value)
        curve.append(best)
    return Curve(graph.name, sampler, seed, tuple(curve), seconds)


def trials_to_within(curve: Curve, optimum: float, within: float = WITHIN) -> int | None:
    """1-based trial count at which the best-so-far first is within ``within`` of optimum."""
    for i, value in enumerate(curve.best_bytes):
        if value is not None and value <= optimum * (1.0 + within):
            return i + 1
    return None


def run(
    models: Sequence[tuple[str, int | None]] = MODELS,
    samplers: Sequence[str] = SAMPLERS,
    seeds: Sequence[int] = SEEDS,
    trials: int = DEFAULT_TRIALS,
) -> tuple[list[Curve], dict[str, float]]:
    """Every (model, sampler, seed) curve and each model's proven optimum (bytes)."""
    from fusiontune.search.optimize import optimal_plan

    hw = load_hardware(PRESET)
    curves: list[Curve] = []
    optimum: dict[str, float] = {}
    for name, size in models:
        graph = build_zoo(name, input_size=size)
        oracle = optimal_plan(graph, hw, "traffic")
        if oracle.plan is None:
            raise RuntimeError(f"{name}: no feasible plan on {PRESET}")
        optimum[graph.name] = float(oracle.value or 0)
        for sampler in samplers:
            for seed in seeds:
                curves.append(run_search(graph, sampler, seed, trials))
                print(f"  {name} {sampler} seed {seed}: {curves[-1].seconds:.0f} s", flush=True)
    return curves, optimum


def run_rows(curves: Sequence[Curve], optimum: dict[str, float]) -> list[dict[str, Any]]:
    """One row per search run."""
    rows = []
    for c in curves:
        final = c.best_bytes[-1] if c.best_bytes else None
        rows.append(
            {
                "model": c.model,
                "sampler": c.sampler,
                "seed": c.seed,
                "trials": len(c.best_bytes),
                "optimum_bytes": int(optimum[c.model]),
                "best_bytes": final,
                "best_over_optimum": None if final is None else final / optimum[c.model],
                "trials_to_1pct": trials_to_within(c, optimum[c.model]),
                "seconds": round(c.seconds, 1),
            }
        )
    return rows


def median_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median over seeds per (model, sampler); runs that never got within 1 % count as
    ``trials + 1`` in the median and are counted in ``runs_within_1pct``."""
    out = []
    keys = dict.fromkeys((r["model"], r["sampler"]) for r in rows)
    for model, sampler in keys:
        group = [r for r in rows if r["model"] == model and r["sampler"] == sampler]
        ratios = [r["best_over_optimum"] for r in group if r["best_over_optimum"] is not None]
        reached = [r["trials_to_1pct"] for r in group if r["trials_to_1pct"] is not None]
        needed = [
            r["trials_to_1pct"] if r["trials_to_1pct"] is not None else r["trials"] + 1
            for r in group
        ]
        out.append(
            {
                "model": model,
                "sampler": sampler,
                "seeds": len(group),
                "median_best_over_optimum": statistics.median(ratios) if ratios else None,
                "worst_best_over_optimum": max(ratios) if ratios else None,
                "runs_within_1pct": len(reached),
                "median_trials_to_1pct": statistics.median(needed),
                "median_seconds": statistics.median(r["seconds"] for r in group),
            }
        )
    return out


def stuck_notes(curves: Sequence[Curve], optimum: dict[str, float]) -> list[str]:
    """Per model: how many runs never improved on their first trial (the greedy plan)."""
    out = []
    for model in dict.fromkeys(c.model for c in curves):
        runs = [c for c in curves if c.model == model and c.best_bytes]
        stuck = [c for c in runs if c.best_bytes[-1] == c.best_bytes[0]]
        first = runs[0].best_bytes[0] if runs else None
        ratio = "" if first is None else f" (greedy = {first / optimum[model]:.3f} x optimum)"
        out.append(
            f"{model}: {len(stuck)} of {len(runs)} runs never improved on trial 1, the "
            f"greedy plan{ratio}."
        )
    return out


def plot(curves: Sequence[Curve], optimum: dict[str, float], path: Path) -> None:
    """One panel per model: best-so-far / optimum vs trial, median and range over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    models = list(dict.fromkeys(c.model for c in curves))
    fig, axes = plt.subplots(1, len(models), figsize=PLOT_SIZE_IN, squeeze=False)
    for ax, model in zip(axes[0], models):
        for sampler in dict.fromkeys(c.sampler for c in curves):
            runs = [c for c in curves if c.model == model and c.sampler == sampler]
            n = min(len(c.best_bytes) for c in runs)
            data = np.array(
                [
                    [np.nan if v is None else v / optimum[model] for v in c.best_bytes[:n]]
                    for c in runs
                ]
            )
            x = np.arange(1, n + 1)
            (line,) = ax.plot(x, np.nanmedian(data, axis=0), label=sampler)
            ax.fill_between(
                x, np.nanmin(data, axis=0), np.nanmax(data, axis=0), alpha=0.2,
                color=line.get_color(),
            )  # fmt: skip
        ax.axhline(1.0 + WITHIN, color="k", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_title(model, fontsize=9)
        ax.set_xlabel("trial")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("best traffic / optimum")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=PLOT_DPI)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=DEFAULT_TRIALS)
    args = parser.parse_args()
    start = time.perf_counter()
    curves, optimum = run(trials=args.trials)
    rows = run_rows(curves, optimum)
    medians = median_rows(rows)
    print_rows("Per run", rows)
    print_rows("Median over seeds", medians)
    stuck = stuck_notes(curves, optimum)
    notes = [
        *stuck,
        "Reading: on the larger graphs (resnet18: 69 ops, mobilenet_v2: 152 ops) tpe, random "
        "and nsga2 stay at or near the greedy start within the budget: the optimum needs "
        "many coordinated edge decisions (long stream groups), which independent per-edge "
        "sampling plus plan repair rarely hits. The local sampler (fusiontune's default: "
        "moves from the incumbent, repeats improving moves across blocks, flips sibling "
        "edges together) closes most of that gap; the exact oracle (additive objective, "
        "fixed hardware) remains the reference and is reported with every search.",
        f"Hardware {PRESET}; objective traffic_bytes; {args.trials} trials per run; serial "
        "backend; models at their default sizes (CNNs 224x224, bert_encoder sequence 128).",
        "best_over_optimum: best feasible traffic found / the proven optimum (1.0 = optimal). "
        "trials_to_1pct: first trial whose best-so-far is within 1 % of the optimum (empty: "
        "never within the budget; counted as trials + 1 in the medians).",
        "Trial 1 of every run is the planner's greedy plan (the search driver enqueues it), "
        "so every curve starts at greedy; the later trials are the sampler's own.",
        f"Total wall time {time.perf_counter() - start:.0f} s. Plot: exp_search_quality.png "
        "(median over seeds, band = min..max; dotted line = 1 % above the optimum).",
    ]
    write_outputs(
        "search_quality",
        "Search quality: best-so-far vs trials against the exact optimum",
        [("Per run", rows), ("Median over seeds", medians)],
        notes,
    )
    plot(curves, optimum, RESULTS_DIR / "exp_search_quality.png")


if __name__ == "__main__":
    main()
