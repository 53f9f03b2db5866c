"""Elementwise ops: binary with numpy broadcasting, unary, and cast."""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    Float64Type,
    FloatAttr,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    ParsePropInAttrDict,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from irkit.dialects import shapes
from irkit.dialects.graph.base import NUMERIC, GraphOp, Props, _same_dtype, _tensor_types, tensor
from irkit.dialects.shapes import ShapeError

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
    KINDS: ClassVar[frozenset[str]] = NUMERIC


@irdl_op_definition
class SubOp(BinaryOp):
    """Elementwise lhs - rhs, broadcast as in numpy."""

    name = "graph.sub"
    KINDS: ClassVar[frozenset[str]] = NUMERIC


@irdl_op_definition
class MulOp(BinaryOp):
    """Elementwise lhs * rhs, broadcast as in numpy."""

    name = "graph.mul"
    KINDS: ClassVar[frozenset[str]] = NUMERIC


@irdl_op_definition
class DivOp(BinaryOp):
    """lhs / rhs (IEEE division)."""

    name = "graph.div"
    KINDS: ClassVar[frozenset[str]] = NUMERIC


@irdl_op_definition
class MaxOp(BinaryOp):
    """max(lhs, rhs); NaN propagates."""

    name = "graph.max"
    KINDS: ClassVar[frozenset[str]] = NUMERIC


@irdl_op_definition
class MinOp(BinaryOp):
    """min(lhs, rhs); NaN propagates."""

    name = "graph.min"
    KINDS: ClassVar[frozenset[str]] = NUMERIC


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
    KINDS: ClassVar[frozenset[str]] = NUMERIC


@irdl_op_definition
class AbsOp(UnaryOp):
    """Elementwise absolute value |x|."""

    name = "graph.abs"
    KINDS: ClassVar[frozenset[str]] = NUMERIC


@irdl_op_definition
class ReluOp(UnaryOp):
    """Elementwise max(x, 0); NaN propagates."""

    name = "graph.relu"
    KINDS: ClassVar[frozenset[str]] = NUMERIC


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
class SinOp(UnaryOp):
    """Elementwise sine of x (radians)."""

    name = "graph.sin"


@irdl_op_definition
class CosOp(UnaryOp):
    """Elementwise cosine of x (radians)."""

    name = "graph.cos"


@irdl_op_definition
class FloorOp(UnaryOp):
    """The largest integer not above x, elementwise (as a float)."""

    name = "graph.floor"


@irdl_op_definition
class CeilOp(UnaryOp):
    """The smallest integer not below x, elementwise (as a float)."""

    name = "graph.ceil"


@irdl_op_definition
class CastOp(GraphOp):
    """Element type conversion; the shape is unchanged. To a float type: round to nearest
    even. Float to integer: toward zero, saturating at the type's range, NaN to 0 (C's cast
    where it is defined, and defined everywhere). Integer to integer: wraps (two's
    complement). To i1: x != 0 (NaN is true). From i1: 0 or 1."""

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
