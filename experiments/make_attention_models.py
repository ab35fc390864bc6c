"""Regenerate ``tests/data/attention/``: the attention forms the importer and P5 must handle.

- ``attention_op23_4d.onnx``, ``attention_op23_3d.onnx``: ONNX ``Attention`` (opset 23), 4-D
  with a float mask and 3-D with ``q_num_heads`` (``onnx.helper``; no exporter writes it yet);
- ``mha_contrib.onnx``: onnxruntime's ``com.microsoft`` ``MultiHeadAttention`` with an
  ``attention_bias`` (``onnx.helper``; what onnxruntime's transformer optimizer fuses to);
- ``bert_torchscript.onnx``, ``bert_dynamo.onnx``: a tiny Hugging Face BERT encoder (random
  weights; hidden 32, 2 layers, 4 heads, sequence 16, an attention mask input) exported by
  ``torch.onnx.export`` with ``dynamo=False`` and ``dynamo=True`` (needs torch and
  transformers: see ``experiments/README.md``; skipped with a message when they are missing).

- ``llama_torchscript.onnx``, ``llama_dynamo.onnx``: a tiny Llama decoder (2 layers, hidden
  32, 4 query heads over 2 key/value heads (GQA, ``repeat_kv``), RoPE, RMSNorm, SwiGLU,
  sequence 16) with a constant causal mask (``finfo.min`` above the diagonal) held by the
  module, so the export carries it as a constant (P5 turns it into ``is_causal``).

``README.md`` beside them records how each file was made. Usage:
``python experiments/make_attention_models.py [group ...]`` (groups: ``helper``, ``bert``,
``gpt2``, ``llama``; default all; the README keeps the rows of the groups not remade).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO_DIR = Path(__file__).resolve().parents[1]
OUT_DIR = REPO_DIR / "tests" / "data" / "attention"
HELPER_IR_VERSION = 10  # IR version for opset 23 (onnxruntime 1.22+ reads it)
SEED = 0
BATCH, HEADS, SEQ, KV_SEQ, HEAD = 2, 3, 7, 9, 4
BERT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 64, "vocab_size": 50, "max_position_embeddings": 32}  # fmt: skip
BERT_SEQ = 16


def _value(name: str, shape: tuple[int, ...]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def attention_4d() -> onnx.ModelProto:
    q, k = (BATCH, HEADS, SEQ, HEAD), (BATCH, HEADS, KV_SEQ, HEAD)
    node = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], scale=0.35)
    graph = helper.make_graph([node], "attention_op23_4d",
                              [_value("q", q), _value("k", k), _value("v", k),
                               _value("mask", (1, 1, SEQ, KV_SEQ))],
                              [_value("y", q)])  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)],
                             ir_version=HELPER_IR_VERSION)  # fmt: skip


def attention_3d() -> onnx.ModelProto:
    q, k = (BATCH, SEQ, HEADS * HEAD), (BATCH, KV_SEQ, HEADS * HEAD)
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=HEADS,
                            kv_num_heads=HEADS)  # fmt: skip
    graph = helper.make_graph([node], "attention_op23_3d",
                              [_value("q", q), _value("k", k), _value("v", k)],
                              [_value("y", q)])  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)],
                             ir_version=HELPER_IR_VERSION)  # fmt: skip


def mha_contrib() -> onnx.ModelProto:
    """Projections (MatMul with weights) -> MultiHeadAttention -> projection."""
    rng = np.random.default_rng(SEED)
    d = HEADS * HEAD
    inits, nodes = [], []
    for name in ("wq", "wk", "wv", "wo"):
        w = (rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, name))
    nodes += [
        helper.make_node("MatMul", ["x", w], [w + "_out"], name=w) for w in ("wq", "wk", "wv")
    ]
    nodes.append(helper.make_node("MultiHeadAttention", ["wq_out", "wk_out", "wv_out", "", "",
                                                         "bias"], ["ctx"], domain="com.microsoft",
                                  num_heads=HEADS, name="mha"))  # fmt: skip
    nodes.append(helper.make_node("MatMul", ["ctx", "wo"], ["y"], name="wo"))
    graph = helper.make_graph(nodes, "mha_contrib",
                              [_value("x", (BATCH, SEQ, d)), _value("bias", (1, HEADS, SEQ, SEQ))],
                              [_value("y", (BATCH, SEQ, d))], inits)  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)],
                             ir_version=8)  # fmt: skip


def bert_exports() -> list[tuple[str, str]]:
    """The tiny BERT with both torch exporters: ``(file, how)`` per file written."""
    try:
        import torch
        import transformers
    except ImportError as exc:
        print(f"skipping the torch exports: {exc}", file=sys.stderr)
        return []
    torch.manual_seed(SEED)
    config = transformers.BertConfig(**BERT, attn_implementation="eager")
    model = transformers.BertModel(config).eval()

    class Encoder(torch.nn.Module):
        """Token ids and HF's additive extended mask ``[1, 1, 1, N]`` in, hidden states out
        (the mask made outside: transformers' own mask helpers export ops the importer has no
        kernel for, such as GatherND)."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = model

        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            h = self.bert.embeddings(input_ids=ids)
            for layer in self.bert.encoder.layer:
                out = layer(h, attention_mask=mask)
                h = out[0] if isinstance(out, tuple) else out
            return h

    ids = torch.randint(0, BERT["vocab_size"], (1, BERT_SEQ))
    mask = torch.zeros(1, 1, 1, BERT_SEQ)
    mask[..., -3:] = -10000.0
    out = []
    for dynamo, name in ((False, "bert_torchscript"), (True, "bert_dynamo")):
        path = OUT_DIR / f"{name}.onnx"
        kwargs = {"opset_version": 17} if not dynamo else {"opset_version": 18}
        torch.onnx.export(Encoder().eval(), (ids, mask), str(path), input_names=["ids", "mask"],
                          output_names=["hidden"], dynamo=dynamo, **kwargs)  # fmt: skip
        m = onnx.load(str(path), load_external_data=True)
        onnx.save(m, str(path), save_as_external_data=False)
        for extra in OUT_DIR.glob(f"{name}.onnx.data"):
            extra.unlink()
        how = (f"torch {torch.__version__} {'dynamo' if dynamo else 'torchscript'} exporter, "
               f"transformers {transformers.__version__} BertModel (eager attention), "
               f"opset {kwargs['opset_version']}")  # fmt: skip
        out.append((path.name, how))
    return out


