"""cp.async for the lockstep interpreter (`irkit.runtime.lockstep`): the rules of
`irkit_warp.cp_async`, `cp_async_commit` and `cp_async_wait` (their semantics:
`irkit.dialects.warp`), registered there from `RULES`.

A copy's source elements are read when it is issued (checked loads; the global source does
not change while a kernel runs), the rest of its 16 bytes are zero; the destination counts
as written then (so a copy into a stage other threads still read races), and its bytes are
stored when a wait lands its group, each element a checked store at that point. Lanes run
together, so the groups are the launch's: a commit closes the open group for every lane."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Operation

from irkit.dialects.warp import CpAsyncCommitOp, CpAsyncOp, CpAsyncWaitOp


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


RULES: dict[type[Operation], Callable[..., None]] = {
    CpAsyncOp: cp_async,
    CpAsyncCommitOp: cp_async_commit,
    CpAsyncWaitOp: cp_async_wait,
}
