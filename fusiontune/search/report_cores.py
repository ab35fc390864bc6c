"""The many-core part of ``fusiontune report`` (issue 21): a table of the network, replication
and pipeline columns of the best trial, greedy and unfused, and ``noc.png`` (DRAM bytes vs NoC
byte-hops of every completed search trial, best marked).

Only on a many-core study (a trial's hardware has ``cores`` > 1, or a trial moved bytes over
the network): on a one-core chip these columns are all zero and the report stays as it was.
Every cell is the trials table's value (``trials.parquet``, :data:`CORE_COLUMNS`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from fusiontune.search.results import SearchResult

CORE_COLUMNS = (
    "noc_bytes",
    "noc_byte_hops",
    "noc_energy_pj",
    "movement_bytes",
    "images_per_s",
    "replication",
    "replication_copies",
    "pipeline_cycles",
)
"""Trials table columns of the many-core table, in order (docs/cores.md)."""

CORE_ROWS = ("best", "greedy", "unfused", "oracle")
"""Rows of the many-core table (a baseline that did not run or failed is left out)."""

NOC_PLOT = "noc.png"
SECTION = "## Many-core chip: network, replication, pipeline"


def is_many_core(trials: pd.DataFrame) -> bool:
    """Whether the study ran on a many-core chip (the trials table has the NoC columns and a
    trial's hardware has more than one core or moved bytes over the network)."""
    if trials.empty or "noc_byte_hops" not in trials:
        return False
    if "hw.cores" in trials and (trials["hw.cores"].fillna(1) > 1).any():
        return True
    return bool((trials["noc_byte_hops"].fillna(0) > 0).any())


def core_rows(result: SearchResult) -> dict[str, pd.Series]:
    """The trials table rows of the many-core table: the best trial and the completed
    baselines at the base hardware, by :data:`CORE_ROWS` name."""
    t = result.trials
    rows: dict[str, pd.Series] = {}
    best = t[(t["source"] == "search") & (t["trial"] == result.summary["best"]["trial"])]
    if not best.empty:
        rows["best"] = best.iloc[0]
    for name in CORE_ROWS[1:]:
        base = t[(t["source"] == name) & (t["state"] == "COMPLETE")]
        if "hw_role" in base:
            base = base[base["hw_role"] != "best"]
        if not base.empty:
            rows[name] = base.iloc[0]
    return rows


def core_markdown(result: SearchResult, num: Callable[[Any], str]) -> list[str]:
    """The many-core section of report.md (empty on a one-core study); ``num`` formats a
    number as the report's other tables do."""
    if not is_many_core(result.trials):
        return []
    cols = [c for c in CORE_COLUMNS if c in result.trials]
    chip = result.summary.get("chip") or {}
    lines = [
        SECTION,
        "",
        f"On {chip.get('hardware', 'the chip')} ({chip.get('cores', '?')} cores), replication "
        f"{chip.get('replication', '?')}, batch pipeline; DRAM bytes are `traffic_bytes` above "
        "(docs/cores.md).",
        "",
        "| plan | " + " | ".join(cols) + " |",
        "|---|" + "---:|" * len(cols),
    ]
    for name, row in core_rows(result).items():
        label = f"**best found** (trial {int(row['trial'])})" if name == "best" else name
        label = "exact optimum (oracle)" if name == "oracle" else label
        cells = [_cell(row.get(c), num) for c in cols]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def _cell(value: Any, num: Callable[[Any], str]) -> str:
    if isinstance(value, str):
        return value
    try:
        missing = value is None or value != value  # NaN
    except (TypeError, ValueError):
        missing = True
    return "-" if missing else num(value)


def plot_noc(result: SearchResult, path: Path) -> Path | None:
    """``noc.png``: DRAM bytes vs NoC byte-hops of every completed search trial, the best
    trial and the greedy and unfused plans marked (many-core studies only)."""
    import matplotlib.pyplot as plt

    from fusiontune.search.report import FIG_DPI, FIG_SIZE_IN

    t = result.trials
    if not is_many_core(t):
        return None
    done = t[(t["source"] == "search") & (t["state"] == "COMPLETE")]
    if done.empty:
        return None
    fig, ax = plt.subplots(figsize=FIG_SIZE_IN)
    ax.scatter(done["traffic_bytes"], done["noc_byte_hops"], s=10, c="0.6", label="trial")
    marks = {"best": ("b", "*", 120), "greedy": ("tab:purple", "s", 40)}
    marks["unfused"] = ("tab:red", "^", 40)
    for name, row in core_rows(result).items():
        if name in marks:
            color, marker, size = marks[name]
            label = f"best (trial {int(row['trial'])})" if name == "best" else name
            ax.scatter(
                [row["traffic_bytes"]], [row["noc_byte_hops"]], s=size, c=color,
                marker=marker, label=label, zorder=4 if name == "best" else 3,
            )  # fmt: skip
    for axis, values in (("x", t["traffic_bytes"]), ("y", t["noc_byte_hops"])):
        positive = values[values > 0]
        if not positive.empty and positive.max() > 10 * positive.min():
            getattr(ax, f"set_{axis}scale")("log")
    ax.set_xlabel("DRAM bytes (traffic_bytes)")
    ax.set_ylabel("NoC byte-hops")
    ax.set_title(f"{result.summary.get('model', '')}: DRAM bytes vs NoC byte-hops")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=FIG_DPI)
    plt.close(fig)
    return path


__all__ = ["CORE_COLUMNS", "NOC_PLOT", "core_markdown", "core_rows", "is_many_core", "plot_noc"]
