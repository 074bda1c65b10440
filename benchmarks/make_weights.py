"""Random weights for a Llama-shaped model folder (config.json + tokenizer), so that SGLang serves real numerics.

With `--load-format dummy` SGLang fills every weight, norm weights included, uniformly in +-1e-3: logits come out
near 1e-5 apart and every greedy output is the same two-token alternation, so neither tokens nor logprobs (fp32
around -log(vocab)) can show a kernel's numerical error. Weights drawn as a trained model's init draws them
(normal, std 0.02; norm weights near 1) give logits about 1 apart: a norm off by 1% shifts top logprobs by
hundredths of a nat, which `ab`'s parity check sees. Throughput is the same as with dummy weights (same shapes,
same kernels, fixed output lengths).

Usage: python3 benchmarks/make_weights.py MODEL_DIR OUT_DIR [--seed 0] [--device cuda]
OUT_DIR gets MODEL_DIR's files and model.safetensors (HF Llama tensor names, bfloat16).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

STD = 0.02
NORM_STD = 0.1


def tensor_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """HF Llama tensor names and shapes of `config` (LlamaForCausalLM, as SGLang's llama.py loads them)."""
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = config.get("head_dim") or hidden // heads
    shapes = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    if not config.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (vocab, hidden)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": (heads * head_dim, hidden),
                       p + "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
                       p + "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
                       p + "self_attn.o_proj.weight": (hidden, heads * head_dim),
                       p + "mlp.gate_proj.weight": (inter, hidden), p + "mlp.up_proj.weight": (inter, hidden),
                       p + "mlp.down_proj.weight": (hidden, inter),
                       p + "input_layernorm.weight": (hidden,), p + "post_attention_layernorm.weight": (hidden,)})
    return shapes


def make(model_dir: Path, out: Path, seed: int = 0, device: str = "cpu") -> Path:
    import torch
    from safetensors.torch import save_file

    config = json.loads((model_dir / "config.json").read_text())
    if config.get("model_type") != "llama":
        raise SystemExit(f"make_weights: a llama config is needed, got model_type {config.get('model_type')!r}")
    if out.resolve() != model_dir.resolve():
        shutil.copytree(model_dir, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.safetensors"))
    gen = torch.Generator(device=device).manual_seed(seed)
    tensors = {}
    for name, shape in tensor_shapes(config).items():
        if len(shape) == 1:  # norm weights near 1, as a trained model's are
            value = 1 + NORM_STD * torch.randn(shape, generator=gen, device=device)
        else:
            value = STD * torch.randn(shape, generator=gen, device=device)
        tensors[name] = value.to(torch.bfloat16).cpu()
    path = out / "model.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="where to draw them (cuda is faster for an 8B shape)")
    args = parser.parse_args(argv)
    path = make(args.model_dir, args.out, args.seed, args.device)
    print(f"wrote {path} ({path.stat().st_size / 1e9:.2f} GB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
