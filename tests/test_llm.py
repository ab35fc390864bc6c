"""Llama-style decoder prefill (frontend/zoo_llm.py): lint, onnxruntime, causality, plans;
RMSNorm as one STATS op (ops/norm.py) and its import from every decomposition
(frontend/onnx_rmsnorm.py) and from ONNX RMSNormalization (opset 23).

Metric for onnxruntime: ``max|ref - ort| / max|ort|`` on the output, float32, at most REL_TOL
(CPU, graph optimizations off), as tests/test_zoo_onnxruntime.py does for the whole zoo.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml

from fusiontune.cli.main import main
from fusiontune.errors import ModelLoadError
from fusiontune.export.onnx_export import to_onnx
from fusiontune.export.plan_export import export_plan
from fusiontune.frontend.onnx_import import load_onnx, load_onnx_with_plan
from fusiontune.frontend.onnx_rmsnorm import collapse_rms_norms
from fusiontune.frontend.zoo import _ZooBuilder, build_zoo
from fusiontune.frontend.zoo_llm import (
    build_llama_decode,
    build_llama_prefill,
    causal_mask,
    rope_tables,
)
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.ir.opclass import OpClass
from fusiontune.ops import run_fused, run_reference
from fusiontune.ops.norm import RMS_NORM
from fusiontune.planner.baselines import unfused_plan
from fusiontune.reference import random_inputs, reference_run
from fusiontune.search.api import search
from fusiontune.sim.cost import data_moved, simulate
from fusiontune.sim.greedy import greedy_plan
from fusiontune.sim.hardware import load_hardware
from fusiontune.sim.verify import verify

REL_TOL = 1e-5
SEQ = 6  # small: the whole file runs in seconds


def _prefill(
    layers: int = 1, heads: int = 4, kv_heads: int = 2, seq: int = SEQ, rms_op: bool = True
) -> Graph:
    b = _ZooBuilder("llama_test", seed=3)
    build_llama_prefill(b, layers, 32, heads, kv_heads, seq, 48, rms_op=rms_op)
    return b.build()


def _ort_run(graph: Graph, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(
        to_onnx(graph).SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )
    return list(sess.run(list(graph.outputs), feeds))


def _rel_err(ref: np.ndarray, want: np.ndarray) -> float:
    diff = float(np.max(np.abs(ref.astype(np.float64) - want.astype(np.float64))))
    return diff / max(float(np.max(np.abs(want.astype(np.float64)))), 1e-30)


@pytest.mark.parametrize("kv_heads", [4, 2, 1])  # MHA, GQA, MQA
def test_prefill_lints_and_matches_onnxruntime(kv_heads: int) -> None:
    graph = _prefill(layers=2, kv_heads=kv_heads)
    assert graph.lint() is graph
    types = Counter(op.op_type for op in graph.ops)
    assert types["Softmax"] == 2 and types["Expand"] == (0 if kv_heads == 4 else 4)
    assert types["RMSNormalization"] == 5  # 2 RMSNorms per layer + the final one
    assert "Pow" not in types and "ReduceMean" not in types
    feeds = random_inputs(graph, seed=0)
    ref = reference_run(graph, feeds)
    (got,) = _ort_run(graph, feeds)
    assert _rel_err(ref[graph.outputs[0]], got) <= REL_TOL


def test_prefill_is_causal() -> None:
    """Changing the last token changes only the last row: the mask hides the future."""
    graph = _prefill(layers=2)
    feeds = random_inputs(graph, seed=1)
    out = reference_run(graph, feeds)[graph.outputs[0]]
    moved = {k: v.copy() for k, v in feeds.items()}
    moved["input"][:, -1, :] += 1.0
    out2 = reference_run(graph, moved)[graph.outputs[0]]
    np.testing.assert_array_equal(out[:, :-1], out2[:, :-1])
    assert float(np.max(np.abs(out[:, -1] - out2[:, -1]))) > 1e-3


def test_rope_and_mask_tables() -> None:
    cos, sin = rope_tables(4, 8)
    assert cos.shape == sin.shape == (4, 8)
    np.testing.assert_allclose(cos[0], 1.0)  # position 0 is not rotated
    np.testing.assert_allclose(sin[0], 0.0)
    np.testing.assert_allclose(cos**2 + sin**2, 1.0, rtol=1e-6)
    mask = causal_mask(3)
    assert (np.tril(mask) == 0).all() and (mask[np.triu_indices(3, 1)] < -1e8).all()


def test_llama_tiny_in_the_zoo_verifies_under_greedy() -> None:
    graph = build_zoo("llama_tiny", input_size=8)
    assert graph.lint() is graph
    assert sum(op.op_type == "Softmax" for op in graph.ops) == 2  # two layers
    feeds = random_inputs(graph, seed=0)
    (got,) = _ort_run(graph, feeds)
    assert _rel_err(reference_run(graph, feeds)[graph.outputs[0]], got) <= REL_TOL
    report = verify(graph, greedy_plan(graph))
    assert report.passed, report.summary()


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [({"heads": 3}, "hidden=32 must be a multiple of heads=3"),
     ({"kv_heads": 3}, "heads=4 must be a multiple of kv_heads=3"),
     ({"seq": 0}, "seq=0 must be an integer >= 1"),
     ({"heads": 32}, "head_dim=1 (hidden/heads) must be even")],
)  # fmt: skip
def test_bad_config_is_named(kwargs: dict[str, int], named: str) -> None:
    with pytest.raises(ModelLoadError, match=named.replace("(", r"\(").replace(")", r"\)")):
        _prefill(**kwargs)


# ---- decode: one token against a KV cache ---------------------------------------------------
def _decode(layers: int = 2, cache: int = SEQ - 1) -> Graph:
    b = _ZooBuilder("llama_test", seed=3)  # the same seed draws the prefill's weights
    build_llama_decode(b, layers, 32, 4, 2, cache, 48)
    return b.build()


def test_decode_lints_matches_onnxruntime_and_grows_the_cache() -> None:
    graph = _decode()
    assert graph.lint() is graph
    assert len(graph.inputs) == 1 + 2 * 2 and len(graph.outputs) == 1 + 2 * 2
    assert graph.tensors["l1.past_key"].shape == (1, 2, SEQ - 1, 8)
    assert graph.tensors[graph.outputs[1]].shape == (1, 2, SEQ, 8)  # present key: L + 1
    feeds = random_inputs(graph, seed=0)
    ref = reference_run(graph, feeds)
    got = _ort_run(graph, feeds)
    for name, want in zip(graph.outputs, got):
        assert _rel_err(ref[name], want) <= REL_TOL, name
    np.testing.assert_array_equal(ref[graph.outputs[1]][:, :, :-1], feeds["l0.past_key"])
    report = verify(graph, greedy_plan(graph))
    assert report.passed, report.summary()


def test_decode_step_equals_the_prefills_last_token() -> None:
    """Decode with the prefill's own K/V of tokens 0..L-1 gives the prefill's row L."""
    prefill, decode = _prefill(layers=2), _decode(layers=2)
    feeds = random_inputs(prefill, seed=2)
    full = reference_run(prefill, feeds, keep_intermediates=True)
    step = {"input": feeds["input"][:, -1:, :]}
    for i in range(2):
        step[f"l{i}.past_key"] = np.ascontiguousarray(full[f"l{i}.attn.k.rope"][:, :, :-1])
        step[f"l{i}.past_value"] = np.ascontiguousarray(full[f"l{i}.attn.v.heads"][:, :, :-1])
    out = reference_run(decode, step)
    got, want = out[decode.outputs[0]], full[prefill.outputs[0]][:, -1:, :]
    assert _rel_err(got, want) <= REL_TOL
    np.testing.assert_allclose(out[decode.outputs[1]], full["l0.attn.k.rope"], rtol=1e-5, atol=1e-6)


# ---- RMSNorm: one STATS op, and every decomposition imported as it --------------------------
def _save(model: onnx.ModelProto, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


def _types(graph: Graph) -> Counter[str]:
    return Counter(op.op_type for op in graph.ops)


def test_rms_norm_is_one_stats_op_equal_to_its_decomposition() -> None:
    fused, decomposed = _prefill(layers=2), _prefill(layers=2, rms_op=False)
    norms = [op for op in fused.ops if op.op_type == RMS_NORM]
    assert len(norms) == 5 and {op.op_class for op in norms} == {OpClass.STATS}
    assert len(decomposed.ops) - len(fused.ops) == 5 * 6  # seven ops each instead of one
    feeds = random_inputs(fused, seed=4)
    got = reference_run(fused, feeds)[fused.outputs[0]]
    want = reference_run(decomposed, feeds)[decomposed.outputs[0]]
    assert _rel_err(got, want) <= REL_TOL
    op = norms[0]
    x = feeds["input"]
    w = np.asarray(fused.tensors[op.inputs[1]].value)
    np.testing.assert_allclose(run_fused(op, [x, w])[0], run_reference(op, [x, w])[0], rtol=1e-5)


@pytest.mark.parametrize("opset", [21, 23])
def test_rms_norm_exports_for_onnxruntime_and_imports_as_one_op(opset: int, tmp_path: Path) -> None:
    """Opset 21: written as its ONNX function body (Mul, ReduceMean, Add, Sqrt, Div, Mul);
    opset 23: as RMSNormalization. onnxruntime runs both; both import as the one op."""
    graph = _prefill(layers=2)
    model = to_onnx(graph, opset=opset)
    in_file = Counter(n.op_type for n in model.graph.node)
    assert in_file["RMSNormalization"] == (5 if opset == 23 else 0)
    assert in_file["ReduceMean"] == (0 if opset == 23 else 5)
    feeds = random_inputs(graph, seed=0)
    ref = reference_run(graph, feeds)[graph.outputs[0]]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert _rel_err(ref, sess.run(None, feeds)[0]) <= REL_TOL
    back = load_onnx(_save(model, tmp_path, f"llama_{opset}.onnx"))
    assert _types(back) == _types(graph)
    assert [op.name for op in back.ops] == [op.name for op in graph.ops]
    np.testing.assert_array_equal(reference_run(back, feeds)[back.outputs[0]], ref)


def test_torchscript_style_rms_norm_imports_as_one_op(tmp_path: Path) -> None:
    """Pow(x, 2), ReduceMean, Add, Sqrt, Reciprocal, Mul(x), Mul(weight): HF's export."""
    decomposed = _prefill(layers=2, rms_op=False)
    assert _types(decomposed)["Reciprocal"] == 5
    back = load_onnx(_save(to_onnx(decomposed), tmp_path, "llama_ts.onnx"))
    assert _types(back) == _types(_prefill(layers=2))
    feeds = random_inputs(back, seed=0)
    (want,) = _ort_run(decomposed, feeds)
    assert _rel_err(reference_run(back, feeds)[back.outputs[0]], want) <= REL_TOL


