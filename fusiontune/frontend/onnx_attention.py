"""Attention operators on import: ONNX ``Attention`` (opset 23) and ORT's ``MultiHeadAttention``.

Called by :mod:`fusiontune.frontend.onnx_import` before the opset is converted (no converter
takes ``Attention`` below opset 23): each supported node is spelled out as the decomposition a
torch exporter writes (``Transpose(K)`` -> ``MatMul(Q, Kᵀ)`` -> ``Mul(scale)`` -> ``Add(mask)``
-> ``Softmax(-1)`` -> ``MatMul(P, V)``, with ``Reshape`` + ``Transpose`` around the heads of the
3-D forms), so one path serves every form: the attention pattern (P5,
``planner/attention.py``) recognises it and ``fuse_attention`` fuses it.

Supported:

- ``Attention`` (default domain): 4-D ``Q, K, V`` or 3-D with ``q_num_heads`` /
  ``kv_num_heads``, an optional float ``attn_mask`` (a row it masks wholly with −inf gives
  zeros, ONNX's rule: the probabilities get torch's guard ``where(isnan(p), 0, p)``),
  ``scale`` (default ``1/sqrt(head_size)``), ``is_causal`` (top-left: a constant
  ``[Nq, Nk]`` mask of ``finfo.min`` above the diagonal, which P5 turns back into
  ``is_causal``), grouped K/V
  heads (fewer ``kv_num_heads``, or 4-D K/V with fewer heads: HF's ``repeat_kv`` written as
  ``Reshape`` -> ``Expand`` -> ``Reshape``, which P5 absorbs), output ``Y`` only.
  ``softcap``, a boolean mask, past keys/values and the extra outputs leave the node as it
  is (the importer then cannot bring the opset below 23 and says so).
- ``MultiHeadAttention`` (``com.microsoft``): 3-D ``query [B, S, D]``, ``key [B, L, D]``,
  ``value [B, L, Dv]``, ``num_heads``, ``scale`` (default ``1/sqrt(D/num_heads)``), an
  optional float ``attention_bias`` broadcast to ``[B, H, S, L]``, output 0 only. A bias, a
  key padding mask, past keys/values, packed or 4-D keys and ``unidirectional`` leave the node
  as it is (OPAQUE, with the importer's warning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS_DOMAIN = "com.microsoft"
DEFAULT_DOMAINS = ("", "ai.onnx")
BNSH = (0, 2, 1, 3)  # [B, S, H, d] <-> [B, H, S, d]
SWAP_LAST = (0, 1, 3, 2)

Shapes = dict[str, tuple[int, ...] | None]
Types = dict[str, int]
Expansion = tuple[list[onnx.NodeProto], list[onnx.TensorProto]]


@dataclass(frozen=True)
class _Decoder:
    """The decoder parts of an ``Attention`` node: ``causal`` ``(Nq, Nk)`` (``None``: not
    causal) and the K/V heads' repeat: ``(B, Hk, g, Nk, d, dv)`` (``None``: no groups)."""

    causal: tuple[int, int] | None = None
    repeat: tuple[int, int, int, int, int, int] | None = None


