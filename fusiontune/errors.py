"""User-facing errors.

Every error a user can cause derives from :class:`FusiontuneError`. The CLI prints
``str(error)`` on one line and exits non-zero; it never shows a traceback for these.
Messages name the file, the field or the op, and what is allowed.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence


class FusiontuneError(Exception):
    """Base class of every error caused by user input (models, configs, plans, storage)."""


class ModelLoadError(FusiontuneError):
    """A model file or zoo name could not be read into a Graph."""


class GraphLintError(FusiontuneError):
    """A Graph breaks an IR invariant (order, shapes, single producer)."""


class ShapeError(FusiontuneError):
    """Shape inference failed for an op (bad attributes or incompatible input shapes)."""


class IllegalPlanError(FusiontuneError):
    """A plan violates a legality rule; the message names the rule and the ops."""


class ConfigError(FusiontuneError):
    """A hardware or search-space configuration is invalid; names file, key and allowed values."""


class CapacityError(FusiontuneError):
    """A group does not fit the on-chip buffer while it runs (rule 7, measured); names the
    group, the tensor and the bytes."""


class StorageError(FusiontuneError):
    """A results folder or study storage cannot be used."""


class ResourceLimitError(FusiontuneError):
    """A tensor (or all tensors at once) would need more memory than the limit allows."""


class InputSizeError(ResourceLimitError):
    """A zoo model's weights at this ``input_size`` need more memory than the limit allows.

    Attributes:
        model: the zoo model's name.
        input_size: the size asked for.
        needed: bytes of the weights at that size.
        limit: the memory limit in bytes.
        largest: the largest ``input_size`` whose weights fit (``None``: none does).
        biggest: the largest weight at ``input_size``, as text (name, shape, bytes).
    """

    def __init__(
        self,
        model: str,
        input_size: int,
        needed: int,
        limit: int,
        largest: int | None,
        biggest: str = "",
    ) -> None:
        from fusiontune.limits import format_bytes

        fits = (
            f"the largest input_size that fits is {largest}"
            if largest is not None
            else "no input_size fits"
        )
        super().__init__(
            f"zoo model '{model}': input_size {input_size} needs {format_bytes(needed)} of "
            f"weights{f' (largest: {biggest})' if biggest else ''}, more than the memory "
            f"limit of {format_bytes(limit)}; {fits}"
        )
        self.model, self.input_size, self.needed = model, input_size, needed
        self.limit, self.largest, self.biggest = limit, largest, biggest


def check_keys(
    data: Iterable[object], allowed: Sequence[str], where: str, label: str = "allowed"
) -> None:
    """Raise :class:`ConfigError` for the first key of ``data`` not in ``allowed``, naming
    ``where``, the closest allowed key and the full list."""
    for key in data:
        if key not in allowed:
            raise ConfigError(
                f"{where}: unknown key '{key}'{closest(str(key), allowed)}; "
                f"{label}: {', '.join(allowed)}"
            )


def closest(word: str, choices: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest choice, or ``""`` when none is close."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f" (did you mean '{match[0]}'?)" if match else ""
