"""Helpers shared by the ``exp_*.py`` experiment scripts (not an experiment itself).

Every experiment builds a list of flat row dicts, prints it, and writes it as
``results/exp_<name>.csv`` and ``results/exp_<name>.md`` (a markdown table followed by the
notes that explain it). Scripts put this folder on ``sys.path`` by being run from it
(``python experiments/exp_zoo.py``); the tests import them through :func:`load_experiment`.
"""

from __future__ import annotations

import csv
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"
BYTES_PER_MB = 1_000_000  # SI megabyte
BYTES_PER_MIB = 1 << 20  # binary mebibyte
BYTES_PER_KB = 1_000
BYTES_PER_KIB = 1 << 10
FLOAT_DIGITS = 4  # significant digits of floats in the markdown tables


def fmt(value: Any) -> str:
    """A cell of a markdown table: ints with thousands separators, floats to 4 digits."""
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:  # NaN
            return ""
        return f"{value:.{FLOAT_DIGITS}g}"
    return str(value)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A GitHub markdown table of ``rows`` (columns: the first row's keys unless given)."""
    if not rows:
        return "(no rows)\n"
    cols = list(columns or rows[0].keys())
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        lines.append("| " + " | ".join(fmt(row.get(c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def write_csv(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Write ``rows`` as CSV (columns: union of keys, in first-seen order)."""
    cols: dict[str, None] = {}
    for row in rows:
        cols.update(dict.fromkeys(row))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(cols))
        writer.writeheader()
        writer.writerows(rows)


def machine_line() -> str:
    """One line naming the machine the numbers were measured on (no paths)."""
    return (
        f"Measured {time.strftime('%Y-%m-%d', time.gmtime())} on {platform.machine()} "
        f"({platform.system()}, Python {platform.python_version()})."
    )


def write_outputs(
    name: str,
    title: str,
    sections: Sequence[tuple[str, Sequence[dict[str, Any]]]],
    notes: Sequence[str],
    out_dir: Path = RESULTS_DIR,
) -> list[Path]:
    """Write ``exp_<name>.csv`` (the first section's rows) and ``exp_<name>.md`` (every
    section as a table, then the notes); further sections go to ``exp_<name>_<i>.csv``.

    Returns:
        The paths written.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    parts = [f"# {title}\n"]
    for i, (heading, rows) in enumerate(sections):
        csv_path = out_dir / (f"exp_{name}.csv" if i == 0 else f"exp_{name}_{i + 1}.csv")
        write_csv(rows, csv_path)
        paths.append(csv_path)
        parts.append(f"## {heading}\n\n{markdown_table(rows)}")
    if notes:
        parts.append("## Notes\n\n" + "\n".join(f"- {n}" for n in notes) + "\n")
    parts.append(machine_line() + "\n")
    md_path = out_dir / f"exp_{name}.md"
    md_path.write_text("\n".join(parts))
    paths.append(md_path)
    return paths


def print_rows(heading: str, rows: Sequence[dict[str, Any]]) -> None:
    """Print one table to stdout."""
    print(f"\n{heading}\n")
    print(markdown_table(rows))
