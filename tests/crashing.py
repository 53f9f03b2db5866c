"""A test-only pass whose generated code kills the process: `plant-crash`.

It adds a kernel, called from the driver, that stores 4 TiB past the end of a one-element
scratch buffer (an address no process has mapped): the JIT-compiled code takes a SIGSEGV.
With `hang=true` the kernel instead spins on a dependent chain of 10^15 multiply-adds (days).
It claims to be an optimization, so a suite or an attribution runs it like any other pass;
isolation in worker processes is what keeps the suite alive. Loaded as a plugin:
`irkit-bench suite --plugin tests/crashing.py`, or imported by the tests."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.passes import ModulePass

from irkit.ir import entry_function, make_context
from irkit.passes import register_pass

CRASH = """
func.func private @crash(%buf: memref<1xf32> {irkit.scratch}) attributes {irkit.kernel} {
  %far = arith.constant 1099511627776 : index
  %v = arith.constant 1.0 : f32
  memref.store %v, %buf[%far] : memref<1xf32>
  func.return
}
"""

HANG = """
func.func private @crash(%buf: memref<1xf32> {irkit.scratch}) attributes {irkit.kernel} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 1000000000000000 : index
  %init = arith.constant 0.5 : f32
  %m = arith.constant 0.999 : f32
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %init) -> (f32) {
    %p = arith.mulf %acc, %m : f32
    %q = arith.addf %p, %m : f32
    scf.yield %q : f32
  }
  memref.store %r, %buf[%c0] : memref<1xf32>
  func.return
}
"""


@register_pass
@dataclass(frozen=True)
class PlantCrashPass(ModulePass):
    """Add a kernel that crashes (or, with `hang`, never ends) to the driver (test only)."""

    name = "plant-crash"
    is_optimization = True

    hang: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        text = HANG if self.hang else CRASH
        kernel = Parser(make_context(), f"builtin.module {{{text}}}").parse_module()
        fn = kernel.body.block.first_op
        assert isinstance(fn, func.FuncOp)
        fn.detach()
        op.body.block.add_op(fn)
        driver = entry_function(op)
        ret = driver.body.block.last_op
        assert ret is not None
        buf = memref.AllocOp([], [], fn.args[0].type)  # type: ignore[arg-type]
        call = func.CallOp("crash", [buf.memref], [])
        driver.body.block.insert_ops_before([buf, call, memref.DeallocOp.get(buf.memref)], ret)
