"""``fusiontune report DIR``: a markdown summary and PNG plots of a finished search.

Plots (matplotlib, Agg backend, no display needed):

- ``history.png``: objective of each trial and best-so-far, with the baselines as lines (a
  co-design run: at the base hardware and at the best trial's, labelled so);
- ``pareto.png``: traffic vs energy of all feasible trials with the Pareto front (``multi``);
  for a co-design ``multi`` (energy, cycles, area), energy vs area;
- ``groups.png``: traffic per group of the best plan next to the unfused plan;
- ``noc.png`` and a table of the network, replication and pipeline columns, on a many-core
  chip only (:mod:`fusiontune.search.report_cores`).
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
AXES = {
    "traffic_bytes": (1e6, "traffic (MB)"),
    "energy_pj": (1e6, "energy (uJ)"),
    "area_mm2": (1.0, "area (mm2)"),
}
"""Scale and label of each metric drawn on pareto.png."""
FRONT_ROWS = 20
"""Most Pareto points listed in report.md (all are in summary.json)."""
TOP_GROUPS = 30
"""Largest number of groups drawn per bar chart (the heaviest ones)."""


def write_report(directory: str | Path) -> Path:
    """Write ``report.md`` and the PNG plots into a results folder; return the markdown path."""
    import matplotlib

    matplotlib.use("Agg")
    from fusiontune.search.report_cores import NOC_PLOT, plot_noc
    from fusiontune.search.results import load_results, write_text

    result = load_results(directory)
    d = Path(directory)
    images = [
        _plot_history(result, d / "history.png"),
        _plot_pareto(result, d / "pareto.png"),
        _plot_groups(result, d / "groups.png"),
        plot_noc(result, d / NOC_PLOT),
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
    codesign = bool(result.summary.get("knobs"))
    for row in base.itertuples(index=False):
        name = row.source.split("@")[0]
        color, style = BASELINE_STYLES.get(name, ("tab:cyan", "-"))
        label = "exact optimum" if name == "oracle" else name
        at_best = getattr(row, "hw_role", "base") == "best"
        if codesign:
            label += " (best hw)" if at_best else " (base hw)"
        ax.axhline(
            row.value_0,
            color=color,
            linestyle=style,
            linewidth=1,
            alpha=1.0 if at_best or not codesign else 0.4,
            label=label,
        )
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
    cols = list(result.summary.get("objective_metrics") or ("traffic_bytes", "energy_pj", "cycles"))
    front = rows[pareto_mask(rows[cols].to_numpy())]
    x, y = ("area_mm2", "energy_pj") if "area_mm2" in cols else ("traffic_bytes", "energy_pj")
    (x_scale, x_label), (y_scale, y_label) = AXES[x], AXES[y]
    fig, ax = plt.subplots(figsize=FIG_SIZE_IN)
    ax.scatter(rows[x] / x_scale, rows[y] / y_scale, s=8, c="0.6", label="trial")
    ax.scatter(front[x] / x_scale, front[y] / y_scale, s=20, c="b", label="Pareto front")
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    names = ", ".join(c.split("_")[0] for c in cols)
    ax.set_title(f"{result.summary.get('model', '')}: Pareto front ({names})")
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
    from fusiontune.search.report_cores import core_markdown

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
        "| plan | hardware | traffic (bytes) | energy (pJ) | cycles | objective |",
        "|---|---|---:|---:|---:|---:|",
    ]
    best = s["best"]
    best_hw = best.get("hardware") or {}
    lines.append(
        f"| **best found** (trial {best['trial']}) | {_hw_cell(best_hw, 'trial')} | "
        f"{_num(best.get('traffic_bytes'))} | {_num(best.get('energy_pj'))} | "
        f"{_num(best.get('cycles'))} | {_num(best['values'][0])} |"
    )
    lines += _baseline_table_rows(s, best)
    at_best = s.get("at_best_hardware") or {}
    if at_best.get("baselines"):
        lines += _baseline_table_rows(at_best, best)
    lines.append("")
    lines += _hardware_legend(s)
    if "traffic_saved_vs_unfused" in s:
        lines.append(f"Traffic saved vs unfused: **{100 * s['traffic_saved_vs_unfused']:.1f} %**.")
    if "best_over_optimum" in s:
        lines.append(
            f"Best found / proven optimum ({s.get('oracle_objective')}): "
            f"**{s['best_over_optimum']:.4f}**."
        )
    if "best_over_optimum" in at_best:
        lines.append(
            f"Best found / proven optimum at the best trial's hardware "
            f"({at_best.get('oracle_objective')}): **{at_best['best_over_optimum']:.4f}**."
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
    lines += _hardware_markdown(s)
    lines += core_markdown(result, _num)
    lines += [f"![{p.stem}]({p.name})" for p in images]
    return "\n".join(lines) + "\n"


def _hw_cell(hardware: dict[str, Any], role: str | None = None) -> str:
    """The hardware column of the results table: role and hash (knobs: the legend below)."""
    role = role or hardware.get("role") or ""
    return f"{role} `{hardware.get('hw_hash', '?')}`".strip()


def _baseline_table_rows(block: dict[str, Any], best: dict[str, Any]) -> list[str]:
    """Table rows of the baselines, lower bounds of one hardware (``block``: the summary, or
    its ``at_best_hardware`` part)."""
    lines = []
    cell = ""
    for name, b in block.get("baselines", {}).items():
        label = "exact optimum (oracle)" if name == "oracle" else name
        cell = _hw_cell(b.get("hardware") or {})
        lines.append(
            f"| {label} | {cell} | {_num(b.get('traffic_bytes'))} | {_num(b.get('energy_pj'))} | "
            f"{_num(b.get('cycles'))} | {_num(b['values'][0] if b.get('values') else None)} |"
        )
    bounds = block.get("lower_bounds") or {}
    compulsory = bounds.get("compulsory_bytes", best.get("lower_bound_bytes"))
    lines.append(f"| lower bound, compulsory | {cell} | {_num(compulsory)} | | | |")
    if "capacity_bytes" in bounds:
        lines.append(
            f"| lower bound, with capacity | {cell} | {_num(bounds['capacity_bytes'])} | | | |"
        )
    return lines


def _hardware_legend(s: dict[str, Any]) -> list[str]:
    """What each hardware of the table is: name, hash and the searched knobs' values."""
    seen: dict[str, dict[str, Any]] = {}
    for block in (s, s.get("at_best_hardware") or {}):
        for b in (block.get("baselines") or {}).values():
            hw = b.get("hardware") or {}
            seen.setdefault(str(hw.get("role")), hw)
    lines = []
    for role, hw in seen.items():
        knobs = ", ".join(f"`{k}` = {v}" for k, v in (hw.get("knobs") or {}).items())
        lines.append(
            f"- {role} hardware: {hw.get('name')} `{hw.get('hw_hash')}`"
            + (f" ({knobs})" if knobs else "")
        )
    if (s.get("at_best_hardware") or {}).get("same_as_base"):
        lines.append("- the best trial kept the base hardware: the base rows are at it")
    return [*lines, ""] if lines else []


