"""Quantized exports of the real-model suite (`real_models.py --quantize fp8,int8`): each
exported model quantized by onnxruntime's own tool (`quantize_static`, QDQ format, the
inputs of its MatMul, Gemm and Conv nodes: activations and weights in the 8-bit type, per
tensor, calibrated on a few inputs drawn like the check's), then imported by irkit and checked against
onnxruntime running the quantized model, on the CPU (default-cpu) and the GPU path
(default-cuda on cuda-host), with the matmuls that reached the 8-bit tensor cores counted.

A quantized model amplifies a rounding difference: a sum one f32 ulp apart before a
QuantizeLinear lands one 8-bit step away (6% of that value in e4m3), and such flips compound
layer by layer. Two correct executions of one QDQ BERT, onnxruntime's in f32 and irkit's
float64 reference, end 4% apart. So a backend matches where its output equals onnxruntime's
within 1e-4, or else where its quantization error (its distance from the float model's
output, as onnxruntime computes it) is within `NOISE` of onnxruntime's own: the
quantized model run as faithfully as onnxruntime runs it. The record keeps both errors.

The peer is onnxruntime with its graph optimizations off: the QDQ graph as written, each
node ONNX's meaning. Optimized, onnxruntime 1.32 runs an fp8 QDQ ResNet 195% away from the
float model's output where the same graph unoptimized (and irkit) lands 16% away, and
refuses an fp8 ConvNeXt (its optimizer transposes an 8-bit tensor); the record keeps the
optimized session's quantization error, or its error.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

NOISE = 1.1
"""How much larger than onnxruntime's a backend's quantization error may be."""


def quantize(path: Path, inputs: dict[str, np.ndarray], kind: str, draw) -> Path:
    """`path` quantized by onnxruntime (QDQ, MatMul, Gemm and Conv, per tensor) to `kind` ("fp8":
    e4m3, calibrated by its Distribution method, the one it takes for floats; "int8":
    MinMax), calibrated on `inputs` and two more draws (`draw(seed)`)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = [inputs, draw(1), draw(2)]

        def get_next(self) -> dict[str, np.ndarray] | None:
            return self.left.pop() if self.left else None

    eight = kind == "fp8"
    out = path.with_name(f"{path.stem}_{kind}.onnx")
    quantize_static(
        str(path), str(out), Reader(), quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QFLOAT8E4M3FN if eight else QuantType.QInt8,
        weight_type=QuantType.QFLOAT8E4M3FN if eight else QuantType.QInt8,
        calibrate_method=CalibrationMethod.Distribution if eight else CalibrationMethod.MinMax,
        op_types_to_quantize=["MatMul", "Gemm", "Conv"],
    )  # fmt: skip
    return out


def quantized_path(path: Path, inputs: dict[str, np.ndarray], kind: str, draw) -> dict[str, Any]:
    """The record's fields for `kind`: the quantized model's Q/DQ nodes; onnxruntime's
    quantization error; each backend's relative error against onnxruntime on the quantized
    model, its quantization error and whether it matches (see the module docstring); on
    cuda-host the 8-bit mma ops the program holds."""
    import onnx
    from real_models import onnxruntime_session

    import irkit
    from irkit.dialects.warp import MmaM16n8k32F8Op
    from irkit.errors import IrkitError

    record: dict[str, Any] = {}
    try:
        quantized = quantize(path, inputs, kind, draw)
    except Exception as e:  # noqa: BLE001 - the quantizer's failure is recorded, not ours
        return {f"{kind}_error": f"onnxruntime could not quantize: {type(e).__name__}: {e}"[:300]}
    ops = [n.op_type for n in onnx.load(str(quantized)).graph.node]
    record[f"{kind}_qdq_nodes"] = sum(op in ("QuantizeLinear", "DequantizeLinear") for op in ops)
    import onnxruntime as ort

    plain = ort.SessionOptions()  # the QDQ graph as written, each node ONNX's meaning
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(quantized), plain, providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, inputs)
    (exact,) = onnxruntime_session(path, 1).run(None, inputs)
    scale = float(np.linalg.norm(expected)) or 1.0

    def noise(out: np.ndarray) -> float:
        """Distance from the float model's output, relative to it."""
        return float(np.linalg.norm(out.astype(np.float64) - exact) / (np.linalg.norm(exact) or 1))

    record[f"{kind}_ort_quantization_error"] = noise(expected)
    try:  # onnxruntime's own optimizer, which may fail on its own QDQ graph
        (optimized,) = onnxruntime_session(quantized, 1).run(None, inputs)
        record[f"{kind}_ort_optimized_quantization_error"] = noise(optimized)
    except Exception as e:  # noqa: BLE001 - recorded: a peer's failure, not irkit's
        record[f"{kind}_ort_optimized_error"] = f"{type(e).__name__}: {e}"[:300]
    try:
        module = irkit.load(str(quantized))
        for backend in ("cpu", "cuda-host"):
            started = time.perf_counter()
            exe = irkit.compile(module, backend=backend)
            (got,) = exe(*inputs.values())
            error = float(np.linalg.norm(got.astype(np.float64) - expected) / scale)
            record[f"{kind}_{backend}_rel_error"] = error
            record[f"{kind}_{backend}_quantization_error"] = noise(got)
            faithful = noise(got) <= NOISE * record[f"{kind}_ort_quantization_error"]
            record[f"{kind}_{backend}_matches"] = error <= 1e-4 or faithful
            record[f"{kind}_{backend}_compile_s"] = round(time.perf_counter() - started, 2)
            if backend == "cuda-host":
                walked = exe.module.walk()
                record[f"{kind}_mma_f8"] = sum(isinstance(op, MmaM16n8k32F8Op) for op in walked)
    except IrkitError as e:
        record[f"{kind}_error"] = str(e)[:300]
    return record
