"""Smoke tests of the experiment scripts (experiments/exp_*.py) on tiny models.

Each script's core function runs on a model small enough for seconds, and the tests check
the table structure and relations that must hold whatever the numbers (fused <= unfused,
optimum >= lower bound, more patterns never worse, more buffer never worse), plus exact
byte counts where they can be worked out by hand.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def _load(name: str) -> ModuleType:
    """Import ``experiments/<name>.py`` (the scripts import their helper ``exp_common``)."""
    if str(EXPERIMENTS) not in sys.path:
        sys.path.insert(0, str(EXPERIMENTS))
    return importlib.import_module(name)


# ---- exp_common ---------------------------------------------------------------------------
def test_write_outputs_writes_csv_per_section_and_one_markdown(tmp_path: Path) -> None:
    common = _load("exp_common")
    rows = [{"a": 1, "b": 2.5}, {"a": 1234567, "b": None}]
    paths = common.write_outputs("t", "Title", [("one", rows), ("two", rows)], ["n1"], tmp_path)
    assert [p.name for p in paths] == ["exp_t.csv", "exp_t_2.csv", "exp_t.md"]
    assert (tmp_path / "exp_t.csv").read_text().splitlines() == ["a,b", "1,2.5", "1234567,"]
    md = (tmp_path / "exp_t.md").read_text()
    assert "| a | b |" in md and "| 1,234,567 |  |" in md and "- n1" in md


# ---- exp_alwani ---------------------------------------------------------------------------
ALWANI_SIDE = 32  # vgg19 at 32x32: the same 12 ops, maps 32/16/8 wide


def test_alwani_bytes_match_hand_counts() -> None:
    exp = _load("exp_alwani")
    r = exp.run(input_size=ALWANI_SIDE)
    act = 4  # act_bits=32
    assert r.ops == (
        "conv1", "conv1.relu", "conv2", "conv2.relu", "pool1", "conv3", "conv3.relu",
        "conv4", "conv4.relu", "pool2", "conv5", "conv5.relu",
    )  # fmt: skip
    s1, s2, s3 = ALWANI_SIDE, ALWANI_SIDE // 2, ALWANI_SIDE // 4
    image, out = 3 * s1 * s1, 256 * s3 * s3
    assert r.fused_bytes == (image + out) * act
    c1, c2, c3 = 64 * s1 * s1, 128 * s2 * s2, 256 * s3 * s3
    assert r.paper_baseline_bytes == (image + 2 * c1 + 2 * c1 + 2 * c2 + 2 * c2 + c3) * act
    # the model's buffer is what the executor measures for the fused group (one row a step)
    assert r.line_buffer_bytes == r.measured_buffer_bytes
    # between the paper's reuse buffers (2 rows before each 3x3 conv) and 2x that
    assert r.overlap_rows_bytes < r.line_buffer_bytes < 2 * r.overlap_rows_bytes
    # paper-style reuse: k0-1 = 2 rows before each 3x3 conv inside the group, none for pools
    assert r.overlap_rows_bytes == 2 * (64 * s1 + 64 * s2 + 128 * s2 + 128 * s3) * act
    assert r.fused_bytes < r.layerwise_bytes < r.paper_baseline_bytes < r.unfused_bytes
    assert r.feasible and r.hw.act_bits == 32


def test_alwani_table_has_paper_and_ours_columns() -> None:
    exp = _load("exp_alwani")
    result = exp.run(input_size=ALWANI_SIDE)
    rows = exp.table(result)
    assert len(rows) == 8
    assert list(rows[0]) == [
        "quantity", "source", "paper", "ours_bytes", "ours_KB", "ours_KiB", "ours_MB",
        "ours_MiB", "ours_ratio",
    ]  # fmt: skip
    fused = next(r for r in rows if r["quantity"].startswith("fused"))
    assert fused["ours_MiB"] == pytest.approx(result.fused_bytes / 2**20, rel=1e-12)
    reduction = rows[-1]["ours_ratio"]
    assert -1.0 < reduction < 0.0
    assert len(exp.notes(result)) >= 6


# ---- exp_zoo ------------------------------------------------------------------------------
ZOO_MODELS = [("lenet5", 32), ("mlp_linear", 784)]


@pytest.fixture(scope="module")
def zoo_tables() -> tuple[list[dict], list[dict]]:
    exp = _load("exp_zoo")
    return exp.run(ZOO_MODELS, exp.PRESETS, trials=8)


def test_zoo_plan_rows_are_ordered_by_quality(zoo_tables: tuple[list[dict], list[dict]]) -> None:
    plans, _ = zoo_tables
    for model, _size in ZOO_MODELS:
        for preset in ("isaac_reram_flat", "sram_edge"):
            rows = {r["plan"]: r for r in plans if r["model"] == model and r["preset"] == preset}
            sources = {"unfused", "greedy", "oracle", "oracle_capped12"}
            assert sources | {"lower_bound", "capacity_bound"} <= set(rows)
            traffic = {k: r["traffic_bytes"] for k, r in rows.items()}
            oracle = rows["oracle"]
            assert oracle["feasible"] and oracle["proven"] and oracle["gap"] == 0.0
            assert rows["oracle_capped12"]["feasible"] and rows["greedy"]["feasible"]
            # compulsory <= capacity-aware bound <= uncapped optimum <= capped optimum, greedy
            assert traffic["lower_bound"] <= traffic["capacity_bound"] <= traffic["oracle"]
            assert traffic["oracle"] <= traffic["oracle_capped12"] <= traffic["unfused"]
            assert traffic["oracle"] <= traffic["greedy"]
            if "best_found" in rows:  # a search never beats the proven optimum
                assert rows["best_found"]["feasible"]
                assert rows["best_found"]["traffic_bytes"] >= oracle["traffic_bytes"]
            assert rows["unfused"]["traffic_vs_unfused"] == 1.0
    # lenet5 on ISAAC: everything fuses down to the compulsory traffic (image in, logits out)
    lenet = {
        r["plan"]: r for r in plans if r["model"] == "lenet5" and r["preset"] == "isaac_reram_flat"
    }
    assert lenet["oracle"]["traffic_bytes"] == lenet["lower_bound"]["traffic_bytes"] == 32 * 32 + 10
    assert lenet["capacity_bound"]["traffic_bytes"] == 32 * 32 + 10


def test_zoo_optimum_table_relates_optimum_and_bounds(
    zoo_tables: tuple[list[dict], list[dict]],
) -> None:
    exp = _load("exp_zoo")
    plans, _ = zoo_tables
    rows = exp.optimum_rows(plans)
    assert len(rows) == len(ZOO_MODELS) * 2
    for row in rows:
        assert row["proven"] and row["optimum_over_capacity"] >= 1.0
        assert row["capped12_over_optimum"] >= 1.0 and row["greedy_over_optimum"] >= 1.0
        assert row["optimum_over_compulsory"] >= row["optimum_over_capacity"]
        assert row["compulsory_bytes"] <= row["capacity_bytes"] <= row["optimum_bytes"]


def test_zoo_ablation_never_gets_worse_with_more_patterns(
    zoo_tables: tuple[list[dict], list[dict]],
) -> None:
    exp = _load("exp_zoo")
    _, ablation = zoo_tables
    assert len(ablation) == len(ZOO_MODELS) * 2
    labels = [label for label, _ in exp.ABLATIONS]
    for row in ablation:
        values = [row[f"{label}_bytes"] for label in labels]
        assert all(v is not None for v in values)
        assert values == sorted(values, reverse=True)
        assert values[0] <= row["unfused_bytes"]
    # mlp_linear has no nonlinearity: only P3 (merge) removes the hidden activations
    mlp = next(r for r in ablation if r["model"] == "mlp_linear" and r["preset"] == "sram_edge")
    assert mlp["P1+P2+P3_gain"] > 0.9 and mlp["P1+P2_gain"] == 0.0


def test_zoo_summary_geomeans(zoo_tables: tuple[list[dict], list[dict]]) -> None:
    exp = _load("exp_zoo")
    plans, _ = zoo_tables
    summary = exp.summary_rows(plans)
    # unfused, tvm_like, greedy, best_found, oracle, oracle_capped12, two bounds
    assert len(summary) == 2 * 8
    unfused = [r for r in summary if r["plan"] == "unfused"]
    assert all(r["geomean_traffic_vs_unfused"] == pytest.approx(1.0) for r in unfused)
    oracle = [r for r in summary if r["plan"] == "oracle"]
    assert all(0 < r["geomean_traffic_vs_unfused"] < 1 for r in oracle)
    # the general-compiler baseline saves something, fusiontune's optimum more
    tvm = {r["preset"]: r["geomean_traffic_vs_unfused"] for r in summary if r["plan"] == "tvm_like"}
    for row in oracle:
        assert row["geomean_traffic_vs_unfused"] <= tvm[row["preset"]] < 1


# ---- exp_codesign -------------------------------------------------------------------------
def test_codesign_more_buffer_never_costs_more_traffic() -> None:
    exp = _load("exp_codesign")
    from fusiontune.frontend.zoo import build_zoo
    from fusiontune.sim.hardware import load_hardware

    graph = build_zoo("lenet5")
    buffers = [1024, 1536, 4096, 1 << 20]
    rows = exp.sweep(graph, load_hardware("isaac_reram_flat"), "buffer_bytes", buffers)
    assert [r["buffer_bytes"] for r in rows] == buffers
    optima = [r["optimum_bytes"] for r in rows]
    assert all(o is not None for o in optima)
    assert optima == sorted(optima, reverse=True)
    assert optima[0] <= rows[0]["unfused_bytes"]
    assert optima[-1] == rows[-1]["lower_bound_bytes"]  # lenet5 fuses completely
    for r in rows:
        assert r["plan_buffer_bytes"] <= r["buffer_bytes"]
        assert r["proven"]
        assert r["lower_bound_bytes"] <= r["capacity_bound_bytes"] <= r["optimum_bytes"]
        assert r["optimum_bytes"] <= r["capped12_bytes"]
        assert r["optimum_over_capacity"] >= 1.0
    assert rows[0]["pareto"] and rows[-1]["benefit_share"] == 1.0
    assert optima[0] > optima[-1]  # a 1 KiB buffer forbids the whole-network stream group


# ---- bench_optimizer ----------------------------------------------------------------------
def test_tiling_rows_relate_unfused_optimum_and_bound() -> None:
    exp = _load("exp_tiling")
    row, kinds = exp.model_rows("mobilenet_v2")
    assert row["unfused_feasible"] and row["tiled_ops"] == sum(k["ops"] for k in kinds) == 1
    assert kinds[0]["op_type"] == "Conv" and kinds[0]["scheme"] == "window"
    assert row["optimum_status"] == "optimal"
    bound, best = row["capacity_bound_bytes"], row["optimum_traffic_bytes"]
    assert bound <= best <= row["greedy_traffic_bytes"] <= row["unfused_traffic_bytes"]
    assert row["tiled_reread_bytes"] >= 0


def test_bench_optimizer_rows_relate_optimum_capped_and_bounds() -> None:
    bench = _load("bench_optimizer")
    rows = bench.zoo_rows(["lenet5", "mlp_bottleneck"], ["isaac_reram_flat", "sram_edge"])
    assert len(rows) == 4
    for r in rows:
        assert r["status"] == "optimal" and r["proven"] and r["gap"] == 0.0
        assert r["compulsory_bytes"] <= r["capacity_bytes"] <= r["optimum_bytes"]
        assert r["optimum_bytes"] <= r["capped12_bytes"]
        assert r["ideals"] >= 1 and r["groups_evaluated"] >= r["groups"] >= 1
    sweep = bench.buffer_rows("lenet5", [1024, 1 << 20])  # 1 KiB: fits layers, not the net
    assert [r["buffer_bytes"] for r in sweep] == [1024, 1 << 20]
    assert sweep[0]["optimum_bytes"] > sweep[1]["optimum_bytes"] == sweep[1]["compulsory_bytes"]
    assert sweep[0]["optimum_over_capacity"] >= 1.0
    counts = bench.count_rows(["lenet5", "mlp_relu"])
    assert [int(r["plans"]) >= int(r["capped12_plans"]) for r in counts] == [True, True]
    assert counts[1]["plans"] == "16"  # 5-op chain FC-ReLU-FC-ReLU-FC: 2^4 partitions
    goals = bench.targets({"zoo": rows, "buffer": sweep})
    assert [g["met"] for g in goals] == [True, True]


def test_bench_optimizer_large_rows_on_a_small_encoder() -> None:
    bench = _load("bench_optimizer")
    from fusiontune.frontend.zoo import deep_encoder

    graphs = [("enc2", lambda: deep_encoder(2, seq=8, hidden=32, heads=2))]
    rows = bench.large_rows(graphs, ["sram_edge"], time_limit_s=60.0)
    assert len(rows) == 1 and rows[0]["ops"] == 2 * 29
    assert rows[0]["proven"] and rows[0]["capacity_bytes"] <= rows[0]["optimum_bytes"]
    assert "capped12_bytes" not in rows[0]


# ---- exp_search_quality -------------------------------------------------------------------
def test_search_quality_curves_and_tables() -> None:
    exp = _load("exp_search_quality")
    curves, refs = exp.run([("lenet5", None)], ["random"], [0, 1], trials=6, presets=["sram_edge"])
    assert [(c.seed, c.preset) for c in curves] == [(0, "sram_edge"), (1, "sram_edge")]
    ref = refs["lenet5", "sram_edge"]
    assert ref.compulsory_bound <= ref.capacity_bound <= ref.optimum <= ref.capped12
    for c in curves:
        assert len(c.best_bytes) == 6
        values = [v for v in c.best_bytes if v is not None]
        assert values == sorted(values, reverse=True)  # best-so-far never rises
        assert min(values) >= ref.optimum
    rows = exp.run_rows(curves, refs)
    assert {"trials_to_1pct", "best_over_optimum", "best_over_capped12"} <= set(rows[0])
    # lenet5: greedy (trial 1) is one group, already optimal on sram_edge
    assert all(r["trials_to_1pct"] == 1 and r["best_over_optimum"] == 1.0 for r in rows)
    assert all(r["best_over_capacity_bound"] >= 1.0 for r in rows)
    medians = exp.median_rows(rows)
    assert len(medians) == 1 and medians[0]["runs_within_1pct"] == 2
    assert medians[0]["preset"] == "sram_edge"
    assert len(exp.start_notes(curves, refs)) == 1
    assert "does not separate the samplers" in exp.reading(medians)[0]


def test_trials_to_within_counts_from_one() -> None:
    exp = _load("exp_search_quality")
    curve = exp.Curve("m", "isaac_reram_flat", "random", 0, (None, 120, 101, 100), 0.0)
    assert exp.trials_to_within(curve, 100.0) == 3
    assert exp.trials_to_within(curve, 100.0, within=0.0) == 4
    assert exp.trials_to_within(curve, 50.0) is None


# ---- exp_scale ----------------------------------------------------------------------------
def test_scale_serial_passes_and_projection() -> None:
    exp = _load("exp_scale")
    from fusiontune.frontend.zoo import build_zoo
    from fusiontune.sim.hardware import load_hardware

    graph = build_zoo("lenet5")
    tasks = exp.make_tasks(graph, load_hardware("isaac_reram_flat"), 20)
    passes, startup = exp.backend_passes(graph, tasks, workers=())
    assert [(p.backend, p.cache) for p in passes] == [("serial", "cold"), ("serial", "warm")]
    assert startup == {}
    rows = exp.throughput_rows(passes)
    assert all(r["evals_per_s"] > 0 and r["vs_serial"] == 1.0 for r in rows)
    driver = exp.driver_seconds(graph, "random", trials=5)
    assert driver["trials"] == 5
    assert 0 < driver["eval_s_per_trial"] < driver["s_per_trial"]
    text = exp.projection(rows, startup, [driver])
    assert any("64 x" in line for line in text)
    run = exp.codesign_run(graph, "serial", 1, trials=4)
    assert run["trials"] == 4 and 1 <= run["evaluations"] <= 4
    assert 0 < run["eval_s_total"] < run["wall_s"]
    notes = exp.codesign_notes(
        [run, {**run, "backend": "ray"}, {**run, "backend": "ray", "workers": 2}]
    )
    assert "1.00x as fast" in notes[0]


def test_scale_codesign_notes_decompose_the_speedup() -> None:
    """wall1 / wall2 = 2 x (U2 / U1) x (E1 / E2): the notes' factors multiply to the speed-up,
    and a speed-up under the target says so."""
    exp = _load("exp_scale")

    def run(backend: str, workers: int, wall: float, eval_s: float, steady: float) -> dict:
        n = 10
        return {"backend": backend, "workers": workers, "trials": n, "evaluations": n,
                "wall_s": wall, "trials_per_s": n / wall, "eval_s_total": eval_s,
                "eval_s_per_evaluation": eval_s / n, "utilisation": eval_s / (workers * wall),
                "busiest_worker_share": 0.5, "driver_cpu_s_per_trial": 0.02,
                "steady_trials_per_s": steady, "worker_cpu_share": 0.9,
                "load_before": 0.5, "load_after": 0.7}  # fmt: skip

    notes = exp.codesign_notes([run("serial", 1, 9.0, 7.0, 1.2), run("ray", 1, 10.0, 8.0, 1.0),
                                run("ray", 2, 6.0, 9.0, 1.9)])  # fmt: skip
    assert "1.67x as fast" in notes[0] and "below the 1.8x target" in notes[0]
    assert "steady state" in notes[0] and "1.90x (1.90): meets the 1.8x target" in notes[0]
    assert "2 x 0.94 x 0.89 = 1.67" in notes[1] and "on a CPU 90% of the time" in notes[1]
    assert "0.5 to 0.7" in notes[2]
    assert "20.0 ms of driver CPU per trial" in notes[3]


# ---- exp_sweep ----------------------------------------------------------------------------
def test_sweep_analyses_a_cached_export_without_torch(tmp_path: Path) -> None:
    """A corpus file stands in for a cached export: every analysis step runs in its child
    process; the FPN neck's ConvTranspose and Resize load in fusable classes (no OPAQUE op)."""
    import csv
    import shutil

    sweep = _load("exp_sweep")
    cache, out, work = tmp_path / "cache", tmp_path / "out", tmp_path / "analyses"
    cache.mkdir()
    neck = Path(__file__).parent / "data" / "onnx_forms" / "fpn_neck.onnx"
    shutil.copy(neck, cache / "tv_resnet18_fpn.torchscript.onnx")
    args = ["--only", "^tv_resnet18_fpn$", "--exporters", "torchscript", "--no-export",
            "--skip-models-cli", "--cache", str(cache), "--out", str(out),
            "--analysis-dir", str(work), "--name", "sweep_x"]  # fmt: skip
    assert sweep.main(args) == 0
    assert [p.name for p in cache.iterdir()] == ["tv_resnet18_fpn.torchscript.onnx"]  # read only
    (row,) = list(csv.DictReader((out / "sweep_x.csv").open()))
    assert row["loaded"] == "True" and row["ops"] == "15" and row["opaque_ops"] == "0"
    assert row["opaque_types"] == ""
    assert row["opaque_mac_ops"] == "0" and row["mac_ops"] == "9"
    assert row["ort_ok"] == "True" and float(row["ort_rel_err"]) <= sweep.REL_TOL
    assert row["verify_greedy_ok"] == "True" and row["verify_optimum_ok"] == "True"
    assert row["optimum_status"] == "optimal"
    assert int(float(row["optimum_bytes"])) <= int(row["greedy_bytes"]) <= int(row["unfused_bytes"])
    assert float(row["cli_count_s"]) > 0 and float(row["cli_explain_s"]) > 0
    assert row["plans_exact"] == "True" and row["explain_complete"] == "True"
    assert int(row["fusable_edges"]) > 0
    assert row["failures"] == ""
    ops = (out / "sweep_x_ops.md").read_text()
    assert "| ConvTranspose |" not in ops and "| Resize |" not in ops
    report = (out / "sweep_x.md").read_text()
    assert "--no-export --cache DIR --analysis-dir DIR --name sweep_x" in report
    assert "| dynamo |" not in report  # only the exporters of the run
    # the second run reads the cached analysis instead of running the steps again
    cached = work / "tv_resnet18_fpn.torchscript.analysis.json"
    stamp = cached.stat().st_mtime_ns
    assert sweep.main([*args, "--cached-only"]) == 0
    assert cached.stat().st_mtime_ns == stamp


