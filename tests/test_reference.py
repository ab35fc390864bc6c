"""Reference executor vs onnxruntime, op by op and attribute by attribute.

Every test builds a small graph, exports it with ``to_onnx``, runs onnxruntime (CPU, graph
optimizations off) and compares it with ``reference_run``.

Tolerance: relative error ``max|ref - ort| / max|ort|`` <= 1e-5 (REL_TOL), float32 on both
sides; shapes and dtypes must be equal. Where onnxruntime cannot serve as the oracle it is
said in the test's docstring and an independent float64 numpy formula is used instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fusiontune.errors import FusiontuneError, ShapeError
from fusiontune.export.onnx_export import to_onnx
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph, Op, Tensor
from fusiontune.ir.opclass import OpClass
from fusiontune.ops import REGISTRY, infer_op_shapes
from fusiontune.reference import random_inputs, reference_run, run_op

REL_TOL = 1e-5  # max|ref - ort| / max|ort|, float32
F64_TOL = 1e-5  # same metric against a float64 numpy formula
INT64_MIN = -(2**63)
Shape = tuple[int, ...]


# ---- helpers ------------------------------------------------------------------------------
def ort_run(graph: Graph, feeds: dict[str, np.ndarray], opset: int = 21) -> dict[str, np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(
        to_onnx(graph, opset=opset).SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )
    return dict(zip(graph.outputs, sess.run(list(graph.outputs), feeds)))


def rel_err(ref: np.ndarray, want: np.ndarray) -> float:
    if ref.size == 0:
        return 0.0
    diff = np.abs(ref.astype(np.float64) - want.astype(np.float64))
    scale = float(np.max(np.abs(want.astype(np.float64))))
    return float(np.max(diff)) / (scale if scale > 0 else 1.0)


def check_vs_ort(
    graph: Graph, feeds: dict[str, np.ndarray] | None = None, opset: int = 21
) -> float:
    """Assert reference == onnxruntime on every graph output; return the largest error."""
    feeds = random_inputs(graph, seed=1) if feeds is None else feeds
    ref = reference_run(graph, feeds)
    want = ort_run(graph, feeds, opset)
    worst = 0.0
    for name in graph.outputs:
        assert ref[name].shape == want[name].shape, name
        assert ref[name].dtype == want[name].dtype, (name, ref[name].dtype, want[name].dtype)
        err = rel_err(ref[name], want[name])
        assert err <= REL_TOL, f"{name}: relative error {err:.3g} > {REL_TOL}"
        worst = max(worst, err)
    return worst


OpCase = tuple[Graph, dict[str, np.ndarray]]
"""A one-op graph and its feeds (what :func:`single_op` builds)."""


@dataclass(frozen=True)
class A:
    """An activation input (becomes a graph input fed with ``value``)."""

    value: np.ndarray


@dataclass(frozen=True)
class C:
    """A constant input (an initializer)."""

    value: Any


def single_op(
    op_type: str,
    ins: list[A | C | None],
    attrs: dict[str, Any] | None = None,
    out_shapes: list[tuple[int, ...]] | None = None,
    out_dtypes: list[str] | None = None,
    n_outputs: int = 1,
) -> OpCase:
    """A one-op graph; output shapes come from ``infer_op_shapes`` unless given by hand."""
    tensors: dict[str, Tensor] = {}
    names: list[str] = []
    feeds: dict[str, np.ndarray] = {}
    for i, spec in enumerate(ins):
        if spec is None:
            names.append("")
            continue
        name = f"in{i}"
        value = np.asarray(spec.value)
        const = value if isinstance(spec, C) else None
        tensors[name] = Tensor(name, value.shape, str(value.dtype), const)
        if isinstance(spec, A):
            feeds[name] = value
        names.append(name)
    outs = ["y"] + [f"y{i}" for i in range(1, n_outputs)]
    op = Op("op", op_type, tuple(names), tuple(outs), attrs or {})
    shapes = out_shapes or infer_op_shapes(op, tensors)
    dtypes = out_dtypes or ["float32"] * n_outputs
    for name, shape, dtype in zip(outs, shapes, dtypes):
        assert shape is not None, f"give the shape of {op_type} by hand"
        tensors[name] = Tensor(name, tuple(shape), dtype)
    graph = Graph(op_type, tensors, (op,), tuple(feeds), tuple(outs)).lint()
    return graph, feeds


def rnd(*shape: int, seed: int = 0, positive: bool = False) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return np.abs(x) + np.float32(0.5) if positive else x


# ---- Conv ---------------------------------------------------------------------------------
CONV_CASES: dict[str, tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = {
    "k3_p1": ((1, 4, 8, 8), (6, 4, 3, 3), {"pads": (1, 1, 1, 1)}),
    "k3_s2_p0": ((1, 4, 9, 9), (6, 4, 3, 3), {"strides": (2, 2)}),
    "k3_asym_pads": ((1, 3, 7, 8), (5, 3, 3, 3), {"pads": (0, 1, 2, 0)}),
    "k3_dil2": ((1, 3, 10, 10), (4, 3, 3, 3), {"pads": (2, 2, 2, 2), "dilations": (2, 2)}),
    "k5_s2_p2_batch2": ((2, 3, 11, 11), (4, 3, 5, 5), {"strides": (2, 2), "pads": (2,) * 4}),
    "k1x3_rect": ((1, 4, 6, 7), (3, 4, 1, 3), {"strides": (1, 2), "pads": (0, 1, 0, 1)}),
    "group2": ((1, 4, 6, 6), (6, 2, 3, 3), {"group": 2, "pads": (1,) * 4}),
    "depthwise": ((1, 8, 7, 7), (8, 1, 3, 3), {"group": 8, "pads": (1,) * 4, "strides": (2, 2)}),
    "depthwise_x2": ((1, 4, 6, 6), (8, 1, 3, 3), {"group": 4, "pads": (1,) * 4}),
    "same_upper_s2": ((1, 3, 7, 8), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": (2, 2)}),
    "same_lower_s2": ((1, 3, 7, 8), (4, 3, 4, 4), {"auto_pad": "SAME_LOWER", "strides": (2, 2)}),
    "valid": ((1, 3, 7, 8), (4, 3, 3, 2), {"auto_pad": "VALID"}),
    "pointwise": ((1, 16, 5, 5), (8, 16, 1, 1), {}),
    "conv1d": ((2, 3, 12), (4, 3, 3), {"pads": (1, 2), "strides": (2,)}),
    "conv3d": ((1, 2, 5, 6, 5), (3, 2, 3, 3, 3), {"pads": (1,) * 6}),
}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv(case: str, bias: bool) -> None:
    check_vs_ort(*conv_case(case, bias))


def conv_case(case: str, bias: bool = True) -> OpCase:
    x_shape, w_shape, attrs = CONV_CASES[case]
    ins: list[A | C | None] = [A(rnd(*x_shape)), C(rnd(*w_shape, seed=1))]
    if bias:
        ins.append(C(rnd(w_shape[0], seed=2)))
    return single_op("Conv", ins, {"kernel_shape": w_shape[2:], **attrs})


CONV_TRANSPOSE_CASES: dict[str, tuple[Shape, Shape, dict[str, Any], Shape]] = {
    "k3_s1": ((1, 4, 5, 5), (4, 3, 3, 3), {}, (1, 3, 7, 7)),
    "k4_s2_p1": ((1, 4, 5, 6), (4, 3, 4, 4), {"strides": (2, 2), "pads": (1,) * 4}, (1, 3, 10, 12)),
    "k3_s2_outpad": ((2, 2, 4, 4), (2, 3, 3, 3), {"strides": (2, 2), "pads": (1,) * 4,
                                                   "output_padding": (1, 1)}, (2, 3, 8, 8)),
    "group2_dil2": ((1, 4, 5, 5), (4, 1, 3, 3), {"group": 2, "dilations": (2, 2),
                                                  "pads": (1, 0, 2, 1)}, (1, 2, 6, 8)),
    "conv1d_s3": ((1, 2, 6), (2, 3, 2), {"strides": (3,)}, (1, 3, 17)),
    "same_upper": ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": (2, 3), "auto_pad": "SAME_UPPER"},
                   (1, 3, 8, 15)),
    "same_lower_outpad": ((1, 2, 4, 5), (2, 3, 4, 3), {"strides": (2, 3), "auto_pad": "SAME_LOWER",
                                                        "output_padding": (1, 0)}, (1, 3, 8, 15)),
    "valid": ((1, 2, 4, 5), (2, 3, 3, 2), {"strides": (2, 1), "auto_pad": "VALID"}, (1, 3, 9, 6)),
    "pads_crop": ((1, 2, 4, 5), (2, 3, 2, 3), {"strides": (2, 2), "pads": (3, 2, 2, 4)},
                  (1, 3, 3, 5)),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CONV_TRANSPOSE_CASES))
def test_conv_transpose(case: str) -> None:
    """ConvTranspose (LINEAR; band kernel checked in tests/test_upsampling.py); shapes by hand."""
    check_vs_ort(*conv_transpose_case(case))


def conv_transpose_case(case: str) -> OpCase:
    x_shape, w_shape, attrs, out_shape = CONV_TRANSPOSE_CASES[case]
    ins: list[A | C | None] = [A(rnd(*x_shape)), C(rnd(*w_shape, seed=1))]
    ins.append(C(rnd(out_shape[1], seed=2)))
    return single_op("ConvTranspose", ins, attrs, [out_shape])


@st.composite
def window_ops(draw: st.DrawFn) -> tuple[str, Shape, Shape, dict[str, Any]]:
    """A random Conv/MaxPool/AveragePool geometry that ONNX accepts."""
    op_type = draw(st.sampled_from(["Conv", "MaxPool", "AveragePool"]))
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    eff = [di * (ki - 1) + 1 for ki, di in zip(k, d)]
    pads = tuple(draw(st.integers(0, ki - 1)) for ki in k + k)  # a pad smaller than the kernel
    size = (draw(st.integers(eff[0], 9)), draw(st.integers(eff[1], 9)))
    attrs: dict[str, Any] = {"kernel_shape": k, "strides": s, "dilations": d, "pads": pads}
    if op_type == "Conv":
        group = draw(st.sampled_from([1, 2]))
        c_out = group * draw(st.integers(1, 3))
        attrs["group"] = group
        return op_type, (1, 2 * group, *size), (c_out, 2, *k), attrs
    attrs["ceil_mode"] = draw(st.integers(0, 1))
    if op_type == "AveragePool":
        attrs["count_include_pad"] = draw(st.integers(0, 1))
    return op_type, (2, 3, *size), (), attrs


@settings(max_examples=60, deadline=None, derandomize=True)
@given(window_ops())
def test_random_window_geometry(
    case: tuple[str, tuple[int, ...], tuple[int, ...], dict[str, Any]],
) -> None:
    """Random kernels, strides, dilations, pads, groups, ceil_mode, count_include_pad."""
    op_type, x_shape, w_shape, attrs = case
    ins: list[A | C | None] = [A(rnd(*x_shape))]
    if op_type == "Conv":
        ins.append(C(rnd(*w_shape, seed=1)))
    try:
        graph, feeds = single_op(op_type, ins, attrs)
    except ShapeError:
        assume(False)  # window larger than the padded input: invalid in ONNX too
    check_vs_ort(graph, feeds)


def test_conv_hand_computed() -> None:
    """A 1-channel 3x3 input, 2x2 all-ones kernel, stride 1, pads 0: window sums."""
    x = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    graph, feeds = single_op("Conv", [A(x), C(np.ones((1, 1, 2, 2), np.float32))])
    y = reference_run(graph, feeds)["y"]
    assert y.tolist() == [[[[8.0, 12.0], [20.0, 24.0]]]]


# ---- pooling ------------------------------------------------------------------------------
POOL_CASES: dict[str, tuple[str, tuple[int, ...], dict[str, Any]]] = {
    "max_k3_s2_p1": ("MaxPool", (1, 3, 8, 8), {"kernel_shape": (3, 3), "strides": (2, 2),
                                              "pads": (1,) * 4}),
    "max_ceil": ("MaxPool", (1, 2, 8, 8), {"kernel_shape": (3, 3), "strides": (2, 2),
                                          "ceil_mode": 1}),
    "max_ceil_pads": ("MaxPool", (1, 2, 9, 10), {"kernel_shape": (3, 3), "strides": (2, 2),
                                                "pads": (1, 0, 1, 0), "ceil_mode": 1}),
    "max_dil2": ("MaxPool", (1, 2, 9, 9), {"kernel_shape": (2, 2), "dilations": (2, 2)}),
    "max_same_upper": ("MaxPool", (1, 2, 7, 7), {"kernel_shape": (3, 3), "strides": (2, 2),
                                                "auto_pad": "SAME_UPPER"}),
    "max_1d": ("MaxPool", (2, 3, 11), {"kernel_shape": (3,), "strides": (2,), "pads": (1, 1)}),
    "avg_k2": ("AveragePool", (1, 3, 8, 8), {"kernel_shape": (2, 2), "strides": (2, 2)}),
    "avg_pads_exclude": ("AveragePool", (1, 3, 7, 7), {"kernel_shape": (3, 3), "strides": (2, 2),
                                                      "pads": (1,) * 4}),
    "avg_pads_include": ("AveragePool", (1, 3, 7, 7), {"kernel_shape": (3, 3), "strides": (2, 2),
                                                      "pads": (1,) * 4, "count_include_pad": 1}),
    "avg_ceil_exclude": ("AveragePool", (1, 2, 8, 8), {"kernel_shape": (3, 3), "strides": (2, 2),
                                                      "ceil_mode": 1}),
    "avg_ceil_include_pads": ("AveragePool", (1, 2, 8, 9), {
        "kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 0, 1, 1), "ceil_mode": 1,
        "count_include_pad": 1}),
    "avg_same_lower": ("AveragePool", (1, 2, 6, 7), {"kernel_shape": (3, 3), "strides": (2, 2),
                                                    "auto_pad": "SAME_LOWER"}),
    "avg_dil2": ("AveragePool", (1, 2, 9, 9), {"kernel_shape": (2, 2), "dilations": (2, 2),
                                              "pads": (1,) * 4}),
    "lp_p2": ("LpPool", (1, 2, 6, 6), {"kernel_shape": (2, 2), "strides": (2, 2)}),
    "lp_p3_pads": ("LpPool", (1, 2, 6, 6), {"kernel_shape": (3, 3), "p": 3, "pads": (1,) * 4}),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(POOL_CASES))
def test_pool(case: str) -> None:
    check_vs_ort(*pool_case(case))


def pool_case(case: str) -> OpCase:
    op_type, shape, attrs = POOL_CASES[case]
    return single_op(op_type, [A(rnd(*shape))], attrs)


def test_ceil_mode_adds_a_window() -> None:
    """8x8, k3 s2: floor gives 3x3 windows, ceil_mode gives 4x4 (last window clipped)."""
    floor, _ = single_op(
        "MaxPool", [A(rnd(1, 1, 8, 8))], {"kernel_shape": (3, 3), "strides": (2, 2)}
    )
    ceil, feeds = single_op(
        "MaxPool", [A(rnd(1, 1, 8, 8))], {"kernel_shape": (3, 3), "strides": (2, 2), "ceil_mode": 1}
    )
    assert floor.tensors["y"].shape == (1, 1, 3, 3)
    y = reference_run(ceil, feeds)["y"]
    assert y.shape == (1, 1, 4, 4)
    assert y[0, 0, 3, 3] == feeds["in0"][0, 0, 6:8, 6:8].max()


@pytest.mark.parametrize("op_type", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5, 6), (1, 4, 7)])
def test_global_pool(op_type: str, shape: tuple[int, ...]) -> None:
    graph, feeds = single_op(op_type, [A(rnd(*shape))])
    check_vs_ort(graph, feeds)


# ---- Gemm and MatMul ----------------------------------------------------------------------
@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (5,), (1, 5), (3, 5), (3, 1)])
def test_gemm(trans_a: int, trans_b: int, c_shape: tuple[int, ...] | None) -> None:
    graph, feeds = gemm_case(trans_a, trans_b, c_shape)
    assert graph.tensors["y"].shape == (3, 5)
    check_vs_ort(graph, feeds)


def gemm_case(trans_a: int, trans_b: int, c_shape: tuple[int, ...] | None) -> OpCase:
    m, k, n = 3, 4, 5
    a = rnd(*((k, m) if trans_a else (m, k)))
    b = rnd(*((n, k) if trans_b else (k, n)), seed=1)
    ins: list[A | C | None] = [A(a), C(b)]
    if c_shape is not None:
        ins.append(C(rnd(*c_shape, seed=2)))
    attrs = {"transA": trans_a, "transB": trans_b, "alpha": 0.5, "beta": 2.0}
    return single_op("Gemm", ins, attrs)


MATMUL_CASES = {
    "2x2": ((3, 4), (4, 5)),
    "3x2": ((2, 3, 4), (4, 5)),
    "4x2": ((2, 2, 3, 4), (4, 5)),
    "bcast_batch": ((2, 1, 3, 4), (5, 4, 6)),
    "vec_mat": ((4,), (4, 3)),
    "mat_vec": ((2, 3, 4), (4,)),
}


@pytest.mark.parametrize("case", sorted(MATMUL_CASES))
@pytest.mark.parametrize("weight_const", [True, False])
def test_matmul(case: str, weight_const: bool) -> None:
    check_vs_ort(*matmul_case(case, weight_const))


def matmul_case(case: str, weight_const: bool) -> OpCase:
    a_shape, b_shape = MATMUL_CASES[case]
    b = rnd(*b_shape, seed=1)
    return single_op("MatMul", [A(rnd(*a_shape)), C(b) if weight_const else A(b)])


# ---- layout -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("target", "expected"),
    [((0, -1), (2, 60)), ((-1, 5, 0), (24, 5, 1)), ((2, 3, 0, 4, 5), (2, 3, 1, 4, 5)),
     ((-1,), (120,))],
)  # fmt: skip
def test_reshape(target: tuple[int, ...], expected: tuple[int, ...]) -> None:
    x = rnd(2, 3, 1, 20)
    graph, feeds = single_op("Reshape", [A(x), C(np.asarray(target, np.int64))])
    assert graph.tensors["y"].shape == expected
    check_vs_ort(graph, feeds)


@pytest.mark.parametrize(
    ("axis", "expected"), [(0, (1, 120)), (1, (2, 60)), (2, (6, 20)), (-1, (24, 5)), (4, (120, 1))]
)
def test_flatten(axis: int, expected: tuple[int, int]) -> None:
    graph, feeds = single_op("Flatten", [A(rnd(2, 3, 4, 5))], {"axis": axis})
    assert graph.tensors["y"].shape == expected
    check_vs_ort(graph, feeds)


@pytest.mark.parametrize(
    ("op_type", "shape", "axes"),
    [("Squeeze", (1, 3, 1, 4), (0, 2)), ("Squeeze", (1, 3, 1, 4), (-2,)),
     ("Squeeze", (1, 3, 1, 4), None), ("Unsqueeze", (3, 4), (0, -1)),
     ("Unsqueeze", (3, 4), (1,))],
)  # fmt: skip
def test_squeeze_unsqueeze(
    op_type: str, shape: tuple[int, ...], axes: tuple[int, ...] | None
) -> None:
    ins: list[A | C | None] = [A(rnd(*shape))]
    if axes is not None:
        ins.append(C(np.asarray(axes, np.int64)))
    graph, feeds = single_op(op_type, ins)
    check_vs_ort(graph, feeds)


@pytest.mark.parametrize("perm", [None, (0, 2, 3, 1), (3, 1, 0, 2)])
def test_transpose(perm: tuple[int, ...] | None) -> None:
    graph, feeds = single_op(
        "Transpose", [A(rnd(2, 3, 4, 5))], {} if perm is None else {"perm": perm}
    )
    check_vs_ort(graph, feeds)


# ---- normalizations -----------------------------------------------------------------------
def bn_params(c: int) -> list[A | C | None]:
    rng = np.random.default_rng(3)
    return [C((1 + 0.1 * rng.standard_normal(c)).astype(np.float32)),
            C((0.1 * rng.standard_normal(c)).astype(np.float32)),
            C((0.1 * rng.standard_normal(c)).astype(np.float32)),
            C((0.5 + rng.random(c)).astype(np.float32))]  # fmt: skip


@pytest.mark.parametrize("shape", [(2, 3, 5, 5), (4, 6), (2, 3, 7)])
def test_batchnorm_inference(shape: tuple[int, ...]) -> None:
    graph, feeds = single_op("BatchNormalization", [A(rnd(*shape)), *bn_params(shape[1])],
                             {"epsilon": 1e-3})  # fmt: skip
    check_vs_ort(graph, feeds)


def onnx_reference_run(
    graph: Graph, feeds: dict[str, np.ndarray], opset: int = 21
) -> dict[str, np.ndarray]:
    """``onnx.reference`` (ONNX's own Python evaluator) on the model ``to_onnx`` writes."""
    from onnx.reference import ReferenceEvaluator

    outs = ReferenceEvaluator(to_onnx(graph, opset=opset)).run(list(graph.outputs), feeds)
    return dict(zip(graph.outputs, outs))


@pytest.mark.parametrize("n_outputs", [1, 3])
@pytest.mark.parametrize("shape", [(2, 3, 5, 5), (8, 4)])
def test_batchnorm_training(n_outputs: int, shape: tuple[int, ...]) -> None:
    """training_mode=1 (the BatchNormalization-14/15 attribute form) vs onnx.reference.

    Oracle: ``onnx.reference``'s BatchNormalization-14 kernel, which is the ONNX
    specification: batch mean and biased variance over N and the spatial dims; running =
    input * momentum + batch * (1 - momentum). Not onnxruntime: an earlier version of this
    test found its CPU kernel off for this form; onnxruntime 1.32 agrees with the spec here
    (relative error 8e-8), but the suite allows onnxruntime >= 1.17. The opset 9-13 form is
    checked against onnxruntime below.
    """
    x = rnd(*shape) * np.float32(3.0) + np.float32(1.0)
    params = bn_params(shape[1])
    attrs = {"training_mode": 1, "momentum": 0.8, "epsilon": 1e-5}
    graph, feeds = single_op("BatchNormalization", [A(x), *params], attrs, n_outputs=n_outputs)
    assert graph.ops[0].op_class is OpClass.STATS
    out = reference_run(graph, feeds)
    want = onnx_reference_run(graph, feeds)
    for name in graph.outputs:
        assert out[name].dtype == np.float32
        assert rel_err(out[name], want[name]) <= REL_TOL, name
    bias = np.asarray(params[1].value, np.float64)
    assert abs(float(out["y"].mean()) - float(bias.mean())) < 1e-5  # normalized: mean = beta


@pytest.mark.parametrize("shape", [(2, 3, 5, 5), (8, 4), (2, 3, 7)])
def test_batchnorm_training_opset9_form(shape: tuple[int, ...]) -> None:
    """The opset 9-13 form (no training_mode attribute, five outputs) is training mode.

    It loads as STATS and computes batch statistics. Oracle: onnxruntime on the model
    exported at opset 13 (its BatchNormalization-9 kernel; ``saved_var`` is its inverse
    standard deviation). One output at opset 13 is inference (running statistics).
    """
    x = rnd(*shape) * np.float32(3.0) + np.float32(1.0)
    ins = [A(x), *bn_params(shape[1])]
    graph, feeds = single_op("BatchNormalization", ins, {"momentum": 0.8}, n_outputs=5)
    assert graph.ops[0].op_class is OpClass.STATS
    node = to_onnx(graph, opset=13).graph.node[0]
    assert len(node.output) == 5 and [a.name for a in node.attribute] == ["momentum"]
    check_vs_ort(graph, feeds, opset=13)
    inference, feeds = single_op("BatchNormalization", ins, {"training_mode": 0})
    assert inference.ops[0].op_class is OpClass.AFFINE
    check_vs_ort(inference, feeds, opset=13)  # the attribute is dropped for opset 13


def test_batchnorm_training_exports_three_outputs() -> None:
    """A one-output training BN exports with the three outputs ONNX >= 14 requires."""
    b = GraphBuilder("bn_train")
    b.bn(b.input("x", (2, 3, 4, 4)), training=True)
    model = to_onnx(b.build())
    assert len(model.graph.node[0].output) == 3
    assert model.graph.node[0].output[0] == "bn"


@pytest.mark.parametrize(("axis", "with_bias"), [(-1, True), (-2, True), (1, False), (2, True)])
def test_layernorm(axis: int, with_bias: bool) -> None:
    shape = (2, 3, 4, 5)
    norm_shape = shape[axis % 4 :]
    ins: list[A | C | None] = [A(rnd(*shape) * 2 + 1), C(rnd(*norm_shape, seed=4))]
    if with_bias:
        ins.append(C(rnd(*norm_shape, seed=5)))
    graph, feeds = single_op("LayerNormalization", ins, {"axis": axis, "epsilon": 1e-5})
    check_vs_ort(graph, feeds)


@pytest.mark.parametrize("opset", [21, 23])  # 21: its ONNX function body; 23: the op itself
@pytest.mark.parametrize("axis", [-1, -2, 1])
def test_rms_normalization(axis: int, opset: int) -> None:
    shape = (2, 3, 4, 5)
    ins: list[A | C | None] = [A(rnd(*shape) * 2 + 1), C(rnd(*shape[axis % 4 :], seed=4))]
    graph, feeds = single_op("RMSNormalization", ins, {"axis": axis, "epsilon": 1e-5})
    check_vs_ort(graph, feeds, opset)


def test_layernorm_mean_and_inv_std_outputs() -> None:
    ins: list[A | C | None] = [A(rnd(3, 8) * 2 + 1), C(rnd(8, seed=4)), C(rnd(8, seed=5))]
    graph, feeds = single_op("LayerNormalization", ins, {"axis": -1}, n_outputs=3)
    assert graph.tensors["y1"].shape == (3, 1)
    check_vs_ort(graph, feeds)


def test_instance_and_group_norm() -> None:
    x = rnd(2, 6, 4, 5) * 2 + 1
    inst, feeds = single_op("InstanceNormalization", [A(x), C(rnd(6, seed=1)), C(rnd(6, seed=2))],
                            {"epsilon": 1e-5})  # fmt: skip
    check_vs_ort(inst, feeds)
    group, feeds = single_op("GroupNormalization", [A(x), C(rnd(6, seed=1)), C(rnd(6, seed=2))],
                             {"num_groups": 3, "epsilon": 1e-5})  # fmt: skip
    check_vs_ort(group, feeds)


@pytest.mark.parametrize("axis", [-1, 1, 0])
@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization(axis: int, p: int) -> None:
    graph, feeds = single_op("LpNormalization", [A(rnd(3, 4, 5))], {"axis": axis, "p": p})
    check_vs_ort(graph, feeds)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax(op_type: str, axis: int) -> None:
    graph, feeds = single_op(op_type, [A(rnd(2, 3, 4) * 5)], {"axis": axis})
    check_vs_ort(graph, feeds)


REDUCE_TYPES = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"]  # fmt: skip


@pytest.mark.parametrize("op_type", REDUCE_TYPES)
@pytest.mark.parametrize(("axes", "keepdims"), [((1,), 1), ((0, -1), 0), (None, 1), (None, 0)])
def test_reduce_axes_input(op_type: str, axes: tuple[int, ...] | None, keepdims: int) -> None:
    check_vs_ort(*reduce_case(op_type, axes, keepdims))


def reduce_case(op_type: str, axes: tuple[int, ...] | None, keepdims: int) -> OpCase:
    ins: list[A | C | None] = [A(rnd(2, 3, 4, positive=op_type == "ReduceProd"))]
    if axes is not None:
        ins.append(C(np.asarray(axes, np.int64)))
    return single_op(op_type, ins, {"keepdims": keepdims})


@pytest.mark.parametrize("op_type", ["ReduceMean", "ReduceSum"])
def test_reduce_axes_attribute_is_exported_as_input(op_type: str) -> None:
    """An opset-11-style ``axes`` attribute (as the importer keeps it) exports for opset 21."""
    graph, feeds = single_op(op_type, [A(rnd(2, 3, 4))], {"axes": (2,), "keepdims": 0})
    assert graph.tensors["y"].shape == (2, 3)
    node = to_onnx(graph).graph.node[0]
    assert [a.name for a in node.attribute] == ["keepdims"]
    assert len(node.input) == 2
    check_vs_ort(graph, feeds)


def test_reduce_noop_with_empty_axes() -> None:
    graph, feeds = single_op("ReduceSum", [A(rnd(2, 3))], {"noop_with_empty_axes": 1})
    out = reference_run(graph, feeds)["y"]
    np.testing.assert_array_equal(out, feeds["in0"])
    check_vs_ort(graph, feeds)


# ---- element-wise -------------------------------------------------------------------------
POSITIVE_ONLY = {"Sqrt", "Log"}
UNARY_CASES: list[tuple[str, dict[str, Any]]] = [
    ("Relu", {}), ("LeakyRelu", {}), ("LeakyRelu", {"alpha": 0.2}), ("Sigmoid", {}),
    ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSwish", {}),
    ("Tanh", {}), ("Gelu", {}), ("Gelu", {"approximate": "tanh"}), ("Erf", {}), ("Elu", {}),
    ("Elu", {"alpha": 0.5}), ("Selu", {}), ("Selu", {"alpha": 1.5, "gamma": 1.1}), ("Celu", {}),
    ("Celu", {"alpha": 2.0}), ("Softplus", {}), ("Softsign", {}), ("Mish", {}),
    ("ThresholdedRelu", {}), ("ThresholdedRelu", {"alpha": 0.5}), ("Abs", {}), ("Neg", {}),
    ("Sqrt", {}), ("Exp", {}), ("Log", {}), ("Reciprocal", {}), ("Sin", {}), ("Cos", {}),
    ("Floor", {}), ("Ceil", {}), ("Round", {}), ("Sign", {}), ("Identity", {}),
]  # fmt: skip


@pytest.mark.parametrize(("op_type", "attrs"), UNARY_CASES, ids=lambda v: str(v))
def test_unary(op_type: str, attrs: dict[str, Any]) -> None:
    check_vs_ort(*unary_case(op_type, attrs))


def unary_case(op_type: str, attrs: dict[str, Any]) -> OpCase:
    x = rnd(2, 3, 4, 5, positive=op_type in POSITIVE_ONLY) * np.float32(3.0)
    if op_type == "Round":
        x[0, 0, 0, :4] = [0.5, 1.5, -0.5, 2.5]  # half to even
    return single_op(op_type, [A(x)], attrs)


def _classes_on_one_activation(op_type: str) -> set[OpClass]:
    """Classes an op type takes on one activation (alone or with one constant operand)."""
    tensors = {"x": Tensor("x", (2, 3)), "c": Tensor("c", (3,), value=np.ones(3, np.float32))}
    graphs = [("x",), ("x", "c")]
    return {
        Graph("g", {**tensors, "y": Tensor("y", (2, 3))}, (Op("o", op_type, ins, ("y",)),),
              ("x",), ("y",)).ops[0].op_class
        for ins in graphs
    }  # fmt: skip


def test_every_elementwise_op_has_a_unary_test() -> None:
    """Every op type the registry classes ELEMWISE is among the unary cases above."""
    tested = {t for t, _ in UNARY_CASES} | {"Clip", "PRelu", "Pow", "Max", "Min"}
    tested |= {"QuantizeLinear", "DequantizeLinear"}  # test_quantize_dequantize below
    elementwise = {t for t in REGISTRY if OpClass.ELEMWISE in _classes_on_one_activation(t)}
    assert elementwise, "no ELEMWISE op registered"
    assert tested >= elementwise, sorted(elementwise - tested)


QUANT_CASES = {  # (code dtype, per-channel, zero point): onnxruntime's QDQ forms
    "uint8_tensor": ("uint8", False, 3),
    "int8_tensor": ("int8", False, -5),
    "int8_channel": ("int8", True, 0),
    "uint8_channel": ("uint8", True, 7),
    "int16_tensor": ("int16", False, 11),
}


@pytest.mark.parametrize("case", sorted(QUANT_CASES))
def test_quantize_dequantize(case: str) -> None:
    """QuantizeLinear (round half to even, saturation) and DequantizeLinear vs onnxruntime:
    codes equal exactly, dequantized values within REL_TOL."""
    dtype, per_channel, zp = QUANT_CASES[case]
    x = rnd(2, 3, 4, 5) * np.float32(4.0)
    scale = np.float32(0.05) if not per_channel else np.asarray([0.02, 0.05, 0.1], np.float32)
    zero = np.full(np.shape(scale), zp, dtype=dtype)
    x[0, 0, 0, :3] = [0.025 * 3, 0.025 * 5, 1e6]  # ties (per tensor) and a saturating value
    graph, feeds = single_op("QuantizeLinear", [A(x), C(scale), C(zero)], out_dtypes=[dtype])
    assert graph.ops[0].op_class is OpClass.ELEMWISE
    codes = reference_run(graph, feeds)["y"]
    np.testing.assert_array_equal(codes, ort_run(graph, feeds)["y"])
    check_vs_ort(graph, feeds)
    graph, feeds = single_op("DequantizeLinear", [A(codes), C(scale), C(zero)])
    assert graph.ops[0].op_class is OpClass.ELEMWISE
    check_vs_ort(graph, feeds)


def test_dequantize_int32_bias_and_dynamic_quantize() -> None:
    """DequantizeLinear of int32 codes without a zero point (a bias) and DynamicQuantizeLinear
    (OPAQUE: its scale reduces the whole tensor) vs onnxruntime."""
    codes = np.arange(-60, 60, dtype=np.int32).reshape(2, 3, 4, 5)
    graph, feeds = single_op("DequantizeLinear", [A(codes), C(np.float32(0.003))])
    check_vs_ort(graph, feeds)
    x = rnd(2, 3, 4, 5)
    graph, feeds = single_op(
        "DynamicQuantizeLinear", [A(x)], out_shapes=[x.shape, (), ()],
        out_dtypes=["uint8", "float32", "uint8"], n_outputs=3,
    )  # fmt: skip
    assert graph.ops[0].op_class is OpClass.OPAQUE
    ref, want = reference_run(graph, feeds), ort_run(graph, feeds)
    for name in graph.outputs:
        np.testing.assert_array_equal(ref[name], want[name])
    check_vs_ort(graph, feeds)


@pytest.mark.parametrize(
    "bounds", [(None, None), (-0.5, None), (None, 0.7), (-0.5, 0.7)], ids=lambda b: str(b)
)
def test_clip(bounds: tuple[float | None, float | None]) -> None:
    ins: list[A | C | None] = [A(rnd(3, 4))]
    ins += [None if v is None else C(np.asarray(v, np.float32)) for v in bounds]
    while ins and ins[-1] is None:
        ins.pop()
    graph, feeds = single_op("Clip", ins)
    check_vs_ort(graph, feeds)


def test_clip_min_max_attributes() -> None:
    """Opset-6 Clip attributes are honoured by the reference (onnxruntime needs inputs)."""
    graph, feeds = single_op("Clip", [A(np.asarray([-2.0, 0.0, 3.0], np.float32))],
                             {"min": -1.0, "max": 1.0})  # fmt: skip
    assert reference_run(graph, feeds)["y"].tolist() == [-1.0, 0.0, 1.0]


def test_prelu_and_pow() -> None:
    graph, feeds = single_op("PRelu", [A(rnd(2, 3, 4, 4)), C(rnd(3, 1, 1, seed=1))])
    check_vs_ort(graph, feeds)
    graph, feeds = single_op("Pow", [A(rnd(3, 4, positive=True)), C(np.float32(1.7))])
    check_vs_ort(graph, feeds)


@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sum"])
@pytest.mark.parametrize("b_shape", [(3, 1, 1), (1, 4, 5), (2, 3, 4, 5)])
@pytest.mark.parametrize("b_const", [True, False])
def test_binary(op_type: str, b_shape: tuple[int, ...], b_const: bool) -> None:
    check_vs_ort(*binary_case(op_type, b_shape, b_const))


def binary_case(op_type: str, b_shape: tuple[int, ...], b_const: bool) -> OpCase:
    b = rnd(*b_shape, seed=1, positive=op_type == "Div")
    return single_op(op_type, [A(rnd(2, 3, 4, 5)), C(b) if b_const else A(b)])


def test_variadic_sum_of_three() -> None:
    graph, feeds = single_op("Max", [A(rnd(2, 3)), A(rnd(3, seed=1)), C(rnd(2, 1, seed=2))],
                             out_shapes=[(2, 3)])  # fmt: skip
    check_vs_ort(graph, feeds)


# ---- structural ops -----------------------------------------------------------------------
I64 = np.int64
StructuralCase = tuple[str, list[A | C | None], dict[str, Any], list[Any], list[str]]
STRUCTURAL_CASES: dict[str, StructuralCase] = {
    # name: (op type, inputs, attrs, output shapes, output dtypes)
    "concat_axis1": ("Concat", [A(rnd(2, 3, 4)), C(rnd(2, 1, 4, seed=1)), A(rnd(2, 2, 4, seed=2))],
                     {"axis": 1}, [(2, 6, 4)], ["float32"]),
    "concat_neg": ("Concat", [A(rnd(2, 3)), A(rnd(2, 5, seed=1))], {"axis": -1}, [(2, 8)],
                   ["float32"]),
    "shape": ("Shape", [A(rnd(2, 3, 4))], {}, [(3,)], ["int64"]),
    "shape_start_end": ("Shape", [A(rnd(2, 3, 4, 5))], {"start": 1, "end": -1}, [(2,)], ["int64"]),
    "gather_axis0": ("Gather", [A(rnd(5, 3)), C(np.asarray([4, 0, -1], I64))], {}, [(3, 3)],
                     ["float32"]),
    "gather_axis1_2d": ("Gather", [A(rnd(2, 5, 3)), C(np.asarray([[0, 1], [-2, 2]], I64))],
                        {"axis": 1}, [(2, 2, 2, 3)], ["float32"]),
    "gather_scalar": ("Gather", [A(rnd(4, 3)), C(np.asarray(2, I64))], {}, [(3,)], ["float32"]),
    "slice_basic": ("Slice", [A(rnd(6, 7)), C(np.asarray([1, 2], I64)),
                              C(np.asarray([5, -1], I64))], {}, [(4, 4)], ["float32"]),
    "slice_axes_steps": ("Slice", [A(rnd(6, 7, 8)), C(np.asarray([0, 1], I64)),
                                   C(np.asarray([8, 7], I64)), C(np.asarray([2, 0], I64)),
                                   C(np.asarray([3, 2], I64))], {}, [(3, 7, 3)], ["float32"]),
    "slice_negative_step": ("Slice", [A(rnd(6, 7)), C(np.asarray([-1], I64)),
                                      C(np.asarray([INT64_MIN], I64)), C(np.asarray([1], I64)),
                                      C(np.asarray([-2], I64))], {}, [(6, 4)], ["float32"]),
    "slice_clamped": ("Slice", [A(rnd(6, 7)), C(np.asarray([-100, 3], I64)),
                                C(np.asarray([100, 1000], I64))], {}, [(6, 4)], ["float32"]),
    "split_sizes": ("Split", [A(rnd(2, 7)), C(np.asarray([3, 4], I64))], {"axis": 1},
                    [(2, 3), (2, 4)], ["float32"] * 2),
    "split_equal": ("Split", [A(rnd(6, 2))], {}, [(2, 2)] * 3, ["float32"] * 3),
    "split_num_outputs": ("Split", [A(rnd(2, 7))], {"axis": 1, "num_outputs": 3},
                          [(2, 3), (2, 3), (2, 1)], ["float32"] * 3),
    "pad_constant": ("Pad", [A(rnd(2, 3, 4)), C(np.asarray([0, 1, 2, 0, 2, 1], I64)),
                             C(np.asarray(1.5, np.float32))], {}, [(2, 6, 7)], ["float32"]),
    "pad_reflect": ("Pad", [A(rnd(1, 2, 4, 5)), C(np.asarray([0, 0, 1, 2, 0, 0, 2, 1], I64))],
                    {"mode": "reflect"}, [(1, 2, 7, 8)], ["float32"]),
    "pad_edge": ("Pad", [A(rnd(1, 2, 4, 5)), C(np.asarray([0, 0, 1, 2, 0, 0, 2, 1], I64))],
                 {"mode": "edge"}, [(1, 2, 7, 8)], ["float32"]),
    "pad_wrap": ("Pad", [A(rnd(1, 2, 4, 5)), C(np.asarray([0, 0, 1, 2, 0, 0, 2, 1], I64))],
                 {"mode": "wrap"}, [(1, 2, 7, 8)], ["float32"]),
    "pad_negative_axes": ("Pad", [A(rnd(3, 4, 5)), C(np.asarray([1, -1, 2, -2], I64)), None,
                                  C(np.asarray([1, 2], I64))], {}, [(3, 7, 2)], ["float32"]),
    "cast_to_int64": ("Cast", [A(rnd(3, 4) * 4)], {"to": 7}, [(3, 4)], ["int64"]),
    "cast_to_float16": ("Cast", [A(rnd(3, 4))], {"to": 10}, [(3, 4)], ["float16"]),
    "expand": ("Expand", [A(rnd(3, 1)), C(np.asarray([2, 1, 4], I64))], {}, [(2, 3, 4)],
               ["float32"]),
    "tile": ("Tile", [A(rnd(2, 3)), C(np.asarray([2, 3], I64))], {}, [(4, 9)], ["float32"]),
    "where": ("Where", [C(rnd(3, 4, seed=3) > 0), A(rnd(3, 4)), A(rnd(1, 4, seed=1))], {},
              [(3, 4)], ["float32"]),
    "equal": ("Equal", [A(np.round(rnd(3, 4))), C(np.round(rnd(3, 4, seed=1)))], {}, [(3, 4)],
              ["bool"]),
    "greater": ("Greater", [A(rnd(3, 4)), C(rnd(4, seed=1))], {}, [(3, 4)], ["bool"]),
    "constant_of_shape": ("ConstantOfShape", [C(np.asarray([2, 3], I64))],
                          {"value": np.asarray([2.5], np.float32)}, [(2, 3)], ["float32"]),
    "range": ("Range", [C(np.asarray(1.0, np.float32)), C(np.asarray(7.0, np.float32)),
                        C(np.asarray(1.5, np.float32))], {}, [(4,)], ["float32"]),
    "argmax": ("ArgMax", [A(rnd(3, 4, 5))], {"axis": 1, "keepdims": 0}, [(3, 5)], ["int64"]),
    "argmin_last": ("ArgMin", [A(np.round(rnd(3, 4)))], {"axis": -1, "select_last_index": 1},
                    [(3, 1)], ["int64"]),
    "mod": ("Mod", [A(rnd(3, 4) * 5), C(rnd(4, seed=1, positive=True))], {"fmod": 1},
            [(3, 4)], ["float32"]),
    "mod_int": ("Mod", [A(np.asarray([-7, 7, -7, 5], I64)), C(np.asarray([3, -3, -3, 5], I64))],
                {}, [(4,)], ["int64"]),
    "div_int_truncates": ("Div", [A(np.asarray([-7, 7, -7, 6], I64)),
                                  C(np.asarray([2, -2, -2, 4], I64))], {}, [(4,)], ["int64"]),
    "einsum": ("Einsum", [A(rnd(2, 3, 4)), A(rnd(2, 4, 5, seed=1))], {"equation": "bij,bjk->bik"},
               [(2, 3, 5)], ["float32"]),
    "cumsum": ("CumSum", [A(rnd(3, 4)), C(np.asarray(1, I64))], {}, [(3, 4)], ["float32"]),
    "cumsum_rev_excl": ("CumSum", [A(rnd(3, 4)), C(np.asarray(-2, I64))],
                        {"exclusive": 1, "reverse": 1}, [(3, 4)], ["float32"]),
    "constant": ("Constant", [], {"value": np.asarray([[1.0, 2.0]], np.float32)}, [(1, 2)],
                 ["float32"]),
    "constant_value_ints": ("Constant", [], {"value_ints": (3, 4)}, [(2,)], ["int64"]),
    "size": ("Size", [A(rnd(2, 3))], {}, [()], ["int64"]),
    "not": ("Not", [A(rnd(3, 4) > 0)], {}, [(3, 4)], ["bool"]),
    "isnan": ("IsNaN", [A(np.where(rnd(3, 4) > 0.5, np.nan, rnd(3, 4, seed=1)))], {}, [(3, 4)],
              ["bool"]),
    "and": ("And", [A(rnd(3, 4) > 0), C(rnd(4, seed=1) > 0)], {}, [(3, 4)], ["bool"]),
    "or": ("Or", [A(rnd(3, 4) > 0), C(rnd(4, seed=1) > 0)], {}, [(3, 4)], ["bool"]),
    "xor": ("Xor", [A(rnd(3, 4) > 0), C(rnd(4, seed=1) > 0)], {}, [(3, 4)], ["bool"]),
    "less": ("Less", [A(rnd(3, 4)), C(rnd(4, seed=1))], {}, [(3, 4)], ["bool"]),
    "less_or_equal": ("LessOrEqual", [A(np.round(rnd(3, 4))), C(np.round(rnd(4, seed=1)))], {},
                      [(3, 4)], ["bool"]),
    "greater_or_equal": ("GreaterOrEqual", [A(np.round(rnd(3, 4))),
                                            C(np.round(rnd(4, seed=1)))], {}, [(3, 4)], ["bool"]),
    "dropout": ("Dropout", [A(rnd(3, 4))], {}, [(3, 4)], ["float32"]),
    "dropout_mask": ("Dropout", [A(rnd(3, 4))], {}, [(3, 4), (3, 4)], ["float32", "bool"]),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(STRUCTURAL_CASES))
def test_structural(case: str) -> None:
    check_vs_ort(*structural_case(case))


def structural_case(case: str) -> OpCase:
    op_type, ins, attrs, shapes, dtypes = STRUCTURAL_CASES[case]
    return single_op(op_type, ins, attrs, shapes, dtypes, n_outputs=len(shapes))


RESIZE_COORD_MODES = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]


