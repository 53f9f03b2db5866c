"""The loop-level optimization passes against the float64 reference: cpu-tile-matmul (real
llvmlite JIT), expand-math (ulp error over the f32 range), gpu-tile-matmul (real NVRTC and
the lockstep interpretation). Shapes are chosen so that every remainder path runs."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from xdsl.dialects import scf, vector

import irkit
from irkit.codegen.cuda import gpu_kernels, kernel_source
from irkit.codegen.nvrtc import compile_cuda
from irkit.errors import IrkitError
from irkit.frontend import parse_source
from irkit.loops import SHARED_SPACE, launch_of
from irkit.pipelines import PIPELINES, apply_passes, parse_passes
from irkit.runtime.check import check
from irkit.runtime.reference import random_inputs

EPILOGUES = {
    "plain": "output y = matmul(a, w)",
    "bias_relu": "output y = relu(matmul(a, w) + bias)",
    "gelu_residual": "output y = gelu(matmul(a, w) + bias) + r",
}


def matmul_model(m: int, n: int, k: int, epilogue: str = "bias_relu", dtype: str = "f32"):
    text = (
        f"model mm\ninput a : {dtype}[{m}, {k}]\nparam w : {dtype}[{k}, {n}]\n"
        f"param bias : {dtype}[{n}]\ninput r : {dtype}[{m}, {n}]\n{EPILOGUES[epilogue]}\n"
    )
    return parse_source(text, "mm.graph", ".graph")


def assert_matches(module, spec: str, backend: str, seed: int = 0) -> None:
    exe = irkit.compile(module, spec, backend=backend)
    checks, _ = check(exe, module, seed=seed)
    assert all(c.passed for c in checks), (spec, [c.describe() for c in checks])


# --- cpu-tile-matmul ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "m,n,k",
    [(12, 64, 5), (13, 100, 7), (1, 17, 3), (5, 15, 9), (31, 200, 33), (6, 128, 1),
     (7, 8, 5), (9, 12, 9), (13, 24, 4), (5, 44, 3)],
)  # fmt: skip
@pytest.mark.parametrize("epilogue", sorted(EPILOGUES))
def test_cpu_tile_matmul_matches_the_reference(m: int, n: int, k: int, epilogue: str) -> None:
    """Panels, a whole-vector tail, a tail of half and quarter vectors (8, 12, 24 and 44
    columns: 8 + 4 past the whole vectors) and the scalar columns none covers."""
    module = matmul_model(m, n, k, epilogue)
    spec = "fuse-kernels,lower-graph-to-loops,cpu-tile-matmul"
    tiled = apply_passes(module.clone(), parse_passes(spec))
    # the nest was rewritten (it had a whole vector of the host's columns, or narrow vectors
    # covering all it had)
    from irkit.passes.cpu_tile_matmul import CpuTileMatmulPass
    from irkit.passes.cpu_tile_policy import narrow_tail

    lanes = CpuTileMatmulPass().resolved().vector_bits // 32
    has_fma = any(isinstance(op, vector.FMAOp) for op in tiled.walk())
    assert has_fma == (n >= lanes or bool(narrow_tail(n, lanes)))
    assert_matches(module, spec, "cpu", seed=m + n + k)


@pytest.mark.parametrize(
    "options",
    [
        "mr=1 nr=16",
        "mr=4 nr=32 pack=false",
        "mr=3 nr=24 vector-bits=256",
        "mr=2 nr=8 vector-bits=128",
    ],
)
def test_cpu_tile_matmul_options_stay_correct(options: str) -> None:
    module = matmul_model(11, 70, 13, "gelu_residual")
    assert_matches(module, f"fuse-kernels,lower-graph-to-loops,cpu-tile-matmul{{{options}}}", "cpu")


def test_cpu_tile_matmul_handles_f64_with_eight_lanes() -> None:
    module = matmul_model(7, 40, 9, "bias_relu", dtype="f64")
    spec = "fuse-kernels,lower-graph-to-loops,cpu-tile-matmul{nr=16 vector-bits=512}"
    tiled = apply_passes(module.clone(), parse_passes(spec))
    lanes = {op.result.type.get_shape()[0] for op in tiled.walk() if isinstance(op, vector.LoadOp)}
    assert lanes == {8}
    assert_matches(module, spec, "cpu")


@pytest.mark.parametrize("threads", [1, 2])
def test_weights_are_packed_once_per_bind(threads: int) -> None:
    """A param B is packed by an irkit.once kernel: a bound executable runs it at bind and
    its graph reads the packed copy (changing the bound weight afterwards changes nothing;
    clearing the packed buffer does), while a plain call packs the weights it is given."""
    module = matmul_model(13, 128, 7)  # two whole panels of 64: no tail columns read w itself
    spec = ("fuse-kernels,lower-graph-to-loops,cpu-tile-matmul{vector-bits=512 nr=64},"
            f"cpu-parallelize{{threads={threads} min-work=0}}")  # fmt: skip
    exe = irkit.compile(module, spec, backend="cpu")
    assert [k.once for k in exe.kernels] == [True, False]
    rng = np.random.default_rng(0)
    a, w, bias = (rng.standard_normal(s).astype(np.float32) for s in ((13, 7), (7, 128), (128,)))
    r = rng.standard_normal((13, 128)).astype(np.float32)
    expected = np.maximum(a.astype(np.float64) @ w + bias, 0)
    (y,) = exe(a, w, bias, r)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    (y2,) = exe(a, -w, bias, r)  # the plain call packs the weights of this call
    np.testing.assert_allclose(
        y2, np.maximum(a.astype(np.float64) @ -w + bias, 0), rtol=1e-5, atol=1e-5
    )

    bound = exe.bind(a, w, bias, r)
    arrays = {x.ctypes.data: x for x in bound.keep}
    bound.run_graph()
    np.testing.assert_array_equal(bound.outputs[0], y)
    arrays[bound.args[1]][...] = 0  # the bound copy of w: already packed
    bound.run_graph()
    np.testing.assert_array_equal(bound.outputs[0], y)
    (packed,) = [arrays[p] for p in bound.args[len(exe.inputs) + len(exe.outputs) :]]
    assert packed.shape == (2, 7, 64)
    packed[...] = 0  # the packed panel: the graph reads it
    bound.run_graph()
    assert not np.array_equal(bound.outputs[0], y)


def test_cpu_tile_matmul_leaves_other_nests_alone() -> None:
    """A sum of squares (a k loop over one buffer, not A times B) is not the pattern: its nest
    stays as it was."""
    text = "model t\ninput a : f32[2, 8, 16]\noutput y = reduce_sum(a * a, axes=[2])\n"
    module = parse_source(text, "t.graph", ".graph")
    spec = "lower-graph-to-loops,cpu-tile-matmul"
    before = apply_passes(module.clone(), parse_passes("lower-graph-to-loops"))
    after = apply_passes(module.clone(), parse_passes(spec))
    assert not any(isinstance(op, vector.FMAOp) for op in after.walk())
    assert len(list(after.walk())) == len(list(before.walk()))
    assert_matches(module, spec, "cpu")


@pytest.mark.parametrize(
    "options,message",
    [
        ("nr=20", "option nr=20: must be a positive multiple of the 16 f32 lanes"),
        ("vector-bits=100", "vector-bits"),
        ("mr=0", "option mr=0: must be from 1 to 16"),
    ],
)
def test_cpu_tile_matmul_rejects_bad_options(options: str, message: str) -> None:
    with pytest.raises(IrkitError, match=message):
        apply_passes(
            matmul_model(8, 64, 4),
            parse_passes(f"lower-graph-to-loops,cpu-tile-matmul{{{options}}}"),
        )


BATCHED = {
    "remainders": "input a : f32[2, 13, 7]\ninput b : f32[2, 7, 100]\noutput y = batch_matmul(a, b)",
    "epilogue": "input a : f32[3, 8, 9]\ninput b : f32[3, 9, 64]\ninput r : f32[3, 8, 64]\n"
    "output y = relu(batch_matmul(a, b) * 0.5 + r)",
    "broadcast-a": "input a : f32[1, 13, 7]\ninput b : f32[3, 7, 70]\noutput y = batch_matmul(a, b)",
    "broadcast-b": "input a : f32[3, 13, 7]\ninput b : f32[1, 7, 70]\noutput y = batch_matmul(a, b)",
    "unit-batch": "input a : f32[1, 5, 7]\ninput b : f32[4, 7, 33]\noutput y = batch_matmul(a, b)",
    "rank-4": "input a : f32[2, 3, 9, 5]\ninput b : f32[2, 3, 5, 40]\noutput y = batch_matmul(a, b)",
    "rank-4-broadcast": "input a : f32[2, 1, 9, 5]\ninput b : f32[1, 3, 5, 40]\n"
    "output y = batch_matmul(a, b)",
    "attention": "input q : f32[2, 16, 32]\ninput k : f32[2, 16, 32]\n"
    "output y = batch_matmul(q, transpose(k, perm=[0, 2, 1])) * 0.17",
}


@pytest.mark.parametrize("case", sorted(BATCHED))
@pytest.mark.parametrize(
    "options", ["", "{vector-bits=256 nr=32 mr=4}", "{pack=false}", "{kc=4 min-panels=0}"]
)
def test_cpu_tile_matmul_tiles_batch_matmuls(case: str, options: str) -> None:
    module = parse_source(f"model bm\n{BATCHED[case]}\n", "bm.graph", ".graph")
    spec = f"fuse-kernels,lower-graph-to-loops,cpu-tile-matmul{options}"
    tiled = apply_passes(module.clone(), parse_passes(spec))
    assert any(isinstance(op, vector.FMAOp) for op in tiled.walk())
    assert_matches(module, spec, "cpu", seed=len(case))
    assert_matches(module, spec + ",cpu-parallelize{threads=2 min-work=0}", "cpu", seed=len(case))


@pytest.mark.parametrize(
    "m,n,k,options",
    [
        (40, 256, 8, "kc=0"),
        (64, 320, 70, "kc=32"),
        (7, 512, 5, "mr=6"),
        (100, 256, 3, "mr=4 nr=32"),
    ],
)
def test_prefetching_changes_no_bit(m: int, n: int, k: int, options: str) -> None:
    """The next block's prefetch (the last panel's past the packed buffer's end) is a hint:
    with it and without, the same bits, and the reference's values."""
    module = matmul_model(m, n, k, "gelu_residual")
    inputs = random_inputs(module, seed=m)
    spec = "fuse-kernels,lower-graph-to-loops,cpu-tile-matmul{%s}"
    on = irkit.compile(module, spec % options, backend="cpu")
    off = irkit.compile(module, spec % f"{options} prefetch=false", backend="cpu")
    assert "llvm.prefetch" in on.llvm_ir and "llvm.prefetch" not in off.llvm_ir
    for a, b in zip(on(*inputs), off(*inputs), strict=True):
        np.testing.assert_array_equal(a, b)
    assert_matches(module, spec % options, "cpu", seed=m)


