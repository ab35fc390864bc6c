"""``fusiontune search MODEL``: search fusion plans, print a summary, write the tables."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from fusiontune.cli._common import (
    MAX_INPUT_SIZE,
    MAX_TRIALS,
    add_attention_argument,
    add_memory_limit_argument,
    add_model_bits_argument,
    add_pin_argument,
    apply_memory_limit,
    check_zoo_tensors,
    input_size_error,
    int_in_range,
)
from fusiontune.errors import InputSizeError
from fusiontune.search.api import MAX_SEED
from fusiontune.search.backends import DEFAULT_EVAL_TIMEOUT_S, MAX_WORKERS_PER_CORE, max_workers
from fusiontune.search.store import FLUSH_INTERVAL_S

if TYPE_CHECKING:
    from fusiontune.search.records import TrialRecord

EXIT_INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT), as cli/main.py."""

DEFAULT_WORKERS = 2
"""Default Ray CPUs: the 2-core machine the README quickstart targets."""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "search",
        help="search fusion plans (and hardware knobs) with Optuna",
        description="Search the lowest-traffic legal fusion plan of a model with Optuna; "
        "results go to <out>/<study>/ (trials.parquet, groups.parquet, best_plan.json; "
        "best_model.onnx with --export).",
    )
    p.add_argument("model", help="zoo model name or ONNX file")
    p.add_argument("--space", help="search space YAML (default: the embedded default space)")
    p.add_argument(
        "--trials",
        type=int_in_range(1, MAX_TRIALS, high_text="2^63 - 1"),
        help="trial budget (default: from the space, 300)",
    )
    p.add_argument(
        "--workers",
        type=int_in_range(1, max_workers(), f" ({MAX_WORKERS_PER_CORE} per CPU core)"),
        default=min(DEFAULT_WORKERS, os.cpu_count() or 1),
        help="evaluation processes (Ray CPUs); 1 = serial",
    )
    p.add_argument("--address", help="join an existing Ray cluster ('auto' or host:port)")
    p.add_argument(
        "--hardware",
        "--hw",
        dest="hardware",
        metavar="PRESET|FILE",
        help="base hardware: a preset or a YAML file such as a run's best_hardware.yaml "
        "(default: the space's)",
    )
    p.add_argument(
        "--sampler",
        help="local | local-tpe | tpe | random | nsga2 | bruteforce (default: the space's, local)",
    )
    p.add_argument(
        "--objective",
        help="traffic | energy | cycles | edp | movement | throughput | multi "
        "(default: from the space)",
    )
    p.add_argument(
        "--replication",
        help="weight copies of each trial's plan on a many-core chip: exact | balance | "
        "uniform | none (default: the space's, exact)",
    )
    p.add_argument(
        "--seed", type=int_in_range(0, MAX_SEED), default=0, help="sampler seed (default 0)"
    )
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
    p.add_argument(
        "--export",
        action="store_true",
        help="also write the best plan as a fused ONNX model, best_model.onnx (fusiontune export)",
    )
    p.add_argument("--backend", choices=("ray", "serial"), help="default: ray unless --workers 1")
    p.add_argument(
        "--input-size",
        type=int_in_range(1, MAX_INPUT_SIZE),
        help="input resolution/width of a zoo model",
    )
    p.add_argument(
        "--input-shape",
        action="append",
        default=None,
        metavar="NAME=D,D,...",
        help="static shape of an ONNX graph input (repeatable)",
    )
    add_pin_argument(p)
    add_model_bits_argument(p)
    add_attention_argument(p)
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
    add_memory_limit_argument(p)
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
    from fusiontune.search.space import load_space, with_overrides

    apply_memory_limit(args)
    space = with_overrides(
        load_space(args.space),
        objective=args.objective,
        sampler=args.sampler,
        trials=args.trials,
        hardware=args.hardware,
        replication=args.replication,
    )
    from fusiontune.search.problem import objective_metrics

    progress = Progress(space.objective, sys.stderr.isatty(), metrics=objective_metrics(space))
    with first_ctrl_c_only():
        return _run_search(args, space, progress)


