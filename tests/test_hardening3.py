"""Regression tests for issue 24 (hardening, round three): each bad input names its fault."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusiontune.cli.main import main
from fusiontune.errors import ModelLoadError
from fusiontune.frontend.onnx_import import load_onnx
from fusiontune.frontend.zoo import build_zoo


@pytest.fixture(autouse=True)
def _keep_memory_limit() -> Iterator[None]:
    """``--memory-limit`` sets a process-wide limit: restore it after each test."""
    from fusiontune.limits import memory_limit, set_memory_limit

    previous = memory_limit()
    yield
    set_memory_limit(previous)


# ---- zero-size initializers -----------------------------------------------------------------
def _save(tmp_path: Path, nodes: list[onnx.NodeProto], inits: dict[str, np.ndarray],
          x_shape: list[int], y_shape: list[int] | None = None) -> Path:  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "bad.onnx"
    onnx.save(model, str(path))
    return path


def _conv(bias: np.ndarray) -> tuple[list[onnx.NodeProto], dict[str, np.ndarray]]:
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[1, 1])
    return [node], {"w": np.ones((4, 3, 1, 1)), "b": bias}


def _bn(scale: np.ndarray) -> tuple[list[onnx.NodeProto], dict[str, np.ndarray]]:
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])
    ones = np.ones(3)
    return [node], {"s": scale, "b": ones, "m": ones, "v": ones}


@pytest.mark.parametrize(
    ("nodes", "inits", "x_shape", "name", "shape", "axis", "op_type"),
    [
        ([helper.make_node("MatMul", ["x", "w"], ["y"])], {"w": np.zeros((0, 4))},
         [1, 4], "w", "0x4", 0, "MatMul"),
        ([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], {"w": np.zeros((0, 4))},
         [1, 4], "w", "0x4", 0, "Gemm"),
        (*_conv(np.zeros(0)), [1, 3, 4, 4], "b", "0", 0, "Conv"),
        (*_bn(np.zeros(0)), [1, 3, 4, 4], "s", "0", 0, "BatchNormalization"),
    ],
)  # fmt: skip
def test_zero_size_initializer_is_refused_naming_it(
    tmp_path: Path,
    nodes: list[onnx.NodeProto],
    inits: dict[str, np.ndarray],
    x_shape: list[int],
    name: str,
    shape: str,
    axis: int,
    op_type: str,
) -> None:
    path = _save(tmp_path, nodes, inits, x_shape)
    with pytest.raises(ModelLoadError) as info:
        load_onnx(path)
    message = str(info.value)
    assert f"initializer '{name}' ({shape})" in message
    assert f"dimension {axis} = 0" in message
    assert f"({op_type})" in message


def test_zero_size_constant_node_is_named_as_constant(tmp_path: Path) -> None:
    const = helper.make_node(
        "Constant", [], ["w"], value=numpy_helper.from_array(np.zeros((4, 0), np.float32))
    )
    path = _save(tmp_path, [const, helper.make_node("MatMul", ["x", "w"], ["y"])], {}, [1, 4])
    with pytest.raises(ModelLoadError, match=r"Constant 'w' \(4x0\) has dimension 1 = 0"):
        load_onnx(path)


def test_empty_one_d_lists_stay_allowed(tmp_path: Path) -> None:
    """Resize's empty ``roi`` is ONNX's spelling of an absent list: it still loads."""
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="nearest")
    inits = {"roi": np.zeros(0), "scales": np.array([1.0, 1.0, 2.0, 2.0])}
    path = _save(tmp_path, [node], inits, [1, 3, 4, 4])
    graph = load_onnx(path)
    assert graph.tensors["y"].shape == (1, 3, 8, 8)


# ---- knob combinations ----------------------------------------------------------------------
def test_knob_pair_making_an_invalid_chip_is_refused_before_the_search(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each range alone is valid; ``dac_bits`` 8 with ``act_bits`` 4 is not."""
    space = tmp_path / "space.yaml"
    space.write_text(
        "trials: 4\nknobs:\n  dac_bits: {choices: [1, 8]}\n  act_bits: {low: 4, high: 8}\n"
    )
    out = tmp_path / "out"
    argv = ["search", "--workers", "1", "--trials", "4", "--out", str(out), "--space", str(space)]
    code = main([*argv, "mlp_relu"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{space}: knobs.dac_bits = 8 with knobs.act_bits = 4" in err
    assert "exceeds act_bits" in err
    assert not (out / "trials.parquet").exists()


def test_knob_pairs_that_always_combine_load(tmp_path: Path) -> None:
    from fusiontune.search.problem import Problem
    from fusiontune.search.space import load_space
    from fusiontune.sim.hardware import HardwareConfig

    space = tmp_path / "space.yaml"
    space.write_text("knobs:\n  dac_bits: {low: 1, high: 4}\n  act_bits: {low: 4, high: 8}\n")
    problem = Problem.build(build_zoo("mlp_relu"), load_space(space), HardwareConfig())
    assert [k.name for k in problem.space.knobs] == ["dac_bits", "act_bits"]


def test_small_int_knobs_are_checked_at_every_value() -> None:
    from fusiontune.search.problem import knob_extremes
    from fusiontune.search.space import Knob

    assert knob_extremes(Knob("cores", "int", 1, 8, step=2)) == (1, 3, 5, 7)
    assert knob_extremes(Knob("buffer_bytes", "int", 1024, 65536, log=True)) == (1024, 65536)
    assert knob_extremes(Knob("dram_kind", "categorical", choices=("HBM2", "GDDR5"))) == (
        "HBM2",
        "GDDR5",
    )


# ---- --input-size too large for a zoo model -------------------------------------------------
def _largest_named(err: str) -> int:
    match = re.search(r"the largest --input-size that fits is (\d+)", err)
    assert match is not None, err
    return int(match.group(1))


def test_input_size_beyond_the_memory_limit_names_the_option_and_the_largest_fit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fusiontune.frontend.zoo import _weight_bytes
    from fusiontune.limits import memory_limit

    code = main(["simulate", "vgg16", "--input-size", "20000"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--input-size 20000 is too large for zoo model 'vgg16'" in err
    assert "memory limit of 4 GiB" in err
    largest = _largest_named(err)
    assert "(largest: 'fc1.weight', 4096x" in err
    fit, over = _weight_bytes("vgg16", largest, 1), _weight_bytes("vgg16", largest + 1, 1)
    assert fit is not None and over is not None
    assert fit[0] <= memory_limit() < over[0]


def test_weights_are_limited_in_total_not_only_one_by_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """mlp_bottleneck at width 65536: two 16 MiB weights, each under a 24 MiB limit, not both."""
    out = tmp_path / "out"
    argv = ["search", "--workers", "1", "--trials", "2", "--out", str(out), "mlp_bottleneck"]
    code = main([*argv, "--input-size", "65536", "--memory-limit", "24MiB"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--input-size 65536 is too large for zoo model 'mlp_bottleneck'" in err
    assert "memory limit of 24 MiB" in err
    assert 1 <= _largest_named(err) < 65536


# ---- the Ray reaper works without /proc -----------------------------------------------------
def test_reaper_reads_the_process_table_without_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table comes from psutil: hiding ``/proc`` (as on macOS or Windows) changes nothing."""
    from pathlib import Path as RealPath

    from fusiontune.search import ray_reaper

    monkeypatch.setattr(ray_reaper, "PROC", RealPath("/no/such/proc"), raising=False)
    table = ray_reaper._table()
    me = [key for key in table if key[0] == os.getpid()]
    assert len(me) == 1 and table[me[0]] == os.getppid()


def test_reaper_stops_the_ray_marked_children_of_a_killed_driver() -> None:
    """A stand-in driver with one child whose command line names ray: once the driver is
    killed and the reaper's stdin closes, the child is stopped too."""
    import subprocess
    import sys
    import time

    import psutil

    from fusiontune.search import ray_reaper

    child = "import time; time.sleep(300)"
    driver_code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', {child!r}, 'ray::IDLE'])\n"
        "print(p.pid, flush=True); time.sleep(300)\n"
    )
    driver = subprocess.Popen([sys.executable, "-c", driver_code], stdout=subprocess.PIPE)
    reaper = None
    try:
        assert driver.stdout is not None
        child_pid = int(driver.stdout.readline())
        reaper = subprocess.Popen(
            [sys.executable, ray_reaper.__file__, str(driver.pid)], stdin=subprocess.PIPE
        )
        deadline = time.monotonic() + 60
        while not ray_reaper._is_ray(child_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3 * ray_reaper.SNAPSHOT_S)  # at least one snapshot has noted the child
        driver.kill()
        driver.wait(timeout=60)
        assert reaper.stdin is not None
        reaper.stdin.close()
        assert reaper.wait(timeout=60) == 0
        assert child_pid not in {pid for pid, _ in ray_reaper._table()}
    finally:
        for proc in (driver, reaper):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        with contextlib.suppress(psutil.Error):
            psutil.Process(child_pid).kill()