def _norm_chain(square: str, weight: bool, leak: bool) -> Graph:
    """One decomposed RMSNorm over [2, 3, 8] (then a Relu); ``leak``: the mean is also an
    output, so the chain must stay as it is."""
    b = GraphBuilder("rms")
    x = b.input("x", (2, 3, 8))
    if square == "pow":
        sq = b.op("Pow", [x, b.const("two", np.float32(2.0))], name="sq")
    else:
        sq = b.op("Mul", [x, x], name="sq")
    mean = b.op("ReduceMean", [sq], {"axes": (-1,), "keepdims": 1}, name="mean")
    rms = b.op("Sqrt", [b.op("Add", [b.const("eps", np.float32(1e-5)), mean], name="add")])
    y = b.op("Div", [x, rms], name="div")
    if weight:
        w = b.const("w", np.linspace(0.5, 1.5, 8, dtype=np.float32).reshape(1, 1, 8))
        y = b.op("Mul", [w, y], name="weigh")
    b.output(b.op("Relu", [y], name="relu"), *([mean] if leak else []))
    return b.build()


@pytest.mark.parametrize(("square", "weight"), [("pow", True), ("mul", False)])
def test_each_decomposition_collapses_and_keeps_its_values(square: str, weight: bool) -> None:
    graph = _norm_chain(square, weight, leak=False)
    out = collapse_rms_norms(graph).lint()
    assert [op.op_type for op in out.ops] == [RMS_NORM, "Relu"]
    norm = out.ops[0]
    assert norm.attrs["axis"] == -1 and abs(norm.attrs["epsilon"] - 1e-5) < 1e-12
    assert out.tensors[norm.inputs[1]].shape == (8,)
    feeds = random_inputs(graph, seed=1)
    np.testing.assert_allclose(
        reference_run(out, feeds)[out.outputs[0]], reference_run(graph, feeds)[graph.outputs[0]],
        rtol=1e-6, atol=1e-7,
    )  # fmt: skip


