"""Arguments and helpers shared by the subcommands: value types that validate on the command
line (one clear line naming the option and what is allowed), the model options, the memory
limit."""

from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING, TextIO

from fusiontune.errors import FusiontuneError, InputSizeError

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph
    from fusiontune.sim.hardware import HardwareConfig

BYTE_UNITS = {
    "": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}  # fmt: skip
"""Suffixes a byte size on the command line may carry (decimal and binary)."""

MAX_TRIALS = (1 << 63) - 1
"""Largest --trials taken: the study storage numbers trials with 64-bit integers."""

MAX_INPUT_SIZE = 1 << 20
"""Largest --input-size taken (a 2^20-pixel side is far beyond any model; the memory limit
refuses what would not fit long before)."""


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return int_in_range(1, None)(text)


def int_in_range(
    low: int, high: int | None, why: str = "", high_text: str | None = None
) -> type[int]:
    """argparse type: an integer in ``low .. high`` (``None``: no upper bound; ``high_text``:
    how messages write it, e.g. ``2^63 - 1``)."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
        if value < low or (high is not None and value > high):
            allowed = f"{low} .. {high_text or high}" if high is not None else f">= {low}"
            raise argparse.ArgumentTypeError(f"{value} is out of range; allowed {allowed}{why}")
        return value

    parse.__name__ = "integer"
    return parse  # type: ignore[return-value]


def byte_size(text: str) -> int:
    """argparse type: a number of bytes, e.g. ``4294967296``, ``4GiB``, ``500MB``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in BYTE_UNITS:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a size; give bytes, e.g. 4294967296, 4GiB or 500MB"
        )
    number = match.group(1)
    value = (
        int(number) * BYTE_UNITS[unit]  # exact: a long string of digits never becomes inf
        if "." not in number
        else int(float(number) * BYTE_UNITS[unit])
    )
    if value < 1:
        raise argparse.ArgumentTypeError(f"'{text}' must be at least 1 byte")
    return value


def add_memory_limit_argument(parser: argparse.ArgumentParser) -> None:
    """``--memory-limit``: bytes of tensors fusiontune may allocate (see fusiontune.limits)."""
    from fusiontune.limits import DEFAULT_MEMORY_LIMIT_BYTES, format_bytes

    parser.add_argument(
        "--memory-limit", type=byte_size, default=None, metavar="BYTES",
        help="refuse models whose tensors need more memory than this, before allocating "
        f"(default {format_bytes(DEFAULT_MEMORY_LIMIT_BYTES)}; e.g. 16GiB)",
    )  # fmt: skip


def apply_memory_limit(args: argparse.Namespace) -> None:
    """Set the process's memory limit from ``--memory-limit`` when given."""
    limit = getattr(args, "memory_limit", None)
    if limit is not None:
        from fusiontune.limits import set_memory_limit

        set_memory_limit(limit)


def add_model_arguments(parser: argparse.ArgumentParser, batch: bool = True) -> None:
    """``MODEL`` plus the options that size a zoo model or fix an ONNX model's shapes."""
    parser.add_argument("model", help="zoo model name (see `fusiontune models`) or ONNX file")
    parser.add_argument(
        "--input-size", type=int_in_range(1, MAX_INPUT_SIZE), default=None,
        help="zoo models: spatial side, MLP width or BERT sequence length",
    )  # fmt: skip
    if batch:
        parser.add_argument("--batch", type=int_in_range(1, MAX_INPUT_SIZE), default=None,
                            help="zoo models: batch size")  # fmt: skip
    parser.add_argument(
        "--input-shape", action="append", default=None, metavar="NAME=D,D,...",
        help="static shape of an ONNX graph input with dynamic dimensions (repeatable)",
    )  # fmt: skip
    add_pin_argument(parser)
    add_attention_argument(parser)
    add_memory_limit_argument(parser)


