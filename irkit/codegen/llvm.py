"""LLVM IR from the loop level, built with llvmlite.

Input: a module after `lower-graph-to-loops` (func, scf, memref, arith, math over static
shapes). Every `func.func` becomes an LLVM function with external linkage, so each kernel
can be called (and timed) on its own and the driver can call them all; a scalar function
(`irkit.inline`) becomes an internal `alwaysinline` one, defined in each kernel's module that
calls it, so O3 inlines it before it vectorizes the loop around the call.

Conventions (the "bare pointer" calling convention):
- a memref is a pointer to its first element; shapes are static, so an index is linearized
  with constant row-major strides; every pointer argument is `noalias` (irkit never passes
  one buffer twice to a kernel that writes it);
- `index` is i64; f16 is `half`; bf16 is stored as i16 and widened/rounded with integer
  operations (round to nearest even, NaN kept quiet);
- `scf.parallel` becomes sequential nested loops, or, marked `irkit.threads = T` by
  `cpu-parallelize`, its first dimension cut into chunks run by the body outlined: claimed
  one at a time by the caller and the workers of irkit's own pool (`irkit_pool_run`,
  `irkit.codegen.pool`: up to 4T chunks, nobody waits for a worker that wakes late), or T
  chunks on libgomp's pool (`GOMP_parallel`) or on POSIX threads created and joined per loop,
  whichever `host.thread_pool()` chose; resolved in the running process;
- `memref.alloc`/`dealloc` call the C library's aligned_alloc/free (the driver's scratch is
  allocated once and kept until `irkit.release()`); `tanh` and `erf` call
  the C math library, which the JIT resolves in the running process;
- a `memref.global` over 16 KiB (a model's weights) is not written into the IR text as
  constants (formatting and parsing a million floats took seconds per compile): its bytes
  are kept, page-aligned, in this process and it is declared `external global
  @"irkit.const.<sha256>"`, a symbol the JIT resolves to them. Named by content, one symbol
  always means one value.

This module emits the structure (modules, functions, loops, threaded loops, the driver);
each op's translation is a rule or a table entry in `irkit.codegen.llvm_ops`, where a new op
usually goes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Any

import llvmlite.ir as ll
import numpy as np
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import (
    BFloat16Type,
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    NoneAttr,
    VectorType,
)
from xdsl.ir import Block, Operation, Region, SSAValue

from irkit.codegen.llvm_ops import (
    FLOAT_BINARY,
    I1,
    I16,
    I32,
    I64,
    INT_BINARY,
    INTRINSICS,
    LIBM,
    OP_HANDLERS,
    PTR,
    bf16_bits,
    fastmath_flags,
    llvm_type,
    opaque_pointer,
    storage_type,
    type_suffix,
)
from irkit.dtypes import dense_array, is_fp8
from irkit.errors import IrkitError
from irkit.loops import (
    KERNEL_ATTR,
    THREADS_ATTR,
    callees,
    constant_int,
    is_scalar_function,
    once_calls,
    prepared_buffers,
)

RELEASE = "irkit.release"
"""The function every translated module has that frees its driver's kept scratch."""
STEADY = ".steady"
"""The suffix of a driver's steady-state form, `@<driver>.steady`, which a driver that calls
once-per-bind kernels also gets: the same calls without those, and each of their prepared
buffers (`irkit.loops.prepared_buffers`, in order) an extra pointer argument after the
driver's own."""
KERNEL_STACK_ALIGN = 64
"""The stack alignment every kernel, outlined loop body and the trampoline a body inlines
into realigns to on entry (`alignstack`): a cache line, so that where the caller's stack
happened to be does not change a kernel's speed. LLVM keeps the stack temporaries it makes
for a vector taken apart lane by lane (a vectorized loop calling the C math library, `expf`
or `erff`, once a lane) at the ABI's 16 bytes rather than realign, so a 64-byte one split a
cache line for three of the four places a caller's stack may be, and every lane's reload
paid for it. Measured on the 2-core znver4 VM (2026-11-27): softmax with libm's exp (no
`expand-math`) ran 1.70 ms where its driver jumped to the kernel and 1.90 ms where it
called it (any pass that adds a kernel after it does that), the kernel's code identical;
realigned, 1.70 ms both. default-cpu: mlp and layernorm unchanged, transformer_block 2%
faster. 0: the ABI's alignment (nothing realigned)."""


LINK_BYTES = 16384
"""Globals larger than this are linked by symbol rather than written into the IR."""


def constant_symbol(data: bytes) -> str:
    """The external symbol a large constant's bytes are linked under (by content)."""
    return f"irkit.const.{hashlib.sha256(data).hexdigest()[:24]}"


