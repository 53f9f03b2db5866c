"""recognize-attention: find attention as exporters write it and make it one `graph.attention`.

torch.onnx writes a transformer's attention as a batch matmul of the queries and the
transposed keys, a scale (a multiplication, or a division by sqrt(D)), an additive mask
(BERT's extended padding mask, GPT-2's and Llama's causal one, built at run time from
Trilu, Where and the attention mask), a softmax over the keys and a batch matmul with the
values, on [B, H, S, D] tensors:

    batch_matmul(softmax(batch_matmul(q, kT) * c + m, axis=-1), v)     (c and m optional,
                                                                        either order)

This pass matches that chain, every operand order of the commutative ops, a scale on
either side, the mask as an addend or as `where(mask, scores, -inf)`, casts of the
probabilities to their own type (torch's softmax writes two), and replaces it with
`graph.attention(q, transpose(kT), v[, m], scale=c)`; the transpose it adds composes with
the one that made kT (`fold-transposes`). The scores and probabilities must have no other
reader (a model returning its attention weights keeps its chain). Only rank-4 operands:
the heads already split.

Optional. It changes no value beyond rounding: a division by c becomes a multiplication by
1/c, and the lowering (or a fused attention pass) computes the same chain. Without a fused
attention pass to take them, the ops it makes are decomposed again by the lowering, one
kernel per op: not in the default pipelines until the fused pass is. No options.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import BoolAttr, Float64Type, FloatAttr, ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from irkit.dialects import graph as g
from irkit.dtypes import dense_array
from irkit.ir import holds, shape_of


def _only_use(value: SSAValue) -> bool:
    return value.has_one_use()


def _scalar(value: SSAValue) -> float | None:
    """The value of a constant every element of which is one number."""
    op = value.owner
    if not isinstance(op, g.ConstantOp):
        return None
    values = dense_array(op.value)
    if values.size == 0 or not bool(np.all(values == values.flat[0])):
        return None
    return float(values.flat[0])


@dataclass
class _Match:
    q: SSAValue
    kt: SSAValue
    scale: float
    mask: SSAValue | None
    chain: list[Operation]
    """The ops matched, the last (nearest the softmax) first: erased once replaced."""


def _scores(value: SSAValue) -> _Match | None:
    """`batch_matmul(q, kT)`, scaled or not: the softmax's input before any mask."""
    op = value.owner
    if isinstance(op, g.MulOp | g.DivOp) and _only_use(value):
        a, b = op.operands
        for s, c in ((a, b), (b, a)) if isinstance(op, g.MulOp) else ((a, b),):
            factor = _scalar(c)
            if factor is None or factor == 0 or len(shape_of(c)) > len(shape_of(s)):
                continue
            inner = _scores(s)
            if inner is not None and inner.scale == 1.0:
                inner.scale = factor if isinstance(op, g.MulOp) else 1.0 / factor
                inner.chain.insert(0, op)
                return inner
        return None
    if isinstance(op, g.BatchMatmulOp) and _only_use(value):
        q, kt = op.operands
        if len(shape_of(q)) == 4 and len(shape_of(kt)) == 4:
            return _Match(q, kt, 1.0, None, [op])
    return None


def _masked(value: SSAValue) -> _Match | None:
    """The softmax's input: scores plus an additive mask (either order) or kept where a
    boolean mask holds (else -inf), or the scores alone."""
    op = value.owner
    if isinstance(op, g.AddOp) and _only_use(value):
        for s, m in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            found = _scores(s)
            if found is not None and g.kind_of(g.element_type_of(m)) == g.FLOAT:
                found.mask = m
                found.chain.insert(0, op)
                return found
        return None
    if isinstance(op, g.WhereOp) and _only_use(value):
        neg = _scalar(op.rhs)
        found = _scores(op.lhs)
        if found is not None and neg is not None and neg == -math.inf:
            found.mask = op.cond
            found.chain.insert(0, op)
            return found
        return None
    return _scores(value)


class RecognizeAttention(RewritePattern):
    """batch_matmul(softmax(scores), v) -> graph.attention (see the module docstring)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.BatchMatmulOp, rewriter: PatternRewriter) -> None:
        p, v = op.operands
        soft = p.owner
        chain: list[Operation] = []
        while isinstance(soft, g.CastOp) and soft.input.type == p.type and _only_use(p):
            chain.append(soft)  # torch's softmax casts to its own type: identities
            p = soft.input
            soft = p.owner
        if not isinstance(soft, g.SoftmaxOp) or not _only_use(p) or len(shape_of(v)) != 4:
            return
        if g.int_of(soft.properties, "axis") % 4 != 3:
            return
        found = _masked(soft.input)
        if found is None:
            return
        q, kt = found.q, found.kt
        batch, heads, sq, _ = shape_of(q)
        sk = shape_of(kt)[3]
        if shape_of(kt)[:2] != (batch, heads) or shape_of(v)[:3] != (batch, heads, sk):
            return  # broadcast batch matmuls: not attention's shapes
        scores = (batch, heads, sq, sk)
        if found.mask is not None and not _broadcasts(shape_of(found.mask), scores):
            return
        k = g.TransposeOp.create_inferred([kt], {"perm": g.int_array([0, 1, 3, 2])})
        operands = [q, k.results[0], v] + ([found.mask] if found.mask is not None else [])
        props = {
            "scale": FloatAttr(found.scale, Float64Type()),
            "causal": BoolAttr.from_bool(False),
        }
        attention = g.AttentionOp.create_inferred(operands, props)
        for new in (k, attention):
            new.location = op.location
        rewriter.insert(k)
        rewriter.insert(attention)
        rewriter.replace(op, [], [attention.results[0]])
        for dead in [*chain, soft, *found.chain]:  # nothing else read them (`_only_use`)
            rewriter.erase(dead)


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    if len(shape) > len(target):
        return False
    return all(a in (1, b) for a, b in zip(reversed(shape), reversed(target), strict=False))


@dataclass(frozen=True)
class RecognizeAttentionPass(ModulePass):
    """Exported attention chains as graph.attention (see the module docstring)."""

    name = "recognize-attention"
    is_optimization = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not holds(op, (g.SoftmaxOp,)):
            return
        PatternRewriteWalker(RecognizeAttention(), apply_recursively=False).rewrite_module(op)
