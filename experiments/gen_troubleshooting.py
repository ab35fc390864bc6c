"""Rewrite the README's troubleshooting table from the tested bad-input cases.

Each row of ``tests/test_bad_input.py``'s ``CASES`` is run through ``fusiontune.cli.main.main``
in a scratch folder; the table shows the command, the one line fusiontune prints and the fix.
Only the block between ``<!-- troubleshooting:start -->`` and ``<!-- troubleshooting:end -->``
changes. Run from the repository root: ``python experiments/gen_troubleshooting.py``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import shlex
import sys
import tempfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CASES_FILE = ROOT / "tests" / "test_bad_input.py"
START = "<!-- troubleshooting:start -->"
END = "<!-- troubleshooting:end -->"
ERROR_PREFIX = "fusiontune: error: "


def load_cases_module() -> ModuleType:
    """Import the test module that holds ``CASES`` (tests/ is not a package)."""
    spec = importlib.util.spec_from_file_location("test_bad_input", CASES_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def _cell(text: str) -> str:
    """A markdown table cell: pipes escaped, on one line."""
    return " ".join(text.split()).replace("|", "\\|")


def _quote(arg: str) -> str:
    """An argument as a shell would need it; a newline shown as bash's ``$'a\\nb'``."""
    if "\n" in arg:
        return "$'" + arg.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
    return shlex.quote(arg)


def run_case(module: ModuleType, case: object) -> tuple[str, str]:
    """(command as a user would type it, the message fusiontune printed)."""
    from fusiontune.cli.main import main
    from fusiontune.limits import memory_limit, set_memory_limit

    previous = memory_limit()  # a case's --memory-limit is process-wide: not for the next one
    with tempfile.TemporaryDirectory() as tmp:
        argv = module.materialise(case, Path(tmp))
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
        prefix = f"{tmp}/"
        message = err.getvalue().strip().replace(prefix, "").removeprefix(ERROR_PREFIX)
        command = " ".join(_quote(a.replace(prefix, "")) for a in ["fusiontune", *argv])
    set_memory_limit(previous)
    if code != case.code:  # type: ignore[attr-defined]
        raise SystemExit(f"case {case.id}: exit {code}, expected {case.code}: {message}")  # type: ignore[attr-defined]
    return command, message


def table(module: ModuleType) -> str:
    """The markdown table of every case."""
    lines = [
        "| case | command | what fusiontune says | fix |",
        "|---|---|---|---|",
    ]
    for case in module.CASES:
        command, message = run_case(module, case)
        lines.append(
            f"| {_cell(case.what)} | `{_cell(command)}` | {_cell(message)} | {_cell(case.fix)} |"
        )
    return "\n".join(lines)


FAULT_NOTES = """\
Long searches and faults (tested in `tests/test_faults.py`, `tests/test_study.py`,
`tests/test_postgres.py`, `tests/test_hardening4.py`):

- **Ctrl-C** stops cleanly (exit 130): the finished trials are stored and `trials.parquet`
  rewritten; fusiontune prints the exact command to continue (the same one plus `--resume`).
  Further Ctrl-Cs are ignored until fusiontune has exited: the save is never cut short, no
  trial is stored twice, and the exit is 130 with one line saying what was saved.
- **A killed driver** (SIGKILL, power loss) loses at most `--checkpoint-every` seconds of work
  (default 5): finished trials go to the study storage (one transaction per checkpoint: all of
  its trials or none) and `trials.parquet` periodically, each file replaced atomically. Rerun
  with `--resume`. The local Ray it started (workers, raylet, agents) is stopped within seconds
  by a small reaper process. It uses only psutil and the standard library (no `/proc`, no
  POSIX-only call; its own process group on Windows, a child counted only if younger than its
  parent since Windows keeps a dead parent's pid), so it works wherever Ray runs: Linux, macOS,
  Windows. The suite runs it on Linux; the others' differences are simulated in the tests.
- **Reading `trials.parquet` during a search**: read it through one open file
  (`ft.read_parquet(path)`, `ft.load_results(folder)` or `pd.read_parquet(open(path, "rb"))`);
  `pd.read_parquet(path)` opens the path twice and can pair two versions of the file.
- **A damaged `trials.parquet`** (truncated copy, disk error): `fusiontune report DIR` names the
  file; `fusiontune report DIR --rebuild` rewrites it from the study storage (the search trials:
  every stored trial carries its record; `--storage URL` for a database summary.json does not
  record). The baseline rows and `groups.parquet` are not in the storage: rerun the search with
  `--resume` (same command) to recompute them.
- **A journal file torn by a killed driver** (`--storage NAME.log`): a final record left
  unfinished is dropped when the journal is next opened, said in one `fusiontune: warning:`
  line (Optuna never read it);
  a bad record with others after it is refused with the exact step (`truncate -s BYTE FILE`)
  that keeps the records before it.
- **A study knows what it is**: `--resume` (or a second driver) with another model, input
  shape, hardware, knobs, objective or planner configuration is refused, naming both.
- **A crashing evaluation** fails only its trial (the message is in the `error` column); a Ray
  worker that dies is retried once plan by plan; a plan slower than `--eval-timeout` seconds
  (default 600) fails as timed out; a failing baseline is a failed row. The search goes on.
- **A full disk** stops the search with one line naming the file (the study database, the journal
  or a table) and "disk full" (a file-size limit, `ulimit -f`, says so; SQLite's "disk I/O
  error" says what it may be); the trials stored so far are safe: free space and rerun with
  `--resume` (a study whose database could not even be created: run the same command again).
- **Warnings** (an op type the IR does not know, a repaired journal) are one line each,
  `fusiontune: warning: ...`, on stderr.
- **The hostile harness** `python experiments/hostile.py` reruns about 250 such cases (bad
  files, values, paths and faults, each in a subprocess) and writes `results/hostile.md`.
- **`fusiontune: internal error: ...`** is a bug, not a bad input: rerun with
  `FUSIONTUNE_DEBUG=1` to see the traceback and report it."""


def rewrite(readme: Path, block: str) -> None:
    """Replace the text between the markers (markers kept)."""
    text = readme.read_text()
    head, sep, rest = text.partition(START)
    _, sep_end, tail = rest.partition(END)
    if not sep or not sep_end:
        raise SystemExit(f"{readme}: markers {START} / {END} not found")
    readme.write_text(f"{head}{START}\n{block}\n{END}{tail}")


def main() -> None:
    sys.path.insert(0, str(ROOT))
    module = load_cases_module()
    block = f"{table(module)}\n\n{FAULT_NOTES}"
    print(block)
    rewrite(README, block)
    print(f"\nwrote {len(module.CASES)} cases into {README.name}")


if __name__ == "__main__":
    main()
