"""The graph dialect: tensor-level model operations on builtin tensor types.

Every op has tensor operands and exactly one tensor result, value semantics, and no side
effects. The result type is a function of the operand types and the properties: one
classmethod, `infer`, computes it; the builder (`create_inferred`) uses it to build and the
verifier uses it to check. Floating-point element types only (f16, bf16, f32, f64); all
operands of an op share one element type (except `graph.cast`).

Axes may be written negative (counted from the end, as in numpy); helper accessors return
them normalized.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Mapping, Sequence
from typing import ClassVar, Self

import numpy as np
from xdsl.dialects.builtin import (
    I64,
    BFloat16Type,
    BoolAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    base,
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsTerminator, Pure, SingleBlockImplicitTerminator
from xdsl.utils.exceptions import VerifyException

from irkit.dialects import shapes
from irkit.dialects.shapes import Shape, ShapeError
from irkit.limits import check_extents

FLOAT_TYPES = (Float16Type, BFloat16Type, Float32Type, Float64Type)
Props = Mapping[str, Attribute]


# --- attribute helpers ------------------------------------------------------------------


def int_array(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, [int(v) for v in values])


def ints(props: Props, name: str) -> tuple[int, ...]:
    attr = props[name]
    assert isinstance(attr, DenseArrayBase)
    return tuple(int(v) for v in attr.get_values())


def int_of(props: Props, name: str) -> int:
    attr = props[name]
    assert isinstance(attr, IntegerAttr)
    return int(attr.value.data)


def float_of(props: Props, name: str) -> float:
    attr = props[name]
    assert isinstance(attr, FloatAttr)
    return float(attr.value.data)


def bool_of(props: Props, name: str) -> bool:
    attr = props[name]
    assert isinstance(attr, IntegerAttr)
    return bool(attr.value.data)


def tensor(element_type: Attribute, shape: Sequence[int]) -> TensorType:
    return TensorType(element_type, list(shape))


def element_type_of(value: SSAValue) -> Attribute:
    """The element type of a tensor value."""
    assert isinstance(value.type, TensorType), value.type
    return value.type.element_type


def _tensor_types(types: Sequence[Attribute]) -> list[TensorType]:
    out: list[TensorType] = []
    for i, t in enumerate(types):
        if not isinstance(t, TensorType):
            raise VerifyException(f"operand #{i} must be a tensor, got {t}")
        if not isinstance(t.element_type, FLOAT_TYPES):
            raise VerifyException(
                f"operand #{i} has element type {t.element_type}; "
                "graph ops take f16, bf16, f32 or f64"
            )
        if any(d < 0 for d in t.get_shape()):
            raise VerifyException(f"operand #{i} has a dynamic shape {t}; shapes must be static")
        out.append(t)
    return out


def _same_dtype(types: Sequence[TensorType]) -> Attribute:
    dtypes = {t.element_type for t in types}
    if len(dtypes) > 1:
        shown = ", ".join(str(t.element_type) for t in types)
        raise VerifyException(f"operands must share one element type, got {shown}")
    return types[0].element_type


# --- the base class -----------------------------------------------------------------------


class GraphOp(IRDLOperation, ABC):
    """A graph op: one tensor result, inferred from operand types and properties."""

    traits = traits_def(Pure())

    POSITIVE_OPERANDS: ClassVar[tuple[int, ...]] = ()
    """Operands whose meaningful domain is positive (e.g. a variance): random inputs for
    them are drawn from a positive range so the reference stays finite."""

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        """The result type for these operand types and properties, or a VerifyException."""
        raise NotImplementedError(cls.__name__)

    @classmethod
    def complete_properties(cls, types: Sequence[TensorType], props: Props) -> dict[str, Attribute]:
        """Fill in properties whose defaults depend on operand shapes (used by builders)."""
        return dict(props)

    @classmethod
    def with_defaults(cls, types: Sequence[TensorType], props: Props) -> dict[str, Attribute]:
        """`props` completed with shape-dependent and then static (declared) defaults."""
        full = cls.complete_properties(types, props)
        for name, pdef in cls.get_irdl_definition().properties.items():
            default = getattr(pdef, "default_value", None)
            if name not in full and default is not None:
                full[name] = default
        return full

    @classmethod
    def create_inferred(
        cls, operands: Sequence[SSAValue | Operation], props: Props | None = None
    ) -> Self:
        """Build the op, inferring its result type. Raises VerifyException on bad input."""
        values = [SSAValue.get(o) for o in operands]
        types = _tensor_types([v.type for v in values])
        full = cls.with_defaults(types, props or {})
        missing = [n for n in cls.get_irdl_definition().properties if n not in full]
        if missing:
            raise VerifyException(f"{cls.name} needs the attribute(s) {', '.join(missing)}")
        result = cls.checked_infer(types, full)
        return cls.create(operands=values, properties=full, result_types=[result])

    @classmethod
    def checked_infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        """`infer`, and the result checked to be a shape irkit can hold: every extent
        positive (irkit has no empty tensors) and the element count within int64."""
        result = cls.infer(types, props)
        shape = list(result.get_shape())
        if any(d == 0 for d in shape):
            raise VerifyException(f"the result would be empty (shape {shape}); irkit's tensors have positive extents")  # fmt: skip
        problem = check_extents(shape)
        if problem:
            raise VerifyException(f"the result's {problem}")
        return result

    def verify_(self) -> None:
        types = _tensor_types([o.type for o in self.operands])
        expected = self.checked_infer(types, self.properties)
        actual = self.results[0].type
        if actual != expected:
            raise VerifyException(
                f"result type {actual} does not match the inferred type {expected}"
            )


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


# --- elementwise --------------------------------------------------------------------------


class BinaryOp(GraphOp, ABC):
    """Elementwise binary op with numpy broadcasting; both operands share a dtype."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        dtype = _same_dtype(types)
        return tensor(dtype, shapes.broadcast_shapes(*(t.get_shape() for t in types)))


