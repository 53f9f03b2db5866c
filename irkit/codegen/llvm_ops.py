"""The LLVM translation of the loop level's ops, one rule an op, and the types and tables
the rules share.

`irkit.codegen.llvm`'s emitter walks functions, blocks and loops and hands every other op to
its rule here (`OP_HANDLERS`: memory, casts, comparisons, vectors, calls), or, for the plain
arithmetic, to a table entry (`FLOAT_BINARY`, `INT_BINARY`, `INTRINSICS`, `LIBM`). A rule
takes the emitter (its builder `b`, the `values` of SSA values emitted so far) and the op,
and binds the op's results. A new op is usually one table entry or one rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import llvmlite.ir as ll
import numpy as np
from xdsl.dialects import arith, func, memref, vector
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    VectorType,
)
from xdsl.ir import Attribute, Operation

from irkit.dialects.cpu import PrefetchOp
from irkit.dialects.math_ext import LdexpOp
from irkit.dtypes import FP8_FORMATS, dtype_name, is_fp8, to_fp8
from irkit.errors import IrkitError
from irkit.loops import (
    KERNEL_ATTR,
)
from irkit.loops.costs import buffer_bytes
from irkit.loops.scalar_ops import llvm_builder_ops, llvm_intrinsics, llvm_libm

if TYPE_CHECKING:
    from irkit.codegen.llvm import LLVMEmitter


I1, I8, I16, I32, I64 = (ll.IntType(n) for n in (1, 8, 16, 32, 64))
PTR = ll.PointerType()
FLOAT_BINARY = llvm_builder_ops(floating=True)
INT_BINARY = llvm_builder_ops(floating=False)
INTRINSICS = llvm_intrinsics()
LIBM = llvm_libm()
CMPF = {
    "oeq": ("==", True), "ogt": (">", True), "oge": (">=", True), "olt": ("<", True),
    "ole": ("<=", True), "one": ("!=", True), "ord": ("ord", True), "ueq": ("==", False),
    "ugt": (">", False), "uge": (">=", False), "ult": ("<", False), "ule": ("<=", False),
    "une": ("!=", False), "uno": ("uno", False),
}  # fmt: skip
CMPI = {
    "eq": ("==", True), "ne": ("!=", True), "slt": ("<", True), "sle": ("<=", True),
    "sgt": (">", True), "sge": (">=", True), "ult": ("<", False), "ule": ("<=", False),
    "ugt": (">", False), "uge": (">=", False),
}  # fmt: skip


def fastmath_flags(op: Operation) -> tuple[str, ...]:
    """An arith/math op's fast-math flags as LLVM spells them (the same names as MLIR's)."""
    attr = op.properties.get("fastmath")
    if not isinstance(attr, arith.FastMathFlagsAttr):
        return ()
    return tuple(sorted(attr.data))


def llvm_type(t: Attribute) -> ll.Type:
    """The LLVM type of a loop-level value (memrefs are pointers, bf16 is stored as i16)."""
    if isinstance(t, MemRefType):
        return PTR
    if isinstance(t, IndexType):
        return I64
    if isinstance(t, IntegerType):
        return ll.IntType(t.width.data)
    if isinstance(t, Float32Type):
        return ll.FloatType()
    if isinstance(t, Float64Type):
        return ll.DoubleType()
    if isinstance(t, Float16Type):
        return ll.HalfType()
    if isinstance(t, BFloat16Type):
        return I16
    if is_fp8(t):  # a byte, converted by `_extf` and `_truncf`
        return I8
    if isinstance(t, VectorType) and t.get_num_dims() == 1:
        return ll.VectorType(llvm_type(t.element_type), t.get_shape()[0])
    raise IrkitError(f"the llvm target has no type for {t}")


def storage_type(element: Attribute) -> ll.Type:
    """How a buffer holds an element: as `llvm_type`, but i1 in a byte (numpy's bool; a
    load tests the byte against 0, a store writes 0 or 1)."""
    if isinstance(element, IntegerType) and element.width.data == 1:
        return ll.IntType(8)
    return llvm_type(element)


def type_suffix(t: ll.Type) -> str:
    """The type's suffix in an intrinsic's name: `f32`, `v8f32`, ..."""
    if isinstance(t, ll.VectorType):
        return f"v{t.count}{type_suffix(t.element)}"
    return {"float": "f32", "double": "f64", "half": "f16"}[str(t)]


def opaque_pointer(pointer: ll.Instruction) -> ll.Instruction:
    """An alloca typed as the opaque `ptr` the rest of the module uses (llvmlite types an
    alloca `T*`, and a bitcast to `ptr` folds away)."""
    pointer.type = PTR
    return pointer


def bf16_bits(x: float) -> int:
    """`x` as a bf16's bits: rounded to nearest even, NaN a quiet NaN."""
    bits = int(np.array(x, dtype=np.float32).view(np.uint32))
    if x != x:
        return 0x7FC0
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


