"""The import side stays below the simulator: ``fusiontune/frontend`` imports nothing above it.

Every import statement of every module in ``frontend/`` is read with :mod:`ast` (function-level
and ``TYPE_CHECKING`` imports included, relative imports resolved), so an import hidden inside a
function counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fusiontune"
FRONTEND = PACKAGE / "frontend"
ABOVE = ("fusiontune.sim", "fusiontune.export", "fusiontune.search", "fusiontune.cli")
"""Packages the import side must not import (the export side, in ``export/``, may)."""


def imported_modules(source: str, module: str) -> set[str]:
    """Every module ``source`` (the text of module ``module``) imports, as dotted names.

    ``from a import b`` gives ``a`` and ``a.b`` (``b`` may be a submodule); relative imports are
    resolved against ``module``'s package.
    """
    package = module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, module)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def _is_above(module: str) -> bool:
    return any(module == top or module.startswith(top + ".") for top in ABOVE)


FRONTEND_MODULES = sorted(p.name for p in FRONTEND.glob("*.py"))


@pytest.mark.parametrize("name", FRONTEND_MODULES)
def test_frontend_module_imports_nothing_above_it(name: str) -> None:
    source = (FRONTEND / name).read_text(encoding="utf-8")
    found = imported_modules(source, f"fusiontune.frontend.{name[: -len('.py')]}")
    offending = sorted(m for m in found if _is_above(m))
    assert not offending, f"frontend/{name} imports {offending}; that code belongs in export/"


def test_the_reader_sees_every_kind_of_import() -> None:
    """The check itself: top-level, function-level, relative and ``from fusiontune import``."""
    source = (
        "from fusiontune.errors import ModelLoadError\n"
        "from fusiontune import sim\n"
        "def f():\n"
        "    from ..export.plan_export import export_plan\n"
        "    import fusiontune.search.api\n"
        "    from . import zoo\n"
    )
    found = imported_modules(source, "fusiontune.frontend.probe")
    assert "fusiontune.frontend.zoo" in found and "fusiontune.errors" in found
    assert sorted(m for m in found if _is_above(m)) == [
        "fusiontune.export.plan_export",
        "fusiontune.export.plan_export.export_plan",
        "fusiontune.search.api",
        "fusiontune.sim",
    ]
    assert "onnx_import.py" in FRONTEND_MODULES and "zoo.py" in FRONTEND_MODULES