@irdl_op_definition
class AddOp(BinaryOp):
    """Elementwise lhs + rhs, broadcast as in numpy."""

    name = "graph.add"


@irdl_op_definition
class SubOp(BinaryOp):
    """Elementwise lhs - rhs, broadcast as in numpy."""

    name = "graph.sub"


@irdl_op_definition
class MulOp(BinaryOp):
    """Elementwise lhs * rhs, broadcast as in numpy."""

    name = "graph.mul"


@irdl_op_definition
class DivOp(BinaryOp):
    """lhs / rhs (IEEE division)."""

    name = "graph.div"


@irdl_op_definition
class MaxOp(BinaryOp):
    """max(lhs, rhs); NaN propagates."""

    name = "graph.max"


@irdl_op_definition
class MinOp(BinaryOp):
    """min(lhs, rhs); NaN propagates."""

    name = "graph.min"


@irdl_op_definition
class PowOp(BinaryOp):
    """lhs ** rhs (IEEE pow; a negative base with a non-integer exponent gives NaN)."""

    name = "graph.pow"


class UnaryOp(GraphOp, ABC):
    """Elementwise unary op; the result has the operand's type."""

    T: ClassVar = VarConstraint("T", base(TensorType))
    input = operand_def(T)
    result = result_def(T)
    assembly_format = "$input attr-dict `:` type($result)"

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        return types[0]


@irdl_op_definition
class NegOp(UnaryOp):
    """Elementwise negation, -x (flips the sign of zeros and NaNs too)."""

    name = "graph.neg"


@irdl_op_definition
class AbsOp(UnaryOp):
    """Elementwise absolute value |x|."""

    name = "graph.abs"


@irdl_op_definition
class ReluOp(UnaryOp):
    """Elementwise max(x, 0); NaN propagates."""

    name = "graph.relu"


@irdl_op_definition
class LeakyReluOp(UnaryOp):
    """x if x >= 0 else alpha * x."""

    name = "graph.leaky_relu"
    alpha = prop_def(FloatAttr[Float64Type], default_value=FloatAttr(0.01, Float64Type()))
    assembly_format = "$input (`alpha` `=` $alpha^)? attr-dict `:` type($result)"


@irdl_op_definition
class GeluOp(UnaryOp):
    """Gaussian error linear unit. approximate = "none": x * (1 + erf(x / sqrt(2))) / 2;
    approximate = "tanh": x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) / 2."""

    name = "graph.gelu"
    approximate = prop_def(StringAttr, default_value=StringAttr("none"))
    irdl_options = (ParsePropInAttrDict(),)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        mode = props["approximate"]
        if not isinstance(mode, StringAttr) or mode.data not in ("none", "tanh"):
            raise VerifyException(f'gelu approximate must be "none" or "tanh", got {mode}')
        return types[0]


