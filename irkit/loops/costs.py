"""Static costs of a loop-level kernel: floating-point operations and minimum bytes moved.

FLOPs are counted from the IR as built: each floating-point arithmetic op (add, sub, mul,
div, min/max, and each math function) counts 1, an fma 2, times the trip counts of the loops
around it (static bounds). Both sides of a conditional are counted as taken. So the count is
of the work the kernel *executes*, recomputation included; a matmul's loops give 2*M*N*K.

Minimum bytes are the sizes of the kernel's input and output buffers (each read or written
once); scratch buffers are not counted, since a perfect kernel would keep them on chip.
These two numbers place a kernel on the roofline.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from xdsl.dialects import arith, func, scf, vector
from xdsl.dialects.builtin import MemRefType, VectorType
from xdsl.ir import BlockArgument, Operation, SSAValue
from xdsl.traits import SymbolTable

from irkit.dtypes import numpy_dtype
from irkit.loops import SCRATCH_ATTR, constant_int, is_scalar_function, logical_shape
from irkit.loops.scalar_ops import flops_per_element


def _flops_of(op: Operation) -> int:
    """FLOPs of one execution of `op`: per element, times the lanes of a vector result."""
    per = flops_per_element(op)
    if per is None:
        if isinstance(op, vector.FMAOp):
            per = 2
        elif op.dialect_name() == "math" and op.results:
            per = 1
        else:
            return 0
    if per == 0:
        return 0
    t = op.results[0].type
    lanes = 1
    if isinstance(t, VectorType):
        lanes, t = math.prod(t.get_shape()), t.element_type
    return per * lanes if t.name in ("f16", "bf16", "f32", "f64") else 0


def static_trips(lb: SSAValue, ub: SSAValue, step: SSAValue) -> int:
    lo, hi, st = constant_int(lb), constant_int(ub), constant_int(step)
    if lo is None or hi is None or st is None or st <= 0:
        raise ValueError("loop bounds are not static constants")
    return max(0, math.ceil((hi - lo) / st))


def _upper(value: SSAValue) -> int | None:
    """A static upper bound of an index value, or None: constants, min with a bounded side,
    sums, differences (of the non-negative indices loops compute: at most the minuend) and
    loop induction variables (below their loop's bound)."""
    c = constant_int(value)
    if c is not None:
        return c
    op = value.owner
    if isinstance(op, arith.MinSIOp | arith.MinUIOp):
        sides = [b for b in (_upper(v) for v in op.operands) if b is not None]
        return min(sides) if sides else None
    if isinstance(op, arith.AddiOp):
        a, b = (_upper(v) for v in op.operands)
        return None if a is None or b is None else a + b
    if isinstance(op, arith.MaxSIOp | arith.MaxUIOp):
        a, b = (_upper(v) for v in op.operands)
        return None if a is None or b is None else max(a, b)
    if isinstance(op, arith.SubiOp):
        return _upper(op.lhs)
    if isinstance(op, arith.DivUIOp | arith.FloorDivSIOp):
        a, d = _upper(op.lhs), constant_int(op.rhs)
        return None if a is None or not d or d < 0 else a // d
    if isinstance(value, BlockArgument):
        loop = value.owner.parent_op()
        if isinstance(loop, scf.ForOp) and value is loop.body.block.args[0]:
            hi = _upper(loop.ub)
            return None if hi is None else hi - 1
        if isinstance(loop, scf.ParallelOp) and value.index < len(loop.upperBound):
            hi = _upper(loop.upperBound[value.index])
            return None if hi is None else hi - 1
    return None


def _trips(lb: SSAValue, ub: SSAValue, step: SSAValue) -> int:
    """Static trips, or for a bound known only at run time, at most (`_upper`, a lower bound
    known only at run time taken as 0: the loops' indices are never negative): a causal
    attention's loops over the keys a query may see count every key."""
    try:
        return static_trips(lb, ub, step)
    except ValueError:
        lo, hi, st = constant_int(lb) or 0, _upper(ub), constant_int(step)
        if lo is None or hi is None or st is None or st <= 0:
            raise
        return max(0, math.ceil((hi - lo) / st))


def _trip_count(op: Operation) -> int:
    if isinstance(op, scf.ForOp):
        return _trips(op.lb, op.ub, op.step)
    if isinstance(op, scf.ParallelOp):
        bounds = zip(op.lowerBound, op.upperBound, op.step, strict=True)
        return math.prod(_trips(lb, ub, st) for lb, ub, st in bounds)
    return 1


def _executed(
    op: Operation, per_op: Callable[[Operation], int], called: dict[str, int] | None = None
) -> int:
    """`per_op` summed over every execution of `op` and of everything nested in it, a call
    of a scalar function as the function's ops (inlined, the call is gone; its constants
    are hoisted out of the loop, made once as they were when expansions were inline)."""
    called = {} if called is None else called  # a scalar function's count, by name
    inner = sum(
        _executed(o, per_op, called)
        for region in op.regions
        for block in region.blocks
        for o in block.ops
    )
    if isinstance(op, func.CallOp):
        name = op.callee.root_reference.data
        if name not in called:
            callee = SymbolTable.lookup_symbol(op, op.callee)
            called[name] = -1
            if callee is not None and is_scalar_function(callee):
                body = callee.regions[0].blocks[0].ops
                called[name] = sum(
                    _executed(o, per_op, called)
                    for o in body
                    if not isinstance(o, arith.ConstantOp | func.ReturnOp)
                )
        if called[name] >= 0:
            return called[name]  # the call itself is gone once inlined
    return per_op(op) + _trip_count(op) * inner


def count_flops(op: Operation) -> int:
    """Floating-point operations executed by `op` and everything nested in it."""
    return _executed(op, _flops_of)


def count_ops(op: Operation) -> int:
    """Operations executed by `op` and everything nested in it (each op once per execution,
    loop and yield ops included): a static measure of its work, whatever the op."""
    return _executed(op, lambda _: 1)


def buffer_bytes(t: MemRefType) -> int:
    return math.prod(t.get_shape()) * numpy_dtype(t.element_type).itemsize


def min_bytes(fn: func.FuncOp, scratch_attr: str = SCRATCH_ATTR) -> int:
    """Bytes of the non-scratch buffer arguments the kernel uses: the least it must move
    (of a buffer with a padded leading dimension, its logical elements only)."""

    attrs = fn.arg_attrs.data if fn.arg_attrs else [None] * len(fn.function_type.inputs.data)
    total = 0
    for i, (arg, d) in enumerate(zip(fn.body.block.args, attrs, strict=True)):
        t = arg.type
        if (
            isinstance(t, MemRefType)
            and arg.uses
            and not (d is not None and scratch_attr in d.data)
        ):  # a padded buffer's padding is never touched: its logical shape counts
            total += math.prod(logical_shape(fn, i)) * numpy_dtype(t.element_type).itemsize
    return total
