"""Regression tests for issue 24, the families left after tests/test_hardening3.py: alias bombs
naming the key at fault, a corrupt ``trials.parquet``, double Ctrl-C, two drivers starting one
study, a full disk and a torn journal."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from procs import SUBPROCESS_TIMEOUT_S, cli_env, start_cli, wait_for_file

from fusiontune.cli.main import main
from fusiontune.frontend.zoo import build_zoo


# ---- YAML alias bombs whose content is wrong -------------------------------------------------
def _bomb_list(levels: int = 9) -> str:
    """A block list whose items are anchored lists of ten aliases of the item before: 10^levels
    nodes once expanded, in a few hundred bytes."""
    names = "abcdefghijklmnop"[:levels]
    lines = ["\n  - &a [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"\n  - &{b} [{', '.join([f'*{a}'] * 10)}]" for a, b in itertools.pairwise(names)]
    return "".join(lines) + "\n"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("trails:" + _bomb_list(), "space.yaml: unknown key 'trails' (did you mean 'trials'?)"),
        ("trials:" + _bomb_list(), "space.yaml: trials must be a positive integer, got [["),
        (
            "knobs:\n  adc_bits:\n    choices:" + _bomb_list().replace("\n  ", "\n      "),
            "space.yaml: knobs.adc_bits.choices may hold only numbers, strings or booleans",
        ),
    ],
    ids=["unknown-key", "bad-value", "bad-knob-choices"],
)
def test_space_alias_bomb_names_the_key_at_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expect: str
) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(text)
    out = tmp_path / "out"
    argv = ["search", "--workers", "1", "--trials", "2", "--out", str(out), "--space", str(space)]
    err = _run([*argv, "mlp_relu"], capsys)
    assert expect in err
    assert "expand to more than 100,000 nodes" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("buffer_bytse:" + _bomb_list(), "hw.yaml: unknown key 'buffer_bytse' (did you mean"),
        ("buffer_bytes:" + _bomb_list(), "hw.yaml: key 'buffer_bytes' must be"),
    ],
    ids=["unknown-key", "bad-value"],
)
def test_hardware_alias_bomb_names_the_key_at_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expect: str
) -> None:
    hw = tmp_path / "hw.yaml"
    hw.write_text(text)
    err = _run(["simulate", "mlp_relu", "--hw", str(hw)], capsys)
    assert expect in err
    assert "expand to more than 100,000 nodes" in err


def test_alias_bomb_message_is_bounded_and_quick(tmp_path: Path) -> None:
    """The bounded copy validated in place of the expansion keeps the message short."""
    from fusiontune.errors import ConfigError
    from fusiontune.search.space import load_space

    space = tmp_path / "space.yaml"
    space.write_text("trials:" + _bomb_list(12))  # 10^12 nodes expanded
    with pytest.raises(ConfigError) as info:
        load_space(space)
    assert "trials must be a positive integer" in str(info.value)
    assert len(str(info.value)) < 2_000


def test_alias_bomb_with_no_fault_in_its_bounded_copy_keeps_the_expansion_message() -> None:
    from fusiontune.errors import ConfigError
    from fusiontune.fileio import parse_yaml

    with pytest.raises(ConfigError, match=r"^s\.yaml: expands to more than 100,000 nodes"):
        parse_yaml("k:" + _bomb_list(), "s.yaml", ConfigError, check=lambda data: None)


# ---- report on a corrupt trials.parquet ------------------------------------------------------
@pytest.fixture(scope="module")
def finished_search(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small finished search (mlp_relu, 3 trials, serial): its results folder."""
    out = tmp_path_factory.mktemp("search")
    argv = ["search", "mlp_relu", "--workers", "1", "--trials", "3", "--out", str(out)]
    assert main([*argv, "--seed", "1"]) == 0
    return out / "mlp_relu"


