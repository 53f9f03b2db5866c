"""Contractions and windows: matmul, batch_matmul, scaled_matmul, conv2d, im2col, pooling."""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    BoolAttr,
    DenseArrayBase,
    Float32Type,
    IntegerAttr,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
)

from irkit.dialects import shapes
from irkit.dialects.graph.base import (
    FP8,
    GraphOp,
    Props,
    _same_dtype,
    int_array,
    int_of,
    ints,
    require_kind,
    tensor,
)
from irkit.dialects.shapes import ShapeError

# --- contractions -------------------------------------------------------------------------


@irdl_op_definition
class MatmulOp(GraphOp):
    """C[m, n] = sum_k A[m, k] * B[k, n]. Both operands rank 2; the accumulation is at least
    as precise as the element type (backends accumulate f16/bf16 in f32)."""

    name = "graph.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        a, b = (t.get_shape() for t in types)
        if len(a) != 2 or len(b) != 2:
            raise ShapeError(f"matmul takes rank-2 operands, got {list(a)} and {list(b)}")
        if a[1] != b[0]:
            raise ShapeError(f"matmul contraction mismatch: lhs {list(a)} vs rhs {list(b)}")
        return tensor(_same_dtype(types), (a[0], b[1]))


@irdl_op_definition
class ScaledMatmulOp(GraphOp):
    """C[m, n] = (sum_k A[m, k] * B[k, n]) * scale_a * scale_b, in f32: an 8-bit float
    matmul with per-tensor scales (torch's `_scaled_mm`). A and B are f8e4m3 or f8e5m2
    (either, each), rank 2; the scales f32 with one element (shape [] or [1]), what A and B
    were divided by when quantized; the products and their sum are exact in f32 up to its
    accumulation's rounding. A cast of C to bf16 or f16 fuses into the matmul's epilogue."""

    name = "graph.scaled_matmul"
    POSITIVE_OPERANDS: ClassVar[tuple[int, ...]] = (2, 3)  # scales
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    scale_lhs = operand_def(TensorType)
    scale_rhs = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$lhs `,` $rhs `,` $scale_lhs `,` $scale_rhs attr-dict `:` functional-type(operands, results)"

    @classmethod
    def check_kinds(cls, types: Sequence[TensorType]) -> None:
        require_kind(cls.name, 0, types[0], frozenset({FP8}))
        require_kind(cls.name, 1, types[1], frozenset({FP8}))
        for i in (2, 3):
            t = types[i]
            if not isinstance(t.element_type, Float32Type) or t.get_shape() not in ((), (1,)):
                raise ShapeError(
                    f"{cls.name}'s operand #{i} is a scale: f32 with one element (shape [] or "
                    f"[1]), got {t}"
                )

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        a, b = (t.get_shape() for t in types[:2])
        if len(a) != 2 or len(b) != 2:
            raise ShapeError(f"scaled_matmul takes rank-2 operands, got {list(a)} and {list(b)}")
        if a[1] != b[0]:
            raise ShapeError(f"scaled_matmul contraction mismatch: lhs {list(a)} vs rhs {list(b)}")
        return tensor(Float32Type(), (a[0], b[1]))


@irdl_op_definition
class BatchMatmulOp(GraphOp):
    """C[..., m, n] = sum_k A[..., m, k] * B[..., k, n], batch dimensions broadcast as in
    numpy. Each operand has rank >= 3."""

    name = "graph.batch_matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        a, b = (t.get_shape() for t in types)
        if len(a) < 3 or len(b) < 3:
            raise ShapeError(f"batch_matmul takes rank >= 3 operands, got {list(a)} and {list(b)}")
        if a[-1] != b[-2]:
            raise ShapeError(f"batch_matmul contraction mismatch: lhs {list(a)} vs rhs {list(b)}")
        batch = shapes.broadcast_shapes(a[:-2], b[:-2])
        return tensor(_same_dtype(types), (*batch, a[-2], b[-1]))


