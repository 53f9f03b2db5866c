"""ONNX ops that are compositions of graph ops: Clip, Reciprocal, HardSigmoid, HardSwish,
Softplus, Mish, InstanceNormalization, GroupNormalization, Pad, Tile, ReduceL2, Resize, Mod,
Trilu.

Each composition is written once here, with ONNX's semantics; the graph ops it builds are
fused and lowered like any others, so no new lowering is needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from xdsl.dialects.builtin import BoolAttr, Float64Type, FloatAttr, IntegerAttr, i1, i64
from xdsl.ir import SSAValue

from irkit.dialects import graph as g
from irkit.frontend.onnx_common import Converter, attrs, inputs, like, rank, shape

if TYPE_CHECKING:
    from irkit.frontend.onnx import OnnxImporter


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
        out = im.op(g.MaxOp, out, like(im, low, x))
    if high is not None:
        out = im.op(g.MinOp, out, like(im, high, x))
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


def _instance_norm(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    """Per sample and channel over the spatial axes: a layer_norm over them, then the
    channel's scale and bias."""
    x, scale, bias = inputs(im, node)
    if rank(x) < 3:
        raise im.error(f"InstanceNormalization needs rank >= 3 input, got rank {rank(x)}")
    eps = attrs(node).get("epsilon", 1e-5)
    y = _normalized(im, x, list(range(2, rank(x))), eps)
    return [_channel_affine(im, y, scale, bias)]


