"""The asynchronous ops of the `irkit_warp` dialect (`irkit.dialects.warp`): cp.async and
its groups, and Hopper's wgmma with its fence, commit and wait.

`irkit_warp.cp_async`, `cp_async_commit` and `cp_async_wait`: a thread's asynchronous copy
of 16 bytes from global to shared memory, PTX's `cp.async.cg.shared.global` with its
source size (MLIR's `nvgpu.device_async_copy` with `srcElements`): `count` elements along
the last dimension, of which the first `valid` are read and the rest are zero (a copy past
a ragged edge reads nothing there). Copies are grouped by `cp_async_commit` (the thread's
copies issued since the last commit form one group), and `cp_async_wait {pending = N}`
returns when at most the N most recent groups of the thread are still in flight: only then
are the older groups' bytes in shared memory, and only for the thread that waited (a barrier
after the wait shows them to the block). Until its wait, a copy may land at any time:
cuda-host makes it land at the wait (the latest moment, so a missing or short wait reads
stale data), and lockstep counts it as a write both when issued and when it lands (so a
copy into a buffer other threads still read races).

`irkit_warp.wgmma` and its fence, commit and wait: a warpgroup's `wgmma.mma_async` m64nNk16
(m64nNk32 of 8-bit floats) reading both operands from core-matrix tiles in shared memory
(see `WgmmaOp`).
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    IndexType,
    IntegerAttr,
    MemRefType,
    StringAttr,
    i64,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    var_operand_def,
    var_result_def,
)
from xdsl.utils.exceptions import VerifyException

SHARED = IntegerAttr(3, 32)
"""Shared memory's address space (`irkit.loops.SHARED_SPACE`, MLIR's gpu workgroup space)."""


@irdl_op_definition
class CpAsyncOp(IRDLOperation):
    """One thread's asynchronous 16-byte copy from global to shared memory (see the module
    docstring): `count` elements along the last dimension from `source[source_indices]` to
    `dest[dest_indices]`, the first `valid` read, the rest zero."""

    name = "irkit_warp.cp_async"

    dest = operand_def(MemRefType)
    dest_indices = var_operand_def(IndexType)
    source = operand_def(MemRefType)
    source_indices = var_operand_def(IndexType)
    valid = operand_def(IndexType)
    count = prop_def(IntegerAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    BYTES: ClassVar[int] = 16

    def __init__(
        self,
        dest: SSAValue,
        dest_indices: list[SSAValue],
        source: SSAValue,
        source_indices: list[SSAValue],
        valid: SSAValue,
        count: int,
    ):
        super().__init__(
            operands=[dest, dest_indices, source, source_indices, valid],
            properties={"count": IntegerAttr(count, i64)},
        )

    @property
    def elements(self) -> int:
        return self.count.value.data

    def verify_(self) -> None:
        from irkit.dtypes import numpy_dtype

        d, s = self.dest.type, self.source.type
        assert isinstance(d, MemRefType) and isinstance(s, MemRefType)
        if d.memory_space != SHARED or s.memory_space == SHARED:
            raise VerifyException(f"{self.name} copies from global to shared memory")
        if d.element_type != s.element_type:
            raise VerifyException(f"{self.name} copies between buffers of one element type")
        counts = (len(self.dest_indices), len(self.source_indices))
        if counts != (d.get_num_dims(), s.get_num_dims()):
            raise VerifyException(f"{self.name} takes one index per dimension of each buffer")
        if self.elements * numpy_dtype(d.element_type).itemsize != self.BYTES:
            raise VerifyException(f"{self.name} copies {self.BYTES} bytes")


@irdl_op_definition
class CpAsyncCommitOp(IRDLOperation):
    """The thread's copies issued since its last commit become one group."""

    name = "irkit_warp.cp_async_commit"

    def __init__(self):
        super().__init__()


