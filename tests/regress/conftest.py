import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "diagnose"))  # diagnose_samples: verbatim PyTorch OOM messages
