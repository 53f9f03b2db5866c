"""`cuda-host`: the printed CUDA C, compiled by the host C++ compiler and run on the CPU.

The second check of the GPU path, independent of `cuda-sim`: lockstep interprets the
GPU-mapped IR, this runs the text that NVRTC compiles (`irkit.codegen.cuda_host`). Each
block's threads are fibers with a real barrier, blocks run one after another, and the
driver's plan is the one every GPU backend replays. Kernels are still compiled by NVRTC
too, so resources and NVRTC's errors are the same as on `cuda` and `cuda-sim`.

Every buffer a kernel sees lies between two red zones of 0xFF bytes (NaN in every float
type): a kernel that writes outside a buffer is named with the buffer after its launch,
and one that reads outside it reads NaN, which the reference check catches. Times are the
host's (labelled so in records), never a GPU's.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from copy import copy as shallow_copy
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from irkit.errors import IrkitError
from irkit.runtime.backend import Step
from irkit.runtime.gpu import GpuKernel, SimulatedBound, SimulatedExecutable

ALIGN = 256
"""Where each buffer starts, as cudaMalloc's buffers do (a vector access must be aligned)."""


class Guarded(np.ndarray):
    """A buffer between two red zones (`raw` holds both, the data is `span` bytes from
    `offset`)."""

    raw: np.ndarray
    offset: int
    span: int

    def __array_finalize__(self, obj: np.ndarray | None) -> None:
        """A view of a guarded buffer (a driver's reshape view, or a buffer in the driver's
        arena, `share-buffers`) has its red zones: those around the whole buffer."""
        raw = getattr(obj, "raw", None)
        if raw is None or obj is None:
            return
        lo, hi = raw.ctypes.data, raw.ctypes.data + raw.nbytes
        if lo <= self.ctypes.data and self.ctypes.data + self.nbytes <= hi:
            self.raw, self.offset, self.span = raw, obj.offset, obj.span  # type: ignore[attr-defined]

    def intact(self) -> bool:
        raw, start, end = self.raw, self.offset, self.offset + self.span
        return bool((raw[:start] == 0xFF).all() and (raw[end:] == 0xFF).all())


def guarded(shape: tuple[int, ...], dtype: np.dtype, fill: np.ndarray | None = None) -> Guarded:
    """A buffer of `shape` with red zones of about its own size on each side (256 B to
    64 KiB): NaN-filled, or a copy of `fill`."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    pad = -(-min(max(nbytes, ALIGN), 64 * 1024) // ALIGN) * ALIGN
    raw = np.full(nbytes + 2 * pad + ALIGN, 0xFF, np.uint8)
    offset = -raw.ctypes.data % ALIGN + pad
    out = raw[offset : offset + nbytes].view(dtype).reshape(shape).view(Guarded)
    out.raw, out.offset, out.span = raw, offset, nbytes
    if fill is not None:
        np.copyto(out, fill)
    return out


class HostLauncher:
    """Runs a kernel's grid through its `irkit_host_<name>` launcher."""

    def __init__(self, kernels: list[GpuKernel], library: Any):
        from irkit.codegen.cuda_host import has_barrier

        self.library = library  # its launchers' code stays loaded while they may be called
        self.kernels: dict[str, tuple[Any, Any, int]] = {}
        for k in kernels:
            cluster = k.launch.get("cluster", 1)
            geometry = (ctypes.c_uint * 7)(*k.launch["grid"], *k.launch["block"], cluster)
            self.kernels[k.name] = (library.launcher(k.name), geometry, int(has_barrier(k.fn)))

    def launch(self, name: str, buffers: Sequence[np.ndarray]) -> None:
        from irkit.codegen.cuda_host import STATUS

        fn, geometry, fibers = self.kernels[name]
        args = (ctypes.c_void_p * len(buffers))(*[b.ctypes.data for b in buffers])
        status = fn(args, geometry, fibers)
        if status:
            raise IrkitError(f"cuda-host: {name}: {STATUS.get(status, f'status {status}')}")
        for i, b in enumerate(buffers):
            if isinstance(b, Guarded) and not b.intact():
                raise IrkitError(
                    f"cuda-host: {name} wrote outside its argument {i} "
                    f"({b.dtype}{list(b.shape)}): an index out of bounds"
                )


