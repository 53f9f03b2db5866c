"""Recognizing a matmul loop nest at the loop level, for the tiling passes.

`lower-graph-to-loops` writes a 2-D matmul (and, after `fuse-kernels`, a matmul with its
epilogue) as

    scf.parallel (%i, %j) = (0, 0) to (M, N) step (1, 1) {
      %acc = scf.for %k = 0 to K step 1 iter_args(%s = INIT) {
        %x = memref.load %A[%i, %k]      // A is M x K
        %y = memref.load %B[%k, %j]      // B is K x N
        %p = arith.mulf %x, %y
        %t = arith.addf %s, %p           // either operand order
        scf.yield %t
      }
      ... epilogue: region-free ops on %acc, %i, %j and loads of other buffers ...
      memref.store %v, %C[%i, %j]
    }

Epilogue ops that do not read the sum may also stand before the k loop (the lowering loads
an addend first where it is the first operand, `bias + x @ W`): they join the epilogue,
which tiling passes clone in order.

With `batched`, it also matches a batch matmul: leading parallel dims are batch dims, and A,
B and C are indexed `[batch..., i, k]`, `[batch..., k, j]`, `[batch..., i, j]`, where an
operand's batch index is a batch iv or a constant 0 (a broadcast batch dim) and C's are the
batch ivs in order.

With `gather`, A may also be read through index arithmetic: `memref.load %X[f(%i, %k)]`, the
indices pure `arith` index ops (in the k loop's body) of `%i`, `%k` and values defined
outside the nest, such as the inline im2col of an implicit-GEMM convolution
(`conv-to-matmul{implicit=true}`): X is then the convolution's input, read in place. A
tiling pass given such a nest clones those ops (`MatmulNest.a_gather`) where it reads A.

With `fp8`, A and B may be 8-bit floats (each format its own) widened to an f32 sum, and C
any float (the epilogue converts): `scaled_matmul`'s nest.

`match_matmul` returns that structure or None. It matches only what it can prove the tiling
passes preserve: one float element type throughout (but see `half` and `fp8`), a constant
initial value, the store to
`C[i, j]` as the nest's only write, and no read of `C` (so the tile passes may use `C` as
the accumulator's home before the epilogue runs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects import arith, memref, scf, vector
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    MemRefType,
)
from xdsl.ir import Attribute, Operation, SSAValue

from irkit.dtypes import is_fp8
from irkit.loops import constant_int


@dataclass
class MatmulNest:
    """A matched `C[i, j] = epilogue(INIT + sum_k A[i, k] * B[k, j])` nest."""

    loop: scf.ParallelOp
    i: SSAValue
    j: SSAValue
    m: int
    n: int
    k: int
    k_loop: scf.ForOp
    a: SSAValue
    b: SSAValue
    c: SSAValue
    init: float
    epilogue: list[Operation]
    """The ops after the k loop, the final store included."""
    store: memref.StoreOp
    element_type: Attribute
    """A's element type (B's too, but for an 8-bit nest's: `b_type`)."""
    batch: tuple[tuple[SSAValue, int], ...] = ()
    """Batch ivs and extents, outermost first (empty for a plain matmul)."""
    prefixes: tuple[tuple[SSAValue, ...], ...] = ((), (), ())
    """The batch part of A's, B's and C's indices (batch ivs or constant zeros)."""
    a_gather: tuple[Operation, ...] = ()
    """With A read through index arithmetic (`gather`), the k loop body's ops computing its
    indices, in order (empty: A is read at `[i, k]`)."""
    a_indices: tuple[SSAValue, ...] = ()
    """With `a_gather`, the indices A is loaded at, in terms of `i`, `k` and those ops."""

    def a_index(
        self, i: SSAValue, k: SSAValue, add: Callable[[Operation], object]
    ) -> list[SSAValue]:
        """A's index for row `i` and step `k` of a gathered nest, its ops cloned through
        `add` (a builder's `add`)."""
        mapping: dict[SSAValue, SSAValue] = {self.i: i, self.k_loop.body.block.args[0]: k}
        for op in self.a_gather:
            add(op.clone(value_mapper=mapping))
        return [mapping.get(v, v) for v in self.a_indices]

    @property
    def b_type(self) -> Attribute:
        """B's element type."""
        t = self.b.type
        assert isinstance(t, MemRefType)
        return t.element_type

    @property
    def acc(self) -> SSAValue:
        """The reduction's result, which the epilogue reads."""
        return self.k_loop.results[0]

    @property
    def trivial_epilogue(self) -> bool:
        """Whether the nest stores the accumulator as is."""
        return len(self.epilogue) == 1 and self.store.value == self.acc


