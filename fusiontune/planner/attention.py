"""The attention pattern (P5): ``MatMul(Q, Kᵀ) -> scale -> mask -> Softmax -> MatMul(P, V)``.

A MatMul of two activations is OPAQUE (rule 6), so an attention written out op by op is a
chain of barriers whose ``Nq x Nk`` scores go to DRAM and back three times. This module finds
those chains and, where they are legal, replaces each by ONE fused attention op
(``ops/attention.py``) that the executor runs by the flash scheme on the digital units
(``sim/attention.py``): the scores never leave the chip. ``docs/attention.md`` describes the
pattern, its forms and its refusals.

Recipe (each step a small function; a refusal is a reason the user reads in ``--explain``):

1. **candidates** — every Softmax (``AttentionRole.SOFTMAX``) whose input goes back, through
   scalar scales (Mul/Div by a scalar constant) and masks (an Add, or a Where between the
   scores and a scalar fill, as GPT-2's causal ``where(causal, w, min)``), to a MatMul of two
   activations (:func:`find_attention`).
2. **legality** — the softmax is over the last (keys) axis; its probabilities feed a MatMul
   of two activations as the left operand; every intermediate (scores, scaled, masked,
   probabilities) has that one reader and is no graph output; Q, Kᵀ, V are 4-D
   ``[B, H, N, d]`` with the same batch and heads; each mask (float32 for an Add, a bool
   condition for a Where) broadcasts to the scores without growing them and comes after
   every scale on the scores.
3. **rewrite** — :func:`fuse_attention` swaps each legal chain for the fused op (absorbing the
   Transpose that makes Kᵀ and scalar scales on Q and K, the dynamo form); a Kᵀ that no
   absorbable Transpose makes gets a Transpose of its own (a LAYOUT op the planner may fuse
   into its producer). The masks become one additive float32 mask: constant parts (a causal
   condition, a constant padding mask) folded into one constant, a Where on an activation
   condition spelled ``where(c, 0, fill)``, the parts summed by Adds; a folded constant that
   hides every key after its query becomes ``is_causal`` (:func:`causal_part`). HF's
   ``repeat_kv`` of K and V (view, Expand, view) is absorbed into grouped K/V heads, and the
   head split of Q, K, V and the merge of the output (view + ``Transpose(0, 2, 1, 3)``) into
   the sequence-major form ``[B, N, H·d]`` of the fused op, so neither round-trips through
   DRAM.

The rewrite is a pass before planning: the plan is a partition of the rewritten graph, in
which each attention is one group (a singleton of the fused op). ``fuse_attention`` of a graph
without chains returns it unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fusiontune.ir.graph import Graph, Op, Tensor
from fusiontune.ops import (
    AttentionRole,
    attention_role,
    attr,
    axis_permutation,
    fused_attention_problem,
    is_activation_matmul,
)
from fusiontune.ops.attention import (
    KEYS_LAST,
    NAN_GUARD,
    add_op,
    attention_op,
    heads_of,
    mask_problem,
    reshape_op,
    transpose_op,
    where_op,
)
from fusiontune.planner.attention_rope import commute_head_split, moved_past
from fusiontune.planner.attention_rope import fresh_name as _fresh

RANK = 4  # [B, H, N, d]
Mask = tuple[str, float | None, bool]
"""``(tensor, fill, keep)`` of one mask (:class:`AttentionChain`)."""
IDENTITY = (0, 1, 2, 3)
CAUSAL_FILL = -1e9
"""A constant mask entry at most this is a key the query cannot see (HF writes
``finfo(float32).min``, the zoo -1e9)."""


@dataclass(frozen=True)
class AttentionChain:
    """One attention chain found in a graph (fusable or not).

    Attributes:
        softmax: the Softmax op the chain was found from.
        ops: the ops the fused op replaces, in graph order (empty when refused early).
        q: the query tensor ``[B, H, Nq, d]``.
        k_source: the tensor ``K`` is made from; ``k_perm`` applied to it gives
            ``K [B, H, Nk, d]`` (``None``: it is ``K`` already).
        v: the value tensor ``[B, H, Nk, dv]``.
        masks: the masks on the scores, each ``(tensor, fill, keep)``: an additive mask
            (``fill`` ``None``), or a ``Where`` on a boolean ``tensor`` that keeps the scores
            where it is ``keep`` and puts the scalar ``fill`` elsewhere.
        scale: the product of the scales (Mul ``c``, Div ``1/c``) on the scores, Q and K.
        output: the tensor the chain produces (the P·V MatMul's output, or the merged
            ``[B, N, H·dv]`` after the head merge when ``heads``).
        reason: why the chain stays a barrier (empty: it fuses).
        heads: ``(H, Hk)`` when the head split of Q, K, V and the merge of the output are
            absorbed: the fused op reads and writes the projections' ``[B, N, H·d]``.
        nan_guard: the probabilities' ``where(isnan(p), 0, p)`` (torch dynamo's guard of a
            fully masked row) is absorbed: the fused op outputs 0 for such a row.
    """

    softmax: str
    ops: tuple[str, ...] = ()
    q: str = ""
    k_source: str = ""
    k_perm: tuple[int, ...] | None = None
    v: str = ""
    masks: tuple[Mask, ...] = ()
    scale: float = 1.0
    output: str = ""
    reason: str = ""
    heads: tuple[int, int] | None = None
    nan_guard: bool = False

    @property
    def fusable(self) -> bool:
        return not self.reason

    @property
    def mask(self) -> str | None:
        """The first mask's tensor (``None``: no mask)."""
        return self.masks[0][0] if self.masks else None

    def to_dict(self) -> dict[str, object]:
        return {
            "softmax": self.softmax,
            "ops": list(self.ops),
            "fusable": self.fusable,
            "pattern": "P5" if self.fusable else None,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class AttentionVerdict:
    """What ``--explain`` says about one attention: a chain found in the graph, or an
    attention op already fused (``fused=True``)."""

    name: str
    fused: bool
    ops: tuple[str, ...] = ()
    reason: str = ""
    detail: str = ""  # a fused op's decoder parts: causal, grouped heads

    def __str__(self) -> str:
        if self.fused and not self.reason:
            extra = f"; {self.detail}" if self.detail else ""
            return f"attention {self.name}: fused (P5, flash scheme on the digital units{extra})"
        if self.fused:
            return f"attention {self.name}: runs unfused, OPAQUE ({self.reason})"
        if not self.reason:
            return (
                f"attention {self.name}: fusable by P5 ({len(self.ops)} ops: "
                f"{', '.join(self.ops)}); fuse_attention fuses it (the commands do, unless "
                "--no-fuse-attention)"
            )
        return f"attention {self.name}: stays a barrier: {self.reason}"

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "fused": self.fused, "ops": list(self.ops),
                "pattern": "P5" if not self.reason else None, "reason": self.reason,
                "detail": self.detail}  # fmt: skip


