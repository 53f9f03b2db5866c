"""The CPU backend's machine-code cache (`irkit.codegen.host.jit`): a module compiled once is
not optimized or code-generated again, in any process; a damaged entry is compiled afresh."""

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
    return tmp_path / "llvm"


def test_a_cached_module_skips_optimization_and_computes_the_same(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = irkit.load("examples/mlp.graph", {"B": 4, "D": 32, "F": 64})
    inputs = random_inputs(module, seed=3)
    first = irkit.compile(module, backend="cpu")(*inputs)
    entries = list(cache.iterdir())
    assert len(entries) == 1 and entries[0].suffix == ".o"

    def no_optimizing(text: str):
        raise AssertionError("optimized although cached")

    monkeypatch.setattr(host, "optimize", no_optimizing)
    again = irkit.compile(module, backend="cpu")(*inputs)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_damaged_entry_is_compiled_again(cache: Path) -> None:
    module = irkit.load("examples/softmax.graph", {"R": 4, "C": 16})
    inputs = random_inputs(module, seed=1)
    expected = irkit.compile(module, backend="cpu")(*inputs)
    (entry,) = cache.iterdir()
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    again = irkit.compile(module, backend="cpu")(*inputs)
    np.testing.assert_array_equal(expected[0], again[0])
    assert host.read("llvm", entry.name) is not None  # rewritten whole


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
