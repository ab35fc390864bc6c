"""Plans exported as ONNX models and schedules (``fusiontune/export/plan_export.py``,
``schedule.py``), read back by the importer.

Oracles: ``onnx.checker`` (full check), onnxruntime on the exported model against onnxruntime
on ``to_onnx`` of the original graph (relative error <= 1e-5, float32), the analytic cost
model (``group_cost``/``simulate``) for the metadata and the schedule, and hand counts for a
small conv stream and for the merged MLPs' parameter counts.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from fusiontune.cli.main import main
from fusiontune.errors import FusiontuneError, IllegalPlanError
from fusiontune.export.onnx_export import to_onnx
from fusiontune.export.plan_export import (
    META,
    META_KEYS,
    PLAN_DOMAIN,
    export_plan,
    onnx_params,
    plan_to_onnx,
)
from fusiontune.export.schedule import CSV_COLUMNS, plan_schedule, schedule_rows, write_schedule
from fusiontune.frontend.onnx_import import load_onnx, load_onnx_with_plan
from fusiontune.frontend.zoo import build_zoo, zoo_models
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.ir.opclass import OpClass
from fusiontune.planner.baselines import (
    plan_from_edges,
    unfused_plan,
)
from fusiontune.planner.candidates import candidate_edges, merge_candidates
from fusiontune.planner.plan import Group, Mode, Plan
from fusiontune.reference import random_inputs
from fusiontune.search.optimize import optimal_plan
from fusiontune.sim.cost import group_cost, simulate
from fusiontune.sim.execute import execute, group_order
from fusiontune.sim.greedy import greedy_plan
from fusiontune.sim.hardware import HardwareConfig, load_hardware
from fusiontune.sim.needs import group_needs, line_buffers

TOLERANCE = 1e-5  # relative, float numerics (the bar)
SMALL = {  # input sizes that keep every zoo model to seconds
    "vgg11": 32, "vgg16": 32, "vgg19": 32, "resnet18": 16, "resnet50": 16,
    "resnet18_train": 16, "mobilenet_v2": 16, "bert_encoder": 8,
}  # fmt: skip
HW = "sram_edge"  # small buffer, weights loaded per inference: many groups, weight traffic
MERGE_MODELS = ("mlp_linear", "mlp_wide", "mlp_bottleneck")


@cache
def _graph(name: str) -> Graph:
    return build_zoo(name, input_size=SMALL.get(name))


@cache
def _hw() -> HardwareConfig:
    return load_hardware(HW)


def merge_heavy_plan(graph: Graph) -> Plan:
    """Every candidate edge fused and every merge candidate merged."""
    merges = {m: "merge" for m in merge_candidates(graph)}
    return plan_from_edges(graph, candidate_edges(graph), merges)


PLANS: dict[str, Callable[[Graph], Plan]] = {
    "optimal": lambda g: _optimal(g),
    "greedy": lambda g: greedy_plan(g, hw=_hw()),
    "merge": merge_heavy_plan,
}


def _optimal(graph: Graph) -> Plan:
    result = optimal_plan(graph, _hw())
    assert result.plan is not None
    return result.plan


def _run(model: onnx.ModelProto | Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    source = model if isinstance(model, Path) else model.SerializeToString()
    session = ort.InferenceSession(
        str(source) if isinstance(source, Path) else source, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


@cache
def _reference(name: str) -> tuple[dict[str, np.ndarray], tuple[np.ndarray, ...]]:
    graph = _graph(name)
    feeds = random_inputs(graph, seed=0)
    return feeds, tuple(_run(to_onnx(graph), feeds))


def _rel_err(got: list[np.ndarray], ref: tuple[np.ndarray, ...]) -> float:
    return max(
        float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))
        for a, b in zip(got, ref, strict=True)
    )


# ---- numerics: every zoo model, three plan kinds ------------------------------------------
# vgg16 and vgg19 are vgg11's op types and classifier with more convs (~15 s each here): the
# benchmark (experiments/exp_export.py) runs them at their default size
SAME_AS_VGG11 = ("vgg16", "vgg19")
CASES = [(m, k) for m in zoo_models() if m not in SAME_AS_VGG11 for k in ("optimal", "greedy")]
CASES += [(m, "merge") for m in MERGE_MODELS]


@pytest.mark.parametrize(("model", "kind"), CASES, ids=[f"{m}-{k}" for m, k in CASES])
def test_exported_model_is_valid_and_matches_the_original(
    model: str, kind: str, tmp_path: Path
) -> None:
    graph = _graph(model)
    plan = PLANS[kind](graph)
    path = tmp_path / "fused.onnx"
    summary = export_plan(graph, plan, path, hw=_hw())
    loaded = onnx.load(str(path))
    onnx.checker.check_model(loaded, full_check=True)
    assert len(loaded.graph.node) == plan.n_groups == summary.n_nodes
    multi = sum(1 for g in plan.groups if len(g.ops) > 1)
    assert len(loaded.functions) == multi == summary.n_functions
    assert all(f.domain == PLAN_DOMAIN for f in loaded.functions)
    feeds, reference = _reference(model)
    err = _rel_err(_run(path, feeds), reference)
    assert err <= TOLERANCE, f"{model} {kind}: relative error {err:.3g}"


def test_unfused_plan_exports_plain_nodes_with_identical_outputs(tmp_path: Path) -> None:
    graph = _graph("resnet18")
    model = plan_to_onnx(graph, unfused_plan(graph), _hw())
    assert not model.functions
    assert [n.name for n in model.graph.node] == [op.name for op in graph.ops]
    assert onnx_params(model) == onnx_params(to_onnx(graph))
    feeds, reference = _reference("resnet18")
    assert _rel_err(_run(model, feeds), reference) == 0.0


# ---- merged and folded weights ------------------------------------------------------------
def test_merge_groups_shrink_or_grow_the_parameters_as_W1_W2() -> None:
    """fc layers (K -> H -> N) merged: one K x N matrix and N biases."""
    expected = {
        "mlp_linear": (784, 10),  # 784 -> 256 (BN) -> 256 -> 10
        "mlp_wide": (256, 16),  # 256 -> 4096 -> 16
        "mlp_bottleneck": (1024, 1024),  # 1024 -> 64 -> 1024: merging grows it
    }
    for name, (k, n) in expected.items():
        graph = _graph(name)
        before = onnx_params(to_onnx(graph))
        after = onnx_params(plan_to_onnx(graph, merge_heavy_plan(graph), _hw()))
        assert after == k * n + n, name
        assert (after < before) == (name != "mlp_bottleneck"), name


def test_conv_bn_folds_into_one_conv_with_a_bias() -> None:
    """resnet18: every Conv -> BN pair becomes one Conv (weight + bias, the BN's 4 vectors gone)."""
    graph = _graph("resnet18")
    plan = greedy_plan(graph, hw=_hw())
    model = plan_to_onnx(graph, plan, _hw())
    n_bn = sum(1 for op in graph.ops if op.op_type == "BatchNormalization")
    channels = sum(graph.tensors[op.output].shape[1] for op in graph.ops
                   if op.op_type == "BatchNormalization")  # fmt: skip
    assert onnx_params(model) == graph.total_params - 3 * channels
    body_types = [n.op_type for f in model.functions for n in f.node]
    assert "BatchNormalization" not in body_types and n_bn > 0


def _conv_stream_graph() -> Graph:
    """input (1,2,8,8) -> conv3x3 (4) -> relu -> conv3x3 (4): a P4 stream candidate."""
    b = GraphBuilder("stream", seed=1)
    x = b.input("x", (1, 2, 8, 8))
    y = b.relu(b.conv(x, 4, 3, name="c1"), name="r1")
    b.output(b.conv(y, 4, 3, name="c2"))
    return b.build()


def _matrix_chain_graphs() -> list[Graph]:
    """Merge chains that take the other ONNX forms: 1x1 Conv (NCHW), MatMul on a 3-d input
    (with bias Adds), and a 1-d 1x1 Conv chain (channels not last: Transpose, MatMul, Add)."""
    graphs = []
    b = GraphBuilder("conv1x1", seed=2)
    x = b.input("x", (1, 6, 5, 5))
    b.output(b.conv(b.conv(x, 12, 1, name="a"), 4, 1, name="b"))
    graphs.append(b.build())
    b = GraphBuilder("matmul3d", seed=3)
    x = b.input("x", (2, 3, 8))
    b.output(b.matmul(b.matmul(x, 16, name="m1"), 5, name="m2"))
    graphs.append(b.build())
    b = GraphBuilder("conv1d", seed=4)
    x = b.input("x", (2, 6, 7))
    attrs = {"kernel_shape": (1,), "strides": (1,), "pads": (0, 0), "dilations": (1,)}
    w1 = b.weight("w1", (10, 6, 1), 6)
    w2 = b.weight("w2", (3, 10, 1), 10)
    y = b.op("Conv", [x, w1, b.bias("b1", 10)], attrs, name="k1")
    b.output(b.op("Conv", [y, w2, b.bias("b2", 3)], attrs, name="k2"))
    graphs.append(b.build())
    return graphs


@pytest.mark.parametrize("graph", _matrix_chain_graphs(), ids=lambda g: g.name)
def test_every_matrix_form_matches_the_original(graph: Graph) -> None:
    plan = merge_heavy_plan(graph)
    assert [g.mode for g in plan.groups] == [Mode.MERGE]
    model = plan_to_onnx(graph, plan)
    feeds = random_inputs(graph, seed=0)
    assert _rel_err(_run(model, feeds), tuple(_run(to_onnx(graph), feeds))) <= TOLERANCE
    linear = [n.op_type for n in model.functions[0].node if n.op_type in ("Conv", "MatMul", "Gemm")]
    assert len(linear) == 1, linear  # the chain is one matrix


# ---- metadata -----------------------------------------------------------------------------
def test_call_nodes_carry_mode_pattern_and_costs() -> None:
    graph, hw = _graph("mobilenet_v2"), _hw()
    plan = greedy_plan(graph, hw=hw)
    model = plan_to_onnx(graph, plan, hw)
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta[META + "plan"] == plan.to_json()
    assert meta[META + "hardware"] == hw.name and meta[META + "hw_hash"] == hw.hash
    order = group_order(graph, plan)
    for position, node in enumerate(model.graph.node):
        props = {p.key[len(META) :]: p.value for p in node.metadata_props}
        assert tuple(props) == META_KEYS
        group = plan.groups[order[position]]
        cost = group_cost(graph, group, hw)
        assert props["group"] == str(position)
        assert props["mode"] == group.mode.value
        assert props["ops"].split(",") == list(group.ops)
        assert int(props["traffic_bytes"]) == cost.traffic_bytes
        assert int(props["buffer_needed_bytes"]) == cost.buffer_needed_bytes
        assert int(props["crossbars_needed"]) == cost.crossbars_needed
        assert float(props["energy_pj"]) == cost.energy_pj
        assert node.doc_string.startswith(f"fusiontune group {position}: {group.mode.value}")
        is_call = node.domain == PLAN_DOMAIN
        assert is_call == (len(group.ops) > 1)


# ---- round trip ---------------------------------------------------------------------------
ROUND_TRIPS = [("resnet18", "greedy"), ("mobilenet_v2", "optimal"), ("bert_encoder", "greedy"),
               ("resnet18_train", "optimal"), ("mlp_linear", "merge"), ("mlp_wide", "merge"),
               ("mlp_bottleneck", "merge"), ("lenet5", "optimal")]  # fmt: skip


@pytest.mark.parametrize(("model", "kind"), ROUND_TRIPS, ids=[f"{m}-{k}" for m, k in ROUND_TRIPS])
def test_round_trip_keeps_the_plan_and_its_traffic(model: str, kind: str, tmp_path: Path) -> None:
    graph, hw = _graph(model), _hw()
    plan = PLANS[kind](graph)
    path = tmp_path / f"{model}.onnx"
    export_plan(graph, plan, path, hw=hw)
    back, back_plan = load_onnx_with_plan(path)
    assert back_plan is not None and back_plan.n_groups == plan.n_groups
    before, after = simulate(graph, plan, hw), simulate(back, back_plan, hw)
    assert after.traffic_bytes == before.traffic_bytes
    assert after.weight_load_bytes == before.weight_load_bytes
    assert after.act_traffic_bytes == before.act_traffic_bytes
    # merged layers stay merged: one LINEAR op per merge group, with the merged shape
    for group in plan.groups:
        if group.mode is Mode.MERGE:
            merged = [op for op in back.ops if op.name.startswith(group.ops[0] + "+")]
            assert len(merged) == 1 and merged[0].op_class is OpClass.LINEAR
    assert set(back.inputs) == set(graph.inputs) and set(back.outputs) == set(graph.outputs)


def test_plain_load_inlines_the_functions(tmp_path: Path) -> None:
    graph = _graph("mlp_linear")
    path = tmp_path / "m.onnx"
    export_plan(graph, merge_heavy_plan(graph), path)
    back = load_onnx(path)
    assert [op.op_type for op in back.ops] == ["Gemm"]
    assert load_onnx_with_plan(tmp_path.parent / path)[1] is not None
    plain = tmp_path / "plain.onnx"
    to_onnx(graph, plain)
    assert load_onnx_with_plan(plain)[1] is None  # no plan in an ordinary model


def test_foreign_functions_inline_with_attribute_references(tmp_path: Path) -> None:
    """A local function called twice, with an attribute parameter and a default."""
    from onnx import TensorProto, helper

    attr = helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT)
    body = [helper.make_node("LeakyRelu", ["a"], ["t"], name="act"),
            helper.make_node("Neg", ["t"], ["b"], name="neg")]  # fmt: skip
    body[0].attribute.append(attr)
    fn = helper.make_function("lib", "Block", ["a"], ["b"], body,
                              opset_imports=[helper.make_opsetid("", 17)],
                              attributes=["alpha"])  # fmt: skip
    calls = [helper.make_node("Block", ["x"], ["y1"], domain="lib", name="b1", alpha=0.5),
             helper.make_node("Block", ["y1"], ["y"], domain="lib", name="b2")]  # fmt: skip
    graph = helper.make_graph(
        calls, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )  # fmt: skip
    model = helper.make_model(graph, functions=[fn], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("lib", 1)])  # fmt: skip
    path = tmp_path / "f.onnx"
    onnx.save(model, str(path))
    g = load_onnx(path)
    assert [op.op_type for op in g.ops] == ["LeakyRelu", "Neg", "LeakyRelu", "Neg"]
    assert len({op.name for op in g.ops}) == 4  # body names made unique per call
    assert g.ops[0].attrs["alpha"] == 0.5 and "alpha" not in g.ops[2].attrs
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    from fusiontune.reference import reference_run

    ours = reference_run(g, {"x": x})["y"]
    assert np.allclose(ours, _run(path, {"x": x})[0], rtol=1e-6)


