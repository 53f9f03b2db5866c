"""Loops of the lockstep interpretation whose bounds differ between threads."""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.dialects import scf

from irkit.runtime.lockstep_warp import LockstepError


def divergent_for(run: Any, op: scf.ForOp, bounds: list[Any], mask: np.ndarray) -> None:
    """An scf.for whose bounds differ between threads (a causal attention's key tiles per
    block, a GEMV's rows per warp): iteration n runs in the threads where lb + n step < ub,
    the others keep their values. A collective op inside must still be reached by whole
    warps, and a barrier by whole blocks (where bounds differ within a block, the checks
    say so). `run` is the `LockstepInterpreter`."""
    lb, ub, step = (np.broadcast_to(np.asarray(b, np.int64), mask.shape) for b in bounds)
    if (step[mask] <= 0).any():
        raise LockstepError(f"@{run.run.name}: scf.for with a step that is not positive")
    values = [run.env[v] for v in op.iter_args]
    iv, *accs = op.body.block.args
    n = 0
    while True:
        at = lb + n * step
        active = mask & (at < ub)
        if not active.any():
            break
        run.env[iv] = at
        for a, v in zip(accs, values, strict=True):
            run.env[a] = v
        out = run.block_(op.body.block, active)
        values = [
            np.asarray(np.where(active, new, old)).astype(np.asarray(old).dtype, copy=False)
            for new, old in zip(out, values, strict=True)
        ]
        n += 1
    for r, v in zip(op.results, values, strict=True):
        run.env[r] = v
