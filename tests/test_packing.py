"""Grouped (depthwise) convolutions packed block-diagonally on crossbars (issue 21).

A crossbar of ``R`` rows x ``C / weight_slices`` weights holds
``min(count, floor(R / rows), floor(C / (cols * weight_slices)))`` of a grouped convolution's
matrices on its diagonal (``sim/matrices.crossbar_tiles``): the crossbar count, the array
turns, the programming energy and the placement follow it; the executor measures the same
network bytes; CIM numerics are those of the unpacked groups (the zeros off the diagonal add
nothing to a column sum).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.planner.plan import Group, Mode, Plan
from fusiontune.reference import random_inputs
from fusiontune.sim.cim import CimNumerics, cim_matmul
from fusiontune.sim.cost import group_cost
from fusiontune.sim.execute import execute
from fusiontune.sim.hardware import HardwareConfig, load_hardware
from fusiontune.sim.matrices import WeightMatrix, crossbar_tiles, linear_matrix
from fusiontune.sim.placement import matrix_crossbars, place_plan

ISAAC = HardwareConfig()  # 128 x 128 crossbars, 8-bit weights in 2-bit cells: 32 weights a row


def _conv(c: int, group: int, k: int = 3, c_out: int | None = None) -> Graph:
    b = GraphBuilder("dw")
    b.conv(b.input("x", (1, c, 6, 6)), c_out or c, k, group=group, bias=False, name="conv")
    return b.build()


def _matrix(graph: Graph) -> WeightMatrix:
    return linear_matrix(graph, graph.ops[0])


@pytest.mark.parametrize(
    ("c", "group", "k", "per_tile", "crossbars"),
    [
        (32, 32, 3, 14, 3),  # depthwise 3x3: rows 9, 14 a crossbar (126 rows)
        (144, 144, 3, 14, 11),  # PIMCOMP-NN's dense block-diagonal matrix: 11 x 5 = 55
        (960, 960, 3, 14, 69),  # PIMCOMP-NN: 2,040
        (64, 64, 5, 5, 13),  # 5x5: rows 25, 5 a crossbar
        (128, 32, 3, 3, 11),  # 4 in / 4 out a group: rows 36 -> 3 a crossbar (columns: 8)
        (256, 2, 1, 1, 8),  # groups of 128 rows x 128 cols (512 physical): not packed
    ],
)
def test_groups_per_crossbar(c: int, group: int, k: int, per_tile: int, crossbars: int) -> None:
    m = _matrix(_conv(c, group, k))
    tiles = crossbar_tiles(m, ISAAC)
    assert tiles.groups_per_tile == per_tile
    assert tiles.crossbars == matrix_crossbars(m, ISAAC) == crossbars
    if per_tile == 1:  # unpacked: the former count
        assert crossbars == tiles.row_tiles * tiles.col_tiles * m.count


def test_dense_matrices_are_not_packed() -> None:
    m = _matrix(_conv(64, 1))  # 576 x 64: 5 row tiles x 2 column tiles
    assert crossbar_tiles(m, ISAAC)[:5] == (5, 2, 1, 1, 10)


def test_group_cost_follows_the_packing() -> None:
    """Crossbars ceil(C / 14); cycles per vector unchanged (one activation reads every
    group); with array_units the turns fall with the crossbars; programming counts the
    zeros between the blocks, cell reads and conversions only the groups' own cells."""
    graph = _conv(32, 32)
    group = Group(("conv",), Mode.SINGLE)
    m = _matrix(graph)
    vectors, ins = m.vectors, ISAAC.input_slices
    cost = group_cost(graph, group, ISAAC)
    one_pass = vectors * ins * ISAAC.slice_cycles
    assert (cost.crossbars_needed, cost.cycles) == (3, one_pass)
    turns = group_cost(graph, group, ISAAC.replace(array_units=1, weights_resident=False))
    assert turns.cycles == 3 * one_pass  # one array: 3 turns (unpacked: 32)
    phys = m.cols * ISAAC.weight_slices
    # two full crossbars of 14 groups (126 x 56 cells) and one of 4 (36 x 16)
    assert turns.programmed_cells == 2 * (14 * 9) * (14 * phys) + (4 * 9) * (4 * phys)
    assert turns.cell_ops == vectors * ins * 9 * phys * 32


