"""Reductions and normalizations."""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    BoolAttr,
    DenseArrayBase,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute
from xdsl.irdl import (
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from irkit.dialects import shapes
from irkit.dialects.graph.base import (
    NUMERIC,
    GraphOp,
    Props,
    _same_dtype,
    _shape,
    bool_of,
    float_of,
    int_array,
    int_of,
    ints,
    tensor,
)
from irkit.dialects.shapes import ShapeError

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
    KINDS: ClassVar[frozenset[str]] = NUMERIC


@irdl_op_definition
class ReduceMaxOp(ReduceOp):
    """Maximum over axes; NaN propagates."""

    name = "graph.reduce_max"
    KINDS: ClassVar[frozenset[str]] = NUMERIC


@irdl_op_definition
class ReduceMinOp(ReduceOp):
    """Minimum over axes; NaN propagates."""

    name = "graph.reduce_min"
    KINDS: ClassVar[frozenset[str]] = NUMERIC


@irdl_op_definition
class ReduceProdOp(ReduceOp):
    """Product over axes (integers wrap)."""

    name = "graph.reduce_prod"
    KINDS: ClassVar[frozenset[str]] = NUMERIC


@irdl_op_definition
class ReduceMeanOp(ReduceOp):
    """Arithmetic mean over axes."""

    name = "graph.reduce_mean"


class ArgExtremumOp(GraphOp, ABC):
    """The index (i64) of the extreme element along `axis`: the first one, or the last
    with `select_last_index`; a NaN counts as the extreme (numpy's rule)."""

    KINDS: ClassVar[frozenset[str]] = NUMERIC
    input = operand_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    keepdims = prop_def(BoolAttr, default_value=BoolAttr.from_bool(True))
    select_last_index = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))
    result = result_def(TensorType)
    assembly_format = (
        "$input `axis` `=` $axis (`keepdims` `=` $keepdims^)? "
        "(`select_last_index` `=` $select_last_index^)? attr-dict `:` type($input) `->` type($result)"
    )

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        shape = types[0].get_shape()
        if not shape:
            raise ShapeError(f"{cls.name} needs an input of rank >= 1")
        axis = shapes.normalize_axis(int_of(props, "axis"), len(shape))
        return tensor(i64, shapes.reduced_shape(shape, (axis,), bool_of(props, "keepdims")))

    def normalized_axis(self) -> int:
        return shapes.normalize_axis(int_of(self.properties, "axis"), len(_shape(self.input)))

    def last(self) -> bool:
        return bool_of(self.properties, "select_last_index")


@irdl_op_definition
class ArgMaxOp(ArgExtremumOp):
    """The index of the greatest element along the axis (see ArgExtremumOp)."""

    name = "graph.argmax"


@irdl_op_definition
class ArgMinOp(ArgExtremumOp):
    """The index of the least element along the axis (see ArgExtremumOp)."""

    name = "graph.argmin"


@irdl_op_definition
class CumSumOp(GraphOp):
    """Running sums along `axis` (ONNX CumSum): out[..., i, ...] = sum of x[..., j, ...]
    over j <= i (j < i when `exclusive`; j >= i, or j > i, when `reverse`)."""

    name = "graph.cumsum"
    KINDS: ClassVar[frozenset[str]] = NUMERIC
    input = operand_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    exclusive = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))
    reverse = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))
    result = result_def(TensorType)
    assembly_format = (
        "$input `axis` `=` $axis (`exclusive` `=` $exclusive^)? (`reverse` `=` $reverse^)? "
        "attr-dict `:` type($input) `->` type($result)"
    )

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        shape = types[0].get_shape()
        if not shape:
            raise ShapeError("cumsum needs an input of rank >= 1")
        shapes.normalize_axis(int_of(props, "axis"), len(shape))
        return types[0]

    def normalized_axis(self) -> int:
        return shapes.normalize_axis(int_of(self.properties, "axis"), len(_shape(self.input)))

    def flags(self) -> tuple[bool, bool]:
        """(exclusive, reverse)."""
        return bool_of(self.properties, "exclusive"), bool_of(self.properties, "reverse")


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
