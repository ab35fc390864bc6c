"""Data shipped inside the package: the hardware presets and the default search space.

``hardware/<name>.yaml`` are the presets :func:`fusiontune.sim.hardware.load_hardware` finds by
name; ``spaces/default.yaml`` is the space ``fusiontune search`` uses without ``--space``. They
are read through :mod:`importlib.resources`, so they are found the same way from a checkout, an
editable install, a wheel or a zip. The repository's ``search_spaces/`` folder holds example
spaces for users (co-design, multi-objective); nothing there is read by the package.
"""

from __future__ import annotations

from importlib.resources import files
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.abc import Traversable

PACKAGE = "fusiontune.presets"
"""The package holding the data files."""
HARDWARE_DIR = "hardware"
"""Folder of the hardware presets, ``<name>.yaml`` each."""
SPACES_DIR = "spaces"
"""Folder of the shipped search spaces."""
DEFAULT_SPACE = "default.yaml"
"""The default search space, in :data:`SPACES_DIR`."""
SHOWN_PREFIX = "fusiontune/presets"
"""How messages name a shipped file: its path inside an installed package."""


def hardware_dir() -> Traversable:
    """The folder of the hardware presets (a :class:`~importlib.abc.Traversable`)."""
    return files(PACKAGE) / HARDWARE_DIR


def shown_name(relative: str) -> str:
    """The name messages give a shipped file, e.g. ``fusiontune/presets/hardware/x.yaml``."""
    return f"{SHOWN_PREFIX}/{relative}"


def default_space_yaml() -> str:
    """The text of the default search space (``fusiontune/presets/spaces/default.yaml``)."""
    return (files(PACKAGE) / SPACES_DIR / DEFAULT_SPACE).read_text(encoding="utf-8")