# --- cpu-tile-transpose ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,perm,tiled",
    [
        ([2, 16, 32, 32], [0, 2, 3, 1], True),  # NCHW -> NHWC
        ([2, 16, 16, 32], [0, 3, 1, 2], True),  # and back
        ([48, 32], [1, 0], True),
        ([3, 32, 5, 16], [2, 3, 0, 1], True),
        ([4, 6, 32], [1, 0, 2], False),  # the innermost dimension stays
        ([24, 7], [1, 0], False),  # 7 is no multiple of 16
    ],
)
def test_cpu_tile_transpose_is_bit_identical(shape, perm, tiled: bool) -> None:
    text = f"model t\ninput x : f32{shape}\noutput y = transpose(x, perm={perm})\n"
    module = parse_source(text, "t.graph", ".graph")
    spec = "lower-graph-to-loops,cpu-tile-transpose"
    rewritten = apply_passes(module.clone(), parse_passes(spec))
    assert any(op.name == "vector.shuffle" for op in rewritten.walk()) == tiled
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    want = np.transpose(x, perm)
    for s in (spec, spec + ",cpu-parallelize{threads=2 min-work=0}"):
        np.testing.assert_array_equal(irkit.compile(module, s, backend="cpu")(x)[0], want)


# --- the CPU tile follows the host --------------------------------------------------------


