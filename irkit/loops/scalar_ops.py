"""The scalar arith/math ops of the loop level, and how each backend spells them: one table.

The LLVM translator (`irkit/codegen/llvm.py`), the C/CUDA printer (`irkit/codegen/cuda.py`),
the lockstep interpretation (`irkit/runtime/lockstep.py`) and the cost model (`costs.py`)
read their op tables from `SCALAR_OPS`, so an op that every backend handles by name is one
row here. Ops that need more than a name (a negation, an integer min/max, a select, a cast)
are a handler in each backend; a row whose spelling is None says that backend has one.
`tests/test_scalar_ops.py` checks that every row is translated by every backend.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.ir import Operation

from irkit.dialects.math_ext import LdexpOp


def _divsi(a: Any, b: Any) -> Any:
    """Signed division rounding toward zero (C's and LLVM's sdiv), elementwise."""
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


_erf = np.frompyfunc(math.erf, 1, 1)


def _erf_like(x: Any) -> Any:
    return np.asarray(_erf(x), dtype=np.float64).astype(np.asarray(x).dtype)


def _shrui(a: Any, b: Any) -> Any:
    """Logical right shift: the bits of the unsigned type of the same width."""
    a = np.asarray(a)
    unsigned = a.view(a.dtype.str.replace("i", "u"))
    return (unsigned >> np.asarray(b).astype(unsigned.dtype)).view(a.dtype)


@dataclass(frozen=True)
class Scalar:
    """One op's meaning and spellings."""

    numpy: Callable[..., Any] | None
    """Its elementwise meaning, as the lockstep interpretation evaluates it; None: a
    handler in runtime/lockstep.py."""
    llvm: str | None
    """"fadd" / "add" (an llvmlite IRBuilder method), "llvm.exp" (an intrinsic), "libm:tanh" (a
    C library call); None: a handler in codegen/llvm.py."""
    c: str | tuple[str, str] | None
    """"+" (an infix operator) or ("expf", "exp") (the f32 and f64 functions); None: a
    handler in codegen/cuda.py."""
    floating: bool = True
    """A float op (given fast-math flags); else an integer op."""
    flops: int = 1
    """FLOPs per element of a float result (costs.py; 0 for a sign flip, 2 for an fma)."""
    unsigned: bool = False
    """C: the operands are read as unsigned before the infix operator."""


