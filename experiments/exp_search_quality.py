"""Search quality: best-so-far traffic vs trials for tpe, random, nsga2 and local against the
optimum.

For three zoo models on two hardware presets (``isaac_reram_flat``, the default, and
``sram_edge``), each sampler runs with three seeds through ``fusiontune.search.search`` (serial
backend, traffic objective, fusion decisions only); the best feasible traffic after every trial
is divided by the proven optimum of ``fusiontune.optimal_plan`` (no cap on group size).
Beside it: the former capped optimum (at most 12 ops per group) and the capacity-aware lower
bound. Reported per (model, preset, sampler, seed): the final ratios and the trials needed to
come within 1 % of the optimum; per (model, preset, sampler): the median over seeds.

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
from fusiontune.planner.plan import PlannerConfig
from fusiontune.sim.hardware import load_hardware

MODELS: tuple[tuple[str, int | None], ...] = (
    ("resnet18", None),  # 224x224
    ("mobilenet_v2", None),  # 224x224
    ("bert_encoder", None),  # sequence length 128
)
SAMPLERS = ("tpe", "random", "nsga2", "local")
SEEDS = (0, 1, 2)
DEFAULT_TRIALS = 300  # the default search budget (search_spaces/default.yaml)
PRESETS = ("isaac_reram_flat", "sram_edge")
CAPPED = PlannerConfig(max_group_size=12)  # the former rule 8: at most 12 ops per group
WITHIN = 0.01  # "within 1 % of the optimum"
PLOT_DPI = 80
PLOT_PANEL_IN = (3.4, 2.9)  # width, height of one (model, preset) panel


@dataclass(frozen=True)
class Curve:
    """Best feasible traffic after each trial of one search run (None before the first)."""

    model: str
    preset: str
    sampler: str
    seed: int
    best_bytes: tuple[int | None, ...]
    seconds: float


@dataclass(frozen=True)
class Reference:
    """What a search is measured against on one (model, preset), bytes."""

    optimum: int  # proven, no cap on group size
    capped12: int  # proven among groups of at most 12 ops
    capacity_bound: int
    compulsory_bound: int


def run_search(graph: Graph, preset: str, sampler: str, seed: int, trials: int) -> Curve:
    """One search; the best-so-far curve in trial order."""
    from fusiontune.search.api import search
    from fusiontune.search.space import parse_space

    space = parse_space(
        {"hardware": preset, "objective": "traffic", "sampler": sampler, "trials": trials},
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
    return Curve(graph.name, preset, sampler, seed, tuple(curve), seconds)


def trials_to_within(curve: Curve, optimum: float, within: float = WITHIN) -> int | None:
    """1-based trial count at which the best-so-far first is within ``within`` of optimum."""
    for i, value in enumerate(curve.best_bytes):
        if value is not None and value <= optimum * (1.0 + within):
            return i + 1
    return None


def reference(graph: Graph, preset: str) -> Reference:
    """The uncapped and capped optima and both lower bounds on one preset."""
    from fusiontune.search.optimize import optimal_plan
    from fusiontune.sim.bounds import capacity_bound
    from fusiontune.sim.cost import lower_bound

    hw = load_hardware(preset)
    best = optimal_plan(graph, hw, "traffic")
    capped = optimal_plan(graph, hw, "traffic", config=CAPPED)
    if best.value is None or capped.value is None or not best.proven:
        raise RuntimeError(f"{graph.name}: no proven feasible optimum on {preset}")
    return Reference(
        int(best.value), int(capped.value), capacity_bound(graph, hw), lower_bound(graph, hw)
    )


def run(
    models: Sequence[tuple[str, int | None]] = MODELS,
    samplers: Sequence[str] = SAMPLERS,
    seeds: Sequence[int] = SEEDS,
    trials: int = DEFAULT_TRIALS,
    presets: Sequence[str] = PRESETS,
) -> tuple[list[Curve], dict[tuple[str, str], Reference]]:
    """Every (model, preset, sampler, seed) curve and each (model, preset)'s reference."""
    curves: list[Curve] = []
    refs: dict[tuple[str, str], Reference] = {}
    for name, size in models:
        graph = build_zoo(name, input_size=size)
        for preset in presets:
            refs[graph.name, preset] = reference(graph, preset)
            for sampler in samplers:
                for seed in seeds:
                    curves.append(run_search(graph, preset, sampler, seed, trials))
                    print(f"  {name} on {preset}, {sampler} seed {seed}: "
                          f"{curves[-1].seconds:.0f} s", flush=True)  # fmt: skip
    return curves, refs