def linked_constants(module: ModuleOp) -> dict[str, bytes]:
    """The constants of `module` that its LLVM IR refers to by symbol rather than holds
    (those over LINK_BYTES): symbol -> bytes. The runtime registers them before JIT."""
    out = {}
    for op in module.ops:
        if isinstance(op, memref.GlobalOp) and isinstance(
            op.initial_value, DenseIntOrFPElementsAttr
        ):
            data = op.initial_value.data.data
            if len(data) > LINK_BYTES:
                out[constant_symbol(data)] = data
    return out


def global_ops(module: ModuleOp) -> dict[str, memref.GlobalOp]:
    """The module's `memref.global`s by name."""
    return {op.sym_name.data: op for op in module.ops if isinstance(op, memref.GlobalOp)}


class LLVMEmitter:
    """Translates one loop-level module into an llvmlite module."""

    def __init__(self, module: ModuleOp, name: str = "irkit", pool: str = "", names: bool = True):
        self.source = module
        self.pool = pool
        """Where threaded loops run: "irkit" (`irkit.codegen.pool`), "gomp" (libgomp's
        `GOMP_parallel`), or "" (threads created and joined per loop)."""
        self.names = names
        """Values take their IR name hints (off for code compiled by content, whose text
        should not change with a name)."""
        self.global_ops = global_ops(module)
        self.module = ll.Module(name)
        self.functions: dict[str, ll.Function] = {}
        self.globals: dict[str, ll.GlobalVariable] = {}
        self.values: dict[SSAValue, ll.Value] = {}
        self.b: ll.IRBuilder | None = None
        self.fn: ll.Function | None = None
        self.outlined: dict[str, int] = {}
        self.scratch: dict[memref.AllocOp, ll.GlobalVariable] = {}
        """The driver's kept scratch buffers, by allocation (see `_alloc`): the driver and its
        steady form share them."""
        self.kept: set[SSAValue] = set()

    def emit(self) -> ll.Module:
        ops = list(self.source.ops)
        for op in ops:
            if isinstance(op, memref.GlobalOp):
                self._global(op)
            elif isinstance(op, func.FuncOp):
                self._declare(op)
            else:
                raise IrkitError(f"the llvm target cannot translate top-level {op.name}")
        for op in ops:
            if isinstance(op, func.FuncOp) and op.body.blocks:
                self._define(op)
                self._define_steady(op)
        self._release_function()
        return self.module

    def emit_kernel(self, op: func.FuncOp, symbol: str) -> ll.Module:
        """One kernel alone, defined as `@symbol` (the functions outlined from it with it),
        with the globals it reads: a module compiled and cached by its own content."""
        self._declare(op, symbol)
        inlined = callees(self.source, op)
        for fn in inlined:
            self._declare(fn)
        self._define(op)
        for fn in inlined:
            self._define(fn)
        return self.module

    def emit_driver(self, symbols: dict[str, str]) -> ll.Module:
        """Everything but the kernels: the driver, calling each kernel by its symbol in
        `symbols` (kernel name -> symbol; kernels with equal code share one), and
        `irkit.release`."""
        ops = [op for op in self.source.ops if not isinstance(op, memref.GlobalOp)]
        called = {
            f
            for op in ops
            if isinstance(op, func.FuncOp)
            and op.sym_name.data not in symbols
            and not is_scalar_function(op)
            for f in callees(self.source, op)
        }
        ops = [op for op in ops if not is_scalar_function(op) or op in called]
        for op in ops:
            if not isinstance(op, func.FuncOp):
                raise IrkitError(f"the llvm target cannot translate top-level {op.name}")
            self._declare(op, symbols.get(op.sym_name.data))
        for op in ops:
            if isinstance(op, func.FuncOp) and op.body.blocks and op.sym_name.data not in symbols:
                self._define(op)
                self._define_steady(op)
        self._release_function()
        return self.module

    def global_value(self, name: str) -> ll.GlobalVariable:
        """The global `@name`, defined in this module when first used."""
        if name not in self.globals:
            self._global(self.global_ops[name])
        return self.globals[name]

    def _release_function(self) -> None:
        """`irkit.release()`: free the driver's kept scratch buffers (null pointers are fine)."""
        fn = ll.Function(self.module, ll.FunctionType(ll.VoidType(), []), RELEASE)
        b = ll.IRBuilder(fn.append_basic_block("entry"))
        free = self._extern("free", ll.VoidType(), [PTR])
        for slot in self.scratch.values():
            b.call(free, [b.load(slot, typ=PTR)])
            b.store(ll.Constant(PTR, None), slot)
        b.ret_void()

    # --- module level --------------------------------------------------------------------

    def _global(self, op: memref.GlobalOp) -> None:
        mtype = op.type
        assert isinstance(mtype, MemRefType)
        init = op.initial_value
        if not isinstance(init, DenseIntOrFPElementsAttr):
            raise IrkitError(f"memref.global @{op.sym_name.data} needs a dense initial value")
        elem = storage_type(mtype.element_type)
        data = init.data.data
        if len(data) > LINK_BYTES:
            count = math.prod(mtype.get_shape())
            gv = ll.GlobalVariable(self.module, ll.ArrayType(elem, count), constant_symbol(data))
            gv.global_constant = True
            gv.align = 64
            self.globals[op.sym_name.data] = gv
            return
        values = [] if is_fp8(mtype.element_type) else init.get_values()
        if is_fp8(mtype.element_type):  # the bytes as they are
            consts = [ll.Constant(elem, int(v)) for v in dense_array(init).view(np.uint8)]
        elif isinstance(mtype.element_type, BFloat16Type):
            consts = [ll.Constant(I16, bf16_bits(float(v))) for v in values]
        elif isinstance(mtype.element_type, IntegerType):
            consts = [ll.Constant(elem, int(v)) for v in values]
        else:
            consts = [ll.Constant(elem, float(v)) for v in values]
        gv = ll.GlobalVariable(self.module, ll.ArrayType(elem, len(consts)), op.sym_name.data)
        gv.initializer = ll.Constant(ll.ArrayType(elem, len(consts)), consts)
        gv.global_constant = True
        gv.linkage = "internal"
        gv.align = 64
        self.globals[op.sym_name.data] = gv

    def _declare(self, op: func.FuncOp, symbol: str | None = None) -> None:
        outputs = op.function_type.outputs.data
        scalar = is_scalar_function(op)
        if outputs and not (scalar and len(outputs) == 1):
            raise IrkitError(
                f"@{op.sym_name.data}: the llvm target expects functions with no results "
                "(or scalar functions with one)"
            )
        symbol = symbol or op.sym_name.data
        if symbol in self.module.globals:  # a kernel whose code another one shares
            self.functions[op.sym_name.data] = self.module.globals[symbol]
            return
        args = [llvm_type(t) for t in op.function_type.inputs.data]
        result = llvm_type(outputs[0]) if outputs else ll.VoidType()
        fn = ll.Function(self.module, ll.FunctionType(result, args), symbol)
        if scalar:  # inlined wherever it is called (see irkit.loops)
            fn.linkage = "internal"
            fn.attributes.add("alwaysinline")
        for arg, t in zip(fn.args, op.function_type.inputs.data, strict=True):
            if isinstance(t, MemRefType):
                arg.add_attribute("noalias")
        fn.attributes.add("nounwind")
        if KERNEL_ATTR in op.attributes:
            # A kernel is a launch unit, as on a GPU: kept out of line so that the time of
            # a kernel alone is the time it takes inside the driver, and nothing is
            # optimized across kernel boundaries that a GPU launch could not.
            fn.attributes.add("noinline")
            _realigned(fn)
        self.functions[op.sym_name.data] = fn

    def _define(self, op: func.FuncOp) -> None:
        self.fn = self.functions[op.sym_name.data]
        self.b = ll.IRBuilder(self.fn.append_basic_block("entry"))
        block = op.body.block
        for arg, value in zip(block.args, self.fn.args, strict=True):
            value.name = (arg.name_hint or "") if self.names else ""
            self.values[arg] = value
        self._block(block)

    def _define_steady(self, op: func.FuncOp) -> None:
        """`@<driver>.steady` (see STEADY) for a driver that calls once-per-bind kernels."""
        if KERNEL_ATTR in op.attributes:
            return
        skip: set[Operation] = set(once_calls(self.source, op))
        if not skip:
            return
        prepared = prepared_buffers(self.source, op)
        for v in prepared:  # their allocations and deallocations: the caller's now
            skip.add(v.owner)  # type: ignore[arg-type]
            skip.update(u.operation for u in v.uses if isinstance(u.operation, memref.DeallocOp))
        inputs = [llvm_type(t) for t in op.function_type.inputs.data] + [PTR] * len(prepared)
        self.fn = ll.Function(
            self.module, ll.FunctionType(ll.VoidType(), inputs), op.sym_name.data + STEADY
        )
        self.fn.attributes.add("nounwind")
        for arg in self.fn.args:
            if arg.type == PTR:
                arg.add_attribute("noalias")
        self.b = ll.IRBuilder(self.fn.append_basic_block("entry"))
        values = [*op.body.block.args, *prepared]
        for i, (value, arg) in enumerate(zip(values, self.fn.args, strict=True)):
            if self.names:
                arg.name = value.name_hint or f"prepared{i - len(op.body.block.args)}"
            self.values[value] = arg
        for o in op.body.block.ops:
            if o not in skip:
                self._op(o)

    # --- blocks and structured control flow ------------------------------------------------

    def _block(self, block: Block) -> list[ll.Value]:
        """Emit a block's ops; returns the operands of its scf terminator, if any."""
        for op in block.ops:
            if isinstance(op, scf.YieldOp):
                return [self.values[v] for v in op.operands]
            if isinstance(op, scf.ReduceOp):
                return []
            self._op(op)
        return []

    def _loop(
        self,
        lb: ll.Value,
        ub: ll.Value,
        step: ll.Value,
        inits: list[ll.Value],
        body: Callable[[ll.Value, list[ll.Value]], list[ll.Value]],
        vectorize_whole: bool = False,
    ) -> list[ll.Value]:
        """A counted loop `for (iv = lb; iv < ub; iv += step)` carrying `inits`;
        `vectorize_whole`: LLVM is told not to unroll it (`LoopID`), so that its vectorizer
        takes it as it is (see `_vectorizable_row`)."""
        b = self.b
        assert b is not None and self.fn is not None
        pre = b.block
        header = self.fn.append_basic_block("loop")
        inner = self.fn.append_basic_block("body")
        done = self.fn.append_basic_block("done")
        b.branch(header)
        b.position_at_end(header)
        iv = b.phi(I64, "iv")
        iv.add_incoming(lb, pre)
        phis = []
        for v in inits:
            phi = b.phi(v.type)
            phi.add_incoming(v, pre)
            phis.append(phi)
        b.cbranch(b.icmp_signed("<", iv, ub), inner, done)
        b.position_at_end(inner)
        nexts = body(iv, phis)
        latch = b.block
        iv.add_incoming(b.add(iv, step, flags=["nsw", "nuw"]), latch)
        for phi, v in zip(phis, nexts, strict=True):
            phi.add_incoming(v, latch)
        back = b.branch(header)
        if vectorize_whole:
            disable = self.module.add_metadata([ll.MetaDataString(self.module, NO_UNROLL)])
            back.set_metadata("llvm.loop", LoopID(self.module, [disable]))
        b.position_at_end(done)
        return phis

    def _for(self, op: scf.ForOp) -> None:
        block = op.body.block

        def body(iv: ll.Value, accs: list[ll.Value]) -> list[ll.Value]:
            self.values[block.args[0]] = iv
            self.values.update(zip(block.args[1:], accs, strict=True))
            return self._block(block)

        v = self.values
        whole = not op.iter_args and _vectorizable_row(op.lb, op.ub, op.step, op.body)
        inits = [v[i] for i in op.iter_args]
        results = self._loop(v[op.lb], v[op.ub], v[op.step], inits, body, whole)
        self.values.update(zip(op.results, results, strict=True))

    def _parallel(self, op: scf.ParallelOp) -> None:
        if op.initVals:
            raise IrkitError("the llvm target cannot translate scf.parallel with reductions")
        threads = op.attributes.get(THREADS_ATTR)
        if isinstance(threads, IntegerAttr) and threads.value.data > 1:
            self._threaded(op, threads.value.data)
        else:
            v = self.values
            self._nest(op, v[op.lowerBound[0]], v[op.upperBound[0]])

    def _nest(self, op: scf.ParallelOp, lb: ll.Value, ub: ll.Value) -> None:
        """The loops of `op` in order, the first running from `lb` to `ub`."""
        block = op.body.block
        v = self.values
        bounds = list(zip(op.lowerBound, op.upperBound, op.step, block.args, strict=True))

        def nest(level: int) -> None:
            if level == len(bounds):
                self._block(block)
                return
            lower, upper, step, arg = bounds[level]

            def body(iv: ll.Value, _: list[ll.Value]) -> list[ll.Value]:
                self.values[arg] = iv
                nest(level + 1)
                return []

            first = level == 0
            whole = level == len(bounds) - 1 and _vectorizable_row(lower, upper, step, op.body)
            self._loop(
                lb if first else v[lower], ub if first else v[upper], v[step], [], body, whole
            )

        nest(0)

    def _threaded(self, op: scf.ParallelOp, threads: int) -> None:
        """`op` fork-join on `threads` POSIX threads (`cpu-parallelize`): the loop nest is
        outlined into `@<kernel>.par<n>.body(live-ins..., lo, hi)`, called through a
        `ptr (ptr)` trampoline that unpacks a context; the first dimension's iterations
        are cut into `threads` contiguous chunks, chunk 0 runs on the calling thread. A
        thread that cannot be created has its chunk run on the calling thread instead."""
        b, fn = self.b, self.fn
        assert b is not None and fn is not None
        live = self._live_ins(op)
        count = self.outlined[fn.name] = self.outlined.get(fn.name, -1) + 1
        name = f"{fn.name}.par{count}"
        body = self._outline(op, live, name + ".body")
        if self.pool == "irkit":
            self._claimed(op, name, body, live, threads)
            return
        context = ll.LiteralStructType([x.type for x in live] + [I64, I64])
        if self.pool:
            trampoline = self._pool_trampoline(name, body, context, threads)
        else:
            trampoline = ll.Function(self.module, ll.FunctionType(PTR, [PTR]), name)
            trampoline.linkage = "internal"
            _realigned(trampoline)  # the body inlines into it
            tb = ll.IRBuilder(trampoline.append_basic_block("entry"))
            _call_unpacked(tb, body, trampoline.args[0], context)
            tb.ret(ll.Constant(PTR, None))

        v = self.values
        lb, ub, step = v[op.lowerBound[0]], v[op.upperBound[0]], v[op.step[0]]
        # trips = ceil((ub - lb) / step); thread t runs trips [t*trips/T, (t+1)*trips/T)
        span = b.sub(ub, lb)
        trips = b.sdiv(b.add(span, b.sub(step, ll.Constant(I64, 1))), step)
        here = b.block
        b.position_at_start(fn.entry_basic_block)  # static allocas, in the entry block
        contexts, handles, created = (
            opaque_pointer(b.alloca(t, ll.Constant(I32, threads), name=n))
            for t, n in ((context, "contexts"), (I64, "threads"), (I1, "created"))
        )
        b.position_at_end(here)
        for t in range(threads):
            start = b.sdiv(b.mul(trips, ll.Constant(I64, t)), ll.Constant(I64, threads))
            end = b.sdiv(b.mul(trips, ll.Constant(I64, t + 1)), ll.Constant(I64, threads))
            lo, hi = b.add(lb, b.mul(start, step)), b.add(lb, b.mul(end, step))
            slot = _item(b, contexts, context, t)
            for i, value in enumerate([*live, lo, hi]):
                b.store(value, _field(b, slot, context, i))
        if self.pool:
            run = self._extern("GOMP_parallel", ll.VoidType(), [PTR, PTR, I32, I32])
            b.call(run, [trampoline, contexts, ll.Constant(I32, threads), ll.Constant(I32, 0)])
            return
        create = self._extern("pthread_create", I32, [PTR, PTR, PTR, PTR])
        join = self._extern("pthread_join", I32, [I64, PTR])
        for t in range(1, threads):
            slot = _item(b, contexts, context, t)
            rc = b.call(
                create, [_item(b, handles, I64, t), ll.Constant(PTR, None), trampoline, slot]
            )
            ok = b.icmp_signed("==", rc, ll.Constant(I32, 0))
            b.store(ok, _item(b, created, I1, t))
            with b.if_then(b.not_(ok)):
                b.call(trampoline, [slot])
        b.call(trampoline, [_item(b, contexts, context, 0)])
        for t in range(1, threads):
            with b.if_then(b.load(_item(b, created, I1, t), typ=I1)):
                handle = b.load(_item(b, handles, I64, t), typ=I64)
                b.call(join, [handle, ll.Constant(PTR, None)])

    def _claimed(
        self, op: scf.ParallelOp, name: str, body: ll.Function, live: list[ll.Value], threads: int
    ) -> None:
        """`op` on irkit's pool: one context (the live-ins, the first dimension's lower bound,
        step and trip count, and the number of chunks), a `void (ptr, i64 chunk)` trampoline
        running chunk c's contiguous share of the trips, and one `irkit_pool_run` call with
        min(trips, `chunks_per_thread()` * threads) chunks."""
        from irkit.codegen.pool import RUN, chunks_per_thread

        b, fn = self.b, self.fn
        assert b is not None and fn is not None
        context = ll.LiteralStructType([x.type for x in live] + [I64] * 4)
        trampoline = ll.Function(self.module, ll.FunctionType(ll.VoidType(), [PTR, I64]), name)
        trampoline.linkage = "internal"
        _realigned(trampoline)  # the body inlines into it
        tb = ll.IRBuilder(trampoline.append_basic_block("entry"))
        ctx, chunk = trampoline.args
        fields = [
            tb.load(_field(tb, ctx, context, i), typ=t) for i, t in enumerate(context.elements)
        ]
        *values, lb, step, trips, chunks = fields
        start = tb.sdiv(tb.mul(trips, chunk), chunks)
        end = tb.sdiv(tb.mul(trips, tb.add(chunk, ll.Constant(I64, 1))), chunks)
        lo, hi = tb.add(lb, tb.mul(start, step)), tb.add(lb, tb.mul(end, step))
        tb.call(body, [*values, lo, hi])
        tb.ret_void()

        v = self.values
        lb, ub, step = v[op.lowerBound[0]], v[op.upperBound[0]], v[op.step[0]]
        span = b.sub(ub, lb)
        trips = b.sdiv(b.add(span, b.sub(step, ll.Constant(I64, 1))), step)
        most = ll.Constant(I64, chunks_per_thread() * threads)
        chunks = b.select(b.icmp_signed("<", trips, most), trips, most)
        here = b.block
        b.position_at_start(fn.entry_basic_block)  # a static alloca, in the entry block
        slot = opaque_pointer(b.alloca(context, name="context"))
        b.position_at_end(here)
        for i, value in enumerate([*live, lb, step, trips, chunks]):
            b.store(value, _field(b, slot, context, i))
        run = self._extern(RUN, ll.VoidType(), [PTR, PTR, I64, I32])
        b.call(run, [trampoline, slot, chunks, ll.Constant(I32, threads)])

    def _pool_trampoline(
        self, name: str, body: ll.Function, context: ll.LiteralStructType, chunks: int
    ) -> ll.Function:
        """`void (ptr contexts)` for `GOMP_parallel`: pool thread t runs chunks t, t + n,
        ... (n: the threads the pool gave, which may be fewer than asked)."""
        fn = ll.Function(self.module, ll.FunctionType(ll.VoidType(), [PTR]), name)
        fn.linkage = "internal"
        _realigned(fn)  # the body inlines into it
        entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
        tb = ll.IRBuilder(entry)
        me = tb.zext(tb.call(self._extern("omp_get_thread_num", I32, []), []), I64)
        team = tb.zext(tb.call(self._extern("omp_get_num_threads", I32, []), []), I64)
        tb.cbranch(tb.icmp_signed("<", me, ll.Constant(I64, chunks)), loop, done)
        tb.position_at_end(loop)
        chunk = tb.phi(I64)
        chunk.add_incoming(me, entry)
        _call_unpacked(tb, body, tb.gep(fn.args[0], [chunk], source_etype=context), context)
        following = tb.add(chunk, team)
        chunk.add_incoming(following, loop)
        tb.cbranch(tb.icmp_signed("<", following, ll.Constant(I64, chunks)), loop, done)
        tb.position_at_end(done)
        tb.ret_void()
        return fn

    def _live_ins(self, op: Operation) -> list[ll.Value]:
        """The function-local LLVM values `op`'s nested ops read from outside it (constants
        and globals need no passing), each once, in first-use order."""
        inner = {id(o) for o in op.walk()}
        out: dict[int, ll.Value] = {}
        for o in op.walk():
            for value in o.operands:
                owner = value.owner  # an op, or the block whose argument it is
                defining = owner.parent_op() if isinstance(owner, Block) else owner
                if defining is not None and id(defining) in inner:
                    continue
                x = self.values[value]
                if isinstance(x, ll.Argument | ll.Instruction):
                    out.setdefault(id(x), x)
        return list(out.values())

    def _outline(self, op: scf.ParallelOp, live: list[ll.Value], name: str) -> ll.Function:
        """`op`'s loop nest as an internal function of `live` and the first dimension's
        bounds; pointers keep the `noalias` their kernel arguments have."""
        saved = self.b, self.fn, self.values
        body = ll.Function(
            self.module, ll.FunctionType(ll.VoidType(), [x.type for x in live] + [I64, I64]), name
        )
        body.linkage = "internal"
        _realigned(body)
        *params, lo, hi = body.args
        remap = {id(x): arg for x, arg in zip(live, params, strict=True)}
        for x, arg in zip(live, params, strict=True):
            arg.name = x.name
            if isinstance(x, ll.Argument) and "noalias" in x.attributes:
                arg.add_attribute("noalias")
        lo.name, hi.name = "lo", "hi"
        self.values = {k: remap.get(id(x), x) for k, x in saved[2].items()}
        self.fn, self.b = body, ll.IRBuilder(body.append_basic_block("entry"))
        self._nest(op, lo, hi)
        self.b.ret_void()
        self.b, self.fn, self.values = saved
        return body

    def _if(self, op: scf.IfOp) -> None:
        b = self.b
        assert b is not None and self.fn is not None
        then_bb = self.fn.append_basic_block("then")
        else_bb = self.fn.append_basic_block("else")
        merge = self.fn.append_basic_block("endif")
        b.cbranch(self.values[op.cond], then_bb, else_bb)
        incoming = []
        for bb, region in ((then_bb, op.true_region), (else_bb, op.false_region)):
            b.position_at_end(bb)
            results = self._block(region.block) if region.blocks else []
            incoming.append((results, b.block))
            b.branch(merge)
        b.position_at_end(merge)
        for i, result in enumerate(op.results):
            phi = b.phi(llvm_type(result.type))
            for results, bb in incoming:
                phi.add_incoming(results[i], bb)
            self.values[result] = phi

    # --- ops -------------------------------------------------------------------------------

    def _op(self, op: Operation) -> None:
        handler = _HANDLERS.get(type(op))
        if handler is not None:
            handler(self, op)
            return
        b = self.b
        assert b is not None
        args = [self.values[v] for v in op.operands]
        flags = fastmath_flags(op)
        if type(op) in FLOAT_BINARY:
            out = getattr(b, FLOAT_BINARY[type(op)])(*args, flags=flags)
        elif type(op) in INT_BINARY:
            out = getattr(b, INT_BINARY[type(op)])(*args)
        elif type(op) in INTRINSICS:
            fn = self._intrinsic(INTRINSICS[type(op)], args[0].type, len(args))
            out = b.call(fn, args, fastmath=flags)
        elif type(op) in LIBM:
            out = b.call(self._libm(LIBM[type(op)], args[0].type), args)
        else:
            raise IrkitError(f"the llvm target cannot translate {op.name}")
        self.values[op.results[0]] = out

    def _intrinsic(self, name: str, t: ll.Type, arity: int) -> ll.Function:
        full = f"{name}.{type_suffix(t)}"
        existing = self.module.globals.get(full)
        if existing is None:
            existing = ll.Function(self.module, ll.FunctionType(t, [t] * arity), full)
        return existing

    def _libm(self, name: str, t: ll.Type) -> ll.Function:
        full = {"float": name + "f", "double": name}.get(str(t))
        if full is None:
            raise IrkitError(f"the llvm target has no {name} for {t}")
        existing = self.module.globals.get(full)
        if existing is None:
            existing = ll.Function(self.module, ll.FunctionType(t, [t]), full)
        return existing

    def _extern(self, name: str, ret: ll.Type, args: list[ll.Type]) -> ll.Function:
        existing = self.module.globals.get(name)
        if existing is None:
            existing = ll.Function(self.module, ll.FunctionType(ret, args), name)
        return existing

    def address(self, ref: SSAValue, indices: list[SSAValue], inbounds: bool = True) -> ll.Value:
        """The element pointer: base + row-major linear index (static strides); `inbounds`
        unless the index may fall outside the buffer (a prefetch's).

        An index that is a sum (`arith.addi`/`subi`, and multiples by constants, a few
        levels deep) is distributed over the strides: `x[n, oy + ky, ox + kx, c]` becomes
        `n*S0 + oy*S1 + ky*S1 + ox*S2 + kx*S2 + c`, whose loop-invariant terms LLVM's
        reassociation groups and LICM hoists (an implicit-GEMM microkernel's row offsets),
        where the nested form `((n*H + oy + ky)*W + ox + kx)*C + c` is recomputed at every
        step."""
        mtype = ref.type
        assert isinstance(mtype, MemRefType)
        if not isinstance(mtype.layout, NoneAttr):
            raise IrkitError(f"the llvm target supports identity layouts only, got {mtype}")
        b = self.b
        assert b is not None
        shape = mtype.get_shape()
        elem = storage_type(mtype.element_type)
        if any(isinstance(idx.owner, _SUM_OPS) for idx in indices):
            return b.gep(
                self.values[ref],
                [self._distributed(indices, shape, inbounds)],
                inbounds=inbounds,
                source_etype=elem,
            )
        linear: ll.Value = ll.Constant(I64, 0)
        flags = ["nsw", "nuw"] if inbounds else []
        for i, (idx, dim) in enumerate(zip(indices, shape, strict=True)):
            if i:
                linear = b.mul(linear, ll.Constant(I64, dim), flags=flags)
            linear = b.add(linear, self.values[idx], flags=flags)
        return b.gep(self.values[ref], [linear], inbounds=inbounds, source_etype=elem)

    def _distributed(
        self, indices: list[SSAValue], shape: tuple[int, ...], inbounds: bool
    ) -> ll.Value:
        """The linear index as a sum of terms times constant strides (see `address`); `nsw`
        only, since a term may be negative where the sum is not."""
        b = self.b
        assert b is not None
        terms: dict[SSAValue, int] = {}
        offset = 0
        for d, idx in enumerate(indices):
            offset += self._linear_terms(idx, math.prod(shape[d + 1 :]), terms, _SUM_DEPTH)
        flags = ["nsw"] if inbounds else []
        linear: ll.Value | None = None
        for value, scale in terms.items():
            if scale == 0:
                continue
            term = self.values[value]
            if scale != 1:
                term = b.mul(term, ll.Constant(I64, scale), flags=flags)
            linear = term if linear is None else b.add(linear, term, flags=flags)
        if linear is None:
            return ll.Constant(I64, offset)
        return b.add(linear, ll.Constant(I64, offset), flags=flags) if offset else linear

    def _linear_terms(
        self, value: SSAValue, scale: int, terms: dict[SSAValue, int], depth: int
    ) -> int:
        """Add `value * scale`'s terms to `terms` (value -> coefficient); its constant part.
        Only sums computed in the function being emitted are opened (an outlined loop body
        has the sums it captures, not their operands)."""
        c = constant_int(value)
        if c is not None:
            return c * scale
        op = value.owner
        here = self.values.get(value)
        local = isinstance(here, ll.Instruction) and here.function is self.fn
        if depth and local and isinstance(op, arith.AddiOp | arith.SubiOp):
            sign = -1 if isinstance(op, arith.SubiOp) else 1
            return self._linear_terms(op.lhs, scale, terms, depth - 1) + self._linear_terms(
                op.rhs, sign * scale, terms, depth - 1
            )
        if depth and local and isinstance(op, arith.MuliOp):
            for factor, other in ((op.rhs, op.lhs), (op.lhs, op.rhs)):
                k = constant_int(factor)
                if k is not None:
                    return self._linear_terms(other, scale * k, terms, depth - 1)
        terms[value] = terms.get(value, 0) + scale
        return 0