@pytest.mark.parametrize(
    "features,bits,registers",
    [("+avx512f,+avx2,+avx,-prefer-256-bit", 512, 32), ("+avx512f,+avx2,+avx,+prefer-256-bit", 256, 32),
     ("-avx512f,+avx2,+avx", 256, 16), ("-avx512f,-avx2,-avx,+sse4.2", 128, 16)],
)  # fmt: skip
def test_cpu_tiles_take_the_host_vector_width_and_registers(
    monkeypatch, features, bits, registers
) -> None:
    """vector-bits=0 and nr=0 (the defaults) resolve to the host's: its widest vector (256
    where IRKIT_VECTOR_BITS=256 made an AVX-512 host prefer them) and as many B vectors as
    leave the 6-row tile's accumulators, B's vectors and a broadcast in its register file;
    explicit options stay as given."""
    from irkit import host
    from irkit.passes.cpu_tile_matmul import CpuTileMatmulPass

    monkeypatch.setattr(host, "cpu_features", lambda: frozenset(features.split(",")))
    monkeypatch.setenv("IRKIT_VECTOR_BITS", "256" if "+prefer-256-bit" in features else "512")
    assert (host.vector_bits(), host.vector_registers()) == (bits, registers)
    auto = CpuTileMatmulPass().resolved()
    lanes = bits // 32
    assert auto.vector_bits == bits and auto.nr % lanes == 0
    vectors = auto.nr // lanes
    assert auto.mr * vectors + vectors + 1 <= registers < 2 * (auto.mr * vectors + vectors + 1)
    given = CpuTileMatmulPass(vector_bits=512, nr=64)
    assert given.resolved() == given


def test_default_cpu_tiles_fit_this_host_and_match() -> None:
    """On the host the tests run on: default-cpu's microkernels use its vector width, and
    their accumulators fit its registers (an AVX-512 tile on an AVX2 host had spilled);
    the result matches the reference."""
    from irkit.host import vector_bits as host_vector_bits
    from irkit.host import vector_registers as host_vector_registers

    module = matmul_model(37, 100, 29, "bias_relu")
    spec = "fuse-kernels,lower-graph-to-loops,cpu-tile-matmul"
    tiled = apply_passes(module.clone(), parse_passes(spec))
    widths = {t.get_shape()[0] for op in tiled.walk() for t in op.result_types
              if isinstance(t, vector.VectorType)}  # type: ignore[attr-defined]  # fmt: skip
    lanes = host_vector_bits() // 32  # the microkernels' width; a tail's half or quarter
    assert max(widths) == lanes and all(lanes % w == 0 and w >= 4 for w in widths)
    accumulators = max(len(op.iter_args) for op in tiled.walk() if isinstance(op, scf.ForOp))
    assert accumulators + accumulators // 6 + 1 <= host_vector_registers()
    assert_matches(module, spec, "cpu", seed=5)


# --- interchange-matmul ----------------------------------------------------------------------


@pytest.mark.parametrize("epilogue", sorted(EPILOGUES))
@pytest.mark.parametrize("m,n,k", [(5, 33, 7), (1, 300, 260), (17, 8, 1)])
def test_interchange_matmul_rewrites_untiled_nests_and_matches(m, n, k, epilogue) -> None:
    """Untiled matmuls become row updates (no reduction loop left), give the reference's
    values, and are what the CPU backend runs where a pipeline left the pass out."""
    module = matmul_model(m, n, k, epilogue)
    spec = "fuse-kernels,lower-graph-to-loops,interchange-matmul"
    rewritten = apply_passes(module.clone(), parse_passes(spec))
    assert not [op for op in rewritten.walk() if isinstance(op, scf.ForOp) and op.iter_args]
    assert any(op.name == "memref.alloca" for op in rewritten.walk())
    assert_matches(module, spec, "cpu", seed=k)
    exe = irkit.compile(module, "fuse-kernels,lower-graph-to-loops", backend="cpu")
    assert "iter_args" not in str(exe.module)  # lower_for_cpu ran it


