"""The backend protocol: compile a module to an Executable; run it on numpy arrays.

    exe = backend.compile(loop_level_module)
    outputs = exe(*inputs)                 # a list of numpy arrays, one per model output
    exe.kernels                            # one KernelRecord per kernel
    bound = exe.bind(*inputs)              # buffers fixed once, for timing
    bound.run_graph(); bound.run_kernel(i)

Every backend checks the arrays it is given (count, shape, dtype) and raises IrkitError
with one line naming the input. Calling an Executable never copies an array that already
has the right dtype and layout; `bind` does, into page-aligned buffers (see `page_aligned`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from irkit.errors import IrkitError
from irkit.runtime.ceilings import Ceilings


@dataclass(frozen=True, init=False)
class KernelRecord:
    """What a backend knows about one kernel before it runs."""

    name: str
    source: str
    """The generated code: LLVM IR for the CPU, CUDA C for CUDA."""
    hash: str
    """Content hash of the generated code, the kernel's own name left out: equal hashes
    mean the same kernel, whatever position it has in its program."""
    flops: int
    min_bytes: int
    launch: dict[str, Any] | None = None
    resources: dict[str, Any] = field(default_factory=dict)
    once: bool = False
    """A once-per-bind kernel (`irkit.once`, e.g. weight packing): a bound executable runs
    it when its params are bound, and the graph's time per call leaves it out."""
    code_hash: str = ""
    """The compiled code's identity where the backend knows it (the CPU: the kernel's IR
    after O3, from which its machine code follows), else `hash`: kernels whose code is equal
    are one kernel to attribution, whatever IR they came from."""
    _ir: str | Callable[[], str] = field(default="", repr=False, compare=False)

    def __init__(
        self,
        name: str,
        source: str,
        ir: str | Callable[[], str],
        hash: str,  # noqa: A002 - the record's field
        flops: int,
        min_bytes: int,
        launch: dict[str, Any] | None = None,
        resources: dict[str, Any] | None = None,
        once: bool = False,
        code_hash: str = "",
    ):
        """`ir`: the kernel's loop-level text, or a function that prints it when first
        asked (printing every kernel of every program attribution compiles was a tenth of
        its compile time)."""
        for key, value in (("name", name), ("source", source), ("_ir", ir), ("hash", hash),
                           ("flops", flops), ("min_bytes", min_bytes), ("launch", launch),
                           ("resources", {} if resources is None else resources),
                           ("once", once), ("code_hash", code_hash or hash)):  # fmt: skip
            object.__setattr__(self, key, value)

    @property
    def ir(self) -> str:
        """The kernel's loop-level function, as irkit printed it."""
        text = self._ir
        if callable(text):
            text = text()
            object.__setattr__(self, "_ir", text)
        return text

    @property
    def intensity(self) -> float:
        """FLOPs per minimum byte (the roofline's x axis)."""
        return self.flops / self.min_bytes if self.min_bytes else float("inf")


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of an Executable."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    index_extent: int | None = None
    """For integer inputs that are gather indices: the least extent they index; a value
    outside [-index_extent, index_extent) is refused before anything runs."""

    def describe(self) -> str:
        return f"{self.name}: {self.dtype}{list(self.shape)}"

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


def check_out(what: str, specs: Sequence[TensorSpec], out: Any) -> list[np.ndarray]:
    """`out` (caller-provided output buffers) checked against `specs`: a sequence of
    C-contiguous arrays of exactly the outputs' shapes and dtypes, or one-line IrkitError."""
    if isinstance(out, np.ndarray) or not isinstance(out, Sequence):
        raise IrkitError(
            f"{what}: out must be a list of {len(specs)} arrays, got {type(out).__name__}"
        )
    if len(out) != len(specs):
        raise IrkitError(f"{what}: out must hold {len(specs)} arrays, got {len(out)}")
    for spec, o in zip(specs, out, strict=True):
        if (
            not isinstance(o, np.ndarray)
            or o.shape != spec.shape
            or o.dtype != spec.dtype
            or not o.flags.c_contiguous
            or not o.flags.writeable
        ):
            raise IrkitError(
                f"{what}: output buffer {spec.name} must be a writable contiguous {spec.describe()}"
            )
    return list(out)


