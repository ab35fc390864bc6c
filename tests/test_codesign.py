"""Bilevel co-design end to end: Optuna proposes hardware, each trial's plan is solved exactly.

On ``mlp_relu`` (5 ops; its optimum needs 74 crossbars and a 1,040-byte buffer) with knob
ranges on both sides of those needs, so some designs have no feasible plan. Real SQLite
storage, the serial backend and the shared local Ray.
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import yaml

from fusiontune.search.api import SearchResult, search
from fusiontune.search.problem import CAPACITY_CONSTRAINT
from fusiontune.search.results import BEST_HARDWARE_FILE, hardware_from_json
from fusiontune.search.space import parse_space

MODEL = "mlp_relu"

CODESIGN_SPACE = {
    "hardware": "isaac_reram_flat",
    "objective": "energy",
    "sampler": "tpe",
    "trials": 16,
    "knobs": {
        "buffer_bytes": {"low": 512, "high": 65536, "log": True},
        "n_crossbars": {"low": 16, "high": 512, "log": True},
        "adc_bits": {"choices": [6, 8]},
    },
}
"""A co-design space of mlp_relu whose low ends are infeasible (< 74 crossbars or a buffer
below 1,040 bytes)."""

AREA_REL_TOL = 0.01
"""ISAAC's Table 6 rounds to 3 significant digits; the model sums the same rows."""


def _space(**changes: object):  # type: ignore[no-untyped-def]
    data = {**CODESIGN_SPACE, **changes}
    return parse_space(data, "<test space>")


def _run(tmp: Path, **kwargs: object) -> SearchResult:
    kwargs.setdefault("backend", "serial")
    kwargs.setdefault("space", _space())
    return search(MODEL, out=tmp, study="cd", seed=3, **kwargs)  # type: ignore[arg-type]


def _study(result: SearchResult) -> optuna.Study:
    return optuna.load_study(study_name="cd", storage=f"sqlite:///{result.out_dir / 'study.db'}")


def _search_rows(result: SearchResult):  # type: ignore[no-untyped-def]
    trials = result.trials
    return trials[trials["source"] == "search"].reset_index(drop=True)


def _check_optuna_native(result: SearchResult, n_trials: int) -> optuna.Study:
    """Params are the knobs only, trial numbers are Optuna's, the study says what it is."""
    study = _study(result)
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == n_trials
    knob_params = {"hw:buffer_bytes", "hw:n_crossbars", "hw:adc_bits"}
    for t in trials:
        assert set(t.params) == knob_params
        assert t.user_attrs["fusiontune"]["trial"] == t.number
    assert set(study.best_trial.params) == knob_params
    assert sorted(_search_rows(result)["trial"]) == list(range(n_trials))
    attrs = study.user_attrs
    assert attrs["model"] == MODEL
    assert attrs["graph_hash"] == result.summary["graph_hash"]
    assert attrs["hardware_base"] == "isaac_reram_flat"
    assert set(attrs["space"]["knobs"]) == {"buffer_bytes", "n_crossbars", "adc_bits"}
    return study


def _check_plans_proven(result: SearchResult, objective: str) -> None:
    """Each design's plan is the exact optimum for its hardware (solved again here)."""
    from fusiontune.frontend.loader import load_model
    from fusiontune.planner.plan import Plan
    from fusiontune.search.optimize import optimal_plan

    graph = load_model(MODEL)
    rows = _search_rows(result)
    assert (rows["state"] == "COMPLETE").all()  # infeasible designs are not failures
    for row in rows[rows["duplicate_of"] < 0].itertuples(index=False):
        hw = hardware_from_json(row.hw_json)
        answer = optimal_plan(graph, hw, objective)
        assert row.plan_proven is True or row.plan_proven == 1
        if answer.plan is None:
            assert not row.feasible and not row.capacity_ok
        else:
            assert Plan.from_json(row.plan_json, graph) == answer.plan
            assert row.capacity_ok


def test_bilevel_serial_end_to_end(tmp_path: Path) -> None:
    result = _run(tmp_path)
    study = _check_optuna_native(result, 16)
    _check_plans_proven(result, "energy")
    rows = _search_rows(result)
    # both sides of the feasibility edge were sampled: infeasible designs are constraints
    assert rows["capacity_ok"].any() and not rows["capacity_ok"].all()
    for t in study.get_trials(deepcopy=False):
        record = t.user_attrs["fusiontune"]
        violated = t.system_attrs[f"constraints:{CAPACITY_CONSTRAINT}"] > 0
        assert violated == (not record["feasible"])
        assert t.state == optuna.trial.TrialState.COMPLETE
    assert result.summary["search"] == "bilevel"
    best = result.summary["best"]
    assert best["feasible"] and best["plan_certificate"]["proven"]
    assert set(best["hardware"]["knobs"]) == {"buffer_bytes", "n_crossbars", "adc_bits"}
    assert result.summary["storage_url"].startswith("sqlite:///")


