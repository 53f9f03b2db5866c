"""8-bit floats on tensor cores without a GPU: `scaled_matmul` under `gpu-tile-matmul` as
mma.sync m16n8k32 (`irkit.passes.gpu_tile_fp8`). The fragment layout is PTX's and byte for
byte m16n8k16's (so ldmatrix loads it); the kernels match the reference on both host paths
at ragged shapes, in every pair of formats, with A and B packed where they must be; the
options that leave no ring leave the nest to map-to-gpu; a planted fragment slip fails on
lockstep and cuda-host; the SASS is QMMA (sm_89's 8-bit instruction) fed by LDSM and LDGSTS,
and on sm_90, where mma.sync has no 8-bit form in hardware, ptxas's F2FP unpacking and
HMMA. The IR's shape: tests/filecheck/passes/gpu-tile-matmul-fp8.graph."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import arith, func

import irkit
from irkit.dialects.warp import (
    LdmatrixX4Op,
    MmaM16n8k32F8Op,
    a_coordinates,
    a_coordinates_f8,
    b_coordinates,
    b_coordinates_f8,
)
from irkit.dtypes import NUMPY, to_fp8
from irkit.frontend import parse_source
from irkit.loops import ONCE_ATTR
from irkit.pipelines import apply_passes, parse_passes, pipeline_steps
from irkit.runtime.check import check

HOST_AND_GPU = ["cuda-sim", "cuda-host", pytest.param("cuda", marks=pytest.mark.gpu)]
LINEAR = """model fp8_linear
input x : {a}[{m}, {k}]
{kind} w : {b}[{k}, {n}]
input sx : f32[]
param sw : f32[1]
output y = cast(scaled_matmul(x, w, sx, sw), dtype=bf16)
"""


def _graph(a="f8e4m3", b="f8e4m3", m=40, n=24, k=64, kind="param"):
    text = LINEAR.format(a=a, b=b, m=m, n=n, k=k, kind=kind)
    return parse_source(text, "f8.graph", ".graph")


def _with(options: str) -> str:
    """default-cuda with gpu-tile-matmul given `options`."""
    steps = [s.spec for s in pipeline_steps("default-cuda")]
    return ",".join(f"gpu-tile-matmul{{{options}}}" if s.startswith("gpu-tile-matmul") else s
                    for s in steps)  # fmt: skip


def _ops(module, kind) -> list:
    return [op for op in module.walk() if isinstance(op, kind)]


def test_the_8_bit_fragments_are_ptxs_and_m16n8k16s_bytes() -> None:
    """PTX's m16n8k32 figures for lane 5 (g=1, t=1); A (16 x 32) and B (32 x 8) each covered
    once by the 32 lanes; and register r of a lane holds the same 4 bytes of the same row
    as register r of m16n8k16's fragment (two 2-byte values), which is why ldmatrix, a
    16-bit load, gives the 8-bit fragments unchanged."""
    assert [a_coordinates_f8(5, i) for i in range(16)] == [
        (1, 4), (1, 5), (1, 6), (1, 7), (9, 4), (9, 5), (9, 6), (9, 7),
        (1, 20), (1, 21), (1, 22), (1, 23), (9, 20), (9, 21), (9, 22), (9, 23),
    ]  # fmt: skip
    assert [b_coordinates_f8(5, i) for i in range(8)] == [
        (4, 1), (5, 1), (6, 1), (7, 1), (20, 1), (21, 1), (22, 1), (23, 1)
    ]  # fmt: skip
    for where, count, shape in ((a_coordinates_f8, 16, (16, 32)), (b_coordinates_f8, 8, (32, 8))):
        cells = sorted(where(lane, i) for lane in range(32) for i in range(count))
        assert cells == [(r, c) for r in range(shape[0]) for c in range(shape[1])]
    for lane in range(32):
        for r in range(4):  # A: (row, byte) of 8-bit value 4r + q, and of 16-bit value 2r
            row, column = a_coordinates(lane, 2 * r)
            assert [a_coordinates_f8(lane, 4 * r + q) for q in range(4)] == [
                (row, 2 * column + q) for q in range(4)
            ]
        for r in range(2):  # B: (byte of k, column)
            k, column = b_coordinates(lane, 2 * r)
            assert [b_coordinates_f8(lane, 4 * r + q) for q in range(4)] == [
                (2 * k + q, column) for q in range(4)
            ]


@pytest.mark.parametrize("backend", HOST_AND_GPU)
@pytest.mark.parametrize(
    ("a", "b", "dims"),
    [
        ("f8e4m3", "f8e4m3", (40, 24, 64)),  # one k tile, A in place
        ("f8e4m3", "f8e5m2", (33, 17, 100)),  # ragged everything: A copied to aligned rows
        ("f8e5m2", "f8e4m3", (1, 130, 96)),  # one row (no GEMV for 8 bits), an odd 8-column piece
        ("f8e5m2", "f8e5m2", (72, 40, 320)),  # more k tiles than stages, a ragged last one
    ],
)
def test_8_bit_tiles_match_the_reference_at_ragged_shapes(backend, a, b, dims) -> None:
    if backend == "cuda":
        from tests.test_cuda_path import needs

        needs(backend)
    m, n, k = dims
    graph = _graph(a, b, m, n, k)
    exe = irkit.compile(graph, "default-cuda", backend)
    checks, _ = check(exe, graph, seed=3)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    assert _ops(exe.module, MmaM16n8k32F8Op), "the matmul is not on the 8-bit tensor cores"
    assert {op.narrow_type for op in _ops(exe.module, LdmatrixX4Op)} == {"f8"}
    names = [op.sym_name.data for op in exe.module.ops if isinstance(op, func.FuncOp)]
    assert any(name.endswith("_pack_b") for name in names)
    assert any(name.endswith("_pack_a") for name in names) == (k % 16 != 0)


def test_b_is_packed_once_when_a_weight_and_every_call_otherwise() -> None:
    """B^T is a prepared buffer where B is a param (its pack kernel `irkit.once`, run at
    bind by a bound executable), and an intermediate of every call where B is an input."""
    for kind, once in (("param", True), ("input", False)):
        module = apply_passes(_graph(kind=kind), parse_passes("default-cuda"))
        (pack,) = [op for op in module.ops if isinstance(op, func.FuncOp)
                   and op.sym_name.data.endswith("_pack_b")]  # fmt: skip
        assert (ONCE_ATTR in pack.attributes) == once, kind
    graph = _graph(kind="input")
    exe = irkit.compile(graph, "default-cuda", "cuda-host")
    checks, _ = check(exe, graph, seed=1)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


@pytest.mark.parametrize(
    "options", ["async-copy=false", "tensor-cores=false", "ldmatrix=false", "vector-loads=false"]
)
def test_options_without_the_ring_leave_8_bits_to_map_to_gpu(options: str) -> None:
    """An 8-bit tile needs the cp.async ring and ldmatrix (or wgmma): without them the nest
    is mapped a thread an output, its bytes widened one by one, still right; with
    `wgmma=true` too, `ldmatrix=false` still tiles (wgmma reads the core matrices)."""
    graph = _graph(m=33, n=17, k=100)
    exe = irkit.compile(graph, _with(options), "cuda-host")
    checks, _ = check(exe, graph, seed=2)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    assert not _ops(exe.module, MmaM16n8k32F8Op)
    widened = [op for op in exe.module.walk() if isinstance(op, arith.ExtFOp)]
    assert any("f8" in str(op.input.type) for op in widened), "the bytes were not read in place"
    if options == "ldmatrix=false":
        from irkit.dialects.warp_async import WgmmaOp

        both = apply_passes(graph.clone(), parse_passes(_with("ldmatrix=false wgmma=true")))
        assert _ops(both, WgmmaOp)


@pytest.mark.parametrize("backend", ["cuda-sim", "cuda-host"])
@pytest.mark.parametrize("slip", ["ldmatrix", "mma"])
def test_a_planted_8_bit_fragment_slip_fails_on_both_host_paths(backend: str, slip: str) -> None:
    """One ldmatrix of A with its first two matrices swapped (rows g and g + 8), or one mma
    with A's registers 0 and 2 swapped (k 4t and 16 + 4t): a wrong product on lockstep and
    on cuda-host; the unplanted module, the control, is right."""
    from irkit.dialects.graph.base import int_array

    def plant(module) -> None:
        if slip == "ldmatrix":
            op = _ops(module, LdmatrixX4Op)[0]
            (r0, c0), (r1, c1), *rest = op.origins
            op.properties["offsets"] = int_array([r1, c1, r0, c0, *[v for rc in rest for v in rc]])
        else:
            op = _ops(module, MmaM16n8k32F8Op)[0]
            op.operands[0], op.operands[2] = op.operands[2], op.operands[0]

    _slip_fails(backend, "default-cuda", plant)


def _slip_fails(backend: str, pipeline: str, plant) -> None:
    """A 64 x 32 x 64 e4m3 gemm under `pipeline` on `backend`: right as compiled, wrong once
    `plant` has changed its module."""
    from irkit.runtime import BACKENDS

    graph = _graph(m=64, n=32, k=64, kind="input")
    rng = np.random.default_rng(0)
    x = to_fp8(rng.standard_normal((64, 64)), "f8e4m3")
    w = to_fp8(rng.standard_normal((64, 32)), "f8e4m3")
    one = np.array(1.0, np.float32)
    expected = x.astype(np.float32) @ w.astype(np.float32)
    chosen = BACKENDS[backend]()

    def run(planted: bool) -> np.ndarray:
        module = apply_passes(graph.clone(), parse_passes(pipeline))
        if planted:
            plant(module)
        exe = chosen.compile(chosen.lower(module))
        return np.asarray(exe(x, w, one, one[None])[0], np.float32)

    assert np.allclose(run(planted=False), expected, rtol=2e-2, atol=2e-1)
    assert not np.allclose(run(planted=True), expected, rtol=2e-2, atol=2e-1)


def test_an_8_bit_kernel_is_not_built_before_sm_89() -> None:
    """sm_80 has no 8-bit mma.sync: compiling for it is one line naming the kernel, the
    architecture and the option that avoids it; `-t resources` says so per kernel."""
    from irkit.codegen.cuda import gpu_kernels, kernel_source
    from irkit.codegen.nvrtc import compile_cuda
    from irkit.errors import IrkitError

    module = apply_passes(_graph(), parse_passes("default-cuda"))
    (fn,) = [k for k in gpu_kernels(module) if _ops(k, MmaM16n8k32F8Op)]
    with pytest.raises(IrkitError, match=r"sm_80: 8-bit mma.sync needs sm_89.*tensor-cores=false"):
        compile_cuda(kernel_source(module, fn), fn.sym_name.data, "sm_80")
    assert compile_cuda(kernel_source(module, fn), fn.sym_name.data, "sm_89").resources


def test_fp8_dtypes_round_trip_through_the_tiles_exactly() -> None:
    """Every product of two 8-bit values is exact in f32, so a k of one 32-wide step of
    small integers (exact in both formats) sums exactly: the tiled kernel's result is
    the reference's to the bit before the cast (checked on cuda-host in f32)."""
    text = (
        "model e\ninput x : f8e4m3[16, 32]\ninput w : f8e5m2[32, 8]\ninput sx : f32[]\n"
        "input sw : f32[1]\noutput y = scaled_matmul(x, w, sx, sw)\n"
    )
    graph = parse_source(text, "e.graph", ".graph")
    exe = irkit.compile(graph, "default-cuda", "cuda-host")
    assert _ops(exe.module, MmaM16n8k32F8Op)
    rng = np.random.default_rng(5)
    x = rng.integers(-8, 9, (16, 32)).astype(NUMPY["f8e4m3"])
    w = rng.integers(-8, 9, (32, 8)).astype(NUMPY["f8e5m2"])
    got = np.asarray(exe(x, w, np.float32(0.5), np.array([2.0], np.float32))[0])
    want = x.astype(np.float32) @ w.astype(np.float32)
    assert np.array_equal(got, want)


