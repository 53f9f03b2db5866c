"""gpu-tile-matmul's Hopper pipelines (sm_90a): the wgmma tiles filled by the tensor memory
accelerator (`tma=true`) instead of every thread's cp.async, then warp-specialized
(`warp-specialize=true`) and over a persistent grid (`persistent=true`).

One thread issues each k tile's boxes: with the tiles in rows of 128 bytes, 128-byte
swizzled (`swizzle`, 64 of k deep), a box of A per 64 of k (`block-m` rows) and one of B per
64 of n (`block-k` rows), landing as `irkit.dialects.warp_async.wgmma_element` says for
"swizzled"; otherwise strips of core matrices, a box per 8 columns ("strips"). The maps'
extents are the matmul's: a box past an edge (or a padded row's end) lands zeros, so no
guard is needed. Each stage has an mbarrier: the issuing thread arrives on it with the
bytes the stage's boxes bring, and every thread waits on it (the phase's parity alternates
each time the ring comes round) before the stage's wgmma ops read it.

`tma_pipeline` keeps the cp.async ring's schedule (`_async_pipeline` in `gpu_tile_matmul`):
`stages - 1` tiles in flight while one is computed, and one block barrier a k tile, after
the wait, so that the stage refilled in iteration kt (read in kt - 1) is no longer read.
`specialized_pipeline` and `persistent_pipeline` hand stages over by a second mbarrier a
stage instead (`empty`), a producer warpgroup issuing and consumer warpgroups computing.

In clusters (`cluster-m=C`), the C blocks of a cluster compute consecutive C tile rows of
one tile column: block r's producer loads rows [r K/C, (r + 1) K/C) of B's k tile and
multicasts them into every block's stage (each stage's full barrier still expects the
whole stage's bytes: its own A, and B's C shares from the C producers), and a consumer
hands a stage back on the empty barrier of every block of the cluster (`_release`), as
every producer writes into it. Cluster barriers after the barriers' init and at the end
(`_TiledKernel._leave`) keep every block alive while the others may reach it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from xdsl.dialects import arith, gpu
from xdsl.dialects.builtin import MemRefType, NoneAttr, i64
from xdsl.ir import BlockArgument, SSAValue

from irkit.dialects.warp_tma import (
    TMA_RANK,
    ClusterBarrierOp,
    MbarrierArriveClusterOp,
    MbarrierArriveExpectTxOp,
    MbarrierArriveOp,
    MbarrierInitOp,
    MbarrierWaitOp,
    SetMaxNRegOp,
    TmaLoadOp,
)
from irkit.dtypes import numpy_dtype
from irkit.ir import shape_of
from irkit.loops import shared_buffer
from irkit.passes.map_to_gpu import GpuBuilder

if TYPE_CHECKING:
    from irkit.passes.gpu_tile_matmul import _TiledKernel


CORE = 8
"""Elements along k (A) or n (B) of one strip of core matrices: one TMA box's row."""
ATOM = 64
"""Elements of a 128-byte swizzled row: a swizzled box's columns (`tma_swizzled`)."""


def described(value: SSAValue) -> bool:
    """Whether a tensor map can describe matmul operand `value`: an argument of the kernel,
    contiguous, of at most `TMA_RANK` dimensions."""
    t = value.type
    return (
        isinstance(value, BlockArgument)
        and isinstance(t, MemRefType)
        and isinstance(t.layout, NoneAttr)
        and t.get_num_dims() <= TMA_RANK
    )


def barriers(kernel: _TiledKernel, name: str, count: int) -> SSAValue:
    """`count` mbarriers in shared memory (`memref<count x i64>`), named `name`."""
    kernel.shared_sizes.append(8 * count)
    return kernel.b.add(shared_buffer(kernel.module, kernel.fn, name, i64, [count]))


