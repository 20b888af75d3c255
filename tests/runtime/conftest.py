import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # for runtime_fakes (pytest runs in importlib mode)
