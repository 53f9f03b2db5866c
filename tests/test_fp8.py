"""8-bit floats (f8e4m3, f8e5m2) as storage types, and `scaled_matmul`: every byte of each
format widens exactly, and f32 values at every kind of edge (ties between neighbours, the
subnormal range, past the largest finite value, infinities, NaN, signed zeros) narrow to
the same bits as the reference's (to nearest even, saturating) on the CPU (LLVM), cuda-host
(the printed CUDA C) and lockstep; `scaled_matmul` matches the reference on each, its
8-bit operands widened as they are loaded in the matmul's loop and a cast of its result
fused into the same kernel; NVRTC builds the conversions; the verifier keeps 8-bit values
out of arithmetic with a one-line reason. The IR's shape:
tests/filecheck/passes/lower-graph-to-loops-fp8.graph."""

from __future__ import annotations

import subprocess

import ml_dtypes
import numpy as np
import pytest
from xdsl.utils.exceptions import VerifyException

import irkit
from irkit.dtypes import FP8_MAX, NUMPY, to_fp8
from irkit.frontend import parse_source
from irkit.runtime.check import check
from tests.conftest import ROOT

FORMATS = ("f8e4m3", "f8e5m2")
BACKENDS = {"cpu": "default-cpu", "cuda-host": "default-cuda", "cuda-sim": "default-cuda"}


def _every_byte(fmt: str) -> np.ndarray:
    return np.arange(256, dtype=np.uint8).view(NUMPY[fmt])


