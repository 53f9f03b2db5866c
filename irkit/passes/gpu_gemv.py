"""A row times a matrix on the GPU (`gpu-tile-matmul{gemv}`): the kernel of a matmul whose C
has one row, as a decode step's projections are (`x[1, K] @ W[K, N]`).

Without it `map-to-gpu` gives each output its own thread and its whole k loop: N threads
(4096 for a Llama-3-8B projection, 128 warps on a 132-SM GPU) each reading K weights one
after another, one warp an SM, nothing to hide a load's latency behind. The weights are
read once whatever the schedule, so the kernel's time is the time to stream them, and that
takes many loads in flight:

    block (column tile t, k range s) of 8 warps; a lane takes `lanes` adjacent columns
    (16 bytes of a row of W: one vector load), a warp 32 lanes' worth
      warp w: for k = k0 + w, k0 + w + 8, ... < k1:   (the block's warps interleaved on k)
        acc[0..lanes) += x[k] * W[k, columns]          (the row of x: one broadcast load)
      the 8 warps' sums meet in shared memory; thread c adds column c's
      one k range: the epilogue on that sum, stored into C (fused as in the tiled kernel)
      several: the sum into a partial row, and split-K's reduction kernel (in fixed order,
      deterministic) adds them and runs the epilogue

The k ranges are chosen so that the grid puts 4 blocks (32 warps) on each of `sms` (where
the kernel is called once: the reduction kernel follows it in the driver), each warp taking
at least 16 rows of a range. The same sums in another association (the 8 warps' and the ranges' partial sums),
as split-K's.
"""

from __future__ import annotations

from xdsl.dialects import arith, func, gpu, memref, scf, vector
from xdsl.dialects.builtin import (
    MemRefType,
    ModuleOp,
    NoneAttr,
    VectorType,
)
from xdsl.ir import Block, SSAValue

from irkit.dtypes import numpy_dtype
from irkit.loops import LAUNCH_ATTR, shared_buffer
from irkit.passes.contraction import MatmulNest
from irkit.passes.map_to_gpu import GpuBuilder, X, launch_attr, new_kernel

WARPS, WARP = 8, 32
"""Warps a block (interleaved along k), lanes a warp (along the columns)."""
BLOCKS_PER_SM = 4
"""Blocks the k ranges aim for on each SM (32 warps: loads enough in flight to stream W,
each warp's next row's load issued while its last one's sums are added)."""
MIN_ROWS = 16
"""Rows of W a warp takes at least in each k range (fewer: more ranges than work)."""


def applies(nest: MatmulNest) -> bool:
    """Whether the GEMV kernel takes `nest`: one row of C, no batch, A read at [0, k]."""
    return nest.m == 1 and not nest.batch and not nest.a_gather


