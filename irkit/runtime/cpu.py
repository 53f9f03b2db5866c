"""The CPU backend: loop-level IR -> LLVM IR (llvmlite) -> host machine code (MCJIT, O3).

The target machine is the host's own CPU name and feature set (AVX-512 where present); the
generic x86-64 target would be many times slower. Numpy arrays are passed by pointer, with
no copies. The driver function runs the whole graph in one native call; `bind` also keeps a
Python replay of the driver's plan so each kernel can be called, and timed, on its own.
"""

from __future__ import annotations

import ctypes
import functools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import llvmlite.binding as llvm
import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from irkit.codegen.host import (
    HostProgram,
    KernelCode,
    host_target,
    jit_program,
    machine_hash,
    relink,
)
from irkit.codegen.llvm import RELEASE, STEADY, linked_constants
from irkit.dtypes import poison
from irkit.errors import IrkitError
from irkit.ir import entry_function, to_text
from irkit.loops import cpu_threads, is_once, kernels, once_calls, prepared_buffers
from irkit.loops.costs import count_flops, min_bytes
from irkit.runtime.backend import (
    BoundDefaults,
    KernelRecord,
    Provenance,
    TensorSpec,
    check_arrays,
    check_out,
    driver_plan,
    driver_specs,
    page_aligned,
    run_steps,
    shared_io,
)
from irkit.runtime.ceilings import Ceilings, cpu_ceilings


def _signature(n: int) -> Callable[[int], Callable[..., None]]:
    return ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * n))


@dataclass
class CpuBound(BoundDefaults):
    """Buffers fixed once; the graph and each kernel callable with no allocation."""

    exe: CpuExecutable
    args: list[int]
    outputs: list[np.ndarray]
    keep: list[np.ndarray]
    calls: list[tuple[Callable[..., None], tuple[int, ...]]] = field(default_factory=list)
    inputs: list[np.ndarray] = field(default_factory=list)

    @property
    def io(self) -> list[np.ndarray]:
        """Its inputs' and outputs' buffers, in the driver's order: what another program
        of the same signature can be bound into (`CpuExecutable.bind(io=...)`)."""
        return [*self.inputs, *self.outputs]

    def run_graph(self) -> None:
        self.exe.steady(*self.args)

    def run_kernel(self, index: int) -> None:
        if not self.calls:
            raise IrkitError("this bound copy's kernel plan was released: its kernels run no more")
        fn, args = self.calls[index]
        fn(*args)

    def synchronize(self) -> None:
        pass

    def release_kernels(self) -> None:
        """Free the kernel plan's intermediates (the driver keeps scratch of its own): a
        copy timed only as a whole holds its inputs, outputs, prepared buffers and the
        driver's scratch, about half of what it held on elementwise_chain."""
        driver = set(self.args)
        self.keep = [a for a in self.keep if a.ctypes.data in driver]
        self.calls = []


def _release(release: Callable[[], None], engine: llvm.ExecutionEngine) -> None:
    """Free a dropped executable's kept scratch; `engine` (its code) is kept alive until then."""
    del engine
    release()


