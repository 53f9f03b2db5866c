"""Hopper's tensor memory accelerator (TMA) and its barriers in the `irkit_warp` dialect
(`irkit.dialects.warp`).

`irkit_warp.tma_load`: one thread's bulk copy of a box of a global tensor into shared memory,
PTX's `cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes` (MLIR's
`nvgpu.tma.async.load`). The box is `box` elements along each dimension of the source (a
kernel argument, outermost first, at most 5), from the element at `coordinates`; it lands
in the destination's row-major order (the last dimension fastest) from `dest[dest_indices]`
on (its rows of 128 bytes 128-byte swizzled, with `swizzle`), and an element outside the
source, or past its `extent`, is zero. The runtime describes the source by a tensor map
(`tensor_maps`), which the kernel takes as a `__grid_constant__` parameter after its
buffers. The copy completes on an mbarrier: its bytes count down the barrier's
transaction count as they land.

An mbarrier (`memref<N x i64>` in shared memory, one 64-bit barrier an element) is PTX's
phase barrier: `irkit_warp.mbarrier_init {count}` readies it for `count` arrivals a phase
(one thread, before a block barrier shows it to the others);
`irkit_warp.mbarrier_arrive_expect_tx {bytes}` arrives once and says `bytes` more are to
land in this phase (`irkit_warp.mbarrier_arrive`: an arrival alone); the phase completes when every arrival is in and every byte has landed,
and the next begins. `irkit_warp.mbarrier_wait` (PTX's `mbarrier.try_wait.parity` in a loop)
returns once the phase of the given parity (0 or 1: phases alternate) has completed: only
then are the copies that complete on it in shared memory for the waiting thread. cuda-host
lands a barrier's copies when a thread waits on it (the latest moment a GPU may), and
lockstep counts a copy as a write when issued and lands it at the wait that completes its
phase (`irkit.runtime.lockstep_tma`).

`irkit_warp.setmaxnreg`: a warpgroup gives registers back to the block's pool, or takes
them (a producer warpgroup that only issues copies, and its consumers).

Clusters (sm_90): a kernel launched in clusters of C blocks (`irkit.launch`'s `cluster`;
CUDA's `__cluster_dims__`), the blocks of a cluster consecutive along x and live on the GPU
at once, each reaching the others' shared memory. `tma_load {multicast = mask}` lands one
box in every block of the cluster whose bit is set in `mask` (the block's rank in its
cluster: blockIdx.x % C), at the same place in each, counting down the mbarrier at the same
place in each (PTX's `.multicast::cluster`); `irkit_warp.mbarrier_arrive_cluster` arrives
on the barrier at the same place in block `cta` of the cluster (`mapa` then
`mbarrier.arrive.release.cluster.shared::cluster`); `irkit_warp.cluster_barrier` is a
barrier of every thread of the cluster (`barrier.cluster.arrive.release` then
`.wait.acquire`), which orders the mbarriers' initialization before another block's
copies or arrivals reach them, and keeps a block alive while the others may still write
into it. cuda-host runs a cluster's blocks as fibers of one scheduler, each block with its
own shared memory; lockstep refuses a clustered launch.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DenseArrayBase,
    IndexType,
    IntegerAttr,
    MemRefType,
    NoneAttr,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute, BlockArgument, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    var_operand_def,
)
from xdsl.utils.exceptions import VerifyException

from irkit.dialects.warp_async import SHARED
from irkit.errors import IrkitError

TMA_RANK = 5
"""The most dimensions a tensor map describes."""
TMA_BOX = 256
"""The most elements of a box along one dimension."""


def _barrier_type(op: IRDLOperation, barrier: SSAValue, index: SSAValue) -> None:
    t = barrier.type
    if not (
        isinstance(t, MemRefType)
        and t.memory_space == SHARED
        and t.element_type == i64
        and t.get_num_dims() == 1
    ):
        raise VerifyException(f"{op.name}'s barrier is a memref<N x i64> in shared memory")
    if not isinstance(index.type, IndexType):
        raise VerifyException(f"{op.name}'s barrier index is an index")


class _BarrierOp(IRDLOperation):
    """An op on barrier `barrier[index]`."""

    barrier = operand_def(MemRefType)
    index = operand_def(IndexType)

    def verify_(self) -> None:
        _barrier_type(self, self.barrier, self.index)


@irdl_op_definition
class MbarrierInitOp(_BarrierOp):
    """`mbarrier.init`: barrier `barrier[index]` expects `count` arrivals a phase, phase 0."""

    name = "irkit_warp.mbarrier_init"

    count = prop_def(IntegerAttr)

    def __init__(self, barrier: SSAValue, index: SSAValue, count: int):
        super().__init__(operands=[barrier, index], properties={"count": IntegerAttr(count, i64)})

    @property
    def arrivals(self) -> int:
        return self.count.value.data

    def verify_(self) -> None:
        super().verify_()
        if not 1 <= self.arrivals < 1 << 16:
            raise VerifyException(f"{self.name}: count must be from 1 to 65535")


@irdl_op_definition
class MbarrierArriveExpectTxOp(_BarrierOp):
    """`mbarrier.arrive.expect_tx`: `bytes` more to land in the current phase, and one
    arrival."""

    name = "irkit_warp.mbarrier_arrive_expect_tx"

    bytes = prop_def(IntegerAttr)

    def __init__(self, barrier: SSAValue, index: SSAValue, count: int):
        super().__init__(operands=[barrier, index], properties={"bytes": IntegerAttr(count, i64)})

    @property
    def transaction(self) -> int:
        return self.bytes.value.data

    def verify_(self) -> None:
        super().verify_()
        if not 0 <= self.transaction < 1 << 20:
            raise VerifyException(f"{self.name}: bytes must be from 0 to 2^20 - 1")


@irdl_op_definition
class MbarrierArriveOp(_BarrierOp):
    """`mbarrier.arrive`: one arrival on `barrier[index]` (a consumer done with a stage)."""

    name = "irkit_warp.mbarrier_arrive"

    def __init__(self, barrier: SSAValue, index: SSAValue):
        super().__init__(operands=[barrier, index])


@irdl_op_definition
class MbarrierArriveClusterOp(IRDLOperation):
    """`mbarrier.arrive.release.cluster.shared::cluster`: one arrival on `barrier[index]` of
    block `cta` of the cluster (a consumer done with a stage that another block's multicast
    copies fill)."""

    name = "irkit_warp.mbarrier_arrive_cluster"

    barrier = operand_def(MemRefType)
    index = operand_def(IndexType)
    cta = operand_def(IndexType)

    def __init__(self, barrier: SSAValue, index: SSAValue, cta: SSAValue):
        super().__init__(operands=[barrier, index, cta])

    def verify_(self) -> None:
        _barrier_type(self, self.barrier, self.index)


@irdl_op_definition
class ClusterBarrierOp(IRDLOperation):
    """`barrier.cluster.arrive.release` + `barrier.cluster.wait.acquire`: every thread of
    every block of the cluster meets here (a block barrier where the launch has no
    clusters)."""

    name = "irkit_warp.cluster_barrier"

    def __init__(self) -> None:
        super().__init__()


CLUSTER_MAX = 8
"""The most blocks a portable cluster holds (CUDA's limit without the non-portable opt-in)."""


@irdl_op_definition
class SetMaxNRegOp(IRDLOperation):
    """`setmaxnreg.{inc,dec}.sync.aligned.u32`: the warpgroup's threads ask for `count`
    registers each from here on (more, `increase`; or fewer, handing the rest back to the
    block's pool), so that a producer warpgroup that only issues copies leaves its
    registers to the consumers' accumulators (sm_90a; the whole warpgroup executes it)."""

    name = "irkit_warp.setmaxnreg"

    count = prop_def(IntegerAttr)
    increase = opt_prop_def(UnitAttr)

    def __init__(self, count: int, increase: bool):
        properties: dict[str, Attribute] = {"count": IntegerAttr(count, i64)}
        if increase:
            properties["increase"] = UnitAttr()
        super().__init__(properties=properties)

    @property
    def registers(self) -> int:
        return self.count.value.data

    def verify_(self) -> None:
        if not (24 <= self.registers <= 256 and self.registers % 8 == 0):
            raise VerifyException(f"{self.name}: count must be a multiple of 8 from 24 to 256")


@irdl_op_definition
class MbarrierWaitOp(IRDLOperation):
    """Wait until the phase of parity `parity` (0 or 1) of `barrier[index]` has completed."""

    name = "irkit_warp.mbarrier_wait"

    barrier = operand_def(MemRefType)
    index = operand_def(IndexType)
    parity = operand_def(IndexType)

    def __init__(self, barrier: SSAValue, index: SSAValue, parity: SSAValue):
        super().__init__(operands=[barrier, index, parity])

    def verify_(self) -> None:
        _barrier_type(self, self.barrier, self.index)


@irdl_op_definition
class TmaLoadOp(IRDLOperation):
    """One thread's TMA copy of a `box` of `source` from `coordinates` into `dest` from
    `dest_indices` on, completing on `barrier[barrier_index]` (see the module docstring)."""

    name = "irkit_warp.tma_load"

    dest = operand_def(MemRefType)
    dest_indices = var_operand_def(IndexType)
    source = operand_def(MemRefType)
    coordinates = var_operand_def(IndexType)
    barrier = operand_def(MemRefType)
    barrier_index = operand_def(IndexType)
    box = prop_def(DenseArrayBase)
    swizzle = opt_prop_def(IntegerAttr)
    extent = opt_prop_def(DenseArrayBase)
    multicast = opt_prop_def(IntegerAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(
        self,
        dest: SSAValue,
        dest_indices: list[SSAValue],
        source: SSAValue,
        coordinates: list[SSAValue],
        box: list[int],
        barrier: SSAValue,
        barrier_index: SSAValue,
        swizzle: int = 0,
        extent: list[int] | None = None,
        multicast: int = 0,
    ):
        properties: dict[str, Attribute] = {"box": DenseArrayBase.from_list(i64, box)}
        if swizzle:
            properties["swizzle"] = IntegerAttr(swizzle, i64)
        if multicast:
            properties["multicast"] = IntegerAttr(multicast, i64)
        if extent is not None:
            properties["extent"] = DenseArrayBase.from_list(i64, extent)
        super().__init__(
            operands=[dest, dest_indices, source, coordinates, barrier, barrier_index],
            properties=properties,
        )

    @property
    def tensor_extent(self) -> tuple[int, ...]:
        """The extents the tensor map gives the source (elements past them read as zero):
        `extent` where set, a matmul's own where its operand's rows are padded past them,
        else the source's shape."""
        if self.extent is not None:
            return tuple(int(v) for v in self.extent.get_values())
        t = self.source.type
        assert isinstance(t, MemRefType)
        return tuple(t.get_shape())

    @property
    def swizzle_bytes(self) -> int:
        """0, or 128: the box's rows (128 bytes each) land with their 16-byte chunks XOR
        the row's position in 8 (`irkit.dialects.warp_async.swizzle_chunk`), the box's
        destination aligned to 1024 bytes."""
        return self.swizzle.value.data if self.swizzle is not None else 0

    @property
    def cta_mask(self) -> int:
        """The blocks of the cluster the box lands in, a bit a rank (0: this block only)."""
        return self.multicast.value.data if self.multicast is not None else 0

    @property
    def box_shape(self) -> tuple[int, ...]:
        return tuple(int(v) for v in self.box.get_values())

    @property
    def bytes(self) -> int:
        """What the copy counts down its barrier by: the whole box, zeros included."""
        from irkit.dtypes import numpy_dtype

        t = self.source.type
        assert isinstance(t, MemRefType)
        return math.prod(self.box_shape) * numpy_dtype(t.element_type).itemsize

    def verify_(self) -> None:
        from irkit.dtypes import numpy_dtype

        _barrier_type(self, self.barrier, self.barrier_index)
        d, s = self.dest.type, self.source.type
        assert isinstance(d, MemRefType) and isinstance(s, MemRefType)
        if d.memory_space != SHARED or s.memory_space == SHARED:
            raise VerifyException(f"{self.name} copies from global to shared memory")
        if d.element_type != s.element_type:
            raise VerifyException(f"{self.name} copies between buffers of one element type")
        if not isinstance(s.layout, NoneAttr) or s.get_num_dims() > TMA_RANK:
            raise VerifyException(
                f"{self.name}'s source is a contiguous tensor of at most {TMA_RANK} dimensions"
            )
        box = self.box_shape
        if len(box) != s.get_num_dims() or len(self.coordinates) != len(box):
            raise VerifyException(f"{self.name} takes a box extent and a coordinate per dimension")
        if len(self.dest_indices) != d.get_num_dims():
            raise VerifyException(f"{self.name} takes one index per dimension of its destination")
        if not all(1 <= e <= TMA_BOX for e in box):
            raise VerifyException(f"{self.name}: box extents must be from 1 to {TMA_BOX}")
        if box[-1] * numpy_dtype(s.element_type).itemsize % 16:
            raise VerifyException(f"{self.name}: the box's rows must be multiples of 16 bytes")
        if math.prod(box) > math.prod(d.get_shape()):
            raise VerifyException(f"{self.name}: the box is larger than its destination")
        extent = self.tensor_extent
        within = all(1 <= e <= n for e, n in zip(extent, s.get_shape(), strict=False))
        if len(extent) != len(box) or not within:
            raise VerifyException(f"{self.name}: an extent a dimension, within the source's")
        if self.swizzle_bytes not in (0, 128) or (
            self.swizzle_bytes and box[-1] * numpy_dtype(s.element_type).itemsize != 128
        ):
            raise VerifyException(f"{self.name}: a swizzled box has rows of 128 bytes")
        if not 0 <= self.cta_mask < 1 << CLUSTER_MAX:
            raise VerifyException(f"{self.name}: multicast is a mask of {CLUSTER_MAX} ranks")


TMA_OPS = (
    MbarrierInitOp,
    MbarrierArriveExpectTxOp,
    MbarrierArriveOp,
    MbarrierArriveClusterOp,
    MbarrierWaitOp,
    TmaLoadOp,
    SetMaxNRegOp,
    ClusterBarrierOp,
)


class TensorMap(NamedTuple):
    """One tensor map a kernel takes: kernel argument `arg` seen in boxes of `box`, landing
    with `swizzle` (0 or 128 bytes), its extents `extent` (empty: the argument's shape)."""

    arg: int
    box: tuple[int, ...]
    swizzle: int = 0
    extent: tuple[int, ...] = ()


def _map_of(op: TmaLoadOp) -> TensorMap:
    source = op.source
    assert isinstance(source, BlockArgument)
    return TensorMap(source.index, op.box_shape, op.swizzle_bytes, op.tensor_extent)


def tensor_maps(fn: func.FuncOp) -> list[TensorMap]:
    """The tensor maps kernel `fn`'s TMA copies read through, in order of first use: one per
    (argument, box); the kernel takes them after its buffers, in this order."""
    maps: list[TensorMap] = []
    for op in fn.walk():
        if not isinstance(op, TmaLoadOp):
            continue
        source = op.source
        if not (isinstance(source, BlockArgument) and source.block is fn.body.block):
            raise IrkitError(f"@{fn.sym_name.data}: {op.name} reads a kernel argument only")
        m = _map_of(op)
        if m not in maps:
            maps.append(m)
    return maps


def map_index(fn_maps: list[TensorMap], op: TmaLoadOp) -> int:
    """Which of the kernel's tensor maps `op` copies through."""
    return fn_maps.index(_map_of(op))