# ---- 1. candidates ------------------------------------------------------------------------------
def find_attention(graph: Graph, absorb_heads: bool = True) -> list[AttentionChain]:
    """Every attention chain of ``graph`` (fusable or with its reason), in graph order.

    A Softmax whose input does not go back to a MatMul of two activations is no attention
    (a classifier's softmax) and is not listed. ``absorb_heads=False`` keeps the head split
    and merge as ops of their own (the 4-D form; ``results/exp_attention.md`` compares).
    """
    out = []
    for op in graph.ops:
        if attention_role(op) is AttentionRole.SOFTMAX:
            chain = _chain_from(graph, op, absorb_heads)
            if chain is not None:
                out.append(chain)
    return out


@dataclass
class _Walk:
    """The chain as it is collected (mutable while walking, frozen into AttentionChain)."""

    softmax: Op
    ops: list[str] = field(default_factory=list)
    scale: float = 1.0
    masks: list[Mask] = field(default_factory=list)
    absorb_heads: bool = True


def _chain_from(graph: Graph, softmax: Op, absorb_heads: bool = True) -> AttentionChain | None:
    w = _Walk(softmax, absorb_heads=absorb_heads)
    t = softmax.inputs[0]
    scores: Op | None = None
    while True:  # back from the softmax: scales and one mask, down to the scores MatMul
        p = graph.producer(t)
        if p is None:
            return None
        role = attention_role(p)
        if is_activation_matmul(graph, p):
            scores = p
            break
        if _passes(graph, p):
            w.ops.append(p.name)
            t = p.inputs[0]
            continue
        if role in (AttentionRole.MUL, AttentionRole.DIV) and _scalar(graph, p) is not None:
            c, x = _scalar(graph, p)  # type: ignore[misc]
            w.scale *= c if role is AttentionRole.MUL else 1.0 / c
            w.ops.append(p.name)
            t = x
            continue
        if role in (AttentionRole.ADD, AttentionRole.WHERE):
            mask = _mask_of(graph, p)
            if mask is None:
                return None
            upstream, found = mask
            if any(_is_scale(graph, graph.op(n)) for n in w.ops):
                return _refused(w, "a scale is applied after the mask (the mask would be scaled)")
            w.masks.append(found)
            w.ops.append(p.name)
            t = upstream
            continue
        return None
    w.ops.append(scores.name)
    return _legal(graph, w, scores)


