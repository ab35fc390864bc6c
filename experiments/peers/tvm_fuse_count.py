"""Count the kernels TVM's operator fusion makes of ONNX models (runs in TVM's side venv).

Imports only the standard library, onnx and TVM (apache-tvm, Relax). For each ONNX file:
Relax's ONNX front end (weights as constants), ``DecomposeOpsForInference`` (batch norm in
inference form), then TVM's "zero" pipeline (``relax.pipeline.zero_pipeline``: LegalizeOps,
AnnotateTIROpPattern, FoldConstant, FuseOps, FuseTIR) and dead-code elimination. The kernels
are the ``call_tir`` calls left in ``main``: one per fused or unfused TIR function launch.

Usage: ``/work/tvm-venv/bin/python experiments/peers/tvm_fuse_count.py A.onnx B.onnx ...``;
prints one JSON object: ``{"tvm_version": ..., "models": {file: {...}}}``.
"""

from __future__ import annotations

import json
import sys
import time


def count(path: str) -> dict[str, object]:
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    start = time.perf_counter()
    mod = from_onnx(onnx.load(path), keep_params_in_input=False)
    passes = [
        relax.transform.DecomposeOpsForInference(),
        relax.pipeline.zero_pipeline(),
        relax.transform.DeadCodeElimination(),
    ]
    with tvm.transform.PassContext(opt_level=3):
        mod = tvm.transform.Sequential(passes)(mod)
    call_tir = tvm.ir.Op.get("relax.call_tir")
    calls: list[str] = []

    def visit(expr: object) -> None:
        if isinstance(expr, relax.Call) and expr.op == call_tir:
            calls.append(expr.args[0].name_hint)

    relax.analysis.post_order_visit(mod["main"], visit)
    return {
        "kernels": len(calls),
        "fused_kernels": sum(1 for c in calls if c.startswith("fused_")),
        "tir_functions": sum(1 for _, f in mod.functions.items() if type(f).__name__ == "PrimFunc"),
        "seconds": round(time.perf_counter() - start, 3),
    }


def main(paths: list[str]) -> None:
    import tvm

    out: dict[str, object] = {"tvm_version": tvm.__version__, "models": {}}
    models: dict[str, object] = {}
    for path in paths:
        try:
            models[path] = count(path)
        except Exception as exc:  # a model TVM's front end cannot take: say so, go on
            models[path] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    out["models"] = models
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
