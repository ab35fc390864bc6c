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