def test_interchange_matmul_is_bit_identical_to_the_dot_product() -> None:
    """Each element sums over k in the same order with the same operations: the dot form,
    interpreted element by element (lockstep, no blocking), gives the same bits."""
    module = matmul_model(9, 70, 40, "bias_relu")
    inputs = random_inputs(module, seed=3)
    dot = irkit.compile(module, "fuse-kernels,lower-graph-to-loops", backend="cuda-sim")(*inputs)
    rows = irkit.compile(module, "fuse-kernels,lower-graph-to-loops,interchange-matmul",
                         backend="cpu")(*inputs)  # fmt: skip
    for a, b in zip(dot, rows, strict=True):
        np.testing.assert_array_equal(a, b)


def test_interchange_matmul_rewrites_an_implicit_gemm_bit_identically() -> None:
    """A convolution as an implicit GEMM left untiled (A read through the patches' index
    arithmetic, fused with its epilogue): row updates, the same bits as the dot form
    interpreted element by element, and the reference's values; ragged sizes, strides and
    padding, on one thread and on two."""
    module = parse_source(
        "model c\ninput x : f32[2, 3, 9, 7]\nparam w : f32[5, 3, 3, 2]\nparam s : f32[5]\n"
        "param t : f32[5]\nparam m : f32[5]\nparam v : f32[5]\n"
        "c = conv2d(x, w, strides=[2, 1], padding=[1, 0, 1, 1])\n"
        "output y = relu(batch_norm(c, s, t, m, v, eps=1e-5))\n",
        "c.graph", ".graph",
    )  # fmt: skip
    spec = "conv-layout,conv-to-matmul{implicit=true},fuse-kernels,lower-graph-to-loops"
    rewritten = apply_passes(module.clone(), parse_passes(spec + ",interchange-matmul"))
    assert not [op for op in rewritten.walk() if isinstance(op, scf.ForOp) and op.iter_args]
    inputs = random_inputs(module, seed=4)
    dot = irkit.compile(module, spec, backend="cuda-sim")(*inputs)
    for extra in ("", ",cpu-parallelize{threads=2 min-work=0}"):
        rows = irkit.compile(module, spec + ",interchange-matmul" + extra, backend="cpu")(*inputs)
        for a, b in zip(dot, rows, strict=True):
            np.testing.assert_array_equal(a, b)
    assert_matches(module, spec + ",interchange-matmul", "cpu", seed=4)


def test_interchange_matmul_handles_batches_and_leaves_what_it_cannot() -> None:
    batched = parse_source(
        "model b\ninput q : f32[2, 3, 5, 8]\ninput k : f32[1, 3, 8, 6]\n"
        "output s = batch_matmul(q, k) * 0.5\n", "b.graph", ".graph",
    )  # fmt: skip
    spec = "fuse-kernels,lower-graph-to-loops,interchange-matmul"
    rewritten = apply_passes(batched.clone(), parse_passes(spec))
    (loop,) = [op for op in rewritten.walk() if isinstance(op, scf.ParallelOp)]
    assert len(loop.body.block.args) == 3  # the two batch dims and i
    assert_matches(batched, spec, "cpu", seed=1)
    wide = matmul_model(2, 17000, 3, "plain")  # a row of C over 64 KiB: stays a dot product
    kept = apply_passes(wide.clone(), parse_passes(spec))
    assert any(isinstance(op, scf.ForOp) and op.iter_args for op in kept.walk())
    assert_matches(wide, spec, "cpu")


# --- expand-math ---------------------------------------------------------------------------


@pytest.mark.parametrize("scale", ["bits", "ldexp"])
def test_expanded_exp_is_within_two_ulp_over_the_f32_range(scale: str) -> None:
    module = parse_source(
        "model e\ndim N = 1048576\ninput x : f32[N]\noutput y = exp(x)\n", "e.graph", ".graph"
    )
    spec = f"lower-graph-to-loops,expand-math{{scale={scale}}}"
    assert ("irkit_math.ldexp" in str(apply_passes(module.clone(), parse_passes(spec)))) == (
        scale == "ldexp"
    )
    exe = irkit.compile(module, spec, backend="cpu")
    x = np.linspace(-110.0, 95.0, 1 << 20, dtype=np.float32)
    x[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 88.72]
    y = exe(x)[0]
    exact = np.exp(x.astype(np.float64))
    with np.errstate(over="ignore"):
        rounded = exact.astype(np.float32)
    normal = np.isfinite(rounded) & (rounded >= np.finfo(np.float32).tiny)
    ulp = np.abs(y[normal].view(np.int32).astype(np.int64) - rounded[normal].view(np.int32))
    assert ulp.max() <= 2
    tiny = np.isfinite(x) & (rounded < np.finfo(np.float32).tiny)
    assert np.abs(y[tiny] - exact[tiny]).max() < 2e-38
    overflow = np.isfinite(x) & np.isinf(rounded)
    assert overflow.any() and np.all(y[overflow] == np.inf)
    assert np.isnan(y[0]) and y[1] == np.inf and y[2] == 0.0 and y[3] == 1.0 and y[4] == 1.0
    # every exponent: the overflow to +inf, the underflow to 0 and NaN come out right
    samples = f32_samples()
    z = exe(np.resize(samples, 1 << 20).astype(np.float32))[0]
    xs = np.resize(samples, 1 << 20)
    with np.errstate(all="ignore"):
        want = np.exp(xs.astype(np.float64)).astype(np.float32)
    assert np.array_equal(np.isnan(z), np.isnan(want))
    assert np.all(z[np.isinf(want)] == np.inf)
    assert np.all(z[want == 0] == 0)


def f32_samples() -> np.ndarray:
    """2^20 random f32 bit patterns (every exponent), dense samples in [-5, 5] and near 0,
    and the special values."""
    rng = np.random.default_rng(0)
    patterns = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754944e-38, 3.4e38,
                0.625, -0.625, 4.0, -4.0, 1e-4, -1e-4]  # fmt: skip
    return np.concatenate([
        patterns, rng.uniform(-5, 5, 1 << 19).astype(np.float32),
        rng.uniform(-1e-3, 1e-3, 1 << 17).astype(np.float32), np.array(specials, np.float32),
    ])  # fmt: skip


