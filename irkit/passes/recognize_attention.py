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
the one that made kT (`fold-transposes`). A constant mask that hides every key after the
query's own (torch's `is_causal` exports a [S, S] constant of 0 and -inf) makes the op
causal, the mask dropped where it held nothing else: a fused attention then skips the
hidden half instead of reading a mask. The scores and probabilities must have no other
reader (a model returning its attention weights keeps its chain). Rank-4 operands (the
heads split), or rank 3 ([B, S, D]: heads folded into the batch, as older exporters and
hand-written blocks write it; taken as one head, reshaped in and out). Keys and values repeated for grouped query heads (transformers'
`repeat_kv`: a reshape, a broadcast and a reshape) are taken at their own heads, the
repetitions erased where nothing else reads them: Llama's, Qwen2's and Mistral's attention
reads its 2 key/value heads, not 4 copies.

Optional. It changes no value beyond rounding: a division by c becomes a multiplication by
1/c, and the lowering (or a fused attention pass) computes the same chain. Without a fused
attention pass to take them, the ops it makes are decomposed again by the lowering, one
kernel per op. In `default-cpu`, followed by `cpu-fuse-attention`. No options.
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
from irkit.dialects import shapes
from irkit.dtypes import dense_array
from irkit.ir import holds, shape_of


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
    if isinstance(op, g.MulOp | g.DivOp) and value.has_one_use():
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
    if isinstance(op, g.BatchMatmulOp) and value.has_one_use():
        q, kt = op.operands
        if len(shape_of(q)) == len(shape_of(kt)) in (3, 4):
            return _Match(q, kt, 1.0, None, [op])
    return None


def _masked(value: SSAValue) -> _Match | None:
    """The softmax's input: scores plus an additive mask (either order) or kept where a
    boolean mask holds (else -inf), or the scores alone."""
    op = value.owner
    if isinstance(op, g.AddOp) and value.has_one_use():
        for s, m in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            found = _scores(s)
            if found is not None and g.kind_of(g.element_type_of(m)) == g.FLOAT:
                found.mask = m
                found.chain.insert(0, op)
                return found
        return None
    if isinstance(op, g.WhereOp) and value.has_one_use():
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
        while isinstance(soft, g.CastOp) and soft.input.type == p.type and p.has_one_use():
            chain.append(soft)  # torch's softmax casts to its own type: identities
            p = soft.input
            soft = p.owner
        if not isinstance(soft, g.SoftmaxOp) or not p.has_one_use():
            return
        rank = len(shape_of(v))
        if rank not in (3, 4) or g.int_of(soft.properties, "axis") % rank != rank - 1:
            return
        found = _masked(soft.input)
        if found is None or len(shape_of(found.q)) != rank:
            return
        q, kt = found.q, found.kt
        batch, sq, sk = shape_of(q)[0], shape_of(q)[-2], shape_of(kt)[-1]
        lead = shape_of(q)[:-2]
        if shape_of(kt)[:-2] != lead or shape_of(v)[:-1] != (*lead, sk):
            return  # broadcast batch matmuls: not attention's shapes
        if found.mask is not None and not _broadcasts(shape_of(found.mask), (*lead, sq, sk)):
            return
        new: list[Operation] = []

        def made(o: Operation) -> SSAValue:
            new.append(o)
            return o.results[0]

        # scalar factors on q, on kT or on k under its transpose (SDPA's export scales q and
        # k by sqrt(scale) each) join the op's scale; k is taken from under its transpose
        q, scale = _peel(q, found.scale)
        kt_core, scale = _peel(kt, scale)
        swap = [*range(rank - 2), rank - 1, rank - 2]
        t = kt_core.owner
        k_src: SSAValue | None = None
        if isinstance(t, g.TransposeOp) and list(g.ints(t.properties, "perm")) == swap:
            k_src, scale = _peel(t.input, scale)
        grouped = _grouped(k_src, v) if rank == 4 and k_src is not None else None
        if grouped is not None:
            k_value, v = grouped
        elif rank == 4:
            k_value = k_src or made(
                g.TransposeOp.create_inferred([kt_core], {"perm": g.int_array(swap)})
            )
        else:  # [B, S, D] (heads folded into the batch, or one head): a head axis of 1
            k3 = k_src or made(
                g.TransposeOp.create_inferred([kt_core], {"perm": g.int_array(swap)})
            )
            q = made(g.ReshapeOp.build_to(q, [batch, 1, sq, shape_of(q)[2]]))
            k_value = made(g.ReshapeOp.build_to(k3, [batch, 1, sk, shape_of(k3)[2]]))
            v = made(g.ReshapeOp.build_to(v, [batch, 1, sk, shape_of(v)[2]]))
        mask = found.mask
        causal, keep = _causal(mask, sq, sk) if mask is not None else (False, True)
        if not keep:
            mask = None
        if mask is not None and rank == 3:  # [.., S, Sk] to [b, 1, s, k]
            m = (1,) * (3 - len(shape_of(mask))) + shape_of(mask)
            mask = made(g.ReshapeOp.build_to(mask, [m[0], 1, m[1], m[2]]))
        operands = [q, k_value, v] + ([mask] if mask is not None else [])
        props = {
            "scale": FloatAttr(scale, Float64Type()),
            "causal": BoolAttr.from_bool(causal),
        }
        result = made(g.AttentionOp.create_inferred(operands, props))
        if rank == 3:
            result = made(g.ReshapeOp.build_to(result, [batch, sq, shape_of(v)[3]]))
        for o in new:
            o.location = op.location
            rewriter.insert(o)
        repeated = [op.operands[1]]
        rewriter.replace(op, [], [result])
        dead = [*chain, soft, *found.chain]  # nothing else read them (`has_one_use`)
        inputs = [x for d in dead for x in d.operands]
        for d in dead:
            rewriter.erase(d)
        # the scalings, transposes and repetitions of q, k and v, and the constants, that
        # nothing else reads now
        _erase_unused(rewriter, [found.q, kt, *repeated, *inputs])


