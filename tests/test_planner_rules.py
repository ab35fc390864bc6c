"""One test per legality rule (DESIGN §5), each on the smallest graph that triggers it."""

from __future__ import annotations

import pytest

from fusiontune.errors import ConfigError, IllegalPlanError
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.planner.baselines import greedy_plan, plan_from_edges
from fusiontune.planner.candidates import (
    PlannerConfig,
    candidate_edges,
    candidate_groups,
    group_pattern,
    merge_candidates,
)
from fusiontune.planner.enumerate import count_plans, enumerate_plans
from fusiontune.planner.explain import explain
from fusiontune.planner.legality import check_group, check_plan
from fusiontune.planner.plan import Group, Mode, Plan

WIDTH = 8


def _rules(
    graph: Graph, ops: list[str], mode: str, config: PlannerConfig | None = None
) -> list[int]:
    return [r.rule for r in check_group(graph, ops, mode, config)]


def _fc_chain(middle: str | None) -> Graph:
    """fc1 -> [middle] -> fc2 on a (1, WIDTH) input."""
    b = GraphBuilder("chain")
    x = b.gemm(b.input("x", (1, WIDTH)), WIDTH, name="fc1")
    if middle == "relu":
        x = b.relu(x, name="mid")
    elif middle == "bn":
        x = b.bn(x, name="mid")
    b.gemm(x, WIDTH, name="fc2")
    return b.build()


def _groups(graph: Graph, config: PlannerConfig | None = None) -> set[tuple[tuple[str, ...], str]]:
    return {(g.ops, g.mode.value) for g in candidate_groups(graph, config)}


# ---- rule 2: no merge across a nonlinearity ------------------------------------------------
def test_fc_relu_fc_streams_but_never_merges() -> None:
    g = _fc_chain("relu")
    assert _rules(g, ["fc1", "mid", "fc2"], "merge") == [2]
    assert check_group(g, ["fc1", "mid", "fc2"], "stream") == []
    groups = _groups(g)
    assert (("fc1", "mid", "fc2"), "stream") in groups
    assert not any(mode == "merge" for _, mode in groups)
    assert merge_candidates(g) == ()
    # fc1 | fc1+mid | fc1+mid+fc2 | ...: 1 + 1 (fc1|mid fc2) + 1 (fc1 mid|fc2) + 1 (stream) = 4
    assert count_plans(g) == 4


def test_fc_bn_fc_merges() -> None:
    g = _fc_chain("bn")
    assert check_group(g, ["fc1", "mid", "fc2"], "merge") == []
    assert check_group(g, ["fc1", "mid", "fc2"], "stream") == []
    assert merge_candidates(g) == ("fc1",)
    assert group_pattern(g, Group(("fc1", "mid", "fc2"), Mode.MERGE)) == "P3"
    # 3 ops chain: partitions 1|1|1, 2|1, 1|2, 3 (merge or stream) = 5
    assert count_plans(g) == 5


def test_merge_across_maxpool_refused_avgpool_is_not_a_chain() -> None:
    b = GraphBuilder("pools")
    x = b.conv(b.input("x", (1, 4, 4, 4)), 4, 1, pad=0, name="c1")
    x = b.maxpool(x, 3, stride=1, pad=1, name="mp")
    x = b.conv(x, 4, 1, pad=0, name="c2")
    x = b.avgpool(x, 3, stride=1, pad=1, name="ap")
    b.conv(x, 4, 1, pad=0, name="c3")
    g = b.build()
    assert _rules(g, ["c1", "mp", "c2"], "merge") == [2]
    refusals = check_group(g, ["c2", "ap", "c3"], "merge")
    assert [(r.rule, r.name) for r in refusals] == [(0, "pattern")]


# ---- rule 3: batch statistics are not constants -------------------------------------------
def test_conv_bn_training_never_folded() -> None:
    b = GraphBuilder("bn_train")
    x = b.conv(b.input("x", (1, 4, 4, 4)), 4, 1, pad=0, name="c1")
    x = b.bn(x, training=True, name="bn")
    b.conv(x, 4, 1, pad=0, name="c2")
    g = b.build()
    assert _rules(g, ["c1", "bn", "c2"], "merge") == [3]
    assert check_group(g, ["c1", "bn"], "fused") == []  # two-pass member, not a fold
    assert check_group(g, ["c1", "bn", "c2"], "stream") == []
    assert not any(mode == "merge" for _, mode in _groups(g))


