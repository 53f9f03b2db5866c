"""cpu-tile-matmul: register-blocked, vectorized matmul nests for the CPU (LLVM vector types).

Every matmul nest `match_matmul` recognizes (plain, batched, or reading A through index
arithmetic as an implicit-GEMM convolution does) becomes BLIS-style microkernels: B packed
into panels of `nr` columns (weights once per bind, in an `irkit.once` kernel), an `mr x nr`
tile of C kept in vector registers, the row tiles inside the panel loop (K blocked by `kc`
where a panel would not stay in L2), the panel loop parallel for `cpu-parallelize`, the
epilogue run on each tile while it is in L1, and the remainders handled by smaller
microkernels and the original nest. The sum over k runs in the original order, each
multiply-add fused (one rounding instead of two).

Which microkernel a nest gets is data (`cpu_tile_policy.cpu_tile`: a pure function of these
options, the host and the nest); this module builds it. How each part works and what it was
measured at: docs/passes.md, "cpu-tile-matmul in detail".

Options:

    mr=6              rows of C per microkernel (its register tile is mr x nr)
    nr=0              columns per microkernel and per packed panel, a multiple of the lanes;
                      0 (auto): 4 vectors with 32 vector registers, 2 with 16
    vector-bits=0     vector register width: 512, 256 or 128; 0 (auto): the host's widest
                      (IRKIT_VECTOR_BITS=256 narrows an AVX-512 host's)
    pack=true         pack B into contiguous panels before the microkernels run
    min-panels=4      with fewer panels, the row tiles are the parallel loop (0: never)
    kc=-1             k steps per block of a panel; 0, or K <= kc: K in one block; -1 (auto)
    prefetch=true     with B packed, the last row tiles of a panel prefetch the next block
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ClassVar, NamedTuple

from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf, vector
from xdsl.dialects.builtin import MemRefType, ModuleOp, UnitAttr, VectorType
from xdsl.ir import Block, BlockArgument, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from irkit.dialects.cpu import PrefetchOp
from irkit.dtypes import numpy_dtype
from irkit.errors import require, require_vector_bits
from irkit.host import vector_bits as host_vector_bits
from irkit.host import vector_registers as host_vector_registers
from irkit.loops import (
    KERNEL_ATTR,
    ONCE_ATTR,
    SCRATCH_ATTR,
)
from irkit.passes.contraction import MatmulNest, match_matmul
from irkit.passes.cpu_tile_policy import CpuTile, cpu_tile, narrow_tail, resolve_host
from irkit.passes.loop_builder import LoopBuilder, add_kernel_buffer, is_weight

ALIGNMENT = 64


@dataclass(frozen=True)
class CpuTileMatmulPass(ModulePass):
    """Rewrite matmul nests into packed, register-blocked vector microkernels (see the
    module docstring). Optional: the result computes the same values."""

    name = "cpu-tile-matmul"
    is_optimization = True
    SEARCH_SPACE: ClassVar[dict[str, tuple[int, ...]]] = {
        "mr": (4, 6, 8),
        "nr": (16, 32, 48, 64),
        "kc": (0, 256, 512),
    }
    """What `irkit-bench tune --space cpu-tile-matmul` tries: the microkernel's rows, its
    columns (whole vectors of any host), and K's blocking."""

    mr: int = 6
    nr: int = 0  # 0: as many vectors as the host's registers hold (`resolved`)
    vector_bits: int = 0  # 0: the host's (`irkit.host.vector_bits`)
    pack: bool = True
    kc: int = -1
    min_panels: int = 4
    prefetch: bool = True

    def resolved(self) -> CpuTileMatmulPass:
        """The options with the host's values where they are 0 (auto): `vector-bits` the
        host's widest vector, `nr` 4 vectors with 32 vector registers (AVX-512: 6 x 4
        accumulators, 4 of B, 1 broadcast) and 2 with 16 (AVX2, SSE: 12 + 2 + 1), BLIS's
        shapes for those ISAs. On a 2-core znver3 VM (AVX2), transformer_block ran 2.52x
        [2.45, 2.61] faster at 256 bits and nr=16 than with the AVX-512 tile (6 x 64 at 512
        bits: 48 ymm accumulators, spilled), and 1.6x faster than untiled (2026-11-28,
        `irkit-bench tune`)."""
        bits, nr = resolve_host(
            self.vector_bits, self.nr, host_vector_bits(), host_vector_registers()
        )
        return replace(self, vector_bits=bits, nr=nr)

    def check_options(self) -> None:
        require_vector_bits(self.vector_bits)
        require(1 <= self.mr <= 16, "mr", self.mr, "must be from 1 to 16")
        # with vector-bits=0 an nr must suit any host: a multiple of the widest vector's lanes
        bits = self.vector_bits or 512
        lanes = bits // 32  # f32's; f64's (half as many) divide it
        require(
            0 <= self.nr <= 1024 and self.nr % lanes == 0,
            "nr",
            self.nr,
            f"must be a positive multiple of the {lanes} f32 lanes of a {bits}-bit vector"
            f"{' (vector-bits=0: the widest a host may have)' if not self.vector_bits else ''}"
            ", at most 1024, or 0 (auto)",
        )
        require(self.kc >= -1, "kc", self.kc, "must be -1 (auto), 0 (no K blocking) or positive")
        require(self.min_panels >= 0, "min-panels", self.min_panels, "must be non-negative")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        options = self.resolved()
        callers = _Callers(op)
        for fn in list(op.ops):
            if not isinstance(fn, func.FuncOp) or KERNEL_ATTR not in fn.attributes:
                continue
            for loop in [o for o in fn.walk() if isinstance(o, scf.ParallelOp)]:
                nest = match_matmul(loop, batched=True, gather=True)
                if nest is not None:
                    width = numpy_dtype(nest.element_type).itemsize * 8
                    tile = cpu_tile(options, width, nest.k, str(nest.element_type))
                    _Tiler(tile, nest, fn, callers).rewrite()


