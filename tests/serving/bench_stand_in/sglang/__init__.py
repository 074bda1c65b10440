"""The stand-in SGLang package of the benchmark-client tests: only sglang.benchmark.serving (see there)."""
