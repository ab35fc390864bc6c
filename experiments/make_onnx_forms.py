"""Regenerate the exporter-form corpus ``tests/data/onnx_forms/`` (and probe exporter forms).

Each file is a tiny real export of one form that the importer, the op classes and the fusion
rules must handle: training-mode BatchNormalization in the opset 9-13 form (5 outputs, no
``training_mode`` attribute) and the opset 14+ attribute form, Gemm with transposes and
alpha/beta, MatMul with the constant on the left, Conv with ``auto_pad``/groups/dilations,
ConvTranspose, Resize, GELU as the Erf pattern and as the Gelu op, LayerNormalization as one
op and decomposed, and a small FPN-like detector neck. Files come from ``torch.onnx.export``
where torch emits the form and from ``onnx.helper`` where it does not (``auto_pad``, Gemm
``transA``/``alpha``/``beta``); ``README.md`` beside them records which, with the versions.

Usage (needs torch, see experiments/README.md)::

    python experiments/make_onnx_forms.py            # rewrite tests/data/onnx_forms/
    python experiments/make_onnx_forms.py --probe F  # exporter forms of common layers -> JSON F
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO_DIR = Path(__file__).resolve().parents[1]
FORMS_DIR = REPO_DIR / "tests" / "data" / "onnx_forms"
MAX_CORPUS_BYTES = 2_000_000  # the committed corpus stays below 2 MB in all
HELPER_OPSET = 17  # opset of the onnx.helper files
HELPER_IR_VERSION = 8  # IR version onnxruntime >= 1.17 reads for opset 17
SEED = 0


@dataclass(frozen=True)
class Form:
    """One corpus file: its stem, how it is made, and what it shows."""

    name: str
    make: Callable[[Path], str]  # writes the file; returns how it was made
    shows: str


# ---- torch-made forms ------------------------------------------------------------------------
def _torch_export(
    module: Any, args: tuple[Any, ...], path: Path, opset: int | None, dynamo: bool = False,
    training: bool = False,
) -> str:  # fmt: skip
    import torch

    kwargs: dict[str, Any] = {"input_names": ["x"], "dynamo": dynamo}
    if opset is not None:
        kwargs["opset_version"] = opset
    if training:
        module.train()
        kwargs["training"] = torch.onnx.TrainingMode.TRAINING
        kwargs["do_constant_folding"] = False
    else:
        module.eval()
    if dynamo:
        kwargs["external_data"] = False
        kwargs["verbose"] = False
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        with torch.no_grad():
            torch.onnx.export(module, args, str(path), **kwargs)
    model = onnx.load(str(path))
    if dynamo:  # its node metadata holds stack traces with this machine's paths: drop them
        for node in model.graph.node:
            del node.metadata_props[:]
        onnx.save(model, str(path))
    version = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    which = "dynamo" if dynamo else "torchscript"
    return f"torch {torch.__version__.split('+')[0]} {which} exporter, opset {version}"


def _seeded() -> Any:
    import torch

    torch.manual_seed(SEED)
    return torch


def _fc_bn_fc() -> Any:
    torch = _seeded()
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 4)
    )


def make_bn_train(opset: int) -> Callable[[Path], str]:
    def make(path: Path) -> str:
        torch = _seeded()
        x = torch.randn(8, 8) * 3 + 1  # batch 8: batch statistics far from the running ones
        return _torch_export(_fc_bn_fc(), (x,), path, opset, training=True)

    return make


def make_matmul_const_left(path: Path) -> str:
    torch = _seeded()

    class WeightFirst(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(12, 6))
            self.fc = torch.nn.Linear(5, 3)

        def forward(self, x: Any) -> Any:
            return self.fc(torch.relu(torch.matmul(self.w, x)))  # (12,6) @ (2,6,5)

    return _torch_export(WeightFirst(), (torch.randn(2, 6, 5),), path, 17)


def make_conv_group_dilation(path: Path) -> str:
    torch = _seeded()
    module = torch.nn.Sequential(
        torch.nn.Conv2d(4, 8, 3, padding=2, dilation=2, groups=2),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=8),  # depthwise
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 6, 1),
    )
    return _torch_export(module, (torch.randn(1, 4, 10, 10),), path, 17)


def make_conv_transpose(path: Path) -> str:
    torch = _seeded()
    module = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.ConvTranspose2d(8, 6, 4, stride=2, padding=1),  # 2x upsampling, as in FPNs
        torch.nn.ReLU(),
        torch.nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1, groups=2),
    )
    return _torch_export(module, (torch.randn(1, 3, 6, 6),), path, 17)


def make_resize(mode: str) -> Callable[[Path], str]:
    def make(path: Path) -> str:
        torch = _seeded()
        align = False if mode == "bilinear" else None

        class Up(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
                self.out = torch.nn.Conv2d(4, 2, 1)

            def forward(self, x: Any) -> Any:
                y = torch.nn.functional.interpolate(
                    torch.relu(self.conv(x)), scale_factor=2, mode=mode, align_corners=align
                )
                return self.out(y)

        return _torch_export(Up(), (torch.randn(1, 3, 5, 5),), path, 17)

    return make


def _mlp(act: Any) -> Any:
    torch = _seeded()
    return torch.nn.Sequential(torch.nn.Linear(8, 16), act, torch.nn.Linear(16, 4))


def make_gelu(opset: int) -> Callable[[Path], str]:
    def make(path: Path) -> str:
        torch = _seeded()
        return _torch_export(_mlp(torch.nn.GELU()), (torch.randn(3, 8),), path, opset)

    return make


def make_layernorm(opset: int) -> Callable[[Path], str]:
    def make(path: Path) -> str:
        torch = _seeded()
        module = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)
        )
        with torch.no_grad():  # non-trivial affine parameters
            module[1].weight.normal_()
            module[1].bias.normal_()
        return _torch_export(module, (torch.randn(2, 5, 8),), path, opset)

    return make


def _fpn_neck() -> Any:
    torch = _seeded()
    nn = torch.nn

    class TinyFPN(nn.Module):
        """Three strided stages, lateral 1x1 convs, a top-down path (nearest Resize + Add;
        one level upsampled by ConvTranspose instead) and 3x3 output convs."""

        def __init__(self) -> None:
            super().__init__()
            self.c1 = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.ReLU())
            self.c2 = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU())
            self.c3 = nn.Sequential(nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU())
            self.lat1, self.lat2, self.lat3 = (
                nn.Conv2d(8, 8, 1),
                nn.Conv2d(16, 8, 1),
                nn.Conv2d(32, 8, 1),
            )
            self.up3 = nn.ConvTranspose2d(8, 8, 2, stride=2)
            self.out1, self.out2 = nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)

        def forward(self, x: Any) -> Any:
            f1 = self.c1(x)
            f2 = self.c2(f1)
            f3 = self.c3(f2)
            p3 = self.lat3(f3)
            p2 = self.lat2(f2) + self.up3(p3)
            p1 = self.lat1(f1) + nn.functional.interpolate(p2, scale_factor=2, mode="nearest")
            return self.out1(p1), self.out2(p2), p3

    return TinyFPN()


def make_fpn(dynamo: bool) -> Callable[[Path], str]:
    def make(path: Path) -> str:
        torch = _seeded()
        opset = None if dynamo else 17
        return _torch_export(_fpn_neck(), (torch.randn(1, 3, 16, 16),), path, opset, dynamo)

    return make


# ---- onnx.helper-made forms (torch does not emit them) ----------------------------------------
def _const(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> onnx.TensorProto:
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def _save(nodes: list[onnx.NodeProto], inputs: list[Any], outputs: list[Any],
          inits: list[onnx.TensorProto], path: Path, name: str) -> str:  # fmt: skip
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", HELPER_OPSET)],
        producer_name="fusiontune make_onnx_forms",
    )  # fmt: skip
    model.ir_version = HELPER_IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return f"onnx {onnx.__version__} onnx.helper, opset {HELPER_OPSET}"


def _f32(name: str, shape: list[int]) -> Any:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def make_gemm_trans(path: Path) -> str:
    """x^T (transA) times W^T (transB) with alpha 0.5 and beta 2, then a plain Gemm."""
    rng = np.random.default_rng(SEED)
    nodes = [
        helper.make_node(
            "Gemm", ["x", "w1", "b1"], ["h"], name="fc1", transA=1, transB=1, alpha=0.5, beta=2.0
        ),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], name="fc2", alpha=1.5, beta=0.25),
    ]
    inits = [_const("w1", (16, 8), rng), _const("b1", (16,), rng), _const("w2", (16, 4), rng),
             _const("b2", (1, 4), rng)]  # fmt: skip
    return _save(nodes, [_f32("x", [8, 3])], [_f32("y", [3, 4])], inits, path, "gemm_trans")


def make_conv_auto_pad(mode: str) -> Callable[[Path], str]:
    def make(path: Path) -> str:
        rng = np.random.default_rng(SEED)
        nodes = [
            # even kernel, stride 2: SAME_UPPER and SAME_LOWER put the odd pad on opposite sides
            helper.make_node(
                "Conv",
                ["x", "w1", "b1"],
                ["c1"],
                name="conv1",
                auto_pad=mode,
                kernel_shape=[2, 2],
                strides=[2, 2],
            ),
            helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
            helper.make_node(
                "Conv", ["r1", "w2"], ["c2"], name="conv2", auto_pad=mode, kernel_shape=[4, 4]
            ),
            helper.make_node("Relu", ["c2"], ["y"], name="relu2"),
        ]
        inits = [_const("w1", (6, 3, 2, 2), rng), _const("b1", (6,), rng),
                 _const("w2", (4, 6, 4, 4), rng)]  # fmt: skip
        return _save(nodes, [_f32("x", [1, 3, 7, 7])], [_f32("y", [1, 4, 4, 4])], inits, path,
                     f"conv_{mode.lower()}")  # fmt: skip

    return make


FORMS: tuple[Form, ...] = (
    Form("bn_train_opset9", make_bn_train(9),
         "FC -> training BatchNormalization (5 outputs, no training_mode; opset 9) -> FC"),
    Form("bn_train_opset12", make_bn_train(12),
         "FC -> training BatchNormalization (5 outputs, no training_mode; opset 12) -> FC"),
    Form("bn_train_opset15", make_bn_train(15),
         "FC -> BatchNormalization training_mode=1 (3 outputs; opset 15) -> FC"),
    Form("gemm_trans_alpha_beta", make_gemm_trans,
         "Gemm transA=1 transB=1 alpha=0.5 beta=2 -> Relu -> Gemm alpha=1.5 beta=0.25"),
    Form("matmul_const_left", make_matmul_const_left,
         "MatMul(constant W, x) -> Relu -> Linear"),
    Form("conv_same_upper", make_conv_auto_pad("SAME_UPPER"),
         "Conv auto_pad=SAME_UPPER (even kernels, stride 2) -> Relu -> Conv -> Relu"),
    Form("conv_same_lower", make_conv_auto_pad("SAME_LOWER"),
         "Conv auto_pad=SAME_LOWER (even kernels, stride 2) -> Relu -> Conv -> Relu"),
    Form("conv_group_dilation", make_conv_group_dilation,
         "grouped dilated Conv -> BN -> Relu -> depthwise Conv -> Relu -> 1x1 Conv"),
    Form("conv_transpose", make_conv_transpose,
         "Conv -> Relu -> ConvTranspose (stride 2) -> Relu -> grouped ConvTranspose "
         "(output_padding)"),
    Form("resize_nearest", make_resize("nearest"),
         "Conv -> Relu -> Resize nearest x2 -> Conv"),
    Form("resize_linear", make_resize("bilinear"),
         "Conv -> Relu -> Resize linear x2 (half_pixel) -> Conv"),
    Form("gelu_erf_opset12", make_gelu(12), "FC -> GELU as Div/Erf/Add/Mul/Mul -> FC"),
    Form("gelu_op_opset20", make_gelu(20), "FC -> Gelu op -> FC"),
    Form("layernorm_op_opset17", make_layernorm(17), "FC -> LayerNormalization op -> FC"),
    Form("layernorm_decomposed_opset12", make_layernorm(12),
         "FC -> LayerNorm as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add -> FC"),
    Form("fpn_neck", make_fpn(False),
         "3 strided Conv-BN-ReLU stages, lateral 1x1 Convs, top-down ConvTranspose and nearest "
         "Resize + Add, 3x3 output Convs"),
    Form("fpn_neck_dynamo", make_fpn(True), "the same neck from the dynamo exporter"),
)  # fmt: skip


def write_corpus(out_dir: Path = FORMS_DIR) -> list[tuple[str, int, str, str]]:
    """Write every form and the README; returns (file, bytes, made by, shows) rows."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for form in FORMS:
        path = out_dir / f"{form.name}.onnx"
        made_by = form.make(path)
        rows.append((path.name, path.stat().st_size, made_by, form.shows))
        print(f"  {path.name}: {path.stat().st_size} B ({made_by})")
    total = sum(r[1] for r in rows)
    if total > MAX_CORPUS_BYTES:
        raise SystemExit(f"corpus is {total} B, over the {MAX_CORPUS_BYTES} B budget")
    lines = [
        "# Exporter-form corpus",
        "",
        "Tiny real ONNX exports of the forms fusiontune must handle, one form per file;",
        "`tests/test_onnx_forms.py` loads each and checks the reference executor and the greedy",
        "plan against onnxruntime. Regenerate with `python experiments/make_onnx_forms.py`",
        "(needs torch: see `experiments/README.md`). Random weights, seed 0.",
        "",
        "| file | bytes | made by | shows |",
        "|---|---|---|---|",
        *(f"| `{f}` | {n:,} | {by} | {shows} |" for f, n, by, shows in rows),
        "",
        f"Total: {total:,} bytes.",
        "",
    ]
    (out_dir / "README.md").write_text("\n".join(lines))
    return rows


