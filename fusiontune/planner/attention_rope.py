"""The head split moved past per-head ops (RoPE), so that P5 can absorb it.

In a Llama graph the head split of Q and K, a view ``[B, N, H·d] -> [B, N, H, d]`` and
``Transpose(0, 2, 1, 3)``, sits *before* the rotary embedding (rotate-half: ``Slice`` or
``Split`` of the last axis, ``Neg``, ``Concat`` on the last axis, ``Mul`` by the cos/sin
tables, ``Add``), so P5's absorption of the split (``attention._sequence_major``) does not
see it. This pass commutes the split past such a region:

    X [B,N,H·d] ─ view [B,N,H,d] ─ Transpose ─ RoPE on [B,H,N,d] ─ E ─ attention

becomes

    X ─ view [B,N,H,d] ─ RoPE on [B,N,H,d] ─ view [B,N,H·d] ─ view [B,N,H,d] ─ Transpose ─ E

whose last view and Transpose P5 then absorbs (the fused op reads ``[B, N, H·d]``).

Legality (checked, each a reason the region is left as it is): every op of the region
between the Transpose and its exit ``E`` is

- element-wise (``OpClass`` ELEMWISE, AFFINE or BINARY) on region tensors and constants,
  with an output of the region's ``[B, H, N, ·]`` (a constant operand is broadcast; it is
  transposed like the activation, right-aligned to rank 4), or
- an op that selects or joins elements along the last axis only (``moved_axes`` is ``{3}``:
  Slice, Split, Concat of the head dimension) with constant index operands;

every region tensor is read by region ops only, except the one exit ``E`` (read outside the
region: by the attention chain); no region tensor is a graph output. Such ops compute each
output element from the same ``(b, h, n)`` of their inputs (the rotate-half's halves are per
head: the last axis is the head dimension ``d``, not ``H·d``), and the transpose leaves the
last axis where it is: so the region computes the same values, element for element, in the
``[B, N, H, d]`` layout (the same float operations on the same operands: bit-identical).
"""

from __future__ import annotations

import numpy as np

from fusiontune.ir.graph import Graph, Op, Tensor
from fusiontune.ir.opclass import OpClass
from fusiontune.ops import AttentionRole, attention_role, axis_permutation, moved_axes
from fusiontune.ops.attention import reshape_op, transpose_op

RANK = 4
HEAD_SPLIT = (0, 2, 1, 3)  # [B, N, H, d] <-> [B, H, N, d]
SEQ_MAJOR = ".seq_major"  # the suffix of the tensors a moved region makes (sequence-major)
LAST = frozenset({RANK - 1})
POINTWISE = (OpClass.ELEMWISE, OpClass.AFFINE, OpClass.BINARY)


def commute_head_split(graph: Graph, only: set[str] | None = None) -> tuple[Graph, dict[str, str]]:
    """``(graph', {E: X'})``: ``graph`` with each legal head split moved past the per-head
    region after it (module doc); ``E`` the region's exit (the tensor the attention reads, its
    name kept) and ``X'`` the new ``[B, N, H·d]`` view the head split of ``E`` now starts from.
    ``only``: commute just the regions with these exits. No legal region: ``(graph, {})``."""
    regions = [r for r in (_region(graph, op) for op in graph.ops) if r is not None]
    regions = [r for r in regions if only is None or r[2] in only]
    if not regions:
        return graph, {}
    tensors: dict[str, Tensor] = dict(graph.tensors)
    dropped: set[str] = set()
    rewritten: dict[str, list[Op]] = {}
    exits: dict[str, str] = {}
    for split, ops, exit_ in regions:
        src, seq_src = split.outputs[0], split.inputs[0]
        dropped.add(split.name)
        seq_exit = fresh_name(tensors, f"{exit_}{SEQ_MAJOR}")
        names = {src: seq_src, exit_: seq_exit}
        for op in ops:
            for t in op.outputs:
                if t and t != exit_:
                    tensors[t] = _seq_major(tensors[t])
        tensors[seq_exit] = _seq_major(graph.tensors[exit_], seq_exit)
        consts: dict[str, str] = {}
        for op in ops:
            inputs = tuple(
                names.get(t, _const(graph, tensors, consts, t, op)) if t else t for t in op.inputs
            )
            outputs = tuple(names.get(t, t) for t in op.outputs)
            new = [Op(op.name, op.op_type, inputs, outputs, op.attrs, domain=op.domain)]
            if exit_ in op.outputs:
                new += _split_again(tensors, graph.tensors[exit_], seq_exit, exits)
            rewritten[op.name] = new
    out: list[Op] = []
    for op in graph.ops:
        if op.name in dropped:
            continue
        out += rewritten.get(op.name, [op])
    used = {t for op in out for t in (*op.inputs, *op.outputs) if t}
    used |= set(graph.inputs) | set(graph.outputs)
    kept = {n: t for n, t in tensors.items() if n in used}
    return Graph(graph.name, kept, tuple(out), graph.inputs, graph.outputs), exits