def _passes(graph: Graph, op: Op) -> bool:
    """``op`` is ``y = x`` here: an identity-like role, the output of the input's dtype and
    shape, no other output used."""
    if attention_role(op) is not AttentionRole.PASS or not op.inputs or not op.outputs:
        return False
    x, y = graph.tensors.get(op.inputs[0]), graph.tensors.get(op.outputs[0])
    if x is None or y is None or x.value is not None or any(op.outputs[1:]):
        return False
    return x.dtype == y.dtype and x.shape == y.shape


def _is_scale(graph: Graph, op: Op) -> bool:
    role = attention_role(op)
    return role in (AttentionRole.MUL, AttentionRole.DIV) and _scalar(graph, op) is not None


def _scalar(graph: Graph, op: Op) -> tuple[float, str] | None:
    """``(c, x)`` of ``x * c`` / ``x / c`` with a one-element constant ``c`` (else ``None``)."""
    if len(op.inputs) != 2:
        return None
    a, b = op.inputs
    role = attention_role(op)
    order = [(b, a)] if role is AttentionRole.DIV else [(b, a), (a, b)]
    for c_name, x in order:
        c = graph.tensors[c_name]
        if c.value is not None and c.value.size == 1 and not graph.is_constant(x):
            value = float(c.value.reshape(()))
            if value != 0.0 and math.isfinite(value):
                return value, x
    return None


def _on_scores(graph: Graph, t: str) -> bool:
    """``t`` is made by an op the walk back from the softmax goes through."""
    p = graph.producer(t)
    if p is None:
        return False
    role = attention_role(p)
    return (
        is_activation_matmul(graph, p)
        or _is_scale(graph, p)
        or role in (AttentionRole.ADD, AttentionRole.WHERE)
    )


def _mask_of(graph: Graph, op: Op) -> tuple[str, Mask] | None:
    """``(scores side, mask)`` of an Add or Where on the scores (``None``: neither form).

    Add: the scores side is the operand made by the chain (input 0 first, as torch writes
    it). Where: one branch is the scores, the other a one-element constant (the fill)."""
    if attention_role(op) is AttentionRole.ADD:
        if len(op.inputs) != 2:
            return None
        for up, other in ((op.inputs[0], op.inputs[1]), (op.inputs[1], op.inputs[0])):
            if _on_scores(graph, up):
                return up, (other, None, True)
        return None
    if len(op.inputs) != 3:
        return None
    cond, x, y = op.inputs
    for up, fill_name, keep in ((x, y, True), (y, x, False)):
        fill = graph.tensors[fill_name].value
        if _on_scores(graph, up) and fill is not None and fill.size == 1:
            return up, (cond, float(fill.reshape(())), keep)
    return None


# ---- 2. legality --------------------------------------------------------------------------------
def _refused(w: _Walk, reason: str, ops: list[str] | None = None) -> AttentionChain:
    names = tuple(reversed(ops if ops is not None else w.ops))
    return AttentionChain(w.softmax.name, names, reason=reason)


