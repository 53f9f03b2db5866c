from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.graph"))

SMALL = {
    "conv_block": {"N": 1, "H": 12},
    "elementwise_chain": {"N": 64, "D": 96},
    "gemm": {"M": 64, "N": 48, "K": 80},
    "layernorm": {"T": 16, "H": 96},
    "mlp": {"B": 4},
    "softmax": {"R": 32, "C": 100},
    "transformer_block": {"B": 1, "S": 16, "D": 32, "F": 64},
}
"""Dims at which every example runs in milliseconds (tests use these)."""


@pytest.fixture(params=EXAMPLES, ids=lambda p: p.stem)
def example(request: pytest.FixtureRequest) -> Path:
    return request.param
