"""``fusiontune search MODEL``: search fusion plans, print a summary, write the tables."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import TYPE_CHECKING, Any

from fusiontune.search.backends import DEFAULT_EVAL_TIMEOUT_S
from fusiontune.search.driver import FLUSH_INTERVAL_S

if TYPE_CHECKING:
    from fusiontune.search.driver import TrialRecord

EXIT_INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT), as cli/main.py."""

DEFAULT_WORKERS = 2
"""Default Ray CPUs: the 2-core machine the README quickstart targets."""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "search",
        help="search fusion plans (and hardware knobs) with Optuna",
        description="Search the lowest-traffic legal fusion plan of a model with Optuna; "
        "results go to <out>/<study>/ (trials.parquet, groups.parquet, best_plan.json).",
    )
    p.add_argument("model", help="zoo model name or ONNX file")
    p.add_argument("--space", help="search space YAML (default: the embedded default space)")
    p.add_argument("--trials", type=int, help="trial budget (default: from the space, 300)")
    p.add_argument(
        "--workers",
        type=int,
        default=min(DEFAULT_WORKERS, os.cpu_count() or 1),
        help="evaluation processes (Ray CPUs); 1 = serial",
    )
    p.add_argument("--address", help="join an existing Ray cluster ('auto' or host:port)")
    p.add_argument(
        "--sampler",
        help="local | local-tpe | tpe | random | nsga2 | bruteforce (default: the space's, local)",
    )
    p.add_argument(
        "--objective", help="traffic | energy | cycles | edp | multi (default: from the space)"
    )
    p.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    p.add_argument("--study", help="study name (default: the model's name)")
    p.add_argument(
        "--storage", help="Optuna storage URL or journal file (*.log); default SQLite in the folder"
    )
    p.add_argument(
        "--out", default="results", help="parent of the results folder (default results)"
    )
    p.add_argument("--resume", action="store_true", help="continue an existing study")
    p.add_argument(
        "--verify-best", action="store_true", help="execute the best plan and check it numerically"
    )
    p.add_argument("--backend", choices=("ray", "serial"), help="default: ray unless --workers 1")
    p.add_argument("--input-size", type=int, help="input resolution/width of a zoo model")
    p.add_argument(
        "--input-shape",
        action="append",
        default=None,
        metavar="NAME=D,D,...",
        help="static shape of an ONNX graph input (repeatable)",
    )
    p.add_argument(
        "--eval-timeout",
        type=_non_negative_float,
        default=DEFAULT_EVAL_TIMEOUT_S,
        metavar="S",
        help=f"seconds one plan's evaluation may take before its trial fails "
        f"(default {DEFAULT_EVAL_TIMEOUT_S:g}; 0 = no limit)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=_non_negative_float,
        default=FLUSH_INTERVAL_S,
        metavar="S",
        help=f"store finished trials and rewrite trials.parquet at most every S seconds "
        f"(default {FLUSH_INTERVAL_S:g})",
    )
    p.set_defaults(func=run)


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got '{text}'")
    return value


