"""interchange-matmul: an untiled matmul on the CPU as row updates, its inner loop contiguous.

`lower-graph-to-loops` writes a matmul as a dot product per element (`contraction.py`):

    scf.parallel (%i, %j) { %acc = scf.for %k ... A[i, k] * B[k, j] ...; epilogue; C[i, j] }

which is the natural form for the GPU (a thread per element) and what the tiling passes
match, but on the CPU, run as written, it reads B down a column: one cache line, and for
wide rows one page, per multiply-add. mlp's untiled program (two 64x1024x4096 matmuls)
took 3.7-4.1 s a call (0.15 GFLOP/s), which made every variant of an attribution without `cpu-tile-matmul` a
multi-second program timed ten times or more, and `baseline-cpu` a straw man. This pass,
required on the CPU (`lower_for_cpu` runs it where a pipeline left it out, before
`block-reductions`), rewrites each matmul nest that is still untiled into

    scf.parallel (%i) {
      %row = memref.alloca() : memref<N x T>                  one row of C's sums
      scf.for %j { %row[j] = INIT }
      scf.for %k { %a = A[i, k]
                   scf.for %j { %row[j] = %row[j] + %a * B[k, j] } }     contiguous in j
      scf.for %j { %acc = %row[j]; epilogue; C[i, j] = ... }
    }

(batch dims stay parallel dims in front of i). Each element's sum runs over k in the same
order with the same operations, so the result is the dot form's, bit for bit; the inner
loop reads B and the row contiguously, which LLVM vectorizes: that program, 4.1 s -> 0.22 s
a call (each row of A still streams all of B: no blocking, which is cpu-tile-matmul's job).

A read through index arithmetic (`match_matmul`'s gather: an implicit GEMM's patches, read
in place from the padded input, as `conv-to-matmul{implicit=true}` and `fuse-kernels` leave a
convolution) keeps that arithmetic, cloned into the k loop, so it runs once per (i, k)
instead of once per multiply-add: conv_block's fused convolution left untiled ran 3-5x
slower than the unfused im2col and matmul, which charged `fuse-kernels` a slowdown in every
attribution context without `cpu-tile-matmul`.

Only f32/f64 nests `match_matmul` recognizes, with a row of C of at most `ROW_BYTES` (a
pool thread's stack holds it); anything else stays as it is. Not an optimization of the
pipeline (`cpu-tile-matmul` replaces these nests where it applies): it is how the CPU
backend lowers the ones left untiled, so `baseline-cpu` and every attribution context
without tiling run a plain, not a pathological, loop nest.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import IndexType, MemRefType, ModuleOp
from xdsl.ir import Block, Region, SSAValue
from xdsl.passes import ModulePass

from irkit.ir import unchanged
from irkit.loops import kernels, require_loop_level
from irkit.loops.costs import buffer_bytes
from irkit.passes.contraction import MatmulNest, match_matmul
from irkit.passes.loop_builder import LoopBuilder

INDEX = IndexType()
ROW_BYTES = 64 * 1024
"""The largest row of C summed in a stack buffer."""


def _row_bytes(nest: MatmulNest) -> int:
    return buffer_bytes(MemRefType(nest.element_type, [nest.n]))


def interchange(nest: MatmulNest, fn: func.FuncOp) -> bool:
    """Rewrite one matched nest into row updates (see the module docstring); False when it
    stays as it is."""
    if not _applies(nest):
        return False
    body_ops = list(nest.k_loop.body.block.ops)
    mul, add = body_ops[-3], body_ops[-2]
    assert isinstance(mul, arith.MulfOp) and isinstance(add, arith.AddfOp)
    first = mul.operands[0].owner  # A's load (indices ending [i, k]) or B's
    k_iv = nest.k_loop.body.block.args[0]
    a_first = isinstance(first, memref.LoadOp) and (
        list(first.indices) == list(nest.a_indices)
        if nest.a_gather
        else list(first.indices[-2:]) == [nest.i, k_iv]
    )
    acc_first = add.operands[0] is nest.k_loop.body.block.args[1]
    old = nest.loop
    b = LoopBuilder(fn.body.block)
    body = Block(arg_types=[INDEX] * (len(nest.batch) + 1))
    *batch, i = body.args
    renamed: dict[SSAValue, SSAValue] = {
        old_iv: new for (old_iv, _), new in zip(nest.batch, batch, strict=True)
    }
    renamed[nest.i] = i
    prefix_a, prefix_b, _ = ([renamed.get(v, v) for v in p] for p in nest.prefixes)
    b.block = body
    row = b.add(memref.AllocaOp.get(nest.element_type, 64, [nest.n]))
    init = b.float(nest.init, nest.element_type)

    def clear(j: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        b.add(memref.StoreOp.get(init, row, [j]))
        return []

    def update(k: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        at = nest.a_index(i, k, b.add) if nest.a_gather else [*prefix_a, i, k]
        a = b.add(memref.LoadOp.get(nest.a, at))  # once per (i, k), not per (i, j, k)

        def axpy(j: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
            x = b.add(memref.LoadOp.get(nest.b, [*prefix_b, k, j]))
            product = b.add(arith.MulfOp(a, x) if a_first else arith.MulfOp(x, a))
            product.owner.properties.update(mul.properties)  # type: ignore[union-attr]
            s = b.add(memref.LoadOp.get(row, [j]))
            total = b.add(arith.AddfOp(s, product) if acc_first else arith.AddfOp(product, s))
            total.owner.properties.update(add.properties)  # type: ignore[union-attr]
            b.add(memref.StoreOp.get(total, row, [j]))
            return []

        b.for_range(0, nest.n, 1, [], axpy)
        return []

    def finish(j: SSAValue, _: list[SSAValue]) -> list[SSAValue]:
        mapping = {**renamed, nest.j: j, nest.acc: b.add(memref.LoadOp.get(row, [j]))}
        for op in nest.epilogue:
            clone = op.clone(value_mapper=mapping)
            b.add(clone)
            for before, after in zip(op.results, clone.results, strict=True):
                mapping[before] = after
        return []

    b.for_range(0, nest.n, 1, [], clear)
    b.for_range(0, nest.k, 1, [], update)
    b.for_range(0, nest.n, 1, [], finish)
    body.add_op(scf.ReduceOp())
    extents = [e for _, e in nest.batch] + [nest.m]
    zero, one = b.index(0), b.index(1)
    loop = scf.ParallelOp(
        [zero] * len(extents), [b.index(e) for e in extents], [one] * len(extents), Region(body)
    )
    loop.attributes.update(old.attributes)
    parent = old.parent_block()
    assert parent is not None
    parent.insert_op_before(loop, old)
    old.detach()
    old.erase(safe_erase=False)
    return True


@dataclass(frozen=True)
class InterchangeMatmulPass(ModulePass):
    """Untiled matmul nests as row updates with a contiguous inner loop (see the module
    docstring). Required on the CPU; running it twice changes nothing."""

    name = "interchange-matmul"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_loop_level(op, "interchange-matmul", cpu=True)
        matched = False
        for fn in kernels(op):
            for loop in _top_level_loops(fn):
                nest = match_matmul(loop, batched=True, gather=True)
                if nest is not None:
                    interchange(nest, fn)
                    matched = True
        if not matched:
            unchanged(self)


def _top_level_loops(fn: func.FuncOp) -> list[scf.ParallelOp]:
    """The kernel's top-level parallel loops, where the lowering puts a matmul nest (not a
    walk of every op: a fused kernel of a long elementwise chain holds tens of thousands)."""
    return [o for o in fn.body.block.ops if isinstance(o, scf.ParallelOp)]


def _applies(nest: MatmulNest | None) -> bool:
    return (
        nest is not None
        and nest.k_loop.iter_args[0].type == nest.element_type
        and _row_bytes(nest) <= ROW_BYTES
    )


def needs_interchange(module: ModuleOp) -> bool:
    """Whether `interchange-matmul` would change `module` (a query; nothing changes)."""
    return any(
        _applies(match_matmul(loop, batched=True, gather=True))
        for fn in kernels(module)
        for loop in _top_level_loops(fn)
    )