def test_a_chain_whose_intermediate_is_read_elsewhere_stays() -> None:
    graph = _norm_chain("pow", True, leak=True)
    assert collapse_rms_norms(graph) is graph


# ---- weight streaming: weight bytes beside activation bytes ----------------------------------
STREAMING = {"n_crossbars": 4, "weight_reload": True}
"""sram_edge with 4 crossbars: each projection of llama_tiny (8 crossbars) is streamed, and
at 256 tokens its partial sums overflow the buffer, so the weights are re-loaded by tiles."""
STREAM_SEQ = 256


def test_streamed_weights_are_counted_and_stated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    graph = build_zoo("llama_tiny", input_size=STREAM_SEQ)
    hw = load_hardware("sram_edge", STREAMING)
    m = simulate(graph, unfused_plan(graph), hw)
    moved = data_moved(m.as_dict())
    assert m.weight_reload_bytes > 0 and m.reload_bytes >= m.weight_reload_bytes
    assert moved["weight_bytes"] == m.weight_load_bytes + m.weight_reload_bytes
    assert moved["weight_bytes"] + moved["activation_bytes"] == m.traffic_bytes
    # every matrix is loaded at least once: its bytes at weight_bits are the floor
    matmuls = [op for op in graph.ops if op.op_class is OpClass.LINEAR]
    params = sum(graph.op_params(op) for op in matmuls)
    assert m.weight_load_bytes == params * hw.weight_bits // 8
    hw_file = tmp_path / "streaming.yaml"
    hw_file.write_text(yaml.safe_dump({**hw.to_dict(), "name": "sram_edge_streaming"}))
    assert main(["simulate", "llama_tiny", "--input-size", str(STREAM_SEQ), "--plan", "unfused",
                 "--no-fuse-attention",
                 "--hw", str(hw_file)]) == 0  # fmt: skip
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if ln.startswith("weights "))
    assert f"{moved['weight_bytes']:,} B" in line and "streamed" in line
    assert f"activations {moved['activation_bytes']:,} B" in line
    assert main(["simulate", "llama_tiny", "--input-size", str(STREAM_SEQ), "--plan", "unfused",
                 "--no-fuse-attention",
                 "--hw", str(hw_file), "--json"]) == 0  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert report["data_moved"] == moved