def _copy(folder: Path, tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / folder.name
    shutil.copytree(folder, target, ignore=shutil.ignore_patterns("*.lock"))
    return target


@pytest.mark.parametrize("damage", ["truncated", "empty", "not-parquet"])
def test_report_on_a_damaged_trials_table_names_it_and_offers_the_rebuild(
    finished_search: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    from fusiontune.search.results import read_parquet

    d = _copy(finished_search, tmp_path)
    table = d / "trials.parquet"
    before = read_parquet(table)
    data = table.read_bytes()
    table.write_bytes(
        {"truncated": data[: len(data) // 2], "empty": b"", "not-parquet": b"x"}[damage]
    )
    capsys.readouterr()
    err = _run(["report", str(d)], capsys)
    assert f"{table}: is truncated or corrupt" in err
    assert f"fusiontune report {d} --rebuild" in err
    assert "study.db" in err

    assert main(["report", str(d), "--rebuild"]) == 0
    out = capsys.readouterr().out
    assert f"rebuilt {table} from " in out and "3 search trials" in out
    assert "baseline rows" in out and "--resume" in out
    after = read_parquet(table)
    searched = before[before["source"] == "search"].reset_index(drop=True)
    assert list(after["source"].unique()) == ["search"]
    cols = ["trial", "state", "plan_hash", "hw_hash", "value_0", "traffic_bytes"]
    assert after[cols].equals(searched[cols])
    assert (d / "report.md").is_file()


def test_report_on_a_damaged_groups_table_says_it_cannot_come_from_storage(
    finished_search: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = _copy(finished_search, tmp_path)
    (d / "groups.parquet").write_bytes(b"PAR1")
    capsys.readouterr()
    err = _run(["report", str(d)], capsys)
    assert f"{d / 'groups.parquet'}: is truncated or corrupt" in err
    assert "not in the study storage" in err and "--resume" in err


# ---- double Ctrl-C -------------------------------------------------------------------------------
def _search_argv(out: Path, trials: int = 100_000) -> list[str]:
    return [
        "search", "lenet5", "--backend", "serial", "--workers", "1", "--sampler", "random",
        "--trials", str(trials), "--checkpoint-every", "0.2", "--out", str(out), "--seed", "0",
    ]  # fmt: skip


@pytest.mark.parametrize("interval_s", [0.0, 0.01, 0.05])
def test_double_ctrl_c_exits_130_with_one_line_of_what_was_saved(
    tmp_path: Path, interval_s: float
) -> None:
    """Ctrl-C, then Ctrl-C again and again every ``interval_s`` until the driver ends: wherever
    the later ones land (the save, closing the storage, joining the backend, the last
    message, the interpreter's exit), the exit is 130 and stderr says once what was saved."""

    out = tmp_path / "out"
    table = out / "lenet5" / "trials.parquet"
    proc = start_cli(_search_argv(out), tmp_path)
    wait_for_file(proc, table, "the first checkpoint")
    proc.send_signal(signal.SIGINT)
    sent = 1
    while proc.poll() is None and sent < 2000:
        time.sleep(interval_s)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        sent += 1
    _assert_interrupted_once(proc, table)


def _assert_interrupted_once(proc: subprocess.Popen[str], table: Path) -> None:
    """The driver exits 130; stderr says once how many trials are saved (as many as the
    table holds) and how to continue, and nothing else."""
    from fusiontune.search.results import read_parquet

    _, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("fusiontune:")]
    saved = [re.search(r"interrupted; (\d+) finished trials are saved", line) for line in lines]
    numbers = [int(m.group(1)) for m in saved if m]
    assert len(numbers) == 1, err
    assert sum("to continue, run:" in line for line in lines) == 1, err
    assert len(lines) == 2, err  # nothing else: no second "interrupted"
    frame = read_parquet(table)
    assert (frame["source"] == "search").sum() == numbers[0] >= 1


def _ray_workers_of(pid: int) -> list[int]:
    """The Ray worker processes (``ray::IDLE``, ``ray::_remote_evaluate``...) below ``pid``."""
    from fusiontune.search.ray_reaper import _table, descendants

    agents = (b"ray::DashboardAgent", b"ray::RuntimeEnvAgent")
    workers = []
    for child, _ in descendants({pid}, _table()):
        with contextlib.suppress(OSError):
            title = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0]
            if title.startswith(b"ray::") and title not in agents:
                workers.append(child)
    return workers


def _ignores_sigint(pid: int) -> bool:
    """Whether process ``pid`` ignores SIGINT (its ``SigIgn`` mask in /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:"))
    return bool(int(mask, 16) >> (signal.SIGINT - 1) & 1)


@pytest.mark.skipif(sys.platform != "linux", reason="processes and signal masks read from /proc")
@pytest.mark.parametrize("times", [1, 3])
def test_ctrl_c_to_the_process_group_of_a_ray_search_exits_130(tmp_path: Path, times: int) -> None:
    """Ctrl-C in a terminal goes to the whole process group: with a local Ray the workers
    ignore it (Ray's ``worker_process_setup_hook``), only the driver stops, and it exits 130
    with one line of what was saved, once or pressed ``times`` times. (A Ray crash in the
    driver, cancelling tasks that were just finishing, used to make this exit 1.)"""
    out = tmp_path / "out"
    table = out / "lenet5" / "trials.parquet"
    argv = _search_argv(out)
    argv[argv.index("serial")] = "ray"
    argv[argv.index("--workers") + 1] = "2"
    proc = start_cli(argv, tmp_path, new_group=True)
    wait_for_file(proc, table, "the first checkpoint")  # trials ran: the workers are up
    workers = _ray_workers_of(proc.pid)
    ignoring = {pid: _ignores_sigint(pid) for pid in workers}
    for _ in range(times):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.02)
    _assert_interrupted_once(proc, table)
    assert ignoring and all(ignoring.values()), ignoring


CLOSE_WITH_TASKS_IN_FLIGHT = """
import ray
from fusiontune.frontend.loader import load_model
from fusiontune.planner.baselines import unfused_plan
from fusiontune.search.backends import EvalTask, RayBackend
from fusiontune.sim.hardware import HardwareConfig

graph = load_model("lenet5")
backend = RayBackend(workers=2)
backend.start(graph)
for trial in range(8):
    backend.submit([EvalTask(trial, unfused_plan(graph), HardwareConfig())])
backend.wait()  # one finished: the others are in flight, some just finishing
cancelled = []
ray.cancel = lambda ref, **kwargs: cancelled.append(ref)
backend.close()
print("cancelled", len(cancelled), "initialized", ray.is_initialized())
"""
"""A backend that started its own Ray, closed with tasks in flight."""


def test_a_ray_the_backend_started_is_shut_down_without_cancelling_tasks() -> None:
    """Closing a backend (as Ctrl-C does) with tasks in flight: no ``ray.cancel``, whose race
    with a finishing task aborted the driver inside Ray (exit 1 instead of 130); the
    shutdown ends the tasks with the job."""
    done = subprocess.run(
        [sys.executable, "-c", CLOSE_WITH_TASKS_IN_FLIGHT],
        env=cli_env(), capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-4:] == ["cancelled", "0", "initialized", "False"], done.stdout


# ---- two drivers starting one new study at the same instant --------------------------------------
RACER = """
import sys, time
from pathlib import Path
from fusiontune.cli.main import main
from fusiontune.frontend.zoo import build_zoo
import fusiontune.search.api, optuna  # imported before the barrier: the race is the start
Path(sys.argv[2]).touch()
while not Path(sys.argv[1]).exists():
    time.sleep(0.001)
sys.exit(main(sys.argv[3:]))
"""
"""A driver that imports everything, says it is ready and starts when the barrier file appears."""


@pytest.mark.parametrize("storage", ["sqlite", "journal"])
def test_two_drivers_starting_one_new_study_together(tmp_path: Path, storage: str) -> None:
    """The first keeps its study and results; the second is refused with the documented
    message naming the study (a journal: ``--resume`` joins it; SQLite takes one driver), and
    removes nothing of the first's (its results folder was new to both)."""
    from fusiontune.search.results import read_parquet

    env = cli_env()
    for attempt in range(3):
        run = tmp_path / str(attempt)
        run.mkdir()
        argv = ["search", "mlp_relu", "--workers", "1", "--trials", "2", "--out", "out"]
        argv += ["--study", "s", "--seed", "0"]
        if storage == "journal":
            argv += ["--storage", "shared/s.log"]
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", RACER, "go", f"ready{i}", *argv],
                cwd=run,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(2)
        ]
        deadline = time.monotonic() + SUBPROCESS_TIMEOUT_S
        while not all((run / f"ready{i}").exists() for i in range(2)):
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            assert time.monotonic() < deadline
            time.sleep(0.01)
        (run / "go").touch()
        results = [(p.wait(timeout=SUBPROCESS_TIMEOUT_S), p.communicate()[1]) for p in procs]
        codes = sorted(code for code, _ in results)
        assert codes == [0, 2], results
        err = next(err for code, err in results if code == 2)
        lines = [line for line in err.splitlines() if line.startswith("fusiontune:")]
        assert len(lines) == 1, err
        if storage == "journal":
            assert re.search(r"study 's' (was just created|already exists) in journal file", err)
            assert "pass --resume" in err
        else:
            db = Path("out") / "s" / "study.db"
            assert f"study storage {db} (study 's') is in use by another fusiontune driver" in err
            assert "continue it with --resume" in err
        table = read_parquet(run / "out" / "s" / "trials.parquet")
        assert (table["source"] == "search").sum() == 2
        assert (run / "out" / "s" / "summary.json").is_file()


def test_a_driver_refused_by_a_new_study_s_owner_removes_nothing_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The interleaving the race above hits now and then, made certain: both drivers find the
    results folder missing; the other one takes the study (its SQLite lock and database)
    right after this one checked the folder. This one is refused and must not delete the
    folder it found missing: it is the other's now."""
    from fusiontune.search import api
    from fusiontune.search.store import WriterLock

    out = tmp_path / "out"
    db = out / "s" / "study.db"
    original = api._check_writable
    other: list[WriterLock] = []

    def then_the_other_driver_starts(out_dir: Path) -> None:
        original(out_dir)
        db.write_bytes(b"")  # the other's database, being created
        other.append(WriterLock(db.with_name("study.db.lock"), str(db)))

    monkeypatch.setattr(api, "_check_writable", then_the_other_driver_starts)
    argv = ["search", "mlp_relu", "--workers", "1", "--trials", "2", "--out", str(out)]
    try:
        code = main([*argv, "--study", "s"])
        err = capsys.readouterr().err
        assert code == 2, err
        assert f"study storage {db} (study 's') is in use by another fusiontune driver" in err
        assert db.is_file() and db.with_name("study.db.lock").is_file()
    finally:
        for lock in other:
            lock.release()


# ---- a full disk ---------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs: a real full disk (ENOSPC from the kernel, for SQLite, Parquet and the
    journal alike). Mounting needs root on Linux; elsewhere the test is skipped (said so)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root on Linux")
    mount = ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)]
    if subprocess.run(mount, capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=False)