# ---- rule 4: fan-out and graph outputs ----------------------------------------------------
def test_fc_feeding_residual_add_cannot_merge_forward() -> None:
    b = GraphBuilder("residual")
    h = b.gemm(b.input("x", (1, WIDTH)), WIDTH, name="fc1")
    y = b.gemm(h, WIDTH, name="fc2")
    b.add(y, h, name="add")
    g = b.build()
    assert _rules(g, ["fc1", "fc2"], "merge") == [4]
    assert check_group(g, ["fc1", "fc2"], "stream") == []
    # with the Add inside, fc1's output still feeds a second path: not a chain, no merge
    assert Mode.MERGE not in {m for ops, m in _groups(g) if "fc1" in ops and "fc2" in ops}
    assert merge_candidates(g) == ()


def test_intermediate_graph_output_is_written_not_merged() -> None:
    b = GraphBuilder("tap")
    h = b.gemm(b.input("x", (1, WIDTH)), WIDTH, name="fc1")
    b.relu(h, name="relu")
    b.gemm(h, WIDTH, name="fc2")
    b.output("fc2", "relu", h)
    g = b.build()
    assert _rules(g, ["fc1", "fc2"], "merge") == [4]
    assert check_group(g, ["fc1", "fc2"], "stream") == []
    assert check_group(g, ["fc1", "relu"], "fused") == []  # written, not refused


# ---- rule 1: convexity (and acyclic quotient) ---------------------------------------------
def _diamond() -> Graph:
    """conv -> relu -> add(relu, conv): the residual diamond."""
    b = GraphBuilder("diamond")
    a = b.conv(b.input("x", (1, 4, 4, 4)), 4, 3, name="conv")
    r = b.relu(a, name="relu")
    b.add(r, a, name="add")
    return b.build()


def test_residual_diamond_never_yields_non_convex_group() -> None:
    g = _diamond()
    assert _rules(g, ["conv", "add"], "fused") == [1]
    groups = _groups(g)
    assert (("conv", "add"), "fused") not in groups
    assert (("conv", "relu", "add"), "fused") in groups
    # 4 plans: c|r|a, cr|a, c|ra, cra (never ca|r)
    assert count_plans(g) == 4
    for plan in enumerate_plans(g):
        assert ("conv", "add") not in [grp.ops for grp in plan.groups]


def test_two_convex_groups_in_a_cycle_are_refused() -> None:
    b = GraphBuilder("cross")
    x = b.input("x", (1, 4, 4, 4))
    x1 = b.relu(x, name="x1")
    y1 = b.act("Sigmoid", x, name="y1")
    b.add(x1, y1, name="x2")  # x1 -> x2, y1 -> x2
    b.op("Mul", [y1, x1], name="y2")  # y1 -> y2, x1 -> y2
    b.output("x2", "y2")
    g = b.build()
    assert check_group(g, ["x1", "y2"], "fused") == []
    assert check_group(g, ["y1", "x2"], "fused") == []
    plan = Plan.of(g, [Group(("x1", "y2"), Mode.FUSED), Group(("y1", "x2"), Mode.FUSED)])
    with pytest.raises(IllegalPlanError, match=r"rule 1 .*cycle"):
        check_plan(g, plan)
    plans = list(enumerate_plans(g))
    assert plan not in plans
    assert len(plans) == count_plans(g)


def test_disconnected_group_refused() -> None:
    b = GraphBuilder("two")
    x = b.input("x", (1, WIDTH))
    b.relu(x, name="a")
    b.act("Sigmoid", x, name="s")
    b.output("a", "s")
    g = b.build()
    refusals = check_group(g, ["a", "s"], "fused")
    assert [(r.rule, r.name) for r in refusals] == [(1, "convex")]
    assert "not connected" in refusals[0].message


