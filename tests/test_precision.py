"""Models in f16 and bf16 (`irkit.frontend.precision`, `irkit.load(dtype=)`, `--dtype`): the
conversion itself, and every example converted and run on the GPU path's host backends under
`default-cuda`, its matmuls on tensor cores, against the float64 reference within the type's
tolerance."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects.builtin import Float32Type, TensorType

import irkit
from irkit.dialects import graph as g
from irkit.dialects.warp import MMA_OPS
from irkit.dtypes import DTYPES, dense_array
from irkit.errors import IrkitError
from irkit.frontend.precision import convert_floats
from irkit.ir import model_function
from irkit.pipelines import apply_passes, parse_passes
from irkit.runtime.check import check
from tests.conftest import EXAMPLES, ROOT, SMALL

TOP = {"f16": 65504.0, "bf16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)}


def _onnx_model(path: Path) -> Path:
    """Token ids (int64) gather rows of an f32 table; a mask built the way exporters build
    it, (1 - m) * finfo(float32).min; a floor of -1e30 under the matmul's scores."""
    table = np.linspace(-1, 1, 10 * 8, dtype=np.float32).reshape(10, 8)
    w = np.full((8, 4), 0.25, np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["rows"]),
        helper.make_node("MatMul", ["rows", "w"], ["product"]),
        helper.make_node("Max", ["product", "floor"], ["scores"]),
        helper.make_node("Sub", ["one", "m"], ["off"]),
        helper.make_node("Mul", ["off", "lowest"], ["bias"]),
        helper.make_node("Add", ["scores", "bias"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(table, "table"),
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(-1e30, np.float32), "floor"),
        numpy_helper.from_array(np.array(np.finfo(np.float32).min, np.float32), "lowest"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, [3]),
            helper.make_tensor_value_info("m", TensorProto.FLOAT, [3, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_every_f32_tensor_takes_the_type_and_constants_saturate(dtype: str, tmp_path) -> None:
    """Inputs, weights, intermediates and outputs all become `dtype`; the int64 ids stay;
    constants are rounded to the type, and finfo(float32).min and -1e30 saturate at the
    type's largest finite value (f32's min is past even bf16's range) instead of becoming
    -inf, where `0 * -inf` would be NaN."""
    module = irkit.load(_onnx_model(tmp_path / "m.onnx"), dtype=dtype)
    narrow = DTYPES[dtype]
    types = [
        t
        for op in module.walk()
        for t in [*op.result_types, *op.operand_types]
        if isinstance(t, TensorType)
    ]
    assert not [t for t in types if isinstance(t.element_type, Float32Type)]
    assert {str(t.element_type) for t in types} == {str(narrow), "i64"}
    values = [dense_array(op.value) for op in module.walk() if isinstance(op, g.ConstantOp)]
    assert all(np.isfinite(v.astype(np.float64)).all() for v in values)
    lowest = min(float(v.astype(np.float64).min(initial=np.inf)) for v in values)
    assert lowest == -TOP[dtype]
    inputs = irkit.random_inputs(module, seed=0)
    assert inputs[1].dtype == np.dtype(ml_dtypes.bfloat16 if dtype == "bf16" else np.float16)
    exe = irkit.compile(module, "default-cuda", "cuda-host")
    checks, _ = check(exe, module, 0)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


def test_conversion_refuses_loop_level_ir_and_unknown_types() -> None:
    module = irkit.load(ROOT / "examples/gemm.graph", SMALL["gemm"])
    lowered = apply_passes(module, parse_passes("default-cpu"))
    with pytest.raises(IrkitError, match="converts graph-level models, not loop-level IR"):
        convert_floats(lowered, "bf16")
    with pytest.raises(IrkitError, match="dtype must be one of f32, f16, bf16"):
        irkit.load(ROOT / "examples/gemm.graph", dtype="fp8")
    same = irkit.load(ROOT / "examples/gemm.graph", SMALL["gemm"], dtype="f32")
    assert str(same) == str(irkit.load(ROOT / "examples/gemm.graph", SMALL["gemm"]))


HAS_MATMUL = {"conv_block", "gemm", "llama_block", "mlp", "transformer_block"}
"""The examples whose matmuls (conv_block's convolutions become one) reach gpu-tile-matmul's
tensor-core tiles. llama_decode's are one row times a matrix: the GEMV kernel
(`irkit.passes.gpu_gemv`), no tile of B to share, no mma."""


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_runs_in_half_precision_on_cuda_host(example: Path, dtype: str) -> None:
    """The acceptance of "Tensor cores and low precision": each example converted to f16 and
    bf16, under default-cuda on cuda-host (the printed CUDA C, compiled for the host), within
    the type's tolerance; those with matmuls issue them as mma.sync (HMMA on the GPU)."""
    module = irkit.load(example, SMALL[example.stem], dtype=dtype)
    exe = irkit.compile(module, "default-cuda", "cuda-host")
    checks, _ = check(exe, module, seed=1)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    assert {c.dtype for c in checks} <= {"float16", "bfloat16"}
    mma = sum(isinstance(op, MMA_OPS) for op in exe.module.walk())
    assert (mma > 0) == (example.stem in HAS_MATMUL), mma


@pytest.mark.parametrize("example", ["gemm", "mlp", "conv_block"])
def test_half_models_match_on_lockstep_too(example: str) -> None:
    """cuda-sim interprets the same IR warp by warp (the mma and ldmatrix layouts over whole
    warps, barriers and races checked): the bf16 models agree there too."""
    module = irkit.load(ROOT / f"examples/{example}.graph", SMALL[example], dtype="bf16")
    exe = irkit.compile(module, "default-cuda", "cuda-sim")
    checks, _ = check(exe, module, seed=2)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


def _cli(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_dtype_on_the_command_lines(tmp_path: Path) -> None:
    """`irkit-opt --dtype bf16` writes the converted model, which every command reads;
    `irkit-bench run --dtype f16` says and records the type it ran."""
    out = tmp_path / "gemm_bf16.mlir"
    done = _cli(
        "irkit.cli.opt", "examples/gemm.graph", "--dtype", "bf16", "--dim", "M=16", "-o", str(out)
    )
    assert done.returncode == 0, done.stderr
    fn = model_function(irkit.load(out))
    assert {str(t.element_type) for t in [*fn.function_type.inputs, *fn.function_type.outputs]} == {
        "bf16"
    }
    record = tmp_path / "run.json"
    done = _cli("irkit.cli.bench", "run", "examples/gemm.graph", "--dtype", "f16", "--dim", "M=16",
                "--backend", "cpu", "--budget", "0.05", "--json", str(record))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "as f16" in done.stdout and "tolerance 5e-03" in done.stdout
    data = json.loads(record.read_text())
    assert data["dtype"] == "f16" and data["correct"] and data["checks"][0]["dtype"] == "float16"
    from irkit.measure.history import points_of

    series = {s["workload"] for s, _ in points_of(data)}
    assert series == {"gemm-f16"}, series  # never one series with the f32 runs of gemm


@pytest.mark.parametrize("backend", ["cuda-host", "cuda-sim"])
def test_half_models_accumulate_in_f32_where_it_matters(backend: str) -> None:
    """A sum of 4096 f16 ones is 4096: summed in f16 it would stop at 2048 (2049 is not an
    f16). The row sum, the matmul (on tensor cores) and softmax's statistics (each of 4096
    equal scores gets 1/4096) accumulate in f32 on the GPU path."""
    from irkit.frontend import parse_source

    cases = {
        "output y = reduce_sum(x, axes=[1])": 4096.0,
        "input w : f16[4096, 8]\noutput y = matmul(x, w)": 4096.0,
        "output y = softmax(x, axis=-1)": 1 / 4096,
    }
    for body, expected in cases.items():
        graph = parse_source(f"model s\ninput x : f16[4, 4096]\n{body}\n", "s.graph", ".graph")
        exe = irkit.compile(graph, "default-cuda", backend)
        ones = [np.ones(a.shape, np.float16) for a in irkit.random_inputs(graph, seed=0)]
        got = np.asarray(exe(*ones)[0], np.float64)
        assert np.all(got == np.float64(np.float16(expected))), (body, got.ravel()[:4])


def test_tune_and_advise_take_the_converted_model() -> None:
    """`tune` and `advise` (`--dtype` on both) measure the converted model and say so in
    their records: the candidates are checked at bf16's tolerance against its reference."""
    from irkit.measure.advice import AdviseOptions, advise
    from irkit.measure.tune import tune

    gemm, dims = ROOT / "examples/gemm.graph", {"M": 32, "N": 32, "K": 32}
    tuned = tune(gemm, "cpu-tile-matmul{nr=16,32}", None, "cpu", dims, budget_s=0.5,
                 store=False, dtype="bf16")  # fmt: skip
    record = tuned.to_json()
    assert record["dtype"] == "bf16" and all(p["wrong"] is None for p in record["programs"])
    advised = advise(gemm, None, "cpu", dims, AdviseOptions(budget_s=1.0), None, "bf16")
    assert advised.to_json()["dtype"] == "bf16"
