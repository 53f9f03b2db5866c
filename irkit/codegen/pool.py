"""irkit's own thread pool for `cpu-parallelize`d loops: persistent workers that claim chunks,
and a caller that never waits for a worker that has not started.

A fork-join pool (libgomp's `GOMP_parallel`, or threads created per loop) cuts a loop into
one chunk per thread and joins them all: the call lasts until the slowest thread has run its
chunk, so a worker that wakes late (its core busy with other work, or a virtual CPU the
hypervisor has not scheduled yet) holds the whole loop. On the 2-core development VM, with
onnxruntime's calls interleaved (so irkit's workers were asleep at every call), a 512x1024
softmax on two threads took 0.58-0.76 ms where one thread took 0.30 ms.

Here a loop of T threads is cut into more chunks than threads (`CHUNKS_PER_THREAD`), in T
contiguous ranges, one per thread as a static schedule would give them: thread t (the caller
is 0) *claims* the chunks of its own range one at a time, in order, then those of the other
ranges (t + 1, t + 2, ...): the work of a thread that is late is taken by the others. The
caller starts at once, and at the end waits only for chunks a worker has claimed and is
running; a worker that wakes after every chunk was claimed finds nothing to do, and nobody
waits for it: a threaded loop is never much slower than the same loop on one thread. A
thread that is not late runs its own range, as with a static schedule, so consecutive loops
over the same rows find them in the same core's cache (claiming from one shared counter
instead, conv_block on two threads took 0.205 ms against libgomp's 0.172).

The protocol, one job at a time (a caller that finds the pool busy, e.g. a parallel loop
inside a chunk or another Python thread, runs its loop alone):

    gen  (a 64-bit atomic word): even while a job is open, odd while the caller changes it
    range r (an atomic word each): gen << 32 | next chunk << 16 | end of the range
    caller: gen = g + 1; fn, ctx, ranges, done = ..., 0
            range r = (g + 2) << 32 | start_r << 16 | end_r, for each range
            gen = g + 2; wake sleeping workers; claim from range 0; wait until done == chunks
    claim:  for each range from the thread's own: w = range r;
                while gen(w) is the job's and next(w) < end(w):
                    compare-and-swap range r w -> w + (1 << 16); run next(w); done += 1
    worker: spin `spin` times for an even generation it has not seen, else sleep on a
            futex; read the job's fields; claim

A claim succeeds only on a range word of the job's generation with chunks left; the caller
rewrites the job's fields and range words only after every chunk was claimed and run, and
with a new generation, so a worker holding stale fields never runs them. Workers are created
on the first threaded call that asks for more than exist, and live as long as the process (a
forked child has none: its caller runs every chunk).

Linux (futex) on x86-64 and AArch64; elsewhere `host.thread_pool` picks libgomp or threads
per loop. IRKIT_POOL_SPIN sets how many times a worker polls (a `pause` each, ~30-140
cycles) before it sleeps (default `SPIN`); IRKIT_POOL_CHUNKS, the chunks per thread
(`chunks_per_thread`).
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import resources
from string import Template

RUN = "irkit_pool_run"
"""`void irkit_pool_run(void (*fn)(void *ctx, i64 chunk), void *ctx, i64 chunks, i32 threads)`:
run chunks 0..chunks-1 of `fn`, on up to `threads` threads (the caller included)."""
CHUNKS_PER_THREAD = 4
"""A threaded loop's chunks per thread: enough for a late worker's share to be taken by the
others, few enough that claiming (one compare-and-swap each) costs nothing measurable."""


def chunks_per_thread() -> int:
    """IRKIT_POOL_CHUNKS if set (a positive integer), else `CHUNKS_PER_THREAD`."""
    value = os.environ.get("IRKIT_POOL_CHUNKS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else CHUNKS_PER_THREAD


SPIN = 4000
"""Polls of a worker before it sleeps: a worker stays awake across the short gaps between
one kernel's loops and the next kernel's."""
RANGES = 64
"""At most this many ranges (threads past it only take others' chunks)."""
FUTEX = {"x86_64": 202, "aarch64": 98}
"""The futex system call's number."""


def supported() -> bool:
    return sys.platform == "linux" and platform.machine() in FUTEX


def _pause() -> tuple[str, str]:
    """The declaration and the call of one spin-wait hint."""
    if platform.machine() == "x86_64":
        return "declare void @llvm.x86.sse2.pause()", "call void @llvm.x86.sse2.pause()"
    return "", 'call void asm sideeffect "yield", ""()'


def runtime_ir() -> str:
    """The pool as LLVM IR (see the module docstring): `pool.ll`, its fields filled in for
    this machine."""
    declare_pause, pause = _pause()
    template = Template(resources.files("irkit.codegen").joinpath("pool.ll").read_text())
    return template.substitute(
        RUN=RUN,
        RANGES=RANGES,
        FUTEX=FUTEX[platform.machine()],
        SPIN=int(os.environ.get("IRKIT_POOL_SPIN", SPIN)),
        DECLARE_PAUSE=declare_pause,
        PAUSE=pause,
    )
