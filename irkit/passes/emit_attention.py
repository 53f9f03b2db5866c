"""The fused loop lowering of `graph.attention` (what `cpu-fuse-attention` asks for): one
query row at a time, the keys in blocks, the softmax online, so that no S x S score is
ever stored (FlashAttention's algorithm, row by row):

    for b, h, i in parallel:                        acc[Dv] = 0, m = -inf, l = 0
      for each block of BLOCK keys up to the last key query i may see (causal: i + Sk - Sq):
        s[c] = scale * q[i] . k[j0 + c]  (+ mask)   one dot product a key, d innermost
        m' = max(m, max_c s[c])
        p[c] = exp(s[c] - m'), r = exp(m - m')      (m' = -inf, every key so far masked: 0)
        l = l * r + sum_c p[c]
        acc[e] = acc[e] * r + sum_c p[c] * v[j0 + c][e]     e innermost
        m = m'
      out[b, h, i, e] = acc[e] / l

Causal keys past a query's last are never visited (the loop's bound is the query's own),
so the masked half of a causal attention costs nothing. The block's scores and the row's
accumulator live in stack buffers (`memref.alloca`); the inner loops run along
contiguous memory (a key's features, a value's), which LLVM vectorizes (with
`reassociate-reductions` for the dot products, sums and maxima, `expand-math` for exp).
Memory: the inputs and the output, nothing of size S x S.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.dialects import arith, memref
from xdsl.dialects import math as xmath
from xdsl.ir import Attribute, SSAValue

from irkit.dialects import graph as g
from irkit.ir import shape_of
from irkit.passes.loop_builder import compute_type

if TYPE_CHECKING:
    from irkit.passes.kernel_emitter import KernelEmitter

BLOCK = 64
"""Keys a block: its scores (256 bytes in f32) stay in L1 between the phases."""

FUSED_ATTR = "irkit.fused"
"""On a `graph.attention`: lower it by these loops (`cpu-fuse-attention` sets it), not as
its decomposition."""


@dataclass
class _Row:
    """One query row's context: its indices, the key/value head, the stack buffers."""

    em: KernelEmitter
    op: g.AttentionOp
    b: SSAValue
    h: SSAValue
    i: SSAValue
    hk: SSAValue
    scores: SSAValue
    acc: SSAValue
    ct: Attribute

    def key_block(
        self, j0: SSAValue, limit: SSAValue | int, carried: list[SSAValue]
    ) -> list[SSAValue]:
        """The next block of keys from j0: the running maximum and sum, updated."""
        em, b_, ct = self.em, self.em.b, self.ct
        q, k, v = self.op.operands[:3]
        mask = self.op.operands[3] if len(self.op.operands) == 4 else None
        dim, dv = shape_of(q)[3], shape_of(v)[3]
        zero, neg_inf = b_.float(0.0, ct), b_.float(-math.inf, ct)
        m, running = carried
        left = b_.add(arith.SubiOp(_index(b_, limit), j0))
        width = b_.add(arith.MinSIOp(b_.index(shape_of(self.scores)[0]), left))

        def score(c: SSAValue, best: list[SSAValue]) -> list[SSAValue]:
            j = b_.iadd(j0, c)

            def dot(d: SSAValue, s: list[SSAValue]) -> list[SSAValue]:
                a = em.value_at(q, [self.b, self.h, self.i, d])
                kd = em.value_at(k, [self.b, self.hk, j, d])
                return [em.fop(arith.AddfOp, s[0], em.fop(arith.MulfOp, a, kd))]

            (s,) = b_.for_range(0, dim, 1, [zero], dot)
            s = em.fop(arith.MulfOp, s, b_.float(g.float_of(self.op.properties, "scale"), ct))
            if mask is not None:
                s = _masked(em, self.op, s, [self.b, self.h, self.i, j], neg_inf)
            b_.store(s, self.scores, [c])
            return [em.fop(arith.MaximumfOp, best[0], s)]

        (peak,) = b_.for_range(0, width, 1, [neg_inf], score)
        m_new = em.fop(arith.MaximumfOp, m, peak)
        base = em.select(em.cmpf("oeq", m_new, neg_inf), zero, m_new)  # all masked: weigh 0
        rescale = em.fop(xmath.ExpOp, em.fop(arith.SubfOp, m, base))

        def weigh(c: SSAValue, total: list[SSAValue]) -> list[SSAValue]:
            p = em.fop(xmath.ExpOp, em.fop(arith.SubfOp, b_.load(self.scores, [c], ct), base))
            b_.store(p, self.scores, [c])
            return [em.fop(arith.AddfOp, total[0], p)]

        (block_sum,) = b_.for_range(0, width, 1, [zero], weigh)
        self.each(
            dv,
            lambda e: b_.store(
                em.fop(arith.MulfOp, b_.load(self.acc, [e], ct), rescale), self.acc, [e]
            ),
        )

        def gather(c: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            p, j = b_.load(self.scores, [c], ct), b_.iadd(j0, c)

            def update(e: SSAValue) -> None:
                ve = em.value_at(v, [self.b, self.hk, j, e])
                new = em.fop(arith.AddfOp, b_.load(self.acc, [e], ct), em.fop(arith.MulfOp, p, ve))
                b_.store(new, self.acc, [e])

            self.each(dv, update)
            return []

        b_.for_range(0, width, 1, [], gather)
        return [m_new, em.fop(arith.AddfOp, em.fop(arith.MulfOp, running, rescale), block_sum)]

    def each(self, n: int, body: Callable[[SSAValue], None]) -> None:
        """A loop over 0 .. n carrying nothing."""

        def step(e: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            body(e)
            return []

        self.em.b.for_range(0, n, 1, [], step)


def emit_fused_attention(em: KernelEmitter, op: g.AttentionOp, out: SSAValue) -> None:
    """Store `op`'s result in `out` by the loops of the module docstring."""
    q, k, v = op.operands[:3]
    batch, heads, sq, _ = shape_of(q)
    kv_heads, sk = shape_of(k)[1], shape_of(k)[2]
    dv = shape_of(v)[3]
    group = heads // kv_heads
    ct = compute_type(g.element_type_of(q))
    b_ = em.b
    block = min(BLOCK, sk)

    def row(idx: list[SSAValue]) -> None:
        bi, h, i = idx
        hk = h if group == 1 else b_.add(arith.DivUIOp(h, b_.index(group)))
        scores = b_.add(memref.AllocaOp.get(ct, 64, [block]))
        acc = b_.add(memref.AllocaOp.get(ct, 64, [dv]))
        r = _Row(em, op, bi, h, i, hk, scores, acc, ct)
        r.each(dv, lambda e: b_.store(b_.float(0.0, ct), acc, [e]))
        limit: SSAValue | int = sk
        if g.bool_of(op.properties, "causal"):  # keys 0 .. i + Sk - Sq: up to the query's own
            limit = b_.add(arith.MinSIOp(b_.iadd(i, sk - sq + 1), b_.index(sk)))
        inits = [b_.float(-math.inf, ct), b_.float(0.0, ct)]
        _, total = b_.for_range(0, limit, block, inits, lambda j0, c: r.key_block(j0, limit, c))
        r.each(
            dv,
            lambda e: b_.store(
                em.fop(arith.DivfOp, b_.load(acc, [e], ct), total), out, [bi, h, i, e]
            ),
        )

    em.b.parallel([batch, heads, sq], row)


def _index(b_, value: SSAValue | int) -> SSAValue:
    return b_.index(value) if isinstance(value, int) else value


def _masked(
    em: KernelEmitter, op: g.AttentionOp, s: SSAValue, idx: list[SSAValue], neg_inf: SSAValue
) -> SSAValue:
    """The score `s` under the mask (operand 3) broadcast to [b, h, i, j]: plus it (float),
    or -inf where it is false (boolean)."""
    value = em.operand_at(op, 3, idx)
    if g.kind_of(g.element_type_of(op.operands[3])) == g.BOOL:
        return em.select(value, s, neg_inf)
    return em.fop(arith.AddfOp, s, value)
