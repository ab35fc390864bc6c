"""Lower bounds on the traffic of every plan: compulsory, and one that sees capacity.

Traffic is a sum over activation tensors: a tensor costs its bytes once if its producer's
group writes it (some reader is in another group, or it is a graph output) and once more for
every *other* group that reads it (DESIGN §6). So a bound per tensor adds up to a bound per
plan.

- :func:`compulsory_bound` (``lower_bound`` in :mod:`fusiontune.sim.cost`): graph inputs read
  once, graph outputs written once (plus the least weight bytes when weights are loaded).
- :func:`capacity_bound`: per tensor, the fewest groups its producer and readers can be spread
  over on this hardware. A group holding the producer and all readers holds their convex hull
  (rule 1); if the hull cannot be part of any feasible group, the tensor is written and read
  back at least once. "Cannot" is decided by facts that only get worse as a group grows: an
  OPAQUE op among two or more (rule 6), one member op whose own moment overflows the buffer
  (a window's input rows, a whole tensor; rule 7), or crossbars that overflow when a
  non-mergeable LINEAR op rules out a merge. A merge is ruled out too when the legality rules
  refuse one for the hull itself: a nonlinearity between two of its LINEAR ops (rule 2) or a
  normalization with batch statistics (rule 3); every superset keeps that op between them,
  so the judgement stays monotone. Each
  OPAQUE reader is a group of its own and reads the tensor itself. Along one longest path of
  the graph the argument is made jointly: a convex group meets a path in a contiguous segment,
  so the path is cut into segments whose hulls could each be in a feasible group; every cut
  path tensor is written and read back. The cheapest such segmentation (a dynamic programme
  over the path) bounds the path's tensors together, which is what makes the bound useful
  when each tensor alone could stay on chip but not all of them at once. A tensor made and
  read only by ops of the path (not a graph output: a skip connection whose ends both lie on
  the path, or a plain path edge) is priced by the segmentation itself: distinct segments
  belong to distinct groups, so the tensor is written once if a reader lies outside its
  producer's segment and read once by every other segment holding a reader — exactly what
  any plan inducing that segmentation pays at least (each group reads a tensor it does not
  make at least once, a tiled singleton included). Its per-tensor bound needs no separate
  term: if its producer and readers cannot share a group (OPAQUE, or their hull is judged
  impossible), no segment the programme forms holds them all (a segment's hull contains
  theirs, and the judgement only grows with the hull), so the charge is at least the
  per-tensor one.

- Weight re-reads (:func:`_reload_bound`): with weights loaded per inference and
  ``hw.weight_reload``, a convolution whose matrix alone overflows the crossbars is in a
  group with no other matrix in every feasible plan and pays its tiling's re-reads, at least
  as many as the fewest activation reads such a group can have.
- OPAQUE re-reads (:func:`_opaque_rereads`): an OPAQUE op is a group of its own in every
  plan, so its singleton's schedule, and the reads it makes beyond one read of each input
  (a fused attention's K and V once per Q tile), are paid by every plan; the per-tensor
  terms above charge it one read of each input, this adds the rest.

A group of one op never needs the buffer: when it does not fit one row at a time it runs
tiled through DRAM (:mod:`fusiontune.sim.tiling`), writing each output once and reading each
input at least once (a tiled schedule only re-reads: halos, operands, a second statistics
pass). So the per-tensor argument above holds for singletons as it is: the bound counts one
read per reading group and never asks whether a singleton fits; only groups of two or more
ops (the hulls above) are judged by the buffer.

On a chip where the whole network fits, both bounds agree; on small buffers the capacity bound
is the one that says how far a plan can still be from the best possible.
"""

from __future__ import annotations

from fusiontune.ir.graph import Graph
from fusiontune.ir.opclass import OpClass
from fusiontune.planner._index import GraphIndex, bits, graph_index
from fusiontune.planner.groups import Group, Mode, PlannerConfig
from fusiontune.planner.lattice import walk_masks
from fusiontune.planner.legality import (
    GroupView,
    rule_batch_stats_not_folded,
    rule_no_merge_across_nonlinearity,
)
from fusiontune.sim.capacity import cascade_elems
from fusiontune.sim.cost import default_hw, group_cost, min_weight_bytes
from fusiontune.sim.groupmodel import GroupModel, group_model, weight_reload
from fusiontune.sim.hardware import HardwareConfig


