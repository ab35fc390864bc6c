"""Property tests of the planner on random DAGs of mixed op classes (tests/strategies.py)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import crossing_graphs, dag_graphs, set_partitions

from fusiontune.errors import IllegalPlanError
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.planner.baselines import greedy_plan, plan_from_edges, random_plan, unfused_plan
from fusiontune.planner.candidates import (
    PlannerConfig,
    candidate_edges,
    candidate_groups,
    merge_candidates,
)
from fusiontune.planner.enumerate import count_plans, enumerate_plans
from fusiontune.planner.legality import check_group, check_plan, natural_modes
from fusiontune.planner.plan import Group, Mode, Plan

PROPS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SMALL_COUNT = 3000  # enumerate everything when there are at most this many plans
BRUTE_FORCE_MAX_OPS = 6  # Bell(6) = 203 partitions: cheap to check one by one
CONFIGS = (
    PlannerConfig(),
    PlannerConfig(max_group_size=3),
    PlannerConfig(patterns=frozenset({"P1"})),
    PlannerConfig(patterns=frozenset({"P1", "P2", "P3"})),
)
configs = st.sampled_from(CONFIGS)


def _legal(graph: Graph, plan: Plan, config: PlannerConfig) -> bool:
    try:
        check_plan(graph, plan, config)
    except IllegalPlanError:
        return False
    return True


@PROPS
@given(st.one_of(dag_graphs(max_ops=7), crossing_graphs()), configs)
def test_enumerated_plans_are_legal_partitions_without_duplicates(
    graph: Graph, config: PlannerConfig
) -> None:
    n = count_plans(graph, config)
    assert n >= 1
    limit = SMALL_COUNT if n > SMALL_COUNT else None
    seen = set()
    names = sorted(op.name for op in graph.ops)
    for plan in enumerate_plans(graph, limit, config):
        check_plan(graph, plan, config)
        assert plan == Plan.of(graph, plan.groups)  # canonical order
        covered = sorted(op for g in plan.groups for op in g.ops)
        assert covered == names
        assert plan.to_json() not in seen
        seen.add(plan.to_json())
    if limit is None:
        assert len(seen) == n
    else:
        assert len(seen) == SMALL_COUNT


@PROPS
@given(st.one_of(dag_graphs(max_ops=BRUTE_FORCE_MAX_OPS), crossing_graphs()), configs)
def test_count_equals_brute_force_over_all_partitions(graph: Graph, config: PlannerConfig) -> None:
    """Completeness: every partition x mode choice that check_plan accepts is counted."""
    ix_names = [op.name for op in graph.ops]
    total = 0
    for parts in set_partitions(ix_names):
        mode_options = []
        for part in parts:
            from fusiontune.planner._index import graph_index
            from fusiontune.planner.legality import GroupView

            view = GroupView.of(graph_index(graph), (graph.op_index[o] for o in part), config)
            mode_options.append(natural_modes(view))
        for modes in itertools.product(*mode_options):
            plan = Plan.of(graph, [Group(tuple(p), m) for p, m in zip(parts, modes)])
            total += _legal(graph, plan, config)
    assert count_plans(graph, config) == total


@PROPS
@given(dag_graphs(max_ops=8), configs)
def test_candidate_groups_are_legal_and_distinct(graph: Graph, config: PlannerConfig) -> None:
    groups = candidate_groups(graph, config)
    assert len({(g.ops, g.mode) for g in groups}) == len(groups)
    for g in groups:
        assert check_group(graph, g.ops, g.mode, config) == []
    singles = [g.ops[0] for g in groups if g.mode is Mode.SINGLE]
    assert singles == [op.name for op in graph.ops]
    edges = set(candidate_edges(graph, config))
    assert all(graph.op(c).name in graph.successors(p) for p, c in edges)
    for name in merge_candidates(graph, config):
        assert graph.op(name).op_class.value == "LINEAR"


@PROPS
@given(st.one_of(dag_graphs(max_ops=10), crossing_graphs()), configs)
def test_greedy_is_legal_and_maximal(graph: Graph, config: PlannerConfig) -> None:
    plan = greedy_plan(graph, config)
    check_plan(graph, plan, config)
    assert greedy_plan(graph, config) == plan  # deterministic
    group_of = plan.group_of()
    for p, c in candidate_edges(graph, config):
        gp, gc = group_of[p], group_of[c]
        if gp == gc:
            continue
        union = plan.groups[gp].ops + plan.groups[gc].ops
        others = [g for k, g in enumerate(plan.groups) if k not in (gp, gc)]
        for mode in (Mode.FUSED, Mode.MERGE, Mode.STREAM):
            bigger = Plan.of(graph, [*others, Group(union, mode)])
            assert not _legal(graph, bigger, config), f"edge {p}->{c} could still be fused"


@PROPS
@given(st.one_of(dag_graphs(max_ops=10), crossing_graphs()), configs, st.data())
def test_plan_from_edges_is_legal_for_any_edge_subset(
    graph: Graph, config: PlannerConfig, data: st.DataObject
) -> None:
    edges = candidate_edges(graph, config)
    chosen = data.draw(st.lists(st.sampled_from(edges), unique=True) if edges else st.just([]))
    merges = merge_candidates(graph, config)
    options: list[bool | str] = [True, False, "merge", "stream"]
    choices = {m: data.draw(st.sampled_from(options)) for m in merges}
    plan = plan_from_edges(graph, chosen, choices, config)
    check_plan(graph, plan, config)
    assert plan_from_edges(graph, chosen, choices, config) == plan
    # every group is joined only through chosen edges
    chosen_set = set(chosen)
    for g in plan.groups:
        if len(g.ops) > 1:
            inner = {(p, c) for p, c in edges if p in g.ops and c in g.ops}
            assert inner & chosen_set
    # all candidate edges chosen and every merge allowed where legal reproduces no fewer groups
    # than greedy can reach
    assert plan_from_edges(graph, [], None, config) == unfused_plan(graph)


def _reference_repair(
    graph: Graph, chosen: list[tuple[str, str]], choices: dict[str, bool | str], config: Any
) -> Plan:
    """plan_from_edges as first written: every tried merge rebuilds the whole quotient graph
    and looks for a cycle in it (no incremental search, no cache)."""
    from fusiontune.planner._index import graph_index
    from fusiontune.planner.baselines import _is_merge_choice
    from fusiontune.planner.candidates import edge_index
    from fusiontune.planner.legality import GroupView, legal_modes, quotient_cycle

    ix, pos = graph_index(graph), graph.op_index
    allowed = set(edge_index(graph, config))
    chosen_preds: list[list[int]] = [[] for _ in range(ix.n)]
    for producer, consumer in chosen:
        pair = (pos[producer], pos[consumer])
        if pair in allowed and pair[0] not in chosen_preds[pair[1]]:
            chosen_preds[pair[1]].append(pair[0])
    group_of = list(range(ix.n))
    members: dict[int, set[int]] = {i: {i} for i in range(ix.n)}
    for x in range(ix.n):
        pred_groups = sorted({group_of[p] for p in chosen_preds[x]})
        options = [pred_groups] if len(pred_groups) > 1 else []
        options += [[g] for g in sorted(pred_groups, key=lambda g: -max(members[g]))]
        for option in options:
            union = set().union(*(members[g] for g in option)) | {x}
            if not legal_modes(GroupView.of(ix, union, config)):
                continue
            trial = [option[0] if (g in option or i == x) else g for i, g in enumerate(group_of)]
            if quotient_cycle(ix, trial):
                continue
            group_of = trial
            for g in option:
                del members[g]
            del members[x]
            members[option[0]] = union
            break
    groups = []
    for s in members.values():
        view = GroupView.of(ix, s, config)
        modes = legal_modes(view)
        mode = modes[0]
        if len(modes) > 1:
            merge = _is_merge_choice(choices.get(ix.names[view.linear[0]], False))
            mode = Mode.MERGE if merge else Mode.STREAM
        groups.append(Group(tuple(ix.names[i] for i in view.members), mode))
    return Plan.of(graph, groups)


@PROPS
@given(st.one_of(dag_graphs(max_ops=12), crossing_graphs()), configs, st.data())
def test_plan_from_edges_repairs_as_the_whole_graph_cycle_check_does(
    graph: Graph, config: PlannerConfig, data: st.DataObject
) -> None:
    """The repair's incremental cycle search and its cache of legal groups give the plan the
    former whole-quotient check gives, for any choice of edges (called twice: cache warm)."""
    edges = candidate_edges(graph, config)
    chosen = data.draw(st.lists(st.sampled_from(edges), unique=True) if edges else st.just([]))
    merges = merge_candidates(graph, config)
    choices = {m: data.draw(st.sampled_from([True, False])) for m in merges}
    expected = _reference_repair(graph, chosen, choices, config)
    assert plan_from_edges(graph, chosen, choices, config) == expected
    assert plan_from_edges(graph, chosen, choices, config) == expected


@pytest.mark.parametrize("model", ["resnet18", "mobilenet_v2", "bert_encoder"])
def test_plan_from_edges_on_zoo_models_matches_the_whole_graph_check(model: str) -> None:
    from fusiontune.frontend.zoo import build_zoo

    graph = build_zoo(model)
    config = PlannerConfig()
    edges = candidate_edges(graph, config)
    rng = np.random.default_rng(7)
    for density in (0.3, 0.7, 0.95):
        chosen = [e for e in edges if rng.random() < density]
        assert plan_from_edges(graph, chosen, {}, config) == _reference_repair(
            graph, chosen, {}, config
        )


@PROPS
@given(dag_graphs(max_ops=10), configs, st.integers(0, 2**32 - 1))
def test_random_plan_legal_and_json_round_trip(
    graph: Graph, config: PlannerConfig, seed: int
) -> None:
    plan = random_plan(graph, np.random.default_rng(seed), config)
    check_plan(graph, plan, config)
    again = Plan.from_json(plan.to_json(), graph)
    if _legal(graph, plan, PlannerConfig()):  # from_json checks the default config
        assert again == plan and again.hash == plan.hash
    assert random_plan(graph, np.random.default_rng(seed), config) == plan


# ---- Plan.from_json errors (fixed graph) ------------------------------------------------------
def _fc_relu_fc() -> Graph:
    b = GraphBuilder("frf")
    x = b.relu(b.gemm(b.input("x", (1, 8)), 8, name="fc1"), name="relu")
    b.gemm(x, 8, name="fc2")
    return b.build()


def _json(groups: list[dict[str, object]]) -> str:
    return json.dumps({"groups": groups})


@pytest.mark.parametrize(
    ("groups", "match"),
    [
        ([{"ops": ["fc1"]}, {"ops": ["relu"]}, {"ops": ["fc3"]}], r"'fc3'.*did you mean 'fc2'"),
        ([{"ops": ["fc1", "relu"]}, {"ops": ["relu", "fc2"]}], r"'relu' is in two groups"),
        ([{"ops": ["fc1"]}, {"ops": ["relu"]}], r"1 op\(s\) are in no group: fc2"),
        ([{"ops": ["fc1", "relu", "fc2"], "mode": "merge"}], r"rule 2 \(nonlinear\).*'relu'"),
        ([{"ops": ["fc1", "fc2"], "mode": "stream"}, {"ops": ["relu"]}], r"rule 1 \(convex\)"),
        ([{"ops": ["fc1", "relu"], "mode": "fast"}, {"ops": ["fc2"]}], r"mode 'fast'"),
    ],
)
def test_from_json_errors(groups: list[dict[str, object]], match: str) -> None:
    with pytest.raises(IllegalPlanError, match=match):
        Plan.from_json(_json(groups), _fc_relu_fc())


def test_from_json_round_trip_and_canonical_order() -> None:
    g = _fc_relu_fc()
    text = _json([{"ops": ["fc2"]}, {"ops": ["relu", "fc1"], "mode": "fused"}])
    plan = Plan.from_json(text, g)
    assert plan.to_json() == (
        '{"groups":[{"ops":["fc1","relu"],"mode":"fused"},{"ops":["fc2"],"mode":"single"}]}'
    )
    assert Plan.from_json(plan.to_json(), g).hash == plan.hash


@PROPS
@given(st.one_of(dag_graphs(max_ops=8), crossing_graphs()), configs)
def test_explain_gives_a_reason_for_every_edge(graph: Graph, config: PlannerConfig) -> None:
    from fusiontune.planner.explain import explain

    items = explain(graph, config)
    pairs = {(p, c) for p in (op.name for op in graph.ops) for c in graph.successors(p)}
    assert {(e.producer, e.consumer) for e in items} == pairs
    fusable = set(candidate_edges(graph, config))
    for e in items:
        assert e.fusable == ((e.producer, e.consumer) in fusable)
        assert e.patterns or e.refusals, f"{e.producer}->{e.consumer}: no pattern, no reason"
        assert set(e.patterns) <= config.patterns
