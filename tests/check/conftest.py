from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

# Test modules import check_fixtures from here (pytest runs in importlib mode).
sys.path.insert(0, str(Path(__file__).parent))

from check_fixtures import BASE


@pytest.fixture
def base_yaml(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(BASE))
    return path
