from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.graph"))


@pytest.fixture(params=EXAMPLES, ids=lambda p: p.stem)
def example(request: pytest.FixtureRequest) -> Path:
    return request.param
