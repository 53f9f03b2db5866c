"""cpu-tile-transpose: a transpose kernel as 16x16 blocks transposed in vector registers.

`lower-graph-to-loops` writes a transpose as one nest over the output, each iteration a load
and a store. When the output's innermost dimension is not the input's (NCHW -> NHWC and
back, around conv_block's convolution), either the reads or the writes stride by a whole
row: conv_block's two transposes took 12.5 and 8 us for 128 and 64 KiB already in cache,
a fifth of the model's non-matmul time. This pass rewrites such a nest, when both
innermost extents are multiples of the vector width `lanes` (16 f32 with AVX-512), into

    scf.parallel (other dims..., column block, row block) {
      %r0..%r15 = vector.load  (16 input rows: consecutive in the input's innermost dim)
      4 rounds of vector.shuffle on pairs of rows (the recursive block transpose:
        at distance d = 8, 4, 2, 1 rows i and i + d swap their lanes that differ by d)
      vector.store %r0..%r15   (16 output rows: consecutive in the output's innermost dim)
    }

64 two-input shuffles (`vunpck`/`vpermt2ps` on AVX-512) instead of 256 strided
scalar accesses a block. The same elements land in the same places: bit-identical.

Only kernels whose whole body is one such nest (a load of the input at the permuted ivs and
a store of it to the output at the ivs), f32 or i32 elements; anything else stays. Optional.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf, vector
from xdsl.dialects.builtin import (
    DenseArrayBase,
    Float32Type,
    IndexType,
    IntegerType,
    ModuleOp,
    VectorType,
    i64,
)
from xdsl.ir import Block, Region, SSAValue
from xdsl.passes import ModulePass

from irkit.errors import require_vector_bits
from irkit.host import vector_bits as host_vector_bits
from irkit.ir import unchanged
from irkit.loops import constant_int, kernels, require_loop_level
from irkit.passes.loop_builder import FunctionConstants

INDEX = IndexType()


@dataclass
class _Transpose:
    loop: scf.ParallelOp
    load: memref.LoadOp
    store: memref.StoreOp
    extents: list[int]
    perm: list[int]
    """Input dimension d is indexed by output iv perm[d]."""


def match_transpose(loop: scf.ParallelOp) -> _Transpose | None:
    """The nest `out[ivs] = in[permuted ivs]` with a moved innermost dimension, else None."""
    ops = list(loop.body.block.ops)
    if len(ops) != 3 or loop.initVals:
        return None
    load, store, _ = ops
    if not isinstance(load, memref.LoadOp) or not isinstance(store, memref.StoreOp):
        return None
    ivs: list[SSAValue] = list(loop.body.block.args)
    if store.value is not load.res or list(store.indices) != ivs or load.memref is store.memref:
        return None
    extents: list[int] = []
    for lb, ub, st in zip(loop.lowerBound, loop.upperBound, loop.step, strict=True):
        extent = constant_int(ub)
        if constant_int(lb) != 0 or constant_int(st) != 1 or extent is None:
            return None
        extents.append(extent)
    indices = list(load.indices)
    if sorted(indices, key=id) != sorted(ivs, key=id) or len(set(map(id, indices))) != len(ivs):
        return None
    perm = [ivs.index(v) for v in indices]
    if len(perm) < 2 or perm[-1] == len(ivs) - 1:  # the innermost dimension stays: no gain
        return None
    element = load.res.type
    if not isinstance(element, Float32Type | IntegerType) or (
        isinstance(element, IntegerType) and element.width.data != 32
    ):
        return None
    return _Transpose(loop, load, store, extents, perm)


def _shuffle_mask(distance: int, lanes: int, upper: bool) -> list[int]:
    """Lane sources for one of a pair of rows at `distance` (see the module docstring): the
    lower row keeps lanes without bit `distance` and takes the others from the upper row's
    lane - distance; the upper row takes lanes without the bit from the lower row's
    lane + distance and keeps its own."""
    out = []
    for lane in range(lanes):
        if not upper:
            out.append(lane if not lane & distance else lanes + lane - distance)
        else:
            out.append(lane + distance if not lane & distance else lanes + lane)
    return out


def tile(t: _Transpose, fn: func.FuncOp, lanes: int) -> bool:
    """Rewrite one matched nest (see the module docstring); False when it stays."""
    rank = len(t.extents)
    out_inner = rank - 1  # the output's innermost dim: the column of a block
    in_inner = t.perm[-1]  # the output dim the input's innermost dim indexes: the row
    if t.extents[out_inner] % lanes or t.extents[in_inner] % lanes:
        return False
    constants = FunctionConstants(fn)
    element = t.load.res.type
    vtype = VectorType(element, [lanes])
    others = [d for d in range(rank) if d not in (out_inner, in_inner)]
    dims = [*others, out_inner, in_inner]  # the new loop's: the blocks last
    bounds = [t.extents[d] if d in others else t.extents[d] // lanes for d in dims]
    body = Block(arg_types=[INDEX] * rank)
    ops: list = []

    def add(op):
        ops.append(op)
        return op.results[0] if op.results else None

    at: dict[int, SSAValue] = dict(zip(others, body.args[: len(others)], strict=True))
    width = constants.index(lanes)
    col0 = add(arith.MuliOp(body.args[len(others)], width))  # the block's first column
    row0 = add(arith.MuliOp(body.args[len(others) + 1], width))  # and first row
    rows = []
    for r in range(lanes):
        idx = dict(at)
        idx[out_inner] = add(arith.AddiOp(col0, constants.index(r)))  # column c0 + r
        idx[in_inner] = row0
        rows.append(add(vector.LoadOp(t.load.memref, [idx[p] for p in t.perm], vtype)))
    distance = lanes // 2
    while distance:
        new = list(rows)
        for i in range(lanes):
            if i & distance:
                continue
            for which, upper in ((i, False), (i + distance, True)):
                mask = DenseArrayBase.from_list(i64, _shuffle_mask(distance, lanes, upper))
                new[which] = add(
                    vector.ShuffleOp(rows[i], rows[i + distance], mask, result_type=vtype)
                )
        rows = new
        distance //= 2
    for r in range(lanes):
        idx = dict(at)
        idx[in_inner] = add(arith.AddiOp(row0, constants.index(r)))  # output row w0 + r
        idx[out_inner] = col0
        add(vector.StoreOp(rows[r], t.store.memref, [idx[d] for d in range(rank)]))
    for op in ops:
        body.add_op(op)
    body.add_op(scf.ReduceOp())
    zero, one = constants.index(0), constants.index(1)
    loop = scf.ParallelOp(
        [zero] * rank, [constants.index(b) for b in bounds], [one] * rank, Region(body)
    )
    loop.attributes.update(t.loop.attributes)
    parent = t.loop.parent_block()
    assert parent is not None
    parent.insert_op_before(loop, t.loop)
    t.loop.detach()
    t.loop.erase(safe_erase=False)
    return True


@dataclass(frozen=True)
class CpuTileTransposePass(ModulePass):
    """Transpose kernels as blocks transposed in vector registers (see the module docstring).
    Optional: the result is the same elements in the same places."""

    name = "cpu-tile-transpose"
    is_optimization = True
    SEARCH_SPACE: ClassVar[dict[str, tuple[int, ...]]] = {"vector-bits": (128, 256, 512)}
    """What `irkit-bench tune --space cpu-tile-transpose` tries: the block's vector width."""

    vector_bits: int = 0  # 0: the host's widest vector (`irkit.host.vector_bits`)

    def check_options(self) -> None:
        require_vector_bits(self.vector_bits)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.check_options()
        require_loop_level(op, "cpu-tile-transpose", cpu=True)
        matched = False
        for fn in kernels(op):
            top = [o for o in fn.body.block.ops if isinstance(o, scf.ParallelOp)]
            for loop in top:
                found = match_transpose(loop)
                if found is not None:
                    tile(found, fn, (self.vector_bits or host_vector_bits()) // 32)
                    matched = True
        if not matched:
            unchanged(self)
