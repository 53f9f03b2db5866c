"""A model in a narrower float type: every f32 tensor of a graph-level model as f16 or bf16.

What `model.half()` or `model.to(torch.bfloat16)` does to a torch module, and what IREE's
`--iree-input-demote-f32-to-f16` does to a program: inputs, weights, intermediates and
outputs all take the narrow type; constants are rounded to it (to nearest even), a finite
constant past f16's range saturating at +-65504 instead of becoming infinite, as ONNX's
float16 converter does (exporters write masks as finfo(float32).min: -inf in f16 would turn
`0 * min` into NaN). The
arithmetic stays as the lowering does it for narrow data: widened to f32 on load and rounded
on store, so matmuls, reductions and softmax statistics accumulate in f32, and tensor cores
take the matmuls on the GPU path (`gpu-tile-matmul`). f64 and integer tensors are kept.

The result is a new model, not a pass of a pipeline: its reference is its own (the float64
reference of the narrow inputs and weights), and the check holds it to the narrow type's
tolerance. `irkit.load(..., dtype=)`, `--dtype` on `irkit-opt` (which writes the converted
model) and on `irkit-bench run`, `attribute`, `tune`, `advise` and `reference` use it.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import Float32Type, FunctionType, ModuleOp, TensorType
from xdsl.ir import Attribute, SSAValue

from irkit.dtypes import DTYPES, NUMPY, dense_array, dense_attr
from irkit.errors import IrkitError

NARROW = ("f16", "bf16")
"""The types a model can be converted to (`--dtype`); "f32" leaves it as it is."""


def check_dtype(function: str, dtype: object) -> None:
    if dtype is not None and dtype not in (*NARROW, "f32"):
        raise IrkitError(f"{function}: dtype must be one of f32, f16, bf16, got {dtype!r}")


def _narrowed(t: Attribute, narrow: Attribute) -> Attribute:
    if isinstance(t, TensorType) and isinstance(t.element_type, Float32Type):
        return TensorType(narrow, t.get_shape())
    return t


def _saturated(values: np.ndarray, dtype: str) -> np.ndarray:
    """Finite values past the type's largest finite one, clipped to it (infinities kept)."""
    top = float(ml_dtypes.finfo(NUMPY[dtype]).max)
    return np.where(np.isfinite(values), np.clip(values, -top, top), values)


def convert_floats(module: ModuleOp, dtype: str) -> ModuleOp:
    """`module` (graph level) with every f32 tensor in `dtype` ("f16" or "bf16"; "f32" gives
    the module back). The module is changed in place and returned."""
    from irkit.dialects import graph as g
    from irkit.loops import is_loop_level

    check_dtype("convert_floats", dtype)
    if dtype == "f32":
        return module
    if is_loop_level(module):
        raise IrkitError(f"--dtype {dtype} converts graph-level models, not loop-level IR")
    narrow = DTYPES[dtype]
    for fn in module.ops:
        if not isinstance(fn, func.FuncOp):
            continue
        values: list[SSAValue] = [a for b in fn.body.blocks for a in b.args]
        for op in fn.walk():
            if isinstance(op, g.ConstantOp):
                t = _narrowed(op.value.get_type(), narrow)
                if t is not op.value.get_type():
                    op.properties["value"] = dense_attr(t, _saturated(dense_array(op.value), dtype))
            values += [*op.results, *(a for r in op.regions for b in r.blocks for a in b.args)]
        for v in values:
            v._type = _narrowed(v.type, narrow)  # noqa: SLF001 - xDSL keeps no setter
        inputs, outputs = fn.function_type.inputs, fn.function_type.outputs
        fn.function_type = FunctionType.from_lists(
            [_narrowed(t, narrow) for t in inputs], [_narrowed(t, narrow) for t in outputs]
        )
    return module
