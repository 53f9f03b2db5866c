"""`cuda-host`: the CUDA C that NVRTC compiles, compiled by the host C++ compiler with
irkit's header of CUDA built-ins and run on the CPU (threads of a block as fibers with a
real barrier), checked against the float64 reference. The second check of the GPU path:
lockstep interprets the IR, this runs the text, so a printer slip fails here."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import gpu, scf

import irkit
from irkit.codegen.cuda import CudaPrinter, gpu_kernels, reserved
from irkit.codegen.cuda_host import compile_host, compiler
from irkit.dialects.warp import ShuffleOp
from irkit.errors import IrkitError
from irkit.frontend import parse_source
from irkit.pipelines import apply_passes, parse_passes
from irkit.runtime import lower_for
from irkit.runtime.check import check
from irkit.runtime.cuda_host import CudaHostBackend, guarded
from irkit.runtime.reference import random_inputs
from tests.conftest import SMALL, check_every_subset
from tests.test_cuda_path import _softmax_buffers, gemm_without_store_guard, mapped

pytestmark = pytest.mark.skipif(compiler() is None, reason="no host C++ compiler")


def _passes(exe, module, seed: int = 5) -> bool:
    checks, _ = check(exe, module, seed=seed)
    return bool(checks) and all(c.passed for c in checks)


@pytest.mark.parametrize(
    "spec",
    ["default-cuda", "baseline-cuda", "fuse-kernels,lower-graph-to-loops,map-to-gpu{rows=false}"],
)
def test_every_example_matches_the_reference_on_the_host(example: Path, spec: str) -> None:
    module = irkit.load(example, SMALL[example.stem])
    exe = irkit.compile(module, spec, backend="cuda-host")
    assert exe.backend == "cuda-host" and exe.kernels
    checks, _ = check(exe, module, seed=5)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


@pytest.mark.slow
def test_every_subset_of_default_cuda_matches_the_reference_on_the_host(
    subset_example: Path,
) -> None:
    module = irkit.load(subset_example, SMALL[subset_example.stem])
    assert check_every_subset("default-cuda", module, "cuda-host", seed=4) >= 1


def _host(module):
    """A GPU-mapped module (perhaps with a planted fault) compiled for the host."""
    return CudaHostBackend().compile(module)


def _launch(module, name: str, buffers) -> None:
    _host(module).launcher.launch(name, [guarded(b.shape, b.dtype, b) for b in buffers])


def test_a_missing_barrier_gives_a_wrong_answer() -> None:
    """The barrier between the first two levels of softmax's shared-memory sum dropped (the
    tree, `shuffle=false`): the fibers' alternating order lets a thread read its partner's
    slot before the partner wrote it. (The max tree's barriers would not do: any max keeps
    softmax exact.)"""
    text = "model s\ninput x : f32[32, 100]\noutput y = softmax(x, axis=-1)\n"
    graph = parse_source(text, "s.graph", ".graph")
    spec = "fuse-kernels,lower-graph-to-loops,map-to-gpu{shuffle=false}"
    module = lower_for(apply_passes(graph.clone(), parse_passes(spec)), "cuda-host")
    (fn,) = gpu_kernels(module)
    barriers = [op for op in fn.walk() if isinstance(op, gpu.BarrierOp)]
    first_level = barriers[len(barriers) // 2 + 1]  # the sum tree's half: its store, level 1
    first_level.detach()
    first_level.erase()
    exe = _host(module)
    assert not _passes(exe, graph)


def test_a_missing_barrier_between_warps_gives_a_wrong_answer() -> None:
    """Warp shuffles: the barrier between the warps' totals stored to shared memory and
    every lane reading them dropped in softmax's sum (64 threads a row, two warps): a lane
    reads the other warp's slot before its leader wrote it (the previous row's total)."""
    text = "model s\ninput x : f32[32, 1000]\noutput y = softmax(x, axis=-1)\n"
    graph = parse_source(text, "s.graph", ".graph")
    module = lower_for(apply_passes(graph.clone(), parse_passes("default-cuda")), "cuda-host")
    (fn,) = gpu_kernels(module)
    assert any(isinstance(op, ShuffleOp) for op in fn.walk())
    barriers = [op for op in fn.walk() if isinstance(op, gpu.BarrierOp)]
    assert len(barriers) == 4  # max: warps' totals, nest; sum: warps' totals, nest
    exe = _host(module)
    assert _passes(exe, graph)
    barriers[2].detach()
    barriers[2].erase()
    assert not _passes(_host(module), graph)


def test_a_barrier_in_divergent_code_is_refused() -> None:
    module = mapped("examples/softmax.graph")
    fn = gpu_kernels(module)[0]
    guard = next(op for op in fn.walk() if isinstance(op, scf.IfOp))
    guard.true_region.block.insert_op_before(gpu.BarrierOp(), guard.true_region.block.last_op)
    with pytest.raises(IrkitError, match="barrier reached by only some threads"):
        _launch(module, fn.sym_name.data, _softmax_buffers(np.random.default_rng(0)))


def test_a_store_out_of_bounds_is_named() -> None:
    """gemm with C's store guard dropped: M = N = 10 overhang the 16 x 16 tile."""
    module, name, buffers = gemm_without_store_guard()
    with pytest.raises(IrkitError, match=f"{name} wrote outside its argument 2"):
        _launch(module, name, buffers)


