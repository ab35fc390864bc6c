"""Arguments and helpers shared by the subcommands that load a model."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_model_arguments(parser: argparse.ArgumentParser, batch: bool = True) -> None:
    """``MODEL`` plus the options that size a zoo model or fix an ONNX model's shapes."""
    parser.add_argument("model", help="zoo model name (see `fusiontune models`) or ONNX file")
    parser.add_argument(
        "--input-size", type=positive_int, default=None,
        help="zoo models: spatial side, MLP width or BERT sequence length",
    )  # fmt: skip
    if batch:
        parser.add_argument("--batch", type=positive_int, default=None,
                            help="zoo models: batch size")  # fmt: skip
    parser.add_argument(
        "--input-shape", action="append", default=None, metavar="NAME=D,D,...",
        help="static shape of an ONNX graph input with dynamic dimensions (repeatable)",
    )  # fmt: skip


def load_graph(args: argparse.Namespace) -> Graph:
    """Load the model named by :func:`add_model_arguments`' options."""
    from fusiontune.frontend.loader import load_model, parse_input_shapes

    zoo_kwargs = {
        key: value
        for key, value in (("input_size", args.input_size), ("batch", getattr(args, "batch", None)))
        if value is not None
    }
    shapes = parse_input_shapes(args.input_shape) if args.input_shape else None
    return load_model(args.model, input_shapes=shapes, **zoo_kwargs)
