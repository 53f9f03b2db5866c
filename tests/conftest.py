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
    "mlp": {"B": 4, "D": 64, "F": 256},
    "softmax": {"R": 32, "C": 100},
    "transformer_block": {"B": 1, "S": 16, "D": 32, "F": 64},
}
"""Dims at which every example runs in milliseconds (tests use these)."""


@pytest.fixture(params=EXAMPLES, ids=lambda p: p.stem)
def example(request: pytest.FixtureRequest) -> Path:
    return request.param


def check_every_subset(pipeline_name: str, module, backend: str, seed: int) -> int:
    """The attribution invariant: every subset of `pipeline_name`'s optional passes compiles
    for `backend` and matches the reference. Returns the number of distinct programs checked.

    The subsets are walked pass by pass as a frontier of distinct modules: after each
    optional pass, every module so far either runs it or not, and modules with the same text
    are one (all subsets that reach it continue the same way). The final frontier holds the
    program of every one of the 2^k subsets, each compiled and checked once, as attribution
    measures them; a pass that changes nothing on an example costs nothing."""
    from irkit.pipelines import PIPELINES, apply_passes, parse_passes
    from irkit.runtime import BACKENDS, lower_for
    from irkit.runtime.check import check

    pipeline = PIPELINES[pipeline_name]
    frontier = {str(module): (module.clone(), "")}
    for name in pipeline.passes:
        (p,) = parse_passes(name)
        reached: dict[str, tuple] = {}
        for text, (m, spec) in frontier.items():
            if name in pipeline.optional:
                reached.setdefault(text, (m, spec))
            after = apply_passes(m.clone(), [p])
            reached.setdefault(str(after), (after, f"{spec},{name}".lstrip(",")))
        frontier = reached
    programs: dict[str, str] = {}
    for m, spec in frontier.values():
        lowered = lower_for(m, backend)
        text = str(lowered)
        if text in programs:
            continue
        programs[text] = spec
        exe = BACKENDS[backend]().compile(lowered)
        checks, _ = check(exe, module, seed)
        assert checks and all(c.passed for c in checks), (spec, [c.describe() for c in checks])
    return len(programs)
