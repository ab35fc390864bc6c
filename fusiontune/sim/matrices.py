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

On a chip (:func:`crossbar_tiles`) a matrix is cut into ``ceil(rows / R)`` row tiles x
``ceil(cols * weight_slices / C)`` column tiles of ``R x C`` crossbars. The ``count``
independent matrices of a grouped (depthwise) convolution are **packed block-diagonally**
when one of them fits a crossbar, as CIM mappers do: a crossbar holds
``groups_per_tile = min(count, floor(R / rows), floor(C / (cols * weight_slices)))`` of them
on its diagonal, the other cells programmed to zero, so the column sums of a group see only
its own rows and all of its groups are read in one activation (cycles per vector unchanged,
``ceil(count / groups_per_tile)`` crossbars instead of ``count``). A depthwise 3 x 3 layer of
``C`` channels on 128 x 128 crossbars of 8-bit weights in 2-bit cells: 14 channels a
crossbar, ``ceil(C / 14)`` crossbars.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from fusiontune.ir.graph import Graph, Op
from fusiontune.ops import registry

if TYPE_CHECKING:
    from fusiontune.sim.hardware import HardwareConfig


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


class CrossbarTiles(NamedTuple):
    """How one copy of a :class:`WeightMatrix` sits on a chip's crossbars (module docstring).

    Attributes:
        row_tiles: row tiles per matrix (1 when packed).
        col_tiles: column tiles per matrix (1 when packed).
        groups_per_tile: matrices on one crossbar's diagonal (1: not packed).
        tile_sets: ``ceil(count / groups_per_tile)``: crossbar sets of ``row_tiles x
            col_tiles`` tiles, each holding ``groups_per_tile`` matrices (the last one the rest).
        crossbars: ``row_tiles x col_tiles x tile_sets``.
        programmed_cells: cells written to program the copy: every weight slice, plus the
            zeros between the diagonal blocks of a packed crossbar.
    """

    row_tiles: int
    col_tiles: int
    groups_per_tile: int
    tile_sets: int
    crossbars: int
    programmed_cells: int


def crossbar_tiles(m: WeightMatrix, hw: HardwareConfig) -> CrossbarTiles:
    """The crossbar tiling of one copy of ``m`` on ``hw`` (block-diagonal packing included)."""
    ws, rows, cols = hw.weight_slices, hw.crossbar_rows, hw.crossbar_cols
    phys_cols = m.cols * ws
    row_tiles = math.ceil(m.rows / rows)
    col_tiles = math.ceil(phys_cols / cols)
    per_tile = 1
    if m.count > 1 and m.rows <= rows and phys_cols <= cols:
        per_tile = min(m.count, rows // m.rows, cols // phys_cols)
    sets = math.ceil(m.count / per_tile)
    full, rest = divmod(m.count, per_tile)
    block = m.rows * phys_cols  # one matrix's cells
    programmed = (full * per_tile * per_tile + rest * rest) * block
    return CrossbarTiles(
        row_tiles, col_tiles, per_tile, sets, row_tiles * col_tiles * sets, programmed
    )
