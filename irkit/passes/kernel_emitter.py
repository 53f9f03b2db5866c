"""Emitting one kernel's loop nests from a group of primitive graph ops.

A kernel computes its *materialized* values, in dataflow order, each with one
`scf.parallel` nest over the value's shape that stores one element per iteration. Every
other value of the group is computed inline, element by element, where it is needed (the
loop-fusion scheme of XLA's elemental emitter): an elementwise chain becomes one expression
in one loop, and a reduction becomes an `scf.for` nest with an accumulator inside the loop
of its consumer.

A value is materialized when it leaves the kernel (an output buffer), or when a consumer in
the kernel reads each of its elements many times: a broadcast operand, a matmul, conv2d or
pooling operand. Inlining those would recompute a whole reduction or expression per read;
instead they live in scratch buffers that the caller provides. Views of buffers (reshape,
transpose, slice, and an im2col marked `irkit.implicit`) are never materialized:
re-reading through a view costs only index math.

Arithmetic happens in f32 for f16, bf16 and f32 data (f64 for f64): values are widened on
load and rounded on store, so accumulations are f32, and scratch buffers hold the compute
type. `graph.cast` rounds explicitly, because rounding is what it means.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp, TensorType, i64
from xdsl.ir import Attribute, Operation, SSAValue

from irkit.dialects import graph as g
from irkit.dtypes import dense_array
from irkit.passes import emit_exact as exact
from irkit.passes import emit_windows as windows
from irkit.passes.emit_gpu_attention import emit_attention
from irkit.passes.loop_builder import LoopBuilder, compute_type
from irkit.passes.materialize import _REUSING_OPS, _VIEW_OPS

Index = list[SSAValue]
Emit = Callable[["KernelEmitter", Any, Index], SSAValue]
"""An op's loop body: given the emitter, the op (each emitter takes its own op class) and
the output element's index, the value of that element."""


def shape_of(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType), value.type
    return value.type.get_shape()


dtype_of = g.element_type_of


# --- the emitter -------------------------------------------------------------------------------


class KernelEmitter:
    """Emits the loops of one kernel into a function body.

    `buffers` maps graph values (kernel inputs, outputs, scratch, non-splat constants) to
    the memrefs that hold them; everything else is computed inline by `EMITTERS`."""

    def __init__(
        self,
        builder: LoopBuilder,
        buffers: dict[SSAValue, SSAValue],
        module: ModuleOp | None = None,
        name: str = "kernel",
    ):
        self.b = builder
        self.buffers = buffers
        self.module, self.name = module, name  # a GPU form's shared buffers: globals named so
        self.launch: tuple[int, int, int] | None = None  # (grid, threads, flops): GPU-mapped
        self._memo: dict[tuple[int, SSAValue, tuple[SSAValue, ...]], SSAValue] = {}
        self.opens_loops: dict[SSAValue, bool] = {}
        """By value: whether computing it inline opens a loop (`_loops`)."""

    def emit(self, materialized: Sequence[SSAValue]) -> None:
        for value in materialized:
            buffer = self.buffers[value]
            op = value.owner
            if isinstance(op, g.AttentionOp):  # a fused one (the others are decomposed)
                emit_attention(self, op, buffer, alone=len(materialized) == 1)
                continue
            if type(op) in FINE_NESTS:
                self._emit_fine(op, buffer)  # type: ignore[arg-type]
                continue

            def body(idx: list[SSAValue], v: SSAValue = value, buf: SSAValue = buffer) -> None:
                self.b.store(self.compute(v, idx), buf, idx)

            self.b.parallel(shape_of(value), body)

    def _emit_fine(self, op: Operation, buffer: SSAValue) -> None:
        """Store `op`'s result from a loop nest over a finer shape whose axes, in groups,
        collapse row-major onto the result's axes (no index division in the loop)."""
        fine, groups, at = FINE_NESTS[type(op)](op)

        def body(fidx: Index) -> None:
            idx: Index = []
            start = 0
            for size in groups:
                linear = fidx[start]
                for k in range(start + 1, start + size):
                    linear = self.b.iadd(self.b.imul(linear, fine[k]), fidx[k])
                idx.append(linear)
                start += size
            self.b.store(at(self, op, fidx), buffer, idx)

        self.b.parallel(fine, body)

    def value_at(self, value: SSAValue, idx: Index) -> SSAValue:
        """The element `idx` of `value` in the compute type, loaded or computed here."""
        ct = compute_type(dtype_of(value))
        if value in self.buffers:
            return self.b.load(self.buffers[value], idx, ct)
        key = (id(self.b.block), value, tuple(idx))
        if key not in self._memo:
            self._memo[key] = self.compute(value, idx)
        return self._memo[key]

    def compute(self, value: SSAValue, idx: Index) -> SSAValue:
        op = value.owner
        assert isinstance(op, Operation)
        emit = EMITTERS.get(type(op))
        if emit is None:
            raise NotImplementedError(f"no loop lowering for {op.name}")
        return emit(self, op, idx)

    def operand_at(self, op: Operation, i: int, idx: Index) -> SSAValue:
        """Operand `i` of an elementwise `op` at result index `idx`, broadcast as numpy does."""
        operand = op.operands[i]
        shape = shape_of(operand)
        tail = idx[len(idx) - len(shape) :] if shape else []
        mapped = [self.b.index(0) if d == 1 else j for d, j in zip(shape, tail, strict=True)]
        return self.value_at(operand, mapped)

    # --- arithmetic helpers ----------------------------------------------------------------

    def const(self, x: float, like: SSAValue) -> SSAValue:
        return self.b.float(x, like.type)

    def fop(self, cls: type[Operation], *args: SSAValue) -> SSAValue:
        """`cls(*args)`: an op whose result has its operands' type (addf, exp, ...)."""
        return self.b.add(same_type_op(cls, args))

    def cmpf(self, pred: str, a: SSAValue, c: SSAValue) -> SSAValue:
        return self.b.add(arith.CmpfOp(a, c, pred))

    def select(self, cond: SSAValue, a: SSAValue, c: SSAValue) -> SSAValue:
        return self.b.add(arith.SelectOp(cond, a, c))

    def all_of(self, conds: Sequence[SSAValue]) -> SSAValue:
        out = conds[0]
        for c in conds[1:]:
            out = self.b.add(arith.AndIOp(out, c))
        return out

    def cmpi(self, pred: str, a: SSAValue, c: SSAValue | int) -> SSAValue:
        if isinstance(c, int):
            c = self.b.index(c)
        return self.b.add(arith.CmpiOp(a, c, pred))

    def clamp(self, a: SSAValue, hi: int) -> SSAValue:
        low = self.b.add(arith.MaxSIOp(a, self.b.index(0)))
        return self.b.add(arith.MinSIOp(low, self.b.index(hi)))

    def to_float(self, i: SSAValue, like: SSAValue) -> SSAValue:
        as_int = self.b.add(arith.IndexCastOp(i, i64))
        return self.b.add(arith.SIToFPOp(as_int, cast(Any, like.type)))


