"""Memory limits: tensors too large to allocate are refused before they are allocated.

A model file of a few hundred bytes can ask for terabytes: a ``ConstantOfShape`` of a huge
shape, a weight declared with 10^9 channels, an input size of 100,000. Every place that
materialises tensors estimates their bytes from shapes first and refuses beyond
:func:`memory_limit` with a :class:`~fusiontune.errors.ResourceLimitError` naming the tensor
and the bytes:

- the ONNX importer: initializers and ``Constant`` values; constant folding is bounded more
  tightly (:func:`fold_limit_bytes`; the registry's ``fold_output_elements`` estimates the
  output of the ops whose output size is not their inputs'): a larger output is not folded
  but left to run;
- the zoo builder: random weights;
- ``execute`` / ``verify``: every tensor of the graph (inputs, intermediates, outputs).

The limit is one number of bytes, :data:`DEFAULT_MEMORY_LIMIT_BYTES` unless changed with
:func:`set_memory_limit` (CLI: ``--memory-limit``). Shapes are also checked for int64
overflow (:data:`MAX_ELEMENTS`), so sizes never wrap around in numpy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from fusiontune.errors import ResourceLimitError

DEFAULT_MEMORY_LIMIT_BYTES = 4 << 30
"""4 GiB: about 10x what the largest zoo model (vgg19 at 224x224, 548 MB of weights) needs to
execute, and a fraction of a workstation's memory."""

FOLD_MIN_BYTES = 64 << 20
"""Constant folding may always create outputs of this size (64 MiB: shape arithmetic and
folded weights of real models are far smaller)."""

FOLD_BYTES_PER_FILE_BYTE = 4
"""Beyond :data:`FOLD_MIN_BYTES`, a folded output may be this many times the model file's size:
a model may unpack its weights, a 150-byte file may not produce a gigabyte."""

MAX_ELEMENTS = (1 << 63) - 1
"""Elements of one tensor: numpy's int64 sizes (larger shapes overflow silently)."""

_limit_bytes = DEFAULT_MEMORY_LIMIT_BYTES


def memory_limit() -> int:
    """The current limit in bytes."""
    return _limit_bytes


def set_memory_limit(limit_bytes: int) -> int:
    """Set the limit (bytes, >= 1); returns the previous one.

    Raises:
        ResourceLimitError: the limit is not a positive integer.
    """
    global _limit_bytes
    if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes < 1:
        raise ResourceLimitError(
            f"memory limit must be a positive number of bytes, got {limit_bytes!r}"
        )
    previous, _limit_bytes = _limit_bytes, limit_bytes
    return previous


def available_memory_bytes() -> int:
    """Memory the machine has available now (psutil's ``available``: free plus reclaimable),
    the bound a zoo model's ``--input-size`` is checked against (its tensors estimated from
    shapes, ``cli/_common.check_zoo_tensors``)."""
    import psutil

    return int(psutil.virtual_memory().available)


def format_bytes(n: int) -> str:
    """``1,234 B`` below a KiB, else binary units with three significant digits."""
    if n < 1024:
        return f"{n:,} B"
    value = float(n)
    units = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    for unit in units:
        value /= 1024.0
        if value < 1024 or unit == units[-1]:
            break
    return f"{value:.3g} {unit}"


def shape_text(shape: Sequence[int]) -> str:
    return "x".join(str(int(d)) for d in shape) or "scalar"


def n_elements(shape: Iterable[int]) -> int:
    """Elements of a shape, in Python integers (no overflow)."""
    return math.prod(int(d) for d in shape)


def check_shape(name: str, shape: Sequence[int], where: str) -> None:
    """Refuse a shape with a negative dimension or more than :data:`MAX_ELEMENTS` elements
    (0 is allowed: an empty tensor, e.g. an omitted ``roi`` of ``Resize``)."""
    for axis, d in enumerate(shape):
        if int(d) < 0:
            raise ResourceLimitError(
                f"{where}: tensor '{name}' dimension {axis} is {int(d)}; dimensions must be >= 0"
            )
    if n_elements(shape) > MAX_ELEMENTS:
        raise ResourceLimitError(
            f"{where}: tensor '{name}' has shape {shape_text(shape)}, more than 2^63 elements "
            "(int64 overflow)"
        )


def check_tensor(name: str, shape: Sequence[int], itemsize: int, where: str) -> int:
    """Bytes of a tensor about to be allocated; refuse it beyond the limit.

    Raises:
        ResourceLimitError: names ``where``, the tensor, its shape and the bytes.
    """
    n_bytes = n_elements(shape) * int(itemsize)
    if n_bytes > _limit_bytes:
        raise ResourceLimitError(
            f"{where}: tensor '{name}' ({shape_text(shape)}, {itemsize} B per element) needs "
            f"{format_bytes(n_bytes)}, more than the memory limit of {format_bytes(_limit_bytes)}"
            "; raise it with --memory-limit (ft.set_memory_limit) if the machine has the memory"
        )
    return n_bytes


def check_total(tensors: Iterable[tuple[str, Sequence[int], int]], where: str, what: str) -> int:
    """Bytes of several tensors held at once (name, shape, itemsize); refuse beyond the limit,
    naming the largest."""
    items = [(n_elements(shape) * int(size), name, shape) for name, shape, size in tensors]
    total = sum(b for b, _, _ in items)
    if total > _limit_bytes:
        biggest, name, shape = max(items)
        raise ResourceLimitError(
            f"{where}: {what} needs {format_bytes(total)} of tensors, more than the memory limit "
            f"of {format_bytes(_limit_bytes)} (largest: '{name}', {shape_text(shape)}, "
            f"{format_bytes(biggest)}); raise it with --memory-limit (ft.set_memory_limit) if "
            "the machine has the memory"
        )
    return total


def check_graph(graph: Any, what: str) -> int:
    """Bytes of every tensor of a graph (inputs, weights, intermediates, outputs), as executing
    it may hold them; refuse beyond the limit before anything is allocated."""
    import numpy as np

    def itemsize(dtype: str) -> int:
        try:
            return int(np.dtype(dtype).itemsize) or 4
        except TypeError:
            return 4  # bfloat16 and the like: counted as float32, as executed

    items = [(t.name, t.shape, itemsize(t.dtype)) for t in graph.tensors.values()]
    for name, shape, _ in items:
        check_shape(name, shape, f"graph '{graph.name}'")
    return check_total(items, f"graph '{graph.name}'", what)


def fold_limit_bytes(model_file_bytes: int) -> int:
    """Largest output one constant fold may produce for a model file of this size; a larger
    one is left to run as an op (its size then counts when the graph is executed)."""
    return min(_limit_bytes, max(FOLD_MIN_BYTES, FOLD_BYTES_PER_FILE_BYTE * model_file_bytes))
