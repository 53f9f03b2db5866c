"""Hopper's warpgroup MMA (`gpu-tile-matmul{wgmma=true}`) without a GPU: NVRTC builds it
for sm_90a (HGMMA in the SASS, no spills); both host paths run it against the reference at
ragged shapes and every stage count, and every example in f16 and bf16 (lockstep reads the
core-matrix tiles warpgroup by warpgroup and holds the results until a wait; cuda-host
queues each thread's wgmma ops and computes them at the wait); a planted slip fails on both:
a tile's core matrix one off along k, two accumulators swapped, the wait dropped. The IR's
shape: tests/filecheck/passes/gpu-tile-matmul-wgmma.graph."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import arith, scf

import irkit
from irkit.codegen.cuda import gpu_kernels, kernel_source
from irkit.codegen.nvrtc import compile_cuda
from irkit.dialects.warp_async import WgmmaOp, WgmmaWaitOp, core_a, core_b, wgmma_d_coordinates
from irkit.frontend import parse_source
from irkit.pipelines import apply_passes, parse_passes, pipeline_steps
from irkit.runtime import BACKENDS
from irkit.runtime.check import check
from tests.conftest import EXAMPLES, SMALL

GEMM = "model g\ninput a : {t}[{m}, {k}]\ninput b : {t}[{k}, {n}]\noutput c = matmul(a, b)\n"


def _pipeline(options: str = "") -> str:
    """default-cuda with wgmma on (and `options`) for gpu-tile-matmul."""
    spec = f"gpu-tile-matmul{{wgmma=true {options}}}".replace(" }", "}")
    steps = [s.spec for s in pipeline_steps("default-cuda")]
    return ",".join(spec if s.startswith("gpu-tile-matmul") else s for s in steps)


def test_the_accumulator_layout_covers_the_tile_once() -> None:
    """The 128 threads' N/2 accumulators (`wgmma_d_coordinates`) are the 64 x N tile, each
    element once; warp w holds rows 16w .. 16w + 15; the core-matrix coordinates of A and B
    are one-to-one too."""
    for n in (8, 64, 256):
        seen = Counter(wgmma_d_coordinates(t, i) for t in range(128) for i in range(n // 2))
        assert set(seen.values()) == {1} and len(seen) == 64 * n
        assert all(16 * (t // 32) <= wgmma_d_coordinates(t, 5)[0] < 16 * (t // 32 + 1) for t in range(128))  # fmt: skip
    assert len({core_a(m, k) for m in range(64) for k in range(16)}) == 64 * 16
    assert len({core_b(k, n) for k in range(16) for n in range(32)}) == 16 * 32


@pytest.mark.parametrize("backend", ["cuda-sim", "cuda-host", pytest.param("cuda", marks=pytest.mark.gpu)])  # fmt: skip
@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize(
    ("dtype", "dims"), [("f16", (100, 72, 40)), ("bf16", (130, 136, 96)), ("f16", (64, 256, 16))]
)
def test_wgmma_matches_the_reference(backend: str, stages: int, dtype: str, dims) -> None:
    """Ragged M (rows past the edge read as zero by cp.async and never stored), N a multiple
    of 8 (72: one m64n72k16 a warpgroup), K ragged in its k tiles; one 64 x 256 tile."""
    if backend == "cuda":
        from tests.test_cuda_path import needs

        needs(backend)
    m, n, k = dims
    graph = parse_source(GEMM.format(t=dtype, m=m, n=n, k=k), "g.graph", ".graph")
    exe = irkit.compile(graph, _pipeline(f"stages={stages} fill-sms=false"), backend)
    checks, _ = check(exe, graph, seed=3)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    assert any(isinstance(op, WgmmaOp) for op in exe.module.walk())


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_runs_on_wgmma_in_half_precision(example: Path, dtype: str) -> None:
    """Each example converted to f16 and bf16, under default-cuda with wgmma, on both host
    paths: every matmul (a block of at least 64 rows, a warpgroup's) on wgmma, none on
    mma.sync (fused attention's tensor-core form is mma.sync: its kernels aside), within
    the type's tolerance."""
    from irkit.dialects.warp import MMA_OPS
    from tests.test_precision import HAS_MATMUL

    module = irkit.load(example, SMALL[example.stem], dtype=dtype)
    for backend in ("cuda-host", "cuda-sim"):
        exe = irkit.compile(module, _pipeline(), backend)
        checks, _ = check(exe, module, seed=1)
        assert all(c.passed for c in checks), (backend, [c.describe() for c in checks])
        ops = list(exe.module.walk())
        assert any(isinstance(op, WgmmaOp) for op in ops) == (example.stem in HAS_MATMUL)
        matmuls = [fn for fn in gpu_kernels(exe.module) if not _attention(fn)]
        assert not any(isinstance(op, MMA_OPS) for fn in matmuls for op in fn.walk())


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_nvrtc_builds_hgmma_for_sm_90a_without_spills(dtype: str, tmp_path: Path) -> None:
    """A 1024^3 gemm's kernel: compiled for sm_90a (sm_90 asked: the wgmma makes it
    sm_90a), HGMMA.64x128x16 from shared-memory descriptors (two a k tile of 32: 128 x 128
    blocks, two warpgroups of 64 x 128), B transposed (N-major), the copies LDGSTS, the warpgroup fence and wait, no local memory."""
    from tests.test_sass import _disassemble

    graph = parse_source(GEMM.format(t=dtype, m=1024, n=1024, k=1024), "g.graph", ".graph")
    module = apply_passes(graph, parse_passes(_pipeline("fill-sms=false split-k=1")))
    (fn,) = gpu_kernels(module)
    compiled = compile_cuda(kernel_source(module, fn), fn.sym_name.data, "sm_90")
    assert compiled.arch == "sm_90a"
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(compiled.cubin)
    text = _disassemble(cubin)
    ops = Counter(re.findall(r"/\*[0-9a-f]{4}\*/\s+(?!@!PT)(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", text))  # fmt: skip
    hgmma = "HGMMA.64x128x16.F32" + (".BF16" if dtype == "bf16" else "") + " "
    lines = [line for line in text.splitlines() if hgmma in line]
    assert len(lines) >= 2 and all("gdesc" in line and "tnspB" in line for line in lines), ops
    assert ops["WARPGROUP.ARRIVE"] >= 1 and ops["WARPGROUP.DEPBAR.LE"] >= 1, ops
    assert ops["LDGSTS.E.BYPASS.128"] > 0, ops
    assert not any(op.startswith(("LDL", "STL", "HMMA")) for op in ops), ops
    r = compiled.resources
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.stack_bytes == 0, r


def _plant(module, slip: str) -> None:
    kernel_wgmma = [op for op in module.walk() if isinstance(op, WgmmaOp)]
    if slip == "core":  # the second wgmma reads B's k cores 0 and 1 again, not 2 and 3
        op = kernel_wgmma[1]
        zero = op.b_indices[2]
        op.operands[len(op.a_indices) + 3] = zero  # a, its indices, b, the stage, the k core
    elif slip == "accumulators":  # two of the last wgmma's results swapped on their way out
        loop = next(op for op in module.walk() if isinstance(op, scf.ForOp))
        yield_op = loop.body.block.last_op
        assert isinstance(yield_op, scf.YieldOp)
        first, second = yield_op.operands[0], yield_op.operands[1]
        yield_op.operands[0], yield_op.operands[1] = second, first
    else:  # "wait": the k tile's wgmma wait dropped
        wait = next(op for op in module.walk() if isinstance(op, WgmmaWaitOp))
        wait.detach()
        wait.erase()


@pytest.mark.parametrize("backend", ["cuda-sim", "cuda-host"])
@pytest.mark.parametrize("slip", ["core", "accumulators", "wait"])
def test_a_planted_wgmma_slip_fails_on_both_host_paths(backend: str, slip: str) -> None:
    """The control matches; each slip gives a wrong product or lockstep's named error."""
    from irkit.runtime.lockstep import LockstepError

    graph = parse_source(GEMM.format(t="f16", m=64, n=64, k=64), "g.graph", ".graph")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64)).astype(np.float16)
    b = rng.standard_normal((64, 64)).astype(np.float16)
    expected = a.astype(np.float32) @ b.astype(np.float32)
    chosen = BACKENDS[backend]()

    def right(plant: bool) -> bool:
        module = apply_passes(graph.clone(), parse_passes(_pipeline("fill-sms=false block-k=32")))
        if plant:
            _plant(module, slip)
        try:
            got = chosen.compile(chosen.lower(module))(a, b)[0]
        except LockstepError as e:
            assert "wgmma result before a wait" in str(e), e
            return False
        return bool(np.allclose(np.asarray(got, np.float32), expected, rtol=2e-2, atol=2e-1))

    assert right(plant=False)
    assert not right(plant=True)


