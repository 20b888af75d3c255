import sys
from pathlib import Path

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures"
sys.path.insert(0, str(HERE))  # for diagnose_samples (pytest runs in importlib mode)
