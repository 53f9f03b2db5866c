"""Printing Hopper's warpgroup MMA (`irkit_warp.wgmma` and its fence, commit and wait) as
CUDA C: the prelude's helpers (inline PTX, kept from a host build, whose header emulates
them) and each op's shared-memory matrix descriptors.

A descriptor (PTX's "matrix descriptor", 64 bits) holds the tile's shared address, its
leading-dimension byte offset (LBO: between core matrices adjacent along k) and its
stride-dimension byte offset (SBO: between core matrices adjacent along m or n), each in
16-byte units, and no swizzle. irkit's tiles are core matrices `[.., m/8, k/8, 8, 8]` for A
(K-major: a core matrix is 8 rows of m, each 16 bytes of k) and `[.., k/8, n/8, 8, 8]` for
B (N-major: 8 rows of k, each 16 bytes of n), or of 8-bit floats `[.., m/8, k/16, 8, 16]`
and `[.., n/8, k/16, 8, 16]` (both K-major); the offsets are the memref's strides.
"""

from __future__ import annotations

import math

from xdsl.dialects import scf
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import SSAValue

from irkit.dialects.warp_async import WgmmaOp
from irkit.dtypes import numpy_dtype
from irkit.errors import IrkitError

COMMON_HELPERS = """\
#ifndef IRKIT_CUDA_HOST
typedef unsigned long long irkit_wgmma_desc_t;
__device__ __forceinline__ irkit_wgmma_desc_t irkit_wgmma_desc(const void* p, unsigned lbo, unsigned sbo, unsigned mode) {
  const unsigned long long address = (unsigned)__cvta_generic_to_shared(p);
  return ((address & 0x3FFFFull) >> 4) | ((unsigned long long)((lbo & 0x3FFFFu) >> 4) << 16) | ((unsigned long long)((sbo & 0x3FFFFu) >> 4) << 32) | ((unsigned long long)mode << 62);
}
__device__ __forceinline__ void irkit_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory"); }
__device__ __forceinline__ void irkit_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void irkit_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\\n" :: "n"(N) : "memory"); }
#endif
"""
"""The descriptor (its layout type in bits 62-63: 0 no swizzle, 1 the 128-byte swizzle; base
offset 0, the tiles aligned to 1024 bytes), the fence, commit_group and wait_group."""


def helper_name(op: WgmmaOp) -> str:
    return f"irkit_wgmma_m64n{op.width}k{op.k}_{op.narrow_type}"


def helper(name: str) -> str:
    """`irkit_wgmma_m64n<N>k16_<type>(a, b, d)`: one wgmma.mma_async, D += A B with the
    N/2 accumulators `d` in and out (one "+f" register each), A K-major and B N-major
    (imm-trans-a 0, imm-trans-b 1), scale-d 1. `irkit_wgmma_m64n<N>k32_<a>_<b>`: of 8-bit
    floats, both K-major (PTX's 8-bit form has no transpose operands); on cuda-host, the
    bytes decoded by the prelude's 8-bit conversions."""
    shape, _, kind = name.removeprefix("irkit_wgmma_").partition("_")
    n = int(shape.split("n")[1].split("k")[0])
    count = n // 2
    registers = ", ".join(f"%{i}" for i in range(count))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(count))
    a_type, _, b_type = kind.partition("_")
    if b_type:  # 8-bit: scale-d, imm-scale-a, imm-scale-b
        types, operands = f"{a_type}.{b_type}", "p, 1, 1"
        decode = ", ".join(
            f"[](const unsigned char* e) {{ return irkit_f8{t}_to_float(*e); }}"
            for t in (a_type, b_type)
        )
        host = f"irkit_host::wgmma_queue(a, b, d, {n}, 32, {decode});"
    else:  # and imm-trans-a 0, imm-trans-b 1
        types, operands = f"{kind}.{kind}", "p, 1, 1, 0, 1"
        host = f"irkit_host::wgmma_issue(a, b, d, {n}, {'true' if kind == 'bf16' else 'false'});"
    return (
        "#ifndef IRKIT_CUDA_HOST\n"
        f"__device__ __forceinline__ void {name}(irkit_wgmma_desc_t a, irkit_wgmma_desc_t b, float* d) {{\n"
        '  asm volatile("{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n'
        f"wgmma.mma_async.sync.aligned.{shape}.f32.{types} {{{registers}}}, "
        f'%{count}, %{count + 1}, {operands};\\n}}\\n"\n'
        f'      : {outs}\n      : "l"(a), "l"(b));\n'
        "}\n#else\n"
        f"inline void {name}(irkit_wgmma_desc_t a, irkit_wgmma_desc_t b, float* d) {{ {host} }}\n"
        "#endif\n"
    )


