"""Zoo models for the attention pattern (P5): BERT blocks with a mask, in the exporters' forms.

Each model is one post-LN BERT encoder layer (Q/K/V/O projections as MatMul + bias, heads split
by Reshape + Transpose, an additive padding mask ``attention_mask [1, 1, 1, N]`` (a constant,
so the zoo's one-input contract holds; the ONNX test files under ``tests/data/attention/``
feed it as an input), LayerNorm, a Gelu FFN), laid out as an exporter writes its attention:

- ``bert_block`` — TorchScript (``torch.onnx.export(dynamo=False)`` of Hugging Face BERT):
  ``MatMul(Q, Transpose(K, perm=(0, 2, 3, 1)))`` → ``Div(sqrt(d))`` → ``Add(mask)`` →
  ``Softmax(-1)`` → ``MatMul(P, V)``;
- ``bert_block_dynamo`` — the dynamo exporter's ``scaled_dot_product_attention``
  decomposition: ``Q·sqrt(s)`` and ``Transpose(K, (0, 1, 3, 2))·sqrt(s)`` (``s = 1/sqrt(d)``),
  then ``MatMul`` → ``Add(mask)`` → ``Softmax`` → ``MatMul``.

Widths are BERT-base's (hidden 768, 12 heads, FFN 3072); ``input_size`` is the sequence
length. The graphs hold the decomposition; ``fuse_attention`` (``planner/attention.py``)
turns each attention into one fused op. Registered in :data:`fusiontune.frontend.zoo.ZOO`
through :data:`ATTENTION_MODELS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from fusiontune.ir.builder import GraphBuilder

HIDDEN = 768
HEADS = 12
FFN = 4 * HIDDEN
SEQ = 128
PADDED_FRACTION = 8
MASKED = -10000.0  # transformers' BERT: (1 - mask) * -10000
TORCHSCRIPT = "torchscript"
DYNAMO = "dynamo"


def attention_block(
    b: GraphBuilder,
    x: str,
    mask: str | None,
    seq: int,
    batch: int,
    hidden: int = HIDDEN,
    heads: int = HEADS,
    ffn: int = FFN,
    form: str = TORCHSCRIPT,
    prefix: str = "",
) -> str:
    """One post-LN encoder layer with its attention in exporter ``form``; returns its output."""
    d = hidden // heads
    p = prefix

    def split(t: str, name: str, perm: tuple[int, ...]) -> str:
        t = b.reshape(t, (batch, seq, heads, d), name=f"{name}.split")
        return b.op("Transpose", [t], {"perm": perm}, name=f"{name}.heads")

    q_proj = b.matmul(x, hidden, name=f"{p}attn.q")
    k_proj = b.matmul(x, hidden, name=f"{p}attn.k")
    v = split(b.matmul(x, hidden, name=f"{p}attn.v"), f"{p}attn.v", (0, 2, 1, 3))
    q = split(q_proj, f"{p}attn.q", (0, 2, 1, 3))
    if form == TORCHSCRIPT:
        kt = split(k_proj, f"{p}attn.k", (0, 2, 3, 1))
        scores = b.op("MatMul", [q, kt], name=f"{p}attn.scores")
        divisor = b.const(f"{p}attn.scale.divisor", np.float32(math.sqrt(d)))
        scores = b.op("Div", [scores, divisor], name=f"{p}attn.scale")
    elif form == DYNAMO:
        k = split(k_proj, f"{p}attn.k", (0, 2, 1, 3))
        root = b.const(f"{p}attn.scale.sqrt", np.float32(math.sqrt(1.0 / math.sqrt(d))))
        q = b.op("Mul", [q, root], name=f"{p}attn.q.scaled")
        kt = b.op("Transpose", [k], {"perm": (0, 1, 3, 2)}, name=f"{p}attn.k.t")
        kt = b.op("Mul", [kt, root], name=f"{p}attn.k.scaled")
        scores = b.op("MatMul", [q, kt], name=f"{p}attn.scores")
    else:
        raise ValueError(f"unknown attention form '{form}' (allowed: {TORCHSCRIPT}, {DYNAMO})")
    if mask is not None:
        scores = b.op("Add", [scores, mask], name=f"{p}attn.mask")
    return encoder_tail(b, scores, v, x, batch, seq, hidden, ffn, p)


def encoder_tail(
    b: GraphBuilder,
    scores: str,
    v: str,
    x: str,
    batch: int,
    seq: int,
    hidden: int,
    ffn: int,
    prefix: str,
) -> str:
    """The rest of a post-LN encoder layer from its attention scores: Softmax, P.V, heads
    merged, output projection, residual + LayerNorm, Gelu FFN, residual + LayerNorm (the
    zoo's ``bert_encoder`` and the attention blocks share it); returns the layer's output."""
    p = prefix
    probs = b.op("Softmax", [scores], {"axis": -1}, name=f"{p}attn.softmax")
    ctx = b.op("MatMul", [probs, v], name=f"{p}attn.context")
    ctx = b.op("Transpose", [ctx], {"perm": (0, 2, 1, 3)}, name=f"{p}attn.merge")
    ctx = b.reshape(ctx, (batch, seq, hidden), name=f"{p}attn.merge.reshape")
    y = b.matmul(ctx, hidden, name=f"{p}attn.out")
    x = b.layernorm(b.add(y, x, name=f"{p}attn.residual"), name=f"{p}attn.layernorm")
    h = b.act("Gelu", b.matmul(x, ffn, name=f"{p}ffn.fc1"), name=f"{p}ffn.gelu")
    y = b.matmul(h, hidden, name=f"{p}ffn.fc2")
    return b.layernorm(b.add(y, x, name=f"{p}ffn.residual"), name=f"{p}ffn.layernorm")


def padding_mask(seq: int) -> np.ndarray:
    """Hugging Face's extended additive mask ``[1, 1, 1, seq]`` of a sequence whose last
    ``seq // PADDED_FRACTION`` positions are padding (``MASKED`` there, 0 elsewhere)."""
    mask = np.zeros((1, 1, 1, seq), np.float32)
    mask[..., seq - seq // PADDED_FRACTION :] = MASKED
    return mask


def bert_block_builder(
    form: str, hidden: int = HIDDEN, heads: int = HEADS, ffn: int = FFN
) -> Callable[[GraphBuilder, int, int], None]:
    """A zoo builder ``build(builder, seq, batch)`` of one masked encoder layer."""

    def build(b: GraphBuilder, seq: int, batch: int) -> None:
        x = b.input("input", (batch, seq, hidden))
        mask = b.const("attention_mask", padding_mask(seq))
        attention_block(b, x, mask, seq, batch, hidden, heads, ffn, form)

    return build


ATTENTION_MODELS: dict[str, dict[str, Any]] = {
    name: {
        "build": bert_block_builder(form),
        "default_input_size": SEQ,
        "description": f"BERT-base layer with an additive mask, {label} attention "
        "(fuse_attention: P5)",
        "min_input_size": 1,
        "input_size_meaning": "sequence length",
    }
    for name, form, label in (
        ("bert_block", TORCHSCRIPT, "TorchScript"),
        ("bert_block_dynamo", DYNAMO, "dynamo SDPA"),
    )
}
"""Name -> the fields of its ``zoo.ZooEntry``; ``zoo.ZOO`` adds them."""
