"""SGLang's Triton decode and extend attention as targets: the kernels and where SGLang launches them
(targets.py), the launch configs and their space (space.py, launch.py), the KV layout (layout.py), the op the
evaluator runs (op.py), the fp64 reference and the launch-config patch writer (patch.py)."""
