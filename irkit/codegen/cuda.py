"""CUDA C from the GPU-mapped loop level (after `map-to-gpu`).

The printer is table-driven, in two layers: `CPrinter` knows C (types, operators, math
library calls, loops, conditionals, flat row-major indexing of static-shape buffers) and
`CudaPrinter` overrides what CUDA adds: `extern "C" __global__` kernels with
`__launch_bounds__`, `__restrict__` pointers (`const` when the kernel never stores through
them), `threadIdx`/`blockIdx`, `__syncthreads()`, `__shared__` arrays, and the f16/bf16
types of cuda_fp16.h and cuda_bf16.h (arithmetic on them happens in f32, as the loop level
already says with extf/truncf). A new op is usually one table entry.

Every SSA value becomes one `const` local named after what it is (`tid`, `bid`, `i7`, `v12`),
one statement per line, so the CUDA source reads op by op against the IR.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np
from xdsl.dialects import arith, func, gpu, memref, scf, vector
from xdsl.dialects.builtin import (
    BFloat16Type,
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
    VectorType,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

from irkit.codegen import cuda_tma, cuda_wgmma
from irkit.dialects.cpu import PrefetchOp
from irkit.dialects.warp import (
    MMA_OPS,
    LdmatrixX4Op,
    MmaM16n8k16Op,
    MmaM16n8k32F8Op,
    ShuffleModeEnum,
    ShuffleOp,
)
from irkit.dialects.warp_async import (
    ASYNC_COPY_OPS,
    CpAsyncCommitOp,
    CpAsyncOp,
    CpAsyncWaitOp,
    WgmmaCommitOp,
    WgmmaFenceOp,
    WgmmaOp,
    WgmmaWaitOp,
)
from irkit.dialects.warp_tma import TMA_OPS, TensorMap, TmaLoadOp, tensor_maps
from irkit.dtypes import FP8_FORMATS, dtype_name, is_fp8, numpy_dtype, to_fp8
from irkit.errors import IrkitError
from irkit.ir import shape_of
from irkit.loops import (
    SHARED_SPACE,
    STATIC_SHARED_LIMIT,
    Launch,
    callees,
    is_loop_level,
    kernels,
    launch_of,
    shared_layout,
)
from irkit.loops.scalar_ops import c_calls, c_infix

C_RESERVED = frozenset(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
    char32_t class compl concept const consteval constexpr constinit const_cast continue
    co_await co_return co_yield decltype default delete do double dynamic_cast else enum
    explicit export extern false float for friend goto if inline int long mutable namespace new
    noexcept not not_eq nullptr operator or or_eq private protected public register
    reinterpret_cast requires restrict return short signed sizeof static static_assert
    static_cast struct switch template this thread_local throw true try typedef typeid typename
    union unsigned using virtual void volatile wchar_t while xor xor_eq main std
    NULL NAN INFINITY HUGE_VAL HUGE_VALF HUGE_VALL FP_NAN FP_INFINITE FP_ZERO FP_SUBNORMAL
    FP_NORMAL FP_ILOGB0 FP_ILOGBNAN MATH_ERRNO MATH_ERREXCEPT math_errhandling errno assert
    EOF EXIT_SUCCESS EXIT_FAILURE RAND_MAX MB_CUR_MAX""".split()
)
"""C and C++ keywords, and the macros and names the C and math headers define (a host
build of the CUDA C includes them): never a local's name."""

CUDA_RESERVED = frozenset(
    """threadIdx blockIdx blockDim gridDim warpSize dim3 float2 float4 double2 half
    half2 nv_bfloat16 nv_bfloat162""".split()
)
"""CUDA's built-in variables and types."""

_CALLED = frozenset(fn for pair in c_calls().values() for fn in pair)
"""Functions a kernel may call: the math table's (irkit's helpers are `irkit_` names)."""


def reserved(name: str) -> bool:
    """Whether a C name could mean something else in a kernel: a keyword, a built-in, a
    function the printer calls (its math table, irkit's helpers), or a name C++ keeps for
    the implementation (`__x`, `_X`)."""
    return (
        name in C_RESERVED
        or name in CUDA_RESERVED
        or name in _CALLED
        or name.startswith(("__", "irkit_"))
        or (name.startswith("_") and name[1:2].isupper())
    )


