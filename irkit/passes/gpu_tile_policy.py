"""gpu-tile-matmul's schedule as data: which tiles a matmul gets (`gpu_tile`), chosen by a
pure function of the pass's options and the problem's shape (`MatmulShape`), and applied by
the emitter (`gpu_tile_matmul`). `irkit-bench tune` searches the options the pass declares
(`GpuTileMatmulPass.SEARCH_SPACE`); tests table the choices against shapes.

The choices, each measured where a number is given (docs/results.md, the GPU path):
- a block side larger than the problem shrinks to the next power of two (`_fit`);
- block-k=0: 64 bytes of k per tile row, 32 where K is not a multiple of it, halved until
  the tiles fit the 48 KB of static shared memory; f16/bf16 on tensor cores 64 of k where K
  is a multiple, in dynamic shared memory (`_auto_depth`);
- tensor cores (f16/bf16, 8-bit floats, or f32 under `tf32`) where the block cuts into whole
  warp tiles of `mma.sync` instructions (8-bit: m16n8k32, k 64 bytes a stage, A [m][k] and B
  [n][k] byte tiles; `irkit.passes.gpu_tile_fp8`);
- warp sub-tiles where the register tile is whole 4 x 4 groups (`_warp_tiles`);
- split-K where the C tiles fill less than half the multiprocessors (`_splits`);
- `cluster-m=C` (warp-specialized): clusters of C blocks where M has two tile rows or more
  and B's k tile splits into C shares of whole 8-row strips (no split-K then);
- `fill-sms`: 128 x 64 tiles, two blocks an SM, where 128 x 128 f32 tiles make at most
  `PAIR_WAVES` waves (`_paired`), and halved tiles where the grid is short (`_filling`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod
from typing import TYPE_CHECKING

from irkit.errors import require
from irkit.loops import MAX_SHARED, STATIC_SHARED_LIMIT

if TYPE_CHECKING:
    from irkit.passes.gpu_tile_matmul import GpuTileMatmulPass

MIN_THREADS = 32
"""Fewest threads a tiled block may have: one warp."""
MAX_THREADS = 1024
MMA_M, MMA_N, MMA_K = 16, 8, 16
"""One tensor-core instruction's tile (mma.sync m16n8k16)."""
MMA_K_TF32 = 8
"""k of the TF32 instruction (mma.sync m16n8k8)."""
MMA_K_F8 = 32
"""k of the 8-bit instruction (mma.sync m16n8k32)."""
MMA_WARP = (64, 32)
"""A warp's tile of C under tensor cores: 4 x 4 instructions per k step, 64 f32 accumulators
per lane (the register budget of the f32 path's 8 x 8)."""
HALF_PAD = 8
"""Under tensor cores with f16/bf16, each row of the shared tiles (A's [m][k]; B's [k][n],
or [n][k] without `ldmatrix`) is padded to a multiple of this many elements: 16 bytes, so
rows stay 16-byte aligned for the copies and `ldmatrix`'s rows. With 32 of k an A row is 20
words: the 8 rows x 4 words a warp reads at once fall in 32 distinct banks."""
HALF_DEEP_SHARED = 96 * 1024
"""The most shared memory the automatic depth gives f16/bf16 tensor-core tiles (dynamic past
48 KB): under the 99 KB a block may opt into on sm_86 and sm_89, so every tensor-core GPU
irkit targets runs them (128 x 128 tiles 64 deep, two stages: 71.7 KB)."""
MIN_SPLIT_TILES = 4
"""The fewest k tiles auto split-K leaves each range (below it the partials' traffic and
the second kernel outweigh the blocks gained)."""
WARP_LANES = (4, 8)
"""A warp's 32 lanes as rows x columns of its sub-tile under `warp-tile`."""
GROUP = 4
"""Consecutive rows (columns) of a thread's register tile under `warp-tile`: one vector
read of shared memory."""
MIN_FILL_BLOCK = 32
"""The smallest block side `fill-sms` halves to (32 x 32 with 4 x 4 register tiles: 64
threads, the warp sub-tile 16 x 32)."""
PAIR_WAVES = 4
"""`fill-sms` pairs blocks on a multiprocessor where the 128 x 128 tiles make at most this many
waves of one block an SM (see `_paired`)."""


