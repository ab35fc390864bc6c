"""Fused execution: outputs equal the op-by-op reference, counted bytes equal the analytic model.

Tolerance: float32 outputs within ``1e-4`` of ``max|reference|`` (plus ``1e-6`` absolute);
folding and merging re-associate sums and move outputs by ~1e-6 on these graphs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from fusiontune.errors import FusiontuneError, IllegalPlanError
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.planner.plan import Group, Mode, Plan
from fusiontune.sim.execute import ExecutionInputError, compile_group, execute, group_order

RTOL = 1e-4  # float32 tolerance relative to max|reference|
ATOL = 1e-6
ENUMERATE_MAX = 60  # enumerate every plan up to this many, else sample random legal plans
RANDOM_PLANS = 20


# ---- small graphs -----------------------------------------------------------------------------
def conv_chain() -> Graph:
    b = GraphBuilder("conv_chain", seed=1)
    x = b.input("x", (1, 4, 9, 9))
    y = b.relu(b.conv(x, 8, 3, name="c1"), name="r1")
    y = b.conv(y, 8, 3, stride=2, name="c2")
    y = b.conv(y, 6, 1, name="c3")
    y = b.act("Sigmoid", y, name="sig")
    return b.build()


def conv_bn_relu_pool() -> Graph:
    b = GraphBuilder("cbrp", seed=2)
    x = b.input("x", (1, 4, 11, 11))
    y = b.bn(b.conv(x, 8, 3, name="c1"), name="bn1")
    y = b.maxpool(b.relu(y, name="r1"), 3, 2, pad=1, ceil_mode=1, name="p1")
    return b.build()


def residual_block() -> Graph:
    b = GraphBuilder("res", seed=3)
    x = b.input("x", (2, 8, 8, 8))
    y = b.relu(b.bn(b.conv(x, 8, 3, bias=False, name="c1"), name="bn1"), name="r1")
    y = b.bn(b.conv(y, 8, 3, bias=False, name="c2"), name="bn2")
    b.relu(b.add(y, x, name="add"), name="r2")
    return b.build()


def fc_chain_bn() -> Graph:
    b = GraphBuilder("fc_bn", seed=4)
    x = b.input("x", (4, 16))
    y = b.gemm(b.bn(b.gemm(x, 12, name="f1"), name="bn1"), 10, name="f2")
    b.gemm(b.relu(y, name="r"), 6, name="f3")
    return b.build()


def train_bn() -> Graph:
    b = GraphBuilder("train_bn", seed=5)
    x = b.input("x", (2, 4, 6, 6))
    y = b.relu(b.bn(b.conv(x, 6, 3, name="c1"), training=True, name="bn1"), name="r1")
    b.conv(y, 4, 1, name="c2")
    return b.build()


def layernorm_mlp() -> Graph:
    b = GraphBuilder("ln", seed=6)
    x = b.input("x", (2, 5, 16))
    y = b.layernorm(b.matmul(x, 16, name="m1"), name="ln1")
    b.matmul(b.act("Gelu", y, name="gelu"), 8, name="m2")
    return b.build()


def pools() -> Graph:
    b = GraphBuilder("pools", seed=7)
    x = b.input("x", (1, 3, 10, 10))
    y = b.conv(x, 4, 3, pad=0, name="c1")  # 8x8
    a = b.avgpool(y, 3, 2, pad=1, name="ap")  # 4x4, count_include_pad=0
    attrs = {
        "kernel_shape": (3, 3),
        "strides": (2, 2),
        "pads": (1, 1, 1, 1),
        "count_include_pad": 1,
        "ceil_mode": 1,
    }
    c = b.op("AveragePool", [y], attrs, name="ap_inc")  # 5x5
    m = b.maxpool(y, 3, 2, pad=0, ceil_mode=1, name="mp")  # 4x4 (last window clipped)
    b.output(a, c, m)
    return b.build()


SMALL_GRAPHS: dict[str, Callable[[], Graph]] = {
    "conv_chain": conv_chain,
    "conv_bn_relu_pool": conv_bn_relu_pool,
    "residual_block": residual_block,
    "fc_chain_bn": fc_chain_bn,
    "train_bn": train_bn,
    "layernorm_mlp": layernorm_mlp,
    "pools": pools,
}


def plans_of(graph: Graph, seed: int = 0) -> list[Plan]:
    """Every legal plan when there are few, else random legal plans (plus unfused, greedy)."""
    from fusiontune.planner.baselines import greedy_plan, random_plan, unfused_plan
    from fusiontune.planner.enumerate import count_plans, enumerate_plans

    if count_plans(graph) <= ENUMERATE_MAX:
        return list(enumerate_plans(graph))
    rng = np.random.default_rng(seed)
    plans = [unfused_plan(graph), greedy_plan(graph)]
    plans += [random_plan(graph, rng) for _ in range(RANDOM_PLANS)]
    return list({p.hash: p for p in plans}.values())


def assert_close(graph: Graph, got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    for name in graph.outputs:
        assert got[name].shape == want[name].shape
        peak = float(np.abs(want[name]).max())
        err = float(np.abs(got[name].astype(np.float64) - want[name]).max())
        assert err <= ATOL + RTOL * peak, f"{graph.name}:{name} err {err:.3g} peak {peak:.3g}"


# ---- property: every plan executes exactly and counts the analytic bytes --------------------
@pytest.mark.parametrize("name", sorted(SMALL_GRAPHS))
def test_every_plan_matches_reference_and_analytic_traffic(name: str) -> None:
    from fusiontune.reference import random_inputs, reference_run
    from fusiontune.sim.cost import simulate

    graph = SMALL_GRAPHS[name]()
    inputs = random_inputs(graph, seed=0)
    want = reference_run(graph, inputs)
    plans = plans_of(graph)
    assert len(plans) >= 3
    modes_seen: set[Mode] = set()
    for plan in plans:
        run = execute(graph, plan, inputs)
        metrics = simulate(graph, plan)
        assert run.act_read_bytes == metrics.act_read_bytes, plan.to_json()
        assert run.act_write_bytes == metrics.act_write_bytes, plan.to_json()
        assert run.group_read_bytes == tuple(g.act_read_bytes for g in metrics.groups)
        assert run.group_write_bytes == tuple(g.act_write_bytes for g in metrics.groups)
        assert_close(graph, run.outputs, want)
        modes_seen |= {g.mode for g in plan.groups}
    assert Mode.FUSED in modes_seen


def test_fc_chain_plans_cover_merge_and_stream() -> None:
    graph = fc_chain_bn()
    modes = {g.mode for p in plans_of(graph) for g in p.groups}
    assert {Mode.MERGE, Mode.STREAM} <= modes


# ---- hand-computed traffic --------------------------------------------------------------------
def test_hand_computed_bytes_conv_bn_relu_pool() -> None:
    from fusiontune.reference import random_inputs
    from fusiontune.sim.hardware import HardwareConfig

    graph = conv_bn_relu_pool()
    inputs = random_inputs(graph)
    # input 1*4*11*11 = 484 elements; conv/bn/relu outputs 1*8*11*11 = 968 each;
    # pool (k3 s2 p1 ceil): out = ceil((11 + 2 - 3) / 2) + 1 = 6 -> 1*8*6*6 = 288
    unfused = Plan.of(graph, [Group((op.name,), Mode.SINGLE) for op in graph.ops])
    run = execute(graph, unfused, inputs)
    assert run.group_read_bytes == (484, 968, 968, 968)
    assert run.group_write_bytes == (968, 968, 968, 288)
    fused = Plan.of(graph, [Group(("c1", "bn1", "r1", "p1"), Mode.FUSED)])
    run = execute(graph, fused, inputs)
    assert (run.act_read_bytes, run.act_write_bytes) == (484, 288)
    # 12-bit activations take ceil(12 / 8) = 2 bytes each
    run16 = execute(graph, fused, inputs, hw=HardwareConfig(act_bits=12))
    assert (run16.act_read_bytes, run16.act_write_bytes) == (968, 576)


def test_fan_out_inside_group_is_stored_once() -> None:
    from fusiontune.reference import random_inputs, reference_run

    graph = residual_block()
    inputs = random_inputs(graph)
    # x (2*8*8*8 = 1024) is read once by the group even though c1 and add both use it
    plan = Plan.of(graph, [Group(tuple(op.name for op in graph.ops), Mode.STREAM)])
    run = execute(graph, plan, inputs)
    assert (run.act_read_bytes, run.act_write_bytes) == (1024, 1024)
    assert_close(graph, run.outputs, reference_run(graph, inputs))


# ---- structure of the fused kernels -----------------------------------------------------------
def test_conv_bn_folds_and_p2_never_holds_the_full_conv_output() -> None:
    from fusiontune.reference import random_inputs

    graph = conv_bn_relu_pool()
    group = Group(("c1", "bn1", "r1", "p1"), Mode.FUSED)
    nodes = compile_group(graph, group)
    assert [n.name for n in nodes] == ["c1", "p1"]  # BN folded into the conv, ReLU applied
    assert nodes[0].folded == ("c1", "bn1")  # to each band of its output (its epilogue)
    assert [op.name for op in nodes[0].epilogue] == ["r1"] and nodes[0].outputs == ("r1",)
    assert all(n.banded for n in nodes)
    # the least-buffer schedule (one row per step) never holds a whole intermediate
    run = execute(graph, Plan.of(graph, [group]), random_inputs(graph), band_rows=1)
    assert run.peak_band_rows["r1"] == 3  # the 3x3 pool's window, not the 11 rows
    assert "c1" not in run.peak_band_rows and "bn1" not in run.peak_band_rows  # never exist


def test_merge_group_is_one_matmul_with_merged_weights() -> None:
    graph = fc_chain_bn()
    nodes = compile_group(graph, Group(("f1", "bn1", "f2", "r"), Mode.MERGE))
    assert [n.name for n in nodes] == ["f1"]  # one matmul, the ReLU on its output rows
    assert [op.name for op in nodes[0].epilogue] == ["r"]
    merged = nodes[0].linear
    assert merged is not None and merged.kind == "matrix"
    assert merged.weight.shape == (16, 10)
    assert nodes[0].folded == ("f1", "bn1", "f2")
    # W = W1' W2 with W1' = W1 scaled by the BN: check against the explicit product
    w1 = np.asarray(graph.tensors["f1.weight"].value, np.float64).T
    w2 = np.asarray(graph.tensors["f2.weight"].value, np.float64).T
    g, beta, mu, var = (
        np.asarray(graph.tensors[f"bn1.{k}"].value, np.float64)
        for k in ("scale", "bias", "mean", "var")
    )
    s = g / np.sqrt(var + 1e-5)
    np.testing.assert_allclose(merged.weight, (w1 * s) @ w2, rtol=1e-5, atol=1e-6)
    b1 = np.asarray(graph.tensors["f1.bias"].value, np.float64)
    b2 = np.asarray(graph.tensors["f2.bias"].value, np.float64)
    assert merged.bias is not None
    np.testing.assert_allclose(merged.bias, ((b1 - mu) * s + beta) @ w2 + b2, rtol=1e-5, atol=1e-6)


def test_training_bn_is_a_two_pass_group_not_a_fold() -> None:
    graph = train_bn()
    nodes = compile_group(graph, Group(("c1", "bn1", "r1"), Mode.FUSED))
    assert [n.name for n in nodes] == ["c1", "bn1", "r1"]
    assert nodes[0].folded == ("c1",)
    assert not nodes[1].banded  # statistics need the whole conv output


def test_groups_run_in_dependency_order() -> None:
    b = GraphBuilder("order", seed=8)
    x = b.input("x", (1, 4))
    a = b.relu(x, name="a")
    bb = b.act("Sigmoid", x, name="b")
    b.add(a, bb, name="c")
    graph = b.build()
    # {a, c} is convex and listed first (first op 'a'), yet needs group {b}'s output
    plan = Plan((Group(("a", "c"), Mode.FUSED), Group(("b",), Mode.SINGLE)))
    assert group_order(graph, plan) == [1, 0]
    x_val = np.arange(4, dtype=np.float32).reshape(1, 4) - 1.5
    run = execute(graph, plan, {"x": x_val}, check=False)
    want = np.maximum(x_val, 0) + 1 / (1 + np.exp(-x_val))
    np.testing.assert_allclose(run.outputs["c"], want, rtol=1e-6)
    assert run.group_read_bytes == (8, 4)  # a+c read x and b's output; b reads x
    assert run.group_write_bytes == (4, 4)


# ---- zoo models -------------------------------------------------------------------------------
ZOO_CASES = [
    ("lenet5", None, None),
    ("resnet18", 32, None),
    ("resnet18_train", 32, 4),  # batch 4: batch statistics over 1x1 maps of 2 are degenerate
    ("mobilenet_v2", 32, None),
    ("mlp_linear", 16, None),
    ("mlp_relu", 16, None),
    ("mlp_wide", 16, None),
    ("bert_encoder", 8, None),
]


@pytest.mark.parametrize(("name", "size", "batch"), ZOO_CASES)
def test_zoo_unfused_greedy_random_plans_verify(
    name: str, size: int | None, batch: int | None
) -> None:
    from fusiontune.frontend.zoo import build_zoo
    from fusiontune.planner.baselines import greedy_plan, random_plan, unfused_plan
    from fusiontune.sim.verify import verify

    graph = build_zoo(name, input_size=size, batch=batch)
    rng = np.random.default_rng(11)
    plans = [
        unfused_plan(graph),
        greedy_plan(graph),
        random_plan(graph, rng),
        random_plan(graph, rng),
    ]
    for plan in plans:
        report = verify(graph, plan)
        assert report.traffic_ok, (name, report.summary())
        assert report.outputs_ok, (name, report.summary())
        assert report.max_rel_err < RTOL


# ---- errors -----------------------------------------------------------------------------------
def test_input_and_plan_errors_name_the_problem() -> None:
    from fusiontune.reference import random_inputs

    graph = conv_bn_relu_pool()
    plan = Plan.of(graph, [Group(("c1", "bn1", "r1", "p1"), Mode.FUSED)])
    with pytest.raises(ExecutionInputError, match="input 'x' is missing"):
        execute(graph, plan, {})
    with pytest.raises(ExecutionInputError, match=r"shape \(1, 4, 5, 5\)"):
        execute(graph, plan, {"x": np.zeros((1, 4, 5, 5), np.float32)})
    with pytest.raises(FusiontuneError, match=r"numerics 'cimm'.*did you mean 'cim'"):
        execute(graph, plan, random_inputs(graph), numerics="cimm")
    partial = Plan((Group(("c1", "bn1"), Mode.FUSED),))
    with pytest.raises(IllegalPlanError, match="in no group: r1, p1"):
        execute(graph, partial, random_inputs(graph), check=False)
    # a Conv and a MaxPool with a ReLU left out: not convex (rule 1), refused by the planner
    holes = Plan.of(graph, [Group(("c1", "bn1", "p1"), Mode.FUSED), Group(("r1",), Mode.SINGLE)])
    with pytest.raises(IllegalPlanError):
        execute(graph, holes, random_inputs(graph))
    with pytest.raises(IllegalPlanError, match="cycle"):
        execute(graph, holes, random_inputs(graph), check=False)


# ---- integer tensors (hf_t5_encoder's failure in results/exp_sweep_subset32.md) --------------
def int_tensors_model(path: str) -> None:
    """A T5-style embedding lookup by int64 token ids (a graph input), plus an int64 tensor
    computed inside the model (``Cast`` to int64, ``Min``) that indexes a second ``Gather``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    inits = [
        numpy_helper.from_array(rng.standard_normal((10, 4)).astype(np.float32), "table"),
        numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w"),
        numpy_helper.from_array(np.float32(3.0), "three"),
        numpy_helper.from_array(np.int64(9), "nine"),
        numpy_helper.from_array(np.asarray([-1], np.int64), "last"),
    ]
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"], name="embed"),
        helper.make_node("Add", ["emb", "x"], ["h"], name="add_x"),
        helper.make_node("Mul", ["x", "three"], ["x3"], name="scale"),
        helper.make_node("Abs", ["x3"], ["a"], name="abs"),
        helper.make_node("Cast", ["a"], ["c"], name="to_int", to=TensorProto.INT64),
        helper.make_node("Min", ["c", "nine"], ["bucket"], name="clamp"),
        helper.make_node("Gather", ["table", "bucket"], ["g"], name="lookup"),
        helper.make_node("ReduceSum", ["g", "last"], ["r"], name="sum", keepdims=0),
        helper.make_node("Add", ["h", "r"], ["s"], name="add_r"),
        helper.make_node("MatMul", ["s", "w"], ["m"], name="mm"),
        helper.make_node("Relu", ["m"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "int_tensors",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 6]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 4])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_integer_tensors_keep_their_dtype_in_fused_execution(tmp_path: Path) -> None:
    """The executor keeps each tensor's declared dtype: int64 token ids fed to the model and
    an int64 tensor computed inside it index their ``Gather`` (they were cast to float32, and
    numpy refused float indices: T5's failure). Every plan equals the reference within RTOL
    and the reference equals onnxruntime within 1e-5."""
    import onnxruntime as ort

    from fusiontune.frontend.onnx_import import load_onnx
    from fusiontune.planner.baselines import greedy_plan, unfused_plan
    from fusiontune.reference import random_inputs, reference_run
    from fusiontune.sim.verify import verify

    path = tmp_path / "int_tensors.onnx"
    int_tensors_model(str(path))
    graph = load_onnx(path)
    assert graph.tensors["bucket"].dtype == "int64"
    feeds = random_inputs(graph, seed=0)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    (want,) = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]).run(
        ["y"], feeds
    )
    ref = reference_run(graph, feeds)["y"]
    assert np.max(np.abs(ref - want)) <= 1e-5 * np.max(np.abs(want))
    for plan in (unfused_plan(graph), greedy_plan(graph)):
        run = execute(graph, plan, feeds)
        np.testing.assert_allclose(run.outputs["y"], ref, rtol=0, atol=RTOL * np.abs(ref).max())
        report = verify(graph, plan)
        assert report.passed, report.summary()


