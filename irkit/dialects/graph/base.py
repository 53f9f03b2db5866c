"""Element types, attribute helpers and `GraphOp`, the base of every graph op."""

from __future__ import annotations

from abc import ABC
from collections.abc import Mapping, Sequence
from typing import ClassVar, Self

from xdsl.dialects.builtin import (
    BFloat16Type,
    DenseArrayBase,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    Signedness,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    traits_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from irkit.dialects.shapes import Shape
from irkit.dtypes import FP8_TYPES
from irkit.limits import check_extents

FLOAT_TYPES = (Float16Type, BFloat16Type, Float32Type, Float64Type)
INTEGER_WIDTHS = (1, 32, 64)
"""Integer element types graph values may have: i1 (booleans), i32 and i64."""
Props = Mapping[str, Attribute]

FLOAT, INT, BOOL, FP8 = "float", "int", "bool", "fp8"
NUMERIC = frozenset({FLOAT, INT})
ANY = frozenset({FLOAT, INT, BOOL})


def kind_of(element_type: Attribute) -> str:
    """ "float", "int" (i32, i64), "bool" (i1) or "fp8" (the 8-bit float storage types,
    which only `cast` and `scaled_matmul` take)."""
    if isinstance(element_type, IntegerType):
        return BOOL if element_type.width.data == 1 else INT
    if isinstance(element_type, FP8_TYPES):
        return FP8
    return FLOAT


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
        e = t.element_type
        if not isinstance(e, FLOAT_TYPES + FP8_TYPES) and not (
            isinstance(e, IntegerType)
            and e.width.data in INTEGER_WIDTHS
            and e.signedness.data == Signedness.SIGNLESS
        ):
            raise VerifyException(
                f"operand #{i} has element type {e}; "
                "graph values are f16, bf16, f32, f64, i64, i32, i1, f8e4m3 or f8e5m2"
            )
        if any(d < 0 for d in t.get_shape()):
            raise VerifyException(f"operand #{i} has a dynamic shape {t}; shapes must be static")
        out.append(t)
    return out


def require_kind(op_name: str, index: int, t: TensorType, kinds: frozenset[str]) -> None:
    kind = kind_of(t.element_type)
    if kind not in kinds:
        wanted = " or ".join(sorted(kinds))
        hint = "; an 8-bit float is a storage type: cast it to a wider float first" if kind == FP8 else ""  # fmt: skip
        raise VerifyException(
            f"operand #{index} is {t.element_type} ({kind}); {op_name} takes {wanted} values{hint}"
        )


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

    KINDS: ClassVar[frozenset[str]] = frozenset({FLOAT})
    """The element kinds ("float", "int", "bool") the op's operands may have; an op whose
    operands differ in kind (a select's condition, a gather's indices) overrides
    `check_kinds`."""

    POSITIVE_OPERANDS: ClassVar[tuple[int, ...]] = ()
    """Operands whose meaningful domain is positive (e.g. a variance): random inputs for
    them are drawn from a positive range so the reference stays finite."""

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        """The result type for these operand types and properties, or a VerifyException."""
        raise NotImplementedError(cls.__name__)

    @classmethod
    def check_kinds(cls, types: Sequence[TensorType]) -> None:
        """Refuse operands of an element kind the op is not defined on."""
        for i, t in enumerate(types):
            require_kind(cls.name, i, t, cls.KINDS)

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
        cls.check_kinds(types)
        result = cls.infer(types, props)
        shape = list(result.get_shape())
        if any(d == 0 for d in shape):
            raise VerifyException(
                f"the result would be empty (shape {shape}); irkit's tensors have positive extents"
            )
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


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _shape(value: SSAValue) -> Shape:
    t = value.type
    assert isinstance(t, TensorType)
    return t.get_shape()
