"""Legality rules of DESIGN §5, one small named function each.

Every rule takes a :class:`GroupView` (a set of ops of one graph, with derived facts) and a
:class:`~fusiontune.planner.groups.Mode`, and returns a :class:`Refusal` saying why in words,
or ``None`` when it has no objection. :func:`check_group` runs them all; :func:`check_plan`
checks a whole plan (partition, every group, acyclic quotient).

Rule numbers follow DESIGN §5. Rule 7 (capacity) belongs to the simulator
(``fusiontune.sim.needs``). Number 0 is used for refusals that are not one of the numbered
rules: the mode does not fit the group (``mode``), or no enabled fusion pattern has this
shape (``pattern``).

What each mode admits (every group: connected over activation edges, convex, no OPAQUE
op unless alone; no size limit unless the user sets ``PlannerConfig.max_group_size``):

- ``fused`` (>= 2 ops, <= 1 LINEAR): P1 ops (AFFINE, ELEMWISE, BINARY, LAYOUT, STATS) around
  at most one anchor, a LINEAR or a WINDOW, before or after it (prologues included:
  BN -> padded Conv fuses, it is not folded); at most one WINDOW, and with a LINEAR it must
  follow it (P2). STATS ops are two-pass members. Outputs read outside are written.
- ``merge`` (P3, >= 2 LINEAR): one path FC (AFFINE|LAYOUT)* FC ... starting at its first
  LINEAR, every LINEAR FC-like, AFFINE constants scalar or per-feature, LAYOUT ops keeping
  the feature axis, no intermediate read outside or a graph output; then an optional P1
  epilogue after the last LINEAR.
- ``stream`` (P4, >= 2 LINEAR): any such group; each WINDOW follows some LINEAR (P2).
  Intermediates read outside are written, not refused.

Pattern ablation: P1-class members need P1, a WINDOW after a LINEAR needs P2, merge needs
P3, stream needs P4.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property

from fusiontune.errors import IllegalPlanError
from fusiontune.ir.graph import Graph, Op
from fusiontune.ir.opclass import OpClass
from fusiontune.ops import (
    AffineKind,
    affine_kind,
    axis_permutation,
    is_linear_map,
    is_nonlinear_form,
    matrix_on_channels,
    registry,
    uses_batch_stats,
)
from fusiontune.ops.window import has_padding
from fusiontune.planner._index import GraphIndex, bits, graph_index
from fusiontune.planner.groups import Mode, Partition, PlannerConfig

RULE_SHAPE = 0  # not a numbered rule: mode/pattern mismatch
RULE_CONVEX = 1
RULE_NONLINEAR = 2
RULE_BATCH_STATS = 3
RULE_FANOUT = 4
RULE_PADDED_FOLD = 5
RULE_OPAQUE = 6

# P1 members: element-wise ops that ride along with a producer in one pass (DESIGN §4)
P1_CLASSES = frozenset(
    {OpClass.AFFINE, OpClass.ELEMWISE, OpClass.BINARY, OpClass.LAYOUT, OpClass.STATS}
)
CONV_CHANNEL_AXIS = 1  # NCHW (DESIGN §2)


@dataclass(frozen=True)
class Refusal:
    """Why a group cannot be formed.

    Attributes:
        rule: DESIGN §5 rule number (0: the mode or pattern does not fit).
        name: short rule name ("convex", "nonlinear", ...).
        message: one sentence naming the ops involved.
    """

    rule: int
    name: str
    message: str

    def __str__(self) -> str:
        return f"rule {self.rule} ({self.name}): {self.message}"


@dataclass(frozen=True, eq=False)
class GroupView:
    """A candidate group (set of ops) with the facts the rules need, computed once."""

    ix: GraphIndex
    members: tuple[int, ...]
    mask: int
    config: PlannerConfig

    @classmethod
    def of(cls, ix: GraphIndex, members: Iterable[int], config: PlannerConfig) -> GroupView:
        ms = tuple(sorted(set(members)))
        return cls(ix, ms, ix.mask(ms), config)

    def op(self, i: int) -> Op:
        return self.ix.graph.ops[i]

    def name(self, i: int) -> str:
        return self.ix.names[i]

    @cached_property
    def linear(self) -> tuple[int, ...]:
        return tuple(i for i in self.members if self.ix.classes[i] is OpClass.LINEAR)

    @cached_property
    def linear_mask(self) -> int:
        return self.ix.mask(self.linear)

    @cached_property
    def windows(self) -> tuple[int, ...]:
        return tuple(i for i in self.members if self.ix.classes[i] is OpClass.WINDOW)

    @cached_property
    def has_p1(self) -> bool:
        return any(self.ix.classes[i] in P1_CLASSES for i in self.members)

    @cached_property
    def between(self) -> tuple[int, ...]:
        """Non-LINEAR members on a path from one LINEAR member to another."""
        d = a = 0
        for i in self.linear:
            d |= self.ix.desc[i]
            a |= self.ix.anc[i]
        return tuple(bits(d & a & self.mask & ~self.linear_mask))

    def describe(self, i: int) -> str:
        op = self.op(i)
        return f"{op.op_type} '{op.name}'"


RuleFn = Callable[[GroupView, Mode], "Refusal | None"]


# ---- rules that hold for every mode ------------------------------------------------------
def rule_size_cap(view: GroupView, mode: Mode) -> Refusal | None:
    """The optional user cap ``config.max_group_size`` (not a legality rule; off by default)."""
    cap = view.config.max_group_size
    if cap is not None and len(view.members) > cap:
        return Refusal(
            RULE_SHAPE,
            "size-cap",
            f"group of {len(view.members)} ops starting at '{view.name(view.members[0])}' "
            f"exceeds the configured max_group_size={cap} (a user cap, not a legality rule)",
        )
    return None


def rule_opaque_alone(view: GroupView, mode: Mode) -> Refusal | None:
    """Rule 6: an OPAQUE op (incl. a MatMul of two activations) is always alone."""
    if len(view.members) == 1:
        return None
    for i in view.members:
        if view.ix.classes[i] is OpClass.OPAQUE:
            reason = registry.unsupported_reason(view.ix.graph, view.op(i))
            barrier = registry.barrier_reason(view.op(i))
            why = (
                f"unsupported {reason}"
                if reason
                else barrier or "no constant weight or unknown semantics"
            )
            return Refusal(
                RULE_OPAQUE,
                "opaque",
                f"{view.describe(i)} is OPAQUE ({why}) and must be a group of its own",
            )
    return None


def rule_connected_convex(view: GroupView, mode: Mode) -> Refusal | None:
    """Rule 1: a group is connected over activation edges and convex."""
    if len(view.members) == 1:
        return None
    if not view.ix.is_connected(view.mask, view.members):
        return Refusal(
            RULE_CONVEX,
            "convex",
            "ops " + _names(view, view.members) + " are not connected by activation edges",
        )
    outside = view.ix.between(view.mask, view.members)
    if outside:
        return Refusal(
            RULE_CONVEX,
            "convex",
            "a path leaves the group through "
            + _names(view, bits(outside))
            + " and re-enters it (group not convex)",
        )
    return None


def rule_mode_fits(view: GroupView, mode: Mode) -> Refusal | None:
    """Mode vs. shape: single = 1 op; fused = >=2 ops, <=1 LINEAR; merge/stream >=2 LINEAR."""
    n, n_lin = len(view.members), len(view.linear)
    first = view.name(view.members[0])
    if mode is Mode.SINGLE and n != 1:
        why = f"mode 'single' needs exactly one op, group at '{first}' has {n}"
    elif mode is not Mode.SINGLE and n == 1:
        why = f"op '{first}' alone must have mode 'single', not '{mode.value}'"
    elif mode is Mode.FUSED and n_lin > 1:
        why = (
            f"mode 'fused' allows at most one LINEAR op; group at '{first}' has {n_lin} "
            "(use 'merge' or 'stream')"
        )
    elif mode in (Mode.MERGE, Mode.STREAM) and n_lin < 2:
        why = f"mode '{mode.value}' needs at least two LINEAR ops; group at '{first}' has {n_lin}"
    else:
        return None
    return Refusal(RULE_SHAPE, "mode", why)


# ---- rules of the P3 matrix-chain merge ---------------------------------------------------
def rule_batch_stats_not_folded(view: GroupView, mode: Mode) -> Refusal | None:
    """Rule 3: a normalization with batch statistics is never folded into a merge."""
    if mode is not Mode.MERGE:
        return None
    for i in view.members:
        if _is_training_bn(view, i):
            return Refusal(
                RULE_BATCH_STATS,
                "batch-stats",
                f"{view.describe(i)} uses batch statistics (training_mode=1): "
                "it cannot be folded into merged weights",
            )
    return None


def rule_no_merge_across_nonlinearity(view: GroupView, mode: Mode) -> Refusal | None:
    """Rule 2: no ELEMWISE, STATS, BINARY, MaxPool or OPAQUE op between merged LINEAR ops."""
    if mode is not Mode.MERGE:
        return None
    for i in view.between:
        if _is_training_bn(view, i):
            continue  # rule 3 speaks for it
        cls = view.ix.classes[i]
        nonlinear = cls in (OpClass.ELEMWISE, OpClass.STATS, OpClass.BINARY, OpClass.OPAQUE)
        nonlinear |= cls is OpClass.WINDOW and not is_linear_map(view.op(i))
        nonlinear |= cls is OpClass.AFFINE and _constant_divided(view, i)
        if nonlinear:
            return Refusal(
                RULE_NONLINEAR,
                "nonlinear",
                f"{view.describe(i)} ({cls.value}) lies between LINEAR ops "
                f"{_names(view, view.linear)}: merging across a nonlinearity changes the "
                "result (stream is legal)",
            )
    return None


def rule_fanout_not_merged(view: GroupView, mode: Mode) -> Refusal | None:
    """Rule 4: a merge intermediate read outside the group, or a graph output, must exist."""
    if mode is not Mode.MERGE:
        return None
    intermediates = list(view.between)
    intermediates += [i for i in view.linear if view.ix.desc[i] & view.linear_mask]
    for i in sorted(intermediates):
        if view.ix.escapes(i, view.mask):
            where = (
                "is a graph output"
                if view.ix.is_output[i]
                else ("is also read by " + _names(view, bits(view.ix.readers[i] & ~view.mask)))
            )
            return Refusal(
                RULE_FANOUT,
                "fan-out",
                f"the output of {view.describe(i)} {where}: a merge would remove it "
                "(stream is legal and writes it)",
            )
    return None


def rule_no_fold_into_padded_conv(view: GroupView, mode: Mode) -> Refusal | None:
    """Rule 5: an AFFINE op is never folded forward into a padded Conv."""
    if mode is not Mode.MERGE:
        return None
    for c in view.linear:
        conv = view.op(c)
        if not has_padding(conv):
            continue
        for a in view.between:
            feeds = view.ix.desc[a] >> c & 1
            direct = not (view.ix.desc[a] & view.ix.anc[c] & view.linear_mask)
            if view.ix.classes[a] is OpClass.AFFINE and feeds and direct:
                return Refusal(
                    RULE_PADDED_FOLD,
                    "padded-fold",
                    f"{view.describe(a)} cannot be folded into padded {view.describe(c)}: "
                    "the padding zeros would be transformed too (fuse it as a prologue instead)",
                )
    return None


def rule_merge_chain_shape(view: GroupView, mode: Mode) -> Refusal | None:
    """P3 shape: FC (AFFINE|LAYOUT)* FC ... as one path, optional P1 epilogue at the end."""
    if mode is not Mode.MERGE:
        return None
    cfg = view.config
    if "P3" not in cfg.patterns:
        return _pattern(view, "merge (P3) is not among the enabled patterns")
    for i in view.linear:
        if not is_fc_like(view.ix.graph, view.op(i)):
            return _pattern(
                view,
                f"{view.describe(i)} is not FC-like (Gemm with transA=0, MatMul with a 2-D "
                "constant weight, or Conv 1x1 stride 1 without padding, group 1)",
            )
        problem = _fc_axis_problem(view, i)
        if problem:
            return _pattern(view, problem)
    lin = view.linear
    for a, b in itertools.pairwise(lin):
        if not view.ix.desc[a] >> b & 1:
            return _pattern(
                view, f"LINEAR ops '{view.name(a)}' and '{view.name(b)}' are not on one chain"
            )
    chain_mask = view.linear_mask | view.ix.mask(view.between)
    first, last = lin[0], lin[-1]
    for i in view.members:
        bit = 1 << i
        if chain_mask & bit:
            inner_preds = [p for p in view.ix.preds[i] if view.mask >> p & 1]
            inner_succs = [s for s in view.ix.succs[i] if view.mask >> s & 1]
            if i != first and len(inner_preds) != 1:
                return _pattern(view, f"{view.describe(i)} joins two paths inside the chain")
            if i == first and inner_preds:
                return _pattern(
                    view,
                    f"a merge chain starts at its first LINEAR '{view.name(first)}' (no prologue)",
                )
            if i != last and len(inner_succs) != 1:
                return _pattern(view, f"{view.describe(i)} branches inside the chain")
            if i in lin:
                continue
            problem = _chain_link_problem(view, i)
            if problem:
                return _pattern(view, problem)
        elif not view.ix.desc[last] >> i & 1:
            return _pattern(
                view,
                f"{view.describe(i)} is neither on the chain nor after its "
                f"last LINEAR '{view.name(last)}'",
            )
        elif view.ix.classes[i] not in P1_CLASSES:
            return _pattern(view, f"{view.describe(i)} cannot be a P1 epilogue of a merge")
        elif "P1" not in cfg.patterns:
            return _pattern(view, "a P1 epilogue needs pattern P1, which is disabled")
    return None


# ---- shapes of fused and stream groups ----------------------------------------------------
def rule_fused_shape(view: GroupView, mode: Mode) -> Refusal | None:
    """P1/P2 shape: one anchor (LINEAR or WINDOW) with P1 ops, or LINEAR ->(P1)* -> WINDOW."""
    if mode is not Mode.FUSED:
        return None
    pats = view.config.patterns
    if len(view.windows) > 1:
        return _pattern(
            view, "a fused group holds at most one WINDOW op, found " + _names(view, view.windows)
        )
    if view.linear and view.windows:
        lin, win = view.linear[0], view.windows[0]
        if not view.ix.desc[lin] >> win & 1:
            return _pattern(
                view,
                f"{view.describe(win)} must follow {view.describe(lin)} to fuse as P2 conv+pool",
            )
        if "P2" not in pats:
            return _pattern(view, "LINEAR followed by WINDOW needs pattern P2, which is disabled")
    if view.has_p1 and "P1" not in pats:
        return _pattern(view, "element-wise members need pattern P1, which is disabled")
    return None


def rule_stream_shape(view: GroupView, mode: Mode) -> Refusal | None:
    """P4 shape: LINEAR stages, each WINDOW the epilogue of an earlier LINEAR stage."""
    if mode is not Mode.STREAM:
        return None
    pats = view.config.patterns
    if "P4" not in pats:
        return _pattern(view, "stream (P4) is not among the enabled patterns")
    for w in view.windows:
        if not view.ix.anc[w] & view.linear_mask:
            return _pattern(view, f"{view.describe(w)} does not follow a LINEAR stage")
        if "P2" not in pats:
            return _pattern(
                view, "a WINDOW after a LINEAR stage needs pattern P2, which is disabled"
            )
    if view.has_p1 and "P1" not in pats:
        return _pattern(view, "element-wise members need pattern P1, which is disabled")
    return None


# structural rules first (cheap, and later rules assume them), then mode-specific ones
STRUCTURE_RULES: tuple[RuleFn, ...] = (
    rule_size_cap,
    rule_opaque_alone,
    rule_connected_convex,
)
MODE_RULES: tuple[RuleFn, ...] = (
    rule_mode_fits,
    rule_batch_stats_not_folded,
    rule_no_merge_across_nonlinearity,
    rule_fanout_not_merged,
    rule_no_fold_into_padded_conv,
    rule_merge_chain_shape,
    rule_fused_shape,
    rule_stream_shape,
)


def view_refusals(view: GroupView, mode: Mode, first_only: bool = False) -> list[Refusal]:
    """Refusals of one group in one mode (structural ones stop the check)."""
    out: list[Refusal] = []
    for rule in STRUCTURE_RULES:
        r = rule(view, mode)
        if r is not None:
            out.append(r)
            if first_only:
                return out
    if out:
        return out
    for rule in MODE_RULES:
        r = rule(view, mode)
        if r is not None:
            out.append(r)
            if first_only or rule is rule_mode_fits:
                return out
    return out


def natural_modes(view: GroupView) -> tuple[Mode, ...]:
    """The modes a group of this shape could take (before legality)."""
    if len(view.members) == 1:
        return (Mode.SINGLE,)
    if len(view.linear) <= 1:
        return (Mode.FUSED,)
    return (Mode.MERGE, Mode.STREAM)


def legal_modes(view: GroupView, structure_checked: bool = False) -> tuple[Mode, ...]:
    """Modes in which the group is legal (empty if none).

    Args:
        view: the group.
        structure_checked: the caller already knows rules 1, 6 and 8 hold (the candidate
            generator builds only connected, convex, capped sets without OPAQUE ops).
    """
    if not structure_checked:
        for rule in STRUCTURE_RULES:
            if rule(view, Mode.SINGLE) is not None:
                return ()
    return tuple(m for m in natural_modes(view) if _mode_legal(view, m))


def _mode_legal(view: GroupView, mode: Mode) -> bool:
    return all(rule(view, mode) is None for rule in MODE_RULES)


def check_group(
    graph: Graph, ops: Iterable[str], mode: Mode | str, config: PlannerConfig | None = None
) -> list[Refusal]:
    """Every refusal of the group ``ops`` in ``mode`` (empty list: legal).

    Args:
        graph: the graph.
        ops: op names of the group (any order).
        mode: the group's mode.
        config: planner configuration (default :class:`PlannerConfig()`).

    Raises:
        IllegalPlanError: an op name is not in the graph, or the group is empty.
    """
    view = _view(graph, ops, config)
    return view_refusals(view, Mode(mode))


def check_plan(
    graph: Graph, plan: Partition, config: PlannerConfig | None = None, source: str = "plan"
) -> None:
    """Raise :class:`IllegalPlanError` unless ``plan`` is a legal plan of ``graph``.

    Checks: every op in exactly one group; every group legal in its mode; the quotient graph
    of groups is acyclic (two convex groups can still depend on each other both ways).
    Messages start with ``source`` (a file name, or "plan") and name the rule and the ops.
    """
    ix = graph_index(graph)
    cfg = _config(config)
    pos = {name: i for i, name in enumerate(ix.names)}
    group_of = [-1] * ix.n
    for g_id, group in enumerate(plan.groups):
        if not group.ops:
            raise IllegalPlanError(f"{source}: groups[{g_id}] is empty")
        for name in group.ops:
            if name not in pos:
                raise IllegalPlanError(
                    f"{source}: groups[{g_id}] names op '{name}', not in graph '{graph.name}'"
                )
            if group_of[pos[name]] >= 0:
                raise IllegalPlanError(
                    f"{source}: op '{name}' is in two groups (groups[{group_of[pos[name]]}] "
                    f"and groups[{g_id}])"
                )
            group_of[pos[name]] = g_id
    missing = [ix.names[i] for i in range(ix.n) if group_of[i] < 0]
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise IllegalPlanError(f"{source}: {len(missing)} op(s) are in no group: {shown}")
    for g_id, group in enumerate(plan.groups):
        view = GroupView.of(ix, (pos[n] for n in group.ops), cfg)
        refusals = view_refusals(view, group.mode, first_only=True)
        if refusals:
            raise IllegalPlanError(
                f"{source}: groups[{g_id}] ({', '.join(group.ops)}; mode {group.mode.value}) "
                f"breaks {refusals[0]}"
            )
    cycle = quotient_cycle(ix, group_of)
    if cycle:
        names = " -> ".join("{" + ", ".join(plan.groups[g].ops) + "}" for g in cycle)
        raise IllegalPlanError(
            f"{source}: rule 1 (convex): groups depend on each other in a cycle: {names}"
        )


def quotient_cycle(ix: GraphIndex, group_of: list[int]) -> list[int]:
    """A cycle of group ids in the quotient graph (empty list when acyclic)."""
    n_groups = max(group_of) + 1 if group_of else 0
    succ: list[set[int]] = [set() for _ in range(n_groups)]
    for p, c, _ in ix.edges:
        gp, gc = group_of[p], group_of[c]
        if gp != gc:
            succ[gp].add(gc)
    state = [0] * n_groups  # 0 new, 1 on stack, 2 done
    for start in range(n_groups):
        if state[start]:
            continue
        stack: list[tuple[int, list[int]]] = [(start, sorted(succ[start]))]
        path = [start]
        state[start] = 1
        while stack:
            node, todo = stack[-1]
            if not todo:
                stack.pop()
                path.pop()
                state[node] = 2
                continue
            nxt = todo.pop()
            if state[nxt] == 1:
                return [*path[path.index(nxt) :], nxt]
            if state[nxt] == 0:
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, sorted(succ[nxt])))
    return []


# ---- helpers -------------------------------------------------------------------------------
def is_fc_like(graph: Graph, op: Op) -> bool:
    """Gemm (transA=0), MatMul with a 2-D constant weight, or Conv 1x1/stride 1/no pad/group 1."""
    return registry.is_fc_like(graph, op)


def _is_training_bn(view: GroupView, i: int) -> bool:
    return view.ix.classes[i] is OpClass.STATS and uses_batch_stats(view.op(i))


def _constant_divided(view: GroupView, i: int) -> bool:
    """``c / x``: classed AFFINE by its operands, but nonlinear in x (the OpDef says)."""
    return is_nonlinear_form(view.ix.graph, view.op(i))


def _feature_axis(rank: int) -> int:
    """Feature axis of a tensor in an FC-like chain: channels for NCHW, else the last."""
    return CONV_CHANNEL_AXIS if rank == 4 else rank - 1


def _fc_axis_problem(view: GroupView, i: int) -> str | None:
    """Why FC-like op ``i`` works on another axis than a chain's features (None: it does not).

    A chain carries its features on the channel axis of a rank-4 tensor and on the last axis
    otherwise (:func:`_feature_axis`); a MatMul on a rank-4 tensor works on its last axis, so
    merging it with a Conv 1x1 (which works on channels) would compose maps over different
    axes.
    """
    op = view.op(i)
    if matrix_on_channels(op):
        return None
    graph = view.ix.graph
    rank = len(graph.tensor(graph.activation_inputs(op)[0]).shape)
    if rank - 1 == _feature_axis(rank):
        return None
    return (
        f"{view.describe(i)} works on the last axis of a rank-{rank} tensor, not on the "
        f"channel axis a merge chain carries its features on"
    )


def _chain_link_problem(view: GroupView, i: int) -> str | None:
    """Why op ``i`` between two merged LINEARs cannot be folded (None: it can)."""
    graph = view.ix.graph
    op = view.op(i)
    cls = view.ix.classes[i]
    x = graph.tensor(graph.activation_inputs(op)[0]).shape
    y = graph.tensor(op.outputs[0]).shape
    if cls is OpClass.LAYOUT:
        if _layout_keeps_features(op, x, y):
            return None
        return f"{view.describe(i)} moves the feature axis ({x} -> {y}); it cannot be folded"
    if cls is not OpClass.AFFINE:
        if cls is OpClass.WINDOW and is_linear_map(op):
            return f"{view.describe(i)} is a pooling WINDOW; a P3 chain holds AFFINE/LAYOUT only"
        return None  # nonlinear classes: rules 2 and 3 speak for them
    if _constant_divided(view, i):
        return None  # rule 2
    kind = affine_kind(op)
    if kind is AffineKind.CHANNEL:
        if len(x) in (2, 4):
            return None
        return f"{view.describe(i)} normalizes axis 1 of a rank-{len(x)} tensor, not its features"
    if kind is AffineKind.SCALAR:
        return None
    const = next(t for t in op.inputs if t and graph.is_constant(t))
    c_shape = graph.tensor(const).shape
    axis = _feature_axis(len(x))
    padded = (1,) * (len(x) - len(c_shape)) + tuple(c_shape)
    if len(padded) == len(x) and all(d == 1 or k == axis for k, d in enumerate(padded)):
        return None
    return (
        f"{view.describe(i)} uses a constant of shape {c_shape}, neither a scalar nor "
        "per-feature: it cannot be folded"
    )


def _layout_keeps_features(op: Op, x: tuple[int, ...], y: tuple[int, ...]) -> bool:
    perm = axis_permutation(op, len(x))
    if perm is not None:
        return len(x) != 4 and perm[-1] == len(x) - 1
    fx = x[_feature_axis(len(x))]
    fy = y[_feature_axis(len(y))]
    if fx != fy:
        return False
    if len(x) == 4 and len(y) != 4:  # NCHW -> rows of features only when H = W = 1
        return x[2] * x[3] == 1
    if len(y) == 4 and len(x) != 4:
        return y[2] * y[3] == 1
    return True


def _pattern(view: GroupView, why: str) -> Refusal:
    return Refusal(RULE_SHAPE, "pattern", why)


def _names(view: GroupView, idx: Iterable[int]) -> str:
    return ", ".join(f"'{view.name(i)}'" for i in idx)


def _config(config: PlannerConfig | None) -> PlannerConfig:
    return config if config is not None else PlannerConfig()


def _view(graph: Graph, ops: Iterable[str], config: PlannerConfig | None) -> GroupView:
    ix = graph_index(graph)
    pos = graph.op_index
    idx = []
    for name in ops:
        if name not in pos:
            raise IllegalPlanError(f"group names op '{name}', which is not in graph '{graph.name}'")
        idx.append(pos[name])
    if not idx:
        raise IllegalPlanError("a group needs at least one op")
    return GroupView.of(ix, idx, _config(config))
