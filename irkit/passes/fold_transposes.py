"""fold-transposes: compose, cancel and sink graph.transpose ops.

A transpose that survives to a kernel costs a strided pass over its tensor (or, fused, a
strided read inside the kernel that consumes it). Exported models carry many that cancel:
NCHW <-> NHWC conversions around elementwise ops, attention's head transposes, a transposed
weight transposed back. This pass

- composes transpose(transpose(x, p), q) into one transpose(x, p o q), and drops a transpose
  whose permutation is the identity (so a pair that cancels disappears); a transpose that
  only moves axes of extent 1 becomes a reshape, and reshapes of reshapes compose;
- with `sink=true` (the default), moves a transpose below the elementwise op that is its
  only user: unary ops and casts, and binary ops whose operands are both transposed by the
  same permutation of the same shape, or whose other operand broadcasts (a scalar, a
  per-channel vector: it is permuted the other way to match), and below a pooling op whose
  input it turns from the other layout into the pool's (an NCHW pool of an NHWC tensor
  transposed becomes an NHWC pool, transposed after: conv_block's channels-last conv block
  then pools in NHWC, and only the pooled result, a quarter of the data, is transposed).
  Sinking changes no work by itself; it brings transposes together so that they compose
  and cancel. Also below a concatenation of same-permuted tensors and constants (an
  exported Pad), and a global average pool (as a mean over the axes the transpose takes
  to the spatial ones), and a broadcast_to a tensor's own shape is dropped.

Transposes of constants are fold-constants' work. Options: `sink` (bool). Purely a
reordering of exact data movement: semantics-preserving bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import BoolAttr, IntegerAttr, ModuleOp, StringAttr, TensorType, i64
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from irkit.dialects import graph as g
from irkit.ir import holds, shape_of


def _perm(op: g.TransposeOp) -> list[int]:
    return list(g.ints(op.properties, "perm"))


def _transpose(value: SSAValue, perm: Sequence[int], like: Operation) -> g.TransposeOp:
    op = g.TransposeOp.create_inferred([value], {"perm": g.int_array(perm)})
    op.location = like.location
    return op


def _reshape(value: SSAValue, shape: Sequence[int], like: Operation) -> g.ReshapeOp:
    op = g.ReshapeOp.build_to(value, shape)
    op.location = like.location
    return op


def _sole_transpose(value: SSAValue) -> g.TransposeOp | None:
    """The transpose producing `value` when the value has no other user."""
    owner = value.owner
    if isinstance(owner, g.TransposeOp) and value.has_one_use():
        return owner
    return None


def _scalar(value: SSAValue) -> bool:
    return isinstance(value.type, TensorType) and not value.type.get_shape()


class ComposeTransposes(RewritePattern):
    """transpose(transpose(x, p), q) -> transpose(x, p o q), or x for the identity."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.TransposeOp, rewriter: PatternRewriter) -> None:
        perm = _perm(op)
        source = op.input
        inner = source.owner
        if isinstance(inner, g.TransposeOp):
            first = _perm(inner)
            perm, source = [first[q] for q in perm], inner.input
        if perm == list(range(len(perm))):
            rewriter.replace(op, [], [source])
        elif source is not op.input:
            rewriter.replace(op, _transpose(source, perm, op))
        else:
            return
        if isinstance(inner, g.TransposeOp) and not inner.result.uses:
            rewriter.erase(inner)


class TransposeOfUnitAxes(RewritePattern):
    """A transpose that keeps the order of the axes longer than 1 moves no data: a reshape."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.TransposeOp, rewriter: PatternRewriter) -> None:
        shape = shape_of(op.input)
        moved = [p for p in _perm(op) if shape[p] != 1]
        if moved != sorted(moved) or _perm(op) == sorted(_perm(op)):
            return
        rewriter.replace(op, _reshape(op.input, op.result.type.get_shape(), op))


class ComposeReshapes(RewritePattern):
    """reshape(reshape(x)) -> reshape(x), and a reshape to the same shape -> x."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ReshapeOp, rewriter: PatternRewriter) -> None:
        inner = op.input.owner
        if op.input.type == op.result.type:
            rewriter.replace(op, [], [op.input])
        elif isinstance(inner, g.ReshapeOp):
            rewriter.replace(op, _reshape(inner.input, op.result.type.get_shape(), op))
            if not inner.result.uses:
                rewriter.erase(inner)


