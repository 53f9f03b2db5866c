"""fold-transposes: compose, cancel and sink graph.transpose ops.

A transpose that survives to a kernel costs a strided pass over its tensor (or, fused, a
strided read inside the kernel that consumes it). Exported models carry many that cancel:
NCHW <-> NHWC conversions around elementwise ops, attention's head transposes, a transposed
weight transposed back. This pass

- composes transpose(transpose(x, p), q) into one transpose(x, p o q), and drops a transpose
  whose permutation is the identity (so a pair that cancels disappears);
- with `sink=true` (the default), moves a transpose below the elementwise op that is its
  only user: unary ops and casts, and binary ops whose operands are both transposed by the
  same permutation of the same shape, or whose other operand is a scalar. Sinking changes
  no work by itself; it brings transposes together so that they compose and cancel.

Transposes of constants are fold-constants' work. Options: `sink` (bool). Purely a
reordering of exact data movement: semantics-preserving bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
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


def _perm(op: g.TransposeOp) -> list[int]:
    return list(g.ints(op.properties, "perm"))


def _transpose(value: SSAValue, perm: Sequence[int], like: Operation) -> g.TransposeOp:
    op = g.TransposeOp.create_inferred([value], {"perm": g.int_array(perm)})
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
        element = op.result.type.element_type  # type: ignore[attr-defined]
        moved = type(op).create(operands=[x], properties=dict(op.properties),
                                attributes=dict(op.attributes),
                                result_types=[g.tensor(element, x_type.get_shape())])  # fmt: skip
        moved.location = op.location
        rewriter.replace(op, [moved, after := _transpose(moved.results[0], _perm(t), op)],
                            [after.result])  # fmt: skip
        rewriter.erase(t)


class SinkThroughBinary(RewritePattern):
    """f(transpose(a, p), transpose(b, p)) -> transpose(f(a, b), p) for same-shaped a and
    b, and f(transpose(a, p), s) -> transpose(f(a, s), p) for a scalar s (either side)."""

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
        else:
            return
        moved = type(op).create_inferred(operands, dict(op.properties))
        moved.attributes.update(op.attributes)
        moved.location = op.location
        rewriter.replace(op, [moved, after := _transpose(moved.results[0], perm, op)],
                            [after.result])  # fmt: skip
        for t in dead:
            rewriter.erase(t)


@dataclass(frozen=True)
class FoldTransposesPass(ModulePass):
    """Compose and cancel transposes; with `sink`, move them below elementwise users."""

    name = "fold-transposes"
    is_optimization = True

    sink: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        patterns: list[RewritePattern] = [ComposeTransposes()]
        if self.sink:
            patterns += [SinkThroughUnary(), SinkThroughBinary()]
        PatternRewriteWalker(GreedyRewritePatternApplier(patterns)).rewrite_module(op)
