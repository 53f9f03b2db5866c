"""The CUDA backend: GPU-mapped IR -> CUDA C -> NVRTC cubin for the device's own
architecture -> cuda-python driver API (cuda.bindings.driver).

Every driver call's error code is checked and becomes one line naming the call (and the
kernel, for a launch). No driver library or no device: "no CUDA device available", and
`backend="auto"` falls back to the CPU and says so. A kernel that needs more threads or
shared memory than the device allows is refused before launch, naming the kernel.

Timing (see `GpuTimed`): CUDA events around each call of a sample, with the L2 cache flushed
before each call by writing a buffer twice the L2's size (read from the device), so every
call starts cold; `timer` in each record says so.

The device itself (the driver library, its attributes, nvidia-smi's clocks) is
`irkit.runtime.cuda_device`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from irkit.codegen.cuda_tma import MapLayout, map_layout
from irkit.dialects.warp_tma import TensorMap
from irkit.errors import IrkitError
from irkit.ir import entry_function
from irkit.loops import STATIC_SHARED_LIMIT
from irkit.runtime.backend import (
    Provenance,
    check_arrays,
    check_out,
    driver_plan,
    driver_specs,
    shared_io,
)
from irkit.runtime.ceilings import Ceilings
from irkit.runtime.cuda_device import (
    Device,
    cuda_driver,
    device,
    driver_call,
)
from irkit.runtime.gpu import GpuKernel, build_kernels


def cuda_ceilings(dev: Device) -> Ceilings:
    """The device's roofline: measured copy bandwidth (`copy_bandwidth`), and the FP32 FMA
    peak derived from its attributes (SMs x 128 FP32 lanes x 2 FLOPs x the maximum SM clock:
    Hopper's and Ampere's datasheet formula; not measured, and said so in `method`)."""
    import time

    if dev.ordinal in _CEILINGS:
        return _CEILINGS[dev.ordinal]
    sms = dev.attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
    clock_khz = dev.attribute("CU_DEVICE_ATTRIBUTE_CLOCK_RATE")
    _CEILINGS[dev.ordinal] = Ceilings(
        device=dev.name,
        bandwidth=copy_bandwidth(dev),
        flops=sms * 128 * 2 * clock_khz * 1e3,
        method="copy: 1 GiB device-to-device, median of 20, CUDA events, read + write counted; "
        f"fp32 peak derived, not measured: {sms} SMs x 128 lanes x 2 x {clock_khz / 1e3:.0f} MHz",
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        flops_source="derived",
    )
    return _CEILINGS[dev.ordinal]


_CEILINGS: dict[int, Ceilings] = {}
"""Per device ordinal, measured once per process."""


def copy_bandwidth(dev: Device, nbytes: int = 1 << 30, samples: int = 20) -> float:
    """The device's copy bandwidth in bytes/s, counting bytes read plus written: the median
    of `samples` device-to-device copies of `nbytes`, timed with events."""
    drv = cuda_driver()
    src, dst = (
        DeviceBuffer((nbytes,), np.dtype(np.uint8)),
        DeviceBuffer((nbytes,), np.dtype(np.uint8)),
    )
    src.poison()

    def copy() -> None:
        driver_call(
            "cuMemcpyDtoDAsync", drv.cuMemcpyDtoDAsync(dst.ptr, src.ptr, nbytes, dev.stream)
        )

    timed = GpuTimed(copy, dev)
    timed()
    seconds = float(np.median([timed.sample(1) for _ in range(samples)]))
    return 2 * nbytes / seconds


class DeviceBuffer:
    """Device memory for one array; freed when dropped."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype):
        self.shape, self.dtype = shape, np.dtype(dtype)
        self.nbytes = max(1, int(np.prod(shape)) * self.dtype.itemsize)
        self.ptr = int(driver_call("cuMemAlloc", cuda_driver().cuMemAlloc(self.nbytes)))

    def upload(self, array: np.ndarray) -> None:
        a = np.ascontiguousarray(array, self.dtype)
        driver_call("cuMemcpyHtoD", cuda_driver().cuMemcpyHtoD(self.ptr, a.ctypes.data, a.nbytes))

    def download(self, out: np.ndarray | None = None) -> np.ndarray:
        out = np.empty(self.shape, self.dtype) if out is None else out
        driver_call(
            "cuMemcpyDtoH", cuda_driver().cuMemcpyDtoH(out.ctypes.data, self.ptr, out.nbytes)
        )
        return out

    def poison(self) -> None:
        """Fill with NaN bits (0xFF bytes), so an element no kernel writes shows."""
        driver_call("cuMemsetD8", cuda_driver().cuMemsetD8(self.ptr, 0xFF, self.nbytes))

    def view(
        self, shape: tuple[int, ...], offset: int | None = None, dtype: np.dtype | None = None
    ) -> DeviceView:
        """The same memory with another shape (a driver's view, `reshape-views`); with
        `offset`, bytes of it as `dtype` (`share-buffers`)."""
        return DeviceView(self, shape, offset, dtype)

    def __del__(self) -> None:
        try:
            cuda_driver().cuMemFree(self.ptr)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class DeviceView(DeviceBuffer):
    """Another buffer's memory under another shape, as many elements; it keeps the buffer
    alive and frees nothing itself."""

    def __init__(
        self,
        base: DeviceBuffer,
        shape: tuple[int, ...],
        offset: int | None = None,
        dtype: np.dtype | None = None,
    ):
        """With `offset`, the bytes of `base` from there on as `shape` and `dtype` (a buffer
        in the driver's arena, `share-buffers`)."""
        self.base, self.shape = base, shape
        self.dtype = base.dtype if dtype is None else np.dtype(dtype)
        if offset is None:
            if int(np.prod(shape)) != int(np.prod(base.shape)):
                raise IrkitError(f"a view of {base.shape} elements as {shape}")
            self.nbytes, self.ptr = base.nbytes, base.ptr
            return
        self.nbytes = max(1, int(np.prod(shape)) * self.dtype.itemsize)
        if offset < 0 or offset + self.nbytes > base.nbytes:
            raise IrkitError(f"a view of bytes {offset}..{offset + self.nbytes} of {base.nbytes}")
        self.ptr = base.ptr + offset

    def __del__(self) -> None:
        pass


