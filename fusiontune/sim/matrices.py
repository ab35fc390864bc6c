"""The weight matrices LINEAR ops put on crossbars (DESIGN §5 rule 7), hardware-free.

One :class:`WeightMatrix` per LINEAR op (a ``merge`` group: one merged matrix, built by
:meth:`fusiontune.sim.groupmodel.GroupModel.merged_matrix`):

- Conv, weight ``(C_out, C_in/g, K...)``: ``rows = C_in/g * prod(K)``, ``cols = C_out/g``,
  ``count = g`` independent matrices, ``vectors = N * prod(out spatial)``.
- Gemm ``(M, K) x (K, N)``: ``rows = K``, ``cols = N``, ``vectors = M``; MatMul with a constant
  weight ``(..., K, N)``: ``count = prod(batch dims)``, ``vectors = numel(out) / N / count``.
- ``merge`` (P3): the chain ``L1 ... Lk`` becomes one matrix ``rows(L1) x cols(Lk)`` with the
  vectors of ``L1``: a bottleneck (512->64->512) grows to 512x512, a wide chain
  (64->512->64) shrinks to 64x64.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusiontune.ir.graph import Graph, Op
from fusiontune.ops import registry


@dataclass(frozen=True)
class WeightMatrix:
    """One weight matrix on crossbars.

    Attributes:
        ops: the LINEAR op(s) it implements (several for a merged chain).
        rows: matrix rows (the input vector length).
        cols: matrix columns (outputs per vector), before bit slicing.
        count: independent matrices of this shape (groups of a grouped convolution).
        vectors: matrix-vector products per inference, per matrix.
        out_rows: rows ``S0`` of the output (``vectors`` for an FC), for pipeline fill.
        window_rows: effective window height ``k0`` of the op (1 for point-wise ops).
    """

    ops: tuple[str, ...]
    rows: int
    cols: int
    count: int
    vectors: int
    out_rows: int
    window_rows: int

    @property
    def n_weights(self) -> int:
        return self.rows * self.cols * self.count

    @property
    def macs(self) -> int:
        return self.vectors * self.n_weights


def window_rows(graph: Graph, op: Op) -> int:
    """Effective window height ``k0`` of a Conv or spatial pool (1 for other ops)."""
    return registry.window_rows(graph, op)


def linear_matrix(graph: Graph, op: Op) -> WeightMatrix:
    """The weight matrix of one LINEAR op (module docstring formulas)."""
    rows, cols, count, vectors, out_rows = registry.matrix_shape(graph, op)
    return WeightMatrix((op.name,), rows, cols, count, vectors, out_rows, window_rows(graph, op))
