"""ONNX op -> graph-dialect converters, one function per op type, in one table.

A converter takes the importer and the node and returns the node's output values. Where
ONNX and the graph dialect differ in what they can express, the converter raises
`Unsupported` with the reason; `SUPPORT` documents each op's limits (the README table and
`docs/onnx.md` are generated from it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import onnx
from xdsl.dialects.builtin import BoolAttr, Float64Type, FloatAttr, IntegerAttr, StringAttr, i64
from xdsl.ir import SSAValue

from irkit.dialects import graph as g
from irkit.dtypes import DTYPES
from irkit.frontend.onnx_common import (
    ONNX_DTYPES,
    Converter,
    attrs,
    binary,
    inputs,
    like,
    rank,
    shape,
    unary,
)
from irkit.frontend.onnx_compose import COMPOSED_CONVERTERS, COMPOSED_LIMITS
from irkit.frontend.onnx_exact import EXACT_CONVERTERS, EXACT_LIMITS
from irkit.frontend.onnx_quantize import QUANTIZE_CONVERTERS, QUANTIZE_LIMITS
from irkit.ir import element_type_of

if TYPE_CHECKING:  # the importer calls these converters; they only need its type
    from irkit.frontend.onnx import OnnxImporter

# --- elementwise ---------------------------------------------------------------------------


def variadic(cls: type[g.GraphOp]) -> Converter:
    """Sum, Max, Min: a left fold of the binary op over every input."""

    def convert(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
        values = inputs(im, node)
        out = values[0]
        for v in values[1:]:
            out = im.op(cls, out, v)
        if len(values) == 1:  # Sum(x) is x; keep a distinct value for the output name
            out = im.op(g.AddOp, out, im.scalar(0.0, out))
        return [out]

    return convert


def _pow(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    base = im.tensor(node.input[0])
    if g.is_integer(g.element_type_of(base)):
        raise im.unsupported("Pow of an integer base (irkit raises floats to powers)")
    name = node.input[1]
    if name in im.consts and im.consts[name].dtype.kind in "iu":
        exponent = im.add_op(
            g.ConstantOp.from_values(
                g.element_type_of(base),
                im.consts[name].shape,
                im.consts[name].astype(np.float64).reshape(-1).tolist(),
            )
        )
    else:
        exponent = like(im, im.tensor(name), base)
    return [im.op(g.PowOp, base, exponent)]


def _leaky_relu(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    (x,) = inputs(im, node)
    return [im.op(g.LeakyReluOp, x, alpha=FloatAttr(attrs(node).get("alpha", 0.01), Float64Type()))]


def _gelu(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    (x,) = inputs(im, node)
    approx = attrs(node).get("approximate", "none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    return [im.op(g.GeluOp, x, approximate=StringAttr(approx))]


def _cast(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    (x,) = inputs(im, node)
    to = attrs(node)["to"]
    if to not in ONNX_DTYPES:
        raise im.unsupported(
            f"casting to {onnx.TensorProto.DataType.Name(to)} "
            "(irkit's element types: f16, bf16, f32, f64, i64, i32, bool, f8e4m3, f8e5m2)"
        )
    if ONNX_DTYPES[to].startswith("f8") and attrs(node).get("saturate", 1) == 0:
        raise im.unsupported("Cast to an 8-bit float with saturate=0 (irkit's cast saturates)")
    return [im.add_op(g.CastOp.build_to(x, DTYPES[ONNX_DTYPES[to]]))]


def _identity(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    if node.op_type == "Dropout" and len(node.output) > 1 and node.output[1]:
        if any(node.output[1] in n.input for n in im.graph.node) or any(
            o.name == node.output[1] for o in im.graph.output
        ):
            raise im.unsupported("Dropout's mask output is used; irkit imports inference graphs")
    if node.op_type == "Dropout" and len(node.input) > 2 and node.input[2]:
        if bool(im.const(node.input[2], "training_mode").item()):
            raise im.unsupported("Dropout in training mode; irkit imports inference graphs")
    return [im.tensor(node.input[0])]


# --- contractions ------------------------------------------------------------------------------


def _matmul(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    a, b = inputs(im, node)
    squeeze_a, squeeze_b = rank(a) == 1, rank(b) == 1
    if squeeze_a:
        a = im.add_op(g.ReshapeOp.build_to(a, [1, shape(a)[0]]))
    if squeeze_b:
        b = im.add_op(g.ReshapeOp.build_to(b, [shape(b)[0], 1]))
    if rank(a) == 2 and rank(b) == 2:
        out = im.op(g.MatmulOp, a, b)
    elif rank(b) == 2:  # a linear layer: the batch dims of `a` are more rows of one matmul
        rows = im.add_op(g.ReshapeOp.build_to(a, [-1, shape(a)[-1]]))
        out = im.add_op(
            g.ReshapeOp.build_to(im.op(g.MatmulOp, rows, b), [*shape(a)[:-1], shape(b)[1]])
        )
    else:
        while rank(a) < 3:
            a = im.add_op(g.ReshapeOp.build_to(a, [1, *shape(a)]))
        while rank(b) < 3:
            b = im.add_op(g.ReshapeOp.build_to(b, [1, *shape(b)]))
        out = im.op(g.BatchMatmulOp, a, b)
    final = list(shape(out))
    if squeeze_b:
        final.pop(-1)
    if squeeze_a:
        final.pop(-2 if not squeeze_b else -1)
    expected = _inferred(im, node.output[0])
    if expected is not None:
        final = list(expected)
    if tuple(final) != shape(out):
        out = im.add_op(g.ReshapeOp.build_to(out, final))
    return [out]


def _inferred(im: OnnxImporter, name: str) -> tuple[int, ...] | None:
    for vi in [*im.graph.value_info, *im.graph.output]:
        if vi.name == name and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") for d in dims):  # a symbolic dim says nothing
                return tuple(d.dim_value for d in dims)
    return None


def _gemm(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    a_ = attrs(node)
    a, b = im.tensor(node.input[0]), im.tensor(node.input[1])
    if a_.get("transA", 0):
        a = im.op(g.TransposeOp, a, perm=g.int_array([1, 0]))
    if a_.get("transB", 0):
        b = im.op(g.TransposeOp, b, perm=g.int_array([1, 0]))
    y = im.op(g.MatmulOp, a, b)
    if a_.get("alpha", 1.0) != 1.0:
        y = im.op(g.MulOp, y, im.scalar(a_["alpha"], y))
    if len(node.input) > 2 and node.input[2]:
        c = im.tensor(node.input[2])
        if a_.get("beta", 1.0) != 1.0:
            c = im.op(g.MulOp, c, im.scalar(a_["beta"], c))
        y = im.op(g.AddOp, y, c)
    return [y]


def _auto_pads(im, node, spatial: Sequence[int], kernel, strides, dilations) -> list[int]:
    a = attrs(node)
    mode = a.get("auto_pad", b"NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode in ("NOTSET", ""):
        pads = list(a.get("pads", [0] * (2 * len(spatial))))
        return pads
    if mode == "VALID":
        return [0] * (2 * len(spatial))
    begin, end = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations, strict=True):
        out = math.ceil(size / s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begin.append(small if mode == "SAME_UPPER" else big)
        end.append(big if mode == "SAME_UPPER" else small)
    return begin + end


def _conv(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    """2-D convolution; a 1-D one (Whisper's and wav2vec2's front ends) is the 2-D one over
    a height of 1 (`_lifted`)."""
    x, w = im.tensor(node.input[0]), im.tensor(node.input[1])
    if rank(x) not in (3, 4):
        raise im.unsupported(f"Conv on rank-{rank(x)} input; irkit has 1-D and 2-D convolution")
    a = _lifted(im, node, x)
    one_d = rank(x) == 3
    if one_d:
        x = im.add_op(g.ReshapeOp.build_to(x, [shape(x)[0], shape(x)[1], 1, shape(x)[2]]))
        w = im.add_op(g.ReshapeOp.build_to(w, [shape(w)[0], shape(w)[1], 1, shape(w)[2]]))
    strides, dil = list(a["strides"]), list(a["dilations"])
    t, left, b, r = a["pads"]
    y = im.op(g.Conv2dOp, x, w, strides=g.int_array(strides), padding=g.int_array([t, left, b, r]),
              dilations=g.int_array(dil), groups=IntegerAttr(a.get("group", 1), i64))  # fmt: skip
    if len(node.input) > 2 and node.input[2]:
        bias = im.add_op(g.ReshapeOp.build_to(im.tensor(node.input[2]), [shape(w)[0], 1, 1]))
        y = im.op(g.AddOp, y, bias)
    if one_d:
        y = im.add_op(g.ReshapeOp.build_to(y, [shape(y)[0], shape(y)[1], shape(y)[3]]))
    return [y]


def _lifted(im: OnnxImporter, node: onnx.NodeProto, x: SSAValue) -> dict:
    """The node's window attributes for a 2-D op: kernel_shape, strides, dilations and
    pads ([top, left, bottom, right], auto_pad resolved); a 1-D node's over a height of 1."""
    a = dict(attrs(node))
    spatial = list(shape(x)[2:])
    n = len(spatial)
    if "kernel_shape" not in a and len(node.input) > 1:
        a["kernel_shape"] = list(shape(im.tensor(node.input[1]))[2:])
    kernel = list(a["kernel_shape"])
    strides, dil = list(a.get("strides", [1] * n)), list(a.get("dilations", [1] * n))
    pads = _auto_pads(im, node, spatial, kernel, strides, dil)
    if n == 1:
        kernel, strides, dil = [1, *kernel], [1, *strides], [1, *dil]
        pads = [0, pads[0], 0, pads[1]]
    return {**a, "kernel_shape": kernel, "strides": strides, "dilations": dil, "pads": pads}


