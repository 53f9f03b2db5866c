"""The layout passes: fold-constants and fold-transposes compute what the model computes
(checked against the float64 reference on the CPU and, for the CUDA path, under lockstep),
and change the IR as they say."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import irkit
from irkit.dialects import graph as g
from irkit.errors import IrkitError
from irkit.ir import shape_of
from irkit.pipelines import apply_passes, parse_passes
from irkit.runtime.check import check
from tests.conftest import SMALL
from tests.test_onnx_frontend import cnn_model, transformer_model

TRANSPOSES = """
model tr
input x : f32[8, 16, 4]
input y : f32[8, 16, 4]
input w : f32[4, 16]
a = transpose(x, perm=[2, 0, 1])
b = transpose(y, perm=[2, 0, 1])
c = gelu(relu(a * 2.0) + b)
output z = transpose(c, perm=[1, 2, 0])
output m = matmul(transpose(transpose(w)), transpose(w))
output u = sigmoid(transpose(x, perm=[1, 0, 2]))
"""


def _count(module, cls) -> int:
    return sum(isinstance(op, cls) for op in module.walk())


def _checked(module, spec: str, backend: str = "cpu") -> None:
    exe = irkit.compile(module, spec, backend=backend)
    checks, _ = check(exe, module, seed=7)
    assert checks and all(c.passed for c in checks), (spec, [c.describe() for c in checks])


@pytest.fixture
def transposes(tmp_path: Path):
    path = tmp_path / "tr.graph"
    path.write_text(TRANSPOSES)
    return irkit.load(path)


@pytest.mark.parametrize(("sink", "left"), [("true", 2), ("false", 5)])
def test_fold_transposes_cancels_and_sinks(transposes, sink: str, left: int) -> None:
    assert _count(transposes, g.TransposeOp) == 7
    folded = apply_passes(transposes.clone(), parse_passes(f"fold-transposes{{sink={sink}}}"))
    # sink: the z path's three cancel (x's and y's sink through *, relu, + and gelu and meet
    # z's); transpose(transpose(w)) is w; what is left: w's one and u's, sunk below sigmoid.
    # No sinking: only the double transpose of w composes away (7 - 2).
    assert _count(folded, g.TransposeOp) == left
    if sink == "true":
        u = next(op for op in folded.walk() if isinstance(op, g.SigmoidOp))
        assert not isinstance(u.input.owner, g.TransposeOp)  # sigmoid reads x in place
        assert isinstance(u.result.get_user_of_unique_use(), g.TransposeOp)
    for spec in ("fold-transposes", f"fold-transposes{{sink={sink}}}"):
        _checked(transposes, f"{spec},fuse-kernels,lower-graph-to-loops")
        _checked(transposes, f"{spec},lower-graph-to-loops")


def test_fold_transposes_preserves_every_example(example: Path) -> None:
    module = irkit.load(example, SMALL[example.stem])
    _checked(module, "fold-transposes,default-cpu")


def test_fold_transposes_on_an_exported_transformer(tmp_path: Path) -> None:
    path = tmp_path / "block.onnx"
    onnx.save(transformer_model(), path)
    module = irkit.load(path)
    folded = apply_passes(module.clone(), parse_passes("fold-transposes"))
    # o0's head transpose sinks into nothing (a reshape follows); nothing cancels here, and
    # nothing may change what the block computes.
    assert _count(folded, g.TransposeOp) <= _count(module, g.TransposeOp)
    _checked(module, "fold-transposes,default-cpu")


def _conv_net(tmp_path: Path, name: str, nodes: list, weights: dict, out: list[int],
              extra: tuple = ()):  # fmt: skip
    """An ONNX model of `nodes` from x: f32[1, 4, 6, 6] to y: f32`out`, its `weights` random
    initializers (and `extra` ones as given), loaded."""
    rng = np.random.default_rng(len(name))
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), k)
             for k, s in weights.items()]  # fmt: skip
    graph = helper.make_graph(nodes, name,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
                              [*inits, *extra])  # fmt: skip
    path = tmp_path / f"{name}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return irkit.load(path)


def _folded_bit_for_bit(module):
    """The module after conv-layout, fold-transposes and fold-constants, once its loops with
    fold-transposes computed the same bits as without it, and default-cpu matched the
    reference."""
    inputs = [np.random.default_rng(4).standard_normal((1, 4, 6, 6)).astype(np.float32)]
    plain = irkit.compile(module, "conv-layout,lower-graph-to-loops", "cpu")(*inputs)
    folded = irkit.compile(module, "conv-layout,fold-transposes,lower-graph-to-loops", "cpu")
    np.testing.assert_array_equal(plain[0], folded(*inputs)[0])
    _checked(module, "default-cpu")
    return apply_passes(module.clone(), parse_passes("conv-layout,fold-transposes,fold-constants"))


def test_fold_transposes_cancels_across_an_exported_pad(tmp_path: Path) -> None:
    """Conv -> Pad -> Conv -> Pad(0) -> Conv as torch exports TF-style padding: the Pad's
    zero slabs (concatenated constants) and the zero-width Pad (an identity broadcast_to)
    kept every conv's transposes out of NHWC from cancelling (MobileNet v2: 104 of them,
    5.75 -> 1.51 ms once they cancel); now one transpose in and one out, and the same
    values bit for bit."""
    pads = [numpy_helper.from_array(np.array(v, np.int64), k)
            for k, v in (("pads", [0, 0, 1, 0, 0, 0, 0, 1]), ("none", [0] * 8))]  # fmt: skip
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1"], ["h"]), n("Pad", ["h", "pads"], ["p"]),
             n("Conv", ["p", "w2"], ["c"]), n("Pad", ["c", "none"], ["q"]),
             n("Conv", ["q", "w3"], ["y"])]  # fmt: skip
    weights = {"w1": (8, 4, 1, 1), "w2": (8, 8, 3, 3), "w3": (8, 8, 1, 1)}
    folded = _folded_bit_for_bit(_conv_net(tmp_path, "padded", nodes, weights, [1, 8, 5, 5], pads))
    assert _count(folded, g.TransposeOp) == 2 and _count(folded, g.BroadcastToOp) == 0


@pytest.mark.parametrize("activation", ["silu", "hardswish", "square"])
def test_fold_transposes_cancels_across_an_activation_that_reads_its_input_twice(
    tmp_path: Path, activation: str
) -> None:
    """x * f(x) between two convolutions (SiLU, HardSwish as the importer composes it, x * x):
    the transpose that both factors read is split, sunk through each, and cancels with the
    next conv's; the same values bit for bit."""
    n = helper.make_node
    act = {"silu": [n("Sigmoid", ["h"], ["s"]), n("Mul", ["h", "s"], ["a"])],
           "hardswish": [n("HardSwish", ["h"], ["a"])],
           "square": [n("Mul", ["h", "h"], ["a"])]}[activation]  # fmt: skip
    nodes = [n("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]), *act, n("Conv", ["a", "w2"], ["y"])]
    weights = {"w1": (8, 4, 3, 3), "w2": (8, 8, 1, 1)}
    folded = _folded_bit_for_bit(_conv_net(tmp_path, activation, nodes, weights, [1, 8, 6, 6]))
    assert _count(folded, g.TransposeOp) == 2  # into NHWC at the top, back at the bottom


def test_fold_transposes_cancels_across_a_squeeze_excite_block(tmp_path: Path) -> None:
    """conv -> SiLU -> squeeze-excite (global average pool, 1x1 convs, sigmoid, the
    activation scaled by it) -> conv, as EfficientNet exports it: the pool takes the
    transpose below itself as a mean over the channels-last spatial axes, and every layout
    transpose inside the block cancels; the same values bit for bit."""
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]), n("Sigmoid", ["h"], ["hs"]),
             n("Mul", ["h", "hs"], ["a"]), n("GlobalAveragePool", ["a"], ["p"]),
             n("Conv", ["p", "wr"], ["r"]), n("Relu", ["r"], ["rr"]), n("Conv", ["rr", "we"], ["e"]),
             n("Sigmoid", ["e"], ["es"]), n("Mul", ["a", "es"], ["m"]), n("Conv", ["m", "w2"], ["y"])]  # fmt: skip
    weights = {"w1": (8, 4, 3, 3), "wr": (2, 8, 1, 1), "we": (8, 2, 1, 1), "w2": (8, 8, 1, 1)}
    folded = _folded_bit_for_bit(_conv_net(tmp_path, "se", nodes, weights, [1, 8, 6, 6]))
    assert _count(folded, g.GlobalAvgPoolOp) == 0 and _count(folded, g.ReduceMeanOp) == 1
    big = [op for op in folded.walk() if isinstance(op, g.TransposeOp)
           and math.prod(shape_of(op.result)) > 8]  # fmt: skip
    assert len(big) == 2  # into NHWC at the top, back at the bottom


