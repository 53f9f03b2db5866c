from __future__ import annotations

import os
from pathlib import Path

import pytest

# cpu-parallelize{threads=0} resolves to IRKIT_NUM_THREADS: one thread for the tests, so that
# what they compile and time does not depend on the CI machine's core count. Tests of
# threading ask for their thread counts explicitly.
os.environ["IRKIT_NUM_THREADS"] = "1"

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


def check_every_subset(pipeline_name: str, module, backend: str, seed: int) -> int:
    """The attribution invariant: every subset of `pipeline_name`'s optional passes compiles
    for `backend` and matches the reference. Subsets that lower to the same IR are one
    program (as attribution measures them) and are compiled and checked once. Returns the
    number of distinct programs checked."""
    import itertools

    from irkit.pipelines import PIPELINES, apply_passes, lower_for_backend, parse_passes
    from irkit.runtime import BACKENDS
    from irkit.runtime.check import check

    pipeline = PIPELINES[pipeline_name]
    optional = [p for p in pipeline.passes if p in pipeline.optional]
    seen: dict[str, str] = {}
    for keep in itertools.product((False, True), repeat=len(optional)):
        off = {p for p, k in zip(optional, keep, strict=True) if not k}
        spec = ",".join(p for p in pipeline.passes if p not in off)
        lowered = lower_for_backend(apply_passes(module.clone(), parse_passes(spec)), backend)
        text = str(lowered)
        if text in seen:
            continue
        seen[text] = spec
        exe = BACKENDS[backend]().compile(lowered)
        checks, _ = check(exe, module, seed)
        assert checks and all(c.passed for c in checks), (spec, [c.describe() for c in checks])
    return len(seen)
