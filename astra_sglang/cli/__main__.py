"""`python -m astra_sglang.cli`: the same command as the `astra-sglang` script."""
from astra_sglang.cli import main

main()