def _gemm_trans_b(tmp_path: Path, dtype=np.float32, shape=(48, 40)) -> Path:
    """y = relu(x @ W^T + b), with W an initializer, as torch.nn.Linear exports it."""
    rng = np.random.default_rng(8)
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    inits = [
        numpy_helper.from_array(rng.uniform(-0.3, 0.3, shape).astype(dtype), "W"),
        numpy_helper.from_array(rng.uniform(-0.3, 0.3, shape[:1]).astype(dtype), "b"),
    ]
    n = helper.make_node
    nodes = [n("Gemm", ["x", "W", "b"], ["y0"], transB=1), n("Relu", ["y0"], ["y"])]
    graph = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("x", elem, [16, shape[1]])],
                              [helper.make_tensor_value_info("y", elem, [16, shape[0]])], inits)  # fmt: skip
    path = tmp_path / "linear.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_fold_constants_pre_transposes_a_gemm_weight(tmp_path: Path, dtype) -> None:
    module = irkit.load(_gemm_trans_b(tmp_path, dtype))
    assert _count(module, g.TransposeOp) == 1
    folded = apply_passes(module.clone(), parse_passes("fold-constants"))
    assert _count(folded, g.TransposeOp) == 0
    matmul = next(op for op in folded.walk() if isinstance(op, g.MatmulOp))
    weight = matmul.rhs.owner
    assert isinstance(weight, g.ConstantOp) and weight.result.type.get_shape() == (40, 48)
    w = numpy_helper.to_array(onnx.load(tmp_path / "linear.onnx").graph.initializer[0])
    got = np.array(weight.value.get_values(), dtype=np.float64).reshape(40, 48)
    np.testing.assert_array_equal(got, w.T.astype(np.float64))  # movement folds exactly
    before = irkit.compile(module, "lower-graph-to-loops", backend="cpu")
    after = irkit.compile(module, "fold-constants,lower-graph-to-loops", backend="cpu")
    assert len(after.kernels) == len(before.kernels) - 1  # the per-call transpose is gone
    for spec in ("fold-constants,lower-graph-to-loops", "fold-constants,default-cpu"):
        _checked(module, spec)
    _checked(module, "fold-constants,default-cuda", backend="cuda-sim")


