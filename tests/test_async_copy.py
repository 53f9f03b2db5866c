"""cp.async pipelines of `gpu-tile-matmul` (`async-copy`, `stages`) without a GPU: the
kernels agree with the reference on both host paths (lockstep interprets the copies warp by
warp with their race checks; cuda-host queues them per thread and lands them at the waits)
at ragged shapes, every stage count, split-K and batches; and a planted slip in the
pipeline (a wait one group short, the barrier after the wait dropped, a copy into the stage
being read) fails on both. The IR's shape: tests/filecheck/passes/gpu-tile-matmul-async.graph;
the SASS (LDGSTS, DEPBAR): tests/test_sass.py."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import arith, gpu
from xdsl.dialects.builtin import IntegerAttr, i64

import irkit
from irkit.dialects.warp_async import CpAsyncOp, CpAsyncWaitOp
from irkit.frontend import parse_source
from irkit.pipelines import apply_passes, parse_passes
from irkit.runtime import BACKENDS
from irkit.runtime.check import check

HOST_AND_GPU = ["cuda-sim", "cuda-host", pytest.param("cuda", marks=pytest.mark.gpu)]
GEMM = "model g\ninput a : {t}[{m}, {k}]\ninput b : {t}[{k}, {n}]\noutput c = matmul(a, b)\n"


def _pipeline(options: str) -> str:
    return f"fuse-kernels,lower-graph-to-loops,gpu-tile-matmul{{{options}}},map-to-gpu"


def _run(module_text: str, pipeline: str, backend: str, seed: int = 0):
    graph = parse_source(module_text, "g.graph", ".graph")
    exe = irkit.compile(graph, pipeline, backend)
    checks, _ = check(exe, graph, seed)
    return exe, checks


@pytest.mark.parametrize("backend", HOST_AND_GPU)
@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize(
    ("dtype", "dims"),
    [("f16", (100, 56, 72)), ("bf16", (5, 304, 48)), ("f16", (130, 136, 256)), ("bf16", (16, 8, 16))],
)  # fmt: skip
def test_pipelines_match_the_reference_at_ragged_shapes(backend, stages, dtype, dims) -> None:
    """Ragged rows, ragged columns (source sizes below 16 bytes) and a ragged last k tile;
    fewer k tiles than stages (16 x 8 x 16: one tile, the other groups empty)."""
    if backend == "cuda":
        from tests.test_cuda_path import needs

        needs(backend)
    m, n, k = dims
    text = GEMM.format(t=dtype, m=m, n=n, k=k)
    exe, checks = _run(text, _pipeline(f"block-k=16 stages={stages}"), backend)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    copies = [op for op in exe.module.walk() if isinstance(op, CpAsyncOp)]
    assert copies, "the pipeline did not use cp.async"
    waits = {op.groups for op in exe.module.walk() if isinstance(op, CpAsyncWaitOp)}
    assert waits == {stages - 2, 0}


@pytest.mark.parametrize("backend", ["cuda-sim", "cuda-host"])
def test_split_k_and_batches_keep_the_pipeline(backend: str) -> None:
    """Split-K (two k ranges: a tiled kernel per range and the partials' sum) and a batch
    matmul with a broadcast operand, both filled by cp.async, both correct."""
    text = GEMM.format(t="f16", m=64, n=64, k=256)
    exe, checks = _run(text, _pipeline("split-k=2 block-k=16"), backend)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    assert len(exe.kernels) == 2 and any(isinstance(op, CpAsyncOp) for op in exe.module.walk())
    batch = (
        "model g\ninput a : bf16[3, 2, 40, 32]\ninput b : bf16[2, 32, 24]\n"
        "output c = batch_matmul(a, b)\n"
    )
    exe, checks = _run(batch, "default-cuda", backend)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    assert any(isinstance(op, CpAsyncOp) for op in exe.module.walk())


def test_unaligned_rows_fall_back_to_register_staging() -> None:
    """A row of 33 f16 starts rows off 16-byte boundaries, which cp.async cannot copy from:
    the tiles are staged through registers (two stages) and the result is still right."""
    exe, checks = _run(GEMM.format(t="f16", m=40, n=48, k=33), "default-cuda", "cuda-host")
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    assert not any(isinstance(op, CpAsyncOp) for op in exe.module.walk())


def _plant(module, slip: str) -> None:
    waits = [op for op in module.walk() if isinstance(op, CpAsyncWaitOp)]
    in_loop = waits[0]
    if slip == "short-wait":  # one more group left in flight: tile kt may not have landed
        in_loop.properties["pending"] = IntegerAttr(in_loop.groups + 1, i64)
    elif slip == "no-barrier":  # the other threads' copies are not waited for
        barrier = in_loop.next_op
        assert isinstance(barrier, gpu.BarrierOp)
        barrier.detach()
        barrier.erase()
    else:  # "stage": the next tile goes into stage kt + 1 (still being read) not kt + 2
        issue = next(op for op in module.walk() if isinstance(op, CpAsyncOp) and
                     isinstance(op.dest_indices[0].owner, arith.RemUIOp))  # fmt: skip
        following = issue.dest_indices[0].owner.lhs.owner
        assert isinstance(following, arith.AddiOp)
        one = arith.ConstantOp.from_int_and_width(1, following.rhs.type)
        following.parent_block().insert_op_before(one, following)
        following.operands[1] = one.result


@pytest.mark.parametrize("backend", ["cuda-sim", "cuda-host"])
@pytest.mark.parametrize("slip", ["short-wait", "no-barrier", "stage"])
def test_a_planted_pipeline_slip_fails_on_both_host_paths(backend: str, slip: str) -> None:
    """The host paths prove the pipeline only if its slips fail there: lockstep names the
    race, cuda-host computes a wrong product (the control, unplanted, matches)."""
    from irkit.runtime.lockstep import LockstepError

    graph = parse_source(GEMM.format(t="f16", m=64, n=64, k=128), "g.graph", ".graph")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 128)).astype(np.float16)
    b = rng.standard_normal((128, 64)).astype(np.float16)
    expected = a.astype(np.float32) @ b.astype(np.float32)
    chosen = BACKENDS[backend]()

    def right(plant: bool) -> bool:
        module = apply_passes(graph.clone(), parse_passes(_pipeline("block-k=16 fill-sms=false")))
        if plant:
            _plant(module, slip)
        try:
            got = chosen.compile(chosen.lower(module))(a, b)[0]
        except LockstepError as e:
            assert "race on @k0_matmul_" in str(e), e
            return False
        return bool(np.allclose(np.asarray(got, np.float32), expected, rtol=2e-2, atol=2e-1))

    assert right(plant=False)
    assert not right(plant=True)


@pytest.mark.parametrize("row_length", [16, 32, 64, 128, 256])
def test_the_swizzle_gives_eight_rows_eight_bank_groups(row_length: int) -> None:
    """What the swizzle is for, counted: an ldmatrix phase reads one 16-byte chunk from each
    of 8 consecutive rows (from a multiple of 8), and a cp.async phase writes 8 consecutive
    chunks; each falls in 8 different bank groups (16 bytes: 4 of the 32 banks) where the
    chunks are swizzled, and in as few as 1 where the rows are neither swizzled nor padded.
    (Rows of 8 elements, one chunk, have no other chunk to trade places with.)"""
    from irkit.dialects.warp_async import swizzle_chunk

    chunks = row_length // 8

    def group(row: int, chunk: int, swizzled: bool) -> int:
        physical = swizzle_chunk(row, chunk, chunks) if swizzled else chunk
        return (row * chunks + physical) % 8

    for swizzled in (True, False):
        reads = [
            {group(r0 + r, c, swizzled) for r in range(8)}
            for r0 in range(0, 64, 8)
            for c in range(chunks)
        ]
        writes = [
            {group((e0 + e) // chunks, (e0 + e) % chunks, swizzled) for e in range(8)}
            for e0 in range(0, 64 * chunks, 8)
        ]
        assert all(len(g) == 8 for g in writes)  # consecutive chunks: conflict-free either way
        assert all(len(g) == 8 for g in reads) == swizzled or chunks == 1
    assert {swizzle_chunk(r, c, chunks) for r in range(8) for c in range(chunks)} == set(
        range(chunks)
    )


@pytest.mark.parametrize("backend", ["cuda-sim", "cuda-host"])
def test_an_ldmatrix_that_forgets_the_swizzle_fails_on_both_host_paths(backend: str) -> None:
    """The copies swizzle, the reads do not: a wrong product on both host paths (the
    control, every op swizzled, matches)."""
    from irkit.dialects.warp import LdmatrixX4Op

    graph = parse_source(GEMM.format(t="bf16", m=64, n=64, k=64), "g.graph", ".graph")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64)).astype(np.float32)
    b = rng.standard_normal((64, 64)).astype(np.float32)
    import ml_dtypes

    a16, b16 = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    expected = a16.astype(np.float32) @ b16.astype(np.float32)
    chosen = BACKENDS[backend]()

    def right(plant: bool) -> bool:
        module = apply_passes(graph.clone(), parse_passes(_pipeline("block-k=32 fill-sms=false")))
        loads = [op for op in module.walk() if isinstance(op, LdmatrixX4Op)]
        assert loads and all(op.swizzled is not None for op in loads)
        if plant:
            del loads[0].properties["swizzled"]
        got = chosen.compile(chosen.lower(module))(a16, b16)[0]
        return bool(np.allclose(np.asarray(got, np.float32), expected, rtol=3e-2, atol=3e-1))

    assert right(plant=False)
    assert not right(plant=True)