def test_an_op_that_broadcasts_along_rows_is_not_an_epilogue() -> None:
    """A (1, 1, C) statistic times a (1, R, 1) constant makes R rows of its one row (magika's
    LayerNorm, from jax2tf): the Mul cannot ride on its producer's bands. It used to, and the
    group asked row R of a one-row tensor: the runner looped without end (issue 23)."""
    from fusiontune.reference import random_inputs, reference_run
    from fusiontune.sim.verify import verify

    b = GraphBuilder("row_broadcast", seed=5)
    x = b.input("x", (1, 1, 16))
    y = b.op("Add", [x, b.const("eps", np.float32(2.0))], name="add")
    y = b.act("Sigmoid", y, name="sig")
    y = b.op("Mul", [y, b.const("scale", np.linspace(0.5, 1.5, 8).reshape(1, 8, 1))],
             name="mul")  # fmt: skip
    b.relu(y, name="relu")
    graph = b.build()
    group = Group(("add", "sig", "mul", "relu"), Mode.FUSED)
    nodes = compile_group(graph, group)
    assert [n.name for n in nodes] == ["add", "mul"]  # sig rides on add, relu on mul
    assert [op.name for op in nodes[0].epilogue] == ["sig"]
    plan = Plan.of(graph, [group])
    inputs = random_inputs(graph)
    run = execute(graph, plan, inputs, band_rows=1)
    assert_close(graph, run.outputs, reference_run(graph, inputs))
    assert (run.act_read_bytes, run.act_write_bytes) == (16, 8 * 16)
    report = verify(graph, plan)
    assert report.passed and report.traffic_ok and report.buffer_ok
