"""gpu-tile-matmul: matmul kernels tiled through shared memory, with register tiles.

`map-to-gpu` alone gives a matmul one thread per output, each reading a row of A and a column
of B from global memory: 2 loads per multiply-add. This pass maps a kernel whose work is one
matmul nest (`match_matmul`: a matmul, or a matmul with its fused epilogue) as the classic
two-level tiling, before `map-to-gpu` sees it:

- each **block** computes a `block-m x block-n` tile of C, looping over K in steps of
  `block-k`: its threads copy the A tile (stored transposed, `[k][m]`) and the B tile
  (`[k][n]`) into shared memory, coalesced, then a barrier;
- each **thread** computes a `thread-m x thread-n` register tile: per k it reads `thread-m`
  values of A and `thread-n` of B from shared memory and does `thread-m * thread-n`
  multiply-adds (8 x 8: four FMAs per shared-memory load, what keeps the FMA pipes fed);
  how a block's threads share the tile is the `warp-tile` option:
  - **warp tiling** (the default, where the tiles allow it): each warp of 32 lanes, as
    4 x 8, covers a `4*thread-m x 8*thread-n` sub-tile (32 x 64 with the defaults); a
    thread's register tile is `thread-m/4 x thread-n/4` groups of 4 x 4 consecutive rows and
    columns, so per k it reads its A and B values from shared memory as 16-byte vectors (f32)
    (`thread-m/4 + thread-n/4` accesses instead of `thread-m + thread-n`; with 8 x 8 tiles,
    4 instead of 16, the shared-memory traffic that otherwise caps the FMA rate), lanes
    with the same 4 rows read the same words (a broadcast), and the 8 lanes along n read 32
    consecutive words (no bank conflicts);
  - **strided** (`warp-tile=false`, and the fallback where the register tile is not a
    multiple of 4 x 4 or the block not of the warp's sub-tile): a thread's rows and columns
    are strided by the number of threads along that side, so a warp reads consecutive
    shared-memory words, one word per access;
- the k loop inside a tile is **unrolled** (its trip count is the constant `block-k`);
- both shared tiles have rows **padded** by `pad` words, so the transposed store of A hits
  distinct banks;
- **double buffering** (`double-buffer`): each shared tile has two stages; tile kt+1's
  global loads are issued into registers before the multiply-adds on tile kt, and stored
  into the other stage after them, so global latency hides behind arithmetic and each tile
  costs one barrier instead of two (register-staged, as in the classic SGEMM kernels; the
  last iteration re-reads its own tile, through a clamped index, rather than branch);
- **16-byte loads** (`vector-loads`, f32): A's rows are read along k and B's along n as
  `vector<4xf32>` (`float4`), where every row starts 16-byte aligned (K, resp. N, a
  multiple of 4) and the tile's extent along the vector is whole vectors; B's vector goes
  into shared memory as one 16-byte store too where its copy needs no bounds check, A's is
  stored element by element (its tile is transposed);
- the **epilogue** (bias, activation, residual) runs on the registers before the one store;
  under warp tiling an f32 C whose rows are whole groups of 4 gets a thread's 4
  consecutive columns as one 16-byte store (`vector-stores`);
- **tensor cores** (`tensor-cores`, f16 and bf16): each warp computes a 64 x 32 tile of C
  (smaller where the block is) as `irkit_warp.mma_m16n8k16` instructions, its lanes'
  fragments read from the shared tiles (see `irkit.dialects.warp`), f32 accumulators;
- bounds: where M, N or K is not a multiple of its tile, loads clamp their index and use 0
  outside, and stores are guarded; where they are multiples, the kernel has no guards.

Each output is still `init + sum over k in order` with one add per k, as in the untiled
nest: the same arithmetic, and the same values under the lockstep interpretation.

- **split-K** (`split-k`): where the grid of C tiles would leave most of the device's
  `sms` multiprocessors idle (mlp at B=64: 32 and 8 blocks on a 132-SM H100), the k tiles
  are split into `s` equal ranges and the grid is `s` times larger: each block sums its
  range from zero into a partial buffer `[s, M, N]` the driver allocates, and a second
  kernel (`<kernel>_splitk`, a plain loop nest `map-to-gpu` maps) adds the `s` partials in
  order to the initial value and runs the epilogue. The reduction is deterministic (no
  atomics; the same order every run), and each output is a sum of the same products in
  another association, within the element type's tolerance of the unsplit sum. `s` is the
  smallest divisor of the k tiles that fills `sms` blocks while every range keeps at least
  4 k tiles (or the largest such divisor, where it fills at least half of them; else no
  split).

- **batch matmuls** (`batch_matmul`, attention's two products): one block per C tile and
  batch entry, the entry's batch indices taken from the block number (row-major over the
  batch extents), A and B read at them (a broadcast batch dimension at 0) and C stored at
  them; no split-K (the batch entries fill the grid instead). Before, they ran one thread
  per output: transformer_block at B=8, S=512 had its two 8 x 512 x 512 x 512 products
  mapped flat, 8192 blocks reading A and B from global memory for every multiply-add.

The kernel carries `irkit.launch` with `mapping = "tiled"`, so `map-to-gpu` leaves it alone.
Kernels with more than one nest (a matmul fused with other loops) are left to `map-to-gpu`.
Not done: TF32 for f32 inputs, 8-byte stores of the tensor-core path's C.

Options (sizes in elements):

    block-m=128 block-n=128 block-k=0   the block tile; block-k=0 (auto) is 64 bytes of k
                                        (16 f32, 8 f64; half that where K is not a multiple),
                                        halved while the tiles would pass 48 KB of shared
                                        memory (16 over 8 for f32: 0.914x
                                        cuBLAS against 0.850x on a 4096^3 gemm, H100, one
                                        run; benchmarks/results/gpu_h100_2026-11-22)
    thread-m=8 thread-n=8               the register tile; block-m/thread-m x block-n/thread-n
                                        threads per block (256 with the defaults)
    pad=4                               words added to each shared-memory row
    double-buffer=true                  two shared-memory stages, one barrier per k tile
    vector-loads=true                   16-byte global loads (and B's shared stores)
    vector-stores=true                  16-byte stores of C (f32, warp tiling, N a multiple
                                        of 4)
    warp-tile=true                      warp sub-tiles with vector reads of shared memory
    tensor-cores=true                   f16/bf16 matmuls on mma.sync m16n8k16 (sm_80+)
    tf32=false                          f32 matmuls on TF32 mma.sync m16n8k8 (opt-in: inputs
                                        rounded to 10 mantissa bits; checks use TF32's
                                        tolerance, 2e-3)
    split-k=0                           k ranges per C tile: 0 (auto, see above), 1 (never),
                                        or at most this many (a divisor of the k tiles)
    sms=132                             multiprocessors the grid should fill (H100 SXM: 132)
    fill-sms=true                       where the grid, split-K included, would leave more
                                        than half of `sms` idle, the block tile halved (the
                                        register tile to 4 x 4) while that gives more blocks,
                                        down to 32 x 32 (a 256^3 gemm on an H200: 2.48x);
                                        where 128 x 128 f32 tiles fill the SMs in at most 4
                                        waves, 128 x 64 tiles, two blocks an SM
                                        (transformer_block on an H200: 1.10x)
    batch=true                          batch matmuls tiled too (false: one thread per
                                        output, as map-to-gpu maps them)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from math import prod
from typing import NamedTuple

from xdsl.context import Context
from xdsl.dialects import arith, func, gpu, memref, scf, vector
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    MemRefType,
    ModuleOp,
    StringAttr,
    UnitAttr,
    VectorType,
)
from xdsl.ir import Block, SSAValue
from xdsl.passes import ModulePass

from irkit.dtypes import numpy_dtype
from irkit.errors import require
from irkit.ir import shape_of
from irkit.loops import (
    KERNEL_ATTR,
    LAUNCH_ATTR,
    SCRATCH_ATTR,
    SHARED_SPACE,
    STATIC_SHARED_LIMIT,
    constant_int,
    require_loop_level,
)
from irkit.loops.costs import count_flops
from irkit.loops.rows import nests_of
from irkit.passes.contraction import MatmulNest, match_matmul
from irkit.passes.loop_builder import add_kernel_buffer
from irkit.passes.map_to_gpu import GpuBuilder, X, launch_attr, new_kernel

MIN_THREADS = 32
"""Fewest threads a tiled block may have: one warp."""
MAX_THREADS = 1024
MMA_M, MMA_N, MMA_K = 16, 8, 16
"""One tensor-core instruction's tile (mma.sync m16n8k16)."""
MMA_K_TF32 = 8
"""k of the TF32 instruction (mma.sync m16n8k8)."""
MMA_WARP = (64, 32)
"""A warp's tile of C under tensor cores: 4 x 4 instructions per k step, 64 f32 accumulators
per lane (the register budget of the f32 path's 8 x 8)."""
REDUCE_THREADS = 256
"""Threads per block of split-K's second kernel (one per element of C)."""
MIN_SPLIT_TILES = 4
"""The fewest k tiles auto split-K leaves each range (below it the partials' traffic and
the second kernel outweigh the blocks gained)."""
VECTOR_BYTES = 16
WARP_LANES = (4, 8)
"""A warp's 32 lanes as rows x columns of its sub-tile under `warp-tile`."""
GROUP = 4
"""Consecutive rows (columns) of a thread's register tile under `warp-tile`: one vector
read of shared memory."""


