"""Why each activation edge can or cannot be fused (``fusiontune plans --explain``)."""

from __future__ import annotations

from dataclasses import dataclass

from fusiontune.ir.graph import Graph
from fusiontune.ir.opclass import OpClass
from fusiontune.planner._index import GraphIndex, graph_index
from fusiontune.planner.lattice import PATTERN_BITS, walk_summary
from fusiontune.planner.legality import GroupView, Refusal, natural_modes, view_refusals
from fusiontune.planner.plan import Mode, PlannerConfig


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
    """

    producer: str
    consumer: str
    tensor: str
    patterns: tuple[str, ...]
    refusals: tuple[Refusal, ...]

    @property
    def fusable(self) -> bool:
        return bool(self.patterns)

    def to_dict(self) -> dict[str, object]:
        return {
            "producer": self.producer,
            "consumer": self.consumer,
            "tensor": self.tensor,
            "patterns": list(self.patterns),
            "refusals": [
                {"rule": r.rule, "name": r.name, "message": r.message} for r in self.refusals
            ],
        }


def explain(graph: Graph, config: PlannerConfig | None = None) -> list[EdgeExplanation]:
    """One :class:`EdgeExplanation` per activation edge, in (producer, consumer) order."""
    cfg = config or PlannerConfig()
    ix = graph_index(graph)
    labels = walk_summary(graph, cfg).edge_labels
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
            )
        )
    return out


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
        verdict = "fusable by " + ", ".join(e.patterns) if e.patterns else "never fused"
        lines.append(f"{e.producer} -> {e.consumer} [{e.tensor}]: {verdict}")
        lines += [f"    refused: {r}" for r in e.refusals]
    return "\n".join(lines)
