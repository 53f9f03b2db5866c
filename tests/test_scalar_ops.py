"""One table of scalar arith/math ops (`irkit.loops.scalar_ops`) for every backend: each row
is translated by the LLVM translator, the C/CUDA printer and the lockstep interpretation,
either by its spelling in the table or by a handler the backend has. (That they compute the
same values is what the differential tests of every example and pass check.)"""

from __future__ import annotations

import pytest

from irkit.codegen import cuda, llvm
from irkit.loops.scalar_ops import SCALAR_OPS
from irkit.runtime import lockstep


@pytest.mark.parametrize("op", list(SCALAR_OPS), ids=lambda o: o.name)
def test_every_backend_translates_every_row(op) -> None:
    row = SCALAR_OPS[op]
    assert row.llvm is not None or op in llvm._HANDLERS, "llvm.py has no rule"
    assert cuda.CudaPrinter().handler(op) is not None, "the CUDA printer has no rule"
    assert row.c is not None or op in cuda.CPrinter.HANDLERS
    assert op in lockstep.BINARY or op in lockstep.UNARY or op in lockstep.TERNARY, (
        "the lockstep interpretation has no rule"
    )
