"""The ``fusiontune`` command line.

Each subcommand lives in its own module under :mod:`fusiontune.cli` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
``(args) -> int``. Errors derived from :class:`FusiontuneError` print one line and exit 2;
any other exception is a bug: one line, a hint to rerun with ``FUSIONTUNE_DEBUG=1`` for the
traceback, exit 1. Ctrl-C exits 130 (a subcommand may print how to resume first); once
it is caught, SIGINT is ignored for the rest of the process, which is ending: a second Ctrl-C
cannot turn 130 into a traceback or a death by signal. Run as the program (``argv`` not
given), every warning prints as one ``fusiontune: warning: ...`` line (:func:`_show_warning`);
a caller passing ``argv`` (tests) keeps Python's warning machinery as it is.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from fusiontune.errors import FusiontuneError

# subcommand modules, in the order `fusiontune --help` lists them
COMMANDS = ("models", "show", "plans", "simulate", "search", "export", "report")

DEBUG_ENV = "FUSIONTUNE_DEBUG"
"""Environment variable that makes an unexpected error print its traceback (read here only)."""

EXIT_USER_ERROR = 2
"""Exit code of an error caused by the input (FusiontuneError), as argparse uses for usage."""

EXIT_BUG = 1
"""Exit code of an unexpected exception."""

EXIT_INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT), the shell convention."""


class UsageError(FusiontuneError):
    """A command-line option or argument argparse refused."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option in one line (the usage text stays in --help)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; with ``only``, just that subcommand's (its module alone is imported:
    ``search`` pulls in the search stack, which ``fusiontune models`` should not pay for)."""
    parser = _Parser(
        prog="fusiontune",
        description="Find the operator-fusion plan that moves the least data on a CIM accelerator.",
    )
    parser.add_argument("--version", action="version", version=f"fusiontune {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS if only is None else (only,):
        try:
            module = importlib.import_module(f"fusiontune.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"fusiontune.cli.{name}":
                continue  # subcommand not built yet
            raise
        module.register(sub)
    return parser


def _version() -> str:
    from fusiontune import __version__

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:
        import warnings

        warnings.showwarning = _show_warning
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:  # before a subcommand ran: importing it, parsing the options
        _ignore_further_ctrl_c()
        print("fusiontune: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _main(argv: list[str]) -> int:
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        print(f"fusiontune: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except SystemExit as exc:  # --help, --version
        return int(exc.code or 0)
    if not getattr(args, "func", None):
        parser.print_help()
        print(f"fusiontune: error: give a command: {', '.join(COMMANDS)}", file=sys.stderr)
        return EXIT_USER_ERROR
    args.argv = argv  # the command line as given (``search`` prints it to resume)
    try:
        return int(args.func(args) or 0)
    except FusiontuneError as exc:
        print(f"fusiontune: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        _ignore_further_ctrl_c()
        print("fusiontune: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except MemoryError as exc:  # past what the estimates refuse (e.g. a --memory-limit too high)
        from fusiontune.limits import format_bytes, memory_limit

        print(
            f"fusiontune: error: out of memory ({_one_line(exc)}); fusiontune refuses tensors "
            f"beyond the memory limit, now {format_bytes(memory_limit())}: keep --memory-limit "
            "within the machine's memory, or give a smaller model or input",
            file=sys.stderr,
        )
        return EXIT_USER_ERROR
    except BrokenPipeError:  # output piped into `head` and closed early: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # a bug: say so in one line, the traceback only on request
        if os.environ.get(DEBUG_ENV):
            traceback.print_exc()
        print(
            f"fusiontune: internal error: {type(exc).__name__}: {_one_line(exc)}",
            file=sys.stderr,
        )
        print(
            f"fusiontune: this is a bug; run with {DEBUG_ENV}=1 for a traceback and report it",
            file=sys.stderr,
        )
        return EXIT_BUG


def _ignore_further_ctrl_c() -> None:
    """After a Ctrl-C the command is ending: a second one must not turn exit 130 into a
    traceback or a death by SIGINT during the interpreter's exit (main thread only)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: object = None,
    line: str | None = None,
) -> None:
    """A warning as one line: fusiontune's own (UserWarning) as its message, another
    package's with its category and package."""
    text = " ".join(str(message).split())
    if not issubclass(category, UserWarning) or "fusiontune" not in filename:
        package = os.path.basename(os.path.dirname(filename)) or filename
        text = f"{category.__name__} from {package}: {text}"
    print(f"fusiontune: warning: {text}", file=sys.stderr)


def _one_line(exc: BaseException) -> str:
    """The exception's message on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
