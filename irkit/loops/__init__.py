"""The loop-level IR contract: what passes, code generators and runtimes agree on.

`lower-graph-to-loops` produces, and every later layer reads, a module of upstream MLIR
(func, scf, memref, arith, math, and after `map-to-gpu` gpu) with these conventions:

- **Kernels** are `func.func`s marked `irkit.kernel` (`KERNEL_ATTR`); a **driver** (the
  module's public function) allocates buffers and calls them. A kernel argument marked
  `irkit.output` (`OUTPUT_ATTR`) is a model output the kernel writes; one marked
  `irkit.scratch` (`SCRATCH_ATTR`) is a driver-owned intermediate.
- **CPU threading**: a top-level `scf.parallel` carrying `irkit.threads` (`THREADS_ATTR`, an
  integer) is forked over that many threads (`cpu-parallelize` sets it).
- **GPU mapping**: a kernel carrying `irkit.launch` (`LAUNCH_ATTR`) is GPU-mapped; its grid,
  block, dynamic shared memory and mapping are read with `launch_of`. Workgroup buffers live
  in memory space 3 (`SHARED_SPACE`).
- **Padded buffers**: a kernel argument whose allocation `pad-leading-dims` padded carries
  `irkit.extent` (`EXTENT_ATTR`), its logical shape; `logical_shape` reads it.
- **Once-per-bind kernels**: a kernel marked `irkit.once` (`ONCE_ATTR`) reads only the
  driver's params, constants and earlier once kernels' buffers, and writes only driver
  allocations no other kernel writes (its *prepared buffers*: a weight matrix packed into
  panels by `cpu-tile-matmul`, a filter transposed for a convolution, which
  `lower-graph-to-loops` marks). The driver still
  calls it, so running the driver computes everything; a runtime whose params are fixed
  (a bound executable) may run it once at bind and leave it out of every later call.
  `prepared_buffers` lists the buffers that then live from one call to the next.
- **Reshape kernels and views**: a kernel marked `irkit.reshape` (`RESHAPE_ATTR`) copies its
  one input into its one output in row-major order (a `graph.reshape` standing alone), so
  `reshape-views` may put a view in place of its call: the driver then holds
  `memref.collapse_shape`/`memref.expand_shape` of a buffer of identity layout, the same
  memory under another shape (MLIR's ops; a reshape that is neither is a collapse to one
  dimension and an expansion). Runtimes alias the view's buffer to its source's (`view_source`
  follows a chain of them back to the allocation, argument or global they show).
- **Scalar functions**: a private `func.func` marked `irkit.inline` (`INLINE_ATTR`) takes and
  returns scalars, touches no memory and calls nothing; kernels call it with `func.call`
  (`expand-math` puts each f32 math expansion in one, so that a chain of 750 sigmoids holds
  one copy of the polynomial, not 750). Code generators inline it (LLVM: internal and
  `alwaysinline`; CUDA: `__device__ __forceinline__`), so it costs nothing at run time; a
  kernel compiled alone takes the scalar functions it calls with it (`callees`), and static
  costs count their ops at every call.

This module sits below passes, codegen and runtime: they import the contract from here and
nothing from each other. `irkit/loops/costs.py` holds the static cost analysis (FLOPs,
trips, bytes) over the same IR.
"""

from __future__ import annotations

import math
from typing import TypedDict

from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import (
    DenseArrayBase,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    UnitAttr,
    i32,
)
from xdsl.ir import Attribute, Operation, SSAValue

from irkit.errors import IrkitError
from irkit.ir import shape_of

PARAM_ATTR = "irkit.param"
"""A driver (model function) argument that is a weight, not an activation."""
KERNEL_ATTR = "irkit.kernel"
OUTPUT_ATTR = "irkit.output"
INDEX_EXTENT_ATTR = "irkit.index_extent"
"""On a driver input: the least extent of the gather axes its values index (checked at run
time: an index outside [-extent, extent) is an error before any kernel runs)."""
SCRATCH_ATTR = "irkit.scratch"
THREADS_ATTR = "irkit.threads"
LAUNCH_ATTR = "irkit.launch"
EXTENT_ATTR = "irkit.extent"
ONCE_ATTR = "irkit.once"
INLINE_ATTR = "irkit.inline"
"""A scalar function (see the module docstring)."""
RESHAPE_ATTR = "irkit.reshape"
"""A kernel that is a row-major copy of its input into its output's shape (see the module
docstring)."""
SHARED_SPACE = IntegerAttr(3, i32)
"""The memory space of GPU workgroup (shared) buffers, as in MLIR's gpu dialect."""

STATIC_SHARED_LIMIT = 48 * 1024
"""The most bytes of static `__shared__` arrays one CUDA kernel may declare: a GPU-mapping pass
keeps its shared buffers under it; past it a kernel needs dynamic shared memory and an opt-in."""
MAX_SHARED = 227 * 1024
"""The most shared memory a block may opt into on the largest GPUs irkit targets (sm_90);
a kernel between `STATIC_SHARED_LIMIT` and this takes its shared buffers dynamically (its
launch's `shared` bytes), and a device with less refuses it at compile time, naming it."""
SHARED_ALIGN = 16