class CPrinter:
    """C99 from loop-level ops: the base the CUDA printer specializes."""

    INFIX: dict[type[Operation], str] = c_infix(unsigned=False)
    UNSIGNED_INFIX: dict[type[Operation], str] = c_infix(unsigned=True)
    CALLS: dict[type[Operation], tuple[str, str]] = c_calls()  # op: (f32 function, f64 function)
    CMPF: dict[str, str] = {
        "oeq": "{a} == {b}", "ogt": "{a} > {b}", "oge": "{a} >= {b}", "olt": "{a} < {b}",
        "ole": "{a} <= {b}", "one": "({a} < {b} || {a} > {b})", "une": "{a} != {b}",
        "ueq": "!({a} < {b} || {a} > {b})", "ugt": "!({a} <= {b})", "uge": "!({a} < {b})",
        "ult": "!({a} >= {b})", "ule": "!({a} > {b})", "ord": "({a} == {a} && {b} == {b})",
        "uno": "({a} != {a} || {b} != {b})",
    }  # fmt: skip
    CMPI: dict[str, str] = {"eq": "==", "ne": "!=", "slt": "<", "sle": "<=", "sgt": ">", "sge": ">=",
                            "ult": "<", "ule": "<=", "ugt": ">", "uge": ">="}  # fmt: skip
    PRELUDE = ""

    def __init__(self, index_type: str = "int"):
        self.index_type = index_type
        self.wgmma_carried: dict[SSAValue, str] = {}
        """A loop's first carried wgmma accumulator and the array all of them are
        (`cuda_wgmma.carried`; `for_`)."""
        self.lines: list[str] = []
        self.indent = 1
        self.names: dict[SSAValue, str] = {}
        self.taken: set[str] = set()
        """Every name in the function: locals, parameters, shared arrays."""
        self.counter = 0

    # --- names and types --------------------------------------------------------------------

    def type_name(self, t: Attribute) -> str:
        if isinstance(t, IndexType):
            return self.index_type
        if isinstance(t, IntegerType):
            # built-in names: NVRTC compiles without <stdint.h>
            names = {1: "bool", 8: "signed char", 16: "short", 32: "int", 64: "long long"}
            if t.width.data not in names:
                raise IrkitError(f"the C printer has no type for {t}")
            return names[t.width.data]
        if isinstance(t, Float32Type):
            return "float"
        if isinstance(t, Float64Type):
            return "double"
        raise IrkitError(f"the C printer has no type for {t}")

    def fresh(self, value: SSAValue, prefix: str, alone: bool = False) -> str:
        """A C name for `value`: its IR name hint, else `prefix` alone where `alone` and it
        is free (thread geometry, kernel parameters), else `prefix` with a number."""
        hint = re.sub(r"\W", "_", value.name_hint or "")
        taken = self.taken
        if hint and not hint[0].isdigit() and hint not in taken and not reserved(hint):
            name = hint
        elif alone and prefix not in taken:
            name = prefix
        else:
            name = f"{prefix}{self.counter}"
            while name in taken:  # a parameter may be called `v5` by its model
                self.counter += 1
                name = f"{prefix}{self.counter}"
        self.counter += 1
        self.names[value] = name
        taken.add(name)
        return name

    def name(self, value: SSAValue) -> str:
        if value in self.names:
            return self.names[value]
        op = value.owner
        if isinstance(op, arith.ConstantOp):
            return self.literal(op)
        raise IrkitError(f"the C printer met a value before its definition ({value})")

    def literal(self, op: arith.ConstantOp) -> str:
        v = op.value
        t = op.result.type
        if isinstance(v, IntegerAttr):
            n = v.value.data
            return (
                ("true" if n else "false")
                if isinstance(t, IntegerType) and t.width.data == 1
                else str(n)
            )
        assert isinstance(v, FloatAttr)
        x = float(v.value.data)
        if isinstance(t, Float64Type):
            if math.isfinite(x):
                return repr(x) if "e" in repr(x) or "." in repr(x) else f"{repr(x)}.0"
            bits = struct.unpack("<q", struct.pack("<d", x))[0]
            return f"__longlong_as_double({bits}LL)"
        if math.isfinite(x):
            return f"{float(struct.unpack('<f', struct.pack('<f', x))[0])!r}f"
        bits = struct.unpack("<I", struct.pack("<f", x))[0]
        return f"__int_as_float(0x{bits:08x})"

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.indent + line)

    def define(self, value: SSAValue, expr: str, prefix: str = "v", alone: bool = False) -> None:
        name = self.fresh(value, prefix, alone)
        self.emit(f"const {self.type_name(value.type)} {name} = {expr};")

    # --- memory -----------------------------------------------------------------------------

    def element(self, buffer: SSAValue, indices: list[SSAValue]) -> str:
        return self.element_at(buffer, [self.name(ix) for ix in indices])

    def element_at(self, buffer: SSAValue, names: list[str]) -> str:
        """The element of `buffer` at the indices named `names` (C expressions)."""
        t = buffer.type
        assert isinstance(t, MemRefType)
        shape = t.get_shape()
        terms = []
        for d, name in enumerate(names):
            stride = math.prod(shape[d + 1 :])
            if name == "0":
                continue
            terms.append(name if stride == 1 else f"{name} * {stride}")
        return f"{self.name(buffer)}[{' + '.join(terms) or '0'}]"

    # --- ops --------------------------------------------------------------------------------

    def block(self, block: Block) -> list[SSAValue]:
        for op in block.ops:
            if isinstance(op, scf.YieldOp):
                return list(op.operands)
            if isinstance(op, func.ReturnOp | scf.ReduceOp):
                return []
            self.op(op)
        return []

    def op(self, op: Operation) -> None:
        handler = self.handler(type(op))
        if handler is None:
            raise IrkitError(f"the CUDA printer has no rule for {op.name}")
        handler(self, op)

    def handler(self, kind: type[Operation]) -> Callable[[CPrinter, Operation], None] | None:
        t = type(self)
        for cls in t.__mro__:
            table = cls.__dict__.get("HANDLERS")
            if table and kind in table:
                return table[kind]
        return None

    def float_call(self, op: Operation) -> None:
        f32, f64 = self.CALLS[type(op)]
        fn = f64 if isinstance(op.results[0].type, Float64Type) else f32
        args = ", ".join(self.name(v) for v in op.operands)
        self.define(op.results[0], f"{fn}({args})")

    def infix(self, op: Operation) -> None:
        sym = self.INFIX[type(op)]
        self.define(
            op.results[0],
            f"{self.name(op.operands[0])} {sym} {self.name(op.operands[1])}",
            "i" if isinstance(op.results[0].type, IndexType) else "v",
        )

    def unsigned_infix(self, op: Operation) -> None:
        """divui, remui, shrui: the operands read as the unsigned type of their width."""
        sym = self.UNSIGNED_INFIX[type(op)]
        a, b = (self.name(v) for v in op.operands)
        signed = self.type_name(op.results[0].type)
        unsigned = "unsigned " + signed.removeprefix("signed ")
        rhs = b if b.isdigit() else f"({unsigned}){b}"
        self.define(op.results[0], f"({signed})(({unsigned}){a} {sym} {rhs})", "i")

    def cmpf(self, op: arith.CmpfOp) -> None:
        pred = arith.CMPF_COMPARISON_OPERATIONS[op.predicate.value.data]
        self.define(
            op.result, self.CMPF[pred].format(a=self.name(op.lhs), b=self.name(op.rhs)), "p"
        )

    def cmpi(self, op: arith.CmpiOp) -> None:
        pred = arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data]
        a, b = self.name(op.lhs), self.name(op.rhs)
        if pred.startswith("u") and not (a.isdigit() or b.isdigit()):
            a, b = f"(unsigned){a}", f"(unsigned){b}"
        self.define(op.result, f"{a} {self.CMPI[pred]} {b}", "p")

    def select(self, op: arith.SelectOp) -> None:
        c, a, b = (self.name(v) for v in op.operands)
        self.define(op.result, f"{c} ? {a} : {b}")

    def cast(self, op: Operation) -> None:
        self.define(
            op.results[0], f"({self.type_name(op.results[0].type)}){self.name(op.operands[0])}"
        )

    def negf(self, op: Operation) -> None:
        self.define(op.results[0], f"-{self.name(op.operands[0])}")

    def minmax_int(self, op: Operation) -> None:
        a, b = (self.name(v) for v in op.operands)
        sym = ">" if isinstance(op, arith.MaxSIOp) else "<"
        self.define(op.results[0], f"{a} {sym} {b} ? {a} : {b}", "i")

    def constant(self, op: arith.ConstantOp) -> None:
        pass  # constants are printed inline where they are used

    def call(self, op: func.CallOp) -> None:
        """A call of a scalar function (printed before the kernels by `scalar_function`)."""
        if len(op.res) != 1:
            raise IrkitError(
                f"the C printer calls only scalar functions, not @{op.callee.root_reference.data}"
            )
        args = ", ".join(self.name(v) for v in op.arguments)
        self.define(op.res[0], f"{op.callee.root_reference.data}({args})")

    def scalar_function(self, fn: func.FuncOp) -> str:
        """A scalar function (`irkit.inline`) as a `__device__ __forceinline__` C function."""
        self.names, self.counter, self.taken = {}, 0, set()
        params = [
            f"{self.type_name(a.type)} {self.fresh(a, f'arg{i}', alone=True)}"
            for i, a in enumerate(fn.body.block.args)
        ]
        self.lines, self.indent = [], 1
        for op in fn.body.block.ops:
            if isinstance(op, func.ReturnOp):
                self.emit(f"return {self.name(op.arguments[0])};")
            else:
                self.op(op)
        (result,) = fn.function_type.outputs.data
        return (
            f"__device__ __forceinline__ {self.type_name(result)} "
            f"{fn.sym_name.data}({', '.join(params)}) {{\n" + "\n".join(self.lines) + "\n}\n"
        )

    def load(self, op: memref.LoadOp) -> None:
        self.define(op.res, self.element(op.memref, list(op.indices)))

    def store(self, op: memref.StoreOp) -> None:
        self.emit(f"{self.element(op.memref, list(op.indices))} = {self.name(op.value)};")

    def prefetch(self, op: PrefetchOp) -> None:
        pass  # a CPU cache hint: nothing on the GPU

    def for_(self, op: scf.ForOp) -> None:
        iv, *args = op.body.block.args
        carried = cuda_wgmma.carried(op)  # wgmma accumulators: one array, no copies
        if carried is not None:
            first, count = carried
            array = self.fresh(op.results[first], "acc")
            inits = ", ".join(self.name(v) for v in op.iter_args[first : first + count])
            self.emit(f"float {array}[{count}] = {{{inits}}};")
            for i in range(count):
                self.names[args[first + i]] = self.names[op.results[first + i]] = f"{array}[{i}]"
            # the body's first wgmma takes them, and so does one after the loop (a peeled k tile)
            self.wgmma_carried[args[first]] = self.wgmma_carried[op.results[first]] = array
        span = range(carried[0], sum(carried)) if carried is not None else range(0)
        kept = [i for i in range(len(args)) if i not in span]
        accs = []
        for i in kept:
            init, result = op.iter_args[i], op.results[i]
            name = self.fresh(result, "acc")
            accs.append(name)
            self.emit(f"{self.type_name(result.type)} {name} = {self.name(init)};")
        k = self.fresh(iv, "k")
        it = self.index_type
        self.emit(
            f"for ({it} {k} = {self.name(op.lb)}; {k} < {self.name(op.ub)}; {k} += {self.name(op.step)}) {{"
        )
        self.indent += 1
        for i, name in zip(kept, accs, strict=True):
            self.names[args[i]] = name
        yielded = self.block(op.body.block)
        self.assign(accs, [yielded[i] for i in kept])
        self.indent -= 1
        self.emit("}")

    def assign(self, targets: list[str], values: list[SSAValue]) -> None:
        names = [self.name(v) for v in values]
        if len(targets) > 1:  # through temporaries: a yield may swap accumulators
            temps = []
            for v, n in zip(values, names, strict=True):
                temp = f"next{self.counter}"
                while temp in self.taken:
                    self.counter += 1
                    temp = f"next{self.counter}"
                self.counter += 1
                self.taken.add(temp)
                temps.append(temp)
                self.emit(f"const {self.type_name(v.type)} {temp} = {n};")
            names = temps
        for t, n in zip(targets, names, strict=True):
            if t != n:
                self.emit(f"{t} = {n};")

    def if_(self, op: scf.IfOp) -> None:
        results = [self.fresh(r, "r") for r in op.results]
        for r, name in zip(op.results, results, strict=True):
            self.emit(f"{self.type_name(r.type)} {name};")
        self.emit(f"if ({self.name(op.cond)}) {{")
        self.indent += 1
        self.assign(results, self.block(op.true_region.block))
        self.indent -= 1
        if op.false_region.blocks and (op.results or len(op.false_region.block.ops) > 1):
            self.emit("} else {")
            self.indent += 1
            self.assign(results, self.block(op.false_region.block))
            self.indent -= 1
        self.emit("}")

    HANDLERS: dict[type[Operation], Callable] = {
        **dict.fromkeys(INFIX, infix),
        **dict.fromkeys(UNSIGNED_INFIX, unsigned_infix),
        **dict.fromkeys(CALLS, float_call),
        arith.CmpfOp: cmpf, arith.CmpiOp: cmpi, arith.SelectOp: select,
        arith.SIToFPOp: cast, arith.FPToSIOp: cast, arith.IndexCastOp: cast, arith.NegfOp: negf,
        arith.UIToFPOp: cast, arith.ExtSIOp: cast, arith.ExtUIOp: cast, arith.TruncIOp: cast,
        arith.MaxSIOp: minmax_int, arith.MinSIOp: minmax_int, arith.ConstantOp: constant,
        memref.LoadOp: load, memref.StoreOp: store, scf.ForOp: for_, scf.IfOp: if_,
        PrefetchOp: prefetch, func.CallOp: call,
    }  # fmt: skip


