"""Replication in the search (issue 21 items 3, 5b): every trial's plan is replicated by the
space's strategy, placed with its copies and priced in the batch pipeline; the summary's
headline (``chip``) and ``search_moved``.

resnet18 at 32x32 on ``isaac_168`` (168 cores): small enough for a few seconds per search, large
enough that its stages span many cores (NoC byte-hops > 0) and replicate (copies > stages).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest

from fusiontune.errors import ConfigError
from fusiontune.frontend.zoo import build_zoo
from fusiontune.planner.baselines import unfused_plan
from fusiontune.planner.plan import Plan, PlannerConfig
from fusiontune.search.api import search
from fusiontune.search.headline import CHIP_COLUMNS
from fusiontune.search.problem import Problem
from fusiontune.search.records import RECORD_ATTR
from fusiontune.search.results import SUMMARY_FILE, TRIALS_FILE, SearchResult, read_parquet
from fusiontune.search.space import (
    ADDITIVE_OBJECTIVES,
    OBJECTIVE_METRICS,
    REPLICATIONS,
    load_space,
    parse_space,
    with_overrides,
)
from fusiontune.sim.cost import simulate
from fusiontune.sim.greedy import greedy_plan
from fusiontune.sim.hardware import load_hardware
from fusiontune.sim.placement import place_plan
from fusiontune.sim.replication import (
    STRATEGIES,
    exact_replication,
    plan_stages,
    simulate_replicated,
)

MODEL, SIZE, CHIP = "resnet18", 32, "isaac_168"


@pytest.fixture(scope="module")
def graph() -> Any:
    return build_zoo(MODEL, input_size=SIZE)


# ---- the space -----------------------------------------------------------------------------
def test_replication_is_a_space_key_with_a_clear_error() -> None:
    assert REPLICATIONS == STRATEGIES  # the space offers exactly the simulator's strategies
    assert load_space(None).replication == "exact"
    assert parse_space({"replication": "balance"}, "<t>").replication == "balance"
    with pytest.raises(ConfigError, match=r"<t>: replication 'exat'.*did you mean 'exact'"):
        parse_space({"replication": "exat"}, "<t>")
    with pytest.raises(ConfigError, match=r"--replication: replication 'al'"):
        with_overrides(load_space(None), replication="al")
    assert with_overrides(load_space(None), replication="none").replication == "none"


def test_throughput_objective_is_cycles_per_image_and_not_additive() -> None:
    space = parse_space({"objective": "throughput"}, "<t>")
    assert OBJECTIVE_METRICS[space.objective] == ("pipeline_cycles",)
    assert "throughput" not in ADDITIVE_OBJECTIVES and space.n_objectives == 1


def test_default_replication_keeps_a_study_identity(graph: Any) -> None:
    import hashlib

    hw = load_hardware(CHIP)
    default = Problem.build(graph, load_space(None), hw).identity()
    old = hashlib.sha256(json.dumps({"constraints": {}, "knobs": {}}).encode()).hexdigest()
    assert default["space"] == old[:16]  # studies made before the key resume as they were
    other = Problem.build(graph, with_overrides(load_space(None), replication="none"), hw)
    assert other.identity()["space"] != default["space"]


# ---- what a trial evaluates ----------------------------------------------------------------
def test_simulate_replicated_places_the_copies(graph: Any) -> None:
    hw = load_hardware(CHIP)
    plan = greedy_plan(graph, PlannerConfig(), hw)
    plain = simulate(graph, plan, hw)
    metrics, tp = simulate_replicated(graph, plan, hw, "exact")
    copies = tp.copies()
    assert sum(copies.values()) > len(copies)  # something is replicated
    assert tp.replication.crossbars <= hw.n_crossbars and tp.replication.proven
    placed = place_plan(graph, plan, hw, copies)
    assert (metrics.noc_bytes, metrics.noc_byte_hops) == (placed.noc_bytes, placed.noc_byte_hops)
    assert metrics.noc_byte_hops != plain.noc_byte_hops  # the copies' scatter and gather
    for key in ("traffic_bytes", "energy_pj", "cycles"):  # the group model does not change
        assert getattr(metrics, key) == getattr(plain, key)
    ratio = hw.noc_pj_per_bit_hop / hw.dram_pj_per_bit
    assert metrics.movement_bytes == pytest.approx(
        metrics.traffic_bytes + placed.noc_byte_hops * ratio
    )
    # the slowest stage of each strategy: exact is the least (proven), none the most
    slowest = {
        s: simulate_replicated(graph, plan, hw, s)[1].replication.bottleneck_cycles
        for s in STRATEGIES
    }
    assert slowest["exact"] <= min(slowest["balance"], slowest["uniform"]) <= slowest["none"]
    # the batch pipeline waits for the slowest stage, DRAM and the busiest core's port
    for pg in placed.groups:  # every transfer leaves one core's port and enters another's
        assert sum(pg.core_sent_bytes.values()) == pg.noc_bytes
        assert sum(pg.core_received_bytes.values()) == pg.noc_bytes
    assert sum(placed.core_port_bytes) >= placed.noc_bytes
    assert tp.port_cycles == max(placed.core_port_bytes) / hw.noc_link_bytes_per_cycle > 0
    stage = tp.replication.bottleneck_cycles
    assert tp.pipeline_cycles == max(stage, tp.dram_cycles, tp.port_cycles)
    assert tp.images_per_s == pytest.approx(1e9 * hw.clock_ghz / tp.pipeline_cycles)


def test_one_core_and_loaded_weights_reduce_to_the_old_model(graph: Any) -> None:
    flat = load_hardware("isaac_reram").replace(cores=1, topology="mesh", concentration=1,
                                                mesh_width=0)  # fmt: skip
    plan = unfused_plan(graph)
    metrics, _ = simulate_replicated(graph, plan, flat, "exact")
    assert metrics.as_dict() == simulate(graph, plan, flat).as_dict()
    loaded = load_hardware(CHIP).replace(weights_resident=False)
    _, tp = simulate_replicated(graph, plan, loaded, "exact")
    assert tp.replication.strategy == "none" and set(tp.replication.copies) == {1}
    assert tp.pipeline_cycles == max(tp.latency_cycles, tp.dram_cycles)


# ---- a search: tables and summary ----------------------------------------------------------
@pytest.fixture(scope="module")
def throughput_run(tmp_path_factory: pytest.TempPathFactory) -> SearchResult:
    out = tmp_path_factory.mktemp("tp")
    return search(MODEL, input_size=SIZE, hardware=CHIP, objective="throughput", trials=6,
                  backend="serial", out=out, study="tp")  # fmt: skip


def test_tables_record_the_replication(throughput_run: SearchResult, graph: Any) -> None:
    hw = load_hardware(CHIP)
    trials = read_parquet(throughput_run.out_dir / TRIALS_FILE)  # the file, not the frame
    done = trials[trials["state"] == "COMPLETE"]
    assert set(done["source"]) >= {"search", "greedy", "unfused", "oracle"}
    for column in (*CHIP_COLUMNS, "replication", "replication_crossbars", "stage_cycles"):
        assert done[column].notna().all(), column
    assert (done["replication"] == "exact").all() and (done["noc_byte_hops"] > 0).all()
    assert (done["replication_crossbars"] <= hw.n_crossbars).all()
    assert list(done["value_0"]) == list(done["pipeline_cycles"])
    # each row is what simulate_replicated gives its plan
    for row in done.drop_duplicates("plan_hash").itertuples():
        plan = Plan.from_json(row.plan_json, graph)
        metrics, tp = simulate_replicated(graph, plan, hw, "exact")
        assert (row.traffic_bytes, row.noc_byte_hops) == (
            metrics.traffic_bytes,
            metrics.noc_byte_hops,
        )
        assert (row.images_per_s, row.replication_copies) == (
            tp.images_per_s,
            sum(tp.copies().values()),
        )
    # the Optuna SQLite storage holds the same record
    storage = f"sqlite:///{throughput_run.out_dir / 'study.db'}"
    study = optuna.load_study(study_name="tp", storage=storage)
    stored = study.trials[0].user_attrs[RECORD_ATTR]["metrics"]
    assert stored["replication"] == "exact" and stored["images_per_s"] > 0


def test_summary_headline_is_consistent_with_simulate(
    throughput_run: SearchResult, graph: Any
) -> None:
    hw = load_hardware(CHIP)
    summary = json.loads((throughput_run.out_dir / SUMMARY_FILE).read_text())
    chip = summary["chip"]
    assert (chip["hardware"], chip["cores"], chip["replication"]) == (CHIP, 168, "exact")
    rows = chip["rows"]
    assert {"best", "greedy", "unfused", "oracle"} <= set(rows)
    plans = {
        "best": Plan.from_json((throughput_run.out_dir / "best_plan.json").read_text(), graph),
        "greedy": greedy_plan(graph, PlannerConfig(), hw),
        "unfused": unfused_plan(graph),
    }
    for name, plan in plans.items():
        metrics, tp = simulate_replicated(graph, plan, hw, "exact")
        expected = {**metrics.as_dict(), **tp.as_dict()}
        assert {c: rows[name][c] for c in CHIP_COLUMNS} == {c: expected[c] for c in CHIP_COLUMNS}
    assert rows["unfused"]["traffic_bytes"] > rows["best"]["traffic_bytes"]
    # the bounds: no row below the DRAM bound or above the images/s bound
    bounds = chip["bounds"]
    assert bounds["traffic_bytes"] == max(summary["lower_bounds"].values())
    stages = plan_stages(graph, unfused_plan(graph), hw)
    exact = exact_replication(stages, hw.n_crossbars)
    assert bounds["throughput"]["proven"]
    assert bounds["throughput"]["stage_cycles"] == exact.bottleneck_cycles
    for row in rows.values():
        assert row["traffic_bytes"] >= bounds["traffic_bytes"]
        assert row["images_per_s"] <= bounds["throughput"]["images_per_s"] * (1 + 1e-12)
    for row in rows.values():  # no plan's pipeline beats the bound of its stages and DRAM
        assert row["pipeline_cycles"] >= bounds["throughput"]["pipeline_cycles"]
    _check_moved(summary)


def _check_moved(summary: dict[str, Any]) -> None:
    """``search_moved``: the best trial improves on trial 0 (ratio < 1, another plan), or the
    summary gives the measured reason."""
    moved, rows = summary["search_moved"], summary["chip"]["rows"]
    assert moved["moved"] == (summary["best"]["trial"] != 0)
    if moved["moved"]:
        assert moved["best_over_trial_0"][0] < 1.0
        assert rows["best"]["trial"] != 0 and rows["best"] != rows["trial_0"]
    else:
        assert moved["best_over_trial_0"] == [1.0] and "trial_0" not in rows
        assert moved["reason"]


def test_cli_summary_prints_the_headline(throughput_run: SearchResult) -> None:
    from fusiontune.cli.search import format_summary

    summary = throughput_run.summary
    text = format_summary(summary)
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "NoC byte-hops" in line)
    table = lines[at + 1 :]
    assert "DRAM bytes" in lines[at] and "energy pJ" in lines[at] and "images/s" in lines[at]
    best = summary["chip"]["rows"]["best"]
    line = next(line for line in table if line.strip().startswith("best (trial"))
    assert f"{best['traffic_bytes']:,}" in line and f"{best['noc_byte_hops']:,}" in line
    assert f"{best['images_per_s']:,.0f}" in line
    unfused = next(line for line in table if line.strip().startswith("unfused:"))
    assert f"{summary['chip']['rows']['unfused']['traffic_bytes']:,}" in unfused
    moved = summary["search_moved"]
    if moved["moved"]:
        ratio = moved["best_over_trial_0"][0]
        assert f"search moved: best / trial 0 = {ratio:.4f}" in text
    else:
        assert f"search did not move from trial 0: {moved['reason']}" in text


def test_search_on_ray_moves_or_says_why(tmp_path: Path, ray_local: None) -> None:
    """edp (not additive) on the 168 cores, on the shared Ray: the best trial differs from
    trial 0 and its ratio is below 1, or the summary gives the reason."""
    result = search(MODEL, input_size=SIZE, hardware=CHIP, objective="edp", trials=30,
                    workers=2, backend="ray", out=tmp_path, study="edp")  # fmt: skip
    summary = json.loads((result.out_dir / SUMMARY_FILE).read_text())
    _check_moved(summary)
    if summary["search_moved"]["moved"]:
        trials = result.trials[result.trials["source"] == "search"]
        trial_0 = trials[trials["trial"] == 0]["value_0"].iloc[0]
        assert summary["best"]["values"][0] < trial_0


def test_cli_replication_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fusiontune.cli.main import main

    argv = ["search", "mlp_relu", "--workers", "1", "--trials", "2", "--out", str(tmp_path)]
    assert main([*argv, "--replication", "exat"]) == 2
    err = capsys.readouterr().err
    assert "--replication: replication 'exat' is not allowed" in err and "'exact'" in err
    assert main([*argv, "--replication", "none", "--hw", CHIP]) == 0
    trials = read_parquet(tmp_path / "mlp_relu" / TRIALS_FILE)
    assert (trials["replication"] == "none").all() and (trials["replication_copies"] > 0).all()
    assert "replication none" in capsys.readouterr().out