@pytest.mark.parametrize("coord", RESIZE_COORD_MODES)
@pytest.mark.parametrize(
    ("mode", "nearest"),
    [("nearest", "round_prefer_floor"), ("nearest", "round_prefer_ceil"), ("nearest", "floor"),
     ("nearest", "ceil"), ("linear", ""), ("cubic", ""), ("cubic", "exclude_outside")],
)  # fmt: skip
@pytest.mark.parametrize("by", ["scales", "sizes"])
def test_resize(coord: str, mode: str, nearest: str, by: str) -> None:
    check_vs_ort(*resize_case(coord, mode, nearest, by))


def resize_case(coord: str, mode: str, nearest: str, by: str) -> OpCase:
    x = rnd(1, 2, 4, 5)
    attrs: dict[str, Any] = {"mode": mode, "coordinate_transformation_mode": coord}
    if nearest == "exclude_outside":
        attrs.update(exclude_outside=1, cubic_coeff_a=-0.5)
    elif nearest:
        attrs["nearest_mode"] = nearest
    if by == "scales":
        ins: list[A | C | None] = [A(x), None, C(np.asarray([1, 1, 2.0, 1.5], np.float32))]
        shape = (1, 2, 8, 7)
    else:
        ins = [A(x), None, None, C(np.asarray([1, 2, 7, 3], I64))]
        shape = (1, 2, 7, 3)
    return single_op("Resize", ins, attrs, [shape])


