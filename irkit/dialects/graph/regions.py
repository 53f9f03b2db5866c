"""Kernel regions: `graph.kernel` and its terminator `graph.yield`."""

from __future__ import annotations

from xdsl.dialects.builtin import (
    TensorType,
)
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    lazy_traits_def,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import HasParent, IsTerminator, SingleBlockImplicitTerminator
from xdsl.utils.exceptions import VerifyException

from irkit.dialects.graph.base import GraphOp

# --- kernel regions -----------------------------------------------------------------------


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminates a `graph.kernel` region; its operands are the kernel's results."""

    name = "graph.yield"
    values = var_operand_def(TensorType)
    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(KernelOp)))
    assembly_format = "($values^ `:` type($values))? attr-dict"


@irdl_op_definition
class KernelOp(IRDLOperation):
    """A group of graph ops that becomes one kernel (what fusion produces).

    The region holds graph ops in dataflow order and ends with `graph.yield`; it reads
    values defined above it directly (it is not isolated). Values it yields are the
    kernel's outputs; every other value inside stays inside the kernel, computed inline or
    kept in scratch memory, as the lowering decides. A graph op outside any kernel region
    is a kernel of its own."""

    name = "graph.kernel"
    outputs = var_result_def(TensorType)
    body = region_def("single_block")
    traits = traits_def(SingleBlockImplicitTerminator(YieldOp))
    assembly_format = "attr-dict-with-keyword `:` type($outputs) $body"

    def verify_(self) -> None:
        block = self.body.block
        last = block.last_op
        if not isinstance(last, YieldOp):
            raise VerifyException("graph.kernel must end with graph.yield")
        if [v.type for v in last.values] != [r.type for r in self.outputs]:
            raise VerifyException("graph.yield types must match the graph.kernel result types")
        for op in block.ops:
            if not isinstance(op, GraphOp | YieldOp):
                raise VerifyException(f"graph.kernel may hold graph ops only, found {op.name}")
