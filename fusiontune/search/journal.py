"""Optuna journal files (``--storage NAME.log``) after a torn write.

A driver killed while appending leaves a final record without its end. Optuna's reader skips
such a last line, but the next append lands right after it, gluing a new record onto the torn
one: that record is lost and, once anything follows, every read fails. So before a journal is
opened:

- :func:`repair_torn_tail` drops a final line that is not a whole record (no newline, or not
  JSON), under the journal's own lock (no other driver is mid-append while it is held). What
  it drops is what Optuna already ignored: no stored trial changes.
- :func:`bad_record` finds a bad record with records after it (a torn write that was appended
  to); that one cannot be repaired without losing what follows, so opening is refused with
  the exact step that keeps the records before it (:func:`refusal`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

TAIL_CHUNK_BYTES = 1 << 16
"""Bytes read at a time, backwards, to find the start of a journal's last line."""


def repair_torn_tail(path: str | Path) -> int:
    """Drop a torn final record of the journal file ``path``; return the bytes dropped (0: the
    file ends with a whole record, is empty or does not exist)."""
    p = Path(path)
    if not p.is_file() or p.stat().st_size == 0:
        return 0
    from optuna.storages.journal import JournalFileSymlinkLock

    lock = JournalFileSymlinkLock(str(p))  # the lock Optuna's JournalFileBackend appends under
    lock.acquire()
    try:
        with open(p, "r+b") as f:
            size = f.seek(0, os.SEEK_END)
            start = _last_line_start(f, size)
            f.seek(start)
            last = f.read()
            if last.endswith(b"\n") and _is_record(last):
                return 0
            f.truncate(start)
            f.flush()
            os.fsync(f.fileno())
            return size - start
    finally:
        lock.release()


def bad_record(path: str | Path) -> tuple[int, int] | None:
    """The first record of the journal that is not whole, with records after it: (line
    number from 1, byte offset of its start); ``None`` when every record but maybe the last
    is whole."""
    offset = 0
    broken: tuple[int, int] | None = None
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            if broken is not None:
                return broken
            if not line.endswith(b"\n") or not _is_record(line):
                broken = (number, offset)
            offset += len(line)
    return None


def refusal(path: str | Path, line: int, offset: int) -> str:
    """The message refusing a journal with a bad record at ``line`` / ``offset``."""
    return (
        f"journal file {path}: line {line} (byte {offset}) is not a whole record (a torn write "
        "that later records were appended to), so Optuna cannot read past it; keep the records "
        f"before it with: cp {path} {path}.bak && truncate -s {offset} {path}, then rerun with "
        "--resume (trials recorded after it are lost and run again)"
    )


def _last_line_start(f: object, size: int) -> int:
    """Byte offset where the last line starts (a final newline belongs to the last line)."""
    import io

    assert isinstance(f, io.BufferedRandom)
    end = size - 1  # a final newline ends the last line, it does not start a new one
    while end > 0:
        start = max(0, end - TAIL_CHUNK_BYTES)
        f.seek(start)
        chunk = f.read(end - start)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            return start + cut + 1
        end = start
    return 0


def _is_record(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        return False


__all__ = ["bad_record", "refusal", "repair_torn_tail"]
