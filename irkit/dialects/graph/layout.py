"""Layout and data movement: transpose, reshape, concat, slice, broadcast_to, gather,
constant."""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from irkit.dialects import shapes
from irkit.dialects.graph.base import (
    ANY,
    FP8,
    INT,
    GraphOp,
    Props,
    _numel,
    _same_dtype,
    _shape,
    _tensor_types,
    element_type_of,
    int_array,
    int_of,
    ints,
    require_kind,
    tensor,
)
from irkit.dialects.shapes import ShapeError
from irkit.dtypes import is_integer

# --- layout and data movement -------------------------------------------------------------


MOVEMENT = ANY | {FP8}
"""What the data-movement ops take: any element type, 8-bit floats included (their bytes
moved as they are; a quantized export's transposes and reshapes reach them)."""


@irdl_op_definition
class TransposeOp(GraphOp):
    """result[i_perm[0], ..., ] = input[...]: result axis k is input axis perm[k]."""

    name = "graph.transpose"
    KINDS: ClassVar[frozenset[str]] = MOVEMENT
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
    given, not inferred. Of any element type, 8-bit floats included (the same bytes)."""

    name = "graph.reshape"
    KINDS: ClassVar[frozenset[str]] = MOVEMENT
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
    KINDS: ClassVar[frozenset[str]] = MOVEMENT
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
    KINDS: ClassVar[frozenset[str]] = MOVEMENT
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
class BroadcastToOp(GraphOp):
    """The input broadcast to `shape` as numpy's `broadcast_to` does (axes aligned from
    the right; each input extent 1 or equal to the target's)."""

    name = "graph.broadcast_to"
    KINDS: ClassVar[frozenset[str]] = MOVEMENT
    input = operand_def(TensorType)
    shape = prop_def(DenseArrayBase[I64])
    result = result_def(TensorType)
    assembly_format = "$input `shape` `=` $shape attr-dict `:` type($input) `->` type($result)"

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        src, target = types[0].get_shape(), ints(props, "shape")
        if len(target) < len(src) or shapes.broadcast_shapes(src, target) != tuple(target):
            raise ShapeError(f"cannot broadcast {list(src)} to {list(target)}")
        return tensor(types[0].element_type, target)


class IndexingOp(GraphOp, ABC):
    """An op reading `data` at positions `indices` (i32 or i64) name along `axis`."""

    KINDS: ClassVar[frozenset[str]] = ANY
    data = operand_def(TensorType)
    indices = operand_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    assembly_format = (
        "$data `,` $indices `axis` `=` $axis attr-dict `:` functional-type(operands, results)"
    )

    @classmethod
    def check_kinds(cls, types: Sequence[TensorType]) -> None:
        require_kind(cls.name, 1, types[1], frozenset({INT}))

    def normalized_axis(self) -> int:
        return shapes.normalize_axis(int_of(self.properties, "axis"), len(_shape(self.data)))


@irdl_op_definition
class GatherOp(IndexingOp):
    """out[a..., i..., b...] = data[a..., indices[i...], b...] along `axis` (ONNX Gather,
    numpy's take): the result's shape is data's with the axis replaced by indices' shape.
    Indices are i32 or i64; a negative index counts from the end; one outside
    [-extent, extent) is an error where the values are known (the reference, constant
    folding), and never reads outside the tensor in generated code."""

    name = "graph.gather"

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        data, indices = types[0].get_shape(), types[1].get_shape()
        if not data:
            raise ShapeError("gather needs data of rank >= 1")
        axis = shapes.normalize_axis(int_of(props, "axis"), len(data))
        return tensor(types[0].element_type, (*data[:axis], *indices, *data[axis + 1 :]))