def _run_search(args: argparse.Namespace, space: Any, progress: Progress) -> int:
    from fusiontune.frontend.loader import parse_input_shapes
    from fusiontune.search.api import SearchInterrupted, search

    model: Any = args.model
    try:
        check_zoo_tensors(args.model, args.input_size, None)
    except InputSizeError as exc:
        raise input_size_error(exc) from None
    input_size, shapes = (
        args.input_size,
        (parse_input_shapes(args.input_shape) if args.input_shape else None),
    )
    # the graph is loaded here and each attention P5 accepts fused (the default;
    # --no-fuse-attention keeps them as barriers)
    if args.fuse_attention or args.pin:
        from fusiontune.frontend.loader import load_model, parse_input_values
        from fusiontune.planner.attention import fuse_attention

        sizes = {"input_size": input_size} if input_size is not None else {}
        pins = parse_input_values(args.pin) if args.pin else None
        try:
            model = load_model(args.model, input_shapes=shapes, input_values=pins, **sizes)
        except InputSizeError as exc:
            raise input_size_error(exc) from None
        model = fuse_attention(model) if args.fuse_attention else model
        input_size = shapes = None
    try:
        result = search(
            model,
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
            export_best=args.export,
            input_size=input_size,
            input_shapes=shapes,
            on_record=progress.update,
            on_start=progress.start,
            eval_timeout_s=args.eval_timeout or None,
            checkpoint_s=args.checkpoint_every,
            model_bits=args.model_bits,
        )
    except InputSizeError as exc:
        raise input_size_error(exc) from None
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


@contextlib.contextmanager
def first_ctrl_c_only() -> Iterator[None]:
    """The first Ctrl-C stops the search (``KeyboardInterrupt``: the search saves its trials);
    from then on SIGINT is ignored until the process exits, so a second Ctrl-C cannot cut the
    save, the storage's close, the backend's shutdown, the message or the interpreter's exit
    short (exit 130, one line of what was saved). Without an interruption the previous handler
    comes back. Off the main thread, or with SIGINT already ignored, nothing changes."""
    import threading

    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return

    def first(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, first)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is first:  # not interrupted: as it was
            signal.signal(signal.SIGINT, previous)


def resume_command(args: argparse.Namespace) -> str:
    """The command line that continues this search: the one given, plus ``--resume``."""
    argv = list(getattr(args, "argv", None) or sys.argv[1:])
    if "--resume" not in argv:
        argv.append("--resume")
    return shlex.join(["fusiontune", *argv])


OBJECTIVE_UNITS = {
    "traffic": ("B",),
    "energy": ("pJ",),
    "cycles": ("cycles",),
    "edp": ("pJ x cycles",),
    "movement": ("B",),
    "throughput": ("cycles/image",),
    "multi": ("B", "pJ", "cycles"),
}
"""Unit of each objective value, by objective (``multi``: traffic, energy, cycles)."""

METRIC_UNITS = {
    "traffic_bytes": "B",
    "movement_bytes": "B",
    "pipeline_cycles": "cycles/image",
    "energy_pj": "pJ",
    "cycles": "cycles",
    "area_mm2": "mm2",
}
"""Unit of each metric an objective may be made of (a co-design ``multi``: energy, cycles,
area)."""


def objective_text(
    objective: str, values: Sequence[float], metrics: Sequence[str] | None = None
) -> str:
    """Objective values with their units: ``1.406e+06 B`` or ``794 B, 1.2e+06 pJ, 300 cycles``
    (``metrics``: the metrics the values are, when the objective does not tell)."""
    units = OBJECTIVE_UNITS.get(objective, ("",) * len(values))
    if metrics:
        units = tuple(METRIC_UNITS.get(m, "") for m in metrics)
    return ", ".join(f"{v:.6g} {u}".strip() for v, u in zip(values, units))


