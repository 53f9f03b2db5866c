"""Floating-point sums on the CPU: accurate (`block-reductions`) and vectorizable
(`reassociate-reductions`).

`lower-graph-to-loops` writes a reduction as an `scf.for` nest carrying one accumulator
(`acc = acc + x` per element). Run as written, an f32 sum of n elements has a worst-case
relative error of about n * 2^-24 and, for values of one sign and similar size, a real
error that grows with n (a softmax over 9537 elements came out 1.0e-4 from float64).
LLVM also may not vectorize it: reordering the additions changes the rounding.

`block-reductions` (required on the CPU) rewrites every f32 addition nest of more than
`block` elements into blocks: each block of at most `block` consecutive elements is
summed in f32 from zero, and the block sums are added in f64, rounded to f32 once at the
end. The error is then bounded by the block (`block` * 2^-24 in the worst case, 1.5e-5 for
256) whatever n is. When the innermost loop alone is longer than a block it is split into
whole blocks and the rest, bounds staying static (below); otherwise the innermost loops
whose trips multiply to at most `block` form the block and the outer ones carry the f64
sum.

    %s = scf.for %i = %c0 to %c9537 step %c1 iter_args(%a = %zero) -> (f32) { ... addf %a, %x }
  becomes
    %w = scf.for %jb = %c0 to %c9472 step %c256 iter_args(%wa = %zero64) -> (f64) {
      %p = scf.for %j = %c0 to %c256 step %c1 iter_args(%a = %zero) -> (f32) {
        %i = arith.addi %jb, %j ... addf %a, %x }
      scf.yield (%wa + extf %p)
    }
    %t = scf.for %i = %c9472 to %c9537 step %c1 iter_args(%a = %zero) -> (f32) { ... }
    %s = arith.truncf (%w + extf %t) : f64 to f32

f64 sums (n * 2^-53) and max/min (exact in any order) are left as they are.

`reassociate-reductions` (optional) marks the combiner of every innermost reduction loop
`fastmath<reassoc>`, which lets LLVM's loop vectorizer keep partial sums (or maxima) in
vector registers and combine them pairwise at the end. Inside a block this only changes
how the block's additions associate, so the error bound above still holds. Maxima and minima
are also marked `nsz`: the sign of a zero result is not kept (the maximum of -0 and +0 may
come out -0; they compare equal), while NaN still propagates. x86 then needs no sign
handling: `llvm.maximum` vectorizes to vmaxps, a compare and a blend instead of six
instructions, and softmax 512x1024 on one Zen 5 core went from 155 to 125 us (its row
maximum was a fifth of its instructions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import (
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    ModuleOp,
)
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from irkit.errors import require
from irkit.ir import unchanged
from irkit.loops import combiner, constant_int, require_loop_level
from irkit.loops.costs import static_trips
from irkit.passes.loop_builder import FunctionConstants

F32, F64, INDEX = Float32Type(), Float64Type(), IndexType()
REASSOC = arith.FastMathFlagsAttr([arith.FastMathFlag.REASSOC])
REASSOC_NSZ = arith.FastMathFlagsAttr(
    [arith.FastMathFlag.REASSOC, arith.FastMathFlag.NO_SIGNED_ZEROS]
)
"""For max/min combiners: NaN propagates, the sign of a zero result is free (module doc)."""


def _trips(loop: scf.ForOp) -> int | None:
    """The loop's trip count; None where its bounds are not constants."""
    try:
        return static_trips(loop.lb, loop.ub, loop.step)
    except ValueError:
        return None


def _chain(inner: scf.ForOp) -> list[scf.ForOp]:
    """`inner` and the loops around it that only carry its accumulator: each one's body is
    the next loop and a yield of its result, and it passes its own accumulator in."""
    chain = [inner]
    while True:
        loop = chain[0]
        parent = loop.parent_op()
        if not isinstance(parent, scf.ForOp) or len(parent.iter_args) != 1:
            break
        ops = list(parent.body.block.ops)
        if (
            len(ops) != 2
            or ops[0] is not loop
            or loop.iter_args[0] is not parent.body.block.args[1]
            or ops[1].operands[0] is not loop.results[0]
        ):
            break
        chain.insert(0, parent)
    return chain


def additive_nests(module: ModuleOp) -> list[list[scf.ForOp]]:
    """Every f32 addition nest (outermost loop first), innermost loops found by `combiner`."""
    nests = []
    for op in module.walk():
        if not isinstance(op, scf.ForOp):
            continue
        comb = combiner(op, from_identity=False)
        if isinstance(comb, arith.AddfOp) and op.iter_args[0].type == F32:
            chain = _chain(op)
            if all(_trips(loop) is not None for loop in chain):
                nests.append(chain)
    return nests


class _At:
    """Builds ops into a block, or before an anchor op."""

    def __init__(self, block: Block, before: Operation | None = None):
        self.block, self.before = block, before

    def add(self, op: Operation) -> SSAValue:
        if self.before is None:
            self.block.add_op(op)
        else:
            self.block.insert_op_before(op, self.before)
        return op.results[0] if op.results else None  # type: ignore[return-value]


def block_plan(chain: list[scf.ForOp], block: int) -> tuple[list[int], int, bool] | None:
    """How `block_nest` cuts the nest: its trip counts, the first loop of the block, and
    whether the innermost loop alone is longer than a block (and is split); None where the
    nest stays as it is."""
    trips = [_trips(loop) or 0 for loop in chain]
    if math.prod(trips) <= block:
        return None
    # the block: the innermost loops whose trips multiply to at most `block` (k: the first)
    k = len(chain)
    while k > 0 and math.prod(trips[k - 1 :]) <= block:
        k -= 1
    split = k == len(chain)
    inner = chain[-1]
    if split and (constant_int(inner.lb) != 0 or constant_int(inner.step) != 1):
        return None
    return trips, k, split