@pytest.mark.parametrize(
    ("arch", "mma"), [("sm_89", "QMMA.16832.F32.E4M3.E5M2"), ("sm_90", "HMMA.16816.F32")]
)
def test_the_8_bit_sass_is_ldsm_ldgsts_and_qmma_without_spills(
    arch: str, mma: str, tmp_path
) -> None:
    """1024^3, e4m3 x e5m2, default tiles (64 bytes of k, four stages), split-K off: per k
    tile a warp's 4 x 4 instructions twice, 32 QMMA on sm_89, fed by 12 LDSM (4 of A and 2
    of B a k step) and the LDGSTS of the ring (ptxas unrolls the k loop, so the counts are
    multiples); no register-staged copy, no global load but the two scales, no local
    memory. sm_90 has no 8-bit mma.sync in hardware: ptxas unpacks the bytes to f16 (F2FP)
    and issues two HMMA.16816 for each m16n8k32 (Hopper's 8-bit tensor cores are wgmma's)."""
    from irkit.codegen.cuda import gpu_kernels, kernel_source
    from irkit.codegen.nvrtc import compile_cuda
    from tests.test_sass import _disassemble, _opcodes

    graph = _graph("f8e4m3", "f8e5m2", 1024, 1024, 1024, kind="input")
    module = apply_passes(graph, parse_passes(_with("split-k=1")))
    (fn,) = [k for k in gpu_kernels(module) if _ops(k, MmaM16n8k32F8Op)]
    compiled = compile_cuda(kernel_source(module, fn), fn.sym_name.data, arch)
    cubin = tmp_path / f"{arch}.cubin"
    cubin.write_bytes(compiled.cubin)
    ops = _opcodes(_disassemble(cubin))
    per = 32 if arch == "sm_89" else 64  # a warp's instructions a k tile
    tiles = ops[mma] // per  # k tiles in the SASS (ptxas unrolls the loop)
    assert tiles >= 1 and ops[mma] == per * tiles and ops["LDSM.16.M88.4"] == 12 * tiles, ops
    assert ops["LDGSTS.E.BYPASS.128"] > 0, ops
    assert ("F2FP.F16.E4M3.UNPACK_B" in ops) == (arch == "sm_90"), ops
    loads = [op for op in ops if op.startswith("LDG.")]  # the two scales, nothing staged
    assert loads == ["LDG.E.CONSTANT"] and ops[loads[0]] == 2, ops
    assert not any(op.startswith(("STS", "LDS.", "LDL", "STL")) or op == "LDS" for op in ops), ops
    assert compiled.resources.spill_stores == 0, compiled.resources


