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


def test_tensor_names_that_are_not_ssa_names_compile(tmp_path: Path) -> None:
    """ONNX names inputs and outputs freely (the model zoo's resnet50 ends in
    `gpu_0/softmax_1`); the names become valid SSA name hints at every level."""
    nodes = [helper.make_node("Relu", ["data/0"], ["gpu_0/relu:1"]),
             helper.make_node("Softmax", ["gpu_0/relu:1"], ["gpu_0/softmax_1"], axis=-1)]  # fmt: skip
    graph = helper.make_graph(
        nodes, "names",
        [helper.make_tensor_value_info("data/0", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("gpu_0/softmax_1", TensorProto.FLOAT, [2, 5])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "names.onnx")
    exe = irkit.compile(tmp_path / "names.onnx", "default-cpu", backend="cpu")
    x = np.random.default_rng(2).uniform(-1, 1, (2, 5)).astype(np.float32)
    (theirs,) = ReferenceEvaluator(model).run(None, {"data/0": x})
    np.testing.assert_allclose(exe(x)[0], theirs, rtol=1e-5, atol=1e-6)


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
        [helper.make_node("Tan", ["x"], ["y"], name="wave")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )  # fmt: skip
    path = tmp_path / "tan.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(IrkitError) as info:
        irkit.load(path)
    assert str(info.value) == (
        f"{path}: node 'wave' (Tan, domain ai.onnx, opset 17): error: this op is not supported"
    )


def _init(rng, name: str, shape, scale: float = 0.3, positive: bool = False) -> onnx.TensorProto:
    values = rng.uniform(0.5, 1.5, shape) if positive else rng.uniform(-scale, scale, shape)
    return numpy_helper.from_array(values.astype(np.float32), name)


def _ints(name: str, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def cnn_model() -> onnx.ModelProto:
    """Two conv blocks (conv+bias, batch norm, relu, pools) and a classifier head."""
    rng = np.random.default_rng(3)
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "c1"], ["a1"], pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["a1", "s1", "b1", "m1", "v1"], ["n1"]),
        n("Relu", ["n1"], ["r1"]),
        n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["p1", "w2"], ["a2"], strides=[2, 2], auto_pad="SAME_UPPER", group=2),
        n("Relu", ["a2"], ["r2"]),
        n("AveragePool", ["r2"], ["p2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("GlobalAveragePool", ["p2"], ["g"]),
        n("Flatten", ["g"], ["f"]),
        n("Gemm", ["f", "fc", "fb"], ["logits"], transB=1, alpha=0.5),
        n("Softmax", ["logits"], ["y"]),
    ]
    inits = [
        _init(rng, "w1", (8, 3, 3, 3)), _init(rng, "c1", (8,)), _init(rng, "s1", (8,)),
        _init(rng, "b1", (8,)), _init(rng, "m1", (8,)), _init(rng, "v1", (8,), positive=True),
        _init(rng, "w2", (8, 4, 3, 3)), _init(rng, "fc", (10, 8)), _init(rng, "fb", (10,)),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def transformer_model() -> onnx.ModelProto:
    """Pre-norm block: 2-head self-attention and a GELU MLP, with residuals (opset 20)."""
    rng = np.random.default_rng(4)
    b, s, d, h, f = 2, 8, 16, 2, 32
    n = helper.make_node
    heads = ["q", "k", "v"]
    nodes = [n("LayerNormalization", ["x", "g1", "be1"], ["ln1"], axis=-1)]
    for t in heads:
        nodes += [
            n("MatMul", ["ln1", f"w{t}"], [f"{t}0"]),
            n("Reshape", [f"{t}0", "split"], [f"{t}1"]),
            n("Transpose", [f"{t}1"], [f"{t}h"], perm=[0, 2, 1, 3] if t != "k" else [0, 2, 3, 1]),
        ]
    nodes += [
        n("MatMul", ["qh", "kh"], ["sc0"]),
        n("Div", ["sc0", "scale"], ["sc"]),
        n("Softmax", ["sc"], ["p"], axis=-1),
        n("MatMul", ["p", "vh"], ["o0"]),
        n("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
        n("Reshape", ["o1", "merge"], ["o2"]),
        n("MatMul", ["o2", "wo"], ["o3"]),
        n("Add", ["x", "o3"], ["x1"]),
        n("LayerNormalization", ["x1", "g2", "be2"], ["ln2"], axis=-1),
        n("MatMul", ["ln2", "w1"], ["m0"]),
        n("Add", ["m0", "mb1"], ["m1"]),
        n("Gelu", ["m1"], ["m2"]),
        n("MatMul", ["m2", "w2"], ["m3"]),
        n("Add", ["m3", "mb2"], ["m4"]),
        n("Add", ["x1", "m4"], ["y"]),
    ]
    inits = [
        _init(rng, "g1", (d,), positive=True), _init(rng, "be1", (d,)),
        _init(rng, "g2", (d,), positive=True), _init(rng, "be2", (d,)),
        *[_init(rng, f"w{t}", (d, d)) for t in [*heads, "o"]],
        _init(rng, "w1", (d, f)), _init(rng, "mb1", (f,)), _init(rng, "w2", (f, d)), _init(rng, "mb2", (d,)),
        _ints("split", [0, 0, h, d // h]), _ints("merge", [0, 0, d]),
        numpy_helper.from_array(np.array(np.sqrt(d // h), dtype=np.float32), "scale"),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, s, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, s, d])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


@pytest.mark.parametrize("make", [cnn_model, transformer_model], ids=["cnn", "transformer_block"])
def test_real_models_match_onnx_reference_evaluator(make, tmp_path: Path) -> None:
    model = make()
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    module = irkit.load(path)
    x = irkit.random_inputs(module, seed=5)[0]
    (theirs,) = ReferenceEvaluator(model).run(None, {"x": x})
    for backend in ("reference", "cpu"):
        (ours,) = irkit.compile(module, backend=backend)(x)
        np.testing.assert_allclose(ours, theirs, rtol=2e-4, atol=2e-5, err_msg=backend)


def test_onnx_models_run_through_the_command_line_tools(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "cnn.onnx"
    onnx.save(cnn_model(), path)
    r = subprocess.run(
        [sys.executable, "-m", "irkit.cli.opt", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "graph.conv2d" in r.stdout and "graph.softmax" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "irkit.cli.bench", "run", str(path), "--backend", "cpu", "--budget", "0.05"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    # default-cpu: the first conv block is an implicit GEMM, its im2col read in place by the
    # matmul with its epilogue, one kernel
    assert "y: ok (relative error" in r.stdout and "im2col_matmul" in r.stdout


def test_a_truncated_file_is_one_line(tmp_path: Path) -> None:
    data = cnn_model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(IrkitError) as info:
        irkit.load(path)
    assert str(info.value).startswith(f"{path}: error: not an ONNX model") and "\n" not in str(
        info.value
    )


def test_missing_external_data_is_one_line(tmp_path: Path) -> None:
    model = cnn_model()
    path = tmp_path / "ext.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)  # fmt: skip
    assert irkit.load(path)  # complete: loads
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(IrkitError) as info:
        irkit.load(path)
    assert (
        str(info.value)
        == f"{path}: error: external data file missing or unreadable: 'weights.bin' (tensor 'w1')"
    )