# ---- indexing ops: GatherElements, ScatterND ------------------------------------------------
# Both only move elements (ScatterND's add/mul/max/min reduce them): with distinct positions the
# reference equals onnxruntime exactly; with duplicates under add/mul the float32 order of the
# updates may differ, hence check_vs_ort's REL_TOL.
IndexCase = tuple[str, list[A | C | None], dict[str, Any]]
RANDOM_IDX = np.random.default_rng(2).integers(-4, 4, (2, 3, 6)).astype(I64)
INDEXING_CASES: dict[str, IndexCase] = {
    "gather_elements_axis0": ("GatherElements", [A(rnd(3, 4)),
                              C(np.asarray([[2, 0, 1, 2], [0, 0, 2, 1]], I64))], {}),
    "gather_elements_axis1_neg_idx": ("GatherElements", [A(rnd(2, 5)),
                                      C(np.asarray([[-1, 0, -5], [4, -2, 1]], I64))],
                                      {"axis": 1}),
    "gather_elements_axis_neg1_3d": ("GatherElements", [A(rnd(2, 3, 4)), A(RANDOM_IDX)],
                                     {"axis": -1}),
    "gather_elements_axis_neg2_smaller": ("GatherElements", [A(rnd(3, 4, 5)),
                                          C(np.asarray([[[0, 3]], [[-4, 1]]], I64))],
                                          {"axis": -2}),
    "gather_elements_int_data": ("GatherElements", [A(np.arange(12, dtype=I64).reshape(3, 4)),
                                 C(np.asarray([[1], [0], [-1]], I64))], {"axis": 1}),
    "scatter_nd_rows": ("ScatterND", [A(rnd(5, 3)), C(np.asarray([[4], [-5]], I64)),
                        A(rnd(2, 3, seed=1))], {}),
    "scatter_nd_elements": ("ScatterND", [A(rnd(3, 4)), C(np.asarray([[0, 3], [2, -1], [-3, 1]],
                                                                      I64)),
                            A(rnd(3, seed=1))], {}),
    "scatter_nd_slices_3d": ("ScatterND", [A(rnd(2, 3, 4)),
                             A(np.asarray([[[1, 2]], [[0, -3]]], I64)),
                             A(rnd(2, 1, 4, seed=1))], {}),
    "scatter_nd_add_duplicates": ("ScatterND", [A(rnd(4, 3)), C(np.asarray([[1], [3], [1]], I64)),
                                  A(rnd(3, 3, seed=1))], {"reduction": "add"}),
    "scatter_nd_mul_duplicates": ("ScatterND", [A(rnd(4, 3)),
                                  C(np.asarray([[1, 2], [1, 2], [-1, 0]], I64)),
                                  A(rnd(3, seed=1))], {"reduction": "mul"}),
    "scatter_nd_max": ("ScatterND", [A(rnd(4, 3)), C(np.asarray([[0], [2], [0]], I64)),
                       A(rnd(3, 3, seed=1))], {"reduction": "max"}),
    "scatter_nd_min": ("ScatterND", [A(rnd(4, 3)), C(np.asarray([[0], [2], [0]], I64)),
                       A(rnd(3, 3, seed=1))], {"reduction": "min"}),
    "scatter_nd_int_data": ("ScatterND", [A(np.arange(6, dtype=I64).reshape(2, 3)),
                            C(np.asarray([[1, 1]], I64)), A(np.asarray([40], I64))], {}),
    "scatter_elements_axis0": ("ScatterElements", [A(rnd(3, 4)),
                               C(np.asarray([[2, 0, 1, 2], [0, 1, 2, 0]], I64)),
                               A(rnd(2, 4, seed=1))], {}),
    "scatter_elements_axis1_neg_idx": ("ScatterElements", [A(rnd(2, 5)),
                                       C(np.asarray([[-1, 0, -4], [4, -2, 1]], I64)),
                                       A(rnd(2, 3, seed=1))], {"axis": -1}),
    "scatter_elements_add_duplicates": ("ScatterElements", [A(rnd(4, 3)),
                                        C(np.asarray([[1, 3, 1], [1, 0, -3]], I64)),
                                        A(rnd(2, 3, seed=1))], {"reduction": "add"}),
    "scatter_elements_mul_duplicates": ("ScatterElements", [A(rnd(2, 4)),
                                        C(np.asarray([[1, 1, -3]], I64)),
                                        A(rnd(1, 3, seed=1))], {"axis": 1, "reduction": "mul"}),
    "scatter_elements_max": ("ScatterElements", [A(rnd(3, 4)), C(np.asarray([[0, 2, 0, 1],
                                                                              [0, 2, 2, 1]], I64)),
                             A(rnd(2, 4, seed=1))], {"reduction": "max"}),
    "scatter_elements_min_3d": ("ScatterElements", [A(rnd(2, 3, 4)),
                                A(np.asarray([[[0, 1], [1, 0]], [[2, 2], [-1, 0]]], I64)),
                                A(rnd(2, 2, 2, seed=1))], {"axis": 1, "reduction": "min"}),
    "scatter_elements_int_data": ("ScatterElements", [A(np.arange(6, dtype=I64).reshape(2, 3)),
                                  C(np.asarray([[2], [0]], I64)),
                                  A(np.asarray([[40], [50]], I64))], {"axis": 1}),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(INDEXING_CASES))
