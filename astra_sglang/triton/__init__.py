"""SGLang's Triton kernels as targets, the op-specific parts only: fused MoE (moe/) and decode / extend
attention (attention/), each with its config space, the op the evaluator runs, its reference and its patch
writer; the bytes they move (cost.py) and the tuning records the writers read (results.py). Discovery is
extraction/triton/, the tuners optimize/tuner/."""
