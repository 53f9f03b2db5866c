"""fold-constants: evaluate, at compile time, graph ops whose operands are all constants.

Weights that arrive as values (ONNX initializers, `graph.constant`) are often reshaped,
transposed or scaled before use: an ONNX `Gemm` with `transB=1`, the layout a PyTorch
`Linear` exports, reads its weight through a `graph.transpose`. Unfolded, that transpose is
a kernel that re-transposes the same weight on every call; folded, the weight is stored in
the layout the matmul reads (the "pre-transposed weights" of a layout pass, for free).

Each foldable op is evaluated by the numpy reference (float64) and rounded once to its
result type, so a folded value is at least as close to the reference as the kernel it
replaces. Folding proceeds in program order, so chains of constant ops fold to one value.

Options:
  max-elements   results with more elements are left to run time (default 16M): folding
                 a broadcast of a scalar to a large tensor would only bloat the module.

Semantics-preserving (to within the result type's rounding); removing it changes no output.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from irkit.dialects import graph as g
from irkit.errors import require
from irkit.ir import shape_of


@dataclass(frozen=True)
class FoldConstantsPass(ModulePass):
    """Replace graph ops with all-constant operands by the constant they compute."""

    name = "fold-constants"
    is_optimization = True

    max_elements: int = 1 << 24

    def check_options(self) -> None:
        require(self.max_elements >= 1, "max-elements", self.max_elements, "must be at least 1")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in op.ops:
            if isinstance(fn, func.FuncOp) and not fn.is_declaration:
                self._fold_block(fn.body.block)

    def _fold_block(self, block: Block) -> None:
        for op in list(block.ops):
            if isinstance(op, g.KernelOp):
                self._fold_block(op.body.block)
            elif self._foldable(op):
                _fold(op)

    def _foldable(self, op: Operation) -> bool:
        if not isinstance(op, g.GraphOp) or isinstance(op, g.ConstantOp) or not op.operands:
            return False
        if not all(isinstance(v.owner, g.ConstantOp) for v in op.operands):
            return False
        shape = shape_of(op.results[0])
        return int(np.prod(shape, dtype=np.int64)) <= self.max_elements


def _fold(op: Operation) -> None:
    """Replace `op` by a graph.constant holding its value; drop constants left unused."""
    from irkit.dialects.semantics import IMPLS, cast, constant_value

    result_type = op.results[0].type
    assert isinstance(result_type, TensorType)
    with np.errstate(all="ignore"):  # inf and NaN are values here, as in the reference
        value = IMPLS[type(op)](op, [constant_value(v.owner) for v in op.operands])  # type: ignore[arg-type]
        value = cast(np.asarray(value, np.float64), result_type.element_type)
    folded = g.ConstantOp.from_values(
        result_type.element_type, result_type.get_shape(), value.reshape(-1).tolist()
    )
    folded.location = op.location
    names = {v.name_hint for v in op.operands if v.name_hint}  # a transposed W is still W
    folded.results[0].name_hint = op.results[0].name_hint or (
        names.pop() if len(names) == 1 else None
    )
    producers = {v.owner for v in op.operands}
    Rewriter.replace_op(op, folded)
    for producer in producers:
        if isinstance(producer, Operation) and not producer.results[0].uses:
            Rewriter.erase_op(producer)
