"""SGLang's Triton fused MoE as a target: its config files (configs.py), the op the evaluator runs (op.py),
its fp64 reference, the expert shapes a model runs (shapes.py), the config space (space.py) and the config-file
patch writer (patch.py); source-level variants of its kernel (split-K: splitk*.py; an agent's: sources.py), the
knob they add to the space (knobs.py), the provider a search and the evaluator op reach them through
(provider.py, source_op.py) and their source patch (source_patch.py); SGLang's own tuner as the bar (sglang_tuner*,
ray_local.py, bar*.py)."""
