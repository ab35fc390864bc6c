"""The ``fusiontune`` command line.

Each subcommand lives in its own module under :mod:`fusiontune.cli` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
``(args) -> int``. Errors derived from :class:`FusiontuneError` print one line and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from fusiontune.errors import FusiontuneError

# subcommand modules, in the order `fusiontune --help` lists them
COMMANDS = ("models", "show", "plans", "simulate", "search", "report")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fusiontune",
        description="Find the operator-fusion plan that moves the least data on a CIM accelerator.",
    )
    parser.add_argument("--version", action="version", version=f"fusiontune {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
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
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except FusiontuneError as exc:
        print(f"fusiontune: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fusiontune: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