def test_fold_constants_on_the_exported_cnn(tmp_path: Path) -> None:
    path = tmp_path / "cnn.onnx"
    onnx.save(cnn_model(), path)
    module = irkit.load(path)
    folded = apply_passes(module.clone(), parse_passes("fold-constants"))
    assert _count(folded, g.TransposeOp) < _count(module, g.TransposeOp)
    _checked(module, "fold-constants,default-cpu")


def test_fold_constants_respects_max_elements(tmp_path: Path) -> None:
    module = irkit.load(_gemm_trans_b(tmp_path))
    small = apply_passes(module.clone(), parse_passes("fold-constants{max-elements=1919}"))
    assert _count(small, g.TransposeOp) == 1  # 40 x 48 = 1920 elements: over the limit
    exact = apply_passes(module.clone(), parse_passes("fold-constants{max-elements=1920}"))
    assert _count(exact, g.TransposeOp) == 0
    with pytest.raises(
        IrkitError, match="pass .fold-constants.: option max-elements=0: must be at least 1"
    ):
        irkit.compile(module, "fold-constants{max-elements=0},lower-graph-to-loops")


def test_fold_constants_folds_a_chain_to_one_value() -> None:
    module = irkit.load(Path(__file__).parent / "filecheck/passes/fold-constants.mlir")
    folded = apply_passes(module.clone(), parse_passes("fold-constants"))
    (const,) = [op for op in folded.walk() if isinstance(op, g.ConstantOp)]
    w = np.arange(1.0, 9.0).reshape(2, 4)
    got = np.array(const.value.get_values()).reshape(4, 2)
    np.testing.assert_array_equal(got, (w.T * 0.5).astype(np.float32))
    _checked(module, "fold-constants,lower-graph-to-loops")
    _checked(module, "fold-constants,default-cuda", backend="cuda-sim")


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_large_weights_are_linked_not_printed(tmp_path: Path, dtype) -> None:
    # 160 x 96 weights: 60 KB in f32, 30 KB in f16, over the 16 KiB written into the IR.
    module = irkit.load(_gemm_trans_b(tmp_path, dtype, shape=(160, 96)))
    for spec in ("fold-constants,lower-graph-to-loops", "default-cpu"):
        exe = irkit.compile(module, spec, backend="cpu")
        linked = [line for line in exe.llvm_ir.splitlines() if line.startswith('@"irkit.const.')]
        declared = r'@"irkit\.const\.\w+" = external constant \[15360 x \w+\], align 64'
        assert linked and all(re.fullmatch(declared, line) for line in linked)  # no values
        checks, _ = check(exe, module, seed=9)
        assert all(c.passed for c in checks), [c.describe() for c in checks]
    again = irkit.compile(module, "default-cpu", backend="cpu")  # same bytes, same symbol
    assert [x for x in again.llvm_ir.split() if "irkit.const." in x] == [
        x for x in exe.llvm_ir.split() if "irkit.const." in x
    ]


def test_nothing_to_fold_leaves_the_module_alone() -> None:
    module = irkit.load("examples/mlp.graph", SMALL["mlp"])
    text = str(module)
    assert str(apply_passes(module.clone(), parse_passes("fold-constants"))) == text
