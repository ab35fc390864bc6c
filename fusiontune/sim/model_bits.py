"""The bit widths a quantized model computes at, for the cost model.

A preset says how wide activations and weights are (``act_bits``, ``weight_bits``: 8 on ISAAC).
A quantized model says it itself: its activations lie on the grids of the DequantizeLinear ops
in front of them and its crossbar weights on the grids the importer recorded
(``Tensor.quant``), each grid with its code type (int8, uint8, int16, ...). The CIM numerics
already compute on those codes (``sim/cim.py``); :func:`at_model_bits` gives the cost model the
same widths, so bytes per element (``act_bytes``), input bit-serial passes (``input_slices``:
cycles and DAC/ADC conversions) and weight slices (cells, crossbar columns) follow the model.

The model's width is the widest grid of each kind (one buffer and one DAC schedule for every
activation, as the cost model has them); int32 grids are a bias's (its DequantizeLinear folds
into the bias, off the crossbar) and are not counted. A graph with no grid of a kind keeps the
preset's width of that kind. Apply it once, before planning, simulating and executing, so that
all of them see the same hardware (the executor's counted bytes keep equalling the model's)::

    hw = at_model_bits(graph, load_hardware("isaac_reram"))
    metrics = simulate(graph, greedy_plan(graph, hw=hw), hw)
"""

from __future__ import annotations

from dataclasses import dataclass

from fusiontune.ir.graph import Graph
from fusiontune.ops.quant import grid_of
from fusiontune.sim.hardware import HardwareConfig

BIAS_DTYPE = "int32"  # the code type of a quantized bias (ONNX QDQ): not a crossbar operand


@dataclass(frozen=True)
class ModelBits:
    """The widest integer grids of a quantized graph.

    Attributes:
        act_bits: bits of the widest activation grid (a DequantizeLinear of a tensor computed
            at run time), ``None`` when no activation lies on a grid.
        weight_bits: bits of the widest constant weight grid (``Tensor.quant``), ``None`` when
            no weight carries one.
    """

    act_bits: int | None
    weight_bits: int | None


def model_bits(graph: Graph) -> ModelBits:
    """The activation and weight widths ``graph``'s own grids give (see the module doc)."""
    act: list[int] = []
    for op in graph.ops:
        grid = grid_of(graph, op)
        if grid is None or grid.dtype == BIAS_DTYPE:
            continue
        if graph.tensors[op.inputs[0]].value is None:  # codes computed at run time
            act.append(grid.bits)
    weights = [
        t.quant.bits
        for t in graph.tensors.values()
        if t.quant is not None and t.value is not None and t.quant.dtype != BIAS_DTYPE
    ]
    return ModelBits(max(act, default=None), max(weights, default=None))


def at_model_bits(graph: Graph, hw: HardwareConfig) -> HardwareConfig:
    """``hw`` with ``act_bits`` and ``weight_bits`` of ``graph``'s own grids (each kind the
    graph has no grid of keeps the preset's width; an unquantized graph gets ``hw`` itself).

    A model narrower than the preset's DAC or cells (say 1-bit activations on 2-bit DACs)
    narrows ``dac_bits`` / ``cell_bits`` to the model's width: a converter cannot resolve more
    bits than the codes have.
    """
    bits = model_bits(graph)
    changes: dict[str, int] = {}
    if bits.act_bits is not None and bits.act_bits != hw.act_bits:
        changes["act_bits"] = bits.act_bits
        changes["dac_bits"] = min(hw.dac_bits, bits.act_bits)
    if bits.weight_bits is not None and bits.weight_bits != hw.weight_bits:
        changes["weight_bits"] = bits.weight_bits
        changes["cell_bits"] = min(hw.cell_bits, bits.weight_bits)
    return hw.replace(**changes) if changes else hw