@pytest.mark.parametrize("scale", ["bits", "ldexp"])
@pytest.mark.parametrize(
    "fn,exact,bound",
    [("tanh", np.tanh, 1), ("erf", np.vectorize(math.erf, otypes=[float]), 7), ("log", np.log, 1)],
)
def test_expanded_math_is_within_its_ulp_bound(fn: str, exact, bound: int, scale: str) -> None:
    x = f32_samples()
    module = parse_source(
        f"model e\ninput x : f32[{len(x)}]\noutput y = {fn}(x)\n", "e.graph", ".graph"
    )
    spec = f"lower-graph-to-loops,expand-math{{scale={scale}}}"
    expanded = apply_passes(module.clone(), parse_passes(spec))
    assert not any(op.name == f"math.{fn}" for op in expanded.walk())
    y = irkit.compile(module, spec, backend="cpu")(x)[0]
    with np.errstate(all="ignore"):
        wide = exact(x.astype(np.float64))
        rounded = wide.astype(np.float32)
    assert np.array_equal(np.isnan(y), np.isnan(rounded))  # NaN in, negatives for log
    infinite = np.isinf(rounded)
    assert np.array_equal(y[infinite], rounded[infinite])
    normal = np.isfinite(rounded) & (np.abs(rounded) >= np.finfo(np.float32).tiny)
    ulp = np.abs(y[normal].view(np.int32).astype(np.int64) - rounded[normal].view(np.int32))
    assert ulp.max() <= bound, ulp.max()
    tiny = np.isfinite(rounded) & ~normal
    assert not tiny.any() or np.abs(y[tiny] - wide[tiny]).max() < 2e-38


@pytest.mark.parametrize("n", [-1, 0, 1, 2, 3, 4])
def test_integral_powers_are_multiplied_out_within_an_ulp(n: int) -> None:
    """expand-math: pow(x, n) for a constant integral n from -1 to 4 is multiplications (no
    `math.powf` left): exact for n = -1, 0, 1, 2, within 1 ulp of float64's pow rounded to
    f32 for n = 3 and 2 for n = 4 (two roundings) on every sample that stays normal; the
    specials as IEEE's pow (NaN, infinities, zeros; x ** 0 == 1 even for NaN). A
    non-integral exponent keeps its `powf`."""
    x = f32_samples()
    source = f"model p\ninput x : f32[{len(x)}]\noutput y = pow(x, {n}.0)\n"
    module = parse_source(source, "p.graph", ".graph")
    spec = "lower-graph-to-loops,expand-math"
    expanded = apply_passes(module.clone(), parse_passes(spec))
    assert not any(op.name == "math.powf" for op in expanded.walk())
    y = irkit.compile(module, spec, backend="cpu")(x)[0]
    with np.errstate(all="ignore"):
        rounded = np.power(x.astype(np.float64), n).astype(np.float32)
    assert np.array_equal(np.isnan(y), np.isnan(rounded))
    exact = ~np.isfinite(rounded) | (rounded == 0)
    assert np.array_equal(y[exact & ~np.isnan(y)], rounded[exact & ~np.isnan(rounded)])
    normal = np.isfinite(rounded) & (np.abs(rounded) >= np.finfo(np.float32).tiny)
    ulp = np.abs(y[normal].view(np.int32).astype(np.int64) - rounded[normal].view(np.int32))
    assert ulp.max() <= {3: 1, 4: 2}.get(n, 0), ulp.max()
    fractional = parse_source(source.replace(f"{n}.0", "2.5"), "p.graph", ".graph")
    kept = apply_passes(fractional, parse_passes(spec))
    assert any(op.name == "math.powf" for op in kept.walk())


def test_expand_math_runs_on_the_gpu_path_too() -> None:
    """The CUDA printer and the lockstep interpretation know the ops the expansion uses."""
    module = irkit.load("examples/softmax.graph", {"R": 4, "C": 40})
    spec = "fuse-kernels,lower-graph-to-loops,expand-math{scale=bits},map-to-gpu"
    mapped = apply_passes(module.clone(), parse_passes(spec))
    source = "".join(kernel_source(mapped, k) for k in gpu_kernels(mapped))
    # the expansion is a scalar function, inlined by NVRTC; no call of the C library's expf
    assert "__device__ __forceinline__ float irkit_expf(float x)" in source
    assert "__int_as_float(" in source and "__float_as_int(" in source
    assert not re.search(r"\bexpf\(", source)
    assert_matches(module, spec, "cuda-sim")
    ldexp = spec.replace("scale=bits", "scale=ldexp")  # C's ldexpf, numpy's ldexp in lockstep
    source = "".join(kernel_source(m, k) for m in [apply_passes(module.clone(), parse_passes(ldexp))]
                     for k in gpu_kernels(m))  # fmt: skip
    assert "ldexpf(" in source
    assert_matches(module, ldexp, "cuda-sim")
    # tanh (through GELU), erf and log: bit shifts and masks too
    module = parse_source(
        "model m\ninput x : f32[4, 33]\noutput y = gelu(x) + tanh(x) + log(abs(x) + 2)\n",
        "m.graph", ".graph",
    )  # fmt: skip
    mapped = apply_passes(module.clone(), parse_passes(spec))
    source = "".join(kernel_source(mapped, k) for k in gpu_kernels(mapped))
    assert ">>" in source and not re.search(r"\b(erff|tanhf|logf)\(", source)
    assert {"irkit_erff(", "irkit_tanhf(", "irkit_logf("} <= set(re.findall(r"irkit_\w+\(", source))
    assert_matches(module, spec, "cuda-sim")
    for approximate in ("tanh", "none"):
        gelu = parse_source(
            f"model g\ninput x : f32[5, 40]\noutput y = gelu(x, approximate=\"{approximate}\")\n",
            "g.graph", ".graph",
        )  # fmt: skip
        assert_matches(gelu, "fuse-kernels,lower-graph-to-loops,expand-math", "cpu")


