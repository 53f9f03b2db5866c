"""map-to-gpu: loop-level kernels become GPU kernels, with their launch configuration in the IR.

Input: a module after `lower-graph-to-loops`. Each kernel function (`irkit.kernel`) is a list
of nests: `scf.parallel` nests, or runs of plain ops (a nest of rank 0), run in order. Output:
kernel functions whose bodies use `gpu.block_id x`, `gpu.thread_id x` and `gpu.barrier`, each
carrying `irkit.launch = {grid = array<i64: G, 1, 1>, block = array<i64: T, 1, 1>,
mapping = "..."}`; shared memory is a `memref.global` in address space 3 (NVVM's shared,
"workgroup", space), one instance per block. Everything else stays upstream
(func, scf, arith, math, memref), so a real `mlir-opt` still parses this level.

Two mappings:

- **rows**: one block per row, for a kernel whose nests share their leading (row) extents and
  contain a reduction: softmax, layer_norm, a sum over an axis. A reduction loop
  (`scf.for` with one accumulator, combined by add/mul/max/min from its identity) is strided
  over the block's threads; partial results meet by an xor butterfly of `gpu.shuffle`
  within each warp and one exchange of the warps' totals through shared memory (or, with
  `shuffle=false`, by a shared-memory tree with a barrier per level). Every thread runs
  what follows the loop, the stores only thread 0, and the nests after it use the stored
  value from a register (`forward`; with `forward=false` thread 0 runs all of it and the
  others read the statistic back). Elementwise nests stride their columns over the
  threads. Nests are separated by barriers. The mapping is used only when
  it is *proved* legal: every access to a buffer the kernel writes is evaluated exactly over
  the iteration domain (static shapes make that finite), and each element must be written
  and read by one row only. Otherwise:
- **flat**: each nest becomes its own launch (a kernel with several nests becomes `_p0`,
  `_p1`, ... called in order), one thread per point of the parallel domain, inner loops
  sequential in the thread. Always legal: `scf.parallel` iterations are independent.

The pass is a required lowering for the CUDA backend (not an optimization): it picks the
naive mapping; tiling and shared-memory promotion are separate, optional passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, cast

from xdsl.context import Context
from xdsl.dialects import arith, func, gpu, memref, scf
from xdsl.dialects.builtin import (
    DenseArrayBase,
    DictionaryAttr,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from irkit.dialects.warp import SHUFFLE_TYPES, ShuffleOp
from irkit.errors import require
from irkit.loops import (
    KERNEL_ATTR,
    LAUNCH_ATTR,
    combiner,
    constant_value,
    require_loop_level,
    shared_buffer,
)
from irkit.loops.costs import count_flops
from irkit.loops.rows import Nest, nests_of, row_prefixes, rows_legal
from irkit.passes.loop_builder import LoopBuilder

INDEX = IndexType()
I32 = IntegerType(32)
WARP = 32
RESIDENT_THREADS = 2048
"""Threads one multiprocessor holds at once (sm_80 and sm_90)."""
X = gpu.DimensionAttr(gpu.DimensionEnum.X)

# --- building ------------------------------------------------------------------------------


class _Constants(LoopBuilder):
    """Constants of one kernel, at the top of its entry block (LoopBuilder's placement and
    caching), starting from clones of the original kernel's constants."""

    def adopt(self, op: arith.ConstantOp) -> SSAValue:
        """Take `op` (a clone of the old kernel's constant) as the constant for its value;
        returns the kernel's constant of that value (an earlier one where two of the old
        kernel's constants are equal, e.g. a loop bound `0 : index` beside `%c0`)."""
        value, t = constant_value(op.result), op.result.type
        key: tuple[str, Attribute]
        if isinstance(t, IndexType):
            key = (f"i{value}", t)
        elif isinstance(op.value, FloatAttr) and value is not None:
            key = (f"f{float(value)!r}", t)
        else:
            key = (repr(op.value), t)
        return self._constant(key, lambda: op)

    def i32(self, n: int) -> SSAValue:
        """An i32 constant (a shuffle's offset and width)."""
        return self._constant((f"i{n}", I32), lambda: arith.ConstantOp(IntegerAttr(n, I32)))


