"""The built-in model zoo: DNNs built in code with seeded random weights.

Each model follows the op sequence its usual ONNX export has (torchvision for the CNNs:
Conv without bias + batch norm, ReLU6 as Clip with constant bounds, Flatten + Gemm
classifier; the Hugging Face BERT export for the encoder layer), so the planner sees what it
would see in a real exported file. Weights are random (He-normal, seeded): the zoo is for
shapes, traffic and numerics checks, not for accuracy.

``input_size`` is the spatial side for CNNs, the feature width for MLPs and the sequence
length for BERT. :data:`ZOO` maps each name to its :class:`ZooEntry`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fusiontune.errors import FusiontuneError, InputSizeError, ModelLoadError, ShapeError, closest
from fusiontune.frontend.zoo_attention import ATTENTION_MODELS, encoder_tail
from fusiontune.frontend.zoo_llm import TINY_SEQ, llama_tiny
from fusiontune.ir.builder import GraphBuilder
from fusiontune.ir.graph import Graph
from fusiontune.limits import format_bytes, memory_limit, n_elements, shape_text

# ImageNet-1k classifiers (torchvision default num_classes)
IMAGENET_CLASSES = 1000
IMAGENET_SIDE = 224
# LeNet-5 (LeCun et al. 1998): 32x32 grey images, 10 digits
MNIST_CLASSES = 10
LENET_SIDE = 32
# torchvision channel widths of the four ResNet stages, and the Bottleneck expansion
RESNET_WIDTHS = (64, 128, 256, 512)
BOTTLENECK_EXPANSION = 4
# classic VGG configurations (Simonyan & Zisserman 2015, table 1: A, D, E); "M" = 2x2 max-pool
VGG_CONFIGS: dict[str, tuple[int | str, ...]] = {
    "vgg11": (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    "vgg16": (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
              512, 512, 512, "M"),
    "vgg19": (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"),
}  # fmt: skip
VGG_HIDDEN = 4096
# torchvision MobileNetV2 inverted-residual settings: (expansion t, channels c, repeats n, stride s)
MOBILENET_V2_SETTINGS = (
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
    (6, 320, 1, 1),
)  # fmt: skip
MOBILENET_V2_STEM = 32
MOBILENET_V2_LAST = 1280
RELU6_MAX = 6.0
# BERT-base (Devlin et al. 2019): hidden 768, 12 heads, FFN 3072, sequence length 128 default
BERT_HIDDEN = 768
BERT_HEADS = 12
BERT_FFN = 4 * BERT_HIDDEN
BERT_SEQ = 128
# the MLP family (sizes chosen so that merging changes the weight count by ~8x or more)
MLP_WIDTH = 784  # an MNIST image, flattened
MLP_HIDDEN = 256
MLP_BOTTLENECK_WIDTH = 1024  # d of d -> r -> d
MLP_BOTTLENECK_RANK = 64  # r << d
MLP_WIDE_IN = 256  # d of d -> D -> d'
MLP_WIDE_HIDDEN = 4096  # D
MLP_WIDE_OUT = 16  # d'

ModelBuilder = Callable[["_ZooBuilder", int, int], None]


@dataclass(frozen=True)
class ZooEntry:
    """One zoo model.

    Attributes:
        build: ``build(builder, input_size, batch)`` adds the model's ops to an empty builder.
        default_input_size: ``input_size`` used when the caller gives none.
        description: one line for ``fusiontune models``.
        min_input_size: smallest ``input_size`` whose shapes stay valid.
        input_size_meaning: what ``input_size`` sets ("spatial side", "feature width", ...).
        default_batch: batch used when the caller gives none.
    """

    build: ModelBuilder
    default_input_size: int
    description: str
    min_input_size: int
    input_size_meaning: str
    default_batch: int = 1


@dataclass(frozen=True)
class ZooSummary:
    """Size figures of one zoo model (built with placeholder weights, see :func:`zoo_summary`)."""

    name: str
    description: str
    input_shape: tuple[int, ...]
    ops: int
    params: int
    macs: int


_FROZEN_ZERO = np.zeros((), np.float32)
_FROZEN_ZERO.flags.writeable = False  # placeholder weights are read-only views of this zero


class _ZooBuilder(GraphBuilder):
    """A :class:`GraphBuilder` whose weights are drawn in float32 directly.

    The base class draws float64 and casts; for vgg16's 25088x4096 matrix that would be an
    800 MB temporary. With ``placeholder=True`` every weight is a read-only broadcast zero
    (no memory at all): sizes, params and MACs are exact, values and hashes are not.
    """

    def __init__(self, name: str, seed: int = 0, placeholder: bool = False) -> None:
        super().__init__(name, seed)
        self.placeholder = placeholder

    def constant_bytes(self) -> tuple[int, str]:
        """Bytes the constants added so far take once drawn (placeholders count in full), and
        the largest of them as text (``'fc1.weight', 256x784, 784 KiB``)."""
        sizes = [
            (n_elements(t.shape) * t.value.dtype.itemsize, t.name, t.shape)
            for t in self._tensors.values()
            if t.value is not None
        ]
        if not sizes:
            return 0, ""
        n, tensor, shape = max(sizes)
        return sum(s[0] for s in sizes), f"'{tensor}', {shape_text(shape)}, {format_bytes(n)}"

    def table(self, name: str, shape: Sequence[int], make: Callable[[], np.ndarray]) -> str:
        """A float32 constant computed by ``make`` (a mask, a lookup table) of ``shape``: a
        placeholder build holds a broadcast zero, a real one checks its bytes against the
        memory limit before computing it (a causal mask grows with the square of the size)."""
        if self.placeholder:
            return self.const(name, np.broadcast_to(_FROZEN_ZERO, tuple(shape)))
        from fusiontune.limits import check_tensor

        check_tensor(name, shape, 4, f"zoo model '{self.name}'")
        return self.const(name, make())

    def tensor_bytes(self) -> tuple[int, str]:
        """Bytes of every tensor so far (inputs, constants, intermediates: what executing the
        graph may hold at once), and the largest as text."""
        sizes = [
            (n_elements(t.shape) * (np.dtype(t.dtype).itemsize if t.dtype else 4), t.name, t.shape)
            for t in self._tensors.values()
        ]
        n, tensor, shape = max(sizes)
        return sum(s[0] for s in sizes), f"'{tensor}', {shape_text(shape)}, {format_bytes(n)}"

    def weight(self, name: str, shape: Sequence[int], fan_in: int) -> str:
        if self.placeholder:
            return self.const(name, np.broadcast_to(_FROZEN_ZERO, tuple(shape)))
        from fusiontune.limits import check_tensor

        check_tensor(name, shape, 4, f"zoo model '{self.name}'")
        w = self.rng.standard_normal(tuple(shape), dtype=np.float32)
        w *= np.float32(math.sqrt(2.0 / max(fan_in, 1)))  # He-normal
        w.flags.writeable = False  # Tensor keeps read-only arrays without copying them
        return self.const(name, w)


# ---- building blocks ------------------------------------------------------------------------
def _conv_bn(
    b: _ZooBuilder,
    x: str,
    c_out: int,
    k: int,
    name: str,
    stride: int = 1,
    group: int = 1,
    training: bool = False,
) -> str:
    """Conv (no bias, "same" padding) + batch norm, as torchvision exports them."""
    y = b.conv(x, c_out, k, stride=stride, group=group, bias=False, name=f"{name}.conv")
    return b.bn(y, training=training, name=f"{name}.bn")


def _relu6(b: _ZooBuilder, x: str, name: str) -> str:
    """ReLU6 as ONNX Clip with constant min/max inputs (opset >= 11 export)."""
    lo = b.const(f"{name}.min", np.float32(0.0))
    hi = b.const(f"{name}.max", np.float32(RELU6_MAX))
    return b.op("Clip", [x, lo, hi], name=name)


def _classifier_head(b: _ZooBuilder, x: str, n_classes: int) -> str:
    """GlobalAveragePool + Flatten + Gemm, the torchvision ResNet/MobileNet head."""
    x = b.global_avgpool(x, name="avgpool")
    x = b.flatten(x, name="flatten")
    return b.gemm(x, n_classes, name="fc")


# ---- CNNs -----------------------------------------------------------------------------------
def _lenet5(b: _ZooBuilder, size: int, batch: int) -> None:
    """LeNet-5: conv5x5(6)-ReLU-pool-conv5x5(16)-ReLU-pool-FC120-ReLU-FC84-ReLU-FC10.

    61,706 parameters at 32x32.
    """
    x = b.input("input", (batch, 1, size, size))
    for i, c in enumerate((6, 16), start=1):
        x = b.conv(x, c, 5, pad=0, name=f"conv{i}")
        x = b.relu(x, name=f"relu{i}")
        x = b.maxpool(x, 2, name=f"pool{i}")
    x = b.flatten(x, name="flatten")
    for i, n in enumerate((120, 84), start=1):
        x = b.relu(b.gemm(x, n, name=f"fc{i}"), name=f"fc{i}.relu")
    b.gemm(x, MNIST_CLASSES, name="fc3")


def _vgg(config: str) -> ModelBuilder:
    """Classic VGG (no BN): 3x3 convs with bias + ReLU, 2x2 max-pools, FC-4096-4096-1000.

    torchvision's AdaptiveAvgPool2d(7) is omitted: it is the identity at 224x224, and at other
    sizes the first FC takes 512*(side/32)^2 features instead.
    """

    def build(b: _ZooBuilder, size: int, batch: int) -> None:
        x = b.input("input", (batch, 3, size, size))
        conv = pool = 0
        for layer in VGG_CONFIGS[config]:
            if layer == "M":
                pool += 1
                x = b.maxpool(x, 2, name=f"pool{pool}")
            else:
                conv += 1
                x = b.conv(x, int(layer), 3, pad=1, name=f"conv{conv}")
                x = b.relu(x, name=f"conv{conv}.relu")
        x = b.flatten(x, name="flatten")
        for i in (1, 2):
            x = b.relu(b.gemm(x, VGG_HIDDEN, name=f"fc{i}"), name=f"fc{i}.relu")
        b.gemm(x, IMAGENET_CLASSES, name="fc3")

    return build


def _resnet(blocks: Sequence[int], bottleneck: bool, training: bool = False) -> ModelBuilder:
    """torchvision ResNet: conv1 7x7/2 + BN + ReLU + MaxPool 3x3/2, four stages, head.

    BasicBlock: conv3x3-BN-ReLU-conv3x3-BN (+ downsample 1x1 conv + BN) -> Add -> ReLU.
    Bottleneck (v1.5, stride on the 3x3): 1x1-BN-ReLU-3x3-BN-ReLU-1x1(x4)-BN -> Add -> ReLU.
    ``training=True`` marks every batch norm ``training_mode=1`` (batch statistics).
    """
    expansion = BOTTLENECK_EXPANSION if bottleneck else 1

    def block(b: _ZooBuilder, x: str, width: int, stride: int, name: str) -> str:
        c_out = width * expansion
        if bottleneck:
            plan = [(width, 1, 1), (width, 3, stride), (c_out, 1, 1)]
        else:
            plan = [(width, 3, stride), (c_out, 3, 1)]
        y = x
        for i, (c, k, s) in enumerate(plan, start=1):
            y = _conv_bn(b, y, c, k, name=f"{name}.{i}", stride=s, training=training)
            if i < len(plan):
                y = b.relu(y, name=f"{name}.{i}.relu")
        shortcut = x
        if stride != 1 or b.shape(x)[1] != c_out:
            shortcut = _conv_bn(b, x, c_out, 1, f"{name}.downsample", stride, training=training)
        return b.relu(b.add(y, shortcut, name=f"{name}.add"), name=f"{name}.relu")

    def build(b: _ZooBuilder, size: int, batch: int) -> None:
        x = b.input("input", (batch, 3, size, size))
        x = _conv_bn(b, x, RESNET_WIDTHS[0], 7, name="stem", stride=2, training=training)
        x = b.relu(x, name="stem.relu")
        x = b.maxpool(x, 3, stride=2, pad=1, name="maxpool")
        for stage, (width, n) in enumerate(zip(RESNET_WIDTHS, blocks), start=1):
            for i in range(n):
                stride = 2 if stage > 1 and i == 0 else 1
                x = block(b, x, width, stride, name=f"layer{stage}.{i}")
        _classifier_head(b, x, IMAGENET_CLASSES)

    return build


def _mobilenet_v2(b: _ZooBuilder, size: int, batch: int) -> None:
    """torchvision MobileNetV2: inverted residuals with depthwise 3x3 convs and ReLU6 (Clip).

    Block: [1x1 expand-BN-ReLU6 when t > 1] - depthwise 3x3/s-BN-ReLU6 - 1x1 project-BN,
    plus a residual Add when the stride is 1 and channels are unchanged. 3,504,872
    trainable parameters at 224x224.
    """
    x = b.input("input", (batch, 3, size, size))
    x = _relu6(b, _conv_bn(b, x, MOBILENET_V2_STEM, 3, "features.0", stride=2), "features.0.relu6")
    index = 1
    for t, c, n, s in MOBILENET_V2_SETTINGS:
        for i in range(n):
            name = f"features.{index}"
            c_in = b.shape(x)[1]
            hidden = c_in * t
            y = x
            if t != 1:
                y = _relu6(b, _conv_bn(b, y, hidden, 1, f"{name}.expand"), f"{name}.expand.relu6")
            stride = s if i == 0 else 1
            y = _conv_bn(b, y, hidden, 3, f"{name}.dw", stride=stride, group=hidden)
            y = _relu6(b, y, f"{name}.dw.relu6")
            y = _conv_bn(b, y, c, 1, f"{name}.project")
            x = b.add(x, y, name=f"{name}.add") if stride == 1 and c_in == c else y
            index += 1
    x = _conv_bn(b, x, MOBILENET_V2_LAST, 1, f"features.{index}")
    x = _relu6(b, x, f"features.{index}.relu6")
    _classifier_head(b, x, IMAGENET_CLASSES)


# ---- MLPs -----------------------------------------------------------------------------------
def _mlp_relu(b: _ZooBuilder, width: int, batch: int) -> None:
    """FC(d->256)-ReLU-FC(256->256)-ReLU-FC(256->10): streamable, never mergeable (rule 2)."""
    x = b.input("input", (batch, width))
    for i in (1, 2):
        x = b.relu(b.gemm(x, MLP_HIDDEN, name=f"fc{i}"), name=f"fc{i}.relu")
    b.gemm(x, MNIST_CLASSES, name="fc3")


def _mlp_linear(b: _ZooBuilder, width: int, batch: int) -> None:
    """FC(d->256)-BN-FC(256->256)-FC(256->10), no nonlinearity: the whole chain merges (P3).

    The inference batch norm is AFFINE and folds into the merged matrix. Weights
    before merging (d=784): 784*256 + 256*256 + 256*10 = 268,800 (+ 522 biases, + 1,024 BN
    values); after: one 784x10 matrix, 7,840 weights + 10 biases.
    """
    x = b.input("input", (batch, width))
    x = b.bn(b.gemm(x, MLP_HIDDEN, name="fc1"), name="bn1")
    x = b.gemm(x, MLP_HIDDEN, name="fc2")
    b.gemm(x, MNIST_CLASSES, name="fc3")


def _mlp_bottleneck(b: _ZooBuilder, width: int, batch: int) -> None:
    """FC(d->r)-FC(r->d) with r << d: merging GROWS the weights.

    Before merging (d=1024, r=64): 2*d*r = 131,072 weights (+ r + d = 1,088 biases);
    after: W1*W2 is d x d = 1,048,576 weights (+ 1,024 biases), 8x more.
    """
    x = b.input("input", (batch, width))
    x = b.gemm(x, MLP_BOTTLENECK_RANK, name="fc1")
    b.gemm(x, width, name="fc2")


def _mlp_wide(b: _ZooBuilder, width: int, batch: int) -> None:
    """FC(d->D)-FC(D->d') with a wide D and small d': merging SHRINKS the weights.

    Before merging (d=256, D=4096, d'=16): 256*4096 + 4096*16 = 1,114,112 weights
    (+ 4,112 biases); after: a 256x16 matrix, 4,096 weights (+ 16 biases), 272x fewer.
    """
    x = b.input("input", (batch, width))
    x = b.gemm(x, MLP_WIDE_HIDDEN, name="fc1")
    b.gemm(x, MLP_WIDE_OUT, name="fc2")


# ---- transformer ----------------------------------------------------------------------------
def _bert_encoder(b: _ZooBuilder, seq: int, batch: int) -> None:
    """One BERT-base encoder layer (post-LN), as the Hugging Face ONNX export lays it out.

    Q/K/V/O projections are MatMul + Add(bias) (LINEAR + AFFINE); heads are split with
    Reshape + Transpose (LAYOUT); Q.K^T and P.V are MatMuls of two activations (OPAQUE);
    scores are divided by sqrt(64) (AFFINE) and Softmax-ed (STATS); residual Adds (BINARY),
    LayerNormalization (STATS) and the FFN's Gelu (ELEMWISE). No attention mask.
    7,087,872 trainable parameters (plus the 1-element divisor constant).
    """
    x = b.input("input", (batch, seq, BERT_HIDDEN))
    _encoder_layer(b, x, seq, batch, BERT_HIDDEN, BERT_HEADS, BERT_FFN, "")


def _encoder_layer(
    b: _ZooBuilder, x: str, seq: int, batch: int, hidden: int, n_heads: int, ffn: int, prefix: str
) -> str:
    """One post-LN encoder layer (see :func:`_bert_encoder`); returns its output tensor."""
    head_dim = hidden // n_heads

    def heads(t: str, name: str, perm: tuple[int, ...]) -> str:
        t = b.reshape(t, (batch, seq, n_heads, head_dim), name=f"{name}.split")
        return b.op("Transpose", [t], {"perm": perm}, name=f"{name}.heads")

    p = prefix
    q = heads(b.matmul(x, hidden, name=f"{p}attn.q"), f"{p}attn.q", (0, 2, 1, 3))
    k = heads(b.matmul(x, hidden, name=f"{p}attn.k"), f"{p}attn.k", (0, 2, 3, 1))  # K^T
    v = heads(b.matmul(x, hidden, name=f"{p}attn.v"), f"{p}attn.v", (0, 2, 1, 3))
    scores = b.op("MatMul", [q, k], name=f"{p}attn.scores")
    scale = b.const(f"{p}attn.scale.divisor", np.float32(math.sqrt(head_dim)))
    scores = b.op("Div", [scores, scale], name=f"{p}attn.scale")
    return encoder_tail(b, scores, v, x, batch, seq, hidden, ffn, p)


def deep_encoder(
    layers: int,
    seq: int = BERT_SEQ,
    hidden: int = BERT_HIDDEN,
    heads: int = BERT_HEADS,
    batch: int = 1,
    placeholder: bool = True,
) -> Graph:
    """A stack of ``layers`` encoder layers (29 ops each): the large-graph benchmark model.

    Not in :data:`ZOO` (a 36-layer stack has 1,044 ops and 255 M parameters); with
    ``placeholder`` (default) the weights are broadcast zeros, enough for planning and cost.
    """
    b = _ZooBuilder(f"encoder{layers}", 0, placeholder=placeholder)
    x = b.input("input", (batch, seq, hidden))
    for i in range(layers):
        x = _encoder_layer(b, x, seq, batch, hidden, heads, 4 * hidden, f"l{i}.")
    return b.build()


# ---- the registry ---------------------------------------------------------------------------
_SIDE = "spatial side"
_WIDTH = "feature width"

ZOO: dict[str, ZooEntry] = {
    "lenet5": ZooEntry(
        build=_lenet5,
        default_input_size=LENET_SIDE,
        description="LeNet-5: 2 conv + 3 FC, ReLU, max-pool",
        min_input_size=16,  # conv5-pool2-conv5 must leave 2x2 for the second pool
        input_size_meaning=_SIDE,
    ),
    **{
        name: ZooEntry(
            build=_vgg(name),
            default_input_size=IMAGENET_SIDE,
            description=f"VGG-{name[3:]} (config {config}, no BN): 3x3 convs, FC-4096-4096-1000",
            min_input_size=32,  # five 2x2 max-pools
            input_size_meaning=_SIDE,
        )
        for name, config in (("vgg11", "A"), ("vgg16", "D"), ("vgg19", "E"))
    },
    "resnet18": ZooEntry(
        build=_resnet((2, 2, 2, 2), bottleneck=False),
        default_input_size=IMAGENET_SIDE,
        description="ResNet-18 (torchvision): BasicBlocks, Conv+BN+ReLU, residual Adds",
        min_input_size=1,  # every conv and pool is padded
        input_size_meaning=_SIDE,
    ),
    "resnet50": ZooEntry(
        build=_resnet((3, 4, 6, 3), bottleneck=True),
        default_input_size=IMAGENET_SIDE,
        description="ResNet-50 v1.5 (torchvision): Bottleneck blocks with 1x1 convs",
        min_input_size=1,
        input_size_meaning=_SIDE,
    ),
    "resnet18_train": ZooEntry(
        build=_resnet((2, 2, 2, 2), bottleneck=False, training=True),
        default_input_size=IMAGENET_SIDE,
        description="ResNet-18 with training-mode BatchNorm (batch statistics, STATS)",
        min_input_size=1,
        input_size_meaning=_SIDE,
        default_batch=2,  # batch statistics over one image are degenerate
    ),
    "mobilenet_v2": ZooEntry(
        build=_mobilenet_v2,
        default_input_size=IMAGENET_SIDE,
        description="MobileNetV2 (torchvision): inverted residuals, depthwise convs, ReLU6 as Clip",
        min_input_size=1,
        input_size_meaning=_SIDE,
    ),
    "mlp_relu": ZooEntry(
        build=_mlp_relu,
        default_input_size=MLP_WIDTH,
        description="MLP FC-ReLU-FC-ReLU-FC: can stream, never merge",
        min_input_size=1,
        input_size_meaning=_WIDTH,
    ),
    "mlp_linear": ZooEntry(
        build=_mlp_linear,
        default_input_size=MLP_WIDTH,
        description="MLP FC-BN-FC-FC without nonlinearity: mergeable",
        min_input_size=1,
        input_size_meaning=_WIDTH,
    ),
    "mlp_bottleneck": ZooEntry(
        build=_mlp_bottleneck,
        default_input_size=MLP_BOTTLENECK_WIDTH,
        description="MLP d->r->d with r << d: merging grows the weights",
        min_input_size=1,
        input_size_meaning=_WIDTH,
    ),
    "mlp_wide": ZooEntry(
        build=_mlp_wide,
        default_input_size=MLP_WIDE_IN,
        description="MLP d->D->d' with a wide D: merging shrinks the weights",
        min_input_size=1,
        input_size_meaning=_WIDTH,
    ),
    "bert_encoder": ZooEntry(
        build=_bert_encoder,
        default_input_size=BERT_SEQ,
        description="One BERT-base encoder layer: attention (OPAQUE matmuls), Gelu FFN, LayerNorm",
        min_input_size=1,
        input_size_meaning="sequence length",
    ),
    "llama_tiny": ZooEntry(
        build=llama_tiny,
        default_input_size=TINY_SEQ,
        description="Llama-style 2-layer decoder prefill: RMSNorm, RoPE, GQA, causal mask, SwiGLU",
        min_input_size=1,
        input_size_meaning="sequence length",
    ),
    **{name: ZooEntry(**spec) for name, spec in ATTENTION_MODELS.items()},
}


def zoo_models() -> list[str]:
    """Names of the zoo models, in registry order."""
    return list(ZOO)


def build_zoo(
    name: str,
    input_size: int | None = None,
    batch: int | None = None,
    seed: int = 0,
) -> Graph:
    """Build a zoo model with seeded random weights.

    Args:
        name: a name from :func:`zoo_models`.
        input_size: spatial side (CNNs), feature width (MLPs) or sequence length (BERT);
            ``None`` for the model's default.
        batch: batch size; ``None`` for the model's default (1, or 2 for resnet18_train).
        seed: seed of the weight generator; the same seed gives the same structural hash.

    Raises:
        ModelLoadError: unknown name (with the closest match), or an input_size, batch or
            seed out of range.
    """
    return _build(name, input_size, batch, seed, placeholder=False)


def zoo_summary(name: str, input_size: int | None = None, batch: int | None = None) -> ZooSummary:
    """Ops, parameters and MACs of a zoo model, without allocating its weights.

    The model is built with placeholder (broadcast zero) weights: every size is exact, but
    the graph is not kept because its values and structural hash are not the real ones.
    """
    graph = _build(name, input_size, batch, seed=0, placeholder=True)
    return ZooSummary(
        name=name,
        description=ZOO[name].description,
        input_shape=graph.tensors[graph.inputs[0]].shape,
        ops=len(graph.ops),
        params=graph.total_params,
        macs=graph.total_macs,
    )


def _build(
    name: str, input_size: int | None, batch: int | None, seed: int, placeholder: bool
) -> Graph:
    entry = ZOO.get(name)
    if entry is None:
        raise ModelLoadError(
            f"unknown zoo model '{name}'{closest(name, ZOO)}; known: {', '.join(ZOO)}"
        )
    size = entry.default_input_size if input_size is None else input_size
    n = entry.default_batch if batch is None else batch
    if not _is_int(size) or size < entry.min_input_size:
        raise ModelLoadError(
            f"zoo model '{name}': input_size {input_size!r} is not allowed; it sets the "
            f"{entry.input_size_meaning} and must be an integer >= {entry.min_input_size}"
        )
    if not _is_int(n) or n < 1:
        raise ModelLoadError(f"zoo model '{name}': batch {batch!r} must be an integer >= 1")
    if not _is_int(seed) or seed < 0:
        raise ModelLoadError(f"zoo model '{name}': seed {seed!r} must be an integer >= 0")
    if not placeholder:
        check_weight_bytes(name, int(size), int(n))
    builder = _ZooBuilder(name, seed, placeholder=placeholder)
    try:
        entry.build(builder, int(size), int(n))
    except ShapeError as exc:  # a size above the minimum that still breaks a layer
        raise ModelLoadError(f"zoo model '{name}' at input_size {size}: {exc}") from exc
    return builder.build()


def _weight_bytes(name: str, size: int, batch: int) -> tuple[int, str] | None:
    """Bytes of a zoo model's constants at ``size`` and its largest one as text, from a
    placeholder build (no weight is allocated); ``None`` when it does not build at that size."""
    builder = _ZooBuilder(name, 0, placeholder=True)
    try:
        ZOO[name].build(builder, size, batch)
    except FusiontuneError:  # a layer broken at this size, or a shape too large to hold
        return None
    return builder.constant_bytes()


def tensor_bytes(name: str, size: int, batch: int) -> tuple[int, str] | None:
    """Bytes of every tensor of zoo model ``name`` at ``size`` and ``batch`` (weights, inputs,
    intermediates, outputs) and its largest one as text, from a placeholder build (nothing is
    allocated); ``None`` when it does not build at that size."""
    builder = _ZooBuilder(name, 0, placeholder=True)
    try:
        ZOO[name].build(builder, size, batch)
    except FusiontuneError:
        return None
    return builder.tensor_bytes()


def largest_fitting(low: int, high: int, fits: Callable[[int], bool]) -> int | None:
    """The largest ``n`` in ``low .. high - 1`` with ``fits(n)``, for a ``fits`` true up to
    some size and false beyond (binary search); ``None`` when not even ``low`` fits."""
    if not fits(low):
        return None
    lo, hi = low, high  # invariant: fits(lo), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def check_weight_bytes(name: str, size: int, batch: int) -> None:
    """Refuse a size whose weights together exceed the memory limit, before drawing any.

    Raises:
        InputSizeError: with the largest size that fits (binary search on placeholder
            builds, which allocate nothing).
    """
    limit = memory_limit()
    counted = _weight_bytes(name, size, batch)
    if counted is None or counted[0] <= limit:
        return  # a size that does not build is reported by the real build
    needed, biggest = counted

    def fits(s: int) -> bool:
        n = _weight_bytes(name, s, batch)
        return n is not None and n[0] <= limit

    largest = largest_fitting(ZOO[name].min_input_size, size, fits)
    raise InputSizeError(name, size, needed, limit, largest, biggest)


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
