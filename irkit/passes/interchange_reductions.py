"""interchange-reductions: a reduction over rows, one sum per column, as row updates.

A reduction whose kept axis is innermost and reduced axes outer (a global average pool over
NHWC, a squeeze-excite's mean over 56 x 56 pixels of 32 channels, a column sum) is lowered
one output element at a time: a parallel loop over the columns, each summing its column
down the rows,

    scf.parallel (..., %c) {
      %s = scf.for %p iter_args(%acc = init) { ... x[..., p, ..., c] ...; %acc' = %acc + ... }
      epilogue(%s); out[..., c] = ...
    }

which on the CPU is one dependent chain of scalar additions per column, each load a row
apart (a RegNet's squeeze-excite pool: 95 us for 100,352 elements, 3 GFLOP/s). This pass
turns the columns into the inner loop, the sums kept in a row on the stack:

    scf.parallel (...) {
      %row = memref.alloca() : memref<C x T>
      scf.for %c { %row[c] = init }
      scf.for %p { scf.for %c { %row[c] = %row[c] + ... x[..., p, ..., c] ... } }
      scf.for %c { %s = %row[c]; epilogue(%s); out[..., c] = ... }
    }

whose inner loops are contiguous and independent across columns, which LLVM vectorizes.
Each column's sum runs over the rows in the same order with the same operations: bit for
bit the result of the loop it replaces. An f32 sum of more than 256 elements is summed as
block-reductions sums one (which it would otherwise have done, and cannot once the sum is
a row): each block of at most 256 elements in f32 from zero, the blocks added in an f64
row, rounded to f32 once; the innermost loops whose trips multiply to at most 256 form the
block (a sum whose innermost loop alone is longer stays as it is, for block-reductions).

Applies to the last dimension of a parallel loop (constant bounds, at most `max-columns`
columns) whose body is index arithmetic, then one `scf.for` carrying scalars, or a perfect
nest of them (a pool's rows and columns), with constant bounds (the innermost body without
stores or regions), then what uses its results, over more than 64 trips (a smaller one is a
window, `unroll-windows`' to write out); anything else stays as it is. It runs before
`unroll-windows`, which would unroll a pool's rows into straight-line code. The outer dimensions stay parallel: a loop over the columns alone becomes
one sequential nest (the columns were what `cpu-parallelize` would have split).

Options:

    max-columns=4096   the most columns summed in one stack row
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from xdsl.context import Context
from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import (
    Float32Type,
    Float64Type,
    IndexType,
    MemRefType,
    ModuleOp,
    VectorType,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from irkit.errors import require
from irkit.ir import unchanged
from irkit.loops import combiner, constant_int, kernels, require_loop_level
from irkit.loops.costs import static_trips
from irkit.passes.loop_builder import LoopBuilder
from irkit.passes.reductions import BlockReductionsPass, block_plan
from irkit.passes.unroll_windows import UnrollWindowsPass

WINDOW_TRIPS = UnrollWindowsPass.max_trips
"""A reduction of at most this many trips is a convolution's or a small pool's window, which
`unroll-windows` writes out with its sums in registers (a depthwise 7 x 7 convolution's
kernel, vectorized across the channels, is faster so than as row updates on the stack)."""
BLOCK = BlockReductionsPass.block
"""block-reductions' block: an f32 sum of more elements is summed in f32 blocks of at most
this many, the blocks added in f64 (its accuracy bound, kept by the row form too)."""


@dataclass(frozen=True)
class InterchangeReductionsPass(ModulePass):
    """Column reductions as row updates on a stack row (see the module docstring).
    Optional: the result is bit-identical."""

    name = "interchange-reductions"
    is_optimization = True

    max_columns: int = 4096

    def check_options(self) -> None:
        require(
            0 < self.max_columns <= 65536,
            "max-columns",
            self.max_columns,
            "must be from 1 to 65536",
        )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.check_options()
        require_loop_level(op, "interchange-reductions", cpu=True)
        matched = False
        for fn in kernels(op):
            for loop in [o for o in fn.body.block.ops if isinstance(o, scf.ParallelOp)]:
                match = _match(loop, self.max_columns)
                if match is not None:
                    _interchange(loop, match, LoopBuilder(fn.body.block))
                    matched = True
        if not matched:
            unchanged(self)


class _Match(NamedTuple):
    columns: int
    head: list[Operation]
    """The index arithmetic before the reduction."""
    reduction: scf.ForOp
    tail: list[Operation]
    """What follows the reduction."""


def _match(loop: scf.ParallelOp, max_columns: int) -> _Match | None:
    """(columns, index arithmetic before the reduction, the reduction, what follows it)
    where `loop` is a column reduction this pass rewrites; None otherwise."""
    if loop.initVals:
        return None
    bounds = [constant_int(v) for v in (loop.lowerBound[-1], loop.upperBound[-1], loop.step[-1])]
    if bounds[0] != 0 or bounds[2] != 1 or bounds[1] is None or not 0 < bounds[1] <= max_columns:
        return None
    ops = list(loop.body.block.ops)[:-1]  # all but scf.reduce
    reductions = [i for i, o in enumerate(ops) if isinstance(o, scf.ForOp)]
    if len(reductions) != 1:
        return None
    at = reductions[0]
    head, reduction, tail = ops[:at], ops[at], ops[at + 1 :]
    assert isinstance(reduction, scf.ForOp)
    if not all(_plain(o) and all(isinstance(r.type, IndexType) for r in o.results) for o in head):
        return None
    if not reduction.iter_args or any(not _scalar(r.type) for r in reduction.results):
        return None
    nest = _perfect_nest(reduction)
    if nest is None:
        return None
    if any(isinstance(o, memref.StoreOp) or o.regions for o in nest[-1].body.block.ops):
        return None
    if math.prod(static_trips(*_bounds(loop)) for loop in nest) <= WINDOW_TRIPS:
        return None  # a window: unroll-windows keeps its sums in registers, straight-line
    if _needs_blocks(nest) and _block_start(nest) is None:
        return None  # the innermost loop alone is longer than a block: block-reductions' case
    if any(o.regions for o in tail):
        return None
    column = loop.body.block.args[-1]
    loads = [o for o in nest[-1].body.block.ops if isinstance(o, memref.LoadOp)]
    if not any(load.indices[-1] is column for load in loads):
        return None  # the columns are not what the reads run along: a row sum, say
    if any(column in list(load.indices)[:-1] for load in loads):
        return None
    return _Match(bounds[1], head, reduction, tail)


def _plain(op: Operation) -> bool:
    """An op with results that computes them from its operands alone (arith, not memory)."""
    return op.dialect_name() == "arith" and bool(op.results) and not op.regions


def _scalar(t: Attribute) -> bool:
    return not isinstance(t, VectorType | MemRefType)


def _bounds(loop: scf.ForOp) -> tuple[SSAValue, SSAValue, SSAValue]:
    return loop.lb, loop.ub, loop.step


def _needs_blocks(nest: list[scf.ForOp]) -> bool:
    """Whether the nest is an f32 sum of more than BLOCK elements, which block-reductions
    would have summed in f32 blocks added in f64 (the same accuracy is kept here)."""
    (acc, *more) = nest[-1].body.block.args[1:]
    return (
        not more
        and isinstance(acc.type, Float32Type)
        and isinstance(combiner(nest[-1], from_identity=False), arith.AddfOp)
        and math.prod(static_trips(*_bounds(loop)) for loop in nest) > BLOCK
    )


def _block_start(nest: list[scf.ForOp]) -> int | None:
    """The first loop of the block block-reductions would make of the nest (`block_plan`:
    the innermost loops whose trips multiply to at most BLOCK); None where it would split
    the innermost loop, alone longer than a block."""
    plan = block_plan(nest, BLOCK)
    return None if plan is None or plan[2] else plan[1]


def _perfect_nest(loop: scf.ForOp) -> list[scf.ForOp] | None:
    """`loop` and the loops nested in it, outermost first, where each holds only the next
    (which carries its accumulators and yields them back) and every bound is a constant (a
    pool's rows and columns); None otherwise."""
    nest = [loop]
    while True:
        if any(constant_int(v) is None for v in _bounds(nest[-1])):
            return None
        block = nest[-1].body.block
        inner = [o for o in block.ops if isinstance(o, scf.ForOp)]
        if not inner:
            return nest
        *others, last = list(block.ops)
        (child,) = inner if len(inner) == 1 else (None,)
        if (
            child is None
            or others != [child]
            or list(child.iter_args) != list(block.args[1:])
            or list(last.operands) != list(child.results)
        ):
            return None
        nest.append(child)


def _interchange(loop: scf.ParallelOp, match: _Match, b: LoopBuilder) -> None:
    """Replace `loop` by its row-update form (see the module docstring)."""
    old = loop.body.block
    outer = Block(arg_types=[IndexType()] * (len(old.args) - 1))
    b.block = outer
    _RowForm(loop, match, b, outer).build()
    parent = loop.parent_block()
    assert parent is not None
    if outer.args:
        outer.add_op(scf.ReduceOp())
        bounds = (list(loop.lowerBound[:-1]), list(loop.upperBound[:-1]), list(loop.step[:-1]))
        new = scf.ParallelOp(*bounds, Region(outer))
        new.attributes.update(loop.attributes)
        parent.insert_op_before(new, loop)
    else:  # the columns were the only dimension: the nest runs once
        for op in list(outer.ops):
            op.detach()
            parent.insert_op_before(op, loop)
    loop.detach()
    loop.erase(safe_erase=False)


class _RowForm:
    """Builds a column reduction's row updates into the builder's block (`outer`'s args
    stand for the loop's other dimensions)."""

    def __init__(self, loop: scf.ParallelOp, match: _Match, b: LoopBuilder, outer: Block):
        old = loop.body.block
        columns, self.head, reduction, self.tail = match
        self.column_iv, self.columns, self.b = old.args[-1], columns, b
        self.mapping: dict[SSAValue, SSAValue] = dict(zip(old.args[:-1], outer.args, strict=True))
        self.reduction = reduction
        nest = _perfect_nest(reduction)
        assert nest is not None
        self.nest = nest
        self.body = nest[-1].body.block
        yielded = self.body.last_op
        assert isinstance(yielded, scf.YieldOp)
        self.yielded = list(yielded.operands)
        self.types = [r.type for r in reduction.results]
        self.rows = [b.add(memref.AllocaOp.get(t, 64, [columns])) for t in self.types]
        self.blocked = _block_start(nest) if _needs_blocks(nest) else None
        self.wide = (
            b.add(memref.AllocaOp.get(Float64Type(), 64, [columns]))
            if self.blocked is not None
            else None
        )

    def build(self) -> None:
        b = self.b
        b.for_range(0, self.columns, 1, [], self.clear)
        self.over(0, [])
        b.for_range(0, self.columns, 1, [], self.finish)

    def at(self, column: SSAValue) -> dict[SSAValue, SSAValue]:
        """The mapping for one column: the index arithmetic before the reduction again."""
        local = {**self.mapping, self.column_iv: column}
        self.clone(self.head, local)
        return local

    def clone(self, ops: list[Operation], local: dict[SSAValue, SSAValue]) -> None:
        for op in ops:
            copy = op.clone(value_mapper=local)
            self.b.add(copy)
            local.update(zip(op.results, copy.results, strict=True))

    def clear(self, c: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        b, local = self.b, self.at(c)
        for row, init in zip(self.rows, self.reduction.iter_args, strict=True):
            start = local.get(init, init)
            if self.wide is not None:  # the f64 sum starts from the init, each block from 0
                b.add(memref.StoreOp.get(b.add(arith.ExtFOp(start, Float64Type())), self.wide, [c]))
            else:
                b.add(memref.StoreOp.get(start, row, [c]))
        return []

    def begin_block(self, c: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        self.b.add(memref.StoreOp.get(self.b.float(0.0, self.types[0]), self.rows[0], [c]))
        return []

    def end_block(self, c: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        b, wide = self.b, self.wide
        assert wide is not None
        part = b.add(arith.ExtFOp(b.add(memref.LoadOp.get(self.rows[0], [c])), Float64Type()))
        total = b.add(arith.AddfOp(b.add(memref.LoadOp.get(wide, [c])), part))
        b.add(memref.StoreOp.get(total, wide, [c]))
        return []

    def over(self, level: int, ivs: list[SSAValue], in_block: bool = False) -> None:
        """The reduction's loops, outermost first, with the columns' loop inside; around the
        block's loops (`blocked`), each block summed from zero and added to the f64 row."""
        b = self.b
        if level == self.blocked and not in_block:
            b.for_range(0, self.columns, 1, [], self.begin_block)
            self.over(level, ivs, True)
            b.for_range(0, self.columns, 1, [], self.end_block)
            return
        if level == len(self.nest):
            b.for_range(0, self.columns, 1, [], lambda c, _: self.update(ivs, c))
            return
        lo, hi, step = (constant_int(v) for v in _bounds(self.nest[level]))
        assert lo is not None and hi is not None and step is not None

        def inner(iv: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            self.over(level + 1, [*ivs, iv], in_block)
            return []

        b.for_range(lo, hi, step, [], inner)

    def update(self, ivs: list[SSAValue], c: SSAValue) -> list[SSAValue]:
        """One column's step of the reduction: its partial sums from the rows and back."""
        b, local = self.b, self.at(c)
        local.update((loop.body.block.args[0], iv) for loop, iv in zip(self.nest, ivs, strict=True))
        for arg, row in zip(self.body.args[1:], self.rows, strict=True):
            local[arg] = b.add(memref.LoadOp.get(row, [c]))
        self.clone(list(self.body.ops)[:-1], local)  # all but scf.yield
        for value, row in zip(self.yielded, self.rows, strict=True):
            b.add(memref.StoreOp.get(local.get(value, value), row, [c]))
        return []

    def finish(self, c: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        b, local = self.b, self.at(c)
        for result, row in zip(self.reduction.results, self.rows, strict=True):
            if self.wide is not None:  # rounded to f32 once, at the end
                total = b.add(memref.LoadOp.get(self.wide, [c]))
                local[result] = b.add(arith.TruncFOp(total, result.type))
            else:
                local[result] = b.add(memref.LoadOp.get(row, [c]))
        self.clone(self.tail, local)
        return []
