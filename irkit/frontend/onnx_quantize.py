"""ONNX's quantization ops as graph ops: QuantizeLinear, DequantizeLinear and Round.

An exported quantized model (a "QDQ" graph: onnxruntime's quantization tools, torch's
quantizers, NVIDIA ModelOpt's fp8 exports) wraps its tensors in QuantizeLinear and
DequantizeLinear pairs. irkit computes in floats, so each becomes what it means:

- `DequantizeLinear(x, scale, zero_point)` = (x - zero_point) * scale in the scale's float
  type, per tensor or per axis (`axis`). x is an 8-bit float (f8e4m3, f8e5m2; its zero
  point, if given, must be 0) or an integer (int8, uint8, ... held as i32).
- `QuantizeLinear(x, scale, zero_point)` = saturate(round(x / scale) + zero_point) in the
  zero point's type (`output_dtype` without one; uint8 by default): to an integer type,
  rounded half to even and clamped to its range, held as i32; to an 8-bit float, the
  saturating cast (`saturate=0` refused, as Cast's).
- `Round`: to the nearest integer, halves to even; infinities and NaN kept.

A DequantizeLinear of a constant 8-bit float weight is not folded at import: the weight
stays in its bytes, so that `default-cuda` can run the matmul it feeds on the 8-bit tensor
cores (`irkit.passes.recognize_scaled_matmul`). Integer weights fold to f32, as any
constant computation does. Blocked quantization (`block_size`) is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper
from xdsl.ir import SSAValue

from irkit.dialects import graph as g
from irkit.dtypes import DTYPES
from irkit.frontend.onnx_common import Converter, attrs, like, rank, shape
from irkit.ir import element_type_of

if TYPE_CHECKING:
    from irkit.frontend.onnx import OnnxImporter

EIGHT_BIT = {"float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2"}
"""The 8-bit float types quantization reaches, by their numpy names."""
INTEGER_RANGES = {
    name: (int(np.iinfo(name).min), int(np.iinfo(name).max))
    for name in ("int8", "uint8", "int16", "uint16", "int32")
}
"""The integer types QuantizeLinear may produce, and the range it saturates to."""


def round_half_even(im: OnnxImporter, x: SSAValue) -> SSAValue:
    """x rounded to the nearest integer, halves to even (ONNX's Round, C's nearbyint):
    floor(x), plus 1 where the rest is over a half, plus floor(x)'s parity where it is a
    half; x itself where it is not finite (its rest is NaN)."""
    floor = im.op(g.FloorOp, x)
    rest = im.op(g.SubOp, x, floor)
    half = im.scalar(0.5, x)
    up = im.op(g.AddOp, floor, im.scalar(1.0, x))
    twice = im.op(g.MulOp, im.op(g.FloorOp, im.op(g.MulOp, floor, half)), im.scalar(2.0, x))
    tie = im.op(g.AddOp, floor, im.op(g.SubOp, floor, twice))  # floor, plus 1 if it is odd
    below = im.op(g.WhereOp, im.op(g.LessOp, rest, half), floor, tie)
    rounded = im.op(g.WhereOp, im.op(g.GreaterOp, rest, half), up, below)
    return im.op(g.WhereOp, im.op(g.IsNanOp, rest), x, rounded)


def _round(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    return [round_half_even(im, im.tensor(node.input[0]))]


def _per_axis(im: OnnxImporter, v: SSAValue, x: SSAValue, axis: int) -> SSAValue:
    """A scale or zero point `v` (a scalar, or 1-D along `axis` of x) shaped to broadcast
    against x."""
    if rank(v) == 0:
        return v
    target = [1] * rank(x)
    target[axis % rank(x)] = shape(v)[0]
    return im.add_op(g.ReshapeOp.build_to(v, target))


def _zero_point(im: OnnxImporter, node: onnx.NodeProto) -> np.ndarray | None:
    """The zero point, which must be known at import (None where the node has none)."""
    if len(node.input) < 3 or not node.input[2]:
        return None
    return np.asarray(im.const(node.input[2], "the zero point"))


def _refuse_blocks(im: OnnxImporter, node: onnx.NodeProto) -> None:
    if attrs(node).get("block_size", 0):
        raise im.unsupported("blocked quantization (block_size > 0)")


def _dequantize_linear(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    _refuse_blocks(im, node)
    x, scale = im.tensor(node.input[0]), im.tensor(node.input[1])
    axis = attrs(node).get("axis", 1)
    zero = _zero_point(im, node)
    values = im.add_op(g.CastOp.build_to(x, element_type_of(scale)))
    if zero is not None and np.any(zero.astype(np.float64) != 0):
        if str(zero.dtype) in EIGHT_BIT:
            raise im.unsupported("an 8-bit float zero point other than 0")
        point = _per_axis(im, like(im, im.tensor(node.input[2]), scale), x, axis)
        values = im.op(g.SubOp, values, point)
    return [im.op(g.MulOp, values, _per_axis(im, scale, x, axis))]


def _quantize_linear(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    _refuse_blocks(im, node)
    a = attrs(node)
    x, scale = im.tensor(node.input[0]), im.tensor(node.input[1])
    axis = a.get("axis", 1)
    zero = _zero_point(im, node)
    if zero is not None:
        kind = str(zero.dtype)
    else:  # opset 21's output_dtype, else uint8
        kind = str(helper.tensor_dtype_to_np_dtype(a.get("output_dtype") or 2))
    scaled = im.op(g.DivOp, x, like(im, _per_axis(im, scale, x, axis), x))
    if kind in EIGHT_BIT:
        if zero is not None and np.any(zero.astype(np.float64) != 0):
            raise im.unsupported("an 8-bit float zero point other than 0")
        if a.get("saturate", 1) == 0:
            raise im.unsupported(
                "QuantizeLinear to an 8-bit float with saturate=0 (irkit's cast saturates)"
            )
        return [im.add_op(g.CastOp.build_to(scaled, DTYPES[EIGHT_BIT[kind]]))]
    if kind not in INTEGER_RANGES:
        raise im.unsupported(f"quantizing to {kind} (irkit quantizes to 8-bit floats and integers)")
    low, high = INTEGER_RANGES[kind]
    rounded = round_half_even(im, scaled)
    if zero is not None and np.any(zero != 0):
        point = _per_axis(im, like(im, im.tensor(node.input[2]), x), x, axis)
        rounded = im.op(g.AddOp, rounded, point)
    clamped = im.op(g.MinOp, im.op(g.MaxOp, rounded, im.scalar(low, x)), im.scalar(high, x))
    return [im.add_op(g.CastOp.build_to(clamped, DTYPES["i32"]))]


def dequantize_constant(node: onnx.NodeProto, arrays: list[np.ndarray]) -> np.ndarray | None:
    """DequantizeLinear of constants, folded with numpy (onnx's reference implementation has
    no kernel for opsets before 19, which exporters still write): (x - zero_point) * scale
    in the scale's type, per tensor or per axis; None (onnx's to fold) with `block_size`."""
    if attrs(node).get("block_size", 0):
        return None
    x, scale, *rest = arrays
    axis = attrs(node).get("axis", 1) % max(x.ndim, 1)

    def along(v: np.ndarray) -> np.ndarray:
        if v.ndim == 0 or x.ndim == 0:
            return v
        target = [1] * x.ndim
        target[axis] = v.shape[0]
        return v.reshape(target)

    values = x.astype(np.float64)
    if rest:
        values = values - along(rest[0].astype(np.float64))
    return (values * along(scale.astype(np.float64))).astype(scale.dtype)


QUANTIZE_CONVERTERS: dict[str, Converter] = {
    "QuantizeLinear": _quantize_linear,
    "DequantizeLinear": _dequantize_linear,
    "Round": _round,
}

QUANTIZE_LIMITS: dict[str, str] = {
    "QuantizeLinear": "per tensor or per axis; to int8, uint8, int16, uint16, int32 (held as i32) or FLOAT8E4M3FN/E5M2 (zero point 0, saturate=1); no block_size",
    "DequantizeLinear": "per tensor or per axis; from integers or FLOAT8E4M3FN/E5M2 (zero point 0; a constant 8-bit weight kept in its bytes); no block_size",
    "Round": "halves to even",
}
