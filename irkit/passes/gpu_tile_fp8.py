"""gpu-tile-matmul's 8-bit floats: `scaled_matmul`'s nest on mma.sync m16n8k32 (sm_89+).

The nest (A and B of f8e4m3 or f8e5m2, each its own format, widened into an f32 sum; C any
float, through the epilogue's scales and cast) is tiled as the f16 ring is: a cp.async ring
of `stages` byte tiles, A [m][k] and B [n][k], each row padded by 16 bytes, read by
`ldmatrix.x4` untransposed, one `irkit_warp.mma_m16n8k32_f8` per 16 x 8 of C and 32 of k,
f32 accumulators, the epilogue as the f16 path's. Both tiles hold k contiguous: that is what
the instruction's fragments are (`irkit.dialects.warp`), and ldmatrix can only transpose
16-bit values, so B is read transposed from global memory by no copy.

The copies are 16 bytes, so the pass gives the matmul kernel B^T, [N][K16] (K rounded up to
16), written by a pack kernel called before it (`pack_operands`): once per bind (an
`irkit.once` kernel) where B is a weight, on every call otherwise. A is copied into [M][K16]
the same way where its rows are not 16-byte aligned. A copy's bytes past K are zero-filled
by its source size, so the padding is never written or read.

On sm_90 mma.sync has no 8-bit form in hardware (ptxas unpacks the bytes to f16 for two
HMMA.16816 each); Hopper's 8-bit tensor cores are wgmma's. Under `wgmma` (sm_90a), the
block is warpgroups of 64 rows, each `wgmma.mma_async` m64nNk32 (QGMMA) reading both tiles
as K-major core matrices, A [m/8][k/16][8][16] and B [n/8][k/16][8][16] (PTX's 8-bit wgmma
takes no transposed operand: B^T again), filled by the same cp.async ring (layout
"kmajor" of `irkit.dialects.warp_async.WgmmaOp`). TMA's boxes and warp specialization are
not built for 8 bits: `tma` leaves them on the cp.async ring.

Left to map-to-gpu (a thread an output, the operands widened one by one): batch and
gathered nests (`scaled_matmul` is 2-D), and options without the ring (`tensor-cores`,
`async-copy` or `vector-loads` off, or both `ldmatrix` and `wgmma`) or whose block does not
cut into whole instruction tiles.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import func, memref
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, MemRefType, ModuleOp, UnitAttr
from xdsl.ir import Block, Region, SSAValue

from irkit.dialects.warp import LdmatrixX4Op, MmaM16n8k32F8Op, mma_grid
from irkit.dtypes import is_fp8
from irkit.ir import shape_of
from irkit.loops import KERNEL_ATTR, ONCE_ATTR, SCRATCH_ATTR
from irkit.passes.contraction import MatmulNest
from irkit.passes.gpu_tile_policy import MMA_K_F8, MMA_M, MMA_N
from irkit.passes.loop_builder import LoopBuilder, is_weight
from irkit.passes.map_to_gpu import GpuBuilder

CHUNK = 16
"""Bytes of one cp.async copy: rows of the operands the ring reads are multiples of it."""
A_ORIGINS = [(0, 0), (8, 0), (0, 16), (8, 16)]
"""ldmatrix's matrices for a lane's 4 registers of A (rows, bytes of k): registers 0..3
are rows g and g + 8 at k 4t and 16 + 4t (`irkit.dialects.warp`)."""
B_ORIGINS = [(0, 0), (0, 16), (8, 0), (8, 16)]
"""ldmatrix's matrices for the 2 registers of B of two 8-column pieces, from a [n][k] tile."""


def eight_bit(nest: MatmulNest) -> bool:
    """Whether `nest` multiplies 8-bit floats."""
    return is_fp8(nest.element_type)


def tileable(nest: MatmulNest) -> bool:
    """Whether this module tiles the 8-bit `nest` at all (2-D, A read at [i, k])."""
    return not nest.batch and not nest.a_gather


