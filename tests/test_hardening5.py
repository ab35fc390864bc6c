"""Regression tests for what the hostile harness (``experiments/hostile.py``, issue 24) found:
each case failed on main before its fix (a traceback, a wrong exit or an unnamed fault)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusiontune.cli.main import main

REPO = Path(__file__).resolve().parents[1]
F = TensorProto.FLOAT


@pytest.fixture(autouse=True)
def _keep_memory_limit() -> Iterator[None]:
    """``--memory-limit`` sets a process-wide limit: restore it after each test."""
    from fusiontune.limits import memory_limit, set_memory_limit

    previous = memory_limit()
    yield
    set_memory_limit(previous)


def _one_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fusiontune: error: "), err
    return lines[0]


def _save(
    tmp_path: Path,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    inits: list[TensorProto] | None = None,
) -> str:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path)


def _w(name: str, *shape: int, dtype: type = np.float32) -> TensorProto:
    return numpy_helper.from_array(np.ones(shape, dtype), name)


vi = helper.make_tensor_value_info
X4, Y4 = vi("x", F, [1, 4]), vi("y", F, [1, 4])
XCONV, YANY = vi("x", F, [1, 3, 8, 8]), vi("y", F, None)


# ---- malformed ONNX ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("nodes", "inputs", "outputs", "inits", "expect"),
    [
        (
            [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=1.5)],
            [XCONV], [YANY], [_w("w", 4, 3, 3, 3)],
            "op 'conv' (Conv): attribute 'kernel_shape' must be INTS, got FLOAT",
        ),
        (
            [helper.make_node("Relu", [""], ["y"], name="relu")], [X4], [Y4], [],
            "op 'relu' (Relu): input 0 ('X') is required but missing",
        ),
        (
            [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")], [X4], [YANY],
            [_w("w", 4, 4, dtype=np.int64)],
            "op 'fc' (MatMul): inputs 'x' (float32) and 'w' (int64) must have the same element",
        ),
        (
            [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[3, 3])],
            [vi("x", F, [])], [YANY], [_w("w", 4, 3, 3, 3)],
            "op 'conv' (Conv) cannot take its inputs ('x' scalar, 'w' 4x3x3x3)",
        ),
        (
            [helper.make_node("Relu", ["t"], ["t"], name="loop"),
             helper.make_node("Relu", ["t"], ["y"], name="out")], [X4], [Y4], [],
            "the graph has a cycle",
        ),
        (
            [helper.make_node("Relu", ["x"], ["y"], name="relu")], [X4], [], [],
            "the graph declares no outputs",
        ),
        (
            [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")], [X4], [YANY],
            [_w("w", 4, 4), _w("w", 4, 4)],
            "initializer 'w' is given twice",
        ),
    ],
    ids=["attribute-type", "required-input-empty", "input-types-differ", "scalar-into-conv",
         "self-loop", "no-outputs", "initializer-twice"],
)  # fmt: skip
def test_malformed_onnx_is_one_line_naming_the_op_or_tensor(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    inits: list[TensorProto],
    expect: str,
) -> None:
    path = _save(tmp_path, nodes, inputs, outputs, inits)
    line = _one_error(["show", path], capsys)
    assert f"{path}: {expect}" in line


@pytest.mark.parametrize("shape", [[1, 0], [0, 4]], ids=["feature", "batch"])
def test_a_zero_size_input_dimension_names_the_input_and_the_dimension(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shape: list[int]
) -> None:
    """Issue 24's first family, for inputs (initializers: tests/test_hardening3.py)."""
    x, y = vi("x", F, shape), vi("y", F, shape)
    path = _save(tmp_path, [helper.make_node("Relu", ["x"], ["y"], name="relu")], [x], [y])
    line = _one_error(["show", path], capsys)
    axis = shape.index(0)
    assert f"{path}: input 'x' dimension {axis} is 0; dimensions must be >= 1" in line


def test_gather_index_out_of_range_names_the_op_and_the_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A constant Gather with index 7 on an axis of 4 is not folded; running it (``--verify``)
    was numpy's IndexError, an internal error."""
    index = numpy_helper.from_array(np.array([7], np.int64), "i")
    nodes = [helper.make_node("Gather", ["w", "i"], ["y"], name="gather")]
    path = _save(tmp_path, nodes, [X4], [YANY], [_w("w", 4, 4), index])
    line = _one_error(["simulate", path, "--verify"], capsys)
    assert "op 'gather' (Gather): index 7 is out of range for axis 0 of size 4" in line
    assert "allowed: [-4, 3]" in line