def gemv_splits(nest: MatmulNest, once: bool, sms: int) -> int:
    """The k ranges: enough blocks for BLOCKS_PER_SM on each of `sms` (1 where the kernel is
    called more than once, which split-K's second kernel cannot follow), each warp at least
    MIN_ROWS rows of W a range."""
    if not once:
        return 1
    tiles = -(-nest.n // (WARP * _lanes(nest)))
    wanted = max(1, -(-BLOCKS_PER_SM * sms // tiles))
    most = max(1, nest.k // (WARPS * MIN_ROWS))
    splits = min(wanted, most)
    per = -(-nest.k // splits)
    return -(-nest.k // per)  # every range non-empty


def _lanes(nest: MatmulNest) -> int:
    """Columns a lane loads at once: 16 bytes of W's row where W is a plain buffer whose
    rows are a whole number of them (else 1: one element, still adjacent across lanes)."""
    t = nest.b.type
    assert isinstance(t, MemRefType)
    lanes = 16 // numpy_dtype(nest.element_type).itemsize
    aligned = t.get_shape()[-1] % lanes == 0 and nest.n % lanes == 0
    return lanes if aligned and isinstance(t.layout, NoneAttr) else 1


def build_gemv(
    fn: func.FuncOp, nest: MatmulNest, constants, splits: int, module: ModuleOp
) -> func.FuncOp:
    """The GEMV kernel for `fn`'s nest (see the module docstring); `fn` already carries the
    partial-sum buffer where `splits` > 1 (`gpu_tile_matmul._split_k`)."""
    kernel, b, mapping = new_kernel(fn, fn.sym_name.data, constants)
    kernel.attributes.pop(LAUNCH_ATTR, None)
    lanes = _lanes(nest)
    columns = WARP * lanes
    tiles = -(-nest.n // columns)
    per = -(-nest.k // splits)
    acc_type = nest.acc.type
    a, w_ = mapping[nest.a], mapping[nest.b]

    bid, tid = b.add(gpu.BlockIdOp(X)), b.add(gpu.ThreadIdOp(X))
    tile = b.binary(arith.RemUIOp, bid, tiles) if splits > 1 else bid
    lane, warp = b.binary(arith.RemUIOp, tid, WARP), b.binary(arith.DivUIOp, tid, WARP)
    first = b.add(
        arith.AddiOp(b.binary(arith.MuliOp, tile, columns), b.binary(arith.MuliOp, lane, lanes))
    )
    if nest.n % columns:  # a ragged last tile: its lanes past N read the last columns
        first = b.add(arith.MinSIOp(first, b.index(nest.n - lanes)))
    if splits > 1:
        s = b.binary(arith.DivUIOp, bid, tiles)
        k0 = b.binary(arith.MuliOp, s, per)
        k1 = b.add(arith.MinSIOp(b.iadd(k0, per), b.index(nest.k)))
    else:
        s, k0, k1 = b.index(0), b.index(0), b.index(nest.k)
    zero = b.constants.float(nest.init, acc_type)

    body = Block(arg_types=[b.index(0).type, *[acc_type] * lanes])
    t = GpuBuilder(body, b.constants)
    k, *accs = body.args
    x = _widen(t, t.add(memref.LoadOp.get(a, [b.index(0), k])), acc_type)
    if lanes > 1:
        row = t.add(vector.LoadOp(w_, [k, first], VectorType(nest.element_type, [lanes])))
        ws = [t.add(vector.ExtractOp(row, [q], nest.element_type)) for q in range(lanes)]
    else:
        ws = [t.add(memref.LoadOp.get(w_, [k, first]))]
    sums = [
        t.add(arith.AddfOp(acc, t.add(arith.MulfOp(x, _widen(t, v, acc_type)))))
        for acc, v in zip(accs, ws, strict=True)
    ]
    t.add(scf.YieldOp(*sums))
    start = b.add(arith.AddiOp(k0, warp))
    loop = scf.ForOp(start, k1, b.index(WARPS), [zero] * lanes, body)
    b.add(loop)

    # the warps' sums meet in shared memory: thread c adds column c's
    partial = b.add(
        shared_buffer(module, fn, f"{fn.sym_name.data}_warps", acc_type, [WARPS, columns])
    )
    mine = b.binary(arith.MuliOp, lane, lanes)
    for q, value in enumerate(loop.results):
        b.add(memref.StoreOp.get(value, partial, [warp, b.iadd(mine, q)]))
    b.add(gpu.BarrierOp())
    column = b.add(arith.AddiOp(b.binary(arith.MuliOp, tile, columns), tid))
    inside = b.add(arith.CmpiOp(tid, b.index(columns), "ult"))
    if nest.n % columns:
        inside = b.add(arith.AndIOp(inside, b.add(arith.CmpiOp(column, b.index(nest.n), "ult"))))
    u = b.guarded(inside)
    total = zero
    for w in range(WARPS):
        total = u.add(arith.AddfOp(total, u.add(memref.LoadOp.get(partial, [u.index(w), tid]))))
    if splits > 1:
        partials = kernel.body.block.args[-1]
        u.add(memref.StoreOp.get(total, partials, [s, u.index(0), column]))
    else:
        m = dict(mapping)
        m.update({nest.i: u.index(0), nest.j: column, nest.acc: total})
        u.clone(nest.epilogue, m)
    b.add(func.ReturnOp())
    flops = 2 * nest.k * nest.n
    kernel.attributes[LAUNCH_ATTR] = launch_attr(tiles * splits, WARPS * WARP, "gemv", flops)
    return kernel


def _widen(b: GpuBuilder, value: SSAValue, to) -> SSAValue:
    return value if value.type == to else b.add(arith.ExtFOp(value, to))