@dataclass
class Launch:
    kernel: GpuKernel
    function: Any
    args: list[DeviceBuffer]
    _params: Any = None

    def __call__(self, stream: Any) -> None:
        drv = cuda_driver()
        if self._params is None:
            pointers = [ctypes.c_void_p(b.ptr) for b in self.args]
            maps = [encode_tensor_map(self.kernel, m, self.args[m.arg]) for m in self.kernel.maps]
            self._keep = (pointers, maps)  # the parameters' storage lives with the launch
            self._params = (ctypes.c_void_p * (len(pointers) + len(maps)))(
                *[ctypes.addressof(p) for p in pointers], *[int(m.getPtr()) for m in maps]
            )
        launch = self.kernel.launch
        driver_call(
            f"launch of kernel {self.kernel.name}",
            drv.cuLaunchKernel(
                self.function,
                *launch["grid"],
                *launch["block"],
                launch["shared"],
                stream,
                ctypes.addressof(self._params),
                0,
            ),
        )


def encode_tensor_map(kernel: GpuKernel, m: TensorMap, buffer: DeviceBuffer) -> Any:
    """The driver's `CUtensorMap` for the kernel's tensor map `m` over `buffer`
    (`cuTensorMapEncodeTiled`); the kernel takes it as a `__grid_constant__` parameter
    (`irkit.codegen.cuda_tma`)."""
    drv = cuda_driver()
    if buffer.ptr % 16:
        raise IrkitError(
            f"launch of kernel {kernel.name}: argument {m.arg} is not 16-byte aligned, "
            "which a TMA tensor map needs"
        )
    args = tensor_map_args(drv, map_layout(kernel.fn, m), buffer.ptr, buffer.dtype.name)
    return driver_call(
        f"tensor map {m.arg} of kernel {kernel.name}", drv.cuTensorMapEncodeTiled(*args)
    )


