"""Graph dialect: result-type inference, verifier failures, and generic/custom round trips."""

from __future__ import annotations

import re

import numpy as np
import pytest
from xdsl.dialects import test as xdsl_test
from xdsl.dialects.builtin import (
    BoolAttr,
    IntegerAttr,
    IntegerType,
    TensorType,
    bf16,
    f16,
    f32,
    i1,
    i32,
    i64,
)
from xdsl.utils.exceptions import VerifyException

from irkit.dialects import graph as g
from irkit.frontend.mlir import parse_mlir
from irkit.ir import to_text


def value(shape: list[int], dtype=f32):
    return xdsl_test.TestOp.create(result_types=[TensorType(dtype, shape)]).results[0]


def shape_of(op) -> tuple[int, ...]:
    return op.results[0].type.get_shape()


@pytest.mark.parametrize(
    "op_class, shapes, props, expected",
    [
        (g.MatmulOp, [[4, 8], [8, 3]], {}, (4, 3)),
        (g.BatchMatmulOp, [[2, 1, 4, 8], [3, 8, 5]], {}, (2, 3, 4, 5)),
        (g.AddOp, [[4, 1, 8], [3, 1]], {}, (4, 3, 8)),
        (g.PowOp, [[], [5]], {}, (5,)),
        (g.ReduceSumOp, [[4, 8, 2]], {"axes": g.int_array([0, -1])}, (8,)),
        (g.ReduceMaxOp, [[4, 8, 2]], {"axes": g.int_array([1]), "keepdims": BoolAttr.from_bool(True)}, (4, 1, 2)),
        (g.ReduceMeanOp, [[4, 8]], {}, ()),  # axes default: all of them
        (g.Conv2dOp, [[1, 4, 9, 9], [6, 2, 3, 3]], {"strides": g.int_array([2, 2]), "padding": g.int_array([1, 0, 1, 0]), "dilations": g.int_array([1, 2]), "groups": IntegerAttr(2, i64)}, (1, 6, 5, 3)),
        (g.MaxPool2dOp, [[2, 3, 7, 7]], {"kernel": g.int_array([3, 3]), "strides": g.int_array([2, 2])}, (2, 3, 3, 3)),
        (g.AvgPool2dOp, [[2, 3, 8, 8]], {"kernel": g.int_array([2, 2]), "strides": g.int_array([2, 2]), "padding": g.int_array([1, 1, 1, 1])}, (2, 3, 5, 5)),
        (g.GlobalAvgPoolOp, [[2, 3, 7, 5]], {}, (2, 3, 1, 1)),
        (g.TransposeOp, [[2, 3, 4]], {"perm": g.int_array([2, 0, 1])}, (4, 2, 3)),
        (g.TransposeOp, [[2, 3]], {}, (3, 2)),  # default: reverse the axes
        (g.ConcatOp, [[2, 3], [2, 5]], {"axis": IntegerAttr(-1, i64)}, (2, 8)),
        (g.SliceOp, [[10, 6]], {"starts": g.int_array([-3, 1]), "strides": g.int_array([2, 1])}, (2, 5)),
        (g.LayerNormOp, [[2, 3, 4], [3, 4], [3, 4]], {"axes": g.int_array([-2, -1])}, (2, 3, 4)),
        (g.BatchNormOp, [[2, 3, 4, 4], [3], [3], [3], [3]], {}, (2, 3, 4, 4)),
        (g.SoftmaxOp, [[2, 3]], {}, (2, 3)),
    ],
)  # fmt: skip
def test_inference(op_class, shapes, props, expected) -> None:
    op = op_class.create_inferred([value(s) for s in shapes], props)
    op.verify()
    assert shape_of(op) == expected


@pytest.mark.parametrize(
    "op_class, shapes, props, message",
    [
        (g.MatmulOp, [[4, 8], [7, 3]], {}, "contraction mismatch"),
        (g.MatmulOp, [[2, 4, 8], [8, 3]], {}, "rank-2"),
        (g.AddOp, [[4, 3], [4]], {}, "do not broadcast"),
        (g.ReduceSumOp, [[4, 8]], {"axes": g.int_array([2])}, "out of range"),
        (g.ReduceSumOp, [[4, 8]], {"axes": g.int_array([1, -1])}, "repeat an axis"),
        (g.Conv2dOp, [[1, 4, 9, 9], [6, 3, 3, 3]], {}, "input channels per group"),
        (g.Conv2dOp, [[1, 3, 2, 2], [6, 3, 3, 3]], {}, "does not fit"),
        (g.LayerNormOp, [[2, 3, 4], [3], [3]], {"axes": g.int_array([1])}, "trailing axes"),
        (g.BatchNormOp, [[2, 3, 4, 4], [3], [3], [4], [3]], {}, "mean [4] must have shape [3]"),
        (g.ConcatOp, [[2, 3], [3, 3]], {"axis": IntegerAttr(1, i64)}, "differ off axis"),
        (g.SliceOp, [[4]], {"strides": g.int_array([0])}, "must be positive"),
        (g.TransposeOp, [[2, 3]], {"perm": g.int_array([0, 2])}, "not a permutation"),
        (g.MaxPool2dOp, [[2, 3, 7]], {"kernel": g.int_array([2, 2])}, "rank-4"),
        (g.SoftmaxOp, [[2, 3]], {"axis": IntegerAttr(2, i64)}, "out of range"),
    ],
)  # fmt: skip
def test_inference_errors(op_class, shapes, props, message) -> None:
    with pytest.raises(VerifyException, match=re.escape(message)):
        op_class.create_inferred([value(s) for s in shapes], props)