def _export_both(
    module: object,
    args: tuple[object, ...],
    stem: str,
    what: str,
    input_names: list[str] | None = None,
) -> list[tuple[str, str]]:
    """``module`` by both torch exporters into ``<stem>_torchscript/_dynamo.onnx``."""
    import torch
    import transformers

    out = []
    for dynamo, kind in ((False, "torchscript"), (True, "dynamo")):
        path = OUT_DIR / f"{stem}_{kind}.onnx"
        opset = 18 if dynamo else 17
        torch.onnx.export(module, args, str(path),  # type: ignore[arg-type]
                          input_names=input_names or ["ids", "mask"],
                          output_names=["hidden"], dynamo=dynamo, opset_version=opset)  # fmt: skip
        m = onnx.load(str(path), load_external_data=True)
        onnx.save(m, str(path), save_as_external_data=False)
        for extra in OUT_DIR.glob(f"{path.name}.data"):
            extra.unlink()
        how = (f"torch {torch.__version__} {kind} exporter, transformers "
               f"{transformers.__version__} {what} (eager attention), opset {opset}")  # fmt: skip
        out.append((path.name, how))
    return out


def gpt2_exports() -> list[tuple[str, str]]:
    """A tiny GPT-2 (2 blocks, n_embd 32, 4 heads, sequence 16) with a causal float mask
    input ``[1, 1, N, N]`` (0 / finfo.min), by both exporters."""
    try:
        import torch
        import transformers
    except ImportError as exc:
        print(f"skipping the torch exports: {exc}", file=sys.stderr)
        return []
    torch.manual_seed(SEED)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=32,
                                     vocab_size=50, bos_token_id=0, eos_token_id=0,
                                     attn_implementation="eager")  # fmt: skip
    model = transformers.GPT2Model(config).eval()

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gpt = model

        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            pos = torch.arange(ids.shape[1]).unsqueeze(0)
            h = self.gpt.wte(ids) + self.gpt.wpe(pos)
            for block in self.gpt.h:
                out = block(h, attention_mask=mask)
                h = out[0] if isinstance(out, tuple) else out
            return self.gpt.ln_f(h)

    ids = torch.randint(0, 50, (1, BERT_SEQ))
    lowest = torch.finfo(torch.float32).min
    mask = torch.triu(torch.full((1, 1, BERT_SEQ, BERT_SEQ), lowest), diagonal=1)
    return _export_both(Decoder().eval(), (ids, mask), "gpt2", "GPT2Model")