def test_indexing(case: str) -> None:
    graph, feeds = indexing_case(case)
    assert graph.ops[0].op_class is OpClass.OPAQUE  # positions are data: no row map
    check_vs_ort(graph, feeds)


def indexing_case(case: str) -> OpCase:
    op_type, ins, attrs = INDEXING_CASES[case]
    data = ins[0]
    assert data is not None
    return single_op(op_type, ins, attrs, out_dtypes=[str(np.asarray(data.value).dtype)])


def test_indexing_hand_computed() -> None:
    x = np.asarray([[1.0, 2.0], [3.0, 4.0]], np.float32)
    graph, feeds = single_op("GatherElements", [A(x), C(np.asarray([[0, 0], [1, -2]], I64))],
                             {"axis": 1})  # fmt: skip
    assert reference_run(graph, feeds)["y"].tolist() == [[1.0, 1.0], [4.0, 3.0]]
    graph, feeds = single_op("ScatterND", [A(x), C(np.asarray([[1], [1]], I64)),
                                           C(np.full((2, 2), 10.0, np.float32))],
                             {"reduction": "add"})  # fmt: skip
    assert reference_run(graph, feeds)["y"].tolist() == [[1.0, 2.0], [23.0, 24.0]]
    graph, feeds = single_op("ScatterElements", [A(x), C(np.asarray([[0, -2]], I64)),
                                                 C(np.full((1, 2), 10.0, np.float32))],
                             {"axis": 1, "reduction": "mul"})  # fmt: skip
    assert reference_run(graph, feeds)["y"].tolist() == [[100.0, 2.0], [3.0, 4.0]]


