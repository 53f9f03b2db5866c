"""The host CPU as an LLVM target: target machines, the O3 pipeline, IR and assembly text."""

from __future__ import annotations

import ctypes.util
import os
from dataclasses import dataclass
from functools import cache

import llvmlite.binding as llvm
from xdsl.dialects.builtin import ModuleOp

from irkit.codegen.disk_cache import cache_key, read, write
from irkit.codegen.llvm import to_llvm


@dataclass(frozen=True)
class HostTarget:
    """The host CPU as LLVM names it."""

    cpu: str
    features: str

    def machine(self) -> llvm.TargetMachine:
        """A new O3 target machine for this CPU. Each MCJIT engine gets its own: an engine
        takes its target machine over, and sharing one between engines corrupts memory."""
        return llvm.Target.from_default_triple().create_target_machine(
            cpu=self.cpu, features=self.features, opt=3, codemodel="jitdefault"
        )


@cache
def host_target() -> HostTarget:
    """The host CPU and its features; on an AVX-512 host, LLVM's vectorizers may use 512-bit
    vectors (LLVM prefers 256 bits on some such CPUs; a softmax's exp loop then ran at 1.5x the
    time) unless IRKIT_VECTOR_BITS=256 asks for the narrower ones."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = llvm.get_host_cpu_features().flatten()
    if "+avx512f" in features.split(",") and os.environ.get("IRKIT_VECTOR_BITS", "512") != "256":
        features += ",-prefer-256-bit"
    return HostTarget(llvm.get_host_cpu_name(), features)


OPTIMIZATION = "O3, loop and SLP vectorization, loop unrolling"
"""What `optimize` runs: part of the machine-code cache's key."""


def jit(source: str) -> llvm.ExecutionEngine:
    """An MCJIT engine for LLVM IR text, optimized by `optimize` for the host, its machine
    code cached on disk (`disk_cache`, kind "llvm") under a key of the IR, LLVM's version, the
    host CPU and features, and the optimization: a module compiled before, in any process,
    skips optimization and code generation (its IR is still parsed). Symbols (libm,
    libgomp, linked constants) are resolved when the engine is finalized, as for a fresh
    compile."""
    target = host_target()
    key = cache_key(source, llvm.llvm_version_info, target.cpu, target.features, OPTIMIZATION)
    name = f"{key}.o"
    cached = read("llvm", name)
    module = llvm.parse_assembly(source) if cached is not None else optimize(source)
    engine = llvm.create_mcjit_compiler(module, target.machine())

    def notify(_module: llvm.ModuleRef, data: bytes) -> None:
        if cached is None:
            write("llvm", name, data)

    engine.set_object_cache(notify, lambda _module: cached)
    engine.finalize_object()
    return engine


def optimize(text: str) -> llvm.ModuleRef:
    """Parse, verify and optimize LLVM IR with the O3 pipeline for the host."""
    module = llvm.parse_assembly(text)
    module.verify()
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    tuning.loop_unrolling = True
    builder = llvm.create_pass_builder(host_target().machine(), tuning)
    builder.getModulePassManager().run(module, builder)
    return module


@cache
def thread_pool() -> bool:
    """Whether threaded loops run on libgomp's persistent thread pool: libgomp is found and
    loaded for the JIT to resolve (`GOMP_parallel`), and IRKIT_THREAD_POOL is not 0. Without
    it, each threaded loop creates and joins POSIX threads. The pool's threads spin briefly
    before they sleep (GOMP_SPINCOUNT=10000 unless set; libgomp's default spins ~100x
    longer, which takes the cores from other work on a loaded machine). Measured on 2 cores
    against create/join per loop: layernorm 512x768 63-66 us against 87-125 us, conv_block
    269-312 us against 329-377 us, softmax and gemm within noise."""
    if os.environ.get("IRKIT_THREAD_POOL", "1") == "0":
        return False
    path = ctypes.util.find_library("gomp")
    if path is None:
        return False
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # read when libgomp is loaded
    try:
        llvm.load_library_permanently(path)
    except RuntimeError:
        return False
    return True


def llvm_ir(module: ModuleOp) -> str:
    """The LLVM IR irkit generates for a loop-level module, for the host target."""
    machine = host_target().machine()
    ir_module = to_llvm(module, pool=thread_pool())
    ir_module.triple = machine.triple
    ir_module.data_layout = str(machine.target_data)
    return str(ir_module)


def host_assembly(module: ModuleOp) -> str:
    """Host assembly for a loop-level module after the O3 pipeline."""
    return host_target().machine().emit_assembly(optimize(llvm_ir(module)))