def _constant_float(value: SSAValue) -> float | None:
    op = value.owner
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, FloatAttr):
        return float(op.value.value.data)
    return None


def _unit_range(lb: SSAValue, ub: SSAValue, step: SSAValue) -> int | None:
    """The trip count of `lb to ub step step` when it is `0 to N step 1` with N constant."""
    if constant_int(lb) != 0 or constant_int(step) != 1:
        return None
    return constant_int(ub)


def _reduction(
    loop: scf.ForOp, widen: bool = False
) -> tuple[memref.LoadOp, memref.LoadOp, list[Operation]] | None:
    """The two loads of `s + x * y` when that is the whole body of `loop`, and the other ops
    before them (index arithmetic a gathered load reads by); with `widen`, the loads may be
    extended (`extf`) to the accumulator's type first (an f16 matmul summed in f32)."""
    ops = list(loop.body.block.ops)
    if len(ops) < 5 or len(loop.iter_args) != 1:
        return None
    *feeds, mul, add, yield_ = ops
    acc = loop.body.block.args[1]
    if not (
        isinstance(mul, arith.MulfOp)
        and isinstance(add, arith.AddfOp)
        and isinstance(yield_, scf.YieldOp)
        and set(add.operands) == {acc, mul.result}
        and list(yield_.operands) == [add.result]
    ):
        return None
    loads: list[memref.LoadOp] = []
    used: list[Operation] = []
    for value in mul.operands:
        owner = value.owner
        if widen and isinstance(owner, arith.ExtFOp):
            used.append(owner)
            owner = owner.input.owner
        if not isinstance(owner, memref.LoadOp):
            return None
        used.append(owner)
        loads.append(owner)
    if not {id(o) for o in used} <= {id(o) for o in feeds}:
        return None
    rest = [o for o in feeds if all(o is not u for u in used)]
    return loads[0], loads[1], rest


_INDEX_OPS = (
    arith.ConstantOp, arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.DivUIOp, arith.RemUIOp,
    arith.DivSIOp, arith.RemSIOp, arith.MaxSIOp, arith.MinSIOp,
)  # fmt: skip
"""The pure index arithmetic a gathered A may be read through."""


def _gather(
    load: memref.LoadOp, ops: list[Operation], free: set[SSAValue], inside: Operation
) -> bool:
    """Whether `ops` (the k loop body's other ops) are exactly what computes `load`'s indices:
    pure index arithmetic used by nothing else, of constants, values defined outside
    `inside` (the nest) and the `free` ivs."""
    mine = {id(o) for o in ops}

    def allowed(value: SSAValue) -> bool:
        """Computed by `ops`, a free iv, or defined outside the nest."""
        owner = value.owner
        if isinstance(owner, Operation) and id(owner) in mine:
            return True
        return value in free or not inside.is_ancestor(_defining(value))

    for op in ops:
        if not isinstance(op, _INDEX_OPS) or op.regions:
            return False
        for result in op.results:
            if any(id(u.operation) not in mine and u.operation is not load for u in result.uses):
                return False
        if not all(allowed(v) for v in op.operands):
            return False
    return all(allowed(v) for v in load.indices)


def _defining(value: SSAValue) -> Operation:
    """The op defining `value`, or the op whose region's block holds it (a block argument)."""
    owner = value.owner
    if isinstance(owner, Operation):
        return owner
    parent = owner.parent_op()
    assert parent is not None
    return parent


