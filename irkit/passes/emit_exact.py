"""Loop lowerings of integer and boolean values: exact arithmetic, comparisons, logic,
selection, gathers, broadcasts and casts between any two element types.

Each function here is a row of the kernel emitter's `EMITTERS` table (or a helper one of its
rows calls): the scalar at one result index, from its operands' scalars. Integer
arithmetic is the width's two's complement (it wraps); an integer division by 0 gives 0 and
MIN / -1 gives MIN, where a machine's divide would trap (`semantics.divide` says the same).
A gather clamps its index into the axis, so a bad index never reads outside the tensor; that
an index was out of range is the reference's error to report (`semantics.gather`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from xdsl.dialects import arith
from xdsl.dialects.builtin import IndexType, IntegerType, i1, i64
from xdsl.ir import Attribute, Operation, SSAValue

from irkit.dialects import graph as g
from irkit.ir import shape_of
from irkit.passes.loop_builder import LOW_PRECISION, compute_type

if TYPE_CHECKING:  # the kernel emitter calls these; they only need its type
    from irkit.passes.kernel_emitter import Index, KernelEmitter

_FLOAT_INT: dict[str, tuple[type[Operation], type[Operation]]] = {
    "add": (arith.AddfOp, arith.AddiOp),
    "sub": (arith.SubfOp, arith.SubiOp),
    "mul": (arith.MulfOp, arith.MuliOp),
    "max": (arith.MaximumfOp, arith.MaxSIOp),  # the float ones propagate NaN
    "min": (arith.MinimumfOp, arith.MinSIOp),
}

_CMPF = {"eq": "oeq", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}
_CMPI = {"eq": "eq", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}


def is_int(value: SSAValue) -> bool:
    return isinstance(value.type, IntegerType)


def arith_op(em: KernelEmitter, name: str, a: SSAValue, b: SSAValue) -> SSAValue:
    """`a <name> b` in the operands' type: float or integer arithmetic by that type."""
    floating, integer = _FLOAT_INT[name]
    return em.fop(integer if is_int(a) else floating, a, b)


def divide(em: KernelEmitter, a: SSAValue, b: SSAValue) -> SSAValue:
    if not is_int(a):
        return em.fop(arith.DivfOp, a, b)
    zero, one, minus_one = (em.b.float(k, a.type) for k in (0, 1, -1))
    by_zero = em.b.add(arith.CmpiOp(b, zero, "eq"))
    by_minus_one = em.b.add(arith.CmpiOp(b, minus_one, "eq"))
    safe = em.select(em.b.add(arith.OrIOp(by_zero, by_minus_one)), one, b)
    q = em.fop(arith.DivSIOp, a, safe)
    q = em.select(by_minus_one, em.fop(arith.SubiOp, zero, a), q)
    return em.select(by_zero, zero, q)


def negate(em: KernelEmitter, x: SSAValue) -> SSAValue:
    if is_int(x):
        return em.fop(arith.SubiOp, em.b.float(0, x.type), x)
    return em.fop(arith.NegfOp, x)


def absolute(em: KernelEmitter, x: SSAValue) -> SSAValue:
    from xdsl.dialects import math as xmath

    if not is_int(x):
        return em.fop(xmath.AbsFOp, x)
    negative = em.b.add(arith.CmpiOp(x, em.b.float(0, x.type), "slt"))
    return em.select(negative, negate(em, x), x)


def compare(em: KernelEmitter, op: g.CompareOp, idx: Index) -> SSAValue:
    """A comparison of the operands as the graph holds them: a float operand of a narrow
    type is rounded to it first (it is computed wider), as the reference compares."""
    pred = op.PREDICATE
    a, b = (_as_held(em, op.operands[i], em.operand_at(op, i, idx)) for i in (0, 1))
    if is_int(a):
        return em.b.add(arith.CmpiOp(a, b, _CMPI[pred]))
    return em.b.add(arith.CmpfOp(a, b, _CMPF[pred]))


def _as_held(em: KernelEmitter, value: SSAValue, scalar: SSAValue) -> SSAValue:
    element = g.element_type_of(value)
    if isinstance(element, LOW_PRECISION):
        return em.b.convert(em.b.convert(scalar, element), compute_type(element))
    return scalar


