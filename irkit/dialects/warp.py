"""`irkit_warp`: warp-level ops of the GPU-mapped loop level that upstream dialects lack
in xDSL (MLIR's `nvgpu.mma.sync` is the upstream counterpart; xDSL has no nvgpu dialect).

`irkit_warp.mma_m16n8k16`: one tensor-core multiply-accumulate of a warp, `D = A B + C`
with A 16x16 (f16 or bf16, row-major), B 16x8 (same type, column-major), C and D 16x8
(f32), exactly PTX's `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`.
Each of the 32 lanes of a warp gives 8 values of A, 4 of B and 4 of C, and receives 4 of D,
at these coordinates (g = lane / 4, t = lane % 4):

    A operand i (0..7):  row g + 8 * (i // 2 % 2),   column 2t + i % 2 + 8 * (i // 4)
    B operand i (0..3):  row (k) 2t + i % 2 + 8 * (i // 2),   column (n) g
    C operand / D result i (0..3):  row g + 8 * (i // 2),   column 2t + i % 2

`irkit_warp.mma_m16n8k8_tf32`: the same for f32 inputs through TF32 (an opt-in precision:
each input rounded to 10 mantissa bits, to nearest with ties away from zero, as PTX's
`cvt.rna.tf32.f32`), A 16x8 and B 8x8:

    A operand i (0..3):  row g + 8 * (i % 2),   column t + 4 * (i // 2)
    B operand i (0..1):  row (k) t + 4 * i,   column (n) g
    C operand / D result: as above

`irkit_warp.mma_m16n8k32_f8`: the same for 8-bit floats (sm_89 and later), A 16x32 and B
32x8, each of f8e4m3 or f8e5m2 (A's and B's formats may differ), PTX's
`mma.sync.aligned.m16n8k32.row.col.f32.{e4m3,e5m2}.{e4m3,e5m2}.f32`. A lane's operands are
its registers: 4 of A and 2 of B, each a `vector<4xf8>` (value i of a lane's A is element
i % 4 of register i // 4):

    A value i (0..15):  row g + 8 * (i // 4 % 2),   column 4t + i % 4 + 16 * (i // 8)
    B value i (0..7):   row (k) 4t + i % 4 + 16 * (i // 4),   column (n) g

Byte for byte these are m16n8k16's fragments (a register holds the same 4 bytes of the
same row), so ldmatrix loads them unchanged.

Every lane of the warp must execute them together (no divergence), as on the GPU. They are
printed as calls of `irkit_mma_<shape>_<type>` (inline PTX on the GPU, an emulation through
the fiber scheduler on `cuda-host`), and interpreted by lockstep over whole warps.

`irkit_warp.ldmatrix_x4`: a warp's load of four 8 x 8 matrices of 16-bit values from shared
memory, PTX's `ldmatrix.sync.aligned.m8n8.x4.shared.b16`, with the lanes' row addresses
derived from one warp-uniform base: matrix j's origin is the base plus `offsets[j]` (rows,
columns of the buffer's last two dimensions), and lane l receives, as its result j, the pair
at row `l / 4`, columns `2 (l % 4)` and `2 (l % 4) + 1` of matrix j. (On the GPU, lane
`8 j + r` gives the address of matrix j's row r.) With offsets (0,0), (8,0), (0,8), (8,8) on
a row-major 16 x 16 tile of A, the four results are exactly a lane's pairs of A for
m16n8k16; on two 8-row tiles of B stored [n][k], (0,0), (0,8), (8,0), (8,8) give the pairs
of B for two instructions. Each matrix row is 16 bytes and must be 16-byte aligned. With
`transpose` (PTX's `.trans`), lane l's result j is the pair at rows `2 (l % 4)` and
`2 (l % 4) + 1`, column `l / 4` of matrix j: on B stored [k][n] as it is in memory, origins
(0,0), (8,0), (0,8), (8,8) give the pairs of B for two 8-column instructions. With
`swizzled`, the tile's 16-byte chunks are swizzled (`swizzle_column`): a lane's row address
is its row's chunk where the swizzle put it.

The asynchronous ops (cp.async and its groups, wgmma and its fence, commit and wait) are in
`irkit.dialects.warp_async`, and of this dialect.
"""

from __future__ import annotations