class Progress:
    """Search progress: trials done, trials/s, ETA, best so far (a rich bar on a terminal,
    plain lines every tenth of the run elsewhere).

    Args:
        objective: the search objective (for the best value's unit).
        metrics: the metrics the objective values are (units; default: from the objective).
        live: draw a rich progress bar (a terminal); else print plain lines.
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(
        self,
        objective: str,
        live: bool,
        clock: Callable[[], float] = time.monotonic,
        metrics: Sequence[str] | None = None,
    ) -> None:
        self.objective = objective
        self.metrics = tuple(metrics or ())
        self.best: float | None = None
        self.count = 0
        self.total = 0
        self._clock = clock
        self._start_s = clock()
        self._live = live
        self._bar: Any = None

    def start(self, total: int) -> None:
        """The run will evaluate ``total`` trials (fewer than the budget on ``--resume``)."""
        self.total, self.count, self._start_s = total, 0, self._clock()
        if not self._live or total == 0:
            return
        try:
            from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress
        except ModuleNotFoundError:
            return
        self._bar = RichProgress(
            TextColumn("search"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} trials"),
            TextColumn("{task.fields[rate]}"),
            TextColumn("ETA {task.fields[eta]}"),
            TextColumn("best {task.fields[best]}"),
            TimeElapsedColumn(),
        )
        self._task = self._bar.add_task("search", total=total, best="-", rate="-", eta="-")
        self._bar.start()

    def rate_per_s(self) -> float | None:
        elapsed_s = self._clock() - self._start_s
        return self.count / elapsed_s if elapsed_s > 0 and self.count else None

    def eta_text(self) -> str:
        rate = self.rate_per_s()
        if rate is None:
            return "-"
        left_s = max(0, self.total - self.count) / rate
        minutes, seconds = divmod(round(left_s), 60)
        return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"

    def update(self, record: TrialRecord) -> None:
        self.count += 1
        if record.state == "COMPLETE" and record.feasible and record.values:
            value = record.values[0]
            self.best = value if self.best is None else min(self.best, value)
        best = (
            "-"
            if self.best is None
            else objective_text(self.objective, [self.best], self.metrics[:1] or None)
        )
        rate = self.rate_per_s()
        rate_text = "-" if rate is None else f"{rate:.1f} trials/s"
        if self._bar is not None:
            self._bar.update(self._task, advance=1, best=best, rate=rate_text, eta=self.eta_text())
        elif self.count % max(1, self.total // 10) == 0 or self.count == self.total:
            print(
                f"search: {self.count}/{self.total} trials, {rate_text}, ETA {self.eta_text()}, "
                f"best {best}",
                file=sys.stderr,
            )

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


def _certificate(summary: dict[str, Any], hardware: str = "base") -> str:
    """How sure the optimum is: proven, a proven gap, or proven infeasible (``summary``: the
    summary, or its ``at_best_hardware`` block)."""
    status = summary.get("oracle_status")
    seconds = summary.get("oracle_s", 0.0)
    if status == "optimal":
        return f"proven optimal over all legal partitions ({seconds:.2f} s)"
    if status == "infeasible":
        return f"no plan fits the {hardware} hardware (proven)"
    return (
        f"time limit: within {100 * summary.get('oracle_gap', 0.0):.2f} % of optimal (proven gap)"
    )


def format_summary(summary: dict[str, Any]) -> str:
    """The end-of-search summary: best vs baselines vs optimum vs lower bound, and paths."""
    best = summary["best"]
    base = summary.get("baselines", {})
    objective = summary["objective"]

    def line(label: str, row: dict[str, Any]) -> str:
        if row.get("error"):
            return f"  {label:<18}failed: {' '.join(str(row['error']).split())[:120]}"
        text = f"  {label:<18}traffic {_mb(row.get('traffic_bytes')):>14}"
        values = row.get("values") or []
        if objective != "traffic" and values:
            text += f"   {objective} {objective_text(objective, values, metrics)}"
        return text

    metrics = summary.get("objective_metrics")

    lines = [
        f"study {summary['study']}: {summary['n_trials']} trials of {summary['model']} "
        f"(objective {objective}, sampler {summary['sampler']})",
        line(f"best (trial {best['trial']}):", best)
        + ("" if best.get("feasible") else "  (INFEASIBLE)"),
    ]
    lines += _hardware_lines(summary)
    knobs = bool(summary.get("knobs"))

    def block(rows: dict[str, Any], info: dict[str, Any], role: str) -> list[str]:
        """Baseline rows, lower bounds and the optimum's certificate at one hardware (``info``:
        the summary, or its ``at_best_hardware`` block; ``role``: base or best)."""
        bounds = info.get("lower_bounds") or {}
        out = [
            line("exact optimum:" if name == "oracle" else f"{name}:", rows[name])
            for name in BASELINE_ORDER
            if name in rows
        ]
        compulsory = bounds.get("compulsory_bytes", best.get("lower_bound_bytes"))
        out.append(f"  {'lower bound:':<18}traffic {_mb(compulsory):>14}  (compulsory)")
        if "capacity_bytes" in bounds:
            out.append(
                f"  {'lower bound:':<18}traffic {_mb(bounds['capacity_bytes']):>14}  "
                "(with capacity)"
            )
        if "oracle_status" in info:
            out.append(f"  optimum certificate: {_certificate(info, role)}")
        return out

    if knobs and base:  # a co-design run: say which hardware each block of rows used
        lines.append(_at_hardware("base", (next(iter(base.values())).get("hardware") or {})))
    lines += block(base, summary, "base")
    at_best = summary.get("at_best_hardware") or {}
    if at_best.get("same_as_base"):
        lines.append("  (the best trial kept the base hardware: the rows above are at it)")
    elif at_best.get("baselines"):
        lines.append(_at_hardware("best", at_best["hardware"]))
        lines += block(at_best["baselines"], at_best, "best")
        if "best_over_optimum" in at_best:
            lines.append(
                f"  best / proven optimum at the best hardware ({at_best['oracle_objective']}): "
                f"{at_best['best_over_optimum']:.4f}"
            )
    lines += _chip_lines(summary)
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
            + (", best_hardware.yaml" if "best_hardware" in files else "")
            + (", optimal_plan.json" if "optimum" in summary else "")
            + (", best_model.onnx)" if "best_model" in files else ")")
        )
        lines.append(f"  report:  fusiontune report {folder}")
    if summary.get("storage_url"):
        lines.append(f"  study storage: {summary['storage_url']}")
        lines.append(f"  dashboard: optuna-dashboard {shlex.quote(summary['storage_url'])}")
    elif summary.get("storage"):
        lines.append(f"  study storage: {summary['storage']}")
    return "\n".join(lines)


def _count(value: Any) -> str:
    """A count with thousands separators, ``-`` when absent."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:,.0f}"


