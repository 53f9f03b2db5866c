"""`irkit_cpu`: loop-level ops for the CPU that upstream dialects lack in xDSL.

`irkit_cpu.prefetch %buf[%i, %j] locality 2 : memref<...>` asks the CPU to bring the
cache line holding that element closer (MLIR's `memref.prefetch ..., read, locality<N>,
data`, which xDSL does not have): a hint with no effect on any value. The index may lie past
the buffer's end (row-major linearized: a panel's "next row" may be the next panel's first),
and a prefetch of an address outside the buffer does nothing. `locality` is LLVM's: 3 keeps
the line in every cache level, 2 in L2 and beyond, 0 nowhere in particular. The llvm target
emits `llvm.prefetch`; the GPU printers and interpretations skip it.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import I32, IndexType, IntegerAttr, MemRefType
from xdsl.ir import Dialect, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    var_operand_def,
)
from xdsl.utils.exceptions import VerifyException


@irdl_op_definition
class PrefetchOp(IRDLOperation):
    """A read prefetch of one element's cache line (see the module docstring)."""

    name = "irkit_cpu.prefetch"

    memref = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    locality = prop_def(IntegerAttr[I32])

    assembly_format = "$memref `[` $indices `]` `locality` $locality attr-dict `:` type($memref)"

    def __init__(self, memref: SSAValue, indices: Sequence[SSAValue], locality: int = 2):
        super().__init__(
            operands=[memref, list(indices)],
            properties={"locality": IntegerAttr(locality, 32)},
        )

    def verify_(self) -> None:
        if not isinstance(self.memref.type, MemRefType):
            raise VerifyException(f"the operand is a memref, not {self.memref.type}")
        if len(self.indices) != self.memref.type.get_num_dims():
            raise VerifyException("one index per dimension")
        if any(not isinstance(i.type, IndexType) for i in self.indices):
            raise VerifyException("the indices are of type index")
        if not 0 <= self.locality.value.data <= 3:
            raise VerifyException("locality is 0 to 3")


Cpu = Dialect("irkit_cpu", [PrefetchOp], [])
