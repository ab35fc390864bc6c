"""The cluster path end to end: a ``ray start`` head and two worker nodes on this machine, a
co-design search that joins them with ``--address``, and checks of what it wrote.

Steps:

1. start a head node with no CPUs (``ray start --head --num-cpus=0 --block``: it schedules,
   it does not evaluate) and two worker nodes with one CPU each (``ray start --address=HEAD
   --num-cpus=1 --block``), each with its own temp dir, node name and ports (several nodes on
   one machine must not share them); Ray's token authentication is off for these loopback-only
   nodes (``RAY_AUTH_MODE=disabled``; a real cluster keeps it on, see the README);
2. run ``fusiontune search resnet18 --space search_spaces/codesign.yaml --address HEAD
   --storage sqlite:///...`` as a separate process (the CLI a user runs);
3. check: every trial finished, the workers that evaluated them (each record's ``worker``,
   ``host:pid``) belong to both worker nodes (a node's worker processes are named by the
   log files in its temp dir), ``best_hardware.yaml`` loads and has the best trial's hardware
   hash, the SQLite study holds the trials with their knob params;
4. stop the nodes this script started, by their process ids (never ``ray stop``: it stops
   every Ray process on the machine, other users' too), and check none is left.

Writes ``results/exp_cluster.md``, ``results/exp_cluster.csv`` and ``results/exp_cluster.json``.
Usage: ``python experiments/exp_cluster.py [--trials 40]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exp_common import RESULTS_DIR, print_rows, write_outputs

REPO = Path(__file__).resolve().parents[1]
MODEL = "resnet18"
SPACE = REPO / "search_spaces" / "codesign.yaml"
DEFAULT_TRIALS = 40
WORKER_NODES = 2
NODE_START_TIMEOUT_S = 120.0  # a node's `ray start` must report success within this
SEARCH_TIMEOUT_S = 900.0
STOP_GRACE_S = 30.0  # SIGTERM, then SIGKILL of the node's process group
NODE_PORT_FLAGS = (
    "--node-manager-port",
    "--object-manager-port",
    "--dashboard-agent-grpc-port",
    "--dashboard-agent-listen-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
)
"""Ports every node needs of its own on a shared machine (the head also takes ``--port``)."""
WORKER_PORTS = 40
"""Worker processes' port range per node (``--min-worker-port`` .. ``--max-worker-port``)."""


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_range(width: int) -> int:
    """The first port of ``width`` consecutive free ports."""
    for _ in range(100):
        low = free_port()
        if low + width < 65535 and all(_is_free(p) for p in range(low, low + width)):
            return low
    raise RuntimeError(f"no {width} consecutive free ports found")


def _is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Node:
    """One ``ray start --block`` process this script started (its own session)."""

    name: str
    proc: subprocess.Popen[bytes]
    temp_dir: Path
    log: Path

    def worker_pids(self) -> set[int]:
        """Pids of the worker processes this node started (named in its log files)."""
        pids = set()
        for path in self.temp_dir.glob("session_*/logs/*"):
            match = re.fullmatch(
                r"(?:python-core-)?worker-[^.]*?[-_](\d+)\.(?:out|err|log)", path.name
            )
            if match:
                pids.add(int(match.group(1)))
        return pids