# --- gpu-tile-matmul ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "m,n,k,options",
    [
        (40, 64, 6, "block-m=32 block-n=32 block-k=4 thread-m=2 thread-n=4"),
        (33, 47, 19, "block-m=16 block-n=32 block-k=8 thread-m=2 thread-n=2"),
        (3, 130, 9, ""),  # M far below the tile: block-m is fitted to 4
        (64, 64, 16, "block-m=64 block-n=64 block-k=8 thread-m=4 thread-n=4"),
    ],
)
@pytest.mark.parametrize("epilogue", ["plain", "gelu_residual"])
def test_gpu_tile_matmul_matches_the_reference_under_lockstep(
    m: int, n: int, k: int, options: str, epilogue: str
) -> None:
    module = matmul_model(m, n, k, epilogue)
    spec = f"fuse-kernels,lower-graph-to-loops,gpu-tile-matmul{{{options}}},map-to-gpu"
    mapped = apply_passes(module.clone(), parse_passes(spec))
    (kernel,) = gpu_kernels(mapped)
    assert launch_of(kernel)["mapping"] == "tiled"  # type: ignore[index]
    assert_matches(module, spec, "cuda-sim", seed=k)


@pytest.mark.parametrize(
    "m,n,k,options,vectorized",
    [
        # A and B by 16-byte vectors, no bounds checks
        (64, 64, 16, "block-m=64 block-n=64 block-k=8 thread-m=4 thread-n=4", 2),
        # A by vectors with M clamped; B by vectors (K and N are multiples of their tiles)
        (40, 64, 12, "block-m=32 block-n=32 block-k=4 thread-m=2 thread-n=4", 2),
        # A by vectors clamped in M and K (K = 20: the last vector of a tile wholly outside),
        # B element by element (N = 47); fewer A pieces than threads: clamped and guarded
        (33, 47, 20, "block-m=16 block-n=32 block-k=8 thread-m=2 thread-n=2", 1),
        # K odd: no vectors at all
        (33, 47, 19, "block-m=16 block-n=32 block-k=8 thread-m=2 thread-n=2", 0),
    ],
)
@pytest.mark.parametrize("staging", ["", "double-buffer=false", "vector-loads=false"])
def test_gpu_tile_matmul_staging_and_vector_loads_match_under_lockstep(
    m: int, n: int, k: int, options: str, vectorized: int, staging: str
) -> None:
    """Double buffering and 16-byte loads, each on and off, against the reference; lockstep
    also checks that the single barrier per tile leaves no race between the two stages."""
    module = matmul_model(m, n, k, "gelu_residual")
    spec = f"fuse-kernels,lower-graph-to-loops,gpu-tile-matmul{{{options} {staging}}},map-to-gpu"
    mapped = apply_passes(module.clone(), parse_passes(spec))
    (kernel,) = gpu_kernels(mapped)
    # `vectorized` operands read by vectors, once per tile, and once more in the prologue
    # when double-buffered
    copies = 1 if "double-buffer=false" in staging else 2
    expect = 0 if "vector-loads=false" in staging else vectorized * copies
    assert len(global_vector_loads(kernel)) == expect
    assert_matches(module, spec, "cuda-sim", seed=k)
    compile_cuda(kernel_source(mapped, kernel), kernel.sym_name.data, "sm_90")


def global_vector_loads(kernel) -> list[vector.LoadOp]:
    """The kernel's 16-byte loads from its arguments (global memory), not from shared tiles."""
    return [
        op
        for op in kernel.walk()
        if isinstance(op, vector.LoadOp) and op.base.type.memory_space != SHARED_SPACE
    ]


def shared_vector_loads(kernel) -> list[vector.LoadOp]:
    return [
        op
        for op in kernel.walk()
        if isinstance(op, vector.LoadOp) and op.base.type.memory_space == SHARED_SPACE
    ]


