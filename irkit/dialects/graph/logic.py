"""Comparisons, boolean logic and selection: the ops whose values are i1.

Comparisons and `graph.is_nan`/`graph.is_inf` give i1 (boolean) tensors; `graph.not`,
`graph.and`, `graph.or` and `graph.xor` combine them; `graph.where` selects by them. All
broadcast as numpy does. A comparison of floats is IEEE's: every ordered comparison with a
NaN is false, and `not_equal` is not offered (ONNX has none: it writes Not(Equal)).
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import BoolAttr, TensorType, i1
from xdsl.irdl import irdl_op_definition, operand_def, prop_def, result_def

from irkit.dialects import shapes
from irkit.dialects.graph.base import (
    ANY,
    BOOL,
    NUMERIC,
    GraphOp,
    Props,
    _same_dtype,
    bool_of,
    require_kind,
    tensor,
)
from irkit.dialects.graph.elementwise import BinaryOp, UnaryOp


class CompareOp(BinaryOp, ABC):
    """lhs <op> rhs elementwise, broadcast as in numpy; operands share a type, the result
    is i1."""

    KINDS: ClassVar[frozenset[str]] = NUMERIC
    PREDICATE: ClassVar[str] = ""
    """The comparison: "eq", "lt", "le", "gt" or "ge"."""

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        _same_dtype(types)
        return tensor(i1, shapes.broadcast_shapes(*(t.get_shape() for t in types)))


@irdl_op_definition
class EqualOp(CompareOp):
    """lhs == rhs (NaN equals nothing)."""

    name = "graph.equal"
    KINDS: ClassVar[frozenset[str]] = ANY
    PREDICATE: ClassVar[str] = "eq"


@irdl_op_definition
class LessOp(CompareOp):
    """lhs < rhs elementwise (false where either is NaN)."""

    name = "graph.less"
    PREDICATE: ClassVar[str] = "lt"


@irdl_op_definition
class LessEqualOp(CompareOp):
    """lhs <= rhs elementwise (false where either is NaN)."""

    name = "graph.less_equal"
    PREDICATE: ClassVar[str] = "le"


@irdl_op_definition
class GreaterOp(CompareOp):
    """lhs > rhs elementwise (false where either is NaN)."""

    name = "graph.greater"
    PREDICATE: ClassVar[str] = "gt"


@irdl_op_definition
class GreaterEqualOp(CompareOp):
    """lhs >= rhs elementwise (false where either is NaN)."""

    name = "graph.greater_equal"
    PREDICATE: ClassVar[str] = "ge"


class LogicalOp(BinaryOp, ABC):
    """A boolean function of two i1 tensors, broadcast as in numpy."""

    KINDS: ClassVar[frozenset[str]] = frozenset({BOOL})


@irdl_op_definition
class AndOp(LogicalOp):
    """Elementwise lhs and rhs of booleans."""

    name = "graph.and"


@irdl_op_definition
class OrOp(LogicalOp):
    """Elementwise lhs or rhs of booleans."""

    name = "graph.or"


@irdl_op_definition
class XorOp(LogicalOp):
    """lhs xor rhs (lhs != rhs)."""

    name = "graph.xor"


@irdl_op_definition
class NotOp(UnaryOp):
    """Elementwise logical negation of a boolean tensor."""

    name = "graph.not"
    KINDS: ClassVar[frozenset[str]] = frozenset({BOOL})


class FloatTestOp(GraphOp, ABC):
    """A test of each float element; the result is i1 of the operand's shape."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        return tensor(i1, types[0].get_shape())


@irdl_op_definition
class IsNanOp(FloatTestOp):
    """Whether each element is a NaN."""

    name = "graph.is_nan"


@irdl_op_definition
class IsInfOp(FloatTestOp):
    """x is +inf (when `positive`) or -inf (when `negative`); both by default."""

    name = "graph.is_inf"
    positive = prop_def(BoolAttr, default_value=BoolAttr.from_bool(True))
    negative = prop_def(BoolAttr, default_value=BoolAttr.from_bool(True))
    assembly_format = (
        "$input (`positive` `=` $positive^)? (`negative` `=` $negative^)? attr-dict "
        "`:` type($input) `->` type($result)"
    )

    def detects(self) -> tuple[bool, bool]:
        """(positive, negative)."""
        return bool_of(self.properties, "positive"), bool_of(self.properties, "negative")


@irdl_op_definition
class WhereOp(GraphOp):
    """cond ? lhs : rhs elementwise, the three broadcast together as in numpy; `cond` is
    i1, `lhs` and `rhs` share any element type, which the result has."""

    name = "graph.where"
    KINDS: ClassVar[frozenset[str]] = ANY
    cond = operand_def(TensorType)
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$cond `,` $lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    @classmethod
    def check_kinds(cls, types: Sequence[TensorType]) -> None:
        require_kind(cls.name, 0, types[0], frozenset({BOOL}))

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        dtype = _same_dtype(types[1:])
        return tensor(dtype, shapes.broadcast_shapes(*(t.get_shape() for t in types)))