def test_mixed_dtypes_rejected() -> None:
    with pytest.raises(VerifyException, match="share one element type"):
        g.AddOp.create_inferred([value([4], f32), value([4], f16)])


def test_element_kinds_checked() -> None:
    """Integers are values of the ops defined on them (exact arithmetic), and refused by
    the ones that are not (a transcendental, a softmax); other integer widths not at all."""
    g.ReluOp.create_inferred([value([4], i32)]).verify()
    with pytest.raises(VerifyException, match=r"operand #0 is i32 \(int\); graph.exp takes float"):
        g.ExpOp.create_inferred([value([4], i32)])
    with pytest.raises(VerifyException, match="operand #0 is i1 .bool.; graph.add"):
        g.AddOp.create_inferred([value([4], i1), value([4], i1)])
    with pytest.raises(VerifyException, match="element type i16"):
        g.ReluOp.create_inferred([value([4], IntegerType(16))])
    with pytest.raises(VerifyException, match="operand #1 is f32 .float.; graph.gather"):
        g.GatherOp.create_inferred([value([4]), value([2])], {"axis": IntegerAttr(0, i64)})
    with pytest.raises(VerifyException, match="operand #0 is f32 .float.; graph.where"):
        g.WhereOp.create_inferred([value([4]), value([4]), value([4])])


def test_missing_required_property() -> None:
    with pytest.raises(VerifyException, match="needs the attribute"):
        g.ConcatOp.create_inferred([value([4]), value([4])])


def test_reshape_and_cast_builders() -> None:
    r = g.ReshapeOp.build_to(value([4, 6]), [3, -1])
    assert shape_of(r) == (3, 8)
    with pytest.raises(VerifyException, match="cannot reshape"):
        g.ReshapeOp.build_to(value([4, 6]), [5, -1])
    c = g.CastOp.build_to(value([4, 6]), bf16)
    c.verify()
    assert c.result.type.element_type == bf16


def test_verifier_rejects_a_wrong_declared_result() -> None:
    op = g.AddOp.create(operands=[value([4]), value([4])], result_types=[TensorType(f32, [5])])
    with pytest.raises(VerifyException, match="does not match the inferred type"):
        op.verify()


def test_every_op_documented_and_named() -> None:
    for op in g.Graph.operations:
        assert op.__doc__ and len(op.__doc__.strip()) > 10, op.name
        assert op.name.startswith("graph.")


def test_generic_and_custom_forms_round_trip(example) -> None:
    from irkit.frontend import load

    module = load(example)
    custom = to_text(module)
    generic = to_text(module, generic=True)
    assert to_text(parse_mlir(custom, "custom.mlir")) == custom
    assert to_text(parse_mlir(generic, "generic.mlir")) == custom


@pytest.mark.parametrize("element", ["f16", "f32", "f64", "i32"])
def test_dense_values_read_and_written_as_xdsl_does(element: str) -> None:
    """irkit reads and writes dense constants through numpy's bytes (xDSL's element-by-element
    lists took most of a minute on vgg19's weights): the same attribute and values as
    `from_list`/`get_values`, splats, -0.0, inf and NaN included."""
    from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType, i32

    from irkit.dtypes import DTYPES, dense_array, dense_attr

    t = TensorType(i32 if element == "i32" else DTYPES[element], [2, 3])
    floats = [0.5, -0.0, float("inf"), -2.25, 1e-3, 7.0]
    values = [1, -2, 3, 0, 5, -6] if element == "i32" else floats
    for given in (values, values[:1]):  # and a splat
        ours, theirs = dense_attr(t, given), DenseIntOrFPElementsAttr.from_list(t, given)
        assert ours == theirs
        assert dense_array(ours).tolist() == list(theirs.get_values())
    if element != "i32":
        nan = dense_array(dense_attr(t, [float("nan")] * 6))
        assert np.isnan(nan).all() and nan.size == 6
