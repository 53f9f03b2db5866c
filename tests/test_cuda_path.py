"""The CUDA path without a GPU: map-to-gpu, the CUDA C printer, NVRTC (real, for sm_80 and
sm_90), and the lockstep interpretation of GPU-mapped IR against the float64 reference.
A kernel the interpretation cannot run fails here; nothing is skipped for want of a GPU."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import gpu, memref, scf

import irkit
from irkit.codegen.cuda import cuda_source, gpu_kernels, kernel_source
from irkit.codegen.nvrtc import ARCH_LIMITS, Resources, check_limits, compile_cuda, parse_ptxas
from irkit.dialects.warp import ShuffleOp
from irkit.errors import IrkitError
from irkit.frontend import parse_source
from irkit.loops import LAUNCH_ATTR, launch_of
from irkit.passes.map_to_gpu import launch_attr
from irkit.pipelines import apply_passes, parse_passes
from irkit.runtime.check import check
from irkit.runtime.cuda_sim import LockstepBackend
from irkit.runtime.gpu import build_kernels
from irkit.runtime.lockstep import LockstepError, LockstepInterpreter
from tests.conftest import SMALL, check_every_subset

HOST_AND_GPU = ["cuda-sim", "cuda-host", pytest.param("cuda", marks=pytest.mark.gpu)]
"""The two host paths, and the real GPU (`pytest -m gpu`; skipped with the reason where none
is present): a kernel proved on the host paths is run on the device too."""


def needs(backend: str) -> None:
    """Skip with the reason where `backend` is the GPU and no device is present."""
    from irkit.runtime import BACKENDS

    ok, why = BACKENDS[backend]().available()
    if not ok:
        pytest.skip(why)


def mapped(example: Path | str, spec: str = "default-cuda", dims=None):
    path = Path(example)
    return apply_passes(irkit.load(path, dims or SMALL[path.stem]), parse_passes(spec))


@pytest.mark.parametrize(
    "spec",
    ["default-cuda", "baseline-cuda", "fuse-kernels,lower-graph-to-loops,map-to-gpu{rows=false}"],
)
def test_lockstep_interpretation_matches_the_reference(example: Path, spec: str) -> None:
    module = irkit.load(example, SMALL[example.stem])
    exe = irkit.compile(module, spec, backend="cuda-sim")
    checks, _ = check(exe, module, seed=5)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    assert exe.kernels and all(k.launch for k in exe.kernels)


def test_reductions_map_one_block_per_row() -> None:
    for name in ("softmax", "layernorm"):
        kernels = gpu_kernels(mapped(f"examples/{name}.graph"))
        assert [launch_of(k)["mapping"] for k in kernels] == ["rows"]  # type: ignore[index]
        rows = SMALL[name]["R" if name == "softmax" else "T"]
        assert launch_of(kernels[0])["grid"] == (rows, 1, 1)  # type: ignore[index]
        assert any(isinstance(op, gpu.BarrierOp) for op in kernels[0].walk())


def test_printed_module_holds_each_kernel_as_nvrtc_compiles_it() -> None:
    """`-t cuda` shows the very kernels NVRTC builds, with readable per-kernel names."""
    module = mapped("examples/transformer_block.graph")
    whole = cuda_source(module)
    for fn in gpu_kernels(module):
        source = kernel_source(module, fn)
        kernel = source[source.index("// " + fn.sym_name.data) :]
        assert kernel in whole, fn.sym_name.data
        assert "const int tid = (int)threadIdx.x;" in kernel, fn.sym_name.data
    conv = cuda_source(mapped("examples/conv_block.graph"))
    assert "k2_im2col(const float* __restrict__ c, float* __restrict__ arg1)" in conv
    assert re.search(r"\barg\d+_\d+\b", whole + conv) is None


NVRTC_DIMS = {**SMALL, "mlp": {"B": 4}}
"""The spill check compiles only (no interpretation), so mlp keeps its real widths."""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_kernel_compiles_with_nvrtc_without_spills(example: Path, arch: str) -> None:
    module = mapped(example, dims=NVRTC_DIMS[example.stem])
    _assert_no_spills(module, arch)


def test_small_fitted_matmul_tiles_compile_without_spills() -> None:
    """Tiles fitted to a 4-row, 256-column matmul: with 8-deep k tiles ptxas put a small
    array in local memory (8 B stack, 4 spills on sm_90); the 16-deep f32 default has none."""
    _assert_no_spills(mapped("examples/mlp.graph", dims={"B": 4, "D": 64, "F": 256}), "sm_90")


def _assert_no_spills(module, arch: str) -> None:
    for fn in gpu_kernels(module):
        name = fn.sym_name.data
        compiled = compile_cuda(kernel_source(module, fn), name, arch)
        r = compiled.resources
        assert compiled.cubin[:4] == b"\x7fELF"
        assert 0 < r.registers <= 255, r
        assert r.spill_stores == 0 and r.spill_loads == 0, (name, r)
        if any(isinstance(op, memref.GetGlobalOp) for op in fn.walk()):  # a rows kernel's
            assert r.shared_bytes > 0, (name, r)  # tree, or its warps' totals


@pytest.mark.parametrize("arch", sorted(ARCH_LIMITS))
def test_every_known_architecture_compiles(arch: str) -> None:
    """Each architecture irkit knows limits for builds (Turing to Blackwell) with the NVRTC
    installed; the examples are checked in full for sm_80 and sm_90 above."""
    module = mapped("examples/softmax.graph")
    (fn,) = gpu_kernels(module)
    compiled = compile_cuda(kernel_source(module, fn), fn.sym_name.data, arch)
    assert compiled.cubin[:4] == b"\x7fELF" and compiled.resources.registers > 0


def test_half_headers_fall_back_to_a_cuda_toolkit(tmp_path: Path, monkeypatch) -> None:
    """Where cuda-pathfinder finds no wheel headers (an older one, a system toolkit only),
    $CUDA_HOME's include directory is used."""
    import cuda.pathfinder

    from irkit.codegen.nvrtc import cuda_include_dir

    assert cuda_include_dir() is not None  # the nvidia-cuda-runtime wheel's, here
    monkeypatch.setattr(cuda.pathfinder, "locate_nvidia_header_directory", lambda _: None)
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda_fp16.h").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert cuda_include_dir.__wrapped__() == str(tmp_path / "include")  # uncached


