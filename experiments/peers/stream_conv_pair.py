"""Stream 2.1.1 on the ResNet conv2_x pair, layer by layer and fused (run in Stream's venv).

Standalone: imports only the standard library, ``onnx``/``numpy``/``yaml`` (Stream's own
dependencies) and ``stream`` (package ``stream-dse`` 2.1.1, Python >= 3.12, plus ``six``),
never fusiontune. The workload is two 3x3 convolutions 64->64->64 at 56x56, pad 1, int8
activations and weights, batch 1 (as Stream's ``inputs/testing/workload/make_2_conv.py``
builds it), on the shipped ``inputs/examples/hardware/tpu_like_quad_core.yaml``; each layer is
split over the four compute cores by output channels (as ``make_2_conv_mapping.py`` does).
Two mappings: one fused group per layer (layer by layer) and one fused group of both layers
(a whole layer per step). Prints one JSON document: per schedule the energy (node and transfer
parts), cycles, DRAM bytes read and written per tensor, and the wall time of the solve.

Usage (see experiments/README.md): ``python stream_conv_pair.py > stream.json``.
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

import numpy as np
import onnx
import stream
import yaml
from onnx import TensorProto, helper, shape_inference
from stream.api import SolveOptions, evaluate_mapping

HARDWARE = "inputs/examples/hardware/tpu_like_quad_core.yaml"
CHANNELS, SIDE, KERNEL, BATCH = 64, 56, 3, 1
CORES = [0, 1, 2, 3]
BITS_PER_BYTE = 8
SCHEDULES = {
    "layer_by_layer": [["Conv1"], ["Conv2"]],
    "fused": [["Conv1", "Conv2"]],
}


def write_workload(path: str) -> None:
    """The two-conv ONNX model (weights as shapes only, as Stream's make_2_conv does)."""
    shape_w = [CHANNELS, CHANNELS, KERNEL, KERNEL]
    weights = []
    for name in ("weights_1", "weights_2"):
        tensor = helper.make_tensor(name, TensorProto.INT8, shape_w, np.zeros(shape_w))
        for field in ("float_data", "double_data", "int32_data", "int64_data", "raw_data"):
            tensor.ClearField(field)
        weights.append(tensor)
    act = [BATCH, CHANNELS, SIDE, SIDE]
    pad = KERNEL // 2
    nodes = [
        helper.make_node("Conv", ["input", "weights_1"], ["conv1_out"], name="Conv1",
                         kernel_shape=[KERNEL, KERNEL], pads=[pad] * 4),
        helper.make_node("Conv", ["conv1_out", "weights_2"], ["output"], name="Conv2",
                         kernel_shape=[KERNEL, KERNEL], pads=[pad] * 4),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "TwoConv",
        [helper.make_tensor_value_info("input", TensorProto.INT8, act)],
        [helper.make_tensor_value_info("output", TensorProto.INT8, act)],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(shape_inference.infer_shapes(model), path)


def write_mapping(path: str, groups: list[list[str]]) -> None:
    """Each conv on the four compute cores, split by output channels; ``groups`` fused."""
    layers = [
        {"name": n, "core_allocation": [CORES], "inter_core_tiling": [[{"dim": "D6", "split": 4}]]}
        for n in ("Conv1", "Conv2")
    ]
    fused = [
        {"name": f"group_{i}", "layers": g, "intra_core_tiling": [{"dim": f"{g[0]}.D0", "tile": 1}]}
        for i, g in enumerate(groups)
    ]
    runtime = {"input": {}, "weights_1": {}, "weights_2": {}, "output": {}}
    with open(path, "w") as handle:
        yaml.safe_dump({"layers": layers, "fused_groups": fused, "runtime_args": runtime}, handle)


def dram_bytes(ctx: Any) -> dict[str, dict[str, int]]:
    """Bytes read from and written to the off-chip core, per tensor, over all groups."""
    out: dict[str, dict[str, int]] = {}
    for accesses in ctx.get("group_memory_accesses").values():
        for core in accesses["cores"]:
            if not core["is_offchip"]:
                continue
            for t in core["tensors"]:
                row = out.setdefault(t["tensor"], {"read": 0, "write": 0})
                row["read"] += t["read"] * core["read_bandwidth"] // BITS_PER_BYTE
                row["write"] += t["write"] * core["write_bandwidth"] // BITS_PER_BYTE
    return out


def _iterations(energy: dict[str, float]) -> float:
    """Steady-state iterations of a group (its total is the per-iteration energy times them)."""
    return energy["total_pj"] / energy["per_iteration_pj"]


def run_schedule(name: str, groups: list[list[str]], hardware: str, work: str) -> dict[str, Any]:
    mapping = os.path.join(work, f"{name}.yaml")
    write_mapping(mapping, groups)
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        estimate = evaluate_mapping(
            hardware,
            os.path.join(work, "two_conv.onnx"),
            os.path.join(work, f"out_{name}"),  # fresh: no cached core costs
            mapping,
            SolveOptions(artifacts=False),
        )
    seconds = time.perf_counter() - start
    ctx = estimate.context
    groups_out = ctx.get("group_allocations").values()
    energy = [g["performance"]["energy"] for g in groups_out]
    nodes = {n: v for g in groups_out for n, v in g["performance"]["nodes"].items()}
    tensors = dram_bytes(ctx)
    return {
        "schedule": name,
        "groups": groups,
        "energy_pj": sum(e["total_pj"] for e in energy),
        "node_energy_pj": sum(e["node_pj_per_iteration"] * _iterations(e) for e in energy),
        "transfer_energy_pj": sum(e["transfer_pj_per_iteration"] * _iterations(e) for e in energy),
        "cycles": float(estimate.cycles),
        "group_cycles": [float(c) for c in estimate.group_cycles],
        "node_cycles": {n: float(v["latency_cycles"]) for n, v in nodes.items()},
        "node_ideal_cycles": {n: float(v["ideal_compute_cycles"]) for n, v in nodes.items()},
        "dram_read_bytes": sum(t["read"] for t in tensors.values()),
        "dram_write_bytes": sum(t["write"] for t in tensors.values()),
        "dram_tensors": tensors,
        "wall_s": seconds,
    }


def main() -> None:
    logging.disable(logging.WARNING)
    hardware = os.path.join(os.path.dirname(stream.__file__), HARDWARE)
    with tempfile.TemporaryDirectory() as work:
        write_workload(os.path.join(work, "two_conv.onnx"))
        schedules = [run_schedule(n, g, hardware, work) for n, g in SCHEDULES.items()]
    doc = {
        "tool": "stream-dse",
        "version": metadata.version("stream-dse"),
        "python": platform.python_version(),
        "hardware": f"stream/{HARDWARE}",
        "call": "stream.api.evaluate_mapping(tpu_like_quad_core.yaml, two_conv.onnx, out, "
        "mapping.yaml, SolveOptions(artifacts=False)), one call per schedule",
        "schedules": schedules,
        "wall_s": sum(s["wall_s"] for s in schedules),
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
