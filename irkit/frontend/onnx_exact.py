"""ONNX converters for indexing, selection and logic: Gather, Where, comparisons,
And/Or/Xor/Not, IsNaN/IsInf, Expand, Split; each builds graph ops of ONNX's exact
semantics (integers and booleans included)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx
from xdsl.dialects.builtin import BoolAttr, IntegerAttr, StringAttr, i64
from xdsl.ir import SSAValue

from irkit.dialects import graph as g
from irkit.frontend.onnx_common import Converter, attrs, binary, inputs, like, rank, shape, unary

if TYPE_CHECKING:
    from irkit.frontend.onnx import OnnxImporter


def _gather(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    data, indices = inputs(im, node)
    axis = attrs(node).get("axis", 0)
    return [im.op(g.GatherOp, data, indices, axis=IntegerAttr(axis, i64))]


def _gather_elements(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    data, indices = inputs(im, node)
    axis = attrs(node).get("axis", 0)
    return [im.op(g.GatherElementsOp, data, indices, axis=IntegerAttr(axis, i64))]


def _where(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    cond, a, b = inputs(im, node)
    return [im.op(g.WhereOp, cond, a, like(im, b, a))]


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
        raise im.error(
            f"split sizes {sizes} do not cover axis {axis} of extent {extent} in {outputs} parts"
        )
    out, start = [], 0
    for size in sizes:
        limits = list(shape(x))
        limits[axis] = start + size
        starts = [0] * rank(x)
        starts[axis] = start
        out.append(im.op(g.SliceOp, x, starts=g.int_array(starts), limits=g.int_array(limits)))
        start += size
    return out


def _cumsum(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    x = im.tensor(node.input[0])
    axis = int(im.const(node.input[1], "CumSum's axis").reshape(-1)[0])
    a = attrs(node)
    flags = {k: BoolAttr.from_bool(bool(a.get(k, 0))) for k in ("exclusive", "reverse")}
    return [im.op(g.CumSumOp, x, axis=IntegerAttr(axis, i64), **flags)]


def _arg_extremum(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    (x,) = inputs(im, node)
    a = attrs(node)
    cls = g.ArgMaxOp if node.op_type == "ArgMax" else g.ArgMinOp
    flags = {
        k: BoolAttr.from_bool(bool(a.get(k, d)))
        for k, d in (("keepdims", 1), ("select_last_index", 0))
    }
    return [im.op(cls, x, axis=IntegerAttr(a.get("axis", 0), i64), **flags)]


def _scatter_nd(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    reduction = attrs(node).get("reduction", b"none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    data, indices, updates = inputs(im, node)
    return [
        im.op(
            g.ScatterNdOp,
            data,
            indices,
            like(im, updates, data),
            reduction=StringAttr(reduction),
        )
    ]


EXACT_CONVERTERS: dict[str, Converter] = {
    "ArgMax": _arg_extremum, "ArgMin": _arg_extremum, "ScatterND": _scatter_nd,
    "Gather": _gather, "GatherElements": _gather_elements, "Where": _where, "CumSum": _cumsum, "Expand": _expand, "Split": _split,
    "Equal": binary(g.EqualOp), "Less": binary(g.LessOp),
    "LessOrEqual": binary(g.LessEqualOp), "Greater": binary(g.GreaterOp),
    "GreaterOrEqual": binary(g.GreaterEqualOp),
    "And": binary(g.AndOp), "Or": binary(g.OrOp), "Xor": binary(g.XorOp),
    "Not": unary(g.NotOp), "IsNaN": unary(g.IsNanOp), "IsInf": _is_inf,
}  # fmt: skip

EXACT_LIMITS: dict[str, str] = {
    "Gather": "any axis; indices i32 or i64, negative from the end; out of range: an error where the values are known",
    "Expand": "constant shape",
    "CumSum": "constant axis; exclusive, reverse",
    "ScatterND": "reduction none (the last of duplicate indices wins), add, mul, max, min",
    "Split": "constant sizes (input or attribute), or equal parts (num_outputs)",
}
