"""Hypothesis strategies: random DAG graphs of mixed op classes, built with GraphBuilder.

Every tensor has the shape ``(1, C, S, S)`` so any op can read any earlier tensor; the
op menu covers every op class of DESIGN §3: LINEAR (FC-like Conv 1x1, padded Conv 3x3,
MatMul with a constant weight), AFFINE (inference BN, Mul by a per-channel constant),
STATS (training-mode BN), ELEMWISE (Relu), BINARY (Add of two activations), WINDOW
(MaxPool and AveragePool 3x3 / stride 1 / pad 1), LAYOUT (Reshape to the same shape)
and OPAQUE (MatMul of two activations), and the upsampling ops whose rows stream by spans:
a stride-1 ConvTranspose (LINEAR), and two-op kinds that go up by 2 (a stride-2 ConvTranspose
with output_padding, a nearest or a linear Resize) and back down (a pool or a stride-2 Conv).
``max_ops`` counts ops, not kinds. A two-input op often reads the previous two-input
op's inputs crossed over, the shape in which two convex groups can depend on each other
both ways. Tensors nobody reads become graph outputs, and
sometimes an inner tensor too (so fan-out to the graph output is exercised).

Usage::

    from strategies import dag_graphs  # pytest puts tests/ on sys.path

    @given(dag_graphs(max_ops=7))
    def test_something(graph): ...
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from hypothesis import strategies as st

from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph

CHANNELS = 4  # C: also the MatMul width, so (1, C, S, S) @ (S, S) keeps the shape
SIDE = 4  # S

UNARY_KINDS = (
    "conv1x1", "conv3x3", "matmul_const", "bn", "bn_train", "mul_const", "relu",
    "maxpool", "avgpool", "reshape", "deconv", "deconv_s2_pool", "resize_pool",
    "resize_linear_conv",
)  # fmt: skip
TWO_OP_KINDS = frozenset({"deconv_s2_pool", "resize_pool", "resize_linear_conv"})
"""Kinds that add two ops (up by 2, back down to ``SIDE``)."""
BINARY_KINDS = ("add", "matmul_act")
ALL_KINDS = UNARY_KINDS + BINARY_KINDS
# kinds as drawn by default: two-input Adds weighted up so diamonds and crossings are common
WEIGHTED_KINDS = (*ALL_KINDS, "add", "add", "add")


def _unary(b: GraphBuilder, kind: str, x: str) -> str:
    if kind == "conv1x1":
        return b.conv(x, CHANNELS, 1, pad=0)
    if kind == "conv3x3":
        return b.conv(x, CHANNELS, 3, pad=1)
    if kind == "matmul_const":
        return b.matmul(x, SIDE, bias=False)
    if kind == "bn":
        return b.bn(x)
    if kind == "bn_train":
        return b.bn(x, training=True)
    if kind == "mul_const":
        scale = b.const(b.fresh("scale"), np.ones((1, CHANNELS, 1, 1), dtype=np.float32))
        return b.op("Mul", [x, scale])
    if kind == "relu":
        return b.relu(x)
    if kind == "maxpool":
        return b.maxpool(x, 3, stride=1, pad=1)
    if kind == "avgpool":
        return b.avgpool(x, 3, stride=1, pad=1)
    if kind == "reshape":
        return b.reshape(x, (1, CHANNELS, SIDE, SIDE))
    if kind == "deconv":
        return b.conv_transpose(x, CHANNELS, 3, pad=1)
    if kind == "deconv_s2_pool":
        up = b.conv_transpose(x, CHANNELS, 3, stride=2, pad=1, output_padding=1)
        return b.maxpool(up, 2)
    if kind == "resize_pool":
        return b.avgpool(b.resize(x, 2), 2)
    if kind == "resize_linear_conv":
        up = b.resize(x, 2, mode="linear", coordinate_transformation_mode="half_pixel")
        return b.conv(up, CHANNELS, 3, stride=2, pad=1)
    raise ValueError(kind)


FUSABLE_UNARY = ("conv1x1", "conv3x3", "bn", "mul_const", "relu", "maxpool", "reshape")


@st.composite
def crossing_graphs(draw: st.DrawFn, max_extra: int = 2) -> Graph:
    """Two ops on one tensor whose outputs both feed two Adds, plus a few random ops after.

    ``x1, y1 = f(t), g(t); x2 = x1 + y1; y2 = y1 + x1``: the groups {x1, y2} and {y1, x2}
    are each convex, but together they form a cycle of groups.
    """
    seed = draw(st.integers(0, 2**16))
    b = GraphBuilder("crossing", seed=int(seed))
    t = b.input("x", (1, CHANNELS, SIDE, SIDE))
    if draw(st.booleans()):
        t = _unary(b, str(draw(st.sampled_from(FUSABLE_UNARY))), t)
    x1 = _unary(b, str(draw(st.sampled_from(FUSABLE_UNARY))), t)
    y1 = _unary(b, str(draw(st.sampled_from(FUSABLE_UNARY))), t)
    tensors = [b.add(x1, y1), b.add(y1, x1)]
    for _ in range(int(draw(st.integers(0, max_extra)))):
        a = tensors[draw(st.integers(0, len(tensors) - 1))]
        tensors.append(_unary(b, str(draw(st.sampled_from(FUSABLE_UNARY))), a))
    b.output(*tensors)
    return b.build()


@st.composite
def dag_graphs(
    draw: st.DrawFn,
    min_ops: int = 1,
    max_ops: int = 7,
    kinds: tuple[str, ...] = WEIGHTED_KINDS,
) -> Graph:
    """A random, linted DAG of ``min_ops``..``max_ops`` ops drawn from ``kinds``."""
    n_ops = draw(st.integers(min_ops, max_ops))
    seed = draw(st.integers(0, 2**16))
    b = GraphBuilder("random_dag", seed=int(seed))
    tensors = [b.input("x", (1, CHANNELS, SIDE, SIDE))]
    read: set[str] = set()
    last_pair: tuple[str, str] | None = None
    budget = int(n_ops)
    while budget > 0:
        kind = draw(st.sampled_from(kinds))
        if kind in TWO_OP_KINDS and budget < 2:
            kind = "deconv"
        budget -= 2 if kind in TWO_OP_KINDS else 1
        # prefer recent tensors (chains), sometimes reach back (fan-out, diamonds)
        pick = st.integers(0, len(tensors) - 1).map(lambda i: len(tensors) - 1 - i)
        a = tensors[draw(pick)]
        if kind in BINARY_KINDS:
            c = tensors[draw(pick)]
            if last_pair and draw(st.booleans()):
                c, a = last_pair  # cross the previous binary op's inputs (quotient cycles)
            y = b.add(a, c) if kind == "add" else b.op("MatMul", [a, c])
            read.update((a, c))
            last_pair = (a, c)
        else:
            y = _unary(b, str(kind), a)
            read.add(a)
        tensors.append(y)
    outputs = [t for t in tensors[1:] if t not in read]
    if draw(st.booleans()) and len(tensors) > 2:
        extra = tensors[draw(st.integers(1, len(tensors) - 1))]
        if extra not in outputs:
            outputs.append(extra)
    b.output(*outputs)
    return b.build()


def set_partitions(items: list[str]) -> Iterator[list[list[str]]]:
    """Every set partition of ``items`` (Bell(n) of them): the brute force that exact
    counting and the bounds are checked against."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in set_partitions(rest):
        for k in range(len(part)):
            yield [*part[:k], [first, *part[k]], *part[k + 1 :]]
        yield [[first], *part]


def conv_chain() -> Graph:
    """The many-core tests' two-stage chain: x (1,128,4,4) -> 1x1 conv 128->64 (2 column
    tiles) -> 1x1 conv 64->32 (1 tile)."""
    b = GraphBuilder("chain")
    x = b.input("x", (1, 128, 4, 4))
    a = b.conv(x, 64, 1, bias=False, name="conv1")
    b.conv(a, 32, 1, bias=False, name="conv2")
    return b.build()
