"""RMSNorm on import: each decomposed RMSNorm becomes one ``RMSNormalization`` op (STATS).

Exporters write Llama's RMSNorm as a chain of element-wise ops around a ``ReduceMean`` (the
forms are listed in ``fusiontune/ops/norm.py``, which recognises them:
:func:`~fusiontune.ops.norm.match_rms_norm`). Called by
:mod:`fusiontune.frontend.onnx_import` after the graph is built, this pass replaces each
chain by the one op the chain computes, writing the chain's output tensor, so the planner
sees one statistics op (two passes over a row) instead of seven ops. Graphs without such
a chain come back unchanged (the same object).
"""

from __future__ import annotations

from fusiontune.ir.graph import Graph, Op, Tensor
from fusiontune.ops.norm import RMS_NORM, match_rms_norm


def collapse_rms_norms(graph: Graph) -> Graph:
    """``graph`` with each decomposed RMSNorm replaced by one ``RMSNormalization`` op."""
    matches = [m for op in graph.ops if (m := match_rms_norm(graph, op)) is not None]
    if not matches:
        return graph
    tensors = dict(graph.tensors)
    replaced: dict[str, Op] = {}  # last op of a chain -> the op that takes its place
    dropped: set[str] = set()
    for m in matches:
        last = graph.op(m.ops[-1])
        scale = m.scale_tensor
        if scale is None:
            scale = f"{last.name}.rms_scale"
            tensors[scale] = Tensor(scale, m.scale.shape, "float32", m.scale)
        attrs = {"axis": m.axis, "epsilon": m.epsilon}
        replaced[last.name] = Op(last.name, RMS_NORM, (m.x, scale), (m.output,), attrs)
        dropped.update(m.ops[:-1])
        for name in m.ops[:-1]:
            for t in graph.op(name).outputs:
                tensors.pop(t, None)
    ops = [replaced.get(op.name, op) for op in graph.ops if op.name not in dropped]
    read = {t for op in ops for t in op.inputs} | set(graph.outputs)
    for name, tensor in list(tensors.items()):
        if tensor.is_constant and name not in read:
            del tensors[name]  # the exponent, epsilon and weights the chains read
    return graph.replace(tensors=tensors, ops=tuple(ops))


__all__ = ["collapse_rms_norms"]
