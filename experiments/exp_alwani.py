"""Fused-layer CNN (Alwani et al., MICRO 2016) reproduced with fusiontune's cost model.

The paper fuses the first five convolutional layers of VGGNet-E (vgg19: conv1_1 ... conv3_1
with the two pools; zoo names conv1 ... conv5) and reports, per 224x224 image with 32-bit
feature maps and weights excluded: off-chip feature-map transfer 77 MB layer by layer, 3.6 MB
fused (-95 %), with 362 KB of on-chip storage. This script models the same setting:

- hardware: the ``isaac_reram_flat`` preset with ``act_bits=32`` (float32 feature maps); weights
  are resident in the crossbars, so no weight bytes are counted (``weight_load_bytes == 0``);
  the fused group's feasibility (buffer, crossbars) is reported;
- plans over the 12 ops conv1 .. conv5.relu: unfused (every op alone), layer-wise (each conv
  with its ReLU and following pool, P1/P2) and one ``stream`` group (P4);
- the paper's own baseline accounting re-derived from the tensor shapes, and its reuse-buffer
  idea ((K-1) overlapping rows) re-derived next to our line-buffer formula.

Writes ``results/exp_alwani.csv`` and ``results/exp_alwani.md``. Usage:
``python experiments/exp_alwani.py [--input-size 224]``.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

from exp_common import (
    BYTES_PER_KB,
    BYTES_PER_KIB,
    BYTES_PER_MB,
    BYTES_PER_MIB,
    print_rows,
    write_outputs,
)

from fusiontune.frontend.zoo import build_zoo
from fusiontune.ir.graph import Graph
from fusiontune.ir.opclass import OpClass
from fusiontune.planner.legality import check_group
from fusiontune.planner.plan import Group, Mode, Plan
from fusiontune.sim.cost import group_cost
from fusiontune.sim.hardware import HardwareConfig, load_hardware
from fusiontune.sim.needs import group_needs, window_rows

# Alwani, Chen, Ferdman, Milder, "Fused-Layer CNN Accelerators", MICRO 2016 (abstract, sec. 1)
PAPER_UNFUSED_MB = 77.0
PAPER_FUSED_MB = 3.6
PAPER_REDUCTION = 0.95
PAPER_BUFFER_KB = 362.0
PAPER_ACT_BITS = 32  # "32-bit" feature maps (float)
PAPER_INPUT_SIDE = 224
N_FUSED_CONVS = 5  # conv1_1, conv1_2, conv2_1, conv2_2, conv3_1
MODEL = "vgg19"  # VGGNet-E = configuration E of Simonyan & Zisserman (19 weight layers)
HARDWARE = "isaac_reram_flat"


@dataclass(frozen=True)
class AlwaniResult:
    """Numbers of the experiment (bytes unless named otherwise)."""

    ops: tuple[str, ...]
    paper_baseline_bytes: int
    unfused_bytes: int
    layerwise_bytes: int
    fused_bytes: int
    line_buffer_bytes: int
    measured_buffer_bytes: int
    measured_dram_bytes: int
    overlap_rows_bytes: int
    crossbars_needed: int
    feasible: bool
    hw: HardwareConfig


def first_convs(graph: Graph, n_convs: int = N_FUSED_CONVS) -> tuple[str, ...]:
    """Op names from the first op through the ``n_convs``-th conv's ReLU (topological order)."""
    names: list[str] = []
    seen = 0
    for op in graph.ops:
        if seen == n_convs and op.op_class is not OpClass.ELEMWISE:
            break
        names.append(op.name)
        seen += op.op_type == "Conv"
    return tuple(names)


def layerwise_groups(graph: Graph, ops: tuple[str, ...]) -> list[Group]:
    """Each conv with the ops after it up to the next conv (its ReLU and pool: P1/P2)."""
    groups: list[list[str]] = []
    for name in ops:
        if graph.op_by_name[name].op_type == "Conv" or not groups:
            groups.append([])
        groups[-1].append(name)
    return [Group(tuple(g), Mode.FUSED if len(g) > 1 else Mode.SINGLE) for g in groups]


def paper_baseline_elems(graph: Graph, ops: tuple[str, ...]) -> int:
    """The paper's layer-by-layer accounting: every conv reads the *unpooled* output of the
    previous conv (pooling applied while reading) and writes its own output once; ReLU in
    place. (Our planner cannot express "pool fused into the next conv": P2 is conv -> pool.)"""
    convs = [graph.op_by_name[n] for n in ops if graph.op_by_name[n].op_type == "Conv"]
    # every conv output is written once and, except the last, read once by the next layer
    total = math.prod(graph.tensors[convs[0].inputs[0]].shape)
    for i, conv in enumerate(convs):
        out = math.prod(graph.tensors[conv.outputs[0]].shape)
        total += out * (2 if i < len(convs) - 1 else 1)
    return total