SCALAR_OPS: dict[type[Operation], Scalar] = {
    # float arithmetic
    arith.AddfOp: Scalar(np.add, "fadd", "+"),
    arith.SubfOp: Scalar(np.subtract, "fsub", "-"),
    arith.MulfOp: Scalar(np.multiply, "fmul", "*"),
    arith.DivfOp: Scalar(np.divide, "fdiv", "/"),
    arith.MaximumfOp: Scalar(np.maximum, "llvm.maximum", ("irkit_maximumf", "irkit_maximum")),
    arith.MinimumfOp: Scalar(np.minimum, "llvm.minimum", ("irkit_minimumf", "irkit_minimum")),
    arith.MaxnumfOp: Scalar(np.fmax, "llvm.maxnum", ("fmaxf", "fmax")),
    arith.MinnumfOp: Scalar(np.fmin, "llvm.minnum", ("fminf", "fmin")),
    arith.NegfOp: Scalar(np.negative, None, None, flops=0),
    # math
    xmath.ExpOp: Scalar(np.exp, "llvm.exp", ("expf", "exp")),
    xmath.Exp2Op: Scalar(np.exp2, "llvm.exp2", ("exp2f", "exp2")),
    xmath.LogOp: Scalar(np.log, "llvm.log", ("logf", "log")),
    xmath.SqrtOp: Scalar(np.sqrt, "llvm.sqrt", ("sqrtf", "sqrt")),
    xmath.AbsFOp: Scalar(np.abs, "llvm.fabs", ("fabsf", "fabs")),
    xmath.PowFOp: Scalar(np.power, "llvm.pow", ("powf", "pow")),
    xmath.FloorOp: Scalar(np.floor, "llvm.floor", ("floorf", "floor")),
    xmath.CeilOp: Scalar(np.ceil, "llvm.ceil", ("ceilf", "ceil")),
    xmath.SinOp: Scalar(np.sin, "llvm.sin", ("sinf", "sin")),
    xmath.CosOp: Scalar(np.cos, "llvm.cos", ("cosf", "cos")),
    xmath.FmaOp: Scalar(lambda a, b, c: a * b + c, "llvm.fma", ("fmaf", "fma"), flops=2),
    xmath.TanhOp: Scalar(np.tanh, "libm:tanh", ("tanhf", "tanh")),
    xmath.ErfOp: Scalar(_erf_like, "libm:erf", ("erff", "erf")),
    xmath.RsqrtOp: Scalar(
        lambda x: np.reciprocal(np.sqrt(x)), None, ("irkit_rsqrtf", "irkit_rsqrt")
    ),
    LdexpOp: Scalar(np.ldexp, None, ("ldexpf", "ldexp")),
    # integer and index arithmetic
    arith.AddiOp: Scalar(np.add, "add", "+", floating=False),
    arith.SubiOp: Scalar(np.subtract, "sub", "-", floating=False),
    arith.MuliOp: Scalar(np.multiply, "mul", "*", floating=False),
    arith.DivSIOp: Scalar(_divsi, "sdiv", "/", floating=False),
    arith.RemSIOp: Scalar(np.fmod, "srem", "%", floating=False),
    arith.DivUIOp: Scalar(np.floor_divide, "udiv", "/", floating=False, unsigned=True),
    arith.RemUIOp: Scalar(np.remainder, "urem", "%", floating=False, unsigned=True),
    arith.AndIOp: Scalar(np.bitwise_and, "and_", "&", floating=False),
    arith.OrIOp: Scalar(np.bitwise_or, "or_", "|", floating=False),
    arith.XOrIOp: Scalar(np.bitwise_xor, "xor", "^", floating=False),
    arith.ShLIOp: Scalar(np.left_shift, "shl", "<<", floating=False),
    arith.ShRSIOp: Scalar(np.right_shift, "ashr", ">>", floating=False),
    arith.ShRUIOp: Scalar(_shrui, "lshr", ">>", floating=False, unsigned=True),
    arith.MaxSIOp: Scalar(np.maximum, None, None, floating=False),
    arith.MinSIOp: Scalar(np.minimum, None, None, floating=False),
}


def llvm_builder_ops(floating: bool) -> dict[type[Operation], str]:
    """Ops the LLVM translator emits as one IRBuilder call (float ones take fast-math flags)."""
    return {
        op: s.llvm
        for op, s in SCALAR_OPS.items()
        if s.llvm and "." not in s.llvm and ":" not in s.llvm and s.floating == floating
    }


def llvm_intrinsics() -> dict[type[Operation], str]:
    return {op: s.llvm for op, s in SCALAR_OPS.items() if s.llvm and s.llvm.startswith("llvm.")}


def llvm_libm() -> dict[type[Operation], str]:
    return {
        op: s.llvm.removeprefix("libm:")
        for op, s in SCALAR_OPS.items()
        if s.llvm and s.llvm.startswith("libm:")
    }


def c_infix(unsigned: bool) -> dict[type[Operation], str]:
    return {
        op: s.c for op, s in SCALAR_OPS.items() if isinstance(s.c, str) and s.unsigned == unsigned
    }


def c_calls() -> dict[type[Operation], tuple[str, str]]:
    return {op: s.c for op, s in SCALAR_OPS.items() if isinstance(s.c, tuple)}


def numpy_ops(arity: int) -> dict[type[Operation], Callable[..., Any]]:
    """The lockstep interpretation's table for ops of `arity` operands."""
    return {op: s.numpy for op, s in SCALAR_OPS.items() if s.numpy and _arity(op) == arity}


def flops_per_element(op: Operation) -> int | None:
    """FLOPs of one element of a float op in the table; None for an op not in it."""
    row = SCALAR_OPS.get(type(op))
    if row is None:
        return None
    return row.flops if row.floating else 0


def _arity(op: type[Operation]) -> int:
    definition = op.get_irdl_definition()  # type: ignore[attr-defined]
    return len(definition.operands)
