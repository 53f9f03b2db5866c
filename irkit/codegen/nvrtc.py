"""Compile CUDA C with NVRTC (cuda.bindings.nvrtc, from the nvidia-cuda-nvrtc wheel).

NVRTC needs no GPU and no driver: cubin for any architecture, and the ptxas resource report
(registers, shared memory, stack frame, spills), are available on any machine. Results are
cached on disk under `~/.cache/irkit/nvrtc` (or `$IRKIT_CACHE/nvrtc`), keyed by the source,
the options, NVRTC's version and the architecture, so a newer NVRTC or another GPU never
reuses a stale binary.

A compile error becomes one IrkitError naming the kernel, the CUDA source line and NVRTC's
message.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

from irkit.codegen import disk_cache
from irkit.errors import IrkitError, one_line
from irkit.loops import STATIC_SHARED_LIMIT

DEFAULT_ARCH = "sm_90"
"""What to compile for when no device says otherwise (Hopper)."""

ARCH_LIMITS = {
    # max threads per block, max shared memory per block with opt-in (bytes), registers per
    # block: the CUDA C++ Programming Guide's table per compute capability. A device's own
    # attributes replace the first two when one is present.
    "sm_75": (1024, 64 * 1024, 65536),
    "sm_80": (1024, 163 * 1024, 65536),
    "sm_86": (1024, 99 * 1024, 65536),
    "sm_87": (1024, 163 * 1024, 65536),
    "sm_89": (1024, 99 * 1024, 65536),
    "sm_90": (1024, 227 * 1024, 65536),
    "sm_90a": (1024, 227 * 1024, 65536),
    "sm_100": (1024, 227 * 1024, 65536),
    "sm_120": (1024, 99 * 1024, 65536),
}


@dataclass(frozen=True)
class Resources:
    """ptxas's report for one kernel."""

    registers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    constant_bytes: int = 0


@dataclass(frozen=True)
class Compiled:
    name: str
    arch: str
    cubin: bytes
    resources: Resources
    nvrtc_version: str
    options: tuple[str, ...]
    log: str = ""
    cached: bool = field(default=False, compare=False)

    def record(self) -> dict[str, object]:
        return {"arch": self.arch, "nvrtc": self.nvrtc_version, **asdict(self.resources)}


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:  # pragma: no cover - a dependency
        raise IrkitError(f"NVRTC is not installed (cuda-bindings): {e}") from None
    return nvrtc


@cache
def nvrtc_version() -> str:
    nvrtc = _nvrtc()
    err, major, minor = nvrtc.nvrtcVersion()
    _check(err, "nvrtcVersion")
    return f"{major}.{minor}"


def _check(err: object, what: str) -> None:
    nvrtc = _nvrtc()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, text = nvrtc.nvrtcGetErrorString(err)
        raise IrkitError(
            f"NVRTC {what} failed: {text.decode() if isinstance(text, bytes) else text}"
        )


def cache_dir() -> Path:
    return disk_cache.cache_dir("nvrtc")


@cache
def cuda_include_dir() -> str | None:
    """Where cuda_fp16.h and cuda_bf16.h are: the nvidia-cuda-runtime wheel's headers as
    cuda-pathfinder finds them (its older API too), else a CUDA toolkit's ($CUDA_HOME,
    $CUDA_PATH, /usr/local/cuda)."""
    import cuda.pathfinder as pathfinder

    try:
        if hasattr(pathfinder, "locate_nvidia_header_directory"):
            found = pathfinder.locate_nvidia_header_directory("cudart")
            if found is not None:
                return found.abs_path
        elif hasattr(pathfinder, "find_nvidia_header_directory"):
            if where := pathfinder.find_nvidia_header_directory("cudart"):
                return where
    except Exception:  # noqa: BLE001, S110 - look in a toolkit instead
        pass
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in filter(None, roots):
        if (Path(root) / "include" / "cuda_fp16.h").is_file():
            return str(Path(root) / "include")
    return None


