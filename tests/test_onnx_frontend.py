"""The ONNX frontend (in progress, issue 5): real models written with onnx.helper import,
compile for the CPU and match onnx.reference.ReferenceEvaluator; bad files are one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import irkit
from irkit.errors import IrkitError


def mlp_model(batch: str | int = 4) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.uniform(-1, 1, (8, 16)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.uniform(-1, 1, (16,)).astype(np.float32), "b1")
    shape = numpy_helper.from_array(np.array([0, 4, 4], dtype=np.int64), "shape")
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["r"], name="act"),
        helper.make_node("Reshape", ["r", "shape"], ["r3"], name="split_heads"),
        helper.make_node("Softmax", ["r3"], ["y"], name="probs", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 4])],
        [w1, b1, shape],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_helper_built_model_imports_compiles_and_matches_onnx(tmp_path: Path) -> None:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), path)
    module = irkit.load(path)
    exe = irkit.compile(module, backend="cpu")
    x = np.random.default_rng(1).uniform(-1, 1, (4, 8)).astype(np.float32)
    (ours,) = exe(x)
    (theirs,) = ReferenceEvaluator(mlp_model()).run(None, {"x": x})
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_symbolic_dims_need_a_size(tmp_path: Path) -> None:
    path = tmp_path / "dyn.onnx"
    onnx.save(mlp_model("N"), path)
    with pytest.raises(IrkitError, match="input 'x' has a dynamic dim 'N'; give --dim N=SIZE"):
        irkit.load(path)
    assert irkit.ir.entry_function(irkit.load(path, {"N": 2})).function_type.inputs.data[
        0
    ].get_shape() == (2, 8)


def test_not_an_onnx_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\x08\x07garbage that is not a protobuf model \xff\xfe")
    with pytest.raises(IrkitError) as info:
        irkit.load(path)
    assert str(info.value).startswith(f"{path}: error: not an ONNX model")
    assert "\n" not in str(info.value)


def test_an_unsupported_op_names_the_node(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Sin", ["x"], ["y"], name="wave")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )  # fmt: skip
    path = tmp_path / "sin.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(IrkitError) as info:
        irkit.load(path)
    assert str(info.value) == (
        f"{path}: node 'wave' (Sin, domain ai.onnx, opset 17): error: this op is not supported"
    )