def test_a_printer_slip_that_nvrtc_accepts_is_caught(monkeypatch) -> None:
    """A subtraction printed with its operands swapped compiles everywhere; lockstep, which
    interprets the IR, still agrees with the reference, and only cuda-host sees the text."""
    from xdsl.dialects import arith

    text = "model d\ninput x : f32[16, 40]\ninput y : f32[16, 40]\noutput z = x - y\n"
    graph = parse_source(text, "d.graph", ".graph")
    original = CudaPrinter.infix

    def slipped(self, op):
        if isinstance(op, arith.SubfOp):
            b, a = (self.name(v) for v in op.operands)
            return self.define(op.results[0], f"{a} - {b}")
        return original(self, op)

    monkeypatch.setitem(CudaPrinter.HANDLERS, arith.SubfOp, slipped)
    assert _passes(irkit.compile(graph, "default-cuda", "cuda-sim"), graph)
    assert not _passes(irkit.compile(graph, "default-cuda", "cuda-host"), graph)


NAMES = [
    # the printer's own local names, geometry and temporaries
    "v7", "i3", "k0", "acc1", "p2", "r1", "next0", "tid", "bid", "arg0", "out0",
    # CUDA built-ins, C++ keywords and the math library's names and macros
    "threadIdx", "blockDim", "int", "float", "for", "return", "expf", "fmaxf", "NAN", "errno",
    # names C++ keeps, irkit's helpers, and the shared array the softmax kernel declares
    "_X", "irkit_maximumf", "k0_softmax_smem", "kernel",
]  # fmt: skip


def _colliding_model() -> str:
    """Every name above as an input, through exp, max and a softmax (shared memory and
    barriers), and as the output."""
    lines = ["model collide"] + [f"input {n} : f32[8, 40]" for n in NAMES]
    lines.append("t = " + " + ".join(NAMES))
    lines.append("output float4 = softmax(max(exp(t * 0.01), v7), axis=-1)")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("backend", ["cpu", "cuda-sim", "cuda-host"])
def test_user_names_never_collide_with_the_printers(backend: str) -> None:
    assert all(reserved(n) for n in ("threadIdx", "int", "expf", "NAN", "_X", "irkit_maximumf"))
    graph = parse_source(_colliding_model(), "collide.graph", ".graph")
    exe = irkit.compile(graph, "default-cuda" if backend != "cpu" else None, backend)
    assert _passes(exe, graph)
    if backend != "cpu":
        source = "".join(k.source for k in exe.kernels)
        assert "const float* __restrict__ threadIdx" not in source
        assert "(int)threadIdx.x" in source


ZERO_KERNELS = {
    "identity": "model z\ninput x : f32[4, 8]\noutput y = x\n",
    "transposes": "model z\ninput x : f32[4, 8]\n"
    "output y = transpose(transpose(x, perm=[1, 0]), perm=[1, 0])\n",
    "two outputs": "model z\ninput x : f32[4, 8]\noutput y = x\noutput w = x\n",
}


