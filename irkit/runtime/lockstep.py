"""Lockstep interpretation of GPU-mapped IR on the CPU: how irkit checks CUDA kernels where
there is no GPU.

Every thread of every block of a launch is one lane of a numpy vector; each op runs once for
all lanes, under a mask of the lanes that reached it. `scf.if` with a lane-varying condition
runs both branches under complementary masks; loop bounds must be the same for every lane
(the mapping pass never makes them vary). Shared memory (`memref.global` in address space 3)
has one copy per block.

Lockstep would hide a missing barrier (every op completes for all lanes before the next
begins), so accesses are checked for races instead: two accesses to one element by different
threads, at least one a write, race unless a barrier separates them in the same block. For
global memory, accesses from different blocks of one launch always race. A barrier some
lanes of a block skip is an error too, and so is an access out of bounds. Each becomes a
LockstepError naming the kernel, the buffer and the kind of fault, which is what a test of a
mapping pass needs: a wrong kernel fails, it is never skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import arith, func, gpu, memref, scf, vector
from xdsl.dialects.builtin import (
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    VectorType,
)
from xdsl.ir import Block, Operation, SSAValue

from irkit.dialects.cpu import PrefetchOp
from irkit.dialects.warp import MMA_OPS, LdmatrixX4Op, ShuffleOp
from irkit.dtypes import dtype_name, is_fp8, numpy_dtype, poisoned, to_fp8
from irkit.ir import shape_of
from irkit.loops import SHARED_SPACE, launch_of
from irkit.loops.scalar_ops import numpy_ops
from irkit.runtime.lockstep_async import RULES as ASYNC_RULES
from irkit.runtime.lockstep_async import AsyncCopy, WgmmaInFlight, check_pending, start_async
from irkit.runtime.lockstep_loops import divergent_for
from irkit.runtime.lockstep_tma import RULES as TMA_RULES
from irkit.runtime.lockstep_tma import Mbarrier, finish_tma, start_tma
from irkit.runtime.lockstep_warp import LockstepError, ldmatrix, mma, shuffle_xor


def value_dtype(t: Any) -> np.dtype:
    if isinstance(t, VectorType):  # a vector per lane: an extra trailing axis
        return numpy_dtype(t.element_type)
    if isinstance(t, IndexType):
        return np.dtype(np.int64)
    if isinstance(t, IntegerType):
        return np.dtype(np.bool_) if t.width.data == 1 else np.dtype(f"int{t.width.data}")
    return numpy_dtype(t)


BINARY = numpy_ops(2)
UNARY = numpy_ops(1)
TERNARY = numpy_ops(3)
CMP = {
    "eq": np.equal, "ne": np.not_equal, "slt": np.less, "sle": np.less_equal,
    "sgt": np.greater, "sge": np.greater_equal, "ult": np.less, "ule": np.less_equal,
    "ugt": np.greater, "uge": np.greater_equal, "oeq": np.equal, "ogt": np.greater,
    "oge": np.greater_equal, "olt": np.less, "ole": np.less_equal, "one": np.not_equal,
    "une": np.not_equal, "ueq": np.equal, "ugt_f": np.greater, "ult_f": np.less,
}  # fmt: skip
CMPF_UNORDERED = {"ueq", "ugt", "uge", "ult", "ule", "une", "uno"}


_DTYPES: dict[Any, np.dtype] = {}
"""numpy dtypes of IR types, memoized (the interpreter asks once per op executed)."""


class _Shadow:
    """Who last wrote and read each element of one buffer, for race detection."""

    def __init__(self, size: int):
        self.w_lane = np.full(size, -1, np.int64)
        self.w_epoch = np.full(size, -1, np.int64)
        self.r_lane = np.full(size, -1, np.int64)  # -2: several lanes this epoch
        self.r_epoch = np.full(size, -1, np.int64)
        self.r_block = np.full(size, -1, np.int64)  # -2: several blocks


@dataclass
class _Launch:
    name: str
    grid: int
    block: int
    epoch: int = 0

    @property
    def lanes(self) -> int:
        return self.grid * self.block


Rule = Callable[["LockstepInterpreter", Any, list[Any], np.ndarray], Any]
_RULES: dict[type[Operation], Rule] = {}
"""The interpreter's rule for each op type (`impl`): called with the op, its operands'
values and the lanes' mask; returns the result's value, or None for an op without one or
whose rule binds its results itself (loops, MMA)."""


def impl(*types: type[Operation]) -> Callable[[Rule], Rule]:
    """Register the decorated method as the lockstep rule of `types` (xDSL's interpreters'
    `@impl(Op)`, one rule an op)."""

    def register(rule: Rule) -> Rule:
        for t in types:
            _RULES[t] = rule
        return rule

    return register


def _rule(t: type[Operation], kernel: str, name: str) -> Rule:
    """The rule for op type `t` (or the nearest base class with one)."""
    rule = _RULES.get(t)
    if rule is None:
        rule = next((_RULES[b] for b in t.__mro__ if b in _RULES), None)
        if rule is None:
            raise LockstepError(f"@{kernel}: the lockstep interpretation has no rule for {name}")
        _RULES[t] = rule
    return rule


class LockstepInterpreter:
    """Runs GPU-mapped kernels over numpy buffers (see the module docstring)."""

    async_open: list[AsyncCopy]  # cp.async copies since the last commit (`start_async`)
    async_groups: list[list[AsyncCopy]]  # committed, oldest first, not landed
    wgmma_open: list[WgmmaInFlight]  # wgmma ops since the last commit
    wgmma_groups: list[list[WgmmaInFlight]]  # committed, not waited for
    mbarriers: dict[tuple[int, int], Mbarrier]  # each block's mbarriers (`start_tma`)

    def __init__(self, module: ModuleOp, check_races: bool = True):
        self.module = module
        self.check_races = check_races
        self.functions = {op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)}
        self.shared_types = {
            op.sym_name.data: op.type
            for op in module.ops
            if isinstance(op, memref.GlobalOp)
            and isinstance(op.type, MemRefType)
            and op.type.memory_space == SHARED_SPACE
        }

    # --- one launch ---------------------------------------------------------------------------

    def launch(self, name: str, buffers: Sequence[np.ndarray]) -> None:
        fn = self.functions[name]
        cfg = launch_of(fn)
        if cfg is None:
            raise LockstepError(f"@{name} is not a GPU kernel (no irkit.launch)")
        grid, block = cfg["grid"], cfg["block"]
        if cfg.get("cluster", 1) > 1:
            raise LockstepError(
                f"@{name} runs in clusters of {cfg['cluster']} blocks that reach one "
                "another's shared memory, which lockstep does not model; run it on cuda-host"
            )
        if grid[1:] != (1, 1) or block[1:] != (1, 1):
            raise LockstepError(f"@{name}: only one-dimensional launches are interpreted")
        self.run = _Launch(name, int(grid[0]), int(block[0]))
        n = self.run.lanes
        self.lane = np.arange(n, dtype=np.int64)
        self.tid = self.lane % self.run.block
        self.bid = self.lane // self.run.block
        self.env: dict[SSAValue, Any] = {}
        self.buffers: dict[SSAValue, np.ndarray] = {}
        self.shared: dict[str, np.ndarray] = {}
        self.shadows: dict[int, _Shadow] = {}
        self.names: dict[int, str] = {}
        start_async(self)  # cp.async and wgmma: nothing in flight
        start_tma(self)
        for arg, array in zip(fn.body.block.args, buffers, strict=True):
            self.env[arg] = array
            self.names[id(array)] = arg.name_hint or "arg"
        with np.errstate(all="ignore"):
            self.block_(fn.body.block, np.ones(n, bool))
        finish_tma(self)

    # --- structure ----------------------------------------------------------------------------

    def block_(self, block: Block, mask: np.ndarray) -> list[Any]:
        for op in block.ops:
            if isinstance(op, scf.YieldOp):
                return [self.env[v] for v in op.operands]
            if isinstance(op, func.ReturnOp):
                return []
            self.op(op, mask)
        return []

    def op(self, op: Operation, mask: np.ndarray) -> None:
        """Run one op on every lane of `mask`: the arithmetic tables first, then the op's
        rule (`impl`), its result (if any) kept in the op's element type."""
        env = self.env
        args = [env[v] for v in op.operands] if not isinstance(op, scf.ForOp | scf.IfOp) else []
        t = type(op)
        if self.wgmma_groups or self.wgmma_open:
            check_pending(self, op, args)
        if t in BINARY:
            out = BINARY[t](args[0], args[1])
        elif t in UNARY:
            out = UNARY[t](args[0])
        elif t in TERNARY:
            out = TERNARY[t](*args)
        else:
            out = _rule(t, self.run.name, op.name)(self, op, args, mask)
        if out is None:  # no result, or the rule kept its own (loops, MMA)
            return
        if not isinstance(op.results[0].type, MemRefType):
            kind = _DTYPES.get(op.results[0].type)
            if kind is None:
                kind = _DTYPES[op.results[0].type] = value_dtype(op.results[0].type)
            out = np.asarray(out)
            out = out.astype(kind, copy=False) if out.dtype != kind else out
        env[op.results[0]] = out

    # --- the rules: one an op (or a family of ops), registered with `impl` -----------------

    @impl(arith.ConstantOp)
    def _constant(self, op: arith.ConstantOp, args: list[Any], mask: np.ndarray) -> Any:
        assert isinstance(op.value, IntegerAttr | FloatAttr)
        return value_dtype(op.result.type).type(op.value.value.data)

    @impl(arith.CmpiOp, arith.CmpfOp)
    def _compare_op(
        self, op: arith.CmpiOp | arith.CmpfOp, args: list[Any], mask: np.ndarray
    ) -> Any:
        return self._compare(op, args)

    @impl(arith.SelectOp)
    def _select(self, op: arith.SelectOp, args: list[Any], mask: np.ndarray) -> Any:
        return np.where(args[0], args[1], args[2])

    @impl(arith.ExtFOp, arith.TruncFOp, arith.SIToFPOp, arith.FPToSIOp, arith.IndexCastOp,
          arith.UIToFPOp, arith.ExtSIOp, arith.ExtUIOp, arith.TruncIOp)  # fmt: skip
    def _cast(self, op: Operation, args: list[Any], mask: np.ndarray) -> Any:
        to = op.results[0].type
        if is_fp8(to):  # saturating, through f32 (as the printed conversions do)
            return to_fp8(np.asarray(args[0]).astype(np.float32), dtype_name(to))
        with np.errstate(invalid="ignore"):  # a float out of an int's range: selected away
            return np.asarray(args[0]).astype(value_dtype(to))

    @impl(arith.BitcastOp)
    def _bitcast(self, op: arith.BitcastOp, args: list[Any], mask: np.ndarray) -> Any:
        return np.asarray(args[0]).view(value_dtype(op.results[0].type))

    @impl(gpu.ThreadIdOp, gpu.BlockIdOp, gpu.BlockDimOp, gpu.GridDimOp)
    def _geometry_op(self, op: Operation, args: list[Any], mask: np.ndarray) -> Any:
        return self._geometry(op)

    @impl(gpu.BarrierOp)
    def _barrier_op(self, op: gpu.BarrierOp, args: list[Any], mask: np.ndarray) -> None:
        self._barrier(mask)

    @impl(memref.GetGlobalOp)
    def _get_global_op(self, op: memref.GetGlobalOp, args: list[Any], mask: np.ndarray) -> Any:
        return self._get_global(op)

    @impl(memref.LoadOp)
    def _load_op(self, op: memref.LoadOp, args: list[Any], mask: np.ndarray) -> Any:
        return self._load(op.memref.type, op.name, args, mask)

    @impl(memref.StoreOp)
    def _store_op(self, op: memref.StoreOp, args: list[Any], mask: np.ndarray) -> None:
        self._store(op.memref.type, op.name, args, mask)

    @impl(PrefetchOp)
    def _prefetch(self, op: PrefetchOp, args: list[Any], mask: np.ndarray) -> None:
        """A CPU cache hint: nothing to do."""

    @impl(vector.LoadOp)
    def _vector_load_op(self, op: vector.LoadOp, args: list[Any], mask: np.ndarray) -> Any:
        return self._vector_load(op, args, mask)

    @impl(vector.StoreOp)
    def _vector_store_op(self, op: vector.StoreOp, args: list[Any], mask: np.ndarray) -> None:
        self._vector_store(op, args, mask)

    @impl(vector.ExtractOp)
    def _extract_op(self, op: vector.ExtractOp, args: list[Any], mask: np.ndarray) -> Any:
        return self._extract(op, args[0])

    @impl(vector.BroadcastOp)
    def _broadcast(self, op: vector.BroadcastOp, args: list[Any], mask: np.ndarray) -> Any:
        """A vector per lane: a trailing axis."""
        lanes = op.vector.type.get_shape()[0]
        return np.repeat(np.asarray(args[0])[..., None], lanes, axis=-1)

    @impl(vector.InsertOp)
    def _insert(self, op: vector.InsertOp, args: list[Any], mask: np.ndarray) -> Any:
        (position,) = op.static_position.get_values()
        out = np.array(args[1], copy=True)
        out[..., position] = args[0]
        return out

    @impl(*MMA_OPS)
    def _mma_op(self, op: Operation, args: list[Any], mask: np.ndarray) -> None:
        self._mma(op, args, mask)

    @impl(ShuffleOp)
    def _shuffle_op(self, op: ShuffleOp, args: list[Any], mask: np.ndarray) -> Any:
        return self._shuffle(op, args, mask)

    @impl(scf.ForOp)
    def _for_op(self, op: scf.ForOp, args: list[Any], mask: np.ndarray) -> None:
        self._for(op, mask)

    @impl(scf.IfOp)
    def _if_op(self, op: scf.IfOp, args: list[Any], mask: np.ndarray) -> None:
        self._if(op, mask)

    @impl(func.CallOp)
    def _call_op(self, op: func.CallOp, args: list[Any], mask: np.ndarray) -> Any:
        if len(op.res) != 1:  # only scalar functions are interpreted
            raise LockstepError(
                f"@{self.run.name}: the lockstep interpretation has no rule for {op.name}"
            )
        return self._call(op, args, mask)

    def _call(self, op: func.CallOp, args: list[Any], mask: np.ndarray) -> Any:
        """A scalar function's result for every lane: its body run on the arguments."""
        fn = self.functions[op.callee.root_reference.data]
        for arg, value in zip(fn.body.block.args, args, strict=True):
            self.env[arg] = value
        for inner in fn.body.block.ops:
            if isinstance(inner, func.ReturnOp):
                return self.env[inner.arguments[0]]
            self.op(inner, mask)
        raise LockstepError(f"@{fn.sym_name.data} does not return")

    def _compare(self, op: arith.CmpiOp | arith.CmpfOp, args: list[Any]) -> Any:
        names = (
            arith.CMPF_COMPARISON_OPERATIONS
            if isinstance(op, arith.CmpfOp)
            else arith.CMPI_COMPARISON_OPERATIONS
        )
        pred = names[op.predicate.value.data]
        a, b = args
        if pred in ("ord", "uno"):
            nan = np.isnan(a) | np.isnan(b)
            return ~nan if pred == "ord" else nan
        out = CMP[pred](a, b)
        if isinstance(op, arith.CmpfOp):
            nan = np.isnan(a) | np.isnan(b)
            out = (out | nan) if pred in CMPF_UNORDERED else (out & ~nan)
        return out

    def _geometry(self, op: Operation) -> Any:
        assert isinstance(op, gpu.ThreadIdOp | gpu.BlockIdOp | gpu.BlockDimOp | gpu.GridDimOp)
        dim = op.dimension.data
        if dim != gpu.DimensionEnum.X:
            return np.int64(0) if isinstance(op, gpu.ThreadIdOp | gpu.BlockIdOp) else np.int64(1)
        values: dict[type[Operation], Any] = {
            gpu.ThreadIdOp: self.tid,
            gpu.BlockIdOp: self.bid,
            gpu.BlockDimOp: np.int64(self.run.block),
            gpu.GridDimOp: np.int64(self.run.grid),
        }
        return values[type(op)]

    def _for(self, op: scf.ForOp, mask: np.ndarray) -> None:
        bounds = [self.env[v] for v in (op.lb, op.ub, op.step)]
        if any(np.ndim(b) and not np.all(b[mask] == b[mask][0]) for b in bounds if mask.any()):
            divergent_for(self, op, bounds, mask)
            return
        lb, ub, step = (int(np.asarray(b).flat[0]) if np.ndim(b) else int(b) for b in bounds)
        values = [self.env[v] for v in op.iter_args]
        iv, *accs = op.body.block.args
        for i in range(lb, ub, step):
            self.env[iv] = np.int64(i)
            for a, v in zip(accs, values, strict=True):
                self.env[a] = v
            values = self.block_(op.body.block, mask)
        for r, v in zip(op.results, values, strict=True):
            self.env[r] = v

    def _if(self, op: scf.IfOp, mask: np.ndarray) -> None:
        cond = self.env[op.cond]
        then_mask = mask & cond
        else_mask = mask & ~np.asarray(cond, bool)
        then_vals = self.block_(op.true_region.block, then_mask) if then_mask.any() else None
        has_else = op.false_region.blocks
        else_vals = (
            self.block_(op.false_region.block, else_mask) if has_else and else_mask.any() else None
        )
        for k, r in enumerate(op.results):
            a = then_vals[k] if then_vals is not None else else_vals[k]  # type: ignore[index]
            b = else_vals[k] if else_vals is not None else a
            self.env[r] = np.asarray(np.where(cond, a, b)).astype(value_dtype(r.type), copy=False)

    def _whole_warps(self, op: Operation, mask: np.ndarray, width: int = 32) -> None:
        """A warp-collective op must be reached by every lane of a warp or by none (of a
        warpgroup, `width` 128, for a warpgroup's op)."""
        unit = "warp" if width == 32 else "warpgroup"
        if self.run.block % width:
            raise LockstepError(
                f"@{self.run.name}: {op.name} in a block of {self.run.block} threads (not whole {unit}s)"
            )
        warps = mask.reshape(-1, width)
        if (warps.any(axis=1) & ~warps.all(axis=1)).any():
            raise LockstepError(
                f"@{self.run.name}: {op.name} reached by only some lanes of a {unit}"
            )

    def _shuffle(self, op: ShuffleOp, args: list[Any], mask: np.ndarray) -> np.ndarray:
        """gpu.shuffle xor over whole warps (`lockstep_warp.shuffle_xor`); the offset and
        width must be the same in every lane, as irkit's reductions give them."""
        self._whole_warps(op, mask)
        value, offset, width = args
        offsets, widths = np.unique(np.asarray(offset)), np.unique(np.asarray(width))
        if offsets.size != 1 or widths.size != 1:
            raise LockstepError(
                f"@{self.run.name}: gpu.shuffle with an offset or width that differs between lanes"
            )
        out, self.env[op.valid] = shuffle_xor(
            value, int(offsets[0]), int(widths[0]), self.run.lanes
        )
        return out

    def _mma(self, op: Operation, args: list[Any], mask: np.ndarray) -> None:
        """A warp's tensor-core multiply-accumulate over whole warps (`lockstep_warp.mma`)."""
        self._whole_warps(op, mask)
        for result, value in zip(op.results, mma(op, args, self.run.lanes), strict=True):
            self.env[result] = value

    def _barrier(self, mask: np.ndarray) -> None:
        per_block = mask.reshape(self.run.grid, self.run.block)
        partial = per_block.any(axis=1) & ~per_block.all(axis=1)
        if partial.any():
            b = int(np.argmax(partial))
            raise LockstepError(
                f"@{self.run.name}: gpu.barrier reached by only some threads of block {b} "
                "(a barrier in divergent code)"
            )
        self.run.epoch += 1

    # --- memory -------------------------------------------------------------------------------

    def _get_global(self, op: memref.GetGlobalOp) -> np.ndarray:
        name = op.name_.root_reference.data
        t = self.shared_types.get(name)
        if t is None:
            raise LockstepError(f"@{self.run.name}: memref.get_global @{name} is not shared memory")
        if name not in self.shared:
            shape = (self.run.grid, *t.get_shape())
            # never-written shared memory reads as NaN, so a missing store shows
            array = poisoned(shape, value_dtype(t.element_type))
            self.shared[name] = array
            self.names[id(array)] = f"@{name} (shared)"
        return self.shared[name]

    def _elements(self, t: Any, what: str, buffer: np.ndarray, indices, mask):
        """Flat element numbers of the active lanes' accesses (with the block's copy for
        shared memory), after a bounds check; `what` names the op in errors."""
        assert isinstance(t, MemRefType)
        shape = t.get_shape()
        active = np.flatnonzero(mask)
        flat = np.zeros(active.size, np.int64)
        for d, (ix, n) in enumerate(zip(indices, shape, strict=True)):
            v = np.broadcast_to(np.asarray(ix, np.int64), mask.shape)[active]
            bad = (v < 0) | (v >= n)
            if bad.any():
                lane = int(active[np.argmax(bad)])
                raise LockstepError(
                    f"@{self.run.name}: {what} out of bounds on {self.names[id(buffer)]}: "
                    f"index {int(v[np.argmax(bad)])} of dimension {d} (size {n}) in thread "
                    f"{lane % self.run.block} of block {lane // self.run.block}"
                )
            flat = flat * n + v
        shared = t.memory_space == SHARED_SPACE
        if shared:
            flat = self.bid[active] * math.prod(shape) + flat
        return active, flat

    def _shadow(self, buffer: np.ndarray) -> _Shadow:
        key = id(buffer)
        if key not in self.shadows:
            self.shadows[key] = _Shadow(buffer.size)
        return self.shadows[key]

    def _race(self, buffer: np.ndarray, what: str, lanes: np.ndarray, hit: np.ndarray) -> None:
        lane = int(lanes[np.argmax(hit)])
        raise LockstepError(
            f"@{self.run.name}: race on {self.names[id(buffer)]}: {what} by thread "
            f"{lane % self.run.block} of block {lane // self.run.block} with no barrier between"
        )

    def _after_write(self, s: _Shadow, flat: np.ndarray, active: np.ndarray) -> np.ndarray:
        """Which accesses follow another thread's write with no barrier between them (any
        write from another block of the launch counts)."""
        w, block = s.w_lane[flat], self.run.block
        other_block = w // block != active // block
        return (w >= 0) & (w != active) & (other_block | (s.w_epoch[flat] == self.run.epoch))

    def _load(self, t: Any, what: str, args: list[Any], mask: np.ndarray) -> np.ndarray:
        buffer, *indices = args
        active, flat = self._elements(t, what, buffer, indices, mask)
        out = np.zeros(mask.shape, buffer.dtype)
        out[active] = buffer.reshape(-1)[flat]
        if self.check_races and active.size:
            s, epoch, block = self._shadow(buffer), self.run.epoch, self.run.block
            clash = self._after_write(s, flat, active)
            if clash.any():
                self._race(buffer, "a read after another thread's write", active, clash)
            # Who read each element: one lane, or -2 for several this epoch; one block, or -2.
            # Fancy assignment keeps the last of duplicate indices, so reading the value back
            # finds the elements several lanes (or blocks) read in this very access.
            prev_lane, prev_epoch = s.r_lane[flat], s.r_epoch[flat]
            s.r_lane[flat] = active
            several = (s.r_lane[flat] != active) | (
                (prev_epoch == epoch) & (prev_lane != -1) & (prev_lane != active)
            )
            s.r_lane[flat[several]] = -2
            s.r_epoch[flat] = epoch
            blocks = active // block
            prev_block = s.r_block[flat]
            s.r_block[flat] = blocks
            mixed = (s.r_block[flat] != blocks) | ((prev_block != -1) & (prev_block != blocks))
            s.r_block[flat[mixed]] = -2
        return out

    def _store(
        self, t: Any, what: str, args: list[Any], mask: np.ndarray, write: bool = True
    ) -> None:
        """A checked store; `write=False`: the checks and the write's record only (cp.async)."""
        value, buffer, *indices = args
        active, flat = self._elements(t, what, buffer, indices, mask)
        values = np.broadcast_to(np.asarray(value), mask.shape)[active] if write else None
        self._write_at(buffer, what, active, flat, values)

    def _write_at(
        self, buffer: np.ndarray, what: str, active: np.ndarray, flat: np.ndarray, values
    ) -> None:
        """Lanes `active` write elements `flat` of `buffer` (parallel arrays), checked for
        races; `values` None: the checks and the write's record only (an asynchronous copy
        issued, which lands later)."""
        if self.check_races and active.size:
            s, epoch, block = self._shadow(buffer), self.run.epoch, self.run.block
            clash = self._after_write(s, flat, active)
            if clash.any():
                self._race(buffer, "a write after another thread's write", active, clash)
            rb, rl = s.r_block[flat], s.r_lane[flat]
            clash = ((rb != -1) & (rb != active // block)) | (
                (s.r_epoch[flat] == epoch) & (rl != -1) & (rl != active)
            )
            if clash.any():
                self._race(buffer, "a write after another thread's read", active, clash)
            uniq, counts = np.unique(flat, return_counts=True)
            if (counts > 1).any():
                dup = np.isin(flat, uniq[counts > 1])
                self._race(buffer, "two threads writing one element", active, dup)
            s.w_lane[flat], s.w_epoch[flat] = active, epoch
        if values is not None:
            buffer.reshape(-1)[flat] = values

    # A vector access is its elements' accesses, each checked (bounds, races) as one: the
    # vector's lanes run along the buffer's last dimension, so `lanes` consecutive elements.
    # (Alignment, which a 16-byte access on a GPU needs, is the mapping pass's to ensure.)

    def _vector_load(self, op: vector.LoadOp, args: list[Any], mask: np.ndarray) -> np.ndarray:
        buffer, *indices = args
        lanes = op.result.type.get_shape()[0]
        parts = [
            self._load(op.base.type, op.name, [buffer, *indices[:-1], indices[-1] + q], mask)
            for q in range(lanes)
        ]
        return np.stack(parts, axis=-1)

    def _vector_store(self, op: vector.StoreOp, args: list[Any], mask: np.ndarray) -> None:
        value, buffer, *indices = args
        lanes = shape_of(op.vector)[0]
        value = np.asarray(value)
        for q in range(lanes):
            element = [value[..., q], buffer, *indices[:-1], indices[-1] + q]
            self._store(op.base.type, op.name, element, mask)

    def _extract(self, op: vector.ExtractOp, value: Any) -> Any:
        if op.dynamic_position or len(op.static_position.get_values()) != 1:
            raise LockstepError(
                f"@{self.run.name}: vector.extract is interpreted at one static position only"
            )
        return np.asarray(value)[..., op.static_position.get_values()[0]]


impl(LdmatrixX4Op)(ldmatrix)
# cp.async and wgmma (irkit.runtime.lockstep_async), TMA and mbarriers (lockstep_tma)
for _async_op, _async_rule in (ASYNC_RULES | TMA_RULES).items():
    impl(_async_op)(_async_rule)