# --- per-op handlers -------------------------------------------------------------------------


def _constant(em: LLVMEmitter, op: arith.ConstantOp) -> None:
    value = op.value
    t = llvm_type(op.result.type)
    if isinstance(value, FloatAttr):
        if isinstance(op.result.type, BFloat16Type):
            out = ll.Constant(I16, bf16_bits(value.value.data))
        elif is_fp8(op.result.type):
            out = ll.Constant(I8, fp8_bits(value.value.data, op.result.type))
        else:
            out = ll.Constant(t, value.value.data)
    elif isinstance(value, IntegerAttr):
        out = ll.Constant(t, value.value.data)
    else:
        raise IrkitError(f"the llvm target cannot translate the constant {value}")
    em.values[op.result] = out


def _load(em: LLVMEmitter, op: memref.LoadOp) -> None:
    assert em.b is not None
    t = storage_type(op.res.type)
    value = em.b.load(em.address(op.memref, list(op.indices)), typ=t)
    if t != llvm_type(op.res.type):  # a boolean's byte
        value = em.b.icmp_unsigned("!=", value, ll.Constant(t, 0))
    em.values[op.res] = value


def _store(em: LLVMEmitter, op: memref.StoreOp) -> None:
    assert em.b is not None
    value = em.values[op.value]
    t = storage_type(op.value.type)
    if t != value.type:
        value = em.b.zext(value, t)
    em.b.store(value, em.address(op.memref, list(op.indices)))


def _vector_load(em: LLVMEmitter, op: vector.LoadOp) -> None:
    """A vector of consecutive elements; aligned to the element only (no claim on the row)."""
    assert em.b is not None
    t = llvm_type(op.result.type)
    ptr = em.address(op.base, list(op.indices))
    em.values[op.result] = em.b.load(ptr, typ=t, align=_element_bytes(t))


def _vector_store(em: LLVMEmitter, op: vector.StoreOp) -> None:
    assert em.b is not None
    value = em.values[op.vector]
    em.b.store(value, em.address(op.base, list(op.indices)), align=_element_bytes(value.type))


def _element_bytes(t: ll.Type) -> int:
    return {"float": 4, "double": 8, "half": 2, "i16": 2}[str(t.element)]


def _broadcast(em: LLVMEmitter, op: vector.BroadcastOp) -> None:
    assert em.b is not None
    t = llvm_type(op.vector.type)
    assert isinstance(t, ll.VectorType)
    undef = ll.Constant(t, ll.Undefined)
    one = em.b.insert_element(undef, em.values[op.source], ll.Constant(I32, 0))
    zeros = ll.Constant(ll.VectorType(I32, t.count), [0] * t.count)
    em.values[op.vector] = em.b.shuffle_vector(one, undef, zeros)


def _shuffle(em: LLVMEmitter, op: vector.ShuffleOp) -> None:
    """`shufflevector` of two 1-D vectors by a constant mask."""
    assert em.b is not None
    mask = ll.Constant(
        ll.VectorType(I32, len(op.mask.get_values())), [int(m) for m in op.mask.get_values()]
    )
    em.values[op.result] = em.b.shuffle_vector(em.values[op.v1], em.values[op.v2], mask)


def _vector_fma(em: LLVMEmitter, op: vector.FMAOp) -> None:
    assert em.b is not None
    args = [em.values[v] for v in (op.lhs, op.rhs, op.acc)]
    em.values[op.res] = em.b.call(em._intrinsic("llvm.fma", args[0].type, 3), args)


def fp8_bits(x: float, t: Attribute) -> int:
    """`x` as the bits of 8-bit float type `t` (to nearest even, saturating)."""
    return int(to_fp8(np.array([x]), dtype_name(t)).view(np.uint8)[0])


