"""gpu-tile-matmul: matmul kernels tiled through shared memory, with register tiles.

A kernel whose work is one matmul nest (`match_matmul`: a matmul, a batch matmul, or either
with its fused epilogue) becomes a tiled GPU kernel before `map-to-gpu` sees it: block tiles
of C looping over K through shared memory (double-buffered, 16-byte loads), register tiles
per thread laid out as warp sub-tiles, or `mma.sync` tensor-core tiles for f16/bf16 (and f32
under `tf32=true`); split-K where the grid is short. The same sums in the same order as the
untiled nest (split-K: another association, deterministic). The kernel carries
`irkit.launch` with `mapping = "tiled"`. Kernels with more than one nest are left to
`map-to-gpu`.

Which tiles a matmul gets is data (`gpu_tile_policy.gpu_tile`: a pure function of these
options and the problem's shape); this module builds the kernel that schedule describes.
The options (sizes in elements), their defaults in `GpuTileMatmulPass`, and how each part
works and was measured: docs/passes.md, "gpu-tile-matmul in detail".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from math import prod
from typing import ClassVar, NamedTuple

from xdsl.context import Context
from xdsl.dialects import arith, func, gpu, memref, scf, vector
from xdsl.dialects.builtin import (
    Float32Type,
    MemRefType,
    ModuleOp,
    UnitAttr,
    VectorType,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.passes import ModulePass

from irkit.dialects.warp_async import CpAsyncCommitOp, CpAsyncOp, CpAsyncWaitOp
from irkit.dialects.warp_tma import ClusterBarrierOp
from irkit.dtypes import dtype_name, numpy_dtype
from irkit.errors import require
from irkit.ir import shape_of
from irkit.loops import (
    KERNEL_ATTR,
    LAUNCH_ATTR,
    SCRATCH_ATTR,
    STATIC_SHARED_LIMIT,
    constant_int,
    require_loop_level,
    shared_buffer,
    shared_layout,
)
from irkit.loops.costs import count_flops
from irkit.loops.rows import nests_of
from irkit.passes.contraction import MatmulNest, match_matmul
from irkit.passes.gpu_gemv import applies, build_gemv, gemv_splits
from irkit.passes.gpu_tile_fp8 import eight_bit, mma_f8, pack_operands, tileable
from irkit.passes.gpu_tile_policy import (
    GROUP,
    MAX_THREADS,
    MIN_THREADS,
    MMA_K,
    MMA_K_TF32,
    MMA_M,
    MMA_N,
    WARP_LANES,
    GpuTile,
    MatmulShape,
    gpu_tile,
)
from irkit.passes.gpu_tile_tma import (
    described,
    persistent_pipeline,
    specialized_pipeline,
    tma_pipeline,
)
from irkit.passes.loop_builder import add_kernel_buffer
from irkit.passes.map_to_gpu import GpuBuilder, X, launch_attr, new_kernel

REDUCE_THREADS = 256
"""Threads per block of split-K's second kernel (one per element of C)."""
VECTOR_BYTES = 16


