"""End to end on a real GPU: every example through the CUDA backend against the float64
reference, then timed with CUDA events. Skipped, with the reason, where no device is present
(the CUDA path is still checked there, by NVRTC and the lockstep interpretation, in
test_cuda_path.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
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


def test_graph_replay_computes_what_the_launches_compute(device_ready: str) -> None:
    """The driver captured into one CUDA graph and replayed writes the outputs that the
    launch-by-launch run wrote, bit for bit (the buffers are poisoned in between)."""
    from irkit.runtime.reference import random_inputs

    path = Path(irkit.__file__).parent / "examples" / "transformer_block.graph"
    module = irkit.load(path, SMALL["transformer_block"])
    exe = irkit.compile(module, "default-cuda", backend="cuda")
    bound = exe.bind(*random_inputs(module, seed=5))
    first = [o.copy() for o in bound.outputs]
    out_buffers = bound.buffers[len(exe.inputs) :]
    for buf in out_buffers:
        buf.poison()
    bound.timed_replay()()
    replayed = [o.copy() for o in bound.outputs]
    assert all(np.isfinite(r).all() for r in replayed)
    for a, b in zip(first, replayed, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_copy_loads_the_same_cubins_again(device_ready: str, monkeypatch) -> None:
    """`CudaExecutable.copy()` (attribution's further placements): the same kernels loaded
    as modules of their own, nothing printed or compiled again, the same results after the
    original is gone."""
    import gc

    import irkit.runtime.gpu as gpu_runtime
    from irkit.runtime.reference import random_inputs

    module = irkit.load("examples/mlp.graph", {"B": 4, "D": 32, "F": 64})
    inputs = random_inputs(module, seed=3)
    exe = irkit.compile(module, backend="cuda")
    expected = exe(*inputs)
    monkeypatch.setattr(gpu_runtime, "kernel_source", lambda *a: pytest.fail("printed again"))
    twin = exe.copy()
    assert twin.gpu_kernels is exe.gpu_kernels
    assert all(int(a) != int(b) for a, b in zip(exe._modules, twin._modules, strict=True))
    del exe
    gc.collect()
    for a, b in zip(expected, twin(*inputs), strict=True):
        np.testing.assert_array_equal(a, b)
