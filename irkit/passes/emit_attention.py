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

import numpy as np
from xdsl.dialects import arith, memref, vector
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import DictionaryAttr, Float32Type, Float64Type, IntegerAttr, VectorType
from xdsl.ir import Attribute, SSAValue

from irkit.dialects import graph as g
from irkit.dtypes import numpy_dtype
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
        _each(
            self.em.b,
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

            _each(self.em.b, dv, update)
            return []

        b_.for_range(0, width, 1, [], gather)
        return [m_new, em.fop(arith.AddfOp, em.fop(arith.MulfOp, running, rescale), block_sum)]


def emit_fused_attention(em: KernelEmitter, op: g.AttentionOp, out: SSAValue) -> None:
    """Store `op`'s result in `out`: by register tiles where the mark names a vector width
    and the types allow (`_Tiles`), else one query row at a time (the loops of the module
    docstring). (A decode step's form, `emit_decode`, is the kernel emitter's first
    choice.)"""
    tiles = _Tiles.of(em, op, out)
    if tiles is not None:
        tiles.emit()
        return
    q, k, v = op.operands[:3]
    batch, heads, sq, _ = shape_of(q)
    kv_heads, sk = shape_of(k)[1], shape_of(k)[2]
    dv = shape_of(v)[3]
    group = heads // kv_heads
    ct = compute_type(g.element_type_of(q))
    b_ = em.b
    block = min(BLOCK, sk)

    def row(idx: list[SSAValue]) -> None:
        (bi, h), i = heads_of(b_, idx[0], heads), idx[1]
        hk = h if group == 1 else b_.add(arith.DivUIOp(h, b_.index(group)))
        scores = b_.add(memref.AllocaOp.get(ct, 64, [block]))
        acc = b_.add(memref.AllocaOp.get(ct, 64, [dv]))
        r = _Row(em, op, bi, h, i, hk, scores, acc, ct)
        _each(b_, dv, lambda e: b_.store(b_.float(0.0, ct), acc, [e]))
        limit: SSAValue | int = sk
        if g.bool_of(op.properties, "causal"):  # keys 0 .. i + Sk - Sq: up to the query's own
            limit = b_.add(arith.MinSIOp(b_.iadd(i, sk - sq + 1), b_.index(sk)))
        inits = [b_.float(-math.inf, ct), b_.float(0.0, ct)]
        _, total = b_.for_range(0, limit, block, inits, lambda j0, c: r.key_block(j0, limit, c))
        _each(
            b_,
            dv,
            lambda e: b_.store(
                em.fop(arith.DivfOp, b_.load(acc, [e], ct), total), out, [bi, h, i, e]
            ),
        )

    em.b.parallel([batch * heads, sq], row)


@dataclass
class _Tiles:
    """Attention in register tiles with the queries along the vector lanes (FlashAttention-2's
    loop order on a CPU core, transposed so that every softmax statistic is a vertical
    vector op: no horizontal maximum or sum, no scalar exp):

        for b, h in parallel:
          kp[j, d] = k[b, hk, j, d], vp[j, e] = v[b, hk, j, e]     packed once a head,
                                                                   zero past Sk
          for each band of ROWS = RV vectors of query rows i0 .. (a row past Sq: row Sq - 1):
            qt[d, r] = q[i0 + r, d] * scale                       the band transposed
            ot = 0 [Dv, ROWS], m = -inf, l = 0 [ROWS]
            for each block of BLOCK keys j0 up to the band's last visible key:
              st[c, :] = sum_d kp[j0 + c, d] * qt[d, :]            NC keys x RV vectors
                                                                   in registers
              where the block passes a row's last key (causal diagonal, past Sk) or a mask
              is given: st[c, r] masked (-inf), plus the mask
              m' = max(m, max_c st[c, :]), base = max(m', -FLT_MAX)     (all masked: 0 weight)
              st[c, :] = exp(st[c, :] - base), alpha = exp(m - base), l = l alpha + sum_c st
              ot[e, :] = ot[e, :] alpha + sum_c vp[j0 + c, e] * st[c, :]   NE x RV vectors
            out[b, h, i0 + r, e] = ot[e, r] / l[r]

    A key broadcast feeds RV multiply-adds, a query vector NC; a block of keys and values
    (2 x BLOCK x D) stays in L1 while the band reads it. The softmax is loops over the
    block's rows of st, contiguous along the lanes, that LLVM vectorizes (`expand-math`'s
    exp). Rows along the lanes instead of keys (the first form tried): its per-row maximum
    and sum were horizontal reductions and its rescale a scalar exp each row and block,
    30% of the time at S = 1024."""

    em: KernelEmitter
    op: g.AttentionOp
    out: SSAValue
    lanes: int
    row_vectors: int
    block: int
    registers: int

    @staticmethod
    def of(em: KernelEmitter, op: g.AttentionOp, out: SSAValue) -> _Tiles | None:
        mark = op.attributes.get(FUSED_ATTR)
        if not isinstance(mark, DictionaryAttr):
            return None
        values = [
            mark.data.get(key) for key in ("vector-bits", "row-vectors", "block", "registers")
        ]
        if not all(isinstance(x, IntegerAttr) for x in values):
            return None
        bits, rv, block, regs = (x.value.data for x in values if isinstance(x, IntegerAttr))
        et = g.element_type_of(op.operands[0])
        if compute_type(et) != et or not isinstance(et, Float32Type | Float64Type):
            return None  # f16/bf16 would widen every load: the rows' loops do
        lanes, sq = bits // et.bitwidth, shape_of(op.operands[0])[2]
        if 4 * sq < lanes:  # a decode step: the lanes would be mostly copies of its rows, and
            return None  # packing K and V (read once) costs more than the row loops (measured)
        rv = min(rv, -(-sq // lanes))  # no more rows than Sq
        return _Tiles(em, op, out, lanes, rv, block, regs)

    @property
    def vtype(self) -> VectorType:
        return VectorType(g.element_type_of(self.op.operands[0]), [self.lanes])

    @property
    def rows(self) -> int:
        return self.row_vectors * self.lanes

    @property
    def columns(self) -> int:
        """Keys (scores) or value columns (the accumulator) a microkernel: RV x that many
        accumulators, RV vectors loaded and one broadcast, in the registers."""
        return max(1, (self.registers - self.row_vectors - 1) // self.row_vectors)

    def emit(self) -> None:
        q, k, v = self.op.operands[:3]
        batch, heads, _, dim = shape_of(q)
        kv_heads, sk = shape_of(k)[1], shape_of(k)[2]
        dv = shape_of(v)[3]
        block = min(self.block, sk)
        padded = -(-sk // block) * block
        ct, b_, em = g.element_type_of(q), self.em.b, self.em

        def head(idx: list[SSAValue]) -> None:
            bi, h = heads_of(b_, idx[0], heads)
            group = heads // kv_heads
            hk = h if group == 1 else b_.add(arith.DivUIOp(h, b_.index(group)))
            kp = b_.add(memref.AllocOp.get(ct, 64, [padded, dim]))
            vp = b_.add(memref.AllocOp.get(ct, 64, [padded, dv]))
            zero = b_.float(0.0, ct)
            for packed, source, width in ((kp, k, dim), (vp, v, dv)):

                def pack(j: SSAValue, packed=packed, source=source, width=width) -> None:
                    inside = em.cmpi("slt", j, sk)
                    jj = b_.add(arith.MinSIOp(j, b_.index(sk - 1)))
                    _each(
                        b_,
                        width,
                        lambda d: b_.store(
                            em.select(inside, em.value_at(source, [bi, hk, jj, d]), zero),
                            packed,
                            [j, d],
                        ),
                    )

                _each(b_, padded, pack)
            bufs = _TileBuffers(
                b_.add(memref.AllocaOp.get(ct, 64, [dim, self.rows])),
                b_.add(memref.AllocaOp.get(ct, 64, [block, self.rows])),
                b_.add(memref.AllocaOp.get(ct, 64, [dv, self.rows])),
                b_.add(memref.AllocaOp.get(ct, 64, [4, self.rows])),
                kp,
                vp,
            )
            bands = -(-shape_of(q)[2] // self.rows)
            _each(b_, bands, lambda t: self._band(bi, h, b_.imul(t, self.rows), block, bufs))
            b_.add(memref.DeallocOp.get(kp))
            b_.add(memref.DeallocOp.get(vp))

        b_.parallel([batch * heads], head)

    def _limit(self, i: SSAValue) -> SSAValue:
        """The first key query row i may not see: Sk, or causal its own plus one."""
        sq, sk = shape_of(self.op.operands[0])[2], shape_of(self.op.operands[1])[2]
        b_ = self.em.b
        if not g.bool_of(self.op.properties, "causal"):
            return b_.index(sk)
        return b_.add(arith.MinSIOp(b_.iadd(i, sk - sq + 1), b_.index(sk)))

    def _row(self, i0: SSAValue, r: SSAValue) -> SSAValue:
        """The query row of the band's row r (a row past Sq is row Sq - 1)."""
        b_, sq = self.em.b, shape_of(self.op.operands[0])[2]
        return b_.add(arith.MinSIOp(b_.iadd(i0, r), b_.index(sq - 1)))

    def _band(
        self, bi: SSAValue, h: SSAValue, i0: SSAValue, block: int, bufs: _TileBuffers
    ) -> None:
        em, b_, n = self.em, self.em.b, self.rows
        q = self.op.operands[0]
        sq, dim = shape_of(q)[2], shape_of(q)[3]
        ct = g.element_type_of(q)
        dv = shape_of(bufs.ot)[0]
        scale = b_.float(g.float_of(self.op.properties, "scale"), ct)

        def pack(r: SSAValue) -> None:
            i = self._row(i0, r)
            _each(
                b_,
                dim,
                lambda d: b_.store(
                    em.fop(arith.MulfOp, em.value_at(q, [bi, h, i, d]), scale), bufs.qt, [d, r]
                ),
            )

        _each(b_, n, pack)
        _each(
            b_, dv, lambda e: _each(b_, n, lambda r: b_.store(b_.float(0.0, ct), bufs.ot, [e, r]))
        )

        def start_stats(r: SSAValue) -> None:
            b_.store(b_.float(-math.inf, ct), bufs.stats, [b_.index(0), r])
            b_.store(b_.float(0.0, ct), bufs.stats, [b_.index(1), r])

        _each(b_, n, start_stats)
        first = self._limit(i0)  # the band's first row sees the fewest keys
        last = self._limit(self._row(i0, b_.index(n - 1)))

        def step(j0: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            _chunks(b_, block, self.columns, lambda c0, n: self._scores(j0, c0, n, bufs))
            if len(self.op.operands) == 4:
                self._mask(bi, h, i0, j0, block, bufs)
            else:
                b_.when(
                    em.cmpi("sgt", b_.iadd(j0, block), first),
                    lambda: self._mask(bi, h, i0, j0, block, bufs),
                )
            self._softmax(block, bufs)
            _chunks(b_, dv, self.columns, lambda e0, n: self._values(j0, e0, n, block, bufs))
            return []

        b_.for_range(0, last, block, [], step)

        def store(r: SSAValue) -> None:
            total = b_.load(bufs.stats, [b_.index(1), r], ct)
            row = b_.iadd(i0, r)
            _each(
                b_,
                dv,
                lambda e: b_.store(
                    em.fop(arith.DivfOp, b_.load(bufs.ot, [e, r], ct), total),
                    self.out,
                    [bi, h, row, e],
                ),
            )

        left = b_.add(arith.SubiOp(b_.index(sq), i0))
        _each(b_, b_.add(arith.MinSIOp(left, b_.index(n))), store)

    def _scores(self, j0: SSAValue, c0: SSAValue, nc: int, bufs: _TileBuffers) -> None:
        """st[c0 + c, :] = sum_d kp[j0 + c0 + c, d] * qt[d, :] for c < nc, in registers."""
        b_, vt, rv, lanes = self.em.b, self.vtype, self.row_vectors, self.lanes
        zero = b_.add(vector.BroadcastOp(b_.float(0.0, vt.element_type), vt))
        keys = [b_.iadd(b_.iadd(j0, c0), c) for c in range(nc)]
        cols = [b_.index(x * lanes) for x in range(rv)]

        def step(d: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
            qs = [b_.add(vector.LoadOp(bufs.qt, [d, col], vt)) for col in cols]
            out = []
            for c, j in enumerate(keys):
                kd = b_.add(vector.BroadcastOp(b_.load(bufs.kp, [j, d], vt.element_type), vt))
                out += [b_.add(vector.FMAOp(kd, qv, accs[c * rv + x])) for x, qv in enumerate(qs)]
            return out

        accs = b_.for_range(0, shape_of(bufs.qt)[0], 1, [zero] * (nc * rv), step)
        for c in range(nc):
            for x, col in enumerate(cols):
                b_.add(vector.StoreOp(accs[c * rv + x], bufs.st, [b_.iadd(c0, c), col]))

    def _mask(
        self, bi: SSAValue, h: SSAValue, i0: SSAValue, j0: SSAValue, block: int, bufs: _TileBuffers
    ) -> None:
        """st[c, r] plus the mask, and -inf from row r's limit on."""
        em, b_ = self.em, self.em.b
        ct = g.element_type_of(self.op.operands[0])
        sk = shape_of(self.op.operands[1])[2]
        neg_inf = b_.float(-math.inf, ct)

        def row(r: SSAValue) -> None:
            i = self._row(i0, r)
            limit = self._limit(i)

            def key(c: SSAValue) -> None:
                j = b_.iadd(j0, c)
                s = b_.load(bufs.st, [c, r], ct)
                if len(self.op.operands) == 4:
                    jj = b_.add(arith.MinSIOp(j, b_.index(sk - 1)))
                    s = _masked(em, self.op, s, [bi, h, i, jj], neg_inf)
                b_.store(em.select(em.cmpi("slt", j, limit), s, neg_inf), bufs.st, [c, r])

            _each(b_, block, key)

        _each(b_, self.rows, row)

    def _softmax(self, block: int, bufs: _TileBuffers) -> None:
        """The block's online softmax, every row of st a vector op along the band's rows:
        stats[0] the running maximum, [1] the sum, [2] the block's maximum then the
        accumulator's rescale, [3] the exponent's base."""
        em, b_, n = self.em, self.em.b, self.rows
        ct = g.element_type_of(self.op.operands[0])
        st, stats = bufs.st, bufs.stats
        at = [b_.index(x) for x in range(4)]
        _each(b_, n, lambda r: b_.store(b_.load(st, [b_.index(0), r], ct), stats, [at[2], r]))

        def peak(c: SSAValue, r: SSAValue) -> None:
            best = em.fop(arith.MaximumfOp, b_.load(stats, [at[2], r], ct), b_.load(st, [c, r], ct))
            b_.store(best, stats, [at[2], r])

        _each(b_, block, lambda c: _each(b_, n, lambda r: peak(c, r)))
        lowest = b_.float(float(-np.finfo(numpy_dtype(ct)).max), ct)

        def rescale(r: SSAValue) -> None:
            m = b_.load(stats, [at[0], r], ct)
            m_new = em.fop(arith.MaximumfOp, m, b_.load(stats, [at[2], r], ct))
            base = em.fop(arith.MaximumfOp, m_new, lowest)  # all masked so far: weigh 0
            alpha = em.fop(xmath.ExpOp, em.fop(arith.SubfOp, m, base))
            b_.store(m_new, stats, [at[0], r])
            b_.store(em.fop(arith.MulfOp, b_.load(stats, [at[1], r], ct), alpha), stats, [at[1], r])
            b_.store(alpha, stats, [at[2], r])
            b_.store(base, stats, [at[3], r])

        _each(b_, n, rescale)

        def weigh(c: SSAValue, r: SSAValue) -> None:
            p = em.fop(
                xmath.ExpOp,
                em.fop(arith.SubfOp, b_.load(st, [c, r], ct), b_.load(stats, [at[3], r], ct)),
            )
            b_.store(p, st, [c, r])
            b_.store(em.fop(arith.AddfOp, b_.load(stats, [at[1], r], ct), p), stats, [at[1], r])

        _each(b_, block, lambda c: _each(b_, n, lambda r: weigh(c, r)))

    def _values(self, j0: SSAValue, e0: SSAValue, ne: int, block: int, bufs: _TileBuffers) -> None:
        """ot[e0 + e, :] = ot[e0 + e, :] * alpha + sum_c vp[j0 + c, e0 + e] * st[c, :] for
        e < ne, in registers."""
        b_, vt, rv, lanes = self.em.b, self.vtype, self.row_vectors, self.lanes
        ct = vt.element_type
        cols = [b_.index(x * lanes) for x in range(rv)]
        alphas = [b_.add(vector.LoadOp(bufs.stats, [b_.index(2), col], vt)) for col in cols]
        es = [b_.iadd(e0, e) for e in range(ne)]
        accs = [
            b_.add(arith.MulfOp(b_.add(vector.LoadOp(bufs.ot, [e, col], vt)), alphas[x]))
            for e in es
            for x, col in enumerate(cols)
        ]

        def step(c: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
            ps = [b_.add(vector.LoadOp(bufs.st, [c, col], vt)) for col in cols]
            j = b_.iadd(j0, c)
            out = []
            for y, e in enumerate(es):
                ve = b_.add(vector.BroadcastOp(b_.load(bufs.vp, [j, e], ct), vt))
                out += [b_.add(vector.FMAOp(ve, p, accs[y * rv + x])) for x, p in enumerate(ps)]
            return out

        accs = b_.for_range(0, block, 1, accs, step)
        for y, e in enumerate(es):
            for x, col in enumerate(cols):
                b_.add(vector.StoreOp(accs[y * rv + x], bufs.ot, [e, col]))


@dataclass
class _TileBuffers:
    """A head's buffers: the band's queries transposed and scaled (D x ROWS), the block's
    scores (BLOCK x ROWS), the accumulator transposed (Dv x ROWS), the statistics (4 x
    ROWS, `_Tiles._softmax`), the packed keys and values (Sk padded to the block x D, Dv)."""

    qt: SSAValue
    st: SSAValue
    ot: SSAValue
    stats: SSAValue
    kp: SSAValue
    vp: SSAValue


def heads_of(b_, flat: SSAValue, heads: int) -> tuple[SSAValue, SSAValue]:
    """(batch, head) of a parallel loop's index over batch x heads: one dimension, so that
    `cpu-parallelize` threads it at a batch of 1 too (it cuts a loop's first dimension)."""
    if heads == 1:
        return flat, b_.index(0)
    return b_.add(arith.DivUIOp(flat, b_.index(heads))), b_.add(
        arith.RemUIOp(flat, b_.index(heads))
    )


def _chunks(b_, n: int, size: int, body: Callable[[SSAValue, int], object]) -> None:
    """`body(start, size)` over 0 .. n in chunks of `size`: the whole chunks as a loop (one
    copy of the microkernel, not n / size), then the rest, if any, once."""
    whole = n // size * size
    if whole == size:
        body(b_.index(0), size)
    elif whole:
        _each(b_, whole, lambda start: body(start, size), step=size)
    if n > whole:
        body(b_.index(whole), n - whole)


def _each(b_, n: SSAValue | int, body: Callable[[SSAValue], object], step: int = 1) -> None:
    """A loop over 0 .. n (by `step`) carrying nothing."""

    def inner(i: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        body(i)
        return []

    b_.for_range(0, n, step, [], inner)


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