def _cores(n: Any) -> str:
    return "1 core" if n == 1 else f"{n} cores"


CHIP_LABELS = {
    "best": "best",
    "trial_0": "trial 0",
    "greedy": "greedy",
    "unfused": "unfused",
    "oracle": "exact optimum",
}
"""Labels of the headline rows (``summary.json`` ``chip.rows``)."""


def _chip_lines(summary: dict[str, Any]) -> list[str]:
    """The headline table: DRAM bytes, NoC byte-hops, energy (group model + network) and
    images/s of the best trial, trial 0 and the baselines, the bounds, and whether the search
    moved from trial 0 (or why not)."""
    chip = summary.get("chip") or {}
    rows = chip.get("rows") or {}
    if not rows:
        return []
    lines = [
        f"  on {chip.get('hardware')} ({_cores(chip.get('cores'))}), replication "
        f"{chip.get('replication')}, batch pipeline:",
        f"  {'':<18}{'DRAM bytes':>14}{'NoC byte-hops':>16}{'energy pJ (+ NoC)':>24}"
        f"{'images/s':>16}",
    ]
    for name, label in CHIP_LABELS.items():
        row = rows.get(name)
        if row is None:
            continue
        if name == "best":
            label = f"best (trial {row['trial']})"
        elif name == "oracle":
            label = f"{summary.get('oracle_objective', 'exact')} optimum"
        energy = row.get("energy_pj")
        noc = row.get("noc_energy_pj") or 0.0
        energy_text = "-" if energy is None else f"{energy:.4g} + {noc:.3g}"
        lines.append(
            f"  {label + ':':<18}{_count(row.get('traffic_bytes')):>14}"
            f"{_count(row.get('noc_byte_hops')):>16}{energy_text:>24}"
            f"{_count(row.get('images_per_s')):>16}"
        )
    bounds = chip.get("bounds") or {}
    tp = bounds.get("throughput") or {}
    ips = _count(tp.get("images_per_s")) if tp.get("proven") else "-"
    lines.append(
        f"  {'bound:':<18}{_count(bounds.get('traffic_bytes')):>14}{'-':>16}{'-':>24}{ips:>16}"
        + ("" if tp.get("proven") else f"  (images/s: {tp.get('reason', 'none')})")
    )
    moved = summary.get("search_moved") or {}
    ratios = moved.get("best_over_trial_0")
    if moved.get("moved") and ratios:
        lines.append("  search moved: best / trial 0 = " + ", ".join(f"{r:.4f}" for r in ratios))
    elif moved.get("reason"):
        lines.append(f"  search did not move from trial 0: {moved['reason']}")
    return lines