_SUM_OPS = (arith.AddiOp, arith.SubiOp, arith.MuliOp)
_SUM_DEPTH = 4
"""How many levels of sums `LLVMEmitter.address` distributes over the strides."""


def _item(b: ll.IRBuilder, array: ll.Value, element: ll.Type, n: int) -> ll.Value:
    """The address of element `n` of an array of `element`s."""
    return b.gep(array, [ll.Constant(I32, n)], source_etype=element)


def _field(b: ll.IRBuilder, record: ll.Value, struct: ll.Type, n: int) -> ll.Value:
    """The address of field `n` of the `struct` at `record`."""
    return b.gep(record, [ll.Constant(I32, 0), ll.Constant(I32, n)], source_etype=struct)


def _call_unpacked(
    b: ll.IRBuilder, body: ll.Function, record: ll.Value, context: ll.LiteralStructType
) -> None:
    """Call an outlined loop body with the fields of its `context` record as arguments."""
    fields = [b.load(_field(b, record, context, i), typ=t) for i, t in enumerate(context.elements)]
    b.call(body, fields)


NO_UNROLL = "llvm.loop.unroll.disable"
ROW_TRIPS = (8, 256)
"""The trip counts of an innermost loop that `_vectorizable_row` hands to LLVM's vectorizer
whole: whole vectors of 8 (256-bit f32) from 8 to 256 trips. Other counts are left to
LLVM, which unrolls a short row and vectorizes it as straight-line code (a row update over
12 columns, the untiled matmul of a 12-channel 1x1 convolution: 56 us unrolled, 723 us as a
loop of one 8-lane vector and four scalar trips)."""


