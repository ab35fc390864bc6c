"""Inputs that would exhaust the machine are refused before anything is allocated, and every
public entry point raises only FusiontuneError subclasses for bad input."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import fusiontune as ft
from fusiontune import limits
from fusiontune.errors import FusiontuneError, ResourceLimitError
from fusiontune.ops import fold_output_elements

REPO = Path(__file__).resolve().parents[1]

MAX_IMPORT_RSS_KB = 512 * 1024
"""Peak memory allowed for importing a tiny hostile ONNX file (the interpreter, numpy and
onnx take ~100 MB; before the fold bound the file below took 2.1 GB)."""


@pytest.fixture
def small_limit() -> Iterator[None]:
    previous = limits.set_memory_limit(1 << 19)
    yield
    limits.set_memory_limit(previous)


def _constant_of_shape_bomb(path: Path) -> Path:
    """129 bytes: ConstantOfShape([16384, 16384]) added to the input: 1 GiB once folded."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [16384, 16384])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [16384, 16384])
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["big"], name="cos"),
        helper.make_node("Add", ["x", "big"], ["y"], name="add"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=[shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.skipif(sys.platform != "linux", reason="peak memory read from /proc")
def test_a_tiny_constant_of_shape_file_does_not_take_a_gigabyte(tmp_path: Path) -> None:
    path = _constant_of_shape_bomb(tmp_path / "bomb.onnx")
    assert path.stat().st_size < 200
    code = (  # VmHWM: this process's peak (ru_maxrss would include the parent's, kept by exec)
        "import re, sys; sys.path.insert(0, sys.argv[2])\n"
        "from fusiontune.frontend.onnx_import import load_onnx\n"
        "g = load_onnx(sys.argv[1])\n"
        "peak = re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1)\n"
        "print(peak, g.op_by_name['cos'].op_type)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path), str(REPO)],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    rss_kb, op_type = done.stdout.split()
    assert op_type == "ConstantOfShape"  # left to run, not folded into a 1 GiB constant
    assert int(rss_kb) < MAX_IMPORT_RSS_KB


def test_fold_estimates_cover_the_ops_that_grow() -> None:
    fold = fold_output_elements
    shape = np.array([1000, 1000], dtype=np.int64)
    assert fold("ConstantOfShape", [shape]) == 10**6
    data = np.zeros((1, 3), dtype=np.float32)
    assert fold("Expand", [data, np.array([5, 1, 3])]) == 15
    assert fold("Tile", [data, np.array([4, 7])]) == 3 * 28
    assert fold("Range", [np.array(0), np.array(10), np.array(3)]) == 4
    pads = np.array([0, 1, 0, 1])
    assert fold("Pad", [data, pads]) == 1 * 5
    image = np.zeros((1, 2, 3, 4), dtype=np.float32)
    scales = np.array([1, 1, 2, 2], dtype=np.float32)
    assert fold("Resize", [image, None, scales]) == 2 * 6 * 8
    assert fold("Resize", [image, None, None, np.array([1, 2, 5, 5])]) == 50
    # types without an OpDef, folded by ONNX's reference evaluator
    assert fold("Upsample", [image, scales]) == 2 * 6 * 8
    assert fold("EyeLike", [np.zeros((7, 9))]) == 63
    assert fold("OneHot", [np.array([1, 2, 3]), np.array([10]), np.array([0, 1])]) == 30
    assert fold("Relu", [data]) is None


def test_zoo_weights_are_checked_before_they_are_drawn(small_limit: None) -> None:
    with pytest.raises(
        ResourceLimitError, match=r"input_size 784 .*largest: 'fc1.weight', 256x784"
    ):
        ft.load_model("mlp_relu")


def test_execute_refuses_a_graph_beyond_the_limit(small_limit: None) -> None:
    limits.set_memory_limit(1 << 30)
    graph = ft.load_model("mlp_relu")
    plan = ft.greedy_plan(graph)
    limits.set_memory_limit(1 << 20)
    with pytest.raises(ResourceLimitError, match=r"executing it needs 1.03 MiB of tensors"):
        ft.execute(graph, plan, {"input": np.zeros((1, 784), dtype=np.float32)})


def test_memory_limit_is_validated() -> None:
    for bad in (0, -1, 1.5, "4GiB", True):
        with pytest.raises(ResourceLimitError):
            limits.set_memory_limit(bad)  # type: ignore[arg-type]


def test_sizes_are_exact_python_integers() -> None:
    assert limits.n_elements([2**40, 2**40]) == 2**80  # numpy would wrap around
    with pytest.raises(ResourceLimitError, match="more than 2\\^63 elements"):
        limits.check_shape("t", [2**40, 2**40], "here")
    assert limits.format_bytes(1023) == "1,023 B" and limits.format_bytes(3 << 30) == "3 GiB"


# ---- every public entry: FusiontuneError only ----------------------------------------------------
def _graph() -> ft.Graph:
    return ft.load_model("mlp_relu")


def _onnx(tmp: Path, elem: int) -> str:
    x = helper.make_tensor_value_info("x", elem, [1, 4])
    y = helper.make_tensor_value_info("y", elem, [1, 4])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path)


API_CASES: dict[str, Callable[[Path], Any]] = {
    "adc-nan": lambda t: ft.HardwareConfig(adc_pj_by_bits=((8, math.nan),)),
    "adc-inf-override": lambda t: ft.load_hardware(None, {"adc_pj_by_bits": {8: math.inf}}),
    "onnx-string-input": lambda t: ft.load_onnx(_onnx(t, TensorProto.STRING)),
    "plan-op-list": lambda t: ft.Plan.from_json(
        json.dumps({"groups": [{"ops": [["fc1"]]}]}), _graph()
    ),
    "plan-mode-list": lambda t: ft.Plan.from_dict(
        {"groups": [{"ops": ["fc1"], "mode": ["single"]}]}, _graph()
    ),
    "plan-key-typo": lambda t: ft.Plan.from_dict(
        {"groups": [{"ops": ["fc1"], "mdoe": "x"}]}, _graph()
    ),
    "plan-deep-json": lambda t: ft.Plan.from_json("[" * 50000 + "]" * 50000, _graph()),
    "search-workers": lambda t: ft.search("mlp_relu", workers=1000, out=t),
    "search-workers-type": lambda t: ft.search("mlp_relu", workers="2", out=t),  # type: ignore[arg-type]
    "search-seed": lambda t: ft.search("mlp_relu", seed=-1, out=t),
    "search-seed-huge": lambda t: ft.search("mlp_relu", seed=2**70, out=t),
    "search-study-nul": lambda t: ft.search("mlp_relu", study="a\0b", out=t),
    "search-study-dotdot": lambda t: ft.search("mlp_relu", study="..", out=t),
    "search-trials": lambda t: ft.search("mlp_relu", trials=0, out=t),
    "search-space-type": lambda t: ft.search("mlp_relu", space=123, out=t),  # type: ignore[arg-type]
    "search-eval-timeout": lambda t: ft.search("mlp_relu", eval_timeout_s=-1, out=t),
    "search-checkpoint-nan": lambda t: ft.search("mlp_relu", checkpoint_s=math.nan, out=t),
    "input-shapes-overflow": lambda t: ft.load_onnx(
        _onnx(t, TensorProto.FLOAT), {"x": (2**40, 2**40)}
    ),
}


@pytest.mark.parametrize("name", list(API_CASES))
def test_public_api_raises_fusiontune_errors_for_bad_input(name: str, tmp_path: Path) -> None:
    with pytest.raises(FusiontuneError) as err:
        API_CASES[name](tmp_path)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "a\0b").exists() and not list(tmp_path.glob("*/study.db"))