def expand_attention_ops(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each supported attention node spelled out (module docstring); the
    model itself when it holds none."""
    kinds = {(n.domain, n.op_type) for n in model.graph.node}
    if not kinds & {("", "Attention"), ("ai.onnx", "Attention"), (MS_DOMAIN, "MultiHeadAttention")}:
        return model
    shapes, types = _infos(model)
    nodes: list[onnx.NodeProto] = []
    extra: list[onnx.TensorProto] = []
    for i, node in enumerate(model.graph.node):
        new: Expansion | None = None
        if node.domain in DEFAULT_DOMAINS and node.op_type == "Attention":
            new = _onnx_attention(node, shapes, types, f"_attn{i}")
        elif node.domain == MS_DOMAIN and node.op_type == "MultiHeadAttention":
            new = _multi_head(node, shapes, types, f"_mha{i}")
        if new is None:
            nodes.append(node)
        else:
            nodes += new[0]
            extra += new[1]
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(extra)
    return out


def _infos(model: onnx.ModelProto) -> tuple[Shapes, Types]:
    """Static shapes (``None``: a symbolic dimension) and element types of the values."""
    try:
        graph = onnx.shape_inference.infer_shapes(model).graph
    except Exception:
        graph = model.graph
    shapes: Shapes = {}
    types: Types = {}
    for info in (*graph.input, *graph.value_info, *graph.output):
        t = info.type.tensor_type
        dims = t.shape.dim
        static = all(d.HasField("dim_value") for d in dims)
        shapes[info.name] = tuple(int(d.dim_value) for d in dims) if static else None
        types[info.name] = int(t.elem_type)
    for init in model.graph.initializer:
        shapes[init.name] = tuple(int(d) for d in init.dims)
        types[init.name] = int(init.data_type)
    return shapes, types


def _attr(node: onnx.NodeProto, name: str, default: object) -> object:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _int(node: onnx.NodeProto, name: str, default: int) -> int:
    value = _attr(node, name, default)
    return int(value) if isinstance(value, int | float) else default


def _scale(node: onnx.NodeProto, head: int) -> float:
    value = _attr(node, "scale", None)
    if isinstance(value, int | float) and value != 0:
        return float(value)
    return 1.0 / math.sqrt(head)


def _inputs(node: onnx.NodeProto) -> list[str]:
    return list(node.input) + [""] * 8


def _onnx_attention(
    node: onnx.NodeProto, shapes: Shapes, types: Types, tag: str
) -> Expansion | None:
    ins = _inputs(node)
    q, k, v, mask = ins[0], ins[1], ins[2], ins[3]
    if any(ins[4:6]) or any(node.output[1:]):
        return None
    causal = _int(node, "is_causal", 0)
    if causal not in (0, 1):
        return None
    if _attr(node, "softcap", 0.0) or _int(node, "qk_matmul_output_mode", 0):
        return None
    if mask and types.get(mask) != TensorProto.FLOAT:
        return None
    qs, ks, vs = shapes.get(q), shapes.get(k), shapes.get(v)
    if qs is None or len(qs) not in (3, 4):
        return None
    heads: int | None = None
    if len(qs) == 4:
        head, q_heads = qs[3], qs[1]
        kv_heads = qs[1] if ks is None or len(ks) != 4 else ks[1]
    else:
        heads = _int(node, "q_num_heads", 0)
        kv_heads = _int(node, "kv_num_heads", heads)
        if heads < 1 or kv_heads < 1 or qs[2] % heads:
            return None
        head, q_heads = qs[2] // heads, heads
    parts: _Decoder | None = _Decoder()
    if causal or kv_heads != q_heads:
        parts = _decoder_parts(qs, ks, vs, q_heads, kv_heads, bool(causal))
    if parts is None:
        return None
    return _decomposition(tag, q, k, v, mask or None, _scale(node, head), heads, node.output[0],
                          parts, nan_guard=bool(mask))  # fmt: skip


def _decoder_parts(
    qs: tuple[int, ...],
    ks: tuple[int, ...] | None,
    vs: tuple[int, ...] | None,
    q_heads: int,
    kv_heads: int,
    causal: bool,
) -> _Decoder | None:
    """The causal mask's ``(Nq, Nk)`` and the K/V repeat of an ``Attention`` node (``None``:
    shapes unknown, or heads that do not divide)."""
    if ks is None or vs is None or not len(ks) == len(qs) == len(vs) or q_heads % kv_heads:
        return None
    rank3 = len(qs) == 3
    if rank3 and (ks[2] % kv_heads or vs[2] % kv_heads):
        return None
    repeat = None
    if kv_heads != q_heads:
        d, dv = (ks[2] // kv_heads, vs[2] // kv_heads) if rank3 else (ks[3], vs[3])
        repeat = (qs[0], kv_heads, q_heads // kv_heads, ks[-2], d, dv)
    return _Decoder((qs[-2], ks[-2]) if causal else None, repeat)


def _multi_head(node: onnx.NodeProto, shapes: Shapes, types: Types, tag: str) -> Expansion | None:
    ins = _inputs(node)
    q, k, v, bias, padding, attention_bias = ins[0], ins[1], ins[2], ins[3], ins[4], ins[5]
    if bias or padding or any(ins[6:8]) or any(node.output[1:]) or _int(node, "unidirectional", 0):
        return None
    if attention_bias and types.get(attention_bias) != TensorProto.FLOAT:
        return None
    qs, ks, vs = shapes.get(q), shapes.get(k), shapes.get(v)
    if qs is None or ks is None or vs is None or not (len(qs) == len(ks) == len(vs) == 3):
        return None
    heads = _int(node, "num_heads", 0)
    if heads < 1 or qs[2] % heads or ks[2] != qs[2] or vs[2] % heads:
        return None
    scale = _scale(node, qs[2] // heads)
    return _decomposition(tag, q, k, v, attention_bias or None, scale, heads, node.output[0])


def _decomposition(
    tag: str,
    q: str,
    k: str,
    v: str,
    mask: str | None,
    scale: float,
    heads: int | None,
    y: str,
    parts: _Decoder | None = None,
    nan_guard: bool = False,
) -> Expansion:
    """The exporter's decomposition; ``heads`` splits 3-D ``[B, S, H·d]`` inputs first (K and
    V into their own heads); ``parts``: a causal mask and the K/V heads' repeat;
    ``nan_guard``: the probabilities guarded by ``where(isnan(p), 0, p)`` (ONNX's Attention
    gives a row whose mask is all −inf zeros; P5 absorbs the guard as ``nan_guard=1``)."""
    parts = parts or _Decoder()
    nodes: list[onnx.NodeProto] = []
    inits = [helper.make_tensor(f"{tag}.scale", TensorProto.FLOAT, [], [scale])]

    def node(op_type: str, ins: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op_type, ins, [out], name=out, **attrs))
        return out

    if heads is not None:
        inits.append(helper.make_tensor(f"{tag}.split", TensorProto.INT64, [4], [0, 0, heads, -1]))
        inits.append(helper.make_tensor(f"{tag}.merge", TensorProto.INT64, [3], [0, 0, -1]))

        def split(t: str, name: str) -> str:
            t = node("Reshape", [t, f"{tag}.split"], f"{tag}.{name}.split")
            return node("Transpose", [t], f"{tag}.{name}.heads", perm=list(BNSH))

        q = split(q, "q")
        if parts.repeat is not None:
            kv_split = f"{tag}.kv_split"
            inits.append(helper.make_tensor(kv_split, TensorProto.INT64, [4],
                                            [0, 0, parts.repeat[1], -1]))  # fmt: skip
            k = node("Transpose", [node("Reshape", [k, kv_split], f"{tag}.k.split")],
                     f"{tag}.k.heads", perm=list(BNSH))  # fmt: skip
            v = node("Transpose", [node("Reshape", [v, kv_split], f"{tag}.v.split")],
                     f"{tag}.v.heads", perm=list(BNSH))  # fmt: skip
        else:
            k, v = split(k, "k"), split(v, "v")
    if parts.repeat is not None:
        b, hk, g, nk, d, dv = parts.repeat

        def repeat(t: str, name: str, width: int) -> str:
            for step, shape in (("unsqueeze", (b, hk, 1, nk, width)),
                                ("expand", (b, hk, g, nk, width)),
                                ("merge", (b, hk * g, nk, width))):  # fmt: skip
                const = f"{tag}.{name}.{step}.shape"
                inits.append(helper.make_tensor(const, TensorProto.INT64, [len(shape)], shape))
                op = "Expand" if step == "expand" else "Reshape"
                t = node(op, [t, const], f"{tag}.{name}.{step}")
            return t

        k, v = repeat(k, "k.rep", d), repeat(v, "v.rep", dv)
    kt = node("Transpose", [k], f"{tag}.kt", perm=list(SWAP_LAST))
    s = node("MatMul", [q, kt], f"{tag}.scores")
    s = node("Mul", [s, f"{tag}.scale"], f"{tag}.scaled")
    if mask:
        s = node("Add", [s, mask], f"{tag}.masked")
    if parts.causal is not None:
        nq, nk_ = parts.causal
        lowest = np.finfo(np.float32).min
        causal = np.triu(np.full((nq, nk_), lowest, np.float32), k=1)
        inits.append(numpy_helper.from_array(causal, f"{tag}.causal"))
        s = node("Add", [s, f"{tag}.causal"], f"{tag}.causal_masked")
    p = node("Softmax", [s], f"{tag}.probs", axis=-1)
    if nan_guard:
        inits.append(helper.make_tensor(f"{tag}.zero", TensorProto.FLOAT, [], [0.0]))
        nan = node("IsNaN", [p], f"{tag}.probs_nan")
        p = node("Where", [nan, f"{tag}.zero", p], f"{tag}.probs_guarded")
    if heads is None:
        node("MatMul", [p, v], y)
    else:
        ctx = node("MatMul", [p, v], f"{tag}.context")
        ctx = node("Transpose", [ctx], f"{tag}.merged", perm=list(BNSH))
        node("Reshape", [ctx, f"{tag}.merge"], y)
    return nodes, inits