# ---- rule 5: no AFFINE fold into a padded conv ----------------------------------------------
def test_bn_into_padded_conv_is_not_folded() -> None:
    b = GraphBuilder("padfold")
    x = b.conv(b.input("x", (1, 4, 4, 4)), 4, 1, pad=0, name="c1")
    x = b.bn(x, name="bn")
    b.conv(x, 4, 3, pad=1, name="c3")
    g = b.build()
    assert 5 in _rules(g, ["c1", "bn", "c3"], "merge")
    assert check_group(g, ["bn", "c3"], "fused") == []  # allowed as a prologue
    assert check_group(g, ["c1", "bn", "c3"], "stream") == []
    assert merge_candidates(g) == ()


# ---- rule 6: OPAQUE alone -----------------------------------------------------------------
def test_matmul_of_two_activations_is_alone() -> None:
    b = GraphBuilder("opaque")
    x = b.input("x", (1, 4, 4, 4))
    m = b.op("MatMul", [x, x], name="mm")
    b.relu(m, name="relu")
    g = b.build()
    refusals = check_group(g, ["mm", "relu"], "fused")
    assert [(r.rule, r.name) for r in refusals] == [(6, "opaque")]
    assert candidate_edges(g) == ()
    assert count_plans(g) == 1


# ---- the optional size cap (a user knob, not a legality rule) ------------------------------
def test_size_cap() -> None:
    b = GraphBuilder("relus")
    x = b.input("x", (1, WIDTH))
    for i in range(4):
        x = b.relu(x, name=f"r{i}")
    g = b.build()
    cfg = PlannerConfig(max_group_size=3)
    assert _rules(g, ["r0", "r1", "r2", "r3"], "fused", cfg) == [0]
    assert _rules(g, ["r0", "r1", "r2", "r3"], "fused") == []  # no cap by default
    assert PlannerConfig().max_group_size is None
    assert max(len(grp.ops) for grp in candidate_groups(g, cfg)) == 3
    # compositions of 4 into parts <= 3: 2^3 = 8 minus the single part of 4 = 7
    assert count_plans(g, cfg) == 7
    assert count_plans(g) == 8


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="max_group_size"):
        PlannerConfig(max_group_size=0)
    with pytest.raises(ConfigError, match="P5"):
        PlannerConfig(patterns=frozenset({"P1", "P5"}))


# ---- modes and pattern ablation ---------------------------------------------------------------
def test_mode_must_fit_the_group() -> None:
    g = _fc_chain("bn")
    assert [r.name for r in check_group(g, ["fc1", "mid"], "single")] == ["mode"]
    assert [r.name for r in check_group(g, ["fc1", "mid", "fc2"], "fused")] == ["mode"]
    assert [r.name for r in check_group(g, ["fc1", "mid"], "stream")] == ["mode"]
    assert [r.name for r in check_group(g, ["fc1"], "fused")] == ["mode"]


def test_pattern_ablation() -> None:
    b = GraphBuilder("conv_pool")
    x = b.conv(b.input("x", (1, 4, 8, 8)), 4, 3, name="c1")
    x = b.relu(x, name="r1")
    x = b.maxpool(x, 2, name="mp")
    b.conv(x, 4, 3, name="c2")
    g = b.build()
    p1 = PlannerConfig(patterns=frozenset({"P1"}))
    p12 = PlannerConfig(patterns=frozenset({"P1", "P2"}))
    assert [r.rule for r in check_group(g, ["c1", "r1", "mp"], "fused", p1)] == [0]
    assert check_group(g, ["c1", "r1", "mp"], "fused", p12) == []
    assert group_pattern(g, Group(("c1", "r1", "mp"), Mode.FUSED)) == "P1+P2"
    assert check_group(g, ["r1", "mp"], "fused", p1) == []  # WINDOW anchor, P1 epilogue/prologue
    assert not any(len(grp.ops) > 1 and grp.mode is Mode.STREAM for grp in candidate_groups(g, p12))
    assert (("c1", "r1", "mp", "c2"), "stream") in _groups(g)
    # P1 only: c1|r1|mp|c2 with the edges (c1,r1), (r1,mp) fusable as P1 (not c1+r1+mp):
    # 1|1|1|1, c1r1|mp, c1|r1mp  -> 3 plans (mp->c2 would need stream)
    assert count_plans(g, p1) == 3
    assert candidate_edges(g, p1) == (("c1", "r1"), ("r1", "mp"))


