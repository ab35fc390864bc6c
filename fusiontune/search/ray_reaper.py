"""Ray processes started by a driver die with it, even when the driver is killed (``SIGKILL``).

``ray.init`` starts a local node (GCS server, raylet, monitors) as children of the driver and
the raylet starts agents (``DashboardAgent``, ``RuntimeEnvAgent``) and workers. When the driver
is killed, the agents outlive it (orphaned, they also ignore ``SIGTERM``). Before starting a
local Ray the driver starts a reaper: a small process in its own session that notes, every
:data:`SNAPSHOT_S`, the Ray processes descended from the driver (by ``/proc``: parent pid,
start time, a command line naming ray). When the driver ends, however it ends, the reaper's
stdin pipe closes; it then stops every noted process still alive and their descendants:
``SIGTERM``, then ``SIGKILL`` after :data:`GRACE_S`. Linux only (``/proc``); elsewhere a
no-op. The module uses the standard library only: it runs as a script.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

SNAPSHOT_S = 0.5
"""How often the reaper notes the driver's Ray processes."""

GRACE_S = 1.0
"""Seconds between SIGTERM and SIGKILL."""

EXIT_WAIT_S = 15.0
"""How long a driver that closes normally waits for its reaper to finish."""

PROC = Path("/proc")

RAY_MARK = b"ray"
"""Bytes every Ray process's command line holds (``ray::IDLE``, ``.../ray/core/.../raylet``)."""


class Reaper:
    """The reaper process of one local Ray (see the module docstring)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the reaper for this process (call before ``ray.init``)."""
        if not PROC.is_dir():
            return
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C at the terminal must not stop it first
        )

    def stop(self) -> None:
        """After ``ray.shutdown``: let the reaper stop whatever is left, and wait for it."""
        if self._proc is None:
            return
        assert self._proc.stdin is not None
        with contextlib.suppress(OSError):
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        self._proc = None


Key = tuple[int, str]
"""A process: pid and start time (``/proc/PID/stat`` field 22), safe against pid reuse."""


def _table() -> dict[Key, int]:
    """Every live (non-zombie) process -> its parent pid."""
    out: dict[Key, int] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[0] != "Z":
            out[(int(entry.name), fields[19])] = int(fields[1])
    return out


def _is_ray(pid: int) -> bool:
    try:
        return RAY_MARK in (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False


def descendants(roots: set[int], table: dict[Key, int]) -> set[Key]:
    """Processes of ``table`` descended from a pid in ``roots``."""
    children: dict[int, list[Key]] = {}
    for key, parent in table.items():
        children.setdefault(parent, []).append(key)
    found: set[Key] = set()
    stack = list(roots)
    while stack:
        for key in children.get(stack.pop(), ()):
            if key not in found:
                found.add(key)
                stack.append(key[0])
    return found


def reap(noted: set[Key]) -> int:
    """Stop the noted processes still alive and everything below them; returns how many."""
    table = _table()
    alive = {k for k in noted if k in table}
    targets = alive | descendants({pid for pid, _ in alive}, table)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, _ in targets:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and targets & set(_table()):
            time.sleep(0.05)
        targets &= set(_table())
        if not targets:
            break
    return len(alive)


def watch(driver: int) -> int:
    """Note the driver's Ray processes until stdin closes, then :func:`reap` them."""
    noted: set[Key] = set()
    me = os.getpid()
    while True:
        table = _table()
        noted |= {k for k in descendants({driver}, table) if k[0] != me and _is_ray(k[0])}
        ready, _, _ = select.select([sys.stdin.buffer], [], [], SNAPSHOT_S)
        if ready and not os.read(sys.stdin.fileno(), 4096):
            return reap(noted)


def main(argv: list[str]) -> int:
    """``python ray_reaper.py DRIVER_PID``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch(int(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
