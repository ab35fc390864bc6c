"""The exporter-form corpus (``tests/data/onnx_forms/``, made by
``experiments/make_onnx_forms.py``): real exports of the forms the importer and the fusion rules
must handle, checked without torch.

For every file:

- it loads with ``ft.load_model``, and ``reference_run`` matches onnxruntime;
- the greedy plan passes ``ft.verify`` and its fused execution matches onnxruntime too (a
  reference that makes the same mistake as a wrong fold would hide it from ``verify``);
- every op type loads in a class that fusion can use: no OPAQUE op except those the file's
  case allows (the MatMul with its constant on the left may stay OPAQUE, refused by rule 6).

Metric: ``max|got - onnxruntime| / max|onnxruntime|`` per graph output, float32, at most
``REL_TOL``. Cases that need the op work still to come are ``xfail(strict=True)``: when the work
lands they pass, the strict marker turns that into a failure, and the marker must go.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import fusiontune as ft
from fusiontune.planner.legality import check_group
from fusiontune.planner.plan import Mode
from fusiontune.reference import random_inputs
from fusiontune.search.optimize import optimal_plan
from fusiontune.sim.cost import group_cost
from fusiontune.sim.execute import execute, group_order

FORMS_DIR = Path(__file__).parent / "data" / "onnx_forms"
REL_TOL = 1e-5  # measured worst over the corpus: 3.6e-7 (float32 re-association)
CORPUS_MAX_BYTES = 2_000_000
MERGE_REL_TOL = 1e-5  # merged weights are computed in float64 and rounded once


@dataclass(frozen=True)
class Case:
    """What one corpus file must do.

    Attributes:
        numerics_pending: xfail reason of the two numerics tests (None: they pass today).
        classes_pending: xfail reason of the op-class test (None: it passes today).
        opaque_allowed: op types that may load OPAQUE (their edges refused by rule 6).
    """

    numerics_pending: str | None = None
    classes_pending: str | None = None
    opaque_allowed: frozenset[str] = frozenset()


CASES: dict[str, Case] = {
    "bn_train_opset9": Case(),  # 5 outputs, no training_mode: batch statistics (rule 3)
    "bn_train_opset12": Case(),
    "bn_train_opset15": Case(),
    "gemm_trans_alpha_beta": Case(),
    "matmul_const_left": Case(opaque_allowed=frozenset({"MatMul"})),
    "conv_same_upper": Case(),
    "conv_same_lower": Case(),
    "conv_group_dilation": Case(),
    "conv_transpose": Case(),
    "resize_nearest": Case(),
    "resize_linear": Case(),
    "gelu_erf_opset12": Case(),
    "gelu_op_opset20": Case(),
    "layernorm_op_opset17": Case(),
    "layernorm_decomposed_opset12": Case(),
    "fpn_neck": Case(),
    "fpn_neck_dynamo": Case(),
}


def _params(pending: str) -> list[object]:
    """One pytest param per case, strict-xfail where ``pending`` names a reason."""
    out: list[object] = []
    for name, case in CASES.items():
        reason = getattr(case, pending)
        marks = (
            [pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)] if reason else []
        )
        out.append(pytest.param(name, marks=marks, id=name))
    return out


def _load(name: str) -> ft.Graph:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the OPAQUE warning; tested below
        return ft.load_model(FORMS_DIR / f"{name}.onnx")


def _onnxruntime(name: str, graph: ft.Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(
        str(FORMS_DIR / f"{name}.onnx"), opts, providers=["CPUExecutionProvider"]
    )
    return list(sess.run(list(graph.outputs), feeds))


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape
    diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    return diff / max(float(np.max(np.abs(want.astype(np.float64)))), 1e-30)


def test_corpus_is_complete_and_small() -> None:
    files = {p.stem for p in FORMS_DIR.glob("*.onnx")}
    assert files == set(CASES)
    total = sum(p.stat().st_size for p in FORMS_DIR.iterdir())
    assert total <= CORPUS_MAX_BYTES


@pytest.mark.parametrize("name", _params("numerics_pending"))
def test_reference_matches_onnxruntime(name: str) -> None:
    graph = _load(name)
    feeds = random_inputs(graph, seed=0)
    ref = ft.reference_run(graph, feeds)
    want = _onnxruntime(name, graph, feeds)
    for out, expected in zip(graph.outputs, want):
        assert _rel_err(ref[out], expected) <= REL_TOL, out


@pytest.mark.parametrize("name", _params("numerics_pending"))
def test_greedy_plan_matches_onnxruntime(name: str) -> None:
    graph = _load(name)
    plan = ft.greedy_plan(graph)
    report = ft.verify(graph, plan)
    assert report.passed, report.summary()
    feeds = random_inputs(graph, seed=0)
    run = execute(graph, plan, feeds)
    want = _onnxruntime(name, graph, feeds)
    for out, expected in zip(graph.outputs, want):
        assert _rel_err(run.outputs[out], expected) <= REL_TOL, out


@pytest.mark.parametrize("name", _params("classes_pending"))
def test_ops_load_in_a_fusable_class(name: str) -> None:
    graph = _load(name)
    allowed = CASES[name].opaque_allowed
    opaque = {op.op_type for op in graph.ops if op.op_class is ft.OpClass.OPAQUE}
    assert opaque <= allowed, f"OPAQUE: {sorted(opaque - allowed)}"
    for bn in (op for op in graph.ops if op.op_type == "BatchNormalization"):
        # every BN in the corpus runs in training mode: batch statistics, never foldable
        assert bn.op_class is ft.OpClass.STATS, bn.name
    for edge in ft.explain(graph):  # an allowed OPAQUE op is refused, naming rule 6
        ends = (graph.op_by_name[edge.producer], graph.op_by_name[edge.consumer])
        if any(op.op_class is ft.OpClass.OPAQUE for op in ends):
            assert not edge.fusable and 6 in {r.rule for r in edge.refusals}, edge


# ---- the FPN neck: upsampling inside fused groups -------------------------------------------
FPN_REL_TOL = 1e-4  # fused execution vs the reference executor (sim/verify.py's rtol)
UPSAMPLING = ("ConvTranspose", "Resize")


@pytest.mark.parametrize("name", ["fpn_neck", "fpn_neck_dynamo"])
@pytest.mark.parametrize("planner", ["greedy", "optimal"])
def test_fpn_neck_fuses_its_upsampling_and_measures_what_the_model_says(
    name: str, planner: str
) -> None:
    """ConvTranspose and Resize sit inside fused groups of the greedy and the optimal plan;
    the banded execution (one row per band) matches the reference, the reference matches
    onnxruntime, and each group's measured peak equals the capacity model's."""
    graph = _load(name)
    hw = ft.HardwareConfig()
    plan = ft.greedy_plan(graph, hw=hw) if planner == "greedy" else optimal_plan(graph, hw).plan
    assert plan is not None
    group_of = {op: g for g in plan.groups for op in g.ops}
    ups = [op for op in graph.ops if op.op_type in UPSAMPLING]
    assert {op.op_type for op in ups} == set(UPSAMPLING)
    for op in ups:
        assert len(group_of[op.name].ops) >= 2, f"{op.name} is a singleton"
    unfused = ft.simulate(graph, ft.unfused_plan(graph), hw).act_traffic_bytes
    assert ft.simulate(graph, plan, hw).act_traffic_bytes < unfused
    feeds = random_inputs(graph, seed=0)
    ref = ft.reference_run(graph, feeds)
    want = _onnxruntime(name, graph, feeds)
    run = execute(graph, plan, feeds, hw=hw, band_rows=1)
    for out, expected in zip(graph.outputs, want):
        assert _rel_err(ref[out], expected) <= REL_TOL, out
        assert _rel_err(run.outputs[out], ref[out]) <= FPN_REL_TOL, out
    for k, i in enumerate(group_order(graph, plan)):
        cost = group_cost(graph, plan.groups[i], hw)
        assert run.group_peak_buffer_bytes[k] == cost.buffer_needed_bytes, plan.groups[i].ops
        assert run.group_read_bytes[i] == cost.act_read_bytes


# ---- audit: each exporter form of a rule fuses correctly or is refused, the rule named ----------
def _model(
    nodes: list[onnx.NodeProto], x_shape: tuple[int, ...], inits: dict[str, np.ndarray]
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "form",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _w(*shape: int, seed: int = 0) -> np.ndarray:
    return (0.5 * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


AUDIT_FORMS: dict[str, tuple[onnx.ModelProto, str | None]] = {
    # Gemm transB=1 with alpha/beta -> Gemm alpha/beta: one matrix chain, scales folded
    "gemm_transB_alpha_beta": (_model([
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1", transB=1, alpha=0.5,
                         beta=2.0),
        helper.make_node("Gemm", ["h", "w2", "b2"], ["y"], name="fc2", alpha=1.5, beta=0.25),
    ], (3, 6), {"w1": _w(5, 6), "b1": _w(5, seed=1), "w2": _w(5, 4, seed=2),
                "b2": _w(4, seed=3)}), None),
    # Gemm transA=1 reads its features on axis 0: not a link of a row-wise matrix chain
    "gemm_transA": (_model([
        helper.make_node("Gemm", ["x", "w1"], ["h"], name="fc1", transA=1),
        helper.make_node("Gemm", ["h", "w2"], ["y"], name="fc2"),
    ], (6, 3), {"w1": _w(6, 5), "w2": _w(5, 4, seed=2)}), "not FC-like"),
    # the constant on the left of a MatMul: not a weight on crossbars (rule 6)
    "matmul_const_left": (_model([
        helper.make_node("MatMul", ["w1", "x"], ["h"], name="mm1"),
        helper.make_node("MatMul", ["h", "w2"], ["y"], name="mm2"),
    ], (6, 3), {"w1": _w(5, 6), "w2": _w(3, 4, seed=2)}), "rule 6 (opaque)"),
    # a grouped, dilated Conv is a window, not a matrix over channels
    "conv_group_dilation": (_model([
        helper.make_node("Conv", ["x", "w1"], ["h"], name="c1", group=2, dilations=(2, 2),
                         pads=(2, 2, 2, 2), kernel_shape=(3, 3)),
        helper.make_node("Conv", ["h", "w2"], ["y"], name="c2", kernel_shape=(1, 1)),
    ], (1, 4, 6, 6), {"w1": _w(4, 2, 3, 3), "w2": _w(3, 4, 1, 1, seed=2)}), "not FC-like"),
    # auto_pad SAME_UPPER on a 1x1 stride-1 Conv pads nothing: FC-like, the chain merges
    "conv_same_upper_1x1": (_model([
        helper.make_node("Conv", ["x", "w1"], ["h"], name="c1", auto_pad="SAME_UPPER",
                         kernel_shape=(1, 1)),
        helper.make_node("Conv", ["h", "w2"], ["y"], name="c2", kernel_shape=(1, 1)),
    ], (1, 4, 5, 5), {"w1": _w(6, 4, 1, 1), "w2": _w(3, 6, 1, 1, seed=2)}), None),
    # auto_pad SAME_UPPER on a 3x3 Conv pads: a window, never merged
    "conv_same_upper_3x3": (_model([
        helper.make_node("Conv", ["x", "w1"], ["h"], name="c1", auto_pad="SAME_UPPER",
                         kernel_shape=(3, 3), strides=(2, 2)),
        helper.make_node("Conv", ["h", "w2"], ["y"], name="c2", kernel_shape=(1, 1)),
    ], (1, 4, 6, 6), {"w1": _w(6, 4, 3, 3), "w2": _w(3, 6, 1, 1, seed=2)}), "not FC-like"),
}  # fmt: skip


@pytest.mark.parametrize("form", sorted(AUDIT_FORMS))
def test_a_rule_form_merges_correctly_or_is_refused_naming_the_rule(
    form: str, tmp_path: Path
) -> None:
    """The whole two-op chain as a merge: legal, and then its execution (one merged matrix)
    matches onnxruntime; or refused with a message naming the rule. The planner's own plan
    matches onnxruntime either way."""
    model, refused = AUDIT_FORMS[form]
    path = tmp_path / f"{form}.onnx"
    onnx.save(model, str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        graph = ft.load_model(path)
    ops = tuple(op.name for op in graph.ops)
    refusals = check_group(graph, ops, Mode.MERGE)
    feeds = random_inputs(graph, seed=0)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (want,) = sess.run(["y"], feeds)
    plans = [ft.greedy_plan(graph), optimal_plan(graph).plan]
    if refused is None:
        assert refusals == []
        plans.append(ft.Plan.of(graph, [ft.Group(ops, Mode.MERGE)]))
    else:
        assert refusals and any(refused in str(r) for r in refusals), refusals
    for plan in plans:
        assert plan is not None
        assert _rel_err(execute(graph, plan, feeds).outputs["y"], want) <= MERGE_REL_TOL, plan