def _edges(fmt: str) -> np.ndarray:
    """f32 values at the narrowing's edges: each representable value, the midpoints between
    neighbours (ties, both parities) and one f32 ulp either side of each, past the largest
    finite value, infinities, NaN and the f32 subnormals."""
    values = np.unique(_every_byte(fmt).astype(np.float32))
    values = values[np.isfinite(values)]
    mids = ((values[1:].astype(np.float64) + values[:-1]) / 2).astype(np.float32)
    near = np.concatenate(
        [np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))]
    )
    top = np.float32(FP8_MAX[fmt])
    beyond = np.array(
        [
            top * 1.03,
            top * 1.0625,
            top * 1.07,
            top * 4,
            3e38,
            np.inf,
            -np.inf,
            np.nan,
            1e-45,
            -1e-45,
            1e-40,
            0.0,
            -0.0,
        ],
        np.float32,
    )
    return np.concatenate([values, mids, near, beyond, -beyond]).astype(np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_byte_widens_and_every_edge_narrows_as_the_reference(fmt: str, backend: str) -> None:
    edges = _edges(fmt)
    text = (
        f"model f8\ninput b : {fmt}[256]\ninput x : f32[{edges.size}]\n"
        f"output wide = cast(b, dtype=f32)\noutput narrow = cast(x, dtype={fmt})\n"
    )
    module = parse_source(text, "f8.graph", ".graph")
    exe = irkit.compile(module, BACKENDS[backend], backend)
    wide, narrow = exe(_every_byte(fmt), edges)
    expected = _every_byte(fmt).astype(np.float32)
    wide, nans = np.asarray(wide, np.float32), np.isnan(expected)
    assert np.array_equal(np.isnan(wide), nans)
    assert np.array_equal(wide[~nans].view(np.uint32), expected[~nans].view(np.uint32))  # -0.0 too
    got, want = np.asarray(narrow).view(np.uint8), to_fp8(edges, fmt).view(np.uint8)
    nan = np.isnan(to_fp8(edges, fmt).astype(np.float32))
    assert np.array_equal(got[~nan], want[~nan]), np.flatnonzero(got != want)[:8]
    assert np.isnan(np.asarray(narrow)[nan].astype(np.float32)).all()


def test_the_narrowing_saturates_and_rounds_ties_to_even() -> None:
    """The meaning the backends are held to: ml_dtypes alone makes an overflow NaN."""
    x = np.array([448.0, 460.0, 480.0, 1e6, -1e6, np.inf, 2.0**-10, 3 * 2.0**-11, 17.0, 19.0])
    got = to_fp8(x, "f8e4m3").astype(np.float64)
    assert got.tolist() == [448.0, 448.0, 448.0, 448.0, -448.0, 448.0, 0.0, 2.0**-9, 16.0, 20.0]
    assert np.isnan(to_fp8(np.array([np.nan]), "f8e5m2").astype(np.float32)).all()
    assert float(to_fp8(np.array([1e9]), "f8e5m2").astype(np.float32)[0]) == 57344.0
    assert NUMPY["f8e4m3"] == np.dtype(ml_dtypes.float8_e4m3fn)


FP8_LINEAR = """model fp8_linear
input x : {a}[{m}, {k}]
param w : {b}[{k}, {n}]
input sx : f32[]
param sw : f32[1]
output y = cast(scaled_matmul(x, w, sx, sw), dtype=bf16)
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("a", "b", "dims"),
    [
        ("f8e4m3", "f8e4m3", (40, 24, 64)),
        ("f8e4m3", "f8e5m2", (33, 17, 100)),
        ("f8e5m2", "f8e4m3", (1, 130, 96)),
    ],
)
def test_scaled_matmul_matches_the_reference(backend: str, a: str, b: str, dims) -> None:
    m, n, k = dims
    module = parse_source(FP8_LINEAR.format(a=a, b=b, m=m, n=n, k=k), "f8.graph", ".graph")
    exe = irkit.compile(module, BACKENDS[backend], backend)
    checks, _ = check(exe, module, seed=4)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


def test_scaled_matmul_is_one_kernel_reading_its_bytes() -> None:
    """The 8-bit operands are read in the matmul's loop and widened there (no f32 copy of
    either), the scales and the cast to bf16 in the same kernel's epilogue."""
    from xdsl.dialects import arith, func, memref

    module = parse_source(
        FP8_LINEAR.format(a="f8e4m3", b="f8e5m2", m=40, n=24, k=64), "f8.graph", ".graph"
    )
    lowered = irkit.compile(module, "fuse-kernels,lower-graph-to-loops", "cpu").module
    kernels = [
        op for op in lowered.ops if isinstance(op, func.FuncOp) and "irkit.kernel" in op.attributes
    ]
    assert len(kernels) == 1
    (kernel,) = kernels
    assert len(kernel.function_type.inputs) == 5  # x, w, sx, sw, y: no scratch
    widened = [
        op for op in kernel.walk() if isinstance(op, arith.ExtFOp) and "f8" in str(op.input.type)
    ]
    assert len(widened) == 2 and all(isinstance(op.input.owner, memref.LoadOp) for op in widened)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("input x : f8e4m3[4]\noutput y = x + x", "storage type: cast it to a wider float first"),
        (
            "input x : f8e4m3[4, 4]\ninput s : f32[2]\noutput y = scaled_matmul(x, x, s, s)",
            "scale: f32 with one element",
        ),
        (
            "input x : f32[4, 4]\ninput s : f32[]\noutput y = scaled_matmul(x, x, s, s)",
            "takes fp8 values",
        ),
    ],
)
def test_the_verifier_keeps_8_bit_values_out_of_arithmetic(
    text: str, message: str, tmp_path
) -> None:
    with pytest.raises((VerifyException, Exception), match=message):
        parse_source(f"model m\n{text}\n", "m.graph", ".graph")
    path = tmp_path / "m.graph"
    path.write_text(f"model m\n{text}\n")
    run = subprocess.run(["irkit-opt", str(path)], capture_output=True, text=True, check=False)
    assert run.returncode != 0 and message.split(":")[0] in run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_builds_the_conversions(arch: str) -> None:
    from irkit.codegen.cuda import gpu_kernels, kernel_source
    from irkit.codegen.nvrtc import compile_cuda
    from irkit.pipelines import apply_passes, parse_passes

    text = "model c\ninput x : f32[64, 80]\ninput b : f8e5m2[64, 80]\noutput y = cast(x, dtype=f8e4m3)\noutput z = cast(b, dtype=f32)\n"
    module = apply_passes(parse_source(text, "c.graph", ".graph"), parse_passes("default-cuda"))
    for fn in gpu_kernels(module):
        compiled = compile_cuda(kernel_source(module, fn), fn.sym_name.data, arch)
        assert compiled.resources.spill_stores == 0