class SinkThroughUnary(RewritePattern):
    """f(transpose(x, p)) -> transpose(f(x), p) for an elementwise unary f or a cast."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.UnaryOp | g.CastOp, rewriter: PatternRewriter) -> None:
        t = _sole_transpose(op.input)
        if t is None:
            return
        x = t.input
        x_type = x.type
        assert isinstance(x_type, TensorType)
        element = op.result.type.element_type
        moved = type(op).create(
            operands=[x],
            properties=dict(op.properties),
            attributes=dict(op.attributes),
            result_types=[g.tensor(element, x_type.get_shape())],
        )
        moved.location = op.location
        rewriter.replace(
            op, [moved, after := _transpose(moved.results[0], _perm(t), op)], [after.result]
        )
        rewriter.erase(t)


class SinkThroughBinary(RewritePattern):
    """f(transpose(a, p), transpose(b, p)) -> transpose(f(a, b), p) for same-shaped a and
    b, f(transpose(a, p), s) -> transpose(f(a, s), p) for a scalar s, and
    f(transpose(a, p), c) -> transpose(f(a, transpose(c, p^-1)), p) for a broadcast operand
    c (either side)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.BinaryOp, rewriter: PatternRewriter) -> None:
        lhs, rhs = op.lhs, op.rhs
        tl, tr = _sole_transpose(lhs), _sole_transpose(rhs)
        if tl is not None and tr is not None and lhs is not rhs:
            if _perm(tl) != _perm(tr) or tl.input.type != tr.input.type:
                return
            operands, perm, dead = [tl.input, tr.input], _perm(tl), [tl, tr]
        elif tl is not None and _scalar(rhs):
            operands, perm, dead = [tl.input, rhs], _perm(tl), [tl]
        elif tr is not None and _scalar(lhs):
            operands, perm, dead = [lhs, tr.input], _perm(tr), [tr]
        elif tl is not None and _broadcasts_into(rhs, lhs):
            perm, dead = _perm(tl), [tl]
            operands = [tl.input, _permuted_for(rhs, perm, op, rewriter)]
        elif tr is not None and _broadcasts_into(lhs, rhs):
            perm, dead = _perm(tr), [tr]
            operands = [_permuted_for(lhs, perm, op, rewriter), tr.input]
        else:
            return
        moved = type(op).create_inferred(operands, dict(op.properties))
        moved.attributes.update(op.attributes)
        moved.location = op.location
        rewriter.replace(
            op, [moved, after := _transpose(moved.results[0], perm, op)], [after.result]
        )
        for t in dead:
            rewriter.erase(t)


class SinkThroughPool(RewritePattern):
    """pool(transpose(x, NHWC -> NCHW)) -> transpose(pool{layout=nhwc}(x), NHWC -> NCHW),
    and the same from NCHW into an NHWC pool: the pool reads the same window of the same
    channel, in the same order."""

    TO_NCHW, TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.Pool2dOp, rewriter: PatternRewriter) -> None:
        t = _sole_transpose(op.input)
        if t is None:
            return
        layout = g.pool_layout(op.properties)
        perm = _perm(t)
        if perm != (self.TO_NCHW if layout == "nchw" else self.TO_NHWC):
            return
        props = dict(op.properties)
        props["layout"] = StringAttr("nhwc" if layout == "nchw" else "nchw")
        moved = type(op).create_inferred([t.input], props)
        moved.attributes.update(op.attributes)
        moved.location = op.location
        rewriter.replace(
            op, [moved, after := _transpose(moved.results[0], perm, op)], [after.result]
        )
        rewriter.erase(t)


class SinkThroughGlobalAvgPool(RewritePattern):
    """global_avg_pool(transpose(y, p)) -> transpose(reduce_mean(y, the axes p takes to the
    spatial ones, keepdims), p): the same means, summed in the same (spatial, in order)
    order and divided by the same count; the transpose of a tensor whose moved axes are all
    extent 1 then becomes a reshape. A squeeze-excite block (EfficientNet, MobileNet v3,
    RegNet-Y) pools its channels-last activation, which then need not be transposed back."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.GlobalAvgPoolOp, rewriter: PatternRewriter) -> None:
        t = _sole_transpose(op.input)
        if t is None:
            return
        perm = _perm(t)
        axes = sorted(perm[2:])
        if [perm[i] for i in range(2, len(perm))] != axes:  # spatial order kept
            return
        mean = g.ReduceMeanOp.create_inferred(
            [t.input], {"axes": g.int_array(axes), "keepdims": BoolAttr.from_bool(True)}
        )
        mean.location = op.location
        rewriter.replace(op, [mean, after := _transpose(mean.results[0], perm, op)], [after.result])
        rewriter.erase(t)


class SplitSharedTranspose(RewritePattern):
    """A transpose read by several elementwise ops that can each sink it becomes one
    transpose per reader: x * sigmoid(x) (SiLU, Swish; HardSwish and Mish alike) of a
    transposed tensor reads it twice, so neither reader could take it below itself, and
    every activation of that kind between two channels-last convolutions kept their
    transposes from cancelling. A reader can sink it when it is unary (or a cast), or
    binary with its other operand the same transpose, a broadcast operand, or an elementwise
    chain from the same transpose (`_unary_chain_from`, which sinks first)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.TransposeOp, rewriter: PatternRewriter) -> None:
        uses = list(op.result.uses)
        if len(uses) < 2 or not all(_can_sink(u.operation, op.result) for u in uses):
            return
        for use in uses[1:]:
            copy = _transpose(op.input, _perm(op), op)
            rewriter.insert(copy)
            use.operation.operands[use.index] = copy.result


