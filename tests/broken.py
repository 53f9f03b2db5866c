"""A test-only pass that breaks semantics on purpose: `break-add` turns every addf into
subf at the loop level. It claims to be an optimization, so attribution would time it if
checking did not come first."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from irkit.passes import register_pass


@register_pass
@dataclass(frozen=True)
class BreakAddPass(ModulePass):
    name = "break-add"
    is_optimization = True

    def apply(self, ctx, op) -> None:
        for add in [o for o in op.walk() if isinstance(o, arith.AddfOp)]:
            Rewriter.replace_op(add, arith.SubfOp(add.lhs, add.rhs))
