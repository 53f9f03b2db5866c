"""irkit's thread pool (irkit/codegen/pool.py): every chunk of every job runs exactly once,
whoever runs it: the caller and its workers, several callers at once, a job started inside a
chunk, and a forked child whose pool has no workers at all."""

from __future__ import annotations

import ctypes
import os
import threading

import llvmlite.binding as llvm
import numpy as np
import pytest

import irkit
from irkit.codegen import pool
from irkit.codegen.host import host_target, install_pool, optimize
from irkit.runtime.check import check

pytestmark = pytest.mark.skipif(not pool.supported(), reason="irkit's pool needs Linux futexes")

MARK = """
define void @mark(ptr %counts, i64 %chunk) {
  %p = getelementptr i64, ptr %counts, i64 %chunk
  %old = atomicrmw add ptr %p, i64 1 seq_cst
  ret void
}

declare void @irkit_pool_run(ptr, ptr, i64, i32)

; each chunk c of the outer job runs an inner job of 3 chunks on counts[8 + 3c ..]
define void @nested(ptr %counts, i64 %chunk) {
  %base = mul i64 %chunk, 3
  %at = add i64 %base, 8
  %inner = getelementptr i64, ptr %counts, i64 %at
  call void @irkit_pool_run(ptr @mark, ptr %inner, i64 3, i32 2)
  %p = getelementptr i64, ptr %counts, i64 %chunk
  %old = atomicrmw add ptr %p, i64 1 seq_cst
  ret void
}
"""


def run(fn: int, ctx: int, chunks: int, threads: int) -> None:
    """`irkit_pool_run(fn, ctx, chunks, threads)`, called from Python."""
    signature = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                 ctypes.c_int32)  # fmt: skip
    signature(install_pool())(fn, ctx, chunks, threads)


@pytest.fixture(scope="module")
def functions() -> dict[str, int]:
    install_pool()
    engine = llvm.create_mcjit_compiler(optimize(MARK), host_target().machine())
    engine.finalize_object()
    functions.engine = engine  # type: ignore[attr-defined]  # kept alive with the module
    return {name: engine.get_function_address(name) for name in ("mark", "nested")}


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
@pytest.mark.parametrize("chunks", [0, 1, 2, 7, 64, 333])
def test_every_chunk_runs_exactly_once(functions, chunks: int, threads: int) -> None:
    counts = np.zeros(max(chunks, 1), np.int64)
    for _ in range(200):
        run(functions["mark"], counts.ctypes.data, chunks, threads)
    assert np.all(counts[:chunks] == 200), (counts.min(), counts.max())
    assert np.all(counts[chunks:] == 0)  # none beyond: 0 chunks runs nothing


def test_callers_on_several_threads_each_get_all_their_chunks(functions) -> None:
    """One job at a time holds the pool; a caller finding it busy runs its chunks itself."""
    counts = [np.zeros(16, np.int64) for _ in range(4)]

    def call(c: np.ndarray) -> None:
        for _ in range(2000):
            run(functions["mark"], c.ctypes.data, 16, 3)

    threads = [threading.Thread(target=call, args=(c,)) for c in counts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in counts:
        assert np.all(c == 2000)


def test_a_job_started_inside_a_chunk_runs_on_its_caller(functions) -> None:
    counts = np.zeros(8 + 3 * 8, np.int64)
    for _ in range(100):
        run(functions["nested"], counts.ctypes.data, 8, 2)
    assert np.all(counts == 100)


def test_a_forked_child_without_workers_runs_every_chunk(functions) -> None:
    """The caller never waits for a worker that has not claimed a chunk: in a child forked
    after the workers started, it has none and runs the whole job alone."""
    run(functions["mark"], np.zeros(4, np.int64).ctypes.data, 4, 2)  # workers exist
    counts = np.zeros(50, np.int64)
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        ok = False
        try:
            for _ in range(10):
                run(functions["mark"], counts.ctypes.data, 50, 4)
            ok = bool(np.all(counts == 10))
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_threaded_kernels_on_the_pool_are_checked(monkeypatch) -> None:
    """A kernel's loops split into up to 4 chunks per thread (uneven ones here) compute the
    reference's values and the sequential program's bits."""
    module = irkit.load("examples/softmax.graph", {"R": 37, "C": 50})
    threaded = irkit.compile(module, "default-cpu,cpu-parallelize{threads=3 min-work=0}",
                             backend="cpu")  # fmt: skip
    assert "irkit_pool_run" in threaded.llvm_ir
    checks, inputs = check(threaded, module, seed=2)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    sequential = irkit.compile(module, "default-cpu", backend="cpu")
    for _ in range(20):
        for a, b in zip(sequential(*inputs), threaded(*inputs), strict=True):
            np.testing.assert_array_equal(a, b)


def test_the_pool_ir_is_package_data_that_parses_for_both_machines(monkeypatch) -> None:
    """The pool's IR lives in irkit/codegen/pool.ll (shipped as package data), its fields
    filled in per machine: it parses and verifies for x86-64 (the `pause` intrinsic) and
    AArch64 (`yield` as inline asm), with no field left unfilled."""
    from importlib import resources

    assert resources.files("irkit.codegen").joinpath("pool.ll").is_file()
    for machine in ("x86_64", "aarch64"):
        monkeypatch.setattr(pool.platform, "machine", lambda m=machine: m)
        text = pool.runtime_ir()
        assert "${" not in text and f"@{pool.RUN}(" in text
        llvm.parse_assembly(text).verify()
        assert (f"i64 {pool.FUTEX[machine]}," in text) and ("sse2.pause" in text) == (
            machine == "x86_64"
        )
