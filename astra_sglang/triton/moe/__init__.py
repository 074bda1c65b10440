"""SGLang's Triton fused MoE as a target: its config files (configs.py), the op the evaluator runs (op.py),
its fp64 reference, the expert shapes a model runs (shapes.py), the config space (space.py) and the config-file
patch writer (patch.py)."""
