"""decompose-composites: rewrite composite graph ops into primitive graph ops.

softmax, layer_norm, batch_norm and attention become reductions, elementwise ops and
(attention) batch matmuls, and scaled_matmul an f32 matmul of its 8-bit operands:

    softmax(x)      = e * (1 / reduce_sum(e))     e = exp(x - reduce_max(x)), keepdims
    layer_norm(x)   = d * rsqrt(mean(d * d) + eps) * gamma + beta     d = c - mean(c),
                                                                      c = x - mean(x)
    batch_norm(x)   = (x - mean) * (rsqrt(var + eps) * scale) + bias  per channel
    attention(q, k, v) = batch_matmul(softmax(scale * batch_matmul(q, k^T) masked), v)
                      (k and v heads broadcast to the query heads they serve)
    scaled_matmul(a, b, sa, sb) = matmul(cast(a, f32), cast(b, f32)) * sa * sb
                      (the casts exact; the loop lowering reads the 8-bit operands in the
                      matmul's loop and widens each as it is loaded)

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

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import BoolAttr, Float32Type, IntegerType, ModuleOp
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
from irkit.passes.emit_attention import FUSED_ATTR


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

    def constant(self, values: np.ndarray) -> SSAValue:
        """A constant of `values` (i32 or boolean)."""
        width = 1 if values.dtype == np.bool_ else 32
        new = g.ConstantOp.from_values(IntegerType(width), values.shape, values.ravel().tolist())
        new.location = self.like.location
        self.rewriter.insert(new)
        return new.results[0]

    def heads(self, value: SSAValue, group: int) -> SSAValue:
        """[B, Hk, S, D] -> [B, Hk * group, S, D], each head repeated `group` times in place."""
        batch, kv_heads, length, dim = shape_of(value)
        wide = self.reshape(value, (batch, kv_heads, 1, length, dim))
        shape = g.int_array([batch, kv_heads, group, length, dim])
        return self.reshape(
            self.op(g.BroadcastToOp, wide, shape=shape), (batch, kv_heads * group, length, dim)
        )

    def cast(self, value: SSAValue, element_type) -> SSAValue:
        new = g.CastOp.build_to(value, element_type)
        new.location = self.like.location
        self.rewriter.insert(new)
        return new.results[0]

    def reshape(self, value: SSAValue, shape: Sequence[int]) -> SSAValue:
        new = g.ReshapeOp.build_to(value, shape)
        new.location = self.like.location
        self.rewriter.insert(new)
        return new.results[0]


def _softmax(b: _Emitter, x: SSAValue, axis: int) -> SSAValue:
    rank = len(shape_of(x))
    axes = g.int_array([axis % rank])
    keep = BoolAttr.from_bool(True)
    peak = b.op(g.ReduceMaxOp, x, axes=axes, keepdims=keep)
    e = b.op(g.ExpOp, b.op(g.SubOp, x, peak))
    total = b.op(g.ReduceSumOp, e, axes=axes, keepdims=keep)
    inverse = b.op(g.DivOp, b.scalar(1.0), total)  # one division per row, not per element
    return b.op(g.MulOp, e, inverse)


class DecomposeSoftmaxPattern(RewritePattern):
    """softmax(x, axis) -> max-subtracted exp over its sum along `axis`."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.SoftmaxOp, rewriter: PatternRewriter) -> None:
        b = _Emitter(rewriter, op)
        rewriter.replace(op, [], [_softmax(b, op.input, g.int_of(op.properties, "axis"))])


class DecomposeAttentionPattern(RewritePattern):
    """attention -> batch_matmul(softmax(scale * batch_matmul(q, k^T) masked), v), the
    key/value heads broadcast to their query heads first (grouped-query attention), the
    causal mask a comparison of the key and query positions."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.AttentionOp, rewriter: PatternRewriter) -> None:
        if FUSED_ATTR in op.attributes:  # the lowering's fused loops take it
            return
        b = _Emitter(rewriter, op)
        q, k, v = op.operands[:3]
        _, heads, sq, _ = shape_of(q)
        kv_heads, sk = shape_of(k)[1], shape_of(k)[2]
        if heads != kv_heads:
            group = heads // kv_heads
            k, v = (b.heads(x, group) for x in (k, v))
        kt = b.op(g.TransposeOp, k, perm=g.int_array([0, 1, 3, 2]))
        s = b.op(
            g.MulOp, b.op(g.BatchMatmulOp, q, kt), b.scalar(g.float_of(op.properties, "scale"))
        )
        if len(op.operands) == 4:
            mask = op.operands[3]
            if g.kind_of(element_type_of(mask)) == g.BOOL:
                s = b.op(g.WhereOp, mask, s, b.scalar(-math.inf))
            else:
                s = b.op(g.AddOp, s, mask)
        if g.bool_of(op.properties, "causal"):  # key j <= query i + Sk - Sq, compared where
            rows = np.arange(sq, dtype=np.int32)[:, None] + np.int32(sk - sq)  # it is read:
            cols = np.arange(sk, dtype=np.int32)[None, :]  # no S x S constant in memory
            keep = b.op(g.LessEqualOp, b.constant(cols), b.constant(rows))
            s = b.op(g.WhereOp, keep, s, b.scalar(-math.inf))
        rewriter.replace(op, [], [b.op(g.BatchMatmulOp, _softmax(b, s, -1), v)])


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


class DecomposeScaledMatmulPattern(RewritePattern):
    """scaled_matmul -> an f32 matmul of the widened 8-bit operands, times both scales."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.ScaledMatmulOp, rewriter: PatternRewriter) -> None:
        b = _Emitter(rewriter, op)
        wide = [b.cast(v, Float32Type()) for v in (op.lhs, op.rhs)]
        product = b.op(g.MatmulOp, *wide)
        scaled = b.op(g.MulOp, b.op(g.MulOp, product, op.scale_lhs), op.scale_rhs)
        rewriter.replace(op, [], [scaled])


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
    DecomposeAttentionPattern(),
    DecomposeLayerNormPattern(),
    DecomposeBatchNormPattern(),
    DecomposeScaledMatmulPattern(),
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
    """Rewrite softmax, layer_norm, batch_norm, attention and scaled_matmul into primitive
    graph ops (see module doc)."""

    name = "decompose-composites"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        decompose(op)
