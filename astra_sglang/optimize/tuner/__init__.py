"""Tuners that search a kernel's configs per shape bucket: the generic bucket tuner over the strict isolated
evaluator (bucket.py) and the screening tier that measures thousands of configs ahead of it (screen_*.py)."""