@pytest.mark.parametrize(
    ("op_type", "ins", "attrs", "message"),
    [
        ("GatherElements", [A(rnd(2, 3)), C(np.asarray([[0, 3]], I64))], {"axis": 1},
         r"op 'op' \(GatherElements\): index 3 at \(0, 1\) is out of range for axis 1 of size 3; "
         r"allowed: \[-3, 2\]"),
        ("GatherElements", [A(rnd(2, 3)), C(np.asarray([[-3]], I64))], {},
         r"op 'op' \(GatherElements\): index -3 .* axis 0 of size 2; allowed: \[-2, 1\]"),
        ("ScatterND", [A(rnd(4, 3)), C(np.asarray([[4]], I64)), C(rnd(1, 3))], {},
         r"op 'op' \(ScatterND\): index 4 .* the data's leading axes of size 4; "
         r"allowed: \[-4, 3\]"),
        ("ScatterND", [A(rnd(4, 3)), C(np.asarray([[1]], I64)), C(rnd(1, 3))],
         {"reduction": "sum"},
         r"op 'op' \(ScatterND\): reduction 'sum' is not one of none, add, mul, max, min"),
        ("ScatterElements", [A(rnd(2, 3)), C(np.asarray([[0, -4]], I64)), C(rnd(1, 2))],
         {"axis": 1},
         r"op 'op' \(ScatterElements\): index -4 at \(0, 1\) is out of range for axis 1 of "
         r"size 3; allowed: \[-3, 2\]"),
        ("ScatterElements", [A(rnd(2, 3)), C(np.asarray([[2]], I64)), C(rnd(1, 1))], {},
         r"op 'op' \(ScatterElements\): index 2 .* axis 0 of size 2; allowed: \[-2, 1\]"),
        ("ScatterElements", [A(rnd(2, 3)), C(np.asarray([[1]], I64)), C(rnd(1, 1))],
         {"reduction": "sum"},
         r"op 'op' \(ScatterElements\): reduction 'sum' is not one of none, add, mul, max, "
         r"min"),
    ],
    ids=["gather_elements_high", "gather_elements_low", "scatter_nd_high", "scatter_nd_reduction",
         "scatter_elements_low", "scatter_elements_high", "scatter_elements_reduction"],
)  # fmt: skip
def test_indexing_errors_name_the_op(
    op_type: str, ins: list[A | C | None], attrs: dict[str, Any], message: str
) -> None:
    graph, feeds = single_op(op_type, ins, attrs)
    with pytest.raises(FusiontuneError, match=message):
        reference_run(graph, feeds)