@irdl_op_definition
class Conv2dOp(GraphOp):
    """2-D cross-correlation with zero padding; `padding` is [top, left, bottom, right].

    `layout = "nchw"` (the default, ONNX's and PyTorch's): input [N, C, H, W], weight
    [O, C/groups, KH, KW], result [N, O, OH, OW], and

        out[n, o, y, x] = sum_{c, i, j} in[n, g*C/groups + c, y*sh + i*dh - pad_top,
                                           x*sw + j*dw - pad_left] * w[o, c, i, j]

    with g = o // (O/groups). `layout = "nhwc"` (channels last, TensorFlow's): input
    [N, H, W, C], weight [KH, KW, C/groups, O] ("HWIO"), result [N, OH, OW, O], the same sum
    with the axes permuted. No bias: a bias is a broadcast `graph.add`.
    """

    LAYOUTS: ClassVar[tuple[str, ...]] = ("nchw", "nhwc")

    name = "graph.conv2d"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    strides = prop_def(DenseArrayBase[I64], default_value=int_array([1, 1]))
    padding = prop_def(DenseArrayBase[I64], default_value=int_array([0, 0, 0, 0]))
    dilations = prop_def(DenseArrayBase[I64], default_value=int_array([1, 1]))
    groups = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    layout = prop_def(StringAttr, default_value=StringAttr("nchw"))
    result = result_def(TensorType)
    assembly_format = (
        "$input `,` $weight (`strides` `=` $strides^)? (`padding` `=` $padding^)? "
        "(`dilations` `=` $dilations^)? (`groups` `=` $groups^)? (`layout` `=` $layout^)? "
        "attr-dict "
        "`:` functional-type(operands, results)"
    )

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        x, w = (t.get_shape() for t in types)
        if len(x) != 4 or len(w) != 4:
            raise ShapeError(f"conv2d takes rank-4 input and weight, got {list(x)} and {list(w)}")
        nhwc = conv_layout(props) == "nhwc"
        given = list(w)
        if nhwc:  # the same checks on the NCHW / OIHW view of the operands
            x, w = (x[0], x[3], x[1], x[2]), (w[3], w[2], w[0], w[1])
        groups = int_of(props, "groups")
        shapes.check_positive([groups], "groups")
        if x[1] % groups or w[0] % groups:
            raise ShapeError(f"channels {x[1]} and filters {w[0]} must divide by groups={groups}")
        if w[1] != x[1] // groups:
            raise ShapeError(
                f"weight {given} needs {x[1] // groups} input channels per group, has {w[1]}"
            )
        h, wd = window_output(props, x[2:], w[2:])
        out = (x[0], h, wd, w[0]) if nhwc else (x[0], w[0], h, wd)
        return tensor(_same_dtype(types), out)


@irdl_op_definition
class Im2colOp(GraphOp):
    """The patches a channels-last convolution reads, one row per output pixel: input
    [N, H, W, C] to [N*OH*OW, KH*KW*C], zero outside the input, with

        out[(n*OH + y)*OW + x, (i*KW + j)*C + c] =
            in[n, y*sh + i*dh - pad_top, x*sw + j*dw - pad_left, c]

    `kernel` is [KH, KW]; strides, padding ([top, left, bottom, right]) and dilations as
    for conv2d. An NHWC conv2d (groups = 1) is `matmul(im2col(x), w as [KH*KW*C, O])`
    reshaped to [N, OH, OW, O], which is how `conv-to-matmul` hands convolutions to the
    matmul tiling passes."""

    name = "graph.im2col"
    input = operand_def(TensorType)
    kernel = prop_def(DenseArrayBase[I64])
    strides = prop_def(DenseArrayBase[I64], default_value=int_array([1, 1]))
    padding = prop_def(DenseArrayBase[I64], default_value=int_array([0, 0, 0, 0]))
    dilations = prop_def(DenseArrayBase[I64], default_value=int_array([1, 1]))
    result = result_def(TensorType)
    assembly_format = (
        "$input `kernel` `=` $kernel (`strides` `=` $strides^)? (`padding` `=` $padding^)? "
        "(`dilations` `=` $dilations^)? attr-dict `:` type($input) `->` type($result)"
    )

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        x = types[0].get_shape()
        if len(x) != 4:
            raise ShapeError(f"im2col takes a rank-4 NHWC input, got {list(x)}")
        kernel = ints(props, "kernel")
        shapes.check_length(kernel, 2, "kernel")
        shapes.check_positive(kernel, "kernel")
        h, w = window_output(props, x[1:3], kernel)
        return tensor(types[0].element_type, (x[0] * h * w, kernel[0] * kernel[1] * x[3]))


IMPLICIT_ATTR = "irkit.implicit"
"""On a `graph.im2col`: its consumer (the matmul of an implicit-GEMM convolution) reads the
patches in place from the input, through index arithmetic, instead of a materialized
matrix (`conv-to-matmul{implicit=true}` sets it, `fuse-kernels` and the lowering honor it)."""


def window_output(props: Props, size: Sequence[int], kernel: Sequence[int]) -> tuple[int, int]:
    """(OH, OW) of a 2-D sliding window with `props`' strides, padding and dilations, which
    are checked here (conv2d and im2col share them)."""
    strides, padding, dil = (ints(props, k) for k in ("strides", "padding", "dilations"))
    shapes.check_length(strides, 2, "strides")
    shapes.check_length(padding, 4, "padding")
    shapes.check_length(dil, 2, "dilations")
    shapes.check_positive([*strides, *dil], "strides and dilations")
    if min(padding) < 0:
        raise ShapeError(f"padding must be >= 0, got {list(padding)}")
    return (
        shapes.window_output_size(size[0], kernel[0], strides[0], padding[0], padding[2], dil[0]),
        shapes.window_output_size(size[1], kernel[1], strides[1], padding[1], padding[3], dil[1]),
    )


def conv_layout(props: Props) -> str:
    """A conv2d's `layout`, checked: "nchw" or "nhwc"."""
    return layout_of(props, "conv2d", Conv2dOp.LAYOUTS)


