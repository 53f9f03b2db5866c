"""The warp-collective ops' semantics for the lockstep interpreter, as functions over
per-lane numpy arrays (lane `l` of a launch at index `l`; warps are consecutive runs of 32).

The interpreter (`irkit.runtime.lockstep`) checks that every lane of a warp reached the op
and binds the results; these say what the hardware computes. `ldmatrix` is the
interpreter's rule for the op itself (its loads are the interpreter's checked loads).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Operation

from irkit.dialects.warp import (
    LdmatrixX4Op,
    MmaM16n8k32F8Op,
    c_coordinates,
    mma_layout,
    round_tf32,
)
from irkit.dialects.warp_async import swizzle_column
from irkit.errors import IrkitError


class LockstepError(IrkitError):
    """A kernel did something a GPU would not do reliably (race, divergent barrier, out of
    bounds), or used an op the interpretation does not know."""


def shuffle_xor(value: Any, offset: int, width: int, lanes: int) -> tuple[np.ndarray, np.ndarray]:
    """`gpu.shuffle xor` over `lanes` lanes: lane l receives lane l ^ offset's value within
    groups of `width` lanes; a source past its group's end gives the lane its own value and
    a false `valid`. Returns (values, valid)."""
    lane = np.arange(32)
    group = lane - lane % width
    source = lane ^ offset
    valid = source < group + width
    source = np.where(valid, source, lane)
    v = np.broadcast_to(np.asarray(value), (lanes,)).reshape(-1, 32)
    return v[:, source].reshape(lanes), np.tile(valid, lanes // 32)


def mma(op: Operation, args: list[Any], lanes: int) -> list[np.ndarray]:
    """A tensor-core multiply-accumulate for every warp: each warp's A, B and C gathered
    from its lanes' operands at the fragment coordinates (`mma_layout`), A and B rounded to
    TF32 for the TF32 op, D = A B + C in f32 (each f16, bf16, 8-bit or TF32 product is
    exact in f32), scattered back to the lanes: one array of `lanes` values per result. An
    8-bit op's operands are registers of 4 values (arrays with a last axis of 4), value i
    of A being element i % 4 of register i // 4."""
    a_count, b_count, k, a_at, b_at, tf32 = mma_layout(op)  # type: ignore[arg-type]
    if isinstance(op, MmaM16n8k32F8Op):  # 6 registers of 4 values, then C
        args = [np.asarray(r)[..., q] for r in args[:6] for q in range(4)] + list(args[6:])
    per_warp = [np.broadcast_to(np.asarray(x, np.float32), (lanes,)).reshape(-1, 32) for x in args]
    if tf32:
        per_warp[: a_count + b_count] = [round_tf32(v) for v in per_warp[: a_count + b_count]]
    count = lanes // 32
    a = np.zeros((count, 16, k), np.float32)
    b = np.zeros((count, k, 8), np.float32)
    c = np.zeros((count, 16, 8), np.float32)
    for lane in range(32):
        for i in range(a_count):
            a[(slice(None), *a_at(lane, i))] = per_warp[i][:, lane]
        for i in range(b_count):
            b[(slice(None), *b_at(lane, i))] = per_warp[a_count + i][:, lane]
        for i in range(4):
            c[(slice(None), *c_coordinates(lane, i))] = per_warp[a_count + b_count + i][:, lane]
    d = np.matmul(a, b) + c
    results = []
    for i in range(len(op.results)):
        out = np.empty((count, 32), np.float32)
        for lane in range(32):
            out[:, lane] = d[(slice(None), *c_coordinates(lane, i))]
        results.append(out.reshape(lanes))
    return results


def uniform(run: Any, op: Operation, indices: list[Any], width: int, what: str) -> None:
    """Indices that must be the same in every lane of each group of `width` (a warp's base,
    a warpgroup's tile origins): else a LockstepError naming the op and `what`."""
    n = run.run.lanes
    for ix in indices:
        per_group = np.broadcast_to(np.asarray(ix), (n,)).reshape(-1, width)
        if (per_group != per_group[:, :1]).any():
            raise LockstepError(f"@{run.run.name}: {op.name} with {what}")


def ldmatrix(run: Any, op: LdmatrixX4Op, args: list[Any], mask: np.ndarray) -> None:
    """A warp's ldmatrix.x4 over whole warps: the base must be the same in every lane of
    a warp (the GPU derives each lane's row address from it); lane l's result j is the
    pair at row l / 4, columns 2 (l % 4) + {0, 1} of matrix j (of 8-bit values, the 4 at
    columns 4 (l % 4) + {0, 1, 2, 3}; transposed: rows
    2 (l % 4) + {0, 1}, column l / 4), each element a checked load (bounds, races) as a
    plain load would be."""
    run._whole_warps(op, mask)
    buffer, *indices = args
    uniform(run, op, indices, 32, "a base that differs between the lanes of a warp")
    lane = run.tid % 32
    t = op.source.type
    assert isinstance(t, MemRefType)
    for j in range(4):
        pair = []
        for q in range(op.per_register):
            row, column = op.lane_elements(lane, j, q)
            row, column = indices[-2] + row, indices[-1] + column
            if op.swizzled is not None:
                column = swizzle_column(row, column, t.get_shape()[-1])
            at = [*indices[:-2], row, column]
            pair.append(run._load(t, op.name, [buffer, *at], mask))
        run.env[op.pairs[j]] = np.stack(pair, axis=-1)