def capacity_bound(graph: Graph, hw: HardwareConfig | None = None) -> int:
    """Bytes no plan of ``graph`` on ``hw`` can go below (see the module docstring)."""
    hw = hw or default_hw()
    model = group_model(graph, hw)
    st = model.st
    ix = graph_index(graph)
    opaque = walk_masks(graph).opaque
    cache: dict[int, bool] = {}
    path = _longest_path(ix)
    on_path = {}  # tensor -> position k of path edge path[k] -> path[k + 1]
    for k in range(len(path) - 1):
        t = _edge_tensor(model, path[k], path[k + 1])
        if t is not None and t not in on_path:
            on_path[t] = k
    alone = [0] * len(st.numel)  # per-tensor bound, elements
    for t, numel in enumerate(st.numel):
        readers = st.consumers[t]
        if not readers and not st.is_output[t]:
            continue
        n_opaque = (readers & opaque).bit_count()
        rest = readers & ~opaque
        p = st.producer[t]
        if p < 0:  # graph input: read by every group holding a reader
            reads = n_opaque + (1 if rest else 0)
            if rest.bit_count() > 1 and not _possible(model, ix, rest, opaque, cache):
                reads += 1
            alone[t] = numel * reads
            continue
        reads = n_opaque
        if rest and (opaque >> p & 1 or not _possible(model, ix, rest | 1 << p, opaque, cache)):
            reads += 1
        written = reads > 0 or st.is_output[t]
        alone[t] = numel * (reads + (1 if written else 0))
    internal = _internal_tensors(model, path)
    total_elems = sum(v for t, v in enumerate(alone) if t not in on_path and t not in internal)
    total_elems += _path_bound(model, ix, path, on_path, alone, opaque, cache, internal)
    total = total_elems * hw.act_bytes + _opaque_rereads(graph, model, opaque, hw)
    if not hw.weights_resident:
        total += min_weight_bytes(graph, hw) + _reload_bound(model)
    return total


def _reload_bound(model: GroupModel) -> int:
    """Weight and input re-reads every plan pays for its oversized convolutions (bytes).

    With ``hw.weight_reload`` and weights loaded per inference, a group of one matrix that
    needs more than ``n_crossbars`` crossbars runs tiled and re-reads weights and inputs
    (:func:`~fusiontune.sim.groupmodel.weight_reload`, a function of the matrix and of the
    group's activation reads that never decreases as the reads grow). A LINEAR op ``v`` that
    is not FC-like cannot be merged (P3), and a second matrix in its group would add
    crossbars to an already over-full chip, so in every feasible plan ``v``'s group has ``v``'s
    matrix alone and pays this tiling; distinct such ops sit in distinct groups, so their
    re-reads add up. The group's reads are bounded below by :func:`_least_reads` of ``v``'s
    inputs. The rest of the bound counts activations once and weights once, never these
    re-reads.
    """
    hw = model.hw
    if not hw.weight_reload or hw.weights_resident:
        return 0
    st = model.st
    static = walk_masks(model.graph)
    least = _least_reads(model, static.opaque)
    total = 0
    for v, matrix in enumerate(st.matrix):
        lin = model.lin.get(v)
        if matrix is None or lin is None or st.cls[v] is not OpClass.LINEAR:
            continue
        if static.fc_like >> v & 1 or lin.crossbars <= hw.n_crossbars:
            continue
        reads = max((least[t] for t in st.acts[v]), default=0)
        weights, inputs, _ = weight_reload(matrix, hw, reads * hw.act_bytes, lin.crossbars)
        total += weights + inputs
    return total


def _least_reads(model: GroupModel, opaque: int) -> list[int]:
    """Per tensor, the fewest elements a group without a second matrix reads to have it:
    the tensor itself, or, when its producer could join (not LINEAR, not OPAQUE), what it
    takes to have the producer's inputs (each needs its own reads, so the largest of them
    bounds all of them together). Ops are indexed in topological order."""
    st = model.st
    least = list(st.numel)
    made: list[list[int]] = [[] for _ in st.acts]
    for t, p in enumerate(st.producer):
        if p >= 0:
            made[p].append(t)
    for p, outs in enumerate(made):
        if st.cls[p] is OpClass.LINEAR or opaque >> p & 1:
            continue
        inner = max((least[u] for u in st.acts[p]), default=0)
        for t in outs:
            least[t] = min(least[t], inner)
    return least


def _possible(
    model: GroupModel, ix: GraphIndex, members: int, opaque: int, cache: dict[int, bool]
) -> bool:
    """Whether some feasible group could hold every op of ``members`` (monotone test)."""
    hit = cache.get(members)
    if hit is not None:
        return hit
    hull = members | graph_index(model.graph).between(members, tuple(bits(members)))
    ok = True
    hw = model.hw
    room = hw.buffer_bytes // hw.act_bytes  # elements
    if hull & opaque or _moment_lb(model, hull) > room or _cascade_lb(model, hull) > room:
        ok = False
    else:  # crossbars of the hull as one stream group: its matrices side by side
        matrices = [model.lin[i] for i in bits(hull) if i in model.lin]
        if sum(m.crossbars for m in matrices) > hw.n_crossbars and _no_merge(model, hull):
            ok = hw.weights_resident is False and len(matrices) < 2
    cache[members] = ok
    return ok