@pytest.mark.parametrize("backend", HOST_AND_GPU)
@pytest.mark.parametrize(
    ("a", "b", "dims"),
    [("f8e4m3", "f8e5m2", (100, 72, 128)), ("f8e5m2", "f8e4m3", (33, 17, 100)),
     ("f8e4m3", "f8e4m3", (130, 136, 320))],
)  # fmt: skip
def test_8_bit_wgmma_matches_the_reference(backend, a, b, dims) -> None:
    """`wgmma=true`: warpgroups of m64nNk32 on K-major byte core matrices (layout "kmajor"),
    filled by the cp.async ring, right at ragged shapes on both host paths."""
    from irkit.dialects.warp_async import WgmmaOp

    if backend == "cuda":
        from tests.test_cuda_path import needs

        needs(backend)
    graph = _graph(a, b, *dims)
    exe = irkit.compile(graph, _with("wgmma=true"), backend)
    checks, _ = check(exe, graph, seed=6)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    wgmmas = _ops(exe.module, WgmmaOp)
    assert wgmmas and {op.tiles for op in wgmmas} == {"kmajor"} and {op.k for op in wgmmas} == {32}
    assert not _ops(exe.module, MmaM16n8k32F8Op)


@pytest.mark.parametrize("backend", ["cuda-sim", "cuda-host"])
def test_a_planted_8_bit_wgmma_slip_fails_on_both_host_paths(backend: str) -> None:
    """One wgmma reading A from the next k core matrix (16 bytes of k off): wrong on both
    host paths, the control right."""
    from irkit.dialects.warp_async import WgmmaOp

    def plant(module) -> None:
        op = _ops(module, WgmmaOp)[0]
        k_core = list(op.a_indices)[-3]
        successor = [o for o in _ops(module, WgmmaOp) if list(o.a_indices)[-3] is not k_core]
        op.operands[1 + len(op.a_indices) - 3] = list(successor[0].a_indices)[-3]

    _slip_fails(backend, _with("wgmma=true"), plant)