@dataclass(frozen=True)
class GpuTileMatmulPass(ModulePass):
    """Map single-matmul kernels onto shared-memory and register tiles (see the module
    docstring). Optional: without it, `map-to-gpu` maps them one thread per output."""

    name = "gpu-tile-matmul"
    is_optimization = True

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
                match_matmul(loop, batched=self.batch, half=True)
                if isinstance(loop, scf.ParallelOp)
                else None
            )
            if nest is None:
                continue
            tiled = _TiledKernel(self, fn, nest, op)
            if self.fill_sms:
                tiled = _filling(_paired(self, tiled))
            if tiled.splits > 1:
                _split_k(op, fn, nest, tiled.splits, constants)
            kernel = tiled.build(constants)
            op.body.block.insert_op_before(kernel, fn)
            fn.detach()
            fn.erase()

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


class _TiledKernel:
    def __init__(self, o: GpuTileMatmulPass, fn: func.FuncOp, nest: MatmulNest, module: ModuleOp):
        self.fn, self.nest, self.module = fn, nest, module
        narrow = isinstance(nest.element_type, Float16Type | BFloat16Type)
        self.tf32 = o.tf32 and isinstance(nest.element_type, Float32Type)
        self.mma = (o.tensor_cores and narrow) or self.tf32
        self.mma_k = MMA_K_TF32 if self.tf32 else MMA_K
        block_m, thread_m = _fit(o.block_m, o.thread_m, nest.m)
        block_n, thread_n = _fit(o.block_n, o.thread_n, nest.n)
        itemsize = numpy_dtype(nest.element_type).itemsize
        if self.mma:  # whole m16n8k16 tiles: the block at least 16 x 8, k in steps of 16
            block_m, block_n = max(block_m, MMA_M), max(block_n, MMA_N)
        block_k = o.block_k or self._auto_depth(o, block_m, block_n, nest.k, itemsize)
        if self.mma:
            block_k = -(-block_k // self.mma_k) * self.mma_k
        self.o = replace(
            o,
            block_m=block_m,
            thread_m=thread_m,
            block_n=block_n,
            thread_n=thread_n,
            block_k=block_k,
        )
        self._check_shared(itemsize)
        self.rows_t = block_m // thread_m  # threads along m
        self.cols_t = block_n // thread_n  # threads along n
        self.threads = self.rows_t * self.cols_t
        self.warp_tiled = self._warp_tiles()
        if self.mma:  # warps of 64 x 32 (fewer where the block is smaller), 32 lanes each
            self.warps = (max(1, block_m // MMA_WARP[0]), max(1, block_n // MMA_WARP[1]))
            self.threads = 32 * self.warps[0] * self.warps[1]
            whole = (
                block_m % (self.warps[0] * MMA_M) == 0
                and block_n % (self.warps[1] * MMA_N) == 0
                and block_k % self.mma_k == 0
            )
            if not whole:  # block options that do not cut into instruction tiles: no mma
                self.mma = self.tf32 = False
                self.threads = self.rows_t * self.cols_t
        self.tiles = -(-nest.m // block_m) * -(-nest.n // block_n)
        self.batches = prod(extent for _, extent in nest.batch)
        self.k_tiles = -(-nest.k // block_k)
        self.splits = self._splits(module) if not nest.batch else 1

    @property
    def blocks(self) -> int:
        """The grid: C tiles, times k ranges, times batch entries."""
        return self.tiles * self.splits * self.batches

    def _splits(self, module: ModuleOp) -> int:
        """How many k ranges each C tile's sum is split into (see split-K above): a divisor
        of the k tiles, so every range has the same trip count (lockstep needs uniform loop
        bounds; a GPU likes them too). 1 where the kernel is called other than once."""
        o, k_tiles = self.o, self.k_tiles
        name = self.fn.sym_name.data
        calls = [
            c
            for c in module.walk()
            if isinstance(c, func.CallOp) and c.callee.root_reference.data == name
        ]
        if o.split_k == 1 or len(calls) != 1:
            return 1
        divisors = [d for d in range(1, k_tiles + 1) if k_tiles % d == 0]
        if o.split_k:
            return max(d for d in divisors if d <= o.split_k)
        if 2 * self.tiles > o.sms:  # at least half the multiprocessors busy already
            return 1
        need = -(-o.sms // self.tiles)
        deep = [d for d in divisors if k_tiles // d >= MIN_SPLIT_TILES]
        best = next((d for d in deep if d >= need), max(deep, default=1))
        # a split that still leaves most multiprocessors idle costs a second launch and the
        # partials' traffic for little: not done
        return best if 2 * self.tiles * best >= o.sms else 1

    @staticmethod
    def _auto_depth(o: GpuTileMatmulPass, block_m: int, block_n: int, k: int, itemsize: int) -> int:
        """block-k=0: 64 bytes of k per tile row where K is a multiple of it, else 32 (a
        ragged K's bounds checks on twice the elements per thread made ptxas spill: 12 spills
        on a 147-deep im2col matmul at 16 f32), halved until the tiles fit."""
        stages = 2 if o.double_buffer else 1
        depth = max(1, 64 // itemsize)
        if k % depth:
            depth = max(1, depth // 2)
        while (
            depth > 1
            and stages * depth * (block_m + block_n + 2 * o.pad) * itemsize > STATIC_SHARED_LIMIT
        ):
            depth //= 2
        return depth

    def _check_shared(self, itemsize: int) -> None:
        """The tiles are static `__shared__` arrays: refuse, naming the options, tiles past
        the 48 KB a kernel may declare statically (NVRTC would fail with ptxas's words)."""
        o = self.o
        stages = 2 if o.double_buffer else 1
        need = stages * o.block_k * (o.block_m + o.block_n + 2 * o.pad) * itemsize
        require(
            need <= STATIC_SHARED_LIMIT,
            "block-k",
            o.block_k,
            f"with block-m={o.block_m}, block-n={o.block_n}, pad={o.pad} and {stages} "
            f"stage(s), the {itemsize}-byte tiles need {need} bytes of shared memory; a "
            f"kernel's static shared memory is at most {STATIC_SHARED_LIMIT} bytes",
        )

    def _warp_tiles(self) -> bool:
        """Whether the block's threads are laid out as warp sub-tiles: the register tile is
        whole 4 x 4 groups, the block whole warp sub-tiles, and shared rows stay aligned
        for the vector reads."""
        o = self.o
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

    def _mma(self, b: GpuBuilder, tid: SSAValue, a_tile: SSAValue, b_tile: SSAValue):
        """The tensor-core inner product: each warp a `64 x 32` (or smaller) tile of C as
        m16n8k16 instructions; per 16 of k, a lane reads its 8 values of A per 16 rows and 4
        of B per 8 columns from the shared tiles (at the fragment coordinates of
        `irkit.dialects.warp`) and issues one `irkit_warp.mma_m16n8k16` per 16 x 8 piece.
        Returns the k-tile step and each accumulator's row and column in the block tile."""
        from irkit.dialects.warp import (
            MmaM16n8k8Tf32Op,
            MmaM16n8k16Op,
            a_coordinates,
            a_coordinates_tf32,
            b_coordinates,
            b_coordinates_tf32,
            c_coordinates,
        )

        o = self.o
        warps_n = self.warps[1]
        warp_m, warp_n = o.block_m // self.warps[0], o.block_n // warps_n
        tiles_m, tiles_n = warp_m // MMA_M, warp_n // MMA_N
        warp, lane = b.binary(arith.DivUIOp, tid, 32), b.binary(arith.RemUIOp, tid, 32)
        g, t4 = b.binary(arith.DivUIOp, lane, 4), b.binary(arith.RemUIOp, lane, 4)
        two_t = b.binary(arith.MuliOp, t4, 2)
        rows = b.add(
            arith.AddiOp(b.binary(arith.MuliOp, b.binary(arith.DivUIOp, warp, warps_n), warp_m), g)
        )
        cols = b.binary(arith.MuliOp, b.binary(arith.RemUIOp, warp, warps_n), warp_n)
        b_cols = b.add(arith.AddiOp(cols, g))  # B's column (n) of this lane
        c_cols = b.add(arith.AddiOp(cols, two_t))  # C's first column of this lane
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
        c_at = [c_coordinates(0, i) for i in range(4)]  # (row - g, column - 2t)

        def compute(t: GpuBuilder, stage: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
            accs = list(accs)
            for kk in range(0, o.block_k, step):
                a_frags = [
                    [
                        t.add(
                            memref.LoadOp.get(
                                a_tile,
                                [stage, t.iadd(k_lane, kk + dk), t.iadd(rows, mi * MMA_M + dm)],
                            )
                        )
                        for dm, dk in a_at
                    ]
                    for mi in range(tiles_m)
                ]
                b_frags = [
                    [
                        t.add(
                            memref.LoadOp.get(
                                b_tile, [stage, t.iadd(k_lane, kk + dk), t.iadd(b_cols, ni * MMA_N)]
                            )
                        )
                        for dk, _ in b_at
                    ]
                    for ni in range(tiles_n)
                ]
                for mi in range(tiles_m):
                    for ni in range(tiles_n):
                        at = (mi * tiles_n + ni) * 4
                        op = op_class(a_frags[mi], b_frags[ni], accs[at : at + 4])
                        t.add(op)
                        accs[at : at + 4] = list(op.outputs)
            return accs

        outputs = [
            (b.iadd(rows, mi * MMA_M + dm), b.iadd(c_cols, ni * MMA_N + dn))
            for mi in range(tiles_m)
            for ni in range(tiles_n)
            for dm, dn in c_at
        ]
        return compute, outputs

    def build(self, constants) -> func.FuncOp:
        o, nest = self.o, self.nest
        name = self.fn.sym_name.data
        kernel, b, mapping = new_kernel(self.fn, name, constants)
        self.b, self.mapping = b, mapping
        a, bb = mapping[nest.a], mapping[nest.b]
        tiles_n = -(-nest.n // o.block_n)
        grid = self.blocks
        stages = 2 if o.double_buffer else 1
        a_tile = self._shared(f"{name}_a_tile", [stages, o.block_k, o.block_m + o.pad])
        b_tile = self._shared(f"{name}_b_tile", [stages, o.block_k, o.block_n + o.pad])

        bid = b.add(gpu.BlockIdOp(X))
        tid = b.add(gpu.ThreadIdOp(X))
        tile, split, k_base = bid, None, None
        if nest.batch:  # block = batch entry * tiles + tile; the entry's batch indices
            tile = b.binary(arith.RemUIOp, bid, self.tiles)
            self._batch_indices(b, b.binary(arith.DivUIOp, bid, self.tiles), mapping)
        k_tiles = self.k_tiles // self.splits  # this block's k range
        if self.splits > 1:  # block = split * tiles + tile; the split's first k tile
            tile = b.binary(arith.RemUIOp, bid, self.tiles)
            split = b.binary(arith.DivUIOp, bid, self.tiles)
            k_base = b.binary(arith.MuliOp, split, k_tiles)
        row0 = b.binary(arith.MuliOp, b.binary(arith.DivUIOp, tile, tiles_n), o.block_m)
        col0 = b.binary(arith.MuliOp, b.binary(arith.RemUIOp, tile, tiles_n), o.block_n)
        init = mapping.get(nest.k_loop.iter_args[0], nest.k_loop.iter_args[0])
        if self.splits > 1:  # each range sums from zero; the second kernel adds the init
            init = b.constants.float(0.0, nest.acc.type)
        # loop-invariant: this thread's rows and columns in the tile, and its copy slots
        if self.mma:
            compute, outputs = self._mma(b, tid, a_tile, b_tile)
        else:
            compute, outputs = self._simt(b, tid, a_tile, b_tile)
        a_prefix, b_prefix, _ = (
            tuple(self._index(b, v, mapping) for v in p) for p in nest.prefixes
        )
        a_copy = _Copy(
            a, a_tile, (nest.m, o.block_m), (nest.k, o.block_k), True, self._lanes_a(), a_prefix
        )
        b_copy = _Copy(
            bb, b_tile, (nest.k, o.block_k), (nest.n, o.block_n), False, self._lanes_b(), b_prefix
        )
        a_slots = self._slots(tid, o.block_m, o.block_k, a_copy.lanes)
        b_slots = self._slots(tid, o.block_k, o.block_n, b_copy.lanes)

        def fetch(t: GpuBuilder, kt: SSAValue | int) -> list[list[SSAValue]]:
            """Tile `kt` of A and of B (of this block's range), from global memory into this
            thread's registers."""
            if k_base is not None:
                kt = (
                    t.add(arith.AddiOp(k_base, t.index(kt)))
                    if isinstance(kt, int)
                    else t.add(arith.AddiOp(k_base, kt))
                )
            k0 = (
                t.index(kt * o.block_k)
                if isinstance(kt, int)
                else t.binary(arith.MuliOp, kt, o.block_k)
            )
            return [
                *self._fetch(t, a_slots, a_copy, row0, k0),
                *self._fetch(t, b_slots, b_copy, k0, col0),
            ]

        def stash(t: GpuBuilder, values: list[list[SSAValue]], stage: SSAValue) -> None:
            """Registers from `fetch` into shared-memory stage `stage`."""
            self._stash(t, a_slots, a_copy, values[: len(a_slots)], stage)
            self._stash(t, b_slots, b_copy, values[len(a_slots) :], stage)

        if o.double_buffer:
            # Register-staged double buffering: tile kt+1's global loads are issued before
            # the FMAs on tile kt (which sits in stage kt % 2), and stored into the other
            # stage after them; one barrier per tile. The stage written in iteration kt was
            # last read in iteration kt-1, before its barrier. The last iteration fetches its
            # own tile again (the index is clamped) rather than branch.
            stash(b, fetch(b, 0), b.index(0))
            b.add(gpu.BarrierOp())

            def k_tile(t: GpuBuilder, kt: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
                following = t.add(arith.MinSIOp(t.iadd(kt, 1), t.index(k_tiles - 1)))
                staged = fetch(t, following)
                stage = t.binary(arith.RemUIOp, kt, 2)
                accs = compute(t, stage, accs)
                stash(t, staged, t.binary(arith.RemUIOp, t.iadd(kt, 1), 2))
                t.add(gpu.BarrierOp())
                return accs
        else:

            def k_tile(t: GpuBuilder, kt: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
                zero = t.index(0)
                stash(t, fetch(t, kt), zero)
                t.add(gpu.BarrierOp())
                accs = compute(t, zero, accs)
                t.add(gpu.BarrierOp())
                return accs

        accs = _for(b, k_tiles, [init] * len(outputs), k_tile)
        if split is None and self._store_lanes() > 1:
            self._vector_epilogue(b, accs, outputs, row0, col0, mapping)
            outputs, accs = [], []
        for acc, (row, col) in zip(accs, outputs, strict=True):
            i, j = b.add(arith.AddiOp(row0, row)), b.add(arith.AddiOp(col0, col))
            inside = _all(b, [(i, nest.m, o.block_m), (j, nest.n, o.block_n)])
            inner = b.guarded(inside)
            if split is not None:  # the partial sum, for the second kernel
                partials = kernel.body.block.args[-1]
                inner.add(memref.StoreOp.get(acc, partials, [split, i, j]))
                continue
            m = dict(mapping)
            m.update({nest.i: i, nest.j: j, nest.acc: acc})
            inner.clone(nest.epilogue, m)
        b.add(func.ReturnOp())
        flops = count_flops(nest.loop)
        kernel.attributes[LAUNCH_ATTR] = launch_attr(
            grid, self.threads, "tiled", flops, min_blocks=self.o.min_blocks
        )
        return kernel

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
        """Elements per 16-byte access (f32 only), or 1 when `vector-loads` is off."""
        if not self.o.vector_loads or not isinstance(self.nest.element_type, Float32Type):
            return 1
        return VECTOR_BYTES // 4

    def _lanes_a(self) -> int:
        """A's rows are read along k: 16-byte loads when every row starts 16-byte aligned
        (A's row length, K or the padded leading dimension pad-leading-dims gave it, a
        multiple of the lanes) and a tile's k extent is whole vectors. With K itself a
        multiple, a vector is wholly inside K or wholly outside and the bounds check stays
        per vector; with a padded row, the vector across K reads into the padding (inside
        the buffer) and its elements are checked one by one."""
        lanes, o = self._vector_lanes(), self.o
        return lanes if _row_length(self.nest.a) % lanes == 0 and o.block_k % lanes == 0 else 1

    def _lanes_b(self) -> int:
        """B's rows are read along n and stored to shared memory as they are, so as whole
        16-byte vectors both ways: only where no copy needs a bounds check (K and N
        multiples of their tiles), and shared rows stay 16-byte aligned (pad)."""
        lanes, o, nest = self._vector_lanes(), self.o, self.nest
        aligned = (
            (o.block_n + o.pad) % lanes == 0
            and o.block_n % lanes == 0
            and _row_length(nest.b) % lanes == 0
        )
        whole = nest.k % o.block_k == 0 and nest.n % o.block_n == 0
        return lanes if lanes > 1 and aligned and whole else 1

    def _shared(self, name: str, shape: list[int]) -> SSAValue:
        t = MemRefType(self.nest.element_type, shape, memory_space=SHARED_SPACE)
        self.module.body.block.insert_op_before(
            memref.GlobalOp.get(StringAttr(name), t, UnitAttr(), StringAttr("private")), self.fn
        )
        return self.b.add(memref.GetGlobalOp(name, t))

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

    (acc,) = _for(t, splits, [t.constants.float(nest.init, acc_type)], add)
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


class _Slot(NamedTuple):
    row: SSAValue
    column: SSAValue
    guard: SSAValue | None


def _row_length(buffer: SSAValue) -> int:
    """Elements from one row of a 2-d buffer to the next: its last dimension, which
    pad-leading-dims may have made longer than the logical extent."""
    return shape_of(buffer)[-1]


MIN_FILL_BLOCK = 32
"""The smallest block side `fill-sms` halves to (32 x 32 with 4 x 4 register tiles: 64
threads, the warp sub-tile 16 x 32)."""


PAIR_WAVES = 4
"""`fill-sms` pairs blocks on a multiprocessor where the 128 x 128 tiles make at most this many
waves of one block an SM (see `_paired`)."""


def _paired(o: GpuTileMatmulPass, tiled: _TiledKernel) -> _TiledKernel:
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
    t = tiled.o
    if (
        tiled.mma
        or not tiled.warp_tiled
        or not isinstance(tiled.nest.element_type, Float32Type)
        or (t.block_m, t.block_n, t.thread_m, t.thread_n) != (128, 128, 8, 8)
        or 2 * tiled.blocks < t.sms
        or tiled.blocks > PAIR_WAVES * t.sms
    ):
        return tiled
    pair = replace(
        o, block_m=128, block_n=64, thread_m=8, thread_n=8, min_blocks=max(o.min_blocks, 2)
    )
    return _TiledKernel(pair, tiled.fn, tiled.nest, tiled.module)


def _filling(tiled: _TiledKernel) -> _TiledKernel:
    """`fill-sms`: where the C tiles, split-K included, would leave more than half of the
    `sms` multiprocessors idle, the block tile halved (and its register tile, down to 4 x 4)
    while that gives more blocks, to `MIN_FILL_BLOCK` at the least. A 256^3 gemm on an H200
    (2026-11-27): 128 x 128 tiles, 4 blocks, 31.5 us; 64 x 64, 16 blocks, 2.30x faster; 32 x
    32 (split-K 4: 256 blocks), 2.48x faster. Only where the grid is that short: a larger
    problem keeps the large tiles' arithmetic per load."""
    fn, nest, module = tiled.fn, tiled.nest, tiled.module
    best = tiled
    while 2 * best.blocks < best.o.sms:
        o = best.o
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
        smaller = _TiledKernel(
            replace(o, block_m=block_m, block_n=block_n, thread_m=thread_m, thread_n=thread_n),
            fn,
            nest,
            module,
        )
        if smaller.blocks <= best.blocks:
            break
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


def _for(
    b: GpuBuilder,
    trips: int,
    inits: list[SSAValue],
    body: Callable[[GpuBuilder, SSAValue, list[SSAValue]], list[SSAValue]],
) -> list[SSAValue]:
    """`scf.for iv = 0 to trips` carrying `inits`."""
    block = Block(arg_types=[b.index(0).type, *(v.type for v in inits)])
    inner = GpuBuilder(block, b.constants)
    iv, *accs = block.args
    block.add_op(scf.YieldOp(*body(inner, iv, list(accs))))
    loop = scf.ForOp(b.index(0), b.index(trips), b.index(1), inits, block)
    b.add(loop)
    return list(loop.results)
