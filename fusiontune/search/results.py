"""Results (DESIGN §9): :class:`SearchResult`, the ``trials`` and ``groups`` DataFrames,
Parquet files and reload (:func:`load_results`).

``trials``: one row per evaluated plan (search trials and baselines), carrying everything
needed to re-simulate it: graph hash, hardware JSON, plan JSON, fusiontune version. Which
hardware a row used: ``hw_hash``, ``hw.<field>`` (every field, the knobs included) and
``hw_role`` (``trial``: the trial's own; ``base``: the base hardware; ``best``: the best
trial's, for the baselines a co-design run computes again there, source ``<name>@best_hw``).
``groups``: one row per (plan, hardware, group) with the group's pattern, mode and costs.

Files under ``<out>/<study>/``: ``trials.parquet``, ``groups.parquet``, ``best_plan.json``,
``summary.json`` and ``optimal_plan.json`` (the oracle's plan); each written to a temporary
file first and moved into place atomically.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from fusiontune.errors import StorageError

if TYPE_CHECKING:
    import pandas as pd

    from fusiontune.ir.graph import Graph
    from fusiontune.planner.plan import Plan
    from fusiontune.search.records import TrialRecord
    from fusiontune.sim.hardware import HardwareConfig

TRIALS_FILE = "trials.parquet"
GROUPS_FILE = "groups.parquet"
BEST_PLAN_FILE = "best_plan.json"
BEST_MODEL_FILE = "best_model.onnx"  # written with export_best (--export)
OPTIMAL_PLAN_FILE = "optimal_plan.json"
"""The exact oracle's plan (additive objective, base hardware), when it ran; its plan at the
best trial's hardware is the trials row ``oracle@best_hw``."""
SUMMARY_FILE = "summary.json"
BEST_HARDWARE_FILE = "best_hardware.yaml"
"""The best trial's hardware, every field (loads with ``--hardware``)."""

TIMING_COLUMNS = ("eval_s", "worker", "solve_s")
"""Columns that legitimately differ between two identical runs."""


@dataclass(frozen=True)
class RowContext:
    """What every row of a study shares."""

    study: str
    model: str
    graph_hash: str
    objective: str
    version: str


def trials_frame(
    records: Sequence[TrialRecord],
    ctx: RowContext,
    source: str = "search",
    hw_role: str = "trial",
    row_cache: dict[tuple[int, str], dict[str, Any]] | None = None,
) -> pd.DataFrame:
    """One row per record. ``source`` is ``search`` or the baseline's name; ``hw_role`` says
    whose hardware the row used (``trial``, ``base`` or ``best``; module docstring).

    ``row_cache``: rows already built for stored records, by (trial number, uid); a search
    rewriting its table at every checkpoint builds each row once (decoding a plan's JSON
    costs more than writing the row)."""
    import pandas as pd

    rows = []
    for r in records:
        key = (r.trial, r.uid)
        if row_cache is not None and r.uid and key in row_cache:
            rows.append(row_cache[key])
            continue
        row: dict[str, Any] = {
            "study": ctx.study,
            "trial": r.trial,
            "source": source,
            "state": r.state,
            "model": ctx.model,
            "graph_hash": ctx.graph_hash,
            "objective": ctx.objective,
            "hw_hash": r.hw_hash,
            "hw_role": hw_role,
            "hw_json": r.hw_json,
            "plan_hash": r.plan_hash,
            "plan_json": r.plan_json,
            "n_groups": _n_groups(r.plan_json),
            "feasible": r.feasible and all(v <= 0 for v in r.constraints.values()),
            "capacity_ok": r.feasible,
            "violations": json.dumps(list(r.violations)),
            "duplicate_of": r.duplicate_of,
            "error": r.error,
            "plan_proven": r.solver.get("proven"),
            "plan_gap": r.solver.get("gap"),
            "solve_s": r.solver.get("solve_s"),
            "eval_s": r.eval_s,
            "worker": r.worker,
            "fusiontune_version": ctx.version,
        }
        for i, v in enumerate(r.values):
            row[f"value_{i}"] = v
        for k, v in r.metrics.items():
            if k not in row:
                row[k] = v
        for k, v in _knobs(r.hw_json).items():
            row[f"hw.{k}"] = v
        rows.append(row)
        if row_cache is not None and r.uid:
            row_cache[key] = row
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame["verify_error"] = float("nan")
        frame["verify_passed"] = pd.Series([None] * len(frame), dtype="boolean")
    return frame


