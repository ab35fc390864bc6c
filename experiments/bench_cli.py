"""CLI speed on real graphs (issue 13, item 5): `fusiontune models`, `plans --count`,
`plans --explain`, greedy and `optimal_plan`, on every zoo model and every ONNX file of a
sweep cache, beside a baseline checkout of the code in the same run.

Run: ``python experiments/bench_cli.py [--cache DIR] [--baseline DIR] [--timeout S]``.
``--baseline`` is a plain checkout of the code to compare with (e.g. ``git archive main |
tar -x -C /tmp/main``); it runs with the same interpreter, its package first on
``PYTHONPATH``. Every command runs in a fresh process (start-up, imports and model loading
included, as a user sees it), one at a time, killed after ``--timeout`` seconds; wall time
and the process's peak RSS are recorded. Writes ``results/bench_cli.{json,md}``.

The targets: ``plans --count`` and ``plans --explain`` <= 3 s on every sweep model,
``fusiontune models`` <= 1 s. Wall times depend on the machine's load: the ``floor`` row
(Python start-up plus ``import onnx`` and ``import fusiontune``) is measured in the same run
so that the share that is not the planner's is visible.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from exp_common import RESULTS_DIR, machine_line, markdown_table

REPO_DIR = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = REPO_DIR / "experiments" / ".sweep_cache"
DEFAULT_TIMEOUT_S = 60.0  # per command; the baseline runs for an hour on some graphs
OPTIMUM_TIME_LIMIT_S = 5.0  # optimal_plan's own time limit (it returns a gap then)
MODELS_RUNS = 3  # `fusiontune models` is timed this often (median)
TARGET_PLANS_S = 3.0
TARGET_MODELS_S = 1.0
KIB = 1024
MIB = 1 << 20
POLL_S = 0.02
OUTPUT_KEEP_BYTES = 4096  # of a command's output: the count, the JSON of a child

# in-process timings of one graph (run in a child: greedy, optimum), printed as JSON
_INPROC = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
from fusiontune.frontend.loader import load_model
from fusiontune.planner.baselines import greedy_plan
from fusiontune.search.optimize import optimal_plan
graph = load_model(sys.argv[1])
out = {"ops": len(graph.ops)}
t = time.perf_counter(); greedy_plan(graph); out["greedy_s"] = time.perf_counter() - t
t = time.perf_counter()
opt = optimal_plan(graph, time_limit_s=float(sys.argv[2]))
out["optimum_s"] = time.perf_counter() - t
out["optimum_status"] = str(opt.status)
print(json.dumps(out))
"""
_FLOOR = "import onnx, fusiontune.frontend.onnx_import"


def run_timed(cmd: list[str], code_dir: Path, timeout_s: float) -> dict[str, Any]:
    """Run ``cmd`` with ``code_dir``'s package first on the path; wall time, peak RSS."""
    env = dict(os.environ, PYTHONPATH=str(code_dir), PYTHONWARNINGS="ignore")
    # stdout to a file, not a pipe: `--explain` prints more than a pipe holds, and a child
    # blocked on a full pipe would look like a slow command
    with tempfile.TemporaryFile() as sink:
        start = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            cwd="/",  # nothing importable in the working folder
            env=env,
            stdout=sink,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        status = "ok"
        while True:
            pid, code, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - start > timeout_s:
                os.killpg(proc.pid, signal.SIGKILL)
                pid, code, usage = os.wait4(proc.pid, 0)
                status = "timeout"
                break
            time.sleep(POLL_S)
        wall = time.perf_counter() - start
        sink.seek(0)
        out = sink.read(OUTPUT_KEEP_BYTES).decode(errors="replace")
    if status == "ok" and os.waitstatus_to_exitcode(code) != 0:
        status = f"exit {os.waitstatus_to_exitcode(code)}"
    return {"s": wall, "rss_mb": usage.ru_maxrss * KIB / MIB, "status": status, "out": out}


def models_of(cache: Path, only: str | None) -> list[tuple[str, str]]:
    """(label, model argument) of every zoo model and every ONNX file of the cache."""
    from fusiontune.frontend.zoo import zoo_models

    items = [(name, name) for name in zoo_models()]
    if cache.is_dir():
        items += [(p.name.removesuffix(".onnx"), str(p)) for p in sorted(cache.glob("*.onnx"))]
    if only:
        items = [it for it in items if re.search(only, it[0])]
    return items


