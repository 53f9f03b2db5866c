"""The ONNX ops real exports need, one small model each, against onnxruntime on the CPU
backend and the GPU path (cuda-host): 1-D convolution and pooling, ceil-mode pooling,
instance and group normalization, padding in every mode, tiling, resizing, and the activations
written as compositions (with inputs where a naive composition overflows)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import irkit

ort = pytest.importorskip("onnxruntime")


def _model(nodes, inputs, outputs, inits=(), opset: int = 18) -> onnx.ModelProto:
    """The model; an output without a shape gets it from onnx's shape inference."""
    given = [o for o in outputs if o.type.tensor_type.HasField("shape")]
    declared = given or [helper.make_empty_tensor_value_info("y")]
    graph = helper.make_graph(nodes, "m", inputs, declared, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model if given else onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _f32(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _init(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


rng = np.random.default_rng(0)
n = helper.make_node

CASES = {
    "conv1d": _model(
        [n("Conv", ["x", "w", "b"], ["y"], strides=[2], pads=[1, 2], dilations=[2], group=2)],
        [_f32("x", [2, 4, 21])], [_f32("y", None)],
        [_init("w", rng.normal(size=(6, 2, 3)).astype(np.float32)),
         _init("b", rng.normal(size=6).astype(np.float32))],
    ),
    "conv1d_same": _model(
        [n("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[3])],
        [_f32("x", [1, 3, 16])], [_f32("y", None)],
        [_init("w", rng.normal(size=(5, 3, 4)).astype(np.float32))],
    ),
    "maxpool_ceil": _model(  # squeezenet1_1's pools
        [n("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)],
        [_f32("x", [1, 3, 14, 14])], [_f32("y", None)],
    ),
    "maxpool_ceil_padded": _model(
        [n("MaxPool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 3], pads=[1, 0, 1, 1], ceil_mode=1)],
        [_f32("x", [1, 2, 10, 11])], [_f32("y", None)],
    ),
    "maxpool_dilated": _model(
        [n("MaxPool", ["x"], ["y"], kernel_shape=[3, 2], strides=[1, 2], dilations=[2, 3], pads=[1, 1, 2, 0], ceil_mode=1)],
        [_f32("x", [1, 3, 11, 12])], [_f32("y", None)],
    ),
    "avgpool_dilated": _model(  # the taps inside the input counted, padding excluded
        [n("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 1], dilations=[2, 2], pads=[2, 1, 2, 1])],
        [_f32("x", [1, 2, 9, 8])], [_f32("y", None)], opset=19,
    ),
    "avgpool_ceil": _model(
        [n("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)],
        [_f32("x", [1, 2, 10, 10])], [_f32("y", None)],
    ),
    "maxpool1d": _model(
        [n("MaxPool", ["x"], ["y"], kernel_shape=[3], strides=[2], pads=[1, 1])],
        [_f32("x", [2, 3, 15])], [_f32("y", None)],
    ),
    "instance_norm": _model(
        [n("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3)],
        [_f32("x", [2, 3, 5, 7])], [_f32("y", None)],
        [_init("s", rng.normal(size=3).astype(np.float32)), _init("b", rng.normal(size=3).astype(np.float32))],
    ),
    "group_norm": _model(
        [n("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2, epsilon=1e-4)],
        [_f32("x", [2, 6, 4, 3])], [_f32("y", [2, 6, 4, 3])],
        [_init("s", rng.normal(size=6).astype(np.float32)), _init("b", rng.normal(size=6).astype(np.float32))],
        opset=21,
    ),
    **{
        f"pad_{mode}": _model(
            [n("Pad", ["x", "pads", "v"], ["y"], mode=mode)],
            [_f32("x", [2, 3, 5])], [_f32("y", None)],
            [_init("pads", np.array([0, 2, 1, 1, 1, 3], np.int64)), _init("v", np.array(1.5, np.float32))],
        )
        for mode in ("constant", "edge", "reflect", "wrap")
    },
    "pad_negative": _model(
        [n("Pad", ["x", "pads"], ["y"])],
        [_f32("x", [4, 6])], [_f32("y", None)], [_init("pads", np.array([-1, 2, 1, -3], np.int64))],
    ),
    "tile": _model(
        [n("Tile", ["x", "r"], ["y"])],
        [_f32("x", [2, 3])], [_f32("y", None)], [_init("r", np.array([3, 2], np.int64))],
    ),
    "activations": _model(  # 40 * x reaches softplus's overflow of a naive exp
        [n("Mul", ["x", "k"], ["big"]), n("Softplus", ["big"], ["sp"]), n("Mish", ["big"], ["mi"]),
         n("HardSwish", ["x"], ["hs"]), n("HardSigmoid", ["x"], ["hg"], alpha=0.3, beta=0.4),
         n("Reciprocal", ["k"], ["rk"]), n("Clip", ["big", "lo", "hi"], ["cl"]),
         n("Sum", ["sp", "mi", "hs", "hg", "cl"], ["s"]), n("Mul", ["s", "rk"], ["y"])],
        [_f32("x", [4, 64])], [_f32("y", None)],
        [_init("k", np.array(40.0, np.float32)), _init("lo", np.array(-3.0, np.float32)),
         _init("hi", np.array(5.0, np.float32))],
    ),
    "clip_attributes": _model(
        [n("Clip", ["x"], ["y"], min=-0.25, max=0.5)], [_f32("x", [3, 5])], [_f32("y", None)], opset=6,
    ),
    **{
        f"resize_{mode}_{transform}": _model(
            [n("Resize", ["x", "", "scales"], ["y"], mode=mode, coordinate_transformation_mode=transform)],
            [_f32("x", [1, 2, 5, 6])], [_f32("y", None)], [_init("scales", np.array([1, 1, 1.6, 0.5], np.float32))],
        )
        for mode, transform in [("linear", "half_pixel"), ("linear", "align_corners"), ("linear", "pytorch_half_pixel"),
                                ("nearest", "asymmetric"), ("nearest", "half_pixel")]
    },
    "resize_sizes": _model(  # MobileViT's: bilinear to a size
        [n("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")],
        [_f32("x", [1, 3, 7, 7])], [_f32("y", None)], [_init("sizes", np.array([1, 3, 8, 8], np.int64))],
    ),
    **{
        f"einsum_{k}": _model([n("Einsum", names, ["y"], equation=eq)], [_f32(v, sh) for v, sh in zip(names, shapes, strict=True)],
                              [_f32("y", None)])
        for k, (eq, names, shapes) in enumerate([
            ("bhid,bhjd->bhij", ["q", "k"], [[1, 2, 5, 4], [1, 2, 6, 4]]),
            ("bhij,bhjd->bhid", ["p", "v"], [[1, 2, 5, 6], [1, 2, 6, 4]]),
            ("i,j->ij", ["a", "b"], [[5], [7]]),
            ("bnd,dk->bnk", ["x", "w"], [[2, 3, 4], [4, 6]]),
            ("ij,jk", ["a", "b"], [[3, 4], [4, 5]]),
            ("ijk->kj", ["x"], [[2, 3, 4]]),
            ("bij,bkj->bik", ["a", "b"], [[2, 3, 4], [2, 5, 4]]),
        ])
    },
    "conv_transpose": _model(  # a decoder's upsampling: stride 2, pads, output_padding, groups
        [n("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 3], pads=[1, 0, 0, 2], output_padding=[1, 0],
           group=2, dilations=[1, 2])],
        [_f32("x", [1, 4, 5, 6])], [_f32("y", None)],
        [_init("w", rng.normal(size=(4, 3, 3, 2)).astype(np.float32)), _init("b", rng.normal(size=6).astype(np.float32))],
    ),
    "conv_transpose1d": _model(  # a vocoder's
        [n("ConvTranspose", ["x", "w"], ["y"], strides=[4], pads=[2, 2])],
        [_f32("x", [1, 3, 9])], [_f32("y", None)], [_init("w", rng.normal(size=(3, 2, 8)).astype(np.float32))],
    ),
    "reduce_l2": _model(
        [n("ReduceL2", ["x", "axes"], ["y"], keepdims=0)],
        [_f32("x", [3, 4, 5])], [_f32("y", None)], [_init("axes", np.array([0, 2], np.int64))],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.onnx"
    onnx.save(CASES[name], path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    draw = np.random.default_rng(1)
    feeds = {
        i.name: draw.uniform(-2, 2, [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
        for i in CASES[name].graph.input
    }  # fmt: skip
    expected = session.run(None, feeds)
    module = irkit.load(str(path))
    for backend in ("cpu", "cuda-host"):
        got = irkit.compile(module, backend=backend)(*feeds.values())
        for e, o in zip(expected, got, strict=True):
            assert o.shape == e.shape
            np.testing.assert_allclose(o, e, rtol=1e-5, atol=1e-5, err_msg=f"{name} on {backend}")