def check_arrays(
    what: str, specs: Sequence[TensorSpec], arrays: Sequence[Any], exact_dtype: bool = True
) -> list[np.ndarray]:
    """`arrays` as C-contiguous numpy arrays matching `specs`, or one-line IrkitError.

    Only a non-contiguous array is copied; with `exact_dtype`, a dtype mismatch is an error
    rather than a silent conversion."""
    if len(arrays) != len(specs):
        names = ", ".join(s.name for s in specs)
        raise IrkitError(f"{what} takes {len(specs)} arrays ({names}), got {len(arrays)}")
    out = []
    for spec, array in zip(specs, arrays, strict=True):
        a = np.asarray(array)
        if a.shape != spec.shape:
            raise IrkitError(
                f"{what}: input {spec.name} has shape {list(a.shape)}, expected {list(spec.shape)}"
            )
        if a.dtype != spec.dtype:
            if exact_dtype:
                raise IrkitError(
                    f"{what}: input {spec.name} has dtype {a.dtype}, expected {spec.dtype}"
                )
            a = a.astype(spec.dtype)
        if spec.index_extent is not None:
            check_indices(what, spec, a)
        out.append(np.ascontiguousarray(a))
    return out


def check_indices(what: str, spec: TensorSpec, a: np.ndarray) -> None:
    """Gather indices must lie in [-extent, extent): a clear error, never a clamped read."""
    n = spec.index_extent
    assert n is not None
    bad = (a < -n) | (a >= n)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise IrkitError(
            f"{what}: input {spec.name} holds {int(a[at])} at {list(at)}, outside [-{n}, {n}): "
            f"it indexes an axis of extent {n} ({int(bad.sum())} of {a.size} values out of range)"
        )


PAGE = 4096


def page_aligned(spec_or_array: TensorSpec | np.ndarray) -> np.ndarray:
    """A C-contiguous buffer starting on a 4 KiB page: empty for a TensorSpec, a copy for an
    array. Timed buffers are placed this way so that where the allocator happened to put
    them is not part of a measurement: two binds of one program on this host differed by
    about 5% (sd) on small elementwise graphs with the allocator's placement, through
    4K aliasing between loads and stores, and A/A comparisons came out "significant"
    three times as often as their stated rate."""
    shape, dtype = spec_or_array.shape, np.dtype(spec_or_array.dtype)
    nbytes = max(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, 1)
    raw = np.empty(nbytes + PAGE, np.uint8)
    start = -raw.ctypes.data % PAGE
    out = raw[start : start + nbytes].view(dtype).reshape(shape)
    if isinstance(spec_or_array, np.ndarray):
        np.copyto(out, spec_or_array)
    return out


def shared_io(
    name: str, inputs: list[TensorSpec], outputs: list[TensorSpec], io: Sequence[Any]
) -> tuple[list[Any], list[Any]]:
    """`io` (another bound program's inputs' and outputs' buffers, `Bound.io`) split into
    inputs and outputs, checked against the `inputs` and `outputs` of the program `name`
    to be bound into them: the same count, shapes and dtypes; host arrays C-contiguous and
    writable (a device buffer, `cuda`'s, is both by construction)."""
    specs = [*inputs, *outputs]
    if len(io) != len(specs):
        raise IrkitError(
            f"{name}: binding into {len(io)} shared buffers, but it has {len(inputs)} inputs and {len(outputs)} outputs"
        )
    for spec, buffer in zip(specs, io, strict=True):
        host = isinstance(buffer, np.ndarray)
        if (
            tuple(buffer.shape) != tuple(spec.shape)
            or np.dtype(buffer.dtype) != np.dtype(spec.dtype)
            or (host and not (buffer.flags.c_contiguous and buffer.flags.writeable))
        ):
            raise IrkitError(
                f"{name}: shared buffer for '{spec.name}' is {np.dtype(buffer.dtype)}{list(buffer.shape)}, it needs a writable C-contiguous {spec.dtype}{list(spec.shape)}"
            )
    return list(io[: len(inputs)]), list(io[len(inputs) :])


