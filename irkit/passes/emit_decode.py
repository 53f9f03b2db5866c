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

import numpy as np
from xdsl.dialects import arith, memref, vector
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import DenseArrayBase, DictionaryAttr, IntegerAttr, VectorType, i64
from xdsl.ir import SSAValue

from irkit.dialects import graph as g
from irkit.dtypes import numpy_dtype
from irkit.ir import shape_of
from irkit.passes.emit_attention import FUSED_ATTR, _each, _masked
from irkit.passes.loop_builder import LoopBuilder, compute_type

L1_BYTES = 32 * 1024
"""A block's keys and values together at most this: they stay in L1 while every row of the
group reads them."""


@dataclass
class Decode:
    em: object  # KernelEmitter (typed loosely: the emitter imports this module)
    op: g.AttentionOp
    out: SSAValue
    lanes: int
    keys: list[tuple[SSAValue, int]]
    """K's buffers along the positions, each with its length: K's own, or the parts of the
    concat that made it (a cache and the new positions), read in place."""
    values: list[tuple[SSAValue, int]]

    @staticmethod
    def of(em, op: g.AttentionOp, out: SSAValue) -> Decode | None:
        mark = op.attributes.get(FUSED_ATTR)
        if not isinstance(mark, DictionaryAttr):
            return None
        bits = mark.data.get("vector-bits")
        et = g.element_type_of(op.operands[0])
        if not isinstance(bits, IntegerAttr) or compute_type(et) != et or et.bitwidth < 32:
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
        q, k, v = self.op.operands[:3]
        batch, heads, sq, dim = shape_of(q)
        kv_heads, sk = shape_of(k)[1], shape_of(k)[2]
        dv = shape_of(v)[3]
        group = heads // kv_heads
        rows = group * sq
        ct = g.element_type_of(q)
        item = ct.bitwidth // 8
        block = L1_BYTES // ((dim + dv) * item) // self.lanes * self.lanes
        block = max(self.lanes, min(4 * self.lanes, block, -(-sk // self.lanes) * self.lanes))
        b_, em = self.em.b, self.em
        scale = b_.float(g.float_of(self.op.properties, "scale"), ct)

        def head(idx: list[SSAValue]) -> None:
            bi, hk = idx
            qp = b_.add(memref.AllocaOp.get(ct, 64, [rows, dim]))
            acc = b_.add(memref.AllocaOp.get(ct, 64, [rows, dv]))
            stats = b_.add(memref.AllocaOp.get(ct, 64, [2, rows]))
            sc = b_.add(memref.AllocaOp.get(ct, 64, [block]))

            def pack(r: SSAValue) -> None:
                h, i = self._head_row(hk, r)
                _each(
                    b_,
                    dim,
                    lambda d: b_.store(
                        em.fop(arith.MulfOp, em.value_at(q, [bi, h, i, d]), scale), qp, [r, d]
                    ),
                )
                _each(b_, dv, lambda e: b_.store(b_.float(0.0, ct), acc, [r, e]))
                b_.store(b_.float(-math.inf, ct), stats, [b_.index(0), r])
                b_.store(b_.float(0.0, ct), stats, [b_.index(1), r])

            _each(b_, rows, pack)

            start = 0
            for (kbuf, length), (vbuf, _) in zip(self.keys, self.values, strict=True):

                def step(j0, _, start=start, part=(kbuf, vbuf, length)) -> list[SSAValue]:
                    bufs = (qp, acc, stats, sc)
                    _each(b_, rows, lambda r: self._row(bi, hk, r, start, j0, block, part, bufs))
                    return []

                b_.for_range(0, length, block, [], step)
                start += length

            def store(r: SSAValue) -> None:
                h, i = self._head_row(hk, r)
                total = b_.load(stats, [b_.index(1), r], ct)
                _each(
                    b_,
                    dv,
                    lambda e: b_.store(
                        em.fop(arith.DivfOp, b_.load(acc, [r, e], ct), total),
                        self.out,
                        [bi, h, i, e],
                    ),
                )

            _each(b_, rows, store)

        b_.parallel([batch, kv_heads], head)

    def _head_row(self, hk: SSAValue, r: SSAValue) -> tuple[SSAValue, SSAValue]:
        """Row r of the group's rows: its query head and query row."""
        b_ = self.em.b
        q, k = self.op.operands[:2]
        sq, group = shape_of(q)[2], shape_of(q)[1] // shape_of(k)[1]
        h = b_.iadd(b_.imul(hk, group), b_.add(arith.DivUIOp(r, b_.index(sq))))
        return h, b_.add(arith.RemUIOp(r, b_.index(sq)))

    def _row(self, bi, hk, r, start: int, j0, block: int, part, bufs) -> None:
        """Row r against the block of keys j0 .. of a part of K and V (its keys from
        `start` on in the whole): scores, the online softmax's update, the values'."""
        qp, acc, stats, sc = bufs
        kbuf, vbuf, length = part
        em, b_, vt, lanes = self.em, self.em.b, self.vtype, self.lanes
        q, k, v = self.op.operands[:3]
        sq, dim = shape_of(q)[2], shape_of(q)[3]
        sk, dv = shape_of(k)[2], shape_of(v)[3]
        ct = vt.element_type
        h, i = self._head_row(hk, r)
        # the limit in the part's own positions: its keys from there on are hidden from row i
        limit = b_.index(length)
        if g.bool_of(self.op.properties, "causal"):
            limit = b_.add(arith.MinSIOp(b_.iadd(i, sk - sq + 1 - start), limit))
        last = b_.index(length - 1)
        zero = b_.add(vector.BroadcastOp(b_.float(0.0, ct), vt))
        for c0 in range(0, block, lanes):
            keys = [b_.add(arith.MinSIOp(b_.iadd(j0, c0 + c), last)) for c in range(lanes)]

            def dot(d: SSAValue, parts: list[SSAValue], keys=keys) -> list[SSAValue]:
                qv = b_.add(vector.LoadOp(qp, [r, d], vt))
                return [
                    b_.add(vector.FMAOp(qv, b_.add(vector.LoadOp(kbuf, [bi, hk, j, d], vt)), p))
                    for j, p in zip(keys, parts, strict=True)
                ]

            parts = b_.for_range(0, dim, lanes, [zero] * lanes, dot)
            b_.add(vector.StoreOp(_add_across(b_, parts, lanes), sc, [b_.index(c0)]))
        neg_inf = b_.float(-math.inf, ct)
        has_mask = len(self.op.operands) == 4

        def fix() -> None:
            def key(c: SSAValue) -> None:
                j = b_.iadd(j0, c)
                s = b_.load(sc, [c], ct)
                if has_mask:
                    jj = b_.iadd(b_.add(arith.MinSIOp(j, last)), start)
                    s = _masked(em, self.op, s, [bi, h, i, jj], neg_inf)
                b_.store(em.select(em.cmpi("slt", j, limit), s, neg_inf), sc, [c])

            _each(b_, block, key)

        if has_mask:
            fix()
        else:
            b_.when(em.cmpi("sgt", b_.iadd(j0, block), limit), fix)

        def peak(c: SSAValue, best: list[SSAValue]) -> list[SSAValue]:
            return [em.fop(arith.MaximumfOp, best[0], b_.load(sc, [c], ct))]

        (top,) = b_.for_range(0, block, 1, [neg_inf], peak)
        m = b_.load(stats, [b_.index(0), r], ct)
        m_new = em.fop(arith.MaximumfOp, m, top)
        lowest = b_.float(float(-np.finfo(numpy_dtype(ct)).max), ct)
        base = em.fop(arith.MaximumfOp, m_new, lowest)  # every key so far hidden: weigh 0
        alpha = em.fop(xmath.ExpOp, em.fop(arith.SubfOp, m, base))

        def weigh(c: SSAValue, total: list[SSAValue]) -> list[SSAValue]:
            p = em.fop(xmath.ExpOp, em.fop(arith.SubfOp, b_.load(sc, [c], ct), base))
            b_.store(p, sc, [c])
            return [em.fop(arith.AddfOp, total[0], p)]

        (block_sum,) = b_.for_range(0, block, 1, [b_.float(0.0, ct)], weigh)
        l_old = b_.load(stats, [b_.index(1), r], ct)
        b_.store(m_new, stats, [b_.index(0), r])
        b_.store(
            em.fop(arith.AddfOp, em.fop(arith.MulfOp, l_old, alpha), block_sum),
            stats,
            [b_.index(1), r],
        )
        rescale = b_.add(vector.BroadcastOp(alpha, vt))
        cols = [b_.index(e) for e in range(0, dv, lanes)]
        accs = [
            b_.add(arith.MulfOp(b_.add(vector.LoadOp(acc, [r, col], vt)), rescale)) for col in cols
        ]

        def gather(c: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
            p = b_.add(vector.BroadcastOp(b_.load(sc, [c], ct), vt))
            j = b_.add(arith.MinSIOp(b_.iadd(j0, c), last))
            return [
                b_.add(vector.FMAOp(p, b_.add(vector.LoadOp(vbuf, [bi, hk, j, col], vt)), a))
                for col, a in zip(cols, accs, strict=True)
            ]

        accs = b_.for_range(0, block, 1, accs, gather)
        for col, a in zip(cols, accs, strict=True):
            b_.add(vector.StoreOp(a, acc, [r, col]))


def _parts(em, value: SSAValue) -> list[tuple[SSAValue, int]] | None:
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
            src = 0 if slot < keys else lanes
            at = src + (slot % keys) * partials
            lo += [at + p for p in range(half)]
            hi += [at + half + p for p in range(half)]
        out = []
        for a, c in zip(parts[0::2], parts[1::2], strict=True):
            pair = [b_.add(_shuffle(a, c, mask)) for mask in (lo, hi)]
            out.append(b_.add(arith.AddfOp(*pair)))
        parts, keys, partials = out, keys * 2, half
    return parts[0]


def _shuffle(a: SSAValue, c: SSAValue, mask: list[int]) -> vector.ShuffleOp:
    return vector.ShuffleOp(a, c, DenseArrayBase.from_list(i64, mask), result_type=a.type)