def test_the_slips_touch_what_they_claim() -> None:
    """(The core slip's index is the k core of the second wgmma's B origin.)"""
    graph = parse_source(GEMM.format(t="f16", m=64, n=64, k=64), "g.graph", ".graph")
    module = apply_passes(graph, parse_passes(_pipeline("fill-sms=false block-k=32")))
    second = [op for op in module.walk() if isinstance(op, WgmmaOp)][1]
    k_core = second.b_indices[1].owner
    assert isinstance(k_core, arith.ConstantOp) and k_core.value.value.data == 2


def test_wgmma_does_not_need_ldmatrix() -> None:
    """`ldmatrix` is the mma.sync path's fragment load; wgmma reads its own core-matrix
    tiles, filled by the cp.async ring either way (with `ldmatrix=false` its copies had been
    staged into 5-d tiles as if 3-d, and the pass failed)."""
    graph = parse_source(GEMM.format(t="f16", m=128, n=128, k=64), "g.graph", ".graph")
    exe = irkit.compile(graph, _pipeline("ldmatrix=false fill-sms=false"), "cuda-host")
    checks, _ = check(exe, graph, seed=0)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    assert any(isinstance(op, WgmmaOp) for op in exe.module.walk())


def _attention(fn) -> bool:
    """Whether `fn` is a fused attention kernel (launch mapping "attention")."""
    from irkit.loops import LAUNCH_ATTR

    launch = fn.attributes.get(LAUNCH_ATTR)
    return launch is not None and launch.data["mapping"].data == "attention"