@dataclass(frozen=True)
class MatmulShape:
    """What the policy sees of one matmul nest."""

    m: int
    n: int
    k: int
    batch: tuple[int, ...]
    """The batch extents (empty for a plain matmul)."""
    dtype: str
    """The element type: "f16", "bf16", "f32", "f64", or A's "f8e4m3" or "f8e5m2"."""
    itemsize: int
    single_call: bool
    """Whether the kernel is called exactly once (split-K needs its own driver call)."""
    aligned: bool = True
    """Whether every row of A and B starts 16-byte aligned (what cp.async copies need)."""
    described: bool = False
    """Whether A and B are kernel arguments a tensor map can describe (what TMA needs)."""


@dataclass(frozen=True)
class GpuTile:
    """One matmul's schedule: what the emitter builds."""

    options: GpuTileMatmulPass
    """The pass's options with the block and register tiles resolved for this problem."""
    mma: bool
    """On tensor cores (`mma.sync`); otherwise SIMT register tiles."""
    tf32: bool
    mma_k: int
    warps: tuple[int, int]
    """Under tensor cores: warps along m and n (each a `MMA_WARP` tile, or smaller)."""
    threads: int
    warp_tiled: bool
    """SIMT threads laid out as warp sub-tiles (vector reads of shared memory)."""
    tiles: int
    """C tiles (per batch entry)."""
    batches: int
    k_tiles: int
    splits: int
    """k ranges each C tile's sum is split into (split-K; 1: none)."""
    wgmma: bool = False
    """On Hopper's warpgroup MMA (`wgmma`): a warpgroup of 128 threads per 64 rows."""
    async_copy: bool = False
    """The tiles filled by a cp.async ring of `stages` (`ring`, rows 16-byte aligned)."""
    swizzled: bool = False
    """The f16/bf16 tiles' 16-byte chunks swizzled instead of their rows padded (`swizzle`)."""
    tma: bool = False
    """The wgmma tiles filled by TMA boxes on mbarriers (`tma`; `irkit.passes.gpu_tile_tma`)."""
    specialized: bool = False
    """With `tma`: a producer warpgroup beside the consumers (`warp-specialize`)."""
    tma_swizzled: bool = False
    """With `tma`: tiles of 128-byte rows, 128-byte swizzled (`swizzle`), one box per 64
    columns; else strips of core matrices, one box per 8 columns."""
    persistent: bool = False
    """With `specialized`: at most `sms` blocks, each looping over C tiles (`persistent`)."""
    cluster: int = 1
    """With `specialized`: blocks a cluster (`cluster-m`), on consecutive tile rows of one
    tile column, each loading 1/cluster of B's tile and multicasting it to the others."""
    cluster_tiles: int = 0
    """C tiles per batch entry as the grid counts them: tile rows in groups of `cluster` (a
    phantom row past M's in a short last group), times tile columns; `tiles` without
    clusters."""
    eight: bool = False
    """8-bit floats on m16n8k32 (`irkit.passes.gpu_tile_fp8`): byte tiles A [m][k], B [n][k]."""

    @property
    def pairs(self) -> bool:
        """f16/bf16 on tensor cores: k-contiguous tiles, A's and B's values loaded in pairs."""
        return self.mma and not self.tf32

    @property
    def pad(self) -> int:
        """Elements after each row of the shared tiles (`pad`; under `pairs`, rounded up to
        `HALF_PAD`'s multiples)."""
        return 0 if self.swizzled else tile_pad(self.options.pad, self.pairs, self.itemsize)

    @property
    def itemsize(self) -> int:
        """Bytes of a tensor-core tile's element (1 for 8-bit floats, else 2)."""
        return 1 if self.eight else 2

    @property
    def stages(self) -> int:
        """Shared stages: `stages` of a cp.async ring, else as `stage_count` says."""
        return self.options.stages if self.async_copy else stage_count(self.options, False)

    @property
    def rows_t(self) -> int:
        """SIMT threads along m."""
        return self.options.block_m // self.options.thread_m

    @property
    def cols_t(self) -> int:
        """SIMT threads along n."""
        return self.options.block_n // self.options.thread_n

    @property
    def blocks(self) -> int:
        """The grid: C tiles (whole clusters' rows of them), times k ranges, times batch
        entries; persistent, at most `sms` blocks (whole clusters), each looping over
        tiles."""
        total = self.cluster * self.cluster_tiles * self.splits * self.batches
        sms = self.options.sms // self.cluster * self.cluster  # whole clusters
        return min(total, sms) if self.persistent else total


