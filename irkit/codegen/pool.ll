; irkit's thread pool (irkit/codegen/pool.py: the protocol is its docstring), as LLVM IR.
; Its $$NAME fields are filled in by pool.runtime_ir (string.Template) for the machine.
@gen = internal global i64 0, align 64
@ranges = internal global [${RANGES} x { i64, [56 x i8] }] zeroinitializer, align 64
@job_fn = internal global ptr null, align 64
@job_ctx = internal global ptr null
@job_ranges = internal global i64 0
@done = internal global i64 0, align 64
@busy = internal global i32 0, align 64
@sleepers = internal global i32 0, align 64
@word = internal global i32 0, align 64
@workers = internal global i32 0, align 64

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i64 @syscall(i64, ...)
${DECLARE_PAUSE}

define internal ptr @range(i64 %r) {
  %p = getelementptr [${RANGES} x { i64, [56 x i8] }], ptr @ranges, i64 0, i64 %r, i32 0
  ret ptr %p
}

; thread `me` claims chunks of job `job` (its generation), its own range first
define internal void @claim(i64 %me, i64 %job, ptr %fn, ptr %ctx, i64 %count) {
entry:
  br label %next.range
next.range:
  %k = phi i64 [ 0, %entry ], [ %k1, %range.done ]
  %more = icmp ult i64 %k, %count
  br i1 %more, label %pick, label %out
pick:
  %sum = add i64 %me, %k
  %r = urem i64 %sum, %count
  %at = call ptr @range(i64 %r)
  br label %loop
loop:
  %w = load atomic i64, ptr %at seq_cst, align 8
  %g = lshr i64 %w, 32
  %mine = icmp eq i64 %g, %job
  br i1 %mine, label %check, label %out
check:
  %c0 = lshr i64 %w, 16
  %c = and i64 %c0, 65535
  %end = and i64 %w, 65535
  %left = icmp ult i64 %c, %end
  br i1 %left, label %try, label %range.done
try:
  %taken = add i64 %w, 65536
  %x = cmpxchg ptr %at, i64 %w, i64 %taken seq_cst seq_cst
  %won = extractvalue { i64, i1 } %x, 1
  br i1 %won, label %run, label %loop
run:
  call void %fn(ptr %ctx, i64 %c)
  %d = atomicrmw add ptr @done, i64 1 seq_cst
  br label %loop
range.done:
  %k1 = add i64 %k, 1
  br label %next.range
out:
  ret void
}

define internal ptr @worker(ptr %id) {
entry:
  %me = ptrtoint ptr %id to i64
  br label %wait
wait:
  %seen = phi i64 [ 0, %entry ], [ %seen, %slept ], [ %g, %ran ]
  br label %poll
poll:
  %i = phi i64 [ 0, %wait ], [ %i1, %idle ]
  %g = load atomic i64, ptr @gen seq_cst, align 8
  %odd = and i64 %g, 1
  %new = icmp ne i64 %g, %seen
  %even = icmp eq i64 %odd, 0
  %job = and i1 %new, %even
  br i1 %job, label %work, label %idle
idle:
  ${PAUSE}
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, ${SPIN}
  br i1 %more, label %poll, label %sleep
sleep:
  %z = atomicrmw add ptr @sleepers, i32 1 seq_cst
  %low = trunc i64 %seen to i32
  %w = load atomic i32, ptr @word seq_cst, align 4
  %unchanged = icmp eq i32 %w, %low
  br i1 %unchanged, label %futex, label %woke
futex:
  %f = call i64 (i64, ...) @syscall(i64 ${FUTEX}, ptr @word, i32 128, i32 %low, ptr null)
  br label %woke
woke:
  %z2 = atomicrmw sub ptr @sleepers, i32 1 seq_cst
  br label %slept
slept:
  br label %wait
work:
  %fn = load ptr, ptr @job_fn
  %ctx = load ptr, ptr @job_ctx
  %count = load i64, ptr @job_ranges
  call void @claim(i64 %me, i64 %g, ptr %fn, ptr %ctx, i64 %count)
  br label %ran
ran:
  br label %wait
}

define void @${RUN}(ptr %fn, ptr %ctx, i64 %chunks, i32 %threads) {
entry:
  %r = cmpxchg ptr @busy, i32 0, i32 1 seq_cst seq_cst
  %got = extractvalue { i32, i1 } %r, 1
  %many = icmp ugt i64 %chunks, 1
  %fits = icmp ult i64 %chunks, 65536
  %both = and i1 %many, %fits
  %pooled = and i1 %got, %both
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
  %id = add i32 %have, 1
  %id64 = zext i32 %id to i64
  %idp = inttoptr i64 %id64 to ptr
  %rc = call i32 @pthread_create(ptr %tid, ptr null, ptr @worker, ptr %idp)
  %ok = icmp eq i32 %rc, 0
  br i1 %ok, label %created, label %publish
created:
  %t = load i64, ptr %tid
  %d = call i32 @pthread_detach(i64 %t)
  %n = atomicrmw add ptr @workers, i32 1 seq_cst
  br label %grow
publish:
  %old = load atomic i64, ptr @gen seq_cst, align 8
  %closed = add i64 %old, 1
  store atomic i64 %closed, ptr @gen seq_cst, align 8
  %opened = add i64 %old, 2
  %t64 = zext i32 %threads to i64
  %few = icmp ult i64 %t64, ${RANGES}
  %t1 = select i1 %few, i64 %t64, i64 ${RANGES}
  %lesser = icmp ult i64 %chunks, %t1
  %count = select i1 %lesser, i64 %chunks, i64 %t1
  store ptr %fn, ptr @job_fn
  store ptr %ctx, ptr @job_ctx
  store i64 %count, ptr @job_ranges
  store atomic i64 0, ptr @done seq_cst, align 8
  %tag = shl i64 %opened, 32
  br label %fill
fill:
  %q = phi i64 [ 0, %publish ], [ %q1, %fill ]
  %lo0 = mul i64 %chunks, %q
  %lo = udiv i64 %lo0, %count
  %q1 = add i64 %q, 1
  %hi0 = mul i64 %chunks, %q1
  %hi = udiv i64 %hi0, %count
  %lo16 = shl i64 %lo, 16
  %word0 = or i64 %tag, %lo16
  %wordq = or i64 %word0, %hi
  %at = call ptr @range(i64 %q)
  store atomic i64 %wordq, ptr %at seq_cst, align 8
  %filled = icmp ult i64 %q1, %count
  br i1 %filled, label %fill, label %open
open:
  store atomic i64 %opened, ptr @gen seq_cst, align 8
  %low = trunc i64 %opened to i32
  store atomic i32 %low, ptr @word seq_cst, align 4
  %sleeping = load atomic i32, ptr @sleepers seq_cst, align 4
  %wake = icmp ne i32 %sleeping, 0
  br i1 %wake, label %futex, label %work
futex:
  %f = call i64 (i64, ...) @syscall(i64 ${FUTEX}, ptr @word, i32 129, i32 2147483647)
  br label %work
work:
  call void @claim(i64 0, i64 %opened, ptr %fn, ptr %ctx, i64 %count)
  br label %join
join:
  %finished = load atomic i64, ptr @done seq_cst, align 8
  %all = icmp uge i64 %finished, %chunks
  br i1 %all, label %release, label %spin
spin:
  ${PAUSE}
  br label %join
release:
  store atomic i32 0, ptr @busy seq_cst, align 4
  br label %exit
exit:
  ret void
}