def test_resident_weights_move_no_weight_bytes() -> None:
    graph = build_zoo("llama_tiny", input_size=8)
    m = simulate(graph, unfused_plan(graph), load_hardware("isaac_reram"))
    assert data_moved(m.as_dict()) == {
        "weight_bytes": 0, "activation_bytes": m.traffic_bytes, "weight_share": 0.0,
    }  # fmt: skip


def test_search_summary_states_weight_and_activation_bytes(tmp_path: Path) -> None:
    hw = load_hardware("sram_edge", STREAMING)
    hw_file = tmp_path / "streaming.yaml"
    hw_file.write_text(yaml.safe_dump({**hw.to_dict(), "name": "sram_edge_streaming"}))
    result = search("llama_tiny", input_size=STREAM_SEQ, hardware=hw_file, trials=2,
                    sampler="random", backend="serial", out=tmp_path / "out", study="w",
                    baselines=False)  # fmt: skip
    best = result.summary["best"]
    row = result.trials[result.trials["trial"] == best["trial"]].iloc[0]
    want = int(row["weight_load_bytes"]) + int(row["weight_reload_bytes"])
    assert best["data_moved"]["weight_bytes"] == want > 0
    assert best["data_moved"]["activation_bytes"] == int(row["traffic_bytes"]) - want
    stored = json.loads((tmp_path / "out" / "w" / "summary.json").read_text())
    assert stored["best"]["data_moved"] == best["data_moved"]


def test_an_exported_plan_with_rms_norms_reads_back_the_same_plan(tmp_path: Path) -> None:
    """export_plan writes each RMSNormalization (opset 21) as its function body inside its
    group; the import gives the op back under its name, so the plan reads back whole."""
    graph = build_zoo("llama_tiny", input_size=8)
    plan = greedy_plan(graph)
    export_plan(graph, plan, tmp_path / "plan.onnx")
    back, back_plan = load_onnx_with_plan(tmp_path / "plan.onnx")
    assert back_plan is not None and _types(back)[RMS_NORM] == 5
    assert len(back_plan.groups) == len(plan.groups)
    assert simulate(back, back_plan).traffic_bytes == simulate(graph, plan).traffic_bytes
