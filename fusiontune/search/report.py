"""``fusiontune report DIR``: a markdown summary and PNG plots of a finished search.

Plots (matplotlib, Agg backend, no display needed):

- ``history.png``: objective of each trial and best-so-far, with the baselines as lines;
- ``pareto.png``: traffic vs energy of all feasible trials with the Pareto front (``multi``);
- ``groups.png``: traffic per group of the best plan next to the unfused plan.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from fusiontune.search.results import SearchResult

REPORT_FILE = "report.md"
FIG_SIZE_IN = (7.0, 4.0)
"""Figure size in inches (readable in a markdown viewer at 100 dpi)."""
FIG_DPI = 100
BASELINE_STYLES = {
    "unfused": ("tab:red", "--"),
    "greedy": ("tab:purple", "-."),
    "exhaustive": ("tab:green", ":"),
    "oracle": ("black", "-"),
}
"""Colour and line style of each baseline's horizontal line in history.png."""
TOP_GROUPS = 30
"""Largest number of groups drawn per bar chart (the heaviest ones)."""


def write_report(directory: str | Path) -> Path:
    """Write ``report.md`` and the PNG plots into a results folder; return the markdown path."""
    import matplotlib

    matplotlib.use("Agg")
    from fusiontune.search.results import load_results, write_text

    result = load_results(directory)
    d = Path(directory)
    images = [
        _plot_history(result, d / "history.png"),
        _plot_pareto(result, d / "pareto.png"),
        _plot_groups(result, d / "groups.png"),
    ]
    text = _markdown(result, [p for p in images if p is not None])
    write_text(text, d / REPORT_FILE)
    return d / REPORT_FILE


def _search_rows(trials: pd.DataFrame) -> pd.DataFrame:
    rows = trials[(trials["source"] == "search") & (trials["state"] == "COMPLETE")]
    return rows.sort_values("trial")


def _plot_history(result: SearchResult, path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    rows = _search_rows(result.trials)
    if rows.empty:
        return None
    feasible = rows[rows["feasible"]]
    fig, ax = plt.subplots(figsize=FIG_SIZE_IN)
    ax.plot(rows["trial"], rows["value_0"], ".", color="0.6", label="trial")
    if not feasible.empty:
        ax.step(
            feasible["trial"], feasible["value_0"].cummin(), "b-", where="post", label="best so far"
        )
    base = result.trials[result.trials["source"] != "search"]
    for row in base.itertuples(index=False):
        color, style = BASELINE_STYLES.get(row.source, ("tab:cyan", "-"))
        label = "exact optimum" if row.source == "oracle" else row.source
        ax.axhline(row.value_0, color=color, linestyle=style, linewidth=1, label=label)
    ax.set_yscale("log")  # unfused is often 10x the optimum: keep the gap near it readable
    ax.set_xlabel("trial")
    ax.set_ylabel(f"objective ({result.summary.get('objective', '')}, first value)")
    ax.set_title(f"{result.summary.get('model', '')}: optimisation history")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=FIG_DPI)
    plt.close(fig)
    return path


def pareto_mask(points: Any) -> Any:
    """Boolean mask of the non-dominated rows of an (n, k) array (all objectives minimised)."""
    import numpy as np

    pts = np.asarray(points, dtype=float)
    keep = np.ones(len(pts), dtype=bool)
    for i in range(len(pts)):
        dominated = np.all(pts <= pts[i], axis=1) & np.any(pts < pts[i], axis=1)
        keep[i] = not dominated.any()
    return keep