class GpuBuilder:
    """Appends ops to a block; index arithmetic with constants folded."""

    def __init__(self, block: Block | _Before, constants: _Constants):
        self.block = block
        self.constants = constants

    def add(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0] if op.results else None  # type: ignore[return-value]

    def index(self, n: int) -> SSAValue:
        return self.constants.index(n)

    def i32(self, n: int) -> SSAValue:
        return self.constants.i32(n)

    def binary(
        self, cls: Callable[[SSAValue, SSAValue], Operation], a: SSAValue, b: int
    ) -> SSAValue:
        return self.add(cls(a, self.index(b)))

    def iadd(self, a: SSAValue, b: int) -> SSAValue:
        return a if b == 0 else self.binary(arith.AddiOp, a, b)

    def delinearize(self, v: SSAValue, extents: Sequence[int]) -> list[SSAValue]:
        """Row-major indices of linear `v` (known to be < prod(extents))."""
        out = []
        stride = math.prod(extents)
        outermost = True
        for e in extents:
            stride //= e
            if e == 1:
                out.append(self.index(0))
                continue
            q = v if stride == 1 else self.binary(arith.DivUIOp, v, stride)
            out.append(q if outermost else self.binary(arith.RemUIOp, q, e))
            outermost = False
        return out

    def for_loop(
        self,
        trips: int,
        inits: list[SSAValue],
        body: Callable[[GpuBuilder, SSAValue, list[SSAValue]], list[SSAValue]],
    ) -> list[SSAValue]:
        """`scf.for iv = 0 to trips` carrying `inits`, its body built by `body(builder, iv,
        carried)`; returns the loop's results."""
        block = Block(arg_types=[self.index(0).type, *(v.type for v in inits)])
        inner = GpuBuilder(block, self.constants)
        iv, *carried = block.args
        block.add_op(scf.YieldOp(*body(inner, iv, list(carried))))
        loop = scf.ForOp(self.index(0), self.index(trips), self.index(1), inits, block)
        self.add(loop)
        return list(loop.results)

    def guarded(self, cond: SSAValue | None) -> GpuBuilder:
        """A builder inside `scf.if cond` (or this one, when there is no condition)."""
        if cond is None:
            return self
        inner = Block()
        inner.add_op(scf.YieldOp())
        self.add(scf.IfOp(cond, [], Region(inner)))
        return GpuBuilder(_Before(inner), self.constants)

    def branches(self, cond: SSAValue) -> tuple[GpuBuilder, GpuBuilder]:
        """Builders inside `scf.if cond` and inside its `else`."""
        then, other = Block(), Block()
        then.add_op(scf.YieldOp())
        other.add_op(scf.YieldOp())
        self.add(scf.IfOp(cond, [], Region(then), Region(other)))
        return GpuBuilder(_Before(then), self.constants), GpuBuilder(_Before(other), self.constants)

    def clone(self, ops: Sequence[Operation], mapping: dict[SSAValue, SSAValue]) -> None:
        for op in ops:
            self.add(op.clone(value_mapper=mapping))


class _Before:
    """A block view that appends before the block's terminator."""

    def __init__(self, block: Block):
        self.real = block

    def add_op(self, op: Operation) -> None:
        terminator = self.real.last_op
        assert terminator is not None
        self.real.insert_op_before(op, terminator)


def new_kernel(
    fn: func.FuncOp, name: str, constants: Sequence[arith.ConstantOp]
) -> tuple[func.FuncOp, GpuBuilder, dict[SSAValue, SSAValue]]:
    """An empty kernel with `fn`'s signature and attributes and its constants cloned; a
    builder at its end and the old->new value map."""
    block = Block(arg_types=fn.function_type.inputs.data)
    mapping: dict[SSAValue, SSAValue] = dict(zip(fn.body.block.args, block.args, strict=True))
    for old, new in zip(fn.body.block.args, block.args, strict=True):
        new.name_hint = old.name_hint
    table = _Constants(block)
    for c in constants:  # uses of a duplicate go to the constant kept (the clone is dropped)
        mapping[c.result] = table.adopt(c.clone(value_mapper=mapping))
    kernel = func.FuncOp(
        name,
        fn.function_type,
        Region(block),
        visibility="private",
        arg_attrs=fn.arg_attrs,
    )
    kernel.attributes.update(fn.attributes)  # irkit.kernel, irkit.once
    kernel.attributes[KERNEL_ATTR] = UnitAttr()
    return kernel, GpuBuilder(block, table), mapping