def _issuer(
    kernel: _TiledKernel,
    bars: SSAValue,
    tiles: tuple[SSAValue, SSAValue],
    sources: tuple[SSAValue, SSAValue],
    prefixes: tuple[tuple[SSAValue, ...], tuple[SSAValue, ...]],
    origin: tuple[SSAValue, SSAValue],
    k_origin: Callable[[GpuBuilder, SSAValue | int], SSAValue],
) -> Callable[[GpuBuilder, SSAValue | int, SSAValue], None]:
    """`issue(builder, kt, stage)`: tile `kt` of A and of B into `stage`, the stage's bytes
    announced on `bars[stage]`, then the boxes (one a strip)."""
    o, nest = kernel.o, kernel.nest
    (a_tile, b_tile), (a, bb), (a_prefix, b_prefix) = tiles, sources, prefixes
    row0, col0 = origin
    itemsize = numpy_dtype(nest.element_type).itemsize
    stage_bytes = (o.block_m * o.block_k + o.block_k * o.block_n) * itemsize
    # the maps' extents are the matmul's: a row padded past K (or a padded M) reads zeros
    a_extent = [*shape_of(a)[:-2], nest.m, nest.k]
    b_extent = [*shape_of(bb)[:-2], nest.k, nest.n]

    swizzled = kernel.layout == "swizzled"
    width, swizzle = (ATOM, 128) if swizzled else (CORE, 0)  # a box's columns
    cluster, share = kernel.cluster, o.block_k // kernel.cluster  # B's rows a block loads

    def issue(t: GpuBuilder, kt: SSAValue | int, stage: SSAValue) -> None:
        k0 = k_origin(t, kt)
        t.add(MbarrierArriveExpectTxOp(bars, stage, stage_bytes))
        zero = t.index(0)

        def boxes(tile, source, prefix, extent, row, col, rows, count, part=zero, mask=0):
            """`count` boxes of `rows` x `width` from (`row`, `col`) on, along the columns,
            each into the next strip (or 64-column atom) of the stage, from its row (strip
            of 8 rows) `part` on; multicast to the blocks of `mask`."""
            rank = len(shape_of(tile))
            for j in range(count):
                at = [*prefix, row, t.iadd(col, width * j)]
                box = [1] * len(prefix) + [rows, width]
                dest = [stage, t.index(j), part] + [zero] * (rank - 3)
                t.add(TmaLoadOp(tile, dest, source, at, box, bars, stage, swizzle, extent, mask))

        boxes(a_tile, a, a_prefix, a_extent, row0, k0, o.block_m, o.block_k // width)
        if cluster == 1:
            boxes(b_tile, bb, b_prefix, b_extent, k0, col0, o.block_k, o.block_n // width)
            return
        # in a cluster (one tile column), block r loads rows [r share, r share + share) of
        # B's k tile into every block's stage: each stage still receives `stage_bytes`
        assert kernel.rank is not None
        first = t.binary(arith.MuliOp, kernel.rank, share)
        part = first if swizzled else t.binary(arith.MuliOp, kernel.rank, share // CORE)
        mask = (1 << cluster) - 1
        row = t.add(arith.AddiOp(k0, first))
        boxes(b_tile, bb, b_prefix, b_extent, row, col0, share, o.block_n // width, part, mask)

    return issue


def _ring(t: GpuBuilder, kt: SSAValue, stages: int) -> tuple[SSAValue, SSAValue]:
    """Iteration `kt`'s stage and the parity of its trip round the ring."""
    stage = t.binary(arith.RemUIOp, kt, stages)
    return stage, t.binary(arith.RemUIOp, t.binary(arith.DivUIOp, kt, stages), 2)


def tma_pipeline(
    kernel: _TiledKernel,
    b: GpuBuilder,
    tid: SSAValue,
    k_tiles: int,
    compute: Callable[[GpuBuilder, SSAValue, list[SSAValue]], list[SSAValue]],
    inits: list[SSAValue],
    *operands,
) -> list[SSAValue]:
    """The k loop over a ring of `stages` stages filled by TMA (see the module docstring);
    returns the accumulators after it. `operands`: the tiles, the sources, their batch
    prefixes, the block's first row and column of C, and `k_origin` (`_issuer`)."""
    stages = kernel.stages
    bars = barriers(kernel, f"{kernel.fn.sym_name.data}_full", stages)
    issue = _issuer(kernel, bars, *operands)
    leader = b.add(arith.CmpiOp(tid, b.index(0), "eq"))
    first = b.guarded(leader)
    for s in range(stages):
        first.add(MbarrierInitOp(bars, first.index(s), 1))
    b.add(gpu.BarrierOp())  # the barriers ready before any thread waits on one
    prologue = b.guarded(leader)
    for s in range(min(stages - 1, k_tiles)):
        issue(prologue, s, prologue.index(s))

    def k_tile(t: GpuBuilder, kt: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
        stage, parity = _ring(t, kt, stages)
        t.add(MbarrierWaitOp(bars, stage, parity))
        t.add(gpu.BarrierOp())  # every warpgroup is done with the stage read in kt - 1
        if k_tiles > stages - 1:
            following = t.iadd(kt, stages - 1)
            inside = t.add(arith.CmpiOp(following, t.index(k_tiles), "ult"))
            inner = t.guarded(t.add(arith.AndIOp(leader, inside)))
            issue(inner, following, inner.binary(arith.RemUIOp, following, stages))
        return compute(t, stage, accs)

    return b.for_loop(k_tiles, inits, k_tile)


PRODUCER_REGISTERS = 40
"""Registers a thread of the producer warpgroup keeps (`setmaxnreg.dec`): it only issues."""
REGISTER_FILE = 65536
"""Registers of a multiprocessor: the block's pool, one block an SM."""


def consumer_registers(threads: int, consumers: int) -> int:
    """Registers a consumer thread asks for (`setmaxnreg.inc`): the block's pool at launch
    (one block an SM: `REGISTER_FILE / threads` a thread, in multiples of 8), less what the
    producer warpgroup keeps, shared by the consumers; at most 240."""
    pool = REGISTER_FILE // threads // 8 * 8 * threads
    return min(240, (pool - 128 * PRODUCER_REGISTERS) // (128 * consumers) // 8 * 8)


def specialized_pipeline(
    kernel: _TiledKernel,
    b: GpuBuilder,
    tid: SSAValue,
    k_tiles: int,
    compute: Callable[[GpuBuilder, SSAValue, list[SSAValue]], list[SSAValue]],
    inits: list[SSAValue],
    *operands,
) -> tuple[GpuBuilder, list[SSAValue]]:
    """Warp specialization (`warp-specialize`): warpgroup 0 is the producer, its thread 0
    issuing every k tile's boxes as soon as the stage is free, the others consumers, each
    waiting for a stage to be full, computing on it, and arriving on its `empty` barrier.
    No block barrier in the loop: the stages are handed over by mbarriers alone, two a
    stage (`full`: the producer's arrival and the boxes' bytes; `empty`: every consumer
    thread's arrival). The producer first waits on parity 1 of a fresh `empty` barrier,
    which returns at once: every stage starts free. Returns a builder inside the
    consumers' branch, where the epilogue goes, and their accumulators after the loop."""
    full, empty, issuer, consumer = _roles(kernel, b, tid)
    issue = _issuer(kernel, full, *operands)
    issuer.for_loop(k_tiles, [], lambda t, kt, _: _produce(kernel, t, kt, kt, empty, issue))
    accs = _consume(kernel, consumer, k_tiles, compute, inits, full, empty, consumer.index(0))
    return consumer, accs


def _roles(kernel: _TiledKernel, b: GpuBuilder, tid: SSAValue):
    """Warp specialization's set-up: a `full` and an `empty` mbarrier a stage, readied by
    thread 0 before a block barrier; warpgroup 0 the producer, its registers given back,
    the rest consumers taking them. Returns the barriers, a builder for the producer's
    thread 0 and one for the consumers."""
    stages, name = kernel.stages, kernel.fn.sym_name.data
    consumers = kernel.o.block_m // 64
    full = barriers(kernel, f"{name}_full", stages)
    empty = barriers(kernel, f"{name}_empty", stages)
    leader = b.add(arith.CmpiOp(tid, b.index(0), "eq"))
    first = b.guarded(leader)
    for s in range(stages):
        first.add(MbarrierInitOp(full, first.index(s), 1))
        # every consumer thread of every block of the cluster hands the stage back
        first.add(MbarrierInitOp(empty, first.index(s), 128 * consumers * kernel.cluster))
    # the barriers ready before any thread waits on one (or, in a cluster, before another
    # block's copies or arrivals reach them)
    b.add(ClusterBarrierOp() if kernel.cluster > 1 else gpu.BarrierOp())
    producer, consumer = b.branches(b.add(arith.CmpiOp(tid, b.index(128), "ult")))
    producer.add(SetMaxNRegOp(PRODUCER_REGISTERS, increase=False))
    consumer.add(SetMaxNRegOp(consumer_registers(kernel.threads, consumers), increase=True))
    return full, empty, producer.guarded(leader), consumer


def _produce(
    kernel: _TiledKernel,
    t: GpuBuilder,
    position: SSAValue,
    kt: SSAValue,
    empty: SSAValue,
    issue: Callable[[GpuBuilder, SSAValue | int, SSAValue], None],
) -> list[SSAValue]:
    """The producer's k tile `kt` at ring position `position`: wait until its stage is
    empty (the parity flipped: a fresh barrier's phase before the first counts as
    complete, so the first round does not wait), then issue the tile into it."""
    stage, parity = _ring(t, position, kernel.stages)
    t.add(MbarrierWaitOp(empty, stage, t.add(arith.XOrIOp(parity, t.index(1)))))
    issue(t, kt, stage)
    return []


def persistent_pipeline(
    kernel: _TiledKernel,
    b: GpuBuilder,
    bid: SSAValue,
    tid: SSAValue,
    k_tiles: int,
    compute: Callable[[GpuBuilder, SSAValue, list[SSAValue]], list[SSAValue]],
    inits: list[SSAValue],
    tiles: tuple[SSAValue, SSAValue],
    sources: tuple[SSAValue, SSAValue],
    outputs: list[tuple[SSAValue, SSAValue]],
    k_origin: Callable[[GpuBuilder, SSAValue | int], SSAValue],
) -> None:
    """Warp specialization over a persistent grid (`persistent`): block `bid` (in clusters,
    its cluster's number, and `grid` the clusters) takes C tiles bid, bid + grid, ... in
    rounds; the producer and the consumers walk the same tiles, the
    ring's position counting every k tile the block has taken (round * k_tiles + kt), so
    the producer runs on into the next tile's stages while the consumers finish this one
    and store it (their epilogue, `outputs` each accumulator's place in the tile)."""
    grid = kernel.tile.blocks // kernel.cluster  # blocks, or clusters
    total = kernel.units * kernel.batches
    rounds = -(-total // grid)
    full, empty, issuer, consumer = _roles(kernel, b, tid)

    def taken(t: GpuBuilder, round_: SSAValue):
        """This round's tile (a builder inside its guard, the tile's number, and the
        position on the ring of its first k tile)."""
        tile_id = t.add(arith.AddiOp(bid, t.binary(arith.MuliOp, round_, grid)))
        inner = t.guarded(t.add(arith.CmpiOp(tile_id, t.index(total), "ult")))
        return inner, tile_id, inner.binary(arith.MuliOp, round_, k_tiles)

    def produce_tile(t: GpuBuilder, round_: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        inner, tile_id, base = taken(t, round_)
        row0, col0, _, _, prefixes = kernel._tile_origin(inner, tile_id, dict(kernel.mapping))
        issue = _issuer(kernel, full, tiles, sources, prefixes, (row0, col0), k_origin)

        def produce(u: GpuBuilder, kt: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            return _produce(kernel, u, u.add(arith.AddiOp(base, kt)), kt, empty, issue)

        inner.for_loop(k_tiles, [], produce)
        return []

    issuer.for_loop(rounds, [], produce_tile)

    def consume_tile(t: GpuBuilder, round_: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        inner, tile_id, base = taken(t, round_)
        mapping = dict(kernel.mapping)
        row0, col0, _, _, _ = kernel._tile_origin(inner, tile_id, mapping)

        accs = _consume(kernel, inner, k_tiles, compute, inits, full, empty, base)
        kernel._epilogue(inner, accs, outputs, (row0, col0), mapping, None)
        return []

    consumer.for_loop(rounds, [], consume_tile)


def _consume(
    kernel: _TiledKernel,
    b: GpuBuilder,
    k_tiles: int,
    compute: Callable[..., list[SSAValue]],
    inits: list[SSAValue],
    full: SSAValue,
    empty: SSAValue,
    base: SSAValue,
) -> list[SSAValue]:
    """A consumer's k loop over one C tile whose first k tile is at ring position `base`:
    wait for each stage to be full, compute on it, hand it back on its `empty` barrier.
    With `wgmma-depth=1` a k tile's wgmma group stays in flight into the next k tile (the
    next group is issued first), so the stage handed back in iteration kt is kt - 1's; the
    last k tile is peeled off the loop and waits for its own group. No group is in flight
    past the loop: with the final wait after it, ptxas scheduled the epilogue's reads of
    the accumulators above that wait (F2FP before `WARPGROUP.DEPBAR.LE gsb0, 0x0` in the
    SASS), and 91% of a 4096^3 gemm's outputs were wrong on an H200 while every small test
    passed; a wait for 0 inside the loop's last iteration made ptxas wait for 0 in every
    iteration. With depth 0, each k tile waits for its own group."""
    stages, depth = kernel.stages, kernel.o.wgmma_depth

    def consume(t: GpuBuilder, kt: SSAValue, accs: list[SSAValue], pending: int = depth):
        position = t.add(arith.AddiOp(base, kt))
        stage, parity = _ring(t, position, stages)
        t.add(MbarrierWaitOp(full, stage, parity))
        accs = compute(t, stage, accs, pending=pending)
        if depth and k_tiles > 1:  # k tile kt - 1's group is done: its stage is read
            started = t.guarded(t.add(arith.CmpiOp(kt, t.index(0), "ugt")))
            previous = started.binary(arith.RemUIOp, started.iadd(position, -1), stages)
            _release(kernel, started, empty, previous)
        if not pending:  # the k tile's wgmma ops are done: the stage is read
            _release(kernel, t, empty, stage)
        return accs

    if not depth:
        return b.for_loop(k_tiles, inits, consume)
    accs = b.for_loop(k_tiles - 1, inits, consume) if k_tiles > 1 else inits
    return consume(b, b.index(k_tiles - 1), accs, pending=0)


def _release(kernel: _TiledKernel, t: GpuBuilder, empty: SSAValue, stage: SSAValue) -> None:
    """A consumer thread hands `stage` back: an arrival on its `empty` barrier, in every
    block of the cluster (whose producers multicast into this block's stage)."""
    if kernel.cluster == 1:
        t.add(MbarrierArriveOp(empty, stage))
        return
    for r in range(kernel.cluster):
        t.add(MbarrierArriveClusterOp(empty, stage, t.index(r)))