def test_best_hardware_round_trips_and_reproduces_metrics(tmp_path: Path) -> None:
    from fusiontune.frontend.loader import load_model
    from fusiontune.planner.plan import Plan
    from fusiontune.sim.hardware import load_hardware
    from fusiontune.sim.replication import simulate_replicated

    result = _run(tmp_path / "a", trials=10)
    path = result.out_dir / BEST_HARDWARE_FILE
    assert yaml.safe_load(path.read_text())["n_crossbars"] >= 74
    hw = load_hardware(path)
    best = result.summary["best"]
    assert hw.hash == best["hardware"]["hw_hash"]
    plan = Plan.from_json((result.out_dir / "best_plan.json").read_text(), load_model(MODEL))
    # a trial's metrics: its plan with the search's replication (exact), placed on the chip
    metrics = simulate_replicated(load_model(MODEL), plan, hw)[0].as_dict()
    row = result.trials[
        (result.trials["source"] == "search") & (result.trials["trial"] == best["trial"])
    ].iloc[0]
    for key, value in metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert row[key] == value, key  # exactly: the same model on the same hardware
    assert row["energy_pj"] == best["values"][0]
    # the file is a base hardware for the next search (fixed hardware: plan-level search)
    again = search(
        MODEL, out=tmp_path / "b", study="again", trials=3, backend="serial", hardware=str(path)
    )
    assert again.summary["hardware_base"]["hw_hash"] == hw.hash
    assert again.summary["search"] == "plan"
    assert again.summary["best"]["energy_pj"] <= best["energy_pj"] * (1 + 1e-12)


def test_bilevel_on_ray(tmp_path: Path, ray_local: None) -> None:
    result = _run(tmp_path, backend="ray", workers=2, trials=10)
    _check_optuna_native(result, 10)
    _check_plans_proven(result, "energy")
    workers = set(_search_rows(result)["worker"]) - {"cache"}
    assert workers and all(":" in w for w in workers)


def test_multi_codesign_front_has_proven_plans(tmp_path: Path) -> None:
    space = _space(objective="multi", sampler="nsga2", trials=24)
    result = _run(tmp_path, space=space)
    assert result.summary["objective_metrics"] == ["energy_pj", "cycles", "area_mm2"]
    rows = _search_rows(result)
    done = rows[rows["state"] == "COMPLETE"]
    assert (done["value_2"] == done["area_mm2"]).all()
    front = result.summary["pareto_front"]
    assert front and all(p["plan_proven"] for p in front)
    feasible = done[done["feasible"]]
    for p in front:  # no feasible trial dominates a front point
        values = [p["energy_pj"], p["cycles"], p["area_mm2"]]
        for r in feasible.itertuples(index=False):
            other = [r.value_0, r.value_1, r.value_2]
            assert not (
                all(o <= v for o, v in zip(other, values))
                and any(o < v for o, v in zip(other, values))
            )
    _check_plans_proven(result, "energy")


def test_area_constraint_in_the_space(tmp_path: Path) -> None:
    from fusiontune.sim.area import chip_area_mm2
    from fusiontune.sim.hardware import load_hardware

    small = load_hardware("isaac_reram_flat").replace(n_crossbars=128, buffer_bytes=4096)
    cap = chip_area_mm2(small)
    space = _space(constraints={"area_mm2": {"max": cap}}, trials=12)
    result = _run(tmp_path, space=space)
    rows = _search_rows(result)
    fits = rows[rows["capacity_ok"]]
    assert not fits.empty and ((fits["area_mm2"] <= cap) == fits["feasible"]).all()
    assert (~rows["feasible"]).any()  # some designs were too large
    area_cap = [t.system_attrs["constraints:area_mm2"] for t in _study(result).trials]
    assert all((c <= 0) == (a <= cap) for c, a in zip(area_cap, rows["area_mm2"]))
    best = result.summary["best"]
    assert best["feasible"] and best["area_mm2"] <= cap


