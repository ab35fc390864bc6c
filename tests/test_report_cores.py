"""``fusiontune report`` on a many-core chip: the network, replication and pipeline columns of
the trials table in report.md and ``noc.png``; a one-core study's report has neither."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fusiontune.cli.main import main
from fusiontune.search.report_cores import CORE_COLUMNS, NOC_PLOT, SECTION


def _search(tmp_path: Path, model: str, *extra: str) -> Path:
    argv = ["search", model, "--trials", "6", "--workers", "1", "--out", str(tmp_path), *extra]
    assert main(argv) == 0
    folder = tmp_path / model
    assert main(["report", str(folder)]) == 0
    return folder


def _core_table(report: str) -> dict[str, dict[str, str]]:
    """The many-core table of report.md: cells by row label and column name."""
    lines = report.splitlines()
    start = lines.index(SECTION)
    head = next(i for i in range(start, len(lines)) if lines[i].startswith("| plan |"))
    names = [c.strip() for c in lines[head].strip("|").split("|")]
    rows = {}
    for line in lines[head + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(names[1:], cells[1:]))
    return rows


def _agrees(cell: str, value: object) -> bool:
    """A report cell shows ``value`` (integers in full, others to the report's precision)."""
    if isinstance(value, str):
        return cell == value
    shown = float(cell.replace(",", ""))
    v = float(value)  # type: ignore[arg-type]
    return abs(shown - v) <= max(0.5, 1e-3 * abs(v))


def test_many_core_report_shows_trials_columns(tmp_path: Path) -> None:
    folder = _search(tmp_path, "lenet5", "--hw", "isaac_168")
    report = (folder / "report.md").read_text()
    trials = pd.read_parquet(folder / "trials.parquet")
    table = _core_table(report)
    assert list(next(iter(table.values()))) == list(CORE_COLUMNS)
    best = next(label for label in table if label.startswith("**best found**"))
    best_trial = int(best.split("trial ")[1].rstrip(")"))
    expected = {
        best: trials[(trials["source"] == "search") & (trials["trial"] == best_trial)].iloc[0],
        "greedy": trials[trials["source"] == "greedy"].iloc[0],
        "unfused": trials[trials["source"] == "unfused"].iloc[0],
    }
    assert set(expected) <= set(table)
    for label, row in expected.items():
        for col in CORE_COLUMNS:
            assert _agrees(table[label][col], row[col]), (label, col, table[label][col], row[col])
    # a many-core chip moves bytes over the network: the columns are not all zero
    assert float(table["unfused"]["noc_byte_hops"].replace(",", "")) > 0
    assert f"![noc]({NOC_PLOT})" in report
    assert (folder / NOC_PLOT).stat().st_size > 0


def test_one_core_report_has_no_many_core_part(tmp_path: Path) -> None:
    folder = _search(tmp_path, "mlp_linear", "--hw", "isaac_hbm")
    trials = pd.read_parquet(folder / "trials.parquet")
    assert (trials["hw.cores"] == 1).all()
    report = (folder / "report.md").read_text()
    assert SECTION not in report and "noc" not in report
    assert not (folder / NOC_PLOT).exists()
    assert (folder / "history.png").exists()
