"""Export a tiny-width, many-layer Hugging Face Llama with torch's dynamo exporter.

Run in the torch side environment (``experiments/README.md``), not in fusiontune's::

    python experiments/make_llama_dynamo.py --layers 32 [--out FILE]

Builds ``transformers.LlamaModel`` from a ``LlamaConfig`` with the zoo's ``llama_tiny``
widths (hidden 64, 4 heads over 2 KV heads, SwiGLU 128; random weights, no LM head,
``use_cache=False``) and exports its prefill of ``--seq`` token ids with
``torch.onnx.export(..., dynamo=True)`` at the exporter's default opset. The file goes to
the gitignored ``experiments/.sweep_cache/`` unless ``--out`` says otherwise;
``experiments/exp_llm_scale.py`` loads it. Imports nothing from fusiontune.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

HIDDEN = 64  # = zoo_llm.TINY_HIDDEN
HEADS = 4
KV_HEADS = 2
FFN = 128
VOCAB = 256
SEQ = 16
CACHE = Path(__file__).resolve().parent / ".sweep_cache"


def export(layers: int, seq: int, out: Path) -> dict[str, Any]:
    """Export the model; returns what happened (times, opset, size, node counts)."""
    import onnx
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=layers,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=2 * seq,
        use_cache=False,
    )  # fmt: skip
    model = transformers.LlamaModel(cfg).eval()

    class Hidden(torch.nn.Module):  # the last hidden state only (no cache, no tuple)
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.inner(input_ids=ids, use_cache=False).last_hidden_state

    ids = torch.randint(0, VOCAB, (1, seq))
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with torch.no_grad():
        torch.onnx.export(
            Hidden().eval(), (ids,), str(out), dynamo=True, external_data=False,
            input_names=["input_ids"], verbose=False,
        )  # fmt: skip
    seconds = time.perf_counter() - start
    m = onnx.load(str(out))
    types: dict[str, int] = {}
    for node in m.graph.node:
        types[node.op_type] = types.get(node.op_type, 0) + 1
    return {
        "file": str(out),
        "layers": layers,
        "seq": seq,
        "export_s": round(seconds, 1),
        "opset": next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")),
        "size_bytes": out.stat().st_size,
        "nodes": len(m.graph.node),
        "functions": len(m.functions),
        "node_types": dict(sorted(types.items())),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--seq", type=int, default=SEQ)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or CACHE / f"llama{args.layers}_dynamo.onnx"
    print(json.dumps(export(args.layers, args.seq, out), indent=1))


if __name__ == "__main__":
    main()
