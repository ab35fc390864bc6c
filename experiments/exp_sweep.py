"""Real architectures, as their exporters emit them: what fusiontune makes of each.

Exports every architecture of ``sweep_models.py`` (torchvision, timm, transformers; random
weights, small inputs) with both of ``torch.onnx.export``'s exporters -- TorchScript
(``dynamo=False``) and dynamo (``dynamo=True``), each at its default opset -- into a gitignored
cache, then for each exported file measures through fusiontune's public API:

- ``load``: loads? (else the one-line error), ops, op types, OPAQUE ops and their share, the
  share among MAC-bearing ops (Conv, ConvTranspose, Gemm, MatMul, Einsum) by count and by MACs;
- ``ort``: ``reference_run`` against onnxruntime on ``random_inputs`` (rel <= 1e-4);
- ``greedy``: unfused and greedy traffic on ``isaac_reram_flat`` and the planning time;
- ``verify_greedy``, ``verify_optimum``: ``ft.verify`` of those plans (fused vs reference);
- ``count``, ``explain``: the budgeted ``count_within`` and ``ft.explain(graph, budget=...)``
  (the budgets ``fusiontune plans --count`` / ``--explain`` use), times in process, and
  whether the answer is exact (past the budget: a proven lower bound, proven patterns);
- ``optimum``: ``ft.optimal_plan`` (exact over all legal partitions; stopped after
  ``OPTIMUM_TIME_LIMIT_S`` with its best plan and a proven gap);
- ``cli_count``, ``cli_explain``: wall time of ``fusiontune plans FILE --count`` and
  ``--explain`` in a fresh process (start-up and load included), and ``fusiontune models``.

Every step runs in a child process with a timeout (CPU seconds, not wall time: the machine is
shared): a step that hangs or crashes is recorded
with its reason and the next step goes on in a new child. Per-file results are cached (next
to the export, or in ``--analysis-dir``), keyed by the file's and the fusiontune sources'
hashes, so an interrupted run resumes. Without torch the export phase is skipped and
whatever the cache holds is analysed.

Writes ``results/exp_sweep.md`` (tables and failures), ``results/exp_sweep.csv`` (one row per
exported file), ``results/exp_sweep_ops.md`` (op frequency, exporter forms); ``--name`` sets
the stem (``exp_sweep_subset32``: the local TorchScript exports re-analysed, see
``experiments/README.md``).

Usage: ``python experiments/exp_sweep.py [--only REGEX] [--limit N] [--exporters ...]``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import select
import subprocess
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exp_common import RESULTS_DIR, machine_line, markdown_table, write_csv

from fusiontune.planner.counting import DEFAULT_COUNT_BUDGET

EXPERIMENTS_DIR = Path(__file__).resolve().parent
REPO_DIR = EXPERIMENTS_DIR.parent
CACHE_DIR = EXPERIMENTS_DIR / ".sweep_cache"
EXPORTERS = ("torchscript", "dynamo")
HARDWARE = "isaac_reram_flat"  # the default preset (DESIGN §7): weights resident
REL_TOL = 1e-4  # reference vs onnxruntime: max|ref - ort| / max|ort|
STEP_TIMEOUT_S = 120.0  # CPU seconds of one analysis step (load, count, ...) in its child process
WALL_FACTOR = 10.0  # a step also stops after this many times its CPU budget of wall time
POLL_S = 1.0  # how often a waiting step's CPU time is read
MAX_TIMEOUTS_PER_FILE = 2  # then the file's remaining steps are skipped
OPTIMUM_TIME_LIMIT_S = 60.0  # ft.optimal_plan stops here with its best plan and a proven gap
COUNT_BUDGET = DEFAULT_COUNT_BUDGET  # work units `fusiontune plans --count` spends
EXPLAIN_BUDGET = COUNT_BUDGET // 2  # what `fusiontune plans --explain` gives the walk
EXPORT_TIMEOUT_S = 600.0  # both exports of one model
MODELS_REPEATS = 3  # `fusiontune models` timed this many times (median reported)
MODELS_SHOWN = 5  # model names listed per OPAQUE op type in the op-frequency table
OPAQUE_MAC_TARGET = 0.05  # issue 13: OPAQUE ops at most 5 % of the MAC-bearing ops
MAC_TYPES = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum"})
"""Op types that multiply-accumulate (the ops a crossbar could run)."""
STEPS = (
    "load",
    "ort",
    "greedy",
    "verify_greedy",
    "count",
    "explain",
    "optimum",
    "verify_optimum",
    "cli_count",
    "cli_explain",
)
DEFAULT_NAME = "exp_sweep"  # results/<name>.md, <name>.csv, <name>_ops.md
ERROR_CHARS = 240  # failure reasons are cut to one line of this length
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")  # colour codes in the dynamo exporter's messages


def one_line(text: str) -> str:
    """The first non-empty line of an error, cut to ERROR_CHARS, machine paths removed."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    line = lines[0] if lines else "(no message)"
    line = line.replace(str(CACHE_DIR) + os.sep, "").replace(str(REPO_DIR) + os.sep, "")
    return line[:ERROR_CHARS]


# ---- export phase -----------------------------------------------------------------------------
def export_error(exc: BaseException) -> str:
    """One line for a failed export: the exception, and its root cause when it has one (the
    dynamo exporter wraps the real error in a ConversionError whose message is boilerplate)."""
    root = exc
    while root.__cause__ is not None and root.__cause__ is not root:
        root = root.__cause__
    text = f"{type(exc).__name__}: {one_line(str(exc))}"
    if root is not exc:
        text = f"{type(exc).__name__} caused by {type(root).__name__}: {one_line(str(root))}"
    return ANSI_ESCAPE.sub("", text)[:ERROR_CHARS]


def export_path(name: str, exporter: str, cache: Path) -> Path:
    return cache / f"{name}.{exporter}.onnx"


def meta_path(name: str, exporter: str, cache: Path) -> Path:
    return cache / f"{name}.{exporter}.export.json"