def _kv_heads(value: SSAValue) -> SSAValue | None:
    """The [B, Hk, S, D] tensor that `value` ([B, H, S, D]) repeats for grouped query heads,
    as transformers' repeat_kv exports it: reshape(broadcast_to(reshape(x, [B, Hk, 1, S, D]),
    [B, Hk, G, S, D]), [B, H, S, D]); None where it is not such a repetition."""
    outer = value.owner
    if not isinstance(outer, g.ReshapeOp):
        return None
    wide = outer.input.owner
    if not isinstance(wide, g.BroadcastToOp):
        return None
    inner = wide.input.owner
    if not isinstance(inner, g.ReshapeOp):
        return None
    x = inner.input
    b, hk, s, d = shape_of(x) if len(shape_of(x)) == 4 else (0, 0, 0, 0)
    group = shape_of(value)[1] // hk if hk else 0
    ok = (
        shape_of(inner.results[0]) == (b, hk, 1, s, d)
        and shape_of(wide.results[0]) == (b, hk, group, s, d)
        and shape_of(value) == (b, hk * group, s, d)
    )
    return x if ok else None


def _grouped(k: SSAValue, v: SSAValue) -> tuple[SSAValue, SSAValue] | None:
    """k and v at their own (fewer) heads where both were repeated for the query heads by
    the same group: attention reads the cache at Hk heads, not H."""
    k0, v0 = _kv_heads(k), _kv_heads(v)
    if k0 is None or v0 is None or shape_of(k0)[1] != shape_of(v0)[1]:
        return None
    return k0, v0


def _peel(value: SSAValue, scale: float) -> tuple[SSAValue, float]:
    """`value` without the multiplications by a scalar constant that made it (either
    operand order), their factors multiplied into `scale`."""
    while isinstance(op := value.owner, g.MulOp):
        for x, c in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            factor = _scalar(c)
            if factor is not None and shape_of(x) == shape_of(value):
                value, scale = x, scale * factor
                break
        else:
            break
    return value, scale


def _erase_unused(rewriter: PatternRewriter, values: list[SSAValue]) -> None:
    """The ops that computed `values`, and theirs, where nothing reads them any more."""
    stack = [v.owner for v in values]
    while stack:
        op = stack.pop()
        if not isinstance(op, g.GraphOp):
            continue
        if any(r.uses for r in op.results) or op.parent_block() is None:
            continue
        inputs = list(op.operands)
        rewriter.erase(op)
        stack += [v.owner for v in inputs]


def _causal(mask: SSAValue, sq: int, sk: int) -> tuple[bool, bool]:
    """(causal, keep the mask) for a constant mask that hides every key after a query's own
    (bottom-right: key j from query i where j > i + Sk - Sq), as exporters write a causal
    attention (torch's `is_causal`: a [S, S] constant of 0 and -inf): causal, and the mask
    kept only where it holds something else (other keys hidden, a bias). A mask known only
    at run time, or not causal: (False, True)."""
    op = mask.owner
    if not isinstance(op, g.ConstantOp) or len(shape_of(mask)) < 2 or sq > sk:
        return False, True
    values = dense_array(op.value).reshape(shape_of(mask))
    i, j = np.indices((sq, sk))
    later = j > i + (sk - sq)
    try:
        values = np.broadcast_to(values, (*values.shape[:-2], sq, sk))
    except ValueError:
        return False, True
    if values.dtype == np.bool_:  # where(mask, scores, -inf): hidden where False
        hidden, neutral = ~values, values
    else:
        hidden, neutral = values == -np.inf, values == 0
    if not later.any() or not bool(np.all(hidden[..., later])):
        return False, True
    return True, not bool(np.all(neutral[..., ~later]))


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether `shape` broadcasts to `target` (the rule `graph.attention` checks its mask by)."""
    try:
        return shapes.broadcast_shapes(shape, target) == target
    except shapes.ShapeError:
        return False


@dataclass(frozen=True)
class RecognizeAttentionPass(ModulePass):
    """Exported attention chains as graph.attention (see the module docstring)."""

    name = "recognize-attention"
    is_optimization = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not holds(op, (g.SoftmaxOp,)):
            return
        PatternRewriteWalker(RecognizeAttention(), apply_recursively=False).rewrite_module(op)
