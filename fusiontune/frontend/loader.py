"""One entry point for every front end: an ONNX file or a zoo model name becomes a Graph."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fusiontune.errors import ModelLoadError
from fusiontune.ir.graph import Graph
from fusiontune.limits import MAX_ELEMENTS

ONNX_SUFFIX = ".onnx"


def load_model(
    path_or_name: str | Path,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    input_values: Mapping[str, Any] | None = None,
    **zoo_kwargs: Any,
) -> Graph:
    """Load a model by file path or zoo name.

    A path that exists, or any name ending in ``.onnx``, is read by
    :func:`~fusiontune.frontend.onnx_import.load_onnx`; anything else is a zoo name built by
    :func:`~fusiontune.frontend.zoo.build_zoo`.

    Args:
        path_or_name: ``"model.onnx"`` or a zoo name such as ``"resnet18"``.
        input_shapes: static input shapes for an ONNX file (``{"x": (1, 3, 224, 224)}``).
        input_values: ONNX inputs pinned to a value (``{"sr": 16000}``): constants from then
            on, so an ``If`` on them becomes the branch it takes (``load_onnx``).
        **zoo_kwargs: ``input_size``, ``batch``, ``seed`` for zoo models; ``None`` values
            count as not given (so a CLI can pass its defaults through).

    Raises:
        ModelLoadError: the file cannot be read, the zoo name is unknown, or options were
            given that the chosen front end does not take.
    """
    text = str(path_or_name)
    given = {k: v for k, v in zoo_kwargs.items() if v is not None}  # None means "not set"
    if isinstance(path_or_name, Path) or Path(text).is_file() or text.lower().endswith(ONNX_SUFFIX):
        if given:
            raise ModelLoadError(
                f"{text}: options {sorted(given)} apply to zoo models only; "
                "an ONNX file takes input_shapes"
            )
        from fusiontune.frontend.onnx_import import load_onnx

        return load_onnx(text, input_shapes, input_values)
    if input_shapes or input_values:
        what = "input_shapes" if input_shapes else "input_values"
        raise ModelLoadError(
            f"zoo model '{text}': {what} applies to ONNX files; "
            "set the zoo model's size with input_size= and batch="
        )
    from fusiontune.frontend.zoo import build_zoo

    return build_zoo(text, **given)


def parse_input_shapes(specs: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Parse CLI ``--input-shape`` values such as ``["x=1,3,224,224"]``.

    Raises:
        ModelLoadError: a spec is not ``NAME=D1,D2,...`` with positive integer dimensions,
            or a name is given twice.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        name = name.strip()
        parts = [p.strip() for p in dims.split(",")]
        if not sep or not name or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ModelLoadError(
                f"--input-shape '{spec}': expected NAME=D1,D2,... with positive integer "
                "dimensions, e.g. x=1,3,224,224"
            )
        if name in shapes:
            raise ModelLoadError(f"--input-shape: input '{name}' is given twice")
        shape = tuple(int(p) for p in parts)
        if math.prod(shape) > MAX_ELEMENTS:
            raise ModelLoadError(
                f"--input-shape '{spec}': {math.prod(shape):.3g} elements overflow int64 "
                "(more than 2^63); give the model's real input shape"
            )
        shapes[name] = shape
    return shapes


def parse_input_values(specs: Sequence[str]) -> dict[str, Any]:
    """Parse CLI ``--pin`` values such as ``["sr=16000", "mask=1,0,1"]``: one number is a
    scalar, several (comma-separated) a 1-D value; the importer casts them to the input's
    dtype and declared shape.

    Raises:
        ModelLoadError: a spec is not ``NAME=V`` or ``NAME=V1,V2,...`` with numbers, or a name
            is given twice.
    """
    values: dict[str, Any] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        name = name.strip()
        parts = [p.strip() for p in text.split(",")]
        numbers: list[int | float] = []
        for part in parts:
            try:
                numbers.append(int(part))
            except ValueError:
                try:
                    numbers.append(float(part))
                except ValueError:
                    numbers = []
                    break
        if not sep or not name or not numbers:
            raise ModelLoadError(
                f"--pin '{spec}': expected NAME=VALUE or NAME=V1,V2,... with numbers, e.g. sr=16000"
            )
        if name in values:
            raise ModelLoadError(f"--pin: input '{name}' is given twice")
        values[name] = numbers[0] if len(numbers) == 1 else numbers
    return values