def test_sweep_resumes_a_file_killed_between_steps(tmp_path: Path) -> None:
    """A partial analysis (written after every step) with the same key is resumed: its steps
    are kept as they are and only the missing one runs; another key starts over."""
    import shutil

    sweep = _load("exp_sweep")
    path = tmp_path / "neck.torchscript.onnx"
    shutil.copy(Path(__file__).parent / "data" / "onnx_forms" / "fpn_neck.onnx", path)
    key = {"file_sha256": "x", "fusiontune": "y"}
    done = {s: {"step": s, "ok": True, "marker": 1} for s in sweep.STEPS if s != "cli_count"}
    partial = tmp_path / "neck.torchscript.analysis.partial.json"
    (tmp_path / "neck.torchscript.optimum.json").write_text("{}")  # the optimum's plan
    partial.write_text(json.dumps({"key": key, "steps": done}))
    steps = sweep.analyse_file(path, 120.0, tmp_path, key)
    assert [s for s in sweep.STEPS if steps[s].get("marker") != 1] == ["cli_count"]
    assert steps["cli_count"]["ok"] and steps["cli_count"]["cli_count_s"] > 0
    # the partial file now holds every step; under another key nothing of it is kept (the
    # file, no longer ONNX, then fails to load: the steps really ran again)
    assert set(json.loads(partial.read_text())["steps"]) == set(sweep.STEPS)
    path.write_text("not onnx")
    steps = sweep.analyse_file(path, 120.0, tmp_path, {**key, "fusiontune": "z"})
    assert list(steps) == ["load"] and not steps["load"]["ok"]