def _fill(disk: Path, leave_bytes: int = 0) -> Path:
    """Fill the disk, then give ``leave_bytes`` back; returns the filler file."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:  # unbuffered: nothing left to fail at close
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
        f.truncate(max(0, f.tell() - leave_bytes))
    return filler


def _errors(err: str) -> list[str]:
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if not line.startswith("search: ")]


def test_disk_full_mid_search_is_one_line_naming_the_file_and_keeps_the_stored_trials(
    small_disk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The disk fills while a driver (a real process) searches: it ends with exit 2 and one
    line naming the file it could not write; every trial stored before is still there, the
    same, when the search is resumed after freeing space."""
    from fusiontune.search.results import read_parquet

    table = small_disk / "lenet5" / "trials.parquet"
    argv = _search_argv(small_disk)
    proc = start_cli(argv, tmp_path)
    wait_for_file(proc, table, "the first checkpoint")
    filler = _fill(small_disk)
    _, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)
    assert proc.returncode == 2, err
    lines = _errors(err)
    assert len(lines) == 1, err
    assert "(disk full)" in lines[0] and "--resume" in lines[0], err
    assert re.search(r"lenet5/(study\.db|trials\.parquet)\b", lines[0]), err
    before = read_parquet(table)  # the last complete checkpoint (replaced atomically)
    assert len(before) >= 1
    filler.unlink()
    resumed = argv[:]
    resumed[resumed.index("--trials") + 1] = str(len(before) + 200)
    assert main([*resumed, "--resume"]) == 0
    after = read_parquet(table).set_index("trial")
    cols = ["state", "plan_hash", "hw_hash", "value_0"]
    kept = before.set_index("trial")[cols]
    assert after.loc[kept.index, cols].equals(kept)


