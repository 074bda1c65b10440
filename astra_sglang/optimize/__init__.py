"""`astra-sglang optimize`: one op's run (run.py: the LLM loop, the tuner, or a resumed run, and its winner's patch),
several ops as one job (job.py), which ops a job runs (selection.py), the kernel a run starts from (starts.py),
the records every optimizer produces (records.py) and how a winner is judged and written (winner.py).

- pool/: builds and evaluations in flight on a host's GPUs or a Ray cluster
- tuner/: the built-in tuners: CUDA knobs per shape (cuda_tune.py), SGLang's Triton configs (moe_*, attention_*)
- agents/: the LLM loop (Astra's agents); its finalists are tuned by the tuner
"""