def add_attention_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-fuse-attention``: keep each attention as barriers. By default every attention
    pattern P5 accepts is fused into one group (``docs/attention.md``); ``--fuse-attention``
    is accepted (a no-op) for older scripts."""
    parser.add_argument(
        "--no-fuse-attention", dest="fuse_attention", action="store_false",
        help="keep each attention (MatMul-scale-mask-Softmax-MatMul) as the exporter wrote it "
        "(its MatMuls of two activations are barriers); by default every attention P5 accepts "
        "is fused into one group",
    )  # fmt: skip
    parser.add_argument(
        "--fuse-attention", dest="fuse_attention", action="store_true",
        help="the default (kept for older scripts)",
    )  # fmt: skip
    parser.set_defaults(fuse_attention=True)


def add_pin_argument(parser: argparse.ArgumentParser) -> None:
    """``--pin NAME=VALUE``: an ONNX input fixed to a value (an ``If`` on it folds)."""
    parser.add_argument(
        "--pin", action="append", default=None, metavar="NAME=V[,V...]",
        help="fix an ONNX graph input to a value, e.g. a sample rate sr=16000: it becomes a "
        "constant and an If on it becomes the branch it takes (repeatable)",
    )  # fmt: skip


def add_model_bits_argument(parser: argparse.ArgumentParser) -> None:
    """``--model-bits``: price a quantized model at its own bit widths (``sim/model_bits``)."""
    parser.add_argument(
        "--model-bits", action="store_true",
        help="quantized (QDQ) models: price activations and weights at the model's own bit "
        "widths (its integer grids) instead of the hardware's act_bits/weight_bits",
    )  # fmt: skip


def model_bits_hardware(
    graph: Graph, hw: HardwareConfig, on: bool, out: TextIO | None = None
) -> HardwareConfig:
    """``hw`` at ``graph``'s own widths when ``on`` (one line on ``out`` says which); when off
    and the model's grids differ from ``hw``'s widths, a line says ``--model-bits`` would
    price them (the numbers stay ``hw``'s)."""
    from fusiontune.sim.model_bits import at_model_bits, model_bits

    out = out if out is not None else sys.stderr
    bits = model_bits(graph)
    act = bits.act_bits if bits.act_bits is not None else hw.act_bits
    weight = bits.weight_bits if bits.weight_bits is not None else hw.weight_bits
    found = bits.act_bits is not None or bits.weight_bits is not None
    preset = f"{hw.name} prices {hw.act_bits}/{hw.weight_bits}"
    if on:
        if not found:
            print(f"model bits: '{graph.name}' has no integer grids; {preset} kept", file=out)
            return hw
        print(
            f"model bits: activations {act}, weights {weight} bits (the model's grids; {preset})",
            file=out,
        )
        return at_model_bits(graph, hw)
    if found and (act, weight) != (hw.act_bits, hw.weight_bits):
        print(
            f"note: the model's grids are activations {act} / weights {weight} bits; {preset} "
            "(--model-bits prices the model's)",
            file=out,
        )
    return hw


def load_graph(args: argparse.Namespace) -> Graph:
    """Load the model named by :func:`add_model_arguments`' options."""
    from fusiontune.frontend.loader import load_model, parse_input_shapes, parse_input_values

    apply_memory_limit(args)
    zoo_kwargs = {
        key: value
        for key, value in (("input_size", args.input_size), ("batch", getattr(args, "batch", None)))
        if value is not None
    }
    shapes = parse_input_shapes(args.input_shape) if args.input_shape else None
    if zoo_kwargs and args.model not in _zoo_names():
        raise FusiontuneError(
            f"{args.model}: --input-size and --batch apply to zoo models only; an ONNX file "
            "takes --input-shape NAME=D,D,... for its dynamic dimensions"
        )
    pins = parse_input_values(args.pin) if getattr(args, "pin", None) else None
    try:
        check_zoo_tensors(args.model, args.input_size, getattr(args, "batch", None))
        graph = load_model(args.model, input_shapes=shapes, input_values=pins, **zoo_kwargs)
    except InputSizeError as exc:
        raise input_size_error(exc) from None
    if getattr(args, "fuse_attention", True):
        from fusiontune.planner.attention import fuse_attention

        graph = fuse_attention(graph)
    return graph


def _zoo_names() -> frozenset[str]:
    from fusiontune.frontend.zoo import ZOO

    return frozenset(ZOO)


def check_zoo_tensors(model: str, input_size: int | None, batch: int | None) -> None:
    """Refuse a zoo model's ``--input-size`` or ``--batch`` whose tensors (weights, inputs,
    intermediates, outputs: what executing the graph may hold) would need more memory than the
    machine has available (:func:`fusiontune.limits.available_memory_bytes`), estimated from a
    placeholder build (nothing allocated). Its weights are checked first, against the memory
    limit (:class:`InputSizeError`, worded by :func:`input_size_error`). The activations are
    checked for analytic commands too: the analysis replays every row (``bert_encoder`` at
    sequence 2^20 ran for hours), and no plan of such a size could be verified here.

    Raises:
        InputSizeError: the weights exceed the memory limit.
        FusiontuneError: the tensors exceed the available memory; names the option, the
            estimate, the memory available and the largest value that fits.
    """
    from fusiontune.frontend.zoo import ZOO, check_weight_bytes, largest_fitting, tensor_bytes
    from fusiontune.limits import available_memory_bytes, format_bytes

    entry = ZOO.get(model)
    if entry is None or (input_size is None and batch is None):
        return  # the defaults fit any machine fusiontune runs on
    size = entry.default_input_size if input_size is None else input_size
    n = entry.default_batch if batch is None else batch
    check_weight_bytes(model, size, n)
    limit = available_memory_bytes()
    counted = tensor_bytes(model, size, n)
    if counted is None or counted[0] <= limit:
        return  # a size that does not build is reported by the build
    option, value, low = (
        ("--input-size", size, entry.min_input_size)
        if input_size is not None
        else ("--batch", n, 1)
    )

    def fits(v: int) -> bool:
        c = tensor_bytes(model, v, n) if option == "--input-size" else tensor_bytes(model, size, v)
        return c is not None and c[0] <= limit

    largest = largest_fitting(low, value, fits)
    fix = f"the largest {option} that fits is {largest}" if largest else f"no {option} fits"
    raise FusiontuneError(
        f"{option} {value} is too large for zoo model '{model}': its tensors would need "
        f"{format_bytes(counted[0])} (weights, activations and outputs; largest: {counted[1]}), "
        f"more than the {format_bytes(limit)} of memory this machine has available; {fix}"
    )


def input_size_error(exc: InputSizeError) -> FusiontuneError:
    """``exc`` worded for the command line: names ``--input-size``, the limit and the fix."""
    from fusiontune.limits import format_bytes

    fix = (
        f"the largest --input-size that fits is {exc.largest}"
        if exc.largest is not None
        else "no --input-size fits"
    )
    return FusiontuneError(
        f"--input-size {exc.input_size} is too large for zoo model '{exc.model}': its weights "
        f"need {format_bytes(exc.needed)} (largest: {exc.biggest}), more than the memory limit of "
        f"{format_bytes(exc.limit)}; {fix} (or raise --memory-limit if the machine has the "
        "memory)"
    )
