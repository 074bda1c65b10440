"""The built-in tuners, no LLM needed.

- cuda_tune.py, ensemble.py, screen.py: a CUDA kernel's `// astra:knob` knobs (kernels/knobs.py) searched per
  shape, one kernel dispatching each shape to its best configuration, configurations screened by building them
- moe_tune.py, moe_run.py: SGLang's Triton fused MoE configs per batch size, and the config-file patch
- attention_tune.py, attention_run.py: SGLang's Triton decode / extend attention launch configs per bucket
- cache.py, report.py: measured configs kept across runs, a run's table (its records: triton/results.py, which
  the patch writers read)
"""