class CudaPrinter(CPrinter):
    """CUDA C: kernels, thread geometry, barriers, shared memory, f16 and bf16."""

    def __init__(self, index_type: str = "int"):
        super().__init__(index_type)
        self.dynamic_offsets: dict[str, int] = {}
        """The kernel's shared buffers in its dynamic shared memory, by name (`kernel`)."""
        self.cluster_offsets: dict[str, int] = {}
        """A clustered kernel's shared buffers in a host build, by name: offsets into the
        running block's arena (`irkit_host::cta_shared`), as a cluster's blocks run at once
        and each has its own shared memory."""
        self.wgmma_arrays: dict[Operation, str] = {}
        """Each wgmma's accumulator array (a chain of wgmma ops shares one)."""
        self.wgmma_fence = False
        """A wgmma fence met and not yet printed (`wgmma_sync`)."""
        self.tensor_maps: list[TensorMap] = []
        """The kernel's tensor maps, in parameter order (`irkit.dialects.warp_tma`)."""
        self.tma_dests: dict[SSAValue, int] = {}
        """The shared buffers TMA copies land in, and their alignment (128 or 1024 bytes)."""

    HALF_HEADERS = (
        "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
        "#ifndef IRKIT_CUDA_HOST  // cuda-host's header has them\n"
        "struct __align__(4) irkit_f16x2 { __half v[2]; };\n"
        "struct __align__(16) irkit_f16x8 { __half v[8]; };\n"
        "struct __align__(4) irkit_bf16x2 { __nv_bfloat16 v[2]; };\n"
        "struct __align__(16) irkit_bf16x8 { __nv_bfloat16 v[8]; };\n"
        "#endif\n"
    )
    """The f16 and bf16 headers, and the vectors of them the GPU passes load and store."""
    PRELUDE = """\
// NaN-propagating max/min (arith.maximumf/minimumf); fmaxf would drop a NaN.
__device__ __forceinline__ float irkit_maximumf(float a, float b) { return (a != a || b != b) ? a + b : fmaxf(a, b); }
__device__ __forceinline__ float irkit_minimumf(float a, float b) { return (a != a || b != b) ? a + b : fminf(a, b); }
__device__ __forceinline__ double irkit_maximum(double a, double b) { return (a != a || b != b) ? a + b : fmax(a, b); }
__device__ __forceinline__ double irkit_minimum(double a, double b) { return (a != a || b != b) ? a + b : fmin(a, b); }
__device__ __forceinline__ float irkit_rsqrtf(float a) { return 1.0f / sqrtf(a); }
__device__ __forceinline__ double irkit_rsqrt(double a) { return 1.0 / sqrt(a); }
"""
    GEOMETRY: ClassVar[dict[type[Operation], tuple[str, str]]] = {
        gpu.ThreadIdOp: ("threadIdx", "tid"),
        gpu.BlockIdOp: ("blockIdx", "bid"),
        gpu.BlockDimOp: ("blockDim", "ntid"),
        gpu.GridDimOp: ("gridDim", "nbid"),
    }

    VECTOR_TYPES = {
        ("f32", 4): "float4", ("f32", 2): "float2", ("f64", 2): "double2",
        ("f16", 2): "irkit_f16x2", ("f16", 8): "irkit_f16x8",
        ("bf16", 2): "irkit_bf16x2", ("bf16", 8): "irkit_bf16x8",
        ("f8E4M3FN", 4): "irkit_f8x4", ("f8E5M2", 4): "irkit_f8x4",
    }  # fmt: skip
    """CUDA's built-in vector types for the vectors irkit's GPU passes build (16-byte and
    8-byte accesses), components `.x .y .z .w`; and the prelude's for f16 and bf16 (a pair
    is one 32-bit register of an mma, 8 are a 16-byte access; 4 bytes of an 8-bit float, one
    register), components `.v[i]`."""

    def component(self, t: Attribute, i: int) -> str:
        """Component `i` of a vector of type `t`, as CUDA C spells it."""
        return f"v[{i}]" if self.type_name(t).startswith("irkit_") else "xyzw"[i]

    def type_name(self, t: Attribute) -> str:
        if is_fp8(t):  # storage only: converted by the prelude's helpers (FP8_HELPERS)
            return "unsigned char"
        if isinstance(t, Float16Type):
            return "__half"
        if isinstance(t, BFloat16Type):
            return "__nv_bfloat16"
        if isinstance(t, VectorType):
            key = (str(t.element_type), t.get_shape()[0] if t.get_num_dims() == 1 else 0)
            if key not in self.VECTOR_TYPES:
                raise IrkitError(f"the CUDA printer has no vector type for {t}")
            return self.VECTOR_TYPES[key]
        return super().type_name(t)

    def literal(self, op: arith.ConstantOp) -> str:
        """f16 and bf16 constants as conversions of the f32 literal (`0.0f` beside an
        `__half` in `c ? x : 0.0f` is ambiguous to NVRTC)."""
        t = op.result.type
        if is_fp8(t):
            assert isinstance(op.value, FloatAttr)
            value = to_fp8(np.array([op.value.value.data]), dtype_name(t))
            return f"(unsigned char){int(value.view(np.uint8)[0])}u"
        text = super().literal(op)
        if isinstance(t, Float16Type):
            return f"__float2half_rn({text})"
        if isinstance(t, BFloat16Type):
            return f"__float2bfloat16_rn({text})"
        return text

    def vector_load(self, op: vector.LoadOp) -> None:
        """One 8- or 16-byte access: the address must be aligned to the vector's size (the
        pass that builds it checks the shapes; the runtime's buffers are 256-byte aligned)."""
        t = self.type_name(op.result.type)
        self.define(
            op.result, f"*reinterpret_cast<const {t}*>(&{self.element(op.base, list(op.indices))})"
        )

    def vector_store(self, op: vector.StoreOp) -> None:
        t = self.type_name(op.vector.type)
        self.emit(
            f"*reinterpret_cast<{t}*>(&{self.element(op.base, list(op.indices))}) = {self.name(op.vector)};"
        )

    def broadcast(self, op: vector.BroadcastOp) -> None:
        """A vector of one value: CUDA's make_<type>, in a local the inserts that follow
        fill in place."""
        t = self.type_name(op.vector.type)
        lanes = op.vector.type.get_shape()[0]
        x = self.name(op.source)
        name = self.fresh(op.vector, "v")
        if t.startswith("irkit_"):  # the prelude's aggregates: brace-initialized
            self.emit(f"{t} {name} = {{{{{', '.join([x] * lanes)}}}}};")
            return
        self.emit(f"{t} {name} = make_{t}({', '.join([x] * lanes)});")

    def insert(self, op: vector.InsertOp) -> None:
        """One lane replaced: in place where the old vector has no other use, else a copy."""
        position = op.static_position.get_values()
        if op.dynamic_position or len(position) != 1:
            raise IrkitError("the CUDA printer inserts vector elements at one static position")
        old = self.name(op.dest)
        if sum(1 for _ in op.dest.uses) == 1:
            self.names[op.result] = old
            name = old
        else:
            name = self.fresh(op.result, "v")
            self.emit(f"{self.type_name(op.result.type)} {name} = {old};")
        self.emit(f"{name}.{self.component(op.result.type, position[0])} = {self.name(op.source)};")

    def extract(self, op: vector.ExtractOp) -> None:
        position = op.static_position.get_values()
        if op.dynamic_position or len(position) != 1:
            raise IrkitError("the CUDA printer extracts vector elements at one static position")
        self.define(
            op.result, f"{self.name(op.vector)}.{self.component(op.vector.type, position[0])}"
        )

    def geometry(self, op: Operation) -> None:
        var, prefix = self.GEOMETRY[type(op)]
        assert isinstance(op, gpu.ThreadIdOp | gpu.BlockIdOp | gpu.BlockDimOp | gpu.GridDimOp)
        dim = op.dimension.data.value
        self.define(op.results[0], f"({self.index_type}){var}.{dim}", prefix, alone=True)

    def barrier(self, op: Operation) -> None:
        self.emit("__syncthreads();")

    def get_global(self, op: memref.GetGlobalOp) -> None:
        name = op.name_.root_reference.data
        self.names[op.memref] = name
        t = op.memref.type
        assert isinstance(t, MemRefType)
        if t.memory_space != SHARED_SPACE:
            raise IrkitError(f"the CUDA printer handles only shared-memory globals, not @{name}")
        size = math.prod(t.get_shape())
        element = self.type_name(t.element_type)
        # 16-byte aligned, so that a vector access at a multiple of 4 floats is aligned too;
        # 128 where a TMA copy lands (`cp.async.bulk.tensor` asks it of its destination),
        # 1024 where it lands swizzled (the pattern runs on the address's bits 4-9)
        align = self.tma_dests.get(op.memref, 16)
        static = f"__shared__ __align__({align}) {element} {name}[{size}];"
        host = static
        if name in self.cluster_offsets:  # on the host, in the running block's own arena
            host = (
                f"{element}* const {name} = reinterpret_cast<{element}*>"
                f"(irkit_host::cta_shared() + {self.cluster_offsets[name]});"
            )
        device = static
        if name in self.dynamic_offsets:
            # past 48 KB: the launch's dynamic shared memory, at the offset `shared_layout`
            # gives (a host build keeps the static array: the host has no such limit)
            device = (
                f"{element}* const {name} = reinterpret_cast<{element}*>"
                f"(irkit_dynamic_shared + {self.dynamic_offsets[name]});"
            )
        if host == device:
            self.emit(static)
            return
        self.emit("#ifdef IRKIT_CUDA_HOST")
        self.emit(host)
        self.emit("#else")
        self.emit(device)
        self.emit("#endif")

    def convert(self, op: Operation) -> None:
        src, dst = op.operands[0].type, op.results[0].type
        x = self.name(op.operands[0])
        narrow: dict[type[Attribute], tuple[str, str]] = {
            Float16Type: ("__half2float({})", "__float2half_rn({})"),
            BFloat16Type: ("__bfloat162float({})", "__float2bfloat16_rn({})"),
            Float8E4M3FNType: ("irkit_f8e4m3_to_float({})", "irkit_float_to_f8e4m3({})"),
            Float8E5M2Type: ("irkit_f8e5m2_to_float({})", "irkit_float_to_f8e5m2({})"),
        }
        if type(src) in narrow:
            x = narrow[type(src)][0].format(x)
            src = Float32Type()
        if type(dst) in narrow:
            x = narrow[type(dst)][1].format(x if isinstance(src, Float32Type) else f"(float){x}")
        elif src != dst:
            x = f"({self.type_name(dst)}){x}"
        self.define(op.results[0], x)

    def bitcast(self, op: Operation) -> None:
        """Reinterpret 32 or 64 bits (CUDA's intrinsics; a C cast would convert)."""
        src, dst = op.operands[0].type, op.results[0].type
        fns = {
            ("i32", "f32"): "__int_as_float",
            ("f32", "i32"): "__float_as_int",
            ("i64", "f64"): "__longlong_as_double",
            ("f64", "i64"): "__double_as_longlong",
        }
        fn = fns.get((str(src), str(dst)))
        if fn is None:
            raise IrkitError(f"the CUDA printer cannot bitcast {src} to {dst}")
        self.define(op.results[0], f"{fn}({self.name(op.operands[0])})")

    def mma(self, op: Operation) -> None:
        """A warp's tensor-core multiply-accumulate: the prelude's helper (inline PTX on the
        GPU; an emulation on cuda-host) writes the lane's 4 results. Where each pair of A's
        and B's values are the two halves of one loaded pair (`_register_pairs`), the pairs
        go as they are, one 32-bit register each (`..._x2`), not unpacked and packed again."""
        names = [self.fresh(r, "d") for r in op.results]
        self.emit(f"float {', '.join(names)};")
        function, inputs = _mma_function(op), list(op.operands)
        pairs = _register_pairs(op)
        if pairs is not None:
            function, inputs = f"{function}_x2", [*pairs, *inputs[-4:]]
        args = ", ".join([*(self.name(v) for v in inputs), *(f"&{n}" for n in names)])
        self.emit(f"{function}({args});")

    def ldmatrix(self, op: LdmatrixX4Op) -> None:
        """A warp's ldmatrix.x4: the prelude's helper derives the lane's row address from
        the base element and the matrices' offsets (in elements, from the buffer's row
        length), and writes the lane's four pairs."""
        t = op.source.type
        assert isinstance(t, MemRefType)
        stride = t.get_shape()[-1]
        names = [self.fresh(r, "m") for r in op.pairs]
        self.emit(f"{self.type_name(op.pairs[0].type)} {', '.join(names)};")
        pointers = ", ".join(f"&{n}" for n in names)
        kind = _ldmatrix_kind(op)
        if op.swizzled is not None:  # the stage's origin, the base's row and column, the offsets
            *lead, row, column = op.indices
            origin = self.element_at(op.source, [*map(self.name, lead), "0", "0"])
            pairs = ", ".join(f"{r}, {c}" for r, c in op.origins)
            at = f"{self.name(row)}, {self.name(column)}"
            self.emit(f"irkit_ldmatrix_x4_{kind}(&{origin}, {stride}, {at}, {pairs}, {pointers});")
            return
        base = self.element(op.source, list(op.indices))
        offsets = ", ".join(str(r * stride + c) for r, c in op.origins)
        self.emit(f"irkit_ldmatrix_x4_{kind}(&{base}, {stride}, {offsets}, {pointers});")

    def cp_async(self, op: CpAsyncOp) -> None:
        """A thread's 16-byte asynchronous copy into shared memory: the prelude's helper
        (cp.async.cg with its source size on the GPU; a queued copy on cuda-host)."""
        dest = self.element(op.dest, list(op.dest_indices))
        source = self.element(op.source, list(op.source_indices))
        t = op.source.type
        assert isinstance(t, MemRefType)
        size = numpy_dtype(t.element_type).itemsize
        valid = self.name(op.valid)
        self.emit(f"irkit_cp_async16(&{dest}, &{source}, (int)({valid}) * {size});")

    def cp_async_commit(self, op: CpAsyncCommitOp) -> None:
        self.emit("irkit_cp_async_commit();")

    def cp_async_wait(self, op: CpAsyncWaitOp) -> None:
        self.emit(f"irkit_cp_async_wait<{op.groups}>();")

    def wgmma(self, op: WgmmaOp) -> None:
        """A warpgroup's wgmma: its accumulators an array of N/2 floats (the one of the
        wgmma it chains on, else a new one holding its C), and the prelude's helper over
        the two tiles' descriptors (`irkit.codegen.cuda_wgmma`)."""
        w = cuda_wgmma
        prev = w.chained(op)
        if prev is not None:
            array = self.wgmma_arrays[prev]
        elif op.c and op.c[0] in self.wgmma_carried:  # the loop's accumulators, in order
            array = self.wgmma_carried[op.c[0]]
        else:
            array = self.fresh(op.d[0], "acc")
            self.emit(f"float {array}[{len(op.d)}] = {{{', '.join(self.name(v) for v in op.c)}}};")
        if self.wgmma_fence:  # after the accumulators are written, as PTX requires
            self.emit("irkit_wgmma_fence();")
            self.wgmma_fence = False
        self.wgmma_arrays[op] = array
        for i, r in enumerate(op.d):
            self.names[r] = f"{array}[{i}]"
        a_at, b_at = self.element(op.a, list(op.a_indices)), self.element(op.b, list(op.b_indices))
        if op.tiles == "swizzled":
            a, b = w.swizzled_descriptor(a_at, op.a, "a"), w.swizzled_descriptor(b_at, op.b, "b")
        else:
            a_k, a_m, b_k, b_n = op.core_dims()
            a, b = w.descriptor(a_at, op.a, a_k, a_m), w.descriptor(b_at, op.b, b_k, b_n)
        self.emit(f"{w.helper_name(op)}({a}, {b}, {array});")

    def wgmma_sync(self, op: Operation) -> None:
        """The fence, commit and wait: the prelude's one-instruction helpers. The fence is
        printed at the next wgmma, after its accumulator array is written."""
        if isinstance(op, WgmmaWaitOp):
            self.emit(f"irkit_wgmma_wait<{op.groups}>();")
        elif isinstance(op, WgmmaFenceOp):
            self.wgmma_fence = True
        else:
            self.emit("irkit_wgmma_commit();")

    def tma(self, op: Operation) -> None:
        """A TMA copy or an mbarrier op (`irkit.codegen.cuda_tma`)."""
        cuda_tma.emit(self, op, self.tensor_maps)

    def shuffle(self, op: ShuffleOp) -> None:
        """A warp's xor exchange (every lane of the warp together: the full mask). Its
        `valid` flag is not printed: irkit's passes shuffle within whole warps."""
        if op.mode.data != ShuffleModeEnum.Xor or any(True for _ in op.valid.uses):
            raise IrkitError("the CUDA printer prints gpu.shuffle xor, without its valid flag")
        args = ", ".join(self.name(v) for v in (op.value, op.offset, op.width))
        self.define(op.result, f"__shfl_xor_sync(0xffffffffu, {args})")

    HANDLERS = {
        **dict.fromkeys(GEOMETRY, geometry),
        **dict.fromkeys(MMA_OPS, mma),
        ShuffleOp: shuffle,
        LdmatrixX4Op: ldmatrix,
        CpAsyncOp: cp_async,
        CpAsyncCommitOp: cp_async_commit,
        CpAsyncWaitOp: cp_async_wait,
        WgmmaOp: wgmma,
        **dict.fromkeys((WgmmaFenceOp, WgmmaCommitOp, WgmmaWaitOp), wgmma_sync),
        **dict.fromkeys(TMA_OPS, tma),
        arith.BitcastOp: bitcast,
        gpu.BarrierOp: barrier,
        memref.GetGlobalOp: get_global,
        arith.ExtFOp: convert,
        arith.TruncFOp: convert,
        vector.LoadOp: vector_load,
        vector.StoreOp: vector_store,
        vector.ExtractOp: extract,
        vector.BroadcastOp: broadcast,
        vector.InsertOp: insert,
    }

    @staticmethod
    def restrict(arg: SSAValue, stored: set, loaded: set) -> str:
        """`__restrict__` on a buffer the kernel only reads or only writes. A buffer it both
        writes and reads (a scratch row statistic that thread 0 stores and the block reads
        after `__syncthreads()`) is a channel between threads: under `__restrict__` the
        compiler may assume the barrier cannot change it and hoist the other threads' load
        above the barrier (seen on an H100: NVRTC 13 moved softmax's load of the row maximum
        before the barrier, and every output was NaN). Such a pointer stays plain."""
        return "*" if arg in stored and arg in loaded else "* __restrict__"

    def kernel(self, fn: func.FuncOp) -> str:
        launch = launch_of(fn)
        assert launch is not None
        block = launch["block"]
        threads = math.prod(block)
        self.names, self.counter = {}, 0  # names are per kernel: as NVRTC compiles each alone
        # shared arrays keep their global's name: no parameter or local may take it
        self.taken = {
            op.name_.root_reference.data for op in fn.walk() if isinstance(op, memref.GetGlobalOp)
        }
        stored = {o.memref for o in fn.walk() if isinstance(o, memref.StoreOp)}
        stored |= {o.base for o in fn.walk() if isinstance(o, vector.StoreOp)}
        loaded = {o.memref for o in fn.walk() if isinstance(o, memref.LoadOp)}
        loaded |= {o.base for o in fn.walk() if isinstance(o, vector.LoadOp)}
        params = []
        for i, arg in enumerate(fn.body.block.args):
            t = arg.type
            if not isinstance(t, MemRefType):
                raise IrkitError(f"@{fn.sym_name.data}: kernel arguments must be memrefs")
            name = self.fresh(arg, f"arg{i}", alone=True)
            const = "" if arg in stored else "const "
            pointer = self.restrict(arg, stored, loaded)
            params.append(f"{const}{self.type_name(t.element_type)}{pointer} {name}")
        self.tensor_maps = tensor_maps(fn)
        self.tma_dests = {}
        for o in fn.walk():
            if isinstance(o, TmaLoadOp):
                align = 1024 if o.swizzle_bytes else 128
                self.tma_dests[o.dest] = max(align, self.tma_dests.get(o.dest, 0))
        params += cuda_tma.parameters(self.tensor_maps)
        self.lines = []
        self.indent = 1
        self.dynamic_offsets = _dynamic_offsets(fn, launch)
        cluster = launch.get("cluster", 1)
        self.cluster_offsets = _shared_offsets(fn)[0] if cluster > 1 else {}
        if self.dynamic_offsets:
            self.emit("#ifndef IRKIT_CUDA_HOST")
            align = max(self.tma_dests.values(), default=16)  # TMA's destinations: 128 or 1024
            self.emit(f"extern __shared__ __align__({align}) unsigned char irkit_dynamic_shared[];")
            self.emit("#endif")
        self.block(fn.body.block)
        grid = launch["grid"]
        bounds = f"{threads}, {launch['min_blocks']}" if "min_blocks" in launch else f"{threads}"
        dims = f" __cluster_dims__({cluster}, 1, 1)" if cluster > 1 else ""
        head = (
            f"// {fn.sym_name.data}: grid {list(grid)}, block {list(block)}, "
            f"mapping {launch['mapping']}" + (f", cluster {cluster}" if cluster > 1 else "") + "\n"
            f'extern "C" __global__ void __launch_bounds__({bounds}){dims}\n'
            f"{fn.sym_name.data}({', '.join(params)}) {{\n"
        )
        return head + "\n".join(self.lines) + "\n}\n"