def _hardware_markdown(s: dict[str, Any]) -> list[str]:
    """The chosen hardware, the plan's certificate and (``multi``) the Pareto front."""
    hw = s["best"].get("hardware") or {}
    if not hw:
        return []
    base = s.get("hardware_base") or {}
    lines = [
        "## Hardware",
        "",
        f"- base: {base.get('name')} (`{base.get('hw_hash')}`)",
        f"- best trial's hardware: {hw.get('name')} (`{hw.get('hw_hash')}`), "
        f"area {_num(hw.get('area_mm2'))} mm²",
    ]
    lines += [f"  - `{k}` = {v}" for k, v in (hw.get("knobs") or {}).items()]
    if "best_hardware" in s.get("files", {}):
        lines.append("- every field: `best_hardware.yaml` (loads with `--hardware`)")
    cert = s["best"].get("plan_certificate")
    if cert:
        lines.append(
            f"- plan: solved exactly for this hardware ({cert.get('status')}, proven "
            f"{cert.get('proven')}, gap {cert.get('gap')})"
        )
    front = s.get("pareto_front") or []
    metrics = s.get("objective_metrics") or []
    if front:
        knobs = list(front[0]["hardware"])
        lines += [
            "",
            f"Pareto front: {len(front)} designs"
            + (f" (first {FRONT_ROWS})" if len(front) > FRONT_ROWS else ""),
            "",
            "| trial | " + " | ".join(metrics + knobs) + " | plan proven |",
            "|---:|" + "---:|" * (len(metrics) + len(knobs)) + "---|",
        ]
        for p in front[:FRONT_ROWS]:
            cells = [_num(p.get(m)) for m in metrics] + [str(p["hardware"][k]) for k in knobs]
            lines.append(f"| {p['trial']} | " + " | ".join(cells) + f" | {p.get('plan_proven')} |")
    lines.append("")
    return lines


def _num(value: Any) -> str:
    if value is None:
        return "-"
    value = float(value)
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"