def test_sweep_step_budget_is_cpu_time_not_wall_time() -> None:
    """A step that waits (no CPU) longer than its budget is not timed out; one that computes
    past it is."""
    import subprocess

    sweep = _load("exp_sweep")
    sleeper = "import time; time.sleep(2.5); print('done', flush=True)"
    proc = subprocess.Popen([sys.executable, "-c", sleeper], stdout=subprocess.PIPE)
    assert sweep._read_line(proc, 1.0, bytearray()) == "done"
    proc.wait()
    spinner = "while True: pass"
    proc = subprocess.Popen([sys.executable, "-c", spinner], stdout=subprocess.PIPE)
    assert sweep._read_line(proc, 0.5, bytearray()) is None
    proc.kill()
    proc.wait()


def test_sweep_reruns_steps_of_the_former_wall_clock_budget() -> None:
    sweep = _load("exp_sweep")
    skipped = "skipped: 2 steps of this file timed out"
    steps = {"load": {"ok": True}, "greedy": {"ok": False, "error": "timed out after 120 s"},
             "count": {"ok": False, "error": "timed out after 120 s of CPU"},
             "optimum": {"ok": False, "error": skipped}}  # fmt: skip
    assert list(sweep._without_wall_timeouts(steps)) == ["load", "count"]
    del steps["greedy"]
    assert sweep._without_wall_timeouts(steps) is steps  # CPU timeouts stand


