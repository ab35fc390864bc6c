"""The graph IR: lint(), the structural hash, immutability, op classes, sizes."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fusiontune.errors import GraphLintError
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph, Op, Tensor
from fusiontune.ir.opclass import OpClass

REPO = Path(__file__).resolve().parents[1]

# A small graph built the same way in this process and in subprocesses.
BUILD_SNIPPET = """
from fusiontune.ir.builder import GraphBuilder

def build(seed=0, c_out=4, stride=1, size=8):
    b = GraphBuilder("net", seed=seed)
    x = b.input("x", (1, 3, size, size))
    y = b.relu(b.bn(b.conv(x, c_out, 3, stride=stride)))
    y = b.maxpool(y, 2)
    y = b.gemm(b.flatten(y), 10)
    b.output(y)
    return b.build()
"""
namespace: dict = {}
exec(BUILD_SNIPPET, namespace)  # the very source the subprocesses run
build = namespace["build"]


def t(name: str, *shape: int, value: np.ndarray | None = None) -> Tensor:
    return Tensor(name, shape, value=value)


def lint_message(graph: Graph) -> str:
    with pytest.raises(GraphLintError) as info:
        graph.lint()
    return str(info.value)


# ---- lint ---------------------------------------------------------------------------------------
def test_lint_accepts_a_valid_graph() -> None:
    graph = build()
    assert graph.lint() is graph
    assert [op.op_type for op in graph.ops] == [
        "Conv", "BatchNormalization", "Relu", "MaxPool", "Flatten", "Gemm",
    ]  # fmt: skip


def test_lint_catches_a_cycle() -> None:
    tensors = {"x": t("x", 2, 3), "a": t("a", 2, 3), "b": t("b", 2, 3), "y": t("y", 2, 3)}
    ops = (
        Op("add", "Add", ("x", "b"), ("a",)),
        Op("relu", "Relu", ("a",), ("b",)),
        Op("out", "Relu", ("b",), ("y",)),
    )
    graph = Graph("cyc", tensors, ops, ("x",), ("y",))
    assert lint_message(graph) == (
        "graph 'cyc': op 'add' reads 'b', which is produced later (cycle or ops out of order)"
    )


def test_lint_catches_a_tensor_produced_twice() -> None:
    tensors = {"x": t("x", 2, 3), "y": t("y", 2, 3)}
    ops = (Op("r1", "Relu", ("x",), ("y",)), Op("r2", "Sigmoid", ("x",), ("y",)))
    graph = Graph("twice", tensors, ops, ("x",), ("y",))
    assert lint_message(graph) == ("graph 'twice': tensor 'y' is produced twice (by 'r1' and 'r2')")


def test_lint_catches_a_shape_mismatch() -> None:
    w = np.ones((4, 3), np.float32)
    tensors = {"x": t("x", 2, 3), "w": t("w", 4, 3, value=w), "y": t("y", 2, 3)}
    graph = Graph("bad", tensors, (Op("fc", "Gemm", ("x", "w"), ("y",), {"transB": 1}),),
                  ("x",), ("y",))  # fmt: skip
    assert lint_message(graph) == (
        "graph 'bad': op 'fc' (Gemm) output 'y' has shape (2, 3), shape inference gives (2, 4)"
    )


def test_lint_catches_missing_and_overwritten_tensors() -> None:
    tensors = {"x": t("x", 2), "c": t("c", 2, value=np.ones(2, np.float32)), "y": t("y", 2)}
    ops = (Op("a", "Add", ("x", "ghost"), ("y",)), Op("b", "Relu", ("y",), ("c",)))
    graph = Graph("g", tensors, ops, ("x",), ("y", "z"))
    assert lint_message(graph) == (
        "graph 'g': op 'a' reads 'ghost', which is never produced; "
        "op 'b' overwrites input/constant 'c'; graph output 'z' is never produced"
    )


def test_lint_reports_shape_errors_naming_the_op() -> None:
    tensors = {"a": t("a", 2, 3), "b": t("b", 4, 5), "y": t("y", 2, 5)}
    graph = Graph("g", tensors, (Op("m", "MatMul", ("a", "b"), ("y",)),), ("a", "b"), ("y",))
    assert lint_message(graph) == ("graph 'g': op 'm' (MatMul): inner dimensions differ (3 vs 4)")


# ---- structural hash ----------------------------------------------------------------------------
def test_hash_is_stable_across_processes() -> None:
    script = BUILD_SNIPPET + "\nprint(build().structural_hash)\n"
    hashes = set()
    for seed in ("1", "2"):  # different str-hash randomization in each process
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True,
            check=True, timeout=120,
        )  # fmt: skip
        hashes.add(out.stdout.strip())
    assert hashes == {build().structural_hash}
    assert len(build().structural_hash) == 64


def test_hash_changes_with_shape_attribute_and_weights() -> None:
    base = build()
    assert build().structural_hash == base.structural_hash  # same seed, same graph
    assert build(size=10).structural_hash != base.structural_hash  # input shape
    assert build(stride=2).structural_hash != base.structural_hash  # attribute
    assert build(seed=1).structural_hash != base.structural_hash  # weight values
    # one weight element changed, nothing else
    w = base.tensors["conv.weight"]
    value = w.value.copy()
    value[0, 0, 0, 0] += 1.0
    tensors = dict(base.tensors)
    tensors[w.name] = Tensor(w.name, w.shape, w.dtype, value)
    assert base.replace(tensors=tensors).structural_hash != base.structural_hash
    # one attribute changed on an op whose shape does not depend on it
    ops = [
        dataclasses.replace(op, attrs={**op.attrs, "epsilon": 1e-3}) if op.op_type ==
        "BatchNormalization" else op for op in base.ops
    ]  # fmt: skip
    changed = base.replace(ops=tuple(ops)).lint()
    assert changed.structural_hash != base.structural_hash


# ---- immutability -------------------------------------------------------------------------------
def test_graph_is_immutable() -> None:
    graph = build()
    with pytest.raises(dataclasses.FrozenInstanceError):
        graph.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        graph.tensors["x"] = t("x", 1)  # type: ignore[index]
    with pytest.raises(AttributeError):
        graph.ops.append(graph.ops[0])  # type: ignore[attr-defined]
    op = graph.ops[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.op_class = OpClass.OPAQUE  # type: ignore[misc]
    with pytest.raises(TypeError):
        op.attrs["group"] = 2  # type: ignore[index]
    with pytest.raises(ValueError, match="read-only"):
        graph.tensors["conv.weight"].value[0, 0, 0, 0] = 5.0  # type: ignore[index]


def test_tensor_value_is_a_private_copy() -> None:
    base = np.ones(3, np.float32)
    view = base.view()
    view.flags.writeable = False
    tensor = Tensor("w", (3,), value=view)
    base[0] = 7.0
    assert tensor.value.tolist() == [1.0, 1.0, 1.0]
    writable = np.zeros(2, np.float32)
    tensor = Tensor("v", (2,), value=writable)
    writable[1] = 3.0
    assert tensor.value.tolist() == [0.0, 0.0]


# ---- maps, classes, sizes ------------------------------------------------------------------------
def test_producers_consumers_and_sizes() -> None:
    graph = build()
    assert graph.producer("conv").name == "conv"
    assert [op.name for op in graph.consumers("conv")] == ["bn"]
    assert graph.predecessors("bn") == ("conv",)
    assert graph.successors("conv") == ("bn",)
    assert {op.name: op.op_class for op in graph.ops} == {
        "conv": OpClass.LINEAR, "bn": OpClass.AFFINE, "relu": OpClass.ELEMWISE,
        "maxpool": OpClass.WINDOW, "flatten": OpClass.LAYOUT, "fc": OpClass.LINEAR,
    }  # fmt: skip
    # conv: 4*8*8 outputs x 27 MACs; fc: 10 outputs x 64 inputs
    assert graph.total_macs == 4 * 8 * 8 * 27 + 10 * 64
    # conv 4*3*3*3 + 4, bn 4*4, fc 10*64 + 10
    assert graph.total_params == 108 + 4 + 16 + 640 + 10


def test_builder_training_bn_is_stats() -> None:
    b = GraphBuilder("t")
    y = b.bn(b.input("x", (2, 3, 4, 4)), training=True)
    b.output(y)
    assert b.build().op(y).op_class is OpClass.STATS