def test_disk_full_while_creating_the_study_database_says_disk_full_in_one_line(
    small_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Too little space for Optuna's tables: the message is the file and "disk full", not the
    SQL statement SQLite was running."""
    _fill(small_disk, leave_bytes=16 << 10)
    argv = ["search", "mlp_relu", "--workers", "1", "--trials", "2", "--out", str(small_disk)]
    code = main(argv)
    lines = _errors(capsys.readouterr().err)
    assert code == 2 and len(lines) == 1, lines
    assert "mlp_relu/study.db" in lines[0] and "(disk full)" in lines[0], lines
    assert "[SQL" not in lines[0] and "CREATE" not in lines[0], lines


# ---- a journal file after a torn write -----------------------------------------------------------
def _journal_search(tmp_path: Path, trials: int, resume: bool = False) -> list[str]:
    argv = ["search", "mlp_relu", "--workers", "1", "--trials", str(trials), "--seed", "0"]
    argv += ["--out", str(tmp_path / "out"), "--storage", str(tmp_path / "s.log")]
    return [*argv, "--resume"] if resume else argv


def _search_table(tmp_path: Path) -> Any:
    from fusiontune.search.results import read_parquet

    frame = read_parquet(tmp_path / "out" / "mlp_relu" / "trials.parquet")
    return frame[frame["source"] == "search"].set_index("trial").sort_index()


@pytest.mark.parametrize("cut", [1, 40, "newline-kept"])
def test_a_torn_final_journal_write_is_repaired_and_the_study_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cut: int | str
) -> None:
    """A driver killed while appending leaves a final record without its end (or, torn just
    before its newline, a final line that is not a whole record). Optuna skips it when
    reading but appends the next record onto it, which corrupts the file for good; fusiontune
    drops the torn tail (under the journal's lock) and says so, and the study goes on."""
    assert main(_journal_search(tmp_path, 3)) == 0
    before = _search_table(tmp_path)
    journal = tmp_path / "s.log"
    data = journal.read_bytes()
    if cut == "newline-kept":
        torn = data[: data.rindex(b"\n", 0, len(data) - 1) + 1] + b'{"op_code": 5, "wor\n'
    else:
        torn = data[: len(data) - int(cut)]
    journal.write_bytes(torn)
    capsys.readouterr()
    with pytest.warns(UserWarning, match=r"s\.log: dropped a torn final write"):
        assert main(_journal_search(tmp_path, 5, resume=True)) == 0
    assert main(_journal_search(tmp_path, 7, resume=True)) == 0  # and the file stays sound
    after = _search_table(tmp_path)
    assert len(after) == 7 and after.index.is_unique
    kept = [t for t in before.index if t in after.index][:2]
    assert len(kept) == 2
    assert (after.loc[kept, "plan_hash"] == before.loc[kept, "plan_hash"]).all()


def test_a_journal_corrupt_before_its_end_is_refused_with_the_exact_recovery_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad record with records after it (a torn write later records were appended to):
    Optuna cannot read past it. The refusal names the file, the line and the byte where it
    starts, and the command that keeps the records before it; after that command the study
    resumes."""
    assert main(_journal_search(tmp_path, 3)) == 0
    journal = tmp_path / "s.log"
    lines = journal.read_bytes().splitlines(keepends=True)
    bad = len(lines) // 2
    offset = sum(len(line) for line in lines[:bad])
    lines[bad] = lines[bad][: len(lines[bad]) // 2] + b"\n"  # torn, then appended to
    journal.write_bytes(b"".join(lines))
    capsys.readouterr()
    err = _run(_journal_search(tmp_path, 5, resume=True), capsys)
    assert f"journal file {journal}: line {bad + 1} (byte {offset}) is not a whole record" in err
    step = f"truncate -s {offset} {journal}"
    assert step in err and "--resume" in err
    os.truncate(journal, offset)  # the step the message gives
    assert main(_journal_search(tmp_path, 5, resume=True)) == 0
    assert len(_search_table(tmp_path)) == 5


# ---- a zoo model at a large --input-size: the simulator copies its weights once ------------------
def test_gemm_weights_are_copied_once_for_the_simulator() -> None:
    """mlp_relu at width 65536: fc1's weight is 64 MiB. Reading it as a crossbar matrix made
    three float64/float32 copies (a peak of 4x the weights: 5.3 GB at --input-size 1048576);
    now one float32 copy, with the same numbers."""
    import tracemalloc

    import numpy as np

    from fusiontune.ops.linear import linear_params

    graph = build_zoo("mlp_relu", input_size=65536)
    op = next(o for o in graph.ops if o.name == "fc1")
    weight = graph.tensors[op.inputs[1]].value
    assert weight is not None and weight.nbytes == 64 << 20
    tracemalloc.start()
    try:
        params = linear_params(graph, op)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1.1 * weight.nbytes, peak
    expected = (np.asarray(weight, np.float64).T * 1.0).astype(np.float32)  # the former path
    assert params.weight.dtype == np.float32 and np.array_equal(params.weight, expected)
    assert not np.shares_memory(params.weight, weight)  # a copy: folds never touch the graph