@pytest.mark.parametrize(
    "m,n,k,options,warp_tiled",
    [
        # 4x4 register tiles, 16x32 warp sub-tiles: 2 x 2 warps of a 32 x 64 block
        (40, 70, 12, "block-m=32 block-n=64 block-k=4 thread-m=4 thread-n=4", True),
        # the default 8x8 register tiles: 32 x 64 warp sub-tiles, 4 x 2 warps; M, N, K ragged
        (130, 129, 9, "", True),
        # 8x4 register tiles: 32 x 32 warp sub-tiles, one warp per 32 x 32 block
        (32, 64, 8, "block-m=32 block-n=32 block-k=8 thread-m=8 thread-n=4", True),
        # 2x4 register tiles are not whole 4 x 4 groups: the strided layout
        (40, 64, 6, "block-m=32 block-n=32 block-k=4 thread-m=2 thread-n=4", False),
        # the block (32 wide) is not a whole warp sub-tile (8 lanes x 8 = 64): strided
        (64, 64, 8, "block-m=64 block-n=32 block-k=8 thread-m=8 thread-n=8", False),
    ],
)
@pytest.mark.parametrize("warp_tile", ["", "warp-tile=false"])
def test_gpu_tile_matmul_warp_tiles_match_under_lockstep(
    m: int, n: int, k: int, options: str, warp_tiled: bool, warp_tile: str
) -> None:
    """Warp tiling reads each thread's 4 x 4 groups from shared memory as vectors: the same
    multiply-adds in the same order as the strided layout, so the same values; lockstep
    checks the reads stay inside the tiles and race-free."""
    module = matmul_model(m, n, k, "gelu_residual")
    tiling = f"{options} {warp_tile}".strip()
    spec = f"fuse-kernels,lower-graph-to-loops,gpu-tile-matmul{{{tiling}}},map-to-gpu"
    mapped = apply_passes(module.clone(), parse_passes(spec))
    (kernel,) = gpu_kernels(mapped)
    reads = shared_vector_loads(kernel)
    if warp_tiled and not warp_tile:
        assert reads and all(op.result.type.get_shape() == (4,) for op in reads)
    else:
        assert not reads
    assert_matches(module, spec, "cuda-sim", seed=k)
    source = kernel_source(mapped, kernel)
    r = compile_cuda(source, kernel.sym_name.data, "sm_90").resources
    assert r.spill_stores == 0 and r.spill_loads == 0, r


def test_default_tiles_compile_for_hopper_without_spills() -> None:
    """The default 128x128x16 tile with 8x8 register tiles at 4096^3: what the GPU benchmark
    runs. ptxas's report is the evidence available without a GPU."""
    module = irkit.load("examples/gemm.graph", {"M": 4096, "N": 4096, "K": 4096})
    mapped = apply_passes(module.clone(), parse_passes("default-cuda"))
    (kernel,) = gpu_kernels(mapped)
    launch = launch_of(kernel)
    assert launch["mapping"] == "tiled" and launch["block"] == (256, 1, 1)  # type: ignore[index]
    assert launch["grid"] == (32 * 32, 1, 1)  # type: ignore[index]
    source = kernel_source(mapped, kernel)
    assert "if (" not in source  # multiples of the tiles: no guards at all
    for arch in ("sm_80", "sm_90"):
        compiled = compile_cuda(source, kernel.sym_name.data, arch)
        r = compiled.resources
        assert r.spill_stores == 0 and r.spill_loads == 0, (arch, r)
        # two stages (double buffering) of the 16 x (128 + 4) A and B tiles
        assert r.registers <= 255 and r.shared_bytes == 2 * 4 * 16 * (132 + 132), (arch, r)
    # 16-byte loads of A and B, two pieces per thread each (128 x 16 elements / 256 threads /
    # 4 lanes), in the prologue and in the loop; B's pieces stored to shared memory as 16-byte
    # stores
    assert source.count("*reinterpret_cast<const float4*>(&a[") == 4
    assert source.count("*reinterpret_cast<const float4*>(&b[") == 4
    # warp tiling: per k, two 16-byte reads of each shared tile (8 x 8 = 2 x 2 groups of 4)
    for tile in ("a_tile", "b_tile"):
        assert source.count(f"*reinterpret_cast<const float4*>(&k0_matmul_{tile}[") == 2 * 16
    assert source.count("*reinterpret_cast<float4*>(&k0_matmul_b_tile") == 4


def test_gpu_tile_matmul_rejects_uneven_tiles() -> None:
    with pytest.raises(
        IrkitError,
        match="pass 'gpu-tile-matmul': option block-m=30: must be a multiple of thread-m",
    ):
        apply_passes(
            matmul_model(8, 64, 4),
            parse_passes("lower-graph-to-loops,gpu-tile-matmul{block-m=30 thread-m=4}"),
        )


def test_default_pipelines_list_the_new_passes_as_optional() -> None:
    assert {"cpu-tile-matmul", "expand-math"} <= PIPELINES["default-cpu"].optional
    assert "gpu-tile-matmul" in PIPELINES["default-cuda"].optional
    assert "gpu-tile-matmul" not in PIPELINES["baseline-cuda"].passes


def test_warp_tiles_of_f64_read_shared_memory_by_words() -> None:
    """CUDA has no 4-wide f64 vector: warp tiling keeps its layout and reads words."""
    text = "model h\ninput x : f64[70, 40]\ninput w : f64[40, 130]\noutput y = relu(matmul(x, w))\n"
    module = parse_source(text, "h.graph", ".graph")
    mapped = apply_passes(module.clone(), parse_passes("default-cuda"))
    (kernel,) = gpu_kernels(mapped)
    assert launch_of(kernel)["mapping"] == "tiled"  # type: ignore[index]
    assert not shared_vector_loads(kernel)
    exe = irkit.compile(module, "default-cuda", "cuda-sim")
    checks, _ = check(exe, module, seed=0)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    assert exe.kernels[0].resources["spill_stores"] == 0


@pytest.mark.parametrize("m,n,k", [(13, 100, 7), (31, 200, 33), (12, 64, 16), (7, 80, 40)])
@pytest.mark.parametrize("kc", [4, 5, 16])
def test_cpu_k_blocking_gives_the_same_bits(m: int, n: int, k: int, kc: int) -> None:
    """Blocking K stores each tile's partial sums to C and loads them back: exact in f32,
    and each element's sum still runs over k in order, so the bits are those of one block
    (whole blocks, a short last block, and K = kc * blocks exactly all occur here)."""
    from irkit.runtime.reference import random_inputs

    module = matmul_model(m, n, k, "gelu_residual")
    inputs = random_inputs(module, seed=k)
    spec = "fuse-kernels,lower-graph-to-loops,cpu-tile-matmul{{kc={}}}"
    want = irkit.compile(module, spec.format(0), backend="cpu")(*inputs)[0]
    blocked = apply_passes(module.clone(), parse_passes(spec.format(kc)))
    loads_of_c = [
        op for op in blocked.walk() if isinstance(op, vector.LoadOp) and op.base.name_hint == "out0"
    ]
    assert bool(loads_of_c) == (kc < k)  # the partial sums are read back
    got = irkit.compile(module, spec.format(kc), backend="cpu")(*inputs)[0]
    np.testing.assert_array_equal(want, got)