@irdl_op_definition
class SigmoidOp(UnaryOp):
    """1 / (1 + exp(-x))."""

    name = "graph.sigmoid"


@irdl_op_definition
class TanhOp(UnaryOp):
    """Elementwise hyperbolic tangent."""

    name = "graph.tanh"


@irdl_op_definition
class ExpOp(UnaryOp):
    """Elementwise e**x; overflows to +inf."""

    name = "graph.exp"


@irdl_op_definition
class LogOp(UnaryOp):
    """Natural logarithm; log(0) = -inf, log(x < 0) = NaN."""

    name = "graph.log"
    POSITIVE_OPERANDS: ClassVar[tuple[int, ...]] = (0,)


@irdl_op_definition
class SqrtOp(UnaryOp):
    """sqrt(x); NaN for x < 0."""

    name = "graph.sqrt"
    POSITIVE_OPERANDS: ClassVar[tuple[int, ...]] = (0,)


@irdl_op_definition
class RsqrtOp(UnaryOp):
    """1 / sqrt(x)."""

    name = "graph.rsqrt"
    POSITIVE_OPERANDS: ClassVar[tuple[int, ...]] = (0,)


@irdl_op_definition
class ErfOp(UnaryOp):
    """The Gauss error function."""

    name = "graph.erf"


@irdl_op_definition
class CastOp(GraphOp):
    """Element type conversion with round-to-nearest-even; the shape is unchanged."""

    name = "graph.cast"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        (src,) = _tensor_types([self.input.type])
        (dst,) = _tensor_types([self.result.type])
        if src.get_shape() != dst.get_shape():
            raise ShapeError(f"cast keeps the shape: {src} -> {dst}")

    @classmethod
    def build_to(cls, value: SSAValue | Operation, element_type: Attribute) -> CastOp:
        src = SSAValue.get(value).type
        assert isinstance(src, TensorType)
        dst = tensor(element_type, src.get_shape())
        _tensor_types([dst])
        return cls.create(operands=[SSAValue.get(value)], result_types=[dst])


# --- reductions and normalizations ------------------------------------------------------------


class ReduceOp(GraphOp, ABC):
    """Reduction over `axes`; `keepdims` keeps reduced axes with extent 1."""

    input = operand_def(TensorType)
    axes = prop_def(DenseArrayBase[I64])
    keepdims = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))
    result = result_def(TensorType)
    assembly_format = (
        "$input `axes` `=` $axes (`keepdims` `=` $keepdims^)? attr-dict "
        "`:` type($input) `->` type($result)"
    )

    @classmethod
    def complete_properties(cls, types: Sequence[TensorType], props: Props) -> dict[str, Attribute]:
        full = dict(props)
        full.setdefault("axes", int_array(range(len(types[0].get_shape()))))
        return full

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        shape = types[0].get_shape()
        axes = shapes.normalize_axes(ints(props, "axes"), len(shape))
        if not axes:
            raise ShapeError("a reduction needs at least one axis")
        return tensor(
            types[0].element_type, shapes.reduced_shape(shape, axes, bool_of(props, "keepdims"))
        )

    def normalized_axes(self) -> tuple[int, ...]:
        return shapes.normalize_axes(ints(self.properties, "axes"), len(_shape(self.input)))


@irdl_op_definition
class ReduceSumOp(ReduceOp):
    """Sum over axes."""

    name = "graph.reduce_sum"


@irdl_op_definition
class ReduceMaxOp(ReduceOp):
    """Maximum over axes; NaN propagates."""

    name = "graph.reduce_max"


@irdl_op_definition
class ReduceMeanOp(ReduceOp):
    """Arithmetic mean over axes."""

    name = "graph.reduce_mean"


@irdl_op_definition
class SoftmaxOp(GraphOp):
    """exp(x - max) / sum(exp(x - max)) along `axis` (max-subtracted, so it never overflows)."""

    name = "graph.softmax"
    T: ClassVar = VarConstraint("T", base(TensorType))
    input = operand_def(T)
    axis = prop_def(IntegerAttr[I64], default_value=IntegerAttr(-1, i64))
    result = result_def(T)
    assembly_format = "$input (`axis` `=` $axis^)? attr-dict `:` type($result)"

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        shapes.normalize_axis(int_of(props, "axis"), len(types[0].get_shape()))
        return types[0]


