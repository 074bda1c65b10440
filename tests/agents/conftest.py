"""Agent tests: the helpers live in agent_support.py (a plain module, so its name cannot clash)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from agent_support import fake  # noqa: E402,F401  (the fixture)
