"""Ray processes started by a driver die with it, even when the driver is killed (``SIGKILL``).

``ray.init`` starts a local node (GCS server, raylet, monitors) as children of the driver and
the raylet starts agents (``DashboardAgent``, ``RuntimeEnvAgent``) and workers. When the driver
is killed, the agents outlive it (orphaned, they also ignore ``SIGTERM``). Before starting a
local Ray the driver starts a reaper: a small process in its own session (its own process
group on Windows) that notes, every :data:`SNAPSHOT_S`, the Ray processes descended from the
driver (by ``psutil``: parent pid, create time, a command line naming ray). When the driver
ends, however it ends, the reaper's stdin pipe closes; it then stops every noted process still
alive and their descendants: terminate (``SIGTERM``), then kill (``SIGKILL``; on Windows both
are ``TerminateProcess``) after :data:`GRACE_S`. Nothing in it is Linux's: no ``/proc``, no
``select`` on pipes, no POSIX-only signal, a new process group instead of a session on
Windows, and a child counted only if younger than its parent (Windows keeps a dead parent's
pid, which may be reused). So it runs wherever psutil and Ray run (Linux, macOS, Windows); the
suite runs on Linux and simulates the others' differences (``tests/test_hardening3.py``,
``tests/test_hardening5.py``). The module imports only the standard library and psutil: it runs
as a script.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time

import psutil

SNAPSHOT_S = 0.5
"""How often the reaper notes the driver's Ray processes."""

GRACE_S = 1.0
"""Seconds between terminate and kill."""

EXIT_WAIT_S = 15.0
"""How long a driver that closes normally waits for its reaper to finish."""

RAY_MARK = "ray"
"""Text every Ray process's command line holds (``ray::IDLE``, ``.../ray/core/.../raylet``)."""


class Reaper:
    """The reaper process of one local Ray (see the module docstring)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the reaper for this process (call before ``ray.init``)."""
        detach: dict[str, object] = (
            {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)}
            if sys.platform == "win32"
            else {"start_new_session": True}  # Ctrl-C at the terminal must not stop it first
        )
        self._proc = subprocess.Popen(  # type: ignore[call-overload]
            [sys.executable, os.path.abspath(__file__), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **detach,
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


Key = tuple[int, float]
"""A process: pid and create time (psutil's, seconds since the epoch), safe against pid reuse."""


def _table() -> dict[Key, int]:
    """Every live (non-zombie) process -> its parent pid."""
    out: dict[Key, int] = {}
    for proc in psutil.process_iter(["ppid", "create_time", "status"]):
        info = proc.info
        if info["status"] == psutil.STATUS_ZOMBIE or info["create_time"] is None:
            continue
        if info["ppid"] is not None:
            out[(proc.pid, float(info["create_time"]))] = int(info["ppid"])
    return out


def _is_ray(pid: int) -> bool:
    try:
        return any(RAY_MARK in part for part in psutil.Process(pid).cmdline())
    except (psutil.Error, OSError):
        return False


def descendants(roots: set[int], table: dict[Key, int]) -> set[Key]:
    """Processes of ``table`` descended from a pid in ``roots``.

    A child must be younger than its parent: Windows does not reparent orphans, so a process
    whose parent died keeps that pid as its parent, and the pid may since have gone to one
    of ours (pid reuse); such a process is not ours."""
    created = {pid: t for pid, t in table}
    children: dict[int, list[Key]] = {}
    for key, parent in table.items():
        children.setdefault(parent, []).append(key)
    found: set[Key] = set()
    stack = list(roots)
    while stack:
        parent = stack.pop()
        born = created.get(parent, float("-inf"))
        for key in children.get(parent, ()):
            if key not in found and key[1] >= born:
                found.add(key)
                stack.append(key[0])
    return found


def _signal(pid: int, created: float, kill: bool) -> None:
    """Terminate (or kill) the process ``(pid, created)`` if it is still that process."""
    with contextlib.suppress(psutil.Error, OSError):
        proc = psutil.Process(pid)
        if proc.create_time() == created:
            proc.kill() if kill else proc.terminate()


def reap(noted: set[Key]) -> int:
    """Stop the noted processes still alive and everything below them; returns how many."""
    table = _table()
    alive = {k for k in noted if k in table}
    targets = alive | descendants({pid for pid, _ in alive}, table)
    for kill in (False, True):
        for pid, created in targets:
            _signal(pid, created, kill)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and targets & set(_table()):
            time.sleep(0.05)
        targets &= set(_table())
        if not targets:
            break
    return len(alive)


def _stdin_closed() -> threading.Event:
    """An event set once stdin reaches end of file (the driver ended): a thread, since
    ``select`` on a pipe is POSIX only."""
    closed = threading.Event()

    def read() -> None:
        with contextlib.suppress(OSError, ValueError):
            while sys.stdin.buffer.read(4096):
                pass
        closed.set()

    threading.Thread(target=read, daemon=True).start()
    return closed


def watch(driver: int) -> int:
    """Note the driver's Ray processes until stdin closes, then :func:`reap` them."""
    noted: set[Key] = set()
    me = os.getpid()
    closed = _stdin_closed()
    while True:
        table = _table()
        noted |= {k for k in descendants({driver}, table) if k[0] != me and _is_ray(k[0])}
        if closed.wait(SNAPSHOT_S):
            return reap(noted)


def main(argv: list[str]) -> int:
    """``python ray_reaper.py DRIVER_PID``."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch(int(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
