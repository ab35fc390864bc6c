"""experiments/exp_pimcomp.py: parsing PIMCOMP-NN's output (a committed sample, no build)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

from fusiontune.sim.hardware import load_hardware
from fusiontune.sim.matrices import WeightMatrix
from fusiontune.sim.placement import matrix_crossbars

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
SAMPLE = Path(__file__).resolve().parent / "data" / "pimcomp" / "resnet18_balance_batch"


def _load() -> ModuleType:
    if str(EXPERIMENTS) not in sys.path:
        sys.path.insert(0, str(EXPERIMENTS))
    return importlib.import_module("exp_pimcomp")


def test_the_log_gives_crossbars_time_and_bytes() -> None:
    run = _load().load_run(SAMPLE)
    assert run.rc == 0 and run.error == ""
    assert run.crossbars == 10868
    assert run.practical_ns == 522029.0
    assert (run.comm_bytes, run.mem_load_bytes) == (884264, 8142147)


def test_the_mapping_gives_copies_crossbars_and_windows_per_node() -> None:
    run = _load().load_run(SAMPLE)
    assert run.copies == {29: 1, 35: 2, 40: 1}
    assert run.node_crossbars == {29: 32, 35: 1152, 40: 128}
    assert run.windows_per_copy == {29: 49, 35: 25, 40: 1}
    assert run.bottleneck_windows == 49


def test_its_crossbars_are_fusiontunes_on_the_matched_chip() -> None:
    """128 x 32 8-bit weights per PIMCOMP crossbar = one 128 x 128 crossbar of 2-bit cells."""
    hw = load_hardware("isaac_168")
    run = _load().load_run(SAMPLE)
    shapes = {29: (256, 512, 49), 35: (4608, 512, 49), 40: (512, 1000, 1)}  # rows, cols, vectors
    for node, (rows, cols, vectors) in shapes.items():
        m = WeightMatrix(("op",), rows, cols, 1, vectors, 7, 1)
        assert matrix_crossbars(m, hw) * run.copies[node] == run.node_crossbars[node]


def test_a_run_without_results_says_why() -> None:
    mod = _load()
    run = mod.parse_log("# rc 134 seconds 2.0\nloading\nCurrent replication time is illegal.\n")
    assert run.practical_ns is None and run.crossbars is None
    assert "illegal" in run.error
    assert mod.parse_log("# rc -1 seconds 9.0\n").error == "timed out"


def test_layers_match_matrices_of_equal_shape_in_any_order() -> None:
    mod = _load()
    layers = [mod.Layer(1, "conv", 64, 128, 784, 1), mod.Layer(2, "conv", 576, 128, 784, 1)]
    mats = [
        WeightMatrix(("b",), 576, 128, 1, 784, 28, 3),
        WeightMatrix(("a",), 64, 128, 1, 784, 28, 1),
    ]
    assert mod.match_layers(layers, mats) == ([1, 0], "")
    bad = [mod.Layer(1, "conv", 64, 64, 784, 1), layers[1]]
    match, why = mod.match_layers(bad, mats)
    assert match == [] and "node 1" in why


def test_the_goal_row_takes_pimcomps_fastest_strategy_and_compares_at_its_crossbars() -> None:
    mod = _load()
    fast = mod.PimcompRun(crossbars=100, practical_ns=1000.0, comm_bytes=10, mem_load_bytes=90)
    fast.windows_per_copy = {1: 5}
    slow = mod.PimcompRun(crossbars=50, practical_ns=4000.0, comm_bytes=1, mem_load_bytes=9)
    pim = {("GA", "batch"): fast, ("balance", "batch"): slow, ("GA", "element"): slow}

    def side(label: str, windows: int, per_s: float) -> dict[str, object]:
        return {
            "plan": "greedy", "replication": label, "crossbars": 90, "bottleneck_windows": windows,
            "images_per_s": per_s, "dram_bytes": 20, "noc_bytes": 30, "noc_byte_hops": 60,
        }  # fmt: skip

    rows = [
        side("ft exact @400", 2, 40.0),
        side("ft balance @400", 4, 20.0),
        side("ft exact @100 (GA)", 5, 10.0),
    ]
    row = mod.summary_row("chip", "m", pim, rows, 0.5)
    assert (row["pimcomp_best"], row["pimcomp_xbars"], row["ft_xbars"]) == ("GA", 100, 90)
    assert row["pimcomp_img_s_own"] == 1e6 and row["pimcomp_best_vs_balance_own"] == 4.0
    assert row["ft_exact_vs_balance_own"] == 2.0
    assert row["throughput_geq"] is True and row["fewer_bytes"] is True  # 50 < 100
    assert (row["ft_movement_bytes"], row["pimcomp_movement_bytes"]) == (50, 95)
    assert mod.summary_row("chip", "m", {}, rows, 0.5)["pimcomp_best"] == "none ran"


def test_a_layer_wider_than_a_core_counts_its_column_parts_as_one_copy() -> None:
    """vgg16's FC: ceil(4096 / 32) = 128 crossbars per row block > 96 per core -> AGP 2."""
    mod = _load()
    lines = ["core_0", "   node  r_index  index_r  | AG_index  xbar_num  input_cycle"]
    ag = 0
    for part in (0, 1):  # r_index = copy x AGP + part
        for block in range(3):
            lines.append(f"     20      {part}       {block}     |  {ag:4d}       128          1")
            ag += 1
    run = mod.PimcompRun()
    mod.parse_mapping("\n".join(lines), run)
    assert run.copies == {20: 1} and run.node_crossbars == {20: 3 * 128}


def test_one_copy_of_a_model_counts_its_crossbars_as_pimcomp_partitions_them() -> None:
    mod = _load()
    layers = [mod.Layer(35, "conv", 4608, 512, 49, 1), mod.Layer(40, "fc", 512, 1000, 1, 1)]
    assert mod.one_copy_crossbars(layers) == 36 * 16 + 4 * 32  # ceil(H / 128) x ceil(W / 32)