class _Callers:
    """Each kernel's call sites in the module's other functions (the driver), kept current
    as calls are replaced by ones passing more buffers."""

    def __init__(self, module: ModuleOp):
        self.module = module
        self.calls: dict[str, list[func.CallOp]] = {}
        for fn in module.ops:
            if isinstance(fn, func.FuncOp) and KERNEL_ATTR not in fn.attributes:
                for call in fn.walk():
                    if isinstance(call, func.CallOp):
                        name = call.callee.root_reference.data
                        self.calls.setdefault(name, []).append(call)

    def only(self, kernel: func.FuncOp) -> func.CallOp | None:
        """The kernel's one call site, if it has exactly one, in the driver's top block."""
        calls = self.calls.get(kernel.sym_name.data, [])
        if len(calls) != 1 or not isinstance(calls[0].parent_op(), func.FuncOp):
            return None
        return calls[0]

    def replace(self, kernel: func.FuncOp, call: func.CallOp) -> None:
        self.calls[kernel.sym_name.data] = [call]

    def fresh_name(self, base: str) -> str:
        taken = {o.sym_name.data for o in self.module.ops if isinstance(o, func.FuncOp)}
        name, n = base, 1
        while name in taken:
            name, n = f"{base}{n}", n + 1
        return name


class _KBlock(NamedTuple):
    """The k steps a microkernel runs: `length` from `start`; whether they are the first
    (the sum starts from init) and the last (the epilogue follows): True, False, or an i1
    known only at run time."""

    start: SSAValue | int
    length: int
    first: SSAValue | bool
    last: SSAValue | bool


