"""delinearize-loops: a loop whose index is taken apart by constant divisions becomes a nest
of loops over the parts, so the parts are induction variables, not divisions.

An implicit-GEMM convolution (`conv-to-matmul{implicit=true}`) sums over k = (ky, kx, c) of
its window, flattened: the matmul's k loop reads the input at `[y * s + k / (KW * C),
x * s + k / C % KW, k % C]`. Every trip of that loop divides k twice and takes two
remainders per row of the register tile before its loads (a 7 x 7 stem conv over 3
channels: 147 trips, 6 rows, ~50 integer ops beside 12 FMAs a trip; 122 GFLOP/s on one
znver5 core where the same tile reaches 250 on a plain matmul). Here such a loop

    scf.for %k = 0 to 147 { ... %k / 3 ... %k % 3 ... %k / 3 / 7 ... %k / 3 % 7 ... }

becomes `for %a = 0 to 7 { for %b = 0 to 7 { for %c = 0 to 3 { ... } } }` with `%k % 3` ->
`%c`, `%k / 3 % 7` -> `%b`, `%k / 3 / 7` -> `%a`, and any other use of `%k` (B's row)
-> `(%a * 7 + %b) * 3 + %c`: the addresses are affine in the new induction variables, which
LLVM strength-reduces, and the innermost short loop unrolls.

What is taken apart: `scf.for` from 0 by 1 to a constant N carrying anything, whose index
is divided (`arith.divui`) or reduced (`arith.remui`) by one constant r > 1 at its own
level, the quotients likewise at the next level, and so on, the product of the radices
dividing N; the divisions are in the loop's own body. The iterations run in the same order
with the same body: bit-identical results.

Options:
    min-trips=2      leave loops with fewer trips alone
    unroll-inner=4   the innermost new loop, where it has at most this many trips, is
                     unrolled (a stem conv's 3 channels: a 3-trip loop LLVM left rolled)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from irkit.errors import require
from irkit.ir import unchanged
from irkit.loops import constant_int, require_loop_level


@dataclass(frozen=True)
class Level:
    """One digit of the index: its radix, the values equal to the index divided by the
    radices below it (`quotients`), and the remainders by this radix (`digits`)."""

    radix: int
    quotients: list[SSAValue]
    digits: list[arith.RemUIOp]
    divisions: list[arith.DivUIOp]


def _levels(loop: scf.ForOp, trips: int) -> list[Level]:
    """The index's digits, innermost first (see the module docstring); [] where it has none."""
    body = loop.body.block
    levels: list[Level] = []
    values: list[SSAValue] = [body.args[0]]
    product = 1
    while True:
        users = [u.operation for v in values for u in v.uses]
        parts = [op for op in users if isinstance(op, arith.DivUIOp | arith.RemUIOp)
                 and op.lhs in values and op.parent_block() is body]  # fmt: skip
        radices = {constant_int(op.rhs) for op in parts}
        if not parts or len(radices) != 1:
            return levels
        (radix,) = radices
        if radix is None or radix < 2 or trips % (product * radix):
            return levels
        divisions = [op for op in parts if isinstance(op, arith.DivUIOp)]
        digits = [op for op in parts if isinstance(op, arith.RemUIOp)]
        levels.append(Level(radix, values, digits, divisions))
        product *= radix
        values = [op.result for op in divisions]
        if not values:
            return levels


@dataclass
class Delinearize(RewritePattern):
    min_trips: int
    unroll_inner: int

    @op_type_rewrite_pattern
    def match_and_rewrite(self, loop: scf.ForOp, rewriter: PatternRewriter) -> None:
        lb, ub, step = (constant_int(v) for v in (loop.lb, loop.ub, loop.step))
        if lb != 0 or step != 1 or ub is None or ub < self.min_trips or loop.attributes:
            return
        levels = _levels(loop, ub)
        if not levels:
            return
        radices = [level.radix for level in levels]
        top = ub // prod(radices)
        # loops outermost first: the top quotient (where it has trips), then the digits
        trips = ([top] if top > 1 else []) + radices[::-1]
        body = loop.body.block

        def clone(block: Block, ivs: list[SSAValue], carried: list[SSAValue]) -> list[SSAValue]:
            placed: list[SSAValue | None] = list(ivs) if top > 1 else [None, *ivs]
            return _clone_body(block, body, levels, placed, carried)

        def build(depth: int, carried: list[SSAValue], ivs: list[SSAValue]) -> Block:
            block = Block(arg_types=[IndexType(), *(v.type for v in carried)])
            iv, *args = block.args
            values: list[SSAValue] = list(args)
            ivs = [*ivs, iv]
            last = depth + 2 == len(trips)
            if last and trips[-1] <= self.unroll_inner:  # the innermost loop, unrolled
                for i in range(trips[-1]):
                    index = arith.ConstantOp(IntegerAttr(i, IndexType()))
                    block.add_op(index)
                    values = clone(block, [*ivs, index.result], values)
            elif depth + 1 < len(trips):

                def deeper(c: list[SSAValue], d: int = depth, i: list[SSAValue] = ivs) -> Block:
                    return build(d + 1, c, i)

                inner = _for(block.add_op, trips[depth + 1], values, deeper)
                block.add_op(inner)
                values = list(inner.results)
            else:
                values = clone(block, ivs, values)
            block.add_op(scf.YieldOp(*values))
            return block

        outer = _for(rewriter.insert, trips[0], list(loop.iter_args), lambda c: build(0, c, []))
        rewriter.replace(loop, outer, outer.results)


