"""TMA on mbarriers for `gpu-tile-matmul{wgmma=true tma=true}` (sm_90a) without a GPU: the
kernels agree with the reference on both host paths (cuda-host lands each box when a
thread waits on its barrier; lockstep counts a box as a write when issued and lands it at
the wait that completes its phase) at ragged shapes (boxes past the edge fill zeros),
every stage count, split-K, batches and every example in f16 and bf16; NVRTC builds
UTMALDG and the mbarrier's SYNCS ops with no spills; and each planted slip (a wait
dropped, the bytes announced short, the wrong parity, the k tile's barrier dropped, a box
one strip off) fails on both host paths. With `warp-specialize` (a producer warpgroup and
consumers handing stages over by full and empty mbarriers): the same on cuda-host, whose
fibers interleave at each wait (lockstep, which runs divergent branches one after another,
says it cannot), setmaxnreg in the SASS, and a dropped handover caught. The IR's shape:
tests/filecheck/passes/gpu-tile-matmul-tma.graph."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import arith, gpu, scf
from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.utils.exceptions import VerifyException

import irkit
from irkit.codegen.cuda import gpu_kernels, kernel_source
from irkit.codegen.nvrtc import compile_cuda
from irkit.dialects.warp_async import CpAsyncOp, WgmmaOp, WgmmaWaitOp
from irkit.dialects.warp_tma import (
    MbarrierArriveExpectTxOp,
    MbarrierArriveOp,
    MbarrierWaitOp,
    SetMaxNRegOp,
    TmaLoadOp,
    tensor_maps,
)
from irkit.errors import IrkitError
from irkit.frontend import parse_source
from irkit.passes.gpu_tile_tma import consumer_registers
from irkit.pipelines import apply_passes, parse_passes, pipeline_steps
from irkit.runtime import BACKENDS
from irkit.runtime.check import check
from tests.conftest import EXAMPLES, SMALL

HOST_AND_GPU = ["cuda-sim", "cuda-host", pytest.param("cuda", marks=pytest.mark.gpu)]
GEMM = "model g\ninput a : {t}[{m}, {k}]\ninput b : {t}[{k}, {n}]\noutput c = matmul(a, b)\n"


def _pipeline(options: str = "") -> str:
    """default-cuda with wgmma and TMA on (and `options`) for gpu-tile-matmul."""
    spec = f"gpu-tile-matmul{{wgmma=true tma=true {options}}}".replace(" }", "}")
    steps = [s.spec for s in pipeline_steps("default-cuda")]
    return ",".join(spec if s.startswith("gpu-tile-matmul") else s for s in steps)


def _checked(text_or_module, pipeline: str, backend: str, seed: int = 3):
    graph = (
        parse_source(text_or_module, "g.graph", ".graph")
        if isinstance(text_or_module, str)
        else text_or_module
    )
    exe = irkit.compile(graph, pipeline, backend)
    checks, _ = check(exe, graph, seed=seed)
    assert all(c.passed for c in checks), (backend, [c.describe() for c in checks])
    return exe


LAYOUTS = {"swizzled": "", "strips": "swizzle=false"}
"""The TMA tiles: 128-byte rows swizzled (the default, a box per 64 columns) and strips of
core matrices (`swizzle=false`, a box per 8 columns)."""


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", HOST_AND_GPU)
@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize(
    ("dtype", "dims"), [("f16", (100, 72, 40)), ("bf16", (130, 136, 96)), ("f16", (64, 256, 16))]
)
def test_tma_matches_the_reference(
    layout: str, backend: str, stages: int, dtype: str, dims
) -> None:
    """Ragged M and K (boxes past the edge land zeros), N a multiple of 8, fewer k tiles
    than stages; the tiles filled by TMA alone (no cp.async), read by wgmma in `layout`."""
    if backend == "cuda":
        from tests.test_cuda_path import needs

        needs(backend)
    m, n, k = dims
    options = f"{LAYOUTS[layout]} stages={stages} fill-sms=false"
    exe = _checked(GEMM.format(t=dtype, m=m, n=n, k=k), _pipeline(options), backend)
    ops = list(exe.module.walk())
    assert {op.tiles for op in ops if isinstance(op, WgmmaOp)} == {layout}
    assert any(isinstance(op, TmaLoadOp) for op in ops)
    assert not any(isinstance(op, CpAsyncOp) for op in ops)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", ["cuda-sim", "cuda-host"])
def test_split_k_and_batches_keep_tma(layout: str, backend: str) -> None:
    """Split-K (each range's boxes start at its own k) and a batch matmul with a broadcast
    operand (4-d and 3-d tensor maps, the batch coordinates' boxes of 1)."""
    text = GEMM.format(t="f16", m=64, n=64, k=512)
    exe = _checked(text, _pipeline(f"{LAYOUTS[layout]} split-k=2"), backend)
    assert len(exe.kernels) == 2 and any(isinstance(op, TmaLoadOp) for op in exe.module.walk())
    batch = (
        "model g\ninput a : bf16[3, 2, 70, 64]\ninput b : bf16[2, 64, 64]\n"
        "output c = batch_matmul(a, b)\n"
    )
    exe = _checked(batch, _pipeline(f"{LAYOUTS[layout]} fill-sms=false"), backend)
    (fn,) = [f for f in gpu_kernels(exe.module) if any(isinstance(o, TmaLoadOp) for o in f.walk())]
    assert sorted(len(m.box) for m in tensor_maps(fn)) == [3, 4]
    assert {m.swizzle for m in tensor_maps(fn)} == {128 if layout == "swizzled" else 0}


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_runs_on_tma_in_half_precision(example: Path, dtype: str) -> None:
    """Each example converted to f16 and bf16, under default-cuda with wgmma and TMA, on
    both host paths: every matmul's tiles filled by TMA (fused attention's K and V ring is
    cp.async: its kernels aside), within the type's tolerance."""
    from tests.test_precision import HAS_MATMUL
    from tests.test_wgmma import _attention

    module = irkit.load(example, SMALL[example.stem], dtype=dtype)
    for backend in ("cuda-host", "cuda-sim"):
        exe = _checked(module, _pipeline(), backend, seed=1)
        ops = list(exe.module.walk())
        assert any(isinstance(op, TmaLoadOp) for op in ops) == (example.stem in HAS_MATMUL)
        matmuls = [fn for fn in gpu_kernels(exe.module) if not _attention(fn)]
        assert not any(isinstance(op, CpAsyncOp) for fn in matmuls for op in fn.walk())


@pytest.mark.parametrize(("layout", "boxes"), [("swizzled", 3), ("strips", 20)])
def test_nvrtc_builds_utmaldg_and_mbarriers_without_spills(layout: str, boxes: int, tmp_path: Path) -> None:  # fmt: skip
    """A 1024^3 bf16 gemm, 128 x 128 blocks: UTMALDG.2D for the boxes (`boxes` a stage:
    swizzled, 64 of k deep, one of A and two of B; strips, 32 deep, 4 of A and 16 of B), the
    mbarrier's init, arrive with its transaction count and parity wait (SYNCS), HGMMA
    reading the tiles, no LDGSTS (no thread copies), no local memory."""
    from tests.test_sass import _disassemble

    graph = parse_source(GEMM.format(t="bf16", m=1024, n=1024, k=1024), "g.graph", ".graph")
    options = f"{LAYOUTS[layout]} fill-sms=false split-k=1"
    module = apply_passes(graph, parse_passes(_pipeline(options)))
    (fn,) = gpu_kernels(module)
    compiled = compile_cuda(kernel_source(module, fn), fn.sym_name.data, "sm_90")
    assert compiled.arch == "sm_90a"
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(compiled.cubin)
    text = _disassemble(cubin)
    ops = Counter(re.findall(r"/\*[0-9a-f]{4}\*/\s+(?!@!PT)(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", text))  # fmt: skip
    assert ops["UTMALDG.2D"] % boxes == 0 and ops["UTMALDG.2D"] >= boxes, ops
    assert ops["SYNCS.ARRIVE.TRANS64"] >= 1 and ops["SYNCS.EXCH.64"] >= 1, ops
    assert any(op.startswith("SYNCS.PHASECHK") for op in ops), ops
    assert "HGMMA.64x128x16.F32.BF16 " in text, ops
    assert not any(op.startswith(("LDL", "STL", "LDGSTS", "HMMA")) for op in ops), ops
    r = compiled.resources
    assert r.spill_stores == 0 and r.spill_loads == 0 and r.stack_bytes == 0, r


def _plant(module, slip: str) -> None:
    ops = list(module.walk())
    boxes = [op for op in ops if isinstance(op, TmaLoadOp)]
    if slip == "wait":  # the k tile's mbarrier wait dropped
        wait = next(op for op in ops if isinstance(op, MbarrierWaitOp))
        wait.detach()
        wait.erase()
    elif slip == "bytes":  # one stage announces 16 bytes more than its boxes bring
        arrive = next(op for op in ops if isinstance(op, MbarrierArriveExpectTxOp))
        arrive.properties["bytes"] = IntegerAttr(arrive.transaction + 16, i64)
    elif slip == "parity":  # the wait's parity taken from the stage number instead
        wait = next(op for op in ops if isinstance(op, MbarrierWaitOp))
        wait.operands[2] = wait.operands[1]
    elif slip == "barrier":  # the barrier that frees the stage to refill dropped
        loop = next(op for op in ops if isinstance(op, scf.ForOp))
        barrier = next(op for op in loop.body.block.ops if isinstance(op, gpu.BarrierOp))
        barrier.detach()
        barrier.erase()
    elif slip == "box":  # the loop's first box of A reads k tile 0 again (the prologue's k)
        of_a = [op for op in boxes if op.source is boxes[0].source]  # prologue's, then loop's
        first, again = of_a[0], of_a[len(of_a) // 2]
        k = len(again.dest_indices) + 3  # dest, its indices, the source, the row: the column
        again.operands[k] = first.operands[k]
    else:  # "swizzle": B's box lands unswizzled, which wgmma reads swizzled
        del [op for op in boxes if op.swizzle_bytes][-1].properties["swizzle"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", ["cuda-sim", "cuda-host"])
@pytest.mark.parametrize("slip", ["wait", "bytes", "parity", "barrier", "box", "swizzle"])
def test_a_planted_tma_slip_fails_on_both_host_paths(layout: str, backend: str, slip: str) -> None:  # fmt: skip
    """The control matches; each slip gives a wrong product or the host path's named error
    (a hang, a copy never waited for, a race, an arrival too many)."""
    from irkit.runtime.lockstep import LockstepError

    if slip == "swizzle" and layout == "strips":
        pytest.skip("strips are not swizzled")
    graph = parse_source(GEMM.format(t="f16", m=64, n=64, k=256), "g.graph", ".graph")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 256)).astype(np.float16)
    b = rng.standard_normal((256, 64)).astype(np.float16)
    expected = a.astype(np.float32) @ b.astype(np.float32)
    chosen = BACKENDS[backend]()
    pipeline = _pipeline(f"{LAYOUTS[layout]} fill-sms=false stages=2 block-k=64")  # 4 k tiles

    def right(plant: bool) -> bool:
        module = apply_passes(graph.clone(), parse_passes(pipeline))
        if plant:
            _plant(module, slip)
        try:
            got = chosen.compile(chosen.lower(module))(a, b)[0]
        except (LockstepError, IrkitError) as e:
            assert re.search(r"mbarrier|TMA|race|never", str(e)), e
            return False
        return bool(np.allclose(np.asarray(got, np.float32), expected, rtol=2e-2, atol=3e-1))

    assert right(plant=False)
    assert not right(plant=True)


def test_tma_needs_wgmma() -> None:
    """TMA fills wgmma's tiles; asked for alone it is refused by name."""
    graph = parse_source(GEMM.format(t="f16", m=64, n=64, k=64), "g.graph", ".graph")
    pipeline = "fuse-kernels,lower-graph-to-loops,gpu-tile-matmul{tma=true},map-to-gpu"
    with pytest.raises(IrkitError, match="tma.*wgmma=true"):
        apply_passes(graph, parse_passes(pipeline))


def test_the_box_verifier_names_what_is_wrong() -> None:
    """A box whose rows are not whole 16-byte units, or larger than its destination, does
    not verify."""
    graph = parse_source(GEMM.format(t="f16", m=64, n=64, k=64), "g.graph", ".graph")
    module = apply_passes(graph, parse_passes(_pipeline("fill-sms=false")))
    box = next(op for op in module.walk() if isinstance(op, TmaLoadOp))
    from xdsl.dialects.builtin import DenseArrayBase

    box.properties["box"] = DenseArrayBase.from_list(i64, [64, 4])
    with pytest.raises(VerifyException, match="16 bytes"):
        box.verify()
    box.properties["box"] = DenseArrayBase.from_list(i64, [256, 256])
    with pytest.raises(VerifyException, match="larger than its destination"):
        box.verify()


# --- warp specialization (warp-specialize=true): a producer warpgroup, consumer warpgroups --


@pytest.mark.parametrize("backend", ["cuda-host", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize(
    ("dtype", "dims"),
    [("f16", (100, 72, 40)), ("bf16", (130, 136, 96)), ("f16", (64, 256, 16)), ("bf16", (200, 64, 304))],
)  # fmt: skip
def test_warp_specialized_tma_matches_the_reference(backend, stages, dtype, dims) -> None:
    """The producer's ring runs ahead of the consumers by the stages (k tiles past the
    stages make it wait on the empty barriers); ragged M and K; cuda-host interleaves the
    warpgroups' threads at each mbarrier wait."""
    if backend == "cuda":
        from tests.test_cuda_path import needs

        needs(backend)
    m, n, k = dims
    pipeline = _pipeline(f"warp-specialize=true stages={stages} fill-sms=false")
    exe = _checked(GEMM.format(t=dtype, m=m, n=n, k=k), pipeline, backend)
    ops = list(exe.module.walk())
    counts = Counter(type(op).__name__ for op in ops)
    # the consumers hand back the previous k tile's stage in the loop; the last k tile, peeled
    # off it (no wgmma group in flight past the loop), its predecessor's and its own
    arrivals = 3 if k > 64 else 1  # one k tile (64 deep): its own stage only
    assert counts["SetMaxNRegOp"] == 2 and counts["MbarrierArriveOp"] == arrivals, counts
    assert not any(isinstance(op, gpu.BarrierOp) for op in ops if isinstance(op.parent_op(), scf.ForOp))  # fmt: skip


def test_lockstep_names_the_handshake_it_cannot_interleave() -> None:
    """Lockstep runs the producer's branch before the consumers': a ring with more k tiles
    than stages makes the producer wait on consumers that have not run, and lockstep says
    so (where the k tiles fit the stages, it runs the kernel and checks it)."""
    from irkit.runtime.lockstep import LockstepError

    text = GEMM.format(t="f16", m=64, n=64, k=256)
    with pytest.raises(LockstepError, match="warp-specialized kernel .* needs cuda-host"):
        _checked(text, _pipeline("warp-specialize=true stages=2 block-k=32"), "cuda-sim")
    _checked(text, _pipeline("warp-specialize=true stages=8 block-k=32"), "cuda-sim")


SPECIALIZED = {"specialized": "warp-specialize=true", "persistent": "warp-specialize=true persistent=true sms=3"}  # fmt: skip
"""Warp specialization, and over a persistent grid (3 blocks: most examples' matmuls take
several rounds of tiles, the last round partly guarded off)."""


@pytest.mark.parametrize("variant", SPECIALIZED)
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_runs_warp_specialized_on_cuda_host(example: Path, dtype: str, variant: str) -> None:  # fmt: skip
    from tests.test_precision import HAS_MATMUL

    module = irkit.load(example, SMALL[example.stem], dtype=dtype)
    exe = _checked(module, _pipeline(SPECIALIZED[variant]), "cuda-host", seed=1)
    ops = list(exe.module.walk())
    assert any(isinstance(op, SetMaxNRegOp) for op in ops) == (example.stem in HAS_MATMUL)


def test_nvrtc_builds_the_specialized_kernel_with_setmaxnreg(tmp_path: Path) -> None:
    """1024^3 bf16, 128 x 128 blocks: 384 threads at 168 registers (ptxas sizes the pool
    from __launch_bounds__(384, 1)), the producer handing back to 40 and the consumers
    taking 232 (USETMAXREG), one block barrier (after the mbarriers' init) and none in the
    loop, no spills."""
    from tests.test_sass import _disassemble

    graph = parse_source(GEMM.format(t="bf16", m=1024, n=1024, k=1024), "g.graph", ".graph")
    module = apply_passes(graph, parse_passes(_pipeline("warp-specialize=true fill-sms=false split-k=1")))  # fmt: skip
    (fn,) = gpu_kernels(module)
    compiled = compile_cuda(kernel_source(module, fn), fn.sym_name.data, "sm_90")
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(compiled.cubin)
    text = _disassemble(cubin)
    alloc = re.findall(r"USETMAXREG\.TRY_ALLOC\.CTAPOOL \w+, (0x[0-9a-f]+)", text)
    dealloc = re.findall(r"USETMAXREG\.DEALLOC\.CTAPOOL (0x[0-9a-f]+)", text)
    assert [int(v, 16) for v in alloc] == [232] and [int(v, 16) for v in dealloc] == [40]
    assert consumer_registers(384, 2) == 232
    assert text.count("BAR.SYNC") == 1 and "UTMALDG.2D" in text
    # no wgmma serialized: a wgmma group left in flight across the next k tile's mbarrier
    # wait had been (ptxas's C7514) while the wait was a C loop around one try_wait
    assert "C7514" not in compiled.log, compiled.log
    r = compiled.resources
    assert r.registers == 168 and r.spill_stores == 0 and r.stack_bytes == 0, r


@pytest.mark.parametrize("variant", SPECIALIZED)
def test_no_wgmma_group_is_in_flight_past_the_consumers_loop(variant: str, tmp_path: Path) -> None:
    """`wgmma-depth=1` keeps one group in flight from k tile to k tile (the loop waits with
    `WARPGROUP.DEPBAR.LE gsb0, 0x1`), and the last k tile, peeled off the loop, waits for
    its own before anything reads the accumulators: after the last HGMMA, the wait for 0
    comes before the first F2FP (the epilogue's conversion). With the wait after the loop
    instead, ptxas put the F2FP above it, and on an H200 91% of a 4096^3 gemm's outputs
    were wrong, differently each run, while every small test passed."""
    from tests.test_sass import _disassemble

    graph = parse_source(GEMM.format(t="f16", m=1024, n=1024, k=1024), "g.graph", ".graph")
    options = f"{SPECIALIZED[variant]} fill-sms=false split-k=1"
    module = apply_passes(graph, parse_passes(_pipeline(options)))
    (fn,) = gpu_kernels(module)
    compiled = compile_cuda(kernel_source(module, fn), fn.sym_name.data, "sm_90")
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(compiled.cubin)
    ops = re.findall(
        r"/\*[0-9a-f]{4}\*/\s+((?:@!?U?P\w+\s+)?[A-Z][A-Z0-9_.]+[^;]*);", _disassemble(cubin)
    )
    assert any("DEPBAR.LE gsb0, 0x1" in op for op in ops), "no group kept in flight in the loop"
    last = max(i for i, op in enumerate(ops) if "HGMMA" in op)
    after = [op for op in ops[last:] if "F2FP" in op or "DEPBAR.LE gsb0, 0x0" in op]
    assert after and "DEPBAR" in after[0], after[:3]


def _plant_specialized(module, slip: str) -> None:
    ops = list(module.walk())
    if slip == "arrive":  # the consumers never say a stage is free
        drop = next(op for op in ops if isinstance(op, MbarrierArriveOp))
    elif slip == "full":  # the consumers read a stage without waiting for its boxes
        drop = [op for op in ops if isinstance(op, MbarrierWaitOp)][1]
    else:  # "empty": the producer refills a stage without waiting for it to be free
        drop = [op for op in ops if isinstance(op, MbarrierWaitOp)][0]
    drop.detach()
    drop.erase()


@pytest.mark.parametrize("slip", ["arrive", "full", "empty"])
def test_a_planted_handover_slip_fails_on_cuda_host(slip: str) -> None:
    """The control matches; each slip is a hang, a copy never waited for, or a stage
    overwritten before it was read (a wrong product)."""
    pipeline = _pipeline("warp-specialize=true fill-sms=false stages=2 block-k=32")
    assert host_matches(pipeline, (64, 64, 256), None, r"mbarrier|TMA")
    plant = lambda module: _plant_specialized(module, slip)  # noqa: E731
    assert not host_matches(pipeline, (64, 64, 256), plant, r"mbarrier|TMA")


def host_matches(pipeline: str, dims: tuple[int, int, int], plant, named: str) -> bool:
    """Whether an f16 gemm of `dims` (M, N, K) under `pipeline`, with `plant` applied to
    the pipeline's output (None: as built), matches on cuda-host; a launch that fails must
    name its fault in one line matching `named` (a hang, a copy in flight...)."""
    m, n, k = dims
    graph = parse_source(GEMM.format(t="f16", m=m, n=n, k=k), "g.graph", ".graph")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    expected = a.astype(np.float32) @ b.astype(np.float32)
    host = BACKENDS["cuda-host"]()
    module = apply_passes(graph, parse_passes(pipeline))
    if plant is not None:
        plant(module)
    try:
        got = host.compile(host.lower(module))(a, b)[0]
    except IrkitError as e:
        assert re.search(named, str(e)) and "\n" not in str(e), e
        return False
    return bool(np.allclose(np.asarray(got, np.float32), expected, rtol=2e-2, atol=3e-1))


# --- persistent=true: at most `sms` blocks, each looping over C tiles ----------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", ["cuda-host", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize(
    ("text", "sms", "rounds"),
    [
        (GEMM.format(t="f16", m=300, n=200, k=200), 3, 2),  # 6 tiles: two whole rounds
        (GEMM.format(t="bf16", m=300, n=200, k=200), 4, 2),  # the second round half empty
        ("model g\ninput a : bf16[3, 2, 70, 64]\ninput b : bf16[2, 64, 64]\n"
         "output c = batch_matmul(a, b)\n", 5, 2),  # 6 entries' tiles: a second round of 1
    ],
)  # fmt: skip
def test_persistent_blocks_loop_over_every_tile(layout, backend, text, sms, rounds) -> None:
    """The grid is min(tiles, sms); each block's rounds take tiles bid, bid + grid, ...,
    the ring's position running on across them; every tile computed once and stored."""
    if backend == "cuda":
        from tests.test_cuda_path import needs

        needs(backend)
    options = f"{LAYOUTS[layout]} warp-specialize=true persistent=true sms={sms} fill-sms=false"
    exe = _checked(text, _pipeline(options), backend)
    (fn,) = [f for f in gpu_kernels(exe.module) if any(isinstance(o, TmaLoadOp) for o in f.walk())]
    from irkit.loops import launch_of

    launch = launch_of(fn)
    assert launch is not None and launch["grid"][0] == sms
    loops = [op for op in fn.walk() if isinstance(op, scf.ForOp)]
    trips = {op.ub.owner.value.value.data for op in loops if isinstance(op.ub.owner, arith.ConstantOp)}  # fmt: skip
    assert rounds in trips


def test_persistent_needs_warp_specialization() -> None:
    graph = parse_source(GEMM.format(t="f16", m=64, n=64, k=64), "g.graph", ".graph")
    with pytest.raises(IrkitError, match="persistent.*warp-specialize=true"):
        apply_passes(graph, parse_passes(_pipeline("persistent=true")))


@pytest.mark.parametrize("backend", ["cuda-sim", "cuda-host"])
def test_a_row_padded_past_k_reads_zeros_through_the_map(backend: str) -> None:
    """A 7 x 7 convolution over 3 channels is a matmul with K = 147 whose im2col rows are
    padded to 152 (16-byte aligned): the tensor map's extent is the matmul's K, its stride
    the padded row's, so the padding (never written: NaN on the host paths) is read as zero
    (resnet's stem gave NaN on cuda-host until the maps took the matmul's extents)."""
    text = (
        "model c\ninput x : f16[1, 3, 16, 16]\nparam w : f16[32, 3, 7, 7]\n"
        "output y = conv2d(x, w, strides=[2, 2], padding=[3, 3, 3, 3])\n"
    )
    exe = _checked(text, _pipeline("fill-sms=false"), backend)
    boxes = [op for op in exe.module.walk() if isinstance(op, TmaLoadOp)]
    padded = [op for op in boxes if op.tensor_extent != tuple(op.source.type.get_shape())]
    assert padded and {op.tensor_extent[-1] for op in padded} == {147}


def _host(early: bool):
    """cuda-host landing TMA boxes at the wait on their barrier (the latest moment), or as
    they are issued (`IRKIT_TMA_EARLY`, the earliest)."""
    from irkit.runtime.cuda_host import CudaHostBackend

    return CudaHostBackend(defines=("IRKIT_TMA_EARLY",) if early else ())


@pytest.mark.parametrize("depth", [0, 1])
@pytest.mark.parametrize("early", [False, True], ids=["late", "early"])
def test_both_landing_orders_and_wgmma_depths_match_the_reference(depth: int, early: bool) -> None:
    """Warp-specialized, persistent (two rounds), 6 k tiles over 2 stages: with the wgmma
    group of a k tile left in flight into the next (`wgmma-depth=1`, the default) or not,
    and with TMA boxes landing as late or as early as a GPU may land them."""
    graph = parse_source(GEMM.format(t="f16", m=200, n=128, k=384), "g.graph", ".graph")
    options = (
        f"warp-specialize=true persistent=true sms=2 stages=2 wgmma-depth={depth} fill-sms=false"
    )
    host = _host(early)
    exe = host.compile(host.lower(apply_passes(graph.clone(), parse_passes(_pipeline(options)))))
    checks, _ = check(exe, graph, seed=2)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    waits = {op.groups for op in exe.module.walk() if isinstance(op, WgmmaWaitOp)}
    assert waits == ({1, 0} if depth else {0})


@pytest.mark.parametrize("early", [False, True], ids=["late", "early"])
def test_a_stage_handed_back_early_fails_on_cuda_host(early: bool) -> None:
    """With wgmma-depth=1 a consumer hands back k tile kt - 1's stage in iteration kt; one
    that hands back kt's own (its wgmma ops still in flight) lets the producer refill it
    under them: a wrong product on cuda-host whether boxes land as they are issued or at
    the wait on their barrier (a thread that runs ahead lands the refill while another's
    wgmma, computed at its own wait, has still to read the stage)."""
    graph = parse_source(GEMM.format(t="f16", m=64, n=64, k=512), "g.graph", ".graph")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 512)).astype(np.float16)
    b = rng.standard_normal((512, 64)).astype(np.float16)
    expected = a.astype(np.float32) @ b.astype(np.float32)
    pipeline = _pipeline("warp-specialize=true fill-sms=false stages=2")

    def right(plant: bool, early: bool) -> bool:
        module = apply_passes(graph.clone(), parse_passes(pipeline))
        if plant:  # every k tile hands back its own stage (none after the loop)
            loop = [op for op in module.walk() if isinstance(op, scf.ForOp)][-1]  # the consumers'
            wait = next(op for op in loop.body.block.ops if isinstance(op, MbarrierWaitOp))
            guard = next(op for op in loop.body.block.ops if isinstance(op, scf.IfOp))
            arrive = next(op for op in guard.walk() if isinstance(op, MbarrierArriveOp))
            loop.body.block.insert_op_after(MbarrierArriveOp(arrive.barrier, wait.index), guard)
            guard.detach()
            guard.erase()
            block = loop.parent_block()
            assert block is not None
            later = list(block.ops)[list(block.ops).index(loop) :]
            after = next(op for op in later if isinstance(op, MbarrierArriveOp))
            after.detach()
            after.erase()
        host = _host(early)
        got = host.compile(host.lower(module))(a, b)[0]
        return bool(np.allclose(np.asarray(got, np.float32), expected, rtol=2e-2, atol=3e-1))

    assert right(False, early)
    assert not right(True, early)


@pytest.mark.parametrize("backend", ["cuda-sim", "cuda-host"])
@pytest.mark.parametrize(
    "options",
    [
        "group-m=2",
        "group-m=3 block-m=64 block-n=64",
        "tensor-cores=false group-m=4 block-m=64 block-n=64",
    ],
)
def test_grouped_tile_order_computes_every_tile_once(backend: str, options: str) -> None:
    """`group-m`: the blocks take the C tiles in groups of tile rows (the last group
    shorter), on tensor cores and SIMT alike; every output computed once (lockstep names
    two blocks writing one element)."""
    steps = [s.spec for s in pipeline_steps("default-cuda")]
    tile = f"gpu-tile-matmul{{{options} fill-sms=false}}"
    pipeline = ",".join(tile if s.startswith("gpu-tile-matmul") else s for s in steps)
    for t in ("f16", "f32"):
        _checked(GEMM.format(t=t, m=200, n=264, k=32), pipeline, backend)


def test_the_tensor_map_call_takes_the_arguments_irkit_builds() -> None:
    """What the device runtime passes `cuTensorMapEncodeTiled` (`tensor_map_args`) gets past
    cuda-python's argument checks: without a driver the call then fails for want of one,
    never for an argument's type (plain ints for the box had been refused: a TypeError the
    first lent GPU would have met)."""
    from cuda.bindings import driver

    from irkit.codegen.cuda_tma import map_layout
    from irkit.runtime.cuda import tensor_map_args

    graph = parse_source(GEMM.format(t="bf16", m=200, n=128, k=152), "g.graph", ".graph")
    module = apply_passes(graph, parse_passes(_pipeline("fill-sms=false")))
    (fn,) = gpu_kernels(module)
    for m in tensor_maps(fn):
        args = tensor_map_args(driver, map_layout(fn, m), 1 << 20, "bfloat16")
        try:
            driver.cuTensorMapEncodeTiled(*args)
        except (TypeError, ValueError, OverflowError) as e:
            raise AssertionError(f"an argument refused: {e}") from None
        except Exception:  # noqa: BLE001 - no driver library here: past the argument checks
            pass


def test_a_matmul_tma_cannot_fill_keeps_its_own_depth() -> None:
    """K = 12 (rows of 24 bytes: no TMA, no cp.async): under `wgmma=true tma=true` the kernel
    is the register-staged mma.sync one at its own depth, not TMA's 64 deep (which had given
    255 registers and 1222 spill stores in resnet_wide's stem, found by the real-model
    suite)."""
    from irkit.runtime.gpu import build_kernels

    graph = parse_source(GEMM.format(t="bf16", m=256, n=48, k=12), "g.graph", ".graph")
    module = apply_passes(graph, parse_passes(_pipeline("fill-sms=false")))
    assert not any(isinstance(op, TmaLoadOp | WgmmaOp) for op in module.walk())
    (kernel,) = build_kernels(module, "sm_90")
    assert kernel.compiled is not None and kernel.compiled.resources.spill_stores == 0