def needs_blocking(module: ModuleOp, block: int = 256) -> bool:
    """Whether `block-reductions{block}` would change `module` (a query; nothing changes)."""
    return any(block_plan(chain, block) is not None for chain in additive_nests(module))


def block_nest(chain: list[scf.ForOp], block: int) -> bool:
    """Rewrite one addition nest into blocks summed in f64 (see the module docstring);
    False when it stays as it is: at most `block` elements, or an innermost loop longer than
    a block that does not start at 0 with step 1."""
    plan = block_plan(chain, block)
    if plan is None:
        return False
    trips, k, split = plan
    top, inner = chain[0], chain[-1]
    head = inner if split else chain[k]
    uses = list(top.results[0].uses)

    fn = top.parent_op()
    while not isinstance(fn, func.FuncOp):
        fn = fn.parent_op()  # type: ignore[union-attr]
    constants = FunctionConstants(fn)
    zero = constants.get(FloatAttr(0.0, F32))
    at = _At(top.parent_block(), top.next_op)  # type: ignore[arg-type]  # a terminator follows
    wide = at.add(arith.ExtFOp(top.iter_args[0], F64))

    def loop(lb: SSAValue, ub: SSAValue, step: SSAValue, into: _At, acc: SSAValue):
        body = Block(arg_types=[INDEX, F64])
        new = scf.ForOp(lb, ub, step, [acc], body)
        into.add(new)
        return new, _At(body), body.args[1]

    def add_block(into: _At, acc: SSAValue, partial: scf.ForOp) -> SSAValue:
        partial.operands[3] = zero
        into.add(partial)
        return into.add(arith.AddfOp(acc, into.add(arith.ExtFOp(partial.results[0], F64))))

    # the outer loops, carrying the f64 sum; `fill` is where the block goes
    fill, opened = at, []
    for old in chain[:-1] if split else chain[:k]:
        new, fill, wide = loop(old.lb, old.ub, old.step, fill, wide)
        old.body.block.args[0].replace_all_uses_with(new.body.block.args[0])
        opened.append(new)
    tail = head.clone() if split and trips[-1] % block else None
    head.detach()
    if split:  # whole blocks of `block` elements, static bounds, then the rest
        n = trips[-1]
        span = constants.index(block)
        main, into, acc = loop(constants.index(0), constants.index(n - n % block), span, fill, wide)
        iv = head.body.block.args[0]
        at_block = into.block.args[0]
        pos = arith.AddiOp(at_block, iv)
        iv.replace_all_uses_with(pos.result)
        pos.operands[1] = iv
        Rewriter.insert_op(pos, InsertPoint.at_start(head.body.block))
        head.operands[1] = span
        into.add(scf.YieldOp(add_block(into, acc, head)))
        wide = main.results[0]
        if tail is not None:
            tail.operands[0] = constants.index(n - n % block)
            wide = add_block(fill, wide, tail)
    else:
        wide = add_block(fill, wide, head)
    for new in reversed(opened):  # close the new loops from the inside out
        new.body.block.add_op(scf.YieldOp(wide))
        wide = new.results[0]
    rounded = at.add(arith.TruncFOp(wide, F32))
    for use in uses:
        use.operation.operands[use.index] = rounded
    if top is not head:
        top.detach()
        top.erase(safe_erase=False)
    return True


@dataclass(frozen=True)
class BlockReductionsPass(ModulePass):
    """Sum f32 reductions in blocks of at most `block` elements, the block sums in f64 (see
    the module docstring). Required on the CPU: the backend runs it where a pipeline left it
    out; running it twice changes nothing."""

    name = "block-reductions"

    SEARCH_SPACE: ClassVar[dict[str, tuple[int, ...]]] = {"block": (64, 256, 1024)}
    """What `tune --space block-reductions` and `advise` try: the f32 block summed in f64."""

    block: int = 256

    def check_options(self) -> None:
        require(self.block >= 1, "block", self.block, "a positive number of elements")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.check_options()
        require_loop_level(op, "block-reductions", cpu=True)
        moved = [block_nest(chain, self.block) for chain in additive_nests(op)]
        if not any(moved):
            unchanged(self)


def innermost_reductions(module: ModuleOp) -> list[Operation]:
    """The combiner of every reduction loop that holds no other loop."""
    out = []
    for op in module.walk():
        if isinstance(op, scf.ForOp) and not any(
            isinstance(o, scf.ForOp | scf.ParallelOp) for o in op.body.walk()
        ):
            comb = combiner(op, from_identity=False)
            if comb is not None:
                out.append(comb)
    return out


@dataclass(frozen=True)
class ReassociateReductionsPass(ModulePass):
    """Mark the combiner of every innermost reduction loop `fastmath<reassoc>`, so that LLVM
    vectorizes it with partial results in vector registers (see the module docstring)."""

    name = "reassociate-reductions"
    is_optimization = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_loop_level(op, "reassociate-reductions", cpu=True)
        for comb in innermost_reductions(op):
            extremum = isinstance(comb, arith.MaximumfOp | arith.MinimumfOp)
            comb.properties["fastmath"] = REASSOC_NSZ if extremum else REASSOC
