"""split-concat: a fused concatenation's loop split at the inputs' boundaries.

`lower-graph-to-loops` writes a concatenation inside a kernel as one loop over the output
that, for every element, loads from every input (its index clamped into that input) and
picks one by comparing the loop's index with the boundaries:

    %a = x0[..., min(max(c, 0), 15)]   %b = x1[..., min(max(c - 16, 0), 15)]
    %v = select(c < 16, %a, %b)

so each element costs a load per input: RegNet's concatenation of 16 grouped convolutions'
outputs (then bias and relu) ran at 0.6-3 GFLOP/s, one element in 16 loads; DenseNet's
concatenations are the same. This pass splits such a loop at the constants its index is
compared with: one loop per range, where every such comparison is a constant, each select
takes the one operand it can take, and the other inputs' loads, now unread, are erased.

Applies to each `scf.parallel` of a CPU kernel whose body compares one of its induction
variables (directly) with constants inside its range, into at most `max-pieces` ranges;
the pieces compute the very same elements with the same operations (exact).

Options:

    max-pieces=64     the most loops one is split into
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i1
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass

from irkit.errors import require
from irkit.ir import unchanged
from irkit.loops import constant_int, kernels, require_loop_level

_ORDER = {
    sign + name: test
    for name, test in (
        ("lt", operator.lt),
        ("le", operator.le),
        ("gt", operator.gt),
        ("ge", operator.ge),
    )
    for sign in "su"
}
"""The comparisons that are monotonic in x: decided over a range by its two ends."""
_SWAPPED = {p: p[0] + {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}[p[1:]] for p in _ORDER}
"""The comparison `c OP x` written as `x OP' c`."""


@dataclass(frozen=True)
class SplitConcatPass(ModulePass):
    """Split fused concatenations' loops at the inputs' boundaries (see the module
    docstring). Optional: the same elements, the same operations."""

    name = "split-concat"
    is_optimization = True

    max_pieces: int = 64

    def check_options(self) -> None:
        require(
            1 < self.max_pieces <= 1024, "max-pieces", self.max_pieces, "must be from 2 to 1024"
        )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.check_options()
        require_loop_level(op, "split-concat", cpu=True)
        moved = [
            _split(loop, self.max_pieces)
            for fn in kernels(op)
            for loop in [o for o in fn.body.block.ops if isinstance(o, scf.ParallelOp)]
        ]
        if not any(moved):
            unchanged(self)


def _comparison(op: arith.CmpiOp, iv: BlockArgument) -> tuple[str, int] | None:
    """(predicate, c) where `op` compares `iv` with the constant c, as `iv OP c`."""
    name = arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data]
    if name not in _ORDER:
        return None
    if op.lhs is iv and (c := constant_int(op.rhs)) is not None:
        return name, c
    if op.rhs is iv and (c := constant_int(op.lhs)) is not None:
        return _SWAPPED[name], c
    return None


def _points(loop: scf.ParallelOp, dim: int, lo: int, hi: int) -> list[int]:
    """Where the truth of the comparisons of induction variable `dim` with constants
    changes inside [lo, hi): the first value of each new range."""
    iv = loop.body.block.args[dim]
    points: set[int] = set()
    for op in loop.body.walk():
        if isinstance(op, arith.CmpiOp) and (found := _comparison(op, iv)) is not None:
            name, c = found
            test = _ORDER[name]
            points.update(x for x in (c, c + 1) if lo < x < hi and test(x - 1, c) != test(x, c))
    return sorted(points)


def _split(loop: scf.ParallelOp, max_pieces: int) -> bool:
    """Split `loop` along its first dimension with boundaries (see the module docstring);
    whether it did."""
    for dim in range(len(loop.body.block.args)):
        lo, hi, step = (
            constant_int(v) for v in (loop.lowerBound[dim], loop.upperBound[dim], loop.step[dim])
        )
        if lo is None or hi is None or step != 1:
            continue
        points = _points(loop, dim, lo, hi)
        if not points or len(points) + 1 > max_pieces:
            continue
        parent = loop.parent_block()
        assert parent is not None
        edges = [lo, *points, hi]
        starts = [_index(parent, loop, n) for n in edges]  # each edge's constant, made once
        rank = len(loop.body.block.args)
        for i, (a, b) in enumerate(zip(edges, edges[1:], strict=False)):
            piece = loop.clone()
            bounds = list(piece.operands)
            bounds[dim], bounds[rank + dim] = starts[i], starts[i + 1]
            piece.operands = bounds
            _fold(piece, dim, a, b)
            parent.insert_op_before(piece, loop)
        loop.detach()
        loop.erase(safe_erase=False)
        return True
    return False


def _index(parent: Block, before: Operation, n: int) -> SSAValue:
    """An index constant `n`, made before `before`."""
    const = arith.ConstantOp(IntegerAttr.from_index_int_value(n))
    parent.insert_op_before(const, before)
    return const.result


def _fold(piece: scf.ParallelOp, dim: int, lo: int, hi: int) -> None:
    """Decide the comparisons of induction variable `dim` over [lo, hi), take each select's
    operand, and erase what no longer has a reader."""
    iv = piece.body.block.args[dim]
    for op in list(piece.body.walk()):
        if isinstance(op, arith.CmpiOp) and (found := _comparison(op, iv)) is not None:
            name, c = found
            first, last = _ORDER[name](lo, c), _ORDER[name](hi - 1, c)
            if first == last:
                const = arith.ConstantOp(IntegerAttr(int(first), i1))
                block = op.parent_block()
                assert block is not None
                block.insert_op_before(const, op)
                op.results[0].replace_all_uses_with(const.result)
    for op in list(piece.body.walk()):
        if isinstance(op, arith.SelectOp):
            cond = constant_int(op.cond)
            if cond is not None:
                op.result.replace_all_uses_with(op.lhs if cond else op.rhs)
    _erase_unread(piece)


def _erase_unread(piece: scf.ParallelOp) -> None:
    """Erase the arithmetic and loads nothing reads, last first: a value's readers come
    after it, so each is gone before the ops it read are looked at."""
    for op in reversed(list(piece.body.walk())):
        if op.results and not any(r.uses for r in op.results) and _pure(op):
            op.detach()
            op.erase()


def _pure(op: Operation) -> bool:
    return (op.dialect_name() == "arith" or isinstance(op, memref.LoadOp)) and not op.regions
