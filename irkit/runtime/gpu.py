"""What the two GPU backends share: one CUDA C source, NVRTC build and record per kernel.

`cuda` runs the kernels on a device; `cuda-sim` runs the same GPU-mapped IR through the
lockstep interpretation on the CPU (checking only: its times are an interpreter's, not a
GPU's). Both compile every kernel with NVRTC, so resources and compile errors are the same.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from copy import copy as shallow_copy
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from irkit.codegen.cuda import gpu_kernels, kernel_source
from irkit.codegen.nvrtc import Compiled, check_limits, compile_cuda
from irkit.dialects.warp_tma import TensorMap, tensor_maps
from irkit.dtypes import poison, poisoned
from irkit.ir import to_text
from irkit.loops import Launch, is_once, launch_of
from irkit.loops.costs import count_flops, min_bytes
from irkit.runtime.backend import BoundDefaults, KernelRecord, Provenance, Step, run_steps


@dataclass
class GpuKernel:
    fn: func.FuncOp
    name: str
    source: str
    launch: Launch
    compiled: Compiled | None
    record: KernelRecord = field(init=False)
    maps: list[TensorMap] = field(init=False)
    """The tensor maps it takes after its buffers (`irkit.dialects.warp_tma`)."""

    def __post_init__(self) -> None:
        self.maps = tensor_maps(self.fn)
        body = self.source.replace(self.name, "kernel")
        resources = self.compiled.record() if self.compiled is not None else {}
        flops = self.launch.get("flops")
        self.record = KernelRecord(
            name=self.name,
            source=self.source,
            ir=to_text(self.fn),
            hash=hashlib.sha256(body.encode()).hexdigest()[:16],
            flops=int(flops) if flops is not None else count_flops(self.fn),
            min_bytes=min_bytes(self.fn),
            launch={k: v for k, v in self.launch.items() if k != "flops"},
            resources=resources,
            once=is_once(self.fn),
        )

    @property
    def threads(self) -> int:
        b = self.launch["block"]
        return int(b[0] * b[1] * b[2])


def build_kernels(
    module: ModuleOp, arch: str | None, device_limits: tuple[int, int] | None = None
) -> list[GpuKernel]:
    """Every GPU kernel of `module` printed, compiled for `arch` (None: not compiled) and
    checked against the block limits, in module order."""
    kernels = []
    for fn in gpu_kernels(module):
        name = fn.sym_name.data
        source = kernel_source(module, fn)
        compiled = compile_cuda(source, name, arch) if arch is not None else None
        launch = launch_of(fn)
        assert launch is not None
        kernel = GpuKernel(fn, name, source, launch, compiled)
        if compiled is not None and arch is not None:
            shared = int(launch["shared"])
            check_limits(name, arch, kernel.threads, compiled.resources, shared, device_limits)
        kernels.append(kernel)
    return kernels


# --- GPU kernels run on the host: the driver's plan, a launcher per backend -----------------


class Launcher(Protocol):
    """What runs one GPU kernel's grid on the host (the lockstep interpretation, or the
    kernel's CUDA C compiled for the host)."""

    def launch(self, name: str, buffers: Sequence[np.ndarray]) -> None: ...


@dataclass
class SimulatedBound(BoundDefaults):
    exe: SimulatedExecutable
    env: dict[SSAValue, np.ndarray]
    outputs: list[np.ndarray]
    calls: list[tuple[str, list[np.ndarray]]]

    @property
    def io(self) -> list[np.ndarray]:
        """Its inputs' and outputs' buffers, in the driver's order: what another program
        of the same signature can be bound into (`SimulatedExecutable.bind(io=...)`)."""
        return [self.env[a] for a in self.exe.entry.body.block.args]

    def run_graph(self) -> None:
        self.exe.run_plan(self.env)

    def run_kernel(self, index: int) -> None:
        name, buffers = self.calls[index]
        self.exe.launcher.launch(name, buffers)

    def synchronize(self) -> None:
        pass