@pytest.mark.parametrize("k,blocked", [(2000, False), (2100, True)])
def test_cpu_k_blocking_by_default_where_a_panel_outgrows_its_share_of_l2(
    k: int, blocked: bool
) -> None:
    """kc=-1 (the default) blocks K by 512 once a packed panel (K x 64 f32) passes 512 KiB
    (K > 2048), with the bits of the unblocked form."""
    from irkit.passes.cpu_tile_policy import AUTO_KC_PANEL_BYTES
    from irkit.runtime.reference import random_inputs

    assert (k * 64 * 4 > AUTO_KC_PANEL_BYTES) == blocked
    module = matmul_model(3, 64, k, "plain")
    spec = "fuse-kernels,lower-graph-to-loops,cpu-tile-matmul{{vector-bits=512 nr=64{}}}"
    tiled = apply_passes(module.clone(), parse_passes(spec.format("")))
    loads_of_c = [
        op for op in tiled.walk() if isinstance(op, vector.LoadOp) and op.base.name_hint == "y"
    ]
    assert bool(loads_of_c) == blocked
    inputs = random_inputs(module, seed=1)
    want = irkit.compile(module, spec.format(" kc=0"), backend="cpu")(*inputs)[0]
    np.testing.assert_array_equal(
        want, irkit.compile(module, spec.format(""), backend="cpu")(*inputs)[0]
    )


@pytest.mark.parametrize("m,n,k", [(37, 64, 9), (40, 150, 5), (7, 200, 12), (5, 16, 3)])
def test_row_parallel_matmuls_give_the_same_bits_on_threads(m: int, n: int, k: int) -> None:
    """Fewer panels than min-panels: the row tiles are the parallel loop. On 3 forced
    threads (uneven chunks of row tiles) the bits are those of the panel-parallel form."""
    from irkit.runtime.reference import random_inputs

    module = matmul_model(m, n, k, "gelu_residual")
    inputs = random_inputs(module, seed=m)
    spec = (
        "fuse-kernels,lower-graph-to-loops,cpu-tile-matmul{{min-panels={}}},"
        "cpu-parallelize{{threads=3 min-work=0}}"
    )
    want = irkit.compile(module, spec.format(0), backend="cpu")(*inputs)[0]
    exe = irkit.compile(module, spec.format(4), backend="cpu")
    np.testing.assert_array_equal(want, exe(*inputs)[0])
    checks, _ = check(exe, module, seed=m)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


def test_tiles_past_static_shared_memory_are_dynamic_and_past_the_device_refused() -> None:
    """128 x 256 tiles, 16 deep, double-buffered, need 50,176 bytes of f32 shared memory:
    over the 48 KB a kernel declares statically, so the launch asks for them dynamically
    (the kernel declares none). 256 deep they would need 802,816 bytes, past any block's
    227 KB: the pass says so, naming the options, instead of NVRTC failing."""
    module = irkit.load("examples/gemm.graph", {"M": 256, "N": 256, "K": 256})
    spec = "lower-graph-to-loops,gpu-tile-matmul{block-k=16 block-n=256 thread-n=16 fill-sms=false split-k=1},map-to-gpu"
    exe = irkit.compile(module, spec, backend="cuda-sim")
    (kernel,) = [k for k in exe.kernels if k.launch["mapping"] == "tiled"]  # type: ignore[index]
    assert kernel.launch["shared"] == 50176 and kernel.resources["shared_bytes"] == 0  # type: ignore[index]
    too_deep = spec.replace("block-k=16", "block-k=256")
    with pytest.raises(IrkitError, match=r"block-k=256: .* need 802816 bytes of shared memory"):
        irkit.compile(module, too_deep, backend="cuda-sim")


@pytest.mark.parametrize(
    ("backend", "tiled", "untiled"),
    [("cpu", "cpu-tile-matmul", "baseline-cpu"),
     ("cuda-host", "gpu-tile-matmul,map-to-gpu", "baseline-cuda")],
)  # fmt: skip
def test_an_epilogue_load_ahead_of_the_k_loop_is_tiled_and_right(backend, tiled, untiled) -> None:
    """tests/filecheck/passes/tile-matmul-epilogue-ahead.mlir, run: the nest whose bias is
    loaded before its k loop, tiled by each tiling pass, equals the untiled nest and
    float64's `b + (x @ w) / 2`."""
    from pathlib import Path

    path = Path(__file__).parent / "filecheck" / "passes" / "tile-matmul-epilogue-ahead.mlir"
    module = parse_source(path.read_text(), path.name, ".mlir")
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((40, 24), (24, 56), (56,)))
    want = b + (x.astype(np.float64) @ w) * 0.5
    fast = irkit.compile(module.clone(), tiled, backend)
    assert (backend == "cpu") or launch_of(gpu_kernels(fast.module)[0])["mapping"] == "tiled"
    for exe in (fast, irkit.compile(module.clone(), untiled, backend)):
        np.testing.assert_allclose(exe(x, w, b)[0], want, rtol=1e-5, atol=1e-5)