@irdl_op_definition
class GatherElementsOp(IndexingOp):
    """out[i...] = data[i... with the axis coordinate replaced by indices[i...]] (ONNX
    GatherElements, numpy's take_along_axis): indices have data's rank and the result their
    shape. Indices as `graph.gather`'s: i32 or i64, negative from the end, out of range an
    error where known and never a read outside the tensor."""

    name = "graph.gather_elements"

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        data, indices = types[0].get_shape(), types[1].get_shape()
        if len(data) != len(indices) or not data:
            raise ShapeError(
                f"gather_elements takes data and indices of one rank >= 1, got {list(data)} and {list(indices)}"
            )
        axis = shapes.normalize_axis(int_of(props, "axis"), len(data))
        for k, (d, n) in enumerate(zip(data, indices, strict=True)):
            if k != axis and n > d:
                raise ShapeError(f"indices {list(indices)} exceed data {list(data)} off the axis")
        return tensor(types[0].element_type, indices)


@irdl_op_definition
class ScatterNdOp(GraphOp):
    """data with slices replaced (ONNX ScatterND): indices [..., k] name entries of data's
    first k axes, each replaced by (`reduction` "none") or combined with ("add", "mul",
    "max", "min") the matching slice of updates (indices.shape[:-1] + data.shape[k:]), in
    the order of the indices (where two name one entry, the last replacement wins); a
    negative index counts from the end; an index out of range changes nothing."""

    REDUCTIONS: ClassVar[tuple[str, ...]] = ("none", "add", "mul", "max", "min")

    name = "graph.scatter_nd"
    KINDS: ClassVar[frozenset[str]] = ANY
    data = operand_def(TensorType)
    indices = operand_def(TensorType)
    updates = operand_def(TensorType)
    reduction = prop_def(StringAttr, default_value=StringAttr("none"))
    result = result_def(TensorType)
    assembly_format = (
        "$data `,` $indices `,` $updates (`reduction` `=` $reduction^)? attr-dict "
        "`:` functional-type(operands, results)"
    )

    @classmethod
    def check_kinds(cls, types: Sequence[TensorType]) -> None:
        require_kind(cls.name, 1, types[1], frozenset({INT}))

    @classmethod
    def infer(cls, types: Sequence[TensorType], props: Props) -> TensorType:
        data, indices, updates = (t.get_shape() for t in types)
        _same_dtype([types[0], types[2]])
        if not indices or not 1 <= indices[-1] <= len(data):
            raise ShapeError(
                f"scatter_nd indices {list(indices)} must end in k, 1 <= k <= {len(data)}"
            )
        mode = props.get("reduction", StringAttr("none"))
        if not isinstance(mode, StringAttr) or mode.data not in cls.REDUCTIONS:
            raise VerifyException(
                f"scatter_nd reduction must be one of {', '.join(cls.REDUCTIONS)}"
            )
        expected = (*indices[:-1], *data[indices[-1] :])
        if tuple(updates) != expected:
            raise ShapeError(f"scatter_nd updates {list(updates)} must have shape {list(expected)}")
        return types[0]


@irdl_op_definition
class ConstantOp(GraphOp):
    """A tensor constant; its type is the value's type."""

    name = "graph.constant"
    KINDS: ClassVar[frozenset[str]] = ANY
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


_INDEX_CARRIERS = (ReshapeOp, TransposeOp, SliceOp, BroadcastToOp, ConcatOp)


def index_extents(value: SSAValue, scatters: bool = False) -> list[int]:
    """The extents of the axes `value` indexes as gather indices, directly or through
    views, integer casts and concatenations (where the run time must keep it in range);
    with `scatters`, a scatter_nd's too (the least of the axes its tuples name: where random
    indices are drawn, not a bound the run time holds them to)."""
    from irkit.dialects.graph.elementwise import CastOp

    found: list[int] = []
    for use in value.uses:
        op = use.operation
        if isinstance(op, GatherOp | GatherElementsOp) and use.index == 1:
            found.append(_shape(op.data)[op.normalized_axis()])
        elif scatters and isinstance(op, ScatterNdOp) and use.index == 1:
            found.append(min(_shape(op.data)[: _shape(op.indices)[-1]]))
        elif isinstance(op, _INDEX_CARRIERS + (CastOp,)) and is_integer(
            element_type_of(op.results[0])
        ):
            found += index_extents(op.results[0], scatters)
    return found