def _legal(graph: Graph, w: _Walk, scores: Op) -> AttentionChain:
    softmax = w.softmax
    s_shape = graph.tensors[softmax.inputs[0]].shape
    rank = len(s_shape)
    axis = int(attr(softmax, "axis"))
    if axis % max(rank, 1) != rank - 1:
        return _refused(w, f"the softmax '{softmax.name}' is over axis {axis}, not the last "
                           f"(keys) axis of the scores {s_shape}")  # fmt: skip
    probs, passed = softmax.outputs[0], []
    readers = graph.consumers(probs)
    guarded: str | None = None  # the probabilities the NaN guard reads (twice)
    while True:
        if len(readers) == 1 and _passes(graph, readers[0]):  # a Cast to float32, a Dropout
            passed.append(readers[0].name)
            probs = readers[0].outputs[0]
        elif guarded is None and (guard := _nan_guard(graph, probs)) is not None:
            guarded = probs
            passed += guard
            probs = graph.op(guard[-1]).outputs[0]
        else:
            break
        readers = graph.consumers(probs)
    context = readers[0] if len(readers) == 1 else None
    if context is None or not is_activation_matmul(graph, context):
        names = ", ".join(f"'{r.name}'" for r in readers) or "nothing"
        return _refused(w, f"the probabilities of '{softmax.name}' are read by {names}, "
                           "not by one MatMul with V")  # fmt: skip
    if context.inputs[0] != probs:
        return _refused(w, f"the probabilities are the right operand of '{context.name}' "
                           "(P·V needs them on the left)")  # fmt: skip
    chain = [*w.ops, softmax.name, *passed, context.name]
    inner = [graph.op(n).outputs[0] for n in chain[:-1]]  # scores ... probabilities
    for t in inner:
        if t in graph.outputs:
            return _refused(w, f"intermediate '{t}' is a graph output (it must be written)",
                            chain)  # fmt: skip
        readers = graph.consumers(t)
        if len(readers) != (2 if t == guarded else 1):
            names = ", ".join(f"'{r.name}'" for r in readers)
            return _refused(w, f"intermediate '{t}' is read by {names}: it must be written, so "
                               "the chain stays unfused", chain)  # fmt: skip
    qt, kt = scores.inputs[0], scores.inputs[1]
    v = context.inputs[1]
    shapes = {n: graph.tensors[n].shape for n in (qt, kt, v)}
    if any(len(s) != RANK for s in shapes.values()):
        text = ", ".join(f"{n} {s}" for n, s in shapes.items())
        return _refused(w, f"Q, Kᵀ, V must be 4-D [B, H, N, d]; got {text}", chain)
    q_bh, k_bh, v_bh = shapes[qt][:2], shapes[kt][:2], shapes[v][:2]
    mqa = k_bh == v_bh == (q_bh[0], 1)  # one K/V head broadcast over the query heads
    if not (q_bh == k_bh == v_bh or mqa):
        text = f"Q {shapes[qt]}, Kᵀ {shapes[kt]} and V {shapes[v]}"
        return _refused(w, f"{text} differ in batch or heads (only one K/V head broadcast "
                           "over the query heads, or repeat_kv, is supported)",
                        chain)  # fmt: skip
    dtypes = {graph.tensors[n].dtype for n in (qt, kt, v)}
    if dtypes != {"float32"}:
        return _refused(w, f"Q, K, V must be float32 (got {sorted(dtypes)})", chain)
    s_out = graph.tensors[scores.outputs[0]].shape
    for tensor, fill, _ in w.masks:
        m = graph.tensors[tensor]
        if fill is not None and m.dtype != "bool":
            return _refused(w, f"the Where condition '{tensor}' is {m.dtype}, not bool", chain)
        problem = mask_problem(m.shape, s_out, "float32" if fill is not None else m.dtype)
        if problem:
            return _refused(w, problem, chain)
    scale = w.scale
    ops = set(chain)
    q, c = _absorb_scales(graph, qt, ops)
    scale *= c
    k_src, c, k_perm = _keys(graph, kt, ops)
    scale *= c
    k_src, v = _grouped(graph, k_src, k_perm, v, ops)
    y, heads = context.outputs[0], None
    seq = _sequence_major(graph, q, k_src, k_perm, v, y, ops) if w.absorb_heads else None
    if seq is not None:
        heads = (graph.tensors[q].shape[1], graph.tensors[v].shape[1])
        (q, k_src, v, y), k_perm = seq, None
    order = tuple(sorted(ops, key=graph.op_index.__getitem__))
    masks = tuple(reversed(w.masks))  # in graph order
    return AttentionChain(softmax.name, order, q, k_src, k_perm, v, masks, scale, y,
                          heads=heads, nan_guard=guarded is not None)  # fmt: skip


def _nan_guard(graph: Graph, p: str) -> list[str] | None:
    """``[IsNaN, Where]`` when ``p`` is read by exactly ``c = isnan(p)`` and
    ``where(c, 0, p)`` with a one-element constant 0 (torch dynamo's guard: a fully masked
    row's softmax is NaN, the guard makes it 0), ``c`` read by that Where only (else
    ``None``)."""
    readers = graph.consumers(p)
    if len(readers) != 2 or p in graph.outputs:
        return None
    tests = [r for r in readers if attention_role(r) is AttentionRole.NAN_TEST]
    wheres = [r for r in readers if attention_role(r) is AttentionRole.WHERE]
    if len(tests) != 1 or len(wheres) != 1 or len(tests[0].outputs) != 1:
        return None
    test, where = tests[0], wheres[0]
    c = test.outputs[0]
    if tuple(where.inputs) != (c, where.inputs[1], p) or len(where.inputs) != 3:
        return None
    zero = graph.tensors[where.inputs[1]].value
    if zero is None or zero.size != 1 or float(zero.reshape(())) != 0.0:
        return None
    if c in graph.outputs or [r.name for r in graph.consumers(c)] != [where.name]:
        return None
    return [test.name, where.name]


