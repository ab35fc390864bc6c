"""Layers of the package: what a module may name and import.

- no file under ``fusiontune/sim`` or ``fusiontune/ir`` spells an ONNX op type as a string
  literal: op knowledge lives in the op registry (``fusiontune/ops``), and the simulator and
  the IR read it through :class:`~fusiontune.ops.OpDef` fields;
- the imports among ``fusiontune/sim`` modules (every import, including those inside
  functions) form no cycle: the model files sit below the executor files.
"""

from __future__ import annotations

import ast
from pathlib import Path

from fusiontune.ops import REGISTRY

PACKAGE = Path(__file__).resolve().parent.parent / "fusiontune"
NO_OP_TYPES = ("sim", "ir")
"""Subpackages that must not name an op type."""


def _modules(subpackage: str) -> list[Path]:
    return sorted((PACKAGE / subpackage).glob("*.py"))


def _op_type_literals(source: str, label: str) -> list[str]:
    """``label:line: 'OpType'`` for every string literal of ``source`` that is a registered
    op type (docstrings and f-string pieces that merely mention one are longer strings)."""
    return [
        f"{label}:{node.lineno}: {node.value!r}"
        for node in ast.walk(ast.parse(source, filename=label))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in REGISTRY
    ]


def test_the_scan_finds_an_op_type_literal() -> None:
    source = '"""Runs MaxPool."""\nKIND = "MaxPool"\nX = f"{KIND} or Conv"\n'
    assert _op_type_literals(source, "sample.py") == ["sample.py:2: 'MaxPool'"]


def test_sim_and_ir_name_no_op_type() -> None:
    found = [
        hit
        for sub in NO_OP_TYPES
        for path in _modules(sub)
        for hit in _op_type_literals(
            path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent))
        )
    ]
    assert not found, (
        "op types spelled outside fusiontune/ops (read them from the op's OpDef instead):\n"
        + "\n".join(found)
    )


# ---- the import graph of sim/ -------------------------------------------------------------------
def _imported_modules(path: Path, package: str) -> set[str]:
    """Modules of ``package`` that ``path`` imports anywhere (top level, inside functions,
    under ``TYPE_CHECKING``): ``from package import x`` counts as importing ``package.x``
    when that is a module."""
    out: set[str] = set()
    here = package.rsplit(".", 1)[-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from .x import y, from . import y
                base = f"{package}.{base}" if base else package
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        for name in names:
            if (
                name.startswith(package + ".")
                and (PACKAGE / here / f"{name.rsplit('.', 1)[-1]}.py").exists()
            ):
                out.add(name.rsplit(".", 1)[-1])
    return out


def _find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph (``[a, b, ..., a]``), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(edges.get(v, ())):
            if state.get(w) == 1:
                return [*path[path.index(w) :], w]
            if w not in state and (cycle := visit(w)) is not None:
                return cycle
        path.pop()
        state[v] = 2
        return None

    for v in sorted(edges):
        if v not in state and (cycle := visit(v)) is not None:
            return cycle
    return None


def test_find_cycle_spells_a_cycle_out() -> None:
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_sim_imports_run_one_way() -> None:
    """Every import among sim/ modules, including those inside functions, points down: the
    model files (rows, structure, needs, capacity, tiling, groupmodel, placement, cost,
    bounds) never import the executor files (runner, tiled_run, cores_run, execute, verify),
    and nothing imports back."""
    edges = {
        path.stem: _imported_modules(path, "fusiontune.sim") - {path.stem}
        for path in _modules("sim")
        if path.stem != "__init__"
    }
    cycle = _find_cycle(edges)
    assert cycle is None, "import cycle in fusiontune/sim: " + " -> ".join(cycle or ())
