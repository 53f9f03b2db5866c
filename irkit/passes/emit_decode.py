"""The fused attention's decode form (what `cpu-fuse-attention` asks for where a few query
rows meet a long cache): the register tiles of `emit_attention` put the query rows along
the vector lanes, which a decode step (one row, or a few) would fill with copies, and they
pack K and V, which a decode step reads once. Here the keys go along the lanes instead,
read in place:

    for b, hk in parallel:                             the query heads of the group (GQA)
      qp[r, d] = q[b, h_r, i_r, d] * scale             rows r of every query head sharing hk
      for each block of BLOCK keys j0 (K and V of the block: L1):
        scores, RB rows at a time (RB = 4, 2 or 1, dividing the rows):
          s[r, c] = qp[r, :] . k[b, hk, j0 + c, :]     LANES / RB keys against RB rows, each
                                                        key's features loaded once for them:
                                                        LANES vectors of partial sums over d,
                                                        added across in a tree of shuffles
                                                        into one vector (row-major), RB such
                                                        vectors regrouped into RB rows of
                                                        LANES scores
        each row: where the block passes its last key or a mask is given, s masked
        every row side by side (straight-line code, one exp loop with every row in it):
          m' = max(m, max s), p = exp(s - m'), alpha = exp(m - m'), l = l alpha + sum p
        the values, ROWS rows at a time, each row of V loaded once for them:
          o[r, :] = o[r, :] alpha + sum_c p[c] v[b, hk, j0 + c, :]   Dv / LANES registers a row
      out[b, h_r, i_r, :] = o[r, :] / l[r]

A key's features and a value's row are vector loads from the operands' own buffers, or
from the parts of the concat that made them (a decode step's cache and its new position,
which `fuse-kernels` puts in the attention's kernel): each part's blocks in turn (a short
part in a block of its own length), the online softmax carried across (so K and V must be
buffers or such concats, rows contiguous, D and Dv whole vectors; else `emit_attention`'s
row loops run). Keys past a part's end in its last block read its last key and weigh 0.

Measured (llama_decode at L = 2048, 8:2 heads of 32, one znver5 core): the attention 36.5
us one row at a time, 24.3 with the values shared by the rows, 21.9 with the scores, 17.6
with the softmax side by side.
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
            shapes = ([rows, dim], [rows, dv], [3, rows], [rows, self.block], [rows, self.lanes])
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
                    self.scores(bi, hk, j0, part[0], part[2], bufs, size)
                    for_rows = (self, bi, hk)
                    _each(b_, rows, lambda r: _Step(*for_rows, r, at, j0, part, bufs, size).emit())
                    self.softmax(bufs, size)
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

    def scores(
        self, bi, hk, j0: SSAValue, kbuf: SSAValue, length: int, bufs: _Buffers, block: int
    ) -> None:
        """scores[r, c] = q[r] . k[key c] for every row of the group, `lanes` keys at a
        time, RB rows together (a power of two dividing the rows, at most 4): in each of RB
        steps, lanes / RB keys against the RB rows, each key's features loaded once for all
        of them; the RB x lanes / RB vectors of partial sums along d added across into one
        vector (lane n * lanes / RB + k: row n, key k), the RB vectors regrouped by row."""
        b_, vt, lanes = self.em.b, self.vtype, self.lanes
        rows, dim = shape_of(bufs.q)
        rb = next(n for n in (4, 2, 1) if rows % n == 0 and n <= lanes)
        kc = lanes // rb
        zero = b_.add(vector.BroadcastOp(b_.float(0.0, self.vtype.element_type), vt))
        last = b_.index(length - 1)

        def chunk(r0: SSAValue, c0: SSAValue) -> None:
            group = [b_.iadd(r0, n) for n in range(rb)]
            subs = []
            for step in range(rb):
                first = b_.add(arith.AddiOp(j0, b_.iadd(c0, step * kc)))
                keys = [b_.add(arith.MinSIOp(b_.iadd(first, k), last)) for k in range(kc)]

                def dot(d: SSAValue, parts: list[SSAValue], keys=keys) -> list[SSAValue]:
                    kvs = [b_.add(vector.LoadOp(kbuf, [bi, hk, j, d], vt)) for j in keys]
                    out = []
                    for n, r in enumerate(group):
                        qv = b_.add(vector.LoadOp(bufs.q, [r, d], vt))
                        mine = parts[n * kc : (n + 1) * kc]
                        pairs = zip(kvs, mine, strict=True)
                        out += [b_.add(vector.FMAOp(qv, kv, p)) for kv, p in pairs]
                    return out

                parts = b_.for_range(0, dim, lanes, [zero] * lanes, dot)
                subs.append(_add_across(b_, parts, lanes))
            for r, vec in zip(group, _regroup(b_, subs, kc, lanes), strict=True):
                b_.add(vector.StoreOp(vec, bufs.scores, [r, c0]))

        _each(b_, rows, lambda r0: _each(b_, block, lambda c0: chunk(r0, c0), step=lanes), step=rb)

    def softmax(self, bufs: _Buffers, block: int) -> None:
        """The online softmax's update of every row of the group: the scores become weights
        against the new running maximum, the running sum is rescaled and added to, the
        accumulator's rescale kept (stats[2]). The rows side by side in straight-line code
        (their chains of reductions and exps overlap): a block's maximum and sum are vector
        ops across its vectors, then across the lanes by shuffles; the exps one loop over
        the keys with every row's inside, which LLVM widens."""
        b_, em, ct, vt, lanes = self.em.b, self.em, self.vtype.element_type, self.vtype, self.lanes
        scores, stats = bufs.scores, bufs.stats
        rows = [b_.index(r) for r in range(shape_of(bufs.q)[0])]
        starts = [b_.index(c) for c in range(0, block, lanes)]
        at = [b_.index(x) for x in range(3)]

        def across(cls: type, r: SSAValue) -> SSAValue:
            """Row r's scores reduced by `cls` (lane 0 of the lane buffer's row r)."""
            total = b_.add(vector.LoadOp(scores, [r, starts[0]], vt))
            for c in starts[1:]:
                total = b_.add(cls(total, b_.add(vector.LoadOp(scores, [r, c], vt))))
            step = lanes // 2
            while step:
                swapped = b_.add(_shuffle(total, total, [i ^ step for i in range(lanes)]))
                total, step = b_.add(cls(total, swapped)), step // 2
            b_.add(vector.StoreOp(total, bufs.lane, [r, at[0]]))
            return b_.load(bufs.lane, [r, at[0]], ct)

        lowest = b_.float(float(-np.finfo(numpy_dtype(ct)).max), ct)
        bases, alphas = [], []
        for r in rows:
            m = b_.load(stats, [at[0], r], ct)
            m_new = em.fop(arith.MaximumfOp, m, across(arith.MaximumfOp, r))
            bases.append(em.fop(arith.MaximumfOp, m_new, lowest))  # all hidden so far: weigh 0
            alphas.append(em.fop(xmath.ExpOp, em.fop(arith.SubfOp, m, bases[-1])))
            b_.store(m_new, stats, [at[0], r])

        def weigh(c: SSAValue) -> None:
            for r, base in zip(rows, bases, strict=True):
                x = em.fop(arith.SubfOp, b_.load(scores, [r, c], ct), base)
                b_.store(em.fop(xmath.ExpOp, x), scores, [r, c])

        _each(b_, block, weigh)
        for r, alpha in zip(rows, alphas, strict=True):
            running = em.fop(arith.MulfOp, b_.load(stats, [at[1], r], ct), alpha)
            b_.store(em.fop(arith.AddfOp, running, across(arith.AddfOp, r)), stats, [at[1], r])
            b_.store(alpha, stats, [at[2], r])

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
    """A group's stack buffers: its rows' queries (scaled) and accumulators, each row's
    running maximum, sum and last rescale, a block's scores of each row, a vector a row."""

    q: SSAValue
    acc: SSAValue
    stats: SSAValue
    scores: SSAValue
    lane: SSAValue
    """A vector a row, whose lane 0 a reduction across the lanes is read from."""


