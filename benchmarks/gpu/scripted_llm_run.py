"""A scripted multi-round `optimize` run on a real GPU: the real openai client talks to our fake
OpenAI-compatible server on loopback, whose coding answers are real kernels (one that does not build,
one malformed answer, an honest vectorized kernel, a cheat), so every candidate goes through the real
safety check, build, correctness and timing.

Usage (repo root): python3 benchmarks/gpu/scripted_llm_run.py RUN_DIR
"""
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "agents"))
from fake_openai import Answer, FakeOpenAI, RoleScript  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"


def code(path: Path) -> str:
    return "Here is the kernel.\n```cuda\n" + path.read_text() + "\n```\n"


TESTS = '```json\n{"shapes": [[7, 4100], [1, 14336]], "trials": 3, "rationale": "odd tail and decode"}\n```'
PLAN = "1. Use 16-byte vector loads and stores with a scalar tail.\n2. Keep fp32 math."
BROKEN = "```cuda\n#include \"astra_abi.h\"\nASTRA_ENTRY { return undefined_symbol; }\n```"
script = RoleScript(
    {"testing": [TESTS],
     "coding": [Answer(BROKEN), Answer("I would vectorize the loads."),  # malformed: no code block
                Answer(code(FIX / "honest" / "silu_and_mul_vec.cu")),
                Answer(code(FIX / "cheats" / "partial_write.cu"))]},
    defaults={"planning": PLAN, "profiling": "Memory-bound at large shapes; latency-bound below 64 tokens.",
              "coding": Answer(code(FIX / "honest" / "silu_and_mul_vec.cu"))})
run_dir = Path(sys.argv[1])
with FakeOpenAI(script) as server:
    cmd = ["astra-sglang", "optimize", "silu_and_mul", "--rounds", "4", "--llm", "scripted-model", "--base-url",
           server.base_url, "--api-key", "none", "--shapes", "paper", "--out", str(run_dir)]
    print(" ".join(cmd[:-1]), "RUN_DIR", flush=True)
    code_ = subprocess.call(cmd)
    print("roles seen:", " ".join(server.roles()))
sys.exit(code_)