def _for(emit: Callable[[Operation], object], trips: int, carried: list[SSAValue],
         body: Callable[[list[SSAValue]], Block]) -> scf.ForOp:  # fmt: skip
    """`scf.for %i = 0 to trips` carrying `carried`, its block from `body(carried)`; its
    bounds' constants go to `emit`, the loop is the caller's to place."""
    zero, bound, one = (arith.ConstantOp(IntegerAttr(n, IndexType())) for n in (0, trips, 1))
    for op in (zero, bound, one):
        emit(op)
    return scf.ForOp(zero.result, bound.result, one.result, carried, body(carried))


def _clone_body(
    block: Block,
    body: Block,
    levels: list[Level],
    ivs: list[SSAValue | None],
    carried: list[SSAValue],
) -> list[SSAValue]:
    """The original body into `block`, returning what it yields: its remainders by level
    are the digit loops' induction variables, its quotients the digits above recomposed
    (the top quotient the outermost loop's, or 0 where it has one trip), the index itself
    all of them."""
    top, *digits_outer_first = ivs
    digit_ivs: list[SSAValue] = [d for d in digits_outer_first[::-1] if d is not None]
    assert len(digit_ivs) == len(levels)  # innermost first, as `levels`
    values: dict[SSAValue, SSAValue] = dict(zip(body.args[1:], carried, strict=True))
    # the value of each level's quotient, from the top down: q_L = top, q_i = q_{i+1} r_i + d_i
    if top is None:
        zero = arith.ConstantOp(IntegerAttr(0, IndexType()))
        block.add_op(zero)
        top = zero.result
    quotient = top
    recomposed: list[SSAValue] = [quotient]
    for level, digit in zip(levels[::-1], digit_ivs[::-1], strict=True):
        radix = arith.ConstantOp(IntegerAttr(level.radix, IndexType()))
        scaled = arith.MuliOp(quotient, radix.result)
        quotient_op = arith.AddiOp(scaled.result, digit)
        for new_op in (radix, scaled, quotient_op):
            block.add_op(new_op)
        quotient = quotient_op.result
        recomposed.append(quotient)
    recomposed = recomposed[::-1]  # recomposed[i]: the index over the radices below level i
    skip: set[Operation] = set()
    for i, level in enumerate(levels):
        for value in level.quotients:
            values[value] = recomposed[i]
        for remainder in level.digits:
            values[remainder.result] = digit_ivs[i]
            skip.add(remainder)
        for division in level.divisions:
            values[division.result] = recomposed[i + 1]
            skip.add(division)
    for op in body.ops:
        if op in skip:
            continue
        if isinstance(op, scf.YieldOp):
            return [values.get(v, v) for v in op.operands]
        block.add_op(op.clone(value_mapper=values))
    raise AssertionError("an scf.for body ends in scf.yield")


@dataclass(frozen=True)
class DelinearizeLoopsPass(ModulePass):
    """Split loops whose index is taken apart by constant divisions into nests over the
    parts (see the module docstring). Optional: the same body in the same order."""

    name = "delinearize-loops"
    is_optimization = True

    SEARCH_SPACE: ClassVar[dict[str, tuple[int, ...]]] = {"unroll-inner": (1, 2, 4, 8)}
    """What `tune --space delinearize-loops` and `advise` try: the innermost unroll."""

    min_trips: int = 2
    unroll_inner: int = 4

    def check_options(self) -> None:
        require(1 <= self.min_trips <= 1 << 30, "min-trips", self.min_trips,
                "must be from 1 to 1073741824")  # fmt: skip
        require(0 <= self.unroll_inner <= 64, "unroll-inner", self.unroll_inner,
                "must be from 0 to 64")  # fmt: skip

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_loop_level(op, "delinearize-loops")
        walker = PatternRewriteWalker(Delinearize(self.min_trips, self.unroll_inner))
        if not walker.rewrite_module(op):
            unchanged(self)
