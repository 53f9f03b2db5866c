"""Printing Hopper's TMA copies and mbarriers (`irkit.dialects.warp_tma`) as CUDA C: the
prelude's helpers (inline PTX, kept from a host build, whose header emulates them), the
kernel's tensor-map parameters and each op's call.

A kernel that copies by TMA takes its tensor maps after its buffers, as
`const __grid_constant__ irkit_tensor_map irkit_tmap<j>` (the 128-byte, 64-byte aligned
`CUtensorMap` of the driver API, declared here since NVRTC has no `cuda.h`): a
`__grid_constant__` parameter has an address in the parameter space, which is what
`cp.async.bulk.tensor` reads the map from. The runtime builds the maps (`map_layout`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from xdsl.dialects import func
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Operation

from irkit.dialects.warp_tma import (
    ClusterBarrierOp,
    MbarrierArriveClusterOp,
    MbarrierArriveExpectTxOp,
    MbarrierArriveOp,
    MbarrierInitOp,
    MbarrierWaitOp,
    SetMaxNRegOp,
    TensorMap,
    TmaLoadOp,
    map_index,
)
from irkit.dtypes import numpy_dtype

if TYPE_CHECKING:
    from irkit.codegen.cuda import CudaPrinter

COMMON_HELPERS = """\
#ifndef IRKIT_CUDA_HOST
struct __align__(64) irkit_tensor_map { unsigned long long opaque[16]; };
__device__ __forceinline__ unsigned irkit_shared_address(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void irkit_mbarrier_init(void* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\\n" :: "r"(irkit_shared_address(bar)), "r"(count) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\\n" ::: "memory");
}
__device__ __forceinline__ void irkit_mbarrier_arrive_expect_tx(void* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\\n" :: "r"(irkit_shared_address(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void irkit_mbarrier_arrive(void* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\\n" :: "r"(irkit_shared_address(bar)) : "memory");
}
template <int N> __device__ __forceinline__ void irkit_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\\n" :: "n"(N)); }
template <int N> __device__ __forceinline__ void irkit_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\\n" :: "n"(N)); }
__device__ __forceinline__ void irkit_mbarrier_wait(void* bar, unsigned parity) {
  asm volatile("{\\n.reg .pred p;\\nirkit_wait:\\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\\n@!p bra irkit_wait;\\n}\\n"
               :: "r"(irkit_shared_address(bar)), "r"(parity) : "memory");
}
#endif
"""
"""The tensor map's type, mbarrier.init (and the fence that shows it to the TMA unit),
arrive.expect_tx, arrive, setmaxnreg, and a wait: try_wait.parity until the phase has
completed, the loop inside the asm (its label scoped by the braces, so each inlined copy
has its own). As a C loop around one try_wait, ptxas serialized a consumer's wgmma ops that
a wait kept in flight across it (its C7514 remark): the loop sat in their pipeline stage."""
CLUSTER_HELPERS = """\
#ifndef IRKIT_CUDA_HOST
__device__ __forceinline__ void irkit_mbarrier_arrive_cluster(void* bar, unsigned cta) {
  asm volatile("{\\n.reg .b32 remote;\\nmapa.shared::cluster.u32 remote, %0, %1;\\n"
               "mbarrier.arrive.shared::cluster.b64 _, [remote];\\n}\\n"
               :: "r"(irkit_shared_address(bar)), "r"(cta) : "memory");
}
__device__ __forceinline__ void irkit_cluster_barrier() {
  asm volatile("barrier.cluster.arrive.release.aligned;\\nbarrier.cluster.wait.acquire.aligned;\\n" ::: "memory");
}
#endif
"""
"""A remote arrival (`mapa` gives the barrier's address in block `cta`'s shared memory, which
the cluster-scoped arrive takes) and the cluster barrier."""


def helper(rank: int, multicast: bool = False) -> str:
    """`irkit_tma_load_<rank>d(dst, map, c0 .. c<rank-1>, bar)`: one cp.async.bulk.tensor
    of a box, its coordinates innermost first (PTX's order), completing on `bar`; with
    `multicast`, `irkit_tma_load_<rank>d_multicast(..., bar, mask)`, the box landing in
    every block of the cluster in `mask` (`.multicast::cluster`, the mask a 16-bit
    register)."""
    coordinates = ", ".join(f"int c{i}" for i in range(rank))
    registers = ", ".join(f"%{i + 2}" for i in range(rank))
    inputs = ", ".join(f'"r"(c{i})' for i in range(rank))
    name = f"irkit_tma_load_{rank}d" + ("_multicast" if multicast else "")
    mask_param = ", unsigned short mask" if multicast else ""
    mask_operand = f", %{rank + 3}" if multicast else ""
    mask_input = ', "h"(mask)' if multicast else ""
    modifier = ".multicast::cluster" if multicast else ""
    return (
        "#ifndef IRKIT_CUDA_HOST\n"
        f"__device__ __forceinline__ void {name}(void* dst, const irkit_tensor_map* map, "
        f"{coordinates}, void* bar{mask_param}) {{\n"
        f'  asm volatile("cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile'
        f".mbarrier::complete_tx::bytes{modifier} "
        f'[%0], [%1, {{{registers}}}], [%{rank + 2}]{mask_operand};\\n"\n'
        f'               :: "r"(irkit_shared_address(dst)), "l"(map), {inputs}, '
        f'"r"(irkit_shared_address(bar)){mask_input} : "memory");\n'
        "}\n#else\n"
        f"inline void {name}(void* dst, const irkit_tensor_map* map, {coordinates}, "
        f"void* bar{mask_param}) {{\n"
        f"  const int c[] = {{{', '.join(f'c{i}' for i in range(rank))}}};\n"
        f"  irkit_host::tma_issue(dst, map, c, bar{', mask' if multicast else ', 0'});\n"
        "}\n#endif\n"
    )


def prelude(ops: list[Operation]) -> str:
    """The helpers the kernels' TMA ops need (none where there is none)."""
    loads = sorted(
        {(len(op.box_shape), bool(op.cta_mask)) for op in ops if isinstance(op, TmaLoadOp)}
    )
    barriers = any(isinstance(op, MbarrierInitOp | MbarrierWaitOp | SetMaxNRegOp) for op in ops)
    clustered = any(isinstance(op, MbarrierArriveClusterOp | ClusterBarrierOp) for op in ops)
    if not loads and not barriers and not clustered:
        return ""
    cluster = CLUSTER_HELPERS if clustered else ""
    return COMMON_HELPERS + cluster + "".join(helper(r, m) for r, m in loads)


def parameters(maps: list[TensorMap]) -> list[str]:
    """The kernel's tensor-map parameters (its `tensor_maps`), after its buffers."""
    return [f"const __grid_constant__ irkit_tensor_map irkit_tmap{j}" for j in range(len(maps))]


class MapLayout(NamedTuple):
    """A tensor map's fields, innermost dimension first (the driver's order)."""

    itemsize: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    """Bytes between consecutive indices of dimensions 1 .. rank - 1."""
    box: tuple[int, ...]
    swizzle: int
    """0, or 128: the bytes of the swizzle pattern the box lands in."""


def map_layout(fn: func.FuncOp, m: TensorMap) -> MapLayout:
    """What the runtime encodes kernel `fn`'s tensor map `m` from (with the buffer's
    address): the map's extents within the argument's (contiguous) shape, whose strides
    it keeps, and the box."""
    t = fn.function_type.inputs.data[m.arg]
    assert isinstance(t, MemRefType)
    itemsize = numpy_dtype(t.element_type).itemsize
    shape = t.get_shape()
    strides, step = [], itemsize
    for extent in reversed(shape[1:]):
        step *= extent
        strides.append(step)
    dims, box = tuple(reversed(m.extent or shape)), tuple(reversed(m.box))
    return MapLayout(itemsize, dims, tuple(strides), box, m.swizzle)


def emit(printer: CudaPrinter, op: Operation, fn_maps: list[TensorMap]) -> None:
    """One TMA or mbarrier op as a call of the prelude's helper."""
    if isinstance(op, TmaLoadOp):
        dest = printer.element(op.dest, list(op.dest_indices))
        coordinates = ", ".join(f"(int){printer.name(c)}" for c in reversed(op.coordinates))
        bar = printer.element(op.barrier, [op.barrier_index])
        j = map_index(fn_maps, op)
        rank = len(op.box_shape)
        if op.cta_mask:
            printer.emit(
                f"irkit_tma_load_{rank}d_multicast(&{dest}, &irkit_tmap{j}, {coordinates}, "
                f"&{bar}, (unsigned short){op.cta_mask}u);"
            )
            return
        printer.emit(f"irkit_tma_load_{rank}d(&{dest}, &irkit_tmap{j}, {coordinates}, &{bar});")
        return
    if isinstance(op, ClusterBarrierOp):
        printer.emit("irkit_cluster_barrier();")
        return
    if isinstance(op, SetMaxNRegOp):
        kind = "inc" if op.increase is not None else "dec"
        printer.emit(f"irkit_setmaxnreg_{kind}<{op.registers}>();")
        return
    assert isinstance(
        op,
        MbarrierInitOp
        | MbarrierArriveExpectTxOp
        | MbarrierArriveOp
        | MbarrierArriveClusterOp
        | MbarrierWaitOp,
    )
    bar = printer.element(op.barrier, [op.index])
    if isinstance(op, MbarrierArriveClusterOp):
        printer.emit(f"irkit_mbarrier_arrive_cluster(&{bar}, (unsigned){printer.name(op.cta)});")
    elif isinstance(op, MbarrierArriveOp):
        printer.emit(f"irkit_mbarrier_arrive(&{bar});")
    elif isinstance(op, MbarrierInitOp):
        printer.emit(f"irkit_mbarrier_init(&{bar}, {op.arrivals}u);")
    elif isinstance(op, MbarrierArriveExpectTxOp):
        printer.emit(f"irkit_mbarrier_arrive_expect_tx(&{bar}, {op.transaction}u);")
    else:
        printer.emit(f"irkit_mbarrier_wait(&{bar}, (unsigned){printer.name(op.parity)});")
