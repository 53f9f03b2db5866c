"""The asynchronous ops for the lockstep interpreter (`irkit.runtime.lockstep`): the rules
of `irkit_warp.cp_async`, `cp_async_commit` and `cp_async_wait`, and of `irkit_warp.wgmma`
and its fence, commit and wait (their semantics: `irkit.dialects.warp`), registered there
from `RULES`.

A copy's source elements are read when it is issued (checked loads; the global source does
not change while a kernel runs), the rest of its 16 bytes are zero; the destination counts
as written then (so a copy into a stage other threads still read races), and its bytes are
stored when a wait lands its group, each element a checked store at that point. Lanes run
together, so the groups are the launch's: a commit closes the open group for every lane.

A wgmma reads its tiles when issued (checked loads) and computes its results then, but they
are `Pending` until a wait covers its group: only the next wgmma may take them (as its
accumulators), any other op reading one is an error, as on the GPU, where the registers are
the tensor cores' until the wait. At the wait the tiles are read again: a value changed
while the wgmma was in flight is an error, and so is a write another thread made since."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Operation

from irkit.dialects.warp_async import (
    CpAsyncCommitOp,
    CpAsyncOp,
    CpAsyncWaitOp,
    WgmmaCommitOp,
    WgmmaFenceOp,
    WgmmaOp,
    WgmmaWaitOp,
    wgmma_d_coordinates,
    wgmma_element,
)
from irkit.errors import IrkitError
from irkit.runtime.lockstep_warp import LockstepError, uniform


@dataclass
class AsyncCopy:
    """A cp.async in flight for the lanes of `mask`: where it goes and what it holds."""

    dest_type: MemRefType
    dest: np.ndarray
    dest_indices: list[Any]
    values: list[np.ndarray]
    mask: np.ndarray


def cp_async(run: Any, op: CpAsyncOp, args: list[Any], mask: np.ndarray) -> None:
    """Issue a copy (see the module docstring)."""
    dest_count = 1 + len(op.dest_indices)
    dest, *dest_indices = args[:dest_count]
    source, *source_indices = args[dest_count:-1]
    valid = np.broadcast_to(np.asarray(args[-1]), mask.shape)
    dest_type = cast(MemRefType, op.dest.type)
    values = []
    for q in range(op.elements):
        inside = mask & (valid > q)
        at = [*source_indices[:-1], source_indices[-1] + q]
        loaded = run._load(op.source.type, op.name, [source, *at], inside)
        values.append(np.where(inside, loaded, np.zeros((), loaded.dtype)))
        d_at = [*dest_indices[:-1], dest_indices[-1] + q]
        run._store(dest_type, op.name, [values[-1], dest, *d_at], mask, write=False)
    run.async_open.append(AsyncCopy(dest_type, dest, dest_indices, values, mask.copy()))


def cp_async_commit(run: Any, op: CpAsyncCommitOp, args: list[Any], mask: np.ndarray) -> None:
    run.async_groups.append(run.async_open)
    run.async_open = []


def cp_async_wait(run: Any, op: CpAsyncWaitOp, args: list[Any], mask: np.ndarray) -> None:
    """Land every group but the `pending` most recent ones."""
    landing = run.async_groups[: max(0, len(run.async_groups) - op.groups)]
    run.async_groups = run.async_groups[len(landing) :]
    for copy in (c for group in landing for c in group):
        for q, value in enumerate(copy.values):
            at = [*copy.dest_indices[:-1], copy.dest_indices[-1] + q]
            run._store(copy.dest_type, CpAsyncOp.name, [value, copy.dest, *at], copy.mask)


@dataclass
class Pending:
    """A wgmma result (per lane) not yet covered by a wait."""

    value: np.ndarray
    ready: bool = False


@dataclass
class _Read:
    """One checked load a wgmma made when issued, to be made again at its wait."""

    memref: MemRefType
    buffer: np.ndarray
    indices: list[Any]
    values: np.ndarray
    mask: np.ndarray


@dataclass
class WgmmaInFlight:
    results: list[Pending]
    reads: list[_Read]


def _error(run: Any, what: str) -> IrkitError:
    return LockstepError(f"@{run.run.name}: {what}")


def _read(
    run: Any, op: WgmmaOp, operand: str, buffer: np.ndarray, origin: list[Any], rows, cols, mask
) -> tuple[np.ndarray, _Read]:
    """Element (rows, cols) of the wgmma's A or B (`operand`) for every lane (checked)."""
    t = (op.a if operand == "a" else op.b).type
    assert isinstance(t, MemRefType)
    at = wgmma_element(op.tiles, operand, origin, rows, cols)
    values = run._load(t, WgmmaOp.name, [buffer, *at], mask)
    return values, _Read(t, buffer, at, values, mask)