def logical(cls: type[Operation]):
    def emit(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
        return em.fop(cls, em.operand_at(op, 0, idx), em.operand_at(op, 1, idx))

    return emit


def logical_not(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
    x = em.operand_at(op, 0, idx)
    return em.fop(arith.XOrIOp, x, em.b.integer(1, i1))


def is_nan(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
    x = em.operand_at(op, 0, idx)
    return em.b.add(arith.CmpfOp(x, x, "uno"))


def is_inf(em: KernelEmitter, op: g.IsInfOp, idx: Index) -> SSAValue:
    x = em.operand_at(op, 0, idx)
    positive, negative = op.detects()
    tests = []
    if positive:
        tests.append(em.b.add(arith.CmpfOp(x, em.const(float("inf"), x), "oeq")))
    if negative:
        tests.append(em.b.add(arith.CmpfOp(x, em.const(float("-inf"), x), "oeq")))
    if not tests:
        return em.b.integer(0, i1)
    return tests[0] if len(tests) == 1 else em.fop(arith.OrIOp, *tests)


def where(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
    cond, a, b = (em.operand_at(op, i, idx) for i in range(3))
    return em.select(cond, a, b)


def broadcast_to(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
    return em.operand_at(op, 0, idx)


def _index_into(em: KernelEmitter, raw: SSAValue, extent: int) -> SSAValue:
    """An integer index as an index value: counted from the end if negative, clamped."""
    at = em.b.add(arith.IndexCastOp(raw, IndexType()))
    at = em.select(em.cmpi("slt", at, 0), em.b.iadd(at, extent), at)
    return em.clamp(at, extent - 1)


def gather_elements(em: KernelEmitter, op: g.GatherElementsOp, idx: Index) -> SSAValue:
    data, indices = op.operands
    axis = op.normalized_axis()
    extent = shape_of(data)[axis]
    at = _index_into(em, em.value_at(indices, idx), extent)
    return em.value_at(data, [*idx[:axis], at, *idx[axis + 1 :]])


def gather(em: KernelEmitter, op: g.GatherOp, idx: Index) -> SSAValue:
    """data[..., clamp(wrap(indices[j...])), ...]: the index read at the result's middle
    axes, a negative one counted from the end, and clamped into the axis."""
    data, indices = op.operands
    axis = op.normalized_axis()
    rank = len(shape_of(indices))
    extent = shape_of(data)[axis]
    at = _index_into(em, em.value_at(indices, idx[axis : axis + rank]), extent)
    return em.value_at(data, [*idx[:axis], at, *idx[axis + rank :]])


def cast_op(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
    """`graph.cast`: see its docstring for the meaning of each pair of kinds."""
    x = em.operand_at(op, 0, idx)
    target = g.element_type_of(op.results[0])
    if isinstance(target, IntegerType):
        return to_integer(em, x, target)
    if is_int(x):
        to = cast(Any, compute_type(target))
        x = em.b.add((arith.UIToFPOp if x.type == i1 else arith.SIToFPOp)(x, to))
        return em.b.convert(em.b.convert(x, target), compute_type(target))
    if isinstance(target, LOW_PRECISION):
        return em.b.convert(em.b.convert(x, target), compute_type(target))
    return em.b.convert(x, compute_type(target))


def to_integer(em: KernelEmitter, x: SSAValue, target: IntegerType) -> SSAValue:
    width = target.width.data
    if width == 1:
        if is_int(x):
            return em.b.add(arith.CmpiOp(x, em.b.float(0, x.type), "ne"))
        return em.b.add(arith.CmpfOp(x, em.const(0.0, x), "une"))  # NaN is true
    if isinstance(x.type, IntegerType):
        have = x.type.width.data
        if have == width:
            return x
        if have == 1:
            return em.b.add(arith.ExtUIOp(x, target))
        cls = arith.ExtSIOp if have < width else arith.TruncIOp
        return em.b.add(cls(x, target))
    return _saturating_fptosi(em, x, target)


def _saturating_fptosi(em: KernelEmitter, x: SSAValue, target: IntegerType) -> SSAValue:
    """Toward zero, MIN below the range, MAX at or above 2^(width-1), NaN to 0: every
    result defined (a bare fptosi out of range is LLVM's poison and C's undefined)."""
    width = target.width.data
    top = em.const(float(2 ** (width - 1)), x)  # exact in f32 and f64
    bottom = em.const(-float(2 ** (width - 1)), x)
    raw = em.b.add(arith.FPToSIOp(x, target))
    out = em.select(
        em.b.add(arith.CmpfOp(x, top, "oge")), em.b.integer(2 ** (width - 1) - 1, target), raw
    )
    out = em.select(
        em.b.add(arith.CmpfOp(x, bottom, "olt")), em.b.integer(-(2 ** (width - 1)), target), out
    )
    return em.select(em.b.add(arith.CmpfOp(x, x, "uno")), em.b.integer(0, target), out)


_CUMSUM_PRED = {
    (False, False): "sle",
    (True, False): "slt",
    (False, True): "sge",
    (True, True): "sgt",
}


def cumsum(em: KernelEmitter, op: g.CumSumOp, idx: Index) -> SSAValue:
    """The running sum at `idx`: a loop over the whole axis adding the elements on the
    summed side of idx (a select, no branch: the axis of a mask or of position ids)."""
    x = op.operands[0]
    axis = op.normalized_axis()
    extent = shape_of(x)[axis]
    pred = _CUMSUM_PRED[op.flags()]
    ct = compute_type(g.element_type_of(x))
    zero = em.b.float(0, ct)

    def body(ivs: Index, accs: Index) -> Index:
        at = [*idx[:axis], ivs[0], *idx[axis + 1 :]]
        term = em.select(em.cmpi(pred, ivs[0], idx[axis]), em.value_at(x, at), zero)
        return [arith_op(em, "add", accs[0], term)]

    (acc,) = em.b.for_nest([extent], [zero], body)
    return acc


def arg_extremum(em: KernelEmitter, op: g.ArgExtremumOp, idx: Index) -> SSAValue:
    """A loop along the axis carrying the best value and its index; a NaN beats any
    number (numpy's rule); the last of equals wins with select_last_index."""
    x = op.operands[0]
    axis = op.normalized_axis()
    keep = g.bool_of(op.properties, "keepdims")
    outer = [*idx[:axis], *idx[axis + 1 :]] if keep else list(idx)
    ct = compute_type(g.element_type_of(x))
    most = isinstance(op, g.ArgMaxOp)
    pred = ("sge" if op.last() else "sgt") if most else ("sle" if op.last() else "slt")
    fpred = {"sge": "oge", "sgt": "ogt", "sle": "ole", "slt": "olt"}[pred]

    def body(ivs: Index, accs: Index) -> Index:
        best, at = accs
        v = em.value_at(x, [*outer[:axis], ivs[0], *outer[axis:]])
        if is_int(v):
            better = em.b.add(arith.CmpiOp(v, best, pred))
        else:
            better = em.b.add(arith.CmpfOp(v, best, fpred))
            v_nan = em.b.add(arith.CmpfOp(v, v, "uno"))
            if op.last():
                nan_wins = v_nan
            else:
                best_number = em.b.add(arith.CmpfOp(best, best, "ord"))
                nan_wins = em.b.add(arith.AndIOp(v_nan, best_number))
            better = em.b.add(arith.OrIOp(better, nan_wins))
        position = em.b.add(arith.IndexCastOp(ivs[0], i64))
        return [em.select(better, v, best), em.select(better, position, at)]

    start = em.b.float(neutral("max" if most else "min", ct), ct)
    extent = shape_of(x)[axis]
    _, at = em.b.for_nest([extent], [start, em.b.integer(0, i64)], body)
    return at


def scatter_nd(em: KernelEmitter, op: g.ScatterNdOp, idx: Index) -> SSAValue:
    """The element at `idx`: data's, unless an index tuple names idx's first k coordinates
    (the last such wins): a loop over the index tuples, a select per tuple."""
    data, indices, updates = op.operands
    ishape = shape_of(indices)
    dshape = shape_of(data)
    k = ishape[-1]
    batch = list(ishape[:-1])
    mode = op.reduction.data

    def body(ivs: Index, accs: Index) -> Index:
        hit = None
        for axis in range(k):
            raw = em.value_at(indices, [*ivs, em.b.index(axis)])
            at = em.b.add(arith.IndexCastOp(raw, IndexType()))
            at = em.select(em.cmpi("slt", at, 0), em.b.iadd(at, dshape[axis]), at)
            same = em.cmpi("eq", at, idx[axis])
            hit = same if hit is None else em.b.add(arith.AndIOp(hit, same))
        assert hit is not None
        value = em.value_at(updates, [*ivs, *idx[k:]])
        if mode != "none":
            value = arith_op(em, mode, accs[0], value)
        return [em.select(hit, value, accs[0])]

    start = em.value_at(data, idx)
    if not batch:
        return body([], [start])[0]
    (out,) = em.b.for_nest(batch, [start], body)
    return out


def neutral(kind: str, t: Attribute) -> float:
    """The reduction's starting value in type `t` (add: 0, mul: 1, max: the least value,
    min: the greatest)."""
    if kind in ("add", "mul"):
        return 0 if kind == "add" else 1
    if isinstance(t, IntegerType):
        low = -(2 ** (t.width.data - 1))
        return low if kind == "max" else -low - 1
    return float("-inf") if kind == "max" else float("inf")
