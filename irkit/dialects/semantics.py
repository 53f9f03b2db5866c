"""What each graph op computes: its float64 numpy semantics, beside the dialect.

`IMPLS` maps each op class to a function of (op, operand arrays) returning the result in
float64 for every float element type, so that the reference's own rounding is far below
any backend's; `graph.cast` alone rounds, to the precision it names (that rounding is the
op's meaning). Integer values are int64 and booleans bool (`irkit.dtypes.reference_dtype`):
exact, and wrapped to their width by the caller (`wrap`). A comparison rounds float
operands to their element type first, as a program holding them in that type compares
them. The reference (`irkit.runtime.reference`) evaluates models with it, and
`fold-constants` folds constant subgraphs with it, so both mean the same thing by an op.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation

from irkit.dialects import graph as g
from irkit.dtypes import (
    dense_array,
    dtype_name,
    is_bool,
    is_fp8,
    is_integer,
    numpy_dtype,
    reference_dtype,
    to_fp8,
)
from irkit.errors import IrkitError

_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """Exact erf elementwise (numpy has none, and the reference must not approximate)."""
    return np.asarray(_erf(x), dtype=np.float64)


def gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))  # never overflows
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def attention(op: Operation, a: list[np.ndarray]) -> np.ndarray:
    """`graph.attention` (see its docstring): key/value heads repeated for their query
    heads, scores scaled and masked, softmax over the keys, then the values."""
    q, k, v = a[:3]
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = g.float_of(op.properties, "scale") * (q @ np.swapaxes(k, -1, -2))
    if len(a) == 4:
        s = np.where(a[3], s, -np.inf) if a[3].dtype == np.bool_ else s + a[3]
    if g.bool_of(op.properties, "causal"):
        sq, sk = s.shape[-2:]
        later = np.arange(sk)[None, :] > np.arange(sq)[:, None] + (sk - sq)
        s = np.where(later, -np.inf, s)
    with np.errstate(invalid="ignore"):  # a row with every key masked: NaN, as documented
        return softmax(s, -1) @ v


def layer_norm(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, axes: tuple[int, ...], eps: float
) -> np.ndarray:
    mean = np.mean(x, axis=axes, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def batch_norm(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    eps: float,
) -> np.ndarray:
    shape = (1, -1) + (1,) * (x.ndim - 2)
    c = [p.reshape(shape) for p in (scale, bias, mean, var)]
    return (x - c[2]) / np.sqrt(c[3] + eps) * c[0] + c[1]


def _windows(
    x: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out_hw: Sequence[int],
):
    """Yield (i, j, view) for each kernel offset: view[..., oy, ox] = x[..., oy*sh + i*dh, ox*sw + j*dw]."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, strides, dilations, out_hw
    for i in range(kh):
        for j in range(kw):
            y0, x0 = i * dh, j * dw
            yield i, j, x[..., y0 : y0 + sh * (oh - 1) + 1 : sh, x0 : x0 + sw * (ow - 1) + 1 : sw]


def _pad_hw(x: np.ndarray, padding: Sequence[int], value: float) -> np.ndarray:
    top, left, bottom, right = padding
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=value)


