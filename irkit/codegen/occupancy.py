"""A GPU kernel's theoretical occupancy from its launch and ptxas's resources: how many of
its blocks one SM holds at once (the least of the limits on blocks, warps, registers and
shared memory), the share of the SM's warps that makes, and the waves its grid takes.

    occupancy({"grid": (264, 1, 1), "block": (128, 1, 1), "shared": 0},
              {"registers": 64, "shared_bytes": 0}, arch="sm_90")
    # {"blocks_per_sm": 8, "occupancy_pct": 50.0, "waves": 0.25, "spills": 0, ...}

The limits are CUDA's occupancy calculator's for each compute capability: registers are
allocated per warp in units of 256, shared memory per block with 1 KiB reserved for the
system. What it leaves out (the L1/shared carve-out chosen at run time, launch bounds) can
only lower the figure: it is an upper bound, as Nsight Compute's "theoretical occupancy" is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LIMITS = {
    # arch: (max warps per SM, max blocks per SM, shared memory per SM in bytes)
    "sm_80": (64, 32, 164 * 1024),
    "sm_86": (48, 16, 100 * 1024),
    "sm_89": (48, 24, 100 * 1024),
    "sm_90": (64, 32, 228 * 1024),
}
REGISTERS_PER_SM = 65536
SMS = 132
"""SMs whose waves are counted by default: an H100 SXM's and an H200's (gpu-tile-matmul's
`sms` option assumes the same)."""


def occupancy(
    launch: Mapping[str, Any] | None,
    resources: Mapping[str, Any],
    arch: str = "sm_90",
    sms: int = SMS,
) -> dict[str, Any] | None:
    """Blocks per SM, theoretical occupancy (% of the SM's warps), waves on `sms` SMs and
    spills (stores + loads), and what limits the blocks; None for a kernel without a block
    shape or a register count (a CPU kernel)."""
    if not launch or "block" not in launch or "registers" not in resources:
        return None
    warps_max, blocks_max, shared_max = LIMITS.get(arch, LIMITS["sm_90"])
    threads = _product(launch["block"])
    blocks = _product(launch.get("grid", (1,)))
    warps = -(-threads // 32)
    per_warp = -(-int(resources["registers"]) * 32 // 256) * 256
    shared = int(resources.get("shared_bytes", 0)) + int(launch.get("shared", 0))
    limits = {
        "blocks": blocks_max,
        "warps": warps_max // max(warps, 1),
        "registers": REGISTERS_PER_SM // max(per_warp * warps, 1),
        "shared memory": shared_max // (shared + 1024),
    }
    resident = max(min(limits.values()), 0)
    return {
        "blocks_per_sm": resident,
        "occupancy_pct": 100.0 * resident * warps / warps_max,
        "waves": blocks / (resident * sms) if resident else float("inf"),
        "spills": int(resources.get("spill_stores", 0)) + int(resources.get("spill_loads", 0)),
        "limited_by": min(limits, key=lambda k: limits[k]),
    }


def _product(values: Any) -> int:
    out = 1
    for v in values if isinstance(values, list | tuple) else [values]:
        out *= int(v)
    return out
