"""Planted passes of known cost, for `benchmarks/fidelity.py` (a plugin: `-L` this file).

Each is an ordinary pass registered through irkit's public API, as a researcher's would be.
They work on loop-level IR (put them after `lower-graph-to-loops`) and keep every result:

- `plant-work{iters=N}` (optional): adds a kernel that runs a dependent chain of N
  multiply-adds on one float and stores it to a scratch buffer the driver allocates. The
  chain touches no memory and cannot be vectorized or folded (no fast-math), so its cost is
  N times the chain's latency, measurable alone. Attribution should find the pass *costs*
  that much.
- `plant-waste{iters=N}` (required) adds the same kernel, tagged; `plant-unwaste`
  (optional) removes tagged kernels again: attribution should find it *saves* that much.
- `plant-zero` (optional): adds a kernel that does nothing (iters=0): new machine code, a
  call of a few nanoseconds. Its true effect is zero to within any timer's resolution.
- `plant-ir-only` (optional): adds an unused constant to every kernel; LLVM drops it, so
  the machine code is unchanged and attribution must give exactly zero.
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
from irkit.loops import KERNEL_ATTR, kernels, require_loop_level
from irkit.passes import register_pass

TAG = "plant.waste"

_SPIN = """
func.func private @{name}(%buf: memref<1xf32> {{irkit.output = "out0"}}) attributes {{irkit.kernel}} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant {iters} : index
  %a = arith.constant 0.999 : f32
  %b = arith.constant 1.0e-3 : f32
  %init = arith.constant 0.5 : f32
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %init) -> (f32) {{
    %m = arith.mulf %acc, %a : f32
    %s = arith.addf %m, %b : f32
    scf.yield %s : f32
  }}
  memref.store %r, %buf[%c0] : memref<1xf32>
  func.return
}}
"""


def add_spin(module: ModuleOp, iters: int, name: str, tag: bool = False) -> None:
    """Append a spin kernel of `iters` multiply-adds and a call of it at the end of the
    driver, on a one-float scratch buffer of its own."""
    require_loop_level(module, name, cpu=True)
    taken = {op.sym_name.data for op in module.ops if isinstance(op, func.FuncOp)}
    symbol, n = name, 1
    while symbol in taken:
        symbol, n = f"{name}_{n}", n + 1
    text = f"builtin.module {{{_SPIN.format(name=symbol, iters=iters)}}}"
    parsed = Parser(make_context(), text).parse_module()
    kernel = next(iter(parsed.ops))
    kernel.detach()
    if tag:
        kernel.attributes[TAG] = StringAttr("1")
    module.body.block.add_op(kernel)
    driver = entry_function(module)
    ret = driver.body.block.last_op
    assert ret is not None
    buf = memref.AllocOp.get(f32, 64, [1])
    call = func.CallOp(symbol, [buf.memref], [])
    free = memref.DeallocOp.get(buf.memref)
    driver.body.block.insert_ops_before([buf, call, free], ret)


@register_pass
@dataclass(frozen=True)
class PlantWork(ModulePass):
    """Adds a spin kernel of `iters` multiply-adds: makes the program slower by its cost."""

    name = "plant-work"
    is_optimization = True
    iters: int = 1000

    def check_options(self) -> None:
        require(self.iters >= 0, "iters", self.iters, "a count >= 0")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        add_spin(op, self.iters, "plant_work")


@register_pass
@dataclass(frozen=True)
class PlantWaste(ModulePass):
    """Adds a tagged spin kernel (required: the waste `plant-unwaste` removes)."""

    name = "plant-waste"
    iters: int = 1000

    def check_options(self) -> None:
        require(self.iters >= 0, "iters", self.iters, "a count >= 0")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        add_spin(op, self.iters, "plant_waste", tag=True)


@register_pass
@dataclass(frozen=True)
class PlantUnwaste(ModulePass):
    """Removes the kernels `plant-waste` added, and their calls: faster by their cost."""

    name = "plant-unwaste"
    is_optimization = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        wasted = {k.sym_name.data: k for k in kernels(op) if TAG in k.attributes}
        driver = entry_function(op)
        for call in [c for c in driver.body.block.ops if isinstance(c, func.CallOp)]:
            if call.callee.root_reference.data in wasted:
                (buf,) = call.arguments
                alloc, uses = buf.owner, list(buf.uses)
                call.detach()
                call.erase()
                for use in uses:
                    if use.operation is not call:
                        use.operation.detach()
                        use.operation.erase()
                assert isinstance(alloc, memref.AllocOp)
                alloc.detach()
                alloc.erase()
        for k in wasted.values():
            k.detach()
            k.erase()


@register_pass
@dataclass(frozen=True)
class PlantZero(ModulePass):
    """Adds a kernel that does nothing, and its call: new code, no cost."""

    name = "plant-zero"
    is_optimization = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        add_spin(op, 0, "plant_zero")


@register_pass
@dataclass(frozen=True)
class PlantIrOnly(ModulePass):
    """Adds an unused constant to every kernel: the IR changes, the machine code does not."""

    name = "plant-ir-only"
    is_optimization = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for k in kernels(op):
            if KERNEL_ATTR in k.attributes:
                k.body.block.insert_op_before(
                    arith.ConstantOp(FloatAttr(42.0, f32)), k.body.block.first_op
                )
