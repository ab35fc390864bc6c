"""ZigZag 3.9.1 on the five ResNet-18 convolutions of exp_peers (run in ZigZag's own venv).

Standalone: imports only the standard library and ``zigzag`` (package ``zigzag-dse`` 3.9.1,
which needs ``six``), never fusiontune, so it runs in a side venv. Each layer is evaluated on
its own through ``zigzag.api.get_hardware_performance_zigzag`` with the shipped
``inputs/hardware/aimc.yaml`` and ``inputs/mapping/default_imc.yaml``, ``in_memory_compute``
on and energy as the objective. Prints one JSON document: per layer the total energy, the
macro's energy breakdown, the energy and DRAM accesses of every memory level per operand, the
cycles and the chosen mapping, and the wall time of the evaluation (mapping search included).

Usage (see experiments/README.md): ``python zigzag_five_convs.py > zigzag.json``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import platform
import sys
import tempfile
import time
from importlib import metadata
from typing import Any

import zigzag
from zigzag.api import get_hardware_performance_zigzag

HARDWARE = "inputs/hardware/aimc.yaml"
MAPPING = "inputs/mapping/default_imc.yaml"
ACT_BITS = WEIGHT_BITS = 8
PSUM_BITS = 16  # ZigZag's ONNX parser default for intermediate outputs: 2 x activation bits

# name, in channels, out channels, input side, kernel, stride, pad (ResNet-18, batch 1)
LAYERS = (
    ("conv1", 3, 64, 224, 7, 2, 3),
    ("conv2_x", 64, 64, 56, 3, 1, 1),
    ("conv3_x", 128, 128, 28, 3, 1, 1),
    ("conv4_x", 256, 256, 14, 3, 1, 1),
    ("conv5_x", 512, 512, 7, 3, 1, 1),
)


def conv_layer(name: str, c: int, k: int, side: int, kern: int, stride: int, pad: int) -> dict:
    """One convolution in ZigZag's workload format (as its ONNX conv parser writes it)."""
    out = (side + 2 * pad - kern) // stride + 1
    return {
        "id": 0,
        "name": name,
        "operator_type": "Conv",
        "equation": "O[b][g][k][oy][ox]+=W[g][k][c][fy][fx]*I[b][g][c][iy][ix]",
        "dimension_relations": [f"ix={stride}*ox+1*fx", f"iy={stride}*oy+1*fy"],
        "loop_dims": ["B", "K", "G", "OX", "OY", "C", "FX", "FY"],
        "loop_sizes": [1, k, 1, out, out, c, kern, kern],
        "operand_precision": {"W": WEIGHT_BITS, "I": ACT_BITS, "O": PSUM_BITS, "O_final": ACT_BITS},
        "pr_loop_dims": ["IX", "IY"],
        "pr_loop_sizes": [side, side],
        "padding": [[pad, pad], [pad, pad]],
    }


def memory_figures(cme: Any) -> dict[str, Any]:
    """Per operand (W, I, O): every memory level's name, energy (pJ) and word accesses."""
    hierarchy = cme.accelerator.memory_hierarchy
    out: dict[str, Any] = {}
    for layer_op, accesses in cme.memory_word_access.items():
        mem_op = cme.memory_operand_links.layer_to_mem_op(layer_op)
        levels = hierarchy.get_memory_levels(mem_op)
        energies = cme.mem_energy_breakdown[layer_op]
        rows = []
        for level, access, energy_pj in zip(levels, accesses, energies):
            counts = {str(d.value): int(access.get(d)) for d in access.data}
            rows.append(
                {
                    "memory": level.name,
                    "energy_pj": float(energy_pj),
                    "word_accesses": counts,
                    "read_word_bits": level.get_max_bandwidth(mem_op, _direction("rd_out_to_low")),
                    "write_word_bits": level.get_max_bandwidth(mem_op, _direction("wr_in_by_low")),
                }
            )
        out[str(layer_op)] = rows
    return out


def _direction(name: str) -> Any:
    from zigzag.hardware.architecture.memory_port import DataDirection

    return DataDirection(name)


def run_layer(spec: tuple, root: str, dump: str) -> dict[str, Any]:
    layer = conv_layer(*spec)
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        energy, latency, tclk, area, cmes = get_hardware_performance_zigzag(
            [layer],
            os.path.join(root, HARDWARE),
            os.path.join(root, MAPPING),
            opt="energy",
            in_memory_compute=True,
            dump_folder=os.path.join(dump, spec[0]),
            loma_show_progress_bar=False,
        )
    seconds = time.perf_counter() - start
    cme = cmes[0][1][0][0]
    return {
        "layer": spec[0],
        "shape": dict(zip(("c_in", "c_out", "side", "kernel", "stride", "pad"), spec[1:])),
        "macs": int(cme.layer.total_mac_count),
        "energy_total_pj": float(energy),
        "macro_energy_pj": float(cme.mac_energy),
        "macro_energy_breakdown_pj": {k: float(v) for k, v in cme.mac_energy_breakdown.items()},
        "memories": memory_figures(cme),
        "cycles": float(latency),
        "ideal_cycles": float(cme.ideal_cycle),
        "ideal_temporal_cycles": float(cme.ideal_temporal_cycle),
        "tclk_ns": float(tclk),
        "area_mm2": float(area),
        "spatial_mapping": str(cme.spatial_mapping_int),
        "temporal_mapping": str(cme.temporal_mapping),
        "mac_spatial_utilization": float(cme.mac_spatial_utilization),
        "wall_s": seconds,
    }


def main() -> None:
    logging.disable(logging.WARNING)  # ZigZag logs every mapping limit it applies
    root = os.path.dirname(zigzag.__file__)
    with tempfile.TemporaryDirectory() as dump:
        layers = [run_layer(spec, root, dump) for spec in LAYERS]
    doc = {
        "tool": "zigzag-dse",
        "version": metadata.version("zigzag-dse"),
        "python": platform.python_version(),
        "hardware": f"zigzag/{HARDWARE}",
        "mapping": f"zigzag/{MAPPING}",
        "call": "get_hardware_performance_zigzag([layer], aimc.yaml, default_imc.yaml, "
        "opt='energy', in_memory_compute=True), one layer at a time",
        "layers": layers,
        "wall_s": sum(layer["wall_s"] for layer in layers),
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