from enum import auto
from typing import ClassVar

from xdsl.dialects.builtin import (
    BFloat16Type,
    DenseArrayBase,
    Float8E4M3FNType,
    Float8E5M2Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
    MemRefType,
    UnitAttr,
    VectorType,
    i64,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, Dialect, SpacedOpaqueSyntaxAttribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from irkit.dialects.warp_async import ASYNC_COPY_OPS, WGMMA_OPS
from irkit.dialects.warp_tma import TMA_OPS

A_COUNT, B_COUNT, C_COUNT = 8, 4, 4


def a_coordinates(lane: int, i: int) -> tuple[int, int]:
    g, t = divmod(lane, 4)
    return g + 8 * (i // 2 % 2), 2 * t + i % 2 + 8 * (i // 4)


def b_coordinates(lane: int, i: int) -> tuple[int, int]:
    g, t = divmod(lane, 4)
    return 2 * t + i % 2 + 8 * (i // 2), g


def c_coordinates(lane: int, i: int) -> tuple[int, int]:
    g, t = divmod(lane, 4)
    return g + 8 * (i // 2), 2 * t + i % 2


def a_coordinates_tf32(lane: int, i: int) -> tuple[int, int]:
    g, t = divmod(lane, 4)
    return g + 8 * (i % 2), t + 4 * (i // 2)


def b_coordinates_tf32(lane: int, i: int) -> tuple[int, int]:
    g, t = divmod(lane, 4)
    return t + 4 * i, g


def a_coordinates_f8(lane: int, i: int) -> tuple[int, int]:
    g, t = divmod(lane, 4)
    return g + 8 * (i // 4 % 2), 4 * t + i % 4 + 16 * (i // 8)


def b_coordinates_f8(lane: int, i: int) -> tuple[int, int]:
    g, t = divmod(lane, 4)
    return 4 * t + i % 4 + 16 * (i // 4), g


FP8_MMA_NAMES = {Float8E4M3FNType: "e4m3", Float8E5M2Type: "e5m2"}
"""PTX's names of the 8-bit formats."""


def per_register(element_type: Attribute) -> int:
    """Values of `element_type` in one 32-bit register (ldmatrix's result per matrix): 2 of
    f16 or bf16, 4 of an 8-bit float."""
    return 4 if isinstance(element_type, Float8E4M3FNType | Float8E5M2Type) else 2


def round_tf32(x):
    """f32 values (a numpy array) rounded to TF32 as `cvt.rna.tf32.f32` does: 10 mantissa
    bits, to nearest, ties away from zero; NaN and infinities kept."""
    import numpy as np

    bits = np.asarray(x, np.float32).view(np.uint32)
    finite = (bits & 0x7F800000) != 0x7F800000
    rounded = np.where(finite, (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000), bits)
    return rounded.astype(np.uint32).view(np.float32)


@irdl_op_definition
class MmaM16n8k16Op(IRDLOperation):
    """A warp's m16n8k16 tensor-core multiply-accumulate (see the module docstring):
    operands a0..a7, b0..b3 (f16 or bf16, one type), c0..c3 (f32); results d0..d3 (f32)."""

    name = "irkit_warp.mma_m16n8k16"

    inputs = var_operand_def()
    outputs = var_result_def()

    def __init__(self, a: list[SSAValue], b: list[SSAValue], c: list[SSAValue]):
        super().__init__(operands=[[*a, *b, *c]], result_types=[[Float32Type()] * C_COUNT])

    @property
    def a(self) -> list[SSAValue]:
        return list(self.inputs[:A_COUNT])

    @property
    def b(self) -> list[SSAValue]:
        return list(self.inputs[A_COUNT : A_COUNT + B_COUNT])

    @property
    def c(self) -> list[SSAValue]:
        return list(self.inputs[A_COUNT + B_COUNT :])

    @property
    def narrow_type(self) -> str:
        """ "f16" or "bf16": the type of A and B."""
        return "bf16" if isinstance(self.inputs[0].type, BFloat16Type) else "f16"

    def verify_(self) -> None:
        if len(self.inputs) != A_COUNT + B_COUNT + C_COUNT or len(self.outputs) != C_COUNT:
            raise VerifyException(f"{self.name} takes 8 + 4 + 4 operands and gives 4 results")
        narrow = {v.type for v in [*self.a, *self.b]}
        if len(narrow) != 1 or not isinstance(next(iter(narrow)), Float16Type | BFloat16Type):
            raise VerifyException("A and B are all f16 or all bf16")
        if any(not isinstance(v.type, Float32Type) for v in [*self.c, *self.outputs]):
            raise VerifyException("C and D are f32")


@irdl_op_definition
class MmaM16n8k8Tf32Op(IRDLOperation):
    """A warp's m16n8k8 TF32 multiply-accumulate (see the module docstring): operands
    a0..a3, b0..b1, c0..c3 (f32; A and B are rounded to TF32); results d0..d3 (f32)."""

    name = "irkit_warp.mma_m16n8k8_tf32"
    PRECISION: ClassVar[str] = "tfloat32"
    """Results carry TF32's rounding: a check holds a program with this op to TF32's
    tolerance (`irkit.runtime.check.TOLERANCE`)."""

    inputs = var_operand_def()
    outputs = var_result_def()

    def __init__(self, a: list[SSAValue], b: list[SSAValue], c: list[SSAValue]):
        super().__init__(operands=[[*a, *b, *c]], result_types=[[Float32Type()] * C_COUNT])

    def verify_(self) -> None:
        if len(self.inputs) != 4 + 2 + C_COUNT or len(self.outputs) != C_COUNT:
            raise VerifyException(f"{self.name} takes 4 + 2 + 4 operands and gives 4 results")
        if any(not isinstance(v.type, Float32Type) for v in [*self.inputs, *self.outputs]):
            raise VerifyException("every operand and result is f32")


@irdl_op_definition
class MmaM16n8k32F8Op(IRDLOperation):
    """A warp's m16n8k32 8-bit-float multiply-accumulate (see the module docstring):
    operands a0..a3 (`vector<4xf8>`, one format), b0..b1 (`vector<4xf8>`, one format), c0..c3
    (f32); results d0..d3 (f32)."""

    name = "irkit_warp.mma_m16n8k32_f8"

    inputs = var_operand_def()
    outputs = var_result_def()

    def __init__(self, a: list[SSAValue], b: list[SSAValue], c: list[SSAValue]):
        super().__init__(operands=[[*a, *b, *c]], result_types=[[Float32Type()] * C_COUNT])

    @property
    def formats(self) -> tuple[str, str]:
        """PTX's names of A's and B's formats ("e4m3" or "e5m2")."""
        a, b = (self.inputs[i].type for i in (0, 4))
        assert isinstance(a, VectorType) and isinstance(b, VectorType)
        return FP8_MMA_NAMES[type(a.element_type)], FP8_MMA_NAMES[type(b.element_type)]

    def verify_(self) -> None:
        if len(self.inputs) != 4 + 2 + C_COUNT or len(self.outputs) != C_COUNT:
            raise VerifyException(f"{self.name} takes 4 + 2 + 4 operands and gives 4 results")
        for part in (self.inputs[:4], self.inputs[4:6]):
            kinds = {v.type for v in part}
            t = next(iter(kinds))
            if len(kinds) != 1 or not (
                isinstance(t, VectorType)
                and t.get_shape() == (4,)
                and type(t.element_type) in FP8_MMA_NAMES
            ):
                raise VerifyException("A's and B's registers are vector<4xf8>, one format each")
        if any(not isinstance(v.type, Float32Type) for v in [*self.inputs[6:], *self.outputs]):
            raise VerifyException("C and D are f32")


@irdl_op_definition
class LdmatrixX4Op(IRDLOperation):
    """A warp's four 8 x 8 matrices of f16 or bf16 (8 x 16 of an 8-bit float) from a
    shared buffer (see the module docstring): operands the buffer and the warp-uniform base
    indices; `offsets` matrix j's origin as (row, column) pairs; results four
    `vector<2xT>` (`vector<4xT>`), lane l's register of each."""

    name = "irkit_warp.ldmatrix_x4"

    source = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    offsets = prop_def(DenseArrayBase)
    transpose = opt_prop_def(UnitAttr)
    swizzled = opt_prop_def(UnitAttr)
    pairs = var_result_def()

    def __init__(
        self,
        source: SSAValue,
        indices: list[SSAValue],
        offsets: list[tuple[int, int]],
        transpose: bool = False,
        swizzled: bool = False,
    ):
        t = source.type
        assert isinstance(t, MemRefType)
        flat = [int(x) for rc in offsets for x in rc]
        properties: dict[str, Attribute] = {"offsets": DenseArrayBase.from_list(i64, flat)}
        if transpose:
            properties["transpose"] = UnitAttr()
        if swizzled:
            properties["swizzled"] = UnitAttr()
        super().__init__(
            operands=[source, indices],
            properties=properties,
            result_types=[[VectorType(t.element_type, [per_register(t.element_type)])] * 4],
        )

    def lane_elements(self, lane, j: int, q: int):
        """(row, column) from the base of lane `lane`'s element q of result j (`lane` may be
        an array of lanes)."""
        row, column = self.origins[j]
        if self.transpose is not None:
            return row + 2 * (lane % 4) + q, column + lane // 4
        per = self.per_register
        return row + lane // 4, column + per * (lane % 4) + q

    @property
    def per_register(self) -> int:
        """Elements in each lane's result: 2, or 4 of an 8-bit float."""
        t = self.source.type
        assert isinstance(t, MemRefType)
        return per_register(t.element_type)

    @property
    def narrow_type(self) -> str:
        """ "f16", "bf16" or "f8" (either 8-bit format: the bytes are loaded as they are):
        the type of the matrices' elements."""
        t = self.source.type
        assert isinstance(t, MemRefType)
        if self.per_register == 4:
            return "f8"
        return "bf16" if isinstance(t.element_type, BFloat16Type) else "f16"

    @property
    def origins(self) -> list[tuple[int, int]]:
        """Matrix j's origin relative to the base: (rows, columns)."""
        flat = [int(v) for v in self.offsets.get_values()]
        return list(zip(flat[::2], flat[1::2], strict=True))

    def verify_(self) -> None:
        t = self.source.type
        assert isinstance(t, MemRefType)
        eight = type(t.element_type) in FP8_MMA_NAMES
        if not (eight or isinstance(t.element_type, Float16Type | BFloat16Type)):
            raise VerifyException(
                f"{self.name} loads f16, bf16 or 8-bit floats, not {t.element_type}"
            )
        if eight and self.transpose is not None:
            raise VerifyException(f"{self.name} transposes 16-bit values only, not 8-bit ones")
        if len(self.indices) != t.get_num_dims() or t.get_num_dims() < 2:
            raise VerifyException(f"{self.name} takes one index per dimension (at least 2)")
        if len(self.pairs) != 4 or len(self.offsets.get_values()) != 8:
            raise VerifyException(f"{self.name} has 4 (row, column) offsets and 4 results")
        per = per_register(t.element_type)
        if any(r.type != VectorType(t.element_type, [per]) for r in self.pairs):
            raise VerifyException(f"{self.name}'s results are vector<{per}x{t.element_type}>")


MMA_OPS = (MmaM16n8k16Op, MmaM16n8k8Tf32Op, MmaM16n8k32F8Op)


def mma_grid(add, make, a_frags: list, b_frags: list, accs: list[SSAValue]) -> list[SSAValue]:
    """A warp tile's instructions for one k step: `make(a, b, c)` (an mma op class) for each
    of its 16-row pieces' A fragments and 8-column pieces' B fragments, row-major, each
    chained on its 4 of `accs` (given to `add`, a builder's); returns the new accumulators."""
    accs = list(accs)
    for mi, a in enumerate(a_frags):
        for ni, b in enumerate(b_frags):
            at = (mi * len(b_frags) + ni) * C_COUNT
            op = make(a, b, accs[at : at + C_COUNT])
            add(op)
            accs[at : at + C_COUNT] = list(op.outputs)
    return accs


def mma_layout(op: IRDLOperation):
    """(A count, B count, k, A's coordinates, B's coordinates, whether inputs round to TF32)
    of an mma op, its counts in values (an 8-bit op's registers hold 4 each)."""
    if isinstance(op, MmaM16n8k8Tf32Op):
        return 4, 2, 8, a_coordinates_tf32, b_coordinates_tf32, True
    if isinstance(op, MmaM16n8k32F8Op):
        return 16, 8, 32, a_coordinates_f8, b_coordinates_f8, False
    return A_COUNT, B_COUNT, 16, a_coordinates, b_coordinates, False


class ShuffleModeEnum(StrEnum):
    Xor = auto()
    Up = auto()
    Down = auto()
    Idx = auto()


@irdl_attr_definition
class ShuffleModeAttr(EnumAttribute[ShuffleModeEnum], SpacedOpaqueSyntaxAttribute):
    """MLIR's `#gpu<shuffle_mode xor>` (irkit's passes use xor only)."""

    name = "gpu.shuffle_mode"


SHUFFLE_TYPES = (Float32Type, Float64Type)
"""What `gpu.shuffle` moves in irkit: MLIR allows i32, i64, f32 and f64; irkit's reductions
shuffle their float accumulators (an f16 one stays on the shared-memory tree)."""


@irdl_op_definition
class ShuffleOp(IRDLOperation):
    """MLIR's `gpu.shuffle`, which xDSL's gpu dialect lacks: each lane of a warp gives
    `value` and receives the value of lane `lane ^ offset` (mode xor), within groups of
    `width` lanes; `valid` is whether that lane exists. As on the GPU (CUDA's
    `__shfl_xor_sync` with the full mask), every lane of the warp executes it together.

        %r, %ok = gpu.shuffle xor %v, %offset, %width : f32

    irkit's contexts load it into the `gpu` dialect (`gpu_dialect`), so the GPU level stays
    upstream MLIR: a real mlir-opt verifies it. The CUDA printer emits `__shfl_xor_sync`,
    cuda-host exchanges through the warp's staging area, lockstep permutes whole warps."""

    name = "gpu.shuffle"

    value = operand_def()
    offset = operand_def(IntegerType)
    width = operand_def(IntegerType)
    mode = prop_def(ShuffleModeAttr)
    result = result_def()
    valid = result_def(IntegerType)

    def __init__(self, value: SSAValue, offset: SSAValue, width: SSAValue):
        super().__init__(
            operands=[value, offset, width],
            properties={"mode": ShuffleModeAttr(ShuffleModeEnum.Xor)},
            result_types=[value.type, IntegerType(1)],
        )

    def verify_(self) -> None:
        if not isinstance(self.value.type, SHUFFLE_TYPES):
            raise VerifyException(f"irkit shuffles f32 or f64, not {self.value.type}")
        if self.result.type != self.value.type:
            raise VerifyException("the result has the value's type")
        for operand in (self.offset, self.width):
            if operand.type != IntegerType(32):
                raise VerifyException("offset and width are i32")

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.mode.data} ")
        printer.print_list([self.value, self.offset, self.width], printer.print_ssa_value)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.value.type)

    @classmethod
    def parse(cls, parser: Parser) -> ShuffleOp:
        mode = ShuffleModeAttr(ShuffleModeAttr.parse_parameter(parser))
        operands = parser.parse_comma_separated_list(
            parser.Delimiter.NONE, parser.parse_unresolved_operand
        )
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        if len(operands) != 3:
            parser.raise_error("gpu.shuffle takes a value, an offset and a width")
        value, offset, width = (
            parser.resolve_operand(o, ty)
            for o, ty in zip(operands, (t, IntegerType(32), IntegerType(32)), strict=True)
        )
        op = cls.create(
            operands=[value, offset, width],
            properties={"mode": mode},
            result_types=[t, IntegerType(1)],
            attributes=attributes,
        )
        return op


WARP_COLLECTIVES = (*MMA_OPS, ShuffleOp, LdmatrixX4Op, *WGMMA_OPS)
"""Ops every lane of a warp executes together (cuda-host's emulation waits for them all)."""


Warp = Dialect(
    "irkit_warp",
    [*MMA_OPS, LdmatrixX4Op, *ASYNC_COPY_OPS, *WGMMA_OPS, *TMA_OPS],
    [],
)


def gpu_dialect() -> Dialect:
    """xDSL's `gpu` dialect with MLIR's `gpu.shuffle` added: what irkit's contexts load
    for `gpu` (plain xdsl-opt, through irkit's universe, keeps xDSL's own)."""
    from xdsl.dialects.gpu import GPU

    return Dialect("gpu", [*GPU.operations, ShuffleOp], [*GPU.attributes, ShuffleModeAttr])