def test_placement_packs_groups_onto_one_crossbar() -> None:
    """Depthwise 32 channels on 4 cores of 1 crossbar: 3 crossbars on cores 0, 1, 2 (14, 14,
    4 channels); scatter (input rows: each of a group's 6 x 6 input elements once) and gather
    (its 6 x 6 outputs) of each group to and from home core 0."""
    graph = _conv(32, 32)
    hw = HardwareConfig(n_crossbars=4, buffer_bytes=4 * 65536, cores=4)
    plan = Plan((Group(("conv",), Mode.SINGLE),))
    placed = place_plan(graph, plan, hw)
    (stage,) = placed.groups[0].stages
    assert (stage.groups_per_tile, stage.tile_sets, stage.crossbars) == (14, 3, 3)
    assert stage.tile_cores == (0, 1, 2)
    assert [stage.tile_cores[stage.tile_index(0, g, 0, 0)] for g in (0, 13, 14, 27, 28, 31)] == [
        0, 0, 1, 1, 2, 2,
    ]  # fmt: skip
    vectors = 36  # 6 x 6 outputs
    inputs = 6 * 6  # a channel's input, sent once to the core forming its windows
    moved = (14 + 4) * (inputs + vectors)  # the other cores' groups: rows in, outputs back
    assert placed.groups[0].noc_bytes == moved


@pytest.mark.parametrize("numerics", ["float", "cim"])
def test_executor_measures_the_packed_placement(numerics: str) -> None:
    graph = _conv(32, 32)
    hw = HardwareConfig(n_crossbars=4, buffer_bytes=4 * 65536, cores=4)
    plan = Plan((Group(("conv",), Mode.SINGLE),))
    placed = place_plan(graph, plan, hw)
    run = execute(graph, plan, random_inputs(graph), numerics=numerics, hw=hw, band_rows=1)
    assert (run.noc_bytes, run.noc_byte_hops) == (placed.noc_bytes, placed.noc_byte_hops) != (0, 0)


def test_mobilenet_v2_on_isaac_168_packs_its_depthwise_layers() -> None:
    from fusiontune.frontend.zoo import build_zoo

    hw = load_hardware("isaac_168")
    graph = build_zoo("mobilenet_v2", input_size=32)
    grouped = [linear_matrix(graph, op) for op in graph.ops if op.attrs.get("group", 1) > 1]
    assert grouped and all(m.rows == 9 and m.cols == 1 for m in grouped)
    assert sum(matrix_crossbars(m, hw) for m in grouped) == sum(
        math.ceil(m.count / 14) for m in grouped
    )
    assert sum(matrix_crossbars(m, hw) for m in grouped) < sum(m.count for m in grouped) / 10


def test_cim_column_sums_of_a_packed_crossbar_see_only_their_group() -> None:
    """A packed crossbar (14 depthwise groups on its diagonal, zeros elsewhere) computes each
    group's CIM product exactly as the group's own crossbar would, ADC clipping included
    (inputs with one peak per group, so the per-tensor input scale is the groups' scale)."""
    cfg = CimNumerics(adc_bits=4)  # a small ADC that clips a 9-row sum
    rng = np.random.default_rng(0)
    p, rows = 14, 9
    x = rng.integers(0, 128, size=(20, p, rows)).astype(np.float64)
    x[:, :, 0] = 127.0  # every group's peak: scale 1 for the whole and for each group
    w = np.clip(rng.normal(size=(p, rows, 1)), -2.5, 2.5)
    w[:, 0, 0] = 3.0  # each column's peak
    block = np.zeros((p * rows, p))
    for g in range(p):
        block[g * rows : (g + 1) * rows, g] = w[g, :, 0]
    packed = cim_matmul(x.reshape(20, p * rows), block, cfg)
    alone = np.concatenate([cim_matmul(x[:, g], w[g], cfg) for g in range(p)], axis=1)
    np.testing.assert_array_equal(packed, alone)
    exact = np.einsum("mgr,gr->mg", x, w[:, :, 0])
    assert np.abs(packed - exact).max() > 0  # the ADC did clip: the check is not vacuous
