"""cpu-parallelize: threaded kernels compute what the sequential ones compute, bit for bit,
and the pass marks the loops it says it marks.

The thread counts here are explicit (the tests run with IRKIT_NUM_THREADS=1, see conftest),
and odd ones with odd sizes, so that chunks are uneven."""

from __future__ import annotations

import ctypes.util
import functools
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import scf
from xdsl.dialects.builtin import IntegerAttr

import irkit
from irkit.codegen import host
from irkit.codegen import pool as pool_runtime
from irkit.errors import IrkitError
from irkit.loops import THREADS_ATTR
from irkit.passes.cpu_parallelize import default_threads
from irkit.pipelines import PIPELINES, apply_passes, parse_passes
from irkit.runtime.check import check
from tests.conftest import SMALL

FORCED = "cpu-parallelize{threads=3 min-work=0}"

ODD = {
    **SMALL,
    "conv_block": {"N": 1, "H": 11},
    "elementwise_chain": {"N": 67, "D": 96},
    "gemm": {"M": 131, "N": 200, "K": 37},
    "layernorm": {"T": 17, "H": 96},
    "mlp": {"B": 5},
    "softmax": {"R": 33, "C": 100},
    "llama_decode": {**SMALL["llama_decode"], "B": 3},
}
"""SMALL with odd leading extents (so 3 threads get unequal chunks)."""


def _marks(module) -> list[int]:
    return [
        a.value.data
        for op in module.walk()
        if isinstance(op, scf.ParallelOp)
        and isinstance(a := op.attributes.get(THREADS_ATTR), IntegerAttr)
    ]


CALLS = {"irkit": "irkit_pool_run", "gomp": "GOMP_parallel", "": "pthread_create"}


def _available(pool: str) -> bool:
    if pool == "irkit":
        return pool_runtime.supported()
    return pool != "gomp" or ctypes.util.find_library("gomp") is not None


@pytest.mark.parametrize("pool", ["irkit", "gomp", ""], ids=["irkit-pool", "gomp", "pthreads"])
@pytest.mark.parametrize("base", ["default-cpu", "baseline-cpu"])
def test_threaded_kernels_match_the_reference_and_the_sequential_bits(
    example, base, pool, monkeypatch
) -> None:
    if not _available(pool):
        pytest.skip(f"no {pool} pool on this machine")
    monkeypatch.setenv("IRKIT_THREAD_POOL", pool or "0")
    host.thread_pool.cache_clear()
    monkeypatch.setattr(host, "thread_pool", functools.cache(host.thread_pool.__wrapped__))
    module = irkit.load(example, ODD[example.stem])
    sequential = irkit.compile(module, base, backend="cpu")
    threaded = irkit.compile(module, f"{base},{FORCED}", backend="cpu")
    assert max((k.launch or {}).get("threads", 1) for k in threaded.kernels) > 1
    assert CALLS[pool] in threaded.llvm_ir
    checks, inputs = check(threaded, module, seed=3)
    assert checks and all(c.passed for c in checks), [c.describe() for c in checks]
    # every iteration is independent and runs the same code: the same bits
    for a, b in zip(sequential(*inputs), threaded(*inputs), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_threaded_gemm_splits_its_panels_and_runs_more_threads_than_cores(tmp_path) -> None:
    # 7 panels of 64 columns over 5 threads: chunks of 1 and 2 panels; more threads than this
    # machine has cores is legal, only slower
    module = irkit.load("examples/gemm.graph", {"M": 20, "N": 7 * 64, "K": 16})
    exe = irkit.compile(module, "default-cpu,cpu-parallelize{threads=5 min-work=0}", backend="cpu")
    assert exe.kernels[0].launch == {"threads": 5}
    checks, _ = check(exe, module, seed=1)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


def test_threads_never_exceed_the_first_dimension_and_small_loops_stay_sequential() -> None:
    module = irkit.load("examples/softmax.graph", {"R": 2, "C": 4096})
    lowered = apply_passes(
        module.clone(), parse_passes("lower-graph-to-loops,cpu-parallelize{threads=8 min-work=0}")
    )
    assert _marks(lowered) and set(_marks(lowered)) == {2}  # 2 rows: 2 threads at most
    module = irkit.load("examples/softmax.graph", {"R": 1, "C": 4096})
    lowered = apply_passes(
        module.clone(), parse_passes("lower-graph-to-loops,cpu-parallelize{threads=8 min-work=0}")
    )
    assert _marks(lowered) == []  # one row: nothing to share
    module = irkit.load("examples/softmax.graph", SMALL["softmax"])
    lowered = apply_passes(
        module.clone(), parse_passes("lower-graph-to-loops,cpu-parallelize{threads=8}")
    )
    assert _marks(lowered) == []  # 32 x 100: under the default min-work


def test_default_threads_follow_the_environment_then_the_affinity(monkeypatch) -> None:
    monkeypatch.setenv("IRKIT_NUM_THREADS", "3")
    assert default_threads() == 3
    monkeypatch.delenv("IRKIT_NUM_THREADS")
    assert default_threads() == len(__import__("os").sched_getaffinity(0))
    monkeypatch.setenv("IRKIT_NUM_THREADS", "many")
    with pytest.raises(IrkitError, match="IRKIT_NUM_THREADS must be an integer from 1 to 1024"):
        default_threads()


def test_the_resolved_count_is_written_into_the_ir(monkeypatch) -> None:
    monkeypatch.setenv("IRKIT_NUM_THREADS", "2")
    module = irkit.load("examples/softmax.graph", {"R": 512, "C": 1024})
    lowered = apply_passes(module.clone(), parse_passes("lower-graph-to-loops,cpu-parallelize"))
    assert _marks(lowered) and set(_marks(lowered)) == {2}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("lower-graph-to-loops,cpu-parallelize{threads=-2}", "option threads=-2: must be 0"),
        (
            "lower-graph-to-loops,cpu-parallelize{min-work=-1}",
            "option min-work=-1: must be non-negative",
        ),
        ("cpu-parallelize", "needs CPU loop-level IR"),
        ("lower-graph-to-loops,map-to-gpu,cpu-parallelize", "needs CPU loop-level IR"),
    ],
)
def test_bad_options_and_levels_are_one_line_errors(spec: str, message: str) -> None:
    module = irkit.load("examples/gemm.graph", SMALL["gemm"])
    with pytest.raises(IrkitError, match=message):
        apply_passes(module, parse_passes(spec))


