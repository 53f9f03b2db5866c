"""`irkit_math`: scalar math of the loop level that xDSL's `math` dialect lacks.

`irkit_math.ldexp %x, %n : f32, i32 -> f32` is x * 2^n, exactly (C's `ldexpf`, LLVM's
`llvm.ldexp`): one rounding, into the subnormals or to infinity, whatever n is. The llvm
target emits the intrinsic, which LLVM lowers to one `vscalefps` a vector on AVX-512 and to
a library call per element elsewhere (so `expand-math` uses it only where the host has
AVX-512); the C/CUDA printer calls `ldexpf`/`ldexp`; lockstep evaluates `numpy.ldexp`.
"""

from __future__ import annotations

from xdsl.dialects.builtin import Float32Type, Float64Type, IntegerType
from xdsl.ir import Dialect, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, result_def
from xdsl.utils.exceptions import VerifyException


@irdl_op_definition
class LdexpOp(IRDLOperation):
    """x * 2^n for a float x (f32 or f64) and an i32 n; the result has x's type."""

    name = "irkit_math.ldexp"

    x = operand_def()
    n = operand_def()
    result = result_def()

    assembly_format = "$x `,` $n attr-dict `:` type($x) `,` type($n) `->` type($result)"

    def __init__(self, x: SSAValue, n: SSAValue):
        super().__init__(operands=[x, n], result_types=[x.type])

    def verify_(self) -> None:
        if not isinstance(self.x.type, Float32Type | Float64Type):
            raise VerifyException(f"x is f32 or f64, not {self.x.type}")
        if self.result.type != self.x.type:
            raise VerifyException("the result has x's type")
        if not (isinstance(self.n.type, IntegerType) and self.n.type.width.data == 32):
            raise VerifyException(f"n is an i32, not {self.n.type}")


MathExt = Dialect("irkit_math", [LdexpOp], [])
