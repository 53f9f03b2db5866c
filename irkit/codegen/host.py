"""The host CPU as an LLVM target: target machines, the O3 pipeline, IR and assembly text."""

from __future__ import annotations

import ctypes.util
import hashlib
import os
import pickle
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from subprocess import DEVNULL, PIPE, Popen

import llvmlite.binding as llvm
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import ModuleOp

from irkit.codegen import llvm_compile, pool
from irkit.codegen.disk_cache import cache_key, read, write
from irkit.codegen.llvm import LLVMEmitter, global_ops, to_llvm
from irkit.codegen.llvm_compile import OPTIMIZATION
from irkit.host import narrow_vectors
from irkit.ir import structure_key
from irkit.loops import callees, kernels


@dataclass(frozen=True)
class HostTarget:
    """The host CPU as LLVM names it."""

    cpu: str
    features: str

    def machine(self) -> llvm.TargetMachine:
        """A new O3 target machine for this CPU (`llvm_compile.machine`)."""
        return llvm_compile.machine(self.cpu, self.features)


@cache
def host_target() -> HostTarget:
    """The host CPU and its features; on an AVX-512 host, LLVM's vectorizers may use 512-bit
    vectors (LLVM prefers 256 bits on some such CPUs; a softmax's exp loop then ran at 1.5x the
    time) unless IRKIT_VECTOR_BITS=256 asks for the narrower ones."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = llvm.get_host_cpu_features().flatten()
    if "+avx512f" in features.split(","):
        # said either way: Intel's tuning prefers 256 bits, AMD's Zen 4/5 prefer 512 (there
        # IRKIT_VECTOR_BITS=256 changed nothing until it was said)
        features += ",+prefer-256-bit" if narrow_vectors() else ",-prefer-256-bit"
    return HostTarget(llvm.get_host_cpu_name(), features)


def jit(source: str, objects: Sequence[bytes] = ()) -> llvm.ExecutionEngine:
    """An MCJIT engine for LLVM IR text, optimized by `optimize` for the host, its machine
    code cached on disk (`disk_cache`, kind "llvm") under a key of the IR, LLVM's version, the
    host CPU and features, and the optimization: a module compiled before, in any process,
    skips optimization and code generation (its IR is still parsed). Symbols (libm,
    libgomp, linked constants, and the symbols of `objects`: machine code compiled apart)
    are resolved when the engine is finalized, as for a fresh compile."""
    name, cached = _cached_object(source)
    module = llvm.parse_assembly(source) if cached is not None else optimize(source)
    engine = llvm.create_mcjit_compiler(module, host_target().machine())

    def notify(_module: llvm.ModuleRef, data: bytes) -> None:
        if cached is None:
            write("llvm", name, data)

    engine.set_object_cache(notify, lambda _module: cached)
    for data in objects:  # machine code compiled apart (kernels), linked before finalizing
        engine.add_object_file(llvm.ObjectFileRef.from_data(data))
    engine.finalize_object()
    return engine


KERNEL_PLACEHOLDER = "irkit.kernel"
"""The name a kernel is emitted under before its text names its symbol."""


@dataclass(frozen=True)
class KernelCode:
    """One kernel as its own LLVM module: named by the hash of its text, so that a kernel
    with the same code in another program (or position, or process) is the same symbol,
    compiled once and found in the machine-code cache."""

    symbol: str
    text: str
    hash: str


@dataclass
class HostProgram:
    """A loop-level module JIT-compiled as a driver module plus one object per distinct
    kernel, all in one MCJIT engine."""

    engine: llvm.ExecutionEngine
    driver: str
    """The LLVM IR of everything but the kernels."""
    kernels: dict[str, KernelCode]
    """By kernel (`func.func`) name."""

    def symbol(self, name: str) -> str:
        """The native symbol of the function called `name` in the module."""
        return self.kernels[name].symbol if name in self.kernels else name

    def text(self) -> str:
        """The program's LLVM IR: the driver module, then each distinct kernel's."""
        distinct = {k.symbol: k.text for k in self.kernels.values()}
        return "\n".join([self.driver, *distinct.values()])


_KERNELS: dict[tuple, KernelCode] = {}
"""Kernel code by kernel structure, in this process: a kernel shared by many programs (the
variants attribution compiles) is translated to LLVM IR once."""
_OBJECTS: dict[str, bytes] = {}
"""Machine code by kernel symbol, in this process."""
MACHINE_ENTRY = "optimized-v1"
"""The disk cache's entry beside a kernel's object holding `_optimized_hash` (versioned: a
change to the hash's definition must not reuse old entries)."""
_MACHINE: dict[str, str] = {}
"""By kernel symbol, a hash of the kernel after O3 (its own symbol left out): kernels whose
optimized IR is equal get the same machine code, whatever IR they started from."""


def forget_compiled() -> None:
    """Drop this process's kernel code and machine code (the disk cache stays): the next
    compile starts as a new process would."""
    _KERNELS.clear()
    _OBJECTS.clear()
    _MACHINE.clear()


def _kernel_code(
    module: ModuleOp, fn: func.FuncOp, pool: str, globals_: dict[str, memref.GlobalOp]
) -> KernelCode:
    """The kernel's code, translated unless a kernel of the same structure, reading globals
    and calling scalar functions of the same structure, was translated before in this
    process."""
    read_globals = {
        op.name_.root_reference.data for op in fn.walk() if isinstance(op, memref.GetGlobalOp)
    }
    key = (
        structure_key(fn),
        pool,
        *[structure_key(globals_[g]) for g in sorted(read_globals)],
        *[structure_key(f) for f in callees(module, fn)],
    )
    if key not in _KERNELS:
        ir_module = LLVMEmitter(module, "kernel", pool, names=False).emit_kernel(
            fn, KERNEL_PLACEHOLDER
        )
        _target_module(ir_module)
        text = str(ir_module)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        symbol = f"irkit.k.{digest}"
        _KERNELS[key] = KernelCode(
            symbol, text.replace(f'@"{KERNEL_PLACEHOLDER}', f'@"{symbol}'), digest
        )
    return _KERNELS[key]


def _target_module(ir_module) -> None:
    machine = host_target().machine()
    ir_module.triple = machine.triple
    ir_module.data_layout = str(machine.target_data)


def _cached_object(text: str) -> tuple[str, bytes | None]:
    target = host_target()
    name = cache_key(text, llvm.llvm_version_info, target.cpu, target.features, OPTIMIZATION)
    return f"{name}.o", read("llvm", f"{name}.o")


def _kernel_object(code: KernelCode) -> bytes:
    """The kernel's machine code: from this process, the disk cache, or compiled now (with
    its optimized IR's hash, `_MACHINE`, cached beside it)."""
    if code.symbol not in _OBJECTS:
        name, data = _cached_object(code.text)
        machine = read("llvm", f"{name}.{MACHINE_ENTRY}")
        if data is None or machine is None:
            target = host_target()
            data, hashed = llvm_compile.compile_kernel(
                code.text, code.symbol, target.cpu, target.features
            )
            _keep(code, name, data, hashed)
        else:
            _OBJECTS[code.symbol] = data
            _MACHINE[code.symbol] = machine.decode()
    return _OBJECTS[code.symbol]


def _keep(code: KernelCode, name: str, data: bytes, machine: str) -> None:
    """A kernel compiled now: in this process and in the disk cache."""
    write("llvm", name, data)
    write("llvm", f"{name}.{MACHINE_ENTRY}", machine.encode())
    _OBJECTS[code.symbol] = data
    _MACHINE[code.symbol] = machine


PARALLEL_MIN_KERNELS = 4
"""With fewer kernels to compile than this, all are compiled in this process."""


def compile_jobs() -> int:
    """How many processes compile kernels at once: `IRKIT_COMPILE_JOBS`, by default the CPUs
    this process may run on (one where a timer is pinned to one)."""
    text = os.environ.get("IRKIT_COMPILE_JOBS", "").strip()
    if text.isdigit():
        return max(1, int(text))
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


def compile_kernels(codes: Sequence[KernelCode]) -> None:
    """Compile the kernels of `codes` found neither in this process nor in the disk cache,
    `compile_jobs()` processes at once: this one and workers running `llvm_compile` as a
    script (`python -I`: the user's main module is not imported again, and nothing is
    forked from a process whose thread pool is running), each given a share balanced by
    the size of its texts. The code is what this process would make: the same LLVM, the
    same target, passed explicitly. A worker that cannot start or fails leaves its share
    to this process."""
    missing: dict[str, tuple[KernelCode, str]] = {}
    for code in codes:
        if code.symbol in _OBJECTS or code.symbol in missing:
            continue
        name, data = _cached_object(code.text)
        if data is None or read("llvm", f"{name}.{MACHINE_ENTRY}") is None:
            missing[code.symbol] = (code, name)
    if len(missing) < PARALLEL_MIN_KERNELS:
        return
    jobs = min(compile_jobs(), len(missing) // 2)  # two kernels a process at least
    if jobs < 2:
        return
    shares: list[list[tuple[KernelCode, str]]] = [[] for _ in range(jobs)]
    loads = [0] * jobs
    for item in sorted(missing.values(), key=lambda i: -len(i[0].text)):
        least = loads.index(min(loads))
        shares[least].append(item)
        loads[least] += len(item[0].text)
    target = host_target()
    workers = [_start_worker(share, target) for share in shares[1:]]
    for share in shares[:1] + [s for s, w in zip(shares[1:], workers, strict=True) if w is None]:
        for code, _ in share:
            _kernel_object(code)
    for share, worker in zip(shares[1:], workers, strict=True):
        if worker is None:
            continue
        results = _results(worker)
        if results is None or len(results) != len(share):
            results = [None] * len(share)  # compiled here instead
        for (code, name), result in zip(share, results, strict=True):
            if result is None:
                _kernel_object(code)
            else:
                _keep(code, name, *result)


def _start_worker(share: list[tuple[KernelCode, str]], target: HostTarget) -> Popen | None:
    """A compile worker given `share` on its standard input; None where it cannot start."""
    batch = pickle.dumps((target.cpu, target.features, [(c.text, c.symbol) for c, _ in share]))
    try:
        worker = Popen(
            [sys.executable, "-I", llvm_compile.__file__], stdin=PIPE, stdout=PIPE, stderr=DEVNULL
        )
    except OSError:
        return None
    assert worker.stdin is not None
    try:
        with worker.stdin:
            worker.stdin.write(batch)
    except OSError:  # it exited before reading its share
        _results(worker)
        return None
    return worker


def _results(worker: Popen) -> list | None:
    """What a worker wrote, once it has exited; None unless it succeeded."""
    assert worker.stdout is not None
    with worker.stdout:
        out = worker.stdout.read()
    results = pickle.loads(out) if worker.wait() == 0 and out else None
    return results if isinstance(results, list) else None


def machine_hash(symbol: str) -> str:
    """The kernel's optimized-code identity (`llvm_compile.optimized_hash`), once compiled."""
    return _MACHINE[symbol]


def jit_program(module: ModuleOp) -> HostProgram:
    """JIT-compile a loop-level module for the host: each kernel as its own module, named
    and cached by its code (`KernelCode`), the driver as another, linked in one engine.
    A kernel compiled before, in this process or any other, costs a lookup."""
    pool = thread_pool()
    globals_ = global_ops(module)
    codes = {fn.sym_name.data: _kernel_code(module, fn, pool, globals_) for fn in kernels(module)}
    ir_module = LLVMEmitter(module, "irkit", pool, names=False).emit_driver(
        {name: code.symbol for name, code in codes.items()}
    )
    _target_module(ir_module)
    driver = str(ir_module)
    distinct = {c.symbol: c for c in codes.values()}
    compile_kernels(list(distinct.values()))
    engine = jit(driver, [_kernel_object(code) for code in distinct.values()])
    return HostProgram(engine, driver, codes)


def relink(program: HostProgram) -> HostProgram:
    """The same program linked again into a new engine: its own copy of the machine code, at
    the addresses a fresh compile would get, with nothing translated or compiled again (the
    kernels' objects are this process's). Attribution times several such copies of every
    program."""
    distinct = {c.symbol: c for c in program.kernels.values()}
    engine = jit(program.driver, [_kernel_object(code) for code in distinct.values()])
    return HostProgram(engine, program.driver, program.kernels)


def optimize(text: str) -> llvm.ModuleRef:
    """Parse, verify and optimize LLVM IR with the O3 pipeline for the host."""
    target = host_target()
    return llvm_compile.optimize(text, target.cpu, target.features)


_POOL_ENGINE: list[llvm.ExecutionEngine] = []
"""irkit's thread pool's engine, kept for the life of the process (its workers run its code)."""


@cache
def install_pool() -> int:
    """JIT-compile irkit's thread pool (`irkit.codegen.pool`) once per process and make
    `pool.RUN` a symbol every later engine resolves; its address."""
    engine = llvm.create_mcjit_compiler(optimize(pool.runtime_ir()), host_target().machine())
    engine.finalize_object()
    _POOL_ENGINE.append(engine)
    address = engine.get_function_address(pool.RUN)
    llvm.add_symbol(pool.RUN, address)
    return address


@cache
def thread_pool() -> str:
    """Where threaded loops run (`LLVMEmitter.pool`), by IRKIT_THREAD_POOL:

    - "irkit" (the default, on Linux x86-64 and AArch64): irkit's own pool
      (`irkit.codegen.pool`), whose caller claims chunks with its workers and never waits
      for one that has not woken. On the 2-core development VM, interleaved with
      onnxruntime's calls, a 512x1024 softmax on two threads took 0.58-0.76 ms on libgomp's
      pool (every call waited for a sleeping worker to wake) against 0.30 ms on one thread;
    - "gomp": libgomp's persistent pool (`GOMP_parallel`), where libgomp is found; its
      threads spin briefly before they sleep (GOMP_SPINCOUNT=10000 unless set; libgomp's
      default spins ~100x longer, which takes the cores from other work on a loaded
      machine). Measured on 2 cores against create/join per loop: layernorm 512x768 63-66
      us against 87-125 us, conv_block 269-312 us against 329-377 us;
    - "0" (or a pool this machine lacks): "", POSIX threads created and joined per loop."""
    asked = os.environ.get("IRKIT_THREAD_POOL", "irkit")
    if asked in ("irkit", "1") and pool.supported():
        install_pool()
        return "irkit"
    if asked not in ("gomp", "irkit", "1"):
        return ""
    path = ctypes.util.find_library("gomp")
    if path is None:
        return ""
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # read when libgomp is loaded
    try:
        llvm.load_library_permanently(path)
    except RuntimeError:
        return ""
    return "gomp"


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
