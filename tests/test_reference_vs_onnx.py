"""The numpy reference against an independent one: onnx.reference.ReferenceEvaluator.

Each case writes one graph op in the .graph language and the equivalent ONNX node(s) with
onnx.helper; both run on the same random inputs (float32 for ONNX, the reference in
float64), and must agree to float32 rounding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import irkit
from irkit.frontend.graph_lang import parse_graph


@dataclass
class Case:
    name: str
    expr: str  # the .graph expression for output y
    inputs: dict[str, list[int]]
    nodes: list[onnx.NodeProto]
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)  # inputs not f32: "i64", "i1", ...
    opset: int = 20  # Attention came in opset 23


def ints(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def node(op: str, inputs: list[str], **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, ["y"], **attrs)


X, XZ, IMG = {"x": [3, 4]}, {"x": [3, 4], "z": [4]}, {"x": [2, 4, 9, 9]}
CASES = [
    Case("matmul", "matmul(x, z)", {"x": [3, 5], "z": [5, 4]}, [node("MatMul", ["x", "z"])]),
    Case("batch_matmul", "batch_matmul(x, z)", {"x": [2, 1, 3, 5], "z": [4, 5, 2]}, [node("MatMul", ["x", "z"])]),
    Case(  # 8-bit operands widened by Cast, the product scaled
        "scaled_matmul", "scaled_matmul(x, z, s, t)", {"x": [3, 5], "z": [5, 4], "s": [], "t": [1]},
        [helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
         helper.make_node("Cast", ["z"], ["zf"], to=TensorProto.FLOAT),
         helper.make_node("MatMul", ["xf", "zf"], ["p"]), helper.make_node("Mul", ["p", "s"], ["q"]),
         node("Mul", ["q", "t"])],
        types={"x": "f8e4m3", "z": "f8e5m2"},
    ),
    Case(
        "conv2d", "conv2d(x, w, strides=[2, 1], padding=[1, 0, 2, 1], dilations=[1, 2], groups=2)",
        {"x": [2, 4, 9, 9], "w": [6, 2, 3, 3]},
        [node("Conv", ["x", "w"], strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2], group=2)],
    ),
    Case(  # the channels-last conv, between the transposes that make it the NCHW one
        "conv2d_nhwc",
        "transpose(conv2d(transpose(x, perm=[0, 2, 3, 1]), transpose(w, perm=[2, 3, 1, 0]), strides=[2, 1], "
        'padding=[1, 0, 2, 1], dilations=[1, 2], groups=2, layout="nhwc"), perm=[0, 3, 1, 2])',
        {"x": [2, 4, 9, 9], "w": [6, 2, 3, 3]},
        [node("Conv", ["x", "w"], strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2], group=2)],
    ),
    Case(  # im2col's rows times the HWIO weight as a matrix are the convolution
        "im2col",
        "transpose(reshape(matmul(im2col(transpose(x, perm=[0, 2, 3, 1]), kernel=[3, 3], strides=[2, 1], "
        "padding=[1, 0, 2, 1], dilations=[1, 2]), reshape(transpose(w, perm=[2, 3, 1, 0]), shape=[36, 6])), "
        "shape=[2, 5, 6, 6]), perm=[0, 3, 1, 2])",
        {"x": [2, 4, 9, 9], "w": [6, 4, 3, 3]},
        [node("Conv", ["x", "w"], strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2])],
    ),
    *[Case(op, f"{op}(x, z)" if op in ("max", "min") else f"x {sym} z", XZ, [node(onnx_op, ["x", "z"])])
      for op, sym, onnx_op in [("add", "+", "Add"), ("sub", "-", "Sub"), ("mul", "*", "Mul"), ("div", "/", "Div"),
                               ("max", "", "Max"), ("min", "", "Min")]],
    Case("pow", "pow(abs(x), z)", {"x": [3, 4], "z": [4]}, [helper.make_node("Abs", ["x"], ["ax"]), node("Pow", ["ax", "z"])]),
    *[Case(op, f"{op}(x)", X, [node(onnx_op, ["x"])])
      for op, onnx_op in [("neg", "Neg"), ("abs", "Abs"), ("relu", "Relu"), ("sigmoid", "Sigmoid"), ("tanh", "Tanh"),
                          ("exp", "Exp"), ("erf", "Erf"), ("sin", "Sin"), ("cos", "Cos"), ("floor", "Floor"),
                          ("ceil", "Ceil")]],
    Case("leaky_relu", "leaky_relu(x, alpha=0.2)", X, [node("LeakyRelu", ["x"], alpha=0.2)]),
    Case("gelu", "gelu(x)", X, [node("Gelu", ["x"])]),
    Case("gelu_tanh", 'gelu(x, approximate="tanh")', X, [node("Gelu", ["x"], approximate="tanh")]),
    *[Case(op, f"{op}(abs(x) + 0.5)", X,
           [helper.make_node("Abs", ["x"], ["ax"]), helper.make_node("Add", ["ax", "half"], ["p"]), *onnx_nodes],
           [numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half")])
      for op, onnx_nodes in [("log", [node("Log", ["p"])]), ("sqrt", [node("Sqrt", ["p"])]),
                             ("rsqrt", [helper.make_node("Sqrt", ["p"], ["s"]), node("Reciprocal", ["s"])])]],
    *[Case(f"{op}_{kd}", f"{op}(x, axes=[0, -1], keepdims={str(kd).lower()})", {"x": [3, 4, 5]},
           [node(onnx_op, ["x", "axes"], keepdims=int(kd))], [ints("axes", [0, -1])])
      for op, onnx_op in [("reduce_sum", "ReduceSum"), ("reduce_max", "ReduceMax"), ("reduce_mean", "ReduceMean"),
                          ("reduce_min", "ReduceMin"), ("reduce_prod", "ReduceProd")]
      for kd in (False, True)],
    Case("attention", "attention(x, z, w, causal=true)", {"x": [1, 4, 5, 8], "z": [1, 2, 5, 8], "w": [1, 2, 5, 6]},
         [node("Attention", ["x", "z", "w"], is_causal=1)], opset=23),
    Case("softmax", "softmax(x, axis=1)", {"x": [3, 4, 5]}, [node("Softmax", ["x"], axis=1)]),
    Case("layer_norm", "layer_norm(x, g, b, axes=[1, 2], eps=1e-3)", {"x": [3, 4, 5], "g": [4, 5], "b": [4, 5]},
         [node("LayerNormalization", ["x", "g", "b"], axis=1, epsilon=1e-3)]),
    Case("batch_norm", "batch_norm(x, s, b, m, v, eps=1e-3)", {"x": [2, 3, 4, 4], "s": [3], "b": [3], "m": [3], "v": [3]},
         [node("BatchNormalization", ["x", "s", "b", "m", "v"], epsilon=1e-3)]),
    Case("max_pool2d", "max_pool2d(x, kernel=[3, 2], strides=[2, 2], padding=[1, 0, 1, 1])", IMG,
         [node("MaxPool", ["x"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1])]),
    *[Case(f"avg_pool2d_{cip}", f"avg_pool2d(x, kernel=[3, 3], strides=[2, 1], padding=[1, 1, 1, 0], count_include_pad={str(cip).lower()})",
           IMG, [node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 1], pads=[1, 1, 1, 0], count_include_pad=int(cip))])
      for cip in (False, True)],
    Case("global_avg_pool", "global_avg_pool(x)", IMG, [node("GlobalAveragePool", ["x"])]),
    Case("transpose", "transpose(x, perm=[2, 0, 1])", {"x": [3, 4, 5]}, [node("Transpose", ["x"], perm=[2, 0, 1])]),
    Case("reshape", "reshape(x, shape=[5, -1])", {"x": [3, 4, 5]}, [node("Reshape", ["x", "shape"])], [ints("shape", [5, -1])]),
    Case("concat", "concat(x, z, x, axis=-1)", {"x": [3, 4], "z": [3, 2]}, [node("Concat", ["x", "z", "x"], axis=-1)]),
    Case("slice", "slice(x, starts=[1, 0, -4], limits=[3, 4, 5], strides=[1, 2, 2])", {"x": [3, 4, 5]},
         [node("Slice", ["x", "st", "en", "ax", "sp"])],
         [ints("st", [1, 0, -4]), ints("en", [3, 4, 5]), ints("ax", [0, 1, 2]), ints("sp", [1, 2, 2])]),
    *[Case(f"cumsum_{ex}_{rev}", f"cumsum(x, axis=1, exclusive={str(ex).lower()}, reverse={str(rev).lower()})",
           {"x": [3, 4, 5]}, [node("CumSum", ["x", "ax"], exclusive=int(ex), reverse=int(rev))], [numpy_helper.from_array(np.array(1, np.int64), "ax")])
      for ex in (False, True) for rev in (False, True)],
    Case("cumsum_i64", "cumsum(x, axis=-1)", {"x": [2, 6]}, [node("CumSum", ["x", "ax"])], [numpy_helper.from_array(np.array(-1, np.int64), "ax")],
         types={"x": "i64"}),
    Case("gather_elements", "gather_elements(x, i, axis=1)", {"x": [3, 4, 5], "i": [3, 6, 5]},
         [node("GatherElements", ["x", "i"], axis=1)], types={"i": "i64"}),
    *[Case(f"{op}_{last}", f"{op}(floor(x * 4.0), axis=1, keepdims=false, select_last_index={str(last).lower()})",
           {"x": [3, 7]}, [helper.make_node("Mul", ["x", "four"], ["m"]), helper.make_node("Floor", ["m"], ["f"]),
                           node(onnx_op, ["f"], axis=1, keepdims=0, select_last_index=int(last))],
           [numpy_helper.from_array(np.array(4.0, np.float32), "four")])
      for op, onnx_op in [("argmax", "ArgMax"), ("argmin", "ArgMin")] for last in (False, True)],
    Case("scatter_nd", "scatter_nd(x, i, u)", {"x": [4, 3, 5], "i": [2, 2], "u": [2, 5]},
         [node("ScatterND", ["x", "i", "u"])], types={"i": "i64"}),
    Case("gather", "gather(x, i, axis=1)", {"x": [3, 4, 5], "i": [2, 3]}, [node("Gather", ["x", "i"], axis=1)],
         types={"i": "i64"}),
    Case("gather_i32", "gather(x, i, axis=-1)", {"x": [3, 4], "i": [6]}, [node("Gather", ["x", "i"], axis=-1)],
         types={"i": "i32"}),
    Case("broadcast_to", "broadcast_to(z, shape=[2, 3, 4])", {"z": [3, 1]}, [node("Expand", ["z", "shape"])],
         [ints("shape", [2, 3, 4])]),
    *[Case(op, f"{op}(x, z)", {"x": [3, 4], "z": [4]}, [node(onnx_op, ["x", "z"])], types={"x": "i64", "z": "i64"})
      for op, onnx_op in [("equal", "Equal"), ("less", "Less"), ("less_equal", "LessOrEqual"),
                          ("greater", "Greater"), ("greater_equal", "GreaterOrEqual")]],
    Case("less_f32", "less(x, z)", XZ, [node("Less", ["x", "z"])]),
    *[Case(op, f"{op}(x, z)", {"x": [3, 4], "z": [4]}, [node(onnx_op, ["x", "z"])], types={"x": "i1", "z": "i1"})
      for op, onnx_op in [("and", "And"), ("or", "Or"), ("xor", "Xor")]],
    Case("not", "not(x)", X, [node("Not", ["x"])], types={"x": "i1"}),
    Case("is_nan", "is_nan(log(x))", X, [helper.make_node("Log", ["x"], ["l"]), node("IsNaN", ["l"])]),
    Case("is_inf", "is_inf(log(abs(x) - abs(x)) * x, negative=false)", X,  # -inf * x
         [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Sub", ["a", "a"], ["zero"]),
          helper.make_node("Log", ["zero"], ["l"]), helper.make_node("Mul", ["l", "x"], ["q"]),
          node("IsInf", ["q"], detect_negative=0)]),
    Case("where", "where(c, x, z)", {"c": [3, 1], "x": [3, 4], "z": [4]}, [node("Where", ["c", "x", "z"])],
         types={"c": "i1"}),
    *[Case(f"cast_{t}", f"cast(x * 10.0, dtype={t})", X,
           [helper.make_node("Mul", ["x", "k"], ["p"]), node("Cast", ["p"], to=onnx_t)],
           [numpy_helper.from_array(np.array(10.0, dtype=np.float32), "k")])
      for t, onnx_t in [("i64", TensorProto.INT64), ("i32", TensorProto.INT32), ("i1", TensorProto.BOOL)]],
    Case("cast_i64_f32", "cast(x, dtype=f32)", X, [node("Cast", ["x"], to=TensorProto.FLOAT)], types={"x": "i64"}),
    Case("int_div", "(x - z) / (z + 1)", {"x": [3, 4], "z": [4]},  # toward zero, as C's
         [helper.make_node("Sub", ["x", "z"], ["d"]), helper.make_node("Add", ["z", "one"], ["n"]), node("Div", ["d", "n"])],
         [ints("one", [1])], types={"x": "i64", "z": "i64"}),
    Case("cast_f16", "cast(x * 1000.0, dtype=f16)", X,
         [helper.make_node("Mul", ["x", "k"], ["p"]), helper.make_node("Cast", ["p"], ["h"], to=TensorProto.FLOAT16),
          node("Cast", ["h"], to=TensorProto.FLOAT)],
         [numpy_helper.from_array(np.array(1000.0, dtype=np.float32), "k")]),
]  # fmt: skip


def _graph_source(case: Case) -> str:
    decls = "\n".join(
        f"input {n} : {case.types.get(n, 'f32')}[{', '.join(map(str, s))}]"
        for n, s in case.inputs.items()
    )
    return f"model {case.name}\n{decls}\noutput y = {case.expr}\n"


ONNX_TYPES = {
    "f32": TensorProto.FLOAT,
    "f8e4m3": TensorProto.FLOAT8E4M3FN,
    "f8e5m2": TensorProto.FLOAT8E5M2,
    "i64": TensorProto.INT64,
    "i32": TensorProto.INT32,
    "i1": TensorProto.BOOL,
}


def _onnx_model(case: Case, out: np.ndarray) -> onnx.ModelProto:
    inputs = [
        helper.make_tensor_value_info(n, ONNX_TYPES[case.types.get(n, "f32")], s)
        for n, s in case.inputs.items()
    ]
    out_type = {"f": TensorProto.FLOAT, "i": TensorProto.INT64, "b": TensorProto.BOOL}[
        out.dtype.kind
    ]
    if out_type == TensorProto.INT64 and case.name.endswith("i32"):
        out_type = TensorProto.INT32
    output = helper.make_tensor_value_info("y", out_type, list(out.shape))
    graph = helper.make_graph(case.nodes, case.name, inputs, [output], case.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_reference_matches_onnx(case: Case) -> None:
    module = parse_graph(_graph_source(case), f"{case.name}.graph")
    arrays = irkit.random_inputs(module, seed=7)
    (ours,) = irkit.reference(module, *arrays)
    with np.errstate(all="ignore"):  # log(0) = -inf is a value here, not an error
        (theirs,) = ReferenceEvaluator(_onnx_model(case, ours)).run(
            None, dict(zip(case.inputs, arrays, strict=True))
        )
    assert ours.shape == theirs.shape
    if ours.dtype.kind in "bi":  # integers and booleans: exactly
        assert ours.dtype.kind == theirs.dtype.kind
        np.testing.assert_array_equal(ours, theirs)
        return
    assert np.isfinite(ours).all()
    scale = max(1.0, float(np.abs(ours).max()))
    np.testing.assert_allclose(ours, theirs.astype(np.float64), rtol=2e-5, atol=2e-6 * scale)


def test_every_graph_op_is_cross_checked() -> None:
    """No op escapes the cross-check: each op the language offers appears in a case."""
    from irkit.frontend.graph_lang import OPS

    used = {name for name in OPS for c in CASES if f"{name}(" in c.expr}
    used |= {"add", "sub", "mul", "div"}  # written infix
    assert used == set(OPS)