class CpuExecutable(Provenance):
    """A compiled module: its driver and kernels as native functions."""

    backend = "cpu"
    scratch_copies = 2
    """A bound copy holds every intermediate twice: the kernel plan's buffers (`bind`, for
    kernels timed alone) and the driver's kept scratch (`backend.bound_bytes`)."""

    def __init__(self, module: ModuleOp, program: HostProgram):
        self.module = module
        self.program = program
        self.llvm_ir = program.text()
        self.entry = entry_function(module)
        self.inputs, self.outputs = driver_specs(self.entry)
        self.prepared = prepared_buffers(module, self.entry)
        self.kernel_functions = kernels(module)
        self.kernels = [self._record(f) for f in self.kernel_functions]
        self._plan: list | None = None  # `driver_plan`, at the first bind
        self._link()

    def _link(self) -> None:
        """The native entry points of `self.program`'s engine."""
        self.engine = self.program.engine  # owns the machine code; outlives the pointers
        self.driver = self._function(self.entry)
        self.steady = self.driver
        """What a bound executable calls: the driver, or where it calls once-per-bind kernels,
        its steady form (`@<driver>.steady`), given the buffers they prepared at bind."""
        if once_calls(self.module, self.entry):
            self.steady = self._function(self.entry, STEADY, len(self.prepared))
        self._natives = {f.sym_name.data: self._function(f) for f in self.kernel_functions}
        # the driver keeps its scratch buffers between calls; free them with the engine
        release = ctypes.CFUNCTYPE(None)(self.engine.get_function_address(RELEASE))
        weakref.finalize(self, _release, release, self.engine)

    def copy(self) -> CpuExecutable:
        """An independent copy: the same machine code linked again into its own engine (at
        other code addresses, as a fresh compile would place it; its own scratch buffers),
        nothing lowered, translated or compiled again. What attribution binds as a program's
        further placements: compiling each copy anew took 26 of the main job's 60 s."""
        twin = object.__new__(CpuExecutable)
        twin.__dict__.update(self.__dict__)
        twin.program = relink(self.program)
        twin._link()
        return twin

    def _function(self, fn: func.FuncOp, suffix: str = "", extra: int = 0) -> Callable[..., None]:
        symbol = self.program.symbol(fn.sym_name.data) + suffix
        address = self.engine.get_function_address(symbol)
        return _signature(len(fn.body.block.args) + extra)(address)

    def _record(self, fn: func.FuncOp) -> KernelRecord:
        name = fn.sym_name.data
        code = self.program.kernels[name]
        flops, least, threads, once = _costs(code, fn)
        return KernelRecord(
            name=name,
            source=code.text,
            ir=functools.partial(to_text, fn),
            hash=code.hash,
            flops=flops,
            min_bytes=least,
            launch={"threads": threads},
            once=once,
            code_hash=machine_hash(code.symbol),
        )

    def _prepare(self, arrays: Sequence[Any], out: Sequence[np.ndarray] | None):
        name = f"@{self.entry.sym_name.data}"
        inputs = check_arrays(name, self.inputs, arrays)
        if out is None:
            outputs = [np.empty(s.shape, s.dtype) for s in self.outputs]
        else:
            outputs = check_out(name, self.outputs, out)
        return inputs, outputs

    def launch(self, name: str, buffers: Sequence[np.ndarray]) -> None:
        """Run one kernel on host buffers (its arguments, in order): a driver step alone."""
        self._natives[name](*(b.ctypes.data for b in buffers))

    def __call__(self, *arrays: Any, out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        inputs, outputs = self._prepare(arrays, out)
        self.driver(*(a.ctypes.data for a in [*inputs, *outputs]))
        return outputs

    def bind(self, *arrays: Any, io: Sequence[np.ndarray] | None = None) -> CpuBound:
        """Fix the buffers (page-aligned copies of the inputs, page-aligned outputs and
        intermediates) and replay the driver's plan once, so that every intermediate holds
        real data before a kernel is timed alone. Once-per-bind kernels run here, and only
        here: the bound graph is the driver's steady form, given their prepared buffers.

        Then the steady driver itself runs once, on outputs poisoned again: what the bound
        outputs hold is what the timed call (`run_graph`) computes (an output a once-per-bind
        kernel wrote, as a snapshot's replay of one has, keeps what that kernel wrote), so a
        check of them checks the code that is timed, and the driver's kept scratch
        (allocated on its first call) is allocated and touched here, not in the first timed
        call. On a VM where fresh memory costs a host fault per page, a copy's first call
        took 58 ms where the program takes 2-5: attribution's copies spent 7 of a 10 s
        budget on such calls.

        `io`: the inputs' and outputs' buffers to use instead of new ones (another bound
        program's `io`, of the same signature): the arrays are copied into its inputs. What
        attribution binds every program of a placement slot into, so that the slot's offset
        is common to them (`slots.Placements`)."""
        name = f"@{self.entry.sym_name.data}"
        checked = check_arrays(name, self.inputs, arrays)
        if io is None:
            inputs = [page_aligned(a) for a in checked]
            outputs = [page_aligned(s) for s in self.outputs]
        else:
            inputs, outputs = shared_io(name, self.inputs, self.outputs, io)
            for buffer, a in zip(inputs, checked, strict=True):
                np.copyto(buffer, a)
        for o in outputs:  # an output the graph does not write reads as NaN, not as garbage
            poison(o)
        bound = CpuBound(
            self, [a.ctypes.data for a in [*inputs, *outputs]], outputs, [], inputs=inputs
        )
        env: dict[SSAValue, np.ndarray] = dict(
            zip(self.entry.body.block.args, [*inputs, *outputs], strict=True)
        )

        once = {k.name for k in self.kernels if k.once}
        prepared: set[int] = set()  # what once-per-bind kernels wrote: the steady form skips them

        def launch(name: str, buffers: list[np.ndarray]) -> None:
            native, args = self._natives[name], tuple(b.ctypes.data for b in buffers)
            bound.calls.append((native, args))
            native(*args)
            if name in once:
                prepared.update(args)

        if self._plan is None:  # once per compiled program, its copies included
            self._plan = driver_plan(self.module)
        run_steps(
            self._plan,
            env,
            lambda shape, dtype: page_aligned(TensorSpec("", shape, dtype)),
            lambda step: np.array(step.constant),  # each bound copy its own, as before
            launch,
        )
        bound.args += [env[v].ctypes.data for v in self.prepared]
        bound.keep.extend(env.values())
        kept = [(o, o.copy()) for o in outputs if o.ctypes.data in prepared]
        for o in outputs:
            poison(o)
        bound.run_graph()
        for o, value in kept:  # the steady form does not run once-per-bind kernels
            np.copyto(o, value)
        return bound


_COSTS: dict[int, tuple[KernelCode, tuple[int, int, int, bool]]] = {}
"""A kernel's flops, least bytes, threads and once-per-bind, by its code (`KernelCode`, one
object per kernel structure in this process): attribution's 123 programs hold 2,756
kernels, most of them the same few dozen."""


def _costs(code: KernelCode, fn: func.FuncOp) -> tuple[int, int, int, bool]:
    known = _COSTS.get(id(code))
    if known is None or known[0] is not code:  # an id reused after `forget_compiled`
        known = _COSTS[id(code)] = (
            code,
            (count_flops(fn), min_bytes(fn), cpu_threads(fn), is_once(fn)),
        )
    return known[1]


_LINKED: dict[str, np.ndarray] = {}


def _link(symbol: str, data: bytes) -> None:
    """Register a large constant's bytes with the JIT under `symbol`, once per process
    (page-aligned, kept alive for the process's lifetime)."""
    if symbol not in _LINKED:
        _LINKED[symbol] = page_aligned(np.frombuffer(data, np.uint8))
        llvm.add_symbol(symbol, _LINKED[symbol].ctypes.data)


class CpuBackend:
    """Compiles loop-level modules for this machine's CPU."""

    name = "cpu"
    default_pipeline = "default-cpu"
    timer = "perf_counter_ns"

    def available(self) -> tuple[bool, str]:
        target = host_target()
        return (
            True,
            f"llvmlite JIT for {target.cpu} (LLVM {'.'.join(map(str, llvm.llvm_version_info))})",
        )

    def lower(self, module: ModuleOp) -> ModuleOp:
        from irkit.pipelines import lower_for_cpu

        return lower_for_cpu(module)

    def fingerprint(self) -> dict[str, Any]:
        return {}  # the host fingerprint says it all: CPU, features, LLVM, threads

    def ceilings(self) -> Ceilings:
        return cpu_ceilings()

    def compile(self, module: ModuleOp) -> CpuExecutable:
        for symbol, data in linked_constants(module).items():
            _link(symbol, data)
        return CpuExecutable(module, jit_program(module))
