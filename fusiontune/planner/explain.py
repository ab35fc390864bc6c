"""Why each activation edge can or cannot be fused (``fusiontune plans --explain``)."""

from __future__ import annotations

from dataclasses import dataclass

from fusiontune.ir.graph import Graph
from fusiontune.ir.opclass import OpClass
from fusiontune.planner._index import GraphIndex, bits, graph_index
from fusiontune.planner.groups import Mode, PlannerConfig
from fusiontune.planner.lattice import PATTERN_BITS
from fusiontune.planner.legality import GroupView, Refusal, natural_modes, view_refusals
from fusiontune.planner.summary import summary_within, walk_summary


@dataclass(frozen=True)
class EdgeExplanation:
    """One activation edge and what the planner makes of it.

    Attributes:
        producer: op writing the tensor.
        consumer: op reading it.
        tensor: the activation tensor joining them.
        patterns: patterns of the legal groups holding both ops ("P1".."P4"; empty: never fused).
        refusals: why the two ops alone cannot form a group in a mode, and, when the producer
            is LINEAR, why the chain from it to the next LINEAR cannot be merged.
        complete: ``patterns`` lists every pattern of the legal groups holding the edge;
            ``False`` after a bounded search: each listed pattern is proven, others unknown.
    """

    producer: str
    consumer: str
    tensor: str
    patterns: tuple[str, ...]
    refusals: tuple[Refusal, ...]
    complete: bool = True

    @property
    def fusable(self) -> bool:
        return bool(self.patterns)

    def to_dict(self) -> dict[str, object]:
        return {
            "producer": self.producer,
            "consumer": self.consumer,
            "tensor": self.tensor,
            "patterns": list(self.patterns),
            "complete": self.complete,
            "refusals": [
                {"rule": r.rule, "name": r.name, "message": r.message} for r in self.refusals
            ],
        }


def explain(
    graph: Graph, config: PlannerConfig | None = None, budget: int | None = None
) -> list[EdgeExplanation]:
    """One :class:`EdgeExplanation` per activation edge, in (producer, consumer) order.

    Args:
        graph: the graph.
        config: planner configuration.
        budget: work units for the walk over legal groups (:func:`summary_within`); past it
            the patterns are those of the groups visited, marked ``complete=False``.
            ``None``: exact, however long it takes.
    """
    cfg = config or PlannerConfig()
    ix = graph_index(graph)
    summary = walk_summary(graph, cfg) if budget is None else summary_within(graph, cfg, budget)
    labels = summary.edge_labels
    out = []
    for p, c, tensor in ix.edges:
        pair = GroupView.of(ix, (p, c), cfg)
        refusals: list[Refusal] = []
        for mode in natural_modes(pair):
            refusals += view_refusals(pair, mode)
        chain = _merge_chain(ix, p, c, cfg.max_group_size or ix.n)
        if chain is not None and len(chain) > 2:
            refusals += view_refusals(GroupView.of(ix, chain, cfg), Mode.MERGE)
        out.append(
            EdgeExplanation(
                producer=ix.names[p],
                consumer=ix.names[c],
                tensor=tensor,
                patterns=tuple(k for k, b in PATTERN_BITS.items() if labels.get((p, c), 0) & b),
                refusals=tuple(dict.fromkeys(refusals)),
                complete=summary.complete or _blocked(ix, p, c),
            )
        )
    return out


def _blocked(ix: GraphIndex, p: int, c: int) -> bool:
    """No group can hold ``p -> c``: an end, or an op on a path between them, is OPAQUE."""
    hull = (1 << p) | (1 << c) | (ix.desc[p] & ix.anc[c])
    return any(ix.classes[i] is OpClass.OPAQUE for i in bits(hull))


def _merge_chain(ix: GraphIndex, p: int, c: int, cap: int) -> list[int] | None:
    """LINEAR ``p``, then single-successor ops from ``c`` up to the next LINEAR (or None)."""
    if ix.classes[p] is not OpClass.LINEAR:
        return None
    chain = [p]
    cur = c
    while len(chain) < cap:
        chain.append(cur)
        if ix.classes[cur] is OpClass.LINEAR:
            return chain
        if len(ix.succs[cur]) != 1:
            return None
        cur = ix.succs[cur][0]
    return None


def format_explanations(items: list[EdgeExplanation]) -> str:
    """Human-readable lines, one block per edge."""
    lines = []
    for e in items:
        if e.complete:
            verdict = "fusable by " + ", ".join(e.patterns) if e.patterns else "never fused"
        elif e.patterns:
            verdict = "fusable by " + ", ".join(e.patterns) + " (and maybe more: search bounded)"
        else:
            verdict = "no legal group found holding it (search bounded: not settled)"
        lines.append(f"{e.producer} -> {e.consumer} [{e.tensor}]: {verdict}")
        lines += [f"    refused: {r}" for r in e.refusals]
    return "\n".join(lines)