def llama_exports() -> list[tuple[str, str]]:
    """A tiny Llama (GQA 4 over 2 heads) with a constant causal mask, by both exporters."""
    try:
        import torch
        import transformers
    except ImportError as exc:
        print(f"skipping the torch exports: {exc}", file=sys.stderr)
        return []
    torch.manual_seed(SEED)
    config = transformers.LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64,
                                      attn_implementation="eager")  # fmt: skip
    model = transformers.LlamaModel(config).eval()

    class Decoder(torch.nn.Module):
        """Token ids in, hidden states out; the causal mask a buffer of the module (HF's own
        mask helpers export ops the importer has no kernel for)."""

        def __init__(self) -> None:
            super().__init__()
            self.llama = model
            lowest = torch.finfo(torch.float32).min
            full = torch.full((1, 1, BERT_SEQ, BERT_SEQ), lowest)
            self.register_buffer("causal", torch.triu(full, diagonal=1))

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            h = self.llama.embed_tokens(ids)
            pos = torch.arange(ids.shape[1]).unsqueeze(0)
            rope = self.llama.rotary_emb(h, pos)
            for layer in self.llama.layers:
                out = layer(h, attention_mask=self.causal, position_ids=pos,
                            position_embeddings=rope)  # fmt: skip
                h = out[0] if isinstance(out, tuple) else out
            return self.llama.norm(h)

    ids = torch.randint(0, 50, (1, BERT_SEQ))
    return _export_both(Decoder().eval(), (ids,), "llama", "LlamaModel", ["ids"])


def _helper_files() -> list[tuple[str, str, str]]:
    rows = []
    for name, make, shows in (
        ("attention_op23_4d", attention_4d, "ONNX Attention (opset 23), 4-D, float mask, scale"),
        ("attention_op23_3d", attention_3d, "ONNX Attention (opset 23), 3-D with q_num_heads"),
        ("mha_contrib", mha_contrib, "projections -> com.microsoft MultiHeadAttention "
                                     "(attention_bias) -> projection"),
    ):  # fmt: skip
        model = make()
        onnx.checker.check_model(model)
        path = OUT_DIR / f"{name}.onnx"
        onnx.save(model, str(path))
        rows.append((path.name, f"onnx {onnx.__version__} onnx.helper", shows))
    return rows


BERT_SHOWS = "2-layer BERT encoder (hidden 32, 4 heads, seq 16, additive float mask input)"
GPT2_SHOWS = ("2-block GPT-2 (n_embd 32, 4 heads, seq 16, causal float mask input; TorchScript "
              "casts the probabilities)")  # fmt: skip
LLAMA_SHOWS = ("2-layer Llama (hidden 32, 4 query heads over 2 KV heads, RoPE, RMSNorm, "
               "SwiGLU, seq 16, constant causal mask)")  # fmt: skip


def main(groups: list[str]) -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    makers = {
        "helper": _helper_files,
        "bert": lambda: [(f, how, BERT_SHOWS) for f, how in bert_exports()],
        "gpt2": lambda: [(f, how, GPT2_SHOWS) for f, how in gpt2_exports()],
        "llama": lambda: [(f, how, LLAMA_SHOWS) for f, how in llama_exports()],
    }
    unknown = sorted(set(groups) - set(makers))
    if unknown:
        raise SystemExit(f"unknown groups {unknown}; choose from {sorted(makers)}")
    readme = OUT_DIR / "README.md"
    kept: dict[str, tuple[str, str]] = {}  # file -> (how, shows) of the rows not remade
    if readme.exists():
        for line in readme.read_text().splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) == 4 and cells[0].startswith("`"):
                kept[cells[0].strip("`")] = (cells[2], cells[3])
    rows: list[tuple[str, str, str]] = []
    for group, make in makers.items():
        if not groups or group in groups:
            rows += make()
    made = {file for file, _, _ in rows}
    rows = [(f, how, shows) for f, (how, shows) in kept.items() if f not in made] + rows
    lines = ["# Attention forms", "",
             "Inputs of `tests/test_attention.py` (the import forms of pattern P5). Regenerate "
             "with `python experiments/make_attention_models.py` (the BERT, GPT-2 and Llama files "
             "need torch and transformers: see `experiments/README.md`). Random weights, seed 0.",
             "",
             "| file | bytes | made by | shows |", "|---|---|---|---|"]  # fmt: skip
    for file, how, shows in rows:
        lines.append(f"| `{file}` | {(OUT_DIR / file).stat().st_size:,} | {how} | {shows} |")
    (OUT_DIR / "README.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
