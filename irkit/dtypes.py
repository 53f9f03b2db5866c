"""Element types irkit handles, by their names in the .graph language and in MLIR.

Floats (f16, bf16, f32, f64) and, as run-time values, signless integers (i32, i64) and
booleans (i1, one byte a value in memory, as numpy's bool). Integer arithmetic is exact
(two's complement, wrapping as C and LLVM wrap); the reference computes integers in int64.

The 8-bit floats f8e4m3 (OCP's E4M3FN: 4 exponent bits, 3 mantissa bits, no infinities, max
448) and f8e5m2 (E5M2: max 57344) are storage types: a value of one is cast from or to a
wider float (`cast`), reshaped, or an operand of `scaled_matmul`, and takes part in no
other arithmetic. A cast to one rounds to nearest even and saturates to its largest finite value
(NaN stays NaN), as the GPU's `cvt.rn.satfinite` and ONNX's `Cast{saturate=1}` do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float8E4M3FNType,
    Float8E5M2Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute

DTYPES: dict[str, Attribute] = {
    "f16": Float16Type(),
    "bf16": BFloat16Type(),
    "f32": Float32Type(),
    "f64": Float64Type(),
    "i32": i32,
    "i64": i64,
    "i1": i1,
    "f8e4m3": Float8E4M3FNType(),
    "f8e5m2": Float8E5M2Type(),
}

NUMPY: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "i1": np.dtype(np.bool_),
    "f8e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8e5m2": np.dtype(ml_dtypes.float8_e5m2),
}

FLOAT_NAMES = ("f16", "bf16", "f32", "f64")
FP8_NAMES = ("f8e4m3", "f8e5m2")
FP8_TYPES = (Float8E4M3FNType, Float8E5M2Type)


class Fp8Format(NamedTuple):
    """An 8-bit float's layout, as the backends' conversions take it."""

    mantissa: int  # mantissa bits (the exponent has the other 7 - mantissa)
    bias: int  # exponent bias
    largest: float  # the largest finite value: where a cast to the type saturates
    nan: int  # the byte a cast of NaN gives


FP8_FORMATS = {"f8e4m3": Fp8Format(3, 7, 448.0, 0x7F), "f8e5m2": Fp8Format(2, 15, 57344.0, 0x7E)}
FP8_MAX = {name: f.largest for name, f in FP8_FORMATS.items()}


def is_fp8(element_type: Attribute) -> bool:
    """An 8-bit float storage type (f8e4m3, f8e5m2)."""
    return isinstance(element_type, FP8_TYPES)


def to_fp8(values: np.ndarray, name: str) -> np.ndarray:
    """`values` cast to 8-bit float `name`: rounded to nearest even, saturated to the
    largest finite value, NaN kept (ml_dtypes alone would make an overflow NaN)."""
    wide = np.asarray(values, dtype=np.float64)
    limit = FP8_MAX[name]
    return np.clip(wide, -limit, limit).astype(NUMPY[name])


INTEGER_NAMES = ("i32", "i64", "i1")


def dtype_name(element_type: Attribute) -> str:
    """'f32' for Float32Type(), and so on; KeyError for types irkit does not handle."""
    for name, t in DTYPES.items():
        if t == element_type:
            return name
    raise KeyError(str(element_type))


BYTES = IntegerType(8)
"""The element type of raw bytes: the driver's arena (`share-buffers`), never a tensor's."""


def numpy_dtype(element_type: Attribute) -> np.dtype:
    if element_type == BYTES:
        return np.dtype(np.uint8)
    return NUMPY[dtype_name(element_type)]


FLOAT_TYPES = (Float16Type, BFloat16Type, Float32Type, Float64Type)


def is_integer(element_type: Attribute) -> bool:
    """An integer or boolean element type (i1, i32, i64)."""
    return isinstance(element_type, IntegerType)


def is_bool(element_type: Attribute) -> bool:
    return isinstance(element_type, IntegerType) and element_type.width.data == 1


def reference_dtype(element_type: Attribute) -> np.dtype:
    """What the reference computes a value of this type in: float64 for floats (far finer
    than any backend's rounding), int64 for integers (exact), bool for i1."""
    if is_bool(element_type):
        return np.dtype(np.bool_)
    return np.dtype(np.int64) if is_integer(element_type) else np.dtype(np.float64)


def dense_array(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """A dense elements attribute's values as a flat numpy array, read straight from its
    bytes for floats (xDSL's `get_values` unpacks element by element into Python
    floats: most of a minute for vgg19's weights)."""
    element = attr.get_element_type()
    if isinstance(element, FLOAT_TYPES + FP8_TYPES):
        return np.frombuffer(attr.data.data, dtype=numpy_dtype(element))
    if is_bool(element):  # one byte a value, 0xFF for true
        return np.frombuffer(attr.data.data, dtype=np.uint8) != 0
    if isinstance(element, IntegerType) and element.width.data in (32, 64):
        return np.frombuffer(attr.data.data, dtype=np.dtype(f"<i{element.width.data // 8}"))
    return np.array(attr.get_values())


def dense_attr(tensor_type: Any, values: np.ndarray | Sequence[float]) -> DenseIntOrFPElementsAttr:
    """A dense elements attribute of `tensor_type` holding `values` (one value: a splat), as
    `DenseIntOrFPElementsAttr.from_list` builds it, from numpy's bytes for floats."""
    element = tensor_type.get_element_type()
    if isinstance(element, IntegerType) and element.width.data in (1, 32, 64):
        width = element.width.data
        flat = np.asarray(values).reshape(-1)
        flat = (flat != 0).astype(np.int8) * -1 if width == 1 else flat.astype(f"<i{width // 8}")
        count = int(np.prod(tensor_type.get_shape(), dtype=np.int64))
        if flat.size == 1 and count != 1:
            flat = np.repeat(flat, count)
        return DenseIntOrFPElementsAttr(tensor_type, BytesAttr(flat.tobytes()))
    if not isinstance(element, FLOAT_TYPES + FP8_TYPES):
        return DenseIntOrFPElementsAttr.from_list(
            tensor_type, list(np.asarray(values).reshape(-1).tolist())
        )
    flat = np.asarray(values, dtype=numpy_dtype(element)).reshape(-1)
    count = int(np.prod(tensor_type.get_shape(), dtype=np.int64))
    if flat.size == 1 and count != 1:
        flat = np.repeat(flat, count)
    return DenseIntOrFPElementsAttr(tensor_type, BytesAttr(flat.tobytes()))


INT_POISON = -0x5A5A5A5B
"""What an integer buffer holds before a kernel writes it (as NaN does a float one)."""
BOOL_POISON = 0xA5
"""The byte a boolean buffer holds before a kernel writes it: neither 0 nor 1, so an
element never written shows (`unwritten`)."""


def poison(array: np.ndarray) -> None:
    """Fill `array` with what no kernel writes: NaN, `INT_POISON`, `BOOL_POISON` bytes, or
    0xFF bytes (an arena of bytes)."""
    if array.dtype == np.bool_:
        array.view(np.uint8)[...] = BOOL_POISON
    elif array.dtype == np.uint8:  # the driver's arena: bytes that read as NaN in any float
        array[...] = 0xFF
    elif array.dtype.kind in "iu":
        array[...] = INT_POISON
    else:
        array[...] = np.nan


def poisoned(shape: Sequence[int], dtype: Any) -> np.ndarray:
    """A fresh array of `shape` filled by `poison`."""
    out = np.empty(tuple(shape), dtype)
    poison(out)
    return out


def unwritten(array: np.ndarray) -> np.ndarray:
    """Where a boolean array holds a byte that is neither 0 nor 1 (never written, or written
    by a kernel that did not store a boolean); all False for other types."""
    if array.dtype != np.bool_:
        return np.zeros(array.shape, np.bool_)
    return array.view(np.uint8) > 1
