"""A plugin for tests/test_advise.py: a rule that proposes two passes which cheat the
harness the ways published kernel generators did, and one honest rule.

- `cheat-write-input`: the first kernel stores a zero into its first input after computing
  (later calls run on other data).
- `cheat-skip-work`: the first kernel runs only when its output's first element is NaN, as
  a freshly bound (poisoned) output is: every later call keeps the result of the first.
Both keep the first call right, so the reference check before timing passes them.
"""

from dataclasses import dataclass

from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import FloatAttr, IndexType, MemRefType, ModuleOp, f32
from xdsl.ir import Block, Region
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from irkit.loops import require_loop_level
from irkit.measure.advice import Edit, Rule, register_rule
from irkit.passes import register_pass


def _first_kernel(op: ModuleOp) -> func.FuncOp:
    return next(f for f in op.ops if isinstance(f, func.FuncOp) and "irkit.kernel" in f.attributes)


def _output(fn: func.FuncOp) -> int:
    attrs = fn.arg_attrs.data if fn.arg_attrs else ()
    return next(i for i, a in enumerate(attrs) if "irkit.output" in a.data)


def _zeros(rank: int) -> list[arith.ConstantOp]:
    return [arith.ConstantOp.from_int_and_width(0, IndexType()) for _ in range(rank)]


@register_pass
@dataclass(frozen=True)
class CheatWriteInputPass(ModulePass):
    name = "cheat-write-input"
    is_optimization = True

    def apply(self, ctx, op: ModuleOp) -> None:
        require_loop_level(op, self.name)
        fn = _first_kernel(op)
        block, target = fn.body.block, fn.body.block.args[0]
        assert isinstance(target.type, MemRefType)
        index = _zeros(len(target.type.get_shape()))
        zero = arith.ConstantOp(FloatAttr(0.0, f32))
        store = memref.StoreOp.get(zero, target, index)
        Rewriter.insert_op([*index, zero, store], InsertPoint.before(block.last_op))


@register_pass
@dataclass(frozen=True)
class CheatSkipWorkPass(ModulePass):
    name = "cheat-skip-work"
    is_optimization = True

    def apply(self, ctx, op: ModuleOp) -> None:
        require_loop_level(op, self.name)
        fn = _first_kernel(op)
        block = fn.body.block
        ret = block.last_op
        body = [o for o in block.ops if o is not ret]
        for o in body:
            o.detach()
        out = block.args[_output(fn)]
        assert isinstance(out.type, MemRefType)
        index = _zeros(len(out.type.get_shape()))
        first = memref.LoadOp.get(out, index)
        poisoned = arith.CmpfOp(first, first, "uno")
        work = scf.IfOp(poisoned, [], Region(Block([*body, scf.YieldOp()])))
        Rewriter.insert_op([*index, first, poisoned, work], InsertPoint.before(ret))


@register_rule
class CheatRule(Rule):
    """Proposes the cheating passes, for every kernel (a test of the harness's guards)."""

    name = "cheat"

    def propose(self, kernel, ctx):
        return [Edit.add("cheat-write-input"), Edit.add("cheat-skip-work")]


@register_rule
class PluginExpandMath(Rule):
    """A plugin's own rule: expand-math wherever it is missing (tests that plugin rules run)."""

    name = "plugin-expand-math"
    families = frozenset({"cpu"})

    def propose(self, kernel, ctx):
        return ctx.missing("expand-math")
