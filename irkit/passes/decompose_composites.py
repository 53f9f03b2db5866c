"""decompose-composites: rewrite composite graph ops into primitive graph ops.

softmax, layer_norm and batch_norm become reductions and elementwise ops:

    softmax(x)      = e * (1 / reduce_sum(e))     e = exp(x - reduce_max(x)), keepdims
    layer_norm(x)   = d * rsqrt(mean(d * d) + eps) * gamma + beta     d = c - mean(c),
                                                                      c = x - mean(x)
    batch_norm(x)   = (x - mean) * (rsqrt(var + eps) * scale) + bias  per channel

Both normalizations are the numerically careful forms: softmax subtracts the row maximum
before exponentiating, and layer_norm's variance is the two-pass mean of squared
deviations, never E[x^2] - E[x]^2. Its centre is corrected once: the mean, rounded to the
element type, is off by up to half an ulp, which for nearly equal values (a spread of 1e-3 of
the mean) is 1e-5 of the deviations; `mean(c)` of the (exactly computed) deviations `c` is
that offset, and subtracting it leaves d centred to far under an ulp of the spread.

The loop lowering applies these patterns inside each kernel, so a composite op stays one
kernel: its reductions are kept in small scratch buffers, and its elementwise parts are
recomputed inline. Run as a pass on its own, it exposes the primitives to graph passes
(fusion may then regroup them). Semantics-preserving; no options.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import BoolAttr, ModuleOp
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
from irkit.ir import element_type_of, shape_of


class _Emitter:
    """Builds primitive graph ops before the op being rewritten, inferring their types."""

    def __init__(self, rewriter: PatternRewriter, like: Operation):
        self.rewriter = rewriter
        self.like = like
        self.dtype = element_type_of(like.results[0])

    def op(self, cls: type[g.GraphOp], *operands: SSAValue, **props) -> SSAValue:
        new = cls.create_inferred(list(operands), props)
        new.location = self.like.location
        self.rewriter.insert(new)
        return new.results[0]

    def scalar(self, value: float) -> SSAValue:
        new = g.ConstantOp.from_values(self.dtype, (), [value])
        new.location = self.like.location
        self.rewriter.insert(new)
        return new.results[0]

    def reshape(self, value: SSAValue, shape: Sequence[int]) -> SSAValue:
        new = g.ReshapeOp.build_to(value, shape)
        new.location = self.like.location
        self.rewriter.insert(new)
        return new.results[0]


class DecomposeSoftmaxPattern(RewritePattern):
    """softmax(x, axis) -> max-subtracted exp over its sum along `axis`."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.SoftmaxOp, rewriter: PatternRewriter) -> None:
        b = _Emitter(rewriter, op)
        rank = len(shape_of(op.input))
        axes = g.int_array([g.int_of(op.properties, "axis") % rank])
        keep = BoolAttr.from_bool(True)
        peak = b.op(g.ReduceMaxOp, op.input, axes=axes, keepdims=keep)
        e = b.op(g.ExpOp, b.op(g.SubOp, op.input, peak))
        total = b.op(g.ReduceSumOp, e, axes=axes, keepdims=keep)
        inverse = b.op(g.DivOp, b.scalar(1.0), total)  # one division per row, not per element
        rewriter.replace(op, [], [b.op(g.MulOp, e, inverse)])


class DecomposeLayerNormPattern(RewritePattern):
    """layer_norm -> corrected two-pass mean and variance over the trailing axes."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.LayerNormOp, rewriter: PatternRewriter) -> None:
        b = _Emitter(rewriter, op)
        rank = len(shape_of(op.input))
        axes = g.int_array(sorted(a % rank for a in g.ints(op.properties, "axes")))
        keep = BoolAttr.from_bool(True)
        mean = b.op(g.ReduceMeanOp, op.input, axes=axes, keepdims=keep)
        c = b.op(g.SubOp, op.input, mean)
        d = b.op(g.SubOp, c, b.op(g.ReduceMeanOp, c, axes=axes, keepdims=keep))
        var = b.op(g.ReduceMeanOp, b.op(g.MulOp, d, d), axes=axes, keepdims=keep)
        eps = b.scalar(g.float_of(op.properties, "eps"))
        inv = b.op(g.RsqrtOp, b.op(g.AddOp, var, eps))
        y = b.op(g.MulOp, b.op(g.MulOp, d, inv), op.gamma)
        rewriter.replace(op, [], [b.op(g.AddOp, y, op.beta)])


class DecomposeBatchNormPattern(RewritePattern):
    """batch_norm -> a per-channel factor rsqrt(var + eps) * scale, then one fma per element."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.BatchNormOp, rewriter: PatternRewriter) -> None:
        b = _Emitter(rewriter, op)
        shape = shape_of(op.input)
        channel = (shape[1], *([1] * (len(shape) - 2)))  # broadcasts against [N, C, ...]
        scale, bias, mean, var = (b.reshape(v, channel) for v in op.operands[1:])
        eps = b.scalar(g.float_of(op.properties, "eps"))
        factor = b.op(g.MulOp, b.op(g.RsqrtOp, b.op(g.AddOp, var, eps)), scale)
        centered = b.op(g.SubOp, op.input, mean)
        rewriter.replace(op, [], [b.op(g.AddOp, b.op(g.MulOp, centered, factor), bias)])


DECOMPOSE_PATTERNS: tuple[RewritePattern, ...] = (
    DecomposeSoftmaxPattern(),
    DecomposeLayerNormPattern(),
    DecomposeBatchNormPattern(),
)


def decompose(op: Operation) -> None:
    """Decompose every composite graph op nested in `op`, in place."""
    walker = PatternRewriteWalker(
        GreedyRewritePatternApplier(list(DECOMPOSE_PATTERNS)), apply_recursively=False
    )
    for region in op.regions:
        walker.rewrite_region(region)


@dataclass(frozen=True)
class DecomposeCompositesPass(ModulePass):
    """Rewrite softmax, layer_norm and batch_norm into primitive graph ops (see module doc)."""

    name = "decompose-composites"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        decompose(op)
