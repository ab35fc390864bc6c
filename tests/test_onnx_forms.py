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
import onnxruntime as ort
import pytest

import fusiontune as ft
from fusiontune.reference import random_inputs
from fusiontune.search.optimize import optimal_plan
from fusiontune.sim.cost import group_cost
from fusiontune.sim.execute import execute, group_order

FORMS_DIR = Path(__file__).parent / "data" / "onnx_forms"
REL_TOL = 1e-5  # measured worst over the corpus: 3.6e-7 (float32 re-association)
CORPUS_MAX_BYTES = 2_000_000


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