def conv2d(
    x: np.ndarray,
    w: np.ndarray,
    strides: Sequence[int],
    padding: Sequence[int],
    dilations: Sequence[int],
    groups: int,
    out_shape: Sequence[int],
) -> np.ndarray:
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    xp = _pad_hw(x, padding, 0.0)
    xg = xp.reshape(n, groups, cg, *xp.shape[2:])
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    out = np.zeros((n, groups, o // groups, *out_shape[2:]))
    for i, j, view in _windows(xg, (kh, kw), strides, dilations, out_shape[2:]):
        out += np.einsum("ngchw,goc->ngohw", view, wg[..., i, j])
    return out.reshape(out_shape)


def conv2d_op(op: Operation, a: list[np.ndarray]) -> np.ndarray:
    """conv2d in either layout: an NHWC one is the NCHW sum on permuted operands."""
    x, w = a
    p = op.properties
    nhwc = g.conv_layout(p) == "nhwc"
    if nhwc:
        x, w = x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1)
    out_shape = _out_shape(op)
    if nhwc:
        out_shape = (out_shape[0], out_shape[3], out_shape[1], out_shape[2])
    out = conv2d(x, w, g.ints(p, "strides"), g.ints(p, "padding"), g.ints(p, "dilations"), g.int_of(p, "groups"), out_shape)  # fmt: skip
    return out.transpose(0, 2, 3, 1) if nhwc else out


def im2col(
    x: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    padding: Sequence[int],
    dilations: Sequence[int],
    out_shape: Sequence[int],
) -> np.ndarray:
    n, h, w, c = x.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
    oh = (h + padding[0] + padding[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (w + padding[1] + padding[3] - dw * (kw - 1) - 1) // sw + 1
    xp = _pad_hw(x.transpose(0, 3, 1, 2), padding, 0.0)  # [n, c, h, w]
    cols = np.zeros((n, oh, ow, kh, kw, c))
    for i, j, view in _windows(xp, kernel, strides, dilations, (oh, ow)):
        cols[:, :, :, i, j, :] = view.transpose(0, 2, 3, 1)
    return cols.reshape(out_shape)


def max_pool2d(
    x: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    padding: Sequence[int],
    out_shape: Sequence[int],
    dilations: Sequence[int] = (1, 1),
) -> np.ndarray:
    out = np.full(out_shape, -np.inf)
    for _, _, view in _windows(
        _pad_hw(x, padding, -np.inf), kernel, strides, dilations, out_shape[2:]
    ):
        out = np.maximum(out, view)
    return out


def avg_pool2d(
    x: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    padding: Sequence[int],
    count_include_pad: bool,
    out_shape: Sequence[int],
    dilations: Sequence[int] = (1, 1),
) -> np.ndarray:
    total = np.zeros(out_shape)
    count = np.zeros(out_shape[2:])
    ones = _pad_hw(np.ones((1, 1, *x.shape[2:])), padding, 0.0)[0, 0]
    windows = zip(
        _windows(_pad_hw(x, padding, 0.0), kernel, strides, dilations, out_shape[2:]),
        _windows(ones, kernel, strides, dilations, out_shape[2:]),
        strict=True,
    )
    for (_, _, view), (_, _, valid) in windows:
        total += view
        count += valid
    return total / (kernel[0] * kernel[1] if count_include_pad else count)


def cast(x: np.ndarray, element_type: Any) -> np.ndarray:
    """`graph.cast`'s meaning (see its docstring), in the reference's types."""
    if is_bool(element_type):
        return x != 0
    if is_fp8(element_type):  # saturating: see irkit.dtypes
        return to_fp8(x, dtype_name(element_type)).astype(np.float64)
    if not is_integer(element_type):
        return x.astype(numpy_dtype(element_type)).astype(np.float64)
    if x.dtype.kind == "f":
        info = np.iinfo(numpy_dtype(element_type))
        x = np.clip(np.trunc(np.nan_to_num(x, nan=0.0)), info.min, info.max)
    return wrap(x.astype(np.int64), element_type)


def wrap(x: np.ndarray, element_type: Any) -> np.ndarray:
    """An integer value wrapped to its element type's width (two's complement), as int64."""
    if is_integer(element_type) and not is_bool(element_type):
        return x.astype(numpy_dtype(element_type)).astype(np.int64)
    return x


def divide(op: Operation, a: list[np.ndarray]) -> np.ndarray:
    """IEEE division of floats; integers round toward zero (C's, LLVM's and onnxruntime's),
    x / 0 is 0 and MIN / -1 wraps to MIN."""
    x, y = a
    if x.dtype.kind == "f":
        return x / y
    safe = np.where((y == 0) | (y == -1), 1, y)
    q = np.abs(x) // np.abs(safe) * np.where((x < 0) != (safe < 0), -1, 1)
    return np.where(y == 0, 0, np.where(y == -1, -x, q))


def compare(op: g.CompareOp, a: list[np.ndarray]) -> np.ndarray:
    """A comparison, with float operands rounded to their element type first."""
    x, y = (_as_stored(v, operand) for v, operand in zip(a, op.operands, strict=True))
    return _PREDICATES[op.PREDICATE](x, y)


_PREDICATES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "eq": np.equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


def _as_stored(x: np.ndarray, value: Any) -> np.ndarray:
    if x.dtype.kind != "f":
        return x
    return x.astype(numpy_dtype(value.type.element_type)).astype(np.float64)


def is_inf(op: g.IsInfOp, a: list[np.ndarray]) -> np.ndarray:
    positive, negative = op.detects()
    return (np.isposinf(a[0]) & positive) | (np.isneginf(a[0]) & negative)


def gather(op: g.GatherOp, a: list[np.ndarray]) -> np.ndarray:
    """np.take along the op's axis; an index outside [-extent, extent) is an error."""
    data, indices = a
    axis = op.normalized_axis()
    return np.take(data, _in_range(op, indices, data.shape[axis], axis), axis=axis)


def gather_elements(op: g.GatherElementsOp, a: list[np.ndarray]) -> np.ndarray:
    data, indices = a
    axis = op.normalized_axis()
    wrapped = _in_range(op, indices, data.shape[axis], axis)
    region = tuple(slice(0, n) if k != axis else slice(None) for k, n in enumerate(indices.shape))
    return np.take_along_axis(data[region], wrapped, axis=axis)


def _in_range(op: Operation, indices: np.ndarray, extent: int, axis: int) -> np.ndarray:
    """Indices with negative ones counted from the end; an IrkitError if any is outside
    [-extent, extent)."""
    bad = (indices < -extent) | (indices >= extent)
    if bad.any():
        value = int(indices[bad].flat[0])
        raise IrkitError(
            f"{op.name}: index {value} is out of range for axis {axis} of extent {extent} "
            f"({int(bad.sum())} of {indices.size} indices out of range)"
        )
    return np.where(indices < 0, indices + extent, indices)


def cumsum(op: g.CumSumOp, a: list[np.ndarray]) -> np.ndarray:
    x = a[0]
    axis = op.normalized_axis()
    exclusive, reverse = op.flags()
    if reverse:
        x = np.flip(x, axis)
    out = np.cumsum(x, axis=axis, dtype=x.dtype)
    if exclusive:
        out = out - x
    return np.flip(out, axis) if reverse else out


def arg_extremum(op: g.ArgExtremumOp, a: list[np.ndarray]) -> np.ndarray:
    """numpy's argmax/argmin (a NaN is the extreme), the last occurrence when asked."""
    x = a[0]
    axis = op.normalized_axis()
    pick = np.argmax if isinstance(op, g.ArgMaxOp) else np.argmin
    if op.last():
        out = x.shape[axis] - 1 - pick(np.flip(x, axis), axis=axis)
    else:
        out = pick(x, axis=axis)
    return np.expand_dims(out, axis) if g.bool_of(op.properties, "keepdims") else out


def scatter_nd(op: g.ScatterNdOp, a: list[np.ndarray]) -> np.ndarray:
    data, indices, updates = a
    out = data.copy()
    k = indices.shape[-1]
    flat_idx = indices.reshape(-1, k)
    flat_upd = updates.reshape(-1, *data.shape[k:])
    combine = _SCATTER_COMBINE[op.reduction.data]
    for raw, value in zip(flat_idx, flat_upd, strict=True):
        at = tuple(int(i) + n if i < 0 else int(i) for i, n in zip(raw, data.shape, strict=False))
        if all(0 <= i < n for i, n in zip(at, data.shape, strict=False)):
            out[at] = combine(out[at], value)
    return out


_SCATTER_COMBINE: dict[str, Callable[[Any, Any], Any]] = {
    "none": lambda old, new: new,
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def constant_value(op: g.ConstantOp) -> np.ndarray:
    """A graph.constant's value as an array of its shape in the reference's type."""
    element = op.value.get_element_type()
    return dense_array(op.value).astype(reference_dtype(element)).reshape(_out_shape(op))


def _channels_first(
    op: Operation, x: np.ndarray, pool: Callable[[np.ndarray, tuple[int, ...]], np.ndarray]
) -> np.ndarray:
    """`pool(x, result shape)` on the NCHW form of a pooling op's input, its result in the
    op's layout (an NHWC pool is an NCHW pool between two transposes)."""
    if g.pool_layout(op.properties) == "nchw":
        return pool(x, _out_shape(op))
    n, h, w, c = _out_shape(op)
    return pool(x.transpose(0, 3, 1, 2), (n, c, h, w)).transpose(0, 2, 3, 1)


def _out_shape(op: Operation) -> tuple[int, ...]:
    t = op.results[0].type
    assert isinstance(t, TensorType)
    return t.get_shape()


IMPLS: dict[type[Operation], Callable[[Any, list[np.ndarray]], np.ndarray]] = {
    g.MatmulOp: lambda op, a: a[0] @ a[1],
    g.ScaledMatmulOp: lambda op, a: (a[0] @ a[1]) * a[2].reshape(()) * a[3].reshape(()),
    g.BatchMatmulOp: lambda op, a: np.matmul(a[0], a[1]),
    g.AttentionOp: attention,
    g.Conv2dOp: conv2d_op,
    g.Im2colOp: lambda op, a: im2col(a[0], g.ints(op.properties, "kernel"), g.ints(op.properties, "strides"), g.ints(op.properties, "padding"), g.ints(op.properties, "dilations"), _out_shape(op)),
    g.AddOp: lambda op, a: a[0] + a[1],
    g.SubOp: lambda op, a: a[0] - a[1],
    g.MulOp: lambda op, a: a[0] * a[1],
    g.DivOp: divide,
    g.MaxOp: lambda op, a: np.maximum(a[0], a[1]),
    g.MinOp: lambda op, a: np.minimum(a[0], a[1]),
    g.PowOp: lambda op, a: np.power(a[0], a[1]),
    g.NegOp: lambda op, a: -a[0],
    g.AbsOp: lambda op, a: np.abs(a[0]),
    g.ReluOp: lambda op, a: np.maximum(a[0], 0),  # NaN propagates
    g.LeakyReluOp: lambda op, a: np.where(a[0] >= 0, a[0], g.float_of(op.properties, "alpha") * a[0]),
    g.GeluOp: lambda op, a: gelu(a[0], op.approximate.data),
    g.SigmoidOp: lambda op, a: sigmoid(a[0]),
    g.TanhOp: lambda op, a: np.tanh(a[0]),
    g.ExpOp: lambda op, a: np.exp(a[0]),
    g.LogOp: lambda op, a: np.log(a[0]),
    g.SqrtOp: lambda op, a: np.sqrt(a[0]),
    g.RsqrtOp: lambda op, a: 1.0 / np.sqrt(a[0]),
    g.ErfOp: lambda op, a: erf(a[0]),
    g.SinOp: lambda op, a: np.sin(a[0]),
    g.CosOp: lambda op, a: np.cos(a[0]),
    g.FloorOp: lambda op, a: np.floor(a[0]),
    g.CeilOp: lambda op, a: np.ceil(a[0]),
    g.CastOp: lambda op, a: cast(a[0], op.result.type.element_type),
    g.ReduceSumOp: lambda op, a: np.sum(a[0], axis=op.normalized_axes(), keepdims=g.bool_of(op.properties, "keepdims")),
    g.ReduceMaxOp: lambda op, a: np.max(a[0], axis=op.normalized_axes(), keepdims=g.bool_of(op.properties, "keepdims")),
    g.ReduceMinOp: lambda op, a: np.min(a[0], axis=op.normalized_axes(), keepdims=g.bool_of(op.properties, "keepdims")),
    g.ReduceProdOp: lambda op, a: np.prod(a[0], axis=op.normalized_axes(), keepdims=g.bool_of(op.properties, "keepdims")),
    g.ReduceMeanOp: lambda op, a: np.mean(a[0], axis=op.normalized_axes(), keepdims=g.bool_of(op.properties, "keepdims")),
    g.SoftmaxOp: lambda op, a: softmax(a[0], g.int_of(op.properties, "axis")),
    g.LayerNormOp: lambda op, a: layer_norm(a[0], a[1], a[2], tuple(range(a[0].ndim - a[1].ndim, a[0].ndim)), g.float_of(op.properties, "eps")),
    g.BatchNormOp: lambda op, a: batch_norm(a[0], a[1], a[2], a[3], a[4], g.float_of(op.properties, "eps")),
    g.MaxPool2dOp: lambda op, a: _channels_first(op, a[0], lambda x, shape: max_pool2d(x, g.ints(op.properties, "kernel"), g.ints(op.properties, "strides"), g.ints(op.properties, "padding"), shape, g.pool_dilations(op.properties))),
    g.AvgPool2dOp: lambda op, a: _channels_first(op, a[0], lambda x, shape: avg_pool2d(x, g.ints(op.properties, "kernel"), g.ints(op.properties, "strides"), g.ints(op.properties, "padding"), g.bool_of(op.properties, "count_include_pad"), shape, g.pool_dilations(op.properties))),
    g.GlobalAvgPoolOp: lambda op, a: np.mean(a[0], axis=tuple(range(2, a[0].ndim)), keepdims=True),
    g.TransposeOp: lambda op, a: np.transpose(a[0], g.ints(op.properties, "perm")),
    g.ReshapeOp: lambda op, a: a[0].reshape(_out_shape(op)),
    g.ConcatOp: lambda op, a: np.concatenate(a, axis=g.int_of(op.properties, "axis")),
    g.SliceOp: lambda op, a: a[0][tuple(slice(s, e, st) for s, e, st in zip(g.ints(op.properties, "starts"), g.ints(op.properties, "limits"), g.ints(op.properties, "strides"), strict=True))],
    g.ConstantOp: lambda op, a: constant_value(op),
    g.BroadcastToOp: lambda op, a: np.broadcast_to(a[0], _out_shape(op)).copy(),
    g.GatherOp: gather,
    g.GatherElementsOp: gather_elements,
    g.CumSumOp: cumsum,
    g.ScatterNdOp: scatter_nd,
    g.ArgMaxOp: arg_extremum,
    g.ArgMinOp: arg_extremum,
    g.EqualOp: compare, g.LessOp: compare, g.LessEqualOp: compare, g.GreaterOp: compare,
    g.GreaterEqualOp: compare,
    g.AndOp: lambda op, a: a[0] & a[1],
    g.OrOp: lambda op, a: a[0] | a[1],
    g.XorOp: lambda op, a: a[0] ^ a[1],
    g.NotOp: lambda op, a: ~a[0],
    g.IsNanOp: lambda op, a: np.isnan(a[0]),
    g.IsInfOp: is_inf,
    g.WhereOp: lambda op, a: np.where(a[0], a[1], a[2]),
}  # fmt: skip