class SimulatedExecutable(Provenance):
    """A GPU-mapped program whose driver runs on the host and whose kernels `launcher` runs:
    correct answers, host times (not a GPU's). Once-per-bind kernels run on every call."""

    backend = "simulated"

    def __init__(self, module: ModuleOp, kernels: list[GpuKernel], launcher: Launcher):
        from irkit.ir import entry_function
        from irkit.runtime.backend import driver_plan, driver_specs

        self.module = module
        self.entry = entry_function(module)
        self.inputs, self.outputs = driver_specs(self.entry)
        self.plan = driver_plan(module)
        self.gpu_kernels = kernels
        self.kernels = [k.record for k in kernels]
        self.launcher = launcher

    def copy(self) -> SimulatedExecutable:
        """Another placement: the same kernels, a launcher of its own (`_launcher`), nothing
        printed or compiled again (printing every copy's kernels anew took 154 of
        transformer_block's 230 s of attribution on cuda-host)."""
        twin = shallow_copy(self)
        twin.launcher = twin._launcher()
        return twin

    def _launcher(self) -> Launcher:
        """A launcher for a copy (the same one by default: a stateless launcher)."""
        return self.launcher

    def buffer(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A fresh buffer: NaN, as fresh device memory holds garbage and an unwritten read
        must show."""
        return poisoned(shape, dtype)

    def constant(self, step: Step) -> np.ndarray:
        """A "global" step's array, as kernels read it."""
        return step.constant

    def _env(
        self,
        arrays: Sequence[Any],
        out: Sequence[np.ndarray] | None,
        io: Sequence[np.ndarray] | None = None,
    ):
        """The driver's arguments bound to `arrays` and fresh outputs (or `out`); with `io`
        (another bound program's, `SimulatedBound.io`), to those very buffers: the arrays
        copied into its inputs, its outputs filled with NaN again."""
        from irkit.runtime.backend import check_arrays, check_out, shared_io

        name = f"@{self.entry.sym_name.data}"
        inputs = check_arrays(name, self.inputs, arrays)
        if io is not None:
            inputs_at, outputs = shared_io(name, self.inputs, self.outputs, io)
            for buffer, a in zip(inputs_at, inputs, strict=True):
                np.copyto(buffer, a)
            for o in outputs:
                poison(o)
            inputs = inputs_at
        elif out is not None:
            outputs = check_out(name, self.outputs, out)
        else:
            outputs = [self.buffer(s.shape, s.dtype) for s in self.outputs]
        env = dict(zip(self.entry.body.block.args, [*inputs, *outputs], strict=True))
        return env, outputs

    def run_plan(self, env: dict[SSAValue, np.ndarray], calls: list | None = None) -> None:
        """The driver's plan on host buffers; each call's (kernel, buffers) kept in `calls`."""

        def keep(name: str, buffers: list[np.ndarray], after: bool) -> None:
            if after and calls is not None:
                calls.append((name, buffers))

        run_steps(self.plan, env, self.buffer, self.constant, self.launcher.launch, keep)

    def launch(self, name: str, buffers: Sequence[np.ndarray]) -> None:
        """Run one kernel's grid on host buffers (its arguments, in order)."""
        self.launcher.launch(name, buffers)

    def __call__(self, *arrays: Any, out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        env, outputs = self._env(arrays, out)
        self.run_plan(env)
        return outputs

    def bind(self, *arrays: Any, io: Sequence[np.ndarray] | None = None) -> SimulatedBound:
        """Fix the buffers and run the driver's plan once (each kernel call kept, for
        `run_kernel`). `io`: the inputs' and outputs' buffers of another bound program of
        the same signature to use instead of new ones (`SimulatedBound.io`): what
        attribution binds every program of a placement slot into."""
        env, outputs = self._env(arrays, None, io)
        calls: list = []
        self.run_plan(env, calls)
        return SimulatedBound(self, env, outputs, calls)
