"""Fused attention: ``Y = softmax(scale * Q·Kᵀ + mask) · V`` per head, as one op.

The op is ONNX's ``Attention`` (opset 23) in the form the attention pattern (P5,
``planner/attention.py``) produces and the importer keeps: 4-D ``Q [B, H, Nq, d]``,
``K [B, H, Nk, d]``, ``V [B, H, Nk, dv]``, an optional float ``attn_mask`` added to the scores
(broadcast to ``[B, H, Nq, Nk]``), ``scale`` (default ``1/sqrt(d)``) and output 0 only.
Grouped heads (GQA/MQA): ``K`` and ``V`` may have ``Hk`` heads with ``H`` a multiple of
``Hk``; query head ``h`` reads key/value head ``h // (H / Hk)`` (ONNX's interleaved repeat,
HF's ``repeat_kv``). ``is_causal=1``: query ``i`` sees keys ``j <= i`` (ONNX's top-left
alignment without past keys), the fully masked K/V blocks are skipped. ``nan_guard=1`` (not
ONNX's: :data:`NAN_GUARD`): a query row whose every key is masked (all scores −inf) outputs
zeros instead of NaN, the softmax guard ``where(isnan(p), 0, p)`` torch's dynamo exporter
writes, absorbed by P5. Other forms (3-D
inputs, ``softcap``, a boolean mask, past keys and values, extra outputs) are OPAQUE with the
reason (:func:`_unsupported`).

It is OPAQUE (a group of its own: it runs on the digital units, not on crossbars) and its
executor scheme is the *flash* one (``AttentionRole.FUSED``, ``sim/attention.py``): tiles of
K and V stream past a tile of Q with an online softmax (running max, running sum, rescaled
accumulator), so the ``Nq x Nk`` scores never leave the chip. The reference kernel computes
the scores whole; the fused kernel (:func:`online_attention`) runs the online softmax over
K/V blocks, the same arithmetic as the executor's tiles.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from fusiontune.errors import FusiontuneError, ShapeError
from fusiontune.ops.base import (
    Array,
    AttentionRole,
    Inputs,
    OpDef,
    Shapes,
    Tensors,
    arg,
    attr,
)

if TYPE_CHECKING:
    from fusiontune.ir.graph import Graph, Op

ATTENTION = "Attention"
"""The fused op type (written by ``planner/attention.py`` through this constant)."""
ATTENTION_OPSET = 23
"""The first ONNX opset with the ``Attention`` op."""
MASK_INPUT = 3
NAN_GUARD = "nan_guard"
"""The fused op's own attribute (not ONNX's): 1 = a fully masked query row outputs zeros
(the probabilities' ``where(isnan(p), 0, p)`` absorbed; ONNX's ``Attention`` itself, whose
import spells the guard out), 0 = NaN, as a plain softmax gives."""
ONLINE_BLOCK = 16
"""K/V rows per step of :func:`online_attention` (the fused kernel on whole arrays)."""
ALU_OPS_PER_SCORE_FIXED = 5
"""ALU ops per score besides the two dot products: scale, mask add, max, exp, sum."""

_DEFAULTS = {
    "is_causal": 0,
    "kv_num_heads": 0,
    NAN_GUARD: 0,
    "q_num_heads": 0,
    "qk_matmul_output_mode": 0,
    "scale": None,
    "softcap": 0.0,
    "softmax_precision": 0,
}


def is_causal(op: Op) -> bool:
    """The op masks keys after each query (``is_causal=1``, top-left aligned)."""
    return bool(attr(op, "is_causal"))


def nan_guarded(op: Op) -> bool:
    """A fully masked query row outputs zeros, not NaN (:data:`NAN_GUARD`)."""
    return bool(attr(op, NAN_GUARD))


def kv_group(q_heads: int, kv_heads: int) -> int:
    """Query heads per key/value head (1: no grouped heads)."""
    return q_heads // kv_heads


def causal_bias(positions: Array, c0: int, c1: int) -> Array:
    """``[len(positions), c1 - c0]``: 0 where key ``j`` (``c0 <= j < c1``) is at or before the
    row's query position, −inf after it."""
    cols = np.arange(c0, c1)[None, :]
    return np.where(cols <= positions[:, None], np.float32(0), np.float32(-np.inf))