def tensor_map_args(drv: Any, layout: MapLayout, address: int, dtype: str) -> tuple:
    """`cuTensorMapEncodeTiled`'s arguments for a map of `layout` at `address` (elements of
    numpy type `dtype`): no interleave, the layout's swizzle, L2 promotion of 128 bytes,
    zeros outside the tensor. cuda-python takes the extents, strides and box as its own
    `cuuint64_t`/`cuuint32_t` (plain ints are refused)."""
    kinds = {"float16": "FLOAT16", "bfloat16": "BFLOAT16", "float32": "FLOAT32"}
    kind = getattr(drv.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{kinds[dtype]}")
    mode = "128B" if layout.swizzle == 128 else "NONE"
    rank = len(layout.dims)
    return (
        kind,
        rank,
        address,
        [drv.cuuint64_t(d) for d in layout.dims],
        [drv.cuuint64_t(d) for d in layout.strides],
        [drv.cuuint32_t(b) for b in layout.box],
        [drv.cuuint32_t(1)] * rank,
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(drv.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{mode}"),
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )


@dataclass
class Copy:
    """The driver's `memref.copy` (an output that is an input, a constant or another output):
    a device-to-device copy on the stream, in the order of the launches around it."""

    source: DeviceBuffer
    destination: DeviceBuffer

    def __post_init__(self) -> None:
        if self.source.nbytes != self.destination.nbytes:
            raise IrkitError(
                f"memref.copy between buffers of {self.source.nbytes} and "
                f"{self.destination.nbytes} bytes"
            )

    def __call__(self, stream: Any) -> None:
        driver_call(
            "cuMemcpyDtoDAsync (memref.copy)",
            cuda_driver().cuMemcpyDtoDAsync(
                self.destination.ptr, self.source.ptr, self.destination.nbytes, stream
            ),
        )


@dataclass
class GpuTimed:
    """A callable (run, unsynchronized) that also times itself: `sample(reps)` returns
    seconds per call from CUDA events around each of `reps` runs, the L2 flushed before each
    one.

    Every call starts cold, however many a sample holds: with one flush a sample, a sample
    of n calls ran one cold and n - 1 warm, so a program's time hung on the calls per
    sample its calibration chose (an A/A twin of transformer_block's unoptimized program,
    calibrated to 2 calls a sample where its original got 1, came out 6% faster on an H200,
    2026-11-28)."""

    run: Any
    dev: Device
    timer = "cuda_events (L2 flushed before each call)"
    _events: list[Any] = field(default_factory=list)

    def __call__(self) -> None:
        self.run()
        driver_call("cuStreamSynchronize", cuda_driver().cuStreamSynchronize(self.dev.stream))

    def sample(self, reps: int) -> float:
        drv = cuda_driver()
        while len(self._events) < 2 * reps:
            self._events.append(driver_call("cuEventCreate", drv.cuEventCreate(0)))
        for i in range(reps):
            self.dev.flush_l2()
            driver_call("cuEventRecord", drv.cuEventRecord(self._events[2 * i], self.dev.stream))
            self.run()
            driver_call(
                "cuEventRecord", drv.cuEventRecord(self._events[2 * i + 1], self.dev.stream)
            )
        driver_call("cuEventSynchronize", drv.cuEventSynchronize(self._events[2 * reps - 1]))
        elapsed = getattr(drv, "cuEventElapsedTime_v2", None) or drv.cuEventElapsedTime
        ms = sum(
            float(
                driver_call(
                    "cuEventElapsedTime", elapsed(self._events[2 * i], self._events[2 * i + 1])
                )
            )
            for i in range(reps)
        )
        return ms * 1e-3 / reps


class CapturedGraph:
    """`record(stream)`'s work on the stream, captured into an instantiated CUDA graph."""

    def __init__(self, record: Any, stream: Any):
        drv = cuda_driver()
        mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        driver_call("cuStreamBeginCapture", drv.cuStreamBeginCapture(stream, mode))
        try:
            record()
        finally:
            graph = driver_call("cuStreamEndCapture", drv.cuStreamEndCapture(stream))
        self.graph = graph
        self.exec = driver_call("cuGraphInstantiate", drv.cuGraphInstantiate(graph, 0))

    def launch(self, stream: Any) -> None:
        driver_call("cuGraphLaunch", cuda_driver().cuGraphLaunch(self.exec, stream))

    def __del__(self) -> None:
        try:
            cuda_driver().cuGraphExecDestroy(self.exec)
            cuda_driver().cuGraphDestroy(self.graph)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


@dataclass
class CudaBound:
    exe: CudaExecutable
    buffers: list[DeviceBuffer]
    launches: list[Launch]  # the kernel calls, in the order of exe.kernels
    host_outputs: list[np.ndarray]
    keep: list[DeviceBuffer] = field(default_factory=list)
    steps: list[Launch | Copy] = field(default_factory=list)  # the driver less once-per-bind calls
    _replay: CapturedGraph | None = None

    @property
    def io(self) -> list[DeviceBuffer]:
        """Its inputs' and outputs' device buffers, in the driver's order: what another
        program of the same signature can be bound into (`CudaExecutable.bind(io=...)`)."""
        return self.buffers[: len(self.exe.inputs) + len(self.exe.outputs)]

    @property
    def outputs(self) -> list[np.ndarray]:
        self.synchronize()
        out_buffers = self.buffers[len(self.exe.inputs) :]
        for buf, host in zip(out_buffers, self.host_outputs, strict=True):
            buf.download(host)
        return self.host_outputs

    def _graph(self) -> None:
        for step in self.steps:
            step(self.exe.dev.stream)

    def run_graph(self) -> None:
        GpuTimed(self._graph, self.exe.dev)()

    def run_kernel(self, index: int) -> None:
        GpuTimed(lambda: self.launches[index](self.exe.dev.stream), self.exe.dev)()

    def timed_graph(self) -> GpuTimed:
        return GpuTimed(self._graph, self.exe.dev)

    def timed_kernel(self, index: int) -> GpuTimed:
        return GpuTimed(lambda: self.launches[index](self.exe.dev.stream), self.exe.dev)

    def timed_replay(self) -> GpuTimed:
        """The whole driver captured once into a CUDA graph; each call replays it with one
        `cuGraphLaunch`, so the host's per-launch cost between short kernels drops out (what
        a serving stack that replays graphs pays), beside `timed_graph`'s launch by launch."""
        if self._replay is None:
            self._replay = CapturedGraph(self._graph, self.exe.dev.stream)
        replay = self._replay
        return GpuTimed(lambda: replay.launch(self.exe.dev.stream), self.exe.dev)

    def synchronize(self) -> None:
        driver_call("cuStreamSynchronize", cuda_driver().cuStreamSynchronize(self.exe.dev.stream))


class CudaExecutable(Provenance):
    backend = "cuda"

    def __init__(self, module: ModuleOp, dev: Device):
        self.module = module
        self.dev = dev
        self.entry = entry_function(module)
        self.inputs, self.outputs = driver_specs(self.entry)
        self.plan = driver_plan(module)
        self.gpu_kernels = build_kernels(module, dev.arch, (dev.max_threads, dev.max_shared))
        self.kernels = [k.record for k in self.gpu_kernels]
        self._by_name = {k.name: k for k in self.gpu_kernels}
        self._load()

    def _load(self) -> None:
        """Every kernel's cubin loaded as a module of its own (`functions`, by name)."""
        drv = cuda_driver()
        self.functions = {}
        self._modules = []
        for k in self.gpu_kernels:
            assert k.compiled is not None
            mod = driver_call(
                f"cuModuleLoadData ({k.name})", drv.cuModuleLoadData(k.compiled.cubin)
            )
            self._modules.append(mod)
            function = driver_call(
                f"cuModuleGetFunction ({k.name})", drv.cuModuleGetFunction(mod, k.name.encode())
            )
            if k.launch["shared"] > STATIC_SHARED_LIMIT:  # past 48 KB dynamic needs an opt-in
                attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                driver_call(
                    f"cuFuncSetAttribute ({k.name})",
                    drv.cuFuncSetAttribute(function, attr, k.launch["shared"]),
                )
            self.functions[k.name] = function

    def copy(self) -> CudaExecutable:
        """Another placement: the same cubins loaded again as modules of their own, nothing
        printed or compiled again (each bind gives it buffers of its own)."""
        twin = object.__new__(CudaExecutable)
        twin.__dict__.update(self.__dict__)
        twin._modules = []  # its own, never the original's (unloaded with it)
        twin._load()
        return twin

    def __del__(self) -> None:
        """The modules unloaded: attribution loads 32 copies of each of hundreds of
        programs, and a process that kept them all would grow without end."""
        for mod in getattr(self, "_modules", ()):
            try:
                cuda_driver().cuModuleUnload(mod)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass

    def bind(self, *arrays: Any, io: Sequence[DeviceBuffer] | None = None) -> CudaBound:
        """Device buffers for the inputs (uploaded), the outputs and every intermediate (NaN
        bits), constants uploaded and once-per-bind kernels run; then the graph once. `io`:
        the inputs' and outputs' device buffers of another bound program of the same
        signature (`CudaBound.io`) to use instead of new ones, the inputs uploaded into
        them and the outputs poisoned again: what attribution binds every program of a
        placement slot into, so that where they lie is common to the slot's programs."""
        name = f"@{self.entry.sym_name.data}"
        inputs = check_arrays(name, self.inputs, arrays)
        ins, outs = (
            shared_io(name, self.inputs, self.outputs, io) if io is not None
            else [[DeviceBuffer(s.shape, s.dtype) for s in specs] for specs in (self.inputs, self.outputs)]
        )  # fmt: skip
        for buf, a in zip(ins, inputs, strict=True):
            buf.upload(a)
        for buf in outs:
            buf.poison()
        buffers = [*ins, *outs]
        env = dict(zip(self.entry.body.block.args, buffers, strict=True))
        launches: list[Launch] = []
        steps: list[Launch | Copy] = []
        for step in self.plan:
            if step.kind == "alloc":
                env[step.result] = DeviceBuffer(step.shape, step.buffer_dtype)
                env[step.result].poison()
            elif step.kind == "global":
                buf = DeviceBuffer(step.constant.shape, step.constant.dtype)
                buf.upload(step.constant)
                env[step.result] = buf
            elif step.kind == "view":
                env[step.result] = env[step.operands[0]].view(step.shape, step.offset, step.dtype)
            elif step.kind == "copy":
                steps.append(Copy(env[step.operands[0]], env[step.operands[1]]))
            elif step.kind == "call":
                kernel = self._by_name[step.callee]
                launches.append(
                    Launch(kernel, self.functions[step.callee], [env[v] for v in step.operands])
                )
                if step.once:  # reads only params and constants, uploaded above: run it now
                    launches[-1](self.dev.stream)
                else:
                    steps.append(launches[-1])
        host = [np.empty(s.shape, s.dtype) for s in self.outputs]
        bound = CudaBound(self, buffers, launches, host, list(env.values()), steps)
        bound.run_graph()
        return bound

    def __call__(self, *arrays: Any, out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        if out is not None:
            out = check_out(f"@{self.entry.sym_name.data}", self.outputs, out)
        bound = self.bind(*arrays)
        outputs = bound.outputs
        if out is not None:
            for o, r in zip(out, outputs, strict=True):
                np.copyto(o, r)
            return list(out)
        return [o.copy() for o in outputs]


class CudaBackend:
    """Runs GPU-mapped modules on CUDA device 0."""

    name = "cuda"
    default_pipeline = "default-cuda"
    timer = GpuTimed.timer

    def available(self) -> tuple[bool, str]:
        try:
            dev = device()
        except IrkitError as e:
            return False, e.message
        return True, f"{dev.name} ({dev.arch}, driver {dev.driver_version})"

    def lower(self, module: ModuleOp) -> ModuleOp:
        from irkit.pipelines import lower_for_gpu

        return lower_for_gpu(module)

    def fingerprint(self) -> dict[str, Any]:
        return {"gpu": device().fingerprint()}

    def ceilings(self) -> Ceilings:
        return cuda_ceilings(device())

    def compile(self, module: ModuleOp) -> CudaExecutable:
        return CudaExecutable(module, device())