def _moment_lb(model: GroupModel, hull: int) -> int:
    """The largest moment one member op needs on its own (a bound no superset goes below)."""
    return max((model.st.cap_lb[i] for i in bits(hull)), default=0)


def _cascade_lb(model: GroupModel, hull: int) -> int:
    """The largest cascade moment of a window op of ``hull`` (:func:`cascade_elems`)."""
    inside = set(bits(hull))
    return max((cascade_elems(model.graph, v, inside.__contains__) for v in inside), default=0)


def _no_merge(model: GroupModel, hull: int) -> bool:
    """No group holding ``hull`` can be a P3 merge, so its crossbars can only add up.

    Either a LINEAR member no merge can take (not FC-like), or a merge the legality rules
    refuse for the hull itself: a nonlinearity between two of its LINEAR ops (rule 2) or a
    normalization with batch statistics (rule 3). Both refusals hold for every superset of the
    hull (the ops between its LINEAR ops stay between them; a member stays a member), so the
    test stays monotone, as :func:`_possible` needs.
    """
    fc = walk_masks(model.graph).fc_like
    if any(model.st.cls[i] is OpClass.LINEAR and not fc >> i & 1 for i in bits(hull)):
        return True
    view = GroupView.of(graph_index(model.graph), bits(hull), PlannerConfig())
    return (
        rule_no_merge_across_nonlinearity(view, Mode.MERGE) is not None
        or rule_batch_stats_not_folded(view, Mode.MERGE) is not None
    )


def _opaque_rereads(graph: Graph, model: GroupModel, opaque: int, hw: HardwareConfig) -> int:
    """Bytes every OPAQUE op reads beyond one read of each of its activation inputs (bytes).

    An OPAQUE op is a group of its own in every plan (rule 6), so what it reads is its
    singleton's schedule, the same in every plan: a fused attention whose K and V stream past
    several Q tiles reads them once per tile (``sim/attention.py``), a tiled singleton re-reads
    halos. The per-tensor terms of :func:`capacity_bound` charge such a reader one read of
    each input; this adds the rest. An op that cannot run even tiled adds nothing (no plan
    holds it, and the optimizer says so).
    """
    st = model.st
    extra = 0
    for i in bits(opaque):
        op = graph.ops[i]
        cost = group_cost(graph, Group((op.name,), Mode.SINGLE), hw)
        if cost.violations:
            continue
        once = sum(st.numel[t] for t in set(st.acts[i])) * hw.act_bytes
        extra += max(0, cost.act_read_bytes - once)
    return extra


def _longest_path(ix: GraphIndex) -> list[int]:
    """One longest path (most ops) of the op graph, in order."""
    n = ix.n
    length = [1] * n
    prev = [-1] * n
    for v in range(n):
        for p in ix.preds[v]:
            if length[p] + 1 > length[v]:
                length[v], prev[v] = length[p] + 1, p
    if n == 0:
        return []
    v = max(range(n), key=length.__getitem__)
    out = []
    while v >= 0:
        out.append(v)
        v = prev[v]
    return out[::-1]


def _edge_tensor(model: GroupModel, p: int, c: int) -> int | None:
    """The activation tensor op ``p`` writes and op ``c`` reads (the first such)."""
    st = model.st
    for t in st.acts[c]:
        if st.producer[t] == p:
            return t
    return None


