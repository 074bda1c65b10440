"""Serving-level A/B of an unpatched vs a patched SGLang server: `astra-sglang ab`."""
