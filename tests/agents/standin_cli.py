"""`astra-sglang` with the agent tests' stand-in evaluator in place of the harness (no GPU, no nvcc): what a GPU
script runs, on the CPU. Usage: ASTRA="python tests/agents/standin_cli.py" bash benchmarks/gpu/SCRIPT.sh OUT"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from agent_support import StandIn  # noqa: E402

from astra_sglang.cli import main  # noqa: E402
from astra_sglang.cli import optimize as optimize_cli  # noqa: E402

if __name__ == "__main__":
    optimize_cli.harness_evaluator = lambda: StandIn()
    main()
