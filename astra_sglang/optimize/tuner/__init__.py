"""The built-in tuners, no LLM needed.

- cuda_tune.py, ensemble.py, screen.py: a CUDA kernel's `// astra:knob` knobs (kernels/knobs.py) searched per
  shape, one kernel dispatching each shape to its best configuration, configurations screened by building them
- bucket.py: the generic bucket tuner over the strict isolated evaluator; an op's specifics are a TuneOp
- moe_tune.py, moe_run.py: SGLang's Triton fused MoE configs per batch size, and the config-file patch
- attention_tune.py, attention_run.py: SGLang's Triton decode / extend attention launch configs per bucket
- the screening tier ahead of the strict one: a long-lived worker per GPU (screen_worker*.py, screen_pool.py,
  screen_ray.py), Triton compiles ahead (compile_ahead.py), the screening order (order.py), the CUDA-graph timer
  (graph_timing.py), budgets and finalists (two_tier.py); fused MoE's parts: moe_order.py (SGLang's pick, the
  shipped configs, the cost model), moe_screen.py (the launch), moe_two_tier.py, moe_simulate.py (the cost model
  as a simulated GPU); screen_simulate.py, screen_progress.py
- cache.py, report.py: measured configs kept across runs, a run's table (its records: triton/results.py and
  triton/screen_records.py, which the patch writers read)
"""
