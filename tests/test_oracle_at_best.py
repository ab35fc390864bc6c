"""Oracle rows at the best hardware: a co-design run computes the baselines (unfused, TVM-like,
greedy, exhaustive, the exact oracle) again at the best trial's hardware, and every baseline
row says which hardware it used, in summary.json, the trials table, the printed summary and
report.md.

On ``mlp_relu`` (5 ops, 16 legal plans), real SQLite storage, the serial backend and the shared
local Ray. A bilevel trial's plan is the exact optimum for its hardware, so the oracle at the
best hardware must equal the best trial's objective (traffic and energy: the solver is exact).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fusiontune.search.api import SearchResult, search
from fusiontune.search.baseline_runs import AT_BEST_HW, BASELINES
from fusiontune.search.results import hardware_from_json
from fusiontune.search.space import parse_space

MODEL = "mlp_relu"
KNOBS = {
    "buffer_bytes": {"low": 512, "high": 65536, "log": True},
    "n_crossbars": {"low": 16, "high": 512, "log": True},
    "adc_bits": {"choices": [6, 8]},
}
"""Knob ranges on both sides of mlp_relu's needs (74 crossbars, a 1,040-byte buffer)."""

SAME_VALUE_REL = 1e-12
"""Float rounding of two sums of the same group costs (a tie broken differently)."""


def _run(tmp: Path, objective: str, trials: int = 10, **kwargs: Any) -> SearchResult:
    space = parse_space(
        {
            "hardware": "isaac_reram_flat",
            "objective": objective,
            "sampler": "tpe",
            "trials": trials,
            "knobs": kwargs.pop("knobs", KNOBS),
        },
        "<test space>",
    )
    kwargs.setdefault("backend", "serial")
    return search(MODEL, space=space, out=tmp, study="ob", seed=3, **kwargs)


def _rows(result: SearchResult, role: str) -> pd.DataFrame:
    t = result.trials
    return t[(t["source"] != "search") & (t["hw_role"] == role)].set_index("source")


def _best_row(result: SearchResult) -> pd.Series:
    t = result.trials
    best = result.summary["best"]
    return t[(t["source"] == "search") & (t["trial"] == best["trial"])].iloc[0]


def _check_labelled(result: SearchResult) -> dict[str, Any]:
    """Every baseline row, at base and at best hardware, names the hardware it used, in the
    summary and the table; returns the ``at_best_hardware`` block."""
    s = result.summary
    base_hw = s["hardware_base"]["hw_hash"]
    best_hw = s["best"]["hardware"]
    knobs = best_hw["knobs"]
    at_best = s["at_best_hardware"]
    assert at_best["hardware"] == {"role": "best", **{k: best_hw[k] for k in ("name", "hw_hash")},
                                   "knobs": knobs}  # fmt: skip
    assert best_hw["hw_hash"] != base_hw  # the knob ranges exclude the base preset's values
    for block, role, hw_hash in ((s, "base", base_hw), (at_best, "best", best_hw["hw_hash"])):
        assert set(block["baselines"]) == set(BASELINES)
        for row in block["baselines"].values():
            assert row["hardware"]["role"] == role and row["hardware"]["hw_hash"] == hw_hash
            assert set(row["hardware"]["knobs"]) == set(knobs)
    base_rows, best_rows = _rows(result, "base"), _rows(result, "best")
    assert set(base_rows.index) == set(BASELINES)
    assert set(best_rows.index) == {name + AT_BEST_HW for name in BASELINES}
    assert (base_rows["hw_hash"] == base_hw).all()
    assert (best_rows["hw_hash"] == best_hw["hw_hash"]).all()
    for knob, value in knobs.items():
        assert (best_rows[f"hw.{knob}"] == value).all()
    assert (best_rows["state"] == "COMPLETE").all()
    return at_best


@pytest.mark.parametrize(
    ("objective", "metric"), [("energy", "energy_pj"), ("traffic", "traffic_bytes")]
)
def test_bilevel_oracle_at_best_hardware_equals_the_best_trial(
    tmp_path: Path, objective: str, metric: str
) -> None:
    from fusiontune.frontend.loader import load_model
    from fusiontune.search.optimize import optimal_plan

    result = _run(tmp_path, objective)
    assert result.summary["search"] == "bilevel"
    at_best = _check_labelled(result)
    best = _best_row(result)
    oracle = _rows(result, "best").loc["oracle" + AT_BEST_HW]
    # the exact optimum at the best hardware: never above the best trial, and equal to it here
    assert oracle["value_0"] <= best["value_0"] * (1 + SAME_VALUE_REL)
    assert oracle["value_0"] == pytest.approx(best["value_0"], rel=SAME_VALUE_REL)
    assert oracle[metric] == pytest.approx(best[metric], rel=SAME_VALUE_REL)
    assert at_best["oracle_objective"] == objective and at_best["oracle_proven"]
    assert at_best["best_over_optimum"] == pytest.approx(1.0, rel=SAME_VALUE_REL)
    # solved again here, independently of the run
    graph, hw = load_model(MODEL), hardware_from_json(best["hw_json"])
    assert optimal_plan(graph, hw, objective).value == pytest.approx(oracle[metric], rel=1e-12)
    for name in ("unfused", "greedy", "exhaustive"):  # no baseline beats the optimum
        row = _rows(result, "best").loc[name + AT_BEST_HW]
        assert row["value_0"] >= oracle["value_0"] * (1 - SAME_VALUE_REL)


