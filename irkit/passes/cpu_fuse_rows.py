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

Two more steps then shorten a row's passes over memory, as a hand-written softmax does:

- **the output's row as workspace**: a scratch row whose values the last phase reads only
  at the element it writes (softmax's stored exponentials, read once each by the output's
  `e * (1 / sum)`) lives in the output's own row instead of a stack buffer, when that
  output is only written, by that phase, every element of its row once; the last phase
  then updates the row in place. The row is written where it has to be written anyway,
  while the exponentials are computed (its cache misses overlap that arithmetic), not by
  a separate pass of stores after it;
- **a loop into the reduction that follows it**: an elementwise loop directly followed by a
  reduction loop over the same range, which reads what the first stored only at the
  element stored in the same iteration, becomes one loop that computes, stores and adds
  each value (softmax's exponentials and their sum: one pass over the row, not two).

Measured on one core of the development machine (softmax 512x1024, interleaved against
onnxruntime 1.32, with the cheaper exp already in): 0.85x -> 1.11x.

Every element is computed by the same ops in the same order, so the result is bit-identical.
`cpu-parallelize` then splits the row loop over threads. Optional; no options. It needs the
nests as `lower-graph-to-loops` writes them: run it before `block-reductions`.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, memref, scf
from xdsl.dialects.builtin import IndexType, MemRefType, ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from irkit.errors import IrkitError
from irkit.ir import shape_of
from irkit.loops import OUTPUT_ATTR, SCRATCH_ATTR, constant_int, kernels, require_loop_level
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
    shape = shape_of(buffer)
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


def _phase(op: Operation, loop: scf.ParallelOp) -> Operation:
    """The op of the row loop's body that holds `op` (its phase)."""
    while op.parent_op() is not loop:
        op = op.parent_op()  # type: ignore[assignment]
    return op


def _writes_whole_row(store: memref.StoreOp, lead: int, phase: Operation) -> bool:
    """Whether `store`'s trailing indices are the ivs of the loops from `phase` down to it,
    in order, each from 0 by 1 to its dimension's extent: the phase writes every element of
    the row, once."""
    shape = shape_of(store.memref)
    loops: list[scf.ForOp] = []
    parent = store.parent_op()
    while parent is not None and isinstance(parent, scf.ForOp):
        loops.insert(0, parent)
        if parent is phase:
            break
        parent = parent.parent_op()
    trailing = list(store.indices[lead:])
    return (
        bool(loops) and loops[0] is phase and len(loops) == len(trailing)
        and all(not loop.iter_args and constant_int(loop.lb) == 0 and constant_int(loop.step) == 1
                and constant_int(loop.ub) == extent and index is loop.body.block.args[0]
                for loop, index, extent in zip(loops, trailing, shape[lead:], strict=True))
    )  # fmt: skip


def _output_row(
    fn: func.FuncOp, loop: scf.ParallelOp, scratch: SSAValue, lead: int, taken: set[SSAValue]
) -> tuple[SSAValue, int] | None:
    """An output of `fn` whose own row can hold `scratch`'s row (and its leading dims), when
    one can: the output has a row of the same shape and element type, is only stored, all in
    the row loop's last phase that touches either, which writes its whole row reading the
    scratch row only at the element it stores. The scratch's values then live in the output's
    row until that phase overwrites each with the result (in place, element by element)."""
    attrs = fn.arg_attrs.data if fn.arg_attrs else []
    t = scratch.type
    assert isinstance(t, MemRefType)
    for out in fn.body.block.args:
        if out in taken or not attrs or OUTPUT_ATTR not in attrs[out.index].data:
            continue
        o = out.type
        if not isinstance(o, MemRefType) or o.element_type != t.element_type:
            continue
        out_lead = _row_slab(out, loop)
        if out_lead is None or list(o.get_shape()[out_lead:]) != list(t.get_shape()[lead:]):
            continue
        stores = [u.operation for u in out.uses]
        if not all(isinstance(st, memref.StoreOp) for st in stores):
            continue
        phases = {_phase(st, loop) for st in stores}
        if len(phases) != 1:
            continue
        (last,) = phases
        if not all(_writes_whole_row(st, out_lead, last) for st in stores):
            continue
        stored = {tuple(st.indices[out_lead:]) for st in stores}
        uses = [u.operation for u in scratch.uses]
        order = list(loop.body.block.ops)
        if any(order.index(_phase(op, loop)) > order.index(last) for op in uses):
            continue
        inside = [op for op in uses if _phase(op, loop) is last]
        if all(
            isinstance(op, memref.LoadOp) and tuple(op.indices[lead:]) in stored for op in inside
        ):
            return out, out_lead
    return None


def privatize_rows(module: ModuleOp, fn: func.FuncOp, loop: scf.ParallelOp) -> None:
    """Each scratch buffer of `fn` that is per-row workspace in the row loop `loop` becomes
    the row of an output that can hold it, or else a one-row stack buffer inside it (see the
    module docstring)."""
    block = fn.body.block
    attrs = fn.arg_attrs.data if fn.arg_attrs else []
    zero = FunctionConstants(fn).index(0)
    taken: set[SSAValue] = set()
    for arg in reversed(list(block.args)):
        if not attrs or SCRATCH_ATTR not in attrs[arg.index].data or not arg.uses:
            continue
        lead = _row_slab(arg, loop)
        if lead is None:
            continue
        t = arg.type
        assert isinstance(t, MemRefType)
        found = _output_row(fn, loop, arg, lead, taken)
        if found is not None:
            out, out_lead = found
            taken.add(out)
            row = next(iter(out.uses)).operation.indices[:out_lead]
            for use in list(arg.uses):
                op = use.operation
                assert isinstance(op, memref.LoadOp | memref.StoreOp)
                head = list(op.operands[: use.index])
                op.operands = [*head, out, *row, *op.indices[lead:]]
            assert isinstance(arg, BlockArgument)
            drop_kernel_arg(module, fn, arg.index)
            continue
        row = MemRefType(t.element_type, [1] * lead + list(t.get_shape()[lead:]))
        if buffer_bytes(row) > ROW_BUFFER_BYTES:
            continue
        local = memref.AllocaOp.get(t.element_type, 64, row.get_shape())
        body = loop.body.block
        Rewriter.insert_op(local, InsertPoint.at_start(body))
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
                fuse_into_reductions(loop)


def _stores_and_loads(loop: scf.ForOp) -> tuple[list[memref.StoreOp], list[memref.LoadOp]] | None:
    """The stores and loads of a loop whose body holds no other loop (else None)."""
    stores, loads = [], []
    for op in loop.body.walk():
        if isinstance(op, scf.ForOp | scf.ParallelOp | scf.IfOp):
            return None
        if isinstance(op, memref.StoreOp):
            stores.append(op)
        elif isinstance(op, memref.LoadOp):
            loads.append(op)
    return stores, loads


def _same_bounds(a: scf.ForOp, b: scf.ForOp) -> bool:
    return all(
        x is y or (constant_int(x) is not None and constant_int(x) == constant_int(y))
        for x, y in ((a.lb, b.lb), (a.ub, b.ub), (a.step, b.step))
    )


def fuse_into_reductions(loop: scf.ParallelOp) -> None:
    """Each phase that is an elementwise loop directly followed by a reduction loop over the
    same range, reading what the first stored only at the element stored in the same
    iteration, becomes one loop: the reduction adds each value as it is computed (see the
    module docstring)."""
    for producer in list(loop.body.block.ops):
        consumer = producer.next_op
        if not (
            isinstance(producer, scf.ForOp)
            and isinstance(consumer, scf.ForOp)
            and not producer.iter_args
            and consumer.iter_args
            and _same_bounds(producer, consumer)
        ):
            continue
        first, second = _stores_and_loads(producer), _stores_and_loads(consumer)
        if first is None or second is None or second[0]:
            continue
        p_iv, c_iv = producer.body.block.args[0], consumer.body.block.args[0]

        def key(op: memref.LoadOp | memref.StoreOp, iv: SSAValue) -> tuple:
            return (op.memref, *(None if i is iv else i for i in op.indices))

        stored = {key(st, p_iv): st for st in first[0]}
        written = {st.memref for st in first[0]}
        reads = [ld for ld in second[1] if ld.memref in written]
        if any(key(ld, c_iv) not in stored for ld in reads):
            continue
        body = consumer.body.block
        anchor = body.first_op
        for op in list(producer.body.block.ops)[:-1]:  # not its yield
            op.detach()
            body.insert_op_before(op, anchor)  # type: ignore[arg-type]
        p_iv.replace_all_uses_with(c_iv)
        for ld in reads:  # the value stored in this iteration, forwarded
            ld.res.replace_all_uses_with(stored[key(ld, c_iv)].value)
            ld.detach()
            ld.erase()
        producer.detach()
        producer.erase()
