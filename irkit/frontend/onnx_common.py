"""What the ONNX converters share: the element types irkit imports and node helpers."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import onnx
from onnx import TensorProto, helper
from xdsl.ir import SSAValue

from irkit.dialects import graph as g
from irkit.ir import element_type_of, shape_of

if TYPE_CHECKING:  # the importer calls the converters; they only need its type
    from irkit.frontend.onnx import OnnxImporter

ONNX_DTYPES: dict[int, str] = {  # element types irkit imports
    TensorProto.FLOAT: "f32",
    TensorProto.DOUBLE: "f64",
    TensorProto.FLOAT16: "f16",
    TensorProto.BFLOAT16: "bf16",
    TensorProto.INT64: "i64",
    TensorProto.INT32: "i32",
    TensorProto.BOOL: "i1",
    TensorProto.FLOAT8E4M3FN: "f8e4m3",  # 8-bit storage types: Cast and irkit's scaled_matmul
    TensorProto.FLOAT8E5M2: "f8e5m2",
}

Converter = Callable[["OnnxImporter", onnx.NodeProto], list[SSAValue]]


def attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def inputs(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
    return [im.tensor(n) for n in node.input if n]


def rank(v: SSAValue) -> int:
    return len(shape_of(v))


def shape(v: SSAValue) -> tuple[int, ...]:
    return tuple(shape_of(v))


def like(im: OnnxImporter, v: SSAValue, like: SSAValue) -> SSAValue:
    """`v` in `like`'s element type (Pow's exponent may be an integer constant; a literal 0
    beside an i64 tensor)."""
    if element_type_of(v) == element_type_of(like):
        return v
    return im.add_op(g.CastOp.build_to(v, element_type_of(like)))


def binary(cls: type[g.GraphOp]) -> Converter:
    def convert(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
        a, b = inputs(im, node)
        return [im.op(cls, a, like(im, b, a))]

    return convert


def unary(cls: type[g.GraphOp], **fixed) -> Converter:
    def convert(im: OnnxImporter, node: onnx.NodeProto) -> list[SSAValue]:
        (x,) = inputs(im, node)[:1]
        return [im.op(cls, x, **fixed)]

    return convert
