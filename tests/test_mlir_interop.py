"""Interop with a real mlir-opt (Debian's mlir-22-tools): irkit's generic-form IR is valid
MLIR, and what mlir-opt prints back parses in irkit to a structurally identical module."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import irkit
from irkit.frontend.mlir import parse_mlir
from irkit.ir import to_text


def find_mlir_opt() -> str | None:
    for name in ("mlir-opt", "mlir-opt-22", "/usr/lib/llvm-22/bin/mlir-opt"):
        if path := shutil.which(name):
            return path
    return None


MLIR_OPT = find_mlir_opt()
pytestmark = pytest.mark.skipif(
    MLIR_OPT is None, reason="mlir-opt not installed (apt-get install mlir-22-tools)"
)


def test_mlir_opt_accepts_graph_ir_and_irkit_reads_it_back(example: Path) -> None:
    module = irkit.load(example)
    generic = to_text(module, generic=True)
    r = subprocess.run(
        [MLIR_OPT, "--allow-unregistered-dialect", "--mlir-print-op-generic", "-"],
        input=generic, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    # mlir-opt drops SSA names and sorts dictionary keys; the IR itself must be unchanged.
    back = parse_mlir(r.stdout, "from-mlir-opt.mlir")
    assert back.is_structurally_equivalent(module), to_text(back)


def test_mlir_opt_accepts_lowered_loop_ir(example: Path) -> None:
    """The loop level is upstream MLIR (func, scf, memref, arith, math): a real mlir-opt
    verifies it without irkit's dialects, and what it prints back reads in irkit unchanged;
    reshapes made views (`reshape-views`: transformer_block's) and buffers placed in an
    arena (`share-buffers`: `memref.view`) are MLIR's memref ops."""
    from irkit.pipelines import apply_passes, parse_passes

    spec = "lower-graph-to-loops,reshape-views,share-buffers"
    lowered = apply_passes(irkit.load(example), parse_passes(spec))
    r = subprocess.run(
        [MLIR_OPT, "--verify-each", "--mlir-print-op-generic", "-"],
        input=to_text(lowered, generic=True), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    back = parse_mlir(r.stdout, "from-mlir-opt.mlir")
    assert back.is_structurally_equivalent(lowered), to_text(back)[:2000]


def test_mlir_opt_accepts_gpu_mapped_ir(example: Path) -> None:
    """The GPU-mapped level stays upstream too (gpu.block_id/thread_id/barrier, shared memory
    as a memref.global in address space 3): a real mlir-opt verifies it, and irkit reads
    back what it prints."""
    from irkit.pipelines import apply_passes, parse_passes

    mapped = apply_passes(irkit.load(example), parse_passes("default-cuda"))
    r = subprocess.run(
        [MLIR_OPT, "--verify-each", "--mlir-print-op-generic", "-"],
        input=to_text(mapped, generic=True), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    back = parse_mlir(r.stdout, "from-mlir-opt.mlir")
    assert back.is_structurally_equivalent(mapped), to_text(back)[:2000]
