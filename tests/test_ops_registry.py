"""The op registry (fusiontune/ops): one OpDef per op type, and what reads it.

- every registered op has a reference kernel (compared with onnxruntime op by op in
  tests/test_reference.py) and says whether its fused kernel is distinct; every distinct
  fused kernel is compared here with the reference kernel (relative error <= 1e-5 of
  ``max|reference|``, float32 both);
- unknown op types fall back to the OPAQUE default with a clear error when executed;
- BatchNormalization's class follows its training mode in both ONNX forms;
- one FC-likeness rule for the planner and the cost model's lower bound;
- verify names the ops that ran on their own reference kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fusiontune.errors import FusiontuneError
from fusiontune.export.onnx_export import to_onnx
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph, Op, Tensor
from fusiontune.ir.opclass import OpClass
from fusiontune.ops import (
    DEFAULT,
    REGISTRY,
    SAME_AS_REFERENCE,
    PoolReduce,
    classify,
    infer_op_shapes,
    is_fc_like,
    op_def,
    run_fused,
    run_reference,
)
from fusiontune.planner.legality import check_group
from fusiontune.planner.plan import Mode
from fusiontune.sim.cost import lower_bound
from fusiontune.sim.hardware import HardwareConfig

REL_TOL = 1e-5  # fused vs reference: max|fused - ref| / max|ref|, float32
FUSED_DISTINCT = {
    "Conv", "MaxPool", "AveragePool", "BatchNormalization", "LayerNormalization",
    "RMSNormalization", "ConvTranspose", "Resize", "Attention",
}  # fmt: skip
"""Op types whose executor kernel is a second implementation (the rest run the reference)."""


def rnd(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    return float(diff.max()) / max(float(np.abs(want.astype(np.float64)).max()), 1e-30)


# ---- every op: a reference kernel, a stated fused kernel ----------------------------------------
@pytest.mark.parametrize("op_type", sorted(REGISTRY))
def test_every_op_has_a_reference_kernel_and_states_its_fused_kernel(op_type: str) -> None:
    d = REGISTRY[op_type]
    assert d.op_type == op_type
    assert callable(d.reference)
    if op_type in FUSED_DISTINCT:
        assert d.has_fused_kernel and callable(d.fused)
        assert op_type in {case[0] for case in FUSED_CASES}, "compare it with the reference below"
    else:
        assert d.fused is SAME_AS_REFERENCE and not d.has_fused_kernel


def _bn_inputs(c: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [
        (1 + 0.1 * rng.standard_normal(c)).astype(np.float32),
        (0.1 * rng.standard_normal(c)).astype(np.float32),
        (0.1 * rng.standard_normal(c)).astype(np.float32),
        (0.5 + rng.random(c)).astype(np.float32),
    ]


CONV_W = rnd(6, 3, 3, 3, seed=1)
FUSED_CASES: list[tuple[str, list[np.ndarray | None], dict[str, Any], int]] = [
    ("Conv", [rnd(2, 3, 9, 9), CONV_W, rnd(6, seed=2)], {"pads": (1, 1, 1, 1)}, 1),
    ("Conv", [rnd(1, 3, 9, 8), CONV_W, None], {"strides": (2, 2), "dilations": (2, 1)}, 1),
    ("Conv", [rnd(1, 6, 7, 7), rnd(6, 1, 3, 3, seed=3), None], {"group": 6, "pads": (1,) * 4}, 1),
    ("Conv", [rnd(1, 4, 6, 6), rnd(6, 2, 1, 1, seed=4), None], {"group": 2}, 1),
    ("Conv", [rnd(1, 3, 7, 7), CONV_W, None], {"auto_pad": "SAME_LOWER", "strides": (2, 2)}, 1),
    ("MaxPool", [rnd(2, 3, 9, 9)], {"kernel_shape": (3, 3), "strides": (2, 2)}, 1),
    (
        "MaxPool",
        [rnd(1, 3, 8, 8)],
        {"kernel_shape": (3, 3), "strides": (2, 2), "ceil_mode": 1, "pads": (1, 1, 0, 0)},
        1,
    ),
    ("AveragePool", [rnd(1, 3, 8, 8)], {"kernel_shape": (3, 3), "pads": (1,) * 4}, 1),
    (
        "AveragePool",
        [rnd(1, 3, 8, 8)],
        {
            "kernel_shape": (3, 3),
            "pads": (1,) * 4,
            "count_include_pad": 1,
            "ceil_mode": 1,
            "strides": (2, 2),
        },
        1,
    ),
    ("BatchNormalization", [rnd(2, 4, 5, 5), *_bn_inputs(4)], {"epsilon": 1e-3}, 1),
    ("BatchNormalization", [rnd(8, 4) * 3 + 1, *_bn_inputs(4)], {"training_mode": 1}, 3),
    ("BatchNormalization", [rnd(2, 4, 5) * 3 + 1, *_bn_inputs(4)], {"momentum": 0.7}, 5),
    ("LayerNormalization", [rnd(2, 3, 8) * 2 + 1, rnd(8, seed=5), rnd(8, seed=6)], {}, 3),
    (
        "Attention",
        [
            rnd(2, 3, 37, 8),
            rnd(2, 3, 41, 8, seed=1),
            rnd(2, 3, 41, 5, seed=2),
            rnd(2, 1, 1, 41, seed=3),
        ],
        {"scale": 0.4},
        1,
    ),  # online softmax, 3 blocks
    ("LayerNormalization", [rnd(2, 3, 8) * 2 + 1, rnd(3, 8, seed=5)], {"axis": -2}, 1),
    ("RMSNormalization", [rnd(2, 3, 8) * 2 + 1, rnd(3, 8, seed=5)], {"axis": -2}, 1),
    # more ConvTranspose and Resize forms, band by band: tests/test_upsampling.py
    (
        "ConvTranspose",
        [rnd(1, 4, 5, 6), rnd(4, 3, 4, 4, seed=7), rnd(6, seed=8)],
        {"strides": (2, 2), "pads": (1,) * 4, "output_padding": (1, 0), "group": 2},
        1,
    ),
    (
        "Resize",
        [rnd(1, 3, 5, 4), None, np.asarray([1, 1, 2, 3], np.float32)],
        {"mode": "linear", "coordinate_transformation_mode": "half_pixel"},
        1,
    ),
]


@pytest.mark.parametrize(("op_type", "inputs", "attrs", "n_out"), FUSED_CASES)
def test_fused_kernel_matches_reference(
    op_type: str, inputs: list[np.ndarray | None], attrs: dict[str, Any], n_out: int
) -> None:
    names = tuple(f"in{i}" if v is not None else "" for i, v in enumerate(inputs))
    op = Op("op", op_type, names, tuple(f"y{i}" for i in range(n_out)), attrs)
    want = run_reference(op, inputs)
    got = run_fused(op, inputs)
    assert len(got) == len(want) == n_out
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert rel_err(g, w) <= REL_TOL


# ---- the default for unknown op types -----------------------------------------------------------
def test_unknown_op_type_is_opaque_without_shapes_or_kernel() -> None:
    op = Op("h", "Hardmax", ("x",), ("y",))
    assert op_def("Hardmax") is DEFAULT
    assert classify(op, lambda name: False) is OpClass.OPAQUE
    assert infer_op_shapes(op, {"x": Tensor("x", (2, 3))}) == [None]
    with pytest.raises(FusiontuneError, match=r"^op 'h': the reference executor has no kernel "
                       r"for op type 'Hardmax'"):  # fmt: skip
        run_reference(op, [rnd(2, 3)])
    with pytest.raises(FusiontuneError, match=r"no kernel for op type 'Hardmax'"):
        run_fused(op, [rnd(2, 3)])


def test_an_op_of_another_domain_is_not_the_onnx_op() -> None:
    op = Op("r", "Relu", ("x",), ("y",), domain="com.example")
    assert op_def("Relu", "com.example") is DEFAULT
    assert classify(op, lambda name: False) is OpClass.OPAQUE
    with pytest.raises(FusiontuneError, match=r"'Relu' in domain 'com.example'"):
        run_reference(op, [rnd(2)])


def test_a_required_attribute_without_default_is_named() -> None:
    op = Op("g", "GroupNormalization", ("x", "s", "b"), ("y",))
    with pytest.raises(FusiontuneError, match=r"op 'g' \(GroupNormalization\): attribute "
                       r"'num_groups' is required"):  # fmt: skip
        run_reference(op, [rnd(1, 4, 3), np.ones(4, np.float32), np.zeros(4, np.float32)])


# ---- BatchNormalization: class by training mode -------------------------------------------------
@pytest.mark.parametrize(
    ("attrs", "outputs", "cls"),
    [
        ({}, ("y",), OpClass.AFFINE),
        ({"training_mode": 0}, ("y",), OpClass.AFFINE),
        ({"training_mode": 1}, ("y",), OpClass.STATS),
        ({"training_mode": 1}, ("y", "m", "v"), OpClass.STATS),
        ({}, ("y", "m", "v", "sm", "sv"), OpClass.STATS),  # opset 9-13 training form
        ({}, ("y", "", "", "", ""), OpClass.AFFINE),  # optional outputs left out
    ],
)
def test_batchnorm_class_follows_training_mode(
    attrs: dict[str, int], outputs: tuple[str, ...], cls: OpClass
) -> None:
    op = Op("bn", "BatchNormalization", ("x", "s", "b", "m0", "v0"), outputs, attrs)
    assert classify(op, lambda name: name != "x") is cls


def _train_bn_graph(n_outputs: int, consumed: bool) -> Graph:
    b = GraphBuilder("bn5", seed=1)
    x = b.input("x", (4, 3))
    c = 3
    ins = [x, *(b.const(f"p{i}", v) for i, v in enumerate(_bn_inputs(c)))]
    y = b.op("BatchNormalization", ins, {"momentum": 0.9}, name="bn", n_outputs=n_outputs)
    if consumed:
        b.output(y, b.relu("bn.out3", name="r"))
    return b.build()


def test_export_writes_training_bn_in_the_opsets_form() -> None:
    graph = _train_bn_graph(5, consumed=False)
    old = to_onnx(graph, opset=13).graph.node[0]
    assert len(old.output) == 5 and "training_mode" not in [a.name for a in old.attribute]
    new = to_onnx(graph, opset=21).graph.node[0]
    assert list(new.output) == ["bn", "bn.out1", "bn.out2"]
    assert {a.name: a.i for a in new.attribute}["training_mode"] == 1
    read = _train_bn_graph(5, consumed=True)
    to_onnx(read, opset=13)
    with pytest.raises(FusiontuneError, match=r"output 'bn.out3' \(saved batch statistics\) "
                       r"exists only up to opset 13; export with opset=13"):  # fmt: skip
        to_onnx(read, opset=21)


# ---- FC-likeness: one rule ----------------------------------------------------------------------
def test_gemm_with_transposed_input_is_not_fc_like_for_planner_or_lower_bound() -> None:
    """transA=1 reads its features along axis 0: a merge may not chain it (rule of the
    planner), so the compulsory weight bytes count both matrices unmerged."""
    b = GraphBuilder("transa", seed=2)
    x = b.input("x", (8, 4))  # (K, M): read transposed
    w1 = b.weight("w1", (8, 16), 8)
    h = b.op("Gemm", [x, w1], {"transA": 1}, name="f1")
    w2 = b.weight("w2", (16, 8), 16)
    b.op("Gemm", [h, w2], name="f2")
    graph = b.build()
    f1, f2 = graph.op("f1"), graph.op("f2")
    assert f1.op_class is f2.op_class is OpClass.LINEAR
    assert not is_fc_like(graph, f1) and is_fc_like(graph, f2)
    assert check_group(graph, ["f1", "f2"], Mode.MERGE)  # refused
    hw = HardwareConfig(weights_resident=False)
    acts = (8 * 4 + 4 * 8) * hw.act_bytes
    assert lower_bound(graph, hw) == acts + hw.weight_bytes(8 * 16) + hw.weight_bytes(16 * 8)


# ---- verify names the self-compared ops ---------------------------------------------------------
def test_verify_reports_ops_compared_with_themselves() -> None:
    from fusiontune.planner.baselines import greedy_plan, unfused_plan
    from fusiontune.sim.verify import verify

    b = GraphBuilder("cbrp", seed=3)
    x = b.input("x", (1, 3, 8, 8))
    y = b.maxpool(b.relu(b.bn(b.conv(x, 4, 3, name="c"), name="bn"), name="r"), 2, name="p")
    b.gemm(b.flatten(y, name="f"), 5, name="g")
    graph = b.build()
    fused = verify(graph, greedy_plan(graph))
    assert fused.passed
    assert fused.self_compared_ops == ("r", "f")  # bn folds into c; c, p, g: fused kernels
    assert fused.self_compared_types == (("Relu", 1), ("Flatten", 1))
    assert "self-compared: 2 op(s) ran their reference kernel in both runs (Relu x1, " in (
        fused.summary()
    )
    unfused = verify(graph, unfused_plan(graph))
    assert unfused.self_compared_ops == ("r", "f")  # bn alone runs its fused kernel


def test_simulate_verify_cli_names_self_compared_ops(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from fusiontune.cli.main import main

    assert main(["simulate", "lenet5", "--plan", "greedy", "--verify", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["verify"]
    assert report["self_compared_ops"] == ["relu1", "relu2", "flatten", "fc1.relu", "fc2.relu"]
    assert main(["simulate", "lenet5", "--plan", "greedy", "--verify"]) == 0
    assert (
        "self-compared: 5 op(s) ran their reference kernel in both runs (Relu x4, Flatten x1)"
        in (capsys.readouterr().out)
    )


# ---- executor schemes: the OpDef fields the simulator branches on ------------------------------
_FOLD = {PoolReduce.MAX: np.max, PoolReduce.MEAN: np.mean}


@pytest.mark.parametrize(
    "op_type", sorted(t for t, d in REGISTRY.items() if d.pool_reduce is not None)
)
def test_pool_reduce_is_what_the_reference_computes(op_type: str) -> None:
    """A pool the executor folds row by row by ``pool_reduce`` computes that fold: a global
    pool over all spatial positions, a window pool over non-overlapping 2x2 windows."""
    d = REGISTRY[op_type]
    assert d.pool_reduce is not None
    x = rnd(1, 2, 4, 6)
    if d.global_pool:
        op = Op("p", op_type, ("x",), ("y",))
        want = _FOLD[d.pool_reduce](x, axis=(2, 3), keepdims=True)
    else:
        op = Op("p", op_type, ("x",), ("y",), {"kernel_shape": (2, 2), "strides": (2, 2)})
        want = _FOLD[d.pool_reduce](x.reshape(1, 2, 2, 2, 3, 2), axis=(3, 5))
    np.testing.assert_allclose(run_reference(op, [x])[0], want, rtol=1e-6)


def test_scheme_fields_are_set_on_the_ops_the_executor_tiles() -> None:
    """The ops whose executor schemes these fields select keep them (a lost field would make
    the executor fall back to a whole-array or refused schedule without an error)."""
    by_field = {
        "two_pass_stats": {"BatchNormalization"},
        "concatenates": {"Concat"},
        "activation_matmul": {"MatMul"},
        "pool_reduce": {"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"},
        "stats_axes": {
            "LayerNormalization",
            "RMSNormalization",
            "Softmax",
            "LogSoftmax",
            "LpNormalization",
        },
        "row_local": {"Gemm"},
    }
    for name, types in by_field.items():
        have = {t for t, d in REGISTRY.items() if getattr(d, name) not in (None, False)}
        assert types <= have, f"{name}: {sorted(types - have)} lost it"
    ln = Op("ln", "LayerNormalization", ("x", "g", "b"), ("y",), {"axis": -2})
    axes_of = REGISTRY["LayerNormalization"].stats_axes
    assert axes_of is not None and axes_of(ln, 4) == frozenset({2, 3})
