"""Counting and summarising over remainders (planner/remainders.py, counting.py, summary.py).

The exact counter is checked against brute force over all set partitions in
``test_planner_props.py``; here: the same on graphs with OPAQUE joins, the bounded answers
(a lower bound that never exceeds the count, proven edge labels), the summary against a walk
from every ideal, greedy on its edge superset, and a wide graph whose ideals are too many.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import crossing_graphs, dag_graphs

import fusiontune.planner.baselines as baselines
from fusiontune.errors import IllegalPlanError
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.planner._index import graph_index
from fusiontune.planner.candidates import edge_index
from fusiontune.planner.counting import chain_plans, count_exact, count_within
from fusiontune.planner.enumerate import enumerate_plans
from fusiontune.planner.explain import explain
from fusiontune.planner.lattice import Lattice, ideals
from fusiontune.planner.legality import GroupView, check_plan, natural_modes
from fusiontune.planner.plan import Group, Plan, PlannerConfig
from fusiontune.planner.remainders import Remainders, opaque_tail
from fusiontune.planner.summary import _EdgeLabeller, summary_within, walk_summary

PROPS = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CONFIGS = (
    PlannerConfig(),
    PlannerConfig(max_group_size=3),
    PlannerConfig(patterns=frozenset({"P1", "P2", "P3"})),
)
configs = st.sampled_from(CONFIGS)
# graphs with OPAQUE ops (two-activation MatMuls) often, so opaque tails and joins occur
OPAQUE_KINDS = ("conv1x1", "relu", "maxpool", "add", "add", "matmul_act", "matmul_act")
graphs = st.one_of(
    dag_graphs(max_ops=6), dag_graphs(max_ops=6, kinds=OPAQUE_KINDS), crossing_graphs()
)


def _brute_force(graph: Graph, config: PlannerConfig) -> int:
    """Partitions of the ops x mode choices that check_plan accepts."""
    ix = graph_index(graph)

    def partitions(items: list[str]) -> list[list[list[str]]]:
        if not items:
            return [[]]
        out = []
        for part in partitions(items[1:]):
            for k in range(len(part)):
                out.append([*part[:k], [items[0], *part[k]], *part[k + 1 :]])
            out.append([[items[0]], *part])
        return out

    total = 0
    for parts in partitions([op.name for op in graph.ops]):
        options = [
            natural_modes(GroupView.of(ix, (graph.op_index[o] for o in p), config)) for p in parts
        ]
        for modes in itertools.product(*options):
            plan = Plan.of(graph, [Group(tuple(p), m) for p, m in zip(parts, modes)])
            try:
                check_plan(graph, plan, config)
            except IllegalPlanError:
                continue
            total += 1
    return total


def _summary_over_ideals(graph: Graph, config: PlannerConfig) -> tuple[dict, tuple]:
    """Edge labels and merge chains from a walk from every ideal (the former method)."""
    lat = Lattice(graph, config)
    labeller = _EdgeLabeller(lat)
    for base in ideals(lat):
        for _ in lat.walk(base, on_node=labeller.visit):
            pass
        labeller.finish_walk()
    labels = {e: lab for e, lab in labeller.labels.items() if lab}
    return labels, tuple(sorted(labeller.merge_firsts))


@PROPS
@given(graphs, configs)
def test_count_over_remainders_equals_brute_force(graph: Graph, config: PlannerConfig) -> None:
    assert count_exact(graph, config) == _brute_force(graph, config)


@PROPS
@given(graphs, configs, st.integers(1, 400))
def test_bounded_count_is_exact_or_a_lower_bound(
    graph: Graph, config: PlannerConfig, budget: int
) -> None:
    exact = count_exact(graph, config)
    got = count_within(graph, config, budget)
    if got.exact:
        assert got.value == exact
    else:
        assert 1 <= got.value <= exact
        assert got.reason
    assert 1 <= chain_plans(graph, config) <= exact


@PROPS
@given(graphs, configs)
def test_summary_over_remainders_equals_walk_over_ideals(
    graph: Graph, config: PlannerConfig
) -> None:
    labels, merge_firsts = _summary_over_ideals(graph, config)
    summary = walk_summary(graph, config)
    assert summary.complete
    assert summary.edge_labels == labels
    assert summary.edges == tuple(sorted(labels))
    assert summary.merge_firsts == merge_firsts


@PROPS
@given(graphs, configs, st.integers(1, 60))
def test_bounded_summary_labels_are_proven(
    graph: Graph, config: PlannerConfig, budget: int
) -> None:
    exact = walk_summary(graph, config)
    got = summary_within(graph, config, budget)
    for edge, label in got.edge_labels.items():
        assert label & ~exact.edge_labels.get(edge, 0) == 0, edge
    assert set(got.merge_firsts) <= set(exact.merge_firsts)
    if got.complete:
        assert got.edge_labels == exact.edge_labels
    for e in explain(graph, config, budget):
        assert e.complete or not got.complete


@PROPS
@given(graphs, configs)
def test_greedy_on_the_edge_superset_equals_greedy_on_candidate_edges(
    graph: Graph, config: PlannerConfig
) -> None:
    fast = baselines.greedy_plan(graph, config)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(baselines, "_joinable_edges", lambda ix: list(edge_index(graph, config)))
        assert baselines.greedy_plan(graph, config) == fast


def _parallel_chains(n_chains: int, length: int) -> Graph:
    """``n_chains`` conv/relu chains reading the input, joined by one OPAQUE MatMul tree."""
    b = GraphBuilder("parallel_chains", seed=0)
    x = b.input("x", (1, 4, 8, 8))
    ends = []
    for _ in range(n_chains):
        y = x
        for j in range(length):
            y = b.conv(y, 4, 1, pad=0) if j % 2 == 0 else b.relu(y)
        ends.append(y)
    out = ends[0]
    for y in ends[1:]:
        out = b.op("MatMul", [out, y])  # two activations: OPAQUE
    b.output(out)
    return b.build()


def test_parallel_chains_split_into_one_remainder_each() -> None:
    graph = _parallel_chains(3, 4)
    lat = Lattice(graph)
    assert bin(opaque_tail(lat)).count("1") == 2  # the two MatMuls
    assert len(Remainders(lat).roots()) == 3
    assert count_exact(graph) == _brute_force_chains(graph)
    assert count_exact(graph) == len(list(enumerate_plans(graph)))


def _brute_force_chains(graph: Graph) -> int:
    """Independent chains: the count is the product of the chains' interval plans."""
    return chain_plans(graph)


def test_wide_graph_counts_exactly_without_walking_its_ideals() -> None:
    # 8 chains of 6 ops: 7^8 = 5.7 million ideals; 8 remainders of 6 ops each
    graph = _parallel_chains(8, 6)
    got = count_within(graph, budget=20_000)
    assert got.exact
    assert got.value == chain_plans(graph)
    per_chain = count_exact(_parallel_chains(1, 6))
    assert got.value == per_chain**8
    assert walk_summary(graph, PlannerConfig()).n_remainders <= 8 * 6 + 8
