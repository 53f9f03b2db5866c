"""A cursor for building loop-level IR (scf, arith, memref, math) with few lines per op.

Index and float constants are cached and placed at the top of the function body, so a
kernel reads as a short list of constants followed by its loop nests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    DictionaryAttr,
    Float8E4M3FNType,
    Float8E5M2Type,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from irkit.loops import KERNEL_ATTR, PARAM_ATTR, VIEW_OPS, once_kernels, view_source

INDEX = IndexType()
F32 = Float32Type()
F64 = Float64Type()
LOW_PRECISION = (Float16Type, BFloat16Type, Float8E4M3FNType, Float8E5M2Type)


def compute_type(element_type: Attribute) -> Attribute:
    """The type arithmetic happens in: f64 for f64 data, f32 for narrower floats; an
    integer or boolean type is its own (integer arithmetic is exact at its width)."""
    if isinstance(element_type, IntegerType):
        return element_type
    return F64 if isinstance(element_type, Float64Type) else F32


class LoopBuilder:
    """Appends ops to a current block; nests loops and conditionals around callbacks."""

    def __init__(self, entry: Block):
        self.entry = entry
        self.block = entry
        self._constants: dict[tuple[str, Attribute], SSAValue] = {}
        self._last_constant: Operation | None = None

    # --- constants ---------------------------------------------------------------------

    def _constant(self, key: tuple[str, Attribute], make: Callable[[], Operation]) -> SSAValue:
        if key not in self._constants:
            op = make()
            if self._last_constant is None:
                first = self.entry.first_op
                if first is None:
                    self.entry.add_op(op)
                else:
                    self.entry.insert_op_before(op, first)
            else:
                self.entry.insert_op_after(op, self._last_constant)
            self._last_constant = op
            self._constants[key] = op.results[0]
        return self._constants[key]

    def index(self, n: int) -> SSAValue:
        return self._constant((f"i{n}", INDEX), lambda: arith.ConstantOp(IntegerAttr(n, INDEX)))

    def float(self, x: float, type_: Attribute) -> SSAValue:
        """A constant of a float type, or of an integer type (`x` truncated to an int)."""
        if isinstance(type_, IntegerType):
            return self.integer(int(x), type_)
        return self._constant(
            (f"f{float(x)!r}", type_),
            lambda: arith.ConstantOp(FloatAttr(float(x), cast(Any, type_))),
        )

    def integer(self, n: int, type_: IntegerType) -> SSAValue:
        """A constant of an integer type (i1: 0 or 1; others wrap to the width)."""
        width = type_.width.data
        n = (
            int(bool(n))
            if width == 1
            else (n + (1 << (width - 1))) % (1 << width) - (1 << (width - 1))
        )
        return self._constant((f"i{n}", type_), lambda: arith.ConstantOp(IntegerAttr(n, type_)))

    # --- ops ---------------------------------------------------------------------------

    def add(self, op: Operation) -> SSAValue:
        """Append `op` to the current block; its (first) result."""
        self.block.add_op(op)
        return op.results[0] if op.results else None  # type: ignore[return-value]

    def load(self, buffer: SSAValue, indices: Sequence[SSAValue], to: Attribute) -> SSAValue:
        """Load an element and widen it to the compute type `to`."""
        value = self.add(memref.LoadOp.get(buffer, indices))
        return self.convert(value, to)

    def store(self, value: SSAValue, buffer: SSAValue, indices: Sequence[SSAValue]) -> None:
        assert isinstance(buffer.type, MemRefType)
        value = self.convert(value, buffer.type.element_type)
        self.block.add_op(memref.StoreOp.get(value, buffer, indices))

    def convert(self, value: SSAValue, to: Attribute) -> SSAValue:
        """extf or truncf between float types (rounding to nearest even); an integer value
        only to its own type (conversions with integers are `graph.cast`'s)."""
        if value.type == to:
            return value
        width: dict[type[Attribute], int] = {
            Float8E4M3FNType: 8,  # truncf to an 8-bit float saturates (`irkit.dtypes`)
            Float8E5M2Type: 8,
            Float16Type: 16,
            BFloat16Type: 16,
            Float32Type: 32,
            Float64Type: 64,
        }
        src, dst = width[type(value.type)], width[type(to)]
        if value.type == to:
            return value
        if src < dst:
            return self.add(arith.ExtFOp(value, to))
        if src == dst:  # f16 <-> bf16, f8e4m3 <-> f8e5m2: through f32
            return self.convert(self.convert(value, F32), to)
        return self.add(arith.TruncFOp(value, to))

    # --- index arithmetic (folded when both sides are constants) ------------------------

    def iadd(self, a: SSAValue, b: SSAValue | int) -> SSAValue:
        if isinstance(b, int):
            if b == 0:
                return a
            b = self.index(b)
        return self.add(arith.AddiOp(a, b))

    def imul(self, a: SSAValue, b: int) -> SSAValue:
        if b == 1:
            return a
        if b == 0:
            return self.index(0)
        return self.add(arith.MuliOp(a, self.index(b)))

    # --- structure ---------------------------------------------------------------------

    def for_nest(
        self,
        extents: Sequence[int],
        inits: Sequence[SSAValue],
        body: Callable[[list[SSAValue], list[SSAValue]], list[SSAValue]],
    ) -> list[SSAValue]:
        """Nested `scf.for` loops over `extents` carrying `inits`; `body(ivs, accs)` returns
        the next accumulators. Returns the final accumulators."""
        if not extents:
            return body([], list(inits))
        return self.for_range(
            0,
            extents[0],
            1,
            inits,
            lambda iv, accs: self.for_nest(extents[1:], accs, lambda ivs, a: body([iv, *ivs], a)),
        )

    def for_range(
        self,
        lo: SSAValue | int,
        hi: SSAValue | int,
        step: int,
        inits: Sequence[SSAValue],
        body: Callable[[SSAValue, list[SSAValue]], list[SSAValue]],
    ) -> list[SSAValue]:
        """One `scf.for iv = lo to hi step step` carrying `inits`; `body(iv, accs)` returns the
        next accumulators. Returns the final accumulators."""
        outer = self.block
        block = Block(arg_types=[INDEX, *(v.type for v in inits)])
        self.block = block
        iv, *accs = block.args
        block.add_op(scf.YieldOp(*body(iv, list(accs))))
        self.block = outer
        bounds = [self.index(x) if isinstance(x, int) else x for x in (lo, hi, step)]
        lower, upper, step_ = bounds
        loop = scf.ForOp(lower, upper, step_, inits, block)
        outer.add_op(loop)
        return list(loop.results)

    def parallel(self, extents: Sequence[int], body: Callable[[list[SSAValue]], object]) -> None:
        """One `scf.parallel` over all `extents` (iterations independent); rank 0 runs once."""
        if not extents:
            body([])
            return
        outer = self.block
        block = Block(arg_types=[INDEX] * len(extents))
        self.block = block
        body(list(block.args))
        block.add_op(scf.ReduceOp())
        self.block = outer
        zeros, ones = [self.index(0)] * len(extents), [self.index(1)] * len(extents)
        outer.add_op(scf.ParallelOp(zeros, [self.index(e) for e in extents], ones, Region(block)))

    def if_else(
        self,
        cond: SSAValue,
        result_type: Attribute,
        then: Callable[[], SSAValue],
        otherwise: Callable[[], SSAValue],
    ) -> SSAValue:
        """`scf.if` yielding one value computed by `then` or `otherwise`."""
        outer = self.block
        regions = []
        for branch in (then, otherwise):
            self.block = Block()
            self.block.add_op(scf.YieldOp(branch()))
            regions.append(Region(self.block))
        self.block = outer
        return self.add(scf.IfOp(cond, [result_type], regions[0], regions[1]))

    def when(self, cond: SSAValue, then: Callable[[], object]) -> None:
        """`scf.if` with no results and no else: `then` runs where `cond` holds."""
        outer = self.block
        self.block = Block()
        then()
        self.block.add_op(scf.YieldOp())
        inner, self.block = self.block, outer
        outer.add_op(scf.IfOp(cond, [], Region(inner)))


class FunctionConstants:
    """The constants at the top of a function's body, for a pass that rewrites an existing
    function: one already there is reused, a new one is added at the top."""

    def __init__(self, fn: func.FuncOp):
        self.entry = fn.body.block
        self.known: dict[tuple[Attribute, Attribute], SSAValue] = {
            (op.value, op.result.type): op.result
            for op in self.entry.ops
            if isinstance(op, arith.ConstantOp)
        }

    def get(self, attr: IntegerAttr | FloatAttr) -> SSAValue:
        key = (attr, attr.type)
        if key not in self.known:
            op = arith.ConstantOp(attr)
            Rewriter.insert_op(op, InsertPoint.at_start(self.entry))
            self.known[key] = op.result
        return self.known[key]

    def index(self, n: int) -> SSAValue:
        return self.get(IntegerAttr(n, INDEX))


def add_kernel_buffer(
    kernel: func.FuncOp,
    call: func.CallOp,
    mtype: MemRefType,
    attrs: Mapping[str, Attribute],
    name: str,
) -> tuple[SSAValue, SSAValue, func.CallOp]:
    """A new last parameter of `kernel` named `name`, of type `mtype` with the argument
    attributes `attrs`, and its buffer: allocated in the caller just before `call` (which is replaced
    by one passing it) and freed just before the caller returns. Returns the parameter, the
    caller's buffer and the new call."""
    block = kernel.body.block
    arg = block.insert_arg(mtype, len(block.args))
    arg.name_hint = name
    roles = list(kernel.arg_attrs.data) if kernel.arg_attrs else []
    roles += [DictionaryAttr({})] * (len(block.args) - 1 - len(roles))
    kernel.arg_attrs = ArrayAttr([*roles, DictionaryAttr(attrs)])
    kernel.update_function_type()
    caller = call.parent_block()
    assert caller is not None
    alloc = memref.AllocOp.get(mtype.element_type, 64, mtype.get_shape())
    new = func.CallOp(call.callee, [*call.arguments, alloc.memref], [])
    caller.insert_ops_before([alloc, new], call)
    call.detach()
    call.erase()
    last = caller.last_op
    assert isinstance(last, func.ReturnOp)
    caller.insert_op_before(memref.DeallocOp.get(alloc.memref), last)
    return arg, alloc.memref, new


def free_after_last_use(block: Block, buffer: SSAValue) -> None:
    """`buffer`'s deallocation moved to just after the last op of `block` that reads or
    writes it, directly or through a view of it (`irkit.loops.VIEW_OPS`, `reshape-views`)."""
    dealloc = next(
        (u.operation for u in buffer.uses if isinstance(u.operation, memref.DeallocOp)), None
    )
    users: list[Operation] = []
    pending = [buffer]
    while pending:
        for use in pending.pop().uses:
            if isinstance(use.operation, VIEW_OPS):
                pending.append(use.operation.results[0])
            elif use.operation is not dealloc:
                users.append(use.operation)
    if dealloc is None or not users:
        return
    dealloc.detach()
    block.insert_op_after(dealloc, max(users, key=block.get_operation_index))


def drop_kernel_arg(module: ModuleOp, kernel: func.FuncOp, index: int) -> None:
    """Remove `kernel`'s unused parameter `index` and the operand every call passes for it;
    a caller's allocation nothing else reads is removed with its deallocation."""
    block = kernel.body.block
    assert not block.args[index].uses, "the parameter is still used"
    name = kernel.sym_name.data
    calls = [
        op
        for top in module.ops  # kernels call scalar functions, never kernels: skip their bodies
        if not (isinstance(top, func.FuncOp) and KERNEL_ATTR in top.attributes)
        for op in top.walk()
        if isinstance(op, func.CallOp) and op.callee.root_reference.data == name
    ]
    block.erase_arg(block.args[index])
    if kernel.arg_attrs is not None:
        roles = list(kernel.arg_attrs.data)
        kernel.arg_attrs = ArrayAttr(roles[:index] + roles[index + 1 :])
    kernel.update_function_type()
    for call in calls:
        args = list(call.arguments)
        buffer = args.pop(index)
        caller = call.parent_block()
        assert caller is not None
        caller.insert_op_before(func.CallOp(call.callee, args, []), call)
        call.detach()
        call.erase()
        owner = buffer.owner
        if isinstance(owner, memref.AllocOp) and all(
            isinstance(u.operation, memref.DeallocOp) for u in buffer.uses
        ):
            for use in list(buffer.uses):
                use.operation.detach()
                use.operation.erase()
            owner.detach()
            owner.erase()


def is_weight(value: SSAValue, module: ModuleOp) -> bool:
    """Whether a driver value is a param (argument marked irkit.param), a constant, or a
    buffer a once-per-bind kernel prepares (computed from those alone), or a view of one."""
    value = view_source(value)
    if isinstance(value.owner, memref.GetGlobalOp):
        return True
    if isinstance(value.owner, memref.AllocOp):
        once = once_kernels(module)
        return any(
            isinstance(u.operation, func.CallOp) and u.operation.callee.root_reference.data in once
            for u in value.uses
        )
    if not isinstance(value, BlockArgument):
        return False
    fn = value.block.parent_op()
    if not isinstance(fn, func.FuncOp) or fn.arg_attrs is None:
        return False
    return PARAM_ATTR in fn.arg_attrs.data[value.index].data