def wgmma(run: Any, op: WgmmaOp, args: list[Any], mask: np.ndarray) -> None:
    """A warpgroup's m64nNk16 (m64nNk32 of 8-bit floats; see the module docstring): A and B
    gathered from the tiles (lane l reads A's row l / 2, half of k; and k N / 128 elements
    of B), D = A B + C per warpgroup in f32 (every product exact), each lane's results at
    `wgmma_d_coordinates`."""
    run._whole_warps(op, mask, 128)
    lanes = run.run.lanes
    na, nb, n = len(op.a_indices), len(op.b_indices), op.width
    a_buf, *a_ix = args[: 1 + na]
    b_buf, *b_ix = args[1 + na : 2 + na + nb]
    c = [x.value if isinstance(x, Pending) else x for x in args[2 + na + nb :]]
    uniform(run, op, [*a_ix, *b_ix], 128, "a tile origin that differs within a warpgroup")
    t = run.tid % 128
    count = lanes // 128
    k = op.k
    a = np.zeros((count, 64, k), np.float32)
    b = np.zeros((count, k, n), np.float32)
    reads = []
    for j in range(k // 2):
        rows, ks = t // 2, k // 2 * (t % 2) + j
        values, read = _read(run, op, "a", a_buf, a_ix, rows, ks, mask)
        a[np.arange(lanes) // 128, rows, ks] = values
        reads.append(read)
    for j in range(k * n // 128):
        e = t + 128 * j
        ks, cols = e // n, e % n
        values, read = _read(run, op, "b", b_buf, b_ix, ks, cols, mask)
        b[np.arange(lanes) // 128, ks, cols] = values
        reads.append(read)
    d = np.matmul(a, b)
    results = []
    for i in range(n // 2):
        rows, cols = wgmma_d_coordinates(t, i)
        acc = np.broadcast_to(np.asarray(c[i], np.float32), (lanes,))
        results.append(Pending((acc + d[np.arange(lanes) // 128, rows, cols]).astype(np.float32)))
    for r, value in zip(op.d, results, strict=True):
        run.env[r] = value
    run.wgmma_open.append(WgmmaInFlight(results, reads))


def start_async(run: Any) -> None:
    """A launch begins with no copy and no wgmma in flight."""
    run.async_open, run.async_groups, run.wgmma_open, run.wgmma_groups = [], [], [], []


def check_pending(run: Any, op: Operation, args: list[Any]) -> None:
    """A wgmma result in flight is the next wgmma's alone (see the module docstring)."""
    if type(op) not in RULES and any(isinstance(a, Pending) for a in args):
        raise _error(run, f"{op.name} reads a wgmma result before a wait covers it")


def wgmma_fence(run: Any, op: WgmmaFenceOp, args: list[Any], mask: np.ndarray) -> None:
    """Nothing to do: lockstep's lanes have every prior write done."""


def wgmma_commit(run: Any, op: WgmmaCommitOp, args: list[Any], mask: np.ndarray) -> None:
    run.wgmma_groups.append(run.wgmma_open)
    run.wgmma_open = []


def wgmma_wait(run: Any, op: WgmmaWaitOp, args: list[Any], mask: np.ndarray) -> None:
    """Every group but the `pending` most recent ones done: their tiles read again (a
    change, or another thread's write since, is an error) and their results readable."""
    done = run.wgmma_groups[: max(0, len(run.wgmma_groups) - op.groups)]
    run.wgmma_groups = run.wgmma_groups[len(done) :]
    for flight in (f for group in done for f in group):
        for r in flight.reads:
            again = run._load(r.memref, WgmmaOp.name, [r.buffer, *r.indices], r.mask)
            if not np.array_equal(again[r.mask], r.values[r.mask], equal_nan=True):
                raise _error(run, f"a tile of {WgmmaOp.name} changed while it was in flight")
        for p in flight.results:
            p.ready = True
    if done:
        for key, value in list(run.env.items()):
            if isinstance(value, Pending) and value.ready:
                run.env[key] = value.value


RULES: dict[type[Operation], Callable[..., None]] = {
    CpAsyncOp: cp_async,
    CpAsyncCommitOp: cp_async_commit,
    CpAsyncWaitOp: cp_async_wait,
    WgmmaOp: wgmma,
    WgmmaFenceOp: wgmma_fence,
    WgmmaCommitOp: wgmma_commit,
    WgmmaWaitOp: wgmma_wait,
}