def shared_buffer(
    module: ModuleOp, before: Operation | None, name: str, element_type: Attribute, shape: list[int]
) -> memref.GetGlobalOp:
    """A GPU kernel's shared-memory buffer: a private `memref.global` `name` of `shape` in
    the shared space, inserted into `module` before `before` (first where None); returns the
    `memref.get_global` op that reads it, for the caller to add inside the kernel."""
    t = MemRefType(element_type, shape, memory_space=SHARED_SPACE)
    glob = memref.GlobalOp.get(StringAttr(name), t, UnitAttr(), StringAttr("private"))
    block = module.body.block
    if before is None:
        before = block.first_op
    if before is None:
        block.add_op(glob)
    else:
        block.insert_op_before(glob, before)
    return memref.GetGlobalOp(name, t)


def shared_layout(sizes: list[int]) -> tuple[list[int], int]:
    """Byte offsets of shared buffers of `sizes` bytes laid out one after another, each
    16-byte aligned, and the total: how a kernel with dynamic shared memory places its
    buffers (the CUDA printer) and how many bytes its launch asks for (the pass)."""
    offsets, at = [], 0
    for size in sizes:
        offsets.append(at)
        at += -(-size // SHARED_ALIGN) * SHARED_ALIGN
    return offsets, at


def is_loop_level(module: ModuleOp) -> bool:
    """Whether no graph-dialect op is left (the module is at the loop level)."""
    return "graph" not in _dialects(module)


def require_loop_level(module: ModuleOp, what: str, cpu: bool = False) -> None:
    """Raise the one-line error a loop-level pass (or target) gives graph-level IR: `what`
    needs loop-level IR; with `cpu`, IR not mapped onto the GPU either."""
    dialects = _dialects(module)
    if "graph" in dialects:
        level = "CPU loop-level IR" if cpu else "loop-level IR"
        raise IrkitError(f"{what} needs {level}; run lower-graph-to-loops first")
    if cpu and "gpu" in dialects:
        raise IrkitError(
            f"{what} needs CPU loop-level IR, not IR mapped onto the GPU (run it before map-to-gpu)"
        )


_DIALECT_OF: dict[type, str] = {}


def _dialects(module: ModuleOp) -> set[str]:
    """The dialects of the module's ops, by op class (`dialect_name` splits each op's name:
    every loop-level pass asks this, and on a 2000-op chain it took a tenth of the pipeline)."""
    kinds: dict[type, Operation] = {}
    for op in module.walk():
        kinds.setdefault(type(op), op)
    found: set[str] = set()
    for kind, op in kinds.items():
        name = _DIALECT_OF.get(kind)
        if name is None:
            if not isinstance(getattr(kind, "name", None), str):  # named per op (unregistered)
                found.update(o.dialect_name() for o in module.walk() if type(o) is kind)
                continue
            name = _DIALECT_OF[kind] = op.dialect_name()
        found.add(name)
    return found


def kernels(module: ModuleOp) -> list[func.FuncOp]:
    """The module's kernel functions, in order."""
    return [op for op in module.ops if isinstance(op, func.FuncOp) and KERNEL_ATTR in op.attributes]


def is_scalar_function(op: Operation) -> bool:
    """Whether `op` is a scalar function (see the module docstring)."""
    return isinstance(op, func.FuncOp) and INLINE_ATTR in op.attributes


def callees(module: ModuleOp, fn: Operation) -> list[func.FuncOp]:
    """The scalar functions `fn` calls, directly or through one another, in the order of
    their first call: what a kernel compiled alone must take with it."""
    table = {op.sym_name.data: op for op in module.ops if is_scalar_function(op)}
    if not table:
        return []
    found: dict[str, func.FuncOp] = {}
    pending = [fn]
    while pending:
        for op in pending.pop().walk():
            if isinstance(op, func.CallOp):
                name = op.callee.root_reference.data
                if name in table and name not in found:
                    found[name] = table[name]
                    pending.append(table[name])
    return list(found.values())


def is_once(fn: Operation) -> bool:
    """Whether `fn` is a once-per-bind kernel (see the module docstring)."""
    return KERNEL_ATTR in fn.attributes and ONCE_ATTR in fn.attributes


def once_kernels(module: ModuleOp) -> set[str]:
    """The names of the module's once-per-bind kernels."""
    return {op.sym_name.data for op in module.ops if isinstance(op, func.FuncOp) and is_once(op)}


VIEW_OPS = (memref.CollapseShapeOp, memref.ExpandShapeOp)
"""The driver's views of a buffer (see the module docstring)."""


def view_source(value: SSAValue) -> SSAValue:
    """The buffer a driver value shows: itself, or for a view (a chain of them) the value the
    first one was taken of."""
    while isinstance(value.owner, VIEW_OPS):
        value = value.owner.src
    return value


def once_calls(module: ModuleOp, driver: func.FuncOp) -> list[func.CallOp]:
    """The driver's calls of once-per-bind kernels, in order."""
    once = once_kernels(module)
    return [
        op
        for op in driver.body.block.ops
        if isinstance(op, func.CallOp) and op.callee.root_reference.data in once
    ]


def prepared_buffers(module: ModuleOp, driver: func.FuncOp) -> list[SSAValue]:
    """The driver's allocations that once-per-bind kernels write (every one of their
    operands that the driver allocates), in the order of the allocations."""
    written = {v for call in once_calls(module, driver) for v in call.arguments}
    return [
        op.results[0]
        for op in driver.body.block.ops
        if op.name == "memref.alloc" and op.results[0] in written
    ]


def constant_value(value: SSAValue) -> int | float | None:
    """The value of an `arith.constant` integer or float, None for anything else."""
    op = value.owner
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, IntegerAttr | FloatAttr):
        return op.value.value.data
    return None