def test_printed_summary_and_report_name_the_hardware_of_each_block(tmp_path: Path) -> None:
    from fusiontune.cli.search import format_summary
    from fusiontune.search.report import write_report

    result = _run(tmp_path, "energy", trials=8)
    s = result.summary
    base, best = s["baselines"]["oracle"]["hardware"], s["at_best_hardware"]["hardware"]
    text = format_summary(s)
    knobs = ", ".join(f"{k}={v}" for k, v in best["knobs"].items())
    header = f"at the best hardware, isaac_reram_flat {best['hw_hash']} ({knobs}):"
    assert header in text
    base_header = f"at the base hardware, isaac_reram_flat {base['hw_hash']} (buffer_bytes=11010048"
    assert base_header in text
    after = text.split(header)[1]  # the rows under the best hardware's header
    assert "exact optimum:" in after and "greedy:" in after
    assert "best / proven optimum at the best hardware (energy): 1.0000" in after
    report = write_report(result.out_dir).read_text()
    assert f"| exact optimum (oracle) | best `{best['hw_hash']}` |" in report
    assert f"| exact optimum (oracle) | base `{base['hw_hash']}` |" in report
    assert f"- best hardware: isaac_reram_flat `{best['hw_hash']}` (`buffer_bytes` = " in report
    assert "optimum at the best trial's hardware (energy): **1.0000**" in report


def test_plan_level_codesign_oracle_at_best_hardware_bounds_the_best(tmp_path: Path) -> None:
    """``edp`` with a knob is a plan-level search: the oracle solves traffic at the best
    trial's hardware, which the best trial's traffic cannot beat."""
    result = _run(
        tmp_path, "edp", trials=6, knobs={"n_crossbars": {"low": 128, "high": 4096, "log": True}}
    )
    assert result.summary["search"] == "plan"
    at_best = _check_labelled(result)
    oracle = _rows(result, "best").loc["oracle" + AT_BEST_HW]
    assert at_best["oracle_objective"] == "traffic"
    assert oracle["traffic_bytes"] <= _best_row(result)["traffic_bytes"]
    assert at_best["best_over_optimum"] >= 1.0


def test_best_trial_at_the_base_hardware_keeps_one_set_of_rows(tmp_path: Path) -> None:
    result = _run(tmp_path, "energy", trials=2, knobs={"adc_bits": {"choices": [8]}})
    at_best = result.summary["at_best_hardware"]
    assert (
        at_best["same_as_base"]
        and at_best["hardware"]["hw_hash"] == (result.summary["hardware_base"]["hw_hash"])
    )
    assert _rows(result, "best").empty and set(_rows(result, "base").index) == set(BASELINES)
    assert result.summary["best_over_optimum"] == pytest.approx(1.0, rel=SAME_VALUE_REL)


def test_fixed_hardware_rows_are_labelled_base(tmp_path: Path) -> None:
    result = search(MODEL, out=tmp_path, study="fixed", trials=3, backend="serial")
    assert "at_best_hardware" not in result.summary
    hw = result.summary["baselines"]["oracle"]["hardware"]
    assert hw == {
        "role": "base",
        "name": "isaac_reram",
        "hw_hash": "0910868cc69803ed",
        "knobs": {},
    }  # fmt: skip  (the default space's chip: ISAAC's 168 tiles)
    t = result.trials
    assert set(t.loc[t["source"] == "search", "hw_role"]) == {"trial"}
    assert set(t.loc[t["source"] != "search", "hw_role"]) == {"base"}


def test_oracle_at_best_hardware_on_ray(tmp_path: Path, ray_local: None) -> None:
    result = _run(tmp_path, "energy", backend="ray", workers=2)
    _check_labelled(result)
    oracle = _rows(result, "best").loc["oracle" + AT_BEST_HW]
    assert oracle["value_0"] == pytest.approx(_best_row(result)["value_0"], rel=SAME_VALUE_REL)