def test_sweep_progress_line_counts_pending_files() -> None:
    sweep = _load("exp_sweep")
    rows = [{"model": "a", "exporter": "dynamo", "done": True},
            {"model": "b", "exporter": "dynamo", "done": False}]  # fmt: skip
    line = sweep.progress_line(rows, 4)
    assert line.startswith("**1 of 4 (model, exporter) files done**")
    assert "1 exported but not analysed yet (b/dynamo), 2 not exported yet" in line
    assert sweep.progress_line(rows[:1], 1) == "**1 of 1 (model, exporter) files done**."


def test_sweep_failure_reasons_group_across_models() -> None:
    sweep = _load("exp_sweep")
    rows = [
        {"model": "a", "exporter": "dynamo",
         "failures": "ort: FusiontuneError: op 'n1': no kernel for op type 'IsNaN'"},
        {"model": "b", "exporter": "dynamo",
         "failures": "ort: FusiontuneError: op 'n7': no kernel for op type 'IsNaN' | count: "
                     "timed out after 120 s"},
    ]  # fmt: skip
    groups = sweep.failure_groups(rows)
    assert groups[0]["files"] == 2 and "'IsNaN'" in groups[0]["reason"]
    assert groups[1] == {"stage": "count", "reason": "timed out after N s", "files": 1,
                         "which": "b/dynamo"}  # fmt: skip