def test_schema_checks_keep_valid_models_loading(tmp_path: Path) -> None:
    """Optional inputs left out, a variadic Concat, a QDQ pair with integer codes: all load."""
    from fusiontune.frontend.onnx_import import load_onnx

    nodes = [
        helper.make_node("Conv", ["x", "w", ""], ["c"], name="conv", kernel_shape=[1, 1]),
        helper.make_node("Concat", ["c", "c", "c"], ["cat"], name="cat", axis=1),
        helper.make_node("QuantizeLinear", ["cat", "s", "z"], ["q"], name="q"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq"),
    ]
    scale = numpy_helper.from_array(np.array(0.1, np.float32), "s")
    zero = numpy_helper.from_array(np.array(0, np.int8), "z")
    path = _save(tmp_path, nodes, [XCONV], [YANY], [_w("w", 4, 3, 1, 1), scale, zero])
    graph = load_onnx(path)
    assert graph.tensors["y"].shape == (1, 12, 8, 8)


# ---- YAML: a key given twice --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expect"),
    [
        (
            "buffer_bytes: 1024\nbuffer_bytes: 2048\n",
            "key 'buffer_bytes' is given twice (lines 1 and 2)",
        ),
        ("adc_pj_by_bits: {8: 1.0, 8: 2.0}\n", "key '8' is given twice (lines 1 and 1)"),
    ],
    ids=["block", "flow"],
)  # fmt: skip
def test_hardware_key_given_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expect: str
) -> None:
    """PyYAML keeps the last of two equal keys silently: a second ``buffer_bytes`` meant as a
    change of the first went unnoticed."""
    hw = tmp_path / "hw.yaml"
    hw.write_text(text)
    line = _one_error(["simulate", "mlp_relu", "--hw", str(hw)], capsys)
    assert f"{hw}: {expect}; keep one" in line


def test_search_space_key_given_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    space = tmp_path / "space.yaml"
    space.write_text("trials: 2\nknobs:\n  adc_bits: {low: 4, high: 8}\ntrials: 3000\n")
    argv = ["search", "mlp_relu", "--workers", "1", "--out", str(tmp_path / "o")]
    line = _one_error([*argv, "--space", str(space)], capsys)
    assert f"{space}: key 'trials' is given twice (lines 1 and 4)" in line


def test_merge_keys_may_still_be_overridden() -> None:
    from fusiontune.errors import ConfigError
    from fusiontune.fileio import parse_yaml

    data = parse_yaml("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\n", "s.yaml", ConfigError)
    assert data["c"] == {"x": 3, "y": 2}


