"""``fusiontune report DIR --rebuild``: ``trials.parquet`` rebuilt from the study storage.

Every stored trial carries its full record (:data:`~fusiontune.search.records.RECORD_ATTR`),
so the search rows of the table come back from the storage alone, as a checkpoint writes them
(:func:`~fusiontune.search.results.trials_frame`). The baseline rows (unfused, greedy, ...)
and ``groups.parquet`` are computed from the model at the end of a search and are not in the
storage: rerunning the search with ``--resume`` recomputes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fusiontune.errors import StorageError
from fusiontune.search import results as res

JOURNAL_LABEL = "journal file "
"""How ``summary.json``'s ``storage`` names a journal file (:func:`~.storage.storage_for`)."""


@dataclass(frozen=True)
class Rebuilt:
    """What :func:`rebuild_trials` wrote: the table, its rows and where they came from."""

    path: Path
    n_trials: int
    storage: str


def rebuild_trials(directory: str | Path, storage: str | None = None) -> Rebuilt:
    """Rewrite ``trials.parquet`` (atomically) with the search trials of the study storage.

    Args:
        directory: the results folder (``summary.json`` names the study and its storage).
        storage: the storage URL or journal file, when ``summary.json`` does not hold it
            (a database URL is not written there: it may hold a password).

    Raises:
        StorageError: no readable ``summary.json``, no storage known, or the study cannot be
            read from it.
    """
    import optuna

    from fusiontune.fileio import parse_json, read_text
    from fusiontune.search.records import study_records
    from fusiontune.search.storage import storage_for

    d = Path(directory)
    summary_path = d / res.SUMMARY_FILE
    summary = parse_json(read_text(summary_path, StorageError), str(summary_path), StorageError)
    try:
        study = str(summary["study"])
        ctx = res.RowContext(
            study,
            str(summary["model"]),
            str(summary["graph_hash"]),
            str(summary["objective"]),
            str(summary.get("fusiontune_version", "")),
        )
    except (KeyError, TypeError):
        raise StorageError(
            f"{summary_path}: names no study, model or objective; rerun the search with --resume"
        ) from None
    target = storage or _stored_target(summary)
    if target is None:
        raise StorageError(
            f"{summary_path}: the study storage is a database whose URL is not recorded; "
            f"give it: fusiontune report {d} --rebuild --storage URL"
        )
    spec = storage_for(target, d)
    url = spec.target if isinstance(spec.target, str) else ""
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///") :]).is_file():
        raise StorageError(f"study storage {spec.label} not found; give it with --storage")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        loaded = optuna.load_study(study_name=study, storage=spec.target)
        records = study_records(loaded, stored=True)
    except KeyError:
        raise StorageError(f"study '{study}' is not in {spec.label}; check --storage") from None
    except Exception as exc:
        from fusiontune.search.store import reason_of

        raise StorageError(
            f"study '{study}' cannot be read from {spec.label} ({reason_of(exc)})"
        ) from exc
    path = d / res.TRIALS_FILE
    res.write_parquet(res.trials_frame(records, ctx), path)
    return Rebuilt(path, len(records), spec.label)


def _stored_target(summary: dict[str, Any]) -> str | None:
    """The storage ``summary.json`` records: a SQLite URL, or a journal file's path."""
    url = summary.get("storage_url")
    if isinstance(url, str):
        return url
    label = summary.get("storage")
    if isinstance(label, str) and label.startswith(JOURNAL_LABEL):
        return "journal:" + label[len(JOURNAL_LABEL) :]
    return None


__all__ = ["Rebuilt", "rebuild_trials"]
