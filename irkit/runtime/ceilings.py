"""A device's ceilings for the roofline: peak FLOP rate and copy bandwidth, each backend's
own (`Backend.ceilings()`), measured once per device and cached.

CPU ceilings are measured on one core; a kernel on T threads is placed under T times the
FMA rate and T times the bandwidth of the core-private caches (L1d, L2), the shared L3's
and memory's as measured on one core:
- copy bandwidth: `numpy.copyto` of a 256 MiB f32 array (2 x 256 MiB moved per copy; the
  write-allocate read is not counted), the best of 7: the roof of a kernel whose working
  set (its minimum bytes) fits no cache;
- cache levels (`levels`): the copy bandwidth of a JIT-compiled vector copy loop over a
  working set of half a level's size (L1d, L2; L3 at most 8x L2, so that the VM's reported
  L3 size cannot make it a memory measurement), repeated, the best of 7; a kernel whose
  working set fits a level is placed under that level's roof (kernels are timed warm,
  back to back, so their data stays in the smallest level that holds it). Sizes from
  Linux's sysfs; where it has none, memory's roof for every kernel;
- FMA rate: an LLVM kernel JIT-compiled for this CPU with 12 independent chains of vector
  FMAs at the widest width the CPU has (16 lanes with AVX-512, 8 with AVX2, 4 otherwise),
  the best of 7; 2 FLOPs per lane per FMA.
Both are cached in `$XDG_CACHE_HOME/irkit/ceilings/` (default `~/.cache`) under a key of
host name, CPU name and feature set; `cpu_ceilings(refresh=True)` measures again.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Ceilings:
    """A device's measured ceilings."""

    device: str
    bandwidth: float
    """Bytes per second, copy."""
    flops: float
    """FLOPs per second, FMA (fp32)."""
    method: str
    measured_at: str
    flops_source: str = "measured"
    """How the FLOP ceiling was had: "measured", or "derived" (from the device's attributes)."""
    levels: tuple[dict, ...] = ()
    """Cache levels, smallest first: {"name", "bytes" (the largest working set placed under
    it), "bandwidth" (copy bytes/s, one core), "private" (per core: scales with threads)}."""

    def memory_roof(self, working_set: int, threads: int = 1) -> tuple[str, float]:
        """The level a working set of `working_set` bytes is served from, and its bandwidth
        for a kernel on `threads` threads ("memory" and `bandwidth` past every cache)."""
        for level in self.levels:
            if working_set <= level["bytes"]:
                scale = threads if level.get("private") else 1
                return level["name"], level["bandwidth"] * scale
        return "memory", self.bandwidth

    @property
    def ridge(self) -> float:
        """The intensity (FLOPs per byte) where the two roofs meet."""
        return self.flops / self.bandwidth

    def to_json(self) -> dict:
        return asdict(self)


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "irkit" / "ceilings"


def cpu_ceilings(refresh: bool = False) -> Ceilings:
    """This CPU's single-core ceilings, from the cache or measured now (a few seconds)."""
    import platform

    from irkit.codegen.host import host_target

    target = host_target()
    key = hashlib.sha256(f"{platform.node()}|{target.cpu}|{target.features}".encode()).hexdigest()[
        :16
    ]
    path = _cache_dir() / f"cpu-{key}.json"
    if path.exists() and not refresh:
        try:
            cached = json.loads(path.read_text())
            if "levels" in cached:  # entries from before cache levels are measured again
                cached["levels"] = tuple(cached["levels"])
                return Ceilings(**cached)
        except (ValueError, TypeError):
            pass  # a damaged cache entry is measured again
    ceilings = Ceilings(
        device=f"cpu {target.cpu} (one core)",
        bandwidth=_copy_bandwidth(),
        flops=_fma_rate(target),
        method="copy: numpy.copyto 256 MiB f32, best of 7; fma: 12 chains of vector fma "
        "JIT-compiled for the host, best of 7; cache levels: a JIT-compiled vector copy over "
        "half of each level (L3: at most 8x L2), best of 7; one core, times the threads for "
        "the FMA rate and the private levels",
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        levels=_cache_levels(target),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(ceilings.to_json(), indent=2) + "\n")
    return ceilings


def _copy_bandwidth(nbytes: int = 256 << 20, repeats: int = 7) -> float:
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        np.copyto(dst, src)
        best = min(best, (time.perf_counter_ns() - start) * 1e-9)
    return 2 * nbytes / best


def _cache_sizes() -> dict[str, int]:
    """This CPU's data cache sizes in bytes by level name (L1d, L2, L3), from sysfs."""
    sizes: dict[str, int] = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        value = int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
        sizes["L1d" if level == "1" else f"L{level}"] = value
    return sizes


