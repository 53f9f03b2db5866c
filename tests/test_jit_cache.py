"""The CPU backend's machine-code cache (`irkit.codegen.host.jit_program`): each kernel is
its own module, named by its code; a kernel compiled once, in any program or process, is not
optimized or code-generated again; a damaged entry is compiled afresh."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import irkit
from irkit.codegen import host
from irkit.runtime.reference import random_inputs


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("IRKIT_CACHE", str(tmp_path))
    host.forget_compiled()  # as a new process: nothing compiled in memory
    return tmp_path / "llvm"


def test_a_cached_module_skips_optimization_and_computes_the_same(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = irkit.load("examples/mlp.graph", {"B": 4, "D": 32, "F": 64})
    inputs = random_inputs(module, seed=3)
    exe = irkit.compile(module, backend="cpu")
    first = exe(*inputs)
    entries = list(cache.iterdir())
    distinct = {k.hash for k in exe.kernels}
    objects = [e for e in entries if e.suffix == ".o"]
    assert len(objects) == 1 + len(distinct)  # the driver's and each distinct kernel's
    assert sorted(e.name for e in entries if e not in objects) == sorted(
        f"{e.name}.{host.MACHINE_ENTRY}" for e in objects if f"{e.name}.{host.MACHINE_ENTRY}" in {x.name for x in entries}
    )  # fmt: skip
    assert len(entries) == len(objects) + len(distinct)  # and each kernel's optimized-code hash

    def no_optimizing(*args: object):
        raise AssertionError("optimized although cached")

    host.forget_compiled()  # a new process: only the disk cache
    monkeypatch.setattr(host, "optimize", no_optimizing)
    monkeypatch.setattr(host.llvm_compile, "optimize", no_optimizing)
    monkeypatch.setattr(host, "_start_worker", no_optimizing)
    again = irkit.compile(module, backend="cpu")(*inputs)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_damaged_entry_is_compiled_again(cache: Path) -> None:
    module = irkit.load("examples/softmax.graph", {"R": 4, "C": 16})
    inputs = random_inputs(module, seed=1)
    expected = irkit.compile(module, backend="cpu")(*inputs)
    entries = list(cache.iterdir())
    for entry in entries:  # the driver's and the kernel's
        data = bytearray(entry.read_bytes())
        data[len(data) // 2] ^= 0xFF
        entry.write_bytes(bytes(data))
    host.forget_compiled()
    again = irkit.compile(module, backend="cpu")(*inputs)
    np.testing.assert_array_equal(expected[0], again[0])
    for entry in entries:
        assert host.read("llvm", entry.name) is not None  # rewritten whole


def test_a_kernel_is_compiled_once_whatever_program_or_position_it_is_in(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformer_block's four projections are the same matmul: one object. A second
    pipeline that changes only some kernels compiles only those (attribution's variants
    share most of their kernels)."""
    module = irkit.load("examples/transformer_block.graph")
    optimized: list[str] = []
    real = host.llvm_compile.optimize
    monkeypatch.setattr(
        host.llvm_compile, "optimize", lambda text, *a: optimized.append(text) or real(text, *a)
    )
    monkeypatch.setenv("IRKIT_COMPILE_JOBS", "1")  # every module optimized in this process
    full = irkit.compile(module, "default-cpu", backend="cpu")
    hashes = [k.hash for k in full.kernels]
    assert len(set(hashes)) < len(hashes)  # equal kernels in several positions
    assert len(optimized) == 1 + len(set(hashes))  # the driver and each distinct kernel once
    symbols = {full.program.symbol(k.name) for k in full.kernels}
    assert len(symbols) == len(set(hashes))
    optimized.clear()
    other = irkit.compile(module, "default-cpu,cpu-parallelize{threads=1}", backend="cpu")
    new = {k.hash for k in other.kernels} - set(hashes)
    assert len(optimized) <= 1 + len(new) < 1 + len(set(hashes))
    inputs = random_inputs(module, seed=2)
    for a, b in zip(full(*inputs), other(*inputs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_the_cache_stays_under_its_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past $IRKIT_CACHE_MAX_MB the least recently used entries go, down to three quarters."""
    from irkit.codegen import disk_cache

    monkeypatch.setenv("IRKIT_CACHE", str(tmp_path))
    monkeypatch.setenv("IRKIT_CACHE_MAX_MB", "1")
    monkeypatch.setattr(disk_cache.os, "urandom", lambda n: b"\x00")  # prune on every write
    for i in range(12):
        disk_cache.write("llvm", f"{i}.o", bytes(200_000))
    total = sum(f.stat().st_size for f in (tmp_path / "llvm").iterdir())
    assert total <= 2**20
    assert disk_cache.read("llvm", "11.o") == bytes(200_000)  # the newest stays


def test_a_copy_links_the_same_code_again_without_compiling(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`CpuExecutable.copy()` (attribution's further placements): a new engine holding the
    same machine code at other addresses, nothing optimized or emitted again, the same
    results, and alive after the original is gone."""
    import gc

    module = irkit.load("examples/mlp.graph", {"B": 4, "D": 32, "F": 64})
    inputs = random_inputs(module, seed=5)
    exe = irkit.compile(module, backend="cpu")
    expected = exe(*inputs)
    monkeypatch.setattr(host, "optimize", lambda text: pytest.fail("compiled for a copy"))
    monkeypatch.setattr(host.LLVMEmitter, "emit_kernel", lambda *a: pytest.fail("emitted"))
    twin = exe.copy()
    assert twin.engine is not exe.engine
    name = exe.kernels[0].name
    addresses = [e.engine.get_function_address(e.program.symbol(name)) for e in (exe, twin)]
    assert addresses[0] != addresses[1]
    assert [k.code_hash for k in twin.kernels] == [k.code_hash for k in exe.kernels]
    del exe
    gc.collect()
    for a, b in zip(expected, twin(*inputs), strict=True):
        np.testing.assert_array_equal(a, b)


def _compiled_alone(cache: Path, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """A small transformer_block, its inputs and its outputs compiled in this process alone;
    then nothing compiled is left, in memory or on disk."""
    module = irkit.load("examples/transformer_block.graph", {"B": 1, "S": 16, "D": 32, "F": 64})
    inputs = random_inputs(module, seed=2)
    monkeypatch.setenv("IRKIT_COMPILE_JOBS", "1")
    outputs = irkit.compile(module, backend="cpu")(*inputs)
    host.forget_compiled()
    for entry in cache.iterdir():
        entry.unlink()
    return module, inputs, outputs


def test_kernels_compiled_by_workers_are_the_code_this_process_makes(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`compile_kernels` shares the kernels between this process and worker processes
    (`IRKIT_COMPILE_JOBS`): each kernel's object and optimized-code hash are byte for byte
    what compiling it here gives, and the program computes what a one-process compile's
    does."""
    module, inputs, alone = _compiled_alone(cache, monkeypatch)
    started = []
    start = host._start_worker
    monkeypatch.setattr(host, "_start_worker", lambda *a: started.append(a) or start(*a))
    monkeypatch.setenv("IRKIT_COMPILE_JOBS", "2")
    exe = irkit.compile(module, backend="cpu")
    assert len(started) == 1 and started[0][0]  # one worker, given a share
    target = host.host_target()
    for code in {c.symbol: c for c in exe.program.kernels.values()}.values():
        data, machine = host.llvm_compile.compile_kernel(
            code.text, code.symbol, target.cpu, target.features
        )
        assert host._OBJECTS[code.symbol] == data and host.machine_hash(code.symbol) == machine
    for a, b in zip(alone, exe(*inputs), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("executable", ["/nonexistent/python", "/bin/false"])
def test_a_worker_that_cannot_start_or_fails_leaves_its_share_to_this_process(
    cache: Path, monkeypatch: pytest.MonkeyPatch, executable: str
) -> None:
    module, inputs, expected = _compiled_alone(cache, monkeypatch)
    monkeypatch.setenv("IRKIT_COMPILE_JOBS", "2")
    monkeypatch.setattr(host.sys, "executable", executable)
    exe = irkit.compile(module, backend="cpu")
    for a, b in zip(expected, exe(*inputs), strict=True):
        np.testing.assert_array_equal(a, b)