class _WaitGroupOp(IRDLOperation):
    """A wait on a thread's (a warpgroup's) commit groups: until at most `pending` of the most
    recent ones are in flight."""

    pending = prop_def(IntegerAttr)

    def __init__(self, pending: int):
        super().__init__(properties={"pending": IntegerAttr(pending, i64)})

    @property
    def groups(self) -> int:
        return self.pending.value.data

    def verify_(self) -> None:
        if not 0 <= self.groups <= 7:
            raise VerifyException(f"{self.name}: pending must be from 0 to 7")


@irdl_op_definition
class CpAsyncWaitOp(_WaitGroupOp):
    """`cp.async.wait_group`: the thread's older copy groups have landed (for it alone)."""

    name = "irkit_warp.cp_async_wait"


ASYNC_COPY_OPS = (CpAsyncOp, CpAsyncCommitOp, CpAsyncWaitOp)


def core_a(m: int, k: int, strips: bool = False) -> tuple[int, int, int, int]:
    """Where element (m, k) of a wgmma's A sits in its core-matrix tile [m/8, k/8, m%8, k%8]
    (K-major, no swizzle): 8 x 8 core matrices of 16-byte rows; under `strips`, a strip of
    core matrices along m for each 8 of k, [k/8, m/8, m%8, k%8] (what one TMA box lands)."""
    if strips:
        return k // 8, m // 8, m % 8, k % 8
    return m // 8, k // 8, m % 8, k % 8


def core_b(k: int, n: int, strips: bool = False) -> tuple[int, int, int, int]:
    """Where element (k, n) of a wgmma's B sits in its core-matrix tile [k/8, n/8, k%8, n%8]
    (N-major, no swizzle: each core matrix's 16-byte rows run along n); under `strips`, a
    strip along k for each 8 of n, [n/8, k/8, k%8, n%8]."""
    if strips:
        return n // 8, k // 8, k % 8, n % 8
    return k // 8, n // 8, k % 8, n % 8


def core_k_major(mn: int, k: int, per: int) -> tuple[int, int, int, int]:
    """Where element (mn, k) of a K-major operand sits in its core-matrix tile [mn/8,
    k/per, mn%8, k%per], `per` elements in a core matrix's 16-byte row (16 of an 8-bit
    float): layout "kmajor", A's and B's alike."""
    return mn // 8, k // per, mn % 8, k % per