# --- normalizations, reductions, pooling -------------------------------------------------------


def _softmax(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    (x,) = inputs(im, node)
    axis = attrs(node).get("axis", -1 if im.opset >= 13 else 1) % max(rank(x), 1)
    if im.opset >= 13 or axis == rank(x) - 1:
        return [im.op(g.SoftmaxOp, x, axis=IntegerAttr(axis, i64))]
    # before opset 13: softmax over the flattened trailing axes [axis, rank)
    s = shape(x)
    flat = im.add_op(g.ReshapeOp.build_to(x, [int(np.prod(s[:axis])), int(np.prod(s[axis:]))]))
    y = im.op(g.SoftmaxOp, flat, axis=IntegerAttr(1, i64))
    return [im.add_op(g.ReshapeOp.build_to(y, list(s)))]


def _layer_norm(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    x, scale = im.tensor(node.input[0]), im.tensor(node.input[1])
    a = attrs(node)
    axis = a.get("axis", -1) % rank(x)
    norm = shape(x)[axis:]
    scale = _broadcast_to(im, scale, norm)
    if len(node.input) > 2 and node.input[2]:
        bias = _broadcast_to(im, im.tensor(node.input[2]), norm)
    else:
        bias = im.add_op(
            g.ConstantOp.from_values(g.element_type_of(x), norm, [0.0] * int(np.prod(norm)))
        )
    axes = g.int_array(list(range(axis, rank(x))))
    eps = a.get("epsilon", 1e-5)
    if not any(node.output[1:]):
        return [im.op(g.LayerNormOp, x, scale, bias, axes=axes, eps=FloatAttr(eps, Float64Type()))]
    # Mean and InvStdDev are wanted too: the same two-pass computation, written out.
    keep = BoolAttr.from_bool(True)
    mean = im.op(g.ReduceMeanOp, x, axes=axes, keepdims=keep)
    d = im.op(g.SubOp, x, mean)
    var = im.op(g.ReduceMeanOp, im.op(g.MulOp, d, d), axes=axes, keepdims=keep)
    inv = im.op(g.RsqrtOp, im.op(g.AddOp, var, im.scalar(eps, var)))
    y = im.op(g.AddOp, im.op(g.MulOp, im.op(g.MulOp, d, inv), scale), bias)
    return [y, mean, inv]


def _broadcast_to(im: OnnxImporter, v: SSAValue, target: Sequence[int]) -> SSAValue:
    if shape(v) == tuple(target):
        return v
    return im.op(g.BroadcastToOp, v, shape=g.int_array(list(target)))


def _batch_norm(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    if any(o for o in node.output[1:]) or attrs(node).get("training_mode", 0):
        raise im.unsupported("BatchNormalization in training mode; irkit imports inference graphs")
    x, scale, bias, mean, var = inputs(im, node)
    eps = FloatAttr(attrs(node).get("epsilon", 1e-5), Float64Type())
    return [im.op(g.BatchNormOp, x, scale, bias, mean, var, eps=eps)]


REDUCERS = {
    "ReduceSum": g.ReduceSumOp,
    "ReduceMax": g.ReduceMaxOp,
    "ReduceMean": g.ReduceMeanOp,
    "ReduceMin": g.ReduceMinOp,
    "ReduceProd": g.ReduceProdOp,
}


def _reduce(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    x = im.tensor(node.input[0])
    a = attrs(node)
    takes_input = node.op_type == "ReduceSum" and im.opset >= 13 or im.opset >= 18
    if takes_input:
        axes = (
            list(im.const(node.input[1], "axes").reshape(-1))
            if len(node.input) > 1 and node.input[1]
            else []
        )
    else:
        axes = list(a.get("axes", []))
    if not axes:
        if a.get("noop_with_empty_axes", 0):
            return [im.op(g.AddOp, x, im.scalar(0.0, x))]
        axes = list(range(rank(x)))
    if rank(x) == 0:
        return [im.op(g.AddOp, x, im.scalar(0.0, x))]
    keep = BoolAttr.from_bool(bool(a.get("keepdims", 1)))
    return [
        im.op(REDUCERS[node.op_type], x, axes=g.int_array([int(i) for i in axes]), keepdims=keep)
    ]


def _pool(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    """2-D pooling (1-D over a height of 1); ceil_mode as floor mode over extra padding at
    the bottom and right (a window may not start in it, as ONNX says), which a max pool
    ignores (-inf) and an average pool excludes from its count (count_include_pad=0)."""
    (x,) = inputs(im, node)[:1]
    if rank(x) not in (3, 4):
        raise im.unsupported(f"{node.op_type} on rank-{rank(x)} input; irkit pools 1-D and 2-D")
    if len(node.output) > 1 and node.output[1]:
        raise im.unsupported("MaxPool's Indices output is not supported")
    a = _lifted(im, node, x)
    kernel, strides, dil, pads = a["kernel_shape"], a["strides"], a["dilations"], a["pads"]
    one_d = rank(x) == 3
    spatial = [1, shape(x)[2]] if one_d else list(shape(x)[2:])
    cip = bool(a.get("count_include_pad", 0))
    if a.get("ceil_mode", 0):
        span = [d * (k - 1) + 1 for d, k in zip(dil, kernel, strict=True)]
        extra = _ceil_extra(spatial, span, strides, pads)
        if any(extra) and node.op_type == "AveragePool" and cip:
            raise im.unsupported("AveragePool with ceil_mode=1 and count_include_pad=1")
        pads = [pads[0], pads[1], pads[2] + extra[0], pads[3] + extra[1]]
    if one_d:
        x = im.add_op(g.ReshapeOp.build_to(x, [shape(x)[0], shape(x)[1], 1, shape(x)[2]]))
    props = {
        "kernel": g.int_array(kernel),
        "strides": g.int_array(strides),
        "padding": g.int_array(pads),
    }
    if node.op_type == "MaxPool":
        y = im.op(g.MaxPool2dOp, x, dilations=g.int_array(dil), **props)
    else:
        y = im.op(
            g.AvgPool2dOp,
            x,
            count_include_pad=BoolAttr.from_bool(cip),
            dilations=g.int_array(dil),
            **props,
        )
    if one_d:
        y = im.add_op(g.ReshapeOp.build_to(y, [shape(y)[0], shape(y)[1], shape(y)[3]]))
    return [y]


def _ceil_extra(spatial: Sequence[int], kernel, strides, pads) -> list[int]:
    """Padding past the end that makes floor mode give ceil mode's extent, less a last
    window that would start in the padding at the end (ONNX drops it)."""
    extra = []
    for i, (size, k, s) in enumerate(zip(spatial, kernel, strides, strict=True)):
        span = size + pads[i] + pads[i + 2] - k
        out = -(-span // s) + 1
        if (out - 1) * s >= size + pads[i]:
            out -= 1
        extra.append(max(0, (out - 1) * s + k - (size + pads[i] + pads[i + 2])))
    return extra


def _global_avg_pool(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    (x,) = inputs(im, node)
    return [im.op(g.GlobalAvgPoolOp, x)]


def _lrn(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    """y = x / (bias + alpha/size * sum of x^2 over a window of `size` channels) ** beta."""
    (x,) = inputs(im, node)
    a = attrs(node)
    size, alpha, beta, bias = (
        a["size"],
        a.get("alpha", 1e-4),
        a.get("beta", 0.75),
        a.get("bias", 1.0),
    )
    n, c, *rest = shape(x)
    sq = im.op(g.MulOp, x, x)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    parts = []
    dtype = element_type_of(x)
    for k, count in ((0, lo), (1, hi)):
        if count:
            parts.append(
                (
                    k,
                    im.add_op(
                        g.ConstantOp.from_values(
                            dtype,
                            (n, count, *rest),
                            [0.0] * (n * count * int(np.prod(rest or [1]))),
                        )
                    ),
                )
            )
    padded = im.op(g.ConcatOp, *[p for k, p in parts if k == 0], sq, *[p for k, p in parts if k == 1],
                   axis=IntegerAttr(1, i64)) if parts else sq  # fmt: skip
    total = None
    for i in range(size):
        window = im.op(
            g.SliceOp,
            padded,
            starts=g.int_array([0, i, *[0] * len(rest)]),
            limits=g.int_array([n, i + c, *rest]),
            strides=g.int_array([1] * (2 + len(rest))),
        )
        total = window if total is None else im.op(g.AddOp, total, window)
    assert total is not None
    scaled = im.op(g.AddOp, im.op(g.MulOp, total, im.scalar(alpha / size, x)), im.scalar(bias, x))
    return [im.op(g.DivOp, x, im.op(g.PowOp, scaled, im.scalar(beta, x)))]


# --- data movement ---------------------------------------------------------------------------


def _transpose(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    (x,) = inputs(im, node)
    perm = attrs(node).get("perm", list(reversed(range(rank(x)))))
    return [im.op(g.TransposeOp, x, perm=g.int_array(perm))]


def _reshape_to(im: OnnxImporter, x: SSAValue, target: Sequence[int]) -> list[SSAValue]:
    return [im.add_op(g.ReshapeOp.build_to(x, [int(d) for d in target]))]


def _reshape(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    x = im.tensor(node.input[0])
    target = [int(d) for d in im.const(node.input[1], "the target shape")]
    if not attrs(node).get("allowzero", 0):
        target = [shape(x)[i] if d == 0 else d for i, d in enumerate(target)]
    return _reshape_to(im, x, target)


def _flatten(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    (x,) = inputs(im, node)
    axis = attrs(node).get("axis", 1)
    axis = axis + rank(x) if axis < 0 else axis
    s = shape(x)
    return _reshape_to(im, x, [int(np.prod(s[:axis])), int(np.prod(s[axis:]))])


def _squeeze_unsqueeze(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    """A reshape to the shape computed here from the axes (an attribute before opset 13,
    an input from it): onnx's inference leaves it unknown behind computed shapes
    (torchvision's nn.MultiheadAttention)."""
    x = im.tensor(node.input[0])
    if len(node.input) > 1 and node.input[1]:
        axes = [int(a) for a in im.const(node.input[1], f"{node.op_type}'s axes").reshape(-1)]
    else:
        axes = [int(a) for a in attrs(node).get("axes", [])]
    dims = list(shape(x))
    if node.op_type == "Unsqueeze":
        out_rank = len(dims) + len(axes)
        for axis in sorted(a % out_rank for a in axes):
            dims.insert(axis, 1)
    else:
        drop = {a % len(dims) for a in axes} if axes else {i for i, d in enumerate(dims) if d == 1}
        if any(dims[a] != 1 for a in drop):
            raise im.error(f"Squeeze of axes {sorted(drop)} of shape {dims}: not all have extent 1")
        dims = [d for i, d in enumerate(dims) if i not in drop]
    return _reshape_to(im, x, dims)


def _concat(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    values = inputs(im, node)
    return [im.op(g.ConcatOp, *values, axis=IntegerAttr(attrs(node)["axis"], i64))]


def _slice(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    x = im.tensor(node.input[0])
    r = rank(x)
    if im.opset < 10:
        a = attrs(node)
        starts, ends = a["starts"], a["ends"]
        axes, steps = a.get("axes", list(range(len(starts)))), [1] * len(starts)
    else:

        def known(i: int, what: str, default):
            return (
                [int(v) for v in im.const(node.input[i], what)]
                if len(node.input) > i and node.input[i]
                else default
            )

        starts, ends = known(1, "starts", None), known(2, "ends", None)
        axes = known(3, "axes", list(range(len(starts))))
        steps = known(4, "steps", [1] * len(starts))
    full_s, full_e, full_st = [0] * r, list(shape(x)), [1] * r
    for ax, s, e, st in zip(axes, starts, ends, steps, strict=True):
        if st < 0:
            raise im.unsupported("Slice with a negative step is not supported")
        ax %= r
        full_s[ax], full_e[ax], full_st[ax] = s, e, st
    return [
        im.op(
            g.SliceOp,
            x,
            starts=g.int_array(full_s),
            limits=g.int_array(full_e),
            strides=g.int_array(full_st),
        )
    ]


def _constant_of_shape(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    target = [int(d) for d in im.const(node.input[0], "the shape")]
    value = attrs(node).get("value")
    array = onnx.numpy_helper.to_array(value) if value is not None else np.zeros(1, np.float32)
    im.consts[node.output[0]] = np.full(target, array.reshape(-1)[0], dtype=array.dtype)
    return [im.tensor(node.output[0])]


CONVERTERS: dict[str, Converter] = {
    "Add": binary(g.AddOp), "Sub": binary(g.SubOp), "Mul": binary(g.MulOp), "Div": binary(g.DivOp),
    "Pow": _pow, "Max": variadic(g.MaxOp), "Min": variadic(g.MinOp), "Sum": variadic(g.AddOp),
    "Neg": unary(g.NegOp), "Abs": unary(g.AbsOp), "Relu": unary(g.ReluOp), "LeakyRelu": _leaky_relu,
    "Gelu": _gelu, "Sigmoid": unary(g.SigmoidOp), "Tanh": unary(g.TanhOp), "Exp": unary(g.ExpOp),
    "Log": unary(g.LogOp), "Sqrt": unary(g.SqrtOp), "Erf": unary(g.ErfOp),
    "Sin": unary(g.SinOp), "Cos": unary(g.CosOp), "Floor": unary(g.FloorOp), "Ceil": unary(g.CeilOp),
    "MatMul": _matmul, "Gemm": _gemm, "Conv": _conv,
    "BatchNormalization": _batch_norm, "MaxPool": _pool, "AveragePool": _pool,
    "GlobalAveragePool": _global_avg_pool, "Softmax": _softmax, "LayerNormalization": _layer_norm,
    "ReduceSum": _reduce, "ReduceMax": _reduce, "ReduceMean": _reduce, "LRN": _lrn,
    "ReduceMin": _reduce, "ReduceProd": _reduce,
    "Transpose": _transpose, "Reshape": _reshape, "Flatten": _flatten, "Concat": _concat,
    "Slice": _slice, "Squeeze": _squeeze_unsqueeze, "Unsqueeze": _squeeze_unsqueeze,
    "Identity": _identity, "Dropout": _identity, "Cast": _cast, "ConstantOfShape": _constant_of_shape,
    **EXACT_CONVERTERS,
    **COMPOSED_CONVERTERS,
    **QUANTIZE_CONVERTERS,
}  # fmt: skip
"""Constant is not here: a Constant node is always folded at import."""

LIMITS: dict[str, str] = {
    "Conv": "1-D and 2-D (NCL, NCHW); auto_pad, pads, strides, dilations, group, bias",
    "MaxPool": "1-D and 2-D; floor and ceil mode, dilations; no Indices output",
    "AveragePool": "1-D and 2-D; floor mode, count_include_pad, dilations; ceil mode with count_include_pad=0",
    "LayerNormalization": "Y, Mean and InvStdDev outputs; computed in the input's type (stash_type ignored)",
    "BatchNormalization": "inference mode only",
    "Dropout": "inference: identity; mask output unused",
    "Slice": "constant starts/ends/axes/steps; positive steps; a non-empty result (irkit has no empty tensors)",
    "Reshape": "constant shape; 0 and -1 rules, allowzero",
    "Cast": "to f16, bf16, f32, f64, i64, i32, bool, FLOAT8E4M3FN, FLOAT8E5M2 (float to integer saturating, NaN to 0; to 8 bits saturating, saturate=0 refused)",
    "MatMul": "any ranks (1-D operands promoted and squeezed)",
    "Softmax": "opset < 13 flattening semantics and opset >= 13 single-axis",
    "ReduceSum": "axes as attribute or input; noop_with_empty_axes",
    "ReduceMax": "axes as attribute or input",
    "ReduceMin": "axes as attribute or input",
    "ReduceProd": "axes as attribute or input",
    "ReduceMean": "axes as attribute or input",
    "Gemm": "alpha, beta, transA, transB, optional C",
    "LRN": "rank >= 3 (channels on axis 1)",
    **EXACT_LIMITS,
    **COMPOSED_LIMITS,
    **QUANTIZE_LIMITS,
}
"""Per-op limits beyond 'f16, bf16, f32, f64 tensors with static shapes'."""


def support_table() -> str:
    """The supported ONNX ops and their limits, as Markdown (docs/onnx.md is this text)."""
    lines = [
        "# ONNX ops irkit imports",
        "",
        "Generated from `irkit/frontend/onnx_ops.py` (`python -m irkit.frontend.onnx_ops`);",
        "a test keeps this file equal to the table the importer uses. Tensors are f16, bf16,",
        "f32, f64, i64, i32 or bool with static shapes (symbolic input dims need `--dim`);",
        "arithmetic ops take floats and integers (exact), the rest floats unless the table",
        "says. Shapes, axes and pads must be known at import. Any node",
        "whose inputs are all known at import is folded (onnx's reference implementation",
        "evaluates it), whatever its op type. Constant nodes are always folded.",
        "",
        "| op | limits |",
        "| --- | --- |",
    ]
    for op in sorted(CONVERTERS):
        lines.append(f"| {op} | {LIMITS.get(op, '')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(support_table(), end="")