def _can_sink(user: Operation, value: SSAValue) -> bool:
    if isinstance(user, g.UnaryOp | g.CastOp | g.GlobalAvgPoolOp):
        return True
    if not isinstance(user, g.BinaryOp):
        return False
    others = [v for v in user.operands if v != value]
    return all(_scalar(v) or _broadcasts_into(v, user.results[0]) or _unary_chain_from(v, value)
               for v in others)  # fmt: skip


def _unary_chain_from(value: SSAValue, source: SSAValue) -> bool:
    """Whether `value` is `source` through elementwise ops of one tensor operand each:
    unary ops, casts, and binary ops whose other operand is a scalar or broadcasts (HardSwish
    composed as min(max(x * a + b, 0), 6))."""
    while True:
        op = value.owner
        if isinstance(op, g.UnaryOp | g.CastOp):
            value = op.operands[0]
        elif isinstance(op, g.BinaryOp):
            full = [v for v in op.operands
                    if not (_scalar(v) or _broadcasts_into(v, op.results[0]))]  # fmt: skip
            if len(full) != 1:
                return False
            value = full[0]
        else:
            return False
        if value == source:
            return True


class DropIdentityBroadcast(RewritePattern):
    """broadcast_to(x) to x's own shape is x (an exported Pad of zero widths imports as one):
    between a transpose and its inverse, it kept them from cancelling."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.BroadcastToOp, rewriter: PatternRewriter) -> None:
        if op.input.type == op.result.type:
            rewriter.replace(op, [], [op.input])


class SinkThroughConcat(RewritePattern):
    """concat(transpose(x, p), c, ..., axis = a) -> transpose(concat(x, c', ..., axis =
    p[a]), p), where every other operand is the same permutation of a tensor or a constant
    (c' its inverse permutation, folded by fold-constants): an exported Pad, imported as
    concatenated constant slabs, between two layout transposes then lets them cancel
    (MobileNet v2's blocks: 35 transposes in and out of NHWC around zero padding)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ConcatOp, rewriter: PatternRewriter) -> None:
        transposes = [_sole_transpose(v) for v in op.inputs]
        first = next((t for t in transposes if t is not None), None)
        if first is None:
            return
        perm = _perm(first)
        for v, t in zip(op.inputs, transposes, strict=True):
            if t is not None and _perm(t) != perm:
                return
            if t is None and not isinstance(v.owner, g.ConstantOp):
                return
        inputs = []
        for v, t in zip(op.inputs, transposes, strict=True):
            if t is not None:
                inputs.append(t.input)
            else:
                back = _transpose(v, inverse_perm(perm), op)
                rewriter.insert(back)
                inputs.append(back.result)
        axis = perm[g.int_of(op.properties, "axis") % len(perm)]
        moved = g.ConcatOp.create_inferred(inputs, {"axis": IntegerAttr(axis, i64)})
        moved.location = op.location
        rewriter.replace(
            op, [moved, after := _transpose(moved.results[0], perm, op)], [after.result]
        )
        for t in {t for t in transposes if t is not None}:
            if not t.result.uses:
                rewriter.erase(t)


def inverse_perm(perm: Sequence[int]) -> list[int]:
    """q with transpose(transpose(x, perm), q) == x."""
    inverse = [0] * len(perm)
    for k, p in enumerate(perm):
        inverse[p] = k
    return inverse


def _broadcasts_into(small: SSAValue, full: SSAValue) -> bool:
    """Whether `small` is a strict broadcast operand against the result-shaped `full` (a
    per-channel scale, a bias): fewer elements, and no higher rank."""
    s, f = (shape_of(v) for v in (small, full))
    return len(s) <= len(f) and math.prod(s) < math.prod(f)


def _permuted_for(
    value: SSAValue, perm: list[int], like: Operation, rewriter: PatternRewriter
) -> SSAValue:
    """`value` brought to full rank (leading 1s) and permuted by the inverse of `perm`: the
    operand that, transposed by `perm`, is the original broadcast operand."""
    shape = shape_of(value)
    if len(shape) < len(perm):
        reshape = g.ReshapeOp.build_to(value, [1] * (len(perm) - len(shape)) + list(shape))
        reshape.location = like.location
        rewriter.insert(reshape)
        value = reshape.result
    t = _transpose(value, inverse_perm(perm), like)
    rewriter.insert(t)
    return t.result


@dataclass(frozen=True)
class FoldTransposesPass(ModulePass):
    """Compose and cancel transposes; with `sink`, move them below elementwise users."""

    name = "fold-transposes"
    is_optimization = True

    sink: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not holds(
            op, (g.TransposeOp, g.ReshapeOp, g.BroadcastToOp)
        ):  # every pattern starts from one
            return
        patterns: list[RewritePattern] = [
            ComposeTransposes(),
            TransposeOfUnitAxes(),
            ComposeReshapes(),
        ]
        if self.sink:
            patterns += [SinkThroughUnary(), SinkThroughBinary(), SinkThroughPool(),
                         SinkThroughConcat(), SplitSharedTranspose(),
                         SinkThroughGlobalAvgPool()]  # fmt: skip
        patterns.append(DropIdentityBroadcast())
        PatternRewriteWalker(GreedyRewritePatternApplier(patterns)).rewrite_module(op)
