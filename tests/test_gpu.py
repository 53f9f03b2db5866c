"""End to end on a real GPU: every example through the CUDA backend against the float64
reference, then timed with CUDA events. Skipped, with the reason, where no device is present
(the CUDA path is still checked there, by NVRTC and the lockstep interpretation, in
test_cuda_path.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import irkit
from irkit.runtime import BACKENDS
from irkit.runtime.check import check
from tests.conftest import SMALL

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def device_ready() -> str:
    ok, why = BACKENDS["cuda"]().available()
    if not ok:
        pytest.skip(why)
    return why


@pytest.mark.parametrize("spec", ["default-cuda", "baseline-cuda"])
def test_every_example_runs_correctly_on_the_gpu(
    example: Path, spec: str, device_ready: str
) -> None:
    module = irkit.load(example, SMALL[example.stem])
    exe = irkit.compile(module, spec, backend="cuda")
    for seed in (0, 1):
        checks, _ = check(exe, module, seed=seed)
        assert all(c.passed for c in checks), [c.describe() for c in checks]


def test_default_dims_run_and_time_on_the_gpu(example: Path, device_ready: str) -> None:
    from irkit.measure.run import run_model

    result = run_model(example, backend="cuda", budget_s=0.5)
    assert result.passed, [c.describe() for c in result.checks]
    assert result.graph is not None and result.graph.estimate.median > 0
    assert result.graph.timer.startswith("cuda_events")
    assert all(k.seconds > 0 for k in result.kernels)


PASSTHROUGH = """model passthrough
dim N = 1000
input x : f32[N]
output y = x
output z = relu(x)
output w = z
"""


def test_driver_copies_run_on_the_gpu(device_ready: str) -> None:
    """Outputs that are an input or another output become device-to-device copies."""
    from irkit.frontend import parse_source

    module = parse_source(PASSTHROUGH, "passthrough.graph", ".graph")
    exe = irkit.compile(module, "default-cuda", backend="cuda")
    checks, _ = check(exe, module, seed=3)
    assert [c.name for c in checks] == ["y", "z", "w"]
    assert all(c.passed for c in checks), [c.describe() for c in checks]