@dataclass(frozen=True)
class GpuTileMatmulPass(ModulePass):
    """Map single-matmul kernels onto shared-memory and register tiles (see the module
    docstring). Optional: without it, `map-to-gpu` maps them one thread per output."""

    name = "gpu-tile-matmul"
    is_optimization = True
    SEARCH_SPACE: ClassVar[dict[str, tuple[int, ...]]] = {
        "block-m": (64, 128),
        "block-n": (64, 128),
        "block-k": (0, 8, 16, 32),
        "thread-m": (4, 8),
        "thread-n": (4, 8),
        "split-k": (0, 1),
        "stages": (2, 3, 4),
    }
    """What `irkit-bench tune --space gpu-tile-matmul` tries: the block and register tiles,
    the k depth (0: auto), and split-K on or off; every combination a valid block (64 to
    1024 threads)."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 0  # 0: 64 bytes of k (16 f32, 8 f64), as deep as static shared memory allows
    thread_m: int = 8
    thread_n: int = 8
    pad: int = 4
    vector_loads: bool = True
    double_buffer: bool = True
    warp_tile: bool = True
    split_k: int = 0  # 0: auto (fill `sms`), 1: never, n: at most n ranges
    sms: int = 132
    fill_sms: bool = True  # smaller block tiles where the grid would leave most `sms` idle
    batch: bool = True  # batch matmuls tiled too (false: left to map-to-gpu, as before)
    tensor_cores: bool = True  # f16/bf16: mma.sync m16n8k16 (sm_80 and later)
    # a matmul of one row (a decode step's projections): the GEMV kernel of
    # `irkit.passes.gpu_gemv` (8 warps along k, 16-byte loads of W, k ranges filling `sms`;
    # false: left to map-to-gpu, a thread an output with its whole k loop)
    gemv: bool = True
    # f16/bf16 on tensor cores: fragments by ldmatrix.x4, B's tile [k][n] as in memory and
    # read transposed (false: [n][k] tiles, one 32-bit load a pair). At 4096^3 f16 on an
    # H200 (f613a5b) 0.528 ms against 1.687, 3.19x: the [n][k] tile's transposed 2-byte
    # stores put 16 threads of a warp on one bank; with A alone by ldmatrix (6a2c45a) it
    # had run 0.93x of the pair loads.
    ldmatrix: bool = True
    # f16/bf16 tensor-core tiles filled by cp.async (sm_80 and later) straight from global
    # memory into a ring of `stages` shared stages, `stages - 1` tiles in flight while one
    # is computed (false: copies staged through registers, two stages). Four stages of 32
    # (64 KB at 128 x 128, swizzled): as many bytes in flight as the register-staged 64-deep
    # pair, at 123 registers (two blocks an SM). Not yet timed on a GPU:
    # benchmarks/gpu_acceptance.sh times it against each other stage count.
    async_copy: bool = True
    stages: int = 4
    # f16/bf16 on Hopper's warpgroup MMA (sm_90a only, so opt-in): a warpgroup of 128
    # threads per 64 rows of the block, `wgmma.mma_async` m64nNk16 reading both operands
    # from core-matrix tiles in shared memory (A K-major, B N-major, no swizzle), filled by
    # the cp.async ring; f32 accumulators. Not yet timed on a GPU.
    wgmma: bool = False
    # the wgmma tiles filled by Hopper's tensor memory accelerator (sm_90a; with `wgmma`):
    # one thread issues each k tile's boxes, which complete on a stage's mbarrier, instead
    # of every thread's cp.async (`irkit.passes.gpu_tile_tma`). Not yet timed on a GPU.
    tma: bool = False
    # with `tma`: a producer warpgroup (its thread 0 issuing the boxes, its registers given
    # to the others by setmaxnreg) and consumer warpgroups computing, the stages handed over
    # by full and empty mbarriers, no block barrier in the k loop. Not yet timed on a GPU.
    warp_specialize: bool = False
    # with `warp-specialize`: a grid of at most `sms` blocks, each looping over C tiles (the
    # producer loading the next tile's stages while the consumers store this one's). Not yet
    # timed on a GPU.
    persistent: bool = False
    # with `warp-specialize`: wgmma groups a consumer leaves in flight at the end of a k tile
    # (1: the next k tile's wgmma ops are issued while this one's run; its stage is handed
    # back one k tile later; 0: each k tile waited for). Not yet timed on a GPU.
    wgmma_depth: int = 1
    # C tiles in groups of this many tile rows, column-major inside a group (1: row-major):
    # consecutive blocks reuse A's rows and B's columns from L2. Not yet timed on a GPU.
    group_m: int = 1
    # with `warp-specialize` (sm_90): blocks in clusters of this many on consecutive C tile
    # rows of one tile column; each block's producer loads 1/cluster-m of B's k tile and
    # multicasts it to the cluster (TMA `.multicast::cluster`), the consumers hand each stage
    # back to every block of the cluster (`irkit.passes.gpu_tile_tma`). 1: no clusters. Not
    # yet timed on a GPU.
    cluster_m: int = 1
    # the cp.async tiles' 16-byte chunks XOR-swizzled by row (`irkit.dialects.warp_async.
    # swizzle_chunk`) instead of rows padded by 16 bytes: ldmatrix and the copies stay free
    # of bank conflicts in 20% less shared memory. Not yet timed on a GPU.
    swizzle: bool = True
    tf32: bool = False  # f32 through TF32 tensor cores (opt-in: 10-bit mantissa products)
    vector_stores: bool = False  # f32 C: a thread's 4 consecutive columns as one float4
    # __launch_bounds__(threads, min-blocks) where > 0. An option, not a default: two
    # 256-thread blocks share a multiprocessor only at <= 128 registers a thread; the 8 x 8
    # SIMT tile took 127 from NVRTC 13.5 but 139 from NVRTC 13.0 with 16-byte stores of C
    # (a 4096^3 gemm on an H200: 3.59 ms, 3.05 ms with scalar stores, cuBLAS 2.78 ms).
    # Bounded to 2 blocks, NVRTC 13.0 fits 128 registers without spills while NVRTC 13.5
    # spills 20; which NVRTC a user has decides, so gpu_targets.py measures it.
    min_blocks: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_loop_level(op, "gpu-tile-matmul")
        calls = Counter(
            c.callee.root_reference.data for c in op.walk() if isinstance(c, func.CallOp)
        )
        for fn in list(op.ops):
            if not isinstance(fn, func.FuncOp) or KERNEL_ATTR not in fn.attributes:
                continue
            if LAUNCH_ATTR in fn.attributes:
                continue
            constants, nests = nests_of(fn, "gpu-tile-matmul")
            if len(nests) != 1 or len(nests[0].ops) != 1:
                continue
            loop = nests[0].ops[0]
            nest = (
                match_matmul(loop, batched=self.batch, half=True, fp8=True)
                if isinstance(loop, scf.ParallelOp)
                else None
            )
            if nest is None or (eight_bit(nest) and not tileable(nest)):
                continue
            shape = _shape(nest, calls[fn.sym_name.data])
            if shape.m == 1 and not eight_bit(
                nest
            ):  # a row times a matrix (a decode step's projections): no row
                if not (self.gemv and applies(nest)):  # shares a tile of B
                    continue
                splits = gemv_splits(nest, shape.single_call, self.sms)
                if splits > 1:
                    _split_k(op, fn, nest, splits, constants)
                kernel = build_gemv(fn, nest, constants, splits, op)
            else:
                tiled = self._tiled(fn, nest, shape, constants, op)
                if tiled is None:
                    continue
                kernel = tiled
            op.body.block.insert_op_before(kernel, fn)
            fn.detach()
            fn.erase()

    def _tiled(self, fn, nest, shape, constants, op) -> func.FuncOp | None:
        """The tiled kernel of a matmul of more than one row (split-K's partial buffer and
        reduction kernel added to `fn` where its tile asks for them); None for an 8-bit
        matmul the options give no ring (`irkit.passes.gpu_tile_fp8`)."""
        tile = gpu_tile(self, shape)
        packed = None
        if eight_bit(nest):
            if not (tile.eight and tile.async_copy):
                return None
            packed = pack_operands(op, fn, nest)
        tiled = _TiledKernel(tile, fn, nest, op, packed)
        if tiled.splits > 1:
            _split_k(op, fn, nest, tiled.splits, constants)
        return tiled.build(constants)

    def check_options(self) -> None:
        for name, value in (
            ("block-m", self.block_m),
            ("block-n", self.block_n),
            ("block-k", self.block_k),
            ("thread-m", self.thread_m),
            ("thread-n", self.thread_n),
        ):
            if name == "block-k" and value == 0:
                continue  # auto
            require(0 < value <= 1024, name, value, "must be from 1 to 1024 (block-k: or 0, auto)")
        for name, total, part in (
            ("block-m", self.block_m, self.thread_m),
            ("block-n", self.block_n, self.thread_n),
        ):
            require(
                total % part == 0, name, total, f"must be a multiple of thread-{name[-1]}={part}"
            )
        threads = (self.block_m // self.thread_m) * (self.block_n // self.thread_n)
        require(
            MIN_THREADS <= threads <= MAX_THREADS,
            "block-m",
            self.block_m,
            f"with block-n={self.block_n}, thread-m={self.thread_m} and "
            f"thread-n={self.thread_n} the tiles give {threads} threads per block; "
            f"{MIN_THREADS} to {MAX_THREADS} are allowed",
        )
        require(0 <= self.pad <= 64, "pad", self.pad, "must be from 0 to 64")
        require(0 <= self.split_k <= 4096, "split-k", self.split_k, "must be from 0 to 4096")
        require(0 <= self.min_blocks <= 32, "min-blocks", self.min_blocks, "must be from 0 to 32")
        require(1 <= self.sms <= 4096, "sms", self.sms, "must be from 1 to 4096")
        require(2 <= self.stages <= 8, "stages", self.stages, "must be from 2 to 8")
        require(0 <= self.wgmma_depth <= 1, "wgmma-depth", self.wgmma_depth, "must be 0 or 1")
        require(1 <= self.group_m <= 64, "group-m", self.group_m, "must be from 1 to 64")
        require(1 <= self.cluster_m <= 8, "cluster-m", self.cluster_m, "must be from 1 to 8")
        require(
            self.cluster_m == 1 or self.warp_specialize,
            "cluster-m",
            self.cluster_m,
            "needs warp-specialize=true (stages are handed back across the cluster by mbarriers)",
        )
        require(
            not self.tma or self.wgmma, "tma", self.tma, "needs wgmma=true (TMA fills its tiles)"
        )
        require(
            not self.warp_specialize or self.tma,
            "warp-specialize",
            self.warp_specialize,
            "needs tma=true (the producer warpgroup issues TMA boxes)",
        )
        require(
            not self.persistent or self.warp_specialize,
            "persistent",
            self.persistent,
            "needs warp-specialize=true (the producer runs ahead into the next tile)",
        )


class WarpTile(NamedTuple):
    """A lane's place in its warp's tile of C, for the mma instructions (`_TiledKernel.warp_tile`)."""

    tiles_m: int  # the warp tile's 16-row pieces
    tiles_n: int  # and its 8-column pieces
    g: SSAValue  # lane / 4
    t4: SSAValue  # lane % 4
    two_t: SSAValue
    row0: SSAValue  # the warp tile's first row and column in the block tile
    col0: SSAValue
    rows: SSAValue  # row0 + g
    c_cols: SSAValue  # col0 + 2t: C's first column of this lane

    def outputs(self, b: GpuBuilder) -> list[tuple[SSAValue, SSAValue]]:
        """Each accumulator's row and column in the block tile, in `mma_grid`'s order."""
        from irkit.dialects.warp import c_coordinates

        c_at = [c_coordinates(0, i) for i in range(4)]  # (row - g, column - 2t)
        return [
            (b.iadd(self.rows, mi * MMA_M + dm), b.iadd(self.c_cols, ni * MMA_N + dn))
            for mi in range(self.tiles_m)
            for ni in range(self.tiles_n)
            for dm, dn in c_at
        ]


class _TiledKernel:
    """Builds one tiled matmul kernel to the schedule `tile` (`gpu_tile_policy.gpu_tile`)."""

    def __init__(
        self,
        tile: GpuTile,
        fn: func.FuncOp,
        nest: MatmulNest,
        module: ModuleOp,
        packed: tuple[SSAValue | None, SSAValue] | None = None,
    ):
        self.fn, self.nest, self.module = fn, nest, module
        # 8-bit: `fn`'s parameters holding A's aligned copy (or None) and B^T (`gpu_tile_fp8`)
        self.packed = packed
        self.tile, self.o = tile, tile.options
        self.mma, self.tf32, self.mma_k = tile.mma, tile.tf32, tile.mma_k
        self.wgmma = tile.wgmma
        self.rows_t, self.cols_t, self.threads = tile.rows_t, tile.cols_t, tile.threads
        self.warp_tiled, self.warps = tile.warp_tiled, tile.warps
        self.tiles, self.batches, self.k_tiles = tile.tiles, tile.batches, tile.k_tiles
        self.splits = tile.splits
        # f16/bf16 on tensor cores: A's tile k-contiguous ([m][k]), B's [k][n] read by a
        # transposed ldmatrix (or [n][k] without `ldmatrix`), the copies 16 bytes wide
        self.pairs, self.pad = tile.pairs, tile.pad
        self.shared_sizes: list[int] = []  # bytes of each shared tile, in kernel order
        self.async_copy, self.swizzled = tile.async_copy, tile.swizzled
        self.stages = tile.stages
        self.tma, self.specialized = tile.tma, tile.specialized
        self.persistent = tile.persistent
        # clusters (`cluster-m`): each block's C tile is row `rank` of its cluster's tile rows;
        # `units`, the tiles (or clusters' tiles) a batch entry has
        self.cluster, self.units = tile.cluster, tile.cluster_tiles
        self.rank: SSAValue | None = None
        # wgmma's tiles: "swizzled" (128-byte rows) or "strips" of core matrices (TMA boxes),
        # else "cores" (cp.async; `irkit.dialects.warp_async.wgmma_element`)
        self.layout = "kmajor" if tile.eight else "cores"
        if tile.tma:
            self.layout = "swizzled" if tile.tma_swizzled else "strips"
        # setmaxnreg shares the register pool ptxas sizes from __launch_bounds__(threads, 1).
        # A grid of at most `sms` blocks (one an SM, one wave) gains nothing from a second
        # block an SM, yet under __launch_bounds__(threads) alone ptxas 13.5 keeps registers
        # for more: swin's 1024 x 32 x 32 tiles (8 blocks) took 40 registers and spilled
        # (8 stores on sm_80), 64 and none with (threads, 1); its K = 12 bf16 tile, 96 and 4
        # stores on sm_90, 164 and none. Larger grids keep the bound they had (4096^3 f16 at
        # (256, 1) took 148 registers instead of 123: one block an SM instead of two).
        one_wave = tile.blocks <= self.o.sms
        self.min_blocks = self.o.min_blocks or int(self.specialized or one_wave)

    def _thread_tile(self, b: GpuBuilder, tid: SSAValue) -> tuple[list[SSAValue], list[SSAValue]]:
        """The first row (column) of each of this thread's groups in the block tile: groups
        of `GROUP` under warp tiling, single rows (columns) strided by the threads along
        that side otherwise."""
        o = self.o
        if not self.warp_tiled:
            tx = b.binary(arith.RemUIOp, tid, self.cols_t)
            ty = b.binary(arith.DivUIOp, tid, self.cols_t)
            return (
                [b.iadd(ty, r * self.rows_t) for r in range(o.thread_m)],
                [b.iadd(tx, c * self.cols_t) for c in range(o.thread_n)],
            )
        lanes_m, lanes_n = WARP_LANES
        warp_m, warp_n = o.thread_m * lanes_m, o.thread_n * lanes_n  # a warp's sub-tile
        warp, lane = b.binary(arith.DivUIOp, tid, 32), b.binary(arith.RemUIOp, tid, 32)
        warps_n = o.block_n // warp_n
        row = b.binary(arith.MuliOp, b.binary(arith.DivUIOp, warp, warps_n), warp_m)
        col = b.binary(arith.MuliOp, b.binary(arith.RemUIOp, warp, warps_n), warp_n)
        row = b.add(
            arith.AddiOp(row, b.binary(arith.MuliOp, b.binary(arith.DivUIOp, lane, lanes_n), GROUP))
        )
        col = b.add(
            arith.AddiOp(col, b.binary(arith.MuliOp, b.binary(arith.RemUIOp, lane, lanes_n), GROUP))
        )
        return (
            [b.iadd(row, g * lanes_m * GROUP) for g in range(o.thread_m // GROUP)],
            [b.iadd(col, g * lanes_n * GROUP) for g in range(o.thread_n // GROUP)],
        )

    def _read(
        self, t: GpuBuilder, tile: SSAValue, stage: SSAValue, k: SSAValue, firsts: list[SSAValue]
    ) -> list[SSAValue]:
        """This thread's values of one k row of a shared tile: a vector per group under
        warp tiling, a word per row (column) otherwise."""
        if not self.warp_tiled:
            return [t.add(memref.LoadOp.get(tile, [stage, k, i])) for i in firsts]
        if not isinstance(self.nest.element_type, Float32Type):  # CUDA has no 4-wide f64/f16
            return [
                t.add(memref.LoadOp.get(tile, [stage, k, t.iadd(i, q)]))
                for i in firsts
                for q in range(GROUP)
            ]
        vtype = VectorType(self.nest.element_type, [GROUP])
        out = []
        for i in firsts:
            v = t.add(vector.LoadOp(tile, [stage, k, i], vtype))
            out += [t.add(vector.ExtractOp(v, [q], self.nest.element_type)) for q in range(GROUP)]
        return out

    def _widen(self, t: GpuBuilder, values: list[SSAValue]) -> list[SSAValue]:
        """f16/bf16 values from the shared tiles, extended to the accumulator's f32."""
        acc_type = self.nest.acc.type
        if self.nest.element_type == acc_type:
            return values
        return [t.add(arith.ExtFOp(v, acc_type)) for v in values]

    def _simt(self, b: GpuBuilder, tid: SSAValue, a_tile: SSAValue, b_tile: SSAValue):
        """The f32 (and f64, and tensor-core-less f16) inner product: each thread's
        `thread-m x thread-n` register tile, one multiply-add per element per k. Returns the
        k-tile step and, per accumulator, its row and column in the block tile."""
        o = self.o
        row_firsts, col_firsts = self._thread_tile(b, tid)
        group = GROUP if self.warp_tiled else 1
        my_rows = [b.iadd(r, q) for r in row_firsts for q in range(group)]
        my_cols = [b.iadd(c, q) for c in col_firsts for q in range(group)]

        def compute(t: GpuBuilder, stage: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
            for kk in range(o.block_k):
                kv = t.index(kk)
                am = self._widen(t, self._read(t, a_tile, stage, kv, row_firsts))
                bn = self._widen(t, self._read(t, b_tile, stage, kv, col_firsts))
                accs = [
                    t.add(arith.AddfOp(accs[r * o.thread_n + c], t.add(arith.MulfOp(am[r], bn[c]))))
                    for r in range(o.thread_m)
                    for c in range(o.thread_n)
                ]
            return accs

        return compute, [(r, c) for r in my_rows for c in my_cols]

    def warp_tile(self, b: GpuBuilder, tid: SSAValue) -> WarpTile:
        """Thread `tid`'s lane and its warp's place in the block tile of C (warps row-major)."""
        warps_n = self.warps[1]
        warp_m, warp_n = self.o.block_m // self.warps[0], self.o.block_n // warps_n
        warp, lane = b.binary(arith.DivUIOp, tid, 32), b.binary(arith.RemUIOp, tid, 32)
        g, t4 = b.binary(arith.DivUIOp, lane, 4), b.binary(arith.RemUIOp, lane, 4)
        two_t = b.binary(arith.MuliOp, t4, 2)
        row0 = b.binary(arith.MuliOp, b.binary(arith.DivUIOp, warp, warps_n), warp_m)  # uniform
        col0 = b.binary(arith.MuliOp, b.binary(arith.RemUIOp, warp, warps_n), warp_n)  # uniform
        rows = b.add(arith.AddiOp(row0, g))
        c_cols = b.add(arith.AddiOp(col0, two_t))  # C's first column of this lane
        return WarpTile(warp_m // MMA_M, warp_n // MMA_N, g, t4, two_t, row0, col0, rows, c_cols)

    def _mma(self, b: GpuBuilder, tid: SSAValue, a_tile: SSAValue, b_tile: SSAValue):
        """The tensor-core inner product: each warp a `64 x 32` (or smaller) tile of C as
        m16n8k16 instructions; per 16 of k, a lane reads its 8 values of A per 16 rows and 4
        of B per 8 columns from the shared tiles (at the fragment coordinates of
        `irkit.dialects.warp`) and issues one `irkit_warp.mma_m16n8k16` per 16 x 8 piece.
        Returns the k-tile step and each accumulator's row and column in the block tile."""
        from irkit.dialects.warp import (
            LdmatrixX4Op,
            MmaM16n8k8Tf32Op,
            MmaM16n8k16Op,
            a_coordinates,
            a_coordinates_tf32,
            b_coordinates,
            b_coordinates_tf32,
            mma_grid,
        )

        o = self.o
        w = self.warp_tile(b, tid)
        tiles_m, tiles_n, g, t4, two_t = w.tiles_m, w.tiles_n, w.g, w.t4, w.two_t
        row0, rows, cols = w.row0, w.rows, w.col0
        b_cols = b.add(arith.AddiOp(cols, g))  # B's column (n) of this lane
        # a lane's coordinates are (g or 2t) + a constant: the constants, from the layout
        op_class: type[MmaM16n8k16Op] | type[MmaM16n8k8Tf32Op]
        if self.tf32:  # lanes' k offsets are t, not 2t
            op_class, step, a_of, b_of, na, nb = MmaM16n8k8Tf32Op, MMA_K_TF32, a_coordinates_tf32, b_coordinates_tf32, 4, 2  # fmt: skip
            k_lane = t4
        else:
            op_class, step, a_of, b_of, na, nb = MmaM16n8k16Op, MMA_K, a_coordinates, b_coordinates, 8, 4  # fmt: skip
            k_lane = two_t
        a_at = [a_of(0, i) for i in range(na)]  # (row - g, k - k_lane)
        b_at = [b_of(0, i) for i in range(nb)]  # (k - k_lane, n - g)

        def pair(t: GpuBuilder, tile: SSAValue, stage: SSAValue, row: SSAValue, k: SSAValue):
            """Elements k and k + 1 of a k-contiguous tile's row: one 32-bit load."""
            v = t.add(vector.LoadOp(tile, [stage, row, k], VectorType(self.nest.element_type, [2])))
            return [t.add(vector.ExtractOp(v, [q], self.nest.element_type)) for q in range(2)]

        def ldmatrix(t: GpuBuilder, tile: SSAValue, at: list[SSAValue],
                     origins: list[tuple[int, int]], transpose: bool = False) -> list[list[SSAValue]]:  # fmt: skip
            """Four pairs a lane, from the warp's 8 x 8 matrices at `origins` from `at`."""
            op = LdmatrixX4Op(tile, at, origins, transpose, self.swizzled)
            t.add(op)
            et = self.nest.element_type
            return [[t.add(vector.ExtractOp(v, [q], et)) for q in range(2)] for v in op.pairs]

        def a_pairs(t: GpuBuilder, stage: SSAValue, mi: int, kk: int) -> list[SSAValue]:
            """A lane's 8 values of A for the mi-th 16 rows, by ldmatrix or pair loads."""
            if self.o.ldmatrix:
                origins = [(dm, dk) for dm, dk in a_at[::2]]  # (0,0) (8,0) (0,8) (8,8)
                at = [stage, t.iadd(row0, mi * MMA_M), t.index(kk)]
                return [x for p in ldmatrix(t, a_tile, at, origins) for x in p]
            return [x for dm, dk in a_at[::2]
                    for x in pair(t, a_tile, stage, t.iadd(rows, mi * MMA_M + dm), t.iadd(k_lane, kk + dk))]  # fmt: skip

        def b_pairs(t: GpuBuilder, stage: SSAValue, kk: int) -> list[list[SSAValue]]:
            """A lane's 4 values of B for each 8 columns. With `ldmatrix`, B's tile is [k][n]
            as in memory and two 8-column tiles are one transposed ldmatrix.x4 (a last odd
            one, 4 element loads); without, B's tile is [n][k] and each pair one load."""
            out: list[list[SSAValue]] = []
            for ni in range(tiles_n):
                if not self.o.ldmatrix:
                    out.append([x for dk, _ in b_at[::2]
                                for x in pair(t, b_tile, stage, t.iadd(b_cols, ni * MMA_N), t.iadd(k_lane, kk + dk))])  # fmt: skip
                elif ni % 2 == 0 and ni + 1 < tiles_n:
                    origins = [(dk, 0) for dk, _ in b_at[::2]]
                    origins += [(dk, MMA_N) for dk, _ in b_at[::2]]  # (0,0) (8,0) (0,8) (8,8)
                    at = [stage, t.index(kk), t.iadd(cols, ni * MMA_N)]
                    p = ldmatrix(t, b_tile, at, origins, transpose=True)
                    out += [[*p[0], *p[1]], [*p[2], *p[3]]]
                elif len(out) == ni:
                    out.append([t.add(memref.LoadOp.get(b_tile, [stage, *self._at(t, t.iadd(k_lane, kk + dk), t.iadd(b_cols, ni * MMA_N), o.block_n)]))
                                for dk, _ in b_at])  # fmt: skip
            return out

        def scalar_a(t: GpuBuilder, stage: SSAValue, mi: int, kk: int) -> list[SSAValue]:
            """TF32: a lane's values of A one by one from A's [k][m] tile."""
            return [t.add(memref.LoadOp.get(a_tile, [stage, t.iadd(k_lane, kk + dk), t.iadd(rows, mi * MMA_M + dm)]))
                    for dm, dk in a_at]  # fmt: skip

        def scalar_b(t: GpuBuilder, stage: SSAValue, kk: int) -> list[list[SSAValue]]:
            """TF32: a lane's values of B one by one from B's [k][n] tile, per 8 columns."""
            return [[t.add(memref.LoadOp.get(b_tile, [stage, t.iadd(k_lane, kk + dk), t.iadd(b_cols, ni * MMA_N)]))
                     for dk, _ in b_at] for ni in range(tiles_n)]  # fmt: skip

        # f16/bf16: values 2i and 2i + 1 of a lane's A (B) are neighbours along k, one pair
        # of an ldmatrix.x4 or one 32-bit load; TF32's are single words
        load_a, load_b = (a_pairs, b_pairs) if self.pairs else (scalar_a, scalar_b)

        def compute(t: GpuBuilder, stage: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
            accs = list(accs)
            for kk in range(0, o.block_k, step):
                a_frags = [load_a(t, stage, mi, kk) for mi in range(tiles_m)]
                accs = mma_grid(t.add, op_class, a_frags, load_b(t, stage, kk), accs)
            return accs

        return compute, w.outputs(b)

    def _at(
        self, t: GpuBuilder, row: SSAValue, column: SSAValue, row_length: int
    ) -> list[SSAValue]:
        """(row, column) of a 2-byte element in a shared tile, the column where the swizzle
        put it in a swizzled tile (`irkit.dialects.warp_async.swizzle_column`)."""
        if not self.swizzled:
            return [row, column]
        chunks = row_length // 8
        chunk = t.binary(arith.DivUIOp, column, 8)
        phase = t.binary(
            arith.RemUIOp, t.binary(arith.DivUIOp, row, max(1, 8 // chunks)), min(chunks, 8)
        )
        chunk = t.add(arith.XOrIOp(chunk, phase))
        within = t.binary(arith.RemUIOp, column, 8)
        return [row, t.add(arith.AddiOp(t.binary(arith.MuliOp, chunk, 8), within))]

    def _wgmma(self, b: GpuBuilder, tid: SSAValue, a_tile: SSAValue, b_tile: SSAValue):
        """The warpgroup inner product: warpgroup g computes rows 64g .. 64g + 63 of the block
        tile, all its columns, as one `irkit_warp.wgmma` m64nNk16 per 16 of k, chained on
        the same accumulators: a fence first (the accumulators and the stage just landed
        are the wgmma's to read), one commit group, and a wait for it before the k tile
        ends (the next iteration's copies go into this stage). Returns the k-tile step and
        each accumulator's row and column in the block tile."""
        from irkit.dialects.warp_async import (
            WgmmaCommitOp,
            WgmmaFenceOp,
            WgmmaOp,
            WgmmaWaitOp,
            wgmma_d_coordinates,
        )

        o, n = self.o, self.o.block_n
        group = b.binary(arith.DivUIOp, tid, 128)
        # the warpgroup's first row (swizzled tiles), or first core matrix along m
        a_row = b.binary(arith.MuliOp, group, 64 if self.layout == "swizzled" else 8)

        def compute(
            t: GpuBuilder, stage: SSAValue, accs: list[SSAValue], pending: int = 0
        ) -> list[SSAValue]:
            """The k tile's wgmma ops, their group committed and waited for down to
            `pending` groups in flight (1: the previous k tile's done, this one's not)."""
            t.add(WgmmaFenceOp())
            for kk in range(o.block_k // (2 * MMA_K if self.layout == "kmajor" else MMA_K)):
                a_at, b_at = self._wgmma_origins(t, stage, a_row, kk)
                op = WgmmaOp(a_tile, a_at, b_tile, b_at, accs, n, self.layout)
                t.add(op)
                accs = list(op.results)
            t.add(WgmmaCommitOp())
            t.add(WgmmaWaitOp(pending))
            return accs

        warp = b.binary(arith.DivUIOp, b.binary(arith.RemUIOp, tid, 128), 32)
        lane = b.binary(arith.RemUIOp, tid, 32)
        g, q = b.binary(arith.DivUIOp, lane, 4), b.binary(arith.RemUIOp, lane, 4)
        row = b.add(
            arith.AddiOp(b.binary(arith.MuliOp, group, 64), b.binary(arith.MuliOp, warp, 16))
        )
        row = b.add(arith.AddiOp(row, g))
        col = b.binary(arith.MuliOp, q, 2)
        # thread 0's coordinates are the others' offsets from their (row, col): the layout
        d_at = [wgmma_d_coordinates(0, i) for i in range(n // 2)]
        return compute, [(b.iadd(row, dr), b.iadd(col, dc)) for dr, dc in d_at]

    def _wgmma_origins(
        self, t: GpuBuilder, stage: SSAValue, a_row: SSAValue, kk: int
    ) -> tuple[list[SSAValue], list[SSAValue]]:
        """The indices of A's and B's tiles where k step `kk` (16 of k) of a warpgroup begins,
        for `self.layout`; `a_row` is the warpgroup's first row of A (swizzled) or first core
        matrix along m."""
        zero = t.index(0)
        core_row = a_row
        if self.layout == "swizzled":  # 16 kk into A's 64-wide atoms
            a_at = [stage, t.index(kk // 4), a_row, t.index(16 * (kk % 4))]
            return a_at, [stage, zero, t.index(16 * kk), zero]
        k_core = t.index(2 * kk)  # 16 of k (32 bytes of 8-bit floats): two core matrices
        if self.layout == "kmajor":  # B's cores [n/8][k/16] as A's
            return [stage, core_row, k_core, zero, zero], [stage, zero, k_core, zero, zero]
        if self.layout == "strips":
            return [stage, k_core, core_row, zero, zero], [stage, zero, k_core, zero, zero]
        return [stage, core_row, k_core, zero, zero], [stage, k_core, zero, zero, zero]

    def build(self, constants) -> func.FuncOp:
        o, nest = self.o, self.nest
        name = self.fn.sym_name.data
        kernel, b, mapping = new_kernel(self.fn, name, constants)
        self.b, self.mapping, self.kernel = b, mapping, kernel
        a, bb = mapping[nest.a], mapping[nest.b]
        if self.packed is not None:  # 8-bit: the tiles are copied from A's copy and B^T
            a, bb = mapping[self.packed[0] or nest.a], mapping[self.packed[1]]
        grid = self.tile.blocks
        stages = self.stages
        if self.tile.eight:  # byte tiles, k-contiguous: A [m][k], B [n][k], or as core matrices
            a_shape = [stages, o.block_m, o.block_k + self.pad]
            b_shape = [stages, o.block_n, o.block_k + self.pad]
            if self.wgmma:  # [m/8][k/16][8][16], [n/8][k/16][8][16]
                a_shape = [stages, o.block_m // 8, o.block_k // 16, 8, 16]
                b_shape = [stages, o.block_n // 8, o.block_k // 16, 8, 16]
            a_tile = self._shared(f"{name}_a_tile", a_shape)
            b_tile = self._shared(f"{name}_b_tile", b_shape, nest.b_type)
        elif self.layout == "swizzled":  # rows of 128 bytes: A [k/64][m][64], B [n/64][k][64]
            a_tile = self._shared(f"{name}_a_tile", [stages, o.block_k // 64, o.block_m, 64])
            b_tile = self._shared(f"{name}_b_tile", [stages, o.block_n // 64, o.block_k, 64])
        elif self.tma:  # strips of core matrices, one box each: A [k/8][m/8][8][8], B [n/8][k/8]
            a_tile = self._shared(f"{name}_a_tile", [stages, o.block_k // 8, o.block_m // 8, 8, 8])
            b_tile = self._shared(f"{name}_b_tile", [stages, o.block_n // 8, o.block_k // 8, 8, 8])
        elif self.wgmma:  # core-matrix tiles: A [m/8][k/8][8][8], B [k/8][n/8][8][8]
            a_tile = self._shared(f"{name}_a_tile", [stages, o.block_m // 8, o.block_k // 8, 8, 8])
            b_tile = self._shared(f"{name}_b_tile", [stages, o.block_k // 8, o.block_n // 8, 8, 8])
        elif self.pairs:  # k-contiguous A [m][k]; B [n][k], or [k][n] read by ldmatrix.trans
            a_tile = self._shared(f"{name}_a_tile", [stages, o.block_m, o.block_k + self.pad])
            b_shape = [o.block_k, o.block_n + self.pad] if o.ldmatrix else [o.block_n, o.block_k + self.pad]  # fmt: skip
            b_tile = self._shared(f"{name}_b_tile", [stages, *b_shape])
        else:  # A [k][m] (stored transposed), B [k][n]
            a_tile = self._shared(f"{name}_a_tile", [stages, o.block_k, o.block_m + self.pad])
            b_tile = self._shared(f"{name}_b_tile", [stages, o.block_k, o.block_n + self.pad])

        bid = b.add(gpu.BlockIdOp(X))
        tid = b.add(gpu.ThreadIdOp(X))
        unit = bid  # the C tile's number, or its cluster's (`_tile_origin`)
        if self.cluster > 1:  # a cluster's blocks are consecutive: rank = bid % cluster
            self.rank = b.binary(arith.RemUIOp, bid, self.cluster)
            unit = b.binary(arith.DivUIOp, bid, self.cluster)
        k_tiles = self.k_tiles // self.splits  # this block's k range
        init = mapping.get(nest.k_loop.iter_args[0], nest.k_loop.iter_args[0])
        if self.splits > 1:  # each range sums from zero; the second kernel adds the init
            init = b.constants.float(0.0, nest.acc.type)
        # loop-invariant: this thread's rows and columns in the tile, and its copy slots
        if self.specialized:  # warpgroup 0 produces; the consumers count from 0 after it
            consumer_tid = b.add(arith.SubiOp(tid, b.index(128)))
            compute, outputs = self._wgmma(b, consumer_tid, a_tile, b_tile)
        elif self.wgmma:
            compute, outputs = self._wgmma(b, tid, a_tile, b_tile)
        elif self.tile.eight:
            compute, outputs = mma_f8(self, b, tid, a_tile, b_tile)
        elif self.mma:
            compute, outputs = self._mma(b, tid, a_tile, b_tile)
        else:
            compute, outputs = self._simt(b, tid, a_tile, b_tile)
        if self.persistent:  # each block loops over tiles, epilogues in the consumers' loop
            inits = [init] * len(outputs)
            walk = ((a_tile, b_tile), (a, bb), outputs, self._k_origin(None))
            persistent_pipeline(self, b, unit, tid, k_tiles, compute, inits, *walk)
            self._leave(b)
            return self._launched(kernel, grid)
        row0, col0, split, k_base, (a_prefix, b_prefix) = self._tile_origin(b, unit, mapping)
        k_origin = self._k_origin(k_base)
        a_copy = _Copy(
            a, a_tile, (nest.m, o.block_m), (nest.k, o.block_k), not self.pairs, self._lanes_a(),
            a_prefix, self.wgmma, self.swizzled,
        )  # fmt: skip
        b_copy = _Copy(
            bb, b_tile, (nest.k, o.block_k), (nest.n, o.block_n), self.pairs and not o.ldmatrix, self._lanes_b(),
            b_prefix, self.wgmma, self.swizzled,
        )  # fmt: skip
        if self.tile.eight:  # B^T: rows along n, k contiguous
            b_copy = b_copy._replace(rows=b_copy.cols, cols=b_copy.rows, transpose=False)
        if not self.tma:  # the pieces each thread copies
            a_slots = self._slots(tid, o.block_m, o.block_k, a_copy.lanes)
            b_slots = self._slots(tid, b_copy.rows[1], b_copy.cols[1], b_copy.lanes)

        top = b  # a warp-specialized epilogue is the consumers' (inside their branch)
        if self.tma:
            operands = ((a_tile, b_tile), (a, bb), (a_prefix, b_prefix), (row0, col0))
            inits = [init] * len(outputs)
            ring = (k_tiles, compute, inits, *operands, k_origin)
            if self.specialized:
                b, accs = specialized_pipeline(self, b, tid, *ring)
            else:
                accs = tma_pipeline(self, b, tid, *ring)
        elif self.async_copy:

            def issue(t: GpuBuilder, kt: SSAValue | int, stage: SSAValue) -> None:
                """Tile `kt` of A and of B into shared-memory stage `stage` by cp.async."""
                k0 = k_origin(t, kt)
                self._issue(t, a_slots, a_copy, row0, k0, stage)
                if self.tile.eight:
                    self._issue(t, b_slots, b_copy, col0, k0, stage)
                else:
                    self._issue(t, b_slots, b_copy, k0, col0, stage)

            accs = self._async_pipeline(b, k_tiles, compute, [init] * len(outputs), issue)
        else:

            def fetch(t: GpuBuilder, kt: SSAValue | int) -> list[list[SSAValue]]:
                """Tile `kt` of A and of B (of this block's range), from global memory into
                this thread's registers."""
                k0 = k_origin(t, kt)
                return [
                    *self._fetch(t, a_slots, a_copy, row0, k0),
                    *self._fetch(t, b_slots, b_copy, k0, col0),
                ]

            def stash(t: GpuBuilder, values: list[list[SSAValue]], stage: SSAValue) -> None:
                """Registers from `fetch` into shared-memory stage `stage`."""
                self._stash(t, a_slots, a_copy, values[: len(a_slots)], stage)
                self._stash(t, b_slots, b_copy, values[len(a_slots) :], stage)

            accs = self._staged_pipeline(b, k_tiles, compute, [init] * len(outputs), fetch, stash)
        self._epilogue(b, accs, outputs, (row0, col0), mapping, split)
        self._leave(top)
        return self._launched(kernel, grid)

    def _leave(self, b: GpuBuilder) -> None:
        """The kernel's end: in a cluster, after a cluster barrier, so that no block ends
        while another's multicast copies or arrivals may still reach its shared memory."""
        if self.cluster > 1:
            b.add(ClusterBarrierOp())
        b.add(func.ReturnOp())

    def _k_origin(
        self, k_base: SSAValue | None
    ) -> Callable[[GpuBuilder, SSAValue | int], SSAValue]:
        """`k_origin(builder, kt)`: the first k of tile `kt` of the block's k range (from k
        tile `k_base` under split-K)."""
        depth = self.o.block_k

        def k_origin(t: GpuBuilder, kt: SSAValue | int) -> SSAValue:
            if k_base is not None:
                kt = t.add(arith.AddiOp(k_base, t.index(kt) if isinstance(kt, int) else kt))
            if isinstance(kt, int):
                return t.index(kt * depth)
            return t.binary(arith.MuliOp, kt, depth)

        return k_origin

    def _tile_origin(self, b: GpuBuilder, tile_id: SSAValue, mapping: dict):
        """Where the block's C tile `tile_id` (its number in the launch: batch entry * tiles +
        tile, or split * tiles + tile) starts: its first row and column, its k range's split
        and first k tile (None without split-K), and A's and B's batch prefixes; the entry's
        batch indices go into `mapping` (for the epilogue)."""
        o, nest = self.o, self.nest
        tiles_n = -(-nest.n // o.block_n)
        tile, split, k_base = tile_id, None, None
        if nest.batch:  # the entry's batch indices
            tile = b.binary(arith.RemUIOp, tile_id, self.units)
            self._batch_indices(b, b.binary(arith.DivUIOp, tile_id, self.units), mapping)
        if self.splits > 1:  # the split's first k tile
            tile = b.binary(arith.RemUIOp, tile_id, self.tiles)
            split = b.binary(arith.DivUIOp, tile_id, self.tiles)
            k_base = b.binary(arith.MuliOp, split, self.k_tiles // self.splits)
        tile_row, tile_col = self._tile_order(b, tile, tiles_n)
        row0 = b.binary(arith.MuliOp, tile_row, o.block_m)
        col0 = b.binary(arith.MuliOp, tile_col, o.block_n)
        a_prefix, b_prefix, _ = (
            tuple(self._index(b, v, mapping) for v in p) for p in nest.prefixes
        )
        return row0, col0, split, k_base, (a_prefix, b_prefix)

    def _tile_order(self, b: GpuBuilder, tile: SSAValue, tiles_n: int) -> tuple[SSAValue, SSAValue]:
        """C tile `tile`'s row and column among the tiles: row-major, or with `group-m` G > 1
        in groups of G tile rows, column-major inside a group (Triton's GROUP_SIZE_M), so
        consecutive blocks share A's rows and B's columns (L2 reuse on large grids). In
        clusters, `tile` is the cluster's: its row of `cluster` tile rows, and the block's
        row in it is its rank."""
        row, col = self._tile_place(b, tile, tiles_n)
        if self.rank is None:
            return row, col
        return b.add(arith.AddiOp(b.binary(arith.MuliOp, row, self.cluster), self.rank)), col

    def _tile_place(self, b: GpuBuilder, tile: SSAValue, tiles_n: int) -> tuple[SSAValue, SSAValue]:
        g, tiles_m = self.o.group_m, -(-self.nest.m // self.o.block_m)
        tiles_m = -(-tiles_m // self.cluster)
        if g <= 1 or tiles_m <= 1 or tiles_n <= 1:
            return b.binary(arith.DivUIOp, tile, tiles_n), b.binary(arith.RemUIOp, tile, tiles_n)
        in_group = g * tiles_n
        first = b.binary(arith.MuliOp, b.binary(arith.DivUIOp, tile, in_group), g)
        rows = b.add(arith.MinSIOp(b.add(arith.SubiOp(b.index(tiles_m), first)), b.index(g)))
        local = b.binary(arith.RemUIOp, tile, in_group)
        row = b.add(arith.AddiOp(first, b.add(arith.RemUIOp(local, rows))))
        return row, b.add(arith.DivUIOp(local, rows))

    def _epilogue(self, b: GpuBuilder, accs, outputs, origin, mapping: dict, split) -> None:
        """The accumulators (at `outputs` in the tile from `origin`) into C through the
        nest's epilogue, guarded at the edges; under split-K into the partial sums."""
        o, nest = self.o, self.nest
        row0, col0 = origin
        if split is None and self._store_lanes() > 1:
            self._vector_epilogue(b, accs, outputs, row0, col0, mapping)
            return
        for acc, (row, col) in zip(accs, outputs, strict=True):
            i, j = b.add(arith.AddiOp(row0, row)), b.add(arith.AddiOp(col0, col))
            inside = _all(b, [(i, nest.m, o.block_m), (j, nest.n, o.block_n)])
            inner = b.guarded(inside)
            if split is not None:  # the partial sum, for the second kernel
                partials = self.kernel.body.block.args[-1]
                inner.add(memref.StoreOp.get(acc, partials, [split, i, j]))
                continue
            m = dict(mapping)
            m.update({nest.i: i, nest.j: j, nest.acc: acc})
            inner.clone(nest.epilogue, m)

    def _launched(self, kernel: func.FuncOp, grid: int) -> func.FuncOp:
        """The kernel with its launch attribute."""
        flops = count_flops(self.nest.loop)
        # past 48 KB the tiles are the launch's dynamic shared memory (the printer places them)
        _, shared = shared_layout(self.shared_sizes)
        dynamic = shared if shared > STATIC_SHARED_LIMIT else 0
        kernel.attributes[LAUNCH_ATTR] = launch_attr(
            grid, self.threads, "tiled", flops, dynamic, self.min_blocks, self.cluster
        )
        return kernel

    def _staged_pipeline(self, b: GpuBuilder, k_tiles: int, compute, inits, fetch, stash):
        """The k loop with register-staged copies (`fetch` into registers, `stash` into a
        shared stage); returns the accumulators after it."""
        if not self.o.double_buffer:

            def single(t: GpuBuilder, kt: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
                zero = t.index(0)
                stash(t, fetch(t, kt), zero)
                t.add(gpu.BarrierOp())
                accs = compute(t, zero, accs)
                t.add(gpu.BarrierOp())
                return accs

            return b.for_loop(k_tiles, inits, single)
        # Register-staged double buffering: tile kt+1's global loads are issued before the
        # FMAs on tile kt (which sits in stage kt % 2), and stored into the other stage after
        # them; one barrier per tile. The stage written in iteration kt was last read in
        # iteration kt-1, before its barrier. The last iteration fetches its own tile again
        # (the index is clamped) rather than branch.
        stash(b, fetch(b, 0), b.index(0))
        b.add(gpu.BarrierOp())

        def double(t: GpuBuilder, kt: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
            following = t.add(arith.MinSIOp(t.iadd(kt, 1), t.index(k_tiles - 1)))
            staged = fetch(t, following)
            accs = compute(t, t.binary(arith.RemUIOp, kt, 2), accs)
            stash(t, staged, t.binary(arith.RemUIOp, t.iadd(kt, 1), 2))
            t.add(gpu.BarrierOp())
            return accs

        return b.for_loop(k_tiles, inits, double)

    def _async_pipeline(self, b: GpuBuilder, k_tiles: int, compute, inits, issue):
        """The k loop over a ring of `stages` shared stages filled by cp.async: the first
        `stages - 1` tiles are issued before it, one commit group each; iteration kt waits
        until tile kt's group has landed (at most `stages - 2` younger ones in flight), one
        barrier shows it to the block (and says every thread is done with the stage read in
        iteration kt-1), then tile kt + stages - 1 is issued into that stage, and tile kt
        is computed while the younger tiles are in flight. A group is committed every
        iteration, empty past the last tile, so the count stays exact."""
        stages = self.stages
        for s in range(stages - 1):
            if s < k_tiles:
                issue(b, s, b.index(s))
            b.add(CpAsyncCommitOp())

        def k_tile(t: GpuBuilder, kt: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
            t.add(CpAsyncWaitOp(stages - 2))
            t.add(gpu.BarrierOp())
            if k_tiles > stages - 1:
                following = t.iadd(kt, stages - 1)
                inner = t.guarded(t.add(arith.CmpiOp(following, t.index(k_tiles), "ult")))
                issue(inner, following, inner.binary(arith.RemUIOp, following, stages))
            t.add(CpAsyncCommitOp())
            return compute(t, t.binary(arith.RemUIOp, kt, stages), accs)

        accs = b.for_loop(k_tiles, inits, k_tile)
        b.add(CpAsyncWaitOp(0))  # nothing left in flight when the thread moves on
        return accs

    def _issue(
        self,
        t: GpuBuilder,
        slots: list[_Slot],
        copy: _Copy,
        r0: SSAValue,
        c0: SSAValue,
        stage: SSAValue,
    ) -> None:
        """This thread's pieces of one tile of `copy.src` (from row `r0`, column `c0`) into
        `copy.tile[stage]`, one cp.async of 16 bytes each. Past the row extent a copy reads
        nothing; across the column extent it reads the elements inside (the source size),
        and the rest of the 16 bytes is zero; its address is clamped into the buffer."""
        (r_extent, r_tile), (c_extent, c_tile) = copy.rows, copy.cols
        lanes, builder = copy.lanes, t
        for r, c, guard in slots:
            t = builder.guarded(guard)
            gr, gc = t.add(arith.AddiOp(r0, r)), t.add(arith.AddiOp(c0, c))
            valid = t.index(lanes)
            if c_extent % c_tile:
                left = t.add(arith.SubiOp(t.index(c_extent), gc))
                valid = t.add(arith.MaxSIOp(t.add(arith.MinSIOp(left, valid)), t.index(0)))
                last = -(-c_extent // lanes) * lanes - lanes
                gc = t.add(arith.MinSIOp(gc, t.index(last)))
            if r_extent % r_tile:
                inside = t.add(arith.CmpiOp(gr, t.index(r_extent), "ult"))
                valid = t.add(arith.SelectOp(inside, valid, t.index(0)))
                gr = t.add(arith.MinSIOp(gr, t.index(r_extent - 1)))
            source = [*copy.prefix, gr, gc]
            if copy.cores:  # c is a multiple of `lanes`: a copy is one row of a core matrix
                core_r, in_r = t.binary(arith.DivUIOp, r, 8), t.binary(arith.RemUIOp, r, 8)
                dest = [stage, core_r, t.binary(arith.DivUIOp, c, lanes), in_r, t.index(0)]
            else:
                dest = [stage, *self._at(t, r, c, copy.cols[1])]
            t.add(CpAsyncOp(copy.tile, dest, copy.src, source, valid, lanes))

    def _batch_indices(self, b: GpuBuilder, entry: SSAValue, mapping: dict) -> None:
        """Batch entry `entry` (row-major over the batch extents) as the nest's batch ivs,
        into `mapping`: A's and B's tile copies and C's store (the epilogue) read them."""
        (outer, _), *inner = self.nest.batch
        for iv, extent in reversed(inner):
            mapping[iv] = b.binary(arith.RemUIOp, entry, extent)
            entry = b.binary(arith.DivUIOp, entry, extent)
        mapping[outer] = entry  # the grid holds no entry past the outermost extent

    @staticmethod
    def _index(b: GpuBuilder, value: SSAValue, mapping: dict) -> SSAValue:
        """A batch index of an operand in the kernel: a batch iv (`_batch_indices`), or a
        constant (a broadcast batch dimension)."""
        if value in mapping:
            return mapping[value]
        c = constant_int(value)
        assert c is not None, "a batch index is a batch iv or a constant"
        return b.index(c)

    def _store_lanes(self) -> int:
        """Columns of C one store writes: 4 (a 16-byte `float4`) where `vector-stores` is on,
        C is f32, a thread's columns come in groups of 4 (warp tiling), and every row of C
        starts 16-byte aligned with N whole groups (so a group is wholly inside N or wholly
        outside, and one bounds check on its first column holds for all four)."""
        o, nest = self.o, self.nest
        c_type = nest.c.type
        ok = (
            o.vector_stores
            and not self.mma
            and self.warp_tiled
            and isinstance(c_type, MemRefType)
            and isinstance(c_type.element_type, Float32Type)
            and nest.n % GROUP == 0
            and _row_length(nest.c) % GROUP == 0
            and not nest.batch
        )
        return GROUP if ok else 1

    def _vector_epilogue(self, b: GpuBuilder, accs, outputs, row0, col0, mapping) -> None:
        """The epilogue for groups of 4 consecutive columns: each column's ops as they are,
        the 4 results gathered into a vector and stored as one 16-byte store."""
        o, nest = self.o, self.nest
        c = mapping[nest.c]
        vtype = VectorType(Float32Type(), [GROUP])
        for start in range(0, len(outputs), GROUP):
            row, col = outputs[start]
            i, j = b.add(arith.AddiOp(row0, row)), b.add(arith.AddiOp(col0, col))
            inner = b.guarded(_all(b, [(i, nest.m, o.block_m), (j, nest.n, o.block_n)]))
            values = []
            for q in range(GROUP):
                m = dict(mapping)
                m.update({nest.i: i, nest.j: inner.iadd(j, q), nest.acc: accs[start + q]})
                inner.clone(nest.epilogue[:-1], m)
                values.append(m.get(nest.store.value, nest.store.value))
            vec = inner.add(vector.BroadcastOp(values[0], vtype))
            for q in range(1, GROUP):
                vec = inner.add(vector.InsertOp(values[q], vec, [q], vtype))
            inner.add(vector.StoreOp(vec, c, [i, j]))

    def _vector_lanes(self) -> int:
        """Elements per 16-byte access (f32; f16 and bf16 on tensor cores), or 1 when
        `vector-loads` is off."""
        if not self.o.vector_loads:
            return 1
        if self.pairs:
            return VECTOR_BYTES // 2
        return VECTOR_BYTES // 4 if isinstance(self.nest.element_type, Float32Type) else 1

    def _lanes_a(self) -> int:
        """A's rows are read along k: 16-byte loads when every row starts 16-byte aligned
        (A's row length, K or the padded leading dimension pad-leading-dims gave it, a
        multiple of the lanes) and a tile's k extent is whole vectors. With K itself a
        multiple, a vector is wholly inside K or wholly outside and the bounds check stays
        per vector; with a padded row, the vector across K reads into the padding (inside
        the buffer) and its elements are checked one by one. Under cp.async, whole 16-byte
        copies (`GpuTile.async_copy`)."""
        if self.async_copy:
            return VECTOR_BYTES // self.tile.itemsize
        lanes, o = self._vector_lanes(), self.o
        return lanes if _row_length(self.nest.a) % lanes == 0 and o.block_k % lanes == 0 else 1

    def _lanes_b(self) -> int:
        """B's rows are read along n and stored to shared memory as they are, so as whole
        16-byte vectors both ways: only where no copy needs a bounds check (K and N
        multiples of their tiles), and shared rows stay 16-byte aligned (pad)."""
        if self.async_copy:  # the copies' source sizes check the bounds
            return VECTOR_BYTES // self.tile.itemsize
        lanes, o, nest = self._vector_lanes(), self.o, self.nest
        aligned = (
            # [n][k] (pairs without ldmatrix): stored element by element, any row length
            ((self.pairs and not o.ldmatrix) or (o.block_n + self.pad) % lanes == 0)
            and o.block_n % lanes == 0
            and _row_length(nest.b) % lanes == 0
        )
        whole = nest.k % o.block_k == 0 and nest.n % o.block_n == 0
        return lanes if lanes > 1 and aligned and whole else 1

    def _shared(
        self, name: str, shape: list[int], element_type: Attribute | None = None
    ) -> SSAValue:
        element_type = element_type or self.nest.element_type
        self.shared_sizes.append(prod(shape) * numpy_dtype(element_type).itemsize)
        return self.b.add(shared_buffer(self.module, self.fn, name, element_type, shape))

    def _slots(self, tid: SSAValue, rows: int, row_length: int, lanes: int) -> list[_Slot]:
        """Where each piece (`lanes` consecutive elements) this thread copies sits in a
        `rows x row_length` source tile: pieces tid, tid + threads, ..., so consecutive
        threads read consecutive columns (coalesced). Where the threads do not divide the
        pieces, the last piece's number is clamped (its load stays in the tile) and its
        store is guarded."""
        b = self.b
        per_row = row_length // lanes
        total = rows * per_row
        out = []
        for step in range(-(-total // self.threads)):
            e = b.iadd(tid, step * self.threads)
            guard = None
            if (step + 1) * self.threads > total:
                guard = b.add(arith.CmpiOp(e, b.index(total), "ult"))
                e = b.add(arith.MinSIOp(e, b.index(total - 1)))
            r, c = b.binary(arith.DivUIOp, e, per_row), b.binary(arith.RemUIOp, e, per_row)
            out.append(_Slot(r, b.binary(arith.MuliOp, c, lanes) if lanes > 1 else c, guard))
        return out

    def _fetch(
        self, t: GpuBuilder, slots: list[_Slot], copy: _Copy, r0: SSAValue, c0: SSAValue
    ) -> list[list[SSAValue]]:
        """The pieces of one tile of `copy.src` (from row `r0`, column `c0`) this thread
        copies, loaded: per slot, one vector or the piece's elements."""
        (r_extent, r_tile), (c_extent, c_tile) = copy.rows, copy.cols
        zero = t.constants.float(0.0, self.nest.element_type)
        out = []
        # a vector may run across the last column into a padded row's padding: then each
        # of its elements is checked against the extent, not the vector as a whole
        across = c_extent % copy.lanes != 0
        for r, c, _ in slots:
            gr, gc = t.add(arith.AddiOp(r0, r)), t.add(arith.AddiOp(c0, c))
            inside = _all(t, [(gr, r_extent, r_tile), (gc, c_extent, c_tile)])
            each: list[SSAValue] | None = None
            if across:  # the column extent is then not a multiple of the tile: checked
                row_inside = _all(t, [(gr, r_extent, r_tile)])
                columns = [_all(t, [(t.iadd(gc, q), c_extent, c_tile)]) for q in range(copy.lanes)]
                each = [c for c in columns if c is not None]
                assert len(each) == copy.lanes
                if row_inside is not None:
                    each = [t.add(arith.AndIOp(row_inside, e)) for e in each]
            if inside is not None:  # clamp the address, then use 0 outside: no branch
                if r_extent % r_tile:
                    gr = t.add(arith.MinSIOp(gr, t.index(r_extent - 1)))
                if c_extent % c_tile:
                    last = -(-c_extent // copy.lanes) * copy.lanes - copy.lanes
                    gc = t.add(arith.MinSIOp(gc, t.index(last)))
            if copy.lanes == 1:
                loaded = [t.add(memref.LoadOp.get(copy.src, [*copy.prefix, gr, gc]))]
            else:
                vtype = VectorType(self.nest.element_type, [copy.lanes])
                loaded = [t.add(vector.LoadOp(copy.src, [*copy.prefix, gr, gc], vtype))]
                if inside is not None or across or copy.transpose:  # stored element by element
                    loaded = [
                        t.add(vector.ExtractOp(loaded[0], [q], self.nest.element_type))
                        for q in range(copy.lanes)
                    ]
            if each is not None:
                loaded = [
                    t.add(arith.SelectOp(e, x, zero)) for e, x in zip(each, loaded, strict=True)
                ]
            elif inside is not None:
                loaded = [t.add(arith.SelectOp(inside, x, zero)) for x in loaded]
            out.append(loaded)
        return out

    def _stash(
        self,
        t: GpuBuilder,
        slots: list[_Slot],
        copy: _Copy,
        values: list[list[SSAValue]],
        stage: SSAValue,
    ) -> None:
        """Fetched pieces into `copy.tile[stage]`, stored `[column][row]` when
        `copy.transpose` (A's tile, kept k-major) and as they are otherwise (a vector as one
        store)."""
        builder = t
        for (r, c, guard), piece in zip(slots, values, strict=True):
            t = builder.guarded(guard)
            if len(piece) == 1 and isinstance(piece[0].type, VectorType):
                t.add(vector.StoreOp(piece[0], copy.tile, [stage, r, c]))
                continue
            for q, value in enumerate(piece):
                column = t.iadd(c, q)
                t.add(
                    memref.StoreOp.get(
                        value,
                        copy.tile,
                        [stage, column, r] if copy.transpose else [stage, r, column],
                    )
                )


def _shape(nest: MatmulNest, calls: int) -> MatmulShape:
    """What `gpu_tile` decides by: the sizes, the element type, and whether the kernel is
    called exactly once (`calls`: where split-K can add its second kernel to the driver)."""
    dtype = dtype_name(nest.element_type)
    itemsize = numpy_dtype(nest.element_type).itemsize
    lanes = VECTOR_BYTES // itemsize
    aligned = _row_length(nest.a) % lanes == 0 and _row_length(nest.b) % lanes == 0
    aligned = aligned or eight_bit(nest)  # 8-bit operands are copied aligned where needed
    return MatmulShape(nest.m, nest.n, nest.k, tuple(e for _, e in nest.batch), dtype,
                       itemsize, calls == 1, aligned, described(nest.a) and described(nest.b))  # fmt: skip


def _split_k(module: ModuleOp, fn: func.FuncOp, nest: MatmulNest, splits: int, constants) -> None:
    """Give `fn` (about to be tiled with `splits` k ranges) its partial-sum buffer, and add
    the kernel that reduces the partials and runs the epilogue, called right after it."""
    name = fn.sym_name.data
    (call,) = [
        c
        for c in module.walk()
        if isinstance(c, func.CallOp) and c.callee.root_reference.data == name
    ]
    acc_type = nest.acc.type
    partials_type = MemRefType(acc_type, [splits, nest.m, nest.n])
    _, _, call = add_kernel_buffer(fn, call, partials_type, {SCRATCH_ATTR: UnitAttr()}, "partials")

    # the second kernel, mapped flat here: one thread per element of C
    reduce, b, mapping = new_kernel(fn, f"{name}_splitk", constants)
    reduce.attributes.pop(LAUNCH_ATTR, None)
    partials = reduce.body.block.args[-1]
    elements = nest.m * nest.n
    index = b.add(
        arith.AddiOp(
            b.binary(arith.MuliOp, b.add(gpu.BlockIdOp(X)), REDUCE_THREADS),
            b.add(gpu.ThreadIdOp(X)),
        )
    )
    inside = (
        b.add(arith.CmpiOp(index, b.index(elements), "ult")) if elements % REDUCE_THREADS else None
    )
    t = b.guarded(inside)
    i, j = t.binary(arith.DivUIOp, index, nest.n), t.binary(arith.RemUIOp, index, nest.n)

    def add(u: GpuBuilder, s: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
        return [u.add(arith.AddfOp(accs[0], u.add(memref.LoadOp.get(partials, [s, i, j]))))]

    (acc,) = t.for_loop(splits, [t.constants.float(nest.init, acc_type)], add)
    m = dict(mapping)
    m.update({nest.i: i, nest.j: j, nest.acc: acc})
    t.clone(nest.epilogue, m)
    b.add(func.ReturnOp())
    grid = -(-elements // REDUCE_THREADS)
    reduce.attributes[LAUNCH_ATTR] = launch_attr(grid, REDUCE_THREADS, "flat", elements * splits)
    module.body.block.insert_op_after(reduce, fn)
    caller = call.parent_block()
    assert caller is not None
    caller.insert_op_after(func.CallOp(reduce.sym_name.data, list(call.arguments), []), call)


class _Copy(NamedTuple):
    """One operand's tile copy: the source, its shared tile, (extent, tile size) along the
    source's rows and columns, whether the tile is stored transposed, and the elements per
    access."""

    src: SSAValue
    tile: SSAValue
    rows: tuple[int, int]
    cols: tuple[int, int]
    transpose: bool
    lanes: int
    prefix: tuple[SSAValue, ...] = ()
    """The source's leading (batch) indices, before its row and column."""
    cores: bool = False
    """The tile is core matrices `[stage][row/8][column/8][row%8][column%8]` (wgmma's)."""
    swizzled: bool = False
    """The tile's columns are swizzled (`_TiledKernel._at`)."""


class _Slot(NamedTuple):
    row: SSAValue
    column: SSAValue
    guard: SSAValue | None


def _row_length(buffer: SSAValue) -> int:
    """Elements from one row of a 2-d buffer to the next: its last dimension, which
    pad-leading-dims may have made longer than the logical extent."""
    return shape_of(buffer)[-1]


def _all(b: GpuBuilder, bounds: list[tuple[SSAValue, int, int]]) -> SSAValue | None:
    """`v < extent` for each (v, extent, tile) whose extent is not a multiple of its tile
    (the others always hold), combined; None when no check is needed."""
    conds = [
        b.add(arith.CmpiOp(v, b.index(extent), "ult"))
        for v, extent, tile in bounds
        if extent % tile
    ]
    if not conds:
        return None
    out = conds[0]
    for c in conds[1:]:
        out = b.add(arith.AndIOp(out, c))
    return out