@pytest.mark.parametrize("backend", ["cpu", "cuda-sim", "cuda-host"])
@pytest.mark.parametrize("model", sorted(ZERO_KERNELS))
def test_a_model_with_no_kernel_runs_on_every_backend(backend: str, model: str) -> None:
    graph = parse_source(ZERO_KERNELS[model], "z.graph", ".graph")
    pipeline = None if backend == "cpu" else "default-cuda"
    exe = irkit.compile(graph, pipeline, backend)
    if model != "two outputs":  # the second output is a copy: still no kernel
        assert exe.kernels == []
    assert _passes(exe, graph)
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    for out in exe(x):
        np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_types_run_on_the_host(dtype: str) -> None:
    text = (
        f"model h\ninput x : {dtype}[8, 40]\ninput b : {dtype}[40]\n"
        "output y = softmax(relu(x + b), axis=-1)\n"
    )
    graph = parse_source(text, "h.graph", ".graph")
    exe = irkit.compile(graph, "default-cuda", "cuda-host")
    assert all("#include <cuda_fp16.h>" in k.source for k in exe.kernels)
    assert _passes(exe, graph)


CONVERT = """
extern "C" __global__ void convert(const __half* h, float* f, const float* g, __half* back,
                                   const __nv_bfloat16* b, float* bf, __nv_bfloat16* bback) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  f[i] = __half2float(h[i]);
  back[i] = __float2half_rn(g[i]);
  bf[i] = __bfloat162float(b[i]);
  bback[i] = __float2bfloat16_rn(g[i]);
}
static void body(void* p) {
  void** a = (void**)p;
  convert((const __half*)a[0], (float*)a[1], (const float*)a[2], (__half*)a[3],
          (const __nv_bfloat16*)a[4], (float*)a[5], (__nv_bfloat16*)a[6]);
}
extern "C" int irkit_host_convert(void** args, const unsigned* geometry, int fibers) {
  return irkit_host::launch(geometry, fibers, body, args);
}
"""