def _fp8_to_f32(b: ll.IRBuilder, v: ll.Value, t: Attribute) -> ll.Value:
    """An 8-bit float's byte `v` widened to f32, exactly (the CUDA prelude's helpers)."""
    mbits, bias, _, _ = FP8_FORMATS[dtype_name(t)]
    c = lambda n: ll.Constant(I32, n)  # noqa: E731
    w = b.zext(v, I32)
    e = b.and_(b.lshr(w, c(mbits)), c((1 << (7 - mbits)) - 1))
    m = b.and_(w, c((1 << mbits) - 1))
    normal = b.bitcast(
        b.or_(b.shl(b.add(e, c(127 - bias)), c(23)), b.shl(m, c(23 - mbits))), ll.FloatType()
    )
    tiny = b.fmul(
        b.uitofp(m, ll.FloatType()), ll.Constant(ll.FloatType(), 2.0 ** (1 - bias - mbits))
    )
    x = b.select(b.icmp_unsigned("==", e, c(0)), tiny, normal)
    top = c((1 << (7 - mbits)) - 1)
    if mbits == 3:  # E4M3FN: S.1111.111 is NaN, no infinities
        special = b.icmp_unsigned("==", b.and_(w, c(0x7F)), c(0x7F))
        x = b.select(special, ll.Constant(ll.FloatType(), float("nan")), x)
    else:  # E5M2: exponent 31 is infinity (mantissa 0) or NaN
        inf = b.select(
            b.icmp_unsigned("==", m, c(0)),
            ll.Constant(ll.FloatType(), float("inf")),
            ll.Constant(ll.FloatType(), float("nan")),
        )
        x = b.select(b.icmp_unsigned("==", e, top), inf, x)
    negative = b.icmp_unsigned("!=", b.and_(w, c(0x80)), c(0))
    return b.select(negative, b.fneg(x), x)


def _f32_to_fp8(b: ll.IRBuilder, x: ll.Value, t: Attribute) -> ll.Value:
    """f32 `x` narrowed to 8-bit float `t`: to nearest even, saturating, NaN kept (the
    CUDA prelude's `irkit_float_to_f8`)."""
    mbits, bias, top, nan = FP8_FORMATS[dtype_name(t)]
    largest = int(np.float32(top).view(np.uint32))
    c = lambda n: ll.Constant(I32, n)  # noqa: E731
    bits = b.bitcast(x, I32)
    sign = b.and_(b.lshr(bits, c(24)), c(0x80))
    a = b.and_(bits, c(0x7FFFFFFF))
    a = b.select(b.icmp_unsigned(">", a, c(largest)), c(largest), a)
    e = b.lshr(a, c(23))
    shift = 23 - mbits
    odd = b.and_(b.lshr(a, c(shift)), c(1))
    rounded = b.lshr(b.add(b.add(a, c((1 << (shift - 1)) - 1)), odd), c(shift))
    normal = b.sub(rounded, c((127 - bias) << mbits))
    # subnormal: the value in units of 2^(1 - bias - mbits), to nearest even
    mant = b.or_(
        b.and_(a, c(0x7FFFFF)), b.select(b.icmp_unsigned("==", e, c(0)), c(0), c(0x800000))
    )
    e1 = b.select(b.icmp_unsigned("==", e, c(0)), c(1), e)
    s = b.sub(c(151 - bias - mbits), e1)
    far = b.icmp_unsigned(">=", s, c(32))
    s = b.select(far, c(31), s)
    one = c(1)
    rest = b.and_(mant, b.sub(b.shl(one, s), one))
    half = b.shl(one, b.sub(s, one))
    q = b.lshr(mant, s)
    up = b.or_(
        b.icmp_unsigned(">", rest, half),
        b.and_(b.icmp_unsigned("==", rest, half), b.icmp_unsigned("==", b.and_(q, one), one)),
    )
    tiny = b.select(far, c(0), b.add(q, b.zext(up, I32)))
    out = b.select(b.icmp_unsigned(">=", e, c(128 - bias)), normal, tiny)
    out = b.or_(out, sign)
    is_nan = b.fcmp_unordered("uno", x, x)
    return b.select(is_nan, ll.Constant(I8, nan), b.trunc(out, I8))


