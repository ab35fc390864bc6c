"""Reference plans: unfused, greedy, random, and the search's deterministic repair.

Mode policy for groups with two or more LINEAR ops (the only groups with a choice):

- :func:`greedy_plan` merges (P3) when merge is legal and the merged weight matrix is no
  larger than the separate ones (merging FC(d->r)-FC(r->d) with r << d would grow the weights
  from 2dr to d^2), otherwise streams (P4).
- :func:`plan_from_edges` merges when merge is legal and ``merge_choices`` says so for the
  group's first LINEAR op, otherwise streams; when only one of the two is legal, that one.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from fusiontune.errors import IllegalPlanError
from fusiontune.ir.graph import Graph
from fusiontune.ir.opclass import OpClass
from fusiontune.ops import AffineKind, affine_kind, matrix_shape
from fusiontune.planner._index import GraphIndex, bits, graph_index
from fusiontune.planner.candidates import candidate_edges, edge_index
from fusiontune.planner.groups import Group, Mode, PlannerConfig
from fusiontune.planner.legality import GroupView, legal_modes, quotient_cycle
from fusiontune.planner.plan import Plan, singleton_plan

GroupPredicate = Callable[[Group], bool]
"""``fits(group)``: whether :func:`greedy_plan` may form ``group`` (e.g. feasible on a hardware)."""

DEFAULT_EDGE_PROBABILITY_RANGE = (0.0, 1.0)  # random_plan draws its fusion density from this
MERGE_PROBABILITY = 0.5  # random_plan: chance to merge a chain where merge is legal


def unfused_plan(graph: Graph) -> Plan:
    """Every op in a group of its own."""
    return singleton_plan(graph)


def greedy_plan(
    graph: Graph,
    config: PlannerConfig | None = None,
    *,
    fits: GroupPredicate | None = None,
) -> Plan:
    """Deterministic maximal legal (and, given ``fits``, feasible) fusion.

    Candidate edges are visited in topological order, repeatedly, until a full pass changes
    nothing; each joins the two groups at its ends when the union is a legal group and the
    quotient graph stays acyclic. This runs in three phases, so that groups form around
    layers first: (1) unions with at most one LINEAR op (P1/P2), (2) unions that can merge
    (P3), (3) any legal union (P4 stream). The last phase runs to a fixed point over every
    edge, so the result is maximal: joining the two groups at the ends of any edge gives an
    illegal plan. Modes: see the module docstring.

    Without ``fits`` nothing bounds a group but legality: on a network with no OPAQUE barrier
    the greedy plan is one whole-network group. With ``fits`` a union is taken only when
    ``fits(group)`` holds for the joined group in the mode it would get, so every group of the
    result satisfies it. The hardware-aware greedy (``fits``: the group is feasible on a
    hardware, rule 7) is :func:`fusiontune.sim.greedy.greedy_plan`, the planner knowing
    nothing of hardware.
    """
    cfg = config or PlannerConfig()
    ix = graph_index(graph)
    group_of = list(range(ix.n))
    members: dict[int, set[int]] = {i: {i} for i in range(ix.n)}
    edges = _joinable_edges(ix)
    for phase in _GREEDY_PHASES:
        changed = True
        while changed:
            changed = False
            for p, c in edges:
                gp, gc = group_of[p], group_of[c]
                if gp == gc:
                    continue
                union = members[gp] | members[gc]
                view = GroupView.of(ix, union, cfg)
                modes = legal_modes(view)
                if not modes or not phase(view, modes):
                    continue
                if fits is not None and not fits(_group(view, modes)):
                    continue
                trial = [gp if g == gc else g for g in group_of]
                if quotient_cycle(ix, trial):
                    continue
                group_of = trial
                members[gp] = union
                del members[gc]
                changed = True
    return _plan(ix, members.values(), cfg, _merge_shrinks)


def _joinable_edges(ix: GraphIndex) -> list[tuple[int, int]]:
    """Activation edges no OPAQUE op blocks (at an end or on a path between the ends), in
    (producer, consumer) order: a superset of the candidate edges costing no walk.

    :func:`greedy_plan` visits these instead of ``edge_index``: an edge outside the candidates
    never changes its state (a legal union holding both ends would make it a candidate), so
    the plan is the same, without walking the lattice (exponential on wide graphs).
    """
    opaque = ix.mask([i for i, cls in enumerate(ix.classes) if cls is OpClass.OPAQUE])
    out = []
    for p, c, _ in ix.edges:
        hull = (1 << p) | (1 << c) | (ix.desc[p] & ix.anc[c])
        if not hull & opaque:
            out.append((p, c))
    return out


def _group(view: GroupView, modes: tuple[Mode, ...]) -> Group:
    """The group ``view`` in the mode :func:`greedy_plan` gives it (see the module docstring)."""
    mode = modes[0]
    if len(modes) > 1:
        mode = Mode.MERGE if _merge_shrinks(view) else Mode.STREAM
    return Group(tuple(view.ix.names[i] for i in view.members), mode)


_GREEDY_PHASES: tuple[Callable[[GroupView, tuple[Mode, ...]], bool], ...] = (
    lambda view, modes: len(view.linear) <= 1,
    lambda view, modes: len(view.linear) <= 1 or Mode.MERGE in modes,
    lambda view, modes: True,
)


def plan_from_edges(
    graph: Graph,
    fused_edges: Iterable[tuple[str, str]],
    merge_choices: Mapping[str, bool | str] | None = None,
    config: PlannerConfig | None = None,
) -> Plan:
    """Repair a choice of edges into a legal plan, deterministically.

    Groups are the connected components of the chosen edges, split where needed: ops are
    visited in topological order and each joins the groups of its chosen-edge producers
    (all of them if the union is legal, else the latest single one that stays legal, else
    none), never closing a cycle of groups. A component that is itself a legal group and
    forms no cycle comes back whole. Pairs that are not candidate edges are ignored.

    Args:
        graph: the graph.
        fused_edges: ``(producer op, consumer op)`` pairs to fuse.
        merge_choices: first LINEAR op of a multi-LINEAR group -> merge (``True`` or
            ``"merge"``) or stream (``False``, ``"stream"``, or absent).
        config: planner configuration.

    Raises:
        IllegalPlanError: an edge names an op that is not in the graph.
    """
    cfg = config or PlannerConfig()
    ix = graph_index(graph)
    pos = graph.op_index
    allowed = set(edge_index(graph, cfg))
    chosen_preds: list[list[int]] = [[] for _ in range(ix.n)]
    for producer, consumer in fused_edges:
        for name in (producer, consumer):
            if name not in pos:
                raise IllegalPlanError(
                    f"plan_from_edges: edge ({producer!r}, {consumer!r}) names op '{name}', "
                    f"not in graph '{graph.name}'"
                )
        pair = (pos[producer], pos[consumer])
        if pair in allowed and pair[0] not in chosen_preds[pair[1]]:
            chosen_preds[pair[1]].append(pair[0])
    group_of = list(range(ix.n))
    members: dict[int, set[int]] = {i: {i} for i in range(ix.n)}
    masks = [1 << i for i in range(ix.n)]  # members of each group as a bitmask
    for x in range(ix.n):
        pred_groups = sorted({group_of[p] for p in chosen_preds[x]})
        if not pred_groups:
            continue
        options = [pred_groups] if len(pred_groups) > 1 else []
        options += [[g] for g in sorted(pred_groups, key=lambda g: -max(members[g]))]
        for option in options:
            union_mask = masks[x]
            for g in option:
                union_mask |= masks[g]
            if not _modes_of(ix, cfg, union_mask) or _closes_cycle(
                ix, group_of, masks, union_mask, x
            ):
                continue
            union = set().union(*(members[g] for g in option)) | {x}
            target = option[0]
            for i in union:
                group_of[i] = target
            for g in option:
                del members[g]
            del members[x]
            members[target] = union
            masks[target] = union_mask
            break
    choices = merge_choices or {}

    def wants_merge(view: GroupView) -> bool:
        return _is_merge_choice(choices.get(ix.names[view.linear[0]], False))

    return _plan(ix, members.values(), cfg, wants_merge)


_MODES: weakref.WeakKeyDictionary[GraphIndex, dict[tuple[PlannerConfig, int], tuple[Mode, ...]]]
_MODES = weakref.WeakKeyDictionary()
"""Legal modes of the groups :func:`plan_from_edges` has tried, per graph, by (config, op
bitmask): a search repairs hundreds of assignments of one graph, most of them sharing groups."""

MODES_CACHE_ENTRIES = 1 << 18
"""Groups remembered per graph before the cache starts over (a few tens of MB at most)."""


def _modes_of(ix: GraphIndex, cfg: PlannerConfig, mask: int) -> tuple[Mode, ...]:
    """``legal_modes`` of the group of ops ``mask`` (cached)."""
    cache = _MODES.setdefault(ix, {})
    key = (cfg, mask)
    modes = cache.get(key)
    if modes is None:
        if len(cache) >= MODES_CACHE_ENTRIES:
            cache.clear()
        modes = cache[key] = legal_modes(GroupView.of(ix, bits(mask), cfg))
    return modes


def _closes_cycle(
    ix: GraphIndex, group_of: list[int], masks: list[int], union: int, x: int
) -> bool:
    """Whether making the ops of ``union`` (some groups and op ``x``) one group closes a cycle
    of groups, i.e. :func:`quotient_cycle` of the merged assignment is not empty.

    The groups are acyclic before (every accepted merge keeps them so), so a new cycle passes
    through the merged group: a path that leaves ``union`` and comes back. Ops are merged in
    topological order, so every op after ``x`` is still alone and leads only to later ops:
    the search walks the groups of ops before ``x`` reachable from ``union``, not the graph.
    """
    reached = 0
    stack = [s for i in bits(union) for s in ix.succs[i] if not union >> s & 1]
    while stack:
        o = stack.pop()
        if o > x or reached >> o & 1:
            continue
        group = masks[group_of[o]]
        reached |= group
        for m in bits(group):
            for s in ix.succs[m]:
                if union >> s & 1:
                    return True
                if not reached >> s & 1:
                    stack.append(s)
    return False


TVM_EPILOGUE_CLASSES = frozenset({OpClass.ELEMWISE, OpClass.BINARY, OpClass.LAYOUT})
"""Op classes a TVM-style fuser attaches to a producer (injective/element-wise ops)."""

TVM_PRODUCER_CLASSES = TVM_EPILOGUE_CLASSES | {OpClass.LINEAR, OpClass.AFFINE}
"""Op classes that take such an epilogue (a BatchNorm op keeps its ReLU, not its conv)."""


def tvm_like_plan(graph: Graph, config: PlannerConfig | None = None) -> Plan:
    """The fusion a general-purpose compiler would do, as a baseline.

    Modelled on TVM's FuseOps as this project's brief describes it: a LINEAR op or an
    element-wise op (BatchNorm included) absorbs the element-wise, binary, layout and constant
    affine ops (a bias Add) that follow it; but a per-channel normalization never joins its
    convolution, pooling (WINDOW) never joins anything and two LINEAR ops never share a group
    (no P2, P3 or P4).
    """
    ix = graph.op_index
    producer_of: dict[str, str] = {}
    for src, dst in candidate_edges(graph, config):
        s_op, d_op = graph.op(src), graph.op(dst)
        if (
            (
                d_op.op_class in TVM_EPILOGUE_CLASSES
                or (d_op.op_class is OpClass.AFFINE and affine_kind(d_op) is not AffineKind.CHANNEL)
            )
            and s_op.op_class in TVM_PRODUCER_CLASSES
            # an op joins one producer's group (a residual Add never joins two convs)
            and (dst not in producer_of or ix[src] > ix[producer_of[dst]])
        ):
            producer_of[dst] = src
    edges = [(src, dst) for dst, src in producer_of.items()]
    return plan_from_edges(graph, edges, None, config)


def random_plan(
    graph: Graph, rng: np.random.Generator, config: PlannerConfig | None = None
) -> Plan:
    """A random legal plan: random candidate edges and merge choices, repaired.

    The fusion density is itself drawn uniformly, so samples range from nearly unfused to
    nearly greedy. Not uniform over plans; every plan returned is legal.
    """
    cfg = config or PlannerConfig()
    from fusiontune.planner.candidates import candidate_edges, merge_candidates

    edges = candidate_edges(graph, cfg)
    density = rng.uniform(*DEFAULT_EDGE_PROBABILITY_RANGE)
    keep = rng.random(len(edges)) < density
    chosen = [e for e, k in zip(edges, keep) if k]
    merges = merge_candidates(graph, cfg)
    flips = rng.random(len(merges)) < MERGE_PROBABILITY
    return plan_from_edges(graph, chosen, dict(zip(merges, map(bool, flips))), cfg)


def _is_merge_choice(value: object) -> bool:
    """``True``/``1`` or ``"merge"`` (a :class:`Mode` too) choose merge; anything else streams."""
    if isinstance(value, str):
        return value == Mode.MERGE.value
    return value is True or (isinstance(value, (int, np.integer)) and value == 1)


def merged_weight_count(view: GroupView) -> tuple[int, int]:
    """(weights of the merged matrix, weights of the separate LINEAR ops) of a chain."""
    graph = view.ix.graph
    separate = sum(math.prod(graph.tensor(view.op(i).inputs[1]).shape) for i in view.linear)
    first, last = view.op(view.linear[0]), view.op(view.linear[-1])
    rows = matrix_shape(graph, first)[0]  # input features of the chain
    cols = matrix_shape(graph, last)[1]  # output features
    return rows * cols, separate


def _merge_shrinks(view: GroupView) -> bool:
    merged, separate = merged_weight_count(view)
    return merged <= separate


def _plan(
    ix: GraphIndex,
    sets: Iterable[set[int]],
    cfg: PlannerConfig,
    wants_merge: Callable[[GroupView], bool],
) -> Plan:
    groups = []
    for s in sets:
        view = GroupView.of(ix, s, cfg)
        modes = _modes_of(ix, cfg, ix.mask(list(s)))
        if not modes:  # cannot happen: every set was checked when formed
            raise AssertionError(f"internal: group {sorted(s)} has no legal mode")
        mode = modes[0]
        if len(modes) > 1:  # merge and stream both legal
            mode = Mode.MERGE if wants_merge(view) else Mode.STREAM
        groups.append(Group(tuple(ix.names[i] for i in view.members), mode))
    return Plan.of(ix.graph, groups)
