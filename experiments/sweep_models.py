"""The architectures of the real-architecture sweep (``exp_sweep.py``), built with their own
libraries' code (torchvision, timm, transformers) at random weights and small sizes.

Each :class:`SweepModel` names a builder returning ``(module, example_inputs, input_names)``.
Builders import torch and the model library lazily, so this module imports without them (the
sweep can then still analyse the exports already in its cache). Sizes are chosen so that one
export plus its analysis takes seconds on 2 cores: images of 64-128 pixels, sequences of 16
tokens, transformers configs of 2 layers and hidden size 64. Where a standard variant is large
(VGG's 4096-wide classifier, ViT-B) the library's own model class is built with a small
configuration instead; the op patterns, not the widths, are what the sweep measures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

IMAGE_SIDE = 64  # default input side of the image models (pixels)
SEQ_LEN = 16  # tokens of the text models
HIDDEN = 64  # transformers configs: hidden size ...
HEADS = 2  # ... attention heads ...
LAYERS = 2  # ... layers ...
FFN = 128  # ... and feed-forward width
VOCAB = 100  # vocabulary; random token ids are drawn below 8 (fusiontune.reference)
NUM_CLASSES = 10  # classifier outputs

Built = tuple[Any, tuple[Any, ...], list[str]]


@dataclass(frozen=True)
class SweepModel:
    """One architecture of the sweep.

    Attributes:
        name: file stem of its exports (``<name>.<exporter>.onnx``).
        library: ``torchvision``, ``timm`` or ``transformers``.
        kind: ``classification``, ``segmentation``, ``detection``, ``encoder`` or ``decoder``.
        build: ``() -> (module, example_inputs, input_names)``.
        note: what the entry is when it is not a library's stock builder at default settings.
    """

    name: str
    library: str
    kind: str
    build: Callable[[], Built]
    note: str = ""


class _Outputs:
    """Wrap a module whose forward returns a dict or a ModelOutput into one returning a tuple
    of tensors (the exporters want tensors; ``None`` entries and caches are dropped)."""

    @staticmethod
    def wrap(module: Any, keys: tuple[str, ...] | None = None) -> Any:
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = module

            def forward(self, *args: Any) -> Any:
                out = self.inner(*args)
                return _flatten_outputs(out, keys)

        return Wrapped()


def _flatten_outputs(out: Any, keys: tuple[str, ...] | None) -> tuple[Any, ...]:
    import torch

    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, dict) or hasattr(out, "keys"):
        names = keys or tuple(out.keys())
        return tuple(out[k] for k in names if out[k] is not None)
    flat: list[Any] = []
    for item in out:
        if isinstance(item, torch.Tensor):
            flat.append(item)
        elif isinstance(item, (list, tuple)):
            flat.extend(t for t in item if isinstance(t, torch.Tensor))
    return tuple(flat)


def _image(side: int = IMAGE_SIDE, batch: int = 1, channels: int = 3) -> Any:
    import torch

    return torch.randn(batch, channels, side, side)


def _ids(length: int = SEQ_LEN) -> Any:
    import torch

    return torch.randint(0, 8, (1, length), dtype=torch.int64)


# ---- torchvision -------------------------------------------------------------------------------
def _tv(name: str, side: int = IMAGE_SIDE, **kwargs: Any) -> Callable[[], Built]:
    def build() -> Built:
        import torchvision

        model = torchvision.models.get_model(name, weights=None, num_classes=NUM_CLASSES, **kwargs)
        return model, (_image(side),), ["x"]

    return build


def _tv_vit() -> Built:
    from torchvision.models.vision_transformer import VisionTransformer

    model = VisionTransformer(
        image_size=IMAGE_SIDE, patch_size=16, num_layers=LAYERS, num_heads=4, hidden_dim=128,
        mlp_dim=256, num_classes=NUM_CLASSES,
    )  # fmt: skip
    return model, (_image(),), ["x"]


def _tv_maxvit() -> Built:
    from torchvision.models.maxvit import MaxVit

    # partition 4 at 128x128: the stages see 32, 16, 8, 4 (maxvit_t's 7 needs 224x224)
    model = MaxVit(
        input_size=(128, 128), stem_channels=32, partition_size=4,
        block_channels=[32, 64, 128, 256], block_layers=[1, 1, 1, 1], head_dim=16,
        stochastic_depth_prob=0.0, num_classes=NUM_CLASSES,
    )  # fmt: skip
    return model, (_image(128),), ["x"]


def _tv_vgg11_bn_small() -> Built:
    import torch
    from torchvision.models.vgg import VGG, cfgs, make_layers

    model = VGG(make_layers(cfgs["A"], batch_norm=True), num_classes=NUM_CLASSES)
    # stock VGG pools to 7x7 then FC 25088x4096 (102 M weights): a 1x1 pool keeps the head small
    model.avgpool = torch.nn.AdaptiveAvgPool2d((1, 1))
    model.classifier[0] = torch.nn.Linear(512, 256)
    model.classifier[3] = torch.nn.Linear(256, 256)
    model.classifier[6] = torch.nn.Linear(256, NUM_CLASSES)
    return model, (_image(),), ["x"]


def _tv_segmentation(name: str) -> Callable[[], Built]:
    def build() -> Built:
        import torchvision

        model = torchvision.models.get_model(
            name, weights=None, weights_backbone=None, num_classes=5, aux_loss=False
        )
        return _Outputs.wrap(model, ("out",)), (_image(),), ["x"]

    return build


def _tv_fpn_backbone(backbone: str) -> Callable[[], Built]:
    def build() -> Built:
        from torchvision.models.detection.backbone_utils import resnet_fpn_backbone

        model = resnet_fpn_backbone(backbone_name=backbone, weights=None, trainable_layers=5)
        return _Outputs.wrap(model), (_image(),), ["x"]

    return build


def _tv_mobilenet_fpn() -> Built:
    from torchvision.models.detection.backbone_utils import mobilenet_backbone

    model = mobilenet_backbone(
        backbone_name="mobilenet_v3_large", weights=None, fpn=True, trainable_layers=6
    )
    return _Outputs.wrap(model), (_image(),), ["x"]


def _tv_detector_body(name: str, side: int = IMAGE_SIDE) -> Callable[[], Built]:
    """Backbone (+FPN) and dense head of a one-stage detector, without anchors, box decoding
    and NMS (data-dependent post-processing that no crossbar runs)."""

    def build() -> Built:
        import torch
        import torchvision

        det = torchvision.models.get_model(name, weights=None, weights_backbone=None, num_classes=5)

        class Body(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.backbone = det.backbone
                self.head = det.head

            def forward(self, x: Any) -> Any:
                feats = self.backbone(x)
                feats = list(feats.values()) if isinstance(feats, dict) else list(feats)
                return _flatten_outputs(self.head(feats), None)

        return Body(), (_image(side),), ["x"]

    return build


def _tv_roi_head(name: str, predictor: str, rois: int = 2) -> Callable[[], Built]:
    """Mask/keypoint R-CNN's RoI head and predictor (Conv stack + ConvTranspose) on pooled
    RoI features of the shape RoIAlign gives them."""

    def build() -> Built:
        import torch
        import torchvision

        det = torchvision.models.get_model(name, weights=None, weights_backbone=None, num_classes=3)
        roi = det.roi_heads
        head = roi.mask_head if predictor == "mask" else roi.keypoint_head
        pred = roi.mask_predictor if predictor == "mask" else roi.keypoint_predictor
        side = 14
        return torch.nn.Sequential(head, pred), (torch.randn(rois, 256, side, side),), ["rois"]

    return build


TORCHVISION: tuple[SweepModel, ...] = (
    SweepModel("tv_resnet18", "torchvision", "classification", _tv("resnet18")),
    SweepModel("tv_resnet50", "torchvision", "classification", _tv("resnet50")),
    SweepModel("tv_resnext50_32x4d", "torchvision", "classification", _tv("resnext50_32x4d")),
    SweepModel("tv_wide_resnet50_2", "torchvision", "classification", _tv("wide_resnet50_2")),
    SweepModel("tv_mobilenet_v2", "torchvision", "classification", _tv("mobilenet_v2")),
    SweepModel("tv_mobilenet_v3_small", "torchvision", "classification", _tv("mobilenet_v3_small")),
    SweepModel("tv_mobilenet_v3_large", "torchvision", "classification", _tv("mobilenet_v3_large")),
    SweepModel("tv_efficientnet_b0", "torchvision", "classification", _tv("efficientnet_b0")),
    SweepModel("tv_efficientnet_v2_s", "torchvision", "classification", _tv("efficientnet_v2_s")),
    SweepModel("tv_regnet_x_400mf", "torchvision", "classification", _tv("regnet_x_400mf")),
    SweepModel("tv_regnet_y_400mf", "torchvision", "classification", _tv("regnet_y_400mf")),
    SweepModel("tv_convnext_tiny", "torchvision", "classification", _tv("convnext_tiny")),
    SweepModel("tv_densenet121", "torchvision", "classification", _tv("densenet121")),
    SweepModel("tv_shufflenet_v2_x0_5", "torchvision", "classification", _tv("shufflenet_v2_x0_5")),
    SweepModel("tv_squeezenet1_1", "torchvision", "classification", _tv("squeezenet1_1")),
    SweepModel("tv_mnasnet0_5", "torchvision", "classification", _tv("mnasnet0_5")),
    SweepModel("tv_googlenet", "torchvision", "classification",
               _tv("googlenet", aux_logits=False, init_weights=True)),
    SweepModel("tv_inception_v3", "torchvision", "classification",
               _tv("inception_v3", side=96, aux_logits=False, init_weights=True),
               "96x96 (inception_v3 needs >= 75)"),
    SweepModel("tv_vgg11_bn", "torchvision", "classification", _tv_vgg11_bn_small,
               "VGG class, cfg A + BN; 1x1 pool and classifier 512-256-256-10"),
    SweepModel("tv_alexnet", "torchvision", "classification", _tv("alexnet", side=224),
               "224x224: at 64 the features are 1x1 and TorchScript refuses the upsampling "
               "adaptive pool to 6x6"),
    SweepModel("tv_vit", "torchvision", "classification", _tv_vit,
               "VisionTransformer class: 64x64, patch 16, 2 layers, width 128"),
    SweepModel("tv_swin_t", "torchvision", "classification", _tv("swin_t")),
    SweepModel("tv_swin_v2_t", "torchvision", "classification", _tv("swin_v2_t")),
    SweepModel("tv_maxvit", "torchvision", "classification", _tv_maxvit,
               "MaxVit class: 128x128, partition 4, one block per stage"),
    SweepModel("tv_fcn_resnet50", "torchvision", "segmentation",
               _tv_segmentation("fcn_resnet50")),
    SweepModel("tv_deeplabv3_mobilenet_v3_large", "torchvision", "segmentation",
               _tv_segmentation("deeplabv3_mobilenet_v3_large")),
    SweepModel("tv_lraspp_mobilenet_v3_large", "torchvision", "segmentation",
               _tv_segmentation("lraspp_mobilenet_v3_large")),
    SweepModel("tv_resnet18_fpn", "torchvision", "detection", _tv_fpn_backbone("resnet18"),
               "resnet_fpn_backbone: ResNet-18 + FPN (nearest upsampling), 5 levels"),
    SweepModel("tv_mobilenet_v3_fpn", "torchvision", "detection", _tv_mobilenet_fpn,
               "mobilenet_backbone(fpn=True): MobileNetV3-Large + FPN"),
    SweepModel("tv_retinanet_body", "torchvision", "detection",
               _tv_detector_body("retinanet_resnet50_fpn"),
               "RetinaNet backbone + FPN + head, no anchors/NMS"),
    SweepModel("tv_fcos_body", "torchvision", "detection", _tv_detector_body("fcos_resnet50_fpn"),
               "FCOS backbone + FPN + head (GroupNorm), no anchors/NMS"),
    SweepModel("tv_ssdlite_body", "torchvision", "detection",
               _tv_detector_body("ssdlite320_mobilenet_v3_large", side=128),
               "SSDlite backbone + head at 128x128, no anchors/NMS"),
    SweepModel("tv_maskrcnn_mask_head", "torchvision", "detection",
               _tv_roi_head("maskrcnn_resnet50_fpn", "mask"),
               "Mask R-CNN mask head + predictor (ConvTranspose) on 2 RoIs of 256x14x14"),
    SweepModel("tv_keypointrcnn_head", "torchvision", "detection",
               _tv_roi_head("keypointrcnn_resnet50_fpn", "keypoint"),
               "Keypoint R-CNN head + predictor (ConvTranspose) on 2 RoIs of 256x14x14"),
)  # fmt: skip


# ---- timm --------------------------------------------------------------------------------------
def _timm(name: str, side: int = IMAGE_SIDE, **kwargs: Any) -> Callable[[], Built]:
    def build() -> Built:
        import timm

        model = timm.create_model(name, pretrained=False, num_classes=NUM_CLASSES, **kwargs)
        return model, (_image(side),), ["x"]

    return build


TIMM: tuple[SweepModel, ...] = (
    SweepModel("timm_convnext_atto", "timm", "classification", _timm("convnext_atto")),
    SweepModel("timm_efficientnet_b0", "timm", "classification", _timm("efficientnet_b0")),
    SweepModel("timm_tf_efficientnet_lite0", "timm", "classification",
               _timm("tf_efficientnet_lite0"), "TF 'SAME' padding"),
    SweepModel("timm_regnety_002", "timm", "classification", _timm("regnety_002")),
    SweepModel("timm_mobilenetv3_small_050", "timm", "classification",
               _timm("mobilenetv3_small_050")),
    SweepModel("timm_mobilenetv4_conv_small", "timm", "classification",
               _timm("mobilenetv4_conv_small")),
    SweepModel("timm_resnext26ts", "timm", "classification", _timm("resnext26ts")),
    SweepModel("timm_resnet18d", "timm", "classification", _timm("resnet18d")),
    SweepModel("timm_vit_tiny", "timm", "classification",
               _timm("vit_tiny_patch16_224", img_size=IMAGE_SIDE), "64x64"),
    SweepModel("timm_deit_tiny", "timm", "classification",
               _timm("deit_tiny_patch16_224", img_size=IMAGE_SIDE), "64x64"),
    SweepModel("timm_swin_tiny", "timm", "classification",
               _timm("swin_tiny_patch4_window7_224", img_size=IMAGE_SIDE, window_size=4),
               "64x64, window 4"),
    SweepModel("timm_mixer_s16", "timm", "classification",
               _timm("mixer_s16_224", img_size=IMAGE_SIDE), "64x64"),
    SweepModel("timm_mobilevit_xxs", "timm", "classification", _timm("mobilevit_xxs")),
    SweepModel("timm_ghostnet_100", "timm", "classification", _timm("ghostnet_100")),
    SweepModel("timm_dla34", "timm", "classification", _timm("dla34")),
    SweepModel("timm_hrnet_w18_small", "timm", "classification", _timm("hrnet_w18_small"),
               "HRNet: nearest upsampling between branches"),
    SweepModel("timm_cspresnet50", "timm", "classification", _timm("cspresnet50")),
    SweepModel("timm_repvgg_a0", "timm", "classification", _timm("repvgg_a0")),
    SweepModel("timm_rexnet_100", "timm", "classification", _timm("rexnet_100")),
    SweepModel("timm_lcnet_050", "timm", "classification", _timm("lcnet_050")),
    SweepModel("timm_poolformer_s12", "timm", "classification", _timm("poolformer_s12")),
    SweepModel("timm_edgenext_xx_small", "timm", "classification", _timm("edgenext_xx_small")),
    SweepModel("timm_efficientvit_b0", "timm", "classification", _timm("efficientvit_b0")),
    SweepModel("timm_levit_128s", "timm", "classification", _timm("levit_128s", side=128,
               img_size=128), "128x128"),
)  # fmt: skip


# ---- transformers ------------------------------------------------------------------------------
def _text_config(cls_name: str, **extra: Any) -> Any:
    import transformers

    common: dict[str, Any] = {
        "vocab_size": VOCAB, "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "intermediate_size": FFN, "max_position_embeddings": 64,
    }  # fmt: skip
    common.update(extra)
    return getattr(transformers, cls_name)(**common)


def _hf(model_cls: str, config: Callable[[], Any], inputs: str = "ids") -> Callable[[], Built]:
    def build() -> Built:
        import transformers

        cfg = config()
        cfg.return_dict = True
        if hasattr(cfg, "use_cache"):
            cfg.use_cache = False
        model = getattr(transformers, model_cls)(cfg)
        if inputs == "ids":
            args: tuple[Any, ...] = (_ids(),)
            names = ["input_ids"]
        elif inputs == "pixels":
            side = int(getattr(cfg, "image_size", IMAGE_SIDE))
            args, names = (_image(side, channels=int(cfg.num_channels)),), ["pixel_values"]
        else:
            raise ValueError(inputs)
        return _Outputs.wrap(model), args, names

    return build


def _bert() -> Any:
    return _text_config("BertConfig")


def _roberta() -> Any:
    return _text_config("RobertaConfig", pad_token_id=1)


def _electra() -> Any:
    return _text_config("ElectraConfig", embedding_size=32)


def _albert() -> Any:
    return _text_config("AlbertConfig", embedding_size=32)


def _distilbert() -> Any:
    import transformers

    return transformers.DistilBertConfig(
        vocab_size=VOCAB, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=FFN,
        max_position_embeddings=64,
    )  # fmt: skip


def _gpt2() -> Any:
    import transformers

    return transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_inner=FFN, n_positions=64
    )


def _t5() -> Any:
    import transformers

    return transformers.T5Config(
        vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=FFN, num_layers=LAYERS,
        num_heads=HEADS,
    )  # fmt: skip


def _llama() -> Any:
    import transformers

    return transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=HEADS, max_position_embeddings=64,
    )  # fmt: skip


def _opt() -> Any:
    import transformers

    return transformers.OPTConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, ffn_dim=FFN,
        num_attention_heads=HEADS, max_position_embeddings=64, word_embed_proj_dim=HIDDEN,
    )  # fmt: skip


def _vit_hf() -> Any:
    import transformers

    return transformers.ViTConfig(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=FFN, image_size=32, patch_size=8,
    )  # fmt: skip


def _clip_vision() -> Any:
    import transformers

    return transformers.CLIPVisionConfig(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=FFN, image_size=32, patch_size=8,
    )  # fmt: skip


def _convnext_hf() -> Any:
    import transformers

    return transformers.ConvNextConfig(
        hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], image_size=IMAGE_SIDE
    )


def _swin_hf() -> Any:
    import transformers

    return transformers.SwinConfig(
        image_size=IMAGE_SIDE, patch_size=4, embed_dim=32, depths=[1, 1], num_heads=[2, 4],
        window_size=4,
    )  # fmt: skip


def _segformer() -> Any:
    import transformers

    return transformers.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
        num_attention_heads=[1, 2], decoder_hidden_size=32, num_labels=5, image_size=IMAGE_SIDE,
        patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2],
    )  # fmt: skip


def _beit_seg() -> Any:
    import transformers

    return transformers.BeitConfig(
        hidden_size=HIDDEN, num_hidden_layers=4, num_attention_heads=HEADS, intermediate_size=FFN,
        image_size=IMAGE_SIDE, patch_size=16, out_indices=[1, 2, 3, 4], num_labels=5,
        use_auxiliary_head=False, pool_scales=[1, 2], auxiliary_channels=32,
    )  # fmt: skip


def _whisper_encoder() -> Built:
    import torch
    import transformers

    cfg = transformers.WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=16, d_model=HIDDEN, encoder_layers=LAYERS,
        encoder_attention_heads=HEADS, decoder_layers=1, decoder_attention_heads=HEADS,
        encoder_ffn_dim=FFN, decoder_ffn_dim=FFN, max_source_positions=16, max_target_positions=16,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=0,
    )  # fmt: skip
    encoder = transformers.WhisperModel(cfg).get_encoder()
    # the conv front end halves the frames: 2 x max_source_positions mel frames in
    return _Outputs.wrap(encoder), (torch.randn(1, 16, 32),), ["input_features"]


def _t5_encoder() -> Built:
    import transformers

    model = transformers.T5EncoderModel(_t5())
    return _Outputs.wrap(model), (_ids(),), ["input_ids"]


def _bart() -> Built:
    import transformers

    cfg = transformers.BartConfig(
        vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN,
        decoder_ffn_dim=FFN, max_position_embeddings=64, use_cache=False,
    )  # fmt: skip
    model = transformers.BartModel(cfg)
    return _Outputs.wrap(model, ("last_hidden_state",)), (_ids(),), ["input_ids"]


def _wav2vec2() -> Built:
    import torch
    import transformers

    cfg = transformers.Wav2Vec2Config(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=FFN, conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3),
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, vocab_size=VOCAB,
    )  # fmt: skip
    model = transformers.Wav2Vec2Model(cfg)
    return _Outputs.wrap(model, ("last_hidden_state",)), (torch.randn(1, 400),), ["input_values"]


TRANSFORMERS: tuple[SweepModel, ...] = (
    SweepModel("hf_bert", "transformers", "encoder", _hf("BertModel", _bert)),
    SweepModel("hf_roberta", "transformers", "encoder", _hf("RobertaModel", _roberta)),
    SweepModel("hf_distilbert", "transformers", "encoder", _hf("DistilBertModel", _distilbert)),
    SweepModel("hf_albert", "transformers", "encoder", _hf("AlbertModel", _albert)),
    SweepModel("hf_electra", "transformers", "encoder", _hf("ElectraModel", _electra)),
    SweepModel("hf_t5_encoder", "transformers", "encoder", _t5_encoder),
    SweepModel("hf_whisper_encoder", "transformers", "encoder", _whisper_encoder,
               "16 mel bins, 32 frames"),
    SweepModel("hf_wav2vec2", "transformers", "encoder", _wav2vec2, "400 samples, 2 conv layers"),
    SweepModel("hf_vit", "transformers", "encoder", _hf("ViTModel", _vit_hf, "pixels"), "32x32"),
    SweepModel("hf_clip_vision", "transformers", "encoder",
               _hf("CLIPVisionModel", _clip_vision, "pixels"), "32x32"),
    SweepModel("hf_gpt2", "transformers", "decoder", _hf("GPT2Model", _gpt2)),
    SweepModel("hf_llama", "transformers", "decoder", _hf("LlamaModel", _llama)),
    SweepModel("hf_opt", "transformers", "decoder", _hf("OPTModel", _opt)),
    SweepModel("hf_bart", "transformers", "decoder", _bart, "encoder-decoder, 1+1 layers"),
    SweepModel("hf_convnext", "transformers", "classification",
               _hf("ConvNextModel", _convnext_hf, "pixels")),
    SweepModel("hf_swin", "transformers", "classification", _hf("SwinModel", _swin_hf, "pixels")),
    SweepModel("hf_segformer", "transformers", "segmentation",
               _hf("SegformerForSemanticSegmentation", _segformer, "pixels"),
               "2 stages; all-MLP decoder with bilinear upsampling"),
    SweepModel("hf_beit_segmentation", "transformers", "segmentation",
               _hf("BeitForSemanticSegmentation", _beit_seg, "pixels"),
               "BEiT + UperNet head: ConvTranspose FPN, bilinear upsampling"),
)  # fmt: skip

MODELS: tuple[SweepModel, ...] = TORCHVISION + TIMM + TRANSFORMERS
"""Every architecture of the sweep, in table order."""


def model_by_name() -> dict[str, SweepModel]:
    """The sweep models by name."""
    return {m.name: m for m in MODELS}
