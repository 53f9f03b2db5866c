"""What the host CPU offers the CPU passes, from LLVM's view of it (llvmlite): its vector width
and vector registers. Below the passes and the code generators alike, so that a pass can shape
its code for the host (`cpu-tile-matmul{vector-bits=0 nr=0}`) without importing codegen."""

from __future__ import annotations

import os
from functools import cache


@cache
def cpu_features() -> frozenset[str]:
    """The host CPU's features as LLVM names them, each with its sign (`+avx2`, `-avx512f`)."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    return frozenset(llvm.get_host_cpu_features().flatten().split(","))


def narrow_vectors() -> bool:
    """Whether IRKIT_VECTOR_BITS=256 asks an AVX-512 host for 256-bit vectors (the code
    generator's `prefer-256-bit`, and `vector_bits`)."""
    return os.environ.get("IRKIT_VECTOR_BITS", "512") == "256"


def vector_bits() -> int:
    """The widest vector the host's code uses: 512 with AVX-512 (256 under `narrow_vectors`),
    256 with AVX or AVX2, else 128."""
    features = cpu_features()
    if "+avx512f" in features:
        return 256 if narrow_vectors() else 512
    return 256 if "+avx" in features else 128


def instruction_set() -> str:
    """The host's widest vector extension by its usual name: "AVX-512", "AVX2", "AVX",
    else the architecture (an AArch64 host: "aarch64")."""
    import platform

    features = cpu_features()
    for flag, name in (("+avx512f", "AVX-512"), ("+avx2", "AVX2"), ("+avx", "AVX")):
        if flag in features:
            return name
    return platform.machine() or "unknown"


def vector_registers() -> int:
    """Vector registers the host's ISA names: 32 with AVX-512 (zmm0-31, and ymm0-31 through
    AVX-512VL), else 16."""
    return 32 if "+avx512f" in cpu_features() else 16
