"""The Optuna adapter: every internal fusiontune uses exists with the shape it relies on, and
an Optuna outside the tested range is refused with a message naming the version."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import optuna
import pytest
import tomllib

from fusiontune.search import optuna_adapter
from fusiontune.search.optuna_adapter import INTERNALS, OptunaInternalsError


def test_every_internal_exists_with_its_shape() -> None:
    models = optuna_adapter.rdb_models()
    for table in (
        "StudyModel",
        "TrialModel",
        "TrialValueModel",
        "TrialParamModel",
        "TrialUserAttributeModel",
        "TrialSystemAttributeModel",
    ):
        assert hasattr(models, table), table
    assert callable(models.TrialValueModel.value_to_stored_repr)
    assert callable(models.StudyModel.find_or_raise_by_id)
    session = inspect.signature(optuna_adapter.internal("create_scoped_session"))
    assert next(iter(session.parameters)) == "scoped_session"
    tell = inspect.signature(optuna_adapter.internal("tell_with_warning"))
    assert {"study", "trial", "value_or_values", "state"} <= set(tell.parameters)
    key = optuna_adapter.constraints_key()
    assert isinstance(key, str) and key


def test_constraints_key_is_what_set_constraint_writes() -> None:
    study = optuna.create_study()
    trial = study.ask()
    trial.set_constraint("area", 1.5)
    study.tell(trial, 1.0)
    assert study.trials[0].system_attrs[f"{optuna_adapter.constraints_key()}:area"] == 1.5


def test_out_of_range_version_is_refused_with_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(optuna, "__version__", "6.0.0")
    with pytest.raises(
        OptunaInternalsError, match=r"optuna 6\.0\.0 is installed.*optuna>=5\.0,<5\.2"
    ):
        optuna_adapter.internal("tell_with_warning")
    monkeypatch.setattr(optuna, "__version__", "4.9.1")
    with pytest.raises(OptunaInternalsError, match=r"4\.9\.1"):
        optuna_adapter.check_version()


def test_moved_internal_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(INTERNALS, "tell_with_warning", ("optuna.study._tell", "_gone"))
    with pytest.raises(OptunaInternalsError, match=r"optuna\.study\._tell\._gone"):
        optuna_adapter.internal("tell_with_warning")


def test_pyproject_bound_matches_tested_range() -> None:
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    (spec,) = [d for d in deps if re.match(r"optuna\b", d)]
    (low_major, low_minor), (high_major, high_minor) = optuna_adapter.TESTED_OPTUNA
    assert spec.replace(" ", "") == f"optuna>={low_major}.{low_minor},<{high_major}.{high_minor}"