def export_one(name: str, exporters: Sequence[str], cache: Path) -> None:
    """Child process: build one model and export it with each exporter; one meta file each."""
    import onnx
    import torch
    from sweep_models import model_by_name

    warnings.filterwarnings("ignore")
    entry = model_by_name()[name]
    versions = {"torch": torch.__version__, "onnx": onnx.__version__}
    for lib in ("torchvision", "timm", "transformers", "onnxscript"):
        with contextlib.suppress(Exception):
            versions[lib] = __import__(lib).__version__
    for exporter in exporters:
        out = export_path(name, exporter, cache)
        tmp = out.with_suffix(".part.onnx")  # renamed when whole: a reader never sees half a file
        meta: dict[str, Any] = {"model": name, "exporter": exporter, "versions": versions}
        start = time.perf_counter()
        try:
            torch.manual_seed(0)
            module, args, input_names = entry.build()
            module.eval()
            # autograd stays on, as in a plain export call: under no_grad nn.MultiheadAttention
            # takes a fused fast path that the TorchScript exporter cannot export
            with contextlib.redirect_stdout(sys.stderr):
                if exporter == "torchscript":
                    torch.onnx.export(module, args, str(tmp), dynamo=False, input_names=input_names)
                else:
                    torch.onnx.export(
                        module,
                        args,
                        str(tmp),
                        dynamo=True,
                        external_data=False,
                        input_names=input_names,
                        verbose=False,
                    )
            os.replace(tmp, out)
            model = onnx.load(str(out), load_external_data=False)
            meta.update(
                ok=True,
                opset=next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                size_bytes=out.stat().st_size,
            )
        except Exception as exc:
            tmp.unlink(missing_ok=True)
            out.unlink(missing_ok=True)
            meta.update(ok=False, error=export_error(exc))
        meta["export_s"] = time.perf_counter() - start
        meta_path(name, exporter, cache).write_text(json.dumps(meta, indent=1))


def run_exports(names: Sequence[str], exporters: Sequence[str], cache: Path, force: bool) -> None:
    """Export every (model, exporter) not already cached; one child process per model."""
    for name in names:
        todo = [e for e in exporters if force or not meta_path(name, e, cache).exists()]
        if not todo:
            continue
        start = time.perf_counter()
        cmd = [
            sys.executable,
            __file__,
            "--export-one",
            name,
            "--exporters",
            ",".join(todo),
            "--cache",
            str(cache),
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S)
            crash = "" if proc.returncode == 0 else one_line(proc.stderr.strip()[-2000:])
        except subprocess.TimeoutExpired:
            crash = f"export timed out after {EXPORT_TIMEOUT_S:.0f} s"
        for exporter in todo:
            if not meta_path(name, exporter, cache).exists():
                meta = {
                    "model": name,
                    "exporter": exporter,
                    "ok": False,
                    "error": crash or "exporter process died",
                }
                meta_path(name, exporter, cache).write_text(json.dumps(meta, indent=1))
        status = {e: json.loads(meta_path(name, e, cache).read_text())["ok"] for e in todo}
        print(f"  export {name}: {status} ({time.perf_counter() - start:.0f} s)", flush=True)


# ---- analysis: one step at a time in a child process -------------------------------------------
def _macs(graph: Any, op: Any) -> int | None:
    """Multiply-accumulates of a MAC-bearing op from its tensor shapes (None if unknown)."""
    import math

    t = graph.tensors
    if op.op_type not in MAC_TYPES or op.op_type == "Einsum" or len(op.inputs) < 2:
        return None
    out, a, w = t[op.outputs[0]].shape, t[op.inputs[0]].shape, t[op.inputs[1]].shape
    if op.op_type == "Conv":
        return math.prod(out) * math.prod(w[1:])
    if op.op_type == "ConvTranspose":  # every input element meets C_out/group * kernel weights
        return math.prod(a) * math.prod(w[1:])
    if op.op_type == "Gemm":
        k = a[0] if int(op.attr("transA", 0)) else a[-1]
        return math.prod(out) * k
    return math.prod(out) * (a[-1] if a else 1)  # MatMul


def _load_kwargs(state: dict[str, Any]) -> dict[str, Any]:
    """``input_shapes`` / ``input_values`` of ``ft.load_model`` for this file (``--load-args``:
    the held-out script's models with a pinned input; none for the sweep's exports)."""
    return dict(state.get("load_args") or {})


ORT_DTYPES = {"tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(float)": "float32"}
"""onnxruntime's input type names -> numpy dtypes (of pinned inputs)."""


def sess_inputs(path: str) -> list[Any]:
    """onnxruntime's view of the file's inputs (name, type)."""
    import onnxruntime as ort

    return list(ort.InferenceSession(path, providers=["CPUExecutionProvider"]).get_inputs())


def step_load(state: dict[str, Any]) -> dict[str, Any]:
    import fusiontune as ft

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = ft.load_model(state["path"], **_load_kwargs(state))
    load_s = time.perf_counter() - start
    state["graph"] = graph
    classes = Counter(str(op.op_class) for op in graph.ops)
    types = Counter(op.op_type for op in graph.ops)
    opaque = Counter(op.op_type for op in graph.ops if str(op.op_class) == "OPAQUE")
    mac_ops = [op for op in graph.ops if op.op_type in MAC_TYPES]
    opaque_mac = [op for op in mac_ops if str(op.op_class) == "OPAQUE"]
    macs = {op.name: _macs(graph, op) or 0 for op in mac_ops}
    total_macs = sum(macs.values())
    # LINEAR ops next to an OPAQUE op (producer or consumer): a fusion barrier on that side
    fenced: Counter[str] = Counter()
    by_name = graph.op_by_name
    for op in graph.ops:
        if str(op.op_class) != "OPAQUE":
            continue
        neighbours = set(graph.predecessors(op.name)) | set(graph.successors(op.name))
        fenced[op.op_type] += sum(1 for n in neighbours if str(by_name[n].op_class) == "LINEAR")
    return {
        "load_s": load_s,
        "ops": len(graph.ops),
        "op_types": dict(types),
        "classes": dict(classes),
        "opaque_types": dict(opaque),
        "opaque_ops": sum(opaque.values()),
        "mac_ops": len(mac_ops),
        "opaque_mac_ops": len(opaque_mac),
        "opaque_mac_types": dict(Counter(op.op_type for op in opaque_mac)),
        "macs": total_macs,
        "opaque_macs": sum(macs[op.name] for op in opaque_mac),
        "fenced_linear": dict(fenced),
        "params": graph.total_params,
    }


