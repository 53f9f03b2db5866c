"""`cuda-sim`: the CUDA path with the GPU replaced by the lockstep interpretation
(`irkit.runtime.lockstep`). Every kernel is still printed and compiled by NVRTC, so
resources and compile errors are real; only the execution is simulated, and a program whose
interpretation would not fit the memory limit is refused before any input is made."""

from __future__ import annotations

import math
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import MemRefType, ModuleOp

from irkit.errors import IrkitError
from irkit.limits import fmt_bytes, memory_limit
from irkit.loops import launch_of
from irkit.runtime.gpu import SimulatedExecutable
from irkit.runtime.lockstep import LockstepInterpreter


def lockstep_bytes(fn: func.FuncOp, check_races: bool) -> tuple[int, str]:
    """What interpreting kernel `fn` holds at its peak, about, and what makes it up: every
    SSA value is an array over all the launch's lanes (8 bytes a lane, kept to the end), and
    with the race check every element of every buffer has five int64 shadows."""
    cfg = launch_of(fn)
    if cfg is None:
        return 0, ""
    lanes = math.prod(cfg["grid"]) * math.prod(cfg["block"])
    values = sum(len(op.results) for op in fn.walk())
    total = lanes * 8 * (values + 6)  # + the lane, thread, block ids and masks
    said = f"{lanes:,} lanes x {values} values"
    if check_races:
        elements = sum(math.prod(a.type.get_shape()) for a in fn.args if isinstance(a.type, MemRefType))  # fmt: skip
        total += 40 * elements
        said += f", race shadows for {elements:,} elements"
    return total, said


def check_lockstep_memory(module: ModuleOp, check_races: bool) -> None:
    """Refuse, before any input is made, a program whose lockstep interpretation would hold
    more than the run's memory limit (`irkit.limits.memory_limit`): one line naming the
    kernel and what the interpretation needs, instead of an allocation failing mid-run."""
    limit, source = memory_limit()
    for op in module.ops:
        if isinstance(op, func.FuncOp):
            need, said = lockstep_bytes(op, check_races)
            if need > limit:
                raise IrkitError(
                    f"cuda-sim: interpreting @{op.sym_name.data} in lockstep needs about "
                    f"{fmt_bytes(need)} ({said}), over the limit of {fmt_bytes(limit)} "
                    f"({source}); run it with --backend cuda-host, on a GPU, or at smaller dims"
                )


class LockstepExecutable(SimulatedExecutable):
    """GPU-mapped IR run by the lockstep interpretation: correct answers, interpreter times."""

    backend = "cuda-sim"

    def __init__(self, module: ModuleOp, kernels: list[Any], check_races: bool = True):
        super().__init__(module, kernels, LockstepInterpreter(module, check_races))

    def _launcher(self) -> LockstepInterpreter:
        assert isinstance(self.launcher, LockstepInterpreter)
        return LockstepInterpreter(self.module, self.launcher.check_races)


class LockstepBackend:
    """`cuda-sim`: the CUDA path with the GPU replaced by the lockstep interpretation. Every
    kernel is still printed and compiled by NVRTC (for sm_90), so resources and compile
    errors are real; only the execution is simulated."""

    name = "cuda-sim"
    default_pipeline = "default-cuda"
    timer = "interpreter (not a GPU time)"

    def __init__(self, arch: str | None = "sm_90", check_races: bool = True):
        self.arch = arch
        self.check_races = check_races

    def available(self) -> tuple[bool, str]:
        return True, f"lockstep interpretation of GPU-mapped IR (NVRTC build for {self.arch})"

    def lower(self, module: ModuleOp) -> ModuleOp:
        from irkit.pipelines import lower_for_gpu

        return lower_for_gpu(module)

    def fingerprint(self) -> dict[str, Any]:
        from irkit.codegen.nvrtc import nvrtc_version

        return {"cuda_sim": {"arch": self.arch, "nvrtc": nvrtc_version(), "gpu": None}}

    def ceilings(self) -> None:
        return None  # an interpreter's times have no roofline

    def compile(self, module: ModuleOp) -> LockstepExecutable:
        from irkit.runtime.gpu import build_kernels

        check_lockstep_memory(module, self.check_races)
        return LockstepExecutable(module, build_kernels(module, self.arch), self.check_races)
