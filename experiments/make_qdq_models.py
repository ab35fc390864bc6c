"""Regenerate the quantized-model corpus ``tests/data/qdq/`` with onnxruntime's quantization tool.

Each file is a fusiontune zoo model exported with :func:`fusiontune.to_onnx`, prepared with
onnxruntime's ``quant_pre_process`` (shape inference and ORT's graph optimizations: Conv+BN
folded, as a deployment flow does) and quantized with ``quantize_static`` (QDQ and QOperator
formats, per-tensor and per-channel weights, int8 or uint8 activations) calibrated on a few
seeded random inputs, or with ``quantize_dynamic`` (ConvInteger / MatMulInteger).

The models are narrowed versions of the zoo's builders so that each file stays small (a
committed test file is kept under ``MAX_FILE_BYTES``): ``resnet18n`` is the zoo's ResNet-18
topology (stem, 4 stages of 2 BasicBlocks with downsample shortcuts, head) with stage widths
``NARROW_RESNET_WIDTHS`` and 10 classes at 32x32; ``encoder`` is one post-LN encoder layer of
the zoo's BERT builder (``deep_encoder``) at hidden 64, 4 heads, sequence 16. ``README.md``
beside the files records how each was made and the versions.

Usage (no torch needed)::

    python experiments/make_qdq_models.py            # rewrite tests/data/qdq/
    python experiments/make_qdq_models.py --full DIR # full-width models into DIR, measured

``--full`` quantizes the zoo's full-width ``resnet18`` (32x32) and ``bert_encoder`` (sequence
``FULL_SEQ``) the same way (too large to commit: ~11 MB and ~7 MB), loads them and measures
what ``tests/test_qdq.py`` checks on the small files: reference and fused CIM execution against
onnxruntime, in output steps, and the largest ADC count; the table goes to
``results/exp_qdq_full.md``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import onnx
import onnxruntime
from onnxruntime import quantization as ortq
from onnxruntime.quantization.shape_inference import quant_pre_process

import fusiontune
from fusiontune.frontend import zoo
from fusiontune.ir.graph import Graph

REPO_DIR = Path(__file__).resolve().parents[1]
QDQ_DIR = REPO_DIR / "tests" / "data" / "qdq"
MAX_FILE_BYTES = 500_000
SEED = 0
CALIBRATION_SAMPLES = 8
NARROW_RESNET_WIDTHS = (8, 16, 32, 64)  # torchvision's (64, 128, 256, 512) / 8
NARROW_CLASSES = 10
RESNET_SIDE = 32
ENCODER = {"layers": 1, "seq": 16, "hidden": 64, "heads": 4}
FULL_SEQ = 32
OPSET = 20  # Gelu (the encoder) is an opset-20 op


def resnet18n() -> Graph:
    """The zoo's ResNet-18 builder at 1/8 width, 10 classes, 32x32 (seeded weights)."""
    with (
        mock.patch.object(zoo, "RESNET_WIDTHS", NARROW_RESNET_WIDTHS),
        mock.patch.object(zoo, "IMAGENET_CLASSES", NARROW_CLASSES),
    ):
        return zoo.build_zoo("resnet18", input_size=RESNET_SIDE, seed=SEED)


def encoder() -> Graph:
    """One encoder layer of the zoo's BERT builder, small (seeded weights)."""
    return zoo.deep_encoder(placeholder=False, **ENCODER)


class _Reader(ortq.CalibrationDataReader):
    """Seeded random calibration inputs (standard normal), ``CALIBRATION_SAMPLES`` of them."""

    def __init__(self, graph: Graph) -> None:
        rng = np.random.default_rng(SEED)
        self._items: Iterator[dict[str, np.ndarray]] = iter(
            [
                {
                    name: rng.standard_normal(graph.tensors[name].shape).astype(np.float32)
                    for name in graph.inputs
                }
                for _ in range(CALIBRATION_SAMPLES)
            ]
        )

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._items, None)


@dataclass(frozen=True)
class Case:
    """One corpus file: its stem, the model, how it is quantized, and what it shows."""

    name: str
    model: Callable[[], Graph]
    quantize: Callable[[Graph, Path, Path], str]  # (graph, float file, out) -> how
    shows: str


def _static(
    fmt: str, per_channel: bool, activation: str = "QInt8", **options: Any
) -> Callable[[Graph, Path, Path], str]:
    def run(graph: Graph, src: Path, out: Path) -> str:
        ortq.quantize_static(
            str(src),
            str(out),
            _Reader(graph),
            quant_format=getattr(ortq.QuantFormat, fmt),
            per_channel=per_channel,
            activation_type=getattr(ortq.QuantType, activation),
            weight_type=ortq.QuantType.QInt8,
            calibrate_method=ortq.CalibrationMethod.MinMax,
            extra_options=options or None,
        )
        extra = "".join(f", {k}={v}" for k, v in options.items())
        return (
            f"quantize_static(QuantFormat.{fmt}, per_channel={per_channel}, "
            f"activation_type={activation}, weight_type=QInt8, MinMax{extra})"
        )

    return run


