"""Element types irkit handles, by their names in the .graph language and in MLIR."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
)
from xdsl.ir import Attribute

DTYPES: dict[str, Attribute] = {
    "f16": Float16Type(),
    "bf16": BFloat16Type(),
    "f32": Float32Type(),
    "f64": Float64Type(),
}

NUMPY: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
}


def dtype_name(element_type: Attribute) -> str:
    """'f32' for Float32Type(), and so on; KeyError for types irkit does not handle."""
    for name, t in DTYPES.items():
        if t == element_type:
            return name
    raise KeyError(str(element_type))


def numpy_dtype(element_type: Attribute) -> np.dtype:
    return NUMPY[dtype_name(element_type)]


FLOAT_TYPES = (Float16Type, Float32Type, Float64Type)


def dense_array(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """A dense elements attribute's values as a flat numpy array, read straight from its
    bytes for f16/f32/f64 (xDSL's `get_values` unpacks element by element into Python
    floats: most of a minute for vgg19's weights)."""
    element = attr.get_element_type()
    if isinstance(element, FLOAT_TYPES):
        return np.frombuffer(attr.data.data, dtype=np.dtype(element.format))
    return np.array(attr.get_values())


def dense_attr(tensor_type: Any, values: np.ndarray | Sequence[float]) -> DenseIntOrFPElementsAttr:
    """A dense elements attribute of `tensor_type` holding `values` (one value: a splat), as
    `DenseIntOrFPElementsAttr.from_list` builds it, from numpy's bytes for f16/f32/f64."""
    element = tensor_type.get_element_type()
    if not isinstance(element, FLOAT_TYPES):
        return DenseIntOrFPElementsAttr.from_list(
            tensor_type, list(np.asarray(values).reshape(-1).tolist())
        )
    flat = np.asarray(values, dtype=np.dtype(element.format)).reshape(-1)
    count = int(np.prod(tensor_type.get_shape(), dtype=np.int64))
    if flat.size == 1 and count != 1:
        flat = np.repeat(flat, count)
    return DenseIntOrFPElementsAttr(tensor_type, BytesAttr(flat.tobytes()))