def _dynamic_offsets(fn: func.FuncOp, launch: Launch) -> dict[str, int]:
    """Where a kernel whose shared buffers pass the 48 KB of static shared memory places each
    in its launch's dynamic shared memory (`shared_layout`, in the order the kernel takes
    them); {} for a kernel whose buffers fit statically."""
    offsets, total = _shared_offsets(fn)
    if total <= STATIC_SHARED_LIMIT:
        return {}
    if int(launch.get("shared", 0)) < total:
        raise IrkitError(
            f"@{fn.sym_name.data}: its shared buffers take {total} bytes, past the "
            f"{STATIC_SHARED_LIMIT} a kernel may declare statically, and its launch asks "
            f"for {launch.get('shared', 0)} bytes of dynamic shared memory"
        )
    return offsets


def _shared_offsets(fn: func.FuncOp) -> tuple[dict[str, int], int]:
    """Kernel `fn`'s shared buffers laid out one after another (`shared_layout`, in the
    order the kernel takes them): each one's offset by name, and the total bytes."""
    buffers: dict[str, int] = {}
    for op in fn.walk():
        if isinstance(op, memref.GetGlobalOp):
            t = op.memref.type
            assert isinstance(t, MemRefType)
            size = math.prod(t.get_shape()) * numpy_dtype(t.element_type).itemsize
            buffers.setdefault(op.name_.root_reference.data, size)
    offsets, total = shared_layout(list(buffers.values()))
    return dict(zip(buffers, offsets, strict=True)), total