def test_an_example_model_in_fp8_runs(tmp_path) -> None:
    """The README's command line on an 8-bit linear layer: checked, then timed."""
    path = tmp_path / "fp8_linear.graph"
    path.write_text(FP8_LINEAR.format(a="f8e4m3", b="f8e4m3", m=64, n=64, k=128))
    run = subprocess.run(
        ["irkit-bench", "run", str(path), "--backend", "cpu", "--budget", "0.2"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-2000:]


def _onnx_fp8(tmp_path, saturate: int = 1):
    """x cast to e4m3 and back, times an e4m3 initializer widened by Cast (an exported
    weight-only fp8 Linear)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).uniform(-1, 1, (16, 8)).astype(ml_dtypes.float8_e4m3fn)
    nodes = [
        helper.make_node("Cast", ["x"], ["x8"], to=TensorProto.FLOAT8E4M3FN, saturate=saturate),
        helper.make_node("Cast", ["x8"], ["xf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["xf", "wf"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    path = tmp_path / "f8.onnx"
    onnx.save(model, str(path))
    return path


def test_onnx_fp8_casts_and_initializers_import_and_match_onnxruntime(tmp_path) -> None:
    ort = pytest.importorskip("onnxruntime")
    path = _onnx_fp8(tmp_path)
    module = irkit.load(str(path))
    x = np.random.default_rng(1).uniform(-2, 2, (4, 16)).astype(np.float32)
    want = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    for backend in ("cpu", "cuda-host"):
        got = irkit.compile(module, BACKENDS[backend], backend)(x)[0]
        np.testing.assert_array_equal(got, want)


def test_onnx_cast_without_saturation_is_refused_in_one_line(tmp_path) -> None:
    path = _onnx_fp8(tmp_path, saturate=0)
    run = subprocess.run(["irkit-opt", str(path)], capture_output=True, text=True, check=False)
    assert run.returncode != 0 and "saturate=0" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr


MOVES = """model moves
input x : f8e4m3[4, 6, 8]
input z : f8e5m2[4, 2, 8]
output t = transpose(x, perm=[2, 0, 1])
output c = concat(cast(x, dtype=f8e5m2), z, axis=1)
output s = slice(x, starts=[0, 1, 2], limits=[4, 5, 8], strides=[1, 2, 3])
output b = broadcast_to(z, shape=[3, 4, 2, 8])
output r = cast(transpose(reshape(x, shape=[24, 8]), perm=[1, 0]), dtype=f32)
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("optimized", [True, False])
def test_8_bit_values_move_through_the_data_movement_ops(backend: str, optimized: bool) -> None:
    """Transpose, reshape, concat, slice and broadcast_to take 8-bit floats (a quantized
    export's transposes and reshapes reach its 8-bit tensors, and fold-transposes moves
    them through casts): their bytes arrive as they were, on every backend, with the default
    pipeline and without any optional pass."""
    module = parse_source(MOVES, "moves.graph", ".graph")
    pipeline = BACKENDS[backend] if optimized else BACKENDS[backend].replace("default", "baseline")
    exe = irkit.compile(module, pipeline, backend)
    checks, _ = check(exe, module, seed=2)
    assert all(c.passed and c.max_abs_error == 0 for c in checks), [c.describe() for c in checks]