def test_the_8_bit_wgmma_sass_is_qgmma_without_spills(tmp_path) -> None:
    """sm_90a, 1024^3, 128 x 128 tiles (fill-sms off), split-K off: QGMMA.64x128x32 on e4m3 x
    e5m2, two a k tile (64 bytes) for each warpgroup, behind WARPGROUP.ARRIVE, the tiles by
    LDGSTS; no spills."""
    from irkit.codegen.cuda import gpu_kernels, kernel_source
    from irkit.codegen.nvrtc import compile_cuda
    from irkit.dialects.warp_async import WgmmaOp
    from tests.test_sass import _disassemble, _opcodes

    graph = _graph("f8e4m3", "f8e5m2", 1024, 1024, 1024, kind="input")
    module = apply_passes(graph, parse_passes(_with("wgmma=true split-k=1 fill-sms=false")))
    (fn,) = [k for k in gpu_kernels(module) if _ops(k, WgmmaOp)]
    compiled = compile_cuda(kernel_source(module, fn), fn.sym_name.data, "sm_90")
    assert compiled.arch == "sm_90a"
    cubin = tmp_path / "sm_90a.cubin"
    cubin.write_bytes(compiled.cubin)
    text = _disassemble(cubin)
    assert text.count("QGMMA.64x128x32.F32.E4M3.E5M2") == 2 * 1024 // 64, text.count("QGMMA")
    ops = _opcodes(text)
    assert ops["WARPGROUP.ARRIVE"] > 0 and ops["LDGSTS.E.BYPASS.128"] > 0, ops
    assert not any(op.startswith(("LDSM", "HMMA", "LDL", "STL")) for op in ops), ops
    assert compiled.resources.spill_stores == 0, compiled.resources


