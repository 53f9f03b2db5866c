"""A device's ceilings for the roofline: peak FLOP rate and copy bandwidth, each backend's
own (`Backend.ceilings()`), measured once per device and cached.

CPU ceilings are single-core, because irkit's CPU kernels run on one thread by default:
- copy bandwidth: `numpy.copyto` of a 256 MiB f32 array (2 x 256 MiB moved per copy; the
  write-allocate read is not counted), the best of 7;
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
            return Ceilings(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            pass  # a damaged cache entry is measured again
    ceilings = Ceilings(
        device=f"cpu {target.cpu} (one core)",
        bandwidth=_copy_bandwidth(),
        flops=_fma_rate(target),
        method="copy: numpy.copyto 256 MiB f32, best of 7; fma: 12 chains of vector fma "
        "JIT-compiled for the host, best of 7",
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
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

    features = target.features
    width = 16 if "+avx512f" in features else 8 if "+avx2" in features else 4
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
    text = _FMA_KERNEL.format(w=width, phis=phis, fmas=fmas, sums="\n".join(sums),
                              last=chains - 2)  # fmt: skip
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