def swizzle_chunk(row, chunk, chunks: int):
    """The 16-byte chunk where logical chunk `chunk` of row `row` sits in a swizzled tile
    whose rows hold `chunks` chunks (ints or numpy arrays): the chunk XOR a function of the
    row that gives 8 consecutive rows' same chunk 8 different bank groups (128 bytes: rows
    of 8 or more chunks, row % 8; of 4, (row / 2) % 4; of 2, (row / 4) % 2). A tile written
    and read through it (cp.async, ldmatrix, element loads) needs no padding. On rows of 8,
    4 and 2 chunks it is TMA's 128-, 64- and 32-byte swizzle (address bits 4-6 XOR bits 7-9,
    for a tile aligned to 1024 bytes), which wgmma's descriptors name."""
    period = min(chunks, 8)
    return chunk ^ (row // max(1, 8 // chunks) % period)


def swizzle_column(row, column, row_length: int):
    """Column `column` of row `row` in a swizzled tile of `row_length` 2-byte elements."""
    chunk = swizzle_chunk(row, column // 8, row_length // 8)
    return 8 * chunk + column % 8


SWIZZLE_ROW = 64
"""Elements (2 bytes each) of a row of a 128-byte-swizzled wgmma tile (`wgmma_element`)."""
KMAJOR_ROW = 16
"""Elements (1 byte each) of a core matrix's row in the 8-bit "kmajor" tiles."""
FP8_NAMES = {"f8E4M3FN": "e4m3", "f8E5M2": "e5m2"}
"""PTX's names of the 8-bit formats a wgmma multiplies."""


def wgmma_element(layout: str, operand: str, origin: list, r, c) -> list:
    """The indices of element (r, c) of a wgmma's A (r along m, c along k) or B (r along k,
    c along n) in its tile, from the op's indices `origin` (ints or numpy arrays), for each
    `WgmmaOp.layout`: "cores" (`core_a`, `core_b`), "strips" (the same, the two core
    dimensions swapped), "kmajor" (8-bit: `core_k_major` for both) and "swizzled": rows of
    128 bytes, 128-byte swizzled, A K-major `[.., m, 64]` from origin `[.., m0, k0]` and B
    N-major `[.., n/64, k, 64]` from origin `[.., 0, k0, 0]` (what a TMA box with 128-byte
    swizzle lands)."""
    if layout == "kmajor":
        mn, k = (r, c) if operand == "a" else (c, r)
        c0, c1, i, j = core_k_major(mn, k, KMAJOR_ROW)
        return [*origin[:-4], origin[-4] + c0, origin[-3] + c1, origin[-2] + i, origin[-1] + j]
    if layout == "swizzled":
        row = origin[-2] + r
        if operand == "a":
            return [*origin[:-2], row, swizzle_column(row, origin[-1] + c, SWIZZLE_ROW)]
        at, atom = origin[-1] + c % SWIZZLE_ROW, origin[-3] + c // SWIZZLE_ROW
        return [*origin[:-3], atom, row, swizzle_column(row, at, SWIZZLE_ROW)]
    core = core_a if operand == "a" else core_b
    c0, c1, i, j = core(r, c, layout == "strips")
    return [*origin[:-4], origin[-4] + c0, origin[-3] + c1, origin[-2] + i, origin[-1] + j]


def wgmma_d_coordinates(thread: int, i: int) -> tuple[int, int]:
    """Row and column of a warpgroup thread's accumulator i (0 .. N/2 - 1) in the 64 x N
    tile: warp w of the warpgroup holds rows 16w .. 16w + 15, each 8 columns as m16n8's C."""
    w, lane = thread % 128 // 32, thread % 32
    g, t = divmod(lane, 4)
    return 16 * w + g + 8 * (i // 2 % 2), 8 * (i // 4) + 2 * t + i % 2


@irdl_op_definition
class WgmmaOp(IRDLOperation):
    """A warpgroup's (128 threads') `wgmma.mma_async` m64nNk16, f32 accumulators: D = A B + C
    with A (64 x 16, f16 or bf16) and B (16 x N, same type) read from shared memory. A is a
    core-matrix tile `[.., m/8, k/8, 8, 8]` (K-major), B one `[.., k/8, n/8, 8, 8]` (N-major);
    the indices name the first core matrix of each (the last two 0). `layout` "strips": the
    two core dimensions swapped (A `[.., k/8, m/8, 8, 8]`, B `[.., n/8, k/8, 8, 8]`: strips
    of core matrices, one TMA box each); "swizzled": rows of 128 bytes swizzled
    (`wgmma_element`); "kmajor": m64nNk32 of 8-bit floats (A and B each f8e4m3 or f8e5m2),
    both K-major, A `[.., m/8, k/16, 8, 16]` and B `[.., n/8, k/16, 8, 16]` (PTX has no
    transposed 8-bit operand). Each thread gives and
    receives N/2 accumulators at `wgmma_d_coordinates`. Asynchronous: the results may be read
    only after a `wgmma_wait` that covers the op's group, except as the C of the next wgmma
    (the same registers on the GPU), and the tiles must not change until then."""

    name = "irkit_warp.wgmma"

    a = operand_def(MemRefType)
    a_indices = var_operand_def(IndexType)
    b = operand_def(MemRefType)
    b_indices = var_operand_def(IndexType)
    c = var_operand_def(Float32Type)
    d = var_result_def()
    n = prop_def(IntegerAttr)
    layout = opt_prop_def(StringAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(
        self,
        a: SSAValue,
        a_indices: list[SSAValue],
        b: SSAValue,
        b_indices: list[SSAValue],
        c: list[SSAValue],
        n: int,
        layout: str = "cores",
    ):
        properties: dict[str, Attribute] = {"n": IntegerAttr(n, i64)}
        if layout != "cores":
            properties["layout"] = StringAttr(layout)
        super().__init__(
            operands=[a, a_indices, b, b_indices, c],
            properties=properties,
            result_types=[[Float32Type()] * (n // 2)],
        )

    @property
    def tiles(self) -> str:
        """The tiles' layout: "cores", "strips" or "swizzled" (see the class docstring)."""
        return self.layout.data if self.layout is not None else "cores"

    def core_dims(self) -> tuple[int, int, int, int]:
        """The dimensions (from the end) of A's k and m cores and of B's k and n cores."""
        if self.tiles == "strips":
            return -4, -3, -3, -4
        if self.tiles == "kmajor":
            return -3, -4, -3, -4
        return -3, -4, -4, -3

    @property
    def k(self) -> int:
        """k of one op: 16, or 32 of 8-bit floats."""
        return 32 if self.tiles == "kmajor" else 16

    @property
    def width(self) -> int:
        return self.n.value.data

    @property
    def narrow_type(self) -> str:
        """ "f16" or "bf16"; of 8-bit floats, A's and B's PTX names ("e4m3_e5m2")."""
        a, b = self.a.type, self.b.type
        assert isinstance(a, MemRefType) and isinstance(b, MemRefType)
        if self.tiles == "kmajor":
            return f"{FP8_NAMES[str(a.element_type)]}_{FP8_NAMES[str(b.element_type)]}"
        return "bf16" if isinstance(a.element_type, BFloat16Type) else "f16"

    def verify_(self) -> None:
        n = self.width
        if not (8 <= n <= 256 and n % 8 == 0):
            raise VerifyException(f"{self.name}: N must be a multiple of 8 from 8 to 256")
        if len(self.c) != n // 2 or len(self.d) != n // 2:
            raise VerifyException(f"{self.name}: {n // 2} accumulators in and out")
        if self.tiles not in ("cores", "strips", "swizzled", "kmajor"):
            raise VerifyException(f"{self.name}: layout is cores, strips, swizzled or kmajor")
        last = {"swizzled": (SWIZZLE_ROW,), "kmajor": (8, KMAJOR_ROW)}.get(self.tiles, (8, 8))
        for buffer, indices in ((self.a, self.a_indices), (self.b, self.b_indices)):
            t = buffer.type
            assert isinstance(t, MemRefType)
            if t.memory_space != SHARED or t.get_shape()[-len(last) :] != last:
                raise VerifyException(
                    f"{self.name} reads {self.tiles} tiles [.., {', '.join(map(str, last))}] "
                    "in shared memory"
                )
            if len(indices) != t.get_num_dims():
                raise VerifyException(f"{self.name} takes one index per dimension of each tile")
            eight = str(t.element_type) in FP8_NAMES
            if eight != (self.tiles == "kmajor"):
                raise VerifyException(f"{self.name}: 8-bit floats, and only they, are kmajor")
            if not (eight or isinstance(t.element_type, Float16Type | BFloat16Type)):
                raise VerifyException(f"{self.name} multiplies f16, bf16 or 8-bit floats")


@irdl_op_definition
class WgmmaFenceOp(IRDLOperation):
    """`wgmma.fence`: the accumulators and shared tiles written before it are seen by the
    wgmma ops after it."""

    name = "irkit_warp.wgmma_fence"

    def __init__(self):
        super().__init__()


@irdl_op_definition
class WgmmaCommitOp(IRDLOperation):
    """`wgmma.commit_group`: the warpgroup's wgmma ops since the last commit form a group."""

    name = "irkit_warp.wgmma_commit"

    def __init__(self):
        super().__init__()


@irdl_op_definition
class WgmmaWaitOp(_WaitGroupOp):
    """`wgmma.wait_group`: the older groups' results are readable and their tiles free."""

    name = "irkit_warp.wgmma_wait"


WGMMA_OPS = (WgmmaOp, WgmmaFenceOp, WgmmaCommitOp, WgmmaWaitOp)
