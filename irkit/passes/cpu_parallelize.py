"""cpu-parallelize: run the outermost parallel loops of CPU kernels on several threads.

A kernel's top-level `scf.parallel` loops (those not nested in another loop: each phase of a
fused kernel, the panel loop of a tiled matmul) are marked `irkit.threads = T`; where such a
loop's first dimension has one iteration (a batch of 1 over a batched matmul), the parallel
loops directly in its body are marked instead (ViT's attention QK^T 104 -> 40 us on two
threads). The LLVM
target then emits each marked loop as a call into a thread pool (`host.thread_pool`): the
loop body is outlined into a function of one chunk, the iterations of the loop's first
dimension are cut into chunks, and the calling thread runs them with the pool's persistent
workers (irkit's own pool, `irkit.codegen.pool`, on Linux: the caller starts at once and
never waits for a worker that has not woken; libgomp's, or threads created and joined per
loop, elsewhere). So a kernel is still one call, and its time (measured from the outside)
includes handing out the chunks and the join.

Handing out work costs time (a futex wake where a worker sleeps, microseconds), so only
loops that execute at least `min-work` operations (`count_ops`: each op once per execution,
from the static trip counts) are threaded, and never with more threads than the first
dimension has iterations. A loop that is not threaded is left as it was.

Every iteration of an `scf.parallel` is independent by definition and each writes its own
elements, so the values are those of the sequential loop, bit for bit.

Options:

    threads=0          threads per loop; 0: the `IRKIT_NUM_THREADS` environment variable if
                       set, else the CPUs this process may run on. The count is resolved when
                       the pass runs and written into the IR, so a compiled kernel always
                       runs with the number its IR shows.
    min-work=1048576   the fewest executed operations for which a loop is threaded
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import func, scf
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass

from irkit.errors import IrkitError, require
from irkit.loops import KERNEL_ATTR, THREADS_ATTR, require_loop_level
from irkit.loops.costs import count_ops, static_trips

MAX_FORKS = 64
"""The most iterations of an unthreaded loop whose inner parallel loops are threaded (each
iteration hands its inner loops' work out once)."""
MAX_THREADS = 1024
"""The most threads a loop may fork (an option beyond it is surely a typo)."""


def default_threads() -> int:
    """`IRKIT_NUM_THREADS` if set, else the number of CPUs this process may run on."""
    value = os.environ.get("IRKIT_NUM_THREADS", "").strip()
    if value:
        if not value.isdigit() or not 1 <= int(value) <= MAX_THREADS:
            raise IrkitError(
                f"IRKIT_NUM_THREADS must be an integer from 1 to {MAX_THREADS}, not {value!r}"
            )
        return int(value)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True)
class CpuParallelizePass(ModulePass):
    """Mark the top-level parallel loops of CPU kernels to run on threads (see the module
    docstring). Optional: without it every loop runs on the calling thread."""

    name = "cpu-parallelize"
    is_optimization = True

    SEARCH_SPACE: ClassVar[dict[str, tuple[int, ...]]] = {"min-work": (1 << 18, 1 << 20, 1 << 22)}
    """What `tune --space cpu-parallelize` and `advise` try: the least work threaded."""

    threads: int = 0
    min_work: int = 1 << 20

    def check_options(self) -> None:
        require(
            0 <= self.threads <= MAX_THREADS,
            "threads",
            self.threads,
            f"must be 0 (automatic) to {MAX_THREADS}",
        )
        require(self.min_work >= 0, "min-work", self.min_work, "must be non-negative")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_loop_level(op, "cpu-parallelize", cpu=True)
        threads = self.threads or default_threads()
        for fn in op.ops:
            if not isinstance(fn, func.FuncOp) or KERNEL_ATTR not in fn.attributes:
                continue
            for loop in fn.body.block.ops:
                if isinstance(loop, scf.ParallelOp) and not loop.initVals:
                    self._mark(loop, threads)

    def _mark(self, loop: scf.ParallelOp, threads: int, work: int | None = None) -> None:
        """Thread `loop` where its first dimension and its work allow (`work`: the work of
        the loop it is nested in, where it is). Where the first dimension has a single
        iteration (a batch of 1 over a batched kernel's heads, the rows inside), the parallel
        loops directly in its body are threaded instead, if the loop's own iterations are
        few (each forks them once): ViT's attention matmuls, 3 heads of 197 rows, had run
        on one thread of two."""
        try:
            first = static_trips(loop.lowerBound[0], loop.upperBound[0], loop.step[0])
            own = count_ops(loop)
            trips = 1
            for lb, ub, step in zip(loop.lowerBound, loop.upperBound, loop.step, strict=True):
                trips *= static_trips(lb, ub, step)
        except ValueError:  # dynamic bounds: no static estimate of the work
            return
        work = own if work is None else work
        count = min(threads, first)
        if count >= 2 and work >= self.min_work:
            loop.attributes[THREADS_ATTR] = IntegerAttr(count, i64)
        elif first == 1 and trips <= MAX_FORKS and own >= self.min_work:
            for inner in loop.body.block.ops:
                if isinstance(inner, scf.ParallelOp) and not inner.initVals:
                    self._mark(inner, threads, own)
