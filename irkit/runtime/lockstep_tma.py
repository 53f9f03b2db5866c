"""TMA copies and mbarriers for the lockstep interpreter (`irkit.runtime.lockstep`): the
rules of `irkit_warp.tma_load`, `mbarrier_init`, `mbarrier_arrive_expect_tx` and
`mbarrier_wait` (their semantics: `irkit.dialects.warp_tma`), registered there from `RULES`.

Each barrier of each block is a `Mbarrier`: its arrivals a phase, those still due, the bytes
still to land and the phase number. A copy reads its box when issued (the global source does
not change while a kernel runs; outside the tensor, zeros) and counts as a write of its
whole destination then, by the issuing thread: a copy into a stage another thread still
reads, with no barrier between, races. Its bytes land at the first wait on its barrier
(lanes run together, so every waiting thread is there), and the write's record is cleared:
what a completed phase shows, every waiter may read. A wait whose phase cannot complete (an
arrival or bytes missing) is an error, as the GPU would hang; a wait on the wrong parity
returns at once without landing anything, and the stale stage shows (a race, or a wrong
result); a copy nobody waited for is an error when the kernel ends."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Operation

from irkit.dialects.warp_async import swizzle_column
from irkit.dialects.warp_tma import (
    MbarrierArriveExpectTxOp,
    MbarrierArriveOp,
    MbarrierInitOp,
    MbarrierWaitOp,
    SetMaxNRegOp,
    TmaLoadOp,
)
from irkit.runtime.lockstep_warp import LockstepError


@dataclass
class TmaInFlight:
    """A copy issued and not landed: where its box goes and what it holds."""

    dest: np.ndarray
    flat: np.ndarray
    values: np.ndarray
    bytes: int


@dataclass
class Mbarrier:
    count: int
    pending: int
    tx: int = 0
    phase: int = 0
    copies: list[TmaInFlight] = field(default_factory=list)

    def complete_if_due(self) -> None:
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count


def _error(run: Any, what: str) -> LockstepError:
    return LockstepError(f"@{run.run.name}: {what}")


def _barriers(run: Any, op: Operation, t: Any, bar: np.ndarray, index: Any, mask: np.ndarray):
    """The lanes of `mask` and the barrier each names (a key per block's copy): element
    `index` of `bar`, of type `t`."""
    active, flat = run._elements(t, op.name, bar, [index], mask)
    return active, [(id(bar), int(f)) for f in flat]


def _state(run: Any, key: tuple[int, int], op: Operation) -> Mbarrier:
    state = run.mbarriers.get(key)
    if state is None:
        raise _error(run, f"{op.name} on an mbarrier no thread initialised")
    return state


def mbarrier_init(run: Any, op: MbarrierInitOp, args: list[Any], mask: np.ndarray) -> None:
    """A fresh barrier: `count` arrivals due, phase 0; a write of it (so a wait with no
    block barrier after the init races)."""
    _, keys = _barriers(run, op, op.barrier.type, args[0], args[1], mask)
    for key in keys:
        run.mbarriers[key] = Mbarrier(op.arrivals, op.arrivals)
    run._store(op.barrier.type, op.name, [np.int64(0), *args[:2]], mask)


def mbarrier_arrive_expect_tx(
    run: Any, op: MbarrierArriveExpectTxOp, args: list[Any], mask: np.ndarray
) -> None:
    for key in _barriers(run, op, op.barrier.type, args[0], args[1], mask)[1]:
        state = _state(run, key, op)
        state.tx += op.transaction
        state.pending -= 1
        if state.pending < 0:
            raise _error(run, f"{op.name}: more arrivals in one phase than its count")
        state.complete_if_due()


def mbarrier_arrive(run: Any, op: MbarrierArriveOp, args: list[Any], mask: np.ndarray) -> None:
    """One arrival a lane."""
    for key in _barriers(run, op, op.barrier.type, args[0], args[1], mask)[1]:
        state = _state(run, key, op)
        state.pending -= 1
        if state.pending < 0:
            raise _error(run, f"{op.name}: more arrivals in one phase than its count")
        state.complete_if_due()


def setmaxnreg(run: Any, op: SetMaxNRegOp, args: list[Any], mask: np.ndarray) -> None:
    """Whole warpgroups only; lockstep has no registers to share."""
    run._whole_warps(op, mask, 128)


def tma_load(run: Any, op: TmaLoadOp, args: list[Any], mask: np.ndarray) -> None:
    """Issue each lane's copy (see the module docstring)."""
    nd = len(op.dest_indices)
    dest, dest_ix = args[0], args[1 : 1 + nd]
    source, coordinates = args[1 + nd], args[2 + nd : -2]
    box = op.box_shape
    size = int(np.prod(box))
    dest_t = op.dest.type
    assert isinstance(dest_t, MemRefType)
    active, start = run._elements(dest_t, op.name, dest, dest_ix, mask)
    per_block = int(np.prod(dest_t.get_shape()))
    local = start - run.bid[active] * per_block
    if (local + size > per_block).any():
        raise _error(run, f"{op.name}: the box runs past the end of {run.names[id(dest)]}")
    _, keys = _barriers(run, op, op.barrier.type, args[-2], args[-1], mask)
    offsets = np.indices(box).reshape(len(box), -1)
    for i, lane in enumerate(active):
        at = np.array([np.broadcast_to(np.asarray(c), mask.shape)[lane] for c in coordinates])
        where = at[:, None] + offsets
        extent = np.array(op.tensor_extent)[:, None]
        inside = ((where >= 0) & (where < extent)).all(axis=0)
        clipped = np.clip(where, 0, np.array(source.shape)[:, None] - 1)
        values = np.where(inside, source[tuple(clipped)], np.zeros((), source.dtype))
        flat = start[i] + np.arange(size)
        if op.swizzle_bytes:  # rows of 128 bytes, 16-byte chunks XOR the row's place in 8
            row_length = box[-1]
            first, rest = divmod(int(local[i]), row_length)
            if rest or first % 8:
                raise _error(run, f"{op.name}: a swizzled box starts off a 1024-byte boundary")
            rows = first + np.arange(size) // row_length
            columns = swizzle_column(rows, np.arange(size) % row_length, row_length)
            flat = start[i] + (rows - first) * row_length + columns
        run._write_at(dest, op.name, np.full(size, lane), flat, None)
        state = _state(run, keys[i], op)
        state.copies.append(TmaInFlight(dest, flat, values, op.bytes))


def mbarrier_wait(run: Any, op: MbarrierWaitOp, args: list[Any], mask: np.ndarray) -> None:
    """Each block's waiting lanes (see the module docstring)."""
    run._load(op.barrier.type, op.name, [args[0], args[1]], mask)  # after the init's barrier
    active, keys = _barriers(run, op, op.barrier.type, args[0], args[1], mask)
    parity = np.broadcast_to(np.asarray(args[2]), mask.shape)[active]
    for key, p in dict(zip(keys, parity.tolist(), strict=True)).items():
        state = _state(run, key, op)
        if state.phase % 2 != p:
            continue  # that phase has completed
        for copy in state.copies:
            copy.dest.reshape(-1)[copy.flat] = copy.values
            if run.check_races:
                run._shadow(copy.dest).w_lane[copy.flat] = -1
            state.tx -= copy.bytes
        state.copies = []
        state.complete_if_due()
        if state.phase % 2 == p:
            bars = op.barrier.type
            assert isinstance(bars, MemRefType)
            block = key[1] // int(np.prod(bars.get_shape()))
            if not mask.reshape(run.run.grid, run.run.block)[block].all():
                raise _error(
                    run,
                    f"{op.name} in divergent code waits on threads of another branch, which "
                    "lockstep runs after this one: a warp-specialized kernel (producer and "
                    "consumer warps handing stages over) needs cuda-host, whose threads "
                    "interleave",
                )
            raise _error(
                run,
                f"{op.name} never returns: {state.pending} arrival(s) and {state.tx} byte(s) "
                "still due in its phase (on a GPU, a kernel that never ends)",
            )


def start_tma(run: Any) -> None:
    run.mbarriers = {}


def finish_tma(run: Any) -> None:
    """A copy nobody waited for is still in flight when the kernel ends: an error."""
    if any(state.copies for state in run.mbarriers.values()):
        raise _error(run, "a TMA copy still in flight when the kernel ended (no wait on it)")


RULES: dict[type[Operation], Callable[..., None]] = {
    MbarrierInitOp: mbarrier_init,
    MbarrierArriveExpectTxOp: mbarrier_arrive_expect_tx,
    MbarrierArriveOp: mbarrier_arrive,
    SetMaxNRegOp: setmaxnreg,
    MbarrierWaitOp: mbarrier_wait,
    TmaLoadOp: tma_load,
}
