"""The fused attention's decode form (what `cpu-fuse-attention` asks for where a few query
rows meet a long cache): the register tiles of `emit_attention` put the query rows along
the vector lanes, which a decode step (one row, or a few) would fill with copies, and they
pack K and V, which a decode step reads once. Here the keys go along the lanes instead,
read in place:

    for b, hk in parallel:                             the query heads of the group (GQA)
      qp[r, d] = q[b, h_r, i_r, d] * scale             rows r of every query head sharing hk
      for each block of BLOCK keys j0 (K and V of the block: L1, read by every row):
        for each row r:
          s[c] = qp[r, :] . k[b, hk, j0 + c, :]         LANES keys at a time: LANES vectors of
                                                        partial sums over d, added across in a
                                                        tree of shuffles into one vector of
                                                        LANES scores (no horizontal sum a key)
          where the block passes the row's last key or a mask is given: s masked
          m' = max(m, max s), p = exp(s - m'), alpha = exp(m - m'), l = l alpha + sum p
          o[r, :] = o[r, :] alpha + sum_c p[c] v[b, hk, j0 + c, :]   Dv / LANES registers
      out[b, h_r, i_r, :] = o[r, :] / l[r]

A key's features and a value's row are vector loads from the operands' own buffers, or
from the parts of the concat that made them (a decode step's cache and its new position,
which `fuse-kernels` puts in the attention's kernel): each part's blocks in turn, the
online softmax carried across (so K and V must be buffers or such concats, rows
contiguous, D and Dv whole vectors; else `emit_attention`'s row loops run). Keys past a
part's end in its last block read its last key and weigh 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from xdsl.dialects import arith, memref, vector
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import (
    DenseArrayBase,
    DictionaryAttr,
    Float32Type,
    Float64Type,
    IntegerAttr,
    VectorType,
    i64,
)
from xdsl.ir import SSAValue

from irkit.dialects import graph as g
from irkit.dtypes import numpy_dtype
from irkit.ir import shape_of
from irkit.passes.emit_attention import FUSED_ATTR, _each, _masked, heads_of
from irkit.passes.loop_builder import LoopBuilder

if TYPE_CHECKING:
    from irkit.passes.kernel_emitter import KernelEmitter

ROWS = 4
"""Rows of a group whose accumulators the values' update keeps in registers at once."""
L1_BYTES = 32 * 1024
"""A block's keys and values together at most this: they stay in L1 while every row of the
group reads them."""

Part = tuple[SSAValue, int]
"""A buffer of keys or values along the positions, and its length."""


