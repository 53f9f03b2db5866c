"""The roofline: where each kernel sits under its device's ceilings.

A kernel's attainable rate is min(peak FLOP/s, intensity x bandwidth), where its intensity
is its static FLOPs over its minimum bytes (both counted from the loop IR; see
`irkit.loops.costs`) and the bandwidth is that of the level its working set (the minimum
bytes) is served from: a cache level it fits in (kernels are timed warm, back to back), or
memory. It is *memory-bound* when its intensity is left of that roof's ridge point (peak /
bandwidth) and *compute-bound* otherwise; `% of roof` is its achieved rate over the
attainable one (for a kernel with no FLOPs: achieved bytes/s over the bandwidth). A CPU
kernel on T threads has T times one core's FMA rate and private-cache bandwidth.

The ceilings are each backend's own (`Backend.ceilings()`; `irkit.runtime.ceilings` measures
the CPU's, on one core, and caches them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from irkit.runtime.ceilings import Ceilings, cpu_ceilings

__all__ = ["Ceilings", "RoofPoint", "cpu_ceilings", "roof_point"]


@dataclass(frozen=True)
class RoofPoint:
    intensity: float
    achieved_flops: float
    achieved_bandwidth: float
    attainable: float
    percent_of_roof: float
    bound: str  # "memory" or "compute"
    level: str = "memory"
    """Where the working set was served from: "L1d", "L2", "L3" or "memory"."""
    threads: int = 1

    def to_json(self) -> dict:
        return asdict(self)


def roof_point(
    flops: int, min_bytes: int, seconds: float, ceilings: Ceilings, threads: int = 1
) -> RoofPoint:
    """Where a kernel of `flops` FLOPs and `min_bytes` bytes that took `seconds` on
    `threads` threads sits."""
    intensity = flops / min_bytes if min_bytes else float("inf")
    achieved_flops = flops / seconds
    achieved_bw = min_bytes / seconds
    level, bandwidth = ceilings.memory_roof(min_bytes, threads)
    peak = ceilings.flops * threads
    if flops == 0:
        return RoofPoint(0.0, 0.0, achieved_bw, bandwidth, 100 * achieved_bw / bandwidth,
                         "memory", level, threads)  # fmt: skip
    bound = "memory" if intensity < peak / bandwidth else "compute"
    attainable = min(peak, intensity * bandwidth)
    return RoofPoint(intensity, achieved_flops, achieved_bw, attainable,
                     100 * achieved_flops / attainable, bound, level, threads)  # fmt: skip