def test_default_cpu_lists_it_as_optional_and_last() -> None:
    """After every pass that changes a kernel; only share-buffers, which places the driver's
    buffers, follows it."""
    pipeline = PIPELINES["default-cpu"]
    assert pipeline.passes[-2:] == ("cpu-parallelize", "share-buffers")
    assert "cpu-parallelize" in pipeline.optional


def test_a_threaded_kernels_record_and_hash_cover_its_outlined_loop_bodies() -> None:
    """The work of a threaded kernel is in the functions its loops are outlined into: two
    kernels with the same name that differ only there (here: in a constant) must not share
    a hash, or attribution would merge their timings."""
    from irkit.frontend import parse_source

    hashes = []
    for alpha in (0.1, 0.2):
        text = f"model r\ninput x : f32[64, 96]\noutput y = leaky_relu(x, alpha={alpha})\n"
        module = parse_source(text, "r.graph", ".graph")
        exe = irkit.compile(module, f"lower-graph-to-loops,{FORCED}", backend="cpu")
        (kernel,) = exe.kernels
        assert kernel.launch["threads"] == 3
        assert f'@"irkit.k.{kernel.hash}.par0' in kernel.source  # the outlined body is in it
        hashes.append(kernel.hash)
    assert hashes[0] != hashes[1]


def test_vector_width_follows_irkit_vector_bits() -> None:
    """On an AVX-512 host the vectorizers may use 512-bit vectors; IRKIT_VECTOR_BITS=256 asks
    for 256 (the choice is made once per process, so each runs in its own)."""
    if "+avx512f" not in host.host_target().features.split(","):
        pytest.skip("no AVX-512 on this host: vectors are 256 bits or narrower either way")
    spec = "lower-graph-to-loops,expand-math"
    asm = {}
    for bits in ("512", "256"):
        r = subprocess.run(
            ["irkit-opt", "examples/elementwise_chain.graph", "-p", spec, "-t", "asm"],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "IRKIT_VECTOR_BITS": bits}, cwd=Path(__file__).parent.parent,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        asm[bits] = r.stdout
    assert "zmm" in asm["512"] and "zmm" not in asm["256"]


def test_simplify_indices_folds_views_and_keeps_every_example_exact() -> None:
    """default-cpu with and without simplify-indices: the same bits on every example (only
    index arithmetic changes); a reshape read through a kernel loses its divisions."""
    from irkit.frontend import parse_source
    from irkit.pipelines import apply_passes, parse_passes, pipeline_steps
    from irkit.runtime.check import reference_case
    from tests.conftest import EXAMPLES, SMALL

    steps = [s.spec for s in pipeline_steps("default-cpu")]
    without = ",".join(s for s in steps if s != "simplify-indices")
    for path in EXAMPLES:
        module = irkit.load(Path(path), SMALL[Path(path).stem])
        inputs = reference_case(module, seed=2)[0]
        a = irkit.compile(module, "default-cpu", backend="cpu")(*inputs)
        b = irkit.compile(module, without, backend="cpu")(*inputs)
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    source = "model v\ninput x : f32[6, 8]\noutput y = gelu(reshape(x, shape=[6, 8]))\n"
    view = parse_source(source, "v.graph", ".graph")
    loops = apply_passes(
        view, parse_passes("fuse-kernels,lower-graph-to-loops,reshape-views,simplify-indices")
    )
    assert not any(op.name in ("arith.divui", "arith.remui") for op in loops.walk())


def test_a_batch_of_one_threads_the_loops_inside() -> None:
    """A batched kernel whose first parallel dimension has one iteration (batch 1: ViT's
    attention matmuls, heads and rows inside) threads the parallel loops in its body, each
    iteration forking them once; the result the reference's on two threads."""
    from xdsl.dialects import scf

    from irkit.frontend import parse_source
    from irkit.loops import THREADS_ATTR
    from irkit.pipelines import apply_passes, parse_passes, pipeline_steps
    from irkit.runtime.check import check

    source = ("model a\ninput q : f32[1, 3, 64, 32]\ninput k : f32[1, 3, 32, 64]\n"
              "output s = batch_matmul(q, k)\n")  # fmt: skip
    module = parse_source(source, "a.graph", ".graph")
    # two threads whatever the host, and any work threaded
    steps = [s.spec for s in pipeline_steps("default-cpu")]
    steps[-1] = "cpu-parallelize{threads=2 min-work=1}"
    marked = apply_passes(module.clone(), parse_passes(",".join(steps)))
    outer = [op for op in marked.walk() if isinstance(op, scf.ParallelOp)
             and THREADS_ATTR not in op.attributes
             and any(isinstance(o, scf.ParallelOp) and THREADS_ATTR in o.attributes
                     for o in op.body.block.ops)]  # fmt: skip
    assert outer, "no batch-of-one loop with threaded loops inside"
    checks, _ = check(irkit.compile(module, ",".join(steps), backend="cpu"), module, seed=1)
    assert all(c.passed for c in checks)