class _Tiler:
    """Builds the replacement of one matmul nest, before it, then erases it."""

    def __init__(self, tile: CpuTile, nest: MatmulNest, fn: func.FuncOp, callers: _Callers):
        self.nest, self.fn, self.callers, self.tile = nest, fn, callers, tile
        self.lanes, self.mr, self.nr, self.kc = tile.lanes, tile.mr, tile.nr, tile.kc
        self.pack, self.prefetch, self.min_panels = tile.pack, tile.prefetch, tile.min_panels
        self.packed: tuple[SSAValue, Callable[[SSAValue, SSAValue, int], list[SSAValue]]] | None
        self.packed = None
        """The packed B and its index, while a microkernel reading it is built."""
        self.from_packed: Callable[[SSAValue, int, SSAValue], SSAValue] | None = None
        """The `source` reading the packed B (microkernels given it may prefetch)."""
        self.vtype = VectorType(nest.element_type, [self.lanes])
        self.b = LoopBuilder(fn.body.block)
        self.batch: dict[SSAValue, SSAValue] = {}
        """The batch loop's ivs, by the original nest's batch ivs."""

    def at(self, operand: int, *tail: SSAValue) -> list[SSAValue]:
        """The index of A (0), B (1) or C (2) at `tail` in the current batch."""
        prefix = self.nest.prefixes[operand]
        return [*(self.batch.get(v, v) for v in prefix), *tail]

    def rewrite(self) -> None:
        nest, b = self.nest, self.b
        b.block = Block()
        if nest.batch:  # the whole scheme once per batch, the batch loop parallel
            ivs, extents = zip(*nest.batch, strict=True)

            def one(new: list[SSAValue]) -> None:
                self.batch = dict(zip(ivs, new, strict=True))
                self._matmul()

            b.parallel(list(extents), one)
        else:
            self._matmul()
        for op in list(b.block.ops):
            op.detach()
            Rewriter.insert_op(op, InsertPoint.before(nest.loop))
        nest.loop.detach()
        nest.loop.erase()

    def _matmul(self) -> None:
        """One (batch's) matmul: packing, panels, remainders."""
        nest, b = self.nest, self.b
        panels = nest.n // self.nr
        tail_vectors = (nest.n - panels * self.nr) // self.lanes
        vector_columns = panels * self.nr + tail_vectors * self.lanes
        if panels:
            source: Callable[[SSAValue, int, SSAValue], SSAValue]
            if self.pack:
                packed, index = self._packed_b(panels)
                self.packed = packed, index

                def from_packed(k: SSAValue, v: int, p: SSAValue) -> SSAValue:
                    return b.add(vector.LoadOp(packed, index(p, k, v), self.vtype))

                source = from_packed
                self.from_packed = from_packed
            else:
                source = self._from_b
            if panels < self.min_panels:
                self._row_parallel(source, panels)
            else:
                b.parallel([panels], lambda ivs: self._panel(ivs[0], source))
        if tail_vectors:
            self._tail(panels * self.nr, tail_vectors, after_others=panels > 0)
        lanes, vtype = self.lanes, self.vtype
        for width in narrow_tail(nest.n - vector_columns, self.lanes):
            # columns short of a vector, in vectors of half or a quarter of the width (8 and
            # 4 channels of an AVX-512 host) where they cover them all; otherwise the
            # original nest computes them (interchange-matmul makes it row updates)
            self.lanes, self.vtype = width, VectorType(nest.element_type, [width])
            self._tail(vector_columns, 1, after_others=vector_columns > 0)
            vector_columns += width
        self.lanes, self.vtype = lanes, vtype
        if vector_columns < nest.n:
            self._scalar_columns(vector_columns)
        if panels and self.pack and isinstance(packed.owner, memref.AllocOp):
            b.add(memref.DeallocOp.get(packed))

    # --- pieces ------------------------------------------------------------------------

    def _tail(self, start: int, nv: int, after_others: bool) -> None:
        """Microkernels over the columns `start .. start + nv * lanes` that no panel holds,
        reading B in place: their row tiles in sequence where columns before them
        (`after_others`) had the parallel loop, else the row tiles are the parallel loop."""
        b = self.b
        j0 = b.index(start)
        if after_others:
            self._row_tiles(j0, nv, j0, self._from_b)
            return
        self._parallel_rows(
            lambda i0, rows: self._k_blocks(
                lambda k: self._microkernel(i0, rows, j0, nv, j0, self._from_b, k)
            )
        )

    def _panel(
        self, p: SSAValue, source: Callable[[SSAValue, int, SSAValue], SSAValue]
    ) -> list[SSAValue]:
        """All row tiles of panel `p`; `source` reads the packed panel by its number, or B
        by the panel's first column."""
        j0, where = self._panel_origin(p)
        return self._row_tiles(j0, self.nr // self.lanes, where, source)

    def _panel_origin(self, p: SSAValue) -> tuple[SSAValue, SSAValue]:
        """Panel `p`'s first column, and what `source` reads it by: the packed panel's
        number, or (unpacked) that first column."""
        j0 = self.b.imul(p, self.nr)
        return j0, p if self.pack else j0

    def _packed_b(
        self, panels: int
    ) -> tuple[SSAValue, Callable[[SSAValue, SSAValue, int], list[SSAValue]]]:
        """B's first `panels * nr` columns packed `[panel][k][nr]`, and the index of vector
        `v` of row `k` of panel `p` in it: packed once per bind by a kernel of its own where
        B is a weight, else by this kernel into a buffer its caller keeps (one per batch
        in a batch matmul), else (a kernel with no single caller) into one it allocates."""
        nest, b = self.nest, self.b
        call = self.callers.only(self.fn)
        if call is None:
            shape = [panels, nest.k, self.nr]
            packed = b.add(memref.AllocOp.get(nest.element_type, ALIGNMENT, shape))

            def own(p: SSAValue, k: SSAValue, v: int) -> list[SSAValue]:
                return [p, k, b.index(v * self.lanes)]

            self._pack_loop(b, panels, self._from_b, packed, own)
            return packed, own
        ivs = [self.batch[iv] for iv, _ in nest.batch]
        shape = [*(e for _, e in nest.batch), panels, nest.k, self.nr]
        b_arg = nest.b if isinstance(nest.b, BlockArgument) else None
        weight = None
        if not nest.batch and b_arg is not None and b_arg.block is self.fn.body.block:
            operand = call.arguments[b_arg.index]
            weight = operand if is_weight(operand, self.callers.module) else None
        # packed weights are what the kernel reads in place of B (minimum traffic, like
        # B), packed activations a copy of B it reads too (scratch)
        attrs = {} if weight is not None else {SCRATCH_ATTR: UnitAttr()}
        mtype = MemRefType(nest.element_type, shape)
        packed, buffer, call = add_kernel_buffer(self.fn, call, mtype, attrs, "packed")
        self.callers.replace(self.fn, call)

        def index(p: SSAValue, k: SSAValue, v: int) -> list[SSAValue]:
            return [*ivs, p, k, b.index(v * self.lanes)]

        if weight is not None:
            self._pack_kernel(panels, weight, buffer, call)
        else:
            self._pack_loop(b, panels, self._from_b, packed, index)
        return packed, index

    def _pack_loop(
        self,
        b: LoopBuilder,
        panels: int,
        load: Callable[[SSAValue, int, SSAValue], SSAValue],
        packed: SSAValue,
        index: Callable[[SSAValue, SSAValue, int], list[SSAValue]],
    ) -> None:
        """`panels` panels of B (`load(k, v, j0)`: vector `v` of row `k` from column `j0`)
        stored in `packed` at `index(p, k, v)`, the panels a parallel loop."""

        def row(p: SSAValue, k: SSAValue) -> list[SSAValue]:
            for v in range(self.nr // self.lanes):
                vec = load(k, v, b.imul(p, self.nr))
                b.add(vector.StoreOp(vec, packed, index(p, k, v)))
            return []

        b.parallel(
            [panels], lambda p: b.for_range(0, self.nest.k, 1, [], lambda k, _: row(p[0], k))
        )

    def _pack_kernel(
        self, panels: int, weight: SSAValue, buffer: SSAValue, call: func.CallOp
    ) -> None:
        """A once-per-bind kernel packing the weight `weight` into `buffer`, called just
        before `call`."""
        name = self.callers.fresh_name(f"{self.fn.sym_name.data}_pack")
        block = Block(arg_types=[weight.type, buffer.type])
        source, target = block.args
        source.name_hint, target.name_hint = "weight", "packed"
        pb = LoopBuilder(block)

        def load(k: SSAValue, v: int, j0: SSAValue) -> SSAValue:
            idx = [k, pb.iadd(j0, v * self.lanes)]
            return pb.add(vector.LoadOp(source, idx, self.vtype))

        self._pack_loop(pb, panels, load, target, lambda p, k, v: [p, k, pb.index(v * self.lanes)])
        block.add_op(func.ReturnOp())
        kernel = func.FuncOp(
            name, ([weight.type, buffer.type], []), Region(block), visibility="private"
        )
        kernel.attributes[KERNEL_ATTR] = UnitAttr()
        kernel.attributes[ONCE_ATTR] = UnitAttr()
        Rewriter.insert_op(kernel, InsertPoint.before(self.fn))
        driver = call.parent_block()
        assert driver is not None
        driver.insert_op_before(func.CallOp(name, [weight, buffer], []), call)

    def _from_b(self, k: SSAValue, v: int, j0: SSAValue) -> SSAValue:
        """Vector `v` of B's row `k` from column `j0` (unpacked)."""
        b = self.b
        return b.add(
            vector.LoadOp(self.nest.b, self.at(1, k, b.iadd(j0, v * self.lanes)), self.vtype)
        )

    def _row_tiles(
        self,
        j0: SSAValue,
        nv: int,
        panel: SSAValue,
        source: Callable[[SSAValue, int, SSAValue], SSAValue],
    ) -> list[SSAValue]:
        """Microkernels over all rows for the columns `j0 .. j0 + nv * lanes`, one block of
        `kc` k steps at a time."""
        nest, b = self.nest, self.b
        main = nest.m // self.mr * self.mr

        # the last nv whole tiles bring the next block into L2 while they compute (see
        # `_microkernel`), late enough that the rows of A streaming through L2 for the other
        # tiles do not evict it first; the others do not prefetch
        fetching = self.prefetch and source is self.from_packed
        first_fetch = max(0, main - nv * self.mr) if fetching else main

        def rows(k: _KBlock) -> list[SSAValue]:
            for lo, hi, fetch in ((0, first_fetch, False), (first_fetch, main, True)):
                if hi > lo:
                    start = b.index(lo) if fetch else None

                    def tile(i0: SSAValue, _: list[SSAValue], start=start) -> list[SSAValue]:
                        return self._microkernel(i0, self.mr, j0, nv, panel, source, k, start)

                    b.for_range(lo, hi, self.mr, [], tile)
            if main < nest.m:
                self._microkernel(b.index(main), nest.m - main, j0, nv, panel, source, k)
            return []

        return self._k_blocks(rows)

    def _k_blocks(self, body: Callable[[_KBlock], list[SSAValue]]) -> list[SSAValue]:
        """`body` for each block of `kc` k steps, in order (once, over all of K, unblocked)."""
        nest, b = self.nest, self.b
        blocks, rest = divmod(nest.k, self.kc)
        if blocks == 1 and not rest:
            return body(_KBlock(0, nest.k, True, True))

        def block(kb: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            first = b.add(arith.CmpiOp(kb, b.index(0), "eq"))
            last = False if rest else b.add(arith.CmpiOp(kb, b.index(blocks - 1), "eq"))
            return body(_KBlock(b.imul(kb, self.kc), self.kc, first, last))

        b.for_range(0, blocks, 1, [], block)
        if rest:
            body(_KBlock(nest.k - rest, rest, False, True))
        return []

    def _row_parallel(
        self, source: Callable[[SSAValue, int, SSAValue], SSAValue], panels: int
    ) -> None:
        """The panels' microkernels with the row tiles as the parallel loop: for matmuls with
        too few panels to share among threads (a 64-channel convolution is one panel)."""
        b = self.b
        nv = self.nr // self.lanes

        def tile(i0: SSAValue, rows: int) -> None:
            def panel(p: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
                j0, where = self._panel_origin(p)
                return self._k_blocks(
                    lambda k: self._microkernel(i0, rows, j0, nv, where, source, k)
                )

            b.for_range(0, panels, 1, [], panel)

        self._parallel_rows(tile)

    def _parallel_rows(self, tile: Callable[[SSAValue, int], object]) -> None:
        """`tile(i0, rows)` for every row tile, the whole tiles as a parallel loop."""
        b = self.b
        tiles, rest = divmod(self.nest.m, self.mr)
        if tiles:
            b.parallel([tiles], lambda t: tile(b.imul(t[0], self.mr), self.mr))
        if rest:
            tile(b.index(tiles * self.mr), rest)

    def _microkernel(
        self,
        i0: SSAValue,
        rows: int,
        j0: SSAValue,
        nv: int,
        panel: SSAValue,
        source: Callable[[SSAValue, int, SSAValue], SSAValue],
        k_block: _KBlock,
        fetch_from: SSAValue | None = None,
    ) -> list[SSAValue]:
        """C[i0:i0+rows, j0:j0+nv*lanes] = epilogue(init + A[i0:, :] @ B[:, j0:]), the tile
        held in rows * nv vector registers; of the sum, the k steps of `k_block`, from init
        in the first block and continuing the partial sum C holds in the others, the
        epilogue after the last. With `fetch_from` (the first row of the prefetching tiles),
        each k step also prefetches one cache line of the packed block after this one."""
        nest, b = self.nest, self.b
        init = b.add(vector.BroadcastOp(b.float(nest.init, nest.element_type), self.vtype))
        row_index = [b.iadd(i0, r) for r in range(rows)]
        cols = [b.iadd(j0, v * self.lanes) for v in range(nv)]
        inits = [init] * (rows * nv)
        if k_block.first is not True:
            held = [
                b.add(vector.LoadOp(nest.c, self.at(2, row_index[r], cols[v]), self.vtype))
                for r in range(rows)
                for v in range(nv)
            ]
            inits = (  # C is garbage before the first block: select, not arithmetic
                held
                if k_block.first is False
                else [b.add(arith.SelectOp(k_block.first, init, h)) for h in held]
            )

        ahead = None
        if fetch_from is not None and self.packed is not None:
            # the block after this one (the next k block, or the next panel: packed B is
            # contiguous), brought to L2 while this one is computed, a cache line a k step:
            # the t-th prefetching tile takes line t of each row of it
            tile = b.add(arith.DivUIOp(b.add(arith.SubiOp(i0, fetch_from)), b.index(self.mr)))
            line = b.imul(b.add(arith.RemUIOp(tile, b.index(nv))), self.lanes)
            ahead = self.packed, line

        def step(kk: SSAValue, accs: list[SSAValue]) -> list[SSAValue]:
            k = b.iadd(kk, k_block.start)
            if ahead is not None:
                (packed, index), line = ahead
                *head, _ = index(panel, b.iadd(k, k_block.length), 0)
                b.add(PrefetchOp(packed, [*head, line], locality=2))
            bs = [source(k, v, panel) for v in range(nv)]
            out = []
            for r in range(rows):
                if nest.a_gather:
                    a_index = nest.a_index(row_index[r], k, b.add)
                else:
                    a_index = self.at(0, row_index[r], k)
                a = b.add(memref.LoadOp.get(nest.a, a_index))
                a = b.add(vector.BroadcastOp(a, self.vtype))
                out += [b.add(vector.FMAOp(a, bs[v], accs[r * nv + v])) for v in range(nv)]
            return out

        accs = b.for_range(0, k_block.length, 1, inits, step)
        for r in range(rows):
            for v in range(nv):
                b.add(vector.StoreOp(accs[r * nv + v], nest.c, self.at(2, row_index[r], cols[v])))
        if nest.trivial_epilogue:
            return []
        if k_block.last is True:
            self._epilogue(i0, rows, j0, nv * self.lanes)
            return []
        if k_block.last is False:
            return []
        outer, b.block = b.block, Block()
        self._epilogue(i0, rows, j0, nv * self.lanes)
        b.block.add_op(scf.YieldOp())
        then, b.block = b.block, outer
        b.add(scf.IfOp(k_block.last, [], Region(then)))
        return []

    def _epilogue(self, i0: SSAValue, rows: int, j0: SSAValue, cols: int) -> None:
        """The nest's epilogue over a stored tile, reading the accumulator back from C."""
        nest, b = self.nest, self.b

        def point(ivs: list[SSAValue], _: list[SSAValue]) -> list[SSAValue]:
            i, j = b.add(arith.AddiOp(i0, ivs[0])), b.add(arith.AddiOp(j0, ivs[1]))
            acc = b.add(memref.LoadOp.get(nest.c, self.at(2, i, j)))
            mapping = {**self.batch, nest.i: i, nest.j: j, nest.acc: acc}
            for op in nest.epilogue:
                b.add(op.clone(value_mapper=mapping))
            return []

        b.for_nest([rows, cols], [], point)

    def _scalar_columns(self, start: int) -> None:
        """The original nest over columns `start .. n`, for those no vector covers."""
        nest, b = self.nest, self.b
        loop = nest.loop
        if not nest.batch:
            lbs = [b.index(0), b.index(start)]
            b.add(scf.ParallelOp(lbs, list(loop.upperBound), list(loop.step), loop.body.clone()))
            return

        def point(ivs: list[SSAValue]) -> None:
            mapping = {**self.batch, nest.i: ivs[0], nest.j: b.iadd(ivs[1], start)}
            for op in list(loop.body.block.ops)[:-1]:  # all but scf.reduce
                b.add(op.clone(value_mapper=mapping))

        b.parallel([nest.m, nest.n - start], point)