def _over(value: int | None, ref: int) -> float | None:
    return None if value is None else value / ref


def run_rows(
    curves: Sequence[Curve], refs: dict[tuple[str, str], Reference]
) -> list[dict[str, Any]]:
    """One row per search run."""
    rows = []
    for c in curves:
        ref = refs[c.model, c.preset]
        final = c.best_bytes[-1] if c.best_bytes else None
        rows.append(
            {
                "model": c.model,
                "preset": c.preset,
                "sampler": c.sampler,
                "seed": c.seed,
                "trials": len(c.best_bytes),
                "optimum_bytes": ref.optimum,
                "capped12_bytes": ref.capped12,
                "capacity_bound_bytes": ref.capacity_bound,
                "best_bytes": final,
                "best_over_optimum": _over(final, ref.optimum),
                "best_over_capped12": _over(final, ref.capped12),
                "best_over_capacity_bound": _over(final, ref.capacity_bound),
                "trials_to_1pct": trials_to_within(c, ref.optimum),
                "seconds": round(c.seconds, 1),
            }
        )
    return rows


def median_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median over seeds per (model, preset, sampler); runs that never got within 1 % count
    as ``trials + 1`` in the median and are counted in ``runs_within_1pct``."""
    out = []
    keys = dict.fromkeys((r["model"], r["preset"], r["sampler"]) for r in rows)
    for model, preset, sampler in keys:
        group = [
            r for r in rows
            if r["model"] == model and r["preset"] == preset and r["sampler"] == sampler
        ]  # fmt: skip
        ratios = [r["best_over_optimum"] for r in group if r["best_over_optimum"] is not None]
        capped = [r["best_over_capped12"] for r in group if r["best_over_capped12"] is not None]
        reached = [r["trials_to_1pct"] for r in group if r["trials_to_1pct"] is not None]
        needed = [
            r["trials_to_1pct"] if r["trials_to_1pct"] is not None else r["trials"] + 1
            for r in group
        ]
        out.append(
            {
                "model": model,
                "preset": preset,
                "sampler": sampler,
                "seeds": len(group),
                "runs_feasible": len(ratios),
                "median_best_over_optimum": statistics.median(ratios) if ratios else None,
                "worst_best_over_optimum": max(ratios) if ratios else None,
                "median_best_over_capped12": statistics.median(capped) if capped else None,
                "runs_within_1pct": len(reached),
                "median_trials_to_1pct": statistics.median(needed),
                "median_seconds": statistics.median(r["seconds"] for r in group),
            }
        )
    return out


def start_notes(curves: Sequence[Curve], refs: dict[tuple[str, str], Reference]) -> list[str]:
    """Per (model, preset): where the runs start (trial 1, the greedy plan) and how many
    never improved on it."""
    out = []
    for model, preset in dict.fromkeys((c.model, c.preset) for c in curves):
        runs = [c for c in curves if c.model == model and c.preset == preset and c.best_bytes]
        if not runs:
            continue
        first = runs[0].best_bytes[0]
        if first is None:
            out.append(
                f"{model} on {preset}: trial 1 (the hardware-aware greedy plan) is infeasible "
                "there; every curve starts at the first feasible plan a sampler finds."
            )
            continue
        stuck = [c for c in runs if c.best_bytes[-1] == c.best_bytes[0]]
        ratio = first / refs[model, preset].optimum
        out.append(
            f"{model} on {preset}: trial 1 (the greedy plan) is {ratio:.3f} x the optimum; "
            f"{len(stuck)} of {len(runs)} runs never improved on it."
        )
    return out


def plot(curves: Sequence[Curve], refs: dict[tuple[str, str], Reference], path: Path) -> None:
    """One panel per (preset, model): best-so-far / optimum vs trial, median and range over
    seeds (gaps where no run has a feasible plan yet)."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    models = list(dict.fromkeys(c.model for c in curves))
    presets = list(dict.fromkeys(c.preset for c in curves))
    size = (PLOT_PANEL_IN[0] * len(models), PLOT_PANEL_IN[1] * len(presets))
    fig, axes = plt.subplots(len(presets), len(models), figsize=size, squeeze=False)
    for row, preset in zip(axes, presets):
        for ax, model in zip(row, models):
            optimum = refs[model, preset].optimum
            for sampler in dict.fromkeys(c.sampler for c in curves):
                runs = [
                    c for c in curves
                    if c.model == model and c.preset == preset and c.sampler == sampler
                ]  # fmt: skip
                n = min(len(c.best_bytes) for c in runs)
                data = np.array(
                    [[np.nan if v is None else v / optimum for v in c.best_bytes[:n]] for c in runs]
                )
                x = np.arange(1, n + 1)
                with warnings.catch_warnings():  # all-NaN columns: no feasible plan yet
                    warnings.simplefilter("ignore", RuntimeWarning)
                    mid, lo, hi = (f(data, axis=0) for f in (np.nanmedian, np.nanmin, np.nanmax))
                (line,) = ax.plot(x, mid, label=sampler)
                ax.fill_between(x, lo, hi, alpha=0.2, color=line.get_color())
            ax.axhline(1.0 + WITHIN, color="k", ls=":", lw=1)
            ax.set_xscale("log")
            ax.set_title(f"{model}, {preset}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
        row[0].set_ylabel("best traffic / optimum")
    for ax in axes[-1]:
        ax.set_xlabel("trial")
    axes[-1][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=PLOT_DPI)
    plt.close(fig)


def reading(medians: Sequence[dict[str, Any]]) -> list[str]:
    """Per preset, what the medians say: which samplers reach the optimum, how far the others
    end, and whether the preset separates the samplers at all."""
    out = []
    for preset in dict.fromkeys(r["preset"] for r in medians):
        rows = [r for r in medians if r["preset"] == preset]
        models = list(dict.fromkeys(r["model"] for r in rows))
        if all(r["median_trials_to_1pct"] == 1 for r in rows):
            out.append(
                f"On {preset} every sampler is within 1 % of the optimum from trial 1 on every "
                "model (the greedy start is already optimal there): this preset does not "
                "separate the samplers."
            )
            continue
        parts = []
        for sampler in dict.fromkeys(r["sampler"] for r in rows):
            mine = {r["model"]: r for r in rows if r["sampler"] == sampler}
            ratios = " / ".join(f"{mine[m]['median_best_over_optimum']:.3f}" for m in models)
            within = sum(mine[m]["runs_within_1pct"] for m in models)
            total = sum(mine[m]["seeds"] for m in models)
            parts.append(f"{sampler} {ratios} ({within}/{total} runs within 1 %)")
        out.append(
            f"On {preset}, median best / optimum after the budget ({' / '.join(models)}): "
            + "; ".join(parts)
            + "."
        )
    out.append(
        "The local sampler (fusiontune's default: moves from the incumbent, repeats improving "
        "moves across blocks, flips sibling edges together) makes the coordinated edge "
        "decisions a long group needs; independent per-edge sampling plus plan repair rarely "
        "does. The exact optimizer (additive objective, fixed hardware) remains the reference "
        "and is reported with every search."
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=DEFAULT_TRIALS)
    parser.add_argument("--presets", nargs="*", default=list(PRESETS))
    args = parser.parse_args()
    start = time.perf_counter()
    curves, refs = run(trials=args.trials, presets=args.presets)
    rows = run_rows(curves, refs)
    medians = median_rows(rows)
    print_rows("Per run", rows)
    print_rows("Median over seeds", medians)
    notes = [
        *start_notes(curves, refs),
        *reading(medians),
        f"Hardware {', '.join(args.presets)}; objective traffic_bytes; {args.trials} trials "
        "per run; serial backend; models at their default sizes (CNNs 224x224, bert_encoder "
        "sequence 128).",
        "best_over_optimum: best feasible traffic found / the proven optimum over all legal "
        "partitions (no cap on group size; 1.0 = optimal). best_over_capped12: the same "
        "against the former optimum among groups of at most 12 ops (below 1: the search beat "
        "the old 'optimum'). best_over_capacity_bound: against the capacity-aware lower "
        "bound. trials_to_1pct: first trial whose best-so-far is within 1 % of the optimum "
        "(empty: never within the budget; counted as trials + 1 in the medians).",
        "Every run starts from four enqueued plans: the hardware-aware greedy plan (trial 1: "
        "groups join only when the union fits the chip), the hardware-blind greedy plan "
        "(maximal fusion, often one whole-network group), the TVM-like and the unfused plan. "
        "The later trials are the sampler's own.",
        f"Total wall time {time.perf_counter() - start:.0f} s. Plot: exp_search_quality.png "
        "(median over seeds, band = min..max; dotted line = 1 % above the optimum).",
    ]
    write_outputs(
        "search_quality",
        "Search quality: best-so-far vs trials against the exact optimum",
        [("Per run", rows), ("Median over seeds", medians)],
        notes,
    )
    plot(curves, refs, RESULTS_DIR / "exp_search_quality.png")


if __name__ == "__main__":
    main()
