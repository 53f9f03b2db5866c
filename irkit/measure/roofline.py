"""The roofline: where each kernel sits under its device's ceilings.

A kernel's attainable rate is min(peak FLOP/s, intensity x copy bandwidth), where its
intensity is its static FLOPs over its minimum bytes (both counted from the loop IR; see
`irkit.loops.costs`). It is *memory-bound* when its intensity is left of the ridge point
(peak / bandwidth) and *compute-bound* otherwise; `% of roof` is its achieved rate over the
attainable one (for a kernel with no FLOPs: achieved bytes/s over the bandwidth).

The ceilings are each backend's own (`Backend.ceilings()`; `irkit.runtime.ceilings` measures
the CPU's, single-core, and caches them).
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

    def to_json(self) -> dict:
        return asdict(self)


def roof_point(flops: int, min_bytes: int, seconds: float, ceilings: Ceilings) -> RoofPoint:
    """Where a kernel of `flops` FLOPs and `min_bytes` bytes that took `seconds` sits."""
    intensity = flops / min_bytes if min_bytes else float("inf")
    achieved_flops = flops / seconds
    achieved_bw = min_bytes / seconds
    bound = "memory" if intensity < ceilings.ridge else "compute"
    if flops == 0:
        return RoofPoint(0.0, 0.0, achieved_bw, ceilings.bandwidth,
                         100 * achieved_bw / ceilings.bandwidth, "memory")  # fmt: skip
    attainable = min(ceilings.flops, intensity * ceilings.bandwidth)
    return RoofPoint(intensity, achieved_flops, achieved_bw, attainable,
                     100 * achieved_flops / attainable, bound)  # fmt: skip
