"""The search end to end on small zoo models: reproducibility, optimality, resume, the tables.

Budgets are small (tens of trials on graphs of 5-13 ops) so the file runs in seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pandas as pd
import pytest

from fusiontune.errors import StorageError
from fusiontune.search.api import SearchResult, search
from fusiontune.search.results import TIMING_COLUMNS, hardware_from_json, load_results
from fusiontune.search.space import parse_space

SMALL_MODELS = ("mlp_relu", "mlp_linear", "lenet5")
"""Zoo models small enough for exhaustive enumeration."""

TPE_BUDGET = 60
"""Trials within which TPE must reach the exhaustive optimum on SMALL_MODELS."""

REL_TOL = 1e-9
"""Relative tolerance for float sums computed in a different order (energy, cycles)."""


def _graph(name: str):  # type: ignore[no-untyped-def]
    from fusiontune.frontend.loader import load_model

    return load_model(name)


def _run(tmp: Path, model: str, **kwargs: object) -> SearchResult:
    kwargs.setdefault("backend", "serial")
    return search(model, out=tmp, **kwargs)  # type: ignore[arg-type]


def _search_rows(result: SearchResult) -> pd.DataFrame:
    return result.trials[result.trials["source"] == "search"].reset_index(drop=True)


def test_serial_fixed_seed_gives_identical_tables(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", "lenet5", trials=25, seed=7, study="s")
    b = _run(tmp_path / "b", "lenet5", trials=25, seed=7, study="s")
    assert a.best_plan == b.best_plan
    drop = [*TIMING_COLUMNS]
    pd.testing.assert_frame_equal(a.trials.drop(columns=drop), b.trials.drop(columns=drop))
    pd.testing.assert_frame_equal(a.groups, b.groups)
    rows = _search_rows(a)
    assert list(rows["trial"]) == list(range(25))
    assert set(a.trials["source"]) >= {"search", "unfused", "greedy", "exhaustive", "oracle"}


@pytest.mark.parametrize("model", SMALL_MODELS)
def test_tpe_reaches_exhaustive_optimum_and_oracle_agrees(tmp_path: Path, model: str) -> None:
    # without the greedy start (greedy is optimal on these models): TPE must find it itself
    result = _run(
        tmp_path, model, trials=TPE_BUDGET, seed=0, sampler="tpe", start_from_greedy=False
    )
    base = result.trials.set_index("source")
    exhaustive = float(base.loc["exhaustive", "value_0"])
    oracle = float(base.loc["oracle", "value_0"])
    assert oracle == exhaustive
    assert result.summary["optimum"] == pytest.approx(oracle, rel=REL_TOL)
    assert result.best_over_optimum == 1.0
    assert float(base.loc["unfused", "value_0"]) >= exhaustive
    assert result.summary["traffic_saved_vs_unfused"] >= 0.0


@pytest.mark.parametrize("objective", ["traffic", "energy", "cycles"])
@pytest.mark.parametrize("model", SMALL_MODELS)
def test_oracle_equals_exhaustive(model: str, objective: str) -> None:
    from fusiontune.planner.enumerate import enumerate_plans
    from fusiontune.planner.plan import PlannerConfig
    from fusiontune.search.optimize import OBJECTIVE_METRIC, optimal_plan
    from fusiontune.sim.cost import simulate
    from fusiontune.sim.hardware import HardwareConfig

    graph, hw, cfg = _graph(model), HardwareConfig(), PlannerConfig()
    metric = OBJECTIVE_METRIC[objective]
    feasible = [
        m
        for m in (simulate(graph, p, hw) for p in enumerate_plans(graph, config=cfg))
        if m.feasible
    ]
    best = min(float(getattr(m, metric)) for m in feasible)
    oracle = optimal_plan(graph, hw, objective, config=cfg)
    assert oracle.plan is not None and oracle.proven
    assert oracle.value == pytest.approx(best, rel=REL_TOL)
    assert float(getattr(simulate(graph, oracle.plan, hw), metric)) == pytest.approx(
        best, rel=REL_TOL
    )


def test_every_row_resimulates_to_the_same_numbers(tmp_path: Path) -> None:
    from fusiontune.planner.plan import Plan
    from fusiontune.sim.cost import simulate

    space = parse_space(
        {
            "hardware": "isaac_reram_flat",  # one pool: any buffer size is a chip
            "knobs": {
                "buffer_bytes": {"choices": [4096, 65536, 11010048]},
                "adc_bits": {"choices": [6, 8]},
            },
            "objective": "energy",
            "trials": 20,
        },
        source="<test>",
    )
    result = _run(tmp_path, "lenet5", space=space, seed=1)
    graph = _graph("lenet5")
    done = result.trials[result.trials["state"] == "COMPLETE"]
    assert len(done) == len(result.trials) and len(done) >= 20
    assert set(done["graph_hash"]) == {graph.structural_hash}
    assert done["hw.buffer_bytes"].nunique() > 1  # the knob really varied
    for row in done.itertuples(index=False):
        plan = Plan.from_json(row.plan_json, graph)
        hw = hardware_from_json(row.hw_json)
        assert (plan.hash, hw.hash) == (row.plan_hash, row.hw_hash)
        m = simulate(graph, plan, hw)
        assert m.traffic_bytes == row.traffic_bytes
        assert m.energy_pj == row.energy_pj
        assert m.cycles == row.cycles
        assert bool(m.feasible) == row.capacity_ok
        groups = result.groups[
            (result.groups["plan_hash"] == row.plan_hash)
            & (result.groups["hw_hash"] == row.hw_hash)
        ]
        assert len(groups) == plan.n_groups == row.n_groups
        assert groups["traffic_bytes"].sum() == row.traffic_bytes


def test_duplicates_answered_from_cache(tmp_path: Path) -> None:
    result = _run(tmp_path, "mlp_relu", trials=30, seed=0)
    rows = _search_rows(result)
    dupes = rows[rows["duplicate_of"] >= 0]
    firsts = rows[rows["duplicate_of"] < 0]
    assert len(dupes) > 0  # a 5-op MLP has few plans: 30 trials must repeat some
    assert firsts["plan_hash"].is_unique
    assert (dupes["worker"] == "cache").all() and (dupes["eval_s"] == 0.0).all()
    original = rows.set_index("trial")
    for row in dupes.itertuples(index=False):
        assert original.loc[row.duplicate_of, "plan_hash"] == row.plan_hash
        assert original.loc[row.duplicate_of, "traffic_bytes"] == row.traffic_bytes


def test_resume_fails_running_trials_and_completes_the_count(tmp_path: Path) -> None:
    first = _run(tmp_path, "lenet5", trials=8, seed=2, study="r")
    assert len(_search_rows(first)) == 8
    storage = f"sqlite:///{tmp_path / 'r' / 'study.db'}"
    study = optuna.load_study(study_name="r", storage=storage)
    left = study.ask()  # a trial left RUNNING, as after a crash
    with pytest.raises(StorageError, match=r"already exists.*--resume"):
        _run(tmp_path, "lenet5", trials=20, seed=2, study="r")
    second = _run(tmp_path, "lenet5", trials=20, seed=2, study="r", resume=True)
    rows = _search_rows(second)
    assert len(rows) == 20 and rows["trial"].is_unique
    assert (rows["state"] == "COMPLETE").all()
    states = {t.number: t.state for t in optuna.load_study(study_name="r", storage=storage).trials}
    assert states[left.number] == optuna.trial.TrialState.FAIL
    assert sum(s == optuna.trial.TrialState.COMPLETE for s in states.values()) == 20
    assert (
        rows[rows["trial"] < 8]
        .drop(columns=["verify_error"])
        .equals(_search_rows(first).drop(columns=["verify_error"]))
    )


def test_files_reload_and_journal_storage(tmp_path: Path) -> None:
    journal = tmp_path / "j" / "study.log"
    result = _run(tmp_path, "mlp_linear", trials=12, seed=0, storage=str(journal), verify_best=True)
    assert journal.is_file()
    folder = tmp_path / "mlp_linear"
    loaded = load_results(folder)
    assert loaded.best_plan == result.best_plan
    pd.testing.assert_frame_equal(loaded.trials, result.trials)
    pd.testing.assert_frame_equal(loaded.groups, result.groups)
    assert json.loads((folder / "best_plan.json").read_text()) == result.best_plan.to_dict()
    best = result.trials[
        (result.trials["source"] == "search")
        & (result.trials["plan_hash"] == result.best_plan.hash)
    ]
    assert best["verify_error"].notna().all()
    assert not list(folder.glob(".*"))  # no temporary files left behind


def test_multi_objective_nsga2(tmp_path: Path) -> None:
    result = _run(tmp_path, "lenet5", trials=24, seed=0, objective="multi", sampler="nsga2")
    rows = _search_rows(result)
    assert {"value_0", "value_1", "value_2"} <= set(rows.columns)
    assert (rows["value_0"] == rows["traffic_bytes"]).all()
    assert (rows["value_1"] == rows["energy_pj"]).all()
    assert (rows["value_2"] == rows["cycles"]).all()


def test_bruteforce_walks_a_small_space(tmp_path: Path) -> None:
    from fusiontune.planner.enumerate import count_plans

    result = _run(tmp_path, "mlp_relu", trials=64, seed=0, sampler="bruteforce")
    rows = _search_rows(result)
    assert rows["plan_hash"].nunique() == count_plans(_graph("mlp_relu"))
    assert result.best_over_optimum == 1.0


def test_groups_table_from_the_evaluations_equals_a_re_simulation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The groups table reuses the group metrics the evaluations returned; simulating every
    distinct (plan, hardware) again gives the same table."""
    from fusiontune.search import results
    from fusiontune.search.outputs import groups_table

    simulated = []
    original = results.group_metrics_of
    monkeypatch.setattr(results, "group_metrics_of", lambda *a: simulated.append(a) or original(*a))
    result = search("resnet18", trials=12, sampler="random", out=tmp_path, baselines=False)
    assert len(result.groups) > 0 and not simulated  # every plan's groups came with it
    again = groups_table(_graph("resnet18"), result.trials, "resnet18")  # nothing known
    pd.testing.assert_frame_equal(result.groups, again)


def test_stored_plan_and_hardware_go_through_the_validating_readers() -> None:
    """A stored plan naming an unknown op, or stored hardware with an unknown key, is refused
    with a message naming where it came from (no KeyError, no TypeError)."""
    from fusiontune.errors import ConfigError, IllegalPlanError
    from fusiontune.search.outputs import plan_of

    graph = _graph("resnet18")
    bad_plan = json.dumps({"groups": [{"ops": ["no_such_op"], "mode": "single"}]})
    with pytest.raises(IllegalPlanError, match=r"stored plan abc.*no_such_op"):
        plan_of(bad_plan, graph, None, "stored plan abc")
    with pytest.raises(ConfigError, match="row 7"):
        hardware_from_json(json.dumps({"bogus_knob": 1}), "row 7")
