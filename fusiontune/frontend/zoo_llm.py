"""Llama-style decoder graphs for the zoo: prefill and decode, in the ops of a plain ONNX export.

Every piece is in ops the registry has, in the form the Hugging Face Llama export writes
them:

- RMSNorm: one ``RMSNormalization`` op (ONNX opset 23, STATS; what the importer makes of an
  export's decomposition), or with ``rms_op=False`` the decomposition HF's TorchScript export
  writes: ``Pow(x, 2)`` -> ``ReduceMean(-1)`` -> ``Add(eps)`` -> ``Sqrt`` -> ``Reciprocal``
  -> ``Mul(x)`` -> ``Mul(weight)``.
- RoPE (rotate-half): ``x * cos + Concat(-x2, x1) * sin`` with ``x1, x2 = Split(x, -1)`` and
  constant cos/sin tables of shape ``[seq, head_dim]`` (``Split`` instead of two ``Slice``
  ops: the same values, no int64 index constants).
- GQA ``repeat_kv``: ``Reshape [B,Hk,1,N,d]`` -> ``Expand [B,Hk,H/Hk,N,d]`` ->
  ``Reshape [B,H,N,d]`` (skipped when ``kv_heads == heads``).
- Attention per head on ``[B,H,N,d]``: ``MatMul(Q, K^T)`` -> ``Div(sqrt d)`` ->
  ``Add(causal mask)`` -> ``Softmax(-1)`` -> ``MatMul(P, V)``; the mask is a constant
  ``[N, N]`` with 0 on and below the diagonal and :data:`MASK_VALUE` above it.
- SwiGLU MLP: ``down(Sigmoid(gate) * gate * up)``.

The graph input is the hidden states ``[B, N, hidden]`` (the token embedding is a Gather
outside the crossbars and is left out); the output is the final RMSNorm's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from fusiontune.errors import ModelLoadError
from fusiontune.ops.norm import RMS_NORM

if TYPE_CHECKING:
    from fusiontune.frontend.zoo import _ZooBuilder

RMS_EPSILON = 1e-6  # Llama 2 / 3 rms_norm_eps
ROPE_THETA = 10000.0  # Llama 2 rope_theta
# HF fills masked scores with finfo(float32).min; a large finite value gives the same
# softmax (exp underflows to exactly 0) without the -inf that finfo.min + score can reach
MASK_VALUE = -1e9
# llama_tiny: the zoo's small decoder (Llama's layout, tiny widths)
TINY_LAYERS = 2
TINY_HIDDEN = 64
TINY_HEADS = 4
TINY_KV_HEADS = 2
TINY_FFN = 128
TINY_SEQ = 16


def rope_tables(
    seq: int, head_dim: int, theta: float = ROPE_THETA, start: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin tables ``[seq, head_dim]`` of rotate-half RoPE (HF ``LlamaRotaryEmbedding``)
    for positions ``start .. start + seq - 1``."""
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    freqs = np.outer(np.arange(start, start + seq, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def causal_mask(seq: int) -> np.ndarray:
    """``[seq, seq]`` additive mask: 0 where key <= query, :data:`MASK_VALUE` above."""
    return np.triu(np.full((seq, seq), MASK_VALUE, np.float32), k=1)


def _check_config(layers: int, hidden: int, heads: int, kv_heads: int, seq: int, ffn: int) -> None:
    for field, value in (("layers", layers), ("hidden", hidden), ("heads", heads),
                         ("kv_heads", kv_heads), ("seq", seq), ("ffn", ffn)):  # fmt: skip
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ModelLoadError(f"llama decoder: {field}={value!r} must be an integer >= 1")
    if hidden % heads:
        raise ModelLoadError(f"llama decoder: hidden={hidden} must be a multiple of heads={heads}")
    if heads % kv_heads:
        raise ModelLoadError(
            f"llama decoder: heads={heads} must be a multiple of kv_heads={kv_heads} (GQA)"
        )
    if (hidden // heads) % 2:
        raise ModelLoadError(
            f"llama decoder: head_dim={hidden // heads} (hidden/heads) must be even for RoPE"
        )


def _rms_weight(b: _ZooBuilder, n: int, name: str) -> str:
    return b.const(f"{name}.weight", (1.0 + 0.1 * b.rng.standard_normal(n)).astype(np.float32))


def _rmsnorm(b: _ZooBuilder, x: str, name: str) -> str:
    """RMSNorm over the last axis as one op (STATS)."""
    w = _rms_weight(b, b.shape(x)[-1], name)
    return b.op(RMS_NORM, [x, w], {"axis": -1, "epsilon": RMS_EPSILON}, name=name)


def _rmsnorm_decomposed(b: _ZooBuilder, x: str, name: str) -> str:
    """RMSNorm as HF's TorchScript export writes it (seven ops; the same weights)."""
    n = b.shape(x)[-1]
    two = b.const(f"{name}.pow.exponent", np.float32(2.0))
    sq = b.op("Pow", [x, two], name=f"{name}.pow")
    mean = b.op("ReduceMean", [sq], {"axes": (-1,), "keepdims": 1}, name=f"{name}.mean")
    eps = b.const(f"{name}.eps.value", np.float32(RMS_EPSILON))
    rms = b.op("Sqrt", [b.op("Add", [mean, eps], name=f"{name}.eps")], name=f"{name}.sqrt")
    inv = b.op("Reciprocal", [rms], name=f"{name}.reciprocal")
    y = b.op("Mul", [x, inv], name=f"{name}.normalize")
    return b.op("Mul", [y, _rms_weight(b, n, name)], name=f"{name}.scale")


NormFn = Callable[["_ZooBuilder", str, str], str]


def _norm(rms_op: bool) -> NormFn:
    return _rmsnorm if rms_op else _rmsnorm_decomposed


def _rope(b: _ZooBuilder, x: str, cos: str, sin: str, name: str) -> str:
    half = b.shape(x)[-1] // 2
    x1 = b.op("Split", [x], {"axis": -1, "split": (half, half)}, name=f"{name}.split", n_outputs=2)
    x2 = f"{x1}.out1"
    neg = b.op("Neg", [x2], name=f"{name}.neg")
    rot = b.op("Concat", [neg, x1], {"axis": -1}, name=f"{name}.rotate")
    a = b.op("Mul", [x, cos], name=f"{name}.cos")
    c = b.op("Mul", [rot, sin], name=f"{name}.sin")
    return b.op("Add", [a, c], name=name)


def _repeat_kv(b: _ZooBuilder, x: str, batch: int, heads: int, name: str) -> str:
    _, kv_heads, seq, d = b.shape(x)
    rep = heads // kv_heads
    if rep == 1:
        return x
    x = b.reshape(x, (batch, kv_heads, 1, seq, d), name=f"{name}.unsqueeze")
    shape = b.const(f"{name}.expand.shape", np.asarray((batch, kv_heads, rep, seq, d), np.int64))
    x = b.op("Expand", [x, shape], name=f"{name}.expand")
    return b.reshape(x, (batch, heads, seq, d), name=f"{name}.merge")


def _decoder_layer(
    b: _ZooBuilder,
    x: str,
    tables: tuple[str, str, str | None],
    batch: int,
    heads: int,
    kv_heads: int,
    ffn: int,
    p: str,
    past: tuple[str, str] | None = None,
    norm: NormFn = _rmsnorm,
) -> tuple[str, str, str]:
    """One pre-RMSNorm Llama layer (attention + SwiGLU, residual each).

    With ``past`` (the layer's K and V caches ``[B, kv_heads, L, d]``) the new keys and
    values are appended to them (``Concat`` on axis 2). Returns the layer's output and its
    present K and V (the caches after this step; without ``past`` the step's own K and V).
    """
    cos, sin, mask = tables
    _, seq, hidden = b.shape(x)
    d = hidden // heads

    def split(t: str, n_heads: int, name: str) -> str:
        t = b.reshape(t, (batch, seq, n_heads, d), name=f"{name}.split")
        return b.op("Transpose", [t], {"perm": (0, 2, 1, 3)}, name=f"{name}.heads")

    h = norm(b, x, f"{p}input_norm")
    q = split(b.matmul(h, hidden, bias=False, name=f"{p}attn.q"), heads, f"{p}attn.q")
    k = split(b.matmul(h, kv_heads * d, bias=False, name=f"{p}attn.k"), kv_heads, f"{p}attn.k")
    v = split(b.matmul(h, kv_heads * d, bias=False, name=f"{p}attn.v"), kv_heads, f"{p}attn.v")
    q = _rope(b, q, cos, sin, f"{p}attn.q.rope")
    k = _rope(b, k, cos, sin, f"{p}attn.k.rope")
    if past is not None:
        k = b.op("Concat", [past[0], k], {"axis": 2}, name=f"{p}attn.k.cache")
        v = b.op("Concat", [past[1], v], {"axis": 2}, name=f"{p}attn.v.cache")
    present = (k, v)
    k = _repeat_kv(b, k, batch, heads, f"{p}attn.k.rep")
    v = _repeat_kv(b, v, batch, heads, f"{p}attn.v.rep")
    kt = b.op("Transpose", [k], {"perm": (0, 1, 3, 2)}, name=f"{p}attn.k.t")
    scores = b.op("MatMul", [q, kt], name=f"{p}attn.scores")
    scale = b.const(f"{p}attn.scale.divisor", np.float32(math.sqrt(d)))
    scores = b.op("Div", [scores, scale], name=f"{p}attn.scale")
    if mask is not None:
        scores = b.op("Add", [scores, mask], name=f"{p}attn.mask")
    probs = b.op("Softmax", [scores], {"axis": -1}, name=f"{p}attn.softmax")
    ctx = b.op("MatMul", [probs, v], name=f"{p}attn.context")
    ctx = b.op("Transpose", [ctx], {"perm": (0, 2, 1, 3)}, name=f"{p}attn.merge")
    ctx = b.reshape(ctx, (batch, seq, hidden), name=f"{p}attn.merge.reshape")
    x = b.add(b.matmul(ctx, hidden, bias=False, name=f"{p}attn.o"), x, name=f"{p}attn.residual")
    h = norm(b, x, f"{p}post_norm")
    gate = b.matmul(h, ffn, bias=False, name=f"{p}mlp.gate")
    silu = b.op("Mul", [gate, b.op("Sigmoid", [gate], name=f"{p}mlp.sigmoid")], name=f"{p}mlp.silu")
    up = b.matmul(h, ffn, bias=False, name=f"{p}mlp.up")
    m = b.op("Mul", [silu, up], name=f"{p}mlp.glu")
    y = b.matmul(m, hidden, bias=False, name=f"{p}mlp.down")
    return b.add(y, x, name=f"{p}mlp.residual"), *present


def build_llama_prefill(
    b: _ZooBuilder,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    seq: int,
    ffn: int,
    batch: int = 1,
    rms_op: bool = True,
) -> str:
    """Add a Llama-style decoder's prefill (``seq`` tokens at once) to an empty builder.

    Args:
        b: the zoo builder (weights He-normal, seeded).
        layers: decoder layers.
        hidden: model width; ``hidden / heads`` is the head dimension (even, for RoPE).
        heads: query heads.
        kv_heads: key/value heads (GQA; ``heads`` for MHA, 1 for MQA); divides ``heads``.
        seq: prompt length N (causal mask ``[N, N]``, RoPE positions ``0..N-1``).
        ffn: SwiGLU intermediate width.
        batch: batch size.
        rms_op: RMSNorm as one ``RMSNormalization`` op; ``False``: decomposed (module
            docstring), with the same weights.

    Returns:
        The output tensor's name (the final RMSNorm, ``[batch, seq, hidden]``).

    Raises:
        ModelLoadError: a size that is not a positive integer, or heads/kv_heads/hidden that
            do not divide as named.
    """
    _check_config(layers, hidden, heads, kv_heads, seq, ffn)
    x = b.input("input", (batch, seq, hidden))
    cos_t, sin_t = rope_tables(seq, hidden // heads)
    tables = (
        b.const("rope.cos", cos_t),
        b.const("rope.sin", sin_t),
        b.table("attn.causal_mask", (seq, seq), lambda: causal_mask(seq)),
    )
    norm = _norm(rms_op)
    for i in range(layers):
        x, _, _ = _decoder_layer(b, x, tables, batch, heads, kv_heads, ffn, f"l{i}.", None, norm)
    return norm(b, x, "final_norm")


def build_llama_decode(
    b: _ZooBuilder,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    cache: int,
    ffn: int,
    batch: int = 1,
    rms_op: bool = True,
) -> list[str]:
    """Add one decode step of the same decoder (one new token after ``cache`` cached ones).

    Graph inputs: ``input`` ``[batch, 1, hidden]`` (the new token's hidden state), then per
    layer ``l{i}.past_key`` and ``l{i}.past_value`` ``[batch, kv_heads, cache, d]``. Graph
    outputs: the final RMSNorm ``[batch, 1, hidden]``, then per layer the updated caches
    (``Concat`` of past and new, ``[batch, kv_heads, cache + 1, d]``). RoPE is at position
    ``cache``; no mask (the one query may see every cached key). ``rms_op`` as in
    :func:`build_llama_prefill`.

    Returns:
        The output tensors' names, in the graph's output order.

    Raises:
        ModelLoadError: as :func:`build_llama_prefill` (``cache`` plays ``seq``).
    """
    _check_config(layers, hidden, heads, kv_heads, cache, ffn)
    d = hidden // heads
    x = b.input("input", (batch, 1, hidden))
    pasts = [
        (
            b.input(f"l{i}.past_key", (batch, kv_heads, cache, d)),
            b.input(f"l{i}.past_value", (batch, kv_heads, cache, d)),
        )
        for i in range(layers)
    ]
    cos_t, sin_t = rope_tables(1, d, start=cache)
    tables = (b.const("rope.cos", cos_t), b.const("rope.sin", sin_t), None)
    presents: list[str] = []
    norm = _norm(rms_op)
    for i in range(layers):
        x, k, v = _decoder_layer(
            b, x, tables, batch, heads, kv_heads, ffn, f"l{i}.", pasts[i], norm
        )
        presents += [k, v]
    outputs = [norm(b, x, "final_norm"), *presents]
    b.output(*outputs)
    return outputs


def llama_tiny(b: _ZooBuilder, seq: int, batch: int) -> None:
    """The zoo's ``llama_tiny``: 2 layers, hidden 64, 4 heads over 2 KV heads, SwiGLU 128."""
    build_llama_prefill(
        b, TINY_LAYERS, TINY_HIDDEN, TINY_HEADS, TINY_KV_HEADS, seq, TINY_FFN, batch
    )