class _Step:
    """One row (query head and row) against one block of keys j0 .. of one part of K and V
    (whose keys start at `offset` in the whole): the keys it may not see hidden."""

    def __init__(
        self, d: Decode, bi, hk, r, offset: int, j0, part, bufs: _Buffers, block: int
    ) -> None:
        self.d, self.bi, self.hk, self.r, self.offset, self.j0 = d, bi, hk, r, offset, j0
        self.block = block
        length = part[2]
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
        """The block's scores of this row masked (`Decode.scores` computed them)."""
        if len(self.d.op.operands) == 4:
            self.hide()
        else:
            past = self.em.cmpi("sgt", self.b.iadd(self.j0, self.block), self.limit)
            self.b.when(past, self.hide)

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


def _regroup(b_: LoopBuilder, subs: list[SSAValue], width: int, lanes: int) -> list[SSAValue]:
    """Vectors regrouped: `subs[s]` holds len(subs) groups of `width` lanes (group n: row
    n); returns, per row n, the vector of its groups from every `subs[s]` in order (a
    transpose of blocks of lanes, by pairs of two-source shuffles)."""
    out = []
    for n in range(len(subs)):
        level = [(v, list(range(n * width, (n + 1) * width))) for v in subs]
        while len(level) > 1:
            pairs = zip(level[0::2], level[1::2], strict=True)
            level = [
                (
                    b_.add(_shuffle(a, c, _padded(la + [lanes + x for x in lc], lanes))),
                    list(range(len(la) + len(lc))),
                )
                for (a, la), (c, lc) in pairs
            ]
        out.append(level[0][0])
    return out


def _padded(mask: list[int], lanes: int) -> list[int]:
    """A shuffle mask of `lanes` entries: `mask`, then lane 0 for the lanes not used."""
    return mask + [0] * (lanes - len(mask))


def _shuffle(a: SSAValue, c: SSAValue, mask: list[int]) -> vector.ShuffleOp:
    assert isinstance(a.type, VectorType)
    return vector.ShuffleOp(a, c, DenseArrayBase.from_list(i64, mask), result_type=a.type)
