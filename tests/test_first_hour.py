"""The first hour of a new user: the README tour runs line by line on a fresh checkout, printed
numbers carry units and say "saved" or "more", the progress shows rate and ETA, messages name
storages readably, and the dynamic-shape hint is a shape that really loads."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from onnx import TensorProto, helper

from fusiontune.cli.main import main
from fusiontune.cli.search import Progress, objective_text
from fusiontune.cli.simulate import _versus
from fusiontune.search.records import TrialRecord

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

TOUR_TRIALS = "6"
"""Trials of each tour search here (the README's budgets take minutes; the names, files and
order are what this test checks)."""


def tour_lines() -> list[str]:
    """The commands of the README's command-line tour, comments removed."""
    text = README.read_text()
    block = text.split("## Command-line tour", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = []
    for raw in block.strip().splitlines():
        line = raw.split("  #", 1)[0].strip()
        if line:
            lines.append(line)
    return lines


def _with_small_budget(argv: list[str]) -> list[str]:
    if argv[0] != "search":
        return argv
    if "--trials" in argv:
        argv[argv.index("--trials") + 1] = TOUR_TRIALS
    else:
        argv += ["--trials", TOUR_TRIALS]
    return argv


@pytest.mark.ray
def test_readme_tour_runs_in_order_on_a_fresh_checkout(
    ray_local: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shutil.copytree(REPO / "search_spaces", tmp_path / "search_spaces")  # what a clone has
    monkeypatch.chdir(tmp_path)
    lines = tour_lines()
    assert len(lines) >= 8 and any("report" in line for line in lines)
    for line in lines:
        argv = shlex.split(line)
        if argv[0] == "python":
            done = subprocess.run(
                [sys.executable, *argv[1:]],
                cwd=tmp_path,
                env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, (line, done.stderr)
            continue
        assert argv[0] == "fusiontune", line
        code = main(_with_small_budget(argv[1:]))
        out, err = capsys.readouterr()
        assert code == 0, (line, err)
        assert "Traceback" not in out + err


# ---- numbers: units and signs ------------------------------------------------------------------
def test_simulate_says_saved_or_more_with_units(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "mlp_relu", "--plan", "greedy"]) == 0
    out = capsys.readouterr().out
    versus = next(line for line in out.splitlines() if line.startswith("vs unfused"))
    assert re.fullmatch(
        r"vs unfused   traffic [\d.]+ % (saved|more) \([\d,]+ B\), energy [\d.]+ % (saved|more) "
        r"\([\d,.]+ uJ\), cycles [\d.]+ % (saved|more) \([\d,]+ cycles\)",
        versus,
    ), versus
    assert not re.search(r"[+-]\d+\.\d%", out)  # no bare signed percentages
    energy = next(line for line in out.splitlines() if line.startswith("energy"))
    assert energy.count(" uJ") == 8  # the total and each of its seven parts
    assert _versus(-4.04, "1,200 B") == "4.0 % more (1,200 B)"
    assert _versus(12.0, "3.000 uJ") == "12.0 % saved (3.000 uJ)"


def test_search_summary_and_progress_carry_units() -> None:
    assert objective_text("edp", [4.7e8]) == "4.7e+08 pJ x cycles"
    assert objective_text("multi", [794, 1.5e6, 300]) == "794 B, 1.5e+06 pJ, 300 cycles"
    now = [100.0]
    progress = Progress("traffic", live=False, clock=lambda: now[0])
    progress.start(40)
    lines = []
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        for i in range(40):
            now[0] += 0.5  # 2 trials/s
            progress.update(TrialRecord(i, "COMPLETE", feasible=True, values=(1000.0 - i,)))
    lines = err.getvalue().splitlines()
    assert lines[0] == "search: 4/40 trials, 2.0 trials/s, ETA 18 s, best 997 B"
    assert lines[-1] == "search: 40/40 trials, 2.0 trials/s, ETA 0 s, best 961 B"


# ---- messages ------------------------------------------------------------------------------------
def test_journal_study_messages_name_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "s.log"
    argv = ["search", "mlp_relu", "--workers", "1", "--trials", "3", "--out", str(tmp_path),
            "--storage", str(journal)]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"study 'mlp_relu' already exists in journal file {journal};" in err
    assert "object at 0x" not in err


def _dynamic_conv(path: Path) -> Path:
    """A conv + max-pool whose batch, height and width are dynamic: 1x1 inputs fail."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 3, 7, 7], [0.01] * (8 * 3 * 49))
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", strides=[2, 2]),
        helper.make_node("MaxPool", ["c"], ["y"], name="pool", kernel_shape=[3, 3], strides=[2, 2]),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


def test_the_dynamic_shape_hint_is_a_shape_that_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = str(_dynamic_conv(tmp_path / "dynconv.onnx"))
    assert main(["show", model]) == 2
    err = capsys.readouterr().err
    hint = re.search(r"(--input-shape \S+) on the CLI", err)
    assert hint, err
    assert hint.group(1) == "--input-shape x=1,3,224,224"  # not x=1,3,1,1: a 7x7 conv fails there
    assert main(["show", model, *hint.group(1).split()]) == 0
    argv = ["search", model, *hint.group(1).split(), "--workers", "1", "--trials", "3",
            "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0


def test_ft_search_stays_callable_after_its_modules_are_imported(tmp_path: Path) -> None:
    import fusiontune as ft
    import fusiontune.search.results  # binds fusiontune.search to the package

    result = ft.search("mlp_relu", trials=3, out=tmp_path, baselines=False)
    assert result.trials["state"].eq("COMPLETE").all()