def _absorb_scales(graph: Graph, t: str, ops: set[str]) -> tuple[str, float]:
    """Scalar scales making ``t`` that only the chain reads (dynamo scales Q and K by
    ``sqrt(scale)`` each): their input and the product of their factors."""
    scale = 1.0
    while True:
        p = graph.producer(t)
        if p is None or not _is_scale(graph, p) or not _only_reader_in(graph, t, ops):
            return t, scale
        c, x = _scalar(graph, p)  # type: ignore[misc]
        scale *= c if attention_role(p) is AttentionRole.MUL else 1.0 / c
        ops.add(p.name)
        t = x


def _keys(graph: Graph, kt: str, ops: set[str]) -> tuple[str, float, tuple[int, ...] | None]:
    """``(source, scale, perm)``: ``transpose(source, perm)`` is ``K`` (``None``: ``source``
    is ``K``); absorbs scalar scales and one Transpose that only the chain reads."""
    t, scale = _absorb_scales(graph, kt, ops)
    p = graph.producer(t)
    perm = axis_permutation(p, RANK) if p is not None else None
    if p is None or perm is None or not _only_reader_in(graph, t, ops):
        return t, scale, KEYS_LAST  # Kᵀ as it is: transposed back by an op of its own
    ops.add(p.name)
    src, c = _absorb_scales(graph, p.inputs[0], ops)
    k_perm = tuple(perm[i] for i in KEYS_LAST)  # transpose(X, perm) = Kᵀ -> K
    return src, scale * c, (None if k_perm == IDENTITY else k_perm)


def _grouped(
    graph: Graph, k: str, k_perm: tuple[int, ...] | None, v: str, ops: set[str]
) -> tuple[str, str]:
    """``(K source, V)`` with a repeat_kv on both absorbed: the fused op then reads the
    ``Hk`` grouped heads (each once for its group of query heads). Without a repeat on both,
    of one group size, ``(k, v)`` as they are."""
    if k_perm is not None and k_perm[:2] != (0, 1):
        return k, v
    rk, rv = _repeat_kv(graph, k, ops), _repeat_kv(graph, v, ops)
    if rk is None or rv is None:
        return k, v
    (k_src, k_ops), (v_src, v_ops) = rk, rv
    if graph.tensors[k_src].shape[:2] != graph.tensors[v_src].shape[:2]:
        return k, v
    ops.update(k_ops + v_ops)
    return k_src, v_src


def _repeat_kv(graph: Graph, t: str, ops: set[str]) -> tuple[str, list[str]] | None:
    """``(source, ops)`` when ``t [B, Hk·g, X, Y]`` is HF's ``repeat_kv`` of ``source
    [B, Hk, X, Y]``: a view to ``[B, Hk, 1, X, Y]``, a broadcast to ``[B, Hk, g, X, Y]``, a
    view to ``[B, Hk·g, X, Y]`` (query head ``h`` reads K/V head ``h // g``), each op read
    only by the next (``None``: not that form). A ``Tile`` of the heads repeats them in
    another order and is not absorbed."""
    walk: list[str] = []
    shapes: list[tuple[int, ...]] = [graph.tensors[t].shape]
    roles = (AttentionRole.VIEW, AttentionRole.BROADCAST, AttentionRole.VIEW)
    readers_ok = set(ops)
    for role in roles:
        p = graph.producer(t)
        if p is None or attention_role(p) is not role or not _only_reader_in(graph, t, readers_ok):
            return None
        t = p.inputs[0]
        if graph.is_constant(t):
            return None
        walk.append(p.name)
        readers_ok.add(p.name)
        shapes.append(graph.tensors[t].shape)
    out, five, one, src = shapes
    if len(out) != RANK or len(five) != RANK + 1 or src != (out[0], five[1], *out[2:]):
        return None
    b, hk, g = five[:3]
    if five != (b, hk, g, *out[2:]) or one != (b, hk, 1, *out[2:]) or hk * g != out[1]:
        return None
    return t, walk


