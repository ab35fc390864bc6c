"""The planner's imports, read from the source with ``ast`` (every import: top level, inside
functions, under ``TYPE_CHECKING``): no cycle among planner modules, no arrow up to the
simulator, the front ends, the search or the CLI; and no ONNX op type spelled in the planner or
in ``limits.py`` (op knowledge lives in the registry, ``fusiontune/ops``)."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import onnx.defs

from fusiontune.ops import KNOWN_OP_TYPES, REGISTRY

PACKAGE = Path(__file__).resolve().parent.parent / "fusiontune"
PLANNER = PACKAGE / "planner"
FORBIDDEN = ("fusiontune.sim", "fusiontune.frontend", "fusiontune.search", "fusiontune.cli")
OP_TYPE_NAMES = (
    frozenset(KNOWN_OP_TYPES)
    | frozenset(REGISTRY)
    | frozenset(s.name for s in onnx.defs.get_all_schemas() if s.domain == "")
)
"""Registered op types and every other ONNX op type (EyeLike, OneHot, Upsample, ...)."""


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imports(path: Path, package: str = "fusiontune.planner") -> list[tuple[str, int]]:
    """Every module ``path`` imports (``from a import b`` counts as ``a`` and ``a.b``), with
    its line; relative imports resolved against ``package`` (the file's)."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.append((base, node.lineno))
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def _planner_graph() -> dict[str, dict[str, int]]:
    """Planner module -> {planner module it imports: line}."""
    modules = {_module_name(p): p for p in sorted(PLANNER.glob("*.py"))}
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        graph[name] = {}
        for target, line in _imports(path):
            if target in modules and target != name and target != "fusiontune.planner":
                graph[name].setdefault(target, line)
    return graph


def _find_cycle(graph: dict[str, dict[str, int]]) -> list[str]:
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return []


def test_the_walk_sees_function_and_type_checking_imports(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from fusiontune.sim.cost import Metrics\n"
        "def f():\n    import fusiontune.search.api\n"
    )
    targets = {t for t, _ in _imports(src)}
    assert {"fusiontune.sim.cost", "fusiontune.search.api"} <= targets
    assert _find_cycle({"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b": 1}, "b": {}}) == []


def test_no_import_cycle_among_planner_modules() -> None:
    graph = _planner_graph()
    assert len(graph) >= 10  # the walk found the planner
    assert "fusiontune.planner.groups" in graph["fusiontune.planner.legality"]
    cycle = _find_cycle(graph)
    steps = [f"{a} (line {graph[a][b]})" for a, b in itertools.pairwise(cycle)]
    assert not cycle, "import cycle in the planner: " + " -> ".join([*steps, cycle[-1]])


def test_planner_imports_nothing_above_it() -> None:
    upward = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}"
        for path in sorted(PLANNER.glob("*.py"))
        for target, line in _imports(path)
        if any(target == f or target.startswith(f + ".") for f in FORBIDDEN)
    ]
    assert not upward, "planner imports above itself:\n" + "\n".join(upward)


def test_no_op_type_spelled_in_planner_or_limits() -> None:
    assert {"Conv", "Div", "Transpose", "Expand", "OneHot"} <= OP_TYPE_NAMES
    files = [*sorted(PLANNER.glob("*.py")), PACKAGE / "limits.py"]
    spelled = sorted(
        (str(path.relative_to(PACKAGE.parent)), node.lineno, node.value)
        for path in files
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in OP_TYPE_NAMES
    )
    spelled_text = [f"{path}:{line}: {value!r}" for path, line, value in spelled]
    assert not spelled, "op types spelled outside the registry:\n" + "\n".join(spelled_text)