def test_nvrtc_cache_is_keyed_by_source_and_arch(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("IRKIT_CACHE", str(tmp_path))
    module = mapped("examples/softmax.graph")
    fn = gpu_kernels(module)[0]
    src = kernel_source(module, fn)
    first = compile_cuda(src, fn.sym_name.data, "sm_90")
    again = compile_cuda(src, fn.sym_name.data, "sm_90")
    other = compile_cuda(src, fn.sym_name.data, "sm_80")
    assert not first.cached and again.cached and not other.cached
    assert again.cubin == first.cubin and again.resources == first.resources
    assert len(list(tmp_path.glob("nvrtc/*.cubin"))) == 2


def test_compile_error_names_the_kernel_line_and_message() -> None:
    src = 'extern "C" __global__ void k(float* x) {\n  x[0] = undefined_thing;\n}\n'
    with pytest.raises(IrkitError) as e:
        compile_cuda(src, "k", "sm_90", use_cache=False)
    msg = str(e.value)
    assert "k.cu:2:" in msg and "undefined_thing" in msg and "\n" not in msg


def test_ptxas_report_is_parsed_per_kernel() -> None:
    log = (
        "ptxas info    : Compiling entry function 'a' for 'sm_90'\n"
        "ptxas info    : Function properties for a\n"
        "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem\n"
        "ptxas info    : Function properties for b\n"
        "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 12 registers\n"
    )
    assert parse_ptxas(log, "a") == Resources(40, 1024, 8, 4, 4, 0)
    assert parse_ptxas(log, "b") == Resources(12, 0, 0, 0, 0, 0)


def test_limits_are_checked_before_launch_naming_the_kernel() -> None:
    with pytest.raises(IrkitError, match="kernel big needs 2048 threads"):
        check_limits("big", "sm_90", 2048, Resources(registers=16))
    with pytest.raises(IrkitError, match="kernel smem needs .* shared memory"):
        check_limits("smem", "sm_90", 256, Resources(registers=16, shared_bytes=64 * 1024))
    check_limits("ok", "sm_90", 256, Resources(registers=32, shared_bytes=1024))


def test_dynamic_shared_memory_in_the_launch_is_checked_naming_the_kernel() -> None:
    module = mapped("examples/softmax.graph")
    (kernel,) = gpu_kernels(module)
    launch = launch_of(kernel)
    assert launch is not None and launch["shared"] == 0
    grid, block = launch["grid"][0], launch["block"][0]  # type: ignore[index]
    kernel.attributes[LAUNCH_ATTR] = launch_attr(grid, block, "rows", 1, dynamic_shared=1 << 16)
    (built,) = build_kernels(module, "sm_90")  # 64 KB dynamic: within Hopper's opt-in 227 KB
    assert built.record.launch["shared"] == 1 << 16
    kernel.attributes[LAUNCH_ATTR] = launch_attr(grid, block, "rows", 1, dynamic_shared=1 << 18)
    with pytest.raises(IrkitError, match=f"kernel {kernel.sym_name.data} needs .* shared memory"):
        build_kernels(module, "sm_90")


def test_block_size_option_is_checked() -> None:
    with pytest.raises(IrkitError, match="map-to-gpu.*block-size"):
        mapped("examples/gemm.graph", "lower-graph-to-loops,map-to-gpu{block-size=100}")


@pytest.mark.parametrize("block", [32, 64, 1024])
def test_block_sizes_stay_correct(block: int) -> None:
    for name in ("softmax", "gemm"):
        module = irkit.load(f"examples/{name}.graph", SMALL[name])
        spec = f"fuse-kernels,lower-graph-to-loops,map-to-gpu{{block-size={block}}}"
        exe = irkit.compile(module, spec, "cuda-sim")
        checks, _ = check(exe, module, seed=1)
        assert all(c.passed for c in checks)
        assert all(k.launch["block"][0] <= block for k in exe.kernels)  # type: ignore[index]


ROW_CASES = {
    "one-warp-ragged": "input x : f32[5, 77]\noutput y = softmax(x, axis=-1)",
    "two-warps": "input x : f32[6, 1000]\noutput y = softmax(x, axis=-1)",
    "eight-warps-layer-norm": "input x : f32[3, 4000]\nparam g : f32[4000]\n"
    "param b : f32[4000]\noutput y = layer_norm(x, g, b, axes=[-1], eps=1e-5)",
    "f64-layer-norm": "input x : f64[4, 1500]\nparam g : f64[1500]\nparam b : f64[1500]\n"
    "output y = layer_norm(x, g, b, axes=[-1], eps=1e-5)",
    "rows-of-two-axes": "input x : f32[2, 3, 600]\noutput y = softmax(x, axis=-1)",
    "max": "input x : f32[4, 5000]\noutput y = reduce_max(x, axes=[1])",
    "f16-input": "input x : f16[2, 3000]\noutput y = reduce_sum(x, axes=[1])",
    "max-then-mean": "input x : f32[4, 700]\noutput y = reduce_max(x, axes=[1])\n"
    "output z = reduce_mean(x - reduce_max(x, axes=[1], keepdims=true), axes=[1])",
}
"""Rows kernels of one to eight warps, f32 and f64 accumulators (f16 input sums in f32),
rows over two axes, and one kernel with two reductions."""


@pytest.mark.parametrize("case", sorted(ROW_CASES))
@pytest.mark.parametrize(
    "options", ["", "{shuffle=false}", "{forward=false}", "{shuffle=false forward=false}"]
)
@pytest.mark.parametrize("backend", HOST_AND_GPU)
def test_row_reductions_by_shuffles_and_forwarding_match_the_reference(
    case: str, options: str, backend: str
) -> None:
    """map-to-gpu's `shuffle` and `forward` each on and off: every combination agrees with
    the reference (lockstep interprets the IR, cuda-host compiles the CUDA C, and on a GPU
    `__shfl_xor_sync` runs for real)."""
    needs(backend)
    module = parse_source(f"model r\n{ROW_CASES[case]}\n", "r.graph", ".graph")
    spec = f"fuse-kernels,lower-graph-to-loops,map-to-gpu{options}"
    exe = irkit.compile(module, spec, backend)
    mappings = {k.launch["mapping"] for k in exe.kernels}  # type: ignore[index]
    assert "rows" in mappings, mappings
    checks, _ = check(exe, module, seed=len(case))
    assert checks and all(c.passed for c in checks), [c.describe() for c in checks]


@pytest.mark.parametrize("backend", HOST_AND_GPU)
def test_a_nan_reaches_its_rows_statistics_through_the_shuffles(backend: str) -> None:
    """A NaN in one row of a 2-warp softmax: the max butterfly carries it to every lane
    (maximumf propagates NaN), so that row comes out all NaN and only that row."""
    needs(backend)
    text = "model s\ninput x : f32[4, 1000]\noutput y = softmax(x, axis=-1)\n"
    module = parse_source(text, "s.graph", ".graph")
    x = np.random.default_rng(3).standard_normal((4, 1000)).astype(np.float32)
    x[2, 517] = np.nan
    (y,) = irkit.compile(module, "default-cuda", backend)(x)
    assert np.isnan(y[2]).all()
    ref = np.exp(x - x.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(y[[0, 1, 3]], ref[[0, 1, 3]], rtol=1e-5, atol=1e-7)


def test_shuffles_and_forwarding_shape_the_kernel() -> None:
    """What each option changes in the IR, on a 2-warp softmax: shuffles replace the tree's
    barrier per level (two reductions of 8 barriers each, with the 2 between nests: 18
    barriers become 4); forwarding removes every load of the statistics' scratch buffers (3:
    the maximum read twice, the sum once) and no store."""

    def kernel(options: str):
        text = "model s\ninput x : f32[6, 1000]\noutput y = softmax(x, axis=-1)\n"
        module = parse_source(text, "s.graph", ".graph")
        spec = f"fuse-kernels,lower-graph-to-loops,map-to-gpu{options}"
        (fn,) = gpu_kernels(apply_passes(module, parse_passes(spec)))
        ops = list(fn.walk())
        attrs = fn.arg_attrs.data if fn.arg_attrs else [None] * len(fn.body.block.args)
        scratch = {a for a, d in zip(fn.body.block.args, attrs, strict=True)
                   if d is not None and "irkit.scratch" in d.data}  # fmt: skip
        return {
            "barriers": sum(isinstance(op, gpu.BarrierOp) for op in ops),
            "shuffles": sum(isinstance(op, ShuffleOp) for op in ops),
            "scratch loads": sum(
                isinstance(op, memref.LoadOp) and op.memref in scratch for op in ops
            ),
            "scratch stores": sum(
                isinstance(op, memref.StoreOp) and op.memref in scratch for op in ops
            ),
        }

    tree = kernel("{shuffle=false forward=false}")
    assert tree == {"barriers": 18, "shuffles": 0, "scratch loads": 3, "scratch stores": 2}
    assert kernel("{forward=false}") == {**tree, "barriers": 4, "shuffles": 12}
    assert kernel("") == {"barriers": 4, "shuffles": 12, "scratch loads": 0, "scratch stores": 2}


def test_rows_mapping_is_refused_when_rows_would_share_data() -> None:
    """softmax then transpose on a square matrix: the last nest's leading extent equals the
    rows, but it reads the row statistics along its second index, so blocks would read each
    other's results. The exact index check refuses; the flat mapping is used, and is right."""
    text = (
        "model t\ninput x : f32[16, 16]\noutput y = transpose(softmax(x, axis=-1), perm=[1, 0])\n"
    )
    module = parse_source(text, "t.graph", ".graph")
    exe = irkit.compile(module, "default-cuda", "cuda-sim")
    assert "rows" not in [k.launch["mapping"] for k in exe.kernels]  # type: ignore[index]
    checks, _ = check(exe, module, seed=2)
    assert all(c.passed for c in checks)


def _kernel(module, name: str):
    return next(f for f in gpu_kernels(module) if f.sym_name.data == name)


def _run(module, name: str, buffers) -> None:
    LockstepInterpreter(module).launch(name, buffers)


def _softmax_buffers(rng):
    r, c = SMALL["softmax"]["R"], SMALL["softmax"]["C"]
    x = rng.standard_normal((r, c)).astype(np.float32)
    return [x, np.zeros_like(x), np.zeros((r, 1), np.float32), np.zeros((r, 1), np.float32)]


def test_lockstep_detects_a_missing_barrier() -> None:
    spec = "fuse-kernels,lower-graph-to-loops,map-to-gpu{shuffle=false}"
    module = mapped("examples/softmax.graph", spec)
    fn = _kernel(module, "k0_softmax")
    barriers = [op for op in fn.walk() if isinstance(op, gpu.BarrierOp)]
    barriers[1].detach()  # between two levels of the shared-memory tree
    barriers[1].erase()
    with pytest.raises(LockstepError, match="race on @k0_softmax_smem"):
        _run(module, "k0_softmax", _softmax_buffers(np.random.default_rng(0)))


def test_lockstep_detects_a_missing_barrier_between_warps() -> None:
    """Shuffles (the default): the barrier between the warps' totals written to shared
    memory and every lane reading them dropped (1000 columns: 64 threads, two warps)."""
    module = mapped("examples/softmax.graph", dims={"R": 4, "C": 1000})
    fn = _kernel(module, "k0_softmax")
    assert fn.attributes["irkit.launch"].data["block"].get_values()[0] == 64  # type: ignore[attr-defined]
    barriers = [op for op in fn.walk() if isinstance(op, gpu.BarrierOp)]
    barriers[0].detach()
    barriers[0].erase()
    x = np.random.default_rng(0).standard_normal((4, 1000)).astype(np.float32)
    buffers = [x, np.zeros_like(x), np.zeros((4, 1), np.float32), np.zeros((4, 1), np.float32)]
    with pytest.raises(LockstepError, match="race on @k0_softmax_smem"):
        _run(module, "k0_softmax", buffers)


def test_lockstep_detects_a_barrier_in_divergent_code() -> None:
    module = mapped("examples/softmax.graph")
    fn = _kernel(module, "k0_softmax")
    guard = next(op for op in fn.walk() if isinstance(op, scf.IfOp))
    guard.true_region.block.insert_op_before(gpu.BarrierOp(), guard.true_region.block.last_op)
    with pytest.raises(LockstepError, match="barrier reached by only some threads"):
        _run(module, "k0_softmax", _softmax_buffers(np.random.default_rng(0)))


def gemm_without_store_guard():
    """A 10 x 10 x 4 gemm mapped onto the GPU with C's store guard dropped (M = N = 10
    overhang the 16 x 16 tile; the first guards guard the copies of pieces fewer than the
    threads, and dropping one is a race instead): the module, the kernel's name, buffers."""
    module = mapped("examples/gemm.graph", dims={"M": 10, "N": 10, "K": 4})
    fn = gpu_kernels(module)[0]
    guard = [op for op in fn.walk() if isinstance(op, scf.IfOp)][-1]
    for op in list(guard.true_region.block.ops)[:-1]:
        op.detach()
        guard.parent_block().insert_op_before(op, guard)
    guard.detach()
    guard.erase()
    buffers = [np.ones((10, 4), np.float32), np.ones((4, 10), np.float32),
               np.zeros((10, 10), np.float32)]  # fmt: skip
    return module, fn.sym_name.data, buffers


def test_lockstep_detects_out_of_bounds_when_a_guard_is_dropped() -> None:
    module, name, buffers = gemm_without_store_guard()
    with pytest.raises(LockstepError, match="out of bounds"):
        _run(module, name, buffers)


def test_lockstep_rejects_ops_it_does_not_know() -> None:
    module = mapped("examples/gemm.graph")
    fn = gpu_kernels(module)[0]
    fn.body.block.insert_op_before(gpu.LaneIdOp(), fn.body.block.last_op)
    with pytest.raises(LockstepError, match="no rule for gpu.lane_id"):
        _run(
            module,
            fn.sym_name.data,
            [np.ones(s, np.float32) for s in ((64, 80), (80, 48), (64, 48))],
        )


@pytest.mark.slow
def test_every_subset_of_default_cuda_matches_the_reference(subset_example: Path) -> None:
    """The attribution invariant on the CUDA path: NVRTC builds and lockstep runs each
    subset of the optional passes."""
    module = irkit.load(subset_example, SMALL[subset_example.stem])
    assert check_every_subset("default-cuda", module, "cuda-sim", seed=4) >= 1


def test_cuda_backend_says_no_device_in_one_line() -> None:
    from irkit.runtime import BACKENDS

    ok, why = BACKENDS["cuda"]().available()
    if ok:
        pytest.skip(f"a CUDA device is present: {why}")
    assert why == "no CUDA device available"
    exe = irkit.compile("examples/gemm.graph", dims=SMALL["gemm"])
    assert exe.backend == "cpu" and "cuda: no CUDA device available" in exe.selection  # type: ignore[attr-defined]


def test_gpu_state_is_read_from_nvidia_smi_output() -> None:
    """Clocks in a GPU record are the current ones (nvidia-smi), not the driver's maximum."""
    from irkit.runtime.cuda_device import SMI_CLOCKS, parse_smi, query_smi

    names = list(SMI_CLOCKS)
    assert parse_smi("1980, 3201, 41, 118.52, P0\n", names) == {
        "sm_mhz": 1980, "memory_mhz": 3201, "temperature_c": 41, "power_w": 118.52, "pstate": "P0"
    }  # fmt: skip
    assert parse_smi("345, [N/A], 30, [N/A], P8", names)["memory_mhz"] is None
    assert parse_smi("", names) == dict.fromkeys(names)
    assert parse_smi("1, 2", names) == dict.fromkeys(names)  # a short line: nothing guessed
    if shutil.which("nvidia-smi") is None:  # here: every field unknown, nothing raised
        assert query_smi("0000:00:00.0", SMI_CLOCKS) == dict.fromkeys(names)


def test_driver_copies_run_in_the_gpu_plan() -> None:
    """The same model as test_gpu's driver-copy test, through cuda-sim here."""
    from tests.test_gpu import PASSTHROUGH

    module = parse_source(PASSTHROUGH, "passthrough.graph", ".graph")
    exe = irkit.compile(module, "default-cuda", backend="cuda-sim")
    assert [s.kind for s in exe.plan].count("copy") == 2  # type: ignore[attr-defined]
    checks, _ = check(exe, module, seed=3)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


def test_simulated_backend_records_resources() -> None:
    exe = LockstepBackend().compile(mapped("examples/softmax.graph"))
    (record,) = exe.kernels
    assert record.resources["arch"] == "sm_90" and record.resources["registers"] > 0
    assert record.launch["mapping"] == "rows" and "__syncthreads()" in record.source
    assert (
        record.flops > 0
        and record.min_bytes == 2 * 4 * SMALL["softmax"]["R"] * SMALL["softmax"]["C"]
    )


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_types_compile_with_the_cuda_headers_and_stay_correct(dtype: str) -> None:
    text = (
        f"model h\ninput x : {dtype}[8, 40]\ninput b : {dtype}[40]\n"
        "output y = softmax(relu(x + b), axis=-1)\n"
    )
    module = parse_source(text, "h.graph", ".graph")
    exe = irkit.compile(module, "default-cuda", "cuda-sim")
    assert all("#include <cuda_fp16.h>" in k.source for k in exe.kernels)
    assert all(k.resources["registers"] > 0 for k in exe.kernels)
    checks, _ = check(exe, module, seed=0)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


def _default_cuda_with(matmul: str) -> str:
    """default-cuda's passes, with `gpu-tile-matmul` given options."""
    from irkit.pipelines import PIPELINES

    passes = PIPELINES["default-cuda"].passes
    return ",".join(matmul if p == "gpu-tile-matmul" else p for p in passes)


SPLIT_MODELS = {
    # ragged M, N and K (none a multiple of its tile), a bias and an activation after the sum
    "ragged": "model s\ninput a : {t}[10, 88]\nparam w : {t}[88, 20]\nparam bias : {t}[20]\n"
    "output y = relu(matmul(a, w) + bias)\n",
    # mlp's shape at test size: GELU after the first split matmul, a plain second one
    "mlp": "model s\ninput x : {t}[4, 64]\nparam w1 : {t}[64, 256]\nparam w2 : {t}[256, 64]\n"
    "output y = matmul(gelu(matmul(x, w1)), w2)\n",
}


@pytest.mark.parametrize("backend", HOST_AND_GPU)
@pytest.mark.parametrize("dtype", ["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("model", sorted(SPLIT_MODELS))
def test_split_k_matches_the_reference(model: str, dtype: str, backend: str) -> None:
    """Split-K in two ranges (f16 and bf16 through tensor cores): each matmul becomes a
    tiled kernel over k ranges and a flat reduction of its partials, built by NVRTC without
    spills, equal to the reference on both host paths, and bit-identical from run to run
    (the reduction has a fixed order). (When split-K is chosen: the MLP and SPLIT checks.)"""
    needs(backend)
    graph = parse_source(SPLIT_MODELS[model].format(t=dtype), "s.graph", ".graph")
    depth = 16 if dtype in ("f16", "bf16") else 4  # an mma's k, or the f32 spill-free depth
    spec = _default_cuda_with(f"gpu-tile-matmul{{split-k=2 block-k={depth}}}")
    exe = irkit.compile(graph, spec, backend)
    names = [k.name for k in exe.kernels]
    split = [n for n in names if n.endswith("_splitk")]
    assert split and all(n.removesuffix("_splitk") in names for n in split), names
    for k in exe.kernels:
        assert k.resources["spill_stores"] == 0 and k.resources["spill_loads"] == 0, k.name
    tiled = {k.name: k for k in exe.kernels if k.launch["mapping"] == "tiled"}  # type: ignore[index]
    assert all(tiled[n.removesuffix("_splitk")].launch["grid"][0] >= 2 for n in split)  # type: ignore[index]
    checks, _ = check(exe, graph, seed=7)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    inputs = irkit.random_inputs(graph, seed=1)
    first, again = exe(*inputs), exe(*inputs)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)


BATCH_MODELS = {
    # attention's two batch matmuls: scores scaled (an epilogue), then weights times values;
    # ragged M, N and K
    "attention": "model b\ninput q : {t}[2, 3, 40, 24]\ninput k : {t}[2, 3, 24, 36]\n"
    "input v : {t}[2, 3, 36, 20]\n"
    "output y = batch_matmul(batch_matmul(q, k) * 0.5, v)\n",
    # B broadcast over the leading batch dimension
    "broadcast": "model b\ninput a : {t}[3, 2, 33, 16]\ninput w : {t}[2, 16, 12]\n"
    "output y = batch_matmul(a, w)\n",
}


@pytest.mark.parametrize("backend", HOST_AND_GPU)
@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("model", sorted(BATCH_MODELS))
def test_batch_matmuls_are_tiled_and_keep_the_result(backend: str, dtype: str, model: str) -> None:
    """gpu-tile-matmul tiles batch matmuls (one block per C tile and batch entry, A and B
    read at the entry's batch indices, a broadcast one at 0): correct against the reference;
    in f32 bit-identical to one thread per output (each output's sum in the same order)."""
    needs(backend)
    graph = parse_source(BATCH_MODELS[model].format(t=dtype), "b.graph", ".graph")
    exe = irkit.compile(graph, "default-cuda", backend)
    batched = [k for k in exe.kernels if "batch_matmul" in k.name]
    assert batched and all(k.launch["mapping"] == "tiled" for k in batched), [  # type: ignore[index]
        (k.name, k.launch) for k in exe.kernels
    ]
    checks, _ = check(exe, graph, seed=4)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    if dtype == "f32":
        flat = irkit.compile(graph, _default_cuda_with("gpu-tile-matmul{batch=false}"), backend)
        assert all(k.launch["mapping"] != "tiled" for k in flat.kernels)  # type: ignore[index]
        inputs = irkit.random_inputs(graph, seed=5)
        for a, b in zip(exe(*inputs), flat(*inputs), strict=True):
            np.testing.assert_array_equal(a, b)


def test_split_k_fills_an_h100_on_mlp() -> None:
    """The acceptance view, from the IR alone: under default-cuda, each of mlp's matmuls
    (B=64) launches at least 132 blocks; without split-K they launch 32 and 8, and with
    fill-sms's smaller tiles instead of split-K, 128 and 32."""

    def tiled_grids(spec: str) -> list[int]:
        module = apply_passes(irkit.load("examples/mlp.graph"), parse_passes(spec))
        return sorted(launch_of(f)["grid"][0] for f in gpu_kernels(module)  # type: ignore[index]
                      if launch_of(f)["mapping"] == "tiled")  # type: ignore[index]  # fmt: skip

    assert tiled_grids("default-cuda") == [256, 256]
    assert tiled_grids(_default_cuda_with("gpu-tile-matmul{split-k=1 fill-sms=false}")) == [8, 32]
    assert tiled_grids(_default_cuda_with("gpu-tile-matmul{split-k=1}")) == [32, 128]


@pytest.mark.parametrize("dtype,launch", [("f32", (512, 128, 2)), ("f64", (256, 256, None))])
def test_fill_sms_pairs_only_the_measured_f32_tiles(dtype: str, launch: tuple) -> None:
    """fill-sms's pairing (128 x 64 tiles, two blocks an SM) where 128 x 128 tiles make at most
    4 waves: measured for f32 on an H200 and applied there only; an f64 gemm keeps its
    256 blocks of 256 threads, unbounded."""
    module = parse_source(f"model g\ninput a : {dtype}[2048, 256]\ninput b : {dtype}[256, 2048]\n"
                          "output c = matmul(a, b)\n", "g.graph", ".graph")  # fmt: skip
    tiled = apply_passes(module, parse_passes("lower-graph-to-loops,gpu-tile-matmul,map-to-gpu"))
    launches = [launch_of(f) for f in gpu_kernels(tiled)]
    assert [(d["grid"][0], d["block"][0], d.get("min_blocks")) for d in launches] == [launch]  # type: ignore[index,union-attr]


def test_split_k_options_are_checked() -> None:
    with pytest.raises(IrkitError, match="split-k"):
        parse_passes("gpu-tile-matmul{split-k=-1}")
    with pytest.raises(IrkitError, match="sms"):
        parse_passes("gpu-tile-matmul{sms=0}")


def test_mma_fragment_layout_is_ptxs() -> None:
    """The m16n8k16 fragment coordinates against PTX's figures (lane 0 and lane 5, g=1 t=1),
    and each of A, B and C covered once by the warp's 32 lanes."""
    from irkit.dialects.warp import a_coordinates, b_coordinates, c_coordinates

    assert [a_coordinates(0, i) for i in range(8)] == [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)]  # fmt: skip
    assert [a_coordinates(5, i) for i in range(8)] == [(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)]  # fmt: skip
    assert [b_coordinates(5, i) for i in range(4)] == [(2, 1), (3, 1), (10, 1), (11, 1)]
    assert [c_coordinates(5, i) for i in range(4)] == [(1, 2), (1, 3), (9, 2), (9, 3)]
    for where, count, shape in ((a_coordinates, 8, (16, 16)), (b_coordinates, 4, (16, 8)),
                                (c_coordinates, 4, (16, 8))):  # fmt: skip
        cells = [where(lane, i) for lane in range(32) for i in range(count)]
        assert sorted(cells) == [(r, c) for r in range(shape[0]) for c in range(shape[1])]


HALF_GEMM = "model g\ninput a : {t}[{m}, {k}]\ninput b : {t}[{k}, {n}]\noutput c = matmul(a, b)\n"


@pytest.mark.parametrize("backend", HOST_AND_GPU)
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("dims", [(100, 72, 40), (128, 128, 64), (16, 8, 16), (5, 300, 33)])
def test_half_gemm_runs_on_tensor_cores(dims, dtype: str, backend: str) -> None:
    """f16 and bf16 gemms under default-cuda: mma.sync in the PTX NVRTC builds, and equal to
    the reference through lockstep (which interprets the fragment layout over whole warps)
    and through cuda-host (which runs the printed C with an emulated mma); ragged shapes,
    one warp and several warps along each side."""
    needs(backend)
    m, n, k = dims
    graph = parse_source(HALF_GEMM.format(t=dtype, m=m, n=n, k=k), "g.graph", ".graph")
    exe = irkit.compile(graph, "default-cuda", backend)
    (kernel,) = [r for r in exe.kernels if r.launch["mapping"] == "tiled"]  # type: ignore[index]
    assert f"irkit_mma_m16n8k16_{dtype}_x2(" in kernel.source
    if min(m, k) >= 16 and n >= 16:  # whole 16 x 16 tiles of B: transposed ldmatrix
        assert re.search(rf"irkit_ldmatrix_x4_{dtype}_trans(_sw)?\(&", kernel.source)
    assert kernel.resources["spill_stores"] == 0, kernel.resources
    from irkit.codegen.nvrtc import compile_ptx

    ptx = compile_ptx(kernel.source, kernel.name)
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{dtype}.{dtype}.f32" in ptx
    checks, _ = check(exe, graph, seed=3)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


def test_tensor_cores_can_be_turned_off() -> None:
    graph = parse_source(HALF_GEMM.format(t="f16", m=32, n=32, k=32), "g.graph", ".graph")
    exe = irkit.compile(
        graph, _default_cuda_with("gpu-tile-matmul{tensor-cores=false}"), "cuda-sim"
    )
    assert all("mma" not in k.source for k in exe.kernels)
    assert [k.launch["mapping"] for k in exe.kernels] == ["tiled"]  # type: ignore[index]
    checks, _ = check(exe, graph, seed=3)
    assert all(c.passed for c in checks)


def test_lockstep_refuses_an_mma_some_lanes_skip() -> None:
    graph = parse_source(HALF_GEMM.format(t="f16", m=16, n=8, k=16), "g.graph", ".graph")
    module = apply_passes(graph, parse_passes("default-cuda"))
    from irkit.dialects.warp import MmaM16n8k16Op

    fn = gpu_kernels(module)[0]
    mma = next(op for op in fn.walk() if isinstance(op, MmaM16n8k16Op))
    block = mma.parent_block()
    tid = next(op for op in fn.walk() if isinstance(op, gpu.ThreadIdOp)).result
    from xdsl.dialects import arith

    c16 = arith.ConstantOp.from_int_and_width(16, tid.type)
    cond = arith.CmpiOp(tid, c16.result, "ult")
    block.insert_ops_before([c16, cond], mma)
    mma.detach()
    if_ = scf.IfOp(cond.result, list(mma.result_types), [mma, scf.YieldOp(*mma.results)],
                   [scf.YieldOp(*mma.inputs[12:])])  # fmt: skip
    block.insert_op_before(if_, next(o for o in block.ops if o is cond).next_op)  # type: ignore[arg-type]
    for old, new in zip(mma.results, if_.results, strict=True):
        for use in list(old.uses):
            if use.operation is not if_.true_region.block.last_op:
                use.operation.operands[use.index] = new
    x = np.ones((16, 16), np.float16)
    with pytest.raises(LockstepError, match="only some lanes of a warp"):
        _run(
            module,
            fn.sym_name.data,
            [x, np.ones((16, 8), np.float16), np.zeros((16, 8), np.float16)],
        )


@pytest.mark.parametrize("backend", HOST_AND_GPU)
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("dims", [(100, 72, 40), (128, 128, 64), (16, 8, 16)])
def test_half_gemm_by_pair_loads_matches_the_reference(dims, dtype: str, backend: str) -> None:
    """gpu-tile-matmul{ldmatrix=false}: B's tile [n][k] and each fragment pair one 32-bit
    load, equal to the reference through lockstep, cuda-host and the GPU (the default,
    ldmatrix, is test_half_gemm_runs_on_tensor_cores's)."""
    needs(backend)
    m, n, k = dims
    graph = parse_source(HALF_GEMM.format(t=dtype, m=m, n=n, k=k), "g.graph", ".graph")
    exe = irkit.compile(graph, _default_cuda_with("gpu-tile-matmul{ldmatrix=false}"), backend)
    (kernel,) = [r for r in exe.kernels if r.launch["mapping"] == "tiled"]  # type: ignore[index]
    assert "irkit_ldmatrix_x4" not in kernel.source
    assert f"irkit_mma_m16n8k16_{dtype}_x2(" in kernel.source
    assert kernel.resources["spill_stores"] == 0, kernel.resources
    checks, _ = check(exe, graph, seed=3)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


@pytest.mark.parametrize("backend", HOST_AND_GPU)
@pytest.mark.parametrize(("dtype", "dims"), [("f16", (300, 520, 200)), ("bf16", (256, 256, 128)),
                                             ("f32", (130, 260, 70))])  # fmt: skip
def test_tiles_past_48kb_take_dynamic_shared_memory(dtype: str, dims, backend: str) -> None:
    """block-k=64 puts the tiles past the 48 KB of static shared memory: the launch asks for
    their total dynamically, the kernel declares none statically, and the results stay the
    reference's on lockstep, cuda-host and the GPU (which opts the kernel in)."""
    needs(backend)
    m, n, k = dims
    graph = parse_source(HALF_GEMM.format(t=dtype, m=m, n=n, k=k), "g.graph", ".graph")
    exe = irkit.compile(
        graph, _default_cuda_with("gpu-tile-matmul{block-k=64 fill-sms=false}"), backend
    )
    (kernel,) = [r for r in exe.kernels if r.launch["mapping"] == "tiled"]  # type: ignore[index]
    assert kernel.launch["shared"] > 48 * 1024  # type: ignore[index]
    assert kernel.resources["shared_bytes"] == 0, kernel.resources
    assert "extern __shared__ __align__(16) unsigned char irkit_dynamic_shared[];" in kernel.source
    checks, _ = check(exe, graph, seed=3)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


def test_lockstep_refuses_an_ldmatrix_whose_base_differs_between_lanes() -> None:
    """ldmatrix's lanes take their row addresses from one warp-uniform base (the GPU derives
    each lane's address from it): a base that varies by lane is refused, not run as if each
    lane loaded its own rows."""
    graph = parse_source(HALF_GEMM.format(t="f16", m=16, n=16, k=16), "g.graph", ".graph")
    module = apply_passes(graph, parse_passes(_default_cuda_with("gpu-tile-matmul{ldmatrix=true}")))
    from xdsl.dialects import arith

    from irkit.dialects.warp import LdmatrixX4Op

    fn = gpu_kernels(module)[0]
    load = next(op for op in fn.walk() if isinstance(op, LdmatrixX4Op))
    tid = next(op for op in fn.walk() if isinstance(op, gpu.ThreadIdOp)).result
    c2 = arith.ConstantOp.from_int_and_width(2, tid.type)
    lane_row = arith.DivUIOp(tid, c2.result)  # rows 0..15 by lane: not uniform
    load.parent_block().insert_ops_before([c2, lane_row], load)  # type: ignore[union-attr]
    load.operands[-2] = lane_row.result
    x = np.ones((16, 16), np.float16)
    with pytest.raises(LockstepError, match="base that differs between the lanes of a warp"):
        _run(module, fn.sym_name.data, [x, x, np.zeros((16, 16), np.float16)])


@pytest.mark.parametrize("backend", HOST_AND_GPU)
@pytest.mark.parametrize("dims", [(70, 52, 40), (64, 64, 64), (36, 200, 24)])
def test_vector_stores_of_c_match_the_reference(dims, backend: str) -> None:
    """16-byte stores of C with an epilogue (bias, GELU), N a multiple of 4 but not of the
    block (the group's one bounds check), M ragged; the same values as scalar stores."""
    needs(backend)
    m, n, k = dims
    text = (f"model v\ninput a : f32[{m}, {k}]\nparam w : f32[{k}, {n}]\nparam bias : f32[{n}]\n"
            "output y = gelu(matmul(a, w) + bias)\n")  # fmt: skip
    graph = parse_source(text, "v.graph", ".graph")
    exe = irkit.compile(graph, _default_cuda_with("gpu-tile-matmul{vector-stores=true}"), backend)
    tiled = [r for r in exe.kernels if r.launch["mapping"] == "tiled"]  # type: ignore[index]
    assert tiled and all("*reinterpret_cast<float4*>(&out0[" in r.source for r in tiled)
    assert all(r.resources["spill_stores"] == 0 for r in exe.kernels)
    checks, _ = check(exe, graph, seed=4)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    scalar = irkit.compile(graph, "default-cuda", backend)  # scalar stores by default
    assert all("float4*>(&out0[" not in r.source for r in scalar.kernels)
    inputs = irkit.random_inputs(graph, seed=2)
    for a, b in zip(exe(*inputs), scalar(*inputs), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", HOST_AND_GPU)
@pytest.mark.parametrize("dims", [(70, 52, 40), (128, 64, 96)])
def test_tf32_is_opt_in_and_held_to_its_tolerance(dims, backend: str) -> None:
    """gpu-tile-matmul{tf32=true}: f32 matmuls on TF32 mma.sync m16n8k8 (cvt.rna in the
    PTX), the inputs really rounded (the result misses f32's 1e-4 and meets TF32's 2e-3,
    which the check applies because the program holds a TF32 op); off by default."""
    needs(backend)
    from irkit.dialects.warp import a_coordinates_tf32, b_coordinates_tf32
    from irkit.runtime.check import compare, reference_case

    assert [a_coordinates_tf32(5, i) for i in range(4)] == [(1, 1), (9, 1), (1, 5), (9, 5)]
    assert [b_coordinates_tf32(5, i) for i in range(2)] == [(1, 1), (5, 1)]
    m, n, k = dims
    graph = irkit.load("examples/gemm.graph", {"M": m, "N": n, "K": k})
    exe = irkit.compile(graph, _default_cuda_with("gpu-tile-matmul{tf32=true}"), backend)
    (kernel,) = exe.kernels
    from irkit.codegen.nvrtc import compile_ptx

    ptx = compile_ptx(kernel.source, kernel.name)
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx and "cvt.rna.tf32.f32" in ptx
    checks, _ = check(exe, graph, seed=6)
    assert all(c.passed and c.tolerance == 2e-3 for c in checks), [c.describe() for c in checks]
    inputs, expected = reference_case(graph, 6)
    (got,) = exe(*inputs)
    assert not compare("c", got, expected[0], np.dtype(np.float32), 1e-4).passed
    default = irkit.compile(graph, "default-cuda", backend)
    assert all("mma" not in r.source for r in default.kernels)
    checks, _ = check(default, graph, seed=6)
    assert all(c.passed and c.tolerance == 1e-4 for c in checks)


COARSEN_MODELS = {
    # 40000 points: 4 to a thread, the last block ragged (reads at point 0, stores skipped)
    "ragged": "model c\ninput x : f32[40, 1000]\nparam b : f32[1000]\noutput y = gelu(x + b)\n",
    # 65536 points: the launch covers them exactly (no guards); f16 in, f32 arithmetic
    "exact": "model c\ninput x : f16[64, 1024]\ninput z : f16[64, 1024]\noutput y = tanh(x) * z\n",
    # two outputs from one fused kernel, a broadcast along rows, and a softmax left to rows
    "mixed": "model c\ninput x : f32[96, 500]\nparam b : f32[96, 1]\n"
    "output y = exp(x - b)\noutput z = relu(x) + x\noutput s = softmax(x, axis=-1)\n",
}


@pytest.mark.parametrize("backend", HOST_AND_GPU)
@pytest.mark.parametrize("model", sorted(COARSEN_MODELS))
def test_gpu_coarsen_matches_the_reference_and_one_point_per_thread(
    model: str, backend: str
) -> None:
    """gpu-coarsen (several points per thread, the body's ops interleaved across them):
    equal to the reference and bit-identical to the same pipeline without it; every flat
    kernel coarsened ("flat xF") with a quarter of the blocks or fewer, rows kernels left."""
    needs(backend)
    from irkit.pipelines import PIPELINES

    graph = parse_source(COARSEN_MODELS[model], "c.graph", ".graph")
    steps = list(PIPELINES["default-cuda"].passes)
    plain = irkit.compile(graph, ",".join(steps), backend)
    steps.insert(steps.index("map-to-gpu"), "gpu-coarsen{sms=1}")
    coarse = irkit.compile(graph, ",".join(steps), backend)
    mappings = {k.name: k.launch["mapping"] for k in coarse.kernels}  # type: ignore[index]
    before = {k.name: k.launch for k in plain.kernels}
    assert any(m.startswith("flat x") for m in mappings.values()), mappings
    for k in coarse.kernels:
        assert k.launch["mapping"] == before[k.name]["mapping"] or (  # type: ignore[index]
            before[k.name]["mapping"] == "flat"
            and k.launch["mapping"] == "flat x4"  # type: ignore[index]
            and 4 * k.launch["grid"][0] <= before[k.name]["grid"][0] + 3  # type: ignore[index]
        ), (k.name, k.launch, before[k.name])
    checks, _ = check(coarse, graph, seed=11)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    inputs = irkit.random_inputs(graph, seed=12)
    for a, b in zip(coarse(*inputs), plain(*inputs), strict=True):
        np.testing.assert_array_equal(a, b)


def test_gpu_coarsen_keeps_small_kernels_and_checks_its_options() -> None:
    """At sms=132 a kernel that could not fill the device coarsened is left one point per
    thread; the factor halves to what still fills it; bad options are one-line errors."""
    from irkit.passes.map_to_gpu import GpuCoarsenPass

    p = GpuCoarsenPass()
    assert p.factor_for(40_000) == 1
    assert p.factor_for(4096 * 4096) == 4
    assert p.factor_for(132 * 2048 * 2) == 2  # 2 points a thread still gives 1056 blocks
    graph = parse_source(COARSEN_MODELS["ragged"], "c.graph", ".graph")
    module = apply_passes(
        graph, parse_passes("fuse-kernels,lower-graph-to-loops,gpu-coarsen,map-to-gpu")
    )
    assert [launch_of(f)["mapping"] for f in gpu_kernels(module)] == ["flat"]  # type: ignore[index]
    for bad in ("factor=0", "factor=17", "sms=0", "block-size=100"):
        with pytest.raises(IrkitError, match=bad.split("=")[0]):
            parse_passes(f"gpu-coarsen{{{bad}}}")


@pytest.mark.parametrize("backend", HOST_AND_GPU)
def test_min_blocks_bounds_registers_and_keeps_the_result(backend: str) -> None:
    """gpu-tile-matmul{min-blocks=2}: __launch_bounds__(256, 2) in the source, NVRTC keeps
    the tiled kernel at <= 128 registers, and the result is the unbounded kernel's, bit for
    bit (ragged M; fill-sms=false keeps the 128 x 128 tiles' 256 threads)."""
    needs(backend)
    graph = irkit.load("examples/gemm.graph", {"M": 200, "N": 256, "K": 128})
    bounded = irkit.compile(
        graph, _default_cuda_with("gpu-tile-matmul{min-blocks=2 fill-sms=false}"), backend
    )
    (tiled,) = [k for k in bounded.kernels if k.launch["mapping"] == "tiled"]  # type: ignore[index]
    assert "__launch_bounds__(256, 2)" in tiled.source
    assert tiled.resources["registers"] <= 128, tiled.resources
    checks, _ = check(bounded, graph, seed=8)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    plain = irkit.compile(graph, _default_cuda_with("gpu-tile-matmul{fill-sms=false}"), backend)
    inputs = irkit.random_inputs(graph, seed=9)
    for a, b in zip(bounded(*inputs), plain(*inputs), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", HOST_AND_GPU)
def test_a_kernel_added_after_a_mapping_pass_is_mapped_too(backend: str) -> None:
    """gpu-tile-matmul maps its matmuls; a pass after it that adds a loop-level kernel (here
    a plant, as a researcher's pass would) leaves that one unmapped, and the backend's own
    map-to-gpu maps it: the program compiles and is right (it was refused, "CUDA C needs
    GPU-mapped IR", while any kernel was mapped)."""
    import irkit.measure.plants  # noqa: F401 (registers the plants)

    needs(backend)
    module = irkit.load(Path("examples/mlp.graph"), SMALL["mlp"])
    spec = "fuse-kernels,lower-graph-to-loops,pad-leading-dims,gpu-tile-matmul,plant-work{iters=7}"
    exe = irkit.compile(module, spec, backend=backend)
    checks, _ = check(exe, module, seed=3)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    assert "planted_work" in {k.name for k in exe.kernels}
    assert all(k.launch for k in exe.kernels)


def test_cuda_sim_refuses_a_launch_too_big_to_interpret_before_making_inputs(monkeypatch) -> None:
    """A lockstep interpretation holds every SSA value over every lane, and five shadows an
    element for the race check: a program that would not fit the run's memory limit is an
    IrkitError from `irkit.compile`, naming the kernel and what it needs, not a MemoryError
    (or the kernel's OOM killer) mid-run."""
    import irkit
    from irkit.errors import IrkitError
    from irkit.runtime.cuda_sim import lockstep_bytes

    monkeypatch.setenv("IRKIT_MAX_MEMORY", "64M")
    module = irkit.load("examples/softmax.graph", {"R": 4096, "C": 1024})
    with pytest.raises(IrkitError) as e:
        irkit.compile(module, "default-cuda", "cuda-sim")
    assert "@k0_softmax" in str(e.value) and "over the limit of 64 MiB" in str(e.value)
    small = irkit.load("examples/softmax.graph", {"R": 4, "C": 64})
    exe = irkit.compile(small, "default-cuda", "cuda-sim")  # the same program, small: runs
    kernel = next(op for op in exe.module.ops if getattr(op, "sym_name", None) and op.sym_name.data == "k0_softmax")  # fmt: skip
    need, said = lockstep_bytes(kernel, check_races=True)
    assert 0 < need < 64 << 20 and "race shadows for" in said


@pytest.mark.parametrize("backend", ["cuda-sim", "cuda-host"])
@pytest.mark.parametrize("slip", ["ldmatrix", "mma"])
def test_a_planted_fragment_slip_fails_on_both_host_paths(backend: str, slip: str) -> None:
    """The host paths prove the fragment layouts only if a layout slip fails on them: one
    ldmatrix with two of its matrices swapped, or one mma with A's values 0 and 2 swapped,
    gives a wrong product on lockstep and on cuda-host (the unplanted module, the control,
    matches)."""
    from irkit.dialects.graph.base import int_array
    from irkit.dialects.warp import LdmatrixX4Op, MmaM16n8k16Op
    from irkit.runtime import BACKENDS

    graph = parse_source(HALF_GEMM.format(t="f16", m=64, n=64, k=64), "g.graph", ".graph")
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((64, 64)).astype(np.float16) for _ in range(2))
    expected = a.astype(np.float32) @ b.astype(np.float32)
    chosen = BACKENDS[backend]()

    def run(plant: bool) -> np.ndarray:
        module = apply_passes(graph.clone(), parse_passes("default-cuda"))
        if plant:
            if slip == "ldmatrix":
                op = next(o for o in module.walk() if isinstance(o, LdmatrixX4Op))
                (r0, c0), (r1, c1), *rest = op.origins
                flat = [r1, c1, r0, c0, *[x for rc in rest for x in rc]]
                op.properties["offsets"] = int_array(flat)
            else:
                op = next(o for o in module.walk() if isinstance(o, MmaM16n8k16Op))
                first, second = op.operands[0], op.operands[2]  # rows g and g + 8 of A
                op.operands[0], op.operands[2] = second, first
        exe = chosen.compile(chosen.lower(module))
        return np.asarray(exe(a, b)[0], np.float32)

    assert np.allclose(run(plant=False), expected, rtol=2e-2, atol=2e-1)
    assert not np.allclose(run(plant=True), expected, rtol=2e-2, atol=2e-1)