def _vectorizable_row(lb: SSAValue, ub: SSAValue, step: SSAValue, body: Region) -> bool:
    """Whether an innermost loop (an `scf.for` without carried values, or a parallel nest's
    last dimension) is a row LLVM should vectorize as a loop rather than unroll: scalar code
    (no loop inside, no vector values: irkit's own microkernels are vectors already) over a
    constant trip count in ROW_TRIPS.

    O3 unrolls a loop of a few dozen trips completely before it vectorizes; the vectorizer
    then takes the loop around it, whose accesses stride by a row, and gathers and scatters
    (an add over NHWC tensors of 32 channels: 75 us for 100,352 elements, 192 gathers and 96
    scatters in the kernel; told not to unroll the row, 9.5 us on one znver5 core; the same
    in a tiled matmul's epilogue over each 6 x 32 tile of C)."""
    first, last, stride = (constant_int(v) for v in (lb, ub, step))
    if first is None or last is None or not stride:
        return False
    trips = (last - first) // stride
    if not ROW_TRIPS[0] <= trips <= ROW_TRIPS[1] or trips % ROW_TRIPS[0]:
        return False
    for inner in body.walk():
        if isinstance(inner, scf.ForOp | scf.ParallelOp | scf.WhileOp):
            return False
        if any(isinstance(r.type, VectorType) for r in inner.results):
            return False
    return True