def pack_operands(
    module: ModuleOp, fn: func.FuncOp, nest: MatmulNest
) -> tuple[SSAValue | None, SSAValue]:
    """New last parameters of `fn` (A's copy where its rows are not 16-byte aligned, and
    B^T), each call of `fn` given buffers for them and preceded by the kernels filling them
    (see the module docstring). Returns `fn`'s parameters: A's copy (None: A is read in
    place) and B^T."""
    k16 = -(-nest.k // CHUNK) * CHUNK
    name = fn.sym_name.data
    calls = [
        c
        for c in module.walk()
        if isinstance(c, func.CallOp) and c.callee.root_reference.data == name
    ]
    packs: list[tuple[SSAValue, list[int], bool]] = []  # (source, packed shape, transposed)
    if shape_of(nest.a)[-1] % CHUNK:
        packs.append((nest.a, [nest.m, k16], False))
    packs.append((nest.b, [nest.n, k16], True))
    params = []
    for source, shape, transposed in packs:
        t = source.type
        assert isinstance(t, MemRefType)
        mtype = MemRefType(t.element_type, shape)
        param = fn.body.block.insert_arg(mtype, len(fn.body.block.args))
        param.name_hint = "b_packed" if transposed else "a_packed"
        params.append(param)
        kernels: dict[bool, func.FuncOp] = {}

        def kernel(once: bool, t=t, mtype=mtype, transposed=transposed, kernels=kernels):
            if once not in kernels:
                kernels[once] = _pack_kernel(module, fn, nest, t, mtype, transposed, once)
            return kernels[once]

        index = fn.body.block.args.index(source)
        calls = [_feed(c, mtype, kernel, index, module) for c in calls]
    if fn.arg_attrs is not None:
        roles = list(fn.arg_attrs.data)
        fn.arg_attrs = ArrayAttr([*roles, *[DictionaryAttr({})] * (len(params))])
    fn.update_function_type()
    return (params[0] if len(params) == 2 else None), params[-1]


def _feed(
    call: func.CallOp,
    mtype: MemRefType,
    kernel: Callable[[bool], func.FuncOp],
    index: int,
    module: ModuleOp,
) -> func.CallOp:
    """`call` replaced by one passing a new buffer of `mtype`, allocated and filled by the pack
    kernel from operand `index` (the once kernel where that operand is a weight) just before
    it, and freed before the caller returns."""
    caller = call.parent_block()
    assert caller is not None
    source = call.arguments[index]
    alloc = memref.AllocOp.get(mtype.element_type, 64, mtype.get_shape())
    pack = func.CallOp(kernel(is_weight(source, module)).sym_name.data, [source, alloc.memref], [])
    new = func.CallOp(call.callee, [*call.arguments, alloc.memref], [])
    caller.insert_ops_before([alloc, pack, new], call)
    call.detach()
    call.erase()
    last = caller.last_op
    assert isinstance(last, func.ReturnOp)
    caller.insert_op_before(memref.DeallocOp.get(alloc.memref), last)
    return new


def _pack_kernel(
    module: ModuleOp,
    fn: func.FuncOp,
    nest: MatmulNest,
    source: MemRefType,
    packed: MemRefType,
    transposed: bool,
    once: bool,
) -> func.FuncOp:
    """A loop-level kernel writing an operand's rows into `packed`'s 16-byte-aligned rows:
    B^T (`transposed`: packed[j, k] = B[k, j]) or A (packed[i, k] = A[i, k]), k < K only;
    map-to-gpu maps it. Marked once-per-bind where `once` (its source a weight)."""
    kind = "b" if transposed else "a"
    taken = {o.sym_name.data for o in module.ops if isinstance(o, func.FuncOp)}
    name, n = f"{fn.sym_name.data}_pack_{kind}", 1
    while name in taken:
        name, n = f"{fn.sym_name.data}_pack_{kind}{n}", n + 1
    block = Block(arg_types=[source, packed])
    src, dst = block.args
    src.name_hint, dst.name_hint = ("b" if transposed else "a"), "packed"
    b = LoopBuilder(block)
    rows = nest.n if transposed else nest.m

    def copy(ivs: list[SSAValue]) -> None:
        r, k = ivs
        value = b.add(memref.LoadOp.get(src, [k, r] if transposed else [r, k]))
        b.add(memref.StoreOp.get(value, dst, [r, k]))

    b.parallel([rows, nest.k], copy)
    block.add_op(func.ReturnOp())
    kernel = func.FuncOp(name, ([source, packed], []), Region(block), visibility="private")
    kernel.attributes[KERNEL_ATTR] = UnitAttr()
    if once:  # a prepared buffer, kept from one call to the next
        kernel.attributes[ONCE_ATTR] = UnitAttr()
    else:  # an intermediate of each call
        scratch = DictionaryAttr({SCRATCH_ATTR: UnitAttr()})
        kernel.arg_attrs = ArrayAttr([DictionaryAttr({}), scratch])
    module.body.block.insert_op_before(kernel, fn)
    return kernel


def mma_f8(kernel, b: GpuBuilder, tid: SSAValue, a_tile: SSAValue, b_tile: SSAValue):
    """The 8-bit inner product of `kernel` (a `gpu_tile_matmul._TiledKernel`): each warp a
    `64 x 32` (or smaller) tile of C as m16n8k32 instructions; per 32 of k, a lane's 4
    registers of A per 16 rows and 2 of B per 8 columns, by ldmatrix.x4 from the [m][k] and
    [n][k] byte tiles. Returns the k-tile step and each accumulator's row and column in the
    block tile."""
    o = kernel.o
    w = kernel.warp_tile(b, tid)
    tiles_m, tiles_n, row0, col0 = w.tiles_m, w.tiles_n, w.row0, w.col0

    def registers(t: GpuBuilder, tile, at, origins) -> list[SSAValue]:
        op = t.add(LdmatrixX4Op(tile, at, origins)).owner
        assert isinstance(op, LdmatrixX4Op)
        return list(op.pairs)

    def compute(t: GpuBuilder, stage: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
        accs = list(accs)
        for kk in range(0, o.block_k, MMA_K_F8):
            k = t.index(kk)
            a_regs = [
                registers(t, a_tile, [stage, t.iadd(row0, mi * MMA_M), k], A_ORIGINS)
                for mi in range(tiles_m)
            ]
            b_regs: list[list[SSAValue]] = []
            for ni in range(0, tiles_n, 2):  # a last odd piece loads its two matrices twice
                origins = B_ORIGINS if ni + 1 < tiles_n else B_ORIGINS[:2] * 2
                got = registers(t, b_tile, [stage, t.iadd(col0, ni * MMA_N), k], origins)
                b_regs += [got[:2], got[2:]][: min(2, tiles_n - ni)]
            accs = mma_grid(t.add, MmaM16n8k32F8Op, a_regs, b_regs, accs)
        return accs

    return compute, w.outputs(b)
