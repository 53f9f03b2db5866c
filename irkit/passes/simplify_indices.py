"""simplify-indices: index arithmetic that undoes itself, folded with the loops' bounds.

A reshape or view read inside a kernel linearizes the element's index and takes it apart
again by constant divisions: the GELU after a ViT block's matmul, `[197, 768]` read through
a reshape of the same shape, computes `r = i * 768 + j`, then `r / 768 % 197` and `r % 768`.
Over a loop whose bounds are the static 197 and 768, LLVM proves that is `(i, j)` and
vectorizes along `j`; once `cpu-parallelize` outlines the loop into chunks of `i` with
run-time bounds, it cannot, and the kernel runs scalar: ViT's GELU kernels ran 8x slower on
two threads than on one (29 -> 225 us on a znver5 VM). Here, with each index value's range
known from the loops' constant bounds (`scf.parallel` and `scf.for` induction variables, the
constants, sums, differences, products, quotients, remainders and the signed minimum and
maximum a window's clamped index takes), by a constant c > 0:

    (a * c + b) / c  ->  a          (a * c + b) % c  ->  b          where 0 <= b < c
    x / c            ->  0          x % c            ->  x          where 0 <= x < c

and `x + 0`, `x * 1`, `x * 0` fold. Index values are unsigned here (loop indices from 0).
The same values: no change to any result.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp
from xdsl.ir import Block, BlockArgument, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from irkit.loops import constant_int, require_loop_level

Range = tuple[int, int]
"""The smallest and largest value an index may take."""


def value_range(value: SSAValue, depth: int = 0, memo: dict | None = None) -> Range | None:
    """The range of an index value, where the ops that compute it from constants and loop
    induction variables with constant bounds tell it; None where they do not. `memo` keeps
    each value's range once found (a value's range never changes): a chain of sums that
    reuses its terms is walked once, not once per path."""
    if memo is None:
        memo = {}
    if value not in memo:
        memo[value] = _range(value, depth, memo)
    return memo[value]


def _range(value: SSAValue, depth: int, memo: dict) -> Range | None:
    if depth > 32 or not isinstance(value.type, IndexType):
        return None
    c = constant_int(value)
    if c is not None:
        return c, c
    if isinstance(value, BlockArgument):
        return _induction_range(value)
    op = value.owner
    if isinstance(op, arith.AddiOp | arith.SubiOp | arith.MuliOp | arith.MaxSIOp | arith.MinSIOp):
        a, b = value_range(op.lhs, depth + 1, memo), value_range(op.rhs, depth + 1, memo)
        if a is None or b is None:
            return None
        if isinstance(op, arith.AddiOp):
            return a[0] + b[0], a[1] + b[1]
        if isinstance(op, arith.SubiOp):
            return a[0] - b[1], a[1] - b[0]
        if isinstance(op, arith.MaxSIOp):  # a window's index clamped into its input
            return max(a[0], b[0]), max(a[1], b[1])
        if isinstance(op, arith.MinSIOp):
            return min(a[0], b[0]), min(a[1], b[1])
        products = [x * y for x in a for y in b]
        return min(products), max(products)
    if isinstance(op, arith.DivUIOp | arith.RemUIOp):
        a, c = value_range(op.lhs, depth + 1, memo), constant_int(op.rhs)
        if a is None or c is None or c <= 0 or a[0] < 0:
            return None
        if isinstance(op, arith.DivUIOp):
            return a[0] // c, a[1] // c
        return (a[0], a[1]) if a[1] < c else (0, c - 1)
    return None


def _induction_range(arg: BlockArgument) -> Range | None:
    """[lb, ub - 1] of an `scf.for` or `scf.parallel` induction variable with constant
    bounds and a positive step."""
    block = arg.owner
    assert isinstance(block, Block)
    loop = block.parent_op()
    if isinstance(loop, scf.ForOp) and arg.index == 0:
        bounds = [(loop.lb, loop.ub, loop.step)]
    elif isinstance(loop, scf.ParallelOp) and arg.index < len(loop.lowerBound):
        i = arg.index
        bounds = [(loop.lowerBound[i], loop.upperBound[i], loop.step[i])]
    else:
        return None
    lb, ub, step = (constant_int(v) for v in bounds[0])
    if lb is None or ub is None or step is None or step <= 0 or ub <= lb:
        return None
    return lb, lb + (ub - lb - 1) // step * step


def _within(value: SSAValue, bound: int, memo: dict) -> bool:
    """Whether 0 <= value < bound on every iteration."""
    r = value_range(value, 0, memo)
    return r is not None and r[0] >= 0 and r[1] < bound


def _split(value: SSAValue, c: int, memo: dict) -> tuple[SSAValue, SSAValue] | None:
    """(a, b) where `value` is `a * c + b` (either operand order) with 0 <= b < c."""
    op = value.owner
    if not isinstance(op, arith.AddiOp):
        return None
    for product, rest in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
        mul = product.owner
        if not isinstance(mul, arith.MuliOp):
            continue
        for a, k in ((mul.lhs, mul.rhs), (mul.rhs, mul.lhs)):
            if constant_int(k) == c and _within(rest, c, memo) and _within(a, 1 << 62, memo):
                return a, rest
    return None


class FoldDivRem(RewritePattern):
    def __init__(self) -> None:
        self.memo: dict[SSAValue, Range | None] = {}
        """Ranges found during one run of the pass (a value's range never changes)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: arith.DivUIOp | arith.RemUIOp, rewriter: PatternRewriter):
        if not isinstance(op, arith.DivUIOp | arith.RemUIOp):
            return
        c = constant_int(op.rhs)
        if c is None or c <= 0 or not isinstance(op.result.type, IndexType):
            return
        divide = isinstance(op, arith.DivUIOp)
        if _within(op.lhs, c, self.memo):
            if divide:
                zero = arith.ConstantOp(IntegerAttr(0, IndexType()))
                rewriter.replace(op, zero, [zero.result])
            else:
                rewriter.replace(op, [], [op.lhs])
            return
        parts = _split(op.lhs, c, self.memo)
        if parts is not None:
            rewriter.replace(op, [], [parts[0] if divide else parts[1]])


class FoldIdentities(RewritePattern):
    """`x + 0`, `x * 1` and `x * 0` on indices."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: arith.AddiOp | arith.MuliOp, rewriter: PatternRewriter):
        if not isinstance(op, arith.AddiOp | arith.MuliOp):
            return
        if not isinstance(op.result.type, IndexType):
            return
        for x, k in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            c = constant_int(k)
            if isinstance(op, arith.AddiOp) and c == 0 or isinstance(op, arith.MuliOp) and c == 1:
                rewriter.replace(op, [], [x])
                return
            if isinstance(op, arith.MuliOp) and c == 0:
                rewriter.replace(op, [], [k])
                return


class SimplifyIndicesPass(ModulePass):
    """Fold index arithmetic that undoes itself, with the loops' bounds (see the module
    docstring). Optional: the same values."""

    name = "simplify-indices"
    is_optimization = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_loop_level(op, "simplify-indices")
        patterns = GreedyRewritePatternApplier([FoldIdentities(), FoldDivRem()])
        PatternRewriteWalker(patterns).rewrite_module(op)
