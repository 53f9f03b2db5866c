"""Which values of a kernel's group of graph ops are materialized (stored in a buffer) and
which are computed inline where they are read (`irkit.passes.kernel_emitter`'s module
docstring tells the scheme)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.ir import Operation, SSAValue

from irkit.dialects import graph as g
from irkit.dtypes import is_fp8, is_integer
from irkit.ir import shape_of

dtype_of = g.element_type_of


_REUSING_OPS = (g.MatmulOp, g.BatchMatmulOp, g.Conv2dOp, g.Im2colOp, g.Pool2dOp)
_VIEW_OPS = (g.ReshapeOp, g.TransposeOp, g.SliceOp)


def reads_repeatedly(user: Operation, operand_index: int) -> bool:
    """Whether `user` reads elements of this operand more than once per result it computes."""
    if isinstance(user, _REUSING_OPS):
        return True
    if isinstance(user, g.BinaryOp):
        operand = user.operands[operand_index]
        return math.prod(shape_of(operand)) < math.prod(shape_of(user.results[0]))
    return False


def is_view(value: SSAValue, inside: set[Operation]) -> bool:
    """A reshape/transpose/slice chain over a buffer (a value from outside the kernel)."""
    op = value.owner
    if not isinstance(op, Operation) or op not in inside:
        return True
    if isinstance(op, g.ConstantOp):
        return True
    implicit = isinstance(op, g.Im2colOp) and g.IMPLICIT_ATTR in op.attributes
    return (isinstance(op, _VIEW_OPS) or implicit) and is_view(op.operands[0], inside)


def widened_view(value: SSAValue, inside: set[Operation]) -> bool:
    """An 8-bit float view cast to a wider float (`scaled_matmul`'s operands): read where it
    is needed, widened as it is loaded (exactly), as a narrow matmul's operands are; a copy
    in the wide type would only add its stores and loads, at four times the bytes."""
    op = value.owner
    if not (isinstance(op, g.CastOp) and op in inside and is_view(op.input, inside)):
        return False
    return is_fp8(dtype_of(op.input)) and not is_integer(dtype_of(value))


TRANSCENDENTAL_OPS = (g.ExpOp, g.TanhOp, g.ErfOp, g.LogOp, g.SigmoidOp, g.GeluOp)
"""Elementwise ops worth storing rather than recomputing when read twice (on the CPU)."""


def materialized_values(
    ops: Sequence[Operation], outputs: Sequence[SSAValue], keep_transcendentals: bool = False
) -> list[SSAValue]:
    """The values of `ops` the kernel stores, in dataflow order (outputs included); with
    `keep_transcendentals`, also a transcendental value read by two or more of its ops.
    Then, so that a fused kernel never does more work than its parts (`_shared_work`), a
    reduction, or with `keep_transcendentals` an expression holding a transcendental, that
    would be computed in two or more places."""
    inside = set(ops)
    keep: list[SSAValue] = []
    for op in ops:
        if isinstance(op, g.ConstantOp) or not op.results:
            continue
        v = op.results[0]
        readers = {u.operation for u in v.uses if u.operation in inside}
        reused = any(
            u.operation in inside and reads_repeatedly(u.operation, u.index) for u in v.uses
        ) or (keep_transcendentals and isinstance(op, TRANSCENDENTAL_OPS) and len(readers) > 1)
        if v in outputs or (reused and not is_view(v, inside) and not widened_view(v, inside)):
            keep.append(v)
    shared = _shared_work(ops, set(keep), keep_transcendentals)
    return [r for op in ops for r in op.results[:1] if r in shared or r in keep]


_REDUCTIONS = (g.ReduceOp, g.GlobalAvgPoolOp)


def _shared_work(
    ops: Sequence[Operation], stored: set[SSAValue], keep_transcendentals: bool
) -> set[SSAValue]:
    """Values computed inline in two or more places that are worth a store and loads.

    A value not stored is computed where it is read: in the nest of each stored value whose
    expression holds it, and inside the loop of each reduction reading it (the emitter
    computes a value once per nest and index, not across them). ConvNeXt v2's GRN fused
    with the GELU before it computed the GELU three times and each channel's spatial L2
    norm twice, once of them in a single-threaded nest striding across channels (1.2 of its
    2.5 ms). Such a value is stored when its expression holds a reduction (always: one more
    whole reduction per place) or, with `keep_transcendentals`, a transcendental (a store
    and a load per element cost less than an `erf` or `exp` on the CPU). Consumers are
    decided before their producers, so a producer read only through a stored consumer
    stays inline. Kernels holding a contraction are left as they are: their epilogues are
    computed once, in the contraction's nest, as the tile passes match it."""
    inside = set(ops)
    if any(isinstance(op, _REUSING_OPS) for op in ops):
        return set()
    heavy: dict[SSAValue, bool] = {}
    for op in ops:
        if not op.results or isinstance(op, g.ConstantOp):
            continue
        own = isinstance(op, _REDUCTIONS) or (
            keep_transcendentals and isinstance(op, TRANSCENDENTAL_OPS)
        )
        heavy[op.results[0]] = own or any(
            heavy.get(v, False) for v in op.operands if v not in stored
        )
    shared: set[SSAValue] = set()
    places: dict[SSAValue, frozenset[SSAValue]] = {}
    for op in reversed(ops):
        if not op.results or isinstance(op, g.ConstantOp):
            continue
        v = op.results[0]
        found: set[SSAValue] = set()
        for use in v.uses:
            reader = use.operation
            if reader not in inside or not reader.results:
                continue
            r = reader.results[0]
            found |= (
                {r}
                if r in stored or r in shared or isinstance(reader, _REDUCTIONS)
                else (places.get(r, frozenset()))
            )
        places[v] = frozenset(found)
        if v not in stored and heavy.get(v) and len(found) > 1 and not is_view(v, inside):
            shared.add(v)
    return shared
