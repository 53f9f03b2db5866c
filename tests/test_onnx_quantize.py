"""Quantized ONNX exports (QDQ graphs: `irkit.frontend.onnx_quantize`) against onnxruntime
on the CPU backend and the GPU path (cuda-host): int8 and uint8 activations with int8
per-channel weights, 8-bit float activations and weights, Round's ties; the 8-bit matmul
recognized as `scaled_matmul` on the 8-bit tensor cores under default-cuda
(`recognize-scaled-matmul`, its IR: tests/filecheck/passes/recognize-scaled-matmul.graph);
and the forms irkit refuses, each in one line naming the node."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import irkit
from irkit.dialects.warp import MmaM16n8k32F8Op
from irkit.errors import IrkitError
from irkit.pipelines import pipeline_steps

ort = pytest.importorskip("onnxruntime")
n = helper.make_node
rng = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits, opset: int = 21) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "q", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _f32(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _fp8(name: str, array: np.ndarray) -> onnx.TensorProto:
    kind = {"float8_e4m3fn": TensorProto.FLOAT8E4M3FN, "float8_e5m2": TensorProto.FLOAT8E5M2}
    raw = array.view(np.uint8).tobytes()
    return helper.make_tensor(name, kind[str(array.dtype)], array.shape, raw, raw=True)


def _int8_linear(opset: int = 21) -> onnx.ModelProto:
    """A uint8 activation (zero point 128) times int8 weights per output channel (axis 1),
    a bias added in f32; and Round of the input, with ties of both parities."""
    w = rng.normal(size=(48, 24)).astype(np.float32)
    scale = (np.abs(w).max(axis=0) / 127).astype(np.float32)
    wq = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
    return _model(
        [n("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
         n("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
         n("DequantizeLinear", ["wq", "ws"], ["wd"], axis=1),
         n("MatMul", ["xd", "wd"], ["mm"]), n("Add", ["mm", "b"], ["y"]),
         n("Round", ["x"], ["r"])],
        [_f32("x", [16, 48])], [_f32("y", [16, 24]), _f32("r", [16, 48])],
        [numpy_helper.from_array(np.float32(0.03), "xs"),
         numpy_helper.from_array(np.uint8(128), "xz"), numpy_helper.from_array(wq, "wq"),
         numpy_helper.from_array(scale, "ws"),
         numpy_helper.from_array(rng.normal(size=24).astype(np.float32), "b")],
        opset,
    )  # fmt: skip


def _fp8_linear(
    a: str = "float8_e4m3fn", b: str = "float8_e5m2", rows: tuple[int, ...] = (33,)
) -> onnx.ModelProto:
    """An activation quantized to an 8-bit float per tensor, times an 8-bit weight: what
    NVIDIA ModelOpt's fp8 exports write around each Linear (`rows`: the activation's
    leading dims, [B, S] for a transformer's)."""
    w = rng.normal(size=(96, 40)).astype(np.float32)
    largest = float(ml_dtypes.finfo(getattr(ml_dtypes, b)).max)
    ws = np.float32(np.abs(w).max() / largest)
    return _model(
        [n("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
         n("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
         n("DequantizeLinear", ["wq", "ws"], ["wd"]), n("MatMul", ["xd", "wd"], ["y"])],
        [_f32("x", [*rows, 96])], [_f32("y", [*rows, 40])],
        [numpy_helper.from_array(np.float32(0.01), "xs"),
         _fp8("xz", np.zeros((), getattr(ml_dtypes, a))),
         _fp8("wq", (w / ws).astype(getattr(ml_dtypes, b))), numpy_helper.from_array(ws, "ws")],
    )  # fmt: skip


def _run_both(model: onnx.ModelProto, tmp_path: Path, x: np.ndarray):
    path = tmp_path / "q.onnx"
    onnx.save(model, path)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    return expected, irkit.load(str(path))


@pytest.mark.parametrize("backend", ["cpu", "cuda-host"])
@pytest.mark.parametrize("opset", [13, 21])
def test_an_int8_linear_and_round_match_onnxruntime(backend: str, opset: int, tmp_path) -> None:
    """At opset 21 and at 13 (what onnxruntime's quantizer writes; onnx's reference has no
    DequantizeLinear before 19, so the constant weight's is folded with numpy)."""
    x = (rng.normal(size=(16, 48)) * 2).astype(np.float32)
    x[0, :6] = [0.5, 1.5, 2.5, -0.5, -2.5, 3.0]  # Round's ties, and x / scale's at 0.045
    x[1, :3] = [0.045, -0.045, 0.075]
    expected, module = _run_both(_int8_linear(opset), tmp_path, x)
    got = irkit.compile(module, backend=backend)(x)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[1], expected[1])


@pytest.mark.parametrize(
    ("a", "b"), [("float8_e4m3fn", "float8_e5m2"), ("float8_e5m2", "float8_e4m3fn")]
)
def test_an_8_bit_float_linear_matches_onnxruntime_on_the_tensor_cores(a, b, tmp_path) -> None:
    """Bit for bit on the CPU (the chain as written); on cuda-host, the matmul recognized as
    one scaled_matmul (the activation quantized by its own kernel, the weight kept in its
    bytes and transposed once) on mma.sync m16n8k32, within f32's rounding of the scales'
    place."""
    x = rng.normal(size=(33, 96)).astype(np.float32)
    expected, module = _run_both(_fp8_linear(a, b), tmp_path, x)
    np.testing.assert_array_equal(irkit.compile(module, backend="cpu")(x)[0], expected[0])
    exe = irkit.compile(module, "default-cuda", "cuda-host")
    assert any(isinstance(op, MmaM16n8k32F8Op) for op in exe.module.walk())
    np.testing.assert_allclose(
        exe(x)[0], expected[0], rtol=1e-5, atol=1e-5 * np.abs(expected[0]).max()
    )
    steps = [s.spec for s in pipeline_steps("default-cuda") if s.spec != "recognize-scaled-matmul"]
    without = irkit.compile(module, ",".join(steps), "cuda-host")
    assert not any(isinstance(op, MmaM16n8k32F8Op) for op in without.module.walk())
    np.testing.assert_allclose(without(x)[0], expected[0], rtol=1e-5, atol=1e-5)


def test_a_linear_on_a_rank_3_activation_reaches_the_tensor_cores(tmp_path: Path) -> None:
    """[B, S, K] times [K, N]: the importer's rows reshape moves onto the 8-bit bytes, so
    the matmul is still one scaled_matmul on mma.sync m16n8k32."""
    x = rng.normal(size=(2, 9, 96)).astype(np.float32)
    expected, module = _run_both(_fp8_linear(rows=(2, 9)), tmp_path, x)
    exe = irkit.compile(module, "default-cuda", "cuda-host")
    assert any(isinstance(op, MmaM16n8k32F8Op) for op in exe.module.walk())
    np.testing.assert_allclose(
        exe(x)[0], expected[0], rtol=1e-5, atol=1e-5 * np.abs(expected[0]).max()
    )


def _refused(node: onnx.NodeProto, inits, tmp_path: Path, out=TensorProto.FLOAT) -> str:
    y = helper.make_tensor_value_info("y", out, [4, 8])
    model = _model([node], [_f32("x", [4, 8])], [y], inits)
    path = tmp_path / "r.onnx"
    onnx.save(model, path)
    with pytest.raises(IrkitError) as e:
        irkit.load(str(path))
    return str(e.value)


def test_the_forms_irkit_does_not_take_are_refused_in_one_line(tmp_path: Path) -> None:
    s = numpy_helper.from_array(np.float32(0.5), "s")
    blocked = n("DequantizeLinear", ["x", "s"], ["y"], name="dq", block_size=4)
    said = _refused(blocked, [s], tmp_path)
    assert "node 'dq' (DequantizeLinear" in said and "block_size" in said and "\n" not in said
    z8 = _fp8("z", np.array(1.0, ml_dtypes.float8_e4m3fn))
    e4m3 = TensorProto.FLOAT8E4M3FN
    quantize = n("QuantizeLinear", ["x", "s", "z"], ["y"], name="q")
    said = _refused(quantize, [s, z8], tmp_path, e4m3)
    assert "node 'q'" in said and "zero point other than 0" in said
    z0 = _fp8("z", np.array(0.0, ml_dtypes.float8_e4m3fn))
    unsaturated = n("QuantizeLinear", ["x", "s", "z"], ["y"], name="q", saturate=0)
    assert "saturate=0" in _refused(unsaturated, [s, z0], tmp_path, e4m3)
    four = n("QuantizeLinear", ["x", "s"], ["y"], name="q", output_dtype=TensorProto.INT4)
    assert "quantizing to int4" in _refused(four, [s], tmp_path, TensorProto.INT4)
