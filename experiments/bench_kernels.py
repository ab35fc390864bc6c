"""Fused kernels: speed of one conv+BN+ReLU+maxpool group and of a whole resnet18.

1. The benchmark layer: input 1x64x56x56, Conv 3x3 64->64 (pad 1) + BN + ReLU + MaxPool 2x2.
   - ``fused``: ``execute`` of the one-group plan (BN folded, bands of rows, conv output never
     whole), store and byte counting included;
   - ``unfused reference``: ``reference_run`` of the same graph, op by op in numpy;
   - ``python loop``: a straightforward implementation looping over output pixels (a numpy dot
     over the 3x3x64 window per pixel and output channel block), BN, ReLU, then a loop over
     pool windows. Timed on a few output rows and scaled to the full layer (it is slow).
   Ratios: fused / unfused (aim <= 1.0) and loop / fused (aim >= 50).
2. ``execute`` of resnet18 at 224x224 (unfused plan; greedy plan = the whole network as one
   stream group, every row streamed through the bounded buffer) against onnxruntime on the
   same model exported with ``to_onnx``: its default session and a 1-thread session.

Medians of several runs, on one thread (BLAS and onnxruntime): the machine is shared and
oversubscribed BLAS threads make timings meaningless. Prints a table and writes
``results/bench_kernels.json``.
Usage: ``python experiments/bench_kernels.py [--repeats R] [--skip-resnet]``.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy loads BLAS: one-core timings

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from fusiontune.ir.builder import GraphBuilder  # noqa: E402
from fusiontune.ir.graph import Graph  # noqa: E402
from fusiontune.planner.plan import Group, Mode, Plan  # noqa: E402
from fusiontune.reference import random_inputs, reference_run  # noqa: E402
from fusiontune.sim.execute import execute  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results" / "bench_kernels.json"
TARGET_FUSED_OVER_UNFUSED = 1.0  # project target: fused no slower than the unfused numpy chain
TARGET_LOOP_OVER_FUSED = 50.0  # project target: >= 50x faster than a Python loop
LOOP_ROWS_TIMED = 4  # output rows the Python loop computes (then scaled to the layer)
SIDE, CHANNELS, KERNEL, POOL = 56, 64, 3, 2  # the benchmark layer


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def layer_graph() -> Graph:
    b = GraphBuilder("conv_bn_relu_pool_56", seed=0)
    x = b.input("x", (1, CHANNELS, SIDE, SIDE))
    y = b.bn(b.conv(x, CHANNELS, KERNEL, name="conv"), name="bn")
    b.maxpool(b.relu(y, name="relu"), POOL, name="pool")
    return b.build()


def python_loop(graph: Graph, x: np.ndarray, rows: int) -> np.ndarray:
    """Conv+BN+ReLU by a loop over output pixels, then MaxPool by a loop over windows.

    Computes the first ``rows`` conv output rows (and the pool rows they complete).
    """
    t = graph.tensors
    w = np.asarray(t["conv.weight"].value)
    bias = np.asarray(t["conv.bias"].value)
    gamma, beta = np.asarray(t["bn.scale"].value), np.asarray(t["bn.bias"].value)
    mean, var = np.asarray(t["bn.mean"].value), np.asarray(t["bn.var"].value)
    pad = KERNEL // 2
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    c_out = w.shape[0]
    conv = np.zeros((1, c_out, rows, SIDE), dtype=np.float32)
    for i in range(rows):
        for j in range(SIDE):
            window = xp[0, :, i : i + KERNEL, j : j + KERNEL]
            for o in range(c_out):
                v = float(np.sum(window * w[o])) + bias[o]
                v = (v - mean[o]) / np.sqrt(var[o] + 1e-5) * gamma[o] + beta[o]
                conv[0, o, i, j] = max(v, 0.0)
    out = np.zeros((1, c_out, rows // POOL, SIDE // POOL), dtype=np.float32)
    for i in range(rows // POOL):
        for j in range(SIDE // POOL):
            out[0, :, i, j] = conv[0, :, i * POOL : (i + 1) * POOL, j * POOL : (j + 1) * POOL].max(
                axis=(1, 2)
            )
    return out


def bench_layer(repeats: int) -> dict[str, float]:
    graph = layer_graph()
    inputs = random_inputs(graph, seed=0)
    plan = Plan.of(graph, [Group(tuple(op.name for op in graph.ops), Mode.FUSED)])
    fused_out = execute(graph, plan, inputs).outputs["pool"]
    ref_out = reference_run(graph, inputs)["pool"]
    loop_out = python_loop(graph, inputs["x"], LOOP_ROWS_TIMED)
    rel = float(np.abs(fused_out - ref_out).max() / np.abs(ref_out).max())
    rows_pool = LOOP_ROWS_TIMED // POOL
    loop_rel = float(np.abs(loop_out - ref_out[:, :, :rows_pool]).max() / np.abs(ref_out).max())
    fused_s = median_seconds(lambda: execute(graph, plan, inputs), repeats)
    unfused_s = median_seconds(lambda: reference_run(graph, inputs), repeats)
    loop_part_s = median_seconds(lambda: python_loop(graph, inputs["x"], LOOP_ROWS_TIMED), 3)
    loop_s = loop_part_s * SIDE / LOOP_ROWS_TIMED
    return {
        "fused_s": fused_s,
        "unfused_reference_s": unfused_s,
        "python_loop_s_scaled": loop_s,
        "python_loop_rows_timed": LOOP_ROWS_TIMED,
        "fused_over_unfused": fused_s / unfused_s,
        "loop_over_fused": loop_s / fused_s,
        "fused_max_rel_err": rel,
        "loop_max_rel_err": loop_rel,
    }


def bench_resnet(repeats: int) -> dict[str, float]:
    import onnxruntime as ort

    from fusiontune.export.onnx_export import to_onnx
    from fusiontune.frontend.zoo import build_zoo
    from fusiontune.planner.baselines import greedy_plan, unfused_plan

    graph = build_zoo("resnet18", input_size=224)
    inputs = random_inputs(graph, seed=0)
    model = to_onnx(graph)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    default = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {graph.inputs[0]: inputs[graph.inputs[0]]}
    ort_out = sess.run(None, feed)[0]
    out: dict[str, float] = {}
    for label, plan in (("unfused", unfused_plan(graph)), ("greedy", greedy_plan(graph))):
        got = execute(graph, plan, inputs).outputs[graph.outputs[0]]
        out[f"{label}_max_rel_err_vs_ort"] = float(
            np.abs(got - ort_out).max() / np.abs(ort_out).max()
        )
        out[f"execute_{label}_s"] = median_seconds(
            lambda p=plan: execute(graph, p, inputs), repeats
        )
    out["onnxruntime_1thread_s"] = median_seconds(lambda: sess.run(None, feed), repeats)
    out["onnxruntime_default_s"] = median_seconds(lambda: default.run(None, feed), repeats)
    for label in ("unfused", "greedy"):
        t = out[f"execute_{label}_s"]
        out[f"execute_{label}_over_ort_1thread"] = t / out["onnxruntime_1thread_s"]
        out[f"execute_{label}_over_ort_default"] = t / out["onnxruntime_default_s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--skip-resnet", action="store_true")
    args = parser.parse_args()
    result: dict[str, object] = {
        "machine": platform.processor() or platform.machine(),
        "numpy": np.__version__,
        "repeats": args.repeats,
        "layer": bench_layer(args.repeats),
        "targets": {
            "fused_over_unfused_max": TARGET_FUSED_OVER_UNFUSED,
            "loop_over_fused_min": TARGET_LOOP_OVER_FUSED,
        },
    }
    if not args.skip_resnet:
        result["resnet18_224"] = bench_resnet(max(3, args.repeats // 2))
    for section in ("layer", "resnet18_224"):
        if section in result:
            print(f"[{section}]")
            for key, value in result[section].items():  # type: ignore[union-attr]
                print(f"  {key:32s} {value:.4g}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(RESULTS.parents[1])}")


if __name__ == "__main__":
    main()
