"""irkit's own thread pool for `cpu-parallelize`d loops: persistent workers that claim chunks,
and a caller that never waits for a worker that has not started.

A fork-join pool (libgomp's `GOMP_parallel`, or threads created per loop) cuts a loop into
one chunk per thread and joins them all: the call lasts until the slowest thread has run its
chunk, so a worker that wakes late (its core busy with other work, or a virtual CPU the
hypervisor has not scheduled yet) holds the whole loop. On the 2-core development VM, with
onnxruntime's calls interleaved (so irkit's workers were asleep at every call), a 512x1024
softmax on two threads took 0.58-0.76 ms where one thread took 0.30 ms.

Here a loop is cut into more chunks than threads (`CHUNKS_PER_THREAD`), and the calling
thread and the workers *claim* chunks one at a time from a shared counter. The caller
starts at once; it waits, at the end, only for chunks a worker has claimed and is running.
A worker that wakes after every chunk was claimed finds nothing to do, and nobody waits for
it: a threaded loop is never much slower than the same loop on the calling thread alone.

The protocol, one job at a time (a caller that finds the pool busy, e.g. a parallel loop
inside a chunk or another Python thread, runs its loop alone):

    state = generation << 32 | next chunk       (one 64-bit atomic word)
    caller: state = (g + 1) << 32               odd: closed, the job's fields may change
            fn, ctx, chunks, done = ..., 0
            state = (g + 2) << 32 | 0           even: open; wake sleeping workers
            claim chunks; wait until done == chunks
    claim:  s = state; while gen(s) is the job's and chunk(s) < chunks:
                compare-and-swap state s -> s + 1; run chunk(s); done += 1
    worker: spin `spin` times for an even generation it has not seen, else sleep on a
            futex; read the job's fields; claim

A worker reads a job's fields only after it saw the job's (even) generation, and the
caller rewrites them only after closing the generation; a claim succeeds only while the
generation is the job's, so a worker holding stale fields never runs them. Workers are
created on the first threaded call that asks for more than exist, and live as long as the
process (a forked child has none: its caller runs every chunk).

Linux (futex) on x86-64 and AArch64; elsewhere `host.thread_pool` picks libgomp or threads
per loop. IRKIT_POOL_SPIN sets how many times a worker polls (a `pause` each, ~30-140
cycles) before it sleeps (default `SPIN`).
"""

from __future__ import annotations

import os
import platform
import sys

