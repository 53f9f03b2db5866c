"""irkit's `-t` targets for irkit-opt: LLVM IR and host assembly from the loop level; CUDA C
and PTX from the GPU-mapped level.

They print what the CPU backend compiles: `-t llvm` the LLVM IR irkit generates (before
LLVM's optimizer, so it maps line by line onto the loop IR), `-t asm` the host assembly after
the O3 pipeline (to see what vectorized). Like the backend, both first run the CPU's required
`block-reductions` where the pipeline left it out (on IR that had it, this changes nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.target import Target

from irkit.errors import IrkitError


def _require_loop_level(module: ModuleOp, target: str) -> None:
    graph_ops = [op for op in module.walk() if op.dialect_name() == "graph"]
    if graph_ops:
        raise IrkitError(
            f"-t {target} needs loop-level IR, but {graph_ops[0].name} is still here; "
            "lower first with -p lower-graph-to-loops (or a pipeline such as baseline-cpu)"
        )


def _cpu_lowered(module: ModuleOp, target: str) -> ModuleOp:
    """The loop-level module as the CPU backend compiles it."""
    from irkit.pipelines import lower_for_cpu

    _require_loop_level(module, target)
    return lower_for_cpu(module)


@dataclass(frozen=True)
class LLVMTarget(Target):
    """LLVM IR (textual) for the host, as irkit generates it."""

    name = "llvm"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        from irkit.codegen.host import llvm_ir

        output.write(llvm_ir(_cpu_lowered(module, self.name)))


@dataclass(frozen=True)
class AsmTarget(Target):
    """Host assembly after LLVM's O3 pipeline for this CPU."""

    name = "asm"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        from irkit.codegen.host import host_assembly

        output.write(host_assembly(_cpu_lowered(module, self.name)))


@dataclass(frozen=True)
class CudaTarget(Target):
    """CUDA C for every kernel of a GPU-mapped module (what NVRTC compiles)."""

    name = "cuda"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        from irkit.codegen.cuda import cuda_source

        _require_loop_level(module, self.name)
        output.write(cuda_source(module))


@dataclass(frozen=True)
class PtxTarget(Target):
    """PTX from NVRTC for each kernel, for $IRKIT_CUDA_ARCH (default sm_90)."""

    name = "ptx"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        import os

        from irkit.codegen.cuda import gpu_kernels, kernel_source
        from irkit.codegen.nvrtc import DEFAULT_ARCH, compile_ptx

        _require_loop_level(module, self.name)
        arch = os.environ.get("IRKIT_CUDA_ARCH", DEFAULT_ARCH)
        for fn in gpu_kernels(module):
            name = fn.sym_name.data
            output.write(f"// ===== {name} ({arch}) =====\n")
            output.write(compile_ptx(kernel_source(module, fn), name, arch))


@dataclass(frozen=True)
class ResourcesTarget(Target):
    """Per GPU kernel and architecture ($IRKIT_CUDA_ARCH, comma-separated; default sm_80 and
    sm_90): ptxas's registers, spills, stack and shared memory, and the theoretical
    occupancy and waves they allow (`irkit.codegen.occupancy`). A kernel with Hopper-only
    instructions (wgmma) is built for sm_90a where sm_90 is asked, and not for the others;
    one with 8-bit mma.sync not for those before sm_89 (a line says so)."""

    name = "resources"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        import os

        from irkit.codegen.cuda import gpu_kernels, kernel_source
        from irkit.codegen.nvrtc import compile_cuda, unbuildable
        from irkit.codegen.occupancy import occupancy
        from irkit.loops import Launch, launch_of

        _require_loop_level(module, self.name)
        archs = [a for a in os.environ.get("IRKIT_CUDA_ARCH", "sm_80,sm_90").split(",") if a]
        for fn in gpu_kernels(module):
            name, launch = fn.sym_name.data, launch_of(fn) or Launch()
            source = kernel_source(module, fn)
            for arch in archs:
                why = unbuildable(source, arch)
                if why is not None:
                    output.write(f"{name} {arch}: not built ({why})\n")
                    continue
                compiled = compile_cuda(source, name, arch)
                r, arch = compiled.resources, compiled.arch
                occ = occupancy(launch, r.__dict__, arch.removesuffix("a")) or {}
                grid = "x".join(str(g) for g in launch.get("grid", ()))
                block = "x".join(str(b) for b in launch.get("block", ()))
                output.write(
                    f"{name} {arch}: {r.registers} registers, {r.spill_stores} spill stores, "
                    f"{r.spill_loads} spill loads, {r.stack_bytes} B stack, {r.shared_bytes} B "
                    f"static + {launch.get('shared', 0)} B dynamic shared; block "
                    f"{block}, grid {grid}: "
                    f"{occ.get('blocks_per_sm')} blocks/SM ({occ.get('limited_by')}), "
                    f"occupancy {occ.get('occupancy_pct', 0):.0f}%, "
                    f"{occ.get('waves', 0):.2f} waves on 132 SMs\n"
                )


def _resources() -> type[Target]:
    return ResourcesTarget


def _cuda() -> type[Target]:
    return CudaTarget


def _ptx() -> type[Target]:
    return PtxTarget


def _llvm() -> type[Target]:
    return LLVMTarget


def _asm() -> type[Target]:
    return AsmTarget


IRKIT_TARGETS: dict[str, Callable[[], type[Target]]] = {
    "llvm": _llvm,
    "asm": _asm,
    "cuda": _cuda,
    "ptx": _ptx,
    "resources": _resources,
}
"""Target name -> factory (xDSL's registry convention: a factory with no parameters)."""
