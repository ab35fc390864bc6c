"""``fusiontune search`` and ``fusiontune report`` on the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusiontune.cli.main import main


def test_search_then_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["search", "mlp_linear", "--trials", "10", "--workers", "1", "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for word in (
        "best (trial",
        "unfused:",
        "greedy:",
        "exact optimum:",
        "lower bound:",
        "traffic saved vs unfused",
        "best / proven optimum",
        "fusiontune report",
    ):
        assert word in out
    folder = tmp_path / "mlp_linear"
    names = {"trials.parquet", "groups.parquet", "best_plan.json", "optimal_plan.json", "study.db"}
    assert names <= {p.name for p in folder.iterdir()}
    assert main(argv) == 2  # the study exists: refuse without --resume
    assert "pass --resume" in capsys.readouterr().err
    assert main([*argv[:3], "12", *argv[4:], "--resume"]) == 0
    assert main(["report", str(folder)]) == 0
    report = (folder / "report.md").read_text()
    assert "| **best found**" in report and "exact optimum (oracle)" in report
    assert (folder / "history.png").stat().st_size > 0
    assert (folder / "groups.png").stat().st_size > 0


def test_multi_report_draws_pareto(tmp_path: Path) -> None:
    argv = [
        "search",
        "mlp_relu",
        "--trials",
        "12",
        "--workers",
        "1",
        "--objective",
        "multi",
        "--sampler",
        "nsga2",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    assert main(["report", str(tmp_path / "mlp_relu")]) == 0
    assert (tmp_path / "mlp_relu" / "pareto.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["search", "mlp_relu", "--objective", "speed"], "objective 'speed' is not allowed"),
        (["search", "mlp_relu", "--space", "nope.yaml"], "nope.yaml: search space file not found"),
        (["report", "nowhere"], "nowhere: missing trials.parquet"),
    ],
)
def test_user_errors_are_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_pareto_mask() -> None:
    from fusiontune.search.report import pareto_mask

    pts = [[1, 5], [2, 2], [3, 3], [5, 1], [1, 5]]
    assert list(pareto_mask(pts)) == [True, True, False, True, True]


def test_search_an_onnx_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fusiontune.export.onnx_export import to_onnx
    from fusiontune.frontend.loader import load_model

    path = tmp_path / "lenet.onnx"
    to_onnx(load_model("lenet5"), path)
    argv = ["search", str(path), "--trials", "8", "--workers", "1", "--study", "onnx"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    assert "best / proven optimum (traffic): 1.0000" in capsys.readouterr().out
