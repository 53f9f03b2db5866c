"""The fused attention on the GPU (what `gpu-fuse-attention` asks for): one kernel a
`graph.attention`, GPU-mapped as `lower-graph-to-loops` emits it, nothing of size S x S
stored. Two forms, by the number of query rows:

- **tiles** (prefill): a block of `block-q` threads a tile of query rows, one row a
  thread (FlashAttention-2's loop order, f32 SIMT):

      block (b, h, tile t), thread r: row i = t * BQ + r; q[d] * scale in registers
      for each tile of BK keys (causal: up to the tile's last visible key):
        K and V of the tile -> shared memory, the threads' loads along d (coalesced)
        barrier
        s[c] = q . K[c]        (every thread reads the same K[c][d]: a broadcast)
        masked: causal (j past i + Sk - Sq), the mask operand, keys past Sk
        m' = max(m, max_c s[c]), r = exp(m - m'), p[c] = exp(s[c] - m')
        l = l r + sum_c p[c],  acc[e] = acc[e] r + sum_c p[c] V[c][e]
        barrier
      out[b, h, i, :] = acc / l

  The accumulator (Dv), the row of q (D) and the tile's scores (BK) live in registers.
  Causal tiles are ordered heaviest first (the last query tile, which sees every key, is
  block 0 of its head), so the short ones fill the tail of the grid.

- **decode** (Sq <= `decode-rows`): a block of `warps` warps a query row; each warp takes
  blocks of 4 keys in turn, its lanes along d (each key's row read coalesced, the dot
  product added across the warp by an xor butterfly of shuffles), and keeps its own
  running max, sum and accumulator (Dv / 32 a lane); the warps' states meet at the end
  through shared memory, rescaled to the block's maximum.

The types: K and V tiles and every statistic in the compute type (f32 for f16/bf16
inputs). Q, K, V and the mask are read through the kernel emitter, so transposes,
reshapes and a decode step's cache concat are read in place.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.dialects import arith, gpu, memref, vector
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import (
    DictionaryAttr,
    IntegerAttr,
    MemRefType,
    NoneAttr,
    StringAttr,
    VectorType,
)
from xdsl.ir import Attribute, SSAValue

from irkit.dialects import graph as g
from irkit.dialects.warp_async import CpAsyncOp
from irkit.dtypes import numpy_dtype
from irkit.errors import IrkitError
from irkit.ir import shape_of
from irkit.loops import STATIC_SHARED_LIMIT, shared_buffer
from irkit.passes.emit_attention import FUSED_ATTR, _index, _masked, emit_fused_attention, heads_of
from irkit.passes.emit_decode import Decode
from irkit.passes.emit_gpu_attention_mma import MmaAttention, butterfly, fits_tensor_cores
from irkit.passes.loop_builder import compute_type
from irkit.passes.map_to_gpu import X

if TYPE_CHECKING:
    from irkit.passes.kernel_emitter import KernelEmitter

WARP = 32
TARGET = "gpu"
"""The `target` of a fused mark that asks for these kernels."""
DECODE_KEYS = 4
"""Keys a warp takes at a time in the decode form (their loads issued together)."""


def emit_attention(em: KernelEmitter, op: g.AttentionOp, out: SSAValue, alone: bool) -> None:
    """A fused `graph.attention`'s loops into the emitter's kernel: the GPU kernel where the
    mark is `gpu-fuse-attention`'s (the kernel's only stored value: it becomes one launch),
    else the CPU decode form where it applies, else the CPU tiles or rows."""
    params = gpu_mark(op)
    if params is not None:
        if not alone or em.module is None:
            raise IrkitError(
                f"{em.name}: a GPU-fused attention must be its kernel's only stored value"
            )
        em.launch = GpuAttention(em, op, out, params).emit()
        return
    decode = Decode.of(em, op, out)
    if decode is not None:
        decode.emit()
    else:
        emit_fused_attention(em, op, out)


def gpu_mark(op: g.AttentionOp) -> dict[str, int] | None:
    """The GPU form's parameters where `op` is marked for it (`gpu-fuse-attention`)."""
    mark = op.attributes.get(FUSED_ATTR)
    if not isinstance(mark, DictionaryAttr):
        return None
    target = mark.data.get("target")
    if not isinstance(target, StringAttr) or target.data != TARGET:
        return None
    return {k: v.value.data for k, v in mark.data.items() if isinstance(v, IntegerAttr)}