@pytest.mark.parametrize("options", ["", "wgmma=true"])
def test_8_bit_kernels_report_their_resources_without_spills(options: str, tmp_path) -> None:
    """`irkit-opt -t resources` on a 1024^3 `scaled_matmul` (its pack kernel, the tiled
    kernel and split-K's sum): every kernel built for sm_90 (sm_90a under wgmma) without a
    spill, the 8-bit tensor-core kernel said not built for sm_80, with the reason."""
    from tests.test_sass import resources

    model = tmp_path / "f8.graph"
    model.write_text(LINEAR.format(a="f8e4m3", b="f8e5m2", m=1024, n=1024, k=1024, kind="param"))
    spec = _with(options) if options else "default-cuda"
    lines = resources(model, spec)
    tiled = [line for line in lines if line.startswith("k0_scaled_matmul_cast ")]
    why = "wgmma needs sm_90a" if options else "8-bit mma.sync needs sm_89 or later"
    assert len(tiled) == 2 and f"sm_80: not built ({why}" in tiled[0], tiled
    hopper = "sm_90a" if options else "sm_90"
    assert tiled[1].startswith(f"k0_scaled_matmul_cast {hopper}: "), tiled
    built = [line for line in lines if "not built" not in line]
    assert len(built) == len(lines) - 1 and all(" 0 spill stores" in line for line in built), lines
    assert any("_pack_b sm_80:" in line for line in built), lines