# ---- probe: what each exporter emits for common layers -------------------------------------------
def _probe_modules() -> dict[str, tuple[Any, tuple[Any, ...], bool]]:
    torch = _seeded()
    nn = torch.nn

    class Sdpa(nn.Module):
        def forward(self, x: Any) -> Any:
            q = x.view(1, 4, 2, 8).transpose(1, 2)
            return nn.functional.scaled_dot_product_attention(q, q, q).transpose(1, 2)

    class Mha(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mha = nn.MultiheadAttention(16, 2, batch_first=True)

        def forward(self, x: Any) -> Any:
            return self.mha(x, x, x, need_weights=False)[0]

    x2, x3 = torch.randn(4, 16), torch.randn(1, 4, 16)
    return {
        "BatchNorm1d (train)": (nn.BatchNorm1d(16), (x2,), True),
        "BatchNorm2d (eval)": (nn.BatchNorm2d(4), (torch.randn(1, 4, 3, 3),), False),
        "GELU": (nn.GELU(), (x2,), False),
        "GELU(tanh)": (nn.GELU(approximate="tanh"), (x2,), False),
        "LayerNorm": (nn.LayerNorm(16), (x3,), False),
        "Softmax": (nn.Softmax(dim=-1), (x3,), False),
        "SiLU": (nn.SiLU(), (x2,), False),
        "Hardswish": (nn.Hardswish(), (x2,), False),
        "scaled_dot_product_attention": (Sdpa(), (x3,), False),
        "MultiheadAttention": (Mha(), (x3,), False),
    }


def _describe(model: onnx.ModelProto) -> str:
    parts = []
    for node in model.graph.node:
        if node.op_type in ("Constant", "Identity"):
            continue
        label = node.op_type
        if node.op_type == "BatchNormalization":
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            label += f"[{len(node.output)} out, training_mode={attrs.get('training_mode', '-')}]"
        parts.append(label)
    return " ".join(parts) or "(nothing left)"


def probe(out_file: Path) -> list[dict[str, Any]]:
    """The op sequence each exporter emits for each probe module, written as JSON."""
    import tempfile

    exporters = (("torchscript", 12), ("torchscript", 17), ("torchscript", None),
                 ("dynamo", None))  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for layer, (module, args, training) in _probe_modules().items():
            for exporter, opset in exporters:
                path = Path(tmp) / "probe.onnx"
                row: dict[str, Any] = {"layer": layer, "exporter": exporter}
                try:
                    made = _torch_export(module, args, path, opset, exporter == "dynamo", training)
                    row["opset"] = int(made.rsplit(" ", 1)[-1])
                    row["ops"] = _describe(onnx.load(str(path)))
                except Exception as exc:
                    row["opset"] = opset or "default"
                    row["ops"] = (
                        f"export failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                    )
                rows.append(row)
    out_file.write_text(json.dumps(rows, indent=1))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", metavar="OUT.json", help="probe exporter forms into a JSON")
    parser.add_argument("--out", default=str(FORMS_DIR))
    args = parser.parse_args(argv)
    if args.probe:
        for row in probe(Path(args.probe)):
            print(f"{row['layer']:<30} {row['exporter']:<12} {row['opset']!s:<5} {row['ops']}")
        return 0
    write_corpus(Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
