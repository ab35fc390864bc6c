"""Golden numbers for refactors: record what the simulator, executor and reference compute.

Run it before and after a change that must not change behaviour, then diff the two files::

    python experiments/golden_metrics.py /tmp/before.json
    ... change ...
    python experiments/golden_metrics.py /tmp/after.json
    python experiments/golden_metrics.py --diff /tmp/before.json /tmp/after.json

Recorded (JSON, written to the path given; nothing is written into ``results/``):

- ``simulate``: every field of ``Metrics.as_dict()`` and every per-group row, for every zoo
  model (small input sizes where the default is slow to build) x every hardware preset x
  the plans ``unfused``, ``greedy`` and ``tvm_like``;
- ``reference``: per graph output of ``reference_run`` on seeded inputs, the SHA-256 of its
  bytes and its sum / abs-sum / min / max, for a few models;
- ``verify``: per plan of those models, float and CIM numerics, the max relative error,
  counted vs analytic activation bytes, and a checksum of every executed output;
- ``roundtrip``: the structural hash of each of those models after ``to_onnx`` +
  ``load_onnx`` (the exporter and importer), and its op classes.

``--diff`` prints every leaf that differs (path, before, after) and exits 1 when any does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fusiontune.export.onnx_export import to_onnx
from fusiontune.frontend.onnx_import import load_onnx
from fusiontune.frontend.zoo import build_zoo, zoo_models
from fusiontune.ir.graph import Graph
from fusiontune.planner.baselines import greedy_plan, tvm_like_plan, unfused_plan
from fusiontune.planner.plan import Plan
from fusiontune.reference import random_inputs, reference_run
from fusiontune.sim.cost import simulate
from fusiontune.sim.hardware import load_hardware, preset_names
from fusiontune.sim.verify import verify

# input sizes small enough to build every model in seconds (None: the model's default)
SIM_SIZES: dict[str, int | None] = {
    "lenet5": None,
    "vgg11": 32,
    "vgg16": 32,
    "vgg19": 32,
    "resnet18": 64,
    "resnet50": 32,
    "resnet18_train": 32,
    "mobilenet_v2": 64,
    "mlp_relu": None,
    "mlp_linear": None,
    "mlp_bottleneck": None,
    "mlp_wide": None,
    "bert_encoder": 32,
}
# models whose numerics are recorded (executing is slower than simulating)
NUMERIC_SIZES: dict[str, int | None] = {
    "lenet5": None,
    "resnet18": 32,
    "resnet18_train": 16,
    "mobilenet_v2": 32,
    "mlp_linear": None,
    "bert_encoder": 16,
}
PLANS = {"unfused": unfused_plan, "greedy": greedy_plan, "tvm_like": tvm_like_plan}


def _plain(value: Any) -> Any:
    """JSON-friendly copy (tuples as lists, numpy scalars as Python numbers)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _checksum(array: np.ndarray) -> dict[str, Any]:
    a = np.ascontiguousarray(array)
    a64 = a.astype(np.float64)
    return {
        "sha256": hashlib.sha256(a.tobytes()).hexdigest()[:16],
        "dtype": str(a.dtype),
        "shape": list(a.shape),
        "sum": float(a64.sum()),
        "abs_sum": float(np.abs(a64).sum()),
        "min": float(a64.min()) if a.size else 0.0,
        "max": float(a64.max()) if a.size else 0.0,
    }


def _plans(graph: Graph) -> dict[str, Plan]:
    return {name: make(graph) for name, make in PLANS.items()}


def record() -> dict[str, Any]:
    """Every golden number (module docstring)."""
    out: dict[str, Any] = {"simulate": {}, "reference": {}, "verify": {}, "roundtrip": {}}
    presets = preset_names()
    for model in zoo_models():
        graph = build_zoo(model, SIM_SIZES.get(model))
        plans = _plans(graph)
        for preset in presets:
            hw = load_hardware(preset)
            for plan_name, plan in plans.items():
                m = simulate(graph, plan, hw)
                key = f"{model}/{preset}/{plan_name}"
                out["simulate"][key] = _plain({**m.as_dict(), "groups": m.group_rows()})
        print(f"simulated {model}", file=sys.stderr)
    for model, size in NUMERIC_SIZES.items():
        graph = build_zoo(model, size)
        inputs = random_inputs(graph, seed=0)
        ref = reference_run(graph, inputs)
        out["reference"][model] = {t: _checksum(v) for t, v in ref.items()}
        for plan_name, plan in _plans(graph).items():
            for numerics in ("float", "cim"):
                rep = verify(graph, plan, numerics=numerics, seed=0)
                out["verify"][f"{model}/{plan_name}/{numerics}"] = {
                    "max_rel_err": rep.max_rel_err,
                    "passed": rep.passed,
                    "counted_act_bytes": rep.counted_act_bytes,
                    "analytic_act_bytes": rep.analytic_act_bytes,
                    "outputs": {t: _checksum(v) for t, v in rep.execution.outputs.items()},
                }
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{model}.onnx"
            to_onnx(graph, path)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                back = load_onnx(path)
        out["roundtrip"][model] = {
            "hash": back.structural_hash,
            "classes": [f"{op.op_type}:{op.op_class.value}" for op in back.ops],
        }
        print(f"executed {model}", file=sys.stderr)
    return out


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k in sorted(value):
            yield from _leaves(value[k], f"{path}/{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{path}[{i}]")
    else:
        yield path, value


def diff(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Leaves that differ: ``(path, before, after)`` (missing on one side: ``<absent>``)."""
    a, b = dict(_leaves(before)), dict(_leaves(after))
    out = []
    for path in sorted(set(a) | set(b)):
        va, vb = a.get(path, "<absent>"), b.get(path, "<absent>")
        if va != vb:
            out.append((path, va, vb))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", help="JSON file to write")
    parser.add_argument("--diff", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two files")
    args = parser.parse_args(argv)
    if args.diff:
        before, after = (json.loads(Path(p).read_text()) for p in args.diff)
        rows = diff(before, after)
        for path, va, vb in rows:
            print(f"{path}: {va!r} -> {vb!r}")
        print(f"{len(rows)} differing values")
        return 1 if rows else 0
    if not args.out:
        parser.error("give the JSON file to write (or --diff BEFORE AFTER)")
    Path(args.out).write_text(json.dumps(record(), indent=1, sort_keys=True))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