def _n_groups(plan_json: str, source: str = "stored plan") -> int:
    """Groups of a stored plan, read by the plan JSON's validating schema check (no graph here:
    op names are checked where a plan is rebuilt, by ``Plan.from_json``)."""
    if not plan_json:
        return 0
    from fusiontune.errors import IllegalPlanError
    from fusiontune.fileio import parse_json
    from fusiontune.planner.plan_schema import check_plan_data

    data = parse_json(plan_json, source, IllegalPlanError)
    check_plan_data(data, source)
    return len(data["groups"])


@lru_cache(maxsize=64)
def _knobs(hw_json: str) -> Mapping[str, Any]:
    """The scalar fields of a stored hardware, read by the one hardware reader (once per
    distinct hardware: a study's rows share a few)."""
    if not hw_json:
        return MappingProxyType({})
    data = hardware_from_json(hw_json).to_dict()
    scalars = {k: v for k, v in data.items() if isinstance(v, (int, float, str, bool))}
    return MappingProxyType(scalars)


def groups_frame(
    items: Iterable[tuple[str, str, Plan, Sequence[dict[str, Any]]]],
    graph: Graph,
    study: str,
) -> pd.DataFrame:
    """One row per group of each distinct (plan hash, hw hash, plan, group metric dicts)."""
    import pandas as pd

    from fusiontune.planner.candidates import group_pattern

    rows = []
    for plan_hash, hw_hash, plan, group_metrics in items:
        for i, (group, gm) in enumerate(zip(plan.groups, group_metrics)):
            row: dict[str, Any] = {
                "study": study,
                "plan_hash": plan_hash,
                "hw_hash": hw_hash,
                "group": i,
                "ops": "+".join(group.ops),
                "n_ops": len(group.ops),
                "pattern": group_pattern(graph, group),
                "mode": group.mode.value,
            }
            for k, v in gm.items():
                if k not in row and k != "ops":
                    row[k] = v
            rows.append(row)
    return pd.DataFrame(rows)


def group_metrics_of(graph: Graph, plan: Plan, hw: HardwareConfig) -> list[dict[str, Any]]:
    """Per-group metric dicts of a plan (re-simulated; group costs are cached)."""
    from fusiontune.search.backends import _scalars
    from fusiontune.sim.cost import simulate

    return [_scalars(g.as_dict()) for g in simulate(graph, plan, hw).groups]


def hardware_from_json(text: str, source: str = "stored hardware") -> HardwareConfig:
    """Rebuild the HardwareConfig stored in a row, through the one validating reader
    (``HardwareConfig.from_dict``); ``source`` names it in messages."""
    from fusiontune.errors import ConfigError
    from fusiontune.fileio import parse_json
    from fusiontune.sim.hardware import HardwareConfig

    return HardwareConfig.from_dict(parse_json(text, source, ConfigError), source)


@dataclass(frozen=True, eq=False)
class SearchResult:
    """Outcome of a search.

    Attributes:
        best_plan: best feasible plan found by the search.
        trials: the ``trials`` table (search rows and baseline rows, column ``source``).
        groups: the ``groups`` table.
        summary: headline numbers (best, baselines, optimum, ratios, paths), as in summary.json.
        out_dir: folder holding the files.
    """

    best_plan: Plan
    trials: pd.DataFrame
    groups: pd.DataFrame
    summary: dict[str, Any]
    out_dir: Path

    @property
    def best_over_optimum(self) -> float | None:
        """Best found / proven optimum (1.0 = optimal); ``None`` without an oracle."""
        value = self.summary.get("best_over_optimum")
        return None if value is None else float(value)