def _launch(grid: int, block: int, mapping: str, nests: Sequence[Nest]) -> DictionaryAttr:
    """The launch attribute; `flops` is the work of the loop-level nests the kernel came from
    (the mapping adds index arithmetic and a reduction tree, which are not model FLOPs)."""
    flops = sum(count_flops(op) for n in nests for op in n.ops)
    return launch_attr(grid, block, mapping, flops)


def launch_attr(
    grid: int,
    block: int,
    mapping: str,
    flops: int,
    dynamic_shared: int = 0,
    min_blocks: int = 0,
    cluster: int = 1,
) -> DictionaryAttr:
    """`irkit.launch` for a one-dimensional launch of `grid` blocks of `block` threads with
    `dynamic_shared` bytes of dynamic shared memory each (irkit's kernels declare their shared
    buffers statically, as `memref.global`s in address space 3, so theirs is 0). `min_blocks`
    (where > 0): blocks each multiprocessor must be able to hold at once, which bounds the
    registers a thread may use (CUDA's `__launch_bounds__(block, min_blocks)`). `cluster`
    (where > 1): the blocks run in clusters of that many, consecutive along x (CUDA's
    `__cluster_dims__`; `grid` a multiple of it)."""
    fields: dict[str, Attribute] = {
        "grid": DenseArrayBase.from_list(i64, [grid, 1, 1]),
        "block": DenseArrayBase.from_list(i64, [block, 1, 1]),
        "shared": IntegerAttr(dynamic_shared, i64),
        "mapping": StringAttr(mapping),
        "flops": IntegerAttr(flops, i64),
    }
    if min_blocks > 0:
        fields["min_blocks"] = IntegerAttr(min_blocks, i64)
    if cluster > 1:
        fields["cluster"] = IntegerAttr(cluster, i64)
    return DictionaryAttr(fields)


def _threads(n: int, limit: int) -> int:
    """A block size for `n` units of work: a power of two from 32 up to `limit`."""
    return max(32, min(limit, 1 << max(0, n - 1).bit_length()))