@irdl_op_definition
class LayerNormOp(GraphOp):
    """(x - mean) / sqrt(var + eps) * gamma + beta, with mean and (biased) variance over
    `axes`, which must be the trailing axes; gamma and beta have the normalized shape."""

    name = "graph.layer_norm"
    input = operand_def(TensorType)
    gamma = operand_def(TensorType)
    beta = operand_def(TensorType)
    axes = prop_def(DenseArrayBase[I64], default_value=int_array([-1]))
    eps = prop_def(FloatAttr[Float64Type], default_value=FloatAttr(1e-5, Float64Type()))
    result = result_def(TensorType)
    assembly_format = (
        "$input `,` $gamma `,` $beta (`axes` `=` $axes^)? (`eps` `=` $eps^)? attr-dict "
        "`:` functional-type(operands, results)"
    )

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        shape = types[0].get_shape()
        axes = sorted(shapes.normalize_axes(ints(props, "axes"), len(shape)))
        if not axes or axes != list(range(len(shape) - len(axes), len(shape))):
            raise ShapeError(
                f"layer_norm axes {list(ints(props, 'axes'))} must be the trailing axes"
            )
        normalized = shape[axes[0] :]
        for name, t in zip(("gamma", "beta"), types[1:], strict=True):
            if t.get_shape() != normalized:
                raise ShapeError(
                    f"layer_norm {name} {list(t.get_shape())} must have shape {list(normalized)}"
                )
        if float_of(props, "eps") < 0:
            raise VerifyException("layer_norm eps must be >= 0")
        return tensor(_same_dtype(types), shape)


@irdl_op_definition
class BatchNormOp(GraphOp):
    """Inference batch normalization over channel axis 1:
    (x - mean[c]) / sqrt(var[c] + eps) * scale[c] + bias[c]."""

    name = "graph.batch_norm"
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    bias = operand_def(TensorType)
    mean = operand_def(TensorType)
    var = operand_def(TensorType)
    eps = prop_def(FloatAttr[Float64Type], default_value=FloatAttr(1e-5, Float64Type()))
    result = result_def(TensorType)
    assembly_format = (
        "$input `,` $scale `,` $bias `,` $mean `,` $var (`eps` `=` $eps^)? attr-dict "
        "`:` functional-type(operands, results)"
    )
    POSITIVE_OPERANDS: ClassVar[tuple[int, ...]] = (4,)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        shape = types[0].get_shape()
        if len(shape) < 2:
            raise ShapeError(f"batch_norm input needs a channel axis, got {list(shape)}")
        for name, t in zip(("scale", "bias", "mean", "var"), types[1:], strict=True):
            if t.get_shape() != (shape[1],):
                raise ShapeError(
                    f"batch_norm {name} {list(t.get_shape())} must have shape [{shape[1]}]"
                )
        return tensor(_same_dtype(types), shape)


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
    """Maximum over each window; padding never wins (it counts as -inf)."""

    name = "graph.max_pool2d"
    assembly_format = (
        "$input `kernel` `=` $kernel (`strides` `=` $strides^)? (`padding` `=` $padding^)? "
        "(`layout` `=` $layout^)? attr-dict `:` type($input) `->` type($result)"
    )