# ---- files -----------------------------------------------------------------------------------
def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary file in the same folder, then ``os.replace`` it into place:
    a reader opening ``path`` sees the old file or the new one, never a part. The file gets
    the mode a plain ``open`` would give it (0666 less the umask; ``mkstemp`` makes 0600).

    Raises:
        StorageError: the file cannot be written (disk full, no permission, ...).
    """
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.close(fd)
        write(Path(tmp))
        os.chmod(tmp, FILE_MODE & ~_umask())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            from fusiontune.search.store import is_disk_full, reason_of

            reason = reason_of(exc) if is_disk_full(exc) else (exc.strerror or str(exc))
            raise StorageError(
                f"{path}: cannot write ({reason}); the study storage keeps every stored "
                "trial: fix the cause (free disk space) and rerun with --resume"
            ) from exc
        raise


FILE_MODE = 0o666
"""Mode of result files before the umask (as ``open`` creates files)."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_parquet(path: str | Path) -> pd.DataFrame:
    """Read a Parquet file through one open file handle.

    ``pd.read_parquet(path)`` opens the path twice (footer, then pages): while a search
    replaces ``trials.parquet`` it can pair the footer of one version with the pages of the
    next ("Page was smaller than expected"). One handle reads one version, whole.
    """
    import pandas as pd

    with open(path, "rb") as f:
        return pd.read_parquet(f)


def write_parquet(frame: pd.DataFrame, path: Path) -> None:
    """Write a DataFrame to Parquet atomically (temp file + ``os.replace``)."""
    _atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False))


def write_text(text: str, path: Path) -> None:
    """Write a text file atomically."""

    def write(tmp: Path) -> None:
        tmp.write_text(text)

    _atomic_write(path, write)


def _read_table(d: Path, name: str) -> pd.DataFrame:
    """A table of a results folder; a damaged one is an error naming it and the way back
    (``trials.parquet``: rebuilt from the study storage by ``report --rebuild``;
    ``groups.parquet`` is not in the storage: ``--resume`` rewrites it)."""
    path = d / name
    try:
        return read_parquet(path)
    except (ValueError, OSError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        reason = (
            str(exc).split(". ")[0].removeprefix("Could not open Parquet input source '<Buffer>': ")
        )
        if name == TRIALS_FILE:
            way_back = (
                f"rebuild it from the study storage with: fusiontune report {d} --rebuild "
                f"(search trials only; storage: {_storage_named(d)}), or rerun the search "
                "with --resume to rewrite every file"
            )
        else:
            way_back = (
                "it is not in the study storage (it is simulated from the model): rerun the "
                "search with --resume to rewrite it"
            )
        raise StorageError(f"{path}: is truncated or corrupt ({reason}); {way_back}") from None


def _storage_named(d: Path) -> str:
    """The study storage ``summary.json`` names, for a message (best effort)."""
    try:
        summary = json.loads((d / SUMMARY_FILE).read_text(encoding="utf-8"))
        return str(summary.get("storage", "see summary.json"))
    except (OSError, ValueError, AttributeError):
        return "see summary.json"


def load_results(directory: str | Path) -> SearchResult:
    """Load a finished search from its results folder (``results/<study>``).

    Raises:
        StorageError: the folder or one of its files is missing.
    """

    from fusiontune.planner.plan import Group, Mode, Plan

    d = Path(directory)
    for name in (TRIALS_FILE, GROUPS_FILE, BEST_PLAN_FILE, SUMMARY_FILE):
        if not (d / name).is_file():
            raise StorageError(f"{d}: missing {name}; is this a fusiontune search results folder?")
    from fusiontune.fileio import parse_json, read_text

    def load_json(name: str) -> Any:
        return parse_json(read_text(d / name, StorageError), str(d / name), StorageError)

    plan_data = load_json(BEST_PLAN_FILE)
    trials, groups = _read_table(d, TRIALS_FILE), _read_table(d, GROUPS_FILE)
    try:
        plan = Plan(tuple(Group(tuple(g["ops"]), Mode(g["mode"])) for g in plan_data["groups"]))
    except (KeyError, TypeError, ValueError, OSError) as exc:
        raise StorageError(
            f"{d}: a results file is damaged ({type(exc).__name__}: {exc}); rerun the search "
            "with --resume to rewrite it"
        ) from None
    return SearchResult(
        best_plan=plan, trials=trials, groups=groups, summary=load_json(SUMMARY_FILE), out_dir=d
    )
