"""The printed CUDA C compiled for the host: the `cuda-host` backend's code generator.

The translation unit is exactly what `-t cuda` prints and NVRTC compiles (`cuda_source`),
compiled by the host C++ compiler with `cuda_host_include/irkit_cuda_host.h` force-included:
that header defines the CUDA built-ins (thread geometry, `__syncthreads`, `__shared__`, the
half types, the vector types, bit casts) and runs each block's threads as fibers with a real
barrier. After the kernels come one small launcher per kernel (`irkit_host_<name>`), which
casts the argument pointers to the kernel's parameter types and runs the grid. A printer
bug that NVRTC accepts (a wrong index, a precedence slip, a missing barrier in the text)
computes a wrong answer here, which the reference catches: a second check of the GPU path,
independent of the lockstep interpretation of the IR.

Shared libraries are cached on disk (kind "cuda-host") under a key of the source, the
header, the compiler's version and its flags.
"""

from __future__ import annotations

import _ctypes
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import OrderedDict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from xdsl.dialects import func, gpu
from xdsl.dialects.builtin import MemRefType, ModuleOp

from irkit.codegen import disk_cache
from irkit.codegen.cuda import CudaPrinter, cuda_source, gpu_kernels, index_type_for
from irkit.codegen.cuda_tma import map_layout
from irkit.dialects.warp_tma import tensor_maps
from irkit.errors import IrkitError

INCLUDE = Path(__file__).parent / "cuda_host_include"
HEADER = INCLUDE / "irkit_cuda_host.h"
FLAGS = ("-std=c++17", "-O1", "-fPIC", "-shared", "-fno-strict-aliasing", "-w")
"""No -ffast-math and no -march: the host's code keeps IEEE semantics, as NVRTC's does
(except the contraction of a*b+c into an FMA, which both may do)."""

STATUS = {
    1: "a barrier reached by only some threads of a block (or threads waiting at different "
    "barriers)",
    2: "no memory for the fibers of a block",
    3: "a barrier outside a fiber (irkit thought the kernel had none)",
    4: "a thread with more than 64 cp.async copies or wgmma ops in flight, a block with more "
    "than 512 TMA copies in flight, or a copy of more than 16 bytes",
    5: "threads waiting on an mbarrier whose phase never completes (on a GPU, a kernel that "
    "never ends)",
    6: "a TMA copy still in flight when its block ended (no thread waited on its mbarrier)",
    7: "a multicast copy or remote arrival naming a block outside the cluster, or one that "
    "has ended (no cluster barrier kept it alive), or a grid that is not whole clusters",
}


def compiler() -> str | None:
    """The host C++ compiler: $CXX, else g++, else c++ (None where there is none)."""
    for candidate in (os.environ.get("CXX"), "g++", "c++"):
        if candidate and shutil.which(candidate):
            return candidate
    return None


@cache
def compiler_version(cxx: str) -> str:
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0].strip() if out.stdout else cxx


def launcher(name: str, fn: func.FuncOp, printer: CudaPrinter) -> str:
    """`irkit_host_<name>(args, geometry, fibers)`: the kernel on the argument pointers."""
    casts = []
    for i, t in enumerate(fn.function_type.inputs):
        assert isinstance(t, MemRefType)
        casts.append(f"({printer.type_name(t.element_type)}*)a[{i}]")
    maps = ""
    for j, m in enumerate(tensor_maps(fn)):  # from the buffer's address, as on a GPU
        layout = map_layout(fn, m)
        dims = ", ".join(f"{d}ull" for d in layout.dims)
        box = ", ".join(f"{b}u" for b in layout.box)
        strides = ", ".join(f"{d}ull" for d in layout.strides) or "0ull"
        maps += (
            f"  static const unsigned long long dims{j}[] = {{{dims}}};\n"
            f"  static const unsigned long long strides{j}[] = {{{strides}}};\n"
            f"  static const unsigned box{j}[] = {{{box}}};\n"
        )
        casts.append(
            f"irkit_host::tensor_map(a[{m.arg}], {layout.itemsize}u, {len(layout.dims)}u, "
            f"dims{j}, strides{j}, box{j}, {layout.swizzle}u)"
        )
    return (
        f"\nstatic void irkit_body_{name}(void* p) {{\n"
        f"  void** a = (void**)p;\n  (void)a;\n{maps}  {name}({', '.join(casts)});\n}}\n"
        f'extern "C" int irkit_host_{name}(void** args, const unsigned* geometry, int fibers) {{\n'
        f"  return irkit_host::launch(geometry, fibers, irkit_body_{name}, args);\n}}\n"
    )


def host_source(module: ModuleOp) -> str:
    """The CUDA C of every kernel (as `-t cuda` prints it), then the launchers."""
    printer = CudaPrinter(index_type_for(gpu_kernels(module)))
    launchers = "".join(launcher(fn.sym_name.data, fn, printer) for fn in gpu_kernels(module))
    return cuda_source(module) + "\n// --- cuda-host launchers ---" + launchers