def test_half_conversions_round_to_nearest_even_for_every_f16() -> None:
    """The header's f16 conversions against numpy's, over all 65536 f16 values and f32
    values around every f16 rounding boundary; bf16 on its ties, NaN and infinities."""
    import ctypes

    n = 1 << 16
    h = np.arange(n, dtype=np.uint32).astype(np.uint16)
    as_f16 = h.view(np.float16)
    finite = as_f16[np.isfinite(as_f16)].astype(np.float32)
    mids = (finite[:-1] + finite[1:]) / 2  # ties, and their neighbours either side
    g = np.concatenate([finite, mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf),
                        np.float32([np.inf, -np.inf, np.nan, 1e6, -1e6, 1e-9])])  # fmt: skip
    g = np.resize(g, n).astype(np.float32)
    bf_bits = np.resize(np.uint16([0x3F80, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x8000]), n)
    ties = np.float32([1.00390625, 1.01171875, -1.00390625, np.inf, np.nan, 3.0])
    g[: ties.size] = ties
    f, back, bf, bback = (np.zeros(n, t) for t in (np.float32, np.uint16, np.float32, np.uint16))
    library = compile_host(CONVERT)
    buffers = [h, f, g, back, bf_bits, bf, bback]
    args = (ctypes.c_void_p * 7)(*[b.ctypes.data for b in buffers])
    assert (
        library.launcher("convert")(args, (ctypes.c_uint * 7)(n // 256, 1, 1, 256, 1, 1, 1), 0) == 0
    )
    np.testing.assert_array_equal(f, as_f16.astype(np.float32))  # NaN == NaN here
    expected = g.astype(np.float16)
    same = (back == expected.view(np.uint16)) | (np.isnan(expected) & np.isnan(back.view(np.float16)))  # fmt: skip
    assert same.all(), g[~same][:5]
    np.testing.assert_array_equal(bf, (bf_bits.astype(np.uint32) << 16).view(np.float32))
    assert list(bback[:6]) == [0x3F80, 0x3F82, 0xBF80, 0x7F80, bback[4], 0x4040]
    assert bback[4] & 0x7F80 == 0x7F80 and bback[4] & 0x7F  # NaN stays NaN


def test_compile_errors_name_the_kernel_and_line() -> None:
    source = (
        "// k9_bad: grid [1, 1, 1], block [32, 1, 1], mapping flat\n"
        'extern "C" __global__ void k9_bad(float* x) {\n  x[0] = undefined_name;\n}\n'
    )
    with pytest.raises(
        IrkitError, match=r"could not compile k9_bad for the host: line 3: .*undefined_name"
    ):
        compile_host(source)


def test_the_backend_says_what_it_is() -> None:
    backend = CudaHostBackend()
    ok, why = backend.available()
    assert ok and "compiled for the host" in why
    assert "not a GPU time" in backend.timer
    assert backend.fingerprint()["cuda_host"]["gpu"] is None


@pytest.mark.parametrize("name", ["softmax", "layernorm", "gemm"])
def test_the_portable_fiber_switch_runs_too(name: str) -> None:
    """IRKIT_UCONTEXT: ucontext fibers instead of the x86-64 stack switch (what other hosts
    use), on kernels with barriers."""
    module = irkit.load(f"examples/{name}.graph", SMALL[name])
    lowered = lower_for(apply_passes(module.clone(), parse_passes("default-cuda")), "cuda-host")
    exe = CudaHostBackend(defines=("IRKIT_UCONTEXT",)).compile(lowered)
    assert _passes(exe, module)


def test_run_says_its_times_are_not_a_gpus(capsys) -> None:
    from irkit.cli.bench import main as bench

    code = bench(["run", "examples/softmax.graph", "--backend", "cuda-host", "--dim", "R=8",
                  "--dim", "C=40", "--budget", "0.05"])  # fmt: skip
    assert code == 0 and "the times below are the host's, not a GPU's" in capsys.readouterr().out


@pytest.mark.parametrize("backend", ["cuda-host", "cuda-sim"])
def test_a_copy_reuses_the_kernels_without_printing_or_compiling(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`copy()` (attribution's further placements): the same kernels, nothing printed or
    compiled again, a launcher of its own (on cuda-host the library loaded again at other
    addresses, its file gone once loaded), the same results after the original is gone."""
    import ctypes
    import gc

    import irkit.runtime.gpu as gpu_runtime
    from irkit.codegen import cuda_host

    module = irkit.load("examples/mlp.graph", {"B": 4, "D": 32, "F": 64})
    inputs = random_inputs(module, seed=3)
    exe = irkit.compile(module, backend=backend)
    expected = exe(*inputs)
    monkeypatch.setattr(gpu_runtime, "kernel_source", lambda *a: pytest.fail("printed again"))
    monkeypatch.setattr(cuda_host, "compile_host", lambda *a: pytest.fail("compiled again"))
    twin = exe.copy()
    assert twin.gpu_kernels is exe.gpu_kernels and twin.launcher is not exe.launcher
    if backend == "cuda-host":
        name = exe.gpu_kernels[0].name
        address = [ctypes.cast(e.library.launcher(name), ctypes.c_void_p).value
                   for e in (exe, twin)]  # fmt: skip
        assert address[0] != address[1]
        assert not list(Path(tempfile.gettempdir()).glob(f"irkit-cuda-host-*/{exe.library.key}.so"))
    del exe
    gc.collect()
    for a, b in zip(expected, twin(*inputs), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="no /proc/self/maps")
def test_copies_dropped_give_their_memory_maps_back() -> None:
    """Copies of a program with a barrier (its block's threads on fiber stacks, each with a
    guard page: two memory maps a thread) unload when dropped, stacks and all: a process
    that loads many (attribution's placements, fidelity's truth) stays within the 65530
    maps Linux allows. Before, each copy kept its library and 2 x 256 maps for good, and
    fidelity on mlp stopped after 674 copies ('failed to map segment')."""
    import gc

    def maps() -> int:
        return Path("/proc/self/maps").read_text().count("\n")

    from irkit.codegen.cuda_host import has_barrier

    module = irkit.load("examples/softmax.graph", {"R": 2, "C": 4096})
    exe = irkit.compile(module, backend="cuda-host")
    assert [(k.launch["block"][0], has_barrier(k.fn)) for k in exe.gpu_kernels] == [(256, True)]
    inputs = random_inputs(module, seed=1)
    expected = exe(*inputs)
    for a, b in zip(expected, exe.copy()(*inputs), strict=True):  # one warm copy
        np.testing.assert_array_equal(a, b)
    gc.collect()
    before = maps()
    for _ in range(40):
        exe.copy()(*inputs)
    gc.collect()
    assert maps() - before < 40  # kept, 40 copies held over 40 x 256 maps


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="no /proc/self/maps")
def test_distinct_programs_past_the_kept_ones_are_unloaded(monkeypatch) -> None:
    """The process keeps at most LOADED_KEPT libraries loaded for reuse (here 2); older ones
    unload once no program holds them, stacks and all. Before, every distinct program
    stayed loaded for good, and a test worker that had run a few hundred (warp-specialized
    kernels hold 768 maps) crashed in llvmlite's loader ('failed to map segment')."""
    import gc

    from irkit.codegen import cuda_host

    def maps() -> int:
        return Path("/proc/self/maps").read_text().count("\n")

    monkeypatch.setattr(cuda_host, "LOADED_KEPT", 2)
    counts = []
    for c in range(4100, 4106):  # six distinct programs, one 256-thread block with a barrier
        module = irkit.load("examples/softmax.graph", {"R": 2, "C": c})
        exe = irkit.compile(module, backend="cuda-host")
        exe(*random_inputs(module, seed=1))
        del exe
        gc.collect()
        counts.append(maps())
    assert len(cuda_host._LOADED) <= 2
    assert counts[-1] - counts[1] < 256, counts  # four more programs, not 4 x 512 maps more


def _with_and_without_fill_sms(dims: dict[str, int], options: str, seed: int):
    """The gemm example under gpu-tile-matmul{OPTIONS fill-sms=true}, then =false, on
    cuda-host, each checked against the float64 reference: each one's launches (grid, block,
    min_blocks) and its result."""
    module = irkit.load("examples/gemm.graph", dims)
    launches, results = [], []
    for fill in ("true", "false"):
        tile = " ".join(filter(None, (options, f"fill-sms={fill}")))
        pipeline = f"lower-graph-to-loops,gpu-tile-matmul{{{tile}}},map-to-gpu"
        exe = irkit.compile(module, backend="cuda-host", pipeline=pipeline)
        assert _passes(exe, module, seed=seed)
        launches.append([(k.launch["grid"][0], k.launch["block"][0], k.launch.get("min_blocks"))
                         for k in exe.gpu_kernels])  # fmt: skip
        results.append(exe(*random_inputs(module, seed=seed))[0])
    return launches, results


def test_fill_sms_gives_a_short_grid_smaller_tiles_with_the_same_results() -> None:
    """gpu-tile-matmul's fill-sms on a 256^3 gemm (4 blocks of 128 x 128 on 132 SMs): 32 x 32
    tiles with split-K, 256 blocks and the partials' kernel; both that and fill-sms=false
    match the float64 reference, and each other within f32's reassociation."""
    launches, results = _with_and_without_fill_sms({"M": 256, "N": 256, "K": 256}, "", seed=2)
    assert launches[0][0] == (256, 64, None) and len(launches[0]) == 2  # tiles, partials' sum
    assert launches[1] == [(4, 256, 1)]  # one wave, a block an SM: ptxas bounded to one
    np.testing.assert_allclose(results[0], results[1], rtol=1e-4, atol=1e-4)


def test_fill_sms_pairs_blocks_on_a_grid_of_few_waves_with_the_same_results() -> None:
    """fill-sms's pairing (`_paired`): with `sms=8`, a ragged 200 x 250 x 40 gemm in 128 x 128
    tiles is 4 blocks, half a wave: 128 x 64 tiles instead, 8 blocks of 128 threads bounded to
    two an SM. Both it and fill-sms=false match the float64 reference, and each other bit for
    bit (the same k order per output: only the tiles' shape changed)."""
    launches, results = _with_and_without_fill_sms({"M": 200, "N": 250, "K": 40}, "sms=8", seed=3)
    assert launches == [[(8, 128, 2)], [(4, 256, 1)]]
    np.testing.assert_array_equal(results[0], results[1])