def _dynamic(graph: Graph, src: Path, out: Path) -> str:
    ops = ["Conv", "MatMul"]
    ortq.quantize_dynamic(
        str(src), str(out), weight_type=ortq.QuantType.QInt8, op_types_to_quantize=ops
    )
    return "quantize_dynamic(weight_type=QInt8, op_types_to_quantize=[Conv, MatMul])"


CASES = (
    Case("resnet18n_qdq_tensor", resnet18n, _static("QDQ", False, "QUInt8"),
         "QDQ, per-tensor weights, uint8 activations: Conv(+folded BN)-Relu, MaxPool, residual "
         "Add, GlobalAveragePool, Gemm"),
    Case("resnet18n_qdq_channel", resnet18n, _static("QDQ", True, "QInt8"),
         "QDQ, per-channel weights (axis 0), int8 activations"),
    Case("resnet18n_qop", resnet18n, _static("QOperator", True, "QUInt8"),
         "QOperator: QLinearConv, QLinearAdd / QLinearGlobalAveragePool (com.microsoft), "
         "QGemm"),
    Case("resnet18n_int", resnet18n, _dynamic,
         "dynamic quantization: DynamicQuantizeLinear -> ConvInteger / MatMulInteger -> Cast"),
    Case("encoder_qdq", encoder, _static("QDQ", True, "QInt8"),
         "QDQ BERT-like encoder layer: per-channel MatMul weights, Q/DQ around the attention "
         "MatMuls, Softmax, LayerNormalization, Gelu"),
    Case("encoder_qop", encoder, _static("QOperator", False, "QUInt8"),
         "QOperator encoder layer: QLinearMatMul"),
)  # fmt: skip


def make(case: Case, folder: Path, max_bytes: int | None = MAX_FILE_BYTES) -> str:
    """Write ``<folder>/<case.name>.onnx``; returns how it was made."""
    graph = case.model()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "float.onnx"
        prepared = Path(tmp) / "prepared.onnx"
        fusiontune.to_onnx(graph, src, opset=OPSET)
        quant_pre_process(str(src), str(prepared), skip_symbolic_shape=True)
        out = folder / f"{case.name}.onnx"
        how = case.quantize(graph, prepared, out)
    size = out.stat().st_size
    if max_bytes is not None and size > max_bytes:
        raise SystemExit(f"{out}: {size} bytes, over the {max_bytes} limit")
    onnx.checker.check_model(str(out))
    return how


def _measure(name: str, path: Path) -> str:
    """One table row: load, LINEAR ops, reference / CIM vs onnxruntime in output steps."""
    import time

    import fusiontune.sim.cim as cim
    from fusiontune import load_onnx
    from fusiontune.ir.opclass import OpClass
    from fusiontune.ops.quant import grid_of
    from fusiontune.planner.baselines import greedy_plan
    from fusiontune.planner.plan import PlannerConfig
    from fusiontune.reference import random_inputs, reference_run
    from fusiontune.sim.execute import execute
    from fusiontune.sim.hardware import HardwareConfig

    graph = load_onnx(path)
    feeds = random_inputs(graph, seed=3)
    out = graph.outputs[0]
    producer = graph.producer(out)
    grid = grid_of(graph, producer) if producer is not None else None
    step = float(grid.scale) if grid is not None else float("nan")

    def ort_run(level: str) -> np.ndarray:
        opts = onnxruntime.SessionOptions()
        opts.graph_optimization_level = getattr(onnxruntime.GraphOptimizationLevel, level)
        sess = onnxruntime.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        return np.asarray(sess.run(None, feeds)[0])

    class _AdcCounting:  # numpy for sim/cim.py, recording what reaches the ADC's clip
        peak = 0.0

        def __getattr__(self, key: str) -> Any:
            return getattr(np, key)

        def minimum(self, a: np.ndarray, b: Any) -> np.ndarray:
            self.peak = max(self.peak, float(np.max(a)))
            return np.minimum(a, b)

    counting = _AdcCounting()
    hw = HardwareConfig()
    start = time.perf_counter()
    with mock.patch.object(cim, "np", counting):
        plan = greedy_plan(graph, PlannerConfig(), hw=hw)
        run = execute(graph, plan, feeds, numerics="cim", hw=hw).outputs[out]
    seconds = time.perf_counter() - start
    ref = reference_run(graph, feeds)[out]
    linear = sum(op.op_class is OpClass.LINEAR for op in graph.ops)
    cells = []
    for level in ("ORT_DISABLE_ALL", "ORT_ENABLE_ALL"):
        want = ort_run(level)
        cells += [f"{np.max(np.abs(v - want)) / step:.2f}" for v in (ref, run)]
    return (f"| {name} | {len(graph.ops)} | {linear} | {plan.n_groups} | " + " | ".join(cells)
            + f" | {counting.peak:.0f} / {2**hw.adc_bits - 1} | {seconds:.1f} |")  # fmt: skip


