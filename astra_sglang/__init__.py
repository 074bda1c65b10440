"""astra-sglang: extract, optimize and patch back SGLang's GPU kernels (an implementation of Astra)."""

__version__ = "0.1.0"
