"""SGLang's Triton fused MoE: source-level variants of its kernel (split-K), their launch and their patch."""