def _region(graph: Graph, split: Op) -> tuple[Op, list[Op], str] | None:
    """``(split, region ops in graph order, exit)`` when ``split`` is a head-split Transpose
    of a view of a 3-D activation followed by a legal per-head region (``None``: not)."""
    if axis_permutation(split, RANK) != HEAD_SPLIT or len(split.outputs) != 1:
        return None
    t4 = split.inputs[0]
    view = graph.producer(t4)
    if view is None or attention_role(view) is not AttentionRole.VIEW:
        return None
    x, s4 = view.inputs[0], graph.tensors[t4].shape
    xs = graph.tensors[x].shape
    if graph.is_constant(x) or len(s4) != RANK or xs != (s4[0], s4[1], s4[2] * s4[3]):
        return None
    src = split.outputs[0]
    lead = graph.tensors[src].shape[:3]  # [B, H, N]
    region: dict[str, Op] = {}
    inside, queue, exits = {src}, [src], []
    while queue:
        t = queue.pop()
        readers = graph.consumers(t)
        outside = [r for r in readers if not _per_head(graph, r, lead)]
        if outside or t in graph.outputs or not readers:
            exits.append(t)
        for r in readers:
            if r in outside or r.name in region:
                continue
            region[r.name] = r
            for o in r.outputs:
                if o and o not in inside:
                    inside.add(o)
                    queue.append(o)
    if len(exits) != 1 or exits[0] == src or not region:
        return None
    exit_ = exits[0]
    for op in region.values():  # closed: every activation operand made in the region
        if any(t and t not in inside and not graph.is_constant(t) for t in op.inputs):
            return None
        if any(o != exit_ and (o in graph.outputs or not graph.consumers(o))
               for o in op.outputs if o):  # fmt: skip
            return None
        if any(r.name not in region for o in op.outputs if o and o != exit_
               for r in graph.consumers(o)):  # fmt: skip
            return None
    ops = sorted(region.values(), key=lambda o: graph.op_index[o.name])
    return split, ops, exit_


def _per_head(graph: Graph, op: Op, lead: tuple[int, ...]) -> bool:
    """``op`` computes each output element from the same ``(b, h, n)`` of its inputs: an
    element-wise op, or a Slice/Split/Concat of the last axis; outputs of ``[B, H, N, ·]``."""
    outs = [graph.tensors[o].shape for o in op.outputs if o]
    if not outs or any(len(s) != RANK or s[:3] != lead for s in outs):
        return False
    if op.op_class in POINTWISE:
        return all(len(graph.tensors[t].shape) <= RANK for t in op.inputs if t)
    axes = moved_axes(graph, op)
    if axes != LAST:
        return False
    data = graph.activation_inputs(op)
    return all(len(graph.tensors[t].shape) == RANK for t in data)


def moved_past(graph: Graph, tensor: str) -> bool:
    """Whether ``tensor`` (a fused attention's Q or K) is the ``[B, N, H·d]`` view of a region
    :func:`commute_head_split` moved the head split past (what ``--explain`` reports)."""
    op = graph.producer(tensor)
    return op is not None and any(SEQ_MAJOR in t for t in op.inputs if t)


def _seq_major(t: Tensor, name: str | None = None) -> Tensor:
    shape = tuple(t.shape[i] for i in HEAD_SPLIT)
    return Tensor(name or t.name, shape, t.dtype)


def _const(graph: Graph, tensors: dict[str, Tensor], made: dict[str, str], t: str, op: Op) -> str:
    """A constant operand of a region op in the new layout: an element-wise op's operand of
    more than one element transposed (right-aligned to rank 4); index operands as they are."""
    c = graph.tensors[t]
    if c.value is None or op.op_class not in POINTWISE or c.value.size == 1:
        return t
    if t not in made:
        value = np.asarray(c.value).reshape((1,) * (RANK - c.value.ndim) + c.value.shape)
        value = np.ascontiguousarray(np.transpose(value, HEAD_SPLIT))
        value.flags.writeable = False
        name = fresh_name(tensors, f"{t}{SEQ_MAJOR}")
        tensors[name] = Tensor(name, tuple(value.shape), c.dtype, value)
        made[t] = name
    return made[t]


def _split_again(
    tensors: dict[str, Tensor], exit_t: Tensor, seq_exit: str, exits: dict[str, str]
) -> list[Op]:
    """``seq_exit [B, N, H, d]`` -> view ``[B, N, H·d]`` -> view ``[B, N, H, d]`` ->
    ``Transpose(0, 2, 1, 3)`` -> the exit (its name and shape kept): the head split P5
    absorbs."""
    b, n, h, d = tensors[seq_exit].shape
    stem = exit_t.name
    merged, split = fresh_name(tensors, f"{stem}.merged"), fresh_name(tensors, f"{stem}.split")
    tensors[merged] = Tensor(merged, (b, n, h * d), exit_t.dtype)
    tensors[split] = Tensor(split, (b, n, h, d), exit_t.dtype)
    to3 = _shape_const(tensors, f"{merged}.shape", (b, n, h * d))
    to4 = _shape_const(tensors, f"{split}.shape", (b, n, h, d))
    exits[stem] = merged
    return [
        reshape_op(merged, seq_exit, to3, merged),
        reshape_op(split, merged, to4, split),
        transpose_op(f"{stem}.heads", split, stem, HEAD_SPLIT),
    ]


def _shape_const(tensors: dict[str, Tensor], stem: str, shape: tuple[int, ...]) -> str:
    name = fresh_name(tensors, stem)
    value = np.asarray(shape, np.int64)
    value.flags.writeable = False
    tensors[name] = Tensor(name, tuple(value.shape), "int64", value)
    return name


def fresh_name(tensors: dict[str, Tensor], stem: str) -> str:
    """``stem``, or ``stem.1``, ``stem.2``, ... : the first name not in ``tensors``."""
    name, i = stem, 1
    while name in tensors:
        name, i = f"{stem}.{i}", i + 1
    return name