# ---- schedule -----------------------------------------------------------------------------
def test_schedule_lists_groups_in_execution_order_with_consistent_bytes(tmp_path: Path) -> None:
    graph, hw = _graph("resnet18"), _hw()
    plan = greedy_plan(graph, hw=hw)
    schedule = plan_schedule(graph, plan, hw)
    json_path, csv_path = write_schedule(schedule, tmp_path / "s.json")
    data = json.loads(json_path.read_text())
    assert data["format"] == "fusiontune-schedule" and data["version"] == 3
    assert data["plan_hash"] == plan.hash and data["hardware"]["name"] == hw.name
    metrics = simulate(graph, plan, hw)
    assert data["totals"]["traffic_bytes"] == metrics.traffic_bytes
    assert data["totals"]["cycles"] == metrics.cycles
    order = group_order(graph, plan)
    for k, entry in enumerate(data["groups"]):
        group = plan.groups[order[k]]
        assert entry["index"] == k and [o["name"] for o in entry["ops"]] == list(group.ops)
        assert all(d < k for d in entry["depends_on"])
        assert sum(r["bytes"] for r in entry["reads"]) == entry["traffic"]["act_read_bytes"]
        assert sum(w["bytes"] for w in entry["writes"]) == entry["traffic"]["act_write_bytes"]
        needs = group_needs(graph, group)
        lines = sum(b["bytes"] for b in entry["line_buffers"])
        buffer = entry["buffer"]
        assert buffer["needed_bytes"] == needs.buffer_elems * hw.act_bytes
        assert (
            buffer["stream_bytes"] + buffer["whole_bytes"] + buffer["accumulator_bytes"]
            == (buffer["needed_bytes"])
        )
        assert lines <= buffer["needed_bytes"]  # less accumulators and partial pool rows
        assert sum(w["crossbars"] for w in entry["weights"]) == entry["crossbars"]
        assert entry["cycles"]["cycles"] == group_cost(graph, group, hw).cycles
    rows = list(csv.DictReader(csv_path.open()))
    assert tuple(rows[0]) == CSV_COLUMNS and len(rows) == plan.n_groups
    assert sum(int(r["traffic_bytes"]) for r in rows) == metrics.traffic_bytes