def run(args: argparse.Namespace) -> int:
    from fusiontune.frontend.loader import parse_input_shapes
    from fusiontune.search.api import SearchInterrupted, search
    from fusiontune.search.space import load_space, with_overrides

    space = with_overrides(
        load_space(args.space), objective=args.objective, sampler=args.sampler, trials=args.trials
    )
    progress = _Progress(space.trials, sys.stderr.isatty())
    try:
        result = search(
            args.model,
            space=space,
            workers=args.workers,
            backend=args.backend,
            address=args.address,
            seed=args.seed,
            study=args.study,
            storage=args.storage,
            out=args.out,
            resume=args.resume,
            verify_best=args.verify_best,
            input_size=args.input_size,
            input_shapes=parse_input_shapes(args.input_shape) if args.input_shape else None,
            on_record=progress.update,
            eval_timeout_s=args.eval_timeout or None,
            checkpoint_s=args.checkpoint_every,
        )
    except SearchInterrupted as stop:
        progress.close()
        print(
            f"fusiontune: interrupted; {stop.n_done} finished trials are saved in "
            f"{stop.out_dir}/ (trials.parquet and the study storage)",
            file=sys.stderr,
        )
        print(f"fusiontune: to continue, run: {resume_command(args)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        progress.close()
    print(format_summary(result.summary))
    return 0


def resume_command(args: argparse.Namespace) -> str:
    """The command line that continues this search: the one given, plus ``--resume``."""
    argv = list(getattr(args, "argv", None) or sys.argv[1:])
    if "--resume" not in argv:
        argv.append("--resume")
    return shlex.join(["fusiontune", *argv])


class _Progress:
    """A rich progress bar with best-so-far (plain lines when rich or a terminal is missing)."""

    def __init__(self, total: int, live: bool) -> None:
        self.best: float | None = None
        self.count = 0
        self.total = total
        self._bar: Any = None
        if live:
            try:
                from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
            except ModuleNotFoundError:
                return
            self._bar = Progress(
                TextColumn("search"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total} trials"),
                TextColumn("best {task.fields[best]}"),
                TimeElapsedColumn(),
            )
            self._task = self._bar.add_task("search", total=total, best="-")
            self._bar.start()

    def update(self, record: TrialRecord) -> None:
        self.count += 1
        if record.state == "COMPLETE" and record.feasible and record.values:
            value = record.values[0]
            self.best = value if self.best is None else min(self.best, value)
        best = "-" if self.best is None else f"{self.best:.6g}"
        if self._bar is not None:
            self._bar.update(self._task, advance=1, best=best)
        elif self.count % max(1, self.total // 10) == 0:
            print(f"search: {self.count} trials, best {best}", file=sys.stderr)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


BYTES_PER_MB = 1e6


def _mb(value: Any) -> str:
    """Bytes for people: exact below one MB, MB with three decimals above."""
    if value is None:
        return "-"
    if float(value) < BYTES_PER_MB:
        return f"{float(value):,.0f} B"
    return f"{float(value) / BYTES_PER_MB:,.3f} MB"


def _certificate(summary: dict[str, Any]) -> str:
    """How sure the optimum is: proven, a proven gap, or proven infeasible."""
    status = summary.get("oracle_status")
    seconds = summary.get("oracle_s", 0.0)
    if status == "optimal":
        return f"proven optimal over all legal partitions ({seconds:.2f} s)"
    if status == "infeasible":
        return "no plan fits the base hardware (proven)"
    return (
        f"time limit: within {100 * summary.get('oracle_gap', 0.0):.2f} % of optimal (proven gap)"
    )


def format_summary(summary: dict[str, Any]) -> str:
    """The end-of-search summary: best vs baselines vs optimum vs lower bound, and paths."""
    best = summary["best"]
    base = summary.get("baselines", {})
    objective = summary["objective"]

    def line(label: str, row: dict[str, Any]) -> str:
        text = f"  {label:<18}traffic {_mb(row.get('traffic_bytes')):>14}"
        values = row.get("values") or []
        if objective != "traffic" and values:
            shown = ", ".join(f"{v:.6g}" for v in values)
            text += f"   {objective} {shown}"
        return text

    lines = [
        f"study {summary['study']}: {summary['n_trials']} trials of {summary['model']} "
        f"(objective {objective}, sampler {summary['sampler']})",
        line(f"best (trial {best['trial']}):", best)
        + ("" if best.get("feasible") else "  (INFEASIBLE)"),
    ]
    for name in ("unfused", "tvm_like", "greedy", "exhaustive", "oracle"):
        if name in base:
            label = f"{name}:"
            if name == "oracle":  # with knobs, proven for the base hardware only
                label = "optimum @ base hw:" if summary.get("knobs") else "exact optimum:"
            lines.append(line(label, base[name]))
    bounds = summary.get("lower_bounds") or {}
    compulsory = bounds.get("compulsory_bytes", best.get("lower_bound_bytes"))
    lines.append(f"  {'lower bound:':<18}traffic {_mb(compulsory):>14}  (compulsory)")
    if "capacity_bytes" in bounds:
        lines.append(
            f"  {'lower bound:':<18}traffic {_mb(bounds['capacity_bytes']):>14}  (with capacity)"
        )
    if "oracle_status" in summary:
        lines.append(f"  optimum certificate: {_certificate(summary)}")
    if "traffic_saved_vs_unfused" in summary:
        lines.append(
            f"  traffic saved vs unfused: {100 * summary['traffic_saved_vs_unfused']:.1f} %"
        )
    if "best_over_optimum" in summary:
        lines.append(
            f"  best / proven optimum ({summary['oracle_objective']}): "
            f"{summary['best_over_optimum']:.4f}"
        )
    elif "best_traffic_over_optimum" in summary:
        lines.append(
            f"  best traffic / traffic optimum: {summary['best_traffic_over_optimum']:.4f}"
        )
    verified = summary.get("verify_best")
    if verified:
        verdict = "PASS" if verified["passed"] else "FAIL"
        lines.append(
            f"  verify best plan (fused kernels vs reference): {verdict}, "
            f"max rel err {verified['max_rel_err']:.3g}"
        )
    files = summary.get("files", {})
    if files:
        folder = os.path.dirname(files["trials"])
        lines.append(
            f"  results: {folder}/ (trials.parquet, groups.parquet, best_plan.json"
            + (", optimal_plan.json)" if "optimum" in summary else ")")
        )
        lines.append(f"  report:  fusiontune report {folder}")
    return "\n".join(lines)