def step_ort(state: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import onnxruntime as ort

    import fusiontune as ft
    from fusiontune.reference import random_inputs

    graph = state["graph"]
    feeds = random_inputs(graph, seed=0)
    start = time.perf_counter()
    ref = ft.reference_run(graph, feeds)
    pinned = _load_kwargs(state).get("input_values") or {}
    ort_feeds = dict(feeds)  # onnxruntime reads the file as shipped: pinned inputs are inputs
    for name, value in pinned.items():
        kind = next(i.type for i in sess_inputs(state["path"]) if i.name == name)
        ort_feeds[name] = np.asarray(value, dtype=ORT_DTYPES.get(kind, np.float32))
    ref_s = time.perf_counter() - start
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(state["path"], opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    got = dict(zip(names, sess.run(names, ort_feeds)))
    worst = 0.0
    for name in graph.outputs:
        a = np.asarray(ref[name], dtype=np.float64)
        b = np.asarray(got[name], dtype=np.float64)
        if a.shape != b.shape:
            return {
                "ref_s": ref_s,
                "ort_ok": False,
                "ort_error": f"output '{name}': reference {a.shape}, onnxruntime {b.shape}",
            }
        scale = float(np.max(np.abs(b))) if b.size else 0.0
        diff = float(np.max(np.abs(a - b))) if b.size else 0.0
        rel = diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))
        worst = max(worst, rel if np.isfinite(a).all() else float("inf"))
    return {"ref_s": ref_s, "ort_rel_err": worst, "ort_ok": bool(worst <= REL_TOL)}


def _hw() -> Any:
    import fusiontune as ft

    return ft.load_hardware(HARDWARE)


def step_greedy(state: dict[str, Any]) -> dict[str, Any]:
    import fusiontune as ft

    graph, hw = state["graph"], _hw()
    unfused = ft.simulate(graph, ft.unfused_plan(graph), hw)
    start = time.perf_counter()
    greedy = ft.greedy_plan(graph)
    greedy_s = time.perf_counter() - start
    state["greedy"] = greedy
    m = ft.simulate(graph, greedy, hw)
    return {
        "unfused_bytes": int(unfused.traffic_bytes),
        "greedy_bytes": int(m.traffic_bytes),
        "greedy_groups": m.n_groups,
        "greedy_feasible": bool(m.feasible),
        "greedy_s": greedy_s,
    }


def _verify(state: dict[str, Any], plan: Any, prefix: str) -> dict[str, Any]:
    import fusiontune as ft

    start = time.perf_counter()
    report = ft.verify(state["graph"], plan, _hw())
    return {
        f"{prefix}_ok": bool(report.passed),
        f"{prefix}_rel_err": report.max_rel_err,
        f"{prefix}_traffic_equal": bool(report.traffic_ok),
        f"{prefix}_s": time.perf_counter() - start,
    }


def step_verify_greedy(state: dict[str, Any]) -> dict[str, Any]:
    import fusiontune as ft

    plan = state.get("greedy") or ft.greedy_plan(state["graph"])
    return _verify(state, plan, "verify_greedy")


def step_count(state: dict[str, Any]) -> dict[str, Any]:
    """The number of legal plans within COUNT_BUDGET (exact, or a proven lower bound)."""
    from fusiontune.planner.counting import count_within

    start = time.perf_counter()
    count = count_within(state["graph"], budget=COUNT_BUDGET)
    return {
        "count_s": time.perf_counter() - start,
        "plans_log10": len(str(count.value)) - 1,
        "plans_exact": count.exact,
    }


def step_explain(state: dict[str, Any]) -> dict[str, Any]:
    """Every activation edge explained within EXPLAIN_BUDGET (patterns proven, maybe not all)."""
    import fusiontune as ft

    start = time.perf_counter()
    edges = ft.explain(state["graph"], budget=EXPLAIN_BUDGET)
    return {
        "explain_s": time.perf_counter() - start,
        "edges": len(edges),
        "fusable_edges": sum(1 for e in edges if e.fusable),
        "explain_complete": all(e.complete for e in edges),
    }


def step_optimum(state: dict[str, Any]) -> dict[str, Any]:
    import fusiontune as ft

    graph, hw = state["graph"], _hw()
    result = ft.optimal_plan(graph, hw, "traffic", time_limit_s=OPTIMUM_TIME_LIMIT_S)
    row: dict[str, Any] = {
        "optimum_status": result.status,
        "optimum_bytes": None if result.value is None else float(result.value),
        "optimum_lower_bound": float(result.lower_bound),
        "optimum_gap": float(result.gap),
        "optimum_proven": bool(result.proven),
        "optimum_s": float(result.solve_s),
        "optimum_ideals": int(result.n_ideals),
    }
    if result.plan is not None:
        Path(state["plan_file"]).write_text(result.plan.to_json())
        row["optimum_groups"] = result.plan.n_groups
    else:
        row["optimum_error"] = f"no feasible plan on {HARDWARE} ({result.status})"
    return row


def step_verify_optimum(state: dict[str, Any]) -> dict[str, Any]:
    import fusiontune as ft

    plan_file = Path(state["plan_file"])
    if not plan_file.exists():
        return {"verify_optimum_error": "no optimum plan"}
    plan = ft.Plan.from_json(plan_file.read_text(), state["graph"])
    return _verify(state, plan, "verify_optimum")


def _cli(state: dict[str, Any], flag: str, prefix: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "fusiontune.cli.main", "plans", state["path"], flag]
    start = time.perf_counter()
    # the parent stops the step at its CPU budget; this only stops a process that hangs
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=WALL_FACTOR * STEP_TIMEOUT_S)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        return {
            f"{prefix}_error": one_line(
                proc.stderr.strip().splitlines()[-1:][0] if proc.stderr.strip() else "failed"
            )
        }
    return {f"{prefix}_s": seconds}


def step_cli_count(state: dict[str, Any]) -> dict[str, Any]:
    return _cli(state, "--count", "cli_count")


def step_cli_explain(state: dict[str, Any]) -> dict[str, Any]:
    return _cli(state, "--explain", "cli_explain")


STEP_FUNCS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "load": step_load,
    "ort": step_ort,
    "greedy": step_greedy,
    "verify_greedy": step_verify_greedy,
    "count": step_count,
    "explain": step_explain,
    "optimum": step_optimum,
    "verify_optimum": step_verify_optimum,
    "cli_count": step_cli_count,
    "cli_explain": step_cli_explain,
}


