"""Passes of known cost, for checking attribution against the truth (a plugin: load it with
`-L irkit.measure.plants`; irkit does not register these by itself).

Each is an ordinary pass, registered as a researcher's own would be. They work on loop-level
IR (after `lower-graph-to-loops`) and keep every result:

- `plant-work{iters=N}` (optional): adds a kernel that runs a dependent chain of N
  multiply-adds on one float and stores it to a scratch buffer the driver allocates. The
  chain touches no memory and cannot be vectorized or folded (no fast-math; its start is
  no fixed point LLVM's constant propagation could find), so its cost is N times the
  chain's latency, measurable alone. Attribution should find that the pass *costs* that.
- `plant-waste{iters=N}` (required) adds the same kernel, tagged; `plant-unwaste`
  (optional) removes tagged kernels again: attribution should find it *saves* that much.
- `plant-zero` (optional): adds a kernel that does nothing: new machine code, a call of a
  few nanoseconds. Its true effect is zero to within any timer's resolution.
- `plant-ir-only` (optional): adds an unused constant to every kernel; LLVM drops it, so
  the machine code is unchanged and attribution must give exactly zero.

`benchmarks/fidelity.py` plants them into the examples and scores what attribution found.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import FloatAttr, ModuleOp, StringAttr, f32
from xdsl.parser import Parser
from xdsl.passes import ModulePass

from irkit.errors import require
from irkit.ir import entry_function, make_context
from irkit.loops import kernels, require_loop_level
from irkit.passes import register_pass

WASTE = "irkit.plant.waste"
"""The attribute marking `plant-waste`'s kernels, which `plant-unwaste` removes."""


def spin_kernel(name: str, iters: int) -> str:
    """The text of a kernel `@name` running `iters` dependent multiply-adds on one float,
    stored to its one-float scratch argument."""
    return f"""
func.func private @{name}(%buf: memref<1xf32> {{irkit.scratch}}) attributes {{irkit.kernel}} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant {iters} : index
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


def call_from_driver(op: ModuleOp, text: str) -> func.FuncOp:
    """Add the kernel in `text` (one func over a memref<1xf32> scratch buffer) to the
    loop-level module `op` (renamed if its name is taken), called by the driver on a fresh
    buffer before it returns; returns the kernel."""
    kernel = Parser(make_context(), f"builtin.module {{{text}}}").parse_module()
    fn = kernel.body.block.first_op
    assert isinstance(fn, func.FuncOp)
    taken = {f.sym_name.data for f in op.ops if isinstance(f, func.FuncOp)}
    name, n = fn.sym_name.data, 1
    while name in taken:
        name, n = f"{fn.sym_name.data}_{n}", n + 1
    fn.sym_name = StringAttr(name)
    fn.detach()
    op.body.block.add_op(fn)
    driver = entry_function(op)
    ret = driver.body.block.last_op
    assert ret is not None
    buf = memref.AllocOp([], [], fn.args[0].type)
    call = func.CallOp(name, [buf.memref], [])
    driver.body.block.insert_ops_before([buf, call, memref.DeallocOp.get(buf.memref)], ret)
    return fn


def _check_iters(iters: int) -> None:
    require(iters >= 0, "iters", iters, "a count >= 0")


@register_pass
@dataclass(frozen=True)
class PlantWorkPass(ModulePass):
    """Adds a spin kernel of `iters` multiply-adds: the program slower by its cost."""

    name = "plant-work"
    is_optimization = True
    iters: int = 200_000

    def check_options(self) -> None:
        _check_iters(self.iters)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_loop_level(op, self.name)
        call_from_driver(op, spin_kernel("planted_work", self.iters))


@register_pass
@dataclass(frozen=True)
class PlantWastePass(ModulePass):
    """Adds a tagged spin kernel of `iters` multiply-adds (required: the waste that
    `plant-unwaste` removes)."""

    name = "plant-waste"
    iters: int = 200_000

    def check_options(self) -> None:
        _check_iters(self.iters)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_loop_level(op, self.name)
        call_from_driver(op, spin_kernel("planted_waste", self.iters)).attributes[WASTE] = (
            StringAttr("1")
        )


@register_pass
@dataclass(frozen=True)
class PlantUnwastePass(ModulePass):
    """Removes `plant-waste`'s kernels, their calls and buffers: faster by their cost."""

    name = "plant-unwaste"
    is_optimization = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        wasted = {k.sym_name.data: k for k in kernels(op) if WASTE in k.attributes}
        driver = entry_function(op)
        for call in [c for c in driver.body.block.ops if isinstance(c, func.CallOp)]:
            if call.callee.root_reference.data in wasted:
                (buf,) = call.arguments
                users = [u.operation for u in buf.uses]
                for user in users:  # the call and the dealloc
                    user.detach()
                    user.erase()
                alloc = buf.owner
                assert isinstance(alloc, memref.AllocOp)
                alloc.detach()
                alloc.erase()
        for k in wasted.values():
            k.detach()
            k.erase()


@register_pass
@dataclass(frozen=True)
class PlantZeroPass(ModulePass):
    """Adds a kernel that does nothing, and its call: new code, no cost."""

    name = "plant-zero"
    is_optimization = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_loop_level(op, self.name)
        call_from_driver(op, spin_kernel("planted_zero", 0))


@register_pass
@dataclass(frozen=True)
class PlantIrOnlyPass(ModulePass):
    """Adds an unused constant to every kernel: the IR changes, the machine code does not."""

    name = "plant-ir-only"
    is_optimization = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for k in kernels(op):
            first = k.body.block.first_op
            assert first is not None  # a kernel ends in func.return
            k.body.block.insert_op_before(arith.ConstantOp(FloatAttr(42.0, f32)), first)
