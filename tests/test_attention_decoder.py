"""Decoder attention in P5: causal masks (``is_causal``), grouped heads (GQA/MQA), RoPE; and
the sequence-major form (the head split and merge absorbed into the fused op).

- a constant causal mask (HF's ``finfo.min`` above the diagonal, the zoo's -1e9) becomes
  ``is_causal`` on the fused op; HF's ``repeat_kv`` (view, Expand, view) of K and V is
  absorbed, so the fused op reads the ``Hk`` grouped heads;
- the flash scheme skips the K/V tiles wholly after a Q tile's last query and reads each K/V
  head once for its group: the executor's measured bytes and peak equal the model's at three
  buffers, and outputs match onnxruntime (float32, 1e-5);
- what the pattern cannot take stays a barrier (or an unfused op) with the reason.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from fusiontune.export.onnx_export import to_onnx
from fusiontune.frontend.zoo import build_zoo
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.ops import AttentionRole, attention_role, is_activation_matmul
from fusiontune.planner.attention import explain_attention, find_attention, fuse_attention
from fusiontune.planner.plan import singleton_plan
from fusiontune.reference import random_inputs, reference_run
from fusiontune.sim.attention import attention_io_bound, flash_shape, plan_flash
from fusiontune.sim.cost import simulate
from fusiontune.sim.execute import execute
from fusiontune.sim.hardware import load_hardware
from fusiontune.sim.tiling import Scheme, singleton_tiling

REL_TOL = 1e-5
HW = load_hardware("sram_edge")
B, H, HK, N, D = 1, 4, 2, 12, 4  # GQA: 4 query heads over 2 key/value heads
# K and V of a K/V head: 2 * 12 * 4 = 96 elements
BUFFERS = {"resident": 4096, "streamed": 120, "tiny": 60}


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    return float(diff.max()) / max(float(np.abs(want.astype(np.float64)).max()), 1e-30)


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feeds.items() if k in names})[0]


def fused(graph: Graph) -> list:
    return [op for op in graph.ops if attention_role(op) is AttentionRole.FUSED]


def decoder_attention(causal: bool = True, repeat: str = "expand", kv_heads: int = HK,
                      fill: float = -1e9) -> Graph:  # fmt: skip
    """Q, K, V inputs; K and V repeated to the query heads; ``Div(sqrt d)``; a constant
    causal mask (``fill`` above the diagonal); Softmax; P·V."""
    b = GraphBuilder("decoder_attention", seed=0)
    q = b.input("q", (B, H, N, D))
    k = b.input("k", (B, kv_heads, N, D))
    v = b.input("v", (B, kv_heads, N, D))

    def rep(t: str, name: str) -> str:
        g = H // kv_heads
        if repeat == "expand":
            t = b.reshape(t, (B, kv_heads, 1, N, D), name=f"{name}.unsqueeze")
            shape = b.const(f"{name}.shape", np.asarray((B, kv_heads, g, N, D), np.int64))
            t = b.op("Expand", [t, shape], name=f"{name}.expand")
            return b.reshape(t, (B, H, N, D), name=f"{name}.merge")
        return b.op("Concat", [t] * g, {"axis": 1}, name=f"{name}.tile")  # as Tile does

    if repeat != "none":
        k, v = rep(k, "k.rep"), rep(v, "v.rep")
    kt = b.op("Transpose", [k], {"perm": (0, 1, 3, 2)}, name="k.t")
    s = b.op("MatMul", [q, kt], name="scores")
    s = b.op("Div", [s, b.const("root_d", np.float32(math.sqrt(D)))], name="scale")
    if causal:
        mask = np.triu(np.full((N, N), fill, np.float32), k=1)
        s = b.op("Add", [s, b.const("causal", mask)], name="mask")
    p = b.op("Softmax", [s], {"axis": -1}, name="softmax")
    b.op("MatMul", [p, v], name="context")
    return b.build()


# ---- recognition --------------------------------------------------------------------------------
def test_a_constant_causal_mask_and_repeat_kv_become_is_causal_and_grouped_heads() -> None:
    graph = decoder_attention()
    (chain,) = find_attention(graph)
    assert chain.fusable, chain.reason
    assert {"k.rep.expand", "v.rep.expand", "mask"} <= set(chain.ops)
    g = fuse_attention(graph).lint()
    (op,) = fused(g)
    assert op.attrs.get("is_causal") == 1 and len(op.inputs) == 3  # the mask is gone
    assert g.tensors[op.inputs[1]].shape == (B, HK, N, D) and op.inputs[2] == "v"
    assert not any(o.op_type == "Expand" for o in g.ops)
    x = random_inputs(graph, seed=1)
    want = reference_run(graph, x)["context"]
    assert rel_err(reference_run(g, x)["context"], want) <= REL_TOL
    assert rel_err(_ort(to_onnx(g, opset=23), x), want) <= REL_TOL


def test_a_mask_that_is_not_causal_stays_an_additive_mask() -> None:
    graph = decoder_attention(fill=-100.0)  # not a certain 0 after the softmax
    (op,) = fused(fuse_attention(graph))
    assert not op.attrs.get("is_causal") and len(op.inputs) == 4


def test_a_mask_row_broadcast_over_the_queries_is_not_taken_for_causal() -> None:
    b = GraphBuilder("row_mask", seed=0)
    q, kt, v = b.input("q", (1, H, N, D)), b.input("kt", (1, H, D, N)), b.input("v", (1, H, N, D))
    row = np.full((1, N), -1e9, np.float32)
    row[0, 0] = 0.0  # every query sees key 0 only: the first row of a causal mask, broadcast
    s = b.op("Add", [b.op("MatMul", [q, kt], name="scores"), b.const("row", row)], name="mask")
    b.op("MatMul", [b.op("Softmax", [s], {"axis": -1}, name="softmax"), v], name="context")
    graph = b.build()
    g = fuse_attention(graph)
    (op,) = fused(g)
    assert not op.attrs.get("is_causal") and len(op.inputs) == 4
    x = random_inputs(graph, seed=8)
    assert rel_err(reference_run(g, x)["context"], reference_run(graph, x)["context"]) <= REL_TOL


def test_a_tile_of_the_heads_is_not_absorbed_but_fuses() -> None:
    graph = decoder_attention(repeat="tile")  # heads in the order k0 k1 k0 k1: not repeat_kv
    g = fuse_attention(graph)
    (op,) = fused(g)
    assert g.tensors[op.inputs[1]].shape[1] == H and any(o.op_type == "Concat" for o in g.ops)
    x = random_inputs(graph, seed=2)
    assert rel_err(reference_run(g, x)["context"], reference_run(graph, x)["context"]) <= REL_TOL


def test_one_kv_head_broadcast_by_the_matmul_is_mqa() -> None:
    graph = decoder_attention(repeat="none", kv_heads=1)
    (op,) = fused(fuse_attention(graph))
    assert op.attrs.get("is_causal") == 1
    g = fuse_attention(graph)
    x = random_inputs(graph, seed=3)
    assert rel_err(reference_run(g, x)["context"], reference_run(graph, x)["context"]) <= REL_TOL


@pytest.mark.parametrize("name", ["llama_tiny"])
def test_the_zoo_decoder_fuses_every_attention_causal_and_grouped(name: str) -> None:
    graph = build_zoo(name, input_size=16)
    g = fuse_attention(graph).lint()
    ops = fused(g)
    assert len(ops) == 2 and not [o for o in g.ops if is_activation_matmul(g, o)]
    assert all(o.attrs.get("is_causal") == 1 and len(o.inputs) == 3 for o in ops)
    # 4 heads over 2 KV heads, in the sequence-major form (the split moved past RoPE)
    assert all((o.attrs["q_num_heads"], o.attrs["kv_num_heads"]) == (4, 2) for o in ops)
    assert all(g.tensors[o.inputs[1]].shape == (1, 16, 2 * 16) for o in ops)
    x = random_inputs(graph, seed=4)
    want = _ort(to_onnx(graph), x)
    run = execute(g, singleton_plan(g), x, hw=HW)
    assert rel_err(run.outputs[graph.outputs[0]], want) <= REL_TOL
    m = simulate(g, singleton_plan(g), HW)
    assert (run.dram_read_bytes, run.dram_write_bytes) == (m.act_read_bytes, m.act_write_bytes)


def test_the_decode_step_fuses_with_grouped_heads_over_the_kv_cache() -> None:
    from fusiontune.frontend.zoo import _ZooBuilder
    from fusiontune.frontend.zoo_llm import build_llama_decode

    b = _ZooBuilder("decode", seed=0)
    build_llama_decode(b, 2, 64, 4, 2, 15, 128)  # one token after 15 cached ones
    graph = b.build()
    g = fuse_attention(graph).lint()
    ops = fused(g)
    assert len(ops) == 2 and not [o for o in g.ops if is_activation_matmul(g, o)]
    for op in ops:  # one query over the 16 keys of 2 K/V heads; no mask, not causal
        assert g.tensors[op.inputs[1]].shape == (1, 2, 16, 16) and len(op.inputs) == 3
        assert not op.attrs.get("is_causal")
    x = random_inputs(graph, seed=7)
    sess_want = _ort_all(to_onnx(graph), x)
    run = execute(g, singleton_plan(g), x, hw=HW)
    for name, want in zip(graph.outputs, sess_want):
        assert rel_err(run.outputs[name], want) <= REL_TOL, name


def _ort_all(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


# ---- the flash scheme: measured == model, skipped tiles, grouped reads ------------------------
@pytest.mark.parametrize("buffer", list(BUFFERS.values()), ids=list(BUFFERS))
def test_measured_bytes_and_peak_equal_the_model(buffer: int) -> None:
    graph = fuse_attention(decoder_attention())
    hw = dataclasses.replace(HW, buffer_bytes=buffer)
    plan = singleton_plan(graph)
    (op,) = fused(graph)
    i = [g.ops for g in plan.groups].index((op.name,))
    tiling = singleton_tiling(graph, plan.groups[i], hw)
    assert tiling is not None and tiling.scheme is Scheme.ATTENTION
    x = random_inputs(graph, seed=5)
    run = execute(graph, plan, x, hw=hw)
    assert run.group_read_bytes[i] == tiling.read_elems * hw.act_bytes
    assert run.group_write_bytes[i] == tiling.write_elems * hw.act_bytes
    assert run.group_peak_buffer_bytes[i] == tiling.peak_elems * hw.act_bytes <= buffer
    assert rel_err(run.outputs["context"], _ort(to_onnx(graph, opset=23), x)) <= REL_TOL


def test_the_causal_schedule_skips_the_masked_tiles() -> None:
    causal = fuse_attention(decoder_attention())
    full = fuse_attention(decoder_attention(causal=False))
    for buffer in (BUFFERS["streamed"], BUFFERS["tiny"]):
        c = plan_flash(causal, fused(causal)[0], buffer, 2)
        f = plan_flash(full, fused(full)[0], buffer, 2)
        assert not c.resident and not f.resident
        assert c.read_elems < f.read_elems
        # K/V rows fetched per Q tile: the tiles starting before its last query, no more
        shape = flash_shape(causal, fused(causal)[0])
        kv = sum(min(math.ceil(p1 / c.n) * c.n, N) for _, p1 in shape.q_tiles(c.m))
        assert c.read_elems == B * H * N * D + B * HK * kv * 2 * D
    # the bound counts the scores a query sees (N(N+1)/2 a head), and stays below the schedule
    op = fused(causal)[0]
    assert flash_shape(causal, op).scores() == B * H * N * (N + 1) // 2
    for buffer in BUFFERS.values():
        flash = plan_flash(causal, op, buffer, 2)
        assert attention_io_bound(causal, op, buffer) <= flash.read_elems + flash.write_elems


def test_grouped_heads_read_each_kv_head_once_for_its_group() -> None:
    grouped = fuse_attention(decoder_attention())
    tiled = fuse_attention(decoder_attention(repeat="tile"))  # K/V of H heads, unabsorbed
    g = plan_flash(grouped, fused(grouped)[0], BUFFERS["resident"], 2)
    t = plan_flash(tiled, fused(tiled)[0], BUFFERS["resident"], 2)
    assert g.resident and t.resident
    assert g.read_elems == B * H * N * D + B * HK * N * 2 * D  # the compulsory traffic
    assert t.read_elems == B * H * N * D + B * H * N * 2 * D


# ---- what stays a barrier or unfused ----------------------------------------------------------
def test_a_repeat_on_k_only_is_left_as_ops_and_the_attention_fuses() -> None:
    b = GraphBuilder("k_only", seed=0)
    q, k = b.input("q", (B, H, N, D)), b.input("k", (B, HK, N, D))
    v = b.input("v", (B, H, N, D))
    k = b.reshape(k, (B, HK, 1, N, D), name="k.unsqueeze")
    shape = b.const("k.shape", np.asarray((B, HK, H // HK, N, D), np.int64))
    k = b.reshape(b.op("Expand", [k, shape], name="k.expand"), (B, H, N, D), name="k.merge")
    s = b.op("MatMul", [q, b.op("Transpose", [k], {"perm": (0, 1, 3, 2)})], name="scores")
    b.op("MatMul", [b.op("Softmax", [s], {"axis": -1}, name="softmax"), v], name="context")
    graph = b.build()
    g = fuse_attention(graph)
    (op,) = fused(g)  # K and V must agree in heads: the repeat of K stays
    assert g.tensors[op.inputs[1]].shape[1] == H and any(o.op_type == "Expand" for o in g.ops)


def test_keys_broadcast_over_the_batch_stay_a_barrier_with_the_reason() -> None:
    b = GraphBuilder("batch", seed=0)
    q, kt, v = b.input("q", (2, H, N, D)), b.input("kt", (1, H, D, N)), b.input("v", (1, H, N, D))
    s = b.op("MatMul", [q, kt], name="scores")
    b.op("MatMul", [b.op("Softmax", [s], {"axis": -1}, name="softmax"), v], name="context")
    graph = b.build()
    (verdict,) = explain_attention(graph)
    assert "stays a barrier" in str(verdict) and "differ in batch or heads" in str(verdict)
    assert fuse_attention(graph) is graph


def test_an_activation_mask_that_would_grow_the_scores_stays_a_barrier() -> None:
    b = GraphBuilder("grow", seed=0)
    q, kt, v = b.input("q", (1, H, N, D)), b.input("kt", (1, H, D, N)), b.input("v", (1, H, N, D))
    s = b.op("Add", [b.op("MatMul", [q, kt], name="scores"), b.input("m", (2, 1, N, N))])
    b.op("MatMul", [b.op("Softmax", [s], {"axis": -1}, name="softmax"), v], name="context")
    (verdict,) = explain_attention(b.build())
    assert "stays a barrier" in str(verdict) and "would grow them" in str(verdict)


def _onnx_attention(path: str, rank: int = 4, **attrs: object) -> onnx.ModelProto:
    def value(name: str, shape: tuple[int, ...]) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))

    q, kv = ((B, H, N, D), (B, HK, N, D)) if rank == 4 else ((B, N, H * D), (B, N, HK * D))
    if rank == 3:
        attrs = {**attrs, "q_num_heads": H, "kv_num_heads": HK}
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], **attrs)
    graph = helper.make_graph([node], path, [value("q", q), value("k", kv), value("v", kv)],
                              [value("y", q)])  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


@pytest.mark.parametrize("rank", [4, 3])
def test_onnx_attention_with_is_causal_and_grouped_heads_fuses(tmp_path: Path, rank: int) -> None:
    from fusiontune.frontend.onnx_import import load_onnx

    model = _onnx_attention("gqa_causal", rank, is_causal=1)
    onnx.save(model, str(tmp_path / "gqa.onnx"))
    graph = fuse_attention(load_onnx(tmp_path / "gqa.onnx"))
    (op,) = fused(graph)
    kv_heads = op.attrs.get("kv_num_heads") or graph.tensors[op.inputs[1]].shape[1]
    assert op.attrs.get("is_causal") == 1 and kv_heads == HK
    (verdict,) = explain_attention(graph)
    assert str(verdict).startswith("attention _attn0.probs.attention: fused (P5, flash scheme")
    assert "causal" in verdict.detail and f"{H} query heads over {HK} K/V heads" in verdict.detail
    x = random_inputs(graph, seed=6)
    hw = dataclasses.replace(HW, buffer_bytes=BUFFERS["streamed"] * 4)
    run = execute(graph, singleton_plan(graph), x, hw=hw)
    assert rel_err(run.outputs["y"], _ort(model, x)) <= REL_TOL


def test_an_attention_op_outside_the_form_runs_unfused_with_its_reason() -> None:
    b = GraphBuilder("softcap", seed=0)
    q, k, v = b.input("q", (B, H, N, D)), b.input("k", (B, HK, N, D)), b.input("v", (B, HK, N, D))
    b.op("Attention", [q, k, v], {"softcap": 5.0}, name="attention")
    (verdict,) = explain_attention(b.build())
    assert "runs unfused, OPAQUE (attribute softcap=5.0 is not supported" in str(verdict)


# ---- the sequence-major form: the head split and merge absorbed ------------------------------
@pytest.mark.parametrize("form", ["torchscript", "dynamo"])
def test_the_head_split_and_merge_are_absorbed_into_the_fused_op(form: str) -> None:
    from fusiontune.frontend.zoo_attention import attention_block
    from fusiontune.ir.opclass import OpClass

    b = GraphBuilder(f"block_{form}", seed=3)
    attention_block(b, b.input("input", (1, 24, 32)), None, 24, 1, hidden=32, heads=4, ffn=64,
                    form=form)  # fmt: skip
    graph = b.build()
    g = fuse_attention(graph).lint()
    (op,) = fused(g)
    assert op.attrs["q_num_heads"] == op.attrs["kv_num_heads"] == 4
    assert all(len(g.tensors[t].shape) == 3 for t in (*op.inputs, *op.outputs))
    assert not [o.name for o in g.ops if o.op_class is OpClass.LAYOUT]  # no split, no merge
    (reader,) = g.consumers(op.outputs[0])
    assert reader.op_class is OpClass.LINEAR  # the output projection reads Y as it is
    (verdict,) = explain_attention(g)
    assert "head split and merge absorbed" in verdict.detail
    x = random_inputs(graph, seed=9)
    want = _ort(to_onnx(graph), x)
    assert rel_err(_ort(to_onnx(g, opset=23), x), want) <= REL_TOL
    for buffer in (4096, 600, 200):
        hw = dataclasses.replace(HW, buffer_bytes=buffer)
        plan = singleton_plan(g)
        i = [grp.ops for grp in plan.groups].index((op.name,))
        tiling = singleton_tiling(g, plan.groups[i], hw)
        assert tiling is not None and tiling.scheme is Scheme.ATTENTION
        run = execute(g, plan, x, hw=hw)
        assert run.group_read_bytes[i] == tiling.read_elems * hw.act_bytes
        assert run.group_write_bytes[i] == tiling.write_elems * hw.act_bytes
        assert run.group_peak_buffer_bytes[i] == tiling.peak_elems * hw.act_bytes <= buffer
        assert rel_err(run.outputs[graph.outputs[0]], want) <= REL_TOL


@pytest.mark.parametrize("buffer", list(BUFFERS.values()), ids=list(BUFFERS))
def test_the_sequence_major_grouped_causal_form_measures_as_modelled(
    tmp_path: Path, buffer: int
) -> None:
    from fusiontune.frontend.onnx_import import load_onnx

    model = _onnx_attention("gqa_causal_3d", 3, is_causal=1)
    onnx.save(model, str(tmp_path / "gqa3.onnx"))
    graph = fuse_attention(load_onnx(tmp_path / "gqa3.onnx"))
    (op,) = fused(graph)
    assert (op.attrs["q_num_heads"], op.attrs["kv_num_heads"]) == (H, HK)
    hw = dataclasses.replace(HW, buffer_bytes=buffer)
    plan = singleton_plan(graph)
    tiling = singleton_tiling(graph, plan.groups[0], hw)
    assert tiling is not None and tiling.scheme is Scheme.ATTENTION
    x = random_inputs(graph, seed=10)
    run = execute(graph, plan, x, hw=hw)
    assert run.group_read_bytes[0] == tiling.read_elems * hw.act_bytes
    assert run.group_peak_buffer_bytes[0] == tiling.peak_elems * hw.act_bytes <= buffer
    assert rel_err(run.outputs["y"], _ort(model, x)) <= REL_TOL


@pytest.mark.parametrize(
    "file", ["bert_torchscript", "bert_dynamo", "gpt2_torchscript", "gpt2_dynamo"]
)
def test_the_encoder_and_gpt2_exports_take_the_sequence_major_form(file: str) -> None:
    from fusiontune.frontend.onnx_import import load_onnx
    from fusiontune.ir.opclass import OpClass

    path = Path(__file__).parent / "data" / "attention" / f"{file}.onnx"
    graph = load_onnx(path)
    g = fuse_attention(graph).lint()
    ops = fused(g)
    assert len(ops) == 2 and all(op.attrs.get("q_num_heads") == 4 for op in ops)
    for op in ops:  # Q, K, V straight from the projections' split or bias, no head transpose
        for t in op.inputs[:3]:
            p = g.producer(t)
            assert p is not None and p.op_class is not OpClass.LAYOUT, (t, p)
    x = random_inputs(graph, seed=11)
    out = graph.outputs[0]
    assert rel_err(reference_run(g, x)[out], reference_run(graph, x)[out]) <= REL_TOL


CASES = [  # (B, H, Hk, Nq, Nk, d, causal, rank, buffer, K/V resident)
    (1, 4, 2, 9, 9, 4, True, 4, 80, False),
    (2, 6, 3, 5, 11, 4, True, 4, 60, False),  # more keys than queries: the last keys unread
    (1, 4, 1, 11, 6, 2, True, 3, 50, False),  # more queries than keys, MQA, sequence-major
    (1, 6, 2, 7, 7, 4, False, 3, 120, True),
    (2, 2, 2, 13, 13, 8, True, 4, 150, False),
    (1, 4, 2, 9, 9, 4, True, 3, 150, True),
]


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_random_forms_measure_as_modelled_and_match_onnxruntime(case: tuple) -> None:  # type: ignore[type-arg]
    b_, h, hk, nq, nk, d, causal, rank, buffer, resident = case
    b = GraphBuilder("case", seed=0)
    if rank == 4:
        q, k = b.input("q", (b_, h, nq, d)), b.input("k", (b_, hk, nk, d))
        v = b.input("v", (b_, hk, nk, d))
        attrs: dict[str, object] = {}
    else:
        q, k = b.input("q", (b_, nq, h * d)), b.input("k", (b_, nk, hk * d))
        v = b.input("v", (b_, nk, hk * d))
        attrs = {"q_num_heads": h, "kv_num_heads": hk}
    b.op("Attention", [q, k, v], {**attrs, "is_causal": int(causal)}, name="attention")
    graph = b.build()
    hw = dataclasses.replace(HW, buffer_bytes=buffer)
    plan = singleton_plan(graph)
    tiling = singleton_tiling(graph, plan.groups[0], hw)
    assert tiling is not None and tiling.scheme is Scheme.ATTENTION
    assert bool(tiling.tile[2]) is resident
    x = random_inputs(graph, seed=12)
    run = execute(graph, plan, x, hw=hw)
    assert run.group_read_bytes[0] == tiling.read_elems * hw.act_bytes
    assert run.group_write_bytes[0] == tiling.write_elems * hw.act_bytes
    assert run.group_peak_buffer_bytes[0] == tiling.peak_elems * hw.act_bytes <= buffer
    (op,) = graph.ops
    assert attention_io_bound(graph, op, buffer) <= tiling.read_elems + tiling.write_elems
    want = _ort(to_onnx(graph, opset=23), x)
    assert rel_err(run.outputs["attention"], want) <= REL_TOL
    assert rel_err(reference_run(graph, x)["attention"], want) <= REL_TOL
