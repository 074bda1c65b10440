"""Package discovery: every package under astra_sglang/ plus the three top-level data folders that
pyproject.toml's package-dir maps into it. All other metadata is in pyproject.toml."""
from setuptools import find_packages, setup

DATA_PACKAGES = ["astra_sglang._specs", "astra_sglang._templates", "astra_sglang._patches"]

setup(packages=find_packages(include=["astra_sglang", "astra_sglang.*"]) + DATA_PACKAGES)