class Bound(Protocol):
    """An Executable with its buffers fixed: what timers call repeatedly. Optionally also
    `release_kernels()`: let go of what only `run_kernel` needs, for a copy whose kernels
    are never timed alone (`BoundDefaults` has one that keeps everything); and `io`, its
    inputs' and outputs' buffers (host arrays; `cuda`'s device buffers), where its
    executable's `bind` takes `io=` to bind another program of the same signature into
    them (every backend's but `reference`'s)."""

    @property
    def outputs(self) -> list[np.ndarray]: ...

    def run_graph(self) -> None: ...

    def run_kernel(self, index: int) -> None: ...

    def synchronize(self) -> None: ...

    def timed_graph(self) -> Callable[[], None]:
        """What a timer calls for one run of the whole graph: `run_graph`, or a callable
        that also times itself (`sample(reps)`, e.g. with device events)."""
        ...

    def timed_kernel(self, index: int) -> Callable[[], None]:
        """The same for one kernel."""
        ...

    def timed_replay(self) -> Callable[[], None] | None:
        """The whole graph recorded once and replayed as one launch (a CUDA graph), where
        the device can; None elsewhere."""
        ...


@runtime_checkable
class ReleasesKernels(Protocol):
    """A bound program that can let go of what only `run_kernel` needs (a copy whose kernels
    are never timed alone)."""

    def release_kernels(self) -> None: ...


@runtime_checkable
class SharesIO(Protocol):
    """A bound program whose inputs' and outputs' buffers another program of the same
    signature can be bound into (`Executable.bind(..., io=...)`)."""

    io: list[Any]


@runtime_checkable
class Copyable(Protocol):
    """An executable that can give another placement of its compiled code (loaded or linked
    again, its own buffers), nothing generated or compiled again."""

    def copy(self) -> Executable: ...


@runtime_checkable
class SelfTimed(Protocol):
    """A timed call that times itself (device events around `reps` calls): the seconds per
    call of one sample."""

    def sample(self, reps: int) -> float: ...


@runtime_checkable
class NamedTimer(Protocol):
    """A timed call that says what clock its samples read (`cuda_events ...`)."""

    timer: str


@runtime_checkable
class LaunchesOnHost(Protocol):
    """An executable that runs one kernel of its driver plan on host buffers
    (`launch(name, buffers)`): what a snapshot records a kernel's buffers through."""

    def launch(self, name: str, buffers: Sequence[np.ndarray]) -> None: ...


@runtime_checkable
class HasGpuKernels(Protocol):
    """An executable of GPU kernels (`irkit.runtime.gpu.GpuKernel`: each one's CUDA C,
    cubin, launch and resources)."""

    gpu_kernels: list[Any]


class BoundDefaults:
    """`timed_graph`/`timed_kernel` for a Bound timed by the host clock around its calls."""

    def run_graph(self) -> None:
        raise NotImplementedError

    def run_kernel(self, index: int) -> None:
        raise NotImplementedError

    def timed_graph(self) -> Callable[[], None]:
        return self.run_graph

    def timed_kernel(self, index: int) -> Callable[[], None]:
        return lambda: self.run_kernel(index)

    def timed_replay(self) -> Callable[[], None] | None:
        return None

    def release_kernels(self) -> None:
        """Let go of what only `run_kernel` needs (the graph still runs): nothing here."""


class Provenance:
    """The fields `irkit.compile` fills in on the executable it returns (`Executable`),
    declared with their defaults: a backend's executable class inherits them."""

    graph: ModuleOp | None = None
    pipeline: str | None = None
    selection: str | None = None


class Executable(Protocol):
    """A compiled program. Optionally also `copy()`: another placement of the same compiled
    code (loaded or linked again, its own buffers), nothing generated or compiled again;
    attribution binds its copies through it, and compiles anew where it is missing."""

    backend: str
    module: ModuleOp
    kernels: list[KernelRecord]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    graph: ModuleOp | None
    """Where it came from, as `irkit.compile` records it (None for an executable compiled
    by its backend directly): the graph-level model, the pipeline run, and why this backend
    (`Provenance` gives them their defaults)."""
    pipeline: str | None
    selection: str | None

    def __call__(
        self, *arrays: Any, out: Sequence[np.ndarray] | None = None
    ) -> list[np.ndarray]: ...

    def bind(self, *arrays: Any) -> Bound: ...


class Backend(Protocol):
    """What irkit needs of a backend. A new one is its codegen and runtime modules and one
    `irkit.runtime.register_backend` line; nothing else in irkit names it."""

    name: str
    default_pipeline: str
    timer: str
    """How its times are taken, as records say it ("perf_counter_ns", "cuda_events ...")."""

    def available(self) -> tuple[bool, str]:
        """Whether the backend can run here, and a one-line description or reason."""
        ...

    def lower(self, module: ModuleOp) -> ModuleOp:
        """The lowering it requires, run where the pipeline left it out (to loops, onto the
        GPU, ...): the module `compile` accepts."""
        ...

    def compile(self, module: ModuleOp) -> Executable: ...

    def fingerprint(self) -> dict[str, Any]:
        """What records carry of the device beyond the host's fingerprint (the GPU, its
        driver and its clocks now); taken before and after a measurement."""
        ...

    def ceilings(self) -> Ceilings | None:
        """The device's roofline ceilings (measured, cached), or None where it has none."""
        ...