@dataclass
class GpuAttention:
    """One marked `graph.attention` emitted as a GPU kernel into the emitter's function."""

    em: KernelEmitter
    op: g.AttentionOp
    out: SSAValue
    params: dict[str, int]

    @property
    def shapes(self) -> tuple[int, int, int, int, int, int, int]:
        q, k, v = self.op.operands[:3]
        batch, heads, sq, dim = shape_of(q)
        return batch, heads, sq, dim, shape_of(k)[1], shape_of(k)[2], shape_of(v)[3]

    @property
    def ct(self) -> Attribute:
        return compute_type(g.element_type_of(self.op.operands[0]))

    def emit(self) -> tuple[int, int, int]:
        """Emit the kernel; its launch: (grid, threads, flops)."""
        sq = self.shapes[2]
        if sq <= self.params.get("decode-rows", 0):
            return self._decode()
        if self.params.get("tensor-cores", 0) and fits_tensor_cores(self.op):
            return MmaAttention(self).emit()
        return self._tiles()

    # --- the prefill form ----------------------------------------------------------------

    def _tiles(self) -> tuple[int, int, int]:
        em, b_, op, ct = self.em, self.em.b, self.op, self.ct
        batch, heads, sq, dim, kv_heads, sk, dv = self.shapes
        q, k, v = op.operands[:3]
        causal = g.bool_of(op.properties, "causal")
        threads = min(self.params["block-q"], -(-sq // WARP) * WARP)
        width = numpy_dtype(ct).itemsize * (dim + dv)  # a key's row of K and of V
        bk = max(1, min(self.params["block-k"], sk, STATIC_SHARED_LIMIT // width))
        tiles = -(-sq // threads)
        neg_inf, zero = b_.float(-math.inf, ct), b_.float(0.0, ct)
        k_tile = self._shared("k_tile", [bk, dim])
        v_tile = self._shared("v_tile", [bk, dv])

        bid, tid = b_.add(gpu.BlockIdOp(X)), b_.add(gpu.ThreadIdOp(X))
        t = b_.add(arith.RemUIOp(bid, b_.index(tiles)))
        if causal:  # heaviest first: the last query tile sees the most keys
            t = b_.add(arith.SubiOp(b_.index(tiles - 1), t))
        bi, h, hk = self._heads(b_.add(arith.DivUIOp(bid, b_.index(tiles))))
        q0 = b_.imul(t, threads)
        i = b_.iadd(q0, tid)
        row = b_.add(arith.MinSIOp(i, b_.index(sq - 1))) if sq % threads else i
        scale = b_.float(g.float_of(op.properties, "scale"), ct)
        qs = [em.value_at(q, [bi, h, row, b_.index(d)]) for d in range(dim)]
        qs = [em.fop(arith.MulfOp, x, scale) for x in qs]

        keys = self._visible_keys(q0, threads) if causal else sk
        trips = _ceil_div(b_, keys, bk)

        def step(kt: SSAValue, carried: list[SSAValue]) -> list[SSAValue]:
            m, total, *acc = carried
            j0 = b_.imul(kt, bk)
            self._copy(tid, threads, k, k_tile, (bi, hk), j0, dim, sk)
            self._copy(tid, threads, v, v_tile, (bi, hk), j0, dv, sk)
            b_.add(gpu.BarrierOp())
            scores = self._tile_scores(qs, k_tile, j0, (bi, h, row))
            m_new, total, weights, rescale = self._online(m, total, scores)
            acc = [em.fop(arith.MulfOp, a, rescale) for a in acc]
            for c, p in enumerate(weights):
                for e in range(dv):
                    ve = b_.add(memref.LoadOp.get(v_tile, [b_.index(c), b_.index(e)]))
                    acc[e] = em.fop(arith.AddfOp, acc[e], em.fop(arith.MulfOp, p, ve))
            b_.add(gpu.BarrierOp())
            return [m_new, total, *acc]

        m, total, *acc = b_.for_range(0, trips, 1, [neg_inf, zero, *[zero] * dv], step)

        def store() -> None:
            for e in range(dv):
                x = em.fop(arith.DivfOp, acc[e], total)
                b_.store(x, self.out, [bi, h, i, b_.index(e)])

        if sq % threads:
            b_.when(em.cmpi("ult", i, sq), store)
        else:
            store()
        flops = batch * heads * sq * sk * 2 * (dim + dv) // (2 if causal else 1)
        return batch * heads * tiles, threads, flops

    def _tile_scores(
        self,
        qs: list[SSAValue],
        k_tile: SSAValue,
        j0: SSAValue,
        at: tuple[SSAValue, SSAValue, SSAValue],
    ) -> list[SSAValue]:
        """A thread's scores against the staged tile of keys from j0: q . K[c] (the row of
        q in registers, K[c][d] the same for every thread), masked where key c is past Sk,
        past the row's own (causal), or by the mask operand at `at` (batch, head, row)."""
        em, b_, op = self.em, self.em.b, self.op
        bk, dim = shape_of(k_tile)
        sq, sk = self.shapes[2], self.shapes[5]
        neg_inf, zero = b_.float(-math.inf, self.ct), b_.float(0.0, self.ct)
        mask = op.operands[3] if len(op.operands) == 4 else None
        scores = []
        for c in range(bk):
            s = zero
            for d in range(dim):
                kd = b_.add(memref.LoadOp.get(k_tile, [b_.index(c), b_.index(d)]))
                s = em.fop(arith.AddfOp, s, em.fop(arith.MulfOp, qs[d], kd))
            j = b_.iadd(j0, c)
            hidden = []
            if sk % bk:
                hidden.append(em.cmpi("uge", j, sk))
                j = b_.add(arith.MinSIOp(j, b_.index(sk - 1)))
            if g.bool_of(op.properties, "causal"):  # j > row + Sk - Sq
                hidden.append(em.cmpi("ugt", b_.iadd(j, sq), b_.iadd(at[2], sk)))
            if mask is not None:
                s = _masked(em, op, s, [*at, j], neg_inf)
            for cond in hidden:
                s = em.select(cond, neg_inf, s)
            scores.append(s)
        return scores

    def _visible_keys(self, q0: SSAValue, rows: int) -> SSAValue:
        """Causal: the keys a tile of `rows` query rows from q0 sees, up to its last row's
        own: min(q0 + rows, Sq) + Sk - Sq, at least 0."""
        b_ = self.em.b
        sq, sk = self.shapes[2], self.shapes[5]
        last = b_.iadd(q0, rows)
        if sq % rows:
            last = b_.add(arith.MinSIOp(last, b_.index(sq)))
        if sk >= sq:  # at most Sk (last <= Sq)
            return b_.iadd(last, sk - sq)
        fewer = b_.add(arith.SubiOp(last, b_.index(sq - sk)))  # the first rows see no key
        return b_.add(arith.MaxSIOp(fewer, b_.index(0)))

    def _copy(
        self,
        tid: SSAValue,
        threads: int,
        source: SSAValue,
        tile: SSAValue,
        heads: tuple[SSAValue, SSAValue],
        first: SSAValue,
        width: int,
        limit: int,
        stage: SSAValue | None = None,
        asynchronous: bool = False,
    ) -> None:
        """Rows first.. of `source` at (batch, head) `heads` into the shared `tile` (its
        `stage` where the tile is a ring), `width` values a row: element (or 16-byte piece)
        e by thread e % threads (consecutive threads, consecutive features); a row past
        `limit` reads the last row (its results are masked or not stored). `asynchronous`:
        by cp.async (the caller commits and waits), where 16-byte pieces apply."""
        em, b_ = self.em, self.em.b
        rows = shape_of(tile)[-2]
        prefix = [] if stage is None else [stage]
        lanes = self._copy_lanes(source, tile.type, width)
        count, ragged = rows * width // lanes, limit % rows != 0
        for n in range(-(-count // threads)):
            e = b_.iadd(tid, n * threads)

            def copy(e=e) -> None:
                c = b_.add(arith.DivUIOp(e, b_.index(width // lanes)))
                d = b_.imul(b_.add(arith.RemUIOp(e, b_.index(width // lanes))), lanes)
                j = b_.add(arith.AddiOp(first, c))
                if ragged:
                    j = b_.add(arith.MinSIOp(j, b_.index(limit - 1)))
                at = [*prefix, c, d]
                if lanes == 1:
                    b_.store(em.value_at(source, [*heads, j, d]), tile, at)
                    return
                buffer = em.buffers[source]
                if asynchronous:
                    where = [*heads, j, d]
                    b_.add(CpAsyncOp(tile, at, buffer, where, b_.index(lanes), lanes))
                    return
                vt = VectorType(g.element_type_of(source), [lanes])
                chunk = b_.add(vector.LoadOp(buffer, [*heads, j, d], vt))
                b_.add(vector.StoreOp(chunk, tile, at))

            if (n + 1) * threads > count:
                b_.when(em.cmpi("ult", e, count), copy)
            else:
                copy()

    def _copy_lanes(self, source: SSAValue, tile: Attribute, width: int) -> int:
        """Elements a thread copies at once: 16 bytes where `source` is a kernel buffer of
        the tile's type (`tile`, a memref type) with rows of `width` (a row's 16-byte pieces
        aligned); else 1."""
        buffer = self.em.buffers.get(source)
        if buffer is None or len(shape_of(source)) != 4 or shape_of(source)[-1] != width:
            return 1
        t = buffer.type
        assert isinstance(t, MemRefType) and isinstance(tile, MemRefType)
        if t.element_type != tile.element_type or not isinstance(t.layout, NoneAttr):
            return 1
        lanes = 16 // numpy_dtype(t.element_type).itemsize
        return lanes if width % lanes == 0 and tile.get_shape()[-1] % lanes == 0 else 1

    # --- the decode form -----------------------------------------------------------------

    def _decode(self) -> tuple[int, int, int]:
        em, b_, op, ct = self.em, self.em.b, self.op, self.ct
        batch, heads, sq, dim, kv_heads, sk, dv = self.shapes
        q, k, v = op.operands[:3]
        mask = op.operands[3] if len(op.operands) == 4 else None
        causal = g.bool_of(op.properties, "causal")
        warps = self.params.get("warps", 4)
        threads = warps * WARP
        neg_inf, zero = b_.float(-math.inf, ct), b_.float(0.0, ct)
        bid, tid = b_.add(gpu.BlockIdOp(X)), b_.add(gpu.ThreadIdOp(X))
        i = b_.add(arith.RemUIOp(bid, b_.index(sq))) if sq > 1 else b_.index(0)
        bi, h, hk = self._heads(b_.add(arith.DivUIOp(bid, b_.index(sq))) if sq > 1 else bid)
        lane = b_.add(arith.RemUIOp(tid, b_.index(WARP)))
        w = b_.add(arith.DivUIOp(tid, b_.index(WARP)))
        scale = b_.float(g.float_of(op.properties, "scale"), ct)

        def lanes_of(width: int) -> list[tuple[SSAValue, SSAValue | None]]:
            """This lane's features of a row of `width`: (index, in range) for each slice
            of 32; an index past the row is clamped (its value weighs 0)."""
            out: list[tuple[SSAValue, SSAValue | None]] = []
            for n in range(-(-width // WARP)):
                d = b_.iadd(lane, n * WARP)
                if (n + 1) * WARP > width:
                    inside = em.cmpi("ult", d, width)
                    out.append((b_.add(arith.MinSIOp(d, b_.index(width - 1))), inside))
                else:
                    out.append((d, None))
            return out

        features, outputs = lanes_of(dim), lanes_of(dv)
        qs = []
        for d, inside in features:
            x = em.fop(arith.MulfOp, em.value_at(q, [bi, h, i, d]), scale)
            qs.append(x if inside is None else em.select(inside, x, zero))
        keys: SSAValue | int = sk
        if causal and sq > 1:  # (one row is the last: it sees every key)
            keys = b_.iadd(i, sk - sq + 1)  # at most Sk (i < Sq)
        last_key = (
            b_.index(sk - 1) if isinstance(keys, int) else b_.add(arith.SubiOp(keys, b_.index(1)))
        )
        stride = warps * DECODE_KEYS

        def step(n: SSAValue, carried: list[SSAValue]) -> list[SSAValue]:
            m, total, *acc = carried
            j0 = b_.add(arith.AddiOp(b_.imul(n, stride), start))
            scores, rows = [], []
            for c in range(DECODE_KEYS):
                j = b_.iadd(j0, c)
                past = em.cmpi("uge", j, _index(b_, keys))
                j = b_.add(arith.MinSIOp(j, last_key))
                s = zero
                for (d, _), qd in zip(features, qs, strict=True):
                    kd = em.value_at(k, [bi, hk, j, d])
                    s = em.fop(arith.AddfOp, s, em.fop(arith.MulfOp, qd, kd))
                s = _across_warp(b_, s)
                if mask is not None:
                    s = _masked(em, op, s, [bi, h, i, j], neg_inf)
                scores.append(em.select(past, neg_inf, s))
                rows.append(j)
            m_new, total, weights, rescale = self._online(m, total, scores)
            acc = [em.fop(arith.MulfOp, a, rescale) for a in acc]
            for p, j in zip(weights, rows, strict=True):
                for slot, (e, _) in enumerate(outputs):
                    ve = em.value_at(v, [bi, hk, j, e])
                    acc[slot] = em.fop(arith.AddfOp, acc[slot], em.fop(arith.MulfOp, p, ve))
            return [m_new, total, *acc]

        start = b_.imul(w, DECODE_KEYS)  # the same trips in every warp: a barrier follows
        inits = [neg_inf, zero, *[zero] * len(outputs)]
        m, total, *acc = b_.for_range(0, _ceil_div(b_, keys, stride), 1, inits, step)
        self._merge(tid, lane, w, [m, total, *acc], outputs, (bi, h, i), warps)
        flops = batch * heads * sq * sk * 2 * (dim + dv)
        return batch * heads * sq, threads, flops

    def _merge(
        self,
        tid: SSAValue,
        lane: SSAValue,
        w: SSAValue,
        state: list[SSAValue],
        outputs: list[tuple[SSAValue, SSAValue | None]],
        row: tuple[SSAValue, SSAValue, SSAValue],
        warps: int,
    ) -> None:
        """The decode form's end: each warp's maximum, sum and accumulator (`state`) into
        shared memory, then each feature of the row from every warp's, rescaled to the
        block's maximum (thread e writes feature e)."""
        em, b_, ct = self.em, self.em.b, self.ct
        dv, threads = self.shapes[6], warps * WARP
        neg_inf, zero = b_.float(-math.inf, ct), b_.float(0.0, ct)
        stats = self._shared("stats", [2, warps])
        partial = self._shared("partial", [warps, dv])
        m, total, *acc = state

        def publish() -> None:
            b_.store(m, stats, [b_.index(0), w])
            b_.store(total, stats, [b_.index(1), w])

        b_.when(em.cmpi("eq", lane, 0), publish)

        def keep(a: SSAValue, e: SSAValue) -> Callable[[], None]:
            return lambda: b_.store(a, partial, [w, e])

        for (e, inside), a in zip(outputs, acc, strict=True):
            if inside is None:
                keep(a, e)()
            else:
                b_.when(inside, keep(a, e))
        b_.add(gpu.BarrierOp())
        ms = [b_.load(stats, [b_.index(0), b_.index(x)], ct) for x in range(warps)]
        peak = ms[0]
        for other in ms[1:]:
            peak = em.fop(arith.MaximumfOp, peak, other)
        base = em.select(em.cmpf("oeq", peak, neg_inf), zero, peak)
        factors = [em.fop(xmath.ExpOp, em.fop(arith.SubfOp, mx, base)) for mx in ms]
        denominator = zero
        for x, f in enumerate(factors):
            lx = b_.load(stats, [b_.index(1), b_.index(x)], ct)
            denominator = em.fop(arith.AddfOp, denominator, em.fop(arith.MulfOp, lx, f))

        def finish(e: SSAValue) -> None:
            o = zero
            for x, f in enumerate(factors):
                px = b_.load(partial, [b_.index(x), e], ct)
                o = em.fop(arith.AddfOp, o, em.fop(arith.MulfOp, px, f))
            b_.store(em.fop(arith.DivfOp, o, denominator), self.out, [*row, e])

        for n in range(-(-dv // threads)):
            feature = b_.iadd(tid, n * threads)
            if (n + 1) * threads > dv:
                b_.when(em.cmpi("ult", feature, dv), functools.partial(finish, feature))
            else:
                finish(feature)

    # --- shared by both ------------------------------------------------------------------

    def _heads(self, flat: SSAValue) -> tuple[SSAValue, SSAValue, SSAValue]:
        """(batch, head, key/value head) of a block's index over batch x heads."""
        b_ = self.em.b
        _, heads, _, _, kv_heads, _, _ = self.shapes
        bi, h = heads_of(b_, flat, heads)
        group = heads // kv_heads
        hk = h if group == 1 else b_.add(arith.DivUIOp(h, b_.index(group)))
        return bi, h, hk

    def _online(
        self, m: SSAValue, total: SSAValue, scores: list[SSAValue]
    ) -> tuple[SSAValue, SSAValue, list[SSAValue], SSAValue]:
        """The online softmax's step over a block's scores: the new maximum, the new sum,
        the block's weights and the old accumulator's rescale (every key so far masked:
        the maximum stays -inf and everything weighs 0)."""
        em, b_, ct = self.em, self.em.b, self.ct
        zero, neg_inf = b_.float(0.0, ct), b_.float(-math.inf, ct)
        m_new = m
        for s in scores:
            m_new = em.fop(arith.MaximumfOp, m_new, s)
        base = em.select(em.cmpf("oeq", m_new, neg_inf), zero, m_new)
        rescale = em.fop(xmath.ExpOp, em.fop(arith.SubfOp, m, base))
        weights = [em.fop(xmath.ExpOp, em.fop(arith.SubfOp, s, base)) for s in scores]
        block_sum = zero
        for p in weights:
            block_sum = em.fop(arith.AddfOp, block_sum, p)
        total = em.fop(arith.AddfOp, em.fop(arith.MulfOp, total, rescale), block_sum)
        return m_new, total, weights, rescale

    def _shared(self, what: str, shape: list[int], type_: Attribute | None = None) -> SSAValue:
        """A shared-memory buffer of `type_` (the compute type by default): a
        `memref.global` in the shared space, named after the kernel."""
        em = self.em
        assert em.module is not None, "the GPU form needs the module (lower-graph-to-loops)"
        return em.b.add(
            shared_buffer(em.module, None, f"{em.name}_{what}", type_ or self.ct, shape)
        )


def _across_warp(b_, value: SSAValue) -> SSAValue:
    """The sum of `value` over the warp's lanes, in every lane (an xor butterfly)."""
    return butterfly(b_, value, (16, 8, 4, 2, 1), arith.AddfOp)


def _ceil_div(b_, n: SSAValue | int, d: int) -> SSAValue | int:
    if isinstance(n, int):
        return -(-n // d)
    return b_.add(arith.DivUIOp(b_.iadd(n, d - 1), b_.index(d)))