def overlap_rows_elems(graph: Graph, ops: tuple[str, ...]) -> int:
    """Re-derivation of the paper's vertical reuse buffer: for every window op inside the
    group whose windows overlap (stride < kernel), ``k0 - 1`` full-width rows of its input;
    non-overlapping 2x2/2 pools keep nothing. The paper's horizontal reuse (a few columns of
    one tile) depends on its tile size and is left out."""
    inside = set(ops)
    total = 0
    for name in ops:
        op = graph.op_by_name[name]
        k0 = window_rows(graph, op)
        src = graph.activation_inputs(op)[0] if graph.activation_inputs(op) else None
        if k0 <= 1 or src is None or graph.producer_map.get(src) not in inside:
            continue
        stride = int((op.attr("strides") or (1,))[0])
        if stride >= k0:
            continue
        shape = graph.tensors[src].shape
        total += (k0 - 1) * math.prod(shape) // shape[2]
    return total


def run(input_size: int = PAPER_INPUT_SIDE, hw: HardwareConfig | None = None) -> AlwaniResult:
    """Cost the three plans of the first five VGG-19 conv layers (see the module docstring)."""
    graph = build_zoo(MODEL, input_size=input_size)
    hw = hw or load_hardware(HARDWARE).replace(act_bits=PAPER_ACT_BITS)
    ops = first_convs(graph)
    stream = Group(ops, Mode.STREAM)
    refusals = check_group(graph, ops, Mode.STREAM)
    if refusals:
        raise RuntimeError(f"the fused group is refused: {refusals[0].message}")

    def traffic(groups: list[Group]) -> int:
        return sum(group_cost(graph, g, hw).act_traffic_bytes for g in groups)

    fused = group_cost(graph, stream, hw)
    needs = group_needs(graph, stream)
    measured = measure_fused(graph, ops, hw)
    return AlwaniResult(
        ops=ops,
        paper_baseline_bytes=paper_baseline_elems(graph, ops) * hw.act_bytes,
        unfused_bytes=traffic([Group((n,), Mode.SINGLE) for n in ops]),
        layerwise_bytes=traffic(layerwise_groups(graph, ops)),
        fused_bytes=fused.act_traffic_bytes,
        line_buffer_bytes=needs.buffer_elems * hw.act_bytes,
        measured_buffer_bytes=measured.peak_buffer_bytes,
        measured_dram_bytes=measured.act_traffic_bytes,
        overlap_rows_bytes=overlap_rows_elems(graph, ops) * hw.act_bytes,
        crossbars_needed=fused.crossbars_needed,
        feasible=fused.feasible,
        hw=hw,
    )


def measure_fused(graph: Graph, ops: tuple[str, ...], hw: HardwareConfig) -> Any:
    """Run the fused group on the executor (one row a step) over the network's first layers."""
    from fusiontune.reference import random_inputs
    from fusiontune.sim.execute import execute

    keep = set(ops)
    prefix = graph.replace(
        ops=tuple(op for op in graph.ops if op.name in keep), outputs=(graph.op(ops[-1]).output,)
    )
    plan = Plan.of(prefix, [Group(ops, Mode.STREAM)])
    return execute(prefix, plan, random_inputs(prefix), hw=hw, band_rows=1)


def table(result: AlwaniResult) -> list[dict[str, Any]]:
    """One row per quantity: the paper's number next to ours in bytes, MB and MiB."""

    def row(
        quantity: str,
        source: str,
        paper: str,
        value: int | None = None,
        kilo: bool = False,
        ratio: float | None = None,
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"quantity": quantity, "source": source, "paper": paper,
                               "ours_bytes": value, "ours_KB": None, "ours_KiB": None,
                               "ours_MB": None, "ours_MiB": None, "ours_ratio": ratio}  # fmt: skip
        if value is not None and kilo:
            out.update(ours_KB=value / BYTES_PER_KB, ours_KiB=value / BYTES_PER_KIB)
        elif value is not None:
            out.update(ours_MB=value / BYTES_PER_MB, ours_MiB=value / BYTES_PER_MIB)
        return out

    r = result
    reduction = 1.0 - r.fused_bytes / r.paper_baseline_bytes
    rows = [
        row("layer-by-layer feature-map traffic", "paper accounting, our shapes",
            f"{PAPER_UNFUSED_MB} MB", r.paper_baseline_bytes),
        row("unfused plan (conv, ReLU, pool each alone)", "model", "-", r.unfused_bytes),
        row("layer-wise plan (conv+ReLU(+pool), P1/P2)", "model", "-", r.layerwise_bytes),
        row("fused: one stream group (P4)", "model", f"{PAPER_FUSED_MB} MB", r.fused_bytes),
        row("on-chip buffer of the fused group (peak, one row a step)", "model",
            f"{PAPER_BUFFER_KB:.0f} KB", r.line_buffer_bytes, kilo=True),
        row("on-chip buffer of the fused group (peak, one row a step)", "executor, measured",
            f"{PAPER_BUFFER_KB:.0f} KB", r.measured_buffer_bytes, kilo=True),
        row("(k0-1)-row overlap buffer (paper's vertical reuse)", "re-derived",
            f"{PAPER_BUFFER_KB:.0f} KB", r.overlap_rows_bytes, kilo=True),
        row("reduction fused vs layer-by-layer", "model vs paper accounting",
            f"-{PAPER_REDUCTION:.0%}", ratio=-reduction),
    ]  # fmt: skip
    return rows


