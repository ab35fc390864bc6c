"""The one place fusiontune touches Optuna's private internals.

Everything else in the package uses Optuna's public API. The internals used here make the
search fast (one transaction per flush of trials, a ``tell`` without a deep copy) or write
what a public call writes (the constraint attribute key); each is looked up through
:func:`internal`, which checks the installed Optuna against the range this module was
tested with and names the Optuna version and the internal when one is missing or moved.

Tested range: ``TESTED_OPTUNA`` (keep ``pyproject.toml``'s bound equal to it).
"""

from __future__ import annotations

import importlib
from typing import Any

import optuna

TESTED_OPTUNA = ((5, 0), (5, 2))
"""Optuna versions whose internals this module was checked against: ``>=5.0,<5.2``."""

INTERNALS: dict[str, tuple[str, str]] = {
    "rdb_models": ("optuna.storages._rdb", "models"),
    "create_scoped_session": ("optuna.storages._rdb.storage", "_create_scoped_session"),
    "constraints_key": ("optuna.study._constrained_optimization", "_CONSTRAINTS_KEY"),
    "tell_with_warning": ("optuna.study._tell", "_tell_with_warning"),
}
"""Each internal by the name used here: (module, attribute)."""


class OptunaInternalsError(RuntimeError):
    """The installed Optuna lacks an internal fusiontune needs, or is outside the tested range."""


def _version_tuple(version: str) -> tuple[int, int]:
    parts = version.split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)


def check_version(version: str | None = None) -> None:
    """Raise :class:`OptunaInternalsError` unless ``version`` (default: the installed Optuna)
    is in ``TESTED_OPTUNA``."""
    version = optuna.__version__ if version is None else version
    low, high = TESTED_OPTUNA
    if not low <= _version_tuple(version) < high:
        raise OptunaInternalsError(
            f"fusiontune was tested with optuna>={low[0]}.{low[1]},<{high[0]}.{high[1]}; "
            f"optuna {version} is installed: install a tested version "
            f"(pip install 'optuna>={low[0]}.{low[1]},<{high[0]}.{high[1]}')"
        )


def internal(name: str) -> Any:
    """The Optuna internal called ``name`` in ``INTERNALS``, after the version check."""
    check_version()
    module_name, attr = INTERNALS[name]
    try:
        module = importlib.import_module(module_name)
        if not hasattr(module, attr):  # a submodule (``models``) is imported on its own
            return importlib.import_module(f"{module_name}.{attr}")
        return getattr(module, attr)
    except (ImportError, AttributeError) as err:
        raise OptunaInternalsError(
            f"optuna {optuna.__version__} has no {module_name}.{attr} (used by fusiontune for "
            f"{name}); install a tested version (optuna>=5.0,<5.2)"
        ) from err


def rdb_models() -> Any:
    """``optuna.storages._rdb.models`` (Optuna's SQLAlchemy table models)."""
    return internal("rdb_models")


def scoped_session(rdb: Any) -> Any:
    """Optuna's session context manager over ``rdb.scoped_session`` (commit or rollback)."""
    return internal("create_scoped_session")(rdb.scoped_session)


def constraints_key() -> str:
    """The system-attribute key prefix ``Trial.set_constraint`` writes."""
    return str(internal("constraints_key"))


def tell(
    study: optuna.Study,
    trial: optuna.trial.Trial,
    values: list[float] | None,
    state: optuna.trial.TrialState | None,
) -> None:
    """``Study.tell`` without the deep copy of the trial it returns (~1 ms per 100 params)."""
    internal("tell_with_warning")(study, trial, value_or_values=values, state=state)
