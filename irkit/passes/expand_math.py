"""expand-math: `math.exp` on f32 as arithmetic the vectorizers can widen.

The llvm target turns `math.exp` into `llvm.exp.f32`, which LLVM lowers to one scalar call to
the C library's `expf` per element: a loop holding one cannot be vectorized, and a sigmoid or
softmax then runs at the speed of that call, not of memory. This pass replaces every f32
`math.exp` with Cephes' `expf`, written in `arith`/`math` ops:

    n = clamp(floor(x * log2(e) + 0.5), -254, 254)      range reduction
    r = x - n * C1 - n * C2                              (C1 + C2 = ln 2, split for accuracy)
    p = polynomial of degree 5 in r (Cephes' minimax coefficients)
    y = p * r^2 + r + 1                                  exp(r) on |r| <= ln(2)/2
    exp(x) = y * 2^h * 2^(n-h), h = floor(n / 2)         two exact powers of two (no overflow
                                                         in the exponent field, gradual underflow)

with `x > 88.8` giving +inf and `x < -104` giving +0 (and so the infinities right); NaN
stays NaN (the clamp keeps the integer conversion defined). Measured error against float64
`exp` over the f32 range: at most 2 ulp on normal results (tested), where `expf` of glibc
has at most 1: the one deliberate numerical change, which the reference checks tolerate.

Optional, CPU-oriented (the CUDA target has its own fast `expf`); no options.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import Float32Type, FloatAttr, IntegerAttr, ModuleOp, i32
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

F32 = Float32Type()
LOG2E = 1.44269504088896341
C1, C2 = 0.693359375, -2.12194440e-4
POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
        1.6666665459e-1, 5.0000001201e-1)  # fmt: skip
OVERFLOW, UNDERFLOW = 88.8, -104.0


class _Emitter:
    """Inserts ops before one anchor op."""

    def __init__(self, anchor: Operation):
        self.anchor = anchor

    def add(self, op: Operation) -> SSAValue:
        self.anchor.parent_block().insert_op_before(op, self.anchor)  # type: ignore[union-attr]
        return op.results[0]

    def f(self, x: float) -> SSAValue:
        return self.add(arith.ConstantOp(FloatAttr(x, F32)))

    def i(self, x: int) -> SSAValue:
        return self.add(arith.ConstantOp(IntegerAttr(x, i32)))

    def pow2(self, n: SSAValue) -> SSAValue:
        """2**n for a float-valued integer n in [-127, 127], built in the exponent field."""
        bits = self.add(arith.AddiOp(self.add(arith.FPToSIOp(n, i32)), self.i(127)))
        return self.add(arith.BitcastOp(self.add(arith.ShLIOp(bits, self.i(23))), F32))


def expand_exp(op: xmath.ExpOp) -> SSAValue:
    """The arithmetic replacing one f32 `math.exp` (inserted before it); its result."""
    e = _Emitter(op)
    x = op.operand
    n = e.add(xmath.FloorOp(e.add(arith.AddfOp(e.add(arith.MulfOp(x, e.f(LOG2E))), e.f(0.5)))))
    n = e.add(arith.MinnumfOp(e.add(arith.MaxnumfOp(n, e.f(-254.0))), e.f(254.0)))
    r = e.add(arith.SubfOp(x, e.add(arith.MulfOp(n, e.f(C1)))))
    r = e.add(arith.SubfOp(r, e.add(arith.MulfOp(n, e.f(C2)))))
    p = e.f(POLY[0])
    for c in POLY[1:]:
        p = e.add(arith.AddfOp(e.add(arith.MulfOp(p, r)), e.f(c)))
    r2 = e.add(arith.MulfOp(r, r))
    y = e.add(arith.AddfOp(e.add(arith.AddfOp(e.add(arith.MulfOp(p, r2)), r)), e.f(1.0)))
    h = e.add(xmath.FloorOp(e.add(arith.MulfOp(n, e.f(0.5)))))
    y = e.add(arith.MulfOp(e.add(arith.MulfOp(y, e.pow2(h))), e.pow2(e.add(arith.SubfOp(n, h)))))
    big = e.add(arith.CmpfOp(x, e.f(OVERFLOW), "ogt"))
    y = e.add(arith.SelectOp(big, e.f(math.inf), y))
    small = e.add(arith.CmpfOp(x, e.f(UNDERFLOW), "olt"))
    return e.add(arith.SelectOp(small, e.f(0.0), y))


@dataclass(frozen=True)
class ExpandMathPass(ModulePass):
    """Replace f32 `math.exp` with vectorizable arithmetic (see the module docstring)."""

    name = "expand-math"
    is_optimization = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for exp in [o for o in op.walk() if isinstance(o, xmath.ExpOp)]:
            if exp.result.type == F32:
                exp.result.replace_all_uses_with(expand_exp(exp))
                exp.detach()
                exp.erase()