def _plot_pareto(result: SearchResult, path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    rows = _search_rows(result.trials)
    rows = rows[rows["feasible"]].drop_duplicates(["plan_hash", "hw_hash"])
    if result.summary.get("objective") != "multi" or rows.empty:
        return None
    cols = ["traffic_bytes", "energy_pj", "cycles"]
    front = rows[pareto_mask(rows[cols].to_numpy())]
    fig, ax = plt.subplots(figsize=FIG_SIZE_IN)
    ax.scatter(rows["traffic_bytes"] / 1e6, rows["energy_pj"] / 1e6, s=8, c="0.6", label="trial")
    ax.scatter(
        front["traffic_bytes"] / 1e6, front["energy_pj"] / 1e6, s=20, c="b", label="Pareto front"
    )
    ax.set_xlabel("traffic (MB)")
    ax.set_ylabel("energy (uJ)")
    ax.set_title(f"{result.summary.get('model', '')}: Pareto front (traffic, energy, cycles)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=FIG_DPI)
    plt.close(fig)
    return path


def _group_traffic(result: SearchResult, plan_hash: str) -> pd.DataFrame:
    g = result.groups[result.groups["plan_hash"] == plan_hash]
    return g.drop_duplicates("group").sort_values("group")


def _plot_groups(result: SearchResult, path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    best_hash = result.summary["best"]["plan_hash"]
    base = result.trials[result.trials["source"] == "unfused"]
    best = _group_traffic(result, best_hash)
    if best.empty or "traffic_bytes" not in best:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(FIG_SIZE_IN[0] * 1.6, FIG_SIZE_IN[1]))
    panels = [("best plan", best)]
    if not base.empty:
        panels.append(("unfused", _group_traffic(result, base["plan_hash"].iloc[0])))
    for ax, (title, g) in zip(axes, panels):
        top = g.nlargest(TOP_GROUPS, "traffic_bytes").sort_values("group")
        ax.bar(
            range(len(top)), top["traffic_bytes"] / 1e6, color="b" if title == "best plan" else "r"
        )
        ax.set_xticks(range(len(top)))
        ax.set_xticklabels([str(i) for i in top["group"]], fontsize=6)
        ax.set_xlabel(f"group (the {min(TOP_GROUPS, len(g))} heaviest, in plan order)")
        ax.set_ylabel("traffic (MB)")
        ax.set_title(f"{title}: {len(g)} groups, {g['traffic_bytes'].sum() / 1e6:,.2f} MB")
    if len(panels) == 1:
        axes[1].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=FIG_DPI)
    plt.close(fig)
    return path


def _markdown(result: SearchResult, images: list[Path]) -> str:
    s = result.summary
    search = result.trials[result.trials["source"] == "search"]
    lines = [
        f"# fusiontune search: {s.get('model')} (study {s.get('study')})",
        "",
        f"- objective **{s.get('objective')}**, sampler {s.get('sampler')}, "
        f"{len(search)} trials ({int((search['state'] == 'COMPLETE').sum())} complete, "
        f"{int((search['duplicate_of'] >= 0).sum())} answered from the cache, "
        f"{int((search['state'] == 'FAIL').sum())} failed)",
        f"- {s.get('n_edges')} candidate fusion edges, {s.get('n_merge_choices')} merge/stream "
        f"choices, {'' if s.get('count_plans_exact', True) else 'at least '}"
        f"{s.get('count_plans', '?')} legal plans",
        f"- graph hash `{s.get('graph_hash')}`, fusiontune {s.get('fusiontune_version')}",
        "",
        "| plan | traffic (bytes) | energy (pJ) | cycles | objective |",
        "|---|---:|---:|---:|---:|",
    ]
    best = s["best"]
    lines.append(
        f"| **best found** (trial {best['trial']}) | {_num(best.get('traffic_bytes'))} | "
        f"{_num(best.get('energy_pj'))} | {_num(best.get('cycles'))} | {_num(best['values'][0])} |"
    )
    for name, b in s.get("baselines", {}).items():
        label = "exact optimum (oracle)" if name == "oracle" else name
        lines.append(
            f"| {label} | {_num(b.get('traffic_bytes'))} | {_num(b.get('energy_pj'))} | "
            f"{_num(b.get('cycles'))} | {_num(b['values'][0] if b.get('values') else None)} |"
        )
    bounds = s.get("lower_bounds") or {}
    compulsory = bounds.get("compulsory_bytes", best.get("lower_bound_bytes"))
    lines.append(f"| lower bound, compulsory | {_num(compulsory)} | | | |")
    if "capacity_bytes" in bounds:
        lines.append(f"| lower bound, with capacity | {_num(bounds['capacity_bytes'])} | | | |")
    lines.append("")
    if "traffic_saved_vs_unfused" in s:
        lines.append(f"Traffic saved vs unfused: **{100 * s['traffic_saved_vs_unfused']:.1f} %**.")
    if "best_over_optimum" in s:
        lines.append(
            f"Best found / proven optimum ({s.get('oracle_objective')}): "
            f"**{s['best_over_optimum']:.4f}**."
        )
    if s.get("oracle_status") == "optimal":
        lines.append(
            "The optimum is proven over all legal partitions (no cap on group size), "
            f"in {s.get('oracle_s', 0.0):.2f} s."
        )
    elif s.get("oracle_status") == "time_limit":
        lines.append(f"The optimizer stopped at its time limit with a proven gap of "
                     f"{100 * s.get('oracle_gap', 0.0):.2f} %.")  # fmt: skip
    lines.append("")
    lines += [f"![{p.stem}]({p.name})" for p in images]
    return "\n".join(lines) + "\n"


def _num(value: Any) -> str:
    if value is None:
        return "-"
    value = float(value)
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"