def notes(result: AlwaniResult) -> list[str]:
    """Explanations of every difference between the paper and our numbers."""
    r = result
    hw = r.hw
    return [
        f"Setting: vgg19 (VGGNet-E) at 224x224, batch 1, ops {r.ops[0]} .. {r.ops[-1]} "
        f"({len(r.ops)} ops: 5 convs, 5 ReLUs, 2 max-pools). Hardware: preset `{HARDWARE}` "
        f"with act_bits={hw.act_bits} (float32 feature maps, 4 B each); weights resident "
        "(weights_resident=true), so weight bytes are excluded as in the paper. The fused "
        f"group needs {r.crossbars_needed:,} of {hw.n_crossbars:,} crossbars and "
        f"{r.line_buffer_bytes:,} B of the {hw.buffer_bytes:,} B buffer: "
        f"feasible={str(r.feasible).lower()}.",
        "MB vs MiB: the paper's 77 MB and 3.6 MB are binary megabytes (MiB, 2^20 B). Our fused "
        f"traffic {r.fused_bytes:,} B is {r.fused_bytes / BYTES_PER_MIB:.2f} MiB "
        f"(= the paper's 3.6) but {r.fused_bytes / BYTES_PER_MB:.2f} MB in SI units.",
        "Fused traffic: identical accounting in both: the 3x224x224 image is read once and "
        "conv3_1's 256x56x56 output written once; everything in between stays on chip.",
        "Layer-by-layer traffic: the paper's baseline has each of the 5 conv layers read its "
        "input map and write its output map once, ReLU applied in place and each 2x2 pool "
        "applied while the next layer reads the unpooled map. Counting exactly that on our "
        f"shapes gives {r.paper_baseline_bytes:,} B = "
        f"{r.paper_baseline_bytes / BYTES_PER_MIB:.2f} MiB, the paper's 77 MB. Our planner "
        "cannot form a pool -> conv group (P2 only fuses a pool after its conv), so this row "
        "is computed from the shapes, not from a plan.",
        "Our own baselines bracket it: the unfused plan also stores every ReLU output and "
        f"pool output separately ({r.unfused_bytes / BYTES_PER_MIB:.1f} MiB); the layer-wise "
        "plan (conv+ReLU+pool fused, P1/P2) stores the 4x smaller pooled maps instead of the "
        f"unpooled ones ({r.layerwise_bytes / BYTES_PER_MIB:.1f} MiB).",
        "Reduction: fused vs the paper's baseline accounting "
        f"{1 - r.fused_bytes / r.paper_baseline_bytes:.1%} (paper 95 %); vs our unfused plan "
        f"{1 - r.fused_bytes / r.unfused_bytes:.1%}; vs our layer-wise plan "
        f"{1 - r.fused_bytes / r.layerwise_bytes:.1%}.",
        "On-chip buffer: the executor runs the fused group inside a bounded buffer one row "
        "at a time and measures its peak: "
        f"{r.measured_buffer_bytes:,} B = {r.measured_buffer_bytes / BYTES_PER_KIB:.0f} KiB, "
        f"{r.measured_buffer_bytes / (PAPER_BUFFER_KB * BYTES_PER_KIB):.2f}x the paper's "
        f"362 KiB; the capacity model (sim/capacity.py) predicts {r.line_buffer_bytes:,} B. "
        "At the peak each 3x3 conv's input keeps the 2 rows its next window shares plus the "
        "rows of the step in progress, the 2x2 pools fold each input row into their output "
        "row as it arrives (no pool line buffer), and the image keeps its window rows; "
        f"DMA-counted traffic {r.measured_dram_bytes:,} B equals the model's "
        f"{r.fused_bytes:,} B. The paper computes a pyramid of small tiles and keeps only "
        "what neighbouring tiles share (reuse buffers): K-1 = 2 rows over the map width "
        "before each 3x3 conv, nothing for the pools. That re-derivation gives "
        f"{r.overlap_rows_bytes:,} B = {r.overlap_rows_bytes / BYTES_PER_KIB:.0f} KiB; the "
        "rest of the paper's 362 KB are its horizontal reuse columns and per-tile working "
        "set, which depend on its tile size. Our executor's extra over the 2-row reuse "
        "buffers is the row being computed at each level of the pipeline at the peak moment "
        "(full-width rows, not tiles).",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input-size", type=int, default=PAPER_INPUT_SIDE)
    args = parser.parse_args()
    result = run(args.input_size)
    rows = table(result)
    print_rows("Alwani et al. (MICRO 2016) vs fusiontune", rows)
    for line in notes(result):
        print("-", line)
    if args.input_size == PAPER_INPUT_SIDE:
        write_outputs(
            "alwani",
            "Fused-layer CNN (Alwani et al., MICRO 2016): VGG-19, first five conv layers",
            [("Feature-map traffic per 224x224 image and on-chip buffer", rows)],
            notes(result),
        )


if __name__ == "__main__":
    main()