@irdl_op_definition
class AvgPool2dOp(Pool2dOp):
    """Mean over each window; padded positions count in the divisor only when
    `count_include_pad` is true."""

    name = "graph.avg_pool2d"
    count_include_pad = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))
    assembly_format = (
        "$input `kernel` `=` $kernel (`strides` `=` $strides^)? (`padding` `=` $padding^)? "
        "(`count_include_pad` `=` $count_include_pad^)? (`layout` `=` $layout^)? attr-dict "
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


# --- layout and data movement -------------------------------------------------------------


@irdl_op_definition
class TransposeOp(GraphOp):
    """result[i_perm[0], ..., ] = input[...]: result axis k is input axis perm[k]."""

    name = "graph.transpose"
    input = operand_def(TensorType)
    perm = prop_def(DenseArrayBase[I64])
    result = result_def(TensorType)
    assembly_format = "$input `perm` `=` $perm attr-dict `:` type($input) `->` type($result)"

    @classmethod
    def complete_properties(cls, types: Sequence[TensorType], props: Props) -> dict[str, Attribute]:
        full = dict(props)
        full.setdefault("perm", int_array(list(reversed(range(len(types[0].get_shape()))))))
        return full

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        x, perm = types[0].get_shape(), ints(props, "perm")
        if sorted(perm) != list(range(len(x))):
            raise ShapeError(f"perm {list(perm)} is not a permutation of the {len(x)} axes")
        return tensor(types[0].element_type, tuple(x[p] for p in perm))


@irdl_op_definition
class ReshapeOp(GraphOp):
    """Row-major reinterpretation with the same number of elements; the result type is
    given, not inferred."""

    name = "graph.reshape"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        src, dst = _tensor_types([self.input.type, self.result.type])
        _same_dtype([src, dst])
        if _numel(src.get_shape()) != _numel(dst.get_shape()):
            raise ShapeError(f"reshape must keep the element count: {src} -> {dst}")

    @classmethod
    def build_to(cls, value: SSAValue | Operation, shape: Sequence[int]) -> ReshapeOp:
        """Build a reshape to `shape`; one entry may be -1 (inferred), as in numpy."""
        src = _tensor_types([SSAValue.get(value).type])[0]
        n = _numel(src.get_shape())
        shape = list(shape)
        if shape.count(-1) > 1 or any(d < -1 for d in shape):
            raise ShapeError(f"reshape target {shape} may hold one -1 and no other negatives")
        if -1 in shape:
            known = _numel([d for d in shape if d != -1])
            if known == 0 or n % known:
                raise ShapeError(f"cannot reshape {list(src.get_shape())} to {shape}")
            shape[shape.index(-1)] = n // known
        if _numel(shape) != n:
            raise ShapeError(f"cannot reshape {list(src.get_shape())} ({n} elements) to {shape}")
        return cls.create(
            operands=[SSAValue.get(value)], result_types=[tensor(src.element_type, shape)]
        )


@irdl_op_definition
class ConcatOp(GraphOp):
    """Concatenation of one or more tensors along `axis`; all other extents agree."""

    name = "graph.concat"
    inputs = var_operand_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    assembly_format = "$inputs `axis` `=` $axis attr-dict `:` functional-type(operands, results)"

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        if not types:
            raise ShapeError("concat needs at least one input")
        first = types[0].get_shape()
        axis = shapes.normalize_axis(int_of(props, "axis"), len(first))
        for t in types[1:]:
            s = t.get_shape()
            if len(s) != len(first) or any(
                a != b for i, (a, b) in enumerate(zip(s, first, strict=True)) if i != axis
            ):
                raise ShapeError(
                    f"concat inputs {list(first)} and {list(s)} differ off axis {axis}"
                )
        total = sum(t.get_shape()[axis] for t in types)
        return tensor(_same_dtype(types), (*first[:axis], total, *first[axis + 1 :]))


@irdl_op_definition
class SliceOp(GraphOp):
    """result[i] = input[starts + i * strides] per axis, up to `limits` (exclusive).
    Fully normalized: one entry per axis, 0 <= start <= limit <= extent, stride >= 1."""

    name = "graph.slice"
    input = operand_def(TensorType)
    starts = prop_def(DenseArrayBase[I64])
    limits = prop_def(DenseArrayBase[I64])
    strides = prop_def(DenseArrayBase[I64])
    result = result_def(TensorType)
    assembly_format = (
        "$input `starts` `=` $starts `limits` `=` $limits `strides` `=` $strides attr-dict "
        "`:` type($input) `->` type($result)"
    )

    @classmethod
    def complete_properties(cls, types: Sequence[TensorType], props: Props) -> dict[str, Attribute]:
        """Builders may omit any of the three and give python-style (negative, clamped) bounds."""
        shape = types[0].get_shape()
        full = dict(props)
        for name, fill in (
            ("starts", [0] * len(shape)),
            ("limits", list(shape)),
            ("strides", [1] * len(shape)),
        ):
            if name not in full:
                full[name] = int_array(fill)
        starts, limits = list(ints(full, "starts")), list(ints(full, "limits"))
        if len(starts) == len(limits) == len(shape):
            clamp = [slice(s, e).indices(d) for s, e, d in zip(starts, limits, shape, strict=True)]
            full["starts"] = int_array([c[0] for c in clamp])
            full["limits"] = int_array([max(c[0], c[1]) for c in clamp])
        return full

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        shape = types[0].get_shape()
        starts, limits, strides = (
            ints(props, "starts"),
            ints(props, "limits"),
            ints(props, "strides"),
        )
        for what, vals in (("starts", starts), ("limits", limits), ("strides", strides)):
            shapes.check_length(vals, len(shape), what)
        shapes.check_positive(strides, "slice strides")
        for s, e, d in zip(starts, limits, shape, strict=True):
            if not 0 <= s <= e <= d:
                raise ShapeError(f"slice [{s}, {e}) is out of bounds for extent {d}")
        out = [-(-(e - s) // st) for s, e, st in zip(starts, limits, strides, strict=True)]
        return tensor(types[0].element_type, out)


@irdl_op_definition
class ConstantOp(GraphOp):
    """A tensor constant; its type is the value's type."""

    name = "graph.constant"
    value = prop_def(DenseIntOrFPElementsAttr)
    result = result_def(TensorType)

    # Hand-written because the result type is the value's type, which the declarative
    # format cannot say: `graph.constant dense<0.5> : tensor<f32>`, like arith.constant.
    @classmethod
    def parse(cls, parser: Parser) -> ConstantOp:
        attrs = parser.parse_optional_attr_dict()
        value = parser.parse_attribute()
        if not isinstance(value, DenseIntOrFPElementsAttr):
            parser.raise_error(f"graph.constant expects a dense elements value, got {value}")
        op = cls.create(
            properties={"value": value}, result_types=[value.get_type()], attributes=attrs
        )
        return op

    def print(self, printer: Printer) -> None:
        if self.attributes:
            printer.print_string(" ")
            printer.print_attr_dict(self.attributes)
        printer.print_string(" ")
        printer.print_attribute(self.value)

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        value = props["value"]
        assert isinstance(value, DenseIntOrFPElementsAttr)
        vtype = value.get_type()
        if not isinstance(vtype, TensorType):
            raise VerifyException(f"graph.constant holds a tensor value, got {vtype}")
        return _tensor_types([vtype])[0]

    @classmethod
    def from_values(
        cls, element_type: Attribute, shape: Sequence[int], values: Sequence[float]
    ) -> ConstantOp:
        from irkit.dtypes import dense_attr

        value = dense_attr(tensor(element_type, shape), np.asarray(values, np.float64))
        return cls.create_inferred([], {"value": value})


# --- kernel regions -----------------------------------------------------------------------


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminates a `graph.kernel` region; its operands are the kernel's results."""

    name = "graph.yield"
    values = var_operand_def(TensorType)
    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(KernelOp)))
    assembly_format = "($values^ `:` type($values))? attr-dict"


@irdl_op_definition
class KernelOp(IRDLOperation):
    """A group of graph ops that becomes one kernel (what fusion produces).

    The region holds graph ops in dataflow order and ends with `graph.yield`; it reads
    values defined above it directly (it is not isolated). Values it yields are the
    kernel's outputs; every other value inside stays inside the kernel, computed inline or
    kept in scratch memory, as the lowering decides. A graph op outside any kernel region
    is a kernel of its own."""

    name = "graph.kernel"
    outputs = var_result_def(TensorType)
    body = region_def("single_block")
    traits = traits_def(SingleBlockImplicitTerminator(YieldOp))
    assembly_format = "attr-dict-with-keyword `:` type($outputs) $body"

    def verify_(self) -> None:
        block = self.body.block
        last = block.last_op
        if not isinstance(last, YieldOp):
            raise VerifyException("graph.kernel must end with graph.yield")
        if [v.type for v in last.values] != [r.type for r in self.outputs]:
            raise VerifyException("graph.yield types must match the graph.kernel result types")
        for op in block.ops:
            if not isinstance(op, GraphOp | YieldOp):
                raise VerifyException(f"graph.kernel may hold graph ops only, found {op.name}")


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _shape(value: SSAValue) -> Shape:
    t = value.type
    assert isinstance(t, TensorType)
    return t.get_shape()


Graph = Dialect(
    "graph",
    [
        MatmulOp, BatchMatmulOp, Conv2dOp, Im2colOp,
        AddOp, SubOp, MulOp, DivOp, MaxOp, MinOp, PowOp,
        NegOp, AbsOp, ReluOp, LeakyReluOp, GeluOp, SigmoidOp, TanhOp, ExpOp, LogOp, SqrtOp,
        RsqrtOp, ErfOp, CastOp,
        ReduceSumOp, ReduceMaxOp, ReduceMeanOp, SoftmaxOp, LayerNormOp, BatchNormOp,
        MaxPool2dOp, AvgPool2dOp, GlobalAvgPoolOp,
        TransposeOp, ReshapeOp, ConcatOp, SliceOp, ConstantOp,
        KernelOp, YieldOp,
    ],
    [],
)  # fmt: skip