def _group_norm(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    """x as [N, G, C/G * spatial], normalized over the last axis, back to x's shape, then
    per-channel scale and bias (opset 21; opset 18's per-group scale and bias broadcast
    to their channels)."""
    x, scale, bias = inputs(im, node)
    a = attrs(node)
    groups, eps = a["num_groups"], a.get("epsilon", 1e-5)
    n, c = shape(x)[:2]
    if c % groups:
        raise im.error(f"GroupNormalization: {c} channels do not divide into {groups} groups")
    grouped = im.add_op(g.ReshapeOp.build_to(x, [n, groups, -1]))
    y = im.add_op(g.ReshapeOp.build_to(_normalized(im, grouped, [2], eps), list(shape(x))))
    if shape(scale)[0] == groups and groups != c:  # opset 18: one scale per group
        scale, bias = (_per_channel(im, v, groups, c) for v in (scale, bias))
    return [_channel_affine(im, y, scale, bias)]


def _per_channel(im: OnnxImporter, v: SSAValue, groups: int, channels: int) -> SSAValue:
    wide = im.op(
        g.BroadcastToOp,
        im.add_op(g.ReshapeOp.build_to(v, [groups, 1])),
        shape=g.int_array([groups, channels // groups]),
    )
    return im.add_op(g.ReshapeOp.build_to(wide, [channels]))


def _normalized(im: OnnxImporter, x: SSAValue, axes: list[int], eps: float) -> SSAValue:
    norm = [shape(x)[a] for a in axes]
    count = int(np.prod(norm))
    element = g.element_type_of(x)
    ones = im.add_op(g.ConstantOp.from_values(element, norm, [1.0] * count))
    zeros = im.add_op(g.ConstantOp.from_values(element, norm, [0.0] * count))
    return im.op(
        g.LayerNormOp, x, ones, zeros, axes=g.int_array(axes), eps=FloatAttr(eps, Float64Type())
    )


def _channel_affine(im: OnnxImporter, y: SSAValue, scale: SSAValue, bias: SSAValue) -> SSAValue:
    trailing = [1] * (rank(y) - 2)
    s = im.add_op(g.ReshapeOp.build_to(scale, [shape(scale)[0], *trailing]))
    b = im.add_op(g.ReshapeOp.build_to(bias, [shape(bias)[0], *trailing]))
    return im.op(g.AddOp, im.op(g.MulOp, y, s), b)


def _pad(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    """constant: the input between blocks of the value (concats); edge, reflect and wrap:
    a gather along each padded axis by indices known at import (negative pads crop)."""
    x = im.tensor(node.input[0])
    a = attrs(node)
    mode = a.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if len(node.input) > 1 and node.input[1]:
        pads = [int(p) for p in im.const(node.input[1], "Pad's pads").reshape(-1)]
    else:
        pads = [int(p) for p in a.get("pads", [])]
    axes = list(range(rank(x)))
    if len(node.input) > 3 and node.input[3]:
        axes = [int(v) % rank(x) for v in im.const(node.input[3], "Pad's axes").reshape(-1)]
    value = 0.0
    if len(node.input) > 2 and node.input[2]:
        value = float(im.const(node.input[2], "Pad's constant value").reshape(-1)[0])
    elif "value" in a:
        value = float(a["value"])
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise im.unsupported(f"Pad mode '{mode}'")
    out = x
    for k, axis in enumerate(axes):
        before, after = pads[k], pads[k + len(axes)]
        if before or after:
            out = _pad_axis(im, out, axis, before, after, mode, value)
    if out is x:
        out = im.op(g.BroadcastToOp, x, shape=g.int_array(list(shape(x))))
    return [out]


def _pad_axis(
    im: OnnxImporter, x: SSAValue, axis: int, before: int, after: int, mode: str, value: float
) -> SSAValue:
    n = shape(x)[axis]
    if mode == "reflect" and max(before, after) >= n:
        raise im.error(f"reflect padding of {max(before, after)} on an axis of extent {n}")
    if mode != "constant" or before < 0 or after < 0:
        positions = np.arange(-before, n + after)
        if mode == "edge":
            positions = np.clip(positions, 0, n - 1)
        elif mode == "wrap":
            positions = positions % n
        elif mode == "reflect":
            positions = np.abs(positions)
            positions = np.where(positions > n - 1, 2 * (n - 1) - positions, positions)
        if mode == "constant":  # a crop, then constant blocks for the positive side
            kept = positions[(positions >= 0) & (positions < n)]
            x = _take(im, x, axis, kept)
            before, after = max(before, 0), max(after, 0)
        else:
            return _take(im, x, axis, positions)
    blocks = [_block(im, x, axis, before, value)] if before else []
    blocks.append(x)
    if after:
        blocks.append(_block(im, x, axis, after, value))
    if len(blocks) == 1:
        return x
    return im.op(g.ConcatOp, *blocks, axis=IntegerAttr(axis, i64))


def _block(im: OnnxImporter, x: SSAValue, axis: int, width: int, value: float) -> SSAValue:
    """A constant block of `value`, `width` wide along `axis`, x's extents elsewhere."""
    extents = list(shape(x))
    extents[axis] = width
    count = int(np.prod(extents))
    return im.add_op(g.ConstantOp.from_values(g.element_type_of(x), extents, [value] * count))


def _take(im: OnnxImporter, x: SSAValue, axis: int, positions: np.ndarray) -> SSAValue:
    indices = im.add_op(g.ConstantOp.from_values(i64, [len(positions)], positions.tolist()))
    return im.op(g.GatherOp, x, indices, axis=IntegerAttr(axis, i64))


def _tile(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    """x repeated r_i times along each axis: x as [1, d0, 1, d1, ...] broadcast to
    [r0, d0, r1, d1, ...], then merged pairwise."""
    x = im.tensor(node.input[0])
    repeats = [int(r) for r in im.const(node.input[1], "Tile's repeats").reshape(-1)]
    dims = list(shape(x))
    split = im.add_op(g.ReshapeOp.build_to(x, [v for d in dims for v in (1, d)]))
    wide = im.op(
        g.BroadcastToOp,
        split,
        shape=g.int_array([v for r, d in zip(repeats, dims, strict=True) for v in (r, d)]),
    )
    return [
        im.add_op(g.ReshapeOp.build_to(wide, [r * d for r, d in zip(repeats, dims, strict=True)]))
    ]


def _reduce_l2(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    """sqrt(sum(x^2)) over the axes (as input from opset 18, as attribute before)."""
    x = im.tensor(node.input[0])
    a = attrs(node)
    if len(node.input) > 1 and node.input[1]:
        axes = [int(v) for v in im.const(node.input[1], "ReduceL2's axes").reshape(-1)]
    else:
        axes = list(a.get("axes", []))
    if not axes:
        if a.get("noop_with_empty_axes", 0):
            return [im.op(g.AbsOp, x)]  # sqrt(x^2), elementwise
        axes = list(range(rank(x)))
    keep = BoolAttr.from_bool(bool(a.get("keepdims", 1)))
    total = im.op(g.ReduceSumOp, im.op(g.MulOp, x, x), axes=g.int_array(axes), keepdims=keep)
    return [im.op(g.SqrtOp, total)]


def _resize(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    """nearest and linear (bilinear, trilinear: separable) interpolation, one gather (or
    two and a weighted sum) per resized axis by indices and weights known at import."""
    x = im.tensor(node.input[0])
    a = attrs(node)
    text = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in a.items()}
    mode = text.get("mode", "nearest")
    if mode not in ("nearest", "linear"):
        raise im.unsupported(f"Resize mode '{mode}' (irkit resizes nearest and linear)")
    if text.get("antialias", 0) or text.get("exclude_outside", 0) or "axes" in text:
        raise im.unsupported("Resize with antialias, exclude_outside or axes")
    in_shape = list(shape(x))
    sizes, scales = _resize_sizes(im, node, in_shape)
    out = x
    for axis, (n_in, n_out) in enumerate(zip(in_shape, sizes, strict=True)):
        if n_in == n_out:
            continue
        transform = text.get("coordinate_transformation_mode", "half_pixel")
        if transform not in _TRANSFORMS:
            raise im.unsupported(f"Resize coordinate_transformation_mode '{transform}'")
        coords = _source_coords(transform, n_in, n_out, scales[axis])
        if mode == "nearest":
            idx = _nearest(coords, text.get("nearest_mode", "round_prefer_floor"), n_in)
            out = _take(im, out, axis, idx)
        else:
            coords = np.clip(coords, 0, n_in - 1)
            low = np.floor(coords).astype(np.int64)
            high = np.minimum(low + 1, n_in - 1)
            weight = coords - low
            w_shape = [1] * rank(x)
            w_shape[axis] = n_out
            w = im.add_op(g.ConstantOp.from_values(g.element_type_of(x), w_shape, weight.tolist()))
            lo, hi = _take(im, out, axis, low), _take(im, out, axis, high)
            out = im.op(g.AddOp, lo, im.op(g.MulOp, im.op(g.SubOp, hi, lo), w))
    if out is x:
        out = im.op(g.BroadcastToOp, x, shape=g.int_array(in_shape))
    return [out]


def _resize_sizes(
    im: OnnxImporter, node: onnx.NodeProto, in_shape: list[int]
) -> tuple[list[int], list[float]]:
    """The output extents and the scales the coordinates use: the given scales (an
    extent floor(n * scale)), or out / in where sizes are given."""
    names = list(node.input) + [""] * (4 - len(node.input))
    if names[3]:
        sizes = [int(v) for v in im.const(names[3], "Resize's sizes").reshape(-1)]
        return sizes, [o / n for o, n in zip(sizes, in_shape, strict=True)]
    scales_name = names[2] if im.opset >= 11 else names[1]
    if not scales_name:
        raise im.error("Resize needs scales or sizes")
    scales = [float(v) for v in im.const(scales_name, "Resize's scales").reshape(-1)]
    return [int(np.floor(n * sc)) for n, sc in zip(in_shape, scales, strict=True)], scales


_TRANSFORMS = (
    "half_pixel",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
)


def _source_coords(mode: str, n_in: int, n_out: int, scale: float) -> np.ndarray:
    o = np.arange(n_out, dtype=np.float64)
    if mode == "half_pixel":
        return (o + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (o + 0.5) / scale - 0.5 if n_out > 1 else np.zeros(n_out)
    if mode == "align_corners":
        span = n_in * scale - 1  # ONNX's length_resized: n_in * scale, not floored
        return o * (n_in - 1) / span if span > 0 else np.zeros(n_out)
    if mode == "asymmetric":
        return o / scale
    if mode == "tf_half_pixel_for_nn":
        return (o + 0.5) / scale
    raise ValueError(f"Resize coordinate_transformation_mode '{mode}'")


def _nearest(coords: np.ndarray, mode: str, n_in: int) -> np.ndarray:
    rounded = {
        "round_prefer_floor": np.ceil(coords - 0.5),
        "round_prefer_ceil": np.floor(coords + 0.5),
        "floor": np.floor(coords),
        "ceil": np.ceil(coords),
    }[mode]
    return np.clip(rounded, 0, n_in - 1).astype(np.int64)


def _mod(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    """fmod=1: C's fmod, the sign of the dividend (a - trunc(a / b) * b); fmod=0: the sign
    of the divisor, as Python's % (that remainder moved by b where the signs differ). Floats
    through the rounded quotient: exact while it is below 2^24 (f32)."""
    a, b = inputs(im, node)
    b = like(im, b, a)
    fmod = attrs(node).get("fmod", 0)
    integer = g.is_integer(g.element_type_of(a))
    q = im.op(g.DivOp, a, b)
    if not integer:
        negative = im.op(g.LessOp, q, im.scalar(0.0, q))
        q = im.op(g.WhereOp, negative, im.op(g.CeilOp, q), im.op(g.FloorOp, q))
    r = im.op(g.SubOp, a, im.op(g.MulOp, q, b))
    if not integer:  # a finite dividend over an infinite divisor: 0 * inf is NaN above
        finite_over_inf = im.op(g.AndOp, im.op(g.IsInfOp, b), im.op(g.NotOp, im.op(g.IsInfOp, a)))
        r = im.op(g.WhereOp, finite_over_inf, a, r)
    if fmod:
        return [r]
    zero = im.scalar(0, r)
    signs_differ = im.op(g.XorOp, im.op(g.LessOp, r, zero), im.op(g.LessOp, b, zero))
    fix = im.op(g.AndOp, im.op(g.NotOp, im.op(g.EqualOp, r, zero)), signs_differ)
    return [im.op(g.WhereOp, fix, im.op(g.AddOp, r, b), r)]


def _trilu(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    """The upper (j - i >= k) or lower (j - i <= k) triangle of the last two axes, the
    rest 0: a select by a mask known at import."""
    x = im.tensor(node.input[0])
    k = (
        int(im.const(node.input[1], "Trilu's k").reshape(-1)[0])
        if len(node.input) > 1 and node.input[1]
        else 0
    )
    rows, cols = shape(x)[-2:]
    diff = np.arange(cols)[None, :] - np.arange(rows)[:, None]
    keep = diff >= k if attrs(node).get("upper", 1) else diff <= k
    mask = im.add_op(g.ConstantOp.from_values(i1, [rows, cols], keep.reshape(-1).tolist()))
    return [im.op(g.WhereOp, mask, x, im.scalar(0, x))]


def _einsum(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    """One or two operands without repeated letters or '...': letters only one side holds
    and the output lacks are summed first; then the batch letters (both sides and the
    output), the free ones and the contracted ones become a (batch) matmul between
    transposes and reshapes."""
    equation = attrs(node)["equation"]
    equation = (equation.decode() if isinstance(equation, bytes) else equation).replace(" ", "")
    operands = inputs(im, node)
    lhs, _, out = equation.partition("->")
    terms = lhs.split(",")
    if (
        "." in equation
        or len(terms) != len(operands)
        or len(terms) > 2
        or any(len(set(t)) != len(t) for t in terms)
    ):
        raise im.unsupported(
            f"Einsum '{equation}' (irkit: one or two operands, no '...' or repeated letters)"
        )
    if "->" not in equation:
        out = "".join(sorted(c for c in set(lhs) - {","} if lhs.count(c) == 1))
    others = [set("".join(terms[:i] + terms[i + 1 :])) for i in range(len(terms))]
    reduced = []
    for x, term, other in zip(operands, terms, others, strict=True):
        drop = [i for i, c in enumerate(term) if c not in out and c not in other]
        if drop:
            x = im.op(g.ReduceSumOp, x, axes=g.int_array(drop), keepdims=BoolAttr.from_bool(False))
            term = "".join(c for i, c in enumerate(term) if i not in drop)
        reduced.append((x, term))
    if len(reduced) == 1:
        x, term = reduced[0]
        return [_permuted(im, x, term, out)]
    (a, ta), (b, tb) = reduced
    batch = [c for c in ta if c in tb and c in out]
    contracted = [c for c in ta if c in tb and c not in out]
    free_a = [c for c in ta if c not in tb]
    free_b = [c for c in tb if c not in ta]
    size = {c: d for t, v in ((ta, a), (tb, b)) for c, d in zip(t, shape(v), strict=True)}
    if any(
        dict(zip(ta, shape(a), strict=True))[c] != dict(zip(tb, shape(b), strict=True))[c]
        for c in batch + contracted
    ):
        raise im.unsupported(f"Einsum '{equation}' with broadcast letters")
    prod = lambda cs: int(np.prod([size[c] for c in cs]))  # noqa: E731
    a = im.add_op(
        g.ReshapeOp.build_to(
            _permuted(im, a, ta, "".join(batch + free_a + contracted)),
            [prod(batch), prod(free_a), prod(contracted)],
        )
    )
    b = im.add_op(
        g.ReshapeOp.build_to(
            _permuted(im, b, tb, "".join(batch + contracted + free_b)),
            [prod(batch), prod(contracted), prod(free_b)],
        )
    )
    y = im.op(g.BatchMatmulOp, a, b)
    dims = [size[c] for c in batch + free_a + free_b]
    y = im.add_op(g.ReshapeOp.build_to(y, dims or [1]))
    if not dims:
        return [im.add_op(g.ReshapeOp.build_to(y, []))]
    return [_permuted(im, y, "".join(batch + free_a + free_b), out)]


def _permuted(im: OnnxImporter, x: SSAValue, have: str, want: str) -> SSAValue:
    if have == want:
        return x
    return im.op(g.TransposeOp, x, perm=g.int_array([have.index(c) for c in want]))


def _conv_transpose(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    """The transposed convolution as a convolution (1-D over a height of 1, 2-D): the
    input with stride - 1 zeros between its pixels, padded by dilation * (kernel - 1) less
    the pads (plus output_padding at the end), convolved with the weight flipped and its
    in/out channels swapped per group. (It does stride^2 times the multiplies it needs.)"""
    x, w = im.tensor(node.input[0]), im.tensor(node.input[1])
    if rank(x) not in (3, 4):
        raise im.unsupported(f"ConvTranspose on rank-{rank(x)} input; irkit has 1-D and 2-D")
    a = attrs(node)
    one_d = rank(x) == 3
    if one_d:
        x = im.add_op(g.ReshapeOp.build_to(x, [*shape(x)[:2], 1, shape(x)[2]]))
        w = im.add_op(g.ReshapeOp.build_to(w, [*shape(w)[:2], 1, shape(w)[2]]))
    lift = (lambda v, fill: [fill, *v]) if one_d else (lambda v, fill: list(v))
    kernel = list(shape(w)[2:])
    strides = lift(a.get("strides", [1] * (2 - one_d)), 1)
    dil = lift(a.get("dilations", [1] * (2 - one_d)), 1)
    extra = lift(a.get("output_padding", [0] * (2 - one_d)), 0)
    pads = a.get("pads", [0] * (4 - 2 * one_d))
    begin, end = (lift(pads[: len(pads) // 2], 0), lift(pads[len(pads) // 2 :], 0))
    if "output_shape" in a or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise im.unsupported("ConvTranspose with output_shape or auto_pad")
    groups = a.get("group", 1)
    x = _spread(im, x, strides)
    lo = [d * (k - 1) - p for d, k, p in zip(dil, kernel, begin, strict=True)]
    hi = [d * (k - 1) - p + e for d, k, p, e in zip(dil, kernel, end, extra, strict=True)]
    if min(lo + hi) < 0:  # pads beyond the kernel crop the result
        x = _crop(im, x, [max(0, -v) for v in lo], [max(0, -v) for v in hi])
        lo, hi = [max(0, v) for v in lo], [max(0, v) for v in hi]
    y = im.op(
        g.Conv2dOp,
        x,
        _flipped_weight(im, w, groups),
        strides=g.int_array([1, 1]),
        padding=g.int_array([lo[0], lo[1], hi[0], hi[1]]),
        dilations=g.int_array(dil),
        groups=IntegerAttr(groups, i64),
    )
    if len(node.input) > 2 and node.input[2]:
        bias = im.add_op(g.ReshapeOp.build_to(im.tensor(node.input[2]), [shape(y)[1], 1, 1]))
        y = im.op(g.AddOp, y, bias)
    if one_d:
        y = im.add_op(g.ReshapeOp.build_to(y, [shape(y)[0], shape(y)[1], shape(y)[3]]))
    return [y]


def _spread(im: OnnxImporter, x: SSAValue, strides: list[int]) -> SSAValue:
    """x [N, C, H, W] with s - 1 zeros after each pixel along H and W, the trailing ones
    cut: [N, C, (H - 1) sh + 1, (W - 1) sw + 1]."""
    n, c, h, w = shape(x)
    sh, sw = strides
    if sh == sw == 1:
        return x
    x = im.add_op(g.ReshapeOp.build_to(x, [n, c, h, 1, w, 1]))
    if sh > 1:
        x = im.op(g.ConcatOp, x, _block(im, x, 3, sh - 1, 0.0), axis=IntegerAttr(3, i64))
    if sw > 1:
        x = im.op(g.ConcatOp, x, _block(im, x, 5, sw - 1, 0.0), axis=IntegerAttr(5, i64))
    x = im.add_op(g.ReshapeOp.build_to(x, [n, c, h * sh, w * sw]))
    return _crop(im, x, [0, 0], [sh - 1, sw - 1])


def _crop(im: OnnxImporter, x: SSAValue, lo: list[int], hi: list[int]) -> SSAValue:
    if not any(lo + hi):
        return x
    n, c, h, w = shape(x)
    return im.op(
        g.SliceOp,
        x,
        starts=g.int_array([0, 0, lo[0], lo[1]]),
        limits=g.int_array([n, c, h - hi[0], w - hi[1]]),
    )


def _flipped_weight(im: OnnxImporter, w: SSAValue, groups: int) -> SSAValue:
    """[C, O/g, kh, kw] -> [O, C/g, kh, kw], each kernel turned by 180 degrees."""
    c, og, kh, kw = shape(w)
    w = im.add_op(g.ReshapeOp.build_to(w, [groups, c // groups, og, kh, kw]))
    w = im.op(g.TransposeOp, w, perm=g.int_array([0, 2, 1, 3, 4]))
    w = im.add_op(g.ReshapeOp.build_to(w, [groups * og, c // groups, kh, kw]))
    for axis, k in ((2, kh), (3, kw)):
        if k > 1:
            w = _take(im, w, axis, np.arange(k - 1, -1, -1))
    return w


COMPOSED_CONVERTERS: dict[str, Converter] = {
    "Clip": _clip, "Reciprocal": _reciprocal, "HardSigmoid": _hard_sigmoid,
    "HardSwish": _hard_swish, "Softplus": _softplus, "Mish": _mish,
    "InstanceNormalization": _instance_norm, "GroupNormalization": _group_norm,
    "Pad": _pad, "Tile": _tile, "ReduceL2": _reduce_l2, "Resize": _resize, "Mod": _mod,
    "Trilu": _trilu, "Einsum": _einsum, "ConvTranspose": _conv_transpose,
}  # fmt: skip

COMPOSED_LIMITS: dict[str, str] = {
    "Clip": "bounds as inputs (opset 11+) or attributes",
    "Pad": "constant, edge, reflect and wrap modes; constant pads, axes and value",
    "Tile": "constant repeats",
    "Mod": "fmod=0 (the divisor's sign) and fmod=1 (the dividend's); floats exact while |a / b| < 2^24",
    "Trilu": "constant k",
    "Einsum": "one or two operands; no '...', repeated letters or broadcast letters",
    "ConvTranspose": "1-D and 2-D; strides, pads, dilations, group, output_padding, bias; no output_shape or auto_pad",
    "Resize": "nearest and linear; sizes or scales known at import; no antialias, exclude_outside, axes",
    "GroupNormalization": "per-channel (opset 21) or per-group (opset 18) scale and bias",
}