def test_scatter_elements_reduction_per_opset() -> None:
    """``none`` is written without the attribute before opset 16 (onnxruntime agrees there);
    a reduction the target opset lacks is refused by name (max and min: opset 18)."""
    graph, feeds = indexing_case("scatter_elements_axis1_neg_idx")
    assert "reduction" not in [a.name for a in to_onnx(graph, opset=13).graph.node[0].attribute]
    check_vs_ort(graph, feeds, opset=13)
    graph, feeds = indexing_case("scatter_elements_max")
    with pytest.raises(FusiontuneError, match=r"'op' \(ScatterElements\) has reduction 'max', "
                       r"which ONNX opset 17 does not define; use opset >= 18"):  # fmt: skip
        to_onnx(graph, opset=17)
    check_vs_ort(graph, feeds, opset=18)


# ---- LSTM (a recurrent op: OPAQUE, its reference kernel in both runs) --------------------------
LSTM_CASES: dict[str, dict[str, Any]] = {
    "forward": {},
    "reverse": {"direction": "reverse"},
    "bidirectional": {"direction": "bidirectional"},
    "no_bias_no_state": {"bias": False, "state": False},
    "sequence_lens": {"lens": (5, 2, 3)},
    "sequence_lens_bidirectional": {"lens": (5, 2, 3), "direction": "bidirectional"},
    "sequence_lens_zero": {"lens": (0, 2, 3)},
    "peepholes": {"peepholes": True},
    "clip": {"clip": 0.5},
    "input_forget": {"input_forget": 1},
    "activations_alpha_beta": {"activations": ("HardSigmoid", "Tanh", "ScaledTanh"),
                               "activation_alpha": (0.3, 0.7), "activation_beta": (0.4, 1.2)},
    "bidirectional_relu": {"direction": "bidirectional",
                           "activations": ("Sigmoid", "Tanh", "Tanh", "Sigmoid", "Relu", "Relu")},
}  # fmt: skip
LSTM_SEQ, LSTM_BATCH, LSTM_IN, LSTM_HIDDEN = 5, 3, 4, 6


def lstm_case(case: str, layout: int = 0) -> OpCase:
    """A one-LSTM graph: X and the initial state are activations, W, R, B, P constants."""
    spec = dict(LSTM_CASES[case])
    seq, batch, n_in, h = LSTM_SEQ, LSTM_BATCH, LSTM_IN, LSTM_HIDDEN
    n_dirs = 2 if spec.get("direction") == "bidirectional" else 1
    lens = spec.pop("lens", None)
    bias, state = spec.pop("bias", True), spec.pop("state", True)
    x = rnd(seq, batch, n_in)
    h0, c0 = rnd(n_dirs, batch, h, seed=4), rnd(n_dirs, batch, h, seed=5)
    if layout == 1:
        x, h0, c0 = x.transpose(1, 0, 2), h0.transpose(1, 0, 2), c0.transpose(1, 0, 2)
    ins: list[A | C | None] = [
        A(np.ascontiguousarray(x)),
        C(rnd(n_dirs, 4 * h, n_in, seed=1) * 0.5),
        C(rnd(n_dirs, 4 * h, h, seed=2) * 0.5),
        C(rnd(n_dirs, 8 * h, seed=3)) if bias else None,
        C(np.asarray(lens, np.int32)) if lens is not None else None,
        A(np.ascontiguousarray(h0)) if state else None,
        A(np.ascontiguousarray(c0)) if state else None,
    ]
    if spec.pop("peepholes", False):
        ins.append(C(rnd(n_dirs, 3 * h, seed=6)))
    attrs = {"hidden_size": h, "layout": layout} | spec
    return single_op("LSTM", ins, attrs, n_outputs=3)


@pytest.mark.parametrize("case", sorted(LSTM_CASES))
def test_lstm(case: str) -> None:
    graph, feeds = lstm_case(case)
    assert graph.ops[0].op_class is OpClass.OPAQUE  # recurrent: a barrier
    check_vs_ort(graph, feeds)


def test_lstm_sequence_lens_zero_steps_and_pads() -> None:
    """Entry 1 of length 2: its outputs past step 2 are zeros and Y_h is its step-2 state;
    entry 0 of length 0 ends in zeros (as onnxruntime gives)."""
    graph, feeds = lstm_case("sequence_lens_zero")
    out = reference_run(graph, feeds)
    y, y_h = out["y"], out["y1"]
    assert not y[:, :, 0].any() and not y_h[:, 0].any() and not out["y2"][:, 0].any()
    assert not y[2:, 0, 1].any() and y[1, 0, 1].any()
    np.testing.assert_array_equal(y_h[0, 1], y[1, 0, 1])
    np.testing.assert_array_equal(y_h[0, 2], y[2, 0, 2])


@pytest.mark.parametrize("case", ["forward", "bidirectional", "sequence_lens"])
def test_lstm_layout_1_is_layout_0_transposed(case: str) -> None:
    """onnxruntime refuses ``layout=1`` ("Batchwise recurrent operations are not supported"),
    so the batch-first form is checked against the sequence-first one, which meets it."""
    want = reference_run(*lstm_case(case))
    graph, feeds = lstm_case(case, layout=1)
    assert graph.tensors["y"].shape == (LSTM_BATCH, LSTM_SEQ, want["y"].shape[1], LSTM_HIDDEN)
    got = reference_run(graph, feeds)
    np.testing.assert_array_equal(got["y"], want["y"].transpose(2, 0, 1, 3))
    np.testing.assert_array_equal(got["y1"], want["y1"].transpose(1, 0, 2))
    np.testing.assert_array_equal(got["y2"], want["y2"].transpose(1, 0, 2))


def test_lstm_hand_computed_one_step() -> None:
    """One step, hidden 1, zero state: i = o = f = sigmoid(x), c = tanh(x), C = i * c,
    H = o * tanh(C)."""
    x = np.asarray([[[0.5]]], np.float32)
    ones = np.ones((1, 4, 1), np.float32)
    graph, feeds = single_op("LSTM", [A(x), C(ones), C(np.zeros((1, 4, 1), np.float32))],
                             {"hidden_size": 1}, n_outputs=3)  # fmt: skip
    out = reference_run(graph, feeds)
    s = 1 / (1 + math.exp(-0.5))
    cell = s * math.tanh(0.5)
    assert out["y2"][0, 0, 0] == pytest.approx(cell, rel=1e-6)
    assert out["y1"][0, 0, 0] == pytest.approx(s * math.tanh(cell), rel=1e-6)


@pytest.mark.parametrize(
    ("attrs", "message"),
    [({"direction": "sideways"},
      r"op 'op' \(LSTM\): direction 'sideways' is not one of forward, reverse, bidirectional"),
     ({"activations": ("Sigmoid", "Tanh", "Gelu")},
      r"op 'op' \(LSTM\): activation 'Gelu' is not one of Affine, Elu, "),
     ({"activations": ("Sigmoid", "Tanh")},
      r"op 'op' \(LSTM\): activations has 2 entries; 3 expected")],
    ids=["direction", "activation", "activation_count"],
)  # fmt: skip
def test_lstm_errors_name_the_op(attrs: dict[str, Any], message: str) -> None:
    with pytest.raises(FusiontuneError, match=message):
        graph, feeds = single_op(
            "LSTM", [A(rnd(2, 1, 3)), C(rnd(1, 8, 3)), C(rnd(1, 8, 2))],
            {"hidden_size": 2} | attrs, n_outputs=3,
        )  # fmt: skip
        reference_run(graph, feeds)


