"""Write a MoE model folder SGLang serves with --load-format dummy: a real MoE architecture's config with few
layers, and a tokenizer copied from another model folder (no download; SGLang fills random weights).

Usage: python3 benchmarks/make_moe_model.py OUT [--layers 4] [--preset qwen3-30b-a3b] [--tokenizer-from DIR]

Presets (the architectures' published config.json values; only the layer count differs):
  qwen3-30b-a3b  Qwen3MoeForCausalLM: hidden 2048, 128 experts of N=768, top-8, 32 heads, 4 KV heads
  mixtral-8x7b   MixtralForCausalLM: hidden 4096, 8 experts of N=14336, top-2, 32 heads, 8 KV heads
  mixtral-8x7b-tp2-experts
                 mixtral-8x7b with each expert's N=7168: the shard one GPU of a TP2 Mixtral-8x7B server runs (its
                 attention stays whole), so one GPU makes the fused MoE calls of that server's GPUs
  deepseek-v2-lite-experts
                 DeepSeek-V2-Lite's routed experts (hidden 2048, 64 experts of N=1408, top-6, softmax weights not
                 renormalized) in Qwen3MoeForCausalLM's layers (16 heads of 128, no KV grouping; DeepSeek-V2-Lite's
                 own MLA attention, shared experts and dense first layer are not reproduced): the fused MoE calls a
                 DeepSeek-V2-Lite server makes, in a model SGLang serves from a plain config
Four layers of qwen3-30b-a3b hold 4.8 GB of expert weights (bf16); mixtral-8x7b's 11 GB; mixtral-8x7b-tp2-experts'
5.6 GB; deepseek-v2-lite-experts' 2.2 GB.
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

PRESETS = {
    "qwen3-30b-a3b": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
        "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
        "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [], "num_attention_heads": 32,
        "num_key_value_heads": 4, "head_dim": 128, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "attention_bias": False, "max_position_embeddings": 40960, "router_aux_loss_coef": 0.001,
        "output_router_logits": False, "use_sliding_window": False, "sliding_window": None,
    },
    "deepseek-v2-lite-experts": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
        "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_experts": 64, "num_experts_per_tok": 6,
        "norm_topk_prob": False, "decoder_sparse_step": 1, "mlp_only_layers": [], "num_attention_heads": 16,
        "num_key_value_heads": 16, "head_dim": 128, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
        "attention_bias": False, "max_position_embeddings": 32768, "router_aux_loss_coef": 0.001,
        "output_router_logits": False, "use_sliding_window": False, "sliding_window": None,
    },
    "mixtral-8x7b": {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
        "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "rope_theta": 1000000.0, "rms_norm_eps": 1e-5,
        "max_position_embeddings": 32768, "router_aux_loss_coef": 0.02, "output_router_logits": False,
        "sliding_window": None,
    },
}
PRESETS["mixtral-8x7b-tp2-experts"] = {**PRESETS["mixtral-8x7b"], "intermediate_size": 7168}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


def vocab_size(folder: Path) -> int:
    """The tokenizer's vocabulary (its model's config.json says it; else count tokenizer.json's vocab)."""
    config = folder / "config.json"
    if config.is_file():
        return int(json.loads(config.read_text())["vocab_size"])
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    return len(tokenizer["model"]["vocab"]) + len(tokenizer.get("added_tokens", []))


def config(preset: str, layers: int, vocab: int, bos: int = 1, eos: int = 2) -> dict:
    return {**PRESETS[preset], "num_hidden_layers": layers, "max_window_layers": layers, "vocab_size": vocab,
            "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16", "initializer_range": 0.02,
            "use_cache": True, "bos_token_id": bos, "eos_token_id": eos, "attention_dropout": 0.0}


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="qwen3-30b-a3b")
    parser.add_argument("--tokenizer-from", type=Path, default=Path("/tmp/model"),
                        help="A model folder whose tokenizer files are copied (default: the runtime kit's model).")
    args = parser.parse_args(argv)
    source = args.tokenizer_from
    if not (source / "tokenizer.json").is_file():
        parser.error(f"no tokenizer.json in {source}: give --tokenizer-from a model folder")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, args.out / name)
    special = json.loads((source / "generation_config.json").read_text()) if (source / "generation_config.json").is_file() else {}
    cfg = config(args.preset, args.layers, vocab_size(source), special.get("bos_token_id", 1), special.get("eos_token_id", 2))
    (args.out / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    print(f"wrote {args.out}: {args.preset}, {args.layers} layers, vocab {cfg['vocab_size']}")
    return args.out


if __name__ == "__main__":
    main()