# ---- explain and the search's repair ----------------------------------------------------------
def test_explain_names_rule_2_for_fc_relu_fc() -> None:
    g = _fc_chain("relu")
    items = {(e.producer, e.consumer): e for e in explain(g)}
    assert set(items) == {("fc1", "mid"), ("mid", "fc2")}
    first = items[("fc1", "mid")]
    assert first.patterns == ("P1", "P4")
    assert [r.rule for r in first.refusals] == [2]
    assert "Relu 'mid'" in first.refusals[0].message


def test_explain_opaque_edge_is_never_fused() -> None:
    b = GraphBuilder("opaque")
    x = b.input("x", (1, 4, 4, 4))
    b.relu(b.op("MatMul", [x, x], name="mm"), name="relu")
    (item,) = explain(b.build())
    assert item.patterns == () and not item.fusable
    assert [r.rule for r in item.refusals] == [6]


def test_plan_from_edges_merge_choices() -> None:
    g = _fc_chain("bn")
    edges = candidate_edges(g)
    assert edges == (("fc1", "mid"), ("mid", "fc2"))
    for choice, mode in (
        (True, "merge"),
        ("merge", "merge"),
        ("stream", "stream"),
        (False, "stream"),
    ):
        plan = plan_from_edges(g, edges, {"fc1": choice})
        assert [(grp.ops, grp.mode.value) for grp in plan.groups] == [(("fc1", "mid", "fc2"), mode)]
    plan = plan_from_edges(g, edges)  # no choices: stream
    assert plan.groups[0].mode is Mode.STREAM
    with pytest.raises(IllegalPlanError, match="nope"):
        plan_from_edges(g, [("fc1", "nope")])


def test_plan_from_edges_splits_non_convex_component() -> None:
    g = _diamond()
    # only the skip edge conv -> add chosen: {conv, add} is not convex -> split
    plan = plan_from_edges(g, [("conv", "add")])
    assert [grp.ops for grp in plan.groups] == [("conv",), ("relu",), ("add",)]
    check_plan(g, plan)


def test_greedy_mode_policy_merges_only_when_weights_do_not_grow() -> None:
    def two_fc(hidden: int) -> Graph:
        b = GraphBuilder("two_fc")
        b.gemm(b.gemm(b.input("x", (1, 16)), hidden, name="fc1"), 16, name="fc2")
        return b.build()

    # 16*64 + 64*16 = 2048 separate weights vs 16*16 = 256 merged: merge
    assert greedy_plan(two_fc(64)).groups[0].mode is Mode.MERGE
    # 16*2 + 2*16 = 64 separate weights vs 256 merged: stream
    assert greedy_plan(two_fc(2)).groups[0].mode is Mode.STREAM


def test_conv1x1_then_rank4_matmul_is_not_a_matrix_chain() -> None:
    """Conv 1x1 maps channels (axis 1), a MatMul on NCHW maps W (axis 3): the sizes agree
    (4 features, 16 rows each) but the maps act on different axes, so no merge (hypothesis
    found the case; the executor refuses it too, the planner must not offer it)."""
    b = GraphBuilder("conv_matmul", seed=0)
    x = b.input("x", (1, 4, 4, 4))
    b.output(b.matmul(b.conv(x, 4, 1, pad=0), 4, bias=False))
    graph = b.build()
    ops = [op.name for op in graph.ops]
    refusals = check_group(graph, ops, "merge")
    assert [r.name for r in refusals] == ["pattern"]
    assert "rank-4" in refusals[0].message
    assert not check_group(graph, ops, "stream")
    with pytest.raises(IllegalPlanError, match="rank-4"):
        check_plan(graph, Plan.of(graph, [Group(tuple(ops), Mode.MERGE)]))