def causal_keys(last_position: int, nk: int) -> int:
    """Keys a query at ``last_position`` (and every earlier one) can see under a causal mask."""
    return min(nk, last_position + 1)


def scale_of(op: Op, head_dim: int) -> float:
    """The op's ``scale`` attribute, or ONNX's default ``1/sqrt(head_dim)``."""
    s = attr(op, "scale")
    return 1.0 / math.sqrt(head_dim) if s is None else float(s)


# ---- the online softmax (FlashAttention), shared with the executor's tiles ---------------------
def online_init(rows: int, dv: int) -> tuple[Array, Array, Array]:
    """The running max ``m`` (−inf), running sum ``l`` (0) and accumulator ``o`` (0) of
    ``rows`` query rows."""
    m = np.full((rows, 1), -np.inf, np.float32)
    return m, np.zeros((rows, 1), np.float32), np.zeros((rows, dv), np.float32)


def online_step(
    state: tuple[Array, Array, Array],
    q: Array,
    k: Array,
    v: Array,
    scale: float,
    mask: Array | None,
) -> tuple[Array, Array, Array]:
    """Fold one K/V block into the state of a Q tile: scores ``s = scale·q·kᵀ (+ mask)``,
    new max ``m' = max(m, rowmax s)``, ``l' = e^(m-m')·l + Σ e^(s-m')``,
    ``o' = e^(m-m')·o + e^(s-m')·v``."""
    m, total, o = state
    s = (q @ k.T) * np.float32(scale)
    if mask is not None:
        s = s + mask
    m_new = np.maximum(m, s.max(axis=1, keepdims=True))
    # a row whose every score so far is -inf keeps m = -inf: exp(-inf - -inf) would be nan
    safe = np.where(np.isneginf(m_new), np.float32(0), m_new)
    p = np.exp(s - safe)
    alpha = np.exp(m - safe)
    return m_new, alpha * total + p.sum(axis=1, keepdims=True), alpha * o + p @ v


def online_finish(state: tuple[Array, Array, Array], guard: bool = False) -> Array:
    """The output rows ``o / l`` of a finished Q tile. A row that saw no key (every score
    −inf: ``l = 0``, ``o = 0``) is NaN, as a softmax of it is; ``guard`` (:data:`NAN_GUARD`)
    makes it 0."""
    _, total, o = state
    if guard:
        empty = total == 0
        return np.where(empty, np.float32(0), o / np.where(empty, np.float32(1), total)).astype(
            np.float32
        )
    return (o / total).astype(np.float32)


def mask_block(mask: Array | None, b: int, h: int, rows: slice, cols: slice) -> Array | None:
    """The 2-D part of a (broadcast, right-aligned) mask for head ``(b, h)`` and a tile."""
    if mask is None:
        return None
    m4 = mask.reshape((1,) * (4 - mask.ndim) + tuple(mask.shape))
    s4: tuple[int, ...] = tuple(m4.shape)
    bi, hi = (0 if s4[0] == 1 else b), (0 if s4[1] == 1 else h)
    r = slice(0, 1) if s4[2] == 1 else rows
    c = slice(0, 1) if s4[3] == 1 else cols
    return m4[bi, hi, r, c]


def heads_of(op: Op) -> tuple[int, int] | None:
    """``(q_num_heads, kv_num_heads)`` of the 3-D (sequence-major) form ``[B, S, H·d]``
    (``None``: the attributes are not both set)."""
    hq, hk = int(attr(op, "q_num_heads") or 0), int(attr(op, "kv_num_heads") or 0)
    return (hq, hk) if hq > 0 and hk > 0 else None


