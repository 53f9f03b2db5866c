"""Element types irkit handles, by their names in the .graph language and in MLIR."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, Float64Type
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