def pool_layout(props: Props) -> str:
    """A pooling op's `layout`, checked: "nchw" or "nhwc"."""
    return layout_of(props, "pooling", Pool2dOp.LAYOUTS)


def layout_of(props: Props, what: str, layouts: Sequence[str]) -> str:
    """The `layout` property (default "nchw"), checked against `layouts`."""
    attr = props.get("layout")
    layout = attr.data if isinstance(attr, StringAttr) else "nchw"
    if layout not in layouts:
        what = what.removeprefix("graph.")
        raise ShapeError(f"{what} layout must be one of {', '.join(layouts)}, got {layout!r}")
    return layout


# --- pooling ------------------------------------------------------------------------------


class Pool2dOp(GraphOp, ABC):
    """Sliding-window pooling over the two spatial axes (floor mode), per channel: of an
    NCHW input with `layout = "nchw"` (the default, ONNX's), of an NHWC one with
    `layout = "nhwc"`; `padding` is [top, left, bottom, right]."""

    LAYOUTS: ClassVar[tuple[str, ...]] = ("nchw", "nhwc")
    input = operand_def(TensorType)
    kernel = prop_def(DenseArrayBase[I64])
    strides = prop_def(DenseArrayBase[I64], default_value=int_array([1, 1]))
    padding = prop_def(DenseArrayBase[I64], default_value=int_array([0, 0, 0, 0]))
    dilations = prop_def(DenseArrayBase[I64], default_value=int_array([1, 1]))
    layout = prop_def(StringAttr, default_value=StringAttr("nchw"))
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        x = types[0].get_shape()
        nhwc = layout_of(props, cls.name, cls.LAYOUTS) == "nhwc"
        if len(x) != 4:
            form = "NHWC" if nhwc else "NCHW"
            raise ShapeError(f"{cls.name} takes a rank-4 {form} input, got {list(x)}")
        kernel, strides, pad = ints(props, "kernel"), ints(props, "strides"), ints(props, "padding")
        dil = pool_dilations(props)
        shapes.check_length(dil, 2, "dilations")
        shapes.check_positive(dil, "dilations")
        kernel = tuple(d * (k - 1) + 1 for d, k in zip(dil, kernel, strict=True))  # the span
        shapes.check_length(kernel, 2, "kernel")
        shapes.check_length(strides, 2, "strides")
        shapes.check_length(pad, 4, "padding")
        shapes.check_positive([*kernel, *strides], "kernel and strides")
        if (
            min(pad) < 0
            or pad[0] >= kernel[0]
            or pad[1] >= kernel[1]
            or pad[2] >= kernel[0]
            or pad[3] >= kernel[1]
        ):
            raise ShapeError(
                f"padding {list(pad)} must be >= 0 and smaller than the kernel {list(kernel)}"
            )
        hy, wx = (1, 2) if nhwc else (2, 3)
        h = shapes.window_output_size(x[hy], kernel[0], strides[0], pad[0], pad[2])
        w = shapes.window_output_size(x[wx], kernel[1], strides[1], pad[1], pad[3])
        shape = (x[0], h, w, x[3]) if nhwc else (x[0], x[1], h, w)
        return tensor(types[0].element_type, shape)


@irdl_op_definition
class MaxPool2dOp(Pool2dOp):
    """Maximum over each window, its taps `dilations` apart; padding never wins (it counts
    as -inf)."""

    name = "graph.max_pool2d"
    assembly_format = (
        "$input `kernel` `=` $kernel (`strides` `=` $strides^)? (`padding` `=` $padding^)? "
        "(`dilations` `=` $dilations^)? (`layout` `=` $layout^)? attr-dict "
        "`:` type($input) `->` type($result)"
    )


def pool_dilations(props: Props) -> tuple[int, ...]:
    """A pool's dilations, (1, 1) where the properties leave them at their default."""
    return ints(props, "dilations") if "dilations" in props else (1, 1)


@irdl_op_definition
class AvgPool2dOp(Pool2dOp):
    """Mean over each window's taps (`dilations` apart); padded positions count in the
    divisor only when `count_include_pad` is true."""

    name = "graph.avg_pool2d"
    count_include_pad = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))
    assembly_format = (
        "$input `kernel` `=` $kernel (`strides` `=` $strides^)? (`padding` `=` $padding^)? "
        "(`dilations` `=` $dilations^)? (`count_include_pad` `=` $count_include_pad^)? "
        "(`layout` `=` $layout^)? attr-dict "
        "`:` type($input) `->` type($result)"
    )


@irdl_op_definition
class GlobalAvgPoolOp(GraphOp):
    """Mean over all axes after the first two: [N, C, ...] -> [N, C, 1, ...]."""

    name = "graph.global_avg_pool"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        x = types[0].get_shape()
        if len(x) < 3:
            raise ShapeError(f"global_avg_pool takes rank >= 3 input, got {list(x)}")
        return tensor(types[0].element_type, (x[0], x[1], *([1] * (len(x) - 2))))