def _extf(em: LLVMEmitter, op: arith.ExtFOp) -> None:
    b, x = em.b, em.values[op.input]
    assert b is not None
    if is_fp8(op.input.type):  # through f32; exact into f16, bf16 and f64 too
        wide, to = _fp8_to_f32(b, x, op.input.type), op.result.type
        if isinstance(to, BFloat16Type):  # the top half of the f32's bits
            out = b.trunc(b.lshr(b.bitcast(wide, I32), ll.Constant(I32, 16)), I16)
        elif isinstance(to, Float16Type):
            out = b.fptrunc(wide, ll.HalfType())
        elif isinstance(to, Float64Type):
            out = b.fpext(wide, ll.DoubleType())
        else:
            out = wide
        em.values[op.result] = out
        return
    if isinstance(op.input.type, BFloat16Type):  # bf16 bits are the top half of an f32
        wide = b.bitcast(b.shl(b.zext(x, I32), ll.Constant(I32, 16)), ll.FloatType())
        out = wide if isinstance(op.result.type, Float32Type) else b.fpext(wide, ll.DoubleType())
    elif isinstance(op.input.type, Float16Type) and isinstance(op.result.type, Float64Type):
        # exact through f32; a direct half->double extension is a compiler-rt libcall
        out = b.fpext(b.fpext(x, ll.FloatType()), ll.DoubleType())
    else:
        out = b.fpext(x, llvm_type(op.result.type))
    em.values[op.result] = out


def _truncf(em: LLVMEmitter, op: arith.TruncFOp) -> None:
    b, x = em.b, em.values[op.input]
    assert b is not None
    if is_fp8(op.result.type):
        if isinstance(op.input.type, Float64Type):  # through f32, as the GPU path does
            x = b.fptrunc(x, ll.FloatType())
        elif isinstance(op.input.type, Float16Type):
            x = b.fpext(x, ll.FloatType())
        elif isinstance(op.input.type, BFloat16Type):
            x = b.bitcast(b.shl(b.zext(x, I32), ll.Constant(I32, 16)), ll.FloatType())
        em.values[op.result] = _f32_to_fp8(b, x, op.result.type)
        return
    if isinstance(op.result.type, Float16Type) and isinstance(op.input.type, Float64Type):
        # Through f32: a direct double->half rounding is a compiler-rt libcall that the JIT
        # cannot resolve in this process (it crashed). Rounding twice can differ from
        # rounding once only when the f32 value lands exactly on an f16 tie.
        em.values[op.result] = b.fptrunc(b.fptrunc(x, ll.FloatType()), ll.HalfType())
        return
    if not isinstance(op.result.type, BFloat16Type):
        em.values[op.result] = b.fptrunc(x, llvm_type(op.result.type))
        return
    if isinstance(op.input.type, Float64Type):
        x = b.fptrunc(x, ll.FloatType())
    bits = b.bitcast(x, I32)
    odd = b.and_(b.lshr(bits, ll.Constant(I32, 16)), ll.Constant(I32, 1))
    rounded = b.lshr(b.add(bits, b.add(odd, ll.Constant(I32, 0x7FFF))), ll.Constant(I32, 16))
    is_nan = b.fcmp_unordered("uno", x, x)
    em.values[op.result] = b.select(is_nan, ll.Constant(I16, 0x7FC0), b.trunc(rounded, I16))


def _cmpf(em: LLVMEmitter, op: arith.CmpfOp) -> None:
    assert em.b is not None
    name = arith.CMPF_COMPARISON_OPERATIONS[op.predicate.value.data]
    pred, ordered = CMPF[name]
    cmp = em.b.fcmp_ordered if ordered else em.b.fcmp_unordered
    em.values[op.result] = cmp(pred, em.values[op.lhs], em.values[op.rhs])


def _cmpi(em: LLVMEmitter, op: arith.CmpiOp) -> None:
    assert em.b is not None
    name = arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data]
    pred, signed = CMPI[name]
    cmp = em.b.icmp_signed if signed else em.b.icmp_unsigned
    em.values[op.result] = cmp(pred, em.values[op.lhs], em.values[op.rhs])


def _minmax_int(pred: str) -> Callable[[LLVMEmitter, Operation], None]:
    def handle(em: LLVMEmitter, op: Operation) -> None:
        assert em.b is not None
        a, c = (em.values[v] for v in op.operands)
        em.values[op.results[0]] = em.b.select(em.b.icmp_signed(pred, a, c), a, c)

    return handle


def _unary(build: Callable[[ll.IRBuilder, ll.Value, ll.Type], ll.Value]):
    def handle(em: LLVMEmitter, op: Operation) -> None:
        assert em.b is not None
        res = op.results[0]
        em.values[res] = build(em.b, em.values[op.operands[0]], llvm_type(res.type))

    return handle