def _cache_levels(target) -> tuple[dict, ...]:
    """Each cache level's roof (see the module docstring)."""
    sizes = _cache_sizes()
    levels = []
    for name in ("L1d", "L2", "L3"):
        if name not in sizes:
            break
        measured = sizes[name] // 2
        if name == "L3" and "L2" in sizes:
            measured = min(measured, 8 * sizes["L2"])
        levels.append(
            {
                "name": name,
                "bytes": min(sizes[name], 2 * measured),
                "bandwidth": _copy_loop_bandwidth(target, measured),
                "private": name != "L3",
            }
        )
    return tuple(levels)


_COPY_KERNEL = """
define void @copy_loop(<{w} x float>* noalias %src, <{w} x float>* noalias %dst, i64 %n, i64 %reps) {{
entry:
  br label %rep
rep:
  %r = phi i64 [0, %entry], [%rnext, %done]
  br label %loop
loop:
  %i = phi i64 [0, %rep], [%next, %loop]
  %p = getelementptr <{w} x float>, <{w} x float>* %src, i64 %i
  %q = getelementptr <{w} x float>, <{w} x float>* %dst, i64 %i
  %v = load volatile <{w} x float>, <{w} x float>* %p, align 64
  store volatile <{w} x float> %v, <{w} x float>* %q, align 64
  %next = add i64 %i, 1
  %end = icmp eq i64 %next, %n
  br i1 %end, label %done, label %loop
done:
  %rnext = add i64 %r, 1
  %stop = icmp eq i64 %rnext, %reps
  br i1 %stop, label %exit, label %rep
exit:
  ret void
}}
"""


def _copy_loop_bandwidth(target, working_set: int, repeats: int = 7) -> float:
    """Copy bytes/s (read + write) of a vector loop copying working_set / 2 bytes to the
    other half of `working_set`, over and over (about 64 MiB per timing)."""
    import llvmlite.binding as llvm

    width = _vector_width(target)
    vectors = max(1, working_set // 2 // (4 * width))
    reps = max(1, (64 << 20) // (2 * 4 * width * vectors))
    module = llvm.parse_assembly(_COPY_KERNEL.format(w=width))
    module.verify()
    engine = llvm.create_mcjit_compiler(module, target.machine())
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
        engine.get_function_address("copy_loop")
    )
    src = _aligned(vectors * width)
    dst = _aligned(vectors * width)
    fn(src.ctypes.data, dst.ctypes.data, vectors, reps)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        fn(src.ctypes.data, dst.ctypes.data, vectors, reps)
        best = min(best, (time.perf_counter_ns() - start) * 1e-9)
    del engine
    return 2 * 4 * width * vectors * reps / best


def _aligned(count: int) -> np.ndarray:
    """`count` f32 ones starting on a 64-byte boundary."""
    raw = np.ones(count + 16, np.float32)
    skip = (-raw.ctypes.data % 64) // 4
    return raw[skip : skip + count]


def _vector_width(target) -> int:
    features = target.features
    return 16 if "+avx512f" in features else 8 if "+avx2" in features else 4


_FMA_KERNEL = """
declare <{w} x float> @llvm.fma.v{w}f32(<{w} x float>, <{w} x float>, <{w} x float>)

define void @fma_peak(<{w} x float>* noalias %io, i64 %n) {{
entry:
  %a = load <{w} x float>, <{w} x float>* %io, align 4
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
{phis}
{fmas}
  %next = add i64 %i, 1
  %done = icmp eq i64 %next, %n
  br i1 %done, label %exit, label %loop
exit:
{sums}
  store <{w} x float> %s{last}, <{w} x float>* %io, align 4
  ret void
}}
"""


def _fma_rate(target, chains: int = 12, iterations: int = 200_000, repeats: int = 7) -> float:
    import llvmlite.binding as llvm

    width = _vector_width(target)
    phis = "\n".join(
        f"  %c{j} = phi <{width} x float> [%a, %entry], [%d{j}, %loop]" for j in range(chains)
    )
    fmas = "\n".join(
        f"  %d{j} = call <{width} x float> @llvm.fma.v{width}f32(<{width} x float> %c{j}, "
        f"<{width} x float> %a, <{width} x float> %a)"
        for j in range(chains)
    )
    sums = [f"  %s0 = fadd <{width} x float> %d0, %d1"]
    for j in range(2, chains):
        sums.append(f"  %s{j - 1} = fadd <{width} x float> %s{j - 2}, %d{j}")
    text = _FMA_KERNEL.format(w=width, phis=phis, fmas=fmas, sums="\n".join(sums), last=chains - 2)
    module = llvm.parse_assembly(text)
    module.verify()
    engine = llvm.create_mcjit_compiler(module, target.machine())
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
        engine.get_function_address("fma_peak")
    )
    buf = np.full(width, 0.999, np.float32)  # |x*a + a| stays bounded: no inf, no denormals
    fn(buf.ctypes.data, iterations)
    best = float("inf")
    for _ in range(repeats):
        buf[:] = 0.999
        start = time.perf_counter_ns()
        fn(buf.ctypes.data, iterations)
        best = min(best, (time.perf_counter_ns() - start) * 1e-9)
    del engine
    return 2 * width * chains * iterations / best
