"""The model zoo: every model builds and lints, with hand-derived structure and published sizes.

Published parameter counts are torchvision's "trainable parameters". Our Graph counts every
constant an op reads, so :func:`trainable_params` removes what PyTorch keeps as buffers or
what the ONNX export adds: BatchNorm running mean/var (2 per channel) and Clip bounds.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import fusiontune
from fusiontune.errors import ModelLoadError
from fusiontune.frontend.zoo import ZOO, build_zoo, zoo_models, zoo_summary
from fusiontune.ir.graph import Graph
from fusiontune.ir.opclass import OpClass

MAC_TOLERANCE = 0.01  # published MACs are rounded figures; ours must lie within 1 %

# small input sizes so that every model builds in milliseconds
SMALL_SIZE = {"lenet5": 32, "bert_encoder": 16}
SMALL_CNN_SIDE = 32


def small_size(name: str) -> int | None:
    if name in SMALL_SIZE:
        return SMALL_SIZE[name]
    return SMALL_CNN_SIDE if ZOO[name].input_size_meaning == "spatial side" else None


def value(graph: Graph, name: str) -> np.ndarray:
    """The data of a constant tensor."""
    data = graph.tensors[name].value
    assert data is not None, f"{name} is not a constant"
    return data


def class_counts(graph: Graph) -> dict[str, int]:
    return dict(Counter(op.op_class.value for op in graph.ops))


def trainable_params(graph: Graph) -> int:
    """Parameters as PyTorch counts them: no BN running statistics, no Clip bounds.

    Like ``Graph.op_params``, LAYOUT ops (Reshape targets) hold no parameters.
    """
    total = 0
    for op in graph.ops:
        if op.op_type == "Clip" or op.op_class is OpClass.LAYOUT:
            continue
        consts = op.inputs[:3] if op.op_type == "BatchNormalization" else op.inputs
        total += sum(graph.tensors[t].numel for t in consts if t and graph.is_constant(t))
    return total


@pytest.fixture(scope="module")
def resnet18() -> Graph:
    return build_zoo("resnet18")


@pytest.fixture(scope="module")
def resnet50() -> Graph:
    return build_zoo("resnet50")


@pytest.fixture(scope="module")
def vgg16() -> Graph:
    return build_zoo("vgg16")  # 138 M float32 weights: built once (~3 s)


@pytest.fixture(scope="module")
def mobilenet_v2() -> Graph:
    return build_zoo("mobilenet_v2")


# ---- every model ----------------------------------------------------------------------------
def test_registry_lists_every_model_of_the_issue() -> None:
    assert zoo_models() == [
        "lenet5", "vgg11", "vgg16", "vgg19", "resnet18", "resnet50", "resnet18_train",
        "mobilenet_v2", "mlp_relu", "mlp_linear", "mlp_bottleneck", "mlp_wide", "bert_encoder",
        "llama_tiny",
        "bert_block", "bert_block_dynamo",
    ]  # fmt: skip
    assert fusiontune.zoo_models() == zoo_models()
    for entry in ZOO.values():
        assert "\n" not in entry.description and entry.description
        assert entry.default_input_size >= entry.min_input_size >= 1


@pytest.mark.parametrize("name", list(ZOO))
def test_every_model_builds_and_lints_at_a_small_size(name: str) -> None:
    graph = build_zoo(name, input_size=small_size(name))
    assert graph.lint() is graph
    assert graph.name == name
    assert len(graph.inputs) == 1 and len(graph.outputs) == 1
    assert graph.outputs[0] == graph.ops[-1].outputs[0]
    # every constant is float32 except Reshape targets (int64)
    for t in graph.tensors.values():
        if t.is_constant:
            assert t.dtype == ("int64" if t.name.endswith(".shape") else "float32"), t.name
    # the placeholder build used by `fusiontune models` has the same sizes
    summary = zoo_summary(name, input_size=small_size(name))
    assert (summary.ops, summary.params, summary.macs) == (
        len(graph.ops),
        graph.total_params,
        graph.total_macs,
    )
    assert summary.input_shape == graph.tensors[graph.inputs[0]].shape


@pytest.mark.parametrize("name", list(ZOO))
def test_smallest_input_size_builds_and_one_less_is_refused(name: str) -> None:
    low = ZOO[name].min_input_size
    assert zoo_summary(name, input_size=low).ops > 0  # same builder and lint, no weights
    with pytest.raises(ModelLoadError, match=rf"input_size {low - 1} .*>= {low}"):
        build_zoo(name, input_size=low - 1)


# ---- structure, derived by hand ---------------------------------------------------------------
def test_resnet18_structure(resnet18: Graph) -> None:
    # stem: conv+bn+relu+maxpool; 8 BasicBlocks of conv,bn,relu,conv,bn,add,relu;
    # 3 downsamples (first block of layer2..4) of conv+bn; head: GAP, Flatten, Gemm.
    # LINEAR 1 + 16 + 3 + 1 = 21; AFFINE (BN) 1 + 16 + 3 = 20; ELEMWISE 1 + 2*8 = 17;
    # BINARY 8; WINDOW maxpool + GAP = 2; LAYOUT 1 -> 69 ops.
    assert class_counts(resnet18) == {
        "LINEAR": 21, "AFFINE": 20, "ELEMWISE": 17, "BINARY": 8, "WINDOW": 2, "LAYOUT": 1,
    }  # fmt: skip
    assert len(resnet18.ops) == 69
    assert resnet18.tensors["input"].shape == (1, 3, 224, 224)
    assert resnet18.tensors["maxpool"].shape == (1, 64, 56, 56)
    assert resnet18.tensors["layer4.1.relu"].shape == (1, 512, 7, 7)
    assert resnet18.tensors[resnet18.outputs[0]].shape == (1, 1000)
    stem = resnet18.op("stem.conv")
    assert len(stem.inputs) == 2  # bias=False: the BN carries the bias
    assert stem.attrs["strides"] == (2, 2) and stem.attrs["pads"] == (3, 3, 3, 3)
    pool = resnet18.op("maxpool")
    assert pool.attrs["kernel_shape"] == (3, 3) and pool.attrs["pads"] == (1, 1, 1, 1)
    # residual: the Add reads the block's BN output and the block input (or its downsample)
    assert resnet18.op("layer1.0.add").inputs == ("layer1.0.2.bn", "maxpool")
    assert resnet18.op("layer2.0.add").inputs == ("layer2.0.2.bn", "layer2.0.downsample.bn")
    assert [op.op_type for op in resnet18.ops[-3:]] == ["GlobalAveragePool", "Flatten", "Gemm"]


def test_resnet50_structure(resnet50: Graph) -> None:
    # 16 Bottlenecks (3+4+6+3) of 3 conv+bn, 2 inner relus, add, relu; 4 downsamples
    # (first block of every stage: 64 -> 256 channels even at stride 1).
    # LINEAR 1 + 48 + 4 + 1 = 54; BN 1 + 48 + 4 = 53; ReLU 1 + 3*16 = 49; Add 16.
    assert class_counts(resnet50) == {
        "LINEAR": 54, "AFFINE": 53, "ELEMWISE": 49, "BINARY": 16, "WINDOW": 2, "LAYOUT": 1,
    }  # fmt: skip
    # v1.5: the stride sits on the 3x3 conv
    assert resnet50.op("layer2.0.1.conv").attrs["strides"] == (1, 1)
    assert resnet50.op("layer2.0.2.conv").attrs["strides"] == (2, 2)
    assert resnet50.tensors["layer4.2.relu"].shape == (1, 2048, 7, 7)


def test_vgg16_structure(vgg16: Graph) -> None:
    # 13 convs (3x3, bias, each followed by ReLU), 5 max-pools, Flatten,
    # FC-ReLU-FC-ReLU-FC: LINEAR 13 + 3 = 16; ReLU 13 + 2 = 15; WINDOW 5; LAYOUT 1 -> 37.
    assert class_counts(vgg16) == {"LINEAR": 16, "ELEMWISE": 15, "WINDOW": 5, "LAYOUT": 1}
    assert vgg16.tensors["flatten"].shape == (1, 512 * 7 * 7)
    assert vgg16.tensors["fc1.weight"].shape == (4096, 25088)
    assert all(len(op.inputs) == 3 for op in vgg16.ops if op.op_type == "Conv")  # with bias


def test_vgg11_and_vgg19_structure() -> None:
    # vgg11: 8 convs + 3 FC = 11 LINEAR, 8 + 2 = 10 ReLU; vgg19: 16 + 3 = 19, 16 + 2 = 18
    assert class_counts(build_zoo("vgg11", input_size=32)) == {
        "LINEAR": 11, "ELEMWISE": 10, "WINDOW": 5, "LAYOUT": 1,
    }  # fmt: skip
    assert class_counts(build_zoo("vgg19", input_size=32)) == {
        "LINEAR": 19, "ELEMWISE": 18, "WINDOW": 5, "LAYOUT": 1,
    }  # fmt: skip


def test_mobilenet_v2_structure(mobilenet_v2: Graph) -> None:
    # 17 inverted residuals (1+2+3+4+3+3+1); all but the first expand (t=6): 16 expand convs.
    # LINEAR: stem 1 + 16 expand + 17 depthwise + 17 project + last 1x1 + fc = 53; BN 52;
    # Clip: stem + 16 + 17 + last = 35; residual Adds: stride-1 repeats 0+1+2+3+2+2+0 = 10.
    assert class_counts(mobilenet_v2) == {
        "LINEAR": 53, "AFFINE": 52, "ELEMWISE": 35, "BINARY": 10, "WINDOW": 1, "LAYOUT": 1,
    }  # fmt: skip
    depthwise = [op for op in mobilenet_v2.ops if op.name.endswith(".dw.conv")]
    assert len(depthwise) == 17
    for op in depthwise:
        assert op.attrs["group"] == mobilenet_v2.tensors[op.inputs[0]].shape[1]
        assert mobilenet_v2.tensors[op.inputs[1]].shape[1:] == (1, 3, 3)
    clips = [op for op in mobilenet_v2.ops if op.op_type == "Clip"]
    assert len(clips) == 35
    for op in clips:
        lo, hi = (value(mobilenet_v2, t) for t in op.inputs[1:])
        assert (float(lo), float(hi)) == (0.0, 6.0)
    assert mobilenet_v2.tensors["features.18.relu6"].shape == (1, 1280, 7, 7)


def test_lenet5_structure() -> None:
    graph = build_zoo("lenet5")
    # conv-relu-pool x2, flatten, fc-relu x2, fc: 5 LINEAR, 4 ReLU, 2 pools, 1 Flatten
    assert class_counts(graph) == {"LINEAR": 5, "ELEMWISE": 4, "WINDOW": 2, "LAYOUT": 1}
    assert graph.tensors["flatten"].shape == (1, 16 * 5 * 5)
    # 156 + 2,416 + 48,120 + 10,164 + 850
    assert graph.total_params == 61_706


def test_mlp_family_structure_and_merge_sizes() -> None:
    relu = build_zoo("mlp_relu")
    assert [op.op_type for op in relu.ops] == ["Gemm", "Relu", "Gemm", "Relu", "Gemm"]
    assert class_counts(relu) == {"LINEAR": 3, "ELEMWISE": 2}

    linear = build_zoo("mlp_linear")
    assert [op.op_class for op in linear.ops] == [
        OpClass.LINEAR, OpClass.AFFINE, OpClass.LINEAR, OpClass.LINEAR,
    ]  # fmt: skip
    assert linear.ops[1].op_type == "BatchNormalization"

    def weights(graph: Graph) -> list[tuple[int, ...]]:
        return [graph.tensors[op.inputs[1]].shape for op in graph.ops if op.op_type == "Gemm"]

    # bottleneck d -> r -> d: 2*d*r = 131,072 weights before, d*d = 1,048,576 after merging
    (r, d), (d2, r2) = weights(build_zoo("mlp_bottleneck"))
    assert (d, r, d2, r2) == (1024, 64, 1024, 64)
    assert (2 * d * r, d * d) == (131_072, 1_048_576)
    # wide d -> D -> d': 1,114,112 weights before, d*d' = 4,096 after merging
    (big, d), (d_out, big2) = weights(build_zoo("mlp_wide"))
    assert (d, big, big2, d_out) == (256, 4096, 4096, 16)
    assert (d * big + big * d_out, d * d_out) == (1_114_112, 4_096)


def test_bert_encoder_structure() -> None:
    graph = build_zoo("bert_encoder", input_size=16)
    # LINEAR: q, k, v, o, ffn1, ffn2; AFFINE: 6 bias Adds + Div by sqrt(64);
    # LAYOUT: 3 x (Reshape + Transpose) + merge Transpose + Reshape; OPAQUE: Q.K^T, P.V;
    # STATS: Softmax + 2 LayerNorms; BINARY: 2 residual Adds; ELEMWISE: Gelu.
    assert class_counts(graph) == {
        "LINEAR": 6, "AFFINE": 7, "LAYOUT": 8, "OPAQUE": 2, "STATS": 3, "BINARY": 2,
        "ELEMWISE": 1,
    }  # fmt: skip
    for name in ("attn.scores", "attn.context"):
        op = graph.op(name)
        assert op.op_type == "MatMul" and op.op_class is OpClass.OPAQUE
        assert not any(graph.is_constant(t) for t in op.inputs)
    assert graph.tensors["attn.scores"].shape == (1, 12, 16, 16)
    assert float(value(graph, graph.op("attn.scale").inputs[1])) == 8.0  # sqrt(768/12)
    assert graph.op("attn.softmax").attrs["axis"] == -1
    assert graph.op("ffn.gelu").op_type == "Gelu"
    assert graph.op("ffn.gelu").op_class is OpClass.ELEMWISE
    assert graph.tensors["ffn.gelu"].shape == (1, 16, 3072)
    assert [op.op_type for op in graph.ops if op.op_class is OpClass.STATS] == [
        "Softmax", "LayerNormalization", "LayerNormalization",
    ]  # fmt: skip
    # Q/K/V/O: 4 * (768*768 + 768); FFN: 768*3072 + 3072 + 3072*768 + 768; LN 2 * 1,536
    assert trainable_params(graph) == 7_087_872 + 1  # + the divisor constant
    assert graph.total_macs == 16 * (4 * 768 * 768 + 2 * 768 * 3072)


def test_batchnorm_class_in_inference_and_training_resnet18(resnet18: Graph) -> None:
    train = build_zoo("resnet18_train", input_size=SMALL_CNN_SIDE)
    assert train.tensors["input"].shape == (2, 3, 32, 32)  # default batch 2
    bn_train = [op for op in train.ops if op.op_type == "BatchNormalization"]
    bn_infer = [op for op in resnet18.ops if op.op_type == "BatchNormalization"]
    assert len(bn_train) == len(bn_infer) == 20
    assert {op.op_class for op in bn_train} == {OpClass.STATS}
    assert {op.op_class for op in bn_infer} == {OpClass.AFFINE}
    assert all(op.attrs["training_mode"] == 1 for op in bn_train)
    assert build_zoo("resnet18_train", input_size=32, batch=1).tensors["input"].shape[0] == 1


# ---- published sizes ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fixture", "params", "macs"),
    [
        ("resnet18", 11_689_512, 1.82e9),
        ("resnet50", 25_557_032, 4.1e9),
        ("vgg16", 138_357_544, 15.5e9),
        ("mobilenet_v2", 3_504_872, 0.30e9),
    ],
)
def test_published_params_and_macs_at_224(
    fixture: str, params: int, macs: float, request: pytest.FixtureRequest
) -> None:
    graph: Graph = request.getfixturevalue(fixture)
    assert trainable_params(graph) == params
    assert abs(graph.total_macs - macs) <= MAC_TOLERANCE * macs, graph.total_macs


def test_published_params_of_vgg11_and_vgg19() -> None:
    # torchvision: vgg11 132,863,336, vgg19 143,667,240 (no BN, no running statistics)
    assert zoo_summary("vgg11").params == 132_863_336
    assert zoo_summary("vgg19").params == 143_667_240


def test_our_exact_totals_at_224(resnet18: Graph, mobilenet_v2: Graph) -> None:
    # golden numbers: change only on purpose. Params include BN running stats (2 per channel).
    assert (resnet18.total_params, resnet18.total_macs) == (11_699_112, 1_814_073_344)
    assert (mobilenet_v2.total_params, mobilenet_v2.total_macs) == (3_539_054, 300_774_272)
    assert zoo_summary("resnet50").macs == 4_089_184_256
    assert zoo_summary("vgg16").macs == 15_470_264_320


# ---- parameters of build_zoo ---------------------------------------------------------------
def test_seed_determinism() -> None:
    a = build_zoo("resnet18", input_size=32, seed=0)
    b = build_zoo("resnet18", input_size=32, seed=0)
    c = build_zoo("resnet18", input_size=32, seed=1)
    assert a.structural_hash == b.structural_hash
    assert a.structural_hash != c.structural_hash
    assert [op.name for op in a.ops] == [op.name for op in c.ops]
    w0, w1 = value(a, "stem.conv.weight"), value(c, "stem.conv.weight")
    assert not np.array_equal(w0, w1)
    # He-normal: std sqrt(2 / fan_in), fan_in = 3*7*7 = 147; 9,408 draws -> within 5 %
    assert abs(float(np.std(w0)) - np.sqrt(2 / 147)) < 0.05 * np.sqrt(2 / 147)


def test_input_size_changes_shapes() -> None:
    small = build_zoo("resnet18", input_size=64)
    assert small.tensors["maxpool"].shape == (1, 64, 16, 16)
    assert small.tensors[small.outputs[0]].shape == (1, 1000)
    vgg = build_zoo("vgg16", input_size=64)
    assert vgg.tensors["fc1.weight"].shape == (4096, 512 * 2 * 2)
    bert = build_zoo("bert_encoder", input_size=8, batch=3)
    assert bert.tensors["input"].shape == (3, 8, 768)
    assert bert.tensors["attn.context"].shape == (3, 12, 8, 64)
    wide = build_zoo("mlp_wide", input_size=100)
    assert wide.tensors["fc1.weight"].shape == (4096, 100)
    bottleneck = build_zoo("mlp_bottleneck", input_size=200)
    assert bottleneck.tensors[bottleneck.outputs[0]].shape == (1, 200)


def test_unknown_name_suggests_the_closest() -> None:
    with pytest.raises(ModelLoadError, match=r"unknown zoo model 'resnet19' \(did you mean"):
        build_zoo("resnet19")
    with pytest.raises(ModelLoadError, match=r"did you mean 'mobilenet_v2'"):
        build_zoo("mobilenetv2")


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "32"])
def test_bad_input_size_is_refused_clearly(bad: object) -> None:
    with pytest.raises(ModelLoadError, match=r"zoo model 'vgg16': input_size .* integer >= 32"):
        build_zoo("vgg16", input_size=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, 1.0])
def test_bad_batch_is_refused_clearly(bad: object) -> None:
    with pytest.raises(ModelLoadError, match=r"zoo model 'lenet5': batch .* integer >= 1"):
        build_zoo("lenet5", batch=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 0.5])
def test_bad_seed_is_refused_clearly(bad: object) -> None:
    with pytest.raises(ModelLoadError, match=r"zoo model 'mlp_wide': seed .* integer >= 0"):
        build_zoo("mlp_wide", seed=bad)  # type: ignore[arg-type]