def _select(em: LLVMEmitter, op: arith.SelectOp) -> None:
    assert em.b is not None
    cond, a, c = (em.values[v] for v in op.operands)
    em.values[op.result] = em.b.select(cond, a, c)


def _alloc(em: LLVMEmitter, op: memref.AllocOp) -> None:
    assert em.b is not None
    mtype = op.memref.type
    assert isinstance(mtype, MemRefType)
    size = buffer_bytes(mtype)
    # Buffers of a page or more start on a page, as bound buffers do, so that where the
    # allocator puts them does not change a measurement (runtime.backend.page_aligned).
    align = 4096 if size >= 4096 else 64
    size = (size + align - 1) // align * align or align  # aligned_alloc wants a multiple
    alloc = em._extern("aligned_alloc", PTR, [I64, I64])
    args = [ll.Constant(I64, align), ll.Constant(I64, size)]
    driver = op.parent_op()
    if not isinstance(driver, func.FuncOp) or KERNEL_ATTR in driver.attributes:
        em.values[op.memref] = em.b.call(alloc, args)
        return
    # The driver's scratch (intermediates between kernels) is allocated on its first call
    # and kept: a fresh buffer of more than glibc's mmap threshold (32 MiB at most) would
    # be new pages on every call, and faulting them in cost more than the kernels that
    # fill them (measured: an im2col matrix of 58 MB, 2.5 ms to fill, ~25 ms of faults).
    # `<driver>.release` frees them; the executable calls it when it is dropped. One
    # consequence: a driver is not reentrant (two threads must not call it at once).
    slot = em.scratch.get(op)
    if slot is None:
        slot = ll.GlobalVariable(em.module, PTR, f"{driver.sym_name.data}.scratch{len(em.scratch)}")
        slot.linkage = "internal"
        slot.initializer = ll.Constant(PTR, None)
        em.scratch[op] = slot
    with em.b.if_then(
        em.b.icmp_unsigned("==", em.b.load(slot, typ=PTR), ll.Constant(PTR, None)), likely=False
    ):
        em.b.store(em.b.call(alloc, args), slot)
    em.values[op.memref] = em.b.load(slot, typ=PTR)
    em.kept.add(op.memref)


def _alloca(em: LLVMEmitter, op: memref.AllocaOp) -> None:
    """A stack buffer, allocated once in the entry block of the function being emitted (an
    outlined loop body's, so each thread has its own), however deep the op is in loops."""
    b, fn = em.b, em.fn
    assert b is not None and fn is not None
    mtype = op.memref.type
    assert isinstance(mtype, MemRefType)
    here = b.block
    b.position_at_start(fn.entry_basic_block)
    slot = b.alloca(ll.ArrayType(ll.IntType(8), buffer_bytes(mtype)))
    slot.align = 64
    b.position_at_end(here)
    em.values[op.memref] = opaque_pointer(slot)


def _dealloc(em: LLVMEmitter, op: memref.DeallocOp) -> None:
    assert em.b is not None
    if op.memref not in em.kept:
        em.b.call(em._extern("free", ll.VoidType(), [PTR]), [em.values[op.memref]])


def _copy(em: LLVMEmitter, op: memref.CopyOp) -> None:
    assert em.b is not None
    mtype = op.source.type
    assert isinstance(mtype, MemRefType)
    memcpy = em._extern("memcpy", PTR, [PTR, PTR, I64])
    src, dst = em.values[op.source], em.values[op.destination]
    em.b.call(memcpy, [dst, src, ll.Constant(I64, buffer_bytes(mtype))])


def _view(em: LLVMEmitter, op: memref.CollapseShapeOp | memref.ExpandShapeOp) -> None:
    """A driver's view (`reshape-views`): the same pointer, since a memref is its pointer."""
    em.values[op.results[0]] = em.values[op.src]


def _byte_view(em: LLVMEmitter, op: memref.ViewOp) -> None:
    """A buffer placed in the driver's arena (`share-buffers`): the arena's pointer advanced
    by the byte shift."""
    assert em.b is not None
    em.values[op.result] = em.b.gep(
        em.values[op.source], [em.values[op.byte_shift]], source_etype=ll.IntType(8)
    )


def _get_global(em: LLVMEmitter, op: memref.GetGlobalOp) -> None:
    em.values[op.memref] = em.global_value(op.name_.root_reference.data)