def test_schedule_of_a_conv_stream_by_hand() -> None:
    """conv3x3 -> relu -> conv3x3 on 8x8 maps, one stream group. At the peak c2 computes a row:
    its 3x3 window holds 3 rows of the ReLU's output (4 channels x 8 wide), x keeps the 2 rows
    c1's next window shares (2 x 8 wide) and c2's new row exists (4 x 8); c1 is 18 x 4
    (2 channels x 3x3), c2 36 x 4."""
    graph = _conv_stream_graph()
    hw = HardwareConfig()
    plan = Plan.of(graph, [Group(("c1", "r1", "c2"), Mode.STREAM)])
    entry = plan_schedule(graph, plan, hw)["groups"][0]
    ab = hw.act_bytes
    assert entry["line_buffers"] == [
        {"tensor": "x", "rows": 2, "bytes": 2 * 2 * 8 * ab},
        {"tensor": "r1", "rows": 3, "bytes": 3 * 4 * 8 * ab},
        {"tensor": "c2", "rows": 1, "bytes": 1 * 4 * 8 * ab},
    ]
    assert entry["buffer"]["needed_bytes"] == (32 + 96 + 32) * ab
    ws = hw.weight_slices
    assert [(w["rows"], w["cols"], w["row_tiles"], w["col_tiles"]) for w in entry["weights"]] == [
        (18, 4, 1, -(-4 * ws // hw.crossbar_cols)),
        (36, 4, 1, -(-4 * ws // hw.crossbar_cols)),
    ]
    assert entry["reads"] == [{"tensor": "x", "shape": [1, 2, 8, 8], "bytes": 128 * hw.act_bytes,
                               "from_group": None}]  # fmt: skip
    assert [k["ops"] for k in entry["kernels"]] == [["c1", "r1"], ["c2"]]  # ReLU: c1's epilogue
    assert sum(b.elems for b in line_buffers(graph, plan.groups[0])) == 160


# ---- API and CLI --------------------------------------------------------------------------
def test_cli_export_writes_onnx_and_schedule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fused.onnx"
    assert main(["export", "mlp_wide", "--plan", "greedy", "-o", str(out)]) == 0
    assert "4,112 parameters" in capsys.readouterr().out
    assert load_onnx_with_plan(out)[1] is not None
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(greedy_plan(_graph("lenet5")).to_json())
    sched = tmp_path / "s.json"
    args = ["export", "lenet5", "--plan", str(plan_file), "--hardware", HW, "-o", str(sched)]
    assert main(args) == 0
    assert sched.exists() and sched.with_suffix(".csv").exists()


def test_api_refuses_unknown_format_and_illegal_plans(tmp_path: Path) -> None:
    graph = _graph("mlp_relu")
    with pytest.raises(FusiontuneError, match="format 'xml' is not one of onnx, schedule"):
        export_plan(graph, unfused_plan(graph), tmp_path / "m.onnx", format="xml")
    bad = Plan((Group(("fc1", "fc1.relu", "fc2"), Mode.MERGE),
                *(Group((n,), Mode.SINGLE) for n in ("fc2.relu", "fc3"))))  # fmt: skip
    with pytest.raises(IllegalPlanError, match="plan of 'mlp_relu'"):
        plan_to_onnx(graph, bad)
    with pytest.raises(IllegalPlanError, match=r"names op 'fc1\.relu', not in graph 'mlp_wide'"):
        export_plan(_graph("mlp_wide"), unfused_plan(graph), tmp_path / "m.onnx")


def test_schedule_of_tiled_singletons_matches_the_executors_measurement() -> None:
    """On a buffer smaller than most layers' rows, unfused resnet18 runs layer by layer
    tiled through DRAM: each tiled group names its scheme instead of line buffers, and its
    peak and bytes are what the executor measures."""
    graph = build_zoo("resnet18", input_size=112)
    hw = load_hardware("sram_edge").replace(buffer_bytes=6 * 1024)
    plan = unfused_plan(graph)
    schedule = plan_schedule(graph, plan, hw)
    assert schedule["version"] == 3
    entries = schedule["groups"]
    tiled = [e for e in entries if e["tiling"] is not None]
    assert {e["tiling"]["scheme"] for e in tiled} >= {"window", "point"}
    for e in tiled:
        assert e["tiling"]["reason"] == "" and e["line_buffers"] == []
        assert e["buffer"]["needed_bytes"] == e["tiling"]["peak_bytes"] <= hw.buffer_bytes
        assert e["buffer"]["stream_bytes"] == e["buffer"]["needed_bytes"]
        assert e["tiling"]["read_bytes"] == e["traffic"]["act_read_bytes"]
    run = execute(graph, plan, random_inputs(graph), hw=hw)
    assert max(e["buffer"]["needed_bytes"] for e in entries) == run.peak_buffer_bytes
    assert sum(e["traffic"]["act_read_bytes"] for e in entries) == run.dram_read_bytes
    rows = schedule_rows(schedule)
    assert [r["tiling"] for r in rows] == [(e["tiling"] or {}).get("scheme") or "" for e in entries]


@pytest.mark.parametrize(
    ("reduction", "opset", "ok"),
    [("none", 13, True), ("none", 18, True), ("add", 15, False), ("add", 16, True),
     ("max", 17, False), ("max", 18, True)],
)  # fmt: skip
def test_scatter_nd_reduction_exports_only_where_its_opset_has_it(
    reduction: str, opset: int, ok: bool
) -> None:
    b = GraphBuilder("scatter")
    x = b.input("x", (4, 3))
    idx = b.const("idx", np.asarray([[0], [2]], np.int64))
    upd = b.const("upd", np.ones((2, 3), np.float32))
    b.output(b.op("ScatterND", [x, idx, upd], {"reduction": reduction}, name="s"))
    graph = b.build()
    if not ok:
        with pytest.raises(FusiontuneError, match=rf"'s' \(ScatterND\).*'{reduction}'.*>= 1[68]"):
            to_onnx(graph, opset=opset)
        return
    x_val = np.arange(12, dtype=np.float32).reshape(4, 3)
    from fusiontune.reference import reference_run

    got = _run(to_onnx(graph, opset=opset), {"x": x_val})[0]
    want = reference_run(graph, {"x": x_val})["s"]
    assert np.array_equal(got, want)
