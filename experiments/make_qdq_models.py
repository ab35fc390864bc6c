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


def make(case: Case, folder: Path) -> str:
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
    if size > MAX_FILE_BYTES:
        raise SystemExit(f"{out}: {size} bytes, over the {MAX_FILE_BYTES} limit")
    onnx.checker.check_model(str(out))
    return how


def main() -> None:
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
