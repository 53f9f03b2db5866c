"""ONNX converters for indexing, selection, logic and the activations today's exporters
write as one node: Gather, Where, comparisons, And/Or/Xor/Not, IsNaN/IsInf, Expand, Split,
Clip, Reciprocal, HardSigmoid, HardSwish, Softplus, Mish.

Each converter builds graph ops with ONNX's exact semantics; where ONNX's op is a
composition of graph ops (Clip, HardSwish, Softplus), the composition is written once here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx
from xdsl.dialects.builtin import BoolAttr, IntegerAttr, i64
from xdsl.ir import SSAValue

from irkit.dialects import graph as g
from irkit.frontend.onnx_common import Converter, attrs, inputs, rank, shape

if TYPE_CHECKING:
    from irkit.frontend.onnx import OnnxImporter


def _same(im: OnnxImporter, a: SSAValue, b: SSAValue) -> SSAValue:
    """`b` in `a`'s element type where a constant's type differs (a literal 0 beside i64)."""
    if g.element_type_of(a) == g.element_type_of(b):
        return b
    return im.add_op(g.CastOp.build_to(b, g.element_type_of(a)))


def comparison(cls: type[g.GraphOp]) -> Converter:
    def convert(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
        a, b = inputs(im, node)
        return [im.op(cls, a, _same(im, a, b))]

    return convert


def _gather(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    data, indices = inputs(im, node)
    axis = attrs(node).get("axis", 0)
    return [im.op(g.GatherOp, data, indices, axis=IntegerAttr(axis, i64))]


def _where(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    cond, a, b = inputs(im, node)
    return [im.op(g.WhereOp, cond, a, _same(im, a, b))]


def _is_inf(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    (x,) = inputs(im, node)
    a = attrs(node)
    flags = {
        "positive": BoolAttr.from_bool(bool(a.get("detect_positive", 1))),
        "negative": BoolAttr.from_bool(bool(a.get("detect_negative", 1))),
    }
    return [im.op(g.IsInfOp, x, **flags)]


def _expand(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    x = im.tensor(node.input[0])
    requested = [int(d) for d in im.const(node.input[1], "Expand's shape").reshape(-1)]
    src = shape(x)
    rank_ = max(len(src), len(requested))
    a = [1] * (rank_ - len(src)) + list(src)
    b = [1] * (rank_ - len(requested)) + requested
    target = [max(p, q) if 1 in (p, q) else p for p, q in zip(a, b, strict=True)]
    return [im.op(g.BroadcastToOp, x, shape=g.int_array(target))]


def _split(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    x = im.tensor(node.input[0])
    a = attrs(node)
    axis = a.get("axis", 0) % rank(x)
    extent = shape(x)[axis]
    outputs = len(node.output)
    if len(node.input) > 1 and node.input[1]:
        sizes = [int(s) for s in im.const(node.input[1], "Split's sizes").reshape(-1)]
    elif "split" in a:
        sizes = [int(s) for s in a["split"]]
    else:  # equal parts; the last smaller where the extent does not divide (opset 18)
        part = -(-extent // a.get("num_outputs", outputs))
        sizes = [min(part, extent - i * part) for i in range(outputs)]
    if sum(sizes) != extent or len(sizes) != outputs:
        raise im.error(f"split sizes {sizes} do not cover axis {axis} of extent {extent} in {outputs} parts")  # fmt: skip
    out, start = [], 0
    for size in sizes:
        limits = list(shape(x))
        limits[axis] = start + size
        starts = [0] * rank(x)
        starts[axis] = start
        out.append(im.op(g.SliceOp, x, starts=g.int_array(starts), limits=g.int_array(limits)))
        start += size
    return out


def _clip(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    """min(max(x, lo), hi) with the bounds given (inputs from opset 11, attributes before);
    a NaN stays NaN, as onnxruntime's."""
    x = im.tensor(node.input[0])
    a = attrs(node)
    lo = node.input[1] if len(node.input) > 1 else ""
    hi = node.input[2] if len(node.input) > 2 else ""
    low = im.tensor(lo) if lo else (im.scalar(a["min"], x) if "min" in a else None)
    high = im.tensor(hi) if hi else (im.scalar(a["max"], x) if "max" in a else None)
    out = x
    if low is not None:
        out = im.op(g.MaxOp, out, _same(im, x, low))
    if high is not None:
        out = im.op(g.MinOp, out, _same(im, x, high))
    if out is x:  # no bounds: an identity, kept a distinct value for the output's name
        out = im.op(g.MaxOp, x, x)
    return [out]


def _reciprocal(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    (x,) = inputs(im, node)
    return [im.op(g.DivOp, im.scalar(1.0, x), x)]


def hard_sigmoid(im: OnnxImporter, x: SSAValue, alpha: float, beta: float) -> SSAValue:
    """max(0, min(1, alpha * x + beta))."""
    y = im.op(g.AddOp, im.op(g.MulOp, x, im.scalar(alpha, x)), im.scalar(beta, x))
    return im.op(g.MaxOp, im.op(g.MinOp, y, im.scalar(1.0, x)), im.scalar(0.0, x))


def _hard_sigmoid(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    (x,) = inputs(im, node)
    a = attrs(node)
    return [hard_sigmoid(im, x, a.get("alpha", 0.2), a.get("beta", 0.5))]


def _hard_swish(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    (x,) = inputs(im, node)
    return [im.op(g.MulOp, x, hard_sigmoid(im, x, 1.0 / 6.0, 0.5))]


def softplus(im: OnnxImporter, x: SSAValue) -> SSAValue:
    """log(1 + exp(x)) as max(x, 0) + log(1 + exp(-|x|)): never exp of a large x (which
    overflows to inf where the answer is x)."""
    tail = im.op(g.ExpOp, im.op(g.NegOp, im.op(g.AbsOp, x)))
    return im.op(
        g.AddOp, im.op(g.ReluOp, x), im.op(g.LogOp, im.op(g.AddOp, tail, im.scalar(1.0, x)))
    )


def _softplus(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    (x,) = inputs(im, node)
    return [softplus(im, x)]


def _mish(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    (x,) = inputs(im, node)
    return [im.op(g.MulOp, x, im.op(g.TanhOp, softplus(im, x)))]


def _unary(cls: type[g.GraphOp]) -> Converter:
    def convert(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
        (x,) = inputs(im, node)
        return [im.op(cls, x)]

    return convert


EXACT_CONVERTERS: dict[str, Converter] = {
    "Gather": _gather, "Where": _where, "Expand": _expand, "Split": _split,
    "Equal": comparison(g.EqualOp), "Less": comparison(g.LessOp),
    "LessOrEqual": comparison(g.LessEqualOp), "Greater": comparison(g.GreaterOp),
    "GreaterOrEqual": comparison(g.GreaterEqualOp),
    "And": comparison(g.AndOp), "Or": comparison(g.OrOp), "Xor": comparison(g.XorOp),
    "Not": _unary(g.NotOp), "IsNaN": _unary(g.IsNanOp), "IsInf": _is_inf,
    "Clip": _clip, "Reciprocal": _reciprocal, "HardSigmoid": _hard_sigmoid,
    "HardSwish": _hard_swish, "Softplus": _softplus, "Mish": _mish,
}  # fmt: skip

EXACT_LIMITS: dict[str, str] = {
    "Gather": "any axis; indices i32 or i64, negative from the end; out of range: an error where the values are known",
    "Expand": "constant shape",
    "Split": "constant sizes (input or attribute), or equal parts (num_outputs)",
    "Clip": "bounds as inputs (opset 11+) or attributes",
}  # fmt: skip
