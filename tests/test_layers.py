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