# ---- exp_export ---------------------------------------------------------------------------
def test_export_rows_on_a_merged_mlp(tmp_path: Path) -> None:
    """mlp_wide (256 -> 4096 -> 16): every plan merges it into one 256 x 16 Gemm."""
    exp = _load("exp_export")
    from fusiontune.sim.hardware import load_hardware

    hws = [load_hardware("isaac_ddr")]
    result = exp.run_model("mlp_wide", 256, hws, tmp_path, kinds=("greedy", "merge"))
    assert [r["plan"] for r in result.rows] == ["greedy", "merge"]
    for row in result.rows:
        assert row["ops"] == 2 and row["groups"] == row["exported_nodes"] == 1
        assert row["params_after"] == 256 * 16 + 16 < row["params_before"]
        assert row["max_rel_err"] <= exp.TOLERANCE and row["within_1e-5"]
        assert row["roundtrip_traffic_equal"]
        assert 1 <= row["ort_nodes"] <= 2 and row["ort_nodes_of_export"] == 1
        assert row["tvm_like_groups"] == 2  # FuseOps never joins two matmuls
    assert exp.tvm_counts(None, [result.onnx_path]) == ({}, "")


# ---- exp_upsampling ---------------------------------------------------------------------------
def test_upsampling_streams_beat_barriers_on_the_fpn_neck() -> None:
    """Same-run comparison: with ConvTranspose/Resize streaming, the FPN neck's optimum is one
    group and moves less than the optimum with those ops as barriers."""
    exp = _load("exp_upsampling")
    hw = exp.ft.HardwareConfig()
    row = exp.row("fpn_neck", hw)
    assert row["groups"] == 1 and row["groups_barriers"] > 1
    assert row["optimum_B"] <= row["greedy_B"] < row["optimum_barriers_B"] < row["unfused_B"]