def gpu_tile(o: GpuTileMatmulPass, shape: MatmulShape) -> GpuTile:
    """The schedule of one matmul under options `o` (see the module docstring); a tile
    the options make impossible (past static shared memory) is a one-line OptionError."""
    tile = _tile(o, shape)
    if o.fill_sms:
        tile = _filling(_paired(o, tile, shape), shape)
    return tile


def _tile(o: GpuTileMatmulPass, shape: MatmulShape) -> GpuTile:
    narrow = shape.dtype in ("f16", "bf16")
    eight = shape.dtype in ("f8e4m3", "f8e5m2")
    tf32 = o.tf32 and shape.dtype == "f32"
    mma = (o.tensor_cores and (narrow or eight)) or tf32
    mma_k = MMA_K_TF32 if tf32 else MMA_K_F8 if eight else MMA_K
    block_m, thread_m = _fit(o.block_m, o.thread_m, shape.m)
    block_n, thread_n = _fit(o.block_n, o.thread_n, shape.n)
    if mma:  # whole m16n8k16 tiles: the block at least 16 x 8, k in steps of 16
        block_m, block_n = max(block_m, MMA_M), max(block_n, MMA_N)
        if o.wgmma and not tf32:  # a warpgroup's 64 rows at the least
            block_m = max(block_m, WGMMA_M)
    pairs = mma and not tf32
    block_k = o.block_k or _auto_depth(o, block_m, block_n, shape.k, shape.itemsize, pairs)
    by_tma = narrow and o.wgmma and o.tma and o.swizzle and shape.aligned and shape.described
    if by_tma and not o.block_k:  # one 128-byte swizzled row of k a stage, where TMA fills it
        block_k = TMA_SWIZZLE_DEPTH
    if mma:
        block_k = -(-block_k // mma_k) * mma_k
    o = replace(o, block_m=block_m, thread_m=thread_m, block_n=block_n, thread_n=thread_n,
                block_k=block_k)  # fmt: skip
    _check_shared(o, shape.itemsize, pairs)
    threads = (block_m // thread_m) * (block_n // thread_n)
    warps = (1, 1)
    if mma:  # warps of 64 x 32 (fewer where the block is smaller), 32 lanes each
        warps = (max(1, block_m // MMA_WARP[0]), max(1, block_n // MMA_WARP[1]))
        whole = (
            block_m % (warps[0] * MMA_M) == 0
            and block_n % (warps[1] * MMA_N) == 0
            and block_k % mma_k == 0
        )
        if whole:
            threads = 32 * warps[0] * warps[1]
        else:  # block options that do not cut into instruction tiles: no mma
            mma = tf32 = False
    tiles = -(-shape.m // block_m) * -(-shape.n // block_n)
    k_tiles = -(-shape.k // block_k)
    splits = _splits(o, tiles, k_tiles) if not shape.batch and shape.single_call else 1
    pairs = mma and not tf32  # again: mma is off where the block does not cut into its tiles
    wgmma = _wgmma(o, pairs, shape)
    if wgmma:  # a warpgroup per 64 rows of the block
        threads = 128 * (block_m // WGMMA_M)
    copies = ring(o, pairs) and shape.aligned and block_k % 8 == 0 and block_n % 8 == 0
    copies = copies and (o.ldmatrix or wgmma or not eight)  # 8-bit: ldmatrix or wgmma reads
    swizzled = copies and not eight and swizzles(o, pairs, block_k, block_n)
    tma = wgmma and o.tma and shape.described and not eight  # 8-bit wgmma: cp.async only
    specialized = tma and o.warp_specialize
    if specialized:  # the producer warpgroup
        threads += 128
    atoms = block_k % TMA_SWIZZLE_DEPTH == 0 and block_n % TMA_SWIZZLE_DEPTH == 0
    tma_swizzled = tma and o.swizzle and atoms
    persistent = specialized and o.persistent
    tiles_m = -(-shape.m // block_m)
    cluster = o.cluster_m if specialized and tiles_m > 1 and block_k % (8 * o.cluster_m) == 0 else 1
    if persistent or cluster > 1:  # the blocks loop over tiles, or share B: no split-K
        splits = 1
    cluster_tiles = -(-tiles_m // cluster) * (tiles // tiles_m)
    return GpuTile(o, mma, tf32, mma_k, warps, threads, _warp_tiles(o), tiles,
                   prod(shape.batch), k_tiles, splits, wgmma, copies, swizzled, tma,
                   specialized, tma_swizzled, persistent, cluster, cluster_tiles, eight and mma)  # fmt: skip


WGMMA_M = 64
TMA_SWIZZLE_DEPTH = 64
"""Elements of a 128-byte swizzled row (2 bytes each): the TMA tiles' k depth, and their
atoms along n."""
"""Rows of C a warpgroup's wgmma computes."""


def _wgmma(o: GpuTileMatmulPass, pairs: bool, shape: MatmulShape) -> bool:
    """Whether the block runs on wgmma (`wgmma=true`): f16/bf16 tiles filled by cp.async
    (rows 16-byte aligned), whole warpgroups of 64 rows, N a multiple of 8 up to 256 and
    k whole instructions of 16."""
    return (
        o.wgmma
        and ring(o, pairs)
        and shape.aligned
        and o.block_m % WGMMA_M == 0
        and o.block_n % 8 == 0
        and o.block_n <= 256
        and o.block_k % MMA_K == 0
    )


def _splits(o: GpuTileMatmulPass, tiles: int, k_tiles: int) -> int:
    """How many k ranges each C tile's sum is split into (split-K): a divisor of the k
    tiles, so every range has the same trip count (lockstep needs uniform loop bounds; a GPU
    likes them too)."""
    if o.split_k == 1:
        return 1
    divisors = [d for d in range(1, k_tiles + 1) if k_tiles % d == 0]
    if o.split_k:
        return max(d for d in divisors if d <= o.split_k)
    if 2 * tiles > o.sms:  # at least half the multiprocessors busy already
        return 1
    need = -(-o.sms // tiles)
    deep = [d for d in divisors if k_tiles // d >= MIN_SPLIT_TILES]
    best = next((d for d in deep if d >= need), max(deep, default=1))
    # a split that still leaves most multiprocessors idle costs a second launch and the
    # partials' traffic for little: not done
    return best if 2 * tiles * best >= o.sms else 1


def tile_pad(pad: int, pairs: bool, itemsize: int = 2) -> int:
    """The shared tiles' row padding: `pad`, or under `pairs` a multiple of 16 bytes
    (`HALF_PAD` elements of 2 bytes, 16 of 1)."""
    unit = HALF_PAD * 2 // itemsize
    return -(-max(pad, unit) // unit) * unit if pairs else pad


def swizzles(o: GpuTileMatmulPass, pairs: bool, depth: int, block_n: int) -> bool:
    """Whether the f16/bf16 tiles (A [m][depth], B [depth][block_n], filled by cp.async and
    read by ldmatrix) are swizzled (`swizzle`; `irkit.dialects.warp_async.swizzle_chunk`): rows of
    1, 2, 4 or a multiple of 8 chunks of 16 bytes, where the XOR stays inside the row."""

    def fits(elements: int) -> bool:
        chunks, rest = divmod(elements, 8)
        return rest == 0 and (chunks in (1, 2, 4) or chunks % 8 == 0)

    return ring(o, pairs) and o.swizzle and not o.wgmma and fits(depth) and fits(block_n)


def ring(o: GpuTileMatmulPass, pairs: bool) -> bool:
    """Whether the options fill f16/bf16 tiles by a cp.async ring (`async-copy`): 16-byte
    copies into tiles kept as in memory, A [m][k] and B [k][n] read by ldmatrix or wgmma's
    core matrices (not B [n][k], which a copy cannot transpose). A problem whose rows are
    not 16-byte aligned is staged through registers instead (`GpuTile.async_copy`)."""
    return pairs and o.async_copy and o.vector_loads and (o.ldmatrix or o.wgmma)


def stage_count(o: GpuTileMatmulPass, pairs: bool) -> int:
    """Shared stages of the tiles: `stages` where cp.async may fill them (`ring`; the
    kernel falls back to two where its rows are not 16-byte aligned), two with
    register-staged double buffering, else one."""
    if ring(o, pairs):
        return o.stages
    return 2 if o.double_buffer else 1


def shared_bytes(
    o: GpuTileMatmulPass, block_m: int, block_n: int, depth: int, itemsize: int, pairs: bool
) -> int:
    """Bytes of the A and B tiles, every stage: under `pairs` A [m][k] and B [n][k] (with
    `ldmatrix` and 2-byte elements, B [k][n]), otherwise A [k][m] and B [k][n]; each row
    padded (8-bit tiles are never swizzled)."""
    stages = stage_count(o, pairs)
    swizzled = itemsize > 1 and swizzles(o, pairs, depth, block_n)
    pad = 0 if swizzled else tile_pad(o.pad, pairs, itemsize)
    if pairs:
        b = depth * (block_n + pad) if o.ldmatrix and itemsize > 1 else block_n * (depth + pad)
        return stages * (block_m * (depth + pad) + b) * itemsize
    return stages * depth * (block_m + block_n + 2 * pad) * itemsize


def _auto_depth(
    o: GpuTileMatmulPass, block_m: int, block_n: int, k: int, itemsize: int, pairs: bool
) -> int:
    """block-k=0: 64 bytes of k per tile row where K is a multiple of it, else 32 (a ragged
    K's bounds checks on twice the elements per thread made ptxas spill: 12 spills on a
    147-deep im2col matmul at 16 f32), halved until the tiles fit 48 KB of static shared
    memory. f16/bf16 on tensor cores (`pairs`) take 128 bytes (64 of k) where K is a
    multiple of 64 and the tiles fit `HALF_DEEP_SHARED` of dynamic shared memory: at 4096^3
    and 8192^3, f16 and bf16, on an H200 (bb6856d) 1.062-1.075x the 32-deep tiles (two
    register-staged stages). A cp.async ring takes 32: 64 deep, ptxas gave the 128 x 128
    kernel 156 registers (one block an SM) against 123 at 32 deep (two), NVRTC 13.5, not
    timed. Their shallower depths may use dynamic shared memory up to the same limit."""
    if pairs and k % 64 == 0 and not ring(o, pairs):
        if shared_bytes(o, block_m, block_n, 64, itemsize, pairs) <= HALF_DEEP_SHARED:
            return 64
    limit = HALF_DEEP_SHARED if pairs else STATIC_SHARED_LIMIT
    depth = max(1, 64 // itemsize)
    if k % depth:
        depth = max(1, depth // 2)
    while depth > 1 and shared_bytes(o, block_m, block_n, depth, itemsize, pairs) > limit:
        depth //= 2
    return depth


def _check_shared(o: GpuTileMatmulPass, itemsize: int, pairs: bool) -> None:
    """Tiles up to 48 KB are static `__shared__` arrays, larger ones (options asking for
    them, or the f16/bf16 automatic depth of 64) the launch's dynamic shared memory, which a
    device may hold up to `MAX_SHARED` (sm_90; a smaller device refuses the kernel by name
    when it is compiled for it); past that, refuse, naming the options."""
    stages = stage_count(o, pairs)
    need = shared_bytes(o, o.block_m, o.block_n, o.block_k, itemsize, pairs)
    require(
        need <= MAX_SHARED,
        "block-k",
        o.block_k,
        f"with block-m={o.block_m}, block-n={o.block_n}, pad={o.pad} and {stages} "
        f"stage(s), the {itemsize}-byte tiles need {need} bytes of shared memory; a "
        f"block may have at most {MAX_SHARED} bytes (sm_90)",
    )


def _warp_tiles(o: GpuTileMatmulPass) -> bool:
    """Whether the block's threads are laid out as warp sub-tiles: the register tile is
    whole 4 x 4 groups, the block whole warp sub-tiles, and shared rows stay aligned for the
    vector reads."""
    lanes_m, lanes_n = WARP_LANES
    return (
        o.warp_tile
        and o.thread_m % GROUP == 0
        and o.thread_n % GROUP == 0
        and o.block_m % (o.thread_m * lanes_m) == 0
        and o.block_n % (o.thread_n * lanes_n) == 0
        and (o.block_m + o.pad) % GROUP == 0
        and (o.block_n + o.pad) % GROUP == 0
    )


def _paired(o: GpuTileMatmulPass, tile: GpuTile, shape: MatmulShape) -> GpuTile:
    """`fill-sms` on a grid of 128 x 128 f32 tiles (8 x 8 register tiles, warp-tiled) that
    fills the multiprocessors but makes at most `PAIR_WAVES` waves: 128 x 64 tiles of 128
    threads under `__launch_bounds__(128, 2)`, twice the blocks, two or more resident on each
    SM to hide one another's loads. On an H200 with NVRTC 13.0 (2026-11-28, dbb5b27):
    transformer_block at B=8 S=512 D=512 F=2048 (matmuls of 128 and 512 such blocks) 1.100x
    [1.098, 1.101] faster end to end, every matmul kernel faster (62.5 -> 56.3 us at 4096 x
    512 x 512); mlp at B=512 D=1024 F=4096 1.099x; but a 4096^3 gemm (1024 blocks, ~8 waves)
    0.964x, where the large tile's arithmetic per load wins. 64 x 128 tiles gained less
    (1.085x), and the smaller tiles alone lost (0.953x): the pair needs both. Tensor-core
    tiles and any other register tile are left as they are (not measured)."""
    t = tile.options
    if (
        tile.mma
        or not tile.warp_tiled
        or shape.dtype != "f32"
        or (t.block_m, t.block_n, t.thread_m, t.thread_n) != (128, 128, 8, 8)
        or 2 * tile.blocks < t.sms
        or tile.blocks > PAIR_WAVES * t.sms
    ):
        return tile
    pair = replace(
        o, block_m=128, block_n=64, thread_m=8, thread_n=8, min_blocks=max(o.min_blocks, 2)
    )
    return _tile(pair, shape)


def _filling(tile: GpuTile, shape: MatmulShape) -> GpuTile:
    """`fill-sms`: where the C tiles, split-K included, would leave more than half of the
    `sms` multiprocessors idle, the block tile halved (and its register tile, down to 4 x 4)
    while that gives more blocks, to `MIN_FILL_BLOCK` at the least. A 256^3 gemm on an H200
    (2026-11-27): 128 x 128 tiles, 4 blocks, 31.5 us; 64 x 64, 16 blocks, 2.30x faster; 32 x
    32 (split-K 4: 256 blocks), 2.48x faster. Only where the grid is that short: a larger
    problem keeps the large tiles' arithmetic per load."""
    best = tile
    while 2 * best.blocks < best.options.sms:
        o = best.options
        block_m, block_n = o.block_m // 2, o.block_n // 2
        thread_m, thread_n = (
            max(min(o.thread_m, 4), o.thread_m // 2),
            max(min(o.thread_n, 4), o.thread_n // 2),
        )
        if (
            min(block_m, block_n) < MIN_FILL_BLOCK
            or block_m % thread_m
            or block_n % thread_n
            or (block_m // thread_m) * (block_n // thread_n) < MIN_THREADS
        ):
            break
        smaller = _tile(
            replace(o, block_m=block_m, block_n=block_n, thread_m=thread_m, thread_n=thread_n),
            shape,
        )
        if smaller.blocks <= best.blocks or (best.wgmma and not smaller.wgmma):
            break  # (a wgmma tile keeps its warpgroups of 64 rows)
        best = smaller
    return best


def _fit(block: int, thread: int, extent: int) -> tuple[int, int]:
    """A block side shrunk for a problem smaller than it (M = 4 rows with 128-row tiles would
    leave 97% of the threads idle): the next power of two >= extent, with the register tile
    shrunk to keep the number of threads along that side where it can."""
    if extent >= block:
        return block, thread
    fitted = 1 << (extent - 1).bit_length()
    return fitted, max(1, fitted // (block // thread))
