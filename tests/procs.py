"""``fusiontune`` driver subprocesses for the fault tests: started the way a user's terminal
starts them, and waited on for the driver's own progress markers, never for a fixed time.

Usage::

    from procs import SUBPROCESS_TIMEOUT_S, start_cli, wait_for_file  # tests/ is on sys.path

    proc = start_cli(["search", "lenet5", "--out", str(out)], tmp_path)
    wait_for_file(proc, out / "lenet5" / "trials.parquet", "the first checkpoint")
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SUBPROCESS_TIMEOUT_S = 300.0
"""Longest a driver subprocess may take to reach the state a test waits for (generous: the
suite must pass on a busy machine)."""

POLL_S = 0.05
"""How often a waiting test looks for the driver's marker."""


def cli_env() -> dict[str, str]:
    """This environment with this checkout first on ``PYTHONPATH``."""
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONPATH=path)


def _default_sigint() -> None:
    """The driver takes Ctrl-C even when the suite runs as a background job, whose processes
    inherit SIGINT ignored (the shell's rule for background jobs without job control)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_cli(argv: list[str], cwd: Path, new_group: bool = False) -> subprocess.Popen[str]:
    """``python -m fusiontune.cli.main ARGV`` in ``cwd``, stdout and stderr piped (text).

    Args:
        argv: the command line after ``fusiontune``.
        cwd: working directory.
        new_group: start a session of its own, so ``os.killpg(proc.pid, sig)`` reaches the
            driver and every process it started in its group, as a terminal's Ctrl-C does.
    """
    return subprocess.Popen(
        [sys.executable, "-m", "fusiontune.cli.main", *argv],
        cwd=cwd,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
        start_new_session=new_group,
    )


def wait_for_file(proc: subprocess.Popen[str], path: Path, what: str) -> None:
    """Wait until ``path`` exists (the driver's own progress marker), not for a fixed time.

    Raises:
        AssertionError: the driver ended, or stalled for :data:`SUBPROCESS_TIMEOUT_S`, first
            (it is killed; the message holds its output).
    """
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT_S
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"driver ended or stalled before {what}: {proc.communicate()}")
        time.sleep(POLL_S)
