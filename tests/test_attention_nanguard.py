"""P5 absorbs torch dynamo's softmax NaN guard ``where(isnan(p), 0, p)`` (``nan_guard=1``).

A query row whose every key is masked to -inf has a NaN softmax; the guard makes its
probabilities (and so its output) 0. The fused op records the guard and its reference, online
and executor kernels give that row 0, as onnxruntime does on the original chain.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from fusiontune.frontend.onnx_import import load_onnx
from fusiontune.ir.graph import Graph
from fusiontune.ops import AttentionRole, attention_role, is_activation_matmul
from fusiontune.ops.attention import NAN_GUARD, online_attention
from fusiontune.planner.attention import explain_attention, find_attention, fuse_attention
from fusiontune.planner.plan import singleton_plan
from fusiontune.reference import reference_run
from fusiontune.sim.execute import execute
from fusiontune.sim.hardware import load_hardware
from fusiontune.sim.verify import verify

HW = load_hardware("sram_edge")
B, H, N, D = 1, 2, 6, 4
MASKED_ROW = 2  # every key of this query row is -inf
REL_TOL = 1e-5


def _model(guard: bool = True) -> onnx.ModelProto:
    """Q·Kᵀ -> Mul(scale) -> Add(mask input) -> Softmax -> [IsNaN, Where(c, 0, p)] -> ·V."""
    f32 = TensorProto.FLOAT
    shape = [B, H, N, D]
    inputs = [helper.make_tensor_value_info(n, f32, shape) for n in ("q", "k", "v")]
    inputs.append(helper.make_tensor_value_info("mask", f32, [B, 1, N, N]))
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Add", ["ss", "mask"], ["sm"]),
        helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
    ]
    probs = "p"
    if guard:
        nodes += [
            helper.make_node("IsNaN", ["p"], ["nan"]),
            helper.make_node("Where", ["nan", "zero", "p"], ["pg"]),
        ]
        probs = "pg"
    nodes.append(helper.make_node("MatMul", [probs, "v"], ["y"]))
    inits = [
        helper.make_tensor("scale", f32, [], [0.5]),
        helper.make_tensor("zero", f32, [], [0.0]),
    ]
    out = helper.make_tensor_value_info("y", f32, shape)
    g = helper.make_graph(nodes, "nan_guard", inputs, [out], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _load(tmp_path: Path, guard: bool = True) -> Graph:
    path = tmp_path / "guard.onnx"
    onnx.save(_model(guard), str(path))
    return load_onnx(path)


def _feeds(seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = {n: rng.standard_normal((B, H, N, D)).astype(np.float32) for n in ("q", "k", "v")}
    mask = np.where(rng.random((B, 1, N, N)) < 0.3, -np.inf, 0.0).astype(np.float32)
    mask[..., 0] = 0.0  # every other row sees key 0
    mask[..., MASKED_ROW, :] = -np.inf
    x["mask"] = mask
    return x


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, feeds)[0])


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    return float(diff.max()) / float(np.abs(want).max())


def _fused(graph: Graph) -> list[str]:
    return [op.name for op in graph.ops if attention_role(op) is AttentionRole.FUSED]


def test_the_guarded_chain_fuses_and_records_the_guard(tmp_path: Path) -> None:
    graph = _load(tmp_path)
    (chain,) = find_attention(graph)
    assert chain.fusable and chain.nan_guard, chain.reason
    fused = fuse_attention(graph).lint()
    (name,) = _fused(fused)
    assert fused.op(name).attrs[NAN_GUARD] == 1
    assert [op.name for op in fused.ops if is_activation_matmul(fused, op)] == []
    assert not {"IsNaN", "Where", "Softmax"} & {op.op_type for op in fused.ops}
    (verdict,) = explain_attention(fused)
    assert "fully masked query row outputs 0" in str(verdict)


def test_without_the_guard_the_fused_op_has_no_flag(tmp_path: Path) -> None:
    fused = fuse_attention(_load(tmp_path, guard=False))
    (name,) = _fused(fused)
    assert NAN_GUARD not in fused.op(name).attrs


@pytest.mark.parametrize("buffer", [8192, 160], ids=["resident", "streamed"])
def test_a_fully_masked_row_gives_zeros_as_onnxruntime(tmp_path: Path, buffer: int) -> None:
    graph = _load(tmp_path)
    fused = fuse_attention(graph)
    x = _feeds()
    want = _ort(_model(), x)
    assert np.all(want[..., MASKED_ROW, :] == 0) and np.isfinite(want).all()
    assert _rel_err(reference_run(fused, x)["y"], want) <= REL_TOL
    (name,) = _fused(fused)
    op = fused.op(name)
    online = online_attention(op, [x["q"], x["k"], x["v"], x["mask"]], block=2)[0]
    assert _rel_err(online, want) <= REL_TOL
    hw = dataclasses.replace(HW, buffer_bytes=buffer)
    plan = singleton_plan(fused)
    report = verify(fused, plan, hw=hw)
    assert report.traffic_ok and report.buffer_ok and report.passed, report.summary()
    run = execute(fused, plan, x, hw=hw)
    assert _rel_err(run.outputs["y"], want) <= REL_TOL


def test_unguarded_the_masked_row_stays_nan(tmp_path: Path) -> None:
    fused = fuse_attention(_load(tmp_path, guard=False))
    x = _feeds()
    assert np.isnan(_ort(_model(guard=False), x)[..., MASKED_ROW, :]).all()
    assert np.isnan(reference_run(fused, x)["y"][..., MASKED_ROW, :]).all()
    (name,) = _fused(fused)
    online = online_attention(fused.op(name), [x["q"], x["k"], x["v"], x["mask"]], block=2)[0]
    assert np.isnan(online[..., MASKED_ROW, :]).all()
    assert np.isfinite(np.delete(online, MASKED_ROW, axis=2)).all()


def test_export_writes_onnx_attention_which_zeros_the_row_and_reimports_guarded(
    tmp_path: Path,
) -> None:
    from fusiontune.export.onnx_export import to_onnx

    fused = fuse_attention(_load(tmp_path))
    model = to_onnx(fused, opset=23)
    (node,) = [n for n in model.graph.node if n.op_type == "Attention"]
    assert NAN_GUARD not in {a.name for a in node.attribute}  # ONNX's Attention zeros the row
    x = _feeds()
    want = _ort(_model(), x)
    assert _rel_err(_ort(model, x), want) <= REL_TOL
    path = tmp_path / "exported.onnx"
    onnx.save(model, str(path))
    again = load_onnx(path)  # ONNX's Attention spelled out with the guard, which P5 absorbs
    (chain,) = find_attention(again)
    assert chain.fusable and chain.nan_guard, chain.reason
    refused = fuse_attention(again)
    (name,) = _fused(refused)
    assert refused.op(name).attrs[NAN_GUARD] == 1
    assert _rel_err(reference_run(refused, x)["y"], want) <= REL_TOL


def test_an_onnx_attention_without_a_mask_gets_no_guard(tmp_path: Path) -> None:
    from fusiontune.export.onnx_export import to_onnx

    fused = fuse_attention(_load(tmp_path))
    (name,) = _fused(fused)
    op = fused.op(name)
    unmasked = dataclasses.replace(op, inputs=op.inputs[:3])
    graph = Graph(fused.name, fused.tensors, (unmasked,), fused.inputs, fused.outputs)
    path = tmp_path / "unmasked.onnx"
    onnx.save(to_onnx(graph.lint(), opset=23), str(path))
    (chain,) = find_attention(load_onnx(path))
    assert chain.fusable and not chain.nan_guard


def test_a_where_with_another_fill_is_no_guard_and_stays_a_barrier(tmp_path: Path) -> None:
    model = _model()
    for init in model.graph.initializer:
        if init.name == "zero":
            init.CopyFrom(helper.make_tensor("zero", TensorProto.FLOAT, [], [0.5]))
    path = tmp_path / "half.onnx"
    onnx.save(model, str(path))
    (chain,) = find_attention(load_onnx(path))
    assert not chain.fusable and "IsNaN" in chain.reason and "Where" in chain.reason


def test_a_3d_onnx_attention_with_a_masked_row_fuses_sequence_major(tmp_path: Path) -> None:
    f32 = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(n, f32, [B, N, H * D]) for n in ("q", "k", "v")]
    inputs.append(helper.make_tensor_value_info("mask", f32, [B, 1, N, N]))
    node = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], q_num_heads=H,
                            kv_num_heads=H)  # fmt: skip
    out = helper.make_tensor_value_info("y", f32, [B, N, H * D])
    model = helper.make_model(helper.make_graph([node], "a3", inputs, [out]),
                              opset_imports=[helper.make_opsetid("", 23)])  # fmt: skip
    path = tmp_path / "a3.onnx"
    onnx.save(model, str(path))
    fused = fuse_attention(load_onnx(path))
    (name,) = _fused(fused)
    op = fused.op(name)
    assert op.attrs[NAN_GUARD] == 1 and op.attrs["q_num_heads"] == H
    x = _feeds()
    x.update({n: x[n].transpose(0, 2, 1, 3).reshape(B, N, H * D) for n in ("q", "k", "v")})
    want = _ort(model, x)
    assert np.all(want[:, MASKED_ROW] == 0)
    assert _rel_err(reference_run(fused, x)["y"], want) <= REL_TOL
    hw = dataclasses.replace(HW, buffer_bytes=160)
    plan = singleton_plan(fused)
    assert verify(fused, plan, hw=hw).passed
    assert _rel_err(execute(fused, plan, x, hw=hw).outputs["y"], want) <= REL_TOL