# --- the driver: what every backend's host side replays ------------------------------------


def driver_specs(fn: Any) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The driver's inputs and outputs (arguments marked irkit.output)."""
    from xdsl.dialects.builtin import IntegerAttr, MemRefType, StringAttr

    from irkit.dtypes import numpy_dtype
    from irkit.loops import INDEX_EXTENT_ATTR, OUTPUT_ATTR

    attrs = fn.arg_attrs.data if fn.arg_attrs else [None] * len(fn.body.block.args)
    inputs: list[TensorSpec] = []
    outputs: list[TensorSpec] = []
    for i, (arg, d) in enumerate(zip(fn.body.block.args, attrs, strict=True)):
        t = arg.type
        assert isinstance(t, MemRefType)
        out = d.data.get(OUTPUT_ATTR) if d is not None else None
        name = out.data if isinstance(out, StringAttr) else (arg.name_hint or f"arg{i}")
        extent = d.data.get(INDEX_EXTENT_ATTR) if d is not None else None
        bound = extent.value.data if isinstance(extent, IntegerAttr) else None
        spec = TensorSpec(name, tuple(t.get_shape()), numpy_dtype(t.element_type), bound)
        (outputs if out is not None else inputs).append(spec)
    return inputs, outputs


def bound_bytes(exe: Any, kernels: bool = True, io_only: bool = False) -> int:
    """The memory one bound copy of `exe` holds: its inputs and outputs and the scratch its
    driver allocates (intermediates between kernels), statically shaped buffers counted in
    full, as many times as the executable's `scratch_copies` says a bound copy keeps them
    (1 where it does not say; 1 with `kernels` false, a copy whose `release_kernels` ran);
    one without a driver counts its inputs and outputs. `io_only`: its inputs and outputs."""
    from xdsl.dialects.builtin import MemRefType

    from irkit.loops.costs import buffer_bytes

    io = sum(t.nbytes for t in [*getattr(exe, "inputs", []), *getattr(exe, "outputs", [])])
    if io_only:
        return io
    entry = getattr(exe, "entry", None)
    allocs = (
        [op.results[0].type for op in entry.walk() if op.name == "memref.alloc"] if entry else []
    )
    scratch = sum(
        buffer_bytes(t) for t in allocs if isinstance(t, MemRefType) and t.has_static_shape()
    )
    return io + scratch * (getattr(exe, "scratch_copies", 1) if kernels else 1)


@dataclass(frozen=True)
class Step:
    """One host-side action of the driver function, in order.

    kind: "alloc" (a buffer of `shape`/`dtype` for `result`), "global" (`result` is the
    constant array `data`), "view" (`result` is operand 0's buffer with `shape`, no copy:
    `reshape-views`; with `offset`, the bytes of operand 0 from `offset` on as `shape` and
    `dtype`: `share-buffers`), "copy" (operands: source, destination), "call" (kernel
    `callee` on `operands`; `once`: a once-per-bind kernel), "free" (operand 0 is dead)."""

    kind: str
    result: Any = None
    operands: tuple[Any, ...] = ()
    callee: str = ""
    shape: tuple[int, ...] = ()
    dtype: np.dtype | None = None
    data: np.ndarray | None = None
    once: bool = False
    offset: int | None = None

    @property
    def buffer_dtype(self) -> np.dtype:
        """An "alloc" step's element type."""
        assert self.dtype is not None, self
        return self.dtype

    @property
    def constant(self) -> np.ndarray:
        """A "global" step's array."""
        assert self.data is not None, self
        return self.data


