"""What the two GPU backends share: one CUDA C source, NVRTC build and record per kernel.

`cuda` runs the kernels on a device; `cuda-sim` runs the same GPU-mapped IR through the
lockstep interpretation on the CPU (checking only: its times are an interpreter's, not a
GPU's). Both compile every kernel with NVRTC, so resources and compile errors are the same.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from irkit.codegen.cuda import gpu_kernels, kernel_source
from irkit.codegen.nvrtc import Compiled, check_limits, compile_cuda
from irkit.ir import to_text
from irkit.loops import Launch, is_once, launch_of
from irkit.loops.costs import count_flops, min_bytes
from irkit.runtime.backend import KernelRecord


@dataclass
class GpuKernel:
    fn: func.FuncOp
    name: str
    source: str
    launch: Launch
    compiled: Compiled | None
    record: KernelRecord = field(init=False)

    def __post_init__(self) -> None:
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
        if compiled is not None:
            check_limits(name, arch, kernel.threads, compiled.resources, launch["shared"],  # type: ignore[arg-type]
                         device_limits)  # fmt: skip
        kernels.append(kernel)
    return kernels