def analyse_child(
    path: str, steps: Sequence[str], plan_file: str, load_args: dict[str, Any] | None = None
) -> None:
    """Child process: run ``steps`` on one file, one JSON line per step on the protocol fd."""
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else printed goes to stderr
    state: dict[str, Any] = {"path": path, "plan_file": plan_file, "load_args": load_args}
    for step in steps:
        if step != "load" and "graph" not in state:
            step_load(state)  # a later child re-loads the graph (its time is not recorded)
        try:
            row = {"step": step, "ok": True, **STEP_FUNCS[step](state)}
        except Exception as exc:
            row = {
                "step": step,
                "ok": False,
                "error": f"{type(exc).__name__}: {one_line(str(exc))}",
            }
        proto.write(json.dumps(row) + "\n")
        proto.flush()
        if step == "load" and not row["ok"]:
            return


def _cpu_s(proc: subprocess.Popen[bytes]) -> float:
    """CPU seconds ``proc`` and its descendants (running or finished) have used so far."""
    import psutil

    total = 0.0
    try:
        root = psutil.Process(proc.pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return total
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def _read_line(proc: subprocess.Popen[bytes], cpu_budget_s: float, buf: bytearray) -> str | None:
    """Next protocol line of ``proc``; None at end of stream or when the step has used
    ``cpu_budget_s`` CPU seconds (the machine is shared: a step starved of CPU is not a slow
    step), or ``WALL_FACTOR`` times that of wall time (a step blocked, not computing)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    cpu_start, wall_end = _cpu_s(proc), time.monotonic() + WALL_FACTOR * cpu_budget_s
    while b"\n" not in buf:
        if time.monotonic() >= wall_end or _cpu_s(proc) - cpu_start >= cpu_budget_s:
            return None
        ready, _, _ = select.select([fd], [], [], POLL_S)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        buf.extend(chunk)
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line.decode()


def _skip_after_failures(results: dict[str, Any], todo: list[str]) -> bool:
    """Drop from ``todo`` the steps not worth running, recording why; True if any dropped.

    ``verify_greedy`` needs the greedy plan (it would time out recomputing it); after
    ``MAX_TIMEOUTS_PER_FILE`` timed-out steps the rest of the file is skipped (the planner
    steps share their slow part: a graph that times out twice times out again).
    """
    timeouts = sum(1 for r in results.values() if "timed out" in r.get("error", ""))
    skipped = []
    for step in list(todo):
        reason = None
        if timeouts >= MAX_TIMEOUTS_PER_FILE:
            reason = f"skipped: {timeouts} steps of this file timed out"
        elif step == "verify_greedy" and not results.get("greedy", {}).get("ok", True):
            reason = "skipped: no greedy plan"
        if reason:
            results[step] = {"step": step, "ok": False, "error": reason}
            todo.remove(step)
            skipped.append(step)
    return bool(skipped)


def analyse_file(
    path: Path,
    step_timeout_s: float,
    analysis_dir: Path,
    key: dict[str, Any] | None = None,
    load_args: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run every step on one exported file, each under ``step_timeout_s`` (the optimum's plan
    passes through a file in ``analysis_dir``).

    Each finished step is written at once to a partial file in ``analysis_dir`` (with ``key``,
    the cache key of the analysis): a run killed in the middle of a file resumes there with the
    steps not yet done (and the optimum's plan file, when the optimum step is among the done).
    ``load_args`` (JSON-able) are passed to ``ft.load_model`` in every child: ``input_shapes``,
    and ``input_values`` (pinned inputs, which onnxruntime is then fed).
    """
    plan_file = analysis_dir / path.with_suffix(".optimum.json").name
    partial = analysis_dir / path.with_suffix(".analysis.partial.json").name
    results: dict[str, Any] = {}
    if key is not None and partial.exists():
        with contextlib.suppress(ValueError):
            saved = json.loads(partial.read_text())
            if saved.get("key") == key:
                results = dict(saved["steps"])
    if "optimum" not in results or not plan_file.exists():
        results.pop("optimum", None)
        results.pop("verify_optimum", None)
        plan_file.unlink(missing_ok=True)
    if not results.get("load", {}).get("ok", True):
        return results  # the file did not load: nothing else runs
    todo = [s for s in STEPS if s not in results]
    _skip_after_failures(results, todo)

    def save() -> None:
        if key is not None:
            partial.write_text(json.dumps({"key": key, "steps": results}, indent=1))

    while todo:
        cmd = [
            sys.executable,
            __file__,
            "--analyse-one",
            str(path),
            "--steps",
            ",".join(todo),
            "--plan-file",
            str(plan_file),
        ]
        if load_args:
            cmd += ["--load-args", json.dumps(load_args)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        buf = bytearray()
        while todo:
            step = todo[0]
            line = _read_line(proc, step_timeout_s, buf)
            if line is None:
                alive = proc.poll() is None
                proc.kill()
                proc.wait()
                why = (
                    f"timed out after {step_timeout_s:.0f} s of CPU"
                    if alive
                    else (f"process died (exit {proc.returncode})")
                )
                results[step] = {"step": step, "ok": False, "error": why}
                todo.pop(0)
                if step == "load":
                    todo.clear()
                _skip_after_failures(results, todo)
                save()
                break
            row = json.loads(line)
            results[row["step"]] = row
            todo.pop(0)
            if step == "load" and not row["ok"]:
                todo.clear()
            skipped = _skip_after_failures(results, todo)
            save()
            if skipped:
                break
        with contextlib.suppress(Exception):
            proc.kill()
            proc.wait()
    plan_file.unlink(missing_ok=True)
    return results


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fusiontune_hash() -> str:
    """Hash of the fusiontune package sources: cached analyses are redone when it changes."""
    import fusiontune

    root = Path(fusiontune.__file__).parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def analyse_cached(
    path: Path,
    code_hash: str,
    step_timeout_s: float,
    fresh: bool,
    cached_only: bool = False,
    analysis_dir: Path | None = None,
    reuse_stale: bool = False,
) -> dict:
    """Analysis of ``path`` from its cache file in ``analysis_dir`` (default: next to the
    export), or run now and cache it (``cached_only``: an empty dict when no valid cached
    analysis exists). ``reuse_stale`` also takes a cached analysis made on other fusiontune
    sources (everything else in the key equal); the row names the sources' hash either way."""
    analysis_dir = analysis_dir or path.parent
    cache_file = analysis_dir / path.with_suffix(".analysis.json").name
    key = {
        "file_sha256": _sha256(path),
        "fusiontune": code_hash,
        "hardware": HARDWARE,
        "step_timeout_s": step_timeout_s,
        "count_budget": COUNT_BUDGET,
        "explain_budget": EXPLAIN_BUDGET,
    }
    if not fresh and cache_file.exists():
        cached = json.loads(cache_file.read_text())
        old_key = cached.get("key", {})
        same_but_code = {**old_key, "fusiontune": code_hash} == key
        kept = _without_wall_timeouts(dict(cached["steps"]))
        valid = old_key == key or (reuse_stale and same_but_code)
        if valid and (kept == cached["steps"] or cached_only):
            return _with_code(dict(cached["steps"]), old_key.get("fusiontune", ""))
        if old_key == key:  # resume at the steps that hit the former wall-clock budget
            partial = analysis_dir / path.with_suffix(".analysis.partial.json").name
            partial.write_text(json.dumps({"key": key, "steps": kept}, indent=1))
    if cached_only:
        return {}
    if fresh:
        (analysis_dir / path.with_suffix(".analysis.partial.json").name).unlink(missing_ok=True)
    steps = analyse_file(path, step_timeout_s, analysis_dir, key)
    cache_file.write_text(json.dumps({"key": key, "steps": steps}, indent=1))
    (analysis_dir / path.with_suffix(".analysis.partial.json").name).unlink(missing_ok=True)
    return _with_code(steps, code_hash)


WALL_TIMEOUT = re.compile(r"timed out after \d+ s$")
"""A timeout of the former wall-clock step budget (a starved step on a shared machine)."""


def _without_wall_timeouts(steps: dict[str, Any]) -> dict[str, Any]:
    """``steps`` less those that hit the former wall-clock budget and those skipped after it
    (they run again under the CPU budget)."""
    walls = [s for s, r in steps.items() if WALL_TIMEOUT.search(r.get("error", ""))]
    if not walls:
        return steps
    return {
        s: r
        for s, r in steps.items()
        if s not in walls and not r.get("error", "").startswith("skipped:")
    }


def _with_code(steps: dict[str, Any], code_hash: str) -> dict[str, Any]:
    """``steps`` with the hash of the fusiontune sources they were measured on, on the load
    step (the row's ``fusiontune`` column)."""
    if "load" in steps:
        steps["load"] = {**steps["load"], "fusiontune": code_hash}
    return steps


# ---- rows and report ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """One (model, exporter) pair of the sweep."""

    model: str
    exporter: str
    library: str
    kind: str
    note: str


def row_of(target: Target, meta: dict[str, Any], steps: dict[str, Any]) -> dict[str, Any]:
    """The flat CSV row of one exported file."""
    row: dict[str, Any] = {
        "model": target.model,
        "exporter": target.exporter,
        "library": target.library,
        "kind": target.kind,
        "exported": bool(meta.get("ok")),
        "opset": meta.get("opset"),
        "export_s": meta.get("export_s"),
        "size_bytes": meta.get("size_bytes"),
    }
    failures: list[str] = []
    if not meta.get("ok"):
        failures.append(f"export: {meta.get('error', 'not exported')}")
    row["done"] = not meta.get("ok") or bool(steps)
    if not row["done"]:
        failures.append(f"{PENDING}: not run yet (--cached-only and no cached analysis)")
    for step in STEPS:
        res = steps.get(step)
        if res is None:
            continue
        if not res["ok"]:
            failures.append(f"{step}: {res['error']}")
            continue
        for k, v in res.items():
            if k in ("step", "ok") or isinstance(v, dict):
                continue
            row[k] = v
    load = steps.get("load", {})
    row["loaded"] = bool(load.get("ok"))
    if row["loaded"]:
        row["opaque_share"] = load["opaque_ops"] / max(load["ops"], 1)
        row["opaque_mac_share"] = (
            (load["opaque_mac_ops"] / load["mac_ops"]) if load["mac_ops"] else 0.0
        )
        row["opaque_macs_share"] = (load["opaque_macs"] / load["macs"]) if load["macs"] else 0.0
        row["opaque_types"] = " ".join(f"{t}:{n}" for t, n in sorted(load["opaque_types"].items()))
        for name in ("greedy", "optimum"):
            value = row.get(f"{name}_bytes")
            if value is not None and row.get("unfused_bytes"):
                row[f"{name}_vs_unfused"] = value / row["unfused_bytes"]
        for check in ("verify_greedy_ok", "verify_optimum_ok", "ort_ok"):
            if row.get(check) is False:
                failures.append(
                    f"{check.removesuffix('_ok')}: outputs differ "
                    f"(rel {row.get(check.replace('_ok', '_rel_err')):.3g})"
                )
        for k in ("optimum_error", "verify_optimum_error"):
            if k in row:
                failures.append(f"{k.removesuffix('_error')}: {row[k]}")
    row["failures"] = " | ".join(failures)
    return row


def op_frequency(steps_by_file: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """Per OPAQUE op type: files and models it appears in, op count, how many of those ops are
    MAC-bearing, and LINEAR ops next to one (producer or consumer), per exporter."""
    table: dict[str, dict[str, Any]] = {}
    for (model, exporter), steps in steps_by_file.items():
        load = steps.get("load", {})
        if not load.get("ok"):
            continue
        for t, n in load["opaque_types"].items():
            row = table.setdefault(
                t,
                {
                    "op_type": t,
                    "models": set(),
                    "ops": 0,
                    "mac_bearing": t in MAC_TYPES,
                    "fenced_linear": 0,
                    **{f"files_{e}": 0 for e in EXPORTERS},
                    **{f"ops_{e}": 0 for e in EXPORTERS},
                },
            )
            row["models"].add(model)
            row["ops"] += n
            row[f"files_{exporter}"] += 1
            row[f"ops_{exporter}"] += n
            row["fenced_linear"] += load["fenced_linear"].get(t, 0)
    rows = []
    for row in table.values():
        names = sorted(row["models"])
        shown = ", ".join(names[:MODELS_SHOWN]) + (", …" if len(names) > MODELS_SHOWN else "")
        rows.append({**row, "models": len(names), "e.g.": shown})
    rows.sort(key=lambda r: (-r["models"], -r["ops"], r["op_type"]))
    return rows


def summary_rows(rows: Sequence[dict[str, Any]], n_models: int) -> list[dict[str, Any]]:
    """Counts per exporter: exported, loaded, reference = onnxruntime, verified plans."""
    out = []
    for exporter in _exporters_in(rows):
        rs = [r for r in rows if r["exporter"] == exporter]
        loaded = [r for r in rs if r["loaded"]]
        out.append(
            {
                "exporter": exporter,
                "models": n_models,
                "exported": sum(1 for r in rs if r["exported"]),
                "loaded": len(loaded),
                "ref_matches_ort": sum(1 for r in loaded if r.get("ort_ok")),
                "greedy_verified": sum(1 for r in loaded if r.get("verify_greedy_ok")),
                "optimum_found": sum(1 for r in loaded if r.get("optimum_bytes") is not None),
                "optimum_verified": sum(1 for r in loaded if r.get("verify_optimum_ok")),
                "no_opaque_macs": sum(1 for r in loaded if r.get("opaque_mac_ops") == 0),
                "opaque_mac_share_le_5pct": sum(
                    1 for r in loaded if r["opaque_mac_share"] <= OPAQUE_MAC_TARGET
                ),
                "median_opaque_mac_share": _median([r["opaque_mac_share"] for r in loaded]),
                "median_greedy_vs_unfused": _median([r.get("greedy_vs_unfused") for r in loaded]),
                "median_optimum_vs_unfused": _median([r.get("optimum_vs_unfused") for r in loaded]),
            }
        )
    return out


def timing_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median and max of each timed step over the loaded files, per exporter."""
    keys = (
        "load_s",
        "greedy_s",
        "count_s",
        "explain_s",
        "optimum_s",
        "cli_count_s",
        "cli_explain_s",
    )
    out = []
    for exporter in _exporters_in(rows):
        for key in keys:
            values = [r[key] for r in rows if r["exporter"] == exporter and r.get(key) is not None]
            if not values:
                continue
            worst = max(
                (r for r in rows if r["exporter"] == exporter and r.get(key) is not None),
                key=lambda r: r[key],
            )
            out.append(
                {
                    "exporter": exporter,
                    "timing": key,
                    "files": len(values),
                    "median_s": _median(values),
                    "max_s": max(values),
                    "slowest": worst["model"],
                    "over_3s": sum(1 for v in values if v > 3),
                }
            )
    return out


def _exporters_in(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The exporters of this run, in EXPORTERS order."""
    present = {r["exporter"] for r in rows}
    return [e for e in EXPORTERS if e in present]


def _median(values: Iterable[Any]) -> float | None:
    vs = sorted(v for v in values if v is not None)
    if not vs:
        return None
    mid = len(vs) // 2
    return float(vs[mid]) if len(vs) % 2 else (vs[mid - 1] + vs[mid]) / 2


PENDING = "analysis"  # the failure stage of a file exported but not analysed yet

DERIVED_FAILURES = ("skipped:", "no optimum plan")
"""Failure reasons that only follow from another failure of the same file (kept in the CSV)."""


def failure_groups(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Failures grouped by stage and reason (numbers and names collapsed), without the ones
    that follow from another failure of the same file (:data:`DERIVED_FAILURES`)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        if not r.get("done", True):
            continue  # not analysed yet: counted in the report's progress line
        for failure in filter(None, r["failures"].split(" | ")):
            stage, _, reason = failure.partition(": ")
            if reason.startswith(DERIVED_FAILURES):
                continue  # follows from a failure listed for the same file
            key = (stage, _reason_key(reason))
            groups.setdefault(key, []).append(f"{r['model']}/{r['exporter']}")
    out = [
        {"stage": s, "reason": reason, "files": len(files), "which": ", ".join(files)}
        for (s, reason), files in groups.items()
    ]
    out.sort(key=lambda r: (-r["files"], r["stage"]))
    return out


def _reason_key(reason: str) -> str:
    """A failure reason with the file-specific parts (op and tensor names, numbers) replaced,
    for grouping; op types stay."""
    key = re.sub(r"\b(op|output|input|tensor|node) '[^']*'", r"\1 '…'", reason)
    key = re.sub(r"\(did you mean[^)]*\)", "", key)
    key = re.sub(r"\b\d+(\.\d+)?(e-?\d+)?\b", "N", key)
    return key.strip()[:ERROR_CHARS]


def progress_line(rows: Sequence[dict[str, Any]], n_targets: int) -> str:
    """How many of the run's ``n_targets`` files are done (analysed, or failed to export), and
    which are not yet (exported but not analysed: ``done`` False; not exported: no row)."""
    done = sum(1 for r in rows if r.get("done", True))
    line = f"**{done} of {n_targets} (model, exporter) files done**"
    if done == n_targets:
        return line + "."
    pending = [f"{r['model']}/{r['exporter']}" for r in rows if not r.get("done", True)]
    unexported = n_targets - len(rows)
    return (
        f"{line}: the run stopped before the rest (it resumes where it stopped). "
        f"{len(pending)} exported but not analysed yet"
        + (f" ({', '.join(pending)})" if pending else "")
        + f", {unexported} not exported yet."
    )


def time_models_cli() -> float:
    """Median wall time of ``fusiontune models`` (a fresh process each time)."""
    times = []
    for _ in range(MODELS_REPEATS):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "fusiontune.cli.main", "models"],
            capture_output=True,
            check=True,
            timeout=STEP_TIMEOUT_S,
        )
        times.append(time.perf_counter() - start)
    return float(_median(times) or 0.0)


# ---- exporter forms of common layers -------------------------------------------------------
def forms_probe(cache: Path, run_probe: bool) -> list[dict[str, Any]]:
    """Export tiny modules (training BN, GELU, LayerNorm, Softmax, attention) with each exporter
    and list the ONNX ops each emits (``run_probe``); cached as ``forms.json``, which is read
    back when the probe does not run (no torch, or ``--no-export``)."""
    cache_file = cache / "forms.json"
    if not run_probe:
        return list(json.loads(cache_file.read_text())) if cache_file.exists() else []
    cmd = [sys.executable, str(EXPERIMENTS_DIR / "make_onnx_forms.py"), "--probe", str(cache_file)]
    subprocess.run(cmd, capture_output=True, timeout=EXPORT_TIMEOUT_S)
    return list(json.loads(cache_file.read_text())) if cache_file.exists() else []


# ---- main ----------------------------------------------------------------------------------
def select_targets(only: str | None, limit: int | None, exporters: Sequence[str]) -> list[Target]:
    from sweep_models import MODELS

    chosen = [m for m in MODELS if not only or re.search(only, m.name)]
    if limit:
        chosen = chosen[:limit]
    return [Target(m.name, e, m.library, m.kind, m.note) for m in chosen for e in exporters]


def have_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def run(args: argparse.Namespace) -> list[Path]:
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    exporters = [e for e in args.exporters.split(",") if e]
    targets = select_targets(args.only, args.limit, exporters)
    names = list(dict.fromkeys(t.model for t in targets))
    if have_torch() and not args.no_export:
        print(f"exporting {len(names)} models with {exporters} into {cache.name}/", flush=True)
        run_exports(names, exporters, cache, args.force_export)
    else:
        print("torch not importable or --no-export: analysing the cached exports only")
    code_hash = fusiontune_hash()
    analysis_dir = Path(args.analysis_dir) if args.analysis_dir else cache
    analysis_dir.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()[1]
    rows, steps_by_file, metas = [], {}, {}
    for target in targets:
        mp = meta_path(target.model, target.exporter, cache)
        path = export_path(target.model, target.exporter, cache)
        if not mp.exists() and not path.exists():
            continue  # never exported here (no torch): not part of this run
        meta = json.loads(mp.read_text()) if mp.exists() else {"ok": True}
        metas[target.model, target.exporter] = meta
        steps: dict[str, Any] = {}
        if meta.get("ok") and path.exists():
            start = time.perf_counter()
            steps = analyse_cached(
                path,
                code_hash,
                args.step_timeout,
                args.fresh,
                args.cached_only,
                analysis_dir,
                reuse_stale=args.reuse_stale,
            )
            bad = [s for s, r in steps.items() if not r["ok"]]
            print(
                f"  {target.model}/{target.exporter}: {len(steps)} steps, failed {bad} "
                f"({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
        steps_by_file[target.model, target.exporter] = steps
        rows.append(row_of(target, meta, steps))
    models_s = None if args.skip_models_cli else time_models_cli()
    forms = forms_probe(cache, run_probe=have_torch() and not args.no_export)
    load_line = (
        f"Machine load (5-min average, {os.cpu_count()} cores, shared with other work): "
        f"{load_start:.1f} when the analysis started, {os.getloadavg()[1]:.1f} at the end; "
        "wall times are inflated accordingly and only comparable within this run."
    )
    return write_report(
        rows,
        steps_by_file,
        metas,
        targets,
        models_s,
        forms,
        Path(args.out),
        load_line,
        name=args.name,
        command=command_line(args),
    )


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces this run's report, directories written as ``DIR``."""
    parts = ["python experiments/exp_sweep.py"]
    for flag, value in (("--only", args.only), ("--limit", args.limit)):
        if value:
            parts.append(f"{flag} {value}")
    if args.exporters != ",".join(EXPORTERS):
        parts.append(f"--exporters {args.exporters}")
    for flag in ("no_export", "reuse_stale", "cached_only"):
        if getattr(args, flag):
            parts.append("--" + flag.replace("_", "-"))
    if args.cache != str(CACHE_DIR):
        parts.append("--cache DIR")
    if args.analysis_dir:
        parts.append("--analysis-dir DIR")
    if args.name != DEFAULT_NAME:
        parts.append(f"--name {args.name}")
    return " ".join(parts)


def write_report(
    rows: list[dict[str, Any]],
    steps_by_file: dict[tuple[str, str], dict[str, Any]],
    metas: dict[tuple[str, str], dict[str, Any]],
    targets: Sequence[Target],
    models_s: float | None,
    forms: Sequence[dict[str, Any]],
    out_dir: Path,
    load_line: str = "",
    name: str = "exp_sweep",
    command: str = "python experiments/exp_sweep.py",
) -> list[Path]:
    """Write the CSV (``name.csv``), the main markdown report (``name.md``) and the
    op-frequency report (``name_ops.md``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / f"{name}.csv"
    write_csv(rows, csv_path)
    n_models = len({r["model"] for r in rows})
    summary = summary_rows(rows, n_models)
    timings = timing_rows(rows)
    failures = failure_groups(rows)
    versions = next((m["versions"] for m in metas.values() if "versions" in m), {})
    progress = progress_line(rows, len(targets))
    codes = Counter(str(r.get("fusiontune")) for r in rows if r.get("fusiontune"))
    code_line = "; fusiontune sources " + (
        ", ".join(f"{h} ({n} files)" for h, n in codes.most_common())
        if len(codes) > 1
        else next(iter(codes), fusiontune_hash())
    )
    table_cols = (
        "model",
        "exporter",
        "opset",
        "loaded",
        "ops",
        "opaque_ops",
        "opaque_mac_ops",
        "mac_ops",
        "opaque_macs_share",
        "ort_rel_err",
        "greedy_vs_unfused",
        "optimum_vs_unfused",
        "verify_greedy_ok",
        "verify_optimum_ok",
        "load_s",
        "count_s",
        "explain_s",
        "optimum_s",
        "cli_count_s",
        "cli_explain_s",
    )
    parts = [
        "# Real-architecture sweep: exporter output through fusiontune\n",
        f"{n_models} architectures x {len(_exporters_in(rows))} exporters "
        f"({', '.join(_exporters_in(rows))}), random weights, small inputs; "
        f"hardware `{HARDWARE}`; reference vs onnxruntime at rel <= {REL_TOL:g}; every step "
        f"under a {STEP_TIMEOUT_S:.0f} s CPU timeout. Versions: "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + f"{code_line}. Produced by "
        f"`{command}`; per-file rows in `{name}.csv`, op frequency and "
        f"exporter forms in `{name}_ops.md`.\n",
        progress + "\n",
        "## Summary per exporter\n\n" + markdown_table(summary),
        "## Timings (baseline for the speed work)\n\n"
        + (load_line + "\n\n" if load_line else "")
        + (
            f"`fusiontune models`: median {models_s:.2f} s over {MODELS_REPEATS} runs.\n\n"
            if models_s is not None
            else ""
        )
        + markdown_table(timings),
        "## Failures grouped by reason\n\n"
        "Steps skipped because of an earlier failure of the same file (after two timeouts, or "
        "no plan to verify) are left out here; the CSV's `failures` column lists every one.\n\n"
        + markdown_table(failures),
        "## Per file\n\n" + markdown_table(rows, table_cols),
        "## Models\n\n"
        + markdown_table(
            [
                {"model": t.model, "library": t.library, "kind": t.kind, "note": t.note}
                for t in {t.model: t for t in targets}.values()
            ]
        ),
        "## Notes\n\n" + "\n".join(f"- {n}" for n in NOTES) + "\n",
        machine_line() + "\n",
    ]
    md_path = out_dir / f"{name}.md"
    md_path.write_text("\n".join(parts))
    ops_path = out_dir / f"{name}_ops.md"
    freq = op_frequency(steps_by_file)
    ops_parts = [
        "# Sweep: which ops load as OPAQUE, and what each exporter emits\n",
        "## OPAQUE op types over the sweep\n\n"
        "`models`: architectures with at least one such op (either exporter); `ops`: total "
        "count; `mac_bearing`: the op multiply-accumulates (a crossbar could run it); "
        "`fenced_linear`: LINEAR ops that produce or consume one of these ops' activations "
        "(fusion stops at the barrier on that side).\n\n" + markdown_table(freq),
        "## Exporter forms of common layers\n\n"
        "Tiny modules exported by `experiments/make_onnx_forms.py --probe`; ops in node order, "
        "Constant/Identity nodes omitted.\n\n" + markdown_table(forms),
        machine_line() + "\n",
    ]
    ops_path.write_text("\n".join(ops_parts))
    print(markdown_table(summary))
    print(markdown_table(timings))
    return [csv_path, md_path, ops_path]


NOTES = (
    "`opaque_mac_ops / mac_ops`: MAC-bearing ops (Conv, ConvTranspose, Gemm, MatMul, Einsum) "
    "that load OPAQUE: ConvTranspose (no LINEAR class yet) and MatMuls of two activations "
    "(attention scores and context: no constant weight to map onto a crossbar, DESIGN rule 6). "
    "`opaque_macs_share`: their share of all MACs, from the tensor shapes.",
    "`greedy_vs_unfused`, `optimum_vs_unfused`: activation traffic on `isaac_reram_flat` relative "
    "to the unfused plan. The optimum is `ft.optimal_plan` (traffic) with a "
    f"{OPTIMUM_TIME_LIMIT_S:.0f} s time limit: `optimum_status` `optimal` is proven, "
    "`time_limit` comes with a proven `optimum_gap` to the lower bound (CSV). No optimum: no "
    "partition into feasible groups exists (weights that exceed the chip's 16,128 crossbars "
    "when resident).",
    "`verify_*_ok`: `ft.verify` (fused execution vs the op-by-op reference, rel <= 1e-4, "
    "counted = analytic traffic). `ort_rel_err`: the reference executor against onnxruntime "
    "(graph optimisations off) on the same seeded inputs, max|ref - ort| / max|ort| over "
    "outputs.",
    f"`count_s`, `explain_s`: `count_within(graph, budget={COUNT_BUDGET:,})` and "
    f"`ft.explain(graph, budget={EXPLAIN_BUDGET:,})` in process on the loaded graph (the budgets "
    "of `fusiontune plans --count` / `--explain`; past them the count is a proven lower bound, "
    "CSV `plans_exact`, and the patterns listed are proven ones, `explain_complete`); "
    "`cli_count_s`, `cli_explain_s`: `fusiontune plans FILE --count` / `--explain` in a fresh "
    "process (Python start-up, import and load included): the numbers the issue's 3 s target "
    "is about.",
    "A step that exceeds its timeout (CPU seconds of its process and children, so that a step "
    "starved on the shared machine is not counted as slow; at most "
    f"{WALL_FACTOR:g}x that in wall time) is killed and listed under failures; the others "
    "still run.",
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="regular expression on model names")
    parser.add_argument("--limit", type=int, help="first N models (after --only)")
    parser.add_argument("--exporters", default=",".join(EXPORTERS))
    parser.add_argument("--cache", default=str(CACHE_DIR))
    parser.add_argument("--out", default=str(RESULTS_DIR))
    parser.add_argument(
        "--analysis-dir",
        help="where per-file analyses and optimum plans are cached (default: the --cache "
        "directory, next to the exports)",
    )
    parser.add_argument(
        "--name", default=DEFAULT_NAME, help="stem of the written files (default %(default)s)"
    )
    parser.add_argument("--step-timeout", type=float, default=STEP_TIMEOUT_S)
    parser.add_argument("--no-export", action="store_true", help="analyse the cache only")
    parser.add_argument("--force-export", action="store_true", help="re-export cached models")
    parser.add_argument("--fresh", action="store_true", help="ignore cached analyses")
    parser.add_argument(
        "--reuse-stale",
        action="store_true",
        help="keep cached analyses made on other fusiontune sources (the row names the sources' "
        "hash); re-run chosen files with --only REGEX --fresh",
    )
    parser.add_argument(
        "--cached-only", action="store_true", help="report cached analyses only, run none"
    )
    parser.add_argument("--skip-models-cli", action="store_true")
    parser.add_argument("--export-one", help=argparse.SUPPRESS)
    parser.add_argument("--analyse-one", help=argparse.SUPPRESS)
    parser.add_argument("--steps", help=argparse.SUPPRESS)
    parser.add_argument("--plan-file", help=argparse.SUPPRESS)
    parser.add_argument("--load-args", help=argparse.SUPPRESS)  # JSON: ft.load_model kwargs
    args = parser.parse_args(argv)
    if args.export_one:
        export_one(args.export_one, args.exporters.split(","), Path(args.cache))
        return 0
    if args.analyse_one:
        load_args = json.loads(args.load_args) if args.load_args else None
        analyse_child(args.analyse_one, args.steps.split(","), args.plan_file, load_args)
        return 0
    for path in run(args):
        print(f"wrote {path.relative_to(REPO_DIR) if path.is_relative_to(REPO_DIR) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
