"""SGLang's Triton kernels as targets: discovery with `ast`, fused MoE's op for the evaluator, its config
space and per-batch-size tuner, and SGLang's config files (read, resolved as SGLang resolves them, written)."""