ENCODER_NOTE = """The encoder's distance to the integer execution is onnxruntime's: its integer
QLinearMatMul of the two attention activations (not a crossbar op) rounds some context codes one
code away from the exact requantization, and the layers after it grow that at the output
(`tests/test_qdq.py` measures the same on the small encoder). Against the file's QDQ semantics
the CIM run is within one step.
"""


def full(folder: Path) -> None:
    """Quantize and measure the full-width models (module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    models = {
        "resnet18": lambda: zoo.build_zoo("resnet18", input_size=RESNET_SIDE, seed=SEED),
        "bert_encoder": lambda: zoo.build_zoo("bert_encoder", input_size=FULL_SEQ, seed=SEED),
    }
    rows = []
    for name, build in models.items():
        case = Case(f"{name}_qdq_channel", build, _static("QDQ", True, "QInt8"), "")
        make(case, folder, max_bytes=None)
        rows.append(_measure(f"`{name}`", folder / f"{case.name}.onnx"))
        print(rows[-1])
    table = (
        f"""# Full-width QDQ models (experiments/make_qdq_models.py --full)

The zoo's full-width `resnet18` ({RESNET_SIDE}x{RESNET_SIDE}) and `bert_encoder` (sequence
{FULL_SEQ}) exported with `fusiontune.to_onnx`, prepared with `quant_pre_process` and quantized
with onnxruntime {onnxruntime.__version__} (QDQ, per-channel int8 weights, int8 activations,
MinMax on {CALIBRATION_SAMPLES} seeded random inputs). Errors are max |ours - onnxruntime| in
steps of the output's scale (the last DequantizeLinear's); `ref`: the reference interpreter,
`cim`: the greedy plan on the default ISAAC-like hardware executed with `numerics="cim"` (the
model's codes on 128-row crossbars, 2-bit cells, 1-bit DACs, 8-bit ADC). `ORT_DISABLE_ALL` runs
the QDQ file as written; `ORT_ENABLE_ALL` runs onnxruntime's integer kernels (QLinearConv, QGemm,
QLinearMatMul, ...). ADC: the largest column count any crossbar produced / the ADC's top count.

| model | ops | LINEAR | groups | ref vs QDQ | cim vs QDQ | ref vs int | cim vs int | ADC | cim s |
|---|---|---|---|---|---|---|---|---|---|
"""
        + "\n".join(rows)
        + "\n\n"
        + ENCODER_NOTE
    )
    (REPO_DIR / "results" / "exp_qdq_full.md").write_text(table)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", type=Path, help="quantize the full-width models into DIR")
    args = parser.parse_args()
    if args.full is not None:
        full(args.full)
        return
    QDQ_DIR.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in CASES:
        how = make(case, QDQ_DIR)
        size = (QDQ_DIR / f"{case.name}.onnx").stat().st_size
        rows.append(f"| `{case.name}.onnx` | {size:,} | {how} | {case.shows} |")
        print(case.name, size)
    readme = (
        f"""# Quantized-model corpus

Quantized ONNX models from onnxruntime's quantization tool, checked by `tests/test_qdq.py`
(load, LINEAR weights, fusion through the Q/DQ ops, reference and CIM execution vs
onnxruntime). Regenerate with `python experiments/make_qdq_models.py` (no torch needed).

How: a zoo builder's graph -> `fusiontune.to_onnx` (opset {OPSET}) -> onnxruntime's
`quant_pre_process` (Conv+BN folded) -> the quantizer below, calibrated on
{CALIBRATION_SAMPLES} seeded standard-normal inputs (seed {SEED}); onnxruntime
{onnxruntime.__version__}, onnx {onnx.__version__}. `resnet18n`: the zoo's ResNet-18 at stage widths
{NARROW_RESNET_WIDTHS}, {NARROW_CLASSES} classes, {RESNET_SIDE}x{RESNET_SIDE}; `encoder`: the zoo's
encoder layer (`deep_encoder`) with {ENCODER}.

| file | bytes | quantized by | shows |
|---|---|---|---|
"""
        + "\n".join(rows)
        + "\n"
    )
    (QDQ_DIR / "README.md").write_text(readme)


if __name__ == "__main__":
    main()