def match_matmul(
    loop: scf.ParallelOp,
    batched: bool = False,
    half: bool = False,
    gather: bool = False,
    fp8: bool = False,
) -> MatmulNest | None:
    """The matmul structure of `loop` (see the module docstring), or None; with `batched`,
    batch matmuls too; with `half`, f16 and bf16 matmuls summed in f32 too (their
    `element_type` is the operands' type, the accumulator's is `acc.type`); with `gather`,
    plain matmuls whose A is read through index arithmetic too; with `fp8`, 8-bit A and B
    summed in f32 into any float C."""
    rank = len(loop.body.block.args)
    if rank < 2 or (rank > 2 and not batched) or loop.initVals:
        return None
    ranges = [
        _unit_range(lb, ub, st)
        for lb, ub, st in zip(loop.lowerBound, loop.upperBound, loop.step, strict=True)
    ]
    extents = [e for e in ranges if e is not None]
    if len(extents) != len(ranges):
        return None
    *batch_extents, m, n = extents
    ivs: list[SSAValue] = list(loop.body.block.args)
    *batch_ivs, i, j = ivs
    batch = tuple(zip(batch_ivs, batch_extents, strict=True))
    ops = list(loop.body.block.ops)
    first = next((n for n, o in enumerate(ops) if isinstance(o, scf.ForOp)), None)
    if first is None or len(ops) < first + 3 or not isinstance(ops[-1], scf.ReduceOp):
        return None
    k_loop, epilogue = ops[first], ops[:first] + ops[first + 1 : -1]
    assert isinstance(k_loop, scf.ForOp)
    ahead = {r for o in ops[:first] for r in o.results}  # epilogue ops the lowering put first
    if any(v in ahead for o in k_loop.walk() for v in o.operands):
        return None
    k = _unit_range(k_loop.lb, k_loop.ub, k_loop.step)
    init = _constant_float(k_loop.iter_args[0]) if k_loop.iter_args else None
    found = _reduction(k_loop, widen=half or fp8)
    if k is None or init is None or found is None:
        return None
    *loads, rest = found
    kv = k_loop.body.block.args[0]

    def indexes(load: Operation, *dims: tuple[SSAValue, int], exact: bool = False) -> bool:
        """Whether `load` reads at these (iv, extent) positions after its batch part (batch
        ivs or constant zeros, in order; with `exact`, the batch ivs); a constant 0 stands
        for an iv whose extent is 1 (how the lowering writes a broadcast dimension)."""
        assert isinstance(load, memref.LoadOp | memref.StoreOp | vector.LoadOp | vector.StoreOp)
        idx = list(load.indices)
        head, idx = idx[: len(idx) - len(dims)], idx[len(idx) - len(dims) :]
        if exact and head != list(batch_ivs):
            return False
        if not _batch_part(head, batch_ivs):
            return False
        return len(idx) == len(dims) and all(
            v == iv or (extent == 1 and constant_int(v) == 0)
            for v, (iv, extent) in zip(idx, dims, strict=True)
        )

    x, y = loads
    gathered = False
    for a_load, b_load in ((x, y), (y, x)):
        if not indexes(b_load, (kv, k), (j, n)):
            continue
        if not rest and indexes(a_load, (i, m), (kv, k)):
            break
        if gather and not batch_ivs and _gather(a_load, rest, {i, kv}, loop):
            gathered = True
            break
    else:
        return None
    store = epilogue[-1]
    if not isinstance(store, memref.StoreOp) or not indexes(store, (i, m), (j, n), exact=True):
        return None
    a, b, c = a_load.memref, b_load.memref, store.memref
    types = {v.type.element_type for v in (a, b, c) if isinstance(v.type, MemRefType)}
    accumulator = k_loop.iter_args[0].type
    narrow = half and len(types) == 1 and isinstance(next(iter(types)), Float16Type | BFloat16Type)
    eight = fp8 and all(is_fp8(_element(v)) for v in (a, b)) and not is_fp8(_element(c))
    if (narrow or eight) and not isinstance(accumulator, Float32Type):
        return None
    if eight:
        types = {_element(a)}
    elif not narrow:
        types.add(accumulator)
        if len(types) != 1 or not isinstance(next(iter(types)), Float32Type | Float64Type):
            return None
    if c in (a, b) or any(
        op.regions
        or (isinstance(op, memref.StoreOp) and op is not store)
        or (isinstance(op, memref.LoadOp) and op.memref == c)
        for op in epilogue
    ):
        return None
    prefixes = [tuple(op.indices)[: len(op.indices) - 2] for op in (a_load, b_load, store)]
    if gathered:  # A's indices are whatever the gather computes: no batch part
        prefixes[0] = ()
    return MatmulNest(
        loop, i, j, m, n, k, k_loop, a, b, c, init, epilogue, store, next(iter(types)),
        batch, tuple(prefixes),
        tuple(rest) if gathered else (), tuple(a_load.indices) if gathered else (),
    )  # fmt: skip


def _element(buffer: SSAValue) -> Attribute:
    """A buffer's element type (its own type where it is no memref)."""
    t = buffer.type
    return t.element_type if isinstance(t, MemRefType) else t


def _batch_part(head: list[SSAValue], batch_ivs: list[SSAValue]) -> bool:
    """Whether an operand's leading indices are batch ivs (in order, each at most once) or
    constant zeros."""
    order = [batch_ivs.index(v) for v in head if v in batch_ivs]
    if order != sorted(set(order)):
        return False
    return all(v in batch_ivs or constant_int(v) == 0 for v in head)