def gpu_kernels(module: ModuleOp) -> list[func.FuncOp]:
    """The GPU-mapped kernels of `module`, in order: none at all for a model whose outputs
    are its inputs or copies of them (that runs too); an error for IR that still holds
    graph ops or loop-level kernels not mapped onto the GPU."""
    mapped = [op for op in module.ops if isinstance(op, func.FuncOp) and launch_of(op) is not None]
    unmapped = [f for f in kernels(module) if launch_of(f) is None]
    if unmapped or not is_loop_level(module):
        raise IrkitError(
            "CUDA C needs GPU-mapped IR; lower with -p map-to-gpu (or a pipeline such as "
            "default-cuda)"
        )
    return mapped


def index_type_for(functions: Sequence[func.FuncOp]) -> str:
    """`int` when every buffer the functions see (their arguments, and the buffers they
    allocate or name) fits 32-bit indexing (fast on GPUs), else int64. Only the functions
    printed are walked: one kernel's source a walk of that kernel, not of the module (with
    a fused attention's thousands of ops in it, a walk of the module per kernel was most of
    a real model's printing)."""
    types = [a.type for fn in functions for a in fn.args]
    types += [r.type for fn in functions for op in fn.walk() for r in op.results]
    sizes = [math.prod(t.get_shape()) for t in types if isinstance(t, MemRefType)]
    return "int" if max(sizes, default=0) < 2**31 - 1 else "long long"