def _path_bound(
    model: GroupModel,
    ix: GraphIndex,
    path: list[int],
    on_path: dict[int, int],
    alone: list[int],
    opaque: int,
    cache: dict[int, bool],
    internal: dict[int, tuple[int, list[int]]],
) -> int:
    """Least cost of the path tensors over segmentations into possibly-feasible segments.

    Two kinds of tensors are priced per segmentation. An edge tensor of the path that some op
    off the path also reads (or a graph output) costs ``alone`` inside a segment and at least
    a write and a read when the path is cut at its edge. An *internal* tensor (``internal``:
    its producer and every reader on the path, not a graph output) costs exactly what the
    segmentation forces: a write when a reader lies past its producer's segment, and a read
    for every later segment holding a reader (distinct segments are distinct groups). Skip
    connections whose ends both lie on the path are internal: cutting a residual block
    between its two ends costs the skip tensor too.
    """
    st = model.st
    n_edges = len(path) - 1
    if n_edges <= 0:
        return sum(alone[t] for t in on_path)
    inside = [0] * n_edges  # cost of edge k's tensor when both ends share a group
    cut = [0] * n_edges  # ... when the path is cut there
    for t, k in on_path.items():
        if t in internal:
            continue
        inside[k] = alone[t]
        cut[k] = max(alone[t], 2 * st.numel[t])
    prefix = [0]
    for k in range(n_edges):
        prefix.append(prefix[-1] + inside[k])
    made_at: list[list[int]] = [[] for _ in path]  # internal tensors by producer position
    read_at: list[list[int]] = [[] for _ in path]  # ... by reader position
    for t, (a, readers) in internal.items():
        made_at[a].append(t)
        for b in readers:
            read_at[b].append(t)
    # lo[j]: the first op position i such that path[i..j] could share a feasible group
    lo = [0] * len(path)
    i = 0
    for j in range(len(path)):
        while i < j and not _segment_ok(model, ix, path, i, j, opaque, cache):
            i += 1
        lo[j] = i
    inf = float("inf")
    best = [inf] * len(path)  # best[j]: path[0..j] segmented, a segment ends at j
    for j in range(len(path)):
        value = inf
        writes = reads = 0  # internal tensors' cost of the segment path[start..j]
        in_seg: dict[int, int] = {}  # internal tensor -> its readers in the segment
        for start in range(j, lo[j] - 1, -1):
            for t in read_at[start]:
                in_seg[t] = in_seg.get(t, 0) + 1
                if in_seg[t] == 1 and internal[t][0] < start:
                    reads += st.numel[t]
            for t in made_at[start]:
                if in_seg.get(t, 0):
                    reads -= st.numel[t]  # its readers here share its segment
                if internal[t][1][-1] > j:
                    writes += st.numel[t]
            before = 0.0 if start == 0 else best[start - 1] + cut[start - 1]
            value = min(value, before + prefix[j] - prefix[start] + writes + reads)
        best[j] = value
    return int(best[-1])


def _internal_tensors(model: GroupModel, path: list[int]) -> dict[int, tuple[int, list[int]]]:
    """Tensors made and read only on ``path`` (not graph outputs): tensor -> (producer's
    position, readers' positions in path order)."""
    st = model.st
    pos = {v: k for k, v in enumerate(path)}
    out: dict[int, tuple[int, list[int]]] = {}
    for t in range(len(st.numel)):
        p, readers = st.producer[t], st.consumers[t]
        if p not in pos or not readers or st.is_output[t]:
            continue
        at = [pos.get(r, -1) for r in bits(readers)]
        if min(at) >= 0:
            out[t] = (pos[p], sorted(at))
    return out


def _segment_ok(
    model: GroupModel, ix: GraphIndex, path: list[int], i: int, j: int, opaque: int,
    cache: dict[int, bool],
) -> bool:  # fmt: skip
    members = 0
    for v in path[i : j + 1]:
        members |= 1 << v
    return _possible(model, ix, members, opaque, cache)


# ---- attention (pattern P5) ---------------------------------------------------------------------
def attention_bounds(graph: Graph, hw: HardwareConfig | None = None) -> list[dict[str, object]]:
    """Per fused attention of ``graph``: its compulsory traffic, its IO lower bound in
    ``hw.buffer_bytes`` (:func:`fusiontune.sim.attention.attention_io_bound`: Hong–Kung's
    segment argument) and the traffic of its flash schedule, all in bytes."""
    import math

    from fusiontune.ops import AttentionRole, attention_role
    from fusiontune.planner.plan import Group, Mode
    from fusiontune.sim.attention import attention_io_bound, flash_shape
    from fusiontune.sim.tiling import Scheme, singleton_tiling

    hw = hw or default_hw()
    ab = hw.act_bytes
    rows: list[dict[str, object]] = []
    for op in graph.ops:
        if attention_role(op) is not AttentionRole.FUSED:
            continue
        tiling = singleton_tiling(graph, Group((op.name,), Mode.SINGLE), hw)
        if tiling is None or tiling.scheme is not Scheme.ATTENTION:
            continue
        bound = attention_io_bound(graph, op, hw.buffer_bytes // ab) * ab
        fused = (tiling.read_elems + tiling.write_elems) * ab
        rows.append({
            "op": op.name,
            "compulsory_bytes": flash_shape(graph, op).compulsory() * ab,
            "bound_bytes": bound,
            "fused_bytes": fused,
            "fused_over_bound": fused / bound if bound else math.inf,
            "tile": tiling.tile,
        })  # fmt: skip
    return rows
