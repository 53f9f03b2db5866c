"""How many copies (placements) of every program a measurement binds: as many as asked or
`auto_placements`, fewer where they would hold more than `placement_budget()`."""

from __future__ import annotations

from typing import Any

from irkit.limits import memory_limit
from irkit.runtime.backend import bound_bytes


def copies_within_budget(
    wanted: int, exes: list[Any], twins: int, shared_io: bool = False
) -> tuple[int, int, int]:
    """How many copies of each program to bind: `wanted`, fewer where they would hold more
    than `placement_budget()` (at least 1); with the bytes that many hold and the budget.
    A program's first copy holds its kernel plan too (`bound_bytes`), for its kernels timed
    alone; its further copies and every twin's release it (`kernels=False`). On
    elementwise_chain a first copy holds 54.5 MB: 12.6 MB of inputs and outputs and 21 MB of
    intermediates, twice (the kernel plan's and the driver's kept scratch), a further copy
    33.5 MB; when only inputs and outputs were counted, prefix's 28 copies of 5 programs and
    2 twins took the process to 9.4 GB resident. `shared_io`: the programs of a slot are
    bound into one set of inputs and outputs (`_io`), held once a slot."""
    io = bound_bytes(exes[0], io_only=True) if shared_io and exes else 0
    shared = io * (len(exes) + twins - 1)  # held once a slot, counted by every program
    lean = [bound_bytes(exe, kernels=False) for exe in exes]
    twin_bytes = twins * max(lean, default=0)  # a twin is the largest program, at most
    first = sum(bound_bytes(exe) for exe in exes) + twin_bytes - shared  # slot 0
    per_slot = sum(lean) + twin_bytes - shared
    budget = placement_budget()
    copies = max(1, min(wanted, 1 + (budget - first) // max(per_slot, 1)))
    return copies, first + (copies - 1) * per_slot, budget


def placement_budget() -> int:
    """What the copies of `Placements` may hold in all: two thirds of a run's memory limit
    (`irkit.limits.memory_limit`: `IRKIT_MAX_MEMORY`, or 75% of the machine's memory, so
    half of it), the rest left to compiling, checking and the reference."""
    return memory_limit()[0] * 2 // 3


def auto_placements(programs: int) -> int:
    """Copies per program when none is asked for: 32 for a few programs, down to 4 as they
    grow (`AUTO_COPIES` bound in all). A contribution's CI holds both programs' copy
    variance over the copies: on elementwise_chain with one core loaded, prefix and
    ablation (one pair of programs a pass) found 5% effects in 30-70% of trials with 4
    copies, 45-65% with 8 and 85-88% with 16 (20 trials per cell, docs/results.md; their
    CIs a third narrower, the twins failing 6 of 240 checks). Shapley averages each pass
    over many contexts, which averages the copies' offsets too (80% at 4 copies), and
    binding its 82 programs 8 times made the main job 28 -> 37 s. On this VM a copy's offset
    was about constant in seconds (35-40 us on elementwise_chain), so a 1.3 ms program's 5%
    effect (68 us) stood at about twice the CI's half-width with 16 copies and ablation
    found it in 70% of trials; the copy term falls as 1/copies at the same rounds."""
    return max(4, min(32, AUTO_COPIES // max(programs, 1)))


AUTO_COPIES = 200
"""The copies `auto_placements` binds in all, when each program gets from 4 to 32."""