def _mma_function(op: Operation) -> str:
    """The prelude helper an mma op is printed as."""
    if isinstance(op, MmaM16n8k16Op):
        return f"irkit_mma_m16n8k16_{op.narrow_type}"
    if isinstance(op, MmaM16n8k32F8Op):
        return "irkit_mma_m16n8k32_{}_{}".format(*op.formats)
    return "irkit_mma_m16n8k8_tf32"


def _fp8_mma_helper(function: str) -> str:
    """`irkit_mma_m16n8k32_<a>_<b>`: PTX's 8-bit mma.sync (sm_89 and later) on a lane's
    registers as they are; on cuda-host, the 24 bytes widened (the prelude's conversions)
    and multiplied by the header's emulation, `irkit_host::mma<32>`."""
    fa, fb = function.split("_")[-2:]
    a = ", ".join(f"irkit_f8x4 a{i}" for i in range(4))
    b = ", ".join(f"irkit_f8x4 b{i}" for i in range(2))
    c = ", ".join(f"float c{i}" for i in range(4))
    d = ", ".join(f"float* d{i}" for i in range(4))
    signature = f"void {function}({a}, {b}, {c}, {d})"
    names = [f"a{i}" for i in range(4)] + [f"b{i}" for i in range(2)]
    regs = ", ".join(f'"r"(*reinterpret_cast<const unsigned*>(&{x}))' for x in names)
    return (
        "#ifdef IRKIT_CUDA_HOST\n"
        f"inline {signature} {{\n"
        "  const irkit_f8x4 ar[4] = {a0, a1, a2, a3}, br[2] = {b0, b1};\n"
        "  float a[16], b[8], d[4];\n"
        "  const float c[4] = {c0, c1, c2, c3};\n"
        f"  for (int i = 0; i < 16; i++) a[i] = irkit_f8{fa}_to_float(ar[i / 4].v[i % 4]);\n"
        f"  for (int i = 0; i < 8; i++) b[i] = irkit_f8{fb}_to_float(br[i / 4].v[i % 4]);\n"
        "  irkit_host::mma<32>(a, b, c, d, __LINE__);\n"
        "  *d0 = d[0]; *d1 = d[1]; *d2 = d[2]; *d3 = d[3];\n"
        "}\n#else\n"
        f"__device__ __forceinline__ {signature} {{\n"
        f'  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.{fa}.{fb}.f32 '
        '{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\\n"\n'
        '      : "=f"(*d0), "=f"(*d1), "=f"(*d2), "=f"(*d3)\n'
        f'      : {regs}, "f"(c0), "f"(c1), "f"(c2), "f"(c3));\n'
        "}\n#endif\n"
    )


