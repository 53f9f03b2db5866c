"""cpu-fuse-rows: run a kernel's phases row by row, so that a row stays in cache between them.

A fused softmax or layer_norm kernel is one `scf.parallel` nest per materialized value, each
over the whole tensor: the row maxima, the row sums, then the output. Run as written, every
phase streams the whole input again from memory (three passes for softmax, four for
layer_norm). When every nest's leading extents count the same rows and each buffer element
the kernel writes is written and read by one row only (`irkit.loops.rows`, an exact check
over the iteration domain, the one `map-to-gpu` uses to give a row to a block of threads),
the nests become one `scf.parallel` over the rows whose body runs each phase for its row in
order; a phase's remaining extents become `scf.for` loops:

    scf.parallel (%r) = (0) to (512) {                       one iteration per row
      %m = scf.for %j = 0 to 1024 ... maximumf ...            the row's maximum
      memref.store %m, %tmp0[%r, 0]
      %s = scf.for %j = 0 to 1024 ... addf ...                its sum of exponentials
      memref.store %s, %tmp1[%r, 0]
      scf.for %j = 0 to 1024 { ... memref.store ..., %y[%r, %j] }    its output
    }

A scratch buffer (`irkit.scratch`) whose every access in the row loop is at the row's own
indices is then one row's private workspace: it becomes a `memref.alloca` of one row inside
the loop body (each thread has its own, on its stack, at most `ROW_BUFFER_BYTES`), and the
kernel parameter and the driver's allocation go. softmax's stored exponentials were a
second 2 MB array at 512x1024 written back to memory; as a 4 KB row they stay in L1.

Every element is computed by the same ops in the same order, so the result is bit-identical.
`cpu-parallelize` then splits the row loop over threads. Optional; no options. It needs the
nests as `lower-graph-to-loops` writes them: run it before `block-reductions`.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, memref, scf
from xdsl.dialects.builtin import IndexType, MemRefType, ModuleOp
from xdsl.ir import Block, BlockArgument, Region, SSAValue
from xdsl.passes import ModulePass

from irkit.errors import IrkitError
from irkit.loops import SCRATCH_ATTR, constant_int, kernels, require_loop_level
from irkit.loops.costs import buffer_bytes
from irkit.loops.rows import Nest, nests_of, row_prefixes, rows_legal
from irkit.passes.loop_builder import FunctionConstants, drop_kernel_arg

INDEX = IndexType()
ROW_BUFFER_BYTES = 64 * 1024
"""The largest scratch row made a per-thread stack buffer (a pool thread's stack is 2 MiB
or more)."""


def _rows(nests: list[Nest]) -> tuple[list[int], tuple[int, ...]] | None:
    """Each nest's row prefix and the rows' extents (unit extents dropped; the same for
    every nest), when the nests may run row by row; else None."""
    if len(nests) < 2 or any(not n.extents for n in nests):
        return None
    prefixes = row_prefixes(nests, any_loops=True)
    if prefixes is None:
        return None
    shapes = {
        tuple(e for e in n.extents[:p] if e != 1) for n, p in zip(nests, prefixes, strict=True)
    }
    if len(shapes) != 1:
        return None
    (rows,) = shapes
    if not rows or not rows_legal(nests, prefixes):
        return None
    return prefixes, rows


def fuse_rows(fn: func.FuncOp) -> scf.ParallelOp | None:
    """Rewrite one kernel's nests into one row loop (see the module docstring) and return
    it; None when they may not (or there is one nest only)."""
    try:
        _, nests = nests_of(fn, "cpu-fuse-rows")
    except IrkitError:  # a tiled nest (steps, offsets): not rows this pass knows
        return None
    found = _rows(nests)
    if found is None:
        return None
    prefixes, rows = found
    first = nests[0].ops[0]
    body = Block(arg_types=[INDEX] * len(rows))
    constants = FunctionConstants(fn)
    zero, one = constants.index(0), constants.index(1)
    for nest, p in zip(nests, prefixes, strict=True):
        fused = iter(body.args)
        for iv, extent in zip(nest.ivs[:p], nest.extents[:p], strict=True):
            iv.replace_all_uses_with(zero if extent == 1 else next(fused))
        blocks = [body]
        for iv, extent in zip(nest.ivs[p:], nest.extents[p:], strict=True):
            inner = Block(arg_types=[INDEX])
            blocks[-1].add_op(scf.ForOp(zero, constants.index(extent), one, [], inner))
            iv.replace_all_uses_with(inner.args[0])
            blocks.append(inner)
        for op in nest.body:
            op.detach()
            blocks[-1].add_op(op)
        for inner in blocks[1:]:
            inner.add_op(scf.YieldOp())
    body.add_op(scf.ReduceOp())
    bounds = [constants.index(e) for e in rows]
    loop = scf.ParallelOp([zero] * len(rows), bounds, [one] * len(rows), Region(body))
    fn.body.block.insert_op_before(loop, first)
    for nest in nests:
        for op in nest.ops:
            op.detach()
            op.erase(safe_erase=False)
    return loop


def _row_slab(buffer: SSAValue, loop: scf.ParallelOp) -> int | None:
    """How many leading dimensions of `buffer` its accesses index by the row alone, when
    every use is a load or store inside `loop` whose leading indices are the row loop's
    ivs (each in one fixed position, all of them) or zero in unit dimensions: then each
    iteration reads and writes its own slab, and no other. None otherwise."""
    rows = set(loop.body.block.args)
    shape = buffer.type.get_shape()  # type: ignore[attr-defined]
    prefix: list[SSAValue | None] | None = None
    for use in buffer.uses:
        op = use.operation
        if not isinstance(op, memref.LoadOp | memref.StoreOp) or not loop.is_ancestor(op):
            return None
        if use.index != (0 if isinstance(op, memref.LoadOp) else 1):  # stored, not the target
            return None
        lead: list[SSAValue | None] = []
        for i, index in enumerate(op.indices):
            if index in rows:
                lead.append(index)
            elif shape[i] == 1 and constant_int(index) == 0:
                lead.append(None)
            else:
                break
            if rows <= set(lead):
                break
        if prefix is None:
            prefix = lead
        if lead != prefix or not rows <= set(lead):
            return None
    return len(prefix) if prefix else None


def privatize_rows(module: ModuleOp, fn: func.FuncOp, loop: scf.ParallelOp) -> None:
    """Each scratch buffer of `fn` that is per-row workspace in the row loop `loop` becomes a
    one-row stack buffer inside it (see the module docstring)."""
    block = fn.body.block
    attrs = fn.arg_attrs.data if fn.arg_attrs else []
    zero = FunctionConstants(fn).index(0)
    for arg in reversed(list(block.args)):
        if not attrs or SCRATCH_ATTR not in attrs[arg.index].data or not arg.uses:
            continue
        lead = _row_slab(arg, loop)
        if lead is None:
            continue
        t = arg.type
        assert isinstance(t, MemRefType)
        row = MemRefType(t.element_type, [1] * lead + list(t.get_shape()[lead:]))
        if buffer_bytes(row) > ROW_BUFFER_BYTES:
            continue
        local = memref.AllocaOp.get(t.element_type, 64, row.get_shape())
        body = loop.body.block
        body.insert_op_before(local, body.first_op)  # type: ignore[arg-type]
        for use in list(arg.uses):
            op = use.operation
            assert isinstance(op, memref.LoadOp | memref.StoreOp)
            head = list(op.operands[: use.index])
            indices = [zero] * lead + list(op.indices[lead:])
            op.operands = [*head, local.memref, *indices]
        assert isinstance(arg, BlockArgument)
        drop_kernel_arg(module, fn, arg.index)  # later (lower) indices keep their attributes


@dataclass(frozen=True)
class CpuFuseRowsPass(ModulePass):
    """Run each kernel's nests row by row where they share rows (see the module docstring)."""

    name = "cpu-fuse-rows"
    is_optimization = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_loop_level(op, "cpu-fuse-rows", cpu=True)
        for fn in kernels(op):
            loop = fuse_rows(fn)
            if loop is not None:
                privatize_rows(op, fn, loop)
