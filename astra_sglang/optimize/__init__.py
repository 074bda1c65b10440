"""Optimizing a kernel: the tuners (generic bucket tuner, screening tier) and what drives them."""
