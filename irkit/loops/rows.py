"""Rows of a loop-level kernel: which nests share their leading (row) extents, and an exact
proof that every buffer element the kernel writes is written and read by one row only.

A kernel of softmax or layer_norm is several `scf.parallel` nests, one per materialized
value (the row maxima, the row sums, the output). When every nest's leading extents count the
same rows and the proof holds, the nests may run row by row: all phases of one row, then the
next. `map-to-gpu` gives each row a block of threads; `cpu-fuse-rows` runs each row's phases
in one iteration of one parallel loop, so a row stays in the L1 cache between phases.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects import arith, func, memref, scf, vector
from xdsl.dialects.builtin import IntegerAttr, MemRefType
from xdsl.ir import Operation, SSAValue

from irkit.errors import IrkitError
from irkit.ir import shape_of
from irkit.loops import combiner, constant_value

MAX_CHECKED_POINTS = 1 << 24
"""Largest iteration domain the rows-mapping proof evaluates; beyond it, flat mapping."""


@dataclass
class Nest:
    """One unit of a kernel's work: a `scf.parallel` nest, or a run of plain ops (rank 0)."""

    ops: list[Operation]
    extents: tuple[int, ...] = ()
    ivs: tuple[SSAValue, ...] = ()
    body: list[Operation] = field(default_factory=list)
    reduction: scf.ForOp | None = None

    @property
    def points(self) -> int:
        return math.prod(self.extents)


def nests_of(fn: func.FuncOp, what: str) -> tuple[list[arith.ConstantOp], list[Nest]]:
    """A kernel's top-level constants, and its work as nests in order (`what`: the pass
    asking, named in the error for a `scf.parallel` without constant bounds)."""
    constants: list[arith.ConstantOp] = []
    nests: list[Nest] = []
    bare: list[Operation] = []

    def flush() -> None:
        if bare:
            nests.append(Nest(list(bare), body=list(bare)))
            bare.clear()

    for op in fn.body.block.ops:
        if isinstance(op, arith.ConstantOp):
            constants.append(op)
        elif isinstance(op, func.ReturnOp):
            break
        elif isinstance(op, scf.ParallelOp):
            flush()
            bounds = [*op.lowerBound, *op.upperBound, *op.step]
            values = [constant_value(v) for v in bounds]
            n = len(op.upperBound)
            if (
                any(v is None for v in values)
                or any(values[i] != 0 for i in range(n))
                or any(values[2 * n + i] != 1 for i in range(n))
            ):
                raise IrkitError(
                    f"{what}: @{fn.sym_name.data} has a scf.parallel without constant "
                    "zero-based unit-step bounds"
                )
            body = [o for o in op.body.block.ops if not isinstance(o, scf.ReduceOp)]
            nests.append(
                Nest(
                    [op],
                    tuple(int(v or 0) for v in values[n : 2 * n]),
                    tuple(op.body.block.args),
                    body,
                )
            )
        else:
            bare.append(op)
    flush()
    for nest in nests:
        nest.reduction = block_reduction(nest)
    return constants, nests


def _depends_on(value: SSAValue, target: SSAValue, seen: set[SSAValue] | None = None) -> bool:
    if value is target:
        return True
    seen = seen if seen is not None else set()
    if value in seen or not isinstance(value.owner, Operation):
        return False
    seen.add(value)
    return any(_depends_on(v, target, seen) for v in value.owner.operands)


def block_reduction(nest: Nest) -> scf.ForOp | None:
    """The nest's reduction loop when a block of threads can share it: the only loop in the
    nest, zero-based with unit step, combined by a COMBINER, and not a contraction (a loop
    reading two buffers along its index, like matmul, is better one output per thread)."""
    loops = [op for op in nest.body if isinstance(op, scf.ForOp)]
    nested = [o for op in nest.body for o in op.walk() if isinstance(o, scf.ForOp | scf.ParallelOp)]
    if len(loops) != 1 or len(nested) != 1:
        return None
    loop = loops[0]
    if (
        constant_value(loop.lb) != 0
        or constant_value(loop.step) != 1
        or constant_value(loop.ub) is None
    ):
        return None
    if combiner(loop) is None:
        return None
    iv = loop.body.block.args[0]
    streamed = {
        o.memref
        for o in loop.walk()
        if isinstance(o, memref.LoadOp) and any(_depends_on(i, iv) for i in o.indices)
    }
    return loop if len(streamed) <= 1 else None


class _NotEvaluable(Exception):
    pass


_INT_OPS = {
    arith.AddiOp: np.add,
    arith.SubiOp: np.subtract,
    arith.MuliOp: np.multiply,
    arith.DivUIOp: np.floor_divide,
    arith.RemUIOp: np.remainder,
    arith.MaxSIOp: np.maximum,
    arith.MinSIOp: np.minimum,
}


def _evaluate(value: SSAValue, env: dict[SSAValue, np.ndarray]) -> np.ndarray:
    """An index value over the whole iteration domain (numpy broadcasting)."""
    if value in env:
        return env[value]
    op = value.owner
    if not isinstance(op, Operation):
        raise _NotEvaluable("a block argument")
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, IntegerAttr):
        out = np.array(op.value.value.data, dtype=np.int64)
    elif type(op) in _INT_OPS:
        a, b = (_evaluate(v, env) for v in op.operands)
        out = _INT_OPS[type(op)](a, b)
    elif isinstance(op, arith.IndexCastOp):
        out = _evaluate(op.operands[0], env)
    else:
        raise _NotEvaluable(getattr(op, "name", "a block argument"))
    env[value] = out
    return out


