"""`astra-sglang profile`: where a live SGLang server spends its GPU time, per kernel and per op, and what
each kernel would give back if it ran at the copy roofline (the first stage of the pipeline)."""