def test_empty_hardware_name_says_what_to_give(capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_error(["simulate", "mlp_relu", "--hw", ""], capsys)
    assert "hardware '' is empty; give a preset (" in line and "isaac_reram" in line


# ---- warnings as one line ------------------------------------------------------------------------
def _cli(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run(
        [sys.executable, "-m", "fusiontune.cli.main", *argv],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_a_warning_is_one_fusiontune_line(tmp_path: Path) -> None:
    """An op of a type the IR does not know: Python's two-line warning (file, line, source)
    becomes one ``fusiontune: warning:`` line."""
    nodes = [helper.make_node("FooBar", ["x"], ["y"], name="foo")]
    path = _save(tmp_path, nodes, [X4], [Y4])
    done = _cli(["show", path], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"fusiontune: warning: {path}: 1 op(s) of types the IR does not know load as OPAQUE: "
        "FooBar (1)"
    ]


def test_torn_journal_repair_is_one_warning_line(tmp_path: Path) -> None:
    """The repair of a torn journal tail says so in one ``fusiontune: warning:`` line."""
    argv = ["search", "mlp_relu", "--workers", "1", "--trials", "3", "--seed", "0"]
    argv += ["--out", str(tmp_path / "out"), "--storage", str(tmp_path / "s.log")]
    assert main(argv) == 0
    journal = tmp_path / "s.log"
    journal.write_bytes(journal.read_bytes()[:-40])
    argv[argv.index("--trials") + 1] = "4"
    done = _cli([*argv, "--resume"], tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if not ln.startswith("search: ")]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"fusiontune: warning: {journal}: dropped a torn final write (")


# ---- --input-size and --batch: the tensors' estimate against the memory available --------------
@pytest.fixture
def one_gib_available(monkeypatch: pytest.MonkeyPatch) -> int:
    """The machine's available memory, fixed (the real one changes from run to run)."""
    import fusiontune.limits

    monkeypatch.setattr(fusiontune.limits, "available_memory_bytes", lambda: 1 << 30)
    return 1 << 30


@pytest.mark.parametrize(
    ("argv", "option", "value"),
    [
        (["simulate", "resnet18", "--input-size", "4000"], "--input-size", 4000),
        (["show", "resnet18", "--batch", "4096"], "--batch", 4096),
        (
            ["search", "bert_encoder", "--input-size", "65536", "--trials", "2"],
            "--input-size",
            65536,
        ),
    ],
    ids=["input-size", "batch", "search"],
)
def test_a_size_whose_tensors_exceed_the_memory_available_is_refused(
    one_gib_available: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    option: str,
    value: int,
) -> None:
    """resnet18 at 4000x4000 has 44.6 MiB of weights (under the memory limit) but its
    activations need tens of GiB: analysed as it was, bert_encoder at 65536 took minutes of
    replay before any output, at 2^20 it ran for hours."""
    from fusiontune.frontend.zoo import tensor_bytes

    if argv[0] == "search":
        argv = [*argv, "--workers", "1", "--out", str(tmp_path / "o")]
    line = _one_error(argv, capsys)
    model = argv[1]
    assert f"{option} {value} is too large for zoo model '{model}': its tensors would need" in line
    assert "more than the 1 GiB of memory this machine has available" in line
    match = __import__("re").search(rf"the largest {option} that fits is (\d+)", line)
    assert match is not None, line
    largest = int(match.group(1))
    size, batch = (largest, 1) if option == "--input-size" else (224, largest)
    fit = tensor_bytes(model, size, batch)
    over = (
        tensor_bytes(model, size + 1, batch)
        if option == "--input-size"
        else (tensor_bytes(model, size, batch + 1))
    )
    assert fit is not None and over is not None
    assert fit[0] <= one_gib_available < over[0]
    assert not (tmp_path / "o").exists()


def test_the_memory_available_is_checked_before_any_weight_is_drawn(
    one_gib_available: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a memory limit far above the machine's, vgg16 at 20000 drew 2.98 TiB of weights
    (a MemoryError, an internal error) before the tensors' estimate was asked."""
    argv = ["simulate", "vgg16", "--input-size", "20000", "--memory-limit", "1" + "0" * 30]
    line = _one_error(argv, capsys)
    assert "--input-size 20000 is too large for zoo model 'vgg16': its tensors would need" in line


def test_an_allocation_the_machine_refuses_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import fusiontune.cli.models as models

    def too_big(args: object) -> int:
        raise MemoryError("Unable to allocate 2.98 TiB")

    monkeypatch.setattr(models, "run", too_big)
    line = _one_error(["models"], capsys)
    assert "out of memory (Unable to allocate 2.98 TiB)" in line and "--memory-limit" in line


def test_sizes_that_fit_the_memory_available_still_run(
    one_gib_available: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "resnet18", "--input-size", "448"]) == 0


def test_a_causal_mask_of_a_huge_sequence_is_counted_not_allocated(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """llama_tiny at 2^20 tokens: its [seq, seq] causal mask (4 TiB) was allocated while the
    weights were being counted (a MemoryError, an internal error)."""
    line = _one_error(["simulate", "llama_tiny", "--input-size", "1048576"], capsys)
    assert "--input-size 1048576 is too large for zoo model 'llama_tiny'" in line
    assert "(largest: 'attn.causal_mask', 1048576x1048576, 4 TiB)" in line
    assert "memory limit of 4 GiB" in line


def test_input_size_on_an_onnx_file_names_the_option_to_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _save(tmp_path, [helper.make_node("Relu", ["x"], ["y"], name="relu")], [X4], [Y4])
    line = _one_error(["show", path, "--input-size", "64"], capsys)
    assert f"{path}: --input-size and --batch apply to zoo models only" in line
    assert "--input-shape NAME=D,D,..." in line


# ---- command-line values -------------------------------------------------------------------------
def test_a_memory_limit_of_400_digits_is_a_number_not_a_crash(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``float('1' + '0' * 400)`` is inf: int(inf) raised OverflowError, a traceback."""
    assert main(["show", "mlp_relu", "--memory-limit", "1" + "0" * 400]) == 0


def test_trials_beyond_the_storage_s_integers_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _one_error(
        ["search", "mlp_relu", "--trials", "1" + "0" * 30, "--out", str(tmp_path)], capsys
    )
    assert "argument --trials: 1" + "0" * 30 + " is out of range; allowed 1 .. 2^63 - 1" in line


def test_no_command_says_so_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert "usage: fusiontune" in out
    assert err.strip() == "fusiontune: error: give a command: " + ", ".join(
        ["models", "show", "plans", "simulate", "search", "export", "report"]
    )


def test_ctrl_c_while_the_subcommand_is_imported_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C in the first second (``search`` imports Optuna and Ray) was a traceback."""
    import fusiontune.cli.main as cli_main

    def interrupted(only: str | None = None) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_main, "build_parser", interrupted)
    monkeypatch.setattr(cli_main, "_ignore_further_ctrl_c", lambda: None)
    assert cli_main.main(["search", "mlp_relu"]) == 130
    assert capsys.readouterr().err == "fusiontune: interrupted\n"


def test_a_journal_path_that_is_a_directory_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "d.log").mkdir()
    argv = ["search", "mlp_relu", "--workers", "1", "--trials", "2", "--out", str(tmp_path / "o")]
    line = _one_error([*argv, "--storage", str(tmp_path / "d.log")], capsys)
    assert f"journal file {tmp_path / 'd.log'} is a directory; give the path of a file" in line


def test_plans_out_that_cannot_be_written_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file.txt").write_text("")
    target = tmp_path / "file.txt" / "p.json"
    line = _one_error(["plans", "mlp_relu", "--out", str(target)], capsys)
    assert f"plans --out: cannot write '{target}': Not a directory" in line


# ---- a file-size limit (ulimit -f) -------------------------------------------------------------
@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_file_size_limit_is_named_as_such_in_one_line(tmp_path: Path) -> None:
    """Under ``ulimit -f`` the kernel refuses writes with EFBIG and SQLite reports a "disk I/O
    error" followed by the SQL statement it ran; now one line naming the file and the limit."""
    import resource
    import signal

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    argv = ["search", "mlp_relu", "--workers", "1", "--trials", "2", "--out", "out"]
    done = subprocess.run(
        [sys.executable, "-m", "fusiontune.cli.main", *argv],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
        preexec_fn=limited,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if not ln.startswith("search: ")]
    assert len(lines) == 1, done.stderr
    assert "mlp_relu/study.db" in lines[0] and "[SQL" not in lines[0], lines[0]
    assert "file-size limit" in lines[0], lines[0]


# ---- the Ray reaper beyond Linux -----------------------------------------------------------------
def test_reaper_skips_a_child_older_than_its_parent() -> None:
    """Windows keeps an orphan's parent pid; once that pid is reused by a Ray process of ours,
    the orphan looks like its child. A child older than its parent is not one."""
    from fusiontune.search.ray_reaper import descendants

    table = {(100, 50.0): 1, (200, 60.0): 100, (300, 10.0): 100, (400, 70.0): 300}
    assert descendants({100}, table) == {(200, 60.0)}


def test_reaper_starts_in_its_own_process_group_on_windows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C at a Windows console goes to the console's process group: the reaper takes a
    group of its own there (a session of its own elsewhere), so it outlives the Ctrl-C."""
    from fusiontune.search import ray_reaper

    seen: list[dict[str, object]] = []

    class FakePopen:
        def __init__(self, argv: list[str], **kwargs: object) -> None:
            seen.append(kwargs)

    monkeypatch.setattr(ray_reaper.subprocess, "Popen", FakePopen)
    monkeypatch.setattr(ray_reaper.subprocess, "CREATE_NEW_PROCESS_GROUP", 0x200, raising=False)
    for platform in ("win32", "darwin", "linux"):
        monkeypatch.setattr(ray_reaper.sys, "platform", platform)
        ray_reaper.Reaper().start()
    assert seen[0].get("creationflags") == 0x200 and "start_new_session" not in seen[0]
    assert seen[1].get("start_new_session") is True and seen[2].get("start_new_session") is True