_DEFAULTS: dict[type[Operation], dict[str, Attribute] | None] = {}
"""By op class, the properties its constructor gives an op built from operands alone, where
its one result has the operands' type (None where it does not)."""


def same_type_op(cls: type[Operation], args: Sequence[SSAValue]) -> Operation:
    """`cls(*args)`, built with `Operation.create` once the class's default properties are
    known: irdl's checked constructor took 17 us an op where `create` takes 5, and lowering a
    2000-op chain builds thousands (the verifier checks the result after the pipeline)."""
    t = args[0].type
    defaults = _DEFAULTS.get(cls, ...)
    if defaults is ... or defaults is None or any(a.type != t for a in args):
        op = cls(*args)
        if cls not in _DEFAULTS:
            same = len(op.results) == 1 and all(a.type == op.results[0].type for a in args)
            _DEFAULTS[cls] = dict(op.properties) if same and not op.attributes else None
        return op
    return cls.create(operands=args, result_types=[t], properties=dict(defaults))


# --- elementwise -------------------------------------------------------------------------------


def _unary(fn: Callable[[KernelEmitter, SSAValue, Operation], SSAValue]) -> Emit:
    return lambda em, op, idx: fn(em, em.operand_at(op, 0, idx), op)


def _binary(fn: Callable[[KernelEmitter, SSAValue, SSAValue], SSAValue]) -> Emit:
    def emit(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
        if _loops(em, op.operands[1]) and not _loops(em, op.operands[0]):
            rhs = em.operand_at(op, 1, idx)  # `bias + matmul(...)`: the loop nest first
            return fn(em, em.operand_at(op, 0, idx), rhs)
        return fn(em, em.operand_at(op, 0, idx), em.operand_at(op, 1, idx))

    return emit


def _loops(em: KernelEmitter, value: SSAValue) -> bool:
    """Whether computing `value` inline opens a loop (a contraction or a reduction, itself
    or inside the elementwise expression that computes it): such an operand is emitted
    first, so that a contraction's k loop opens its nest, as the tile passes match it
    (torch exports `Add(bias, MatMul)`, the bias first, and a residual `Add(x, Add(bias,
    MatMul))`)."""
    if value in em.buffers:
        return False
    known = em.opens_loops.get(value)
    if known is None:  # memoized: an expression DAG shares operands (a chain of x * x)
        op = value.owner
        known = isinstance(op, _REUSING_OPS + (g.ReduceOp,)) or (
            isinstance(op, g.BinaryOp | g.UnaryOp) and any(_loops(em, v) for v in op.operands)
        )
        em.opens_loops[value] = known
    return known


def _gelu(em: KernelEmitter, x: SSAValue, op: Operation) -> SSAValue:
    half = em.fop(arith.MulfOp, x, em.const(0.5, x))
    if op.approximate.data == "tanh":  # type: ignore[attr-defined]
        cube = em.fop(arith.MulfOp, em.fop(arith.MulfOp, x, x), x)
        inner = em.fop(arith.AddfOp, x, em.fop(arith.MulfOp, cube, em.const(0.044715, x)))
        scaled = em.fop(arith.MulfOp, inner, em.const(math.sqrt(2.0 / math.pi), x))
        t = em.fop(xmath.TanhOp, scaled)
    else:
        t = em.fop(xmath.ErfOp, em.fop(arith.MulfOp, x, em.const(1.0 / math.sqrt(2.0), x)))
    return em.fop(arith.MulfOp, half, em.fop(arith.AddfOp, t, em.const(1.0, x)))


def _sigmoid(em: KernelEmitter, x: SSAValue, op: Operation) -> SSAValue:
    e = em.fop(xmath.ExpOp, em.fop(arith.NegfOp, x))  # exp(-x) = inf gives 0, never NaN
    return em.fop(arith.DivfOp, em.const(1.0, x), em.fop(arith.AddfOp, e, em.const(1.0, x)))


def _leaky_relu(em: KernelEmitter, x: SSAValue, op: Operation) -> SSAValue:
    alpha = em.const(g.float_of(op.properties, "alpha"), x)
    return em.select(em.cmpf("oge", x, em.const(0.0, x)), x, em.fop(arith.MulfOp, x, alpha))


def _rsqrt(em: KernelEmitter, x: SSAValue, op: Operation) -> SSAValue:
    return em.fop(arith.DivfOp, em.const(1.0, x), em.fop(xmath.SqrtOp, x))


def _constant(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
    value = op.value  # type: ignore[attr-defined]
    assert isinstance(value, DenseIntOrFPElementsAttr)
    values = dense_array(value)
    ct = compute_type(dtype_of(op.results[0]))
    if values.size > 1 and not bool(np.all(values == values[0])):
        raise AssertionError("non-splat constants are given buffers by the lowering")
    return em.b.float(float(values[0]), ct)


# --- reductions ------------------------------------------------------------------------------


_COMBINE: dict[type, str] = {
    g.ReduceSumOp: "add",
    g.ReduceMeanOp: "add",
    g.ReduceMaxOp: "max",
    g.ReduceMinOp: "min",
    g.ReduceProdOp: "mul",
}


def reduce_over(
    em: KernelEmitter, kind: type, src: SSAValue, axes: Sequence[int], keep: bool, idx: Index
) -> SSAValue:
    """Reduce `src` over `axes` at result index `idx` (which keeps reduced axes if `keep`)."""
    shape = shape_of(src)
    ct = compute_type(dtype_of(src))
    combine = _COMBINE[kind]
    kept = [i for i in range(len(shape)) if i not in axes]
    outer = [idx[i] for i in kept] if keep else list(idx)

    def body(ivs: Index, accs: Index) -> Index:
        full: Index = [em.b.index(0)] * len(shape)
        for axis, iv in zip(axes, ivs, strict=True):
            full[axis] = iv
        for axis, i in zip(kept, outer, strict=True):
            full[axis] = i
        return [exact.arith_op(em, combine, accs[0], em.value_at(src, full))]

    init = em.b.float(exact.neutral(combine, ct), ct)
    (acc,) = em.b.for_nest([shape[a] for a in axes], [init], body)
    if kind is g.ReduceMeanOp:
        return em.fop(arith.DivfOp, acc, em.b.float(math.prod(shape[a] for a in axes), ct))
    return acc


def _reduce(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
    assert isinstance(op, g.ReduceOp)
    keep = g.bool_of(op.properties, "keepdims")
    return reduce_over(em, type(op), op.input, op.normalized_axes(), keep, idx)


def _global_avg_pool(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
    src = op.operands[0]
    axes = tuple(range(2, len(shape_of(src))))
    return reduce_over(em, g.ReduceMeanOp, src, axes, True, idx)


# --- data movement -------------------------------------------------------------------------------


def _transpose(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
    perm = g.ints(op.properties, "perm")
    src: Index = [idx[0]] * len(idx)
    for k, p in enumerate(perm):
        src[p] = idx[k]
    return em.value_at(op.operands[0], src)


def _reshape(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
    src = op.operands[0]
    out_shape, in_shape = shape_of(op.results[0]), shape_of(src)
    linear = em.b.index(0)
    for i, d in zip(idx, out_shape, strict=True):
        linear = em.b.iadd(em.b.imul(linear, d), i)
    mapped: Index = []
    stride = math.prod(in_shape)
    for d in in_shape:
        stride //= d
        q = linear if stride == 1 else em.b.add(arith.DivUIOp(linear, em.b.index(stride)))
        mapped.append(em.b.add(arith.RemUIOp(q, em.b.index(d))) if d > 1 else em.b.index(0))
    return em.value_at(src, mapped)


def _slice(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
    starts, strides = g.ints(op.properties, "starts"), g.ints(op.properties, "strides")
    mapped = [em.b.iadd(em.b.imul(i, st), s) for i, s, st in zip(idx, starts, strides, strict=True)]
    return em.value_at(op.operands[0], mapped)


def _concat(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
    """The element of the operand `idx` falls in. Where every operand is a load or a
    constant (a padding: zeros around a buffer), each is read at an index clamped into it and
    the right one selected, with no branch, so the loop vectorizes (conv_block's padded
    input: 30 us with a branch per element); likewise where one operand is an elementwise
    expression of such reads and the others are read-only (a padding around a computed
    tensor: EfficientNet's SiLU padded for its next stride-2 conv, 1.41 ms with the branches,
    the expression then computed at a clamped index on the few padded elements too);
    otherwise an `scf.if` chain computes only the operand it needs."""
    axis = g.int_of(op.properties, "axis") % len(idx)
    ct = compute_type(dtype_of(op.results[0]))
    operands = list(op.operands)
    ends = list(np.cumsum([shape_of(v)[axis] for v in operands]))
    starts = [0, *ends[:-1]]

    def local(k: int, clamp: bool) -> Index:
        at = em.b.iadd(idx[axis], -int(starts[k]))
        inline = isinstance(operands[k].owner, g.ConstantOp) and operands[k] not in em.buffers
        if clamp and not inline:  # a splat, computed at any index; anything else is read
            at = em.clamp(at, shape_of(operands[k])[axis] - 1)
        return [*idx[:axis], at, *idx[axis + 1 :]]

    if _padding_of_reads(em, op):
        value = em.value_at(operands[-1], local(len(operands) - 1, True))
        for k in reversed(range(len(operands) - 1)):
            here = em.value_at(operands[k], local(k, True))
            value = em.select(em.cmpi("slt", idx[axis], int(ends[k])), here, value)
        return value

    def part(k: int) -> SSAValue:
        if k == len(operands) - 1:
            return em.value_at(operands[k], local(k, False))
        return em.b.if_else(
            em.cmpi("slt", idx[axis], int(ends[k])),
            ct,
            lambda: em.value_at(operands[k], local(k, False)),
            lambda: part(k + 1),
        )

    return part(0)


def _elementwise_of_reads(em: KernelEmitter, value: SSAValue) -> bool:
    """Whether `value` is elementwise ops (`graph`'s unary and binary ones, casts) over
    read-only values: computed at any in-bounds index, with no loop of its own."""
    if _read_only(em, value):
        return True
    op = value.owner
    if isinstance(op, g.ConcatOp):  # a padding in a second axis: itself branch-free
        return _padding_of_reads(em, op)
    return isinstance(op, g.UnaryOp | g.BinaryOp | g.CastOp) and all(
        _elementwise_of_reads(em, v) for v in op.operands
    )


def _padding_of_reads(em: KernelEmitter, op: Operation) -> bool:
    """Whether a concat's operands are read-only but at most one, which is elementwise over
    reads: each element of it computed at a clamped index and selected, with no branch."""
    computed = [v for v in op.operands if not _read_only(em, v)]
    return not computed or (len(computed) == 1 and _elementwise_of_reads(em, computed[0]))


def _read_only(em: KernelEmitter, value: SSAValue) -> bool:
    """Whether reading `value` at an index is loads and selects only: a buffer, a constant,
    a reshape/transpose/slice view of one, or a concat of such (a padding in two axes)."""
    op = value.owner
    if value in em.buffers or isinstance(op, g.ConstantOp):
        return True
    if isinstance(op, g.ConcatOp):
        return all(_read_only(em, v) for v in op.operands)
    return isinstance(op, _VIEW_OPS) and _read_only(em, op.operands[0])


FINE_NESTS: dict[
    type[Operation],
    Callable[[Operation], tuple[tuple[int, ...], tuple[int, ...], Callable[..., SSAValue]]],
] = {g.Im2colOp: lambda op: (windows.im2col_window(op), (3, 3), windows.im2col_at)}
"""Ops whose own loop nest runs over a finer shape: (the fine shape, how many fine axes
collapse onto each result axis, the element at a fine index). im2col's rows and columns
are (n, oy, ox) and (ky, kx, c): its innermost loop copies C contiguous channels."""

EMITTERS: dict[type[Operation], Emit] = {
    g.AddOp: _binary(lambda em, a, b: exact.arith_op(em, "add", a, b)),
    g.SubOp: _binary(lambda em, a, b: exact.arith_op(em, "sub", a, b)),
    g.MulOp: _binary(lambda em, a, b: exact.arith_op(em, "mul", a, b)),
    g.DivOp: _binary(exact.divide),
    g.MaxOp: _binary(lambda em, a, b: exact.arith_op(em, "max", a, b)),  # NaN propagates
    g.MinOp: _binary(lambda em, a, b: exact.arith_op(em, "min", a, b)),
    g.PowOp: _binary(lambda em, a, b: em.fop(xmath.PowFOp, a, b)),
    g.NegOp: _unary(lambda em, x, op: exact.negate(em, x)),
    g.AbsOp: _unary(lambda em, x, op: exact.absolute(em, x)),
    g.ReluOp: _unary(lambda em, x, op: exact.arith_op(em, "max", x, em.const(0.0, x))),
    g.LeakyReluOp: _unary(_leaky_relu),
    g.GeluOp: _unary(_gelu),
    g.SigmoidOp: _unary(_sigmoid),
    g.TanhOp: _unary(lambda em, x, op: em.fop(xmath.TanhOp, x)),
    g.ExpOp: _unary(lambda em, x, op: em.fop(xmath.ExpOp, x)),
    g.LogOp: _unary(lambda em, x, op: em.fop(xmath.LogOp, x)),
    g.SqrtOp: _unary(lambda em, x, op: em.fop(xmath.SqrtOp, x)),
    g.RsqrtOp: _unary(_rsqrt),
    g.ErfOp: _unary(lambda em, x, op: em.fop(xmath.ErfOp, x)),
    g.SinOp: _unary(lambda em, x, op: em.fop(xmath.SinOp, x)),
    g.CosOp: _unary(lambda em, x, op: em.fop(xmath.CosOp, x)),
    g.FloorOp: _unary(lambda em, x, op: em.fop(xmath.FloorOp, x)),
    g.CeilOp: _unary(lambda em, x, op: em.fop(xmath.CeilOp, x)),
    g.CastOp: exact.cast_op,
    g.ConstantOp: _constant,
    g.ReduceSumOp: _reduce,
    g.ReduceMaxOp: _reduce,
    g.ReduceMinOp: _reduce,
    g.ReduceProdOp: _reduce,
    g.ReduceMeanOp: _reduce,
    g.GlobalAvgPoolOp: _global_avg_pool,
    g.MatmulOp: windows.matmul,
    g.BatchMatmulOp: windows.matmul,
    g.Conv2dOp: windows.conv2d,
    g.Im2colOp: windows.im2col,
    g.MaxPool2dOp: windows.pool,
    g.AvgPool2dOp: windows.pool,
    g.TransposeOp: _transpose,
    g.ReshapeOp: _reshape,
    g.SliceOp: _slice,
    g.ConcatOp: _concat,
    g.BroadcastToOp: exact.broadcast_to,
    g.GatherOp: exact.gather,
    g.GatherElementsOp: exact.gather_elements,
    g.CumSumOp: exact.cumsum,
    g.ScatterNdOp: exact.scatter_nd,
    g.ArgMaxOp: exact.arg_extremum,
    g.ArgMinOp: exact.arg_extremum,
    g.WhereOp: exact.where,
    g.EqualOp: exact.compare,
    g.LessOp: exact.compare,
    g.LessEqualOp: exact.compare,
    g.GreaterOp: exact.compare,
    g.GreaterEqualOp: exact.compare,
    g.AndOp: exact.logical(arith.AndIOp),
    g.OrOp: exact.logical(arith.OrIOp),
    g.XorOp: exact.logical(arith.XOrIOp),
    g.NotOp: exact.logical_not,
    g.IsNanOp: exact.is_nan,
    g.IsInfOp: exact.is_inf,
}
"""Per op: the scalar at one result index, built from its operands' scalars."""
