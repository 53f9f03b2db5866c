"""unroll-windows: short reduction loops over channels-last data fully unrolled, so that the
kernel's innermost parallel loop (the channels) vectorizes.

A depthwise convolution in NHWC computes each output element as a sum over its window:
`for ky, kx: acc += in[n, y+ky, x+kx, c] * w[ky, kx, 0, c]`, inside the parallel loop over
(n, y, x, c). Every load of that sum is contiguous along `c`, the innermost parallel loop,
so the nest vectorizes across channels, but only once the window's loops are gone from the
element's body: LLVM unrolls a 3 x 3 window by itself (a 3 x 3 depthwise conv runs at 99
GFLOP/s on one znver5 core) and not a 7 x 7 one (ConvNeXt's: 4.5 GFLOP/s, 61% of the model).
This pass unrolls such loops at the loop level: an `scf.for` with constant bounds, at most
`max-trips` trips and `max-ops` ops once unrolled, inside an `scf.parallel`, whose body
stores nothing and whose every load reads its last axis at that parallel loop's last
induction variable plus terms independent of it (contiguous along it). Inner loops first, so a whole window becomes straight-line code.

Options:
    max-trips=64     the most trips of one loop
    max-ops=4096     the most ops a loop's unrolled body may hold

The same ops in the same order: bit-identical results. Row reductions (a load indexed by the
loop itself along the last axis) are left to the reduction passes.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, memref, scf, vector
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp
from xdsl.ir import Operation, SSAValue
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


@dataclass
class UnrollWindow(RewritePattern):
    max_trips: int
    max_ops: int

    @op_type_rewrite_pattern
    def match_and_rewrite(self, loop: scf.ForOp, rewriter: PatternRewriter) -> None:
        trips = _trips(loop)
        body = loop.body.block
        ops = list(body.ops)
        if (
            trips is None
            or not 0 < len(trips) <= self.max_trips
            or len(trips) * len(ops) > self.max_ops
            or loop.attributes
            or any(op.regions for op in ops)  # inner loops first
            or not _along_channels(loop, ops)
        ):
            return
        carried = list(loop.iter_args)
        for i in trips:
            index = arith.ConstantOp(IntegerAttr(i, IndexType()))
            rewriter.insert(index)  # before the loop
            values: dict[SSAValue, SSAValue] = {body.args[0]: index.result}
            values.update(zip(body.args[1:], carried, strict=True))
            for op in ops:
                if isinstance(op, scf.YieldOp):
                    carried = [values.get(v, v) for v in op.operands]
                    break
                rewriter.insert(op.clone(value_mapper=values))
        rewriter.replace(loop, [], carried)


def _trips(loop: scf.ForOp) -> range | None:
    lb, ub, step = (constant_int(v) for v in (loop.lb, loop.ub, loop.step))
    if lb is None or ub is None or step is None or step <= 0:
        return None
    return range(lb, ub, step)


def _unit_stride(value: SSAValue, channel: SSAValue) -> bool:
    """Whether `value` is `channel` plus terms that do not depend on it (a division or
    product by a constant 1, as the lowering writes a depthwise conv's group, counts as
    itself): consecutive channels read consecutive elements."""
    if value == channel:
        return True
    op = value.owner
    if isinstance(op, arith.AddiOp):
        a, b = op.lhs, op.rhs
        return (_unit_stride(a, channel) and not _depends(b, channel)) or (
            _unit_stride(b, channel) and not _depends(a, channel)
        )
    if isinstance(op, arith.DivUIOp | arith.DivSIOp | arith.MuliOp):
        return constant_int(op.rhs) == 1 and _unit_stride(op.lhs, channel)
    return False


def _depends(value: SSAValue, channel: SSAValue) -> bool:
    """Whether `value` is computed from `channel` (through the ops defining it)."""
    if value == channel:
        return True
    op = value.owner
    return isinstance(op, Operation) and any(_depends(v, channel) for v in op.operands)


def _along_channels(loop: scf.ForOp, ops: list[Operation]) -> bool:
    """Whether the loop sits in an `scf.parallel` whose last induction variable indexes the
    last axis of every load of the loop's body with unit stride, and the body stores
    nothing."""
    parent = loop.parent_op()
    while parent is not None and not isinstance(parent, scf.ParallelOp):
        parent = parent.parent_op()
    if parent is None:
        return False
    channel = parent.body.block.args[-1]
    loads = [op for op in ops if isinstance(op, memref.LoadOp | vector.LoadOp)]
    if not loads or any(isinstance(op, memref.StoreOp | vector.StoreOp) for op in ops):
        return False
    # a load of a rank-0 buffer (a scalar operand) has no last axis to run along
    return all(op.indices and _unit_stride(list(op.indices)[-1], channel) for op in loads)


@dataclass(frozen=True)
class UnrollWindowsPass(ModulePass):
    """Unroll short channels-last reduction loops (see the module docstring). Optional: the
    same ops in the same order."""

    name = "unroll-windows"
    is_optimization = True

    max_trips: int = 64
    max_ops: int = 4096

    def check_options(self) -> None:
        require(1 <= self.max_trips <= 4096, "max-trips", self.max_trips, "must be from 1 to 4096")
        require(1 <= self.max_ops <= 1 << 20, "max-ops", self.max_ops, "must be from 1 to 1048576")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_loop_level(op, "unroll-windows")
        if not PatternRewriteWalker(UnrollWindow(self.max_trips, self.max_ops)).rewrite_module(op):
            unchanged(self)