def split_heads(x: Array, heads: int) -> Array:
    """``[B, S, H·w]`` -> ``[B, H, S, w]``."""
    b, n, hw = x.shape
    return x.reshape(b, n, heads, hw // heads).transpose(0, 2, 1, 3)


def merge_heads(y: Array) -> Array:
    """``[B, H, S, w]`` -> ``[B, S, H·w]``."""
    b, h, n, w = y.shape
    return np.ascontiguousarray(y.transpose(0, 2, 1, 3)).reshape(b, n, h * w)


def heads_shapes(
    op: Op, q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
    """The 4-D ``[B, H, N, d]`` shapes of Q, K, V (the 3-D form split by its head counts;
    ``None``: neither form, or heads that do not divide the widths)."""
    if len(q) == len(k) == len(v) == 4:
        return q, k, v
    heads = heads_of(op)
    if heads is None or not len(q) == len(k) == len(v) == 3:
        return None
    hq, hk = heads
    if q[2] % hq or k[2] % hk or v[2] % hk:
        return None
    return ((q[0], hq, q[1], q[2] // hq), (k[0], hk, k[1], k[2] // hk),
            (v[0], hk, v[1], v[2] // hk))  # fmt: skip


def online_attention(op: Op, inputs: Inputs, block: int = ONLINE_BLOCK) -> list[Array]:
    """The fused kernel: the online softmax over K/V blocks of ``block`` rows, per head
    (causal: the blocks after the last query are skipped)."""
    q, k, v, mask = _operands(op, inputs)
    bq, hq, nq, d = q.shape
    scale = scale_of(op, d)
    group, causal = kv_group(hq, k.shape[1]), is_causal(op)
    nk = causal_keys(nq - 1, k.shape[2]) if causal else k.shape[2]
    positions = np.arange(nq)
    out = np.empty((bq, hq, nq, v.shape[-1]), np.float32)
    for b, h in np.ndindex(bq, hq):
        kh = h // group
        state = online_init(nq, v.shape[-1])
        for k0 in range(0, nk, block):
            cols = slice(k0, min(k0 + block, k.shape[2]))
            part = mask_block(mask, b, h, slice(0, nq), cols)
            if causal:
                bias = causal_bias(positions, cols.start, cols.stop)
                part = bias if part is None else part + bias
            state = online_step(state, q[b, h], k[b, kh, cols], v[b, kh, cols], scale, part)
        out[b, h] = online_finish(state, nan_guarded(op))
    return [out if heads_of(op) is None else merge_heads(out)]


def _reference(op: Op, inputs: Inputs) -> list[Array]:
    """Scores whole: ``softmax(scale·Q·Kᵀ + mask, axis=-1)·V`` (ONNX Attention, opset 23;
    grouped K/V heads repeated, a causal mask as −inf after each query; ``nan_guard``: the
    probabilities' NaN, a fully masked row's, set to 0)."""
    q, k, v, mask = _operands(op, inputs)
    group = kv_group(q.shape[1], k.shape[1])
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * np.float32(scale_of(op, q.shape[-1]))
    if mask is not None:
        s = s + mask
    if is_causal(op):
        s = s + causal_bias(np.arange(q.shape[2]), 0, k.shape[2])
    guard = nan_guarded(op)
    with np.errstate(invalid="ignore" if guard else np.geterr()["invalid"]):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
    if guard:
        p = np.where(np.isnan(p), np.float32(0), p)
    y = np.matmul(p, v).astype(np.float32)
    return [y if heads_of(op) is None else merge_heads(y)]


def _operands(op: Op, inputs: Inputs) -> tuple[Array, Array, Array, Array | None]:
    """Q, K, V as ``[B, H, N, d]`` float32 (the 3-D form split into its heads) and the mask."""
    q, k, v = inputs[0], inputs[1], inputs[2]
    assert q is not None and k is not None and v is not None
    mask = arg(inputs, MASK_INPUT)
    qa, ka, va = (np.asarray(x, np.float32) for x in (q, k, v))
    heads = heads_of(op)
    if heads is not None and qa.ndim == 3:
        qa, ka, va = split_heads(qa, heads[0]), split_heads(ka, heads[1]), split_heads(va, heads[1])
    return qa, ka, va, None if mask is None else np.asarray(mask, np.float32)


def _shape(op: Op, tensors: Tensors, ins: Shapes, n_out: int) -> Shapes:
    q3, k3, v3 = ins[0], ins[1], ins[2]
    if q3 is None or k3 is None or v3 is None:
        return [None] * n_out
    four = heads_shapes(op, q3, k3, v3)
    if four is None:
        return [None] * n_out  # another form is OPAQUE (its shapes from onnx)
    q, k, v = four
    if q[-1] != k[-1] or k[2] != v[2] or k[:2] != v[:2] or q[0] != k[0] or q[1] % k[1]:
        raise ShapeError(
            f"op '{op.name}' (Attention): Q {q3}, K {k3} and V {v3} do not agree "
            "(need Q [B,H,Nq,d], K [B,Hk,Nk,d], V [B,Hk,Nk,dv], H a multiple of Hk)"
        )
    y = (*q[:-1], v[-1]) if len(q3) == 4 else (q3[0], q3[1], q[1] * v[-1])
    return [y, *([None] * (n_out - 1))]


def _unsupported(op: Op, tensors: Tensors) -> str | None:
    """Why this Attention is outside the fused form (``None``: supported)."""
    if attr(op, "is_causal") not in (0, 1):
        return f"attribute is_causal={attr(op, 'is_causal')} is not supported (0 or 1)"
    for key in ("softcap", "qk_matmul_output_mode"):
        if attr(op, key):
            return f"attribute {key}={attr(op, key)} is not supported (only 0)"
    if len(op.inputs) > MASK_INPUT + 1 and any(op.inputs[MASK_INPUT + 1 :]):
        return "past_key/past_value inputs are not supported"
    if any(op.outputs[1:]):
        return "only output 0 (Y) is supported"
    shapes = [tensors[t].shape if t in tensors else None for t in op.inputs[:3]]
    if any(s is None for s in shapes):
        return "the shapes of Q, K, V are unknown"
    four = heads_shapes(op, *shapes)  # type: ignore[arg-type]
    if four is None:
        return ("only 4-D Q, K, V [B, H, N, d], or 3-D [B, N, H·d] with q_num_heads and "
                "kv_num_heads, are supported")  # fmt: skip
    q, k, _ = four
    if q[0] != k[0] or q[1] % k[1]:
        return (f"Q {q} and K {k}: the batch differs or the query heads are not a multiple "
                "of the key heads")  # fmt: skip
    if len(op.inputs) > MASK_INPUT and op.inputs[MASK_INPUT]:
        mask = tensors.get(op.inputs[MASK_INPUT])
        if mask is not None:
            problem = mask_problem(mask.shape, (*q[:3], k[2]), mask.dtype)
            if problem:
                return problem
    return None


def mask_problem(mask: tuple[int, ...], scores: tuple[int, ...], dtype: str) -> str | None:
    """Why a mask cannot be added to scores of shape ``scores`` inside the fused op."""
    if dtype != "float32":
        return f"mask of dtype {dtype} is not supported (an additive float32 mask only)"
    if len(mask) > len(scores):
        return f"mask {mask} has more axes than the scores {scores}"
    tail = scores[len(scores) - len(mask) :]
    if any(m not in (1, s) for m, s in zip(mask, tail)):
        return f"mask {mask} does not broadcast to the scores {scores} (it would grow them)"
    return None


def _export(
    op: Op, graph: Graph, opset: int, inputs: list[str], attrs: dict[str, Any], outputs: list[str]
) -> tuple[list[str], dict[str, Any], list[str]]:
    """ONNX has ``Attention`` from opset 23 on: an earlier opset is refused by name;
    :data:`NAN_GUARD` is not written (ONNX's Attention already outputs 0 for a fully masked
    row)."""
    if opset < ATTENTION_OPSET:
        raise FusiontuneError(
            f"op '{op.name}' (Attention): ONNX has the Attention op from opset "
            f"{ATTENTION_OPSET} on; export with opset >= {ATTENTION_OPSET} (asked: {opset})"
        )
    if attrs.get("scale") is None:
        attrs.pop("scale", None)
    # ONNX's Attention gives a fully masked row zeros (its opset-23 errata; onnxruntime
    # 1.32 does), which is what nan_guard=1 says: the attribute is ONNX's semantics and is
    # dropped. (An op without the guard, NaN there, also exports as ONNX's Attention.)
    attrs.pop(NAN_GUARD, None)
    return inputs, attrs, outputs


def _element_ops(graph: Graph, op: Op) -> int:
    """ALU ops: per score a dot product of ``d`` (two ops each), its share of ``P·V``
    (``2 dv``) and :data:`ALU_OPS_PER_SCORE_FIXED`; causal: the scores a query may see."""
    shapes = [graph.tensors[t].shape for t in op.inputs[:3]]
    four = heads_shapes(op, *shapes)
    q, k, v = four if four is not None else shapes
    scores = math.prod(q[:-1]) * k[-2]
    if is_causal(op):
        scores = math.prod(q[:-2]) * sum(causal_keys(i, k[-2]) for i in range(q[-2]))
    return scores * (2 * q[-1] + 2 * v[-1] + ALU_OPS_PER_SCORE_FIXED)


OPS: tuple[OpDef, ...] = (
    OpDef(
        ATTENTION,
        defaults=_DEFAULTS,
        shape=_shape,
        reference=_reference,
        fused=online_attention,
        unsupported=_unsupported,
        element_ops=_element_ops,
        export=_export,
        attention_role=AttentionRole.FUSED,
    ),
)


# ---- ops the attention pattern writes (planner/attention.py asks for them here) ---------------
KEYS_LAST = (0, 1, 3, 2)
"""The permutation that swaps the last two axes of a 4-D tensor (``Kᵀ`` <-> ``K``)."""


def attention_op(
    name: str,
    q: str,
    k: str,
    v: str,
    mask: str | None,
    y: str,
    scale: float,
    causal: bool = False,
    heads: tuple[int, int] | None = None,
    nan_guard: bool = False,
) -> Op:
    """The fused op: ``Y = softmax(scale·Q·Kᵀ + mask)·V`` (ONNX ``Attention``, opset 23;
    ``causal``: ``is_causal=1``; ``heads``: the 3-D form's ``(q_num_heads, kv_num_heads)``;
    ``nan_guard``: :data:`NAN_GUARD`)."""
    from fusiontune.ir.graph import Op

    inputs = (q, k, v) if mask is None else (q, k, v, mask)
    attrs: dict[str, Any] = {"scale": float(scale)}
    if causal:
        attrs["is_causal"] = 1
    if heads is not None:
        attrs["q_num_heads"], attrs["kv_num_heads"] = heads
    if nan_guard:
        attrs[NAN_GUARD] = 1
    return Op(name, ATTENTION, inputs, (y,), attrs)


def transpose_op(name: str, x: str, y: str, perm: tuple[int, ...]) -> Op:
    """A ``Transpose`` (the pattern's ``K`` from a ``Kᵀ`` or a head split it cannot absorb)."""
    from fusiontune.ir.graph import Op

    return Op(name, "Transpose", (x,), (y,), {"perm": tuple(int(p) for p in perm)})


def reshape_op(name: str, x: str, shape: str, y: str) -> Op:
    """A ``Reshape`` (the fused op's ``[B, N, H·dv]`` to the shape the merge wrote, such as
    the dynamo exporter's ``[B·N, H·dv]``)."""
    from fusiontune.ir.graph import Op

    return Op(name, "Reshape", (x, shape), (y,), {})


def where_op(name: str, cond: str, x: str, y: str, out: str) -> Op:
    """A ``Where`` (a boolean mask turned additive: ``where(c, 0, fill)``)."""
    from fusiontune.ir.graph import Op

    return Op(name, "Where", (cond, x, y), (out,))


def add_op(name: str, a: str, b: str, out: str) -> Op:
    """An ``Add`` (two additive masks summed)."""
    from fusiontune.ir.graph import Op

    return Op(name, "Add", (a, b), (out,))