TF32_HELPER = """\
#ifndef IRKIT_CUDA_HOST
__device__ __forceinline__ unsigned irkit_tf32(float x) { unsigned r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)); return r; }
__device__ __forceinline__ void irkit_mma_m16n8k8_tf32(float a0, float a1, float a2, float a3, float b0, float b1, float c0, float c1, float c2, float c3, float* d0, float* d1, float* d2, float* d3) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\\n"
      : "=f"(*d0), "=f"(*d1), "=f"(*d2), "=f"(*d3)
      : "r"(irkit_tf32(a0)), "r"(irkit_tf32(a1)), "r"(irkit_tf32(a2)), "r"(irkit_tf32(a3)), "r"(irkit_tf32(b0)), "r"(irkit_tf32(b1)), "f"(c0), "f"(c1), "f"(c2), "f"(c3));
}
#endif
"""
"""`irkit_mma_m16n8k8_tf32`: PTX's TF32 mma.sync, each input rounded by cvt.rna.tf32.f32."""


NARROW_C_TYPES = {"f16": "__half", "bf16": "__nv_bfloat16", "f8": "unsigned char"}
"""The CUDA C type of each narrow element type the tensor-core helpers take (either 8-bit
format is its bytes)."""


def _register_pairs(op: Operation) -> list[SSAValue] | None:
    """The 2-vectors an m16n8k16 op's A and B values come from, a pair per 32-bit operand
    register (values 2i and 2i + 1 are elements 0 and 1 of one vector), or None."""
    if not isinstance(op, MmaM16n8k16Op):
        return None
    narrow = [*op.a, *op.b]
    out = []
    for lo, hi in zip(narrow[::2], narrow[1::2], strict=True):
        ops = [v.owner for v in (lo, hi)]
        if not all(isinstance(o, vector.ExtractOp) for o in ops):
            return None
        first, second = ops
        assert isinstance(first, vector.ExtractOp) and isinstance(second, vector.ExtractOp)
        if (
            first.vector is not second.vector
            or shape_of(first.vector) != (2,)
            or first.dynamic_position
            or second.dynamic_position
            or first.static_position.get_values() != (0,)
            or second.static_position.get_values() != (1,)
        ):
            return None
        out.append(first.vector)
    return out


def _mma_helper(kind: str) -> str:
    """`irkit_mma_m16n8k16_<kind>`: PTX's mma.sync m16n8k16 with f32 accumulators, the
    operands in `irkit.dialects.warp`'s order (two 16-bit values per 32-bit register, the
    lower-indexed one in the low half). Guarded so that a host build (cuda-host, whose
    header defines IRKIT_CUDA_HOST and its own) never sees the PTX."""
    t = NARROW_C_TYPES[kind]
    bits = "__half_as_ushort" if kind == "f16" else "__bfloat16_as_ushort"
    a = ", ".join(f"{t} a{i}" for i in range(8))
    b = ", ".join(f"{t} b{i}" for i in range(4))
    c = ", ".join(f"float c{i}" for i in range(4))
    d = ", ".join(f"float* d{i}" for i in range(4))
    pack = [
        f"irkit_pack_{kind}({x}{2 * i}, {x}{2 * i + 1})"
        for x, n in (("a", 4), ("b", 2))
        for i in range(n)
    ]
    regs = ", ".join(f'"r"({r})' for r in pack)
    # the _x2 form: A's and B's pairs as the 32-bit registers they are
    pair = f"irkit_{kind}x2"
    a2 = ", ".join(f"{pair} a{i}" for i in range(4))
    b2 = ", ".join(f"{pair} b{i}" for i in range(2))
    regs2 = ", ".join(f'"r"(*reinterpret_cast<const unsigned*>(&{x}{i}))'
                      for x, n in (("a", 4), ("b", 2)) for i in range(n))  # fmt: skip
    return (
        "#ifndef IRKIT_CUDA_HOST\n"
        f"__device__ __forceinline__ unsigned irkit_pack_{kind}({t} lo, {t} hi) "
        f"{{ return (unsigned){bits}(lo) | ((unsigned){bits}(hi) << 16); }}\n"
        f"__device__ __forceinline__ void irkit_mma_m16n8k16_{kind}({a}, {b}, {c}, {d}) {{\n"
        f'  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 '
        '{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\\n"\n'
        '      : "=f"(*d0), "=f"(*d1), "=f"(*d2), "=f"(*d3)\n'
        f'      : {regs}, "f"(c0), "f"(c1), "f"(c2), "f"(c3));\n'
        "}\n"
        f"__device__ __forceinline__ void irkit_mma_m16n8k16_{kind}_x2({a2}, {b2}, {c}, {d}) {{\n"
        f'  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 '
        '{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\\n"\n'
        '      : "=f"(*d0), "=f"(*d1), "=f"(*d2), "=f"(*d3)\n'
        f'      : {regs2}, "f"(c0), "f"(c1), "f"(c2), "f"(c3));\n'
        "}\n#endif\n"
    )


def _ldmatrix_kind(op: LdmatrixX4Op) -> str:
    """The helper's suffix: the element type, `_trans` for a transposed load and `_sw` for
    a swizzled tile."""
    trans = "_trans" if op.transpose is not None else ""
    return op.narrow_type + trans + ("_sw" if op.swizzled is not None else "")


def _ldmatrix_helper(kind: str) -> str:
    """`irkit_ldmatrix_x4_<kind>`: PTX's ldmatrix.x4 (`.trans` for a `_trans` kind), lane l
    giving the address of row l % 8 of matrix l / 8 (the base plus that matrix's offset);
    kept from a host build, whose header has its own."""
    element, _, rest = kind.partition("_")
    t = NARROW_C_TYPES[element]
    pair = "irkit_f8x4" if element == "f8" else f"irkit_{element}x2"
    modifier = ".trans" if "trans" in rest else ""
    outs = ", ".join(f'"=r"(*reinterpret_cast<unsigned*>(d{j}))' for j in range(4))
    if rest.endswith("sw"):  # a swizzled tile: each lane's row address through the swizzle
        return (
            "#ifndef IRKIT_CUDA_HOST\n"
            f"__device__ __forceinline__ void irkit_ldmatrix_x4_{kind}(const {t}* tile, int stride, "
            "int row, int col, int r0, int c0, int r1, int c1, int r2, int c2, int r3, int c3, "
            f"{pair}* d0, {pair}* d1, {pair}* d2, {pair}* d3) {{\n"
            "  const unsigned lane = threadIdx.x & 31u, j = lane >> 3;\n"
            "  const int r = row + (j == 0u ? r0 : j == 1u ? r1 : j == 2u ? r2 : r3) + (int)(lane & 7u);\n"
            "  const int c = col + (j == 0u ? c0 : j == 1u ? c1 : j == 2u ? c2 : c3);\n"
            "  const unsigned address = (unsigned)__cvta_generic_to_shared("
            "tile + r * stride + irkit_swizzle_column(r, c, stride));\n"
            f'  asm volatile("ldmatrix.sync.aligned.m8n8.x4{modifier}.shared.b16 {{%0, %1, %2, %3}}, [%4];\\n"\n'
            f'      : {outs} : "r"(address));\n'
            "}\n#endif\n"
        )
    return (
        "#ifndef IRKIT_CUDA_HOST\n"
        f"__device__ __forceinline__ void irkit_ldmatrix_x4_{kind}(const {t}* base, int stride, "
        f"int o0, int o1, int o2, int o3, {pair}* d0, {pair}* d1, {pair}* d2, {pair}* d3) {{\n"
        "  const unsigned lane = threadIdx.x & 31u, j = lane >> 3;\n"
        "  const int o = j == 0u ? o0 : j == 1u ? o1 : j == 2u ? o2 : o3;\n"
        "  const unsigned address = (unsigned)__cvta_generic_to_shared("
        "base + (int)(lane & 7u) * stride + o);\n"
        f'  asm volatile("ldmatrix.sync.aligned.m8n8.x4{modifier}.shared.b16 {{%0, %1, %2, %3}}, [%4];\\n"\n'
        f'      : {outs} : "r"(address));\n'
        "}\n#endif\n"
    )