def test_lstm_shape_errors_name_the_op() -> None:
    with pytest.raises(ShapeError, match=r"op 'op' \(LSTM\): W \(1, 8, 4\) and R \(1, 8, 2\) "
                       r"do not fit X \(2, 1, 3\)"):  # fmt: skip
        single_op("LSTM", [A(rnd(2, 1, 3)), C(rnd(1, 8, 4)), C(rnd(1, 8, 2))], n_outputs=3)
    lens = C(np.asarray([3], np.int32))
    case = single_op("LSTM", [A(rnd(2, 1, 3)), C(rnd(1, 8, 3)), C(rnd(1, 8, 2)), None, lens],
                     n_outputs=3)  # fmt: skip
    with pytest.raises(FusiontuneError, match=r"sequence_lens \[3\] must hold 1 lengths in "
                       r"\[0, 2\]"):  # fmt: skip
        reference_run(*case)


def test_lstm_is_a_barrier_with_its_reason() -> None:
    """The planner refuses to group an LSTM and says why (a recurrent op)."""
    from fusiontune.planner.legality import check_plan
    from fusiontune.planner.plan import Group, Mode, Plan

    b = GraphBuilder("lstm_relu", seed=1)
    x = b.input("x", (LSTM_SEQ, LSTM_BATCH, LSTM_IN))
    h = LSTM_HIDDEN
    w = b.const("w", rnd(1, 4 * h, LSTM_IN, seed=1))
    r = b.const("r", rnd(1, 4 * h, h, seed=2))
    y = b.op("LSTM", [x, w, r], {"hidden_size": h}, name="lstm", n_outputs=3)
    b.relu(y, name="relu")
    graph = b.build()
    plan = Plan.of(graph, [Group(("lstm", "relu"), Mode.FUSED)])
    with pytest.raises(FusiontuneError, match=r"OPAQUE \(a recurrent op: each time step reads "
                       r"the state the previous step wrote"):  # fmt: skip
        check_plan(graph, plan)