def driver_plan(module: ModuleOp) -> list[Step]:
    """The entry function's ops as host steps; one-line error for anything else."""
    from xdsl.dialects import arith, func, memref
    from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, MemRefType

    from irkit.dtypes import dense_array, numpy_dtype
    from irkit.ir import entry_function
    from irkit.loops import VIEW_OPS, constant_int, once_calls

    entry = entry_function(module)
    globals_ = {op.sym_name.data: op for op in module.ops if isinstance(op, memref.GlobalOp)}
    once = set(once_calls(module, entry))
    steps = []
    for op in entry.body.block.ops:
        if isinstance(op, memref.AllocOp):
            t = op.memref.type
            assert isinstance(t, MemRefType)
            steps.append(
                Step(
                    "alloc",
                    op.memref,
                    shape=tuple(t.get_shape()),
                    dtype=numpy_dtype(t.element_type),
                )
            )
        elif isinstance(op, memref.GetGlobalOp):
            g = globals_[op.name_.root_reference.data]
            t = g.type
            assert isinstance(g.initial_value, DenseIntOrFPElementsAttr)
            assert isinstance(t, MemRefType)
            values = dense_array(g.initial_value).astype(np.float64)
            data = values.astype(numpy_dtype(t.element_type)).reshape(t.get_shape())
            steps.append(Step("global", op.memref, data=data))
        elif isinstance(op, VIEW_OPS):
            shown = op.results[0].type
            assert isinstance(shown, MemRefType)
            steps.append(
                Step("view", op.results[0], operands=(op.src,), shape=tuple(shown.get_shape()))
            )
        elif isinstance(op, memref.ViewOp):
            shown = op.result.type
            shift = constant_int(op.byte_shift)
            assert isinstance(shown, MemRefType) and shift is not None, op
            steps.append(
                Step(
                    "view",
                    op.result,
                    operands=(op.source,),
                    shape=tuple(shown.get_shape()),
                    dtype=numpy_dtype(shown.element_type),
                    offset=shift,
                )
            )
        elif isinstance(op, memref.CopyOp):
            steps.append(Step("copy", operands=(op.source, op.destination)))
        elif isinstance(op, func.CallOp):
            steps.append(
                Step(
                    "call",
                    operands=tuple(op.arguments),
                    callee=op.callee.root_reference.data,
                    once=op in once,
                )
            )
        elif isinstance(op, memref.DeallocOp):
            steps.append(Step("free", operands=(op.memref,)))
        elif not isinstance(op, func.ReturnOp | arith.ConstantOp):
            raise IrkitError(f"the driver cannot run {op.name} on the host")
    return steps


def array_view(
    array: np.ndarray,
    shape: tuple[int, ...],
    offset: int | None = None,
    dtype: np.dtype | None = None,
) -> np.ndarray:
    """`array` with `shape`, the same memory (a driver's view); with `offset`, its bytes
    from there on as `dtype` (a buffer in an arena). An error, never a copy, where it is not
    contiguous or the bytes are not there."""
    if not array.flags.c_contiguous:
        raise IrkitError(f"a driver view of a {array.shape} array that is not contiguous")
    if offset is None:
        return array.reshape(shape)  # of a contiguous array: always a view
    assert dtype is not None
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = array.reshape(-1).view(np.uint8)
    if offset < 0 or offset + nbytes > raw.size:
        raise IrkitError(f"a driver view of bytes {offset}..{offset + nbytes} of {raw.size}")
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


def run_steps(
    steps: Sequence[Step],
    env: dict[Any, np.ndarray],
    buffer: Callable[[tuple[int, ...], np.dtype], np.ndarray],
    constant: Callable[[Step], np.ndarray],
    launch: Callable[[str, list[np.ndarray]], None],
    on_call: Callable[[str, list[np.ndarray], bool], None] | None = None,
) -> None:
    """Replay a driver's plan on host buffers: `env` maps the driver's values to arrays
    (its arguments already there); an "alloc" gets `buffer(shape, dtype)`, a "global"
    `constant(step)`, a "view" its source's array reshaped (the same memory), a "call" runs
    `launch(callee, buffers)`, with `on_call(callee, buffers, after)` before and after it."""
    for step in steps:
        if step.kind == "alloc":
            env[step.result] = buffer(step.shape, step.buffer_dtype)
        elif step.kind == "global":
            env[step.result] = constant(step)
        elif step.kind == "view":
            env[step.result] = array_view(
                env[step.operands[0]], step.shape, step.offset, step.dtype
            )
        elif step.kind == "copy":
            np.copyto(env[step.operands[1]], env[step.operands[0]])
        elif step.kind == "call":
            buffers = [env[v] for v in step.operands]
            if on_call is not None:
                on_call(step.callee, buffers, False)
            launch(step.callee, buffers)
            if on_call is not None:
                on_call(step.callee, buffers, True)
