"""The attention pattern (P5), the fused attention op and its flash scheme.

- recognition per exporter form (TorchScript, dynamo SDPA, ONNX ``Attention``, ORT
  ``MultiHeadAttention``) and the reason a chain stays a barrier;
- numerics: the fused graph against the reference executor and onnxruntime (float32, 1e-5);
- the executor's measured bytes and peak equal the model's at three buffer sizes (resident
  K/V, streamed K/V, a tiny buffer);
- the attention IO lower bound: admissible, and the fused group within 2x of it where the
  schedule keeps K/V resident.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from fusiontune.frontend.zoo import build_zoo
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.ops import AttentionRole, attention_role
from fusiontune.planner.attention import explain_attention, find_attention, fuse_attention
from fusiontune.planner.baselines import unfused_plan
from fusiontune.planner.plan import singleton_plan
from fusiontune.reference import random_inputs, reference_run
from fusiontune.sim.attention import attention_io_bound, plan_flash
from fusiontune.sim.bounds import attention_bounds
from fusiontune.sim.cost import simulate
from fusiontune.sim.execute import execute
from fusiontune.sim.hardware import load_hardware
from fusiontune.sim.tiling import Scheme, singleton_tiling
from fusiontune.sim.verify import verify

DATA = Path(__file__).parent / "data" / "attention"
REL_TOL = 1e-5
HW = load_hardware("sram_edge")
# BERT block at hidden 32, 4 heads (d = 8), sequence 24: K and V of a head are 384 elements
BUFFERS = {"resident": 8192, "streamed": 400, "tiny": 120}


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    return float(diff.max()) / max(float(np.abs(want.astype(np.float64)).max()), 1e-30)


def tiny_block(form: str = "torchscript", mask: bool = True, seq: int = 24) -> Graph:
    from fusiontune.frontend.zoo_attention import attention_block

    b = GraphBuilder(f"tiny_{form}", seed=3)
    x = b.input("input", (1, seq, 32))
    m = b.input("attention_mask", (1, 1, 1, seq)) if mask else None
    attention_block(b, x, m, seq, 1, hidden=32, heads=4, ffn=64, form=form)
    return b.build()


def fused_ops(graph: Graph) -> list[str]:
    return [op.name for op in graph.ops if attention_role(op) is AttentionRole.FUSED]


def activation_matmuls(graph: Graph) -> list[str]:
    from fusiontune.ops import is_activation_matmul

    return [op.name for op in graph.ops if is_activation_matmul(graph, op)]


# ---- recognition --------------------------------------------------------------------------------
@pytest.mark.parametrize("form", ["torchscript", "dynamo"])
def test_each_torch_form_fuses_into_one_attention(form: str) -> None:
    graph = tiny_block(form)
    (chain,) = find_attention(graph)
    assert chain.fusable, chain.reason
    assert math.isclose(chain.scale, 1 / math.sqrt(8), rel_tol=1e-6)
    assert chain.mask == "attention_mask"
    fused = fuse_attention(graph).lint()
    assert len(fused_ops(fused)) == 1 and activation_matmuls(fused) == []
    # what went: the two MatMuls, the scale(s), the mask Add, the Softmax, K's transpose
    gone = {op.name for op in graph.ops} - {op.name for op in fused.ops}
    assert {"attn.scores", "attn.softmax", "attn.context", "attn.mask"} <= gone
    x = random_inputs(graph, seed=2)
    want, got = reference_run(graph, x), reference_run(fused, x)
    assert rel_err(got[graph.outputs[0]], want[graph.outputs[0]]) <= REL_TOL


def test_zoo_models_fuse_every_attention() -> None:
    for name in ("bert_encoder", "bert_block", "bert_block_dynamo"):
        graph = build_zoo(name, input_size=16)
        fused = fuse_attention(graph)
        assert len(fused_ops(fused)) == 1 and activation_matmuls(fused) == [], name
        assert fuse_attention(fused) is fused  # nothing left to fuse


def _attention_graph(mask_shape: tuple[int, ...] | None, axis: int = -1, probs_out: bool = False,
                     heads_k: int = 2) -> Graph:  # fmt: skip
    b = GraphBuilder("chain", seed=0)
    q = b.input("q", (1, 2, 6, 4))
    kt = b.input("kt", (1, heads_k, 4, 6))
    v = b.input("v", (1, 2, 6, 4))
    s = b.op("MatMul", [q, kt], name="scores")
    s = b.op("Mul", [s, b.const("c", np.float32(0.5))], name="scale")
    if mask_shape is not None:
        s = b.op("Add", [s, b.input("mask", mask_shape)], name="mask_add")
    p = b.op("Softmax", [s], {"axis": axis}, name="softmax")
    y = b.op("MatMul", [p, v], name="context")
    b.output(y, *([p] if probs_out else []))
    return b.build()


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"mask_shape": (1, 2, 6, 6), "axis": 2}, r"over axis 2, not the last \(keys\) axis"),
        ({"mask_shape": (3, 1, 6, 6)}, r"mask \(3, 1, 6, 6\) does not broadcast to the scores"),
        ({"mask_shape": (1, 1, 1, 6), "probs_out": True}, r"'softmax' is a graph output"),
        ({"mask_shape": None, "heads_k": 1}, r"differ in batch or heads"),
    ],
)
def test_a_chain_the_pattern_cannot_handle_stays_a_barrier_with_its_reason(
    kwargs: dict[str, object], reason: str
) -> None:
    graph = _attention_graph(**kwargs)  # type: ignore[arg-type]
    (chain,) = find_attention(graph)
    assert not chain.fusable
    assert pytest.importorskip("re").search(reason, chain.reason), chain.reason
    assert fuse_attention(graph) is graph
    (verdict,) = explain_attention(graph)
    assert "stays a barrier" in str(verdict) and chain.reason in str(verdict)


def test_a_k_already_transposed_gets_a_transpose_of_its_own() -> None:
    graph = _attention_graph((1, 1, 1, 6))
    fused = fuse_attention(graph).lint()
    keys = [op for op in fused.ops if op.name.endswith(".keys")]
    assert len(keys) == 1 and keys[0].attrs["perm"] == (0, 1, 3, 2)
    x = random_inputs(graph, seed=4)
    assert (
        rel_err(reference_run(fused, x)["context"], reference_run(graph, x)["context"]) <= REL_TOL
    )


def test_a_softmax_of_a_classifier_is_no_attention() -> None:
    b = GraphBuilder("clf", seed=0)
    x = b.input("x", (2, 10))
    b.op("Softmax", [b.gemm(x, 5)], {"axis": -1})
    assert find_attention(b.build()) == []


# ---- numerics vs onnxruntime ---------------------------------------------------------------------
def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def test_fused_graph_matches_onnxruntime_on_the_original() -> None:
    from fusiontune.export.onnx_export import to_onnx

    graph = tiny_block("dynamo")
    fused = fuse_attention(graph)
    x = random_inputs(graph, seed=5)
    (want,) = _ort(to_onnx(graph), x)
    run = execute(fused, singleton_plan(fused), x, hw=dataclasses.replace(HW, buffer_bytes=640))
    assert rel_err(run.outputs[graph.outputs[0]], want) <= REL_TOL


def test_the_fused_op_matches_onnxruntimes_attention_kernel() -> None:
    from fusiontune.export.onnx_export import to_onnx

    # onnxruntime 1.32's Attention wants the mask's query axis whole (no broadcast there)
    graph = fuse_attention(_attention_graph((1, 2, 6, 6)))
    assert fused_ops(graph)
    x = random_inputs(graph, seed=6)
    (want,) = _ort(to_onnx(graph, opset=23), x)
    assert rel_err(reference_run(graph, x)["context"], want) <= REL_TOL
    run = execute(graph, singleton_plan(graph), x, hw=dataclasses.replace(HW, buffer_bytes=200))
    assert rel_err(run.outputs["context"], want) <= REL_TOL


# ---- measured == model ---------------------------------------------------------------------------
@pytest.mark.parametrize("buffer", list(BUFFERS.values()), ids=list(BUFFERS))
def test_measured_bytes_and_peak_equal_the_model(buffer: int) -> None:
    graph = fuse_attention(tiny_block())
    hw = dataclasses.replace(HW, buffer_bytes=buffer)
    (name,) = fused_ops(graph)
    plan = singleton_plan(graph)
    tiling = singleton_tiling(graph, plan.groups[[g.ops for g in plan.groups].index((name,))], hw)
    assert tiling is not None and tiling.scheme is Scheme.ATTENTION
    report = verify(graph, plan, hw=hw)
    assert report.traffic_ok and report.buffer_ok and all(e.ok for e in report.errors)
    run = report.execution
    i = [g.ops for g in plan.groups].index((name,))
    assert run.group_read_bytes[i] == tiling.read_elems * hw.act_bytes
    assert run.group_write_bytes[i] == tiling.write_elems * hw.act_bytes
    assert run.group_peak_buffer_bytes[i] == tiling.peak_elems * hw.act_bytes <= buffer
    m = simulate(graph, plan, hw)
    assert run.dram_read_bytes == m.act_read_bytes and run.dram_write_bytes == m.act_write_bytes


def test_the_three_buffers_take_the_resident_and_the_streamed_variants() -> None:
    graph = fuse_attention(tiny_block())
    op = graph.op(fused_ops(graph)[0])
    plans = {k: plan_flash(graph, op, v, 2) for k, v in BUFFERS.items()}
    assert plans["resident"].resident and plans["resident"].m == 24
    assert not plans["streamed"].resident and not plans["tiny"].resident
    # K and V re-read once per Q tile: more tiles, more bytes
    reads = [plans[k].read_elems for k in ("resident", "streamed", "tiny")]
    assert reads[0] < reads[1] < reads[2]


# ---- the bound -----------------------------------------------------------------------------------
def test_attention_bound_is_admissible_and_the_resident_schedule_meets_it() -> None:
    graph = fuse_attention(tiny_block())
    op = graph.op(fused_ops(graph)[0])
    for buffer in BUFFERS.values():
        flash = plan_flash(graph, op, buffer, 2)
        bound = attention_io_bound(graph, op, buffer)
        assert bound <= flash.read_elems + flash.write_elems
    flash = plan_flash(graph, op, BUFFERS["resident"], 2)
    bound = attention_io_bound(graph, op, BUFFERS["resident"])
    assert flash.read_elems + flash.write_elems <= 2 * bound


@pytest.mark.parametrize("buffer", [32768, 131072], ids=["sram_edge", "128k"])
def test_bert_block_at_512_against_the_bound(buffer: int) -> None:
    graph = fuse_attention(build_zoo("bert_block", input_size=512))
    (row,) = attention_bounds(graph, dataclasses.replace(HW, buffer_bytes=buffer))
    assert row["compulsory_bytes"] <= row["bound_bytes"] <= row["fused_bytes"]
    if buffer >= 131072:  # K and V of a head (64 KB) stay: the schedule meets the bound
        assert row["fused_bytes"] <= 2 * row["bound_bytes"]
    else:  # 32 KB: K and V stream past 4 Q tiles of 129 rows (16-bit accumulators): 2.5x
        assert row["tile"] == (129, 29, 0)
        assert row["fused_bytes"] == 12 * (2 * 512 * 64 + 4 * 512 * 128)


@pytest.mark.parametrize("preset", ["sram_edge", "puma_138"])
def test_the_block_bounds_stay_below_both_proven_optima(preset: str) -> None:
    """exp_attention's lower bounds of the whole block (every schedule: graph inputs,
    outputs and weights once; every plan of the fused graph: the capacity bound) against the
    proven optimum with attention fused and as barriers."""
    from fusiontune.search.optimize import optimal_plan
    from fusiontune.sim.bounds import capacity_bound
    from fusiontune.sim.cost import lower_bound

    hw = load_hardware(preset)
    barrier = build_zoo("bert_block", input_size=32)
    fused = fuse_attention(barrier)
    optima = []
    for graph in (barrier, fused):
        result = optimal_plan(graph, hw, time_limit_s=120)
        assert result.plan is not None and result.proven, (preset, result.status)
        optima.append(simulate(graph, result.plan, hw).traffic_bytes)
    any_schedule = lower_bound(barrier, hw)
    assert any_schedule == lower_bound(fused, hw) > 0
    plans = capacity_bound(fused, hw)
    assert any_schedule <= plans <= optima[1] < optima[0]
    assert capacity_bound(barrier, hw) <= optima[0]


# ---- import forms ---------------------------------------------------------------------------
FORMS = {  # file -> attentions it holds
    "attention_op23_4d.onnx": 1,
    "attention_op23_3d.onnx": 1,
    "mha_contrib.onnx": 1,
    "bert_torchscript.onnx": 2,
    "bert_dynamo.onnx": 2,
    "gpt2_torchscript.onnx": 2,  # the probabilities go through a Cast to float32
    "gpt2_dynamo.onnx": 2,
    "llama_torchscript.onnx": 2,  # GQA (repeat_kv) and a constant causal mask: is_causal
    "llama_dynamo.onnx": 2,
}


@pytest.mark.parametrize("file", list(FORMS))
def test_every_import_form_fuses_and_matches_onnxruntime(file: str) -> None:
    from fusiontune.frontend.onnx_import import load_onnx
    from fusiontune.sim.greedy import greedy_plan

    graph = load_onnx(DATA / file)
    chains = find_attention(graph)
    assert len(chains) == FORMS[file] and all(c.fusable for c in chains), chains
    fused = fuse_attention(graph).lint()
    assert len(fused_ops(fused)) == FORMS[file] and activation_matmuls(fused) == []
    x = random_inputs(graph, seed=7)
    model = onnx.load(str(DATA / file))
    want = _ort(model, {i.name: x[i.name] for i in model.graph.input})[0]
    out = graph.outputs[0]
    assert rel_err(reference_run(fused, x)[out], want) <= REL_TOL
    hw = dataclasses.replace(HW, buffer_bytes=4096)  # GPT-2's Split needs 3 KB whole
    plan = greedy_plan(fused, hw=hw)
    report = verify(fused, plan, hw=hw)
    assert report.traffic_ok and report.buffer_ok and report.passed, report.summary()
    assert rel_err(execute(fused, plan, x, hw=hw).outputs[out], want) <= REL_TOL


def test_an_unsupported_multi_head_attention_stays_opaque(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    from fusiontune.frontend.onnx_import import load_onnx

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 8])
    pad = helper.make_tensor_value_info("pad", TensorProto.INT32, [1, 5])
    node = helper.make_node("MultiHeadAttention", ["x", "x", "x", "", "pad"], ["y"],
                            domain="com.microsoft", num_heads=2)  # fmt: skip
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 8])
    model = helper.make_model(helper.make_graph([node], "mha_pad", [x, pad], [y]),
                              opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid("com.microsoft", 1)])  # fmt: skip
    path = tmp_path / "mha_pad.onnx"
    onnx.save(model, str(path))
    with pytest.warns(UserWarning, match="MultiHeadAttention"):
        graph = load_onnx(path)
    assert [op.op_type for op in graph.ops] == ["MultiHeadAttention"]
    assert find_attention(graph) == []


# ---- the command line --------------------------------------------------------------------------
def test_plans_explain_names_each_attention_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from fusiontune.cli.main import main

    argv = ["plans", "bert_block", "--input-size", "16", "--explain"]
    assert main([*argv, "--json", "--no-fuse-attention"]) == 0
    (item,) = json.loads(capsys.readouterr().out)["attention"]
    assert item["name"] == "attn.softmax" and item["pattern"] == "P5" and not item["fused"]
    assert main([*argv, "--no-fuse-attention"]) == 0
    assert "attention attn.softmax: fusable by P5" in capsys.readouterr().out
    assert main([*argv, "--fuse-attention"]) == 0  # the default, still accepted
    assert "attention attn.softmax.attention: fused (P5" in capsys.readouterr().out


def test_the_commands_fuse_attention_by_default_and_the_switch_keeps_barriers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    from fusiontune.cli.main import main

    argv = ["plans", "llama_tiny", "--input-size", "16", "--explain", "--json"]
    assert main(argv) == 0
    items = json.loads(capsys.readouterr().out)["attention"]
    assert len(items) == 2 and all(i["fused"] for i in items)  # both layers
    assert main([*argv, "--no-fuse-attention"]) == 0
    items = json.loads(capsys.readouterr().out)["attention"]
    assert len(items) == 2 and not any(i["fused"] for i in items)
    sim = ["simulate", "bert_block", "--input-size", "32", "--hw", "sram_edge", "--plan", "unfused",
           "--json"]  # fmt: skip
    assert main(sim) == 0
    fused = json.loads(capsys.readouterr().out)["totals"]["traffic_bytes"]
    assert main([*sim, "--no-fuse-attention"]) == 0
    barrier = json.loads(capsys.readouterr().out)["totals"]["traffic_bytes"]
    graph = build_zoo("bert_block", input_size=32)
    assert barrier == simulate(graph, unfused_plan(graph), HW).traffic_bytes
    graph = fuse_attention(graph)
    assert fused == simulate(graph, unfused_plan(graph), HW).traffic_bytes < barrier


def test_an_attention_the_default_cannot_fuse_is_named_with_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fusiontune.cli.main import main
    from fusiontune.export.onnx_export import to_onnx

    path = tmp_path / "axis2.onnx"
    to_onnx(_attention_graph((1, 2, 6, 6), axis=2), path)
    assert main(["plans", str(path), "--explain"]) == 0
    out = capsys.readouterr().out
    assert "attention softmax: stays a barrier: the softmax 'softmax' is over axis 2" in out


def test_simulate_reports_the_attention_bound(capsys: pytest.CaptureFixture[str]) -> None:
    from fusiontune.cli.main import main

    argv = ["simulate", "bert_block", "--input-size", "64", "--hw", "sram_edge"]
    assert main(argv) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("attention"))
    assert "IO bound" in line and "1.000x the bound" in line


def test_export_below_opset_23_is_refused_by_name() -> None:
    from fusiontune.errors import FusiontuneError
    from fusiontune.export.onnx_export import to_onnx

    with pytest.raises(FusiontuneError, match=r"Attention op from opset 23 on"):
        to_onnx(fuse_attention(tiny_block()), opset=21)


# ---- Where masks and several masks (GPT-2: where(causal, w, min) + padding mask) -----------------
def _gpt2_like(cond_input: bool) -> Graph:
    b = GraphBuilder("gpt2_like", seed=0)
    q, kt, v = b.input("q", (1, 2, 6, 4)), b.input("kt", (1, 2, 4, 6)), b.input("v", (1, 2, 6, 4))
    s = b.op("MatMul", [q, kt], name="scores")
    s = b.op("Div", [s, b.const("root_d", np.float32(2.0))], name="scale")
    if cond_input:
        cond = b.input("keep", (1, 1, 6, 6))
        b._tensors[cond] = dataclasses.replace(b._tensors[cond], dtype="bool")
    else:
        cond = b.const("causal", np.tril(np.ones((1, 1, 6, 6), bool)))
    lowest = b.const("lowest", np.float32(np.finfo(np.float32).min))
    s = b.op("Where", [cond, s, lowest], name="causal_where")
    s = b.op("Add", [s, b.input("pad", (1, 1, 1, 6))], name="pad_add")
    p = b.op("Softmax", [s], {"axis": -1}, name="softmax")
    b.op("MatMul", [p, v], name="context")
    return b.build()


@pytest.mark.parametrize("cond_input", [False, True], ids=["constant_causal", "input_cond"])
def test_where_and_add_masks_fuse_into_one_additive_mask(cond_input: bool) -> None:
    graph = _gpt2_like(cond_input)
    (chain,) = find_attention(graph)
    assert chain.fusable and len(chain.masks) == 2, chain
    fused = fuse_attention(graph).lint()
    assert len(fused_ops(fused)) == 1 and activation_matmuls(fused) == []
    x = random_inputs(graph, seed=8)
    if cond_input:
        x["keep"] = np.tril(np.ones((1, 1, 6, 6), bool))
    want = reference_run(graph, x)["context"]
    assert rel_err(reference_run(fused, x)["context"], want) <= REL_TOL
    hw = dataclasses.replace(HW, buffer_bytes=300)
    run = execute(fused, singleton_plan(fused), x, hw=hw)
    assert rel_err(run.outputs["context"], want) <= REL_TOL
    m = simulate(fused, singleton_plan(fused), hw)
    assert (run.dram_read_bytes, run.dram_write_bytes) == (m.act_read_bytes, m.act_write_bytes)


def test_identity_like_ops_inside_the_chain_are_absorbed() -> None:
    b = GraphBuilder("passes", seed=0)
    q, kt, v = b.input("q", (1, 2, 6, 4)), b.input("kt", (1, 2, 4, 6)), b.input("v", (1, 2, 6, 4))
    s = b.op("Identity", [b.op("MatMul", [q, kt], name="scores")], name="same")
    p = b.op("Softmax", [s], {"axis": -1}, name="softmax")
    p = b.op("Cast", [p], {"to": TensorProto.FLOAT}, name="cast")
    p = b.op("Dropout", [p], name="dropout")
    b.op("MatMul", [p, v], name="context")
    graph = b.build()
    (chain,) = find_attention(graph)
    assert chain.fusable and {"same", "cast", "dropout"} <= set(chain.ops)
    fused = fuse_attention(graph)
    x = random_inputs(graph, seed=9)
    want = reference_run(graph, x)["context"]
    assert rel_err(reference_run(fused, x)["context"], want) <= REL_TOL


def test_a_scale_after_the_mask_is_refused() -> None:
    b = GraphBuilder("late_scale", seed=0)
    q, kt, v = b.input("q", (1, 2, 6, 4)), b.input("kt", (1, 2, 4, 6)), b.input("v", (1, 2, 6, 4))
    s = b.op("Add", [b.op("MatMul", [q, kt], name="scores"), b.input("m", (1, 1, 1, 6))])
    s = b.op("Mul", [s, b.const("c", np.float32(0.5))], name="scale")
    b.op("MatMul", [b.op("Softmax", [s], {"axis": -1}, name="softmax"), v], name="context")
    (chain,) = find_attention(b.build())
    assert "a scale is applied after the mask" in chain.reason


def test_a_search_summary_carries_the_attention_bound(tmp_path: Path) -> None:
    import json

    from fusiontune.cli.main import main

    argv = ["search", "bert_block", "--input-size", "32", "--trials", "3",
            "--workers", "1", "--out", str(tmp_path), "--study", "s"]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    (row,) = summary["lower_bounds"]["attention"]
    assert row["op"] == "attn.softmax.attention"
    assert row["compulsory_bytes"] <= row["bound_bytes"] <= row["fused_bytes"]


def test_resuming_a_barrier_study_with_fused_attention_names_the_switch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A study made with attention as a barrier (the old default) refused on a fused resume:
    the message names the switch that gives back its graph."""
    from fusiontune.cli.main import main

    argv = ["search", "bert_block", "--input-size", "16", "--trials", "2", "--backend", "serial",
            "--out", str(tmp_path), "--study", "s"]  # fmt: skip
    assert main([*argv, "--no-fuse-attention"]) == 0
    capsys.readouterr()
    assert main([*argv, "--resume"]) != 0
    err = capsys.readouterr().err
    was, _, now = err.partition(", not ")
    assert "attention" not in was and "1 attention(s) fused, --no-fuse-attention keeps" in now
    assert main([*argv, "--resume", "--trials", "3", "--no-fuse-attention"]) == 0
