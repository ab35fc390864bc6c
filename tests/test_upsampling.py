"""Upsampling ops: ConvTranspose (LINEAR) and Resize (streamable ELEMWISE).

- kernels: the executor's band kernels, band by band over each op's row spans, equal the
  whole-tensor reference (``max|band - ref| / max|ref| <= 1e-5``, float32; the reference
  itself is checked against onnxruntime in tests/test_reference.py);
- classes: which forms stream, and the reason rule 6 names for those that stay OPAQUE;
- legality: a ConvTranspose takes BN/Relu epilogues and folds a following inference BN like a
  Conv, never merges, never folds a batch-statistics BN;
- execution: a group holding both ops streams row by row (measured peak == capacity model,
  rows of the upsampled tensors never all on chip), fused output vs reference <= 1e-4;
- export: a plan with a folded ConvTranspose runs in onnxruntime like the original (1e-5).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import fusiontune as ft
from fusiontune.export.onnx_export import to_onnx
from fusiontune.export.plan_export import plan_to_onnx
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph, Op
from fusiontune.ops import RowBand, op_def, run_fused, run_reference, unsupported_reason
from fusiontune.ops.linear import conv_transpose_rows, deconv_geometry
from fusiontune.planner.legality import check_group
from fusiontune.planner.plan import Group, Mode, Plan
from fusiontune.reference import random_inputs, reference_run
from fusiontune.sim.cost import group_cost
from fusiontune.sim.execute import compile_group, execute
from fusiontune.sim.rows import RowKind, row_map

BAND_TOL = 1e-5  # banded kernel vs whole reference (float32 re-association only)
EXEC_TOL = 1e-4  # fused execution vs the reference executor (sim/verify.py's rtol)
HW = ft.HardwareConfig()


def rnd(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape
    diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    return diff / max(float(np.max(np.abs(want.astype(np.float64)))), 1e-30)


# ---- ConvTranspose: the band kernel over its row spans ---------------------------------------
DECONV_CASES: dict[str, tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = {
    "k3_s1": ((1, 4, 5, 5), (4, 3, 3, 3), {}),
    "k4_s2_p1": ((1, 4, 5, 6), (4, 3, 4, 4), {"strides": (2, 2), "pads": (1,) * 4}),
    "k3_s2_outpad": ((2, 2, 4, 4), (2, 3, 3, 3),
                     {"strides": (2, 2), "pads": (1,) * 4, "output_padding": (1, 1)}),
    "group2_dil2": ((1, 4, 5, 5), (4, 1, 3, 3),
                    {"group": 2, "dilations": (2, 2), "pads": (1, 0, 2, 1)}),
    "k1_s3_zero_rows": ((1, 2, 4, 5), (2, 3, 1, 1), {"strides": (3, 2)}),
    "pads_crop_beyond_kernel": ((1, 2, 4, 5), (2, 3, 2, 3),
                                {"strides": (2, 2), "pads": (3, 2, 2, 4)}),
    "same_upper": ((1, 2, 4, 5), (2, 3, 3, 3), {"strides": (2, 3), "auto_pad": "SAME_UPPER"}),
    "same_lower_outpad": ((1, 2, 4, 5), (2, 3, 4, 3),
                          {"strides": (2, 3), "auto_pad": "SAME_LOWER",
                           "output_padding": (1, 0)}),
    "valid": ((1, 2, 4, 5), (2, 3, 3, 2), {"strides": (2, 1), "auto_pad": "VALID"}),
    "conv1d_s3": ((1, 2, 6), (2, 3, 2), {"strides": (3,)}),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(DECONV_CASES))
@pytest.mark.parametrize("band_rows", [1, 3])
def test_conv_transpose_bands_match_the_reference(case: str, band_rows: int) -> None:
    x_shape, w_shape, attrs = DECONV_CASES[case]
    op = Op("ct", "ConvTranspose", ("x", "w", "b"), ("y",), attrs)
    geo = deconv_geometry(op, x_shape[2:], w_shape[2:])
    x, w = rnd(*x_shape), rnd(*w_shape, seed=1)
    group = int(attrs.get("group", 1))
    b = rnd(w_shape[1] * group, seed=2)
    want = run_reference(op, [x, w, b])[0]
    assert rel_err(run_fused(op, [x, w, b])[0], want) <= BAND_TOL
    spans = geo.spans()
    assert all(f <= e for f, e in zip(spans.first, spans.end))
    assert list(spans.first) == sorted(spans.first) and list(spans.end) == sorted(spans.end)
    parts = []
    for a in range(0, geo.out_spatial[0], band_rows):
        z = min(a + band_rows, geo.out_spatial[0])
        lo, hi = spans.rows(a, z)
        band = RowBand(lo, a, z, x_shape[2])
        parts.append(
            conv_transpose_rows(x[:, :, lo:hi], w, b, int(attrs.get("group", 1)), geo, band)
        )
    assert rel_err(np.concatenate(parts, axis=2), want) <= BAND_TOL


# ---- Resize: the band kernel over its row spans ----------------------------------------------
RESIZE_FORMS = [
    ("nearest", "asymmetric", "floor"),
    ("nearest", "half_pixel", "round_prefer_floor"),
    ("nearest", "align_corners", "round_prefer_ceil"),
    ("nearest", "pytorch_half_pixel", "ceil"),
    ("linear", "half_pixel", ""),
    ("linear", "align_corners", ""),
    ("linear", "asymmetric", ""),
    ("linear", "pytorch_half_pixel", ""),
]


def _resize_op(mode: str, coord: str, nearest: str, by_sizes: bool) -> tuple[Op, list[Any]]:
    attrs: dict[str, Any] = {"mode": mode, "coordinate_transformation_mode": coord}
    if nearest:
        attrs["nearest_mode"] = nearest
    x = rnd(1, 3, 5, 4)
    if by_sizes:
        ins: list[Any] = [x, None, None, np.asarray([1, 3, 10, 12], np.int64)]
    else:
        ins = [x, None, np.asarray([1, 1, 3, 2], np.float32)]
    names = tuple("" if v is None else f"in{i}" for i, v in enumerate(ins))
    return Op("rs", "Resize", names, ("y",), attrs), ins


@pytest.mark.parametrize(("mode", "coord", "nearest"), RESIZE_FORMS)
@pytest.mark.parametrize("by_sizes", [False, True])
def test_resize_bands_match_the_reference(
    mode: str, coord: str, nearest: str, by_sizes: bool
) -> None:
    op, ins = _resize_op(mode, coord, nearest, by_sizes)
    d = op_def("Resize")
    want = run_reference(op, ins)[0]
    assert rel_err(run_fused(op, ins)[0], want) <= BAND_TOL
    b = GraphBuilder("rs")
    x = b.input("x", ins[0].shape)
    consts = ["" if v is None else b.const(f"c{i}", v) for i, v in enumerate(ins[1:], 1)]
    y = b.op("Resize", [x, *consts], op.attrs)
    graph = b.build()
    assert graph.ops[0].op_class is ft.OpClass.ELEMWISE
    rm = row_map(graph, graph.ops[0])
    assert rm.kind is RowKind.SPAN and rm.spans is not None
    assert graph.tensors[y].shape == want.shape
    assert d.span_kernel is not None
    for band_rows in (1, 4):
        parts = []
        for a in range(0, want.shape[2], band_rows):
            z = min(a + band_rows, want.shape[2])
            lo, hi = rm.spans.rows(a, z)
            rows_in = [ins[0][:, :, lo:hi], *ins[1:]]
            parts.append(d.span_kernel(op, rows_in, RowBand(lo, a, z, ins[0].shape[2])))
        assert rel_err(np.concatenate(parts, axis=2), want) <= BAND_TOL


# ---- classes: what streams, and why the rest is OPAQUE --------------------------------------
def _conv_resize_relu(**resize: Any) -> Graph:
    b = GraphBuilder("conv_resize", seed=1)
    x = b.conv(b.input("x", (1, 2, 6, 6)), 2, 3)
    scales = np.asarray(resize.pop("scales", [1, 1, 2, 2]), np.float32)
    attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", **resize}
    b.relu(b.op("Resize", [x, "", b.const("scales", scales)], attrs, name="rs"))
    return b.build()


@pytest.mark.parametrize(
    ("resize", "reason"),
    [
        ({"mode": "cubic"}, "mode 'cubic'"),
        ({"coordinate_transformation_mode": "half_pixel_symmetric"}, "half_pixel_symmetric"),
        ({"scales": [1, 1, 1.5, 2]}, "scale 1.5 on axis 2"),
        ({"scales": [1, 1, 0.5, 0.5]}, "scale 0.5 on axis 2"),
        ({"scales": [1, 2, 2, 2]}, "resizing axis 1"),
    ],
)
def test_resize_outside_the_streamable_set_is_opaque_and_says_why(
    resize: dict[str, Any], reason: str
) -> None:
    graph = _conv_resize_relu(**resize)
    op = graph.op_by_name["rs"]
    assert op.op_class is ft.OpClass.OPAQUE
    assert reason in (unsupported_reason(graph, op) or "")
    refusals = [r for e in ft.explain(graph) if "rs" in (e.producer, e.consumer)
                for r in e.refusals]  # fmt: skip
    assert refusals and all(r.rule == 6 and reason in r.message for r in refusals)
    report = ft.verify(graph, ft.greedy_plan(graph))
    assert report.passed, report.summary()


def test_streamable_resize_joins_the_group() -> None:
    graph = _conv_resize_relu()
    assert graph.op_by_name["rs"].op_class is ft.OpClass.ELEMWISE
    assert unsupported_reason(graph, graph.op_by_name["rs"]) is None
    assert len(ft.greedy_plan(graph).groups) == 1


def test_conv_transpose_with_output_shape_is_opaque_and_says_why(tmp_path: Path) -> None:
    w = helper.make_tensor("w", TensorProto.FLOAT, (2, 3, 3, 3), rnd(2, 3, 3, 3).ravel())
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("ConvTranspose", ["r", "w"], ["y"], name="ct", strides=(2, 2),
                         output_shape=(10, 10)),
    ]  # fmt: skip
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "ct_output_shape",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 2, 4, 4))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [w],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    path = tmp_path / "ct.onnx"
    onnx.save(model, str(path))
    graph = ft.load_model(path)
    assert graph.op_by_name["ct"].op_class is ft.OpClass.OPAQUE
    (edge,) = ft.explain(graph)
    assert not edge.fusable and any("output_shape" in r.message for r in edge.refusals)


# ---- legality: epilogues, folds, merges -----------------------------------------------------
def _deconv_bn_relu(training: bool = False) -> Graph:
    b = GraphBuilder("deconv_bn_relu", seed=2)
    x = b.conv(b.input("x", (1, 3, 6, 6)), 4, 1, pad=0, name="pw")
    y = b.conv_transpose(x, 6, 3, stride=2, pad=1, output_padding=1, group=2, name="ct")
    b.relu(b.bn(y, training=training, name="bn"), name="relu")
    return b.build()


def test_conv_transpose_takes_bn_relu_epilogues_and_folds_the_bn() -> None:
    graph = _deconv_bn_relu()
    assert graph.op_by_name["ct"].op_class is ft.OpClass.LINEAR
    group = Group(("ct", "bn", "relu"), Mode.FUSED)
    assert check_group(graph, group.ops, group.mode) == []
    (node,) = compile_group(graph, group)
    assert node.folded == ("ct", "bn") and [op.name for op in node.epilogue] == ["relu"]
    plan = Plan.of(graph, [Group(("pw",), Mode.SINGLE), group])
    report = ft.verify(graph, plan)
    assert report.passed, report.summary()
    merge = check_group(graph, ("pw", "ct"), Mode.MERGE)
    assert merge and any("ct" in r.message for r in merge)


def test_conv_transpose_never_folds_batch_statistics() -> None:
    graph = _deconv_bn_relu(training=True)
    assert graph.op_by_name["bn"].op_class is ft.OpClass.STATS
    group = Group(("ct", "bn", "relu"), Mode.FUSED)
    assert check_group(graph, group.ops, group.mode) == []
    assert compile_group(graph, group)[0].folded == ("ct",)
    report = ft.verify(graph, Plan.of(graph, [Group(("pw",), Mode.SINGLE), group]))
    assert report.passed, report.summary()


# ---- execution: one group streams through both upsampling ops -------------------------------
def _decoder() -> Graph:
    b = GraphBuilder("decoder", seed=3)
    x = b.conv(b.input("x", (1, 3, 12, 12)), 4, 3, stride=2)
    y = b.relu(b.conv_transpose(x, 4, 4, stride=2, pad=1, name="ct"), name="up")
    y = b.resize(y, 2, mode="linear", coordinate_transformation_mode="half_pixel", name="rs")
    b.conv(y, 4, 3, stride=2, name="out")
    return b.build()


@pytest.mark.parametrize("band_rows", [1, 2, None])
def test_a_group_streams_through_conv_transpose_and_resize(band_rows: int | None) -> None:
    graph = _decoder()
    plan = ft.greedy_plan(graph, hw=HW)
    assert len(plan.groups) == 1 and plan.groups[0].mode is Mode.STREAM
    inputs = random_inputs(graph)
    want = reference_run(graph, inputs)
    run = execute(graph, plan, inputs, hw=HW, band_rows=band_rows)
    (out,) = graph.outputs
    assert rel_err(run.outputs[out], want[out]) <= EXEC_TOL
    cost = group_cost(graph, plan.groups[0], HW)
    assert run.dram_read_bytes + run.dram_write_bytes == cost.act_traffic_bytes
    if band_rows == 1:
        assert run.group_peak_buffer_bytes[0] == cost.buffer_needed_bytes
        for t in ("up", "rs"):  # upsampled tensors stream: never whole on chip
            assert run.peak_band_rows[t] < graph.tensors[t].shape[2], t


def test_exported_plan_with_a_folded_conv_transpose_matches_onnxruntime() -> None:
    graph = _deconv_bn_relu()
    groups = [Group(("pw",), Mode.SINGLE), Group(("ct", "bn", "relu"), Mode.FUSED)]
    plan = Plan.of(graph, groups)
    feeds = random_inputs(graph, seed=0)
    fused = plan_to_onnx(graph, plan)
    (function,) = fused.functions  # the fused group: BN folded into the ConvTranspose
    assert [n.op_type for n in function.node] == ["ConvTranspose", "Relu"]
    want = _ort(to_onnx(graph), feeds)
    got = _ort(fused, feeds)
    assert rel_err(got[0], want[0]) <= BAND_TOL


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(sess.run(None, feeds))