def _flat_geometry(points: int, per_thread: int, limit: int) -> tuple[int, int]:
    """Threads per block and blocks of a flat launch over `points` at `per_thread` each."""
    threads = min(limit, _threads(-(-points // per_thread), limit))
    return threads, -(-points // (threads * per_thread))


def _flat_kernel(
    fn: func.FuncOp,
    name: str,
    constants: Sequence[arith.ConstantOp],
    nest: Nest,
    limit: int,
    per_thread: int = 1,
) -> func.FuncOp:
    n = nest.points
    f = per_thread if nest.extents and coarsenable(nest) else 1
    threads, grid = _flat_geometry(n, f, limit) if nest.extents else (1, n)
    kernel, b, mapping = new_kernel(fn, name, constants)
    if nest.extents:
        bid = b.add(gpu.BlockIdOp(X))
        tid = b.add(gpu.ThreadIdOp(X))
        i = b.add(arith.AddiOp(b.binary(arith.MuliOp, bid, threads * f), tid))
        if f == 1:
            cond = None
            if grid * threads != n:
                cond = b.add(arith.CmpiOp(i, b.index(n), "ult"))
            inner = b.guarded(cond)
            mapping.update(zip(nest.ivs, inner.delinearize(i, nest.extents), strict=True))
            inner.clone(nest.body, mapping)
        else:
            _coarsened(b, i, threads, f, nest, mapping, exact=grid * threads * f == n)
    else:
        b.clone(nest.body, mapping)
    b.add(func.ReturnOp())
    mapped = "flat" if f == 1 else f"flat x{f}"
    kernel.attributes[LAUNCH_ATTR] = _launch(grid, threads, mapped, [nest])
    return kernel


def coarsenable(nest: Nest) -> bool:
    """Whether a flat nest's points can be computed several to a thread with their ops
    interleaved: a body of plain ops (no loops or conditionals inside)."""
    return all(not op.regions for op in nest.body)


def _coarsened(
    b: GpuBuilder, first: SSAValue, threads: int, f: int, nest: Nest, mapping, exact: bool
) -> None:
    """Points first, first + threads, ... (f of them) in one thread, each op of the body
    cloned for every point before the next op, so the points' loads issue together. Where
    the launch overshoots the domain, a point past its end reads at point 0 (in bounds, its
    values unused) and its stores are skipped."""
    n = nest.points
    maps = []
    valid: list[SSAValue | None] = []
    for k in range(f):
        point = b.iadd(first, k * threads)
        ok = None if exact else b.add(arith.CmpiOp(point, b.index(n), "ult"))
        safe = point if ok is None else b.add(arith.SelectOp(ok, point, b.index(0)))
        m = dict(mapping)
        m.update(zip(nest.ivs, b.delinearize(safe, nest.extents), strict=True))
        maps.append(m)
        valid.append(ok)
    for op in nest.body:
        for m, ok in zip(maps, valid, strict=True):
            if isinstance(op, memref.StoreOp) and ok is not None:
                b.guarded(ok).add(op.clone(value_mapper=m))
            else:
                b.add(op.clone(value_mapper=m))


@dataclass
class _RowsKernel:
    """Builds one block-per-row kernel (see the module docstring)."""

    threads: int
    shared: SSAValue | None = None
    shuffle: bool = True
    """Reductions meet by warp shuffles (`gpu.shuffle xor`) and one shared-memory exchange
    between the warps, instead of a shared-memory tree with a barrier per level."""
    forward: bool = True
    """Every thread runs a reduction's epilogue; only its stores are thread 0's, and the
    values they store are forwarded in registers to the later nests' loads of them."""
    forwarded: list[memref.StoreOp] = field(default_factory=list)
    lane_warp: tuple[SSAValue, SSAValue] | None = None

    def columns(self, b: GpuBuilder, tid: SSAValue, nest: Nest, p: int, mapping) -> None:
        cols = nest.extents[p:]
        n = math.prod(cols)

        def body(inner: GpuBuilder, c: SSAValue) -> None:
            m = dict(mapping)
            m.update(zip(nest.ivs[p:], inner.delinearize(c, cols), strict=True))
            inner.clone(nest.body, m)

        self._strided(b, tid, n, body)

    def _strided(self, b: GpuBuilder, tid: SSAValue, n: int, body) -> None:
        """`body(builder, c)` for c = tid, tid + T, ... < n (guarded only where needed)."""
        t = self.threads
        if n <= t:
            body(b.guarded(b.add(arith.CmpiOp(tid, b.index(n), "ult")) if n < t else None), tid)
            return
        loop_block = Block(arg_types=[INDEX])
        lb = GpuBuilder(loop_block, b.constants)
        c = lb.add(arith.AddiOp(loop_block.args[0], tid))
        cond = lb.add(arith.CmpiOp(c, b.index(n), "ult")) if n % t else None
        body(lb.guarded(cond), c)
        lb.add(scf.YieldOp())
        b.add(scf.ForOp(b.index(0), b.index(n), b.index(t), [], loop_block))

    def reduction(self, b: GpuBuilder, tid: SSAValue, nest: Nest, mapping) -> None:
        loop = nest.reduction
        assert loop is not None
        at = nest.body.index(loop)
        b.clone(nest.body[:at], mapping)
        comb = combiner(loop)
        assert comb is not None
        combine = cast(Callable[[SSAValue, SSAValue], Operation], type(comb))
        acc_type = loop.iter_args[0].type
        init = mapping.get(loop.iter_args[0], loop.iter_args[0])
        n = int(constant_value(loop.ub))  # type: ignore[arg-type]
        iv, acc = loop.body.block.args
        loop_ops = [o for o in loop.body.block.ops if not isinstance(o, scf.YieldOp)]
        yielded = loop.body.block.last_op.operands[0]  # type: ignore[union-attr]
        t = self.threads

        def step(inner: GpuBuilder, k: SSAValue, current: SSAValue) -> SSAValue:
            """current combined with iteration k's value, when k < n."""
            then = Block()
            tb = GpuBuilder(then, b.constants)
            m = dict(mapping)
            m[iv], m[acc] = k, current
            tb.clone(loop_ops, m)
            then.add_op(scf.YieldOp(m[yielded]))
            if n % t == 0 and n >= t:
                for op in list(then.ops)[:-1]:
                    op.detach()
                    inner.add(op)
                return m[yielded]
            keep = Block()
            keep.add_op(scf.YieldOp(current))
            cond = inner.add(arith.CmpiOp(k, inner.index(n), "ult"))
            return inner.add(scf.IfOp(cond, [acc_type], Region(then), Region(keep)))

        if n <= t:
            partial = step(b, tid, init)
        else:
            body = Block(arg_types=[INDEX, acc_type])
            lb = GpuBuilder(body, b.constants)
            k = lb.add(arith.AddiOp(body.args[0], tid))
            lb.add(scf.YieldOp(step(lb, k, body.args[1])))
            partial = b.add(scf.ForOp(b.index(0), b.index(n), b.index(t), [init], body))

        if self.shuffles(acc_type):
            total = self._warp_total(b, tid, partial, combine)
        else:
            total = self._tree_total(b, tid, partial, combine)
        mapping[loop.results[0]] = total
        self._epilogue(b, tid, nest.body[at + 1 :], mapping)

    def shuffles(self, acc_type: Attribute) -> bool:
        """Whether a reduction accumulating in `acc_type` meets by warp shuffles."""
        return self.shuffle and isinstance(acc_type, SHUFFLE_TYPES)

    def _tree_total(self, b: GpuBuilder, tid: SSAValue, partial: SSAValue, combine) -> SSAValue:
        """The threads' partials combined by a shared-memory tree, a barrier per level; every
        thread reads the total."""
        assert self.shared is not None
        b.add(memref.StoreOp.get(partial, self.shared, [tid]))
        b.add(gpu.BarrierOp())
        s = self.threads // 2
        while s >= 1:
            inner = b.guarded(b.add(arith.CmpiOp(tid, b.index(s), "ult")))
            mine = inner.add(memref.LoadOp.get(self.shared, [tid]))
            other = inner.add(
                memref.LoadOp.get(self.shared, [inner.add(arith.AddiOp(tid, b.index(s)))])
            )
            inner.add(memref.StoreOp.get(inner.add(combine(mine, other)), self.shared, [tid]))
            b.add(gpu.BarrierOp())
            s //= 2
        total = b.add(memref.LoadOp.get(self.shared, [b.index(0)]))
        b.add(gpu.BarrierOp())  # the next reduction overwrites shared memory
        return total

    def _warp_total(self, b: GpuBuilder, tid: SSAValue, partial: SSAValue, combine) -> SSAValue:
        """The threads' partials combined by an xor butterfly within each warp (every lane
        ends with its warp's total, bit-identical across lanes: each step combines the same
        two values in either order), then, for several warps, each warp's total through
        shared memory (one barrier) and a butterfly over them: lane l reads warp l % W's,
        so every aligned group of W lanes holds each warp's total once."""

        def butterfly(v: SSAValue, first: int) -> SSAValue:
            offset = first
            while offset >= 1:
                other = b.add(ShuffleOp(v, b.i32(offset), b.i32(WARP)))
                v = b.add(combine(v, other))
                offset //= 2
            return v

        total = butterfly(partial, WARP // 2)
        warps = self.threads // WARP
        if warps == 1:
            return total
        assert self.shared is not None
        if self.lane_warp is None:  # once, at the kernel's top level, for every reduction
            self.lane_warp = (
                b.binary(arith.RemUIOp, tid, WARP),
                b.binary(arith.DivUIOp, tid, WARP),
            )
        lane, warp = self.lane_warp
        leader = b.guarded(b.add(arith.CmpiOp(lane, b.index(0), "eq")))
        leader.add(memref.StoreOp.get(total, self.shared, [warp]))
        b.add(gpu.BarrierOp())
        mine = b.add(memref.LoadOp.get(self.shared, [b.binary(arith.RemUIOp, tid, warps)]))
        # no barrier after: a nest's one reduction is followed by the barrier between nests
        # before the next reduction writes shared memory
        return butterfly(mine, warps // 2)

    def _epilogue(self, b: GpuBuilder, tid: SSAValue, ops: Sequence[Operation], mapping) -> None:
        """What follows the reduction loop in the row (the statistic's store): thread 0's.
        With `forward`, and where the epilogue is plain ops that read nothing it writes,
        every thread computes it and only the stores are thread 0's (recorded in
        `forwarded`); otherwise thread 0 runs all of it."""
        is_first = b.add(arith.CmpiOp(tid, b.index(0), "eq"))
        stores = [op for op in ops if isinstance(op, memref.StoreOp)]
        written = {op.memref for op in stores}
        plain = all(
            not op.regions and not (isinstance(op, memref.LoadOp) and op.memref in written)
            for op in ops
        )
        if not (self.forward and plain):
            b.guarded(is_first).clone(ops, mapping)
            return
        b.clone([op for op in ops if not isinstance(op, memref.StoreOp)], mapping)
        first = b.guarded(is_first)
        for op in stores:
            store = op.clone(value_mapper=mapping)
            first.add(store)
            self.forwarded.append(store)


def forward_stores(kernel: func.FuncOp, stores: Sequence[memref.StoreOp]) -> int:
    """Each load after one of `stores` (in program order) of the same buffer at the same
    index values takes the stored value instead, where that store is the only one to its
    buffer in the kernel: a rows kernel's statistics, stored by thread 0 and read by every
    thread of the row (the rows proof gives each element one row, so no other block writes
    it). Returns the loads replaced."""
    writers: dict[SSAValue, int] = {}
    for op in kernel.walk():
        if isinstance(op, memref.StoreOp):
            writers[op.memref] = writers.get(op.memref, 0) + 1
    live: dict[tuple[SSAValue, tuple[SSAValue, ...]], SSAValue] = {}
    pending = {id(s) for s in stores if writers[s.memref] == 1}
    replaced = []
    for op in kernel.walk():
        if isinstance(op, memref.StoreOp) and id(op) in pending:
            live[(op.memref, tuple(op.indices))] = op.value
        elif isinstance(op, memref.LoadOp):
            value = live.get((op.memref, tuple(op.indices)))
            if value is not None and value.type == op.res.type:
                replaced.append((op, value))
    for load, value in replaced:
        load.res.replace_all_uses_with(value)
        load.detach()
        load.erase()
    return len(replaced)


def _accumulator_types(nests: Sequence[Nest]) -> set:
    """The types the nests' shareable reductions accumulate in (an f32 sum fused with an f64
    layer_norm has two: such a kernel is mapped flat)."""
    return {n.reduction.iter_args[0].type for n in nests if n.reduction is not None}


def _rows_kernel(
    fn: func.FuncOp,
    constants: Sequence[arith.ConstantOp],
    nests: Sequence[Nest],
    prefixes: Sequence[int],
    limit: int,
    module: ModuleOp,
    row_items: int = 1,
    shuffle: bool = True,
    forward: bool = True,
) -> func.FuncOp:
    name = fn.sym_name.data
    rows = math.prod(nests[0].extents[: prefixes[0]])
    work = [
        int(constant_value(n.reduction.ub)) if n.reduction is not None else math.prod(n.extents[p:])  # type: ignore[arg-type]
        for n, p in zip(nests, prefixes, strict=True)
    ]
    threads = _threads(-(-max(work) // row_items), limit)
    kernel, b, mapping = new_kernel(fn, name, constants)
    builder = _RowsKernel(threads, shuffle=shuffle, forward=forward)
    bid = b.add(gpu.BlockIdOp(X))
    tid = b.add(gpu.ThreadIdOp(X))
    (acc_type,) = _accumulator_types(nests)  # one: checked before choosing this mapping
    # a tree holds a partial per thread; shuffles exchange one total per warp (none for one)
    slots = threads // WARP if builder.shuffles(acc_type) else threads
    if slots > 1:
        builder.shared = b.add(shared_buffer(module, fn, f"{name}_smem", acc_type, [slots]))
    row_indices: dict[tuple[int, ...], list[SSAValue]] = {}
    for k, (nest, p) in enumerate(zip(nests, prefixes, strict=True)):
        # one set of row indices for every nest of the same row extents: a statistic's
        # store and its loads in later nests then index with the same values
        extents = tuple(nest.extents[:p])
        if extents not in row_indices:
            row_indices[extents] = b.delinearize(bid, extents)
        mapping.update(zip(nest.ivs[:p], row_indices[extents], strict=True))
        if nest.reduction is not None:
            builder.reduction(b, tid, nest, mapping)
        else:
            builder.columns(b, tid, nest, p, mapping)
        if k + 1 < len(nests):
            b.add(gpu.BarrierOp())
    b.add(func.ReturnOp())
    forward_stores(kernel, builder.forwarded)
    kernel.attributes[LAUNCH_ATTR] = _launch(rows, threads, "rows", nests)
    return kernel


def map_kernel(
    fn: func.FuncOp,
    module: ModuleOp,
    block_size: int = 256,
    rows: bool = True,
    per_thread: int = 1,
    row_items: int = 1,
    shuffle: bool = True,
    forward: bool = True,
) -> list[func.FuncOp]:
    """GPU kernels for one loop-level kernel, in launch order (not yet inserted).
    `per_thread`: points of a flat nest each thread computes (see `gpu-coarsen`);
    `row_items`: fewest columns per thread in a rows kernel; `shuffle` and `forward`: a rows
    kernel's reductions by warp shuffles, and its statistics forwarded in registers
    (`_RowsKernel`)."""
    constants, nests = nests_of(fn, "map-to-gpu")
    if rows and len(_accumulator_types(nests)) == 1:  # one shared buffer serves every tree
        prefixes = row_prefixes(nests)
        if prefixes is not None and rows_legal(nests, prefixes):
            return [
                _rows_kernel(
                    fn, constants, nests, prefixes, block_size, module, row_items, shuffle, forward
                )
            ]
    name = fn.sym_name.data
    if len(nests) == 1:
        return [_flat_kernel(fn, name, constants, nests[0], block_size, per_thread)]
    return [
        _flat_kernel(fn, f"{name}_p{k}", constants, nest, block_size, per_thread)
        for k, nest in enumerate(nests)
    ]


def replace_kernels(op: ModuleOp, replaced: dict[str, list[func.FuncOp]]) -> None:
    """Put each kernel's GPU kernels in its place: inserted before it, every call of it
    becoming calls of them in order, and the old kernel erased."""
    old = {f.sym_name.data: f for f in op.ops if isinstance(f, func.FuncOp)}
    for name, parts in replaced.items():
        for part in parts:
            op.body.block.insert_op_before(part, old[name])
    for call in [c for c in op.walk() if isinstance(c, func.CallOp)]:
        mapped = replaced.get(call.callee.root_reference.data)
        if mapped is None:
            continue
        for part in mapped:
            Rewriter.insert_op(
                func.CallOp(part.sym_name.data, list(call.arguments), []), InsertPoint.before(call)
            )
        call.detach()
        call.erase()
    for name in replaced:
        old[name].detach()
        old[name].erase()


def unmapped_kernels(op: ModuleOp) -> list[func.FuncOp]:
    """The module's loop-level kernels that no pass has given a launch yet."""
    return [
        f
        for f in op.ops
        if isinstance(f, func.FuncOp)
        and KERNEL_ATTR in f.attributes
        and LAUNCH_ATTR not in f.attributes
    ]


@dataclass(frozen=True)
class MapToGpuPass(ModulePass):
    """Map every loop-level kernel onto grid, block and thread indices (see the module
    docstring). Required on the CUDA path; its options choose among legal mappings.

    Options: `block-size` (most threads per block, a power of two from 32 to 1024),
    `rows` (block-per-row mapping of reductions where legal; false maps everything flat),
    `row-items` (a rows kernel gets the fewest threads, a power of two from 32, that give
    each at most this many of a row's columns, up to `block-size`). Measured on an H200
    (gpu_targets, 2026-11-26, each against the others in the same rounds): layer_norm over
    16384 rows of 1024 columns ran at 11% of copy bandwidth with 1024 threads a row, 45% with
    256 (4 columns each), 68% with 128 (8 each), 72% with 64 (16 each); softmax over 4096
    rows of 4096 columns at 86% with 256 (16 each) and 55% with 128 (32 each). 16 picks the
    best measured of both. Those runs had the shared-memory tree and statistics read back
    from global memory: a block of 1024 threads crossed 10 barriers per reduction, 64 threads
    6, which is how the thread count weighed so much.

    `shuffle` (a rows kernel's reductions meet by `gpu.shuffle xor` within each warp, then
    one shared-memory exchange between the warps: one barrier per reduction instead of one
    per tree level, and one shared slot per warp instead of per thread) and `forward` (every
    thread runs a reduction's epilogue, only its stores stay thread 0's, and later nests
    take the statistic from a register instead of reading it back from global memory after
    the barrier, an L2 round trip per statistic per row). Both are what fast row kernels
    do (warp-shuffle reductions, statistics in registers); on by default. On an H200
    (gpu_targets at dbb5b27, against the tree in the same rounds): layer_norm 1.12x (72.4% ->
    81.3% of copy bandwidth; `forward` alone adds nothing there), softmax 1.03x (88.0%). With
    shuffles, layer_norm ran 1.06x faster at row-items=8 than at 16 in two runs (86% of copy
    bandwidth) and 0.93x at 4; 16 stays the default until softmax, which the option also
    sets, is timed at 8 (`softmax_row_items8`)."""

    name = "map-to-gpu"

    block_size: int = 256
    rows: bool = True
    row_items: int = 16
    shuffle: bool = True
    forward: bool = True

    def check_options(self) -> None:
        b = self.block_size
        require(
            32 <= b <= 1024 and not b & (b - 1),
            "block-size",
            b,
            "must be a power of two from 32 to 1024",
        )
        require(1 <= self.row_items <= 1024, "row-items", self.row_items, "must be from 1 to 1024")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_loop_level(op, "map-to-gpu")
        mapped = {
            fn.sym_name.data: map_kernel(
                fn,
                op,
                self.block_size,
                self.rows,
                row_items=self.row_items,
                shuffle=self.shuffle,
                forward=self.forward,
            )
            for fn in unmapped_kernels(op)
        }
        replace_kernels(op, mapped)


@dataclass(frozen=True)
class GpuCoarsenPass(ModulePass):
    """Flat (elementwise) kernels with several points per thread: each thread computes
    `factor` points a block apart, the ops of the body interleaved across them, so that their
    loads are in flight together. One point per thread keeps too few bytes in flight for a
    memory-bound kernel to reach the device's bandwidth (Little's law: an H100 needs ~15 KB
    in flight per SM; 2048 threads loading one f32 each hold 8 KB). Accesses stay coalesced:
    each of a warp's loads covers consecutive points.

    Optional: without it, `map-to-gpu` maps the same kernels one point per thread. Kernels
    that map by rows (reductions), that a tiling pass mapped, or whose body has loops or
    conditionals, are left to `map-to-gpu`, and so is a kernel too small to fill the device
    coarsened: the factor halves until the launch still holds enough blocks for every one of
    `sms` multiprocessors to run its 2048 resident threads (so small kernels keep their
    parallelism). Options: `factor` (most points per thread, 1 to 16), `block-size` (most
    threads per block, as map-to-gpu's), `sms` (the device's multiprocessors: 132 on an
    H100 or H200)."""

    name = "gpu-coarsen"
    is_optimization = True

    SEARCH_SPACE: ClassVar[dict[str, tuple[int, ...]]] = {
        "factor": (1, 2, 4, 8),
        "block-size": (128, 256, 512),
    }
    """What `tune --space gpu-coarsen` and `advise` try: points per thread, block size."""

    factor: int = 4
    block_size: int = 256
    sms: int = 132

    def check_options(self) -> None:
        require(1 <= self.factor <= 16, "factor", self.factor, "must be from 1 to 16")
        require(self.sms >= 1, "sms", self.sms, "must be at least 1")
        MapToGpuPass(self.block_size).check_options()

    def factor_for(self, points: int) -> int:
        """The most points per thread (up to `factor`) that still fill the device."""
        f = self.factor
        while f > 1:
            threads, grid = _flat_geometry(points, f, self.block_size)
            if grid >= self.sms * (RESIDENT_THREADS // threads):
                break
            f //= 2
        return f

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_loop_level(op, "gpu-coarsen")
        replaced = {}
        for fn in unmapped_kernels(op):
            _, nests = nests_of(fn, "gpu-coarsen")
            if not nests or not all(n.extents and coarsenable(n) for n in nests):
                continue  # (a kernel left empty has nothing to coarsen)
            f = min(self.factor_for(n.points) for n in nests)
            if f == 1:
                continue
            # plain-op nests hold no reduction loop, so the kernel maps flat in any case
            replaced[fn.sym_name.data] = map_kernel(
                fn, op, self.block_size, rows=False, per_thread=f
            )
        replace_kernels(op, replaced)