def ray_env() -> dict[str, str]:
    """Environment of the nodes and the driver: loopback-only, token auth off, no usage stats."""
    return {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def start_node(name: str, root: Path, extra: list[str]) -> Node:
    """``ray start --block`` with its own temp dir, ports and node name; returns once the
    node reports that it runs."""
    temp_dir = root / name
    temp_dir.mkdir()
    log = root / f"{name}.log"
    ports = [arg for flag in NODE_PORT_FLAGS for arg in (flag, str(free_port()))]
    low = free_range(WORKER_PORTS)
    cmd = [
        str(Path(sys.executable).with_name("ray")),
        "start",
        "--block",
        "--disable-usage-stats",
        "--node-ip-address=127.0.0.1",
        f"--node-name={name}",
        f"--temp-dir={temp_dir}",
        f"--min-worker-port={low}",
        f"--max-worker-port={low + WORKER_PORTS - 1}",
        *ports,
        *extra,
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=ray_env(), start_new_session=True
        )
    node = Node(name, proc, temp_dir, log)
    deadline = time.monotonic() + NODE_START_TIMEOUT_S
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "Ray runtime started" in text:
            return node
        if proc.poll() is not None:
            raise RuntimeError(f"node {name} exited ({proc.returncode}):\n{text[-2000:]}")
        time.sleep(0.5)
    stop_node(node)
    raise RuntimeError(f"node {name} did not start within {NODE_START_TIMEOUT_S:g} s")


def stop_node(node: Node) -> bool:
    """SIGTERM the node's ``ray start`` (it stops the processes it started), then SIGKILL
    whatever is left in its process group. Returns whether nothing of it is left."""
    pgid = node.proc.pid  # start_new_session: the group is the one this script created
    if node.proc.poll() is None:
        node.proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            node.proc.wait(STOP_GRACE_S)
    deadline = time.monotonic() + STOP_GRACE_S
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.5)
    if _group_alive(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        time.sleep(1.0)
    if node.proc.poll() is None:
        node.proc.kill()
        node.proc.wait()
    return not _group_alive(pgid)


def _group_alive(pgid: int) -> bool:
    """Whether a live process is in process group ``pgid`` (``/proc``; zombies do not count)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def run_search(address: str, out: Path, storage: str, trials: int) -> tuple[float, str]:
    """``fusiontune search`` joining the cluster; (wall seconds, what it printed on stdout)."""
    cmd = [
        sys.executable, "-m", "fusiontune.cli.main", "search", MODEL,
        "--space", str(SPACE), "--address", address, "--workers", str(WORKER_NODES),
        "--trials", str(trials), "--storage", storage, "--out", str(out), "--study", "cluster",
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(
        cmd, capture_output=True, text=True, env=ray_env(), timeout=SEARCH_TIMEOUT_S, cwd=REPO
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        output = done.stdout + done.stderr
        raise RuntimeError(f"fusiontune search failed ({done.returncode}):\n{output[-3000:]}")
    return wall, done.stdout  # the summary; progress and Ray's lines go to stderr


def check_results(out: Path, storage: str, nodes: list[Node], trials: int) -> dict[str, Any]:
    """What the search wrote, checked: trials, the nodes that evaluated them, the best
    hardware file and the SQLite study."""
    import optuna
    import pandas as pd

    from fusiontune.sim.hardware import load_hardware

    folder = out / "cluster"
    summary = json.loads((folder / "summary.json").read_text())
    frame = pd.read_parquet(folder / "trials.parquet")
    rows = frame[frame["source"] == "search"] if "source" in frame else frame
    evaluated = rows[(rows["state"] == "COMPLETE") & (rows["worker"] != "cache")]
    pid_node = {pid: n.name for n in nodes for pid in n.worker_pids()}
    per_node: dict[str, int] = {}
    unknown = 0
    for worker in evaluated["worker"]:
        node = pid_node.get(int(str(worker).rsplit(":", 1)[1]))
        if node is None:
            unknown += 1
        else:
            per_node[node] = per_node.get(node, 0) + 1
    hw = load_hardware(folder / "best_hardware.yaml")
    best_hash = summary["best"]["hardware"]["hw_hash"]
    study = optuna.load_study(study_name="cluster", storage=storage)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    checks = {
        "trials_complete": int((rows["state"] == "COMPLETE").sum()),
        "trials_asked": trials,
        "evaluations": len(evaluated),
        "distinct_workers": int(evaluated["worker"].nunique()),
        **{f"evaluations_on_{name}": per_node.get(name, 0) for name in sorted(pid_node.values())},
        "evaluations_unattributed": unknown,
        "both_nodes_evaluated": all(per_node.get(n.name, 0) > 0 for n in nodes[1:]),
        "best_hardware_hash_matches": hw.hash == best_hash,
        "best_hardware": summary["best"]["hardware"]["knobs"],
        "best_energy_pj": summary["best"]["energy_pj"],
        "best_plan_proven": summary["best"].get("plan_certificate", {}).get("proven"),
        "study_trials_complete": len(complete),
        "study_params_recorded": all(t.params for t in complete),
        "storage_url": summary.get("storage_url", "").replace(str(out.parent), "TMP"),
    }
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=DEFAULT_TRIALS)
    args = parser.parse_args(argv)
    nodes: list[Node] = []
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="ftc-", dir="/tmp") as tmp:  # short: Ray's sockets
        root = Path(tmp)
        try:
            start = time.perf_counter()
            head_port = free_port()
            head = ["--head", "--num-cpus=0", f"--port={head_port}", "--include-dashboard=false"]
            nodes.append(start_node("head", root, head))
            address = f"127.0.0.1:{head_port}"
            for i in range(WORKER_NODES):
                nodes.append(start_node(f"worker{i + 1}", root, [f"--address={address}",
                                                                 "--num-cpus=1"]))  # fmt: skip
            timings["cluster_start_s"] = time.perf_counter() - start
            storage = f"sqlite:///{root / 'study.db'}"
            timings["search_wall_s"], output = run_search(
                address, root / "out", storage, args.trials
            )
            checks = check_results(root / "out", storage, nodes, args.trials)
        finally:
            stopped = {n.name: stop_node(n) for n in reversed(nodes)}
    checks["nodes_stopped"] = all(stopped.values())
    ok = (
        checks["both_nodes_evaluated"]
        and checks["best_hardware_hash_matches"]
        and checks["study_params_recorded"]
        and checks["study_trials_complete"] == checks["trials_complete"] == args.trials
        and checks["nodes_stopped"]
    )
    rows = [{"check": k, "value": json.dumps(v) if isinstance(v, dict) else v}
            for k, v in {**timings, **checks, "all_checks_passed": ok}.items()]  # fmt: skip
    print_rows("Cluster path end to end", rows)
    tail = [line.strip() for line in output.splitlines() if line.strip()]
    notes = [
        f"One head (`ray start --head --num-cpus=0`) and {WORKER_NODES} worker nodes "
        "(`ray start --address=HEAD --num-cpus=1`), each with its own temp dir, node name and "
        "ports, on this machine; the search ran as `fusiontune search resnet18 --space "
        f"search_spaces/codesign.yaml --address HEAD --workers {WORKER_NODES} --trials "
        f"{args.trials} --storage sqlite:///.../study.db` in its own process.",
        "A trial's `worker` (host:pid) is attributed to the node whose temp dir has that "
        "worker's log files; the nodes were stopped by their process ids (SIGTERM to each "
        "`ray start --block`, which stops what it started), never by `ray stop`.",
        "The search printed: " + " / ".join(tail).replace(tmp, "TMP"),
    ]
    write_outputs("cluster", "Cluster path: a `ray start` head and two worker nodes", [
        ("Cluster path end to end", rows)], notes)  # fmt: skip
    (RESULTS_DIR / "exp_cluster.json").write_text(
        json.dumps({**timings, **checks, "all_checks_passed": ok}, indent=2) + "\n"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