def has_barrier(fn: func.FuncOp) -> bool:
    """Whether the kernel's threads must meet: a barrier, or a warp-collective op (an mma
    or a shuffle, whose host emulation waits for every lane; an asynchronous copy, whose
    per-thread queue lives with the fibers)."""
    from irkit.dialects.warp import WARP_COLLECTIVES
    from irkit.dialects.warp_async import ASYNC_COPY_OPS
    from irkit.dialects.warp_tma import TMA_OPS

    kinds = (gpu.BarrierOp, *WARP_COLLECTIVES, *ASYNC_COPY_OPS, *TMA_OPS)
    return any(isinstance(op, kinds) for op in fn.walk())


@dataclass
class HostLibrary:
    """A compiled program: one launcher per kernel, called through ctypes (which lets go of
    the GIL while a kernel runs). `image` is the shared library's bytes, its file removed
    once loaded."""

    key: str
    image: bytes
    library: ctypes.CDLL

    def launcher(self, name: str):
        fn = getattr(self.library, f"irkit_host_{name}")
        fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_uint), ctypes.c_int]
        fn.restype = ctypes.c_int
        return fn

    def reload(self) -> HostLibrary:
        """The same machine code loaded again, at other addresses (a copy's placement)."""
        return HostLibrary(self.key, self.image, _load(self.key, self.image))

    def __del__(self) -> None:
        """The library unloaded once nothing holds it, and with it (its destructor) the
        unloading thread's fiber stacks: attribution and fidelity load many copies of every
        program, and each copy kept held the process's memory maps, 512 for a block of 256
        threads (guard pages), of the 65530 Linux allows (fidelity on mlp ran out after 674
        copies: 'failed to map segment from shared object')."""
        if sys.is_finalizing():
            return
        try:
            _ctypes.dlclose(self.library._handle)
        except (AttributeError, OSError):
            pass


def _load(key: str, image: bytes) -> ctypes.CDLL:
    """`image` loaded as a shared library of its own (the loader shares one loaded twice
    from one path), its file and folder removed once loaded."""
    with tempfile.TemporaryDirectory(prefix="irkit-cuda-host-") as folder:
        so = Path(folder) / f"{key}.so"
        so.write_bytes(image)
        return ctypes.CDLL(str(so))


_LOADED: OrderedDict[str, HostLibrary] = OrderedDict()
"""Libraries loaded by this process, by cache key, the most recently used last: a program
compiled again (attribution's variants often share one) is loaded once."""
LOADED_KEPT = 16
"""Libraries `_LOADED` holds at most. Each keeps its fiber stacks while loaded (768 memory
maps for a block of 384 threads, of the 65530 Linux allows); a test worker that had compiled
a few hundred distinct programs (the warp-specialized kernels among them) crashed in
llvmlite's loader with 'failed to map segment'. An evicted library is unloaded once no
program holds it."""


def compile_host(source: str, defines: tuple[str, ...] = ()) -> HostLibrary:
    """`source` compiled to a shared library and loaded; one-line IrkitError naming the
    kernel and line where the compiler refuses it. `defines`: macros for the header (e.g.
    IRKIT_UCONTEXT, the portable fiber switch)."""
    cxx = compiler()
    if cxx is None:
        raise IrkitError("cuda-host needs a host C++ compiler (g++, or $CXX); none was found")
    flags = (*FLAGS, *(f"-D{d}" for d in defines))
    key = disk_cache.cache_key(source, HEADER.read_text(), compiler_version(cxx), flags)
    if key in _LOADED:
        _LOADED.move_to_end(key)
        return _LOADED[key]
    image = disk_cache.read("cuda-host", key)
    if image is None:
        with tempfile.TemporaryDirectory(prefix="irkit-cuda-host-") as folder:
            cu, so = Path(folder) / "program.cu", Path(folder) / "program.so"
            cu.write_text(source)
            command = [cxx, *flags, "-include", str(HEADER), "-I", str(INCLUDE), "-x", "c++",
                       str(cu), "-o", str(so)]  # fmt: skip
            out = subprocess.run(command, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                raise IrkitError(_error_line(out.stderr, source, cxx))
            image = so.read_bytes()
        disk_cache.write("cuda-host", key, image)
    library = HostLibrary(key, image, _load(key, image))
    _LOADED[key] = library
    while len(_LOADED) > LOADED_KEPT:
        _LOADED.popitem(last=False)
    return library


def _error_line(log: str, source: str, cxx: str) -> str:
    """The compiler's first error as one line: the kernel, the source line and the message."""
    match = re.search(r"program\.cu:(\d+):(?:\d+:)?\s*(?:fatal )?error:\s*(.*)", log)
    if match is None:
        first = next((ln for ln in log.splitlines() if ln.strip()), "no message")
        return f"{cxx} could not compile the CUDA C for the host: {first.strip()}"
    line = int(match.group(1))
    lines = source.splitlines()
    kernel = "the prelude"
    for text in lines[:line]:
        head = re.match(r"// (\w+): grid", text)
        if head:
            kernel = head.group(1)
    code = lines[line - 1].strip() if line <= len(lines) else ""
    return f"{cxx} could not compile {kernel} for the host: line {line}: {match.group(2)} | {code}"
