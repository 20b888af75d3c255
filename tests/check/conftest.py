from __future__ import annotations

import pytest
import yaml

from tests.check.check_fixtures import BASE


@pytest.fixture
def base_yaml(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(BASE))
    return path
