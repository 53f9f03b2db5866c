"""The tensor-core form of the GPU's fused attention: FlashAttention-2 on `mma.sync`
(`irkit_warp.mma_m16n8k16`), for f16 and bf16 inputs whose head dims are multiples of 16.

A block of W warps takes 16 W query rows of one (batch, head), each warp 16 of them:

    each warp's 16 rows of Q -> A fragments, read from global memory once, kept
    K and V tile 0 -> shared stage 0 (cp.async)
    for each tile of BK keys (causal: up to the tile's last visible key):
      K and V of the next tile -> the other stage (cp.async); wait for this tile's
      barrier (where K or V is not a kernel buffer: this tile copied here, one stage)
      S = Q K^T            mma m16n8k16, B from K [key][d] by ldmatrix (16 x BK a warp, f32)
      S *= scale log2(e); masked (causal, keys past Sk, the mask operand) to -inf
      m' = max(m, rowmax S)   a row's 8 x BK/8 values in the 4 lanes of a quad:
                              the lane's own, then shuffles xor 1 and 2
      P = exp2(S - m'), l = l exp2(m - m') + rowsum P (the lane's part; the quad adds at the end)
      O = O exp2(m - m') + P V P's C fragments are exactly A fragments of the next mma
                               (rounded to the input type), B from V [key][e] by
                               ldmatrix.trans
      barrier              (the stage is refilled next)
    O / l -> out (rows past Sq not stored)

Every thread holds two rows' statistics (rows g and g + 8 of its warp's 16, g = lane / 4),
its slice of S (BK / 2 values) and of O (Dv / 2 values) in registers; nothing of S x S is
stored. The accumulation, the softmax's statistics and the rescales are f32; P is rounded
to the input type for the second product, as FlashAttention does. Causal tiles run heaviest
first, as in the SIMT form. Shared rows are padded by 16 bytes, so the 8 row addresses of
an ldmatrix fall in 8 different bank groups.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.dialects import arith, gpu, scf, vector
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    MemRefType,
    NoneAttr,
    VectorType,
    i32,
)
from xdsl.ir import Attribute, Block, Region, SSAValue

from irkit.dialects import graph as g
from irkit.dialects.warp import LdmatrixX4Op, MmaM16n8k16Op, ShuffleOp
from irkit.dialects.warp_async import CpAsyncCommitOp, CpAsyncWaitOp
from irkit.ir import shape_of
from irkit.loops import SHARED_SPACE, STATIC_SHARED_LIMIT
from irkit.passes.emit_attention import _masked
from irkit.passes.map_to_gpu import X

if TYPE_CHECKING:
    from irkit.passes.emit_gpu_attention import GpuAttention

WARP, ROWS, CHUNK, K_STEP = 32, 16, 8, 16
"""A warp's lanes; its query rows (mma's M); a C fragment's columns (N); mma's K."""
PAD = 8
"""Elements of padding at the end of a shared row (16 bytes of f16/bf16)."""
LOG2E = math.log2(math.e)
A_PAIRS = [(0, 0), (8, 0), (0, 8), (8, 8)]
"""(row, column) offsets of an A fragment's four pairs from the lane's (g, 2t): A operand
i is at row g + 8 (i // 2 % 2), column 2t + i % 2 + 8 (i // 4)."""
B_PAIR_ORIGINS = [(0, 0), (0, 8), (8, 0), (8, 8)]
"""ldmatrix origins on B stored [n][k] (K's rows): two 8-column fragments of B."""
B_TRANS_ORIGINS = [(0, 0), (8, 0), (0, 8), (8, 8)]
"""ldmatrix.trans origins on B stored [k][n] (V's rows): two 8-column fragments of B."""
RING_WAIT = 1
"""Copy groups left in flight at a key tile's wait: the next tile's (this tile's has landed)."""
QUAD = (1, 2)
"""The xor offsets that reach the other 3 lanes of a quad (a fragment row's 4 lanes)."""


def fits_tensor_cores(op: g.AttentionOp) -> bool:
    """Whether the tensor-core form takes `op`: Q, K and V all f16 or all bf16, head dims
    (of Q and K, and of V) multiples of 16."""
    types = {type(g.element_type_of(x)) for x in op.operands[:3]}
    if len(types) != 1 or next(iter(types)) not in (Float16Type, BFloat16Type):
        return False
    q, v = shape_of(op.operands[0]), shape_of(op.operands[2])
    return q[-1] % K_STEP == 0 and v[-1] % K_STEP == 0


def key_tile(stages: int, dim: int, dv: int, wanted: int, itemsize: int) -> int:
    """Keys a shared tile: `wanted`, halved (down to 16) until the stages of K and V tiles
    fit the static shared-memory limit."""
    bk = wanted
    while bk > K_STEP and itemsize * stages * bk * (dim + dv + 2 * PAD) > STATIC_SHARED_LIMIT:
        bk //= 2
    return bk


@dataclass(frozen=True)
class _Block:
    """What `MmaAttention.emit` computes once a block and the key tiles read."""

    ring: bool
    k_tile: SSAValue
    v_tile: SSAValue
    q_frags: list[list[SSAValue]]
    rows: tuple[SSAValue, SSAValue]
    """The thread's two query rows (g and g + 8 of its warp's 16)."""
    quad_col: SSAValue
    """2 (lane % 4): the first column of the lane's C fragment values."""
    q0: SSAValue
    warp_row: SSAValue
    trips: SSAValue
    stage_in: Callable[[SSAValue, SSAValue], None]
    input_type: Attribute
    bq: int
    """Query rows a block (16 a warp)."""


@dataclass
class MmaAttention:
    """One marked `graph.attention` emitted as the tensor-core kernel (module docstring)."""

    att: GpuAttention
    bk: int = 0
    """Keys a shared tile (set by `emit`)."""
    heads: tuple[SSAValue, ...] = ()
    """The block's (batch, head) indices (set by `emit`)."""
    shared: _Block | None = None
    """What the key tiles share (set by `emit`)."""

    @property
    def block(self) -> _Block:
        assert self.shared is not None, "emit sets it first"
        return self.shared

    def emit(self) -> tuple[int, int, int]:
        """Emit the kernel; its launch: (grid, threads, flops)."""
        att, em = self.att, self.att.em
        b_, op = em.b, att.op
        batch, heads, sq, dim, _, sk, dv = att.shapes
        q, k, v = op.operands[:3]
        nt, ct = g.element_type_of(q), att.ct
        causal = g.bool_of(op.properties, "causal")
        warps = max(1, min(att.params["block-q"] // ROWS, -(-sq // ROWS)))
        bq, threads = warps * ROWS, warps * WARP
        ring = self._ring(k, v, dim, dv, nt)
        stages = 2 if ring else 1
        bk = self.bk = key_tile(stages, dim, dv, att.params.get("mma-block-k", 64), 2)
        tiles = -(-sq // bq)
        k_tile = att._shared("k_tile", [stages, bk, dim + PAD], nt)
        v_tile = att._shared("v_tile", [stages, bk, dv + PAD], nt)

        bid, tid = b_.add(gpu.BlockIdOp(X)), b_.add(gpu.ThreadIdOp(X))
        t = b_.add(arith.RemUIOp(bid, b_.index(tiles)))
        if causal:  # heaviest first: the last query tile sees the most keys
            t = b_.add(arith.SubiOp(b_.index(tiles - 1), t))
        bi, h, hk = att._heads(b_.add(arith.DivUIOp(bid, b_.index(tiles))))
        self.heads = (bi, h)
        lane = b_.add(arith.RemUIOp(tid, b_.index(WARP)))
        quad_row = b_.add(arith.DivUIOp(lane, b_.index(4)))
        quad_col = b_.imul(b_.add(arith.RemUIOp(lane, b_.index(4))), 2)
        q0 = b_.imul(t, bq)
        warp_row = b_.imul(b_.add(arith.DivUIOp(tid, b_.index(WARP))), ROWS)
        first = b_.iadd(b_.add(arith.AddiOp(q0, warp_row)), quad_row)
        rows = (first, b_.iadd(first, 8))  # this thread's two query rows
        keys = att._visible_keys(q0, bq) if causal else sk
        trips = -(-keys // bk) if isinstance(keys, int) else _ceil_div(b_, keys, bk)

        def stage_in(kt: SSAValue, stage: SSAValue) -> None:
            """Key tile kt's K and V into `stage` (by cp.async where the tiles are a ring)."""
            j0 = b_.imul(kt, bk)
            att._copy(tid, threads, k, k_tile, (bi, hk), j0, dim, sk, stage, ring)
            att._copy(tid, threads, v, v_tile, (bi, hk), j0, dv, sk, stage, ring)

        self.shared = _Block(
            ring, k_tile, v_tile, self._q_fragments(q, (bi, h), list(rows), quad_col),
            rows, quad_col, q0, warp_row, b_.index(trips) if isinstance(trips, int) else trips,
            stage_in, nt, bq,
        )  # fmt: skip
        if ring:  # the first tile in flight before the loop
            zero_i = b_.index(0)
            b_.when(em.cmpi("ult", zero_i, self.block.trips), lambda: stage_in(zero_i, zero_i))
            b_.add(CpAsyncCommitOp())
        neg_inf, zero = b_.float(-math.inf, ct), b_.float(0.0, ct)
        inits = [neg_inf, neg_inf, zero, zero, *[zero] * (4 * (dv // CHUNK))]
        self._store(b_.for_range(0, trips, 1, inits, self._key_tile))
        flops = batch * heads * sq * sk * 2 * (dim + dv) // (2 if causal else 1)
        return batch * heads * tiles, threads, flops

    def _key_tile(self, kt: SSAValue, carried: list[SSAValue]) -> list[SSAValue]:
        """One key tile: its copies (the next one's issued first where K and V are a ring),
        the scores, the online softmax's step, P V into the accumulators."""
        em, blk = self.att.em, self.block
        b_ = em.b
        m, total, flat = carried[:2], carried[2:4], carried[4:]
        acc = [flat[4 * n : 4 * n + 4] for n in range(len(flat) // 4)]
        if blk.ring:  # the next tile in flight while this one is computed
            stage = b_.add(arith.RemUIOp(kt, b_.index(2)))
            following = b_.iadd(kt, 1)
            other = b_.add(arith.SubiOp(b_.index(1), stage))
            b_.when(em.cmpi("ult", following, blk.trips), lambda: blk.stage_in(following, other))
            b_.add(CpAsyncCommitOp())
            b_.add(CpAsyncWaitOp(RING_WAIT))  # this tile's group has landed
        else:
            stage = b_.index(0)
            blk.stage_in(kt, stage)
        b_.add(gpu.BarrierOp())
        s = self._scores(stage, b_.imul(kt, self.bk))
        p, m, total, rescale = self._online(s, m, total)
        acc = [[em.fop(arith.MulfOp, x, rescale[c // 2]) for c, x in enumerate(a)] for a in acc]
        for kc in range(len(p) // 2):
            a = [b_.convert(x, blk.input_type) for x in [*p[2 * kc], *p[2 * kc + 1]]]
            for pair in range(len(acc) // 2):
                at = [stage, b_.index(kc * K_STEP), b_.index(pair * 16)]
                frags = self._fragments(blk.v_tile, at, B_TRANS_ORIGINS, transpose=True)
                for half in (0, 1):
                    n = 2 * pair + half
                    acc[n] = self._mma(a, frags[4 * half : 4 * half + 4], acc[n])
        b_.add(gpu.BarrierOp())  # the stage is refilled next
        return [*m, *total, *(x for a in acc for x in a)]

    def _scores(self, stage: SSAValue, j0: SSAValue) -> list[list[SSAValue]]:
        """The warp's 16 x BK scores of the key tile from j0 in `stage` (the lane's C
        fragments, a list per 8 keys): Q K^T on mma, scaled into base 2, masked where the
        tile needs it."""
        att, em, blk = self.att, self.att.em, self.block
        b_, op, ct = em.b, att.op, att.ct
        chunks = self.bk // CHUNK
        zero = b_.float(0.0, ct)
        s = [[zero] * 4 for _ in range(chunks)]
        for pair in range(chunks // 2):
            for kc, a in enumerate(blk.q_frags):
                at = [stage, b_.index(pair * 16), b_.index(kc * K_STEP)]
                frags = self._fragments(blk.k_tile, at, B_PAIR_ORIGINS)
                for half in (0, 1):
                    n = 2 * pair + half
                    s[n] = self._mma(a, frags[4 * half : 4 * half + 4], s[n])
        # base 2: exp(x) = exp2(x log2 e), log2 e folded into the scale where no additive
        # mask comes between (exp2 is one MUFU.EX2 on the GPU; expf is a range reduction)
        by_operand = len(op.operands) == 4
        scale = g.float_of(op.properties, "scale") * (1.0 if by_operand else LOG2E)
        s = [[em.fop(arith.MulfOp, x, b_.float(scale, ct)) for x in chunk] for chunk in s]
        keys_of = b_.add(arith.AddiOp(j0, blk.quad_col))

        def masked() -> list[SSAValue]:
            return [
                self._masked(x, blk.rows[c // 2], keys_of, n, c)
                for n, chunk in enumerate(s)
                for c, x in enumerate(chunk)
            ]

        crossing = self._crossing(j0, blk.q0, blk.warp_row)
        if isinstance(crossing, bool):
            flat = masked() if crossing else [x for chunk in s for x in chunk]
        else:
            flat = self._branch(crossing, masked, lambda: [x for ch in s for x in ch])
        s = [flat[4 * n : 4 * n + 4] for n in range(chunks)]
        if by_operand:
            s = [[em.fop(arith.MulfOp, x, b_.float(LOG2E, ct)) for x in chunk] for chunk in s]
        return s

    def _store(self, final: list[SSAValue]) -> None:
        """O / l for the thread's two rows (l added across the quad), rows past Sq not
        stored."""
        att, em, blk = self.att, self.att.em, self.block
        b_ = em.b
        sq = att.shapes[2]
        total, flat = [self._quad(x, arith.AddfOp) for x in final[2:4]], final[4:]
        for r, i in enumerate(blk.rows):

            def store(r=r, i=i) -> None:
                for n in range(len(flat) // 4):
                    for c in (2 * r, 2 * r + 1):
                        e = b_.iadd(blk.quad_col, n * CHUNK + c % 2)
                        x = em.fop(arith.DivfOp, flat[4 * n + c], total[r])
                        b_.store(x, att.out, [*self.heads, i, e])

            if sq % blk.bq:
                b_.when(em.cmpi("ult", i, sq), store)
            else:
                store()

    def _ring(self, k: SSAValue, v: SSAValue, dim: int, dv: int, nt) -> bool:
        """Whether K and V stage through a two-stage cp.async ring: both kernel buffers of
        the input type read in 16-byte pieces (else each tile is copied, then computed)."""
        lanes = self.att._copy_lanes
        k_type = MemRefType(nt, [1, dim + PAD], memory_space=SHARED_SPACE)
        v_type = MemRefType(nt, [1, dv + PAD], memory_space=SHARED_SPACE)
        return lanes(k, k_type, dim) > 1 and lanes(v, v_type, dv) > 1

    def _q_fragments(
        self,
        q: SSAValue,
        heads: tuple[SSAValue, SSAValue],
        rows: list[SSAValue],
        quad_col: SSAValue,
    ) -> list[list[SSAValue]]:
        """The lane's A fragments of its warp's 16 rows of Q, per 16 of the head dim, read
        from global memory once (pairs of consecutive features: 4-byte loads where Q is a
        kernel buffer); a row past Sq reads the last row (not stored)."""
        att, em = self.att, self.att.em
        b_ = em.b
        sq, dim = att.shapes[2], att.shapes[3]
        nt = g.element_type_of(q)
        if sq % ROWS or sq < ROWS:
            rows = [b_.add(arith.MinSIOp(r, b_.index(sq - 1))) for r in rows]
        buffer = em.buffers.get(q)
        paired = (
            buffer is not None
            and isinstance(buffer.type, MemRefType)
            and isinstance(buffer.type.layout, NoneAttr)
            and buffer.type.element_type == nt
        )
        frags = []
        for kc in range(dim // K_STEP):
            values = []
            for down, right in A_PAIRS:
                row = rows[down // 8]
                col = b_.iadd(quad_col, kc * K_STEP + right)
                if paired and buffer is not None:
                    vt = VectorType(nt, [2])
                    pair = b_.add(vector.LoadOp(buffer, [*heads, row, col], vt))
                    values += [b_.add(vector.ExtractOp(pair, [e], nt)) for e in range(2)]
                else:
                    for e in range(2):
                        x = em.value_at(q, [*heads, row, b_.iadd(col, e)])
                        values.append(b_.convert(x, nt))
            frags.append(values)
        return frags

    def _fragments(
        self,
        tile: SSAValue,
        at: list[SSAValue],
        origins: list[tuple[int, int]],
        transpose: bool = False,
    ) -> list[SSAValue]:
        """The 8 values of the lane's four ldmatrix pairs from `tile` at `at`."""
        b_ = self.att.em.b
        op = LdmatrixX4Op(tile, at, origins, transpose)
        b_.block.add_op(op)
        et = op.pairs[0].type.element_type  # type: ignore[attr-defined]
        return [b_.add(vector.ExtractOp(p, [q], et)) for p in op.pairs for q in range(2)]

    def _mma(self, a: list[SSAValue], b: list[SSAValue], c: list[SSAValue]) -> list[SSAValue]:
        op = MmaM16n8k16Op(a, b, c)
        self.att.em.b.block.add_op(op)
        return list(op.outputs)

    def _crossing(self, j0: SSAValue, q0: SSAValue, warp_row: SSAValue) -> SSAValue | bool:
        """Whether the key tile from j0 needs masking for this warp's 16 rows (the same in
        every lane: a branch without divergence): it runs past Sk, or past the warp's first
        row's last visible key (causal). True: every tile (a mask operand); False: none."""
        att, em = self.att, self.att.em
        b_, op = em.b, att.op
        sq, sk = att.shapes[2], att.shapes[5]
        if len(op.operands) == 4:
            return True
        end = b_.iadd(j0, self.bk)
        conds = []
        if sk % self.bk:
            conds.append(em.cmpi("ugt", end, sk))
        if g.bool_of(op.properties, "causal"):  # j0 + BK - 1 > row0 + Sk - Sq
            row0 = b_.add(arith.AddiOp(q0, warp_row))
            conds.append(em.cmpi("ugt", b_.iadd(end, sq - 1), b_.iadd(row0, sk)))
        if not conds:
            return False
        out = conds[0]
        for c in conds[1:]:
            out = b_.add(arith.OrIOp(out, c))
        return out

    def _branch(
        self,
        cond: SSAValue,
        then: Callable[[], list[SSAValue]],
        otherwise: Callable[[], list[SSAValue]],
    ) -> list[SSAValue]:
        """`scf.if` yielding the values `then` or `otherwise` computes."""
        b_ = self.att.em.b
        outer, regions, types = b_.block, [], []
        for branch in (then, otherwise):
            b_.block = Block()
            values = branch()
            types = [v.type for v in values]
            b_.block.add_op(scf.YieldOp(*values))
            regions.append(Region(b_.block))
        b_.block = outer
        op = scf.IfOp(cond, types, regions[0], regions[1])
        outer.add_op(op)
        return list(op.results)

    def _masked(self, x: SSAValue, row: SSAValue, keys_of: SSAValue, n: int, c: int) -> SSAValue:
        """Score `x` of chunk n, value c (key keys_of + 8 n + c % 2 of query `row`) or -inf
        where the key is hidden: past Sk, past the row's own (causal), by the mask operand."""
        att, em = self.att, self.att.em
        b_, op = em.b, att.op
        sq, sk = att.shapes[2], att.shapes[5]
        neg_inf = b_.float(-math.inf, att.ct)
        j = b_.iadd(keys_of, n * CHUNK + c % 2)
        hidden = []
        if sk % self.bk:  # the last tile runs past Sk
            hidden.append(em.cmpi("uge", j, sk))
        if g.bool_of(op.properties, "causal"):  # j > row + Sk - Sq
            hidden.append(em.cmpi("ugt", b_.iadd(j, sq), b_.iadd(row, sk)))
        if len(op.operands) == 4:
            i = b_.add(arith.MinSIOp(row, b_.index(sq - 1))) if sq > 1 else b_.index(0)
            jj = b_.add(arith.MinSIOp(j, b_.index(sk - 1)))
            x = _masked(em, op, x, [*self.heads, i, jj], neg_inf)
        for cond in hidden:
            x = em.select(cond, neg_inf, x)
        return x

    def _online(
        self, s: list[list[SSAValue]], m: list[SSAValue], total: list[SSAValue]
    ) -> tuple[list[list[SSAValue]], list[SSAValue], list[SSAValue], list[SSAValue]]:
        """The online softmax's step for the thread's two rows (value c of a chunk is row
        c // 2's): the weights, the new maxima and (lane-partial) sums, the rescales."""
        em, ct = self.att.em, self.att.ct
        b_ = em.b
        zero, neg_inf = b_.float(0.0, ct), b_.float(-math.inf, ct)
        new_m, new_total, rescale, bases = [], [], [], []
        for r in (0, 1):
            peak = m[r]
            for chunk in s:
                for x in chunk[2 * r : 2 * r + 2]:
                    peak = em.fop(arith.MaximumfOp, peak, x)
            peak = self._quad(peak, arith.MaximumfOp)
            base = em.select(em.cmpf("oeq", peak, neg_inf), zero, peak)
            new_m.append(peak)
            bases.append(base)
            rescale.append(em.fop(xmath.Exp2Op, em.fop(arith.SubfOp, m[r], base)))
        p = [
            [em.fop(xmath.Exp2Op, em.fop(arith.SubfOp, x, bases[c // 2])) for c, x in enumerate(ch)]
            for ch in s
        ]
        for r in (0, 1):
            part = zero
            for chunk in p:
                for x in chunk[2 * r : 2 * r + 2]:
                    part = em.fop(arith.AddfOp, part, x)
            new_total.append(em.fop(arith.AddfOp, em.fop(arith.MulfOp, total[r], rescale[r]), part))
        return p, new_m, new_total, rescale

    def _quad(self, x: SSAValue, combine: type[arith.FloatingPointLikeBinaryOperation]) -> SSAValue:
        """`combine` over the 4 lanes of x's quad (the lanes holding one row of a fragment),
        in each of them: shuffles xor 1 and 2."""
        return butterfly(self.att.em.b, x, QUAD, combine)


def _ceil_div(b_, n: SSAValue, d: int) -> SSAValue:
    return b_.add(arith.DivUIOp(b_.iadd(n, d - 1), b_.index(d)))


def butterfly(b_, value: SSAValue, offsets: Sequence[int], combine) -> SSAValue:
    """`combine` of `value` with the lanes `lane ^ offset` for each offset in turn, in
    every lane (xor shuffles): offsets 16..1 reach the whole warp, 1 and 2 a quad."""
    for offset in offsets:
        other = b_.add(ShuffleOp(value, b_.integer(offset, i32), b_.integer(WARP, i32)))
        value = b_.add(combine(value, other))
    return value