def options_for(arch: str, source: str = "", extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    includes: tuple[str, ...] = ()
    if "#include <cuda_" in source:
        where = cuda_include_dir()
        if where is None:
            raise IrkitError(
                "this kernel uses f16/bf16, and cuda_fp16.h was not found: install the "
                "nvidia-cuda-runtime wheel"
            )
        includes = (f"--include-path={where}",)
    return (
        f"--gpu-architecture={arch}",
        "--std=c++17",
        "-default-device",
        "--ptxas-options=-v",
        *includes,
        *extra,
    )


def parse_ptxas(log: str, name: str) -> Resources:
    """Resources of kernel `name` from ptxas's verbose log."""
    section = log.split(f"Function properties for {name}", 1)
    text = section[1] if len(section) > 1 else log
    text = text.split("Function properties for", 1)[0]

    def num(pattern: str) -> int:
        m = re.search(pattern, text)
        return int(m.group(1)) if m else 0

    return Resources(
        registers=num(r"Used (\d+) registers"),
        shared_bytes=num(r"(\d+) bytes smem"),
        stack_bytes=num(r"(\d+) bytes stack frame"),
        spill_stores=num(r"(\d+) bytes spill stores"),
        spill_loads=num(r"(\d+) bytes spill loads"),
        constant_bytes=num(r"(\d+) bytes cmem\[0\]"),
    )


def _error_line(log: str, source: str, name: str) -> str:
    """The first NVRTC error as `kernel:line: message | source line`."""
    lines = source.splitlines()
    for m in re.finditer(r"\((\d+)\): (?:catastrophic )?error: ([^\n]*)", log):
        n = int(m.group(1))
        code = lines[n - 1].strip() if 0 < n <= len(lines) else ""
        return f"{name}.cu:{n}: {m.group(2).strip()} | {code}"
    return one_line(log)


ARCH_SPECIFIC = "wgmma.mma_async"
"""Source holding this needs the architecture-specific target (sm_90a, not sm_90)."""
EIGHT_BIT_MMA = "mma.sync.aligned.m16n8k32.row.col.f32.e"
"""Source holding this (an 8-bit float mma.sync) needs sm_89 or later."""


def unbuildable(source: str, arch: str) -> str | None:
    """Why `source` cannot be built for `arch` (wgmma needs sm_90a, 8-bit mma.sync sm_89 or
    later), or None."""
    if ARCH_SPECIFIC in source and not arch.startswith("sm_90"):
        return "wgmma needs sm_90a"
    if EIGHT_BIT_MMA in source and arch in ("sm_75", "sm_80", "sm_86", "sm_87"):
        return "8-bit mma.sync needs sm_89 or later (gpu-tile-matmul{tensor-cores=false} leaves 8-bit matmuls off the tensor cores)"
    return None


def compile_cuda(
    source: str,
    name: str,
    arch: str = DEFAULT_ARCH,
    extra: tuple[str, ...] = (),
    use_cache: bool = True,
) -> Compiled:
    """Compile one translation unit holding `extern "C"` kernel `name` to cubin for `arch`
    (sm_90 becomes sm_90a for a kernel with Hopper-only instructions, wgmma)."""
    if arch == "sm_90" and ARCH_SPECIFIC in source:
        arch = "sm_90a"
    if arch not in ARCH_LIMITS:
        raise IrkitError(f"unsupported architecture '{arch}'; choose from {', '.join(ARCH_LIMITS)}")
    why = unbuildable(source, arch)
    if why is not None:
        raise IrkitError(f"cannot compile {name} for {arch}: {why}")
    version = nvrtc_version()
    options = options_for(arch, source, extra)
    key = hashlib.sha256(json.dumps([source, options, version, arch, name]).encode()).hexdigest()[
        :24
    ]
    path = cache_dir() / f"{key}.json"
    if use_cache and path.exists():
        try:
            meta = json.loads(path.read_text())
            cubin = path.with_suffix(".cubin").read_bytes()
            return Compiled(name, arch, cubin, Resources(**meta["resources"]), version, options,
                            meta.get("log", ""), cached=True)  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged entry is recompiled and rewritten
    cubin, log = _nvrtc_compile(source, name, arch, options, "CUBIN")
    resources = parse_ptxas(log, name)
    compiled = Compiled(name, arch, cubin, resources, version, options, log)
    if use_cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.with_suffix(".cubin").write_bytes(cubin)
            path.write_text(json.dumps({"resources": asdict(resources), "log": log}))
        except OSError:
            pass  # a read-only cache costs time, not correctness
    return compiled


def compile_ptx(source: str, name: str, arch: str = DEFAULT_ARCH) -> str:
    """PTX for `arch` (what `irkit-opt -t ptx` prints)."""
    options = tuple(o for o in options_for(arch, source) if not o.startswith("--ptxas"))
    ptx, _ = _nvrtc_compile(source, name, arch, options, "PTX")
    return ptx.decode().rstrip("\x00")


def _nvrtc_compile(
    source: str, name: str, arch: str, options: tuple[str, ...], output: str
) -> tuple[bytes, str]:
    """One NVRTC program compiled with `options`: its `output` ("CUBIN" or "PTX") and log;
    a failed compile is one IrkitError naming the kernel and the source line."""
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    _check(err, "nvrtcCreateProgram")
    try:
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        err, size = nvrtc.nvrtcGetProgramLogSize(prog)
        _check(err, "nvrtcGetProgramLogSize")
        buf = b" " * size
        (err,) = nvrtc.nvrtcGetProgramLog(prog, buf)
        log = buf.decode(errors="replace").rstrip("\x00 ")
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise IrkitError(
                f"NVRTC could not compile {name} for {arch}: {_error_line(log, source, name)}"
            )
        err, size = getattr(nvrtc, f"nvrtcGet{output}Size")(prog)
        _check(err, f"nvrtcGet{output}Size")
        data = b" " * size
        (err,) = getattr(nvrtc, f"nvrtcGet{output}")(prog, data)
        _check(err, f"nvrtcGet{output}")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return data, log


def check_limits(
    name: str,
    arch: str,
    threads: int,
    resources: Resources,
    dynamic_shared: int = 0,
    device_limits: tuple[int, int] | None = None,
) -> None:
    """Raise, naming the kernel, when a launch would exceed the threads or shared memory a
    block may have (the device's own limits when known, else the architecture's)."""
    max_threads, max_shared, regs = ARCH_LIMITS[arch]
    if device_limits is not None:
        max_threads, max_shared = device_limits
    if threads > max_threads:
        raise IrkitError(
            f"kernel {name} needs {threads} threads per block; {arch} allows {max_threads}"
        )
    shared = resources.shared_bytes + dynamic_shared
    if shared > max_shared or resources.shared_bytes > STATIC_SHARED_LIMIT:
        raise IrkitError(
            f"kernel {name} needs {shared} bytes of shared memory per block "
            f"({resources.shared_bytes} static); {arch} allows {max_shared} "
            f"({STATIC_SHARED_LIMIT} static)"
        )
    if resources.registers * threads > regs:
        raise IrkitError(
            f"kernel {name} needs {resources.registers} registers x {threads} threads; "
            f"a block may use {regs}"
        )