def _domain(nest: Nest, op: Operation) -> dict[SSAValue, np.ndarray] | None:
    """Index arrays for the nest's ivs and the loop ivs around `op`, broadcastable over the
    domain; None when the domain is too large to evaluate."""
    loops = []
    parent = op.parent_op()
    while parent is not None and parent not in nest.ops:
        if isinstance(parent, scf.ForOp):
            lb, ub = constant_value(parent.lb), constant_value(parent.ub)
            if lb is None or ub is None or constant_value(parent.step) != 1:
                raise _NotEvaluable("a loop with non-constant bounds")
            loops.append((parent.body.block.args[0], int(lb), int(ub)))
        parent = parent.parent_op()
    axes = [(iv, 0, e) for iv, e in zip(nest.ivs, nest.extents, strict=True)] + loops
    if math.prod(hi - lo for _, lo, hi in axes) > MAX_CHECKED_POINTS:
        return None
    env = {}
    for k, (iv, lo, hi) in enumerate(axes):
        shape = [1] * len(axes)
        shape[k] = hi - lo
        env[iv] = np.arange(lo, hi, dtype=np.int64).reshape(shape)
    return env


_STORES = (memref.StoreOp, vector.StoreOp)
_LOADS = (memref.LoadOp, vector.LoadOp)


def _access(op: Operation) -> tuple[SSAValue, list[SSAValue], int, bool] | None:
    """(buffer, indices, lanes, is a store) of a scalar or vector memory access."""
    if isinstance(op, memref.StoreOp | memref.LoadOp):
        return op.memref, list(op.indices), 1, isinstance(op, memref.StoreOp)
    if isinstance(op, vector.StoreOp | vector.LoadOp):
        lanes = math.prod(shape_of(op.vector if isinstance(op, vector.StoreOp) else op.result))
        return op.base, list(op.indices), lanes, isinstance(op, vector.StoreOp)
    return None


def rows_legal(nests: Sequence[Nest], prefixes: Sequence[int]) -> bool:
    """Whether each element of every buffer the kernel writes is written and read by one row
    only (exactly, over the iteration domain), so blocks need no synchronization. Vector
    accesses count every lane (a tiled transpose writes its output by vector stores: a row
    reading it must find each element written by its own row)."""
    accesses = []
    for nest, p in zip(nests, prefixes, strict=True):
        for top in nest.body:
            for op in top.walk():
                found = _access(op)
                if found is not None:
                    accesses.append((nest, p, op, *found))
    written = {buf for *_, buf, _, _, store in accesses if store}
    owner: dict[SSAValue, np.ndarray] = {}
    try:
        for want_store in (True, False):
            for nest, p, op, buf, indices, lanes, store in accesses:
                if store != want_store or buf not in written:
                    continue
                env = _domain(nest, op)
                if env is None:
                    return False
                t = buf.type
                assert isinstance(t, MemRefType)
                shape = t.get_shape()
                strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
                flat = sum(
                    (_evaluate(i, env) * s for i, s in zip(indices, strides, strict=True)),
                    np.zeros((), np.int64),
                )
                row = np.zeros((), np.int64)
                for iv, e in zip(nest.ivs[:p], nest.extents[:p], strict=True):
                    row = row * e + env[iv]
                flat, row = np.broadcast_arrays(flat, row)
                if lanes > 1:  # the lanes run along the last axis, contiguous
                    flat = flat[..., None] + np.arange(lanes)
                    row = np.broadcast_to(row[..., None], flat.shape)
                table = owner.setdefault(buf, np.full(math.prod(shape), -1, np.int64))
                if store:
                    if np.any((table[flat] != -1) & (table[flat] != row)):
                        return False
                    table[flat.ravel()] = row.ravel()
                    # two rows storing one element in the same nest
                    if np.any(table[flat] != row):
                        return False
                elif np.any((table[flat] != -1) & (table[flat] != row)):
                    return False
    except _NotEvaluable:
        return False
    return True


def row_prefixes(nests: Sequence[Nest], any_loops: bool = False) -> list[int] | None:
    """For each nest, how many leading extents make up the row (their product is the same
    for all nests, the points of the first reduction nest); None when the nests do not share
    rows. A nest holding a loop must be whole rows and, unless `any_loops` (one thread runs
    a row, and any nest with a loop counts as a reduction), hold a `block_reduction` (a block
    of threads shares a row on the GPU)."""

    def has_loop(nest: Nest) -> bool:
        return any(isinstance(o, scf.ForOp) for top in nest.body for o in top.walk())

    reducing = [n for n in nests if n.reduction is not None or (any_loops and has_loop(n))]
    if not reducing:
        return None
    rows = reducing[0].points
    prefixes = []
    for nest in nests:
        if nest.reduction is not None or (any_loops and has_loop(nest)):
            if nest.points != rows:
                return None
            prefixes.append(len(nest.extents))
            continue
        if has_loop(nest):
            return None
        p = next(
            (k for k in range(len(nest.extents) + 1) if math.prod(nest.extents[:k]) == rows),
            None,
        )
        if p is None:
            return None
        prefixes.append(p)
    return prefixes
