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

Every element is computed by the same ops in the same order, so the result is bit-identical.
`cpu-parallelize` then splits the row loop over threads. Optional; no options. It needs the
nests as `lower-graph-to-loops` writes them: run it before `block-reductions`.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, scf
from xdsl.dialects.builtin import IndexType, ModuleOp
from xdsl.ir import Block, Region
from xdsl.passes import ModulePass

from irkit.errors import IrkitError
from irkit.loops import kernels, require_loop_level
from irkit.loops.rows import Nest, nests_of, row_prefixes, rows_legal
from irkit.passes.loop_builder import FunctionConstants

INDEX = IndexType()


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


def fuse_rows(fn: func.FuncOp) -> bool:
    """Rewrite one kernel's nests into one row loop (see the module docstring); False when
    they may not (or there is one nest only)."""
    try:
        _, nests = nests_of(fn, "cpu-fuse-rows")
    except IrkitError:  # a tiled nest (steps, offsets): not rows this pass knows
        return False
    found = _rows(nests)
    if found is None:
        return False
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
    return True


@dataclass(frozen=True)
class CpuFuseRowsPass(ModulePass):
    """Run each kernel's nests row by row where they share rows (see the module docstring)."""

    name = "cpu-fuse-rows"
    is_optimization = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_loop_level(op, "cpu-fuse-rows", cpu=True)
        for fn in kernels(op):
            fuse_rows(fn)