# ---- DepthToSpace (torch's pixel_shuffle exports it in CRD mode) ------------------------------
@pytest.mark.parametrize("mode", [None, "DCR", "CRD"])
@pytest.mark.parametrize(("shape", "blocksize"), [((1, 8, 3, 5), 2), ((2, 18, 2, 3), 3)])
def test_depth_to_space(mode: str | None, shape: Shape, blocksize: int) -> None:
    graph, feeds = depth_to_space_case(mode, shape, blocksize)
    assert graph.ops[0].op_class is OpClass.OPAQUE  # moves channels into rows: a barrier
    n, c, h, w = shape
    assert graph.tensors["y"].shape == (n, c // blocksize**2, h * blocksize, w * blocksize)
    check_vs_ort(graph, feeds)


def depth_to_space_case(mode: str | None, shape: Shape, blocksize: int) -> OpCase:
    attrs: dict[str, Any] = {"blocksize": blocksize} | ({"mode": mode} if mode else {})
    return single_op("DepthToSpace", [A(rnd(*shape))], attrs)


def test_depth_to_space_hand_computed() -> None:
    """Channels c = 0..3 of one pixel land at (row, col) = divmod(c, 2) in both modes when
    there is one output channel; with two, DCR takes depth last and CRD first."""
    x = np.arange(8, dtype=np.float32).reshape(1, 8, 1, 1)
    dcr = reference_run(*single_op("DepthToSpace", [A(x)], {"blocksize": 2}))["y"]
    crd = reference_run(*single_op("DepthToSpace", [A(x)], {"blocksize": 2, "mode": "CRD"}))["y"]
    assert dcr[0, :, :, :].tolist() == [[[0.0, 2.0], [4.0, 6.0]], [[1.0, 3.0], [5.0, 7.0]]]
    assert crd[0, :, :, :].tolist() == [[[0.0, 1.0], [2.0, 3.0]], [[4.0, 5.0], [6.0, 7.0]]]


@pytest.mark.parametrize(
    ("shape", "attrs", "message"),
    [((1, 6, 2, 2), {"blocksize": 2},
      r"op 'op' \(DepthToSpace\): input \(1, 6, 2, 2\) must be NCHW with channels divisible "
      r"by blocksize\*\*2 = 4"),
     ((1, 4, 2, 2), {"blocksize": 2, "mode": "RCD"},
      r"op 'op' \(DepthToSpace\): mode 'RCD' is not one of DCR, CRD"),
     ((1, 4, 2, 2), {}, r"op 'op' \(DepthToSpace\): attribute 'blocksize' is required")],
    ids=["channels", "mode", "blocksize"],
)  # fmt: skip
def test_depth_to_space_errors_name_the_op(
    shape: Shape, attrs: dict[str, Any], message: str
) -> None:
    with pytest.raises(FusiontuneError, match=message):
        single_op("DepthToSpace", [A(rnd(*shape))], attrs)


def test_conv_depth_to_space_conv_verifies(tmp_path: Any) -> None:
    """An ONNX file Conv -> DepthToSpace (CRD, pixel_shuffle) -> Conv: the importer loads it,
    the greedy plan keeps DepthToSpace a barrier group of its own, and the executor's run of
    that plan equals the reference."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from fusiontune.frontend.onnx_import import load_onnx
    from fusiontune.planner.baselines import greedy_plan
    from fusiontune.sim.verify import verify

    w1, w2 = rnd(8, 3, 3, 3, seed=1), rnd(4, 2, 3, 3, seed=2)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="c1", pads=[1, 1, 1, 1]),
        helper.make_node("DepthToSpace", ["a"], ["d"], name="d2s", blocksize=2, mode="CRD"),
        helper.make_node("Conv", ["d", "w2"], ["y"], name="c2", pads=[1, 1, 1, 1]),
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "pixel_shuffle",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 6, 6))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 4, 12, 12))],
            initializer=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
        ),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    onnx.save(model, tmp_path / "ps.onnx")
    graph = load_onnx(tmp_path / "ps.onnx")
    assert graph.tensors["d"].shape == (1, 2, 12, 12)
    plan = greedy_plan(graph)
    assert ("d2s",) in [tuple(g.ops) for g in plan.groups]
    report = verify(graph, plan)
    assert report.passed, report.summary()
    check_vs_ort(graph)


# ---- multi-op graphs, errors, inputs ------------------------------------------------------
def small_cnn() -> Graph:
    b = GraphBuilder("small_cnn", seed=3)
    x = b.input("x", (1, 3, 12, 12))
    y = b.relu(b.bn(b.conv(x, 8, 3)))
    y = b.maxpool(y, 2)
    r = b.relu(b.bn(b.conv(y, 8, 3)))
    y = b.add(y, r)
    y = b.act("HardSwish", b.conv(y, 8, 3, group=8))
    y = b.flatten(b.global_avgpool(y))
    b.output(b.gemm(y, 10))
    return b.build()


def test_small_cnn_end_to_end() -> None:
    graph = small_cnn()
    err = check_vs_ort(graph)
    assert err <= REL_TOL


def test_keep_intermediates_returns_every_activation() -> None:
    graph = small_cnn()
    feeds = random_inputs(graph)
    everything = reference_run(graph, feeds, keep_intermediates=True)
    assert list(everything) == list(graph.activation_tensors)
    for name, value in everything.items():
        assert value.shape == graph.tensors[name].shape
    outs = reference_run(graph, feeds)
    assert list(outs) == list(graph.outputs)
    np.testing.assert_array_equal(outs[graph.outputs[0]], everything[graph.outputs[0]])


def test_run_op_matches_numpy_on_hand_values() -> None:
    op = Op("g", "Gemm", ("a", "b", "c"), ("y",), {"transB": 1, "alpha": 2.0})
    a = np.asarray([[1.0, 2.0]], np.float32)
    b = np.asarray([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], np.float32)
    (y,) = run_op(op, [a, b, np.asarray([1.0, 1.0, 1.0], np.float32)])
    assert y.tolist() == [[3.0, 5.0, 7.0]]


def test_missing_input_names_input_and_shape() -> None:
    graph = small_cnn()
    with pytest.raises(
        FusiontuneError, match=r"input 'x' is missing; expected shape \(1, 3, 12, 12\)"
    ):
        reference_run(graph, {})


def test_wrong_shape_and_dtype() -> None:
    graph = small_cnn()
    with pytest.raises(FusiontuneError, match=r"'x' has shape \(1, 3, 12, 11\).*expected shape"):
        reference_run(graph, {"x": np.zeros((1, 3, 12, 11), np.float32)})
    with pytest.raises(FusiontuneError, match=r"'x' .*dtype float64; expected .*dtype float32"):
        reference_run(graph, {"x": np.zeros((1, 3, 12, 12))})
    with pytest.raises(FusiontuneError, match=r"'y' is not a graph input"):
        reference_run(graph, {"x": np.zeros((1, 3, 12, 12), np.float32), "y": np.zeros(1)})


def test_op_without_kernel_is_named() -> None:
    tensors = {"x": Tensor("x", (2, 2)), "y": Tensor("y", (2, 2))}
    graph = Graph("g", tensors, (Op("mystery", "FancyOp", ("x",), ("y",)),), ("x",), ("y",))
    with pytest.raises(FusiontuneError, match=r"op 'mystery'.*no kernel for op type 'FancyOp'"):
        reference_run(graph, random_inputs(graph))


def test_shape_disagreement_is_reported() -> None:
    tensors = {"x": Tensor("x", (2, 3)), "y": Tensor("y", (3, 3))}
    op = Op("t", "Gather", ("x", "i"), ("y",))
    tensors["i"] = Tensor("i", (2,), "int64", np.asarray([0, 1], np.int64))
    graph = Graph("g", tensors, (op,), ("x",), ("y",))
    with pytest.raises(ShapeError, match=r"op 't' \(Gather\).*\(2, 3\), the graph says \(3, 3\)"):
        reference_run(graph, random_inputs(graph))


def test_random_inputs_are_seeded() -> None:
    tensors = {"x": Tensor("x", (2, 3)), "ids": Tensor("ids", (4,), "int64"),
               "y": Tensor("y", (2, 3))}  # fmt: skip
    graph = Graph("g", tensors, (Op("r", "Relu", ("x",), ("y",)),), ("x", "ids"), ("y",))
    a, b, c = random_inputs(graph, 0), random_inputs(graph, 0), random_inputs(graph, 1)
    assert a["x"].dtype == np.float32 and a["x"].shape == (2, 3)
    assert a["ids"].dtype == np.int64 and a["ids"].min() >= 0
    np.testing.assert_array_equal(a["x"], b["x"])
    assert not np.array_equal(a["x"], c["x"])


def test_to_onnx_writes_file_and_checks_opset(tmp_path: Any) -> None:
    import onnx

    b = GraphBuilder("gelu")
    b.act("Gelu", b.input("x", (2, 3)))
    graph = b.build()
    path = tmp_path / "g.onnx"
    model = to_onnx(graph, path)
    assert model.opset_import[0].version == 21
    assert onnx.load(str(path)).graph.node[0].op_type == "Gelu"
    with pytest.raises(FusiontuneError, match=r"'Gelu'.*opset 18 does not define"):
        to_onnx(graph, opset=18)
    with pytest.raises(FusiontuneError, match=r"opset 5 is not supported"):
        to_onnx(graph, opset=5)
    with pytest.raises(FusiontuneError, match=r"cannot write '.*missing.g.onnx'"):
        to_onnx(graph, tmp_path / "missing" / "g.onnx")


def test_to_onnx_attribute_kinds() -> None:
    """Tuples -> ints/floats, strings, ndarray -> tensor attributes round-trip into ONNX."""
    import onnx

    graph, _ = single_op("ConstantOfShape", [C(np.asarray([2], I64))],
                         {"value": np.asarray([1.0], np.float32)}, [(2,)])  # fmt: skip
    attr = to_onnx(graph).graph.node[0].attribute[0]
    assert attr.type == onnx.AttributeProto.TENSOR
    graph, _ = single_op(
        "MaxPool", [A(rnd(1, 1, 4, 4))], {"kernel_shape": (2, 2), "auto_pad": "VALID"}
    )
    attrs = {a.name: a for a in to_onnx(graph).graph.node[0].attribute}
    assert list(attrs["kernel_shape"].ints) == [2, 2]
    assert attrs["auto_pad"].s == b"VALID"
    assert math.isclose(
        onnx.helper.get_attribute_value(
            to_onnx(single_op("LeakyRelu", [A(rnd(2))], {"alpha": 0.25})[0])
            .graph.node[0]
            .attribute[0]
        ),
        0.25,
    )


@pytest.mark.parametrize(
    ("op_type", "ins", "attrs", "opset", "form"),
    [("ReduceMean", [A(rnd(2, 3, 4)), C(np.asarray([1], I64))], {}, 17, "attribute"),
     ("ReduceMean", [A(rnd(2, 3, 4))], {"axes": (1,)}, 18, "input"),
     ("Squeeze", [A(rnd(2, 1, 4))], {"axes": (1,)}, 13, "input"),
     ("Unsqueeze", [A(rnd(2, 4)), C(np.asarray([0], I64))], {}, 13, "input"),
     ("Split", [A(rnd(2, 6))], {"axis": 1, "split": (2, 4)}, 13, "input")],
)  # fmt: skip
def test_to_onnx_moves_operands_between_opsets(
    op_type: str, ins: list[A | C | None], attrs: dict[str, Any], opset: int, form: str
) -> None:
    """Operands that ONNX moved from attributes to inputs are written as ``opset`` wants."""
    n_out = 2 if op_type == "Split" else 1
    shapes: list[Shape] | None = [(2, 2), (2, 4)] if op_type == "Split" else None
    graph, feeds = single_op(op_type, ins, attrs, shapes, n_outputs=n_out)
    node = to_onnx(graph, opset=opset).graph.node[0]
    key = "split" if op_type == "Split" else "axes"
    assert (key in [a.name for a in node.attribute]) == (form == "attribute")
    assert len(node.input) == (1 if form == "attribute" else 2)
    check_vs_ort(graph, feeds, opset=opset)


def test_to_onnx_rejects_invalid_graphs_with_one_line() -> None:
    graph, _ = single_op("Relu", [A(rnd(2))], {"foo": 1})
    with pytest.raises(FusiontuneError, match=r"graph 'Relu' is not valid ONNX: .*foo") as info:
        to_onnx(graph)
    assert "\n" not in str(info.value)
    graph, _ = single_op("Relu", [A(rnd(2))], {"body": b"\x08\x01"})
    with pytest.raises(FusiontuneError, match=r"attribute 'body' holds bytes"):
        to_onnx(graph)


def test_to_onnx_custom_domain_gets_an_opset_import() -> None:
    tensors = {"x": Tensor("x", (2,)), "y": Tensor("y", (2,))}
    op = Op("c", "MyOp", ("x",), ("y",), {"k": (1, 2)}, domain="com.example")
    model = to_onnx(Graph("custom", tensors, (op,), ("x",), ("y",)))
    assert {o.domain: o.version for o in model.opset_import} == {"": 21, "com.example": 1}
    assert model.graph.node[0].domain == "com.example"
    with pytest.raises(FusiontuneError, match=r"no kernel for op type 'MyOp' in domain"):
        reference_run(Graph("custom", tensors, (op,), ("x",), ("y",)), {"x": rnd(2)})


# ---- every registered op, on its own ----------------------------------------------------------
# One onnxruntime case per registered op type, run by the test below itself (so it checks every
# op under -k, --lf, xdist or any order): the first case, by name, of the op's table above, or
# a representative of its parametrized test. An op type onnxruntime cannot serve goes in
# NO_ORT_CASE with the reason and the test that checks it instead.
ONE_CASE_PER_OP: dict[str, Callable[[], OpCase]] = {
    "Conv": partial(conv_case, "k3_p1"),
    "ConvTranspose": partial(conv_transpose_case, "k4_s2_p1"),
    "Gemm": partial(gemm_case, 0, 1, (5,)),
    "MatMul": partial(matmul_case, "3x2", True),
    "Resize": partial(resize_case, "half_pixel", "linear", "", "scales"),
    "Reshape": lambda: single_op("Reshape", [A(rnd(2, 3, 1, 20)), C(np.asarray((0, -1), I64))]),
    "Flatten": lambda: single_op("Flatten", [A(rnd(2, 3, 4, 5))], {"axis": 2}),
    "Squeeze": lambda: single_op("Squeeze", [A(rnd(1, 3, 1, 4)), C(np.asarray((0, 2), I64))]),
    "Unsqueeze": lambda: single_op("Unsqueeze", [A(rnd(3, 4)), C(np.asarray((0, -1), I64))]),
    "Transpose": lambda: single_op("Transpose", [A(rnd(2, 3, 4, 5))], {"perm": (0, 2, 3, 1)}),
    "BatchNormalization": lambda: single_op(
        "BatchNormalization", [A(rnd(2, 3, 5, 5)), *bn_params(3)], {"epsilon": 1e-3}
    ),
    "LayerNormalization": lambda: single_op(
        "LayerNormalization", [A(rnd(2, 3, 4, 5) * 2 + 1), C(rnd(5, seed=4)), C(rnd(5, seed=5))],
        {"axis": -1, "epsilon": 1e-5},
    ),
    "RMSNormalization": lambda: single_op(
        "RMSNormalization", [A(rnd(2, 3, 4, 5) * 2 + 1), C(rnd(5, seed=4))], {"epsilon": 1e-6},
    ),
    "InstanceNormalization": lambda: single_op(
        "InstanceNormalization", [A(rnd(2, 6, 4, 5) * 2 + 1), C(rnd(6, seed=1)),
                                  C(rnd(6, seed=2))], {"epsilon": 1e-5},
    ),
    "GroupNormalization": lambda: single_op(
        "GroupNormalization", [A(rnd(2, 6, 4, 5) * 2 + 1), C(rnd(6, seed=1)), C(rnd(6, seed=2))],
        {"num_groups": 3, "epsilon": 1e-5},
    ),
    "LpNormalization": lambda: single_op("LpNormalization", [A(rnd(3, 4, 5))], {"axis": 1, "p": 2}),
    "Softmax": lambda: single_op("Softmax", [A(rnd(2, 3, 4) * 5)], {"axis": -1}),
    "LogSoftmax": lambda: single_op("LogSoftmax", [A(rnd(2, 3, 4) * 5)], {"axis": 1}),
    "Clip": lambda: single_op("Clip", [A(rnd(3, 4)), C(np.float32(-0.5)), C(np.float32(0.7))]),
    "PRelu": lambda: single_op("PRelu", [A(rnd(2, 3, 4, 4)), C(rnd(3, 1, 1, seed=1))]),
    "Pow": lambda: single_op("Pow", [A(rnd(3, 4, positive=True)), C(np.float32(1.7))]),
    **{t: partial(binary_case, t, (3, 1, 1), True)
       for t in ("Add", "Sub", "Mul", "Div", "Max", "Min", "Sum")},
    **{t: partial(single_op, t, [A(rnd(2, 3, 5, 6))])
       for t in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")},
    **{t: partial(reduce_case, t, (1,), 1) for t in REDUCE_TYPES},
    "QuantizeLinear": lambda: single_op(
        "QuantizeLinear", [A(rnd(2, 3, 4, 5) * 4), C(np.float32(0.05)), C(np.uint8(3))],
        out_dtypes=["uint8"],
    ),
    "DequantizeLinear": lambda: single_op(
        "DequantizeLinear", [A(np.arange(120, dtype=np.int8).reshape(2, 3, 4, 5)),
                             C(np.float32(0.05)), C(np.int8(-5))],
    ),
    "DepthToSpace": partial(depth_to_space_case, "CRD", (1, 8, 3, 5), 2),
    "LSTM": partial(lstm_case, "bidirectional"),
    "ScatterElements": partial(indexing_case, "scatter_elements_axis1_neg_idx"),
    "DynamicQuantizeLinear": lambda: single_op(
        "DynamicQuantizeLinear", [A(rnd(2, 3, 4, 5))], out_shapes=[(2, 3, 4, 5), (), ()],
        out_dtypes=["uint8", "float32", "uint8"], n_outputs=3,
    ),
}  # fmt: skip
for _op_type, _attrs in UNARY_CASES:
    ONE_CASE_PER_OP.setdefault(_op_type, partial(unary_case, _op_type, _attrs))
for _name in sorted(POOL_CASES):
    ONE_CASE_PER_OP.setdefault(POOL_CASES[_name][0], partial(pool_case, _name))
for _name in sorted(STRUCTURAL_CASES):
    ONE_CASE_PER_OP.setdefault(STRUCTURAL_CASES[_name][0], partial(structural_case, _name))
for _name in sorted(INDEXING_CASES):
    ONE_CASE_PER_OP.setdefault(INDEXING_CASES[_name][0], partial(indexing_case, _name))

NO_ORT_CASE: dict[str, str] = {
    "Attention": "an opset-23 op (this test exports at opset 21): tests/test_attention.py "
    "checks it against onnxruntime at opset 23",
}
"""Op type -> why onnxruntime cannot be its oracle here and which test checks it instead."""


@pytest.mark.parametrize("op_type", sorted(REGISTRY))
def test_every_registered_op_meets_onnxruntime(op_type: str) -> None:
    """The op type's own case: reference kernel == onnxruntime (or the reason there is none)."""
    if op_type in NO_ORT_CASE:
        assert op_type not in ONE_CASE_PER_OP and NO_ORT_CASE[op_type].strip()
        return
    assert op_type in ONE_CASE_PER_OP, (
        f"{op_type} is registered but has no onnxruntime case: add one to ONE_CASE_PER_OP "
        f"(tests/test_reference.py), or its reason to NO_ORT_CASE"
    )
    graph, feeds = ONE_CASE_PER_OP[op_type]()
    assert [op.op_type for op in graph.ops] == [op_type]
    check_vs_ort(graph, feeds)


def test_the_per_op_cases_name_registered_ops() -> None:
    """No stale entries: every op type with a case or a reason is registered."""
    assert not (set(ONE_CASE_PER_OP) | set(NO_ORT_CASE)) - set(REGISTRY)