def constant_int(value: SSAValue) -> int | None:
    """The value of an `arith.constant` integer (an index), None for anything else."""
    op = value.owner
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, IntegerAttr):
        return op.value.value.data
    return None


COMBINERS: dict[type[Operation], float] = {
    arith.AddfOp: 0.0,
    arith.MulfOp: 1.0,
    arith.MaximumfOp: -math.inf,
    arith.MinimumfOp: math.inf,
    arith.MaxnumfOp: -math.inf,
    arith.MinnumfOp: math.inf,
}
"""Associative, commutative combiners of a reduction loop, and their identities."""


def combiner(loop: scf.ForOp, from_identity: bool = True) -> Operation | None:
    """The op combining `loop`'s single accumulator with each iteration's value, when it is
    one of COMBINERS and the accumulator has no other use; with `from_identity`, only when the
    accumulator also starts at the combiner's identity."""
    if len(loop.iter_args) != 1:
        return None
    acc = loop.body.block.args[1]
    yielded = loop.body.block.last_op
    assert isinstance(yielded, scf.YieldOp)
    op = yielded.operands[0].owner
    if not isinstance(op, Operation) or type(op) not in COMBINERS:
        return None
    if acc not in op.operands or acc.uses.get_length() != 1:
        return None
    if not from_identity:
        return op
    init = constant_value(loop.iter_args[0])
    return op if init is not None and float(init) == COMBINERS[type(op)] else None


class Launch(TypedDict, total=False):
    """`irkit.launch` read back: what a GPU kernel's launch needs."""

    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared: int
    mapping: str
    flops: int
    min_blocks: int  # where present: blocks a multiprocessor must hold at once
    cluster: int  # where present: blocks a cluster (consecutive along x), sm_90


def launch_of(fn: Operation) -> Launch | None:
    """A GPU kernel's launch configuration: grid, block (3 ints each), the bytes of dynamic
    shared memory per block (`shared`; 0 where absent) and mapping; None for a function that is
    not GPU-mapped."""
    attr = fn.attributes.get(LAUNCH_ATTR)
    if not isinstance(attr, DictionaryAttr):
        return None
    d = attr.data
    grid, block, mapping = d["grid"], d["block"], d["mapping"]
    assert isinstance(grid, DenseArrayBase) and isinstance(block, DenseArrayBase)
    assert isinstance(mapping, StringAttr)
    shared, flops = d.get("shared"), d.get("flops")
    out = Launch(
        grid=tuple(int(v) for v in grid.get_values()),
        block=tuple(int(v) for v in block.get_values()),
        shared=shared.value.data if isinstance(shared, IntegerAttr) else 0,
        mapping=mapping.data,
    )
    if isinstance(flops, IntegerAttr):
        out["flops"] = flops.value.data
    min_blocks = d.get("min_blocks")
    if isinstance(min_blocks, IntegerAttr):
        out["min_blocks"] = min_blocks.value.data
    cluster = d.get("cluster")
    if isinstance(cluster, IntegerAttr):
        out["cluster"] = cluster.value.data
    return out


def is_gpu_mapped(module: ModuleOp) -> bool:
    return any(launch_of(op) is not None for op in module.ops)


def cpu_threads(fn: func.FuncOp) -> int:
    """The most threads any loop of `fn` runs on (1: none is threaded)."""
    counts = [
        a.value.data
        for o in fn.walk()
        if isinstance(a := o.attributes.get(THREADS_ATTR), IntegerAttr)
    ]
    return max(counts, default=1)


def logical_shape(fn: func.FuncOp, index: int) -> tuple[int, ...]:
    """The shape parameter `index` of kernel `fn` stands for: its `irkit.extent` where
    pad-leading-dims padded it, else its type's shape."""
    attrs = fn.arg_attrs
    if attrs is not None and EXTENT_ATTR in attrs.data[index].data:
        return tuple(attrs.data[index].data[EXTENT_ATTR].get_values())  # type: ignore[attr-defined]
    return tuple(shape_of(fn.body.block.args[index]))