@dataclass
class Decode:
    """The decode form of one `graph.attention` (see the module docstring)."""

    em: KernelEmitter
    op: g.AttentionOp
    out: SSAValue
    lanes: int
    keys: list[Part]
    """K's buffers along the positions: K's own, or the parts of the concat that made it (a
    cache and the new positions), read in place."""
    values: list[Part]

    @staticmethod
    def of(em: KernelEmitter, op: g.AttentionOp, out: SSAValue) -> Decode | None:
        """The decode form where the op is marked for tiles and is a decode step whose K
        and V it can read in place; else None."""
        mark = op.attributes.get(FUSED_ATTR)
        bits = mark.data.get("vector-bits") if isinstance(mark, DictionaryAttr) else None
        et = g.element_type_of(op.operands[0])
        if not isinstance(bits, IntegerAttr) or not isinstance(et, Float32Type | Float64Type):
            return None
        lanes = bits.value.data // et.bitwidth
        q, k, v = op.operands[:3]
        if 4 * shape_of(q)[2] >= lanes or shape_of(k)[3] % lanes or shape_of(v)[3] % lanes:
            return None
        keys, values = _parts(em, k), _parts(em, v)
        if keys is None or values is None or [n for _, n in keys] != [n for _, n in values]:
            return None
        return Decode(em, op, out, lanes, keys, values)

    @property
    def vtype(self) -> VectorType:
        return VectorType(g.element_type_of(self.op.operands[0]), [self.lanes])

    def emit(self) -> None:
        q, v = self.op.operands[0], self.op.operands[2]
        batch, heads, sq, dim = shape_of(q)
        kv_heads, dv = shape_of(self.op.operands[1])[1], shape_of(v)[3]
        rows = heads // kv_heads * sq
        ct = self.vtype.element_type
        b_, em = self.em.b, self.em
        scale = b_.float(g.float_of(self.op.properties, "scale"), ct)

        def head(idx: list[SSAValue]) -> None:
            bi, hk = heads_of(b_, idx[0], kv_heads)
            shapes = ([rows, dim], [rows, dv], [3, rows], [rows, self.block], [self.lanes])
            bufs = _Buffers(*(b_.add(memref.AllocaOp.get(ct, 64, shape)) for shape in shapes))

            def start(r: SSAValue) -> None:
                h, i = self.head_row(hk, r)

                def scaled(d: SSAValue) -> None:
                    x = em.value_at(q, [bi, h, i, d])
                    b_.store(em.fop(arith.MulfOp, x, scale), bufs.q, [r, d])

                _each(b_, dim, scaled)
                _each(b_, dv, lambda e: b_.store(b_.float(0.0, ct), bufs.acc, [r, e]))
                b_.store(b_.float(-math.inf, ct), bufs.stats, [b_.index(0), r])
                b_.store(b_.float(0.0, ct), bufs.stats, [b_.index(1), r])

            _each(b_, rows, start)
            offset = 0
            for (kbuf, length), (vbuf, _) in zip(self.keys, self.values, strict=True):
                # a short part (a decode step's new position) in a block of its own length
                size = min(self.block, -(-length // self.lanes) * self.lanes)

                def block(j0, _, at=offset, part=(kbuf, vbuf, length), size=size) -> list:
                    _each(b_, rows, lambda r: _Step(self, bi, hk, r, at, j0, part, bufs, size).emit())  # fmt: skip
                    self.weigh_values(bi, hk, j0, part[1], part[2], bufs, size)
                    return []

                b_.for_range(0, length, size, [], block)
                offset += length

            def store(r: SSAValue) -> None:
                h, i = self.head_row(hk, r)
                total = b_.load(bufs.stats, [b_.index(1), r], ct)

                def divided(e: SSAValue) -> None:
                    x = b_.load(bufs.acc, [r, e], ct)
                    b_.store(em.fop(arith.DivfOp, x, total), self.out, [bi, h, i, e])

                _each(b_, dv, divided)

            _each(b_, rows, store)

        b_.parallel([batch * kv_heads], head)

    def weigh_values(
        self, bi, hk, j0: SSAValue, vbuf: SSAValue, length: int, bufs: _Buffers, block: int
    ) -> None:
        """acc[r] = acc[r] * alpha[r] + sum_c weight[r, c] * v[key c] for the group's rows
        (after each row's softmax of the block), `ROWS` rows at a time: each key's row of V
        loaded once for them, their accumulators in registers (independent FMA chains)."""
        b_, vt, ct, lanes = self.em.b, self.vtype, self.vtype.element_type, self.lanes
        rows = shape_of(bufs.q)[0]
        cols = [b_.index(e) for e in range(0, shape_of(bufs.acc)[1], lanes)]
        last = b_.index(length - 1)
        for r0 in range(0, rows, ROWS):
            group = [b_.index(r) for r in range(r0, min(rows, r0 + ROWS))]
            accs = []
            for r in group:
                rescale = b_.add(vector.BroadcastOp(b_.load(bufs.stats, [b_.index(2), r], ct), vt))
                accs += [
                    b_.add(arith.MulfOp(b_.add(vector.LoadOp(bufs.acc, [r, col], vt)), rescale))
                    for col in cols
                ]

            def gather(c: SSAValue, accs: list[SSAValue], group=group) -> list[SSAValue]:
                j = b_.add(arith.MinSIOp(b_.iadd(j0, c), last))
                vrow = [b_.add(vector.LoadOp(vbuf, [bi, hk, j, col], vt)) for col in cols]
                out = []
                for n, r in enumerate(group):
                    p = b_.add(vector.BroadcastOp(b_.load(bufs.scores, [r, c], ct), vt))
                    mine = accs[n * len(cols) : (n + 1) * len(cols)]
                    out += [b_.add(vector.FMAOp(p, x, a)) for x, a in zip(vrow, mine, strict=True)]
                return out

            accs = b_.for_range(0, block, 1, accs, gather)
            for n, r in enumerate(group):
                for col, a in zip(cols, accs[n * len(cols) : (n + 1) * len(cols)], strict=True):
                    b_.add(vector.StoreOp(a, bufs.acc, [r, col]))

    @property
    def block(self) -> int:
        """Keys a block: whole vectors, at most 4, K's and V's rows for them within L1."""
        dim, dv = shape_of(self.op.operands[0])[3], shape_of(self.op.operands[2])[3]
        item = numpy_dtype(self.vtype.element_type).itemsize
        fits = L1_BYTES // ((dim + dv) * item) // self.lanes * self.lanes
        whole = -(-shape_of(self.op.operands[1])[2] // self.lanes) * self.lanes
        return max(self.lanes, min(8 * self.lanes, fits, whole))

    def head_row(self, hk: SSAValue, r: SSAValue) -> tuple[SSAValue, SSAValue]:
        """Row r of the group's rows: its query head and query row."""
        b_ = self.em.b
        q, k = self.op.operands[:2]
        sq, group = shape_of(q)[2], shape_of(q)[1] // shape_of(k)[1]
        h = b_.iadd(b_.imul(hk, group), b_.add(arith.DivUIOp(r, b_.index(sq))))
        return h, b_.add(arith.RemUIOp(r, b_.index(sq)))


@dataclass
class _Buffers:
    """A group's stack buffers: its rows' queries (scaled) and accumulators, the running
    maximum and sum of each row, a block's scores, a vector's lanes."""

    q: SSAValue
    acc: SSAValue
    stats: SSAValue
    scores: SSAValue
    lane: SSAValue
    """One vector, whose lane 0 a reduction across the lanes is read from."""


class _Step:
    """One row (query head and row) against one block of keys j0 .. of one part of K and V
    (whose keys start at `offset` in the whole)."""

    def __init__(
        self, d: Decode, bi, hk, r, offset: int, j0, part, bufs: _Buffers, block: int
    ) -> None:
        self.d, self.bi, self.hk, self.r, self.offset, self.j0 = d, bi, hk, r, offset, j0
        self.block = block
        self.kbuf, self.vbuf, length = part
        self.bufs = bufs
        self.em, self.b = d.em, d.em.b
        self.h, self.i = d.head_row(hk, r)
        q, k = d.op.operands[:2]
        self.ct = d.vtype.element_type
        self.last = self.b.index(length - 1)
        # keys from `limit` on (the part's own positions) are hidden from the row
        self.limit = self.b.index(length)
        if g.bool_of(d.op.properties, "causal"):
            sq, sk = shape_of(q)[2], shape_of(k)[2]
            own = self.b.iadd(self.i, sk - sq + 1 - offset)
            self.limit = self.b.add(arith.MinSIOp(own, self.limit))

    def key(self, c: int | SSAValue) -> SSAValue:
        """The part's position of the block's key c, the last where the part has ended."""
        return self.b.add(arith.MinSIOp(self.b.iadd(self.j0, c), self.last))

    def emit(self) -> None:
        self.scores()
        if len(self.d.op.operands) == 4:
            self.hide()
        else:
            past = self.em.cmpi("sgt", self.b.iadd(self.j0, self.block), self.limit)
            self.b.when(past, self.hide)
        self.softmax()

    def scores(self) -> None:
        """scores[c] = q[r] . k[key c], `lanes` keys at a time: partial sums along d, added
        across into one vector."""
        b_, vt, lanes, ct = self.b, self.d.vtype, self.d.lanes, self.ct
        zero = b_.add(vector.BroadcastOp(b_.float(0.0, ct), vt))
        for c0 in range(0, self.block, lanes):
            keys = [self.key(c0 + c) for c in range(lanes)]

            def dot(d: SSAValue, parts: list[SSAValue], keys=keys) -> list[SSAValue]:
                qv = b_.add(vector.LoadOp(self.bufs.q, [self.r, d], vt))
                at = [[self.bi, self.hk, j, d] for j in keys]
                kvs = [b_.add(vector.LoadOp(self.kbuf, idx, vt)) for idx in at]
                return [b_.add(vector.FMAOp(qv, kv, p)) for kv, p in zip(kvs, parts, strict=True)]

            parts = b_.for_range(0, shape_of(self.d.op.operands[0])[3], lanes, [zero] * lanes, dot)
            scores = _add_across(b_, parts, lanes)
            b_.add(vector.StoreOp(scores, self.bufs.scores, [self.r, b_.index(c0)]))

    def hide(self) -> None:
        """The block's scores plus the mask, and -inf from the row's limit on."""
        b_, em = self.b, self.em
        neg_inf = b_.float(-math.inf, self.ct)

        def key(c: SSAValue) -> None:
            j = b_.iadd(self.j0, c)
            s = b_.load(self.bufs.scores, [self.r, c], self.ct)
            if len(self.d.op.operands) == 4:
                at = [self.bi, self.h, self.i, b_.iadd(self.key(c), self.offset)]
                s = _masked(em, self.d.op, s, at, neg_inf)
            seen = em.select(em.cmpi("slt", j, self.limit), s, neg_inf)
            b_.store(seen, self.bufs.scores, [self.r, c])

        _each(b_, self.block, key)

    def softmax(self) -> None:
        """The online softmax's update: the scores become weights against the new running
        maximum, the running sum is rescaled and added to; the accumulator's rescale. The
        block's maximum and sum are vector ops across its vectors, then across the lanes
        by shuffles; the exp a loop without a carried value, which LLVM widens."""
        b_, em, ct, scores, stats = self.b, self.em, self.ct, self.bufs.scores, self.bufs.stats
        r = self.r
        vt, lanes = self.d.vtype, self.d.lanes
        starts = [b_.index(c) for c in range(0, self.block, lanes)]

        def across(cls: type, vectors: list[SSAValue]) -> SSAValue:
            """The lanes of `vectors` reduced by `cls`, the result in lane 0 (every lane)."""
            total = vectors[0]
            for x in vectors[1:]:
                total = b_.add(cls(total, x))
            step = lanes // 2
            while step:
                swapped = b_.add(_shuffle(total, total, [i ^ step for i in range(lanes)]))
                total, step = b_.add(cls(total, swapped)), step // 2
            b_.add(vector.StoreOp(total, self.bufs.lane, [b_.index(0)]))
            return b_.load(self.bufs.lane, [b_.index(0)], ct)

        top = across(arith.MaximumfOp, [b_.add(vector.LoadOp(scores, [r, c], vt)) for c in starts])
        m = b_.load(stats, [b_.index(0), self.r], ct)
        m_new = em.fop(arith.MaximumfOp, m, top)
        lowest = b_.float(float(-np.finfo(numpy_dtype(ct)).max), ct)
        base = em.fop(arith.MaximumfOp, m_new, lowest)  # every key so far hidden: weigh 0
        alpha = em.fop(xmath.ExpOp, em.fop(arith.SubfOp, m, base))

        def weigh(c: SSAValue) -> None:
            p = em.fop(xmath.ExpOp, em.fop(arith.SubfOp, b_.load(scores, [r, c], ct), base))
            b_.store(p, scores, [r, c])

        _each(b_, self.block, weigh)
        block_sum = across(
            arith.AddfOp, [b_.add(vector.LoadOp(scores, [r, c], vt)) for c in starts]
        )
        running = em.fop(arith.MulfOp, b_.load(stats, [b_.index(1), self.r], ct), alpha)
        b_.store(m_new, stats, [b_.index(0), self.r])
        b_.store(em.fop(arith.AddfOp, running, block_sum), stats, [b_.index(1), self.r])
        b_.store(alpha, stats, [b_.index(2), self.r])


def _parts(em: KernelEmitter, value: SSAValue) -> list[Part] | None:
    """`value`'s buffers along axis 2 with their lengths: its own, or the parts of the
    concat (fused into the kernel: `fuse-kernels`) that made it; None where it is computed
    otherwise."""
    if value in em.buffers:
        return [(em.buffers[value], shape_of(value)[2])]
    op = value.owner
    if isinstance(op, g.ConcatOp) and g.int_of(op.properties, "axis") % 4 == 2:
        if all(part in em.buffers for part in op.operands):
            return [(em.buffers[part], shape_of(part)[2]) for part in op.operands]
    return None


def _add_across(b_: LoopBuilder, parts: list[SSAValue], lanes: int) -> SSAValue:
    """One vector whose lane c is the sum of `parts[c]`'s lanes: pairs of vectors halved and
    added, each round doubling the sums a vector holds and halving the partials (key-major:
    lane = key * partials + partial), log2(lanes) rounds of shuffles and adds."""
    keys, partials = 1, lanes
    while len(parts) > 1:
        half = partials // 2
        lo, hi = [], []
        for slot in range(2 * keys):
            at = (0 if slot < keys else lanes) + (slot % keys) * partials
            lo += [at + p for p in range(half)]
            hi += [at + half + p for p in range(half)]
        out = []
        for a, c in zip(parts[0::2], parts[1::2], strict=True):
            low, high = (b_.add(_shuffle(a, c, mask)) for mask in (lo, hi))
            out.append(b_.add(arith.AddfOp(low, high)))
        parts, keys, partials = out, keys * 2, half
    return parts[0]


def _shuffle(a: SSAValue, c: SSAValue, mask: list[int]) -> vector.ShuffleOp:
    assert isinstance(a.type, VectorType)
    return vector.ShuffleOp(a, c, DenseArrayBase.from_list(i64, mask), result_type=a.type)
