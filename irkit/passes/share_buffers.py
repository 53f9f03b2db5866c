"""share-buffers: place the driver's intermediate buffers in one arena, reusing memory
whose value is dead.

`lower-graph-to-loops` gives every intermediate tensor a buffer of its own. A model of
300 kernels then touches every byte of every intermediate once per call: each kernel
writes a region no kernel has touched since the last call, so its stores miss every cache
level and read the lines in from memory first (write-allocate), and what it writes pushes
out what the next kernel would have read. Runtimes plan memory instead: onnxruntime's
memory pattern, TFLite's arena planner, XLA's buffer assignment each give a buffer the
bytes of one that is already dead, so the few megabytes a model's live values need at
any moment stay in the last-level cache.

This pass runs on the loop level, on the driver function (the one calling the kernels),
after the passes that change buffers' shapes (`pad-leading-dims`) or read their
allocations (`cpu-tile-matmul`). Each intermediate (a `memref.alloc` of the driver's
block) lives from its allocation to the last op using it or a view of it (`reshape-views`),
its `memref.dealloc` included. Buffers whose lives overlap get disjoint bytes; the rest
may share. Placement is greedy by size, largest first, each at the lowest offset clear
of the buffers it overlaps in time (TFLite's "greedy by size", which is within a few
percent of the optimum on real models). Each buffer becomes a `memref.view` of one
`memref.alloc` of bytes (`%arena`), at an offset aligned as the allocation would have been
(4 KiB for a page or more, else 64 bytes), and its `memref.dealloc` goes.

Left with their own allocations: the outputs of once-per-bind kernels (packed or
transposed weights, `irkit.once`: computed at bind and read on every call after), and
buffers the driver uses other than as a kernel argument, a copy's operand or through
views. The values are bit-identical (no two buffers live at once share a byte, so no
kernel's operands alias); every backend runs the views (`driver_plan`, the LLVM driver).

Optional; `default-cpu` runs it last. Options:

    min-buffers=2   the fewest shareable buffers for which the pass builds an arena
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType, ModuleOp, NoneAttr, i8
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from irkit.loops import KERNEL_ATTR, VIEW_OPS, once_calls
from irkit.loops.costs import buffer_bytes

PAGE = 4096
LINE = 64


@dataclass
class _Buffer:
    alloc: memref.AllocOp
    size: int
    start: int
    end: int
    offset: int = 0

    @property
    def align(self) -> int:
        return PAGE if self.size >= PAGE else LINE


def _users(value: SSAValue) -> list[Operation] | None:
    """Every op using `value` or a view of it, or None where one is not a kernel call, a
    copy, a dealloc or a view (such a buffer keeps its own allocation)."""
    found: list[Operation] = []
    for use in value.uses:
        op = use.operation
        if isinstance(op, VIEW_OPS):
            inner = _users(op.results[0])
            if inner is None:
                return None
            found += [op, *inner]
        elif isinstance(op, func.CallOp | memref.CopyOp | memref.DeallocOp):
            found.append(op)
        else:
            return None
    return found


def _shareable(driver: func.FuncOp, module: ModuleOp) -> list[_Buffer]:
    """The driver's allocations that may share memory, each with its life: used only as
    kernel arguments, copy operands or through views, and by no once-per-bind kernel."""
    block = driver.body.block
    position = {op: i for i, op in enumerate(block.ops)}
    once = set(once_calls(module, driver))
    found: list[_Buffer] = []
    for op in block.ops:
        if not isinstance(op, memref.AllocOp):
            continue
        t = op.memref.type
        if not (isinstance(t, MemRefType) and t.has_static_shape()):
            continue
        if not isinstance(t.layout, NoneAttr) or op.dynamic_sizes or op.symbol_operands:
            continue
        users = _users(op.memref)  # the ops reading or writing it, through its views too
        if not users or any(u in once or u.parent_block() is not block for u in users):
            continue
        found.append(
            _Buffer(op, max(1, buffer_bytes(t)), position[op], max(position[u] for u in users))
        )
    return found


def place(buffers: list[_Buffer]) -> int:
    """Give each buffer an offset (greedy by size: the largest first, each at the lowest
    aligned offset clear of every placed buffer whose life overlaps its own); the arena's
    size."""
    placed: list[_Buffer] = []
    for b in sorted(buffers, key=lambda b: (-b.size, b.start)):
        busy = sorted(
            (p.offset, p.offset + p.size) for p in placed if p.start <= b.end and b.start <= p.end
        )
        offset = 0
        for lo, hi in busy:
            if offset + b.size <= lo:
                break
            offset = max(offset, -(-hi // b.align) * b.align)
        b.offset = offset
        placed.append(b)
    return max((b.offset + b.size for b in buffers), default=0)


def share_buffers(driver: func.FuncOp, module: ModuleOp, min_buffers: int = 2) -> int:
    """Rewrite `driver`'s shareable allocations as views of one arena; the bytes saved."""
    buffers = _shareable(driver, module)
    if len(buffers) < min_buffers:
        return 0
    total = place(buffers)
    block = driver.body.block
    first = block.first_op
    assert first is not None
    arena = memref.AllocOp.get(i8, PAGE, [total])
    arena.memref.name_hint = "arena"
    block.insert_op_before(arena, first)
    for b in buffers:
        shift = arith.ConstantOp(IntegerAttr(b.offset, IndexType()))
        view = memref.ViewOp(arena.memref, shift, [], b.alloc.memref.type)
        view.result.name_hint = b.alloc.memref.name_hint
        block.insert_ops_before([shift, view], b.alloc)
        for use in list(b.alloc.memref.uses):
            if isinstance(use.operation, memref.DeallocOp):
                block.erase_op(use.operation)
        b.alloc.memref.replace_all_uses_with(view.result)
        block.erase_op(b.alloc)
    last = block.last_op
    assert isinstance(last, func.ReturnOp), last
    block.insert_op_before(memref.DeallocOp.get(arena.memref), last)
    return sum(b.size for b in buffers) - total


@dataclass(frozen=True)
class ShareBuffersPass(ModulePass):
    """Share the driver's intermediate buffers' memory (see the module docstring)."""

    name = "share-buffers"
    is_optimization = True

    min_buffers: int = 2

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in [f for f in op.ops if isinstance(f, func.FuncOp)]:
            if KERNEL_ATTR in fn.attributes or fn.is_declaration:
                continue
            if any(isinstance(o, func.CallOp) for o in fn.body.block.ops):
                share_buffers(fn, op, self.min_buffers)