class LoopID(ll.values.MDValue):
    """A loop's `llvm.loop` metadata: a distinct node whose first operand is itself, as
    LLVM requires of a loop ID (llvmlite's metadata nodes are uniqued by their operands)."""

    def __init__(self, module: ll.Module, properties: list[ll.values.MDValue]):
        super().__init__(module, [], name=str(len(module.metadata)))
        self.operands = (self, *properties)

    def descr(self, buf: list[str]) -> None:
        buf += ["distinct "]
        super().descr(buf)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


def _realigned(fn: ll.Function) -> None:
    """`fn` realigns its stack to `KERNEL_STACK_ALIGN` (and is nounwind: llvmlite prints a
    function's alignstack only beside some other attribute)."""
    fn.attributes.add("nounwind")
    fn.attributes.alignstack = KERNEL_STACK_ALIGN


_HANDLERS: dict[type[Operation], Callable[[LLVMEmitter, Any], None]] = {
    **OP_HANDLERS,
    scf.ForOp: LLVMEmitter._for,
    scf.ParallelOp: LLVMEmitter._parallel,
    scf.IfOp: LLVMEmitter._if,
}


def to_llvm(module: ModuleOp, name: str = "irkit", pool: str = "") -> ll.Module:
    """Translate a loop-level module into an (unoptimized) llvmlite module; threaded loops
    run on `pool` (see `LLVMEmitter.pool`; the process must have it installed or loaded)."""
    from irkit.loops import launch_of

    mapped = [
        op.sym_name.data
        for op in module.ops
        if isinstance(op, func.FuncOp) and launch_of(op) is not None
    ]
    if mapped:
        raise IrkitError(
            f"the llvm and asm targets take CPU-level IR; @{mapped[0]} is mapped to the GPU "
            "(by map-to-gpu or a GPU pipeline): print it with -t cuda or -t ptx"
        )
    return LLVMEmitter(module, name, pool).emit()
