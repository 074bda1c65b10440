"""fp64 torch references of the ops, each in the op's calling convention (the spec's `reference`): the small
ops around the GEMMs (small_ops.py), MoE routing, FP8 group quantization, rotary embedding."""