BASELINE_ORDER = ("unfused", "tvm_like", "greedy", "exhaustive", "oracle")
"""Order of the baseline rows in the printed summary."""


def _at_hardware(role: str, hardware: dict[str, Any]) -> str:
    """Header of a block of baseline rows: the hardware they used (name, hash, knob values)."""
    knobs = ", ".join(f"{k}={v}" for k, v in (hardware.get("knobs") or {}).items())
    return (
        f"  at the {role} hardware, {hardware.get('name')} {hardware.get('hw_hash')}"
        + (f" ({knobs})" if knobs else "")
        + ":"
    )


def _hardware_lines(summary: dict[str, Any]) -> list[str]:
    """The chosen hardware (knob values, area, file) and, bilevel, the plan's certificate."""
    best = summary["best"]
    hw = best.get("hardware") or {}
    if not hw:
        return []
    knobs = ", ".join(f"{k}={v}" for k, v in (hw.get("knobs") or {}).items())
    area = hw.get("area_mm2")
    area_text = "" if area is None else f", area {area:.3f} mm2"
    lines = [
        f"  {'hardware:':<18}{hw.get('name')} {hw.get('hw_hash')}"
        + (f" with {knobs}" if knobs else "")
        + area_text
    ]
    best_file = summary.get("files", {}).get("best_hardware")
    if best_file and knobs:
        lines.append(f"  {'':<18}written to {best_file} (load with --hardware)")
    cert = best.get("plan_certificate")
    if cert:
        proven = "proven optimal" if cert.get("proven") else f"gap {cert.get('gap', 0.0):.2%}"
        lines.append(
            f"  {'plan:':<18}exact for this hardware ({proven}, {cert.get('status')}, "
            f"{cert.get('solve_s', 0.0):.2f} s)"
        )
    front = summary.get("pareto_front")
    if front:
        lines.append(f"  Pareto front: {len(front)} designs (summary.json 'pareto_front')")
    return lines