def chained(op: WgmmaOp) -> WgmmaOp | None:
    """The wgmma whose results are `op`'s accumulators, in order and used by `op` alone
    (the same registers, in flight between them); None where they come from elsewhere. A
    wgmma result read by anything else before a wait is refused: the registers are the
    hardware's until then."""
    owners = {v.owner for v in op.c}
    if len(owners) != 1 or not isinstance(prev := next(iter(owners)), WgmmaOp):
        if any(isinstance(v.owner, WgmmaOp) for v in op.c):
            raise IrkitError("the CUDA printer chains a wgmma on one earlier wgmma's results only")
        return None
    if list(op.c) != list(prev.d) or any(len(list(r.uses)) != 1 for r in prev.d):
        raise IrkitError("a wgmma's results may feed only the next wgmma, in order")
    return prev


def carried(loop: scf.ForOp) -> tuple[int, int] | None:
    """The loop's iter_args that carry a wgmma chain's accumulators (first index, count): the
    values it yields are one wgmma's results, in order, and the first wgmma of the body
    that reads the carried values takes them all, in order, as its C. The printer keeps them
    in one array across iterations (a wgmma group may still be in flight when the loop
    goes round, `wgmma-depth=1`: copying its registers would read them early). None where
    no such run of iter_args is."""
    body = loop.body.block
    terminator = body.last_op
    if not isinstance(terminator, scf.YieldOp):
        return None
    for op in body.ops:
        if not isinstance(op, WgmmaOp):
            continue
        args: list[SSAValue] = list(body.args[1:])
        if op.c and op.c[0] in args:
            first = args.index(op.c[0])
            count = len(op.c)
            if list(op.c) != args[first : first + count]:
                return None
            last = terminator.operands[first : first + count]
            owner = last[0].owner if last else None
            if isinstance(owner, WgmmaOp) and list(owner.d) == list(last):
                return first, count
        return None
    return None


def descriptor(element: str, buffer: SSAValue, k_dim: int, mn_dim: int) -> str:
    """The descriptor of the core-matrix tile at `element` (a C lvalue): LBO the stride of its
    k-core dimension, SBO that of its m- or n-core dimension, in bytes; no swizzle."""
    return f"irkit_wgmma_desc(&{element}, {_stride(buffer, k_dim)}, {_stride(buffer, mn_dim)}, 0)"


def swizzled_descriptor(element: str, buffer: SSAValue, operand: str) -> str:
    """The descriptor of a 128-byte-swizzled tile at `element` (`WgmmaOp.layout`
    "swizzled"): SBO 1024 bytes (8 rows of 128) between the core matrices along m (A) or k
    (B); A's LBO unused (16), B's the stride between its 64-column atoms along n."""
    lbo = 16 if operand == "a" else _stride(buffer, -3)
    return f"irkit_wgmma_desc(&{element}, {lbo}, 1024, 1)"


def _stride(buffer: SSAValue, d: int) -> int:
    """Bytes between consecutive indices of dimension `d` of `buffer`."""
    t = buffer.type
    assert isinstance(t, MemRefType)
    shape = t.get_shape()
    return math.prod(shape[len(shape) + d + 1 :]) * numpy_dtype(t.element_type).itemsize