def bench(args: argparse.Namespace) -> dict[str, Any]:
    versions = {"new": REPO_DIR}
    if args.baseline:
        versions["base"] = Path(args.baseline).resolve()
    py = sys.executable
    cli = [py, "-m", "fusiontune.cli.main"]
    load_start = os.getloadavg()[0]  # 1-minute load: the machine may be shared
    rows: list[dict[str, Any]] = []

    def record(model: str, command: str, timed: dict[str, dict[str, Any]]) -> None:
        row: dict[str, Any] = {"model": model, "command": command}
        for v, r in timed.items():
            row[f"{v}_s"] = r["s"]
            row[f"{v}_rss_mb"] = r["rss_mb"]
            row[f"{v}_status"] = r["status"]
        if "base" in timed:
            row["speedup"] = timed["base"]["s"] / timed["new"]["s"]  # a lower bound on timeout
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items()}), flush=True)

    for label, argv in (("floor", [py, "-c", _FLOOR]), ("models", [*cli, "models"])):
        runs = {v: [run_timed(argv, d, args.timeout) for _ in range(MODELS_RUNS)] for v, d in
                versions.items()}  # fmt: skip
        record("-", label, {v: sorted(r, key=lambda x: x["s"])[MODELS_RUNS // 2] for v, r in
                            runs.items()})  # fmt: skip
    for label, model in models_of(Path(args.cache).resolve(), args.only):
        for flag in ("--count", "--explain"):
            timed = {
                v: run_timed([*cli, "plans", model, flag], d, args.timeout)
                for v, d in versions.items()
            }
            record(label, f"plans {flag}", timed)
            if flag == "--count":
                rows[-1]["new_answer"] = timed["new"]["out"].strip().split(" (")[0][:40]
        timed = {
            v: run_timed([py, "-c", _INPROC, model, str(OPTIMUM_TIME_LIMIT_S)], d, args.timeout)
            for v, d in versions.items()
        }
        for r in timed.values():
            r["parsed"] = json.loads(r["out"]) if r["status"] == "ok" and r["out"] else {}
        for key in ("greedy_s", "optimum_s"):
            row: dict[str, Any] = {"model": label, "command": key.removesuffix("_s")}
            for v, r in timed.items():
                row[f"{v}_s"] = r["parsed"].get(key)
                row[f"{v}_status"] = r["status"]
                row[f"{v}_rss_mb"] = r["rss_mb"]  # of the whole child: load, greedy, optimum
            if "base" in timed and row.get("base_s") and row.get("new_s"):
                row["speedup"] = row["base_s"] / row["new_s"]
            row["ops"] = timed["new"]["parsed"].get("ops")
            rows.append(row)
            print(json.dumps(row), flush=True)
    return {
        "rows": rows,
        "versions": {v: str(d) for v, d in versions.items()},
        "load_average_start_end": [load_start, os.getloadavg()[0]],
    }


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per command and version: the slowest model and its time, and timeouts."""
    out = []
    for command in dict.fromkeys(r["command"] for r in rows):
        these = [r for r in rows if r["command"] == command]
        line: dict[str, Any] = {"command": command, "models": len(these)}
        for v in ("new", "base"):
            timed = [r for r in these if r.get(f"{v}_s") is not None]
            if not timed:
                continue
            worst = max(timed, key=lambda r: r[f"{v}_s"])
            line[f"{v}_max_s"] = worst[f"{v}_s"]
            line[f"{v}_slowest"] = worst["model"]
            line[f"{v}_not_ok"] = sum(r.get(f"{v}_status") != "ok" for r in these)
            rss = [r[f"{v}_rss_mb"] for r in timed if r.get(f"{v}_rss_mb") is not None]
            if rss:
                line[f"{v}_max_rss_mb"] = max(rss)
        out.append(line)
    return out


def write(result: dict[str, Any], args: argparse.Namespace, out_dir: Path) -> list[Path]:
    rows = result["rows"]
    load = result["load_average_start_end"]
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "bench_cli.json"
    json_path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    cache_files = sorted(p.name for p in Path(args.cache).glob("*.onnx"))
    cols = ["model", "command", "new_s", "base_s", "speedup", "new_status", "base_status",
            "new_rss_mb", "base_rss_mb", "new_answer"]  # fmt: skip
    parts = [
        "# CLI speed on real graphs (issue 13, item 5)\n",
        "Each command in a fresh process (start-up, imports, model loading included), one at "
        f"a time; killed after {args.timeout:.0f} s (`timeout`: the time shown is that "
        "limit, so `speedup` is a lower bound). `new`: this branch; `base`: "
        f"{'the baseline checkout ' + str(args.baseline) if args.baseline else 'not run'}. "
        f"`speedup` = base / new, same run. Targets: plans <= {TARGET_PLANS_S:.0f} s, "
        f"models <= {TARGET_MODELS_S:.0f} s.\n",
        f"Load average (1 min) at start / end: {load[0]:.1f} / {load[1]:.1f} on "
        f"{os.cpu_count()} cores: wall times include waiting for a core; the ratios are "
        "same-run.\n",
        "## Worst case per command\n\n" + markdown_table(summarise(rows)),
        "## Every model\n\n" + markdown_table(rows, cols),
        "## Coverage\n\n"
        f"Zoo models at full size, plus {len(cache_files)} ONNX exports from the sweep cache "
        f"`{args.cache}` ({', '.join(cache_files) or 'none'}). " + (args.coverage_note or ""),
        "`floor`: `python -c 'import onnx, fusiontune.frontend.onnx_import'`, the part of "
        "every ONNX `plans` run that is neither loading nor planning (onnx imports ml_dtypes, "
        "about 1 s of CPU by itself). `greedy`, `optimum`: in one child process after "
        f"loading; `optimal_plan(time_limit_s={OPTIMUM_TIME_LIMIT_S:.0f})`.\n",
        machine_line() + "\n",
    ]
    md_path = out_dir / "bench_cli.md"
    md_path.write_text("\n".join(parts))
    return [json_path, md_path]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=str(DEFAULT_CACHE), help="folder of ONNX exports")
    parser.add_argument("--baseline", help="a checkout of the code to compare with")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    parser.add_argument("--only", help="regular expression on model labels")
    parser.add_argument("--out", default=str(RESULTS_DIR))
    parser.add_argument("--coverage-note", default="", help="sentence added to the coverage")
    args = parser.parse_args(argv)
    result = bench(args)
    for path in write(result, args, Path(args.out)):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
