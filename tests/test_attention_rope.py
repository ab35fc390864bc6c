"""The head split of Q and K moved past RoPE (``planner/attention_rope.py``), so that P5
absorbs it: Llama's attentions take the sequence-major form ``[B, N, H·d]``.

- both torch exports of a Llama and the zoo's ``llama_tiny``: every fused op 3-D, no head
  Transpose left; outputs match onnxruntime (float32, 1e-5), the executor's bytes and peak
  equal the model's at three buffers;
- the moved region computes bit-identical values;
- what is not per head (a slice along the sequence, a second activation mixed in, the decode
  step's cache Concat) keeps the split where it is.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from test_attention_decoder import _ort, fused, rel_err

from fusiontune.export.onnx_export import to_onnx
from fusiontune.frontend.onnx_import import load_onnx
from fusiontune.frontend.zoo import build_zoo
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.ops import axis_permutation
from fusiontune.planner.attention import fuse_attention
from fusiontune.planner.attention_rope import commute_head_split
from fusiontune.planner.plan import singleton_plan
from fusiontune.reference import random_inputs, reference_run
from fusiontune.sim.cost import simulate
from fusiontune.sim.execute import execute
from fusiontune.sim.hardware import load_hardware
from fusiontune.sim.tiling import Scheme, singleton_tiling

REL_TOL = 1e-5
HW = load_hardware("sram_edge")
DATA = Path(__file__).parent / "data" / "attention"
N, HID, H, D = 8, 16, 4, 4


def head_transposes(graph: Graph) -> list[str]:
    return [op.name for op in graph.ops if axis_permutation(op, 4) is not None]


def rope_block(variant: str = "rope") -> Graph:
    """x -> Q, K, V projections -> head split -> rotate-half RoPE on Q and K (two Slices of
    the last axis, Neg, Concat, Mul by cos/sin, Add) -> attention -> merge. ``variant``:
    ``"seq"`` rotates the halves of the *sequence* axis instead (not per position);
    ``"mix"`` adds V into Q's rotation (a second activation in the region)."""
    b = GraphBuilder(f"rope_{variant}", seed=2)
    x = b.input("x", (1, N, HID))
    rng = np.random.default_rng(0)
    cos = b.const("cos", rng.standard_normal((1, 1, N, D)).astype(np.float32))
    sin = b.const("sin", rng.standard_normal((1, 1, N, D)).astype(np.float32))

    def split(t: str, name: str) -> str:
        t = b.reshape(t, (1, N, H, D), name=f"{name}.view")
        return b.op("Transpose", [t], {"perm": (0, 2, 1, 3)}, name=f"{name}.heads")

    def ints(name: str, v: int) -> str:
        return b.const(name, np.asarray([v], np.int64))

    def rope(t: str, name: str, other: str | None = None) -> str:
        axis, half = (2, N // 2) if variant == "seq" else (3, D // 2)
        size = N if variant == "seq" else D
        ax = ints(f"{name}.axis", axis)
        x1 = b.op("Slice", [t, ints(f"{name}.s0", 0), ints(f"{name}.e0", half), ax],
                  name=f"{name}.x1")  # fmt: skip
        x2 = b.op("Slice", [t, ints(f"{name}.s1", half), ints(f"{name}.e1", size), ax],
                  name=f"{name}.x2")  # fmt: skip
        rot = b.op("Concat", [b.op("Neg", [x2], name=f"{name}.neg"), x1], {"axis": axis},
                   name=f"{name}.rotate")  # fmt: skip
        a = b.op("Mul", [t, cos], name=f"{name}.cos")
        if other is not None:
            a = b.op("Add", [a, other], name=f"{name}.mix")
        return b.op("Add", [a, b.op("Mul", [rot, sin], name=f"{name}.sin")], name=name)

    v = split(b.matmul(x, HID, bias=False, name="v"), "v")
    q = rope(split(b.matmul(x, HID, bias=False, name="q"), "q"), "q.rope",
             v if variant == "mix" else None)  # fmt: skip
    k = rope(split(b.matmul(x, HID, bias=False, name="k"), "k"), "k.rope")
    kt = b.op("Transpose", [k], {"perm": (0, 1, 3, 2)}, name="k.t")
    s = b.op("MatMul", [q, kt], name="scores")
    s = b.op("Div", [s, b.const("root_d", np.float32(math.sqrt(D)))], name="scale")
    p = b.op("Softmax", [s], {"axis": -1}, name="softmax")
    y = b.op("MatMul", [p, v], name="context")
    y = b.op("Transpose", [y], {"perm": (0, 2, 1, 3)}, name="merge")
    y = b.reshape(y, (1, N, HID), name="merge.view")
    b.matmul(y, HID, bias=False, name="o")
    return b.build()


def _measured_as_modelled(
    g: Graph, x: dict[str, np.ndarray], want: np.ndarray, buffers: tuple[int, ...]
) -> None:
    """Singleton plan at three buffers: the attention's tiles as modelled, the whole run's
    bytes equal to the model's, the output equal to ``want``."""
    out = g.outputs[0]
    (op,) = fused(g)[:1]
    for buffer in buffers:
        hw = dataclasses.replace(HW, buffer_bytes=buffer)
        plan = singleton_plan(g)
        i = [grp.ops for grp in plan.groups].index((op.name,))
        tiling = singleton_tiling(g, plan.groups[i], hw)
        assert tiling is not None and tiling.scheme is Scheme.ATTENTION
        run = execute(g, plan, x, hw=hw)
        assert run.group_read_bytes[i] == tiling.read_elems * hw.act_bytes
        assert run.group_peak_buffer_bytes[i] == tiling.peak_elems * hw.act_bytes <= buffer
        m = simulate(g, plan, hw)
        assert (run.dram_read_bytes, run.dram_write_bytes) == (m.act_read_bytes, m.act_write_bytes)
        assert rel_err(run.outputs[out], want) <= REL_TOL


def test_the_split_moves_past_rope_and_the_attention_takes_the_3d_form() -> None:
    graph = rope_block()
    g = fuse_attention(graph).lint()
    (op,) = fused(g)
    assert (op.attrs["q_num_heads"], op.attrs["kv_num_heads"]) == (H, H)
    assert all(len(g.tensors[t].shape) == 3 for t in (*op.inputs, *op.outputs))
    assert head_transposes(g) == []  # split, merge and the Kᵀ transpose all gone
    rotated = g.tensors[g.producer(op.inputs[0]).inputs[0]]  # RoPE's output, before the view
    assert rotated.shape == (1, N, H, D)  # runs on [B, N, H, d]
    x = random_inputs(graph, seed=1)
    want = _ort(to_onnx(graph), x)
    assert rel_err(_ort(to_onnx(g, opset=23), x), want) <= REL_TOL
    _measured_as_modelled(g, x, want, (8192, 1024, 400))


def test_the_moved_rope_computes_the_same_values_bit_for_bit() -> None:
    graph = rope_block()
    moved, exits = commute_head_split(graph)
    assert set(exits) == {"q.rope", "k.rope"}
    x = random_inputs(graph, seed=4)
    a = reference_run(graph, x, keep_intermediates=True)
    b = reference_run(moved.lint(), x, keep_intermediates=True)
    for t in ("q.rope", "k.rope", graph.outputs[0]):
        assert np.array_equal(a[t], b[t]), t


@pytest.mark.parametrize("variant", ["seq", "mix"])
def test_a_region_that_is_not_per_head_keeps_the_split(variant: str) -> None:
    graph = rope_block(variant)
    _, exits = commute_head_split(graph)
    assert "q.rope" not in exits  # "seq" rotates K the same way; "mix" leaves K per head
    assert ("k.rope" in exits) == (variant == "mix")
    g = fuse_attention(graph).lint()
    (op,) = fused(g)
    assert "q_num_heads" not in op.attrs  # the 4-D form, as before
    x = random_inputs(graph, seed=2)
    assert rel_err(reference_run(g, x)[g.outputs[0]], _ort(to_onnx(graph), x)) <= REL_TOL


@pytest.mark.parametrize("file", ["llama_torchscript", "llama_dynamo"])
def test_both_llama_exports_take_the_sequence_major_form(file: str) -> None:
    graph = load_onnx(DATA / f"{file}.onnx")
    g = fuse_attention(graph).lint()
    ops = fused(g)
    assert len(ops) == 2
    assert all((op.attrs["q_num_heads"], op.attrs["kv_num_heads"]) == (4, 2) for op in ops)
    assert head_transposes(g) == [], head_transposes(g)
    assert len(g.ops) < len(fuse_attention(graph, absorb_heads=False).ops)
    x = random_inputs(graph, seed=7)
    model = onnx.load(str(DATA / f"{file}.onnx"))
    want = _ort(model, x)
    assert rel_err(reference_run(g, x)[g.outputs[0]], want) <= REL_TOL
    _measured_as_modelled(g, x, want, (16384, 8192, 4096))  # the embedding Gather: 4 KB


def test_the_zoo_prefill_moves_the_split_and_the_decode_step_keeps_it() -> None:
    from fusiontune.frontend.zoo import _ZooBuilder
    from fusiontune.frontend.zoo_llm import build_llama_decode

    g = fuse_attention(build_zoo("llama_tiny", input_size=16))
    assert all("q_num_heads" in op.attrs for op in fused(g)) and head_transposes(g) == []
    b = _ZooBuilder("decode", seed=0)
    build_llama_decode(b, 2, 64, 4, 2, 15, 128)  # K's RoPE output feeds the cache Concat
    graph = b.build()
    d = fuse_attention(graph).lint()
    assert len(fused(d)) == 2 and all("q_num_heads" not in op.attrs for op in fused(d))
    assert not [t for t in d.tensors if t.endswith(".seq_major")]  # nothing moved


def test_explain_says_where_the_split_was_moved_past_rope() -> None:
    from fusiontune.planner.attention import explain_attention

    moved = "head split of Q and K moved past their per-head ops (RoPE)"
    llama = explain_attention(fuse_attention(build_zoo("llama_tiny", input_size=16)))
    assert len(llama) == 2 and all(moved in str(v) for v in llama)
    bert = explain_attention(fuse_attention(build_zoo("bert_block", input_size=16)))
    assert bert and not any("moved past" in str(v) for v in bert)  # absorbed, nothing moved


def test_moved_axes_names_the_axes_a_slice_split_or_concat_moves() -> None:
    from fusiontune.ops import moved_axes

    g = rope_block()
    by_name = {op.name: op for op in g.ops}
    assert moved_axes(g, by_name["q.rope.x1"]) == frozenset({3})  # Slice, axes [3]
    assert moved_axes(g, by_name["q.rope.rotate"]) == frozenset({3})  # Concat, axis 3
    assert moved_axes(g, by_name["q.rope.neg"]) is None  # no such fact for an element-wise op
    s = rope_block("seq")
    assert moved_axes(s, {op.name: op for op in s.ops}["q.rope.x1"]) == frozenset({2})