class CudaHostExecutable(SimulatedExecutable):
    backend = "cuda-host"

    def __init__(self, module: ModuleOp, kernels: list[GpuKernel], library: Any):
        super().__init__(module, kernels, HostLauncher(kernels, library))
        self.library = library
        self._constants: dict[int, Guarded] = {}

    def copy(self) -> CudaHostExecutable:
        """Another placement: the same library loaded again from its bytes (at other code
        addresses, as a fresh compile would place it), a launcher over that, its own
        constants; nothing printed or compiled again."""
        twin = shallow_copy(self)
        twin.library = self.library.reload()
        twin.launcher = HostLauncher(self.gpu_kernels, twin.library)
        twin._constants = {}
        return twin

    def buffer(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return guarded(shape, dtype)

    def constant(self, step: Step) -> np.ndarray:
        key = id(step)
        if key not in self._constants:
            self._constants[key] = guarded(step.constant.shape, step.constant.dtype, step.constant)
        return self._constants[key]

    def _env(
        self,
        arrays: Sequence[Any],
        out: Sequence[np.ndarray] | None,
        io: Sequence[np.ndarray] | None = None,
    ):
        env, outputs = super()._env(arrays, None, io)
        if io is None:  # shared buffers are another copy's, guarded already
            for arg in self.entry.body.block.args[: len(self.inputs)]:
                env[arg] = guarded(env[arg].shape, env[arg].dtype, env[arg])
        return env, outputs

    def __call__(self, *arrays: Any, out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        from irkit.runtime.backend import check_out

        targets = (
            check_out(f"@{self.entry.sym_name.data}", self.outputs, out)
            if out is not None
            else None
        )
        env, outputs = self._env(arrays, None)
        self.run_plan(env)
        if targets is None:
            return [o.view(np.ndarray) for o in outputs]
        for t, o in zip(targets, outputs, strict=True):
            np.copyto(t, o)
        return targets

    def bind(self, *arrays: Any, io: Sequence[np.ndarray] | None = None) -> SimulatedBound:
        bound = super().bind(*arrays, io=io)
        bound.outputs = [o.view(np.ndarray) for o in bound.outputs]
        return bound


class CudaHostBackend:
    """`cuda-host`: the CUDA C irkit prints, compiled for the host and run there (checking
    only: its times are the host's, not a GPU's)."""

    name = "cuda-host"
    default_pipeline = "default-cuda"
    timer = "perf_counter_ns (CUDA C run on the host CPU: not a GPU time)"

    def __init__(self, arch: str | None = "sm_90", defines: tuple[str, ...] = ()):
        self.arch = arch
        self.defines = defines

    def available(self) -> tuple[bool, str]:
        from irkit.codegen.cuda_host import compiler, compiler_version

        cxx = compiler()
        if cxx is None:
            return False, "no host C++ compiler (g++, or $CXX)"
        return True, f"the printed CUDA C compiled for the host by {compiler_version(cxx)}"

    def lower(self, module: ModuleOp) -> ModuleOp:
        from irkit.pipelines import lower_for_gpu

        return lower_for_gpu(module)

    def fingerprint(self) -> dict[str, Any]:
        from irkit.codegen.cuda_host import FLAGS, compiler, compiler_version
        from irkit.codegen.nvrtc import nvrtc_version

        cxx = compiler()
        return {
            "cuda_host": {
                "compiler": compiler_version(cxx) if cxx else None,
                "flags": " ".join(FLAGS),
                "arch": self.arch,
                "nvrtc": nvrtc_version(),
                "gpu": None,
            }
        }

    def ceilings(self) -> None:
        return None  # host times of emulated threads have no GPU roofline

    def compile(self, module: ModuleOp) -> CudaHostExecutable:
        from irkit.codegen.cuda_host import compile_host, host_source
        from irkit.runtime.gpu import build_kernels

        kernels = build_kernels(module, self.arch)
        library = compile_host(host_source(module), self.defines)
        return CudaHostExecutable(module, kernels, library)