def _call(em: LLVMEmitter, op: func.CallOp) -> None:
    assert em.b is not None
    callee = em.functions[op.callee.root_reference.data]
    out = em.b.call(callee, [em.values[v] for v in op.arguments])
    if op.res:
        em.values[op.res[0]] = out


def _return(em: LLVMEmitter, op: func.ReturnOp) -> None:
    assert em.b is not None
    if op.arguments:
        em.b.ret(em.values[op.arguments[0]])
    else:
        em.b.ret_void()


def _prefetch(em: LLVMEmitter, op: PrefetchOp) -> None:
    """`llvm.prefetch` (read, data) at an address that may lie past the buffer's end."""
    name = "llvm.prefetch.p0"
    fn = em.module.globals.get(name) or ll.Function(
        em.module, ll.FunctionType(ll.VoidType(), [PTR, I32, I32, I32]), name
    )
    at = em.address(op.memref, list(op.indices), inbounds=False)
    locality = ll.Constant(I32, op.locality.value.data)
    em.b.call(fn, [at, ll.Constant(I32, 0), locality, ll.Constant(I32, 1)])  # type: ignore[union-attr]


def _ldexp(em: LLVMEmitter, op: LdexpOp) -> None:
    """`llvm.ldexp` (one `vscalefps` a vector with AVX-512)."""
    x, n = em.values[op.x], em.values[op.n]
    name = f"llvm.ldexp.{type_suffix(x.type)}.i32"
    fn = em.module.globals.get(name) or ll.Function(
        em.module, ll.FunctionType(x.type, [x.type, I32]), name
    )
    em.values[op.result] = em.b.call(fn, [x, n])  # type: ignore[union-attr]


OP_HANDLERS: dict[type[Operation], Callable[[LLVMEmitter, Any], None]] = {
    arith.ConstantOp: _constant,
    arith.CmpfOp: _cmpf,
    arith.CmpiOp: _cmpi,
    arith.SelectOp: _select,
    arith.ExtFOp: _extf,
    arith.TruncFOp: _truncf,
    arith.MaxSIOp: _minmax_int(">"),
    arith.MinSIOp: _minmax_int("<"),
    arith.NegfOp: _unary(lambda b, x, t: b.fneg(x)),
    arith.SIToFPOp: _unary(lambda b, x, t: b.sitofp(x, t)),
    arith.FPToSIOp: _unary(lambda b, x, t: b.fptosi(x, t)),
    arith.ExtSIOp: _unary(lambda b, x, t: b.sext(x, t)),
    arith.ExtUIOp: _unary(lambda b, x, t: b.zext(x, t)),
    arith.TruncIOp: _unary(lambda b, x, t: b.trunc(x, t)),
    arith.UIToFPOp: _unary(lambda b, x, t: b.uitofp(x, t)),
    arith.BitcastOp: _unary(lambda b, x, t: b.bitcast(x, t)),
    arith.IndexCastOp: _unary(
        lambda b, x, t: (
            x if x.type == t else b.sext(x, t) if t.width > x.type.width else b.trunc(x, t)
        )
    ),  # noqa: E501
    xmath.RsqrtOp: _unary(lambda b, x, t: b.fdiv(ll.Constant(t, 1.0), b.call(_sqrt(b, t), [x]))),
    LdexpOp: _ldexp,
    PrefetchOp: _prefetch,
    memref.LoadOp: _load,
    memref.StoreOp: _store,
    vector.LoadOp: _vector_load,
    vector.StoreOp: _vector_store,
    vector.BroadcastOp: _broadcast,
    vector.FMAOp: _vector_fma,
    vector.ShuffleOp: _shuffle,
    memref.AllocOp: _alloc,
    memref.AllocaOp: _alloca,
    memref.DeallocOp: _dealloc,
    memref.CopyOp: _copy,
    memref.GetGlobalOp: _get_global,
    memref.CollapseShapeOp: _view,
    memref.ExpandShapeOp: _view,
    memref.ViewOp: _byte_view,
    func.CallOp: _call,
    func.ReturnOp: _return,
}


def _sqrt(b: ll.IRBuilder, t: ll.Type) -> ll.Function:
    module = b.module
    name = f"llvm.sqrt.{type_suffix(t)}"
    return module.globals.get(name) or ll.Function(module, ll.FunctionType(t, [t]), name)