# ---- exp_bound ----------------------------------------------------------------------------
def test_exp_bound_rows_order_the_bounds_and_the_diagnostic() -> None:
    from fusiontune.frontend.zoo import build_zoo
    from fusiontune.sim.bounds import capacity_bound
    from fusiontune.sim.hardware import load_hardware

    exp = _load("exp_bound")
    baseline = exp.baseline_bound(exp.default_rev())
    graph = build_zoo("resnet18", input_size=32)
    for preset in ("sram_edge", "zigzag_aimc"):
        hw = load_hardware(preset).replace(buffer_bytes=4096)
        row = exp.case_row(graph, hw, baseline)
        assert row["proven"]
        assert row["baseline_bytes"] <= row["bound_bytes"] <= row["optimum_bytes"]
        assert row["bound_bytes"] <= row["hull_exact_bytes"]  # a stricter capacity test
        assert row["bound_bytes"] == capacity_bound(graph, hw)  # the diagnostic restored it


# ---- exp_manycore -------------------------------------------------------------------------
def test_exp_manycore_rows_on_lenet5() -> None:
    exp = _load("exp_manycore")
    placement, replication = exp.run(("lenet5",), 30.0)
    assert [r["plan"] for r in placement] == ["unfused", "greedy", "optimal"]
    for p, r in zip(placement, replication):
        assert p["dram_bytes"] <= p["movement_bytes"] and p["noc_byte_hops"] >= 0
        assert r["exact_proven"] and r["img_s_exact"] >= max(r["img_s_balance"], r["img_s_none"])
        assert r["xbars_exact"] <= 16128
