import sys
from pathlib import Path

# The LoRA model tests reuse the checker's base job (pytest runs in importlib mode).
sys.path.insert(0, str(Path(__file__).parents[1] / "check"))
sys.path.insert(0, str(Path(__file__).parent))
