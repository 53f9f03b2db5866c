"""A test-only optional pass that plants a known amount of work: `plant-work`.

At the loop level it adds a kernel that runs a dependent chain of `iterations`
multiply-adds on one f32 (no vectorization or reassociation can shorten a dependent
chain without fast-math), called from the driver on a scratch buffer. Its cost is a
fixed number of cycles, independent of caches and of the model, so the planted effect is
known: the time of that kernel alone. It leaves the model's outputs alone, so it is a
legitimate "optimization" as far as attribution is concerned (with a negative worth).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.passes import ModulePass

from irkit.ir import entry_function, make_context
from irkit.passes import register_pass

KERNEL = """
func.func private @planted_work(%buf: memref<1xf32> {{irkit.scratch}}) attributes {{irkit.kernel}} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant {iterations} : index
  %init = arith.constant 0.5 : f32
  %m = arith.constant 0.999 : f32
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %init) -> (f32) {{
    %p = arith.mulf %acc, %m : f32
    %q = arith.addf %p, %m : f32
    scf.yield %q : f32
  }}
  memref.store %r, %buf[%c0] : memref<1xf32>
  func.return
}}
"""


@register_pass
@dataclass(frozen=True)
class PlantWorkPass(ModulePass):
    """Add a kernel of `iterations` dependent multiply-adds to the driver (test only)."""

    name = "plant-work"
    is_optimization = True

    iterations: int = 200_000

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        call_from_driver(op, KERNEL.format(iterations=self.iterations))


def call_from_driver(op: ModuleOp, text: str) -> None:
    """Add the kernel in `text` (one func over a memref<1xf32> scratch buffer) to the
    loop-level module `op`, called by the driver on a fresh buffer before it returns."""
    kernel = Parser(make_context(), f"builtin.module {{{text}}}").parse_module()
    fn = kernel.body.block.first_op
    assert isinstance(fn, func.FuncOp)
    fn.detach()
    op.body.block.add_op(fn)
    driver = entry_function(op)
    ret = driver.body.block.last_op
    assert ret is not None
    buf = memref.AllocOp([], [], fn.args[0].type)  # type: ignore[arg-type]
    call = func.CallOp(fn.sym_name.data, [buf.memref], [])
    driver.body.block.insert_ops_before([buf, call, memref.DeallocOp.get(buf.memref)], ret)