def test_edp_with_knobs_is_plan_level_seeded_from_the_exact_plan(tmp_path: Path) -> None:
    from fusiontune.frontend.loader import load_model
    from fusiontune.planner.plan import Plan
    from fusiontune.search.optimize import optimal_plan
    from fusiontune.sim.hardware import load_hardware

    space = _space(
        objective="edp", trials=4, knobs={"adc_bits": {"choices": [6, 8]}}, sampler="random"
    )
    result = _run(tmp_path, space=space)
    assert result.summary["search"] == "plan"
    first = _search_rows(result).iloc[0]
    exact = optimal_plan(load_model(MODEL), load_hardware("isaac_reram_flat"), "energy").plan
    assert Plan.from_json(first["plan_json"], load_model(MODEL)) == exact
    params = json.loads(json.dumps(_study(result).trials[0].params))
    assert set(params) == {"hw:adc_bits"}  # fusion edges stay in the record only


def test_isaac_preset_area_matches_table_6() -> None:
    from fusiontune.sim.area import (
        ISAAC_CHIP_MM2,
        ISAAC_HYPERTRANSPORT_MM2,
        ISAAC_TILES_MM2,
        area_breakdown,
    )
    from fusiontune.sim.hardware import load_hardware

    area = area_breakdown(load_hardware("isaac_reram_flat"))
    # the preset models ISAAC's 168 tiles; the chip adds 4 HyperTransport links
    assert area.total_mm2 == pytest.approx(ISAAC_TILES_MM2, rel=AREA_REL_TOL)
    chip = area.total_mm2 + ISAAC_HYPERTRANSPORT_MM2
    assert chip == pytest.approx(ISAAC_CHIP_MM2, rel=AREA_REL_TOL)
    # Table 6: 12 IMAs of 0.157 mm² per tile and 64 KB eDRAM of 0.083 mm² per tile
    assert area.crossbar_mm2 == pytest.approx(168 * 0.157, rel=AREA_REL_TOL)
    assert area.buffer_mm2 == pytest.approx(168 * 0.083, rel=1e-12)


def test_area_grows_with_each_knob() -> None:
    from fusiontune.sim.area import chip_area_mm2
    from fusiontune.sim.hardware import load_hardware

    base = load_hardware("isaac_reram_flat")
    a = chip_area_mm2(base)
    assert chip_area_mm2(base.replace(n_crossbars=base.n_crossbars // 2)) < a
    assert chip_area_mm2(base.replace(buffer_bytes=base.buffer_bytes // 2)) < a
    assert chip_area_mm2(base.replace(adc_bits=6)) < a
    digital = load_hardware("stream_tpu_like")  # no ADC: 0 pJ per conversion
    from fusiontune.sim.area import area_breakdown

    assert area_breakdown(digital).adc_mm2 == 0.0


def test_cli_prints_the_winner_and_loads_it_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fusiontune.cli.main import main

    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({**CODESIGN_SPACE, "objective": "multi", "sampler": "nsga2"}))
    out = tmp_path / "out"
    argv = ["search", MODEL, "--space", str(space), "--trials", "12", "--workers", "1"]
    assert main([*argv, "--out", str(out), "--study", "cd"]) == 0
    text = capsys.readouterr().out
    folder = out / "cd"
    best = json.loads((folder / "summary.json").read_text())["best"]
    assert f"isaac_reram_flat {best['hardware']['hw_hash']} with " in text
    assert "n_crossbars=" in text
    assert f"written to {folder / BEST_HARDWARE_FILE}" in text
    assert "plan:             exact for this hardware (proven optimal" in text
    assert "Pareto front:" in text and "optuna-dashboard sqlite:///" in text
    assert main(["report", str(folder)]) == 0
    report = (folder / "report.md").read_text()
    assert "## Hardware" in report and "| trial | energy_pj | cycles | area_mm2 |" in report
    assert (folder / "pareto.png").stat().st_size > 0
    # --hardware takes the written file: the next search starts from the winner
    hw_file = str(folder / BEST_HARDWARE_FILE)
    assert main(["search", MODEL, "--trials", "2", "--workers", "1", "--hardware", hw_file,
                 "--out", str(out), "--study", "next"]) == 0  # fmt: skip
    summary = json.loads((out / "next" / "summary.json").read_text())
    assert summary["hardware_base"]["hw_hash"] == best["hardware"]["hw_hash"]
    assert summary["hardware_base"]["name"] == "isaac_reram_flat_best"