RUN = "irkit_pool_run"
"""`void irkit_pool_run(void (*fn)(void *ctx, i64 chunk), void *ctx, i64 chunks, i32 threads)`:
run chunks 0..chunks-1 of `fn`, on up to `threads` threads (the caller included)."""
CHUNKS_PER_THREAD = 4
"""A threaded loop's chunks per thread: enough for a late worker's share to be taken by the
others, few enough that claiming (one compare-and-swap each) costs nothing measurable."""
SPIN = 4000
"""Polls of a worker before it sleeps: a worker stays awake across the short gaps between
one kernel's loops and the next kernel's."""
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
    """The pool as LLVM IR (see the module docstring)."""
    declare_pause, pause = _pause()
    futex = FUTEX[platform.machine()]
    spin = int(os.environ.get("IRKIT_POOL_SPIN", SPIN))
    return f"""
@state = internal global i64 0, align 64
@job_fn = internal global ptr null, align 64
@job_ctx = internal global ptr null
@job_chunks = internal global i64 0
@done = internal global i64 0, align 64
@busy = internal global i32 0, align 64
@sleepers = internal global i32 0, align 64
@word = internal global i32 0, align 64
@workers = internal global i32 0, align 64

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i64 @syscall(i64, ...)
{declare_pause}

define internal void @claim(i64 %gen, ptr %fn, ptr %ctx, i64 %chunks) {{
entry:
  br label %loop
loop:
  %s = load atomic i64, ptr @state seq_cst, align 8
  %g = lshr i64 %s, 32
  %c = and i64 %s, 4294967295
  %mine = icmp eq i64 %g, %gen
  %left = icmp ult i64 %c, %chunks
  %open = and i1 %mine, %left
  br i1 %open, label %try, label %out
try:
  %next = add i64 %s, 1
  %r = cmpxchg ptr @state, i64 %s, i64 %next seq_cst seq_cst
  %won = extractvalue {{ i64, i1 }} %r, 1
  br i1 %won, label %run, label %loop
run:
  call void %fn(ptr %ctx, i64 %c)
  %d = atomicrmw add ptr @done, i64 1 seq_cst
  br label %loop
out:
  ret void
}}

define internal ptr @worker(ptr %unused) {{
entry:
  br label %wait
wait:
  %seen = phi i64 [ 0, %entry ], [ %seen, %slept ], [ %g, %ran ]
  br label %poll
poll:
  %i = phi i64 [ 0, %wait ], [ %i1, %idle ]
  %s = load atomic i64, ptr @state seq_cst, align 8
  %g = lshr i64 %s, 32
  %odd = and i64 %g, 1
  %new = icmp ne i64 %g, %seen
  %even = icmp eq i64 %odd, 0
  %job = and i1 %new, %even
  br i1 %job, label %work, label %idle
idle:
  {pause}
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, {spin}
  br i1 %more, label %poll, label %sleep
sleep:
  %z = atomicrmw add ptr @sleepers, i32 1 seq_cst
  %low = trunc i64 %seen to i32
  %w = load atomic i32, ptr @word seq_cst, align 4
  %unchanged = icmp eq i32 %w, %low
  br i1 %unchanged, label %futex, label %woke
futex:
  %f = call i64 (i64, ...) @syscall(i64 {futex}, ptr @word, i32 128, i32 %low, ptr null)
  br label %woke
woke:
  %z2 = atomicrmw sub ptr @sleepers, i32 1 seq_cst
  br label %slept
slept:
  br label %wait
work:
  %fn = load ptr, ptr @job_fn
  %ctx = load ptr, ptr @job_ctx
  %chunks = load i64, ptr @job_chunks
  call void @claim(i64 %g, ptr %fn, ptr %ctx, i64 %chunks)
  br label %ran
ran:
  br label %wait
}}

define void @{RUN}(ptr %fn, ptr %ctx, i64 %chunks, i32 %threads) {{
entry:
  %r = cmpxchg ptr @busy, i32 0, i32 1 seq_cst seq_cst
  %got = extractvalue {{ i32, i1 }} %r, 1
  %many = icmp ugt i64 %chunks, 1
  %pooled = and i1 %got, %many
  br i1 %pooled, label %grow, label %alone
alone:
  %i = phi i64 [ 0, %entry ], [ %i1, %one ]
  %again = icmp ult i64 %i, %chunks
  br i1 %again, label %one, label %alone.done
one:
  call void %fn(ptr %ctx, i64 %i)
  %i1 = add i64 %i, 1
  br label %alone
alone.done:
  br i1 %got, label %release, label %exit
grow:
  %have = load atomic i32, ptr @workers seq_cst, align 4
  %want = sub i32 %threads, 1
  %short = icmp slt i32 %have, %want
  br i1 %short, label %create, label %publish
create:
  %tid = alloca i64
  %rc = call i32 @pthread_create(ptr %tid, ptr null, ptr @worker, ptr null)
  %ok = icmp eq i32 %rc, 0
  br i1 %ok, label %created, label %publish
created:
  %t = load i64, ptr %tid
  %d = call i32 @pthread_detach(i64 %t)
  %n = atomicrmw add ptr @workers, i32 1 seq_cst
  br label %grow
publish:
  %s = load atomic i64, ptr @state seq_cst, align 8
  %gen = lshr i64 %s, 32
  %closed = add i64 %gen, 1
  %closedw = shl i64 %closed, 32
  store atomic i64 %closedw, ptr @state seq_cst, align 8
  store ptr %fn, ptr @job_fn
  store ptr %ctx, ptr @job_ctx
  store i64 %chunks, ptr @job_chunks
  store atomic i64 0, ptr @done seq_cst, align 8
  %opened = add i64 %gen, 2
  %openw = shl i64 %opened, 32
  store atomic i64 %openw, ptr @state seq_cst, align 8
  %low = trunc i64 %opened to i32
  store atomic i32 %low, ptr @word seq_cst, align 4
  %sleeping = load atomic i32, ptr @sleepers seq_cst, align 4
  %wake = icmp ne i32 %sleeping, 0
  br i1 %wake, label %futex, label %work
futex:
  %f = call i64 (i64, ...) @syscall(i64 {futex}, ptr @word, i32 129, i32 2147483647)
  br label %work
work:
  call void @claim(i64 %opened, ptr %fn, ptr %ctx, i64 %chunks)
  br label %join
join:
  %finished = load atomic i64, ptr @done seq_cst, align 8
  %all = icmp uge i64 %finished, %chunks
  br i1 %all, label %release, label %spin
spin:
  {pause}
  br label %join
release:
  store atomic i32 0, ptr @busy seq_cst, align 4
  br label %exit
exit:
  ret void
}}
"""