HEAD_SPLIT = (0, 2, 1, 3)  # [B, N, H, d] <-> [B, H, N, d]


def _sequence_major(
    graph: Graph, q: str, k: str, k_perm: tuple[int, ...] | None, v: str, y: str, ops: set[str]
) -> tuple[str, str, str, str] | None:
    """``(Q, K, V, Y)`` in the projections' ``[B, N, H·d]`` when the chain's Q, K, V are
    made from such tensors by a view ``[B, N, H, d]`` and ``Transpose(0, 2, 1, 3)`` (K's
    transpose already absorbed into ``k_perm``) and its output goes back by the same two ops,
    each read only by the next: those ops are absorbed (added to ``ops``), so the head
    split and merge no longer round-trip through DRAM. ``None`` (nothing absorbed) unless all
    four do."""
    extra: set[str] = set()
    sources = []
    for t, perm in ((q, None), (k, k_perm), (v, None)):
        found = _split_source(graph, t, perm, ops | extra)
        if found is None:
            return None
        sources.append(found[0])
        extra.update(found[1])
    merged = _merge_target(graph, y)
    if merged is None:
        return None
    ops.update(extra | set(merged[1]))
    return sources[0], sources[1], sources[2], merged[0]


def _split_source(
    graph: Graph, t: str, perm: tuple[int, ...] | None, ops: set[str]
) -> tuple[str, list[str]] | None:
    """``(X [B, N, H·d], ops)`` when ``transpose(t, perm)`` is the head split of ``X``."""
    walk: list[str] = []
    if perm is None:  # t [B, H, N, d] = Transpose(t4, (0, 2, 1, 3))
        p = graph.producer(t)
        if p is None or axis_permutation(p, RANK) != HEAD_SPLIT:
            return None
        if not _only_reader_in(graph, t, ops):
            return None
        walk.append(p.name)
        t = p.inputs[0]
    elif perm != HEAD_SPLIT:
        return None
    # t [B, N, H, d] = view(X [B, N, H·d])
    p = graph.producer(t)
    if p is None or attention_role(p) is not AttentionRole.VIEW:
        return None
    if not _only_reader_in(graph, t, ops | set(walk)):
        return None
    x = p.inputs[0]
    xs, ts = graph.tensors[x].shape, graph.tensors[t].shape
    if graph.is_constant(x) or len(xs) != 3 or len(ts) != RANK or xs != (*ts[:2], ts[2] * ts[3]):
        return None
    return x, [*walk, p.name]


def _merge_target(graph: Graph, y: str) -> tuple[str, list[str]] | None:
    """``(Y [B, N, H·dv], ops)`` when ``y [B, H, N, dv]`` is read only by
    ``Transpose(0, 2, 1, 3)`` and that only by a view to ``[B, N, H·dv]``."""
    names = []
    for want in ("transpose", "view"):
        if y in graph.outputs:
            return None
        readers = graph.consumers(y)
        if len(readers) != 1:
            return None
        r = readers[0]
        if want == "transpose" and axis_permutation(r, RANK) != HEAD_SPLIT:
            return None
        if want == "view" and attention_role(r) is not AttentionRole.VIEW:
            return None
        names.append(r.name)
        y = r.outputs[0]
    ys = graph.tensors[y].shape
    t = graph.tensors[graph.op(names[0]).outputs[0]].shape
    # [B, N, H·dv], or the same elements in another view with H·dv last ([B·N, H·dv])
    if not ys or ys[-1] != t[2] * t[3] or math.prod(ys[:-1]) != t[0] * t[1]:
        return None
    return y, names


def _only_reader_in(graph: Graph, t: str, ops: set[str]) -> bool:
    return t not in graph.outputs and all(r.name in ops for r in graph.consumers(t))