SWIZZLE_HELPER = """\
#ifndef IRKIT_CUDA_HOST
__device__ __forceinline__ int irkit_swizzle_column(int row, int column, int row_length) {
  const int chunks = row_length / 8, period = chunks < 8 ? chunks : 8;
  const int group = chunks >= 8 ? 1 : 8 / chunks;
  return 8 * ((column / 8) ^ (row / group % period)) + column % 8;
}
#endif
"""
"""`irkit.dialects.warp_async.swizzle_column` in C (cuda-host's header has its own)."""


ASYNC_COPY_HELPERS = """\
#ifndef IRKIT_CUDA_HOST
__device__ __forceinline__ void irkit_cp_async16(void* dst, const void* src, int bytes) {
  const unsigned address = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\\n" :: "r"(address), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void irkit_cp_async_commit() { asm volatile("cp.async.commit_group;\\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void irkit_cp_async_wait() { asm volatile("cp.async.wait_group %0;\\n" :: "n"(N) : "memory"); }
#endif
"""
"""PTX's cp.async (16 bytes, `.cg`: cached in L2 only, past L1, with the source size
zero-filling the rest), commit_group and wait_group; kept from a host build, whose header
has its own."""


def _prelude(kernels: list[func.FuncOp]) -> str:
    """The helpers, cuda_fp16.h/cuda_bf16.h only where a kernel touches f16 or bf16, and the
    tensor-core helpers only where a kernel uses them."""
    narrow = any(
        isinstance(t, Float16Type | BFloat16Type)
        for fn in kernels
        for t in [
            *fn.function_type.inputs,  # a parameter the kernel never touches is still declared
            *(getattr(v, "type", None) for op in fn.walk() for v in [*op.results, *op.operands]),
        ]
        for t in ([t.element_type] if isinstance(t, MemRefType) else [t])
    )
    functions = sorted(
        {_mma_function(op) for fn in kernels for op in fn.walk() if isinstance(op, MMA_OPS)}
    )
    ops = [op for fn in kernels for op in fn.walk()]
    helpers = ""
    values = [v.type for op in ops for v in [*op.results, *op.operands]]
    if any(is_fp8(t.element_type if isinstance(t, VectorType) else t) for t in values):
        helpers += FP8_HELPERS  # first: the 8-bit mma and ldmatrix helpers use them
    for f in functions:
        if f.endswith("tf32"):
            helpers += TF32_HELPER
        elif "k32" in f:
            helpers += _fp8_mma_helper(f)
        else:
            helpers += _mma_helper(f.rsplit("_", 1)[1])
    loads = sorted(
        {_ldmatrix_kind(op) for fn in kernels for op in fn.walk() if isinstance(op, LdmatrixX4Op)}
    )
    if any(kind.endswith("_sw") for kind in loads):
        helpers += SWIZZLE_HELPER
    helpers += "".join(_ldmatrix_helper(kind) for kind in loads)
    if any(isinstance(op, ASYNC_COPY_OPS) for fn in kernels for op in fn.walk()):
        helpers += ASYNC_COPY_HELPERS
    wgmma = sorted({cuda_wgmma.helper_name(op) for op in ops if isinstance(op, WgmmaOp)})
    if wgmma:
        helpers += cuda_wgmma.COMMON_HELPERS + "".join(cuda_wgmma.helper(n) for n in wgmma)
    helpers += cuda_tma.prelude(ops)
    return (CudaPrinter.HALF_HEADERS if narrow else "") + CudaPrinter.PRELUDE + helpers


FP8_HELPERS = """\
// 8-bit floats (irkit.dtypes): held as bytes, widened exactly and narrowed to nearest even,
// saturating to the largest finite value (cvt.rn.satfinite's meaning), NaN kept
#ifndef IRKIT_CUDA_HOST  // cuda-host's header has it
struct __align__(4) irkit_f8x4 { unsigned char v[4]; };  // one register of an 8-bit mma
#endif
__device__ __forceinline__ float irkit_f8e4m3_to_float(unsigned char v) {
  const unsigned e = (v >> 3) & 15u, m = v & 7u;
  float x;
  if ((v & 0x7fu) == 0x7fu) x = __int_as_float(0x7fc00000);
  else if (e == 0) x = (float)m * 0.001953125f;  // m * 2^-9
  else x = __int_as_float((int)(((e + 120u) << 23) | (m << 20)));
  return (v & 0x80u) ? -x : x;
}
__device__ __forceinline__ float irkit_f8e5m2_to_float(unsigned char v) {
  const unsigned e = (v >> 2) & 31u, m = v & 3u;
  float x;
  if (e == 31u) x = __int_as_float(m ? 0x7fc00000 : 0x7f800000);
  else if (e == 0) x = (float)m * 1.52587890625e-05f;  // m * 2^-16
  else x = __int_as_float((int)(((e + 112u) << 23) | (m << 21)));
  return (v & 0x80u) ? -x : x;
}
// mbits mantissa bits, exponent bias `bias`, `largest` the f32 bits of the largest finite
__device__ __forceinline__ unsigned char irkit_float_to_f8(float f, unsigned mbits, unsigned bias,
                                                           unsigned largest, unsigned nan) {
  const unsigned bits = (unsigned)__float_as_int(f), sign = (bits >> 24) & 0x80u;
  unsigned a = bits & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned char)nan;
  if (a > largest) a = largest;
  const unsigned e = a >> 23;
  unsigned out;
  if (e >= 128u - bias) {  // normal: round the f32 mantissa to mbits, then rebias
    const unsigned shift = 23u - mbits;
    out = ((a + (1u << (shift - 1)) - 1u + ((a >> shift) & 1u)) >> shift) - ((127u - bias) << mbits);
  } else {  // subnormal: the value in units of 2^(1 - bias - mbits), to nearest even
    const unsigned mant = (a & 0x7fffffu) | (e ? 0x800000u : 0u);
    const unsigned shift = 151u - bias - mbits - (e ? e : 1u);
    out = 0u;
    if (shift < 32u) {
      const unsigned rest = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
      out = mant >> shift;
      if (rest > half || (rest == half && (out & 1u))) out++;
    }
  }
  return (unsigned char)(sign | out);
}
""" + "".join(
    f"__device__ __forceinline__ unsigned char irkit_float_to_{name}(float f) {{\n"
    f"  return irkit_float_to_f8(f, {f.mantissa}u, {f.bias}u, "
    f"0x{int(np.float32(f.largest).view(np.uint32)):08x}u, 0x{f.nan:02x}u);  // {f.largest:g}\n"
    "}\n"
    for name, f in FP8_FORMATS.items()
)
"""The 8-bit float conversions, portable C for NVRTC and the host alike (a kernel converts
its operands once, as it loads them; sm_89's cvt instructions are left for the tensor-core
path that reads them unconverted)."""


def kernel_source(module: ModuleOp, fn: func.FuncOp) -> str:
    """The complete CUDA C translation unit for one kernel (what NVRTC compiles)."""
    return _source(module, [fn])


def cuda_source(module: ModuleOp) -> str:
    """All kernels of a GPU-mapped module as one CUDA C translation unit."""
    return _source(module, gpu_kernels(module))


def _source(module: ModuleOp, kernels: list[func.FuncOp]) -> str:
    """The prelude, the scalar functions the kernels call, and the kernels."""
    scalar = {f: None for fn in kernels for f in callees(module, fn)}
    printer = CudaPrinter(index_type_for([*kernels, *scalar]))
    return (
        _prelude(kernels)
        + "".join("\n" + printer.scalar_function(f) for f in scalar)
        + "".join("\n" + printer.kernel(fn) for fn in kernels)
    )