# ---- 3. rewrite ---------------------------------------------------------------------------------
def fuse_attention(graph: Graph, absorb_heads: bool = True) -> Graph:
    """``graph`` with every fusable attention chain replaced by one fused attention op.

    The fused op is named ``<softmax>.attention`` and writes the chain's output tensor (the
    merged ``[B, N, H·dv]`` when the head split and merge are absorbed), so the rest of the
    graph is unchanged; a ``K`` that needs a Transpose gets one named
    ``<softmax>.attention.keys``. Graphs without fusable chains are returned as they are.
    ``absorb_heads=False``: the head split and merge stay ops of their own (the 4-D form).
    """
    if absorb_heads:
        graph = _rope_heads(graph)
    chains = [c for c in find_attention(graph, absorb_heads) if c.fusable]
    if not chains:
        return graph
    tensors: dict[str, Tensor] = dict(graph.tensors)
    replaced: dict[str, list[Op]] = {}  # the chain's last op -> what stands in its place
    dropped: set[str] = set()
    for c in chains:
        name = f"{c.softmax}.attention"
        new: list[Op] = []
        k = c.k_source
        if c.k_perm is not None:
            src = tensors[c.k_source]
            k = _fresh(tensors, f"{name}.keys")
            shape = tuple(src.shape[i] for i in c.k_perm)
            tensors[k] = Tensor(k, shape, src.dtype)
            new.append(transpose_op(f"{name}.keys", c.k_source, k, c.k_perm))
        mask, causal = _one_mask(graph, c, name, tensors, new)
        y, post = c.output, []
        if c.heads is not None:  # the 3-D form writes [B, N, H·dv]; a view to another shape
            qs, vs = tensors[c.q].shape, tensors[c.v].shape
            merged = (qs[0], qs[1], c.heads[0] * (vs[2] // c.heads[1]))
            if tensors[c.output].shape != merged:
                y = _fresh(tensors, f"{name}.merged")
                tensors[y] = Tensor(y, merged, "float32")
                to = _const(tensors, f"{name}.merged.shape", tensors[c.output].shape, "int64")
                post.append(reshape_op(f"{name}.merged", y, to, c.output))
        new.append(attention_op(name, c.q, k, c.v, mask, y, c.scale, causal, c.heads, c.nan_guard))
        new += post
        replaced[c.ops[-1]] = new
        dropped.update(c.ops)
        for op_name in c.ops:
            out = graph.op(op_name).outputs[0]
            if out != c.output:
                tensors.pop(out, None)
    ops: list[Op] = []
    for op in graph.ops:
        if op.name in replaced:
            ops += replaced[op.name]
        elif op.name not in dropped:
            ops.append(op)
    used = {t for op in ops for t in (*op.inputs, *op.outputs) if t}
    used |= set(graph.inputs) | set(graph.outputs)
    kept = {n: t for n, t in tensors.items() if n in used}
    return Graph(graph.name, kept, tuple(ops), graph.inputs, graph.outputs)


def _rope_heads(graph: Graph) -> Graph:
    """``graph`` with the head split of Q and K moved past their RoPE where P5 then absorbs
    the split (``attention_rope.commute_head_split``): only the regions whose chain takes the
    3-D form after the move and not before (a scale on Q, which P5 absorbs anyway, is no
    reason to move a split), so no other graph gets the extra views."""
    moved, exits = commute_head_split(graph)
    if not exits:
        return graph
    had = {c.softmax for c in find_attention(graph) if c.fusable and c.heads}  # absorbed already
    sources = {t for c in find_attention(moved) if c.fusable and c.heads and c.softmax not in had
               for t in (c.q, c.k_source)}  # fmt: skip
    keep = {e for e, x in exits.items() if x in sources}
    return commute_head_split(graph, keep)[0] if keep else graph


def _one_mask(
    graph: Graph, c: AttentionChain, name: str, tensors: dict[str, Tensor], new: list[Op]
) -> tuple[str | None, bool]:
    """The chain's masks as one additive float32 tensor and whether the op is causal:
    constant parts folded into one constant, a Where on an activation condition as
    ``where(c, 0, fill)``, parts summed. A folded constant that masks every key after its
    query (:func:`causal_part`) becomes ``is_causal`` and its remainder (dropped when 0)."""
    parts: list[str] = []
    folded: np.ndarray | None = None
    for i, (tensor, fill, keep) in enumerate(c.masks):
        t = graph.tensors[tensor]
        if fill is None and t.value is None:
            parts.append(tensor)
            continue
        if fill is None:
            value = np.asarray(t.value, np.float32)
        elif t.value is not None:
            on, off = (0.0, fill) if keep else (fill, 0.0)
            value = np.where(t.value, np.float32(on), np.float32(off)).astype(np.float32)
        else:
            on_name, off_name = (
                _const(tensors, f"{name}.zero", 0.0),
                _const(tensors, f"{name}.fill", fill),
            )
            a, b = (on_name, off_name) if keep else (off_name, on_name)
            out = _fresh(tensors, f"{name}.mask{i}")
            tensors[out] = Tensor(out, t.shape, "float32")
            new.append(where_op(out, tensor, a, b, out))
            parts.append(out)
            continue
        folded = value if folded is None else (folded + value).astype(np.float32)
    causal = False
    if folded is not None:
        axis = 1 if c.heads else 2  # the sequence axis of [B, N, H·d] or [B, H, N, d]
        scores = (graph.tensors[c.q].shape[axis], graph.tensors[c.v].shape[axis])
        rest = causal_part(folded, scores)
        if rest is not None:
            causal, folded = True, rest
    if folded is not None and (not causal or np.any(folded)):
        parts.append(_const(tensors, f"{name}.mask", folded))
    if not parts:
        return None, causal
    mask = parts[0]
    for i, other in enumerate(parts[1:]):
        out = _fresh(tensors, f"{name}.masks{i}")
        shape = np.broadcast_shapes(tensors[mask].shape, tensors[other].shape)
        tensors[out] = Tensor(out, tuple(int(d) for d in shape), "float32")
        new.append(add_op(out, mask, other, out))
        mask = out
    return mask, causal


def causal_part(mask: np.ndarray, scores: tuple[int, int]) -> np.ndarray | None:
    """``mask`` with its causal part taken out, when its last two axes are the scores'
    ``(Nq, Nk)`` (not broadcast) and every entry after the query (key ``j > i``, top-left) is
    at most :data:`CAUSAL_FILL`: those entries set to 0 (``None``: not causal). Such a fill
    gives a softmax weight of exactly 0, as ``is_causal`` does, for scores below 1e8 in
    magnitude."""
    if mask.ndim < 2 or tuple(mask.shape[-2:]) != tuple(scores) or scores[1] < 2:
        return None
    nq, nk = scores
    after = np.arange(nk)[None, :] > np.arange(nq)[:, None]
    if not after.any() or not np.all(mask[..., after] <= CAUSAL_FILL):
        return None
    return np.where(after, np.float32(0), mask).astype(np.float32)


def _const(
    tensors: dict[str, Tensor],
    stem: str,
    value: float | np.ndarray | tuple[int, ...],
    dtype: str = "float32",
) -> str:
    name = _fresh(tensors, stem)
    arr = np.asarray(value, dtype)
    arr.flags.writeable = False
    tensors[name] = Tensor(name, tuple(arr.shape), dtype, arr)
    return name


# ---- explain ------------------------------------------------------------------------------------
def explain_attention(graph: Graph) -> list[AttentionVerdict]:
    """Per attention in ``graph``: fused ops (and whether their form runs by the flash
    scheme) and the chains still written out, fusable or with the reason they stay barriers."""
    out = []
    for op in graph.ops:
        if attention_role(op) is AttentionRole.FUSED:
            problem = fused_attention_problem(graph, op) or ""
            detail = "" if problem else _decoder_detail(graph, op)
            out.append(AttentionVerdict(op.name, True, (op.name,), problem, detail))
    for c in find_attention(graph):
        out.append(AttentionVerdict(c.softmax, False, c.ops, c.reason))
    return out


def _decoder_detail(graph: Graph, op: Op) -> str:
    """``causal``, grouped heads: what the flash scheme of a fused op skips or shares."""
    parts = []
    if attr(op, NAN_GUARD):
        parts.append("NaN guard absorbed: a fully masked query row outputs 0")
    if attr(op, "is_causal"):
        parts.append("causal: the K/V tiles after each query tile are skipped")
    hq, hk = heads_of(op) or (
        graph.tensors[op.inputs[0]].shape[1],
        graph.tensors[op.inputs[1]].shape[1],
    )
    if heads_of(op) is not None:
        parts.append("head split and merge absorbed: Q, K, V and the output in [B, N, H·d]")
        moved = [name for name, t in zip("QK", op.inputs[:2]) if moved_past(graph, t)]
        if moved:
            parts.append(f"head split of {' and '.join(moved)} moved past their per-head ops "
                         "(RoPE), which run in [B, N, H, d]")  # fmt: skip
    if hq != hk:
        parts.append(f"grouped heads: {hq} query heads over {hk} K/V heads, each K/V tile "
                     "read once per group")  # fmt: skip
    return "; ".join(parts)


def format_attention(items: list[AttentionVerdict]) -> str:
    """Human-readable lines, one per attention."""
    return "\n".join(str(v) for v in items)
