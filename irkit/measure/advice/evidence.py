"""The evidence `advise` reasons from: per kernel, what it is, where it sits on the roofline
and what its code shows; on a GPU, its resources and (where ncu works) its counters.

A kernel's *kind* is read from the graph ops it was made of (its name: `k3_matmul_add`,
`k0_softmax`): "contraction" (matmul, convolution, im2col), "attention", "reduction"
(softmax, norms, reduce_*, pooling), "transpose", "movement" (reshape, concat, slice, pad,
gather...: data moved, nothing computed) or "elementwise". Its *features* come from its
loop IR: the widest vector it uses, scalar transcendentals left for libm (`math.exp`
unexpanded), index division (`divui`/`remui`, a flattened index taken apart), rows whose
byte stride is a multiple of 4 KiB (cache sets and 4K aliasing), a convolution's window
loops.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from irkit.codegen.occupancy import occupancy

KINDS = ("contraction", "attention", "reduction", "transpose", "movement", "elementwise")

_CONTRACTION = ("matmul", "conv", "im2col", "gemm", "einsum")
_REDUCTION = ("softmax", "norm", "reduce", "pool", "argmax", "argmin", "cumsum", "topk")
_MOVEMENT = {
    "reshape",
    "concat",
    "slice",
    "pad",
    "gather",
    "expand",
    "split",
    "copy",
    "squeeze",
    "unsqueeze",
    "flatten",
    "tile",
    "broadcast",
    "transpose",
    "etc",
    "pack",
    "scatter",
    "nd",
    "where",
}
_ELEMENT_BITS = {
    "f64": 64,
    "f32": 32,
    "f16": 16,
    "bf16": 16,
    "i64": 64,
    "i32": 32,
    "i8": 8,
    "i1": 1,
}
_VECTOR = re.compile(r"vector<(?:\d+x)*(\d+)x(f64|f32|f16|bf16|i64|i32|i8|i1)>")
_SCALAR_MATH = re.compile(r"\bmath\.(exp|tanh|erf|log|sin|cos|powf|rsqrt|sqrt|exp2|log1p|expm1)\b")
_INDEX_DIV = re.compile(r"\barith\.(divui|remui|divsi|remsi|floordivsi|ceildivsi)\b[^\n]*: index")
_ROWS = re.compile(r"memref<(?:\d+x)*(\d+)x(f64|f32|f16|bf16|i64|i32|i8)>")


def kernel_kind(name: str) -> str:
    """The kind of kernel `name` (irkit's `k<N>_<ops>` naming) is; see the module doc."""
    ops = re.sub(r"^k\d+_", "", name).removesuffix("_pack")
    if "attention" in ops:
        return "attention"
    if any(w in ops for w in _CONTRACTION):
        return "contraction"
    if any(w in ops for w in _REDUCTION):
        return "reduction"
    words = set(ops.split("_"))
    if "transpose" in words and words <= _MOVEMENT:
        return "transpose"
    if words <= _MOVEMENT:
        return "movement"
    return "elementwise"


def code_features(ir: str) -> tuple[int, frozenset[str]]:
    """The widest vector (bits) the kernel's loop IR uses (0: scalar), and its features."""
    widest = max((int(n) * _ELEMENT_BITS[t] for n, t in _VECTOR.findall(ir)), default=0)
    found = set()
    if _SCALAR_MATH.search(ir):
        found.add("scalar-math")
    if _INDEX_DIV.search(ir):
        found.add("index-division")
    if any(int(n) * _ELEMENT_BITS[t] // 8 % 4096 == 0 for n, t in _ROWS.findall(ir)):
        found.add("rows-4k-strided")
    return widest, frozenset(found)


@dataclass
class KernelEvidence:
    """One kernel of the program advised, as measured (alone, warm, on the case's data)."""

    name: str
    hash: str
    seconds: float
    ci: tuple[float, float]
    share: float
    """Of the program's kernel time (once-per-bind kernels left out)."""
    flops: int
    min_bytes: int
    kind: str
    vector_bits: int
    features: frozenset[str]
    threads: int = 1
    roof: dict[str, Any] | None = None
    """`roofline.RoofPoint.to_json()`, where the backend has ceilings."""
    resources: dict[str, Any] = field(default_factory=dict)
    launch: dict[str, Any] | None = None
    counters: dict[str, float] | None = None
    gpu: dict[str, float] | None = None
    """`occupancy`: blocks per SM, theoretical occupancy, waves, spills (GPU kernels)."""
    ir: str = field(default="", repr=False)

    @property
    def percent_of_roof(self) -> float | None:
        return None if self.roof is None else float(self.roof["percent_of_roof"])

    @property
    def bound(self) -> str | None:
        return None if self.roof is None else str(self.roof["bound"])

    def below_roof(self, percent: float) -> bool:
        """Whether it runs under `percent` of its roof (unknown: True, nothing rules it out)."""
        return self.percent_of_roof is None or self.percent_of_roof < percent

    def describe(self) -> str:
        where = f"{self.share:.0%} of the time"
        roof = (
            f", {self.bound}-bound ({self.roof['level']}), {self.percent_of_roof:.0f}% of its roof"
            if self.roof
            else ""
        )
        return f"{self.name} ({self.kind}; {where}{roof})"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "hash": self.hash,
            "seconds": self.seconds,
            "ci": list(self.ci),
            "share": self.share,
            "flops": self.flops,
            "min_bytes": self.min_bytes,
            "kind": self.kind,
            "vector_bits": self.vector_bits,
            "features": sorted(self.features),
            "threads": self.threads,
            "roof": self.roof,
            "resources": self.resources,
            "launch": self.launch,
            "counters": self.counters,
            "gpu": self.gpu,
        }


def gather(
    exe: Any,
    bound: Any,
    ceilings: Any,
    precision: float,
    budget_s: float,
    seed: int,
    counters: dict[str, dict[str, float]] | None = None,
    tick: Callable[[str, int, int], None] | None = None,
) -> list[KernelEvidence]:
    """Every kernel of `exe` (bound as `bound`) timed alone, interleaved, with its roofline
    point and code features; once-per-bind kernels left out. Slowest first."""
    from irkit.measure.roofline import roof_point
    from irkit.measure.timers import time_interleaved

    steady = [(i, r) for i, r in enumerate(exe.kernels) if not r.once]
    fns = {f"{i}": bound.timed_kernel(i) for i, _ in steady}
    report = (lambda r: tick("evidence", r, 200)) if tick else None
    timings = time_interleaved(fns, precision, budget_s, 5, 200, seed=seed, on_round=report)
    total = sum(timings[f"{i}"].estimate.median for i, _ in steady) or 1.0
    out = []
    for i, r in steady:
        e = timings[f"{i}"].estimate
        threads = int((r.launch or {}).get("threads", 1))
        roof = (
            roof_point(r.flops, r.min_bytes, e.median, ceilings, threads).to_json()
            if ceilings and r.min_bytes
            else None
        )
        widest, features = code_features(r.ir)
        out.append(
            KernelEvidence(
                r.name,
                r.hash,
                e.median,
                (e.low, e.high),
                e.median / total,
                r.flops,
                r.min_bytes,
                kernel_kind(r.name),
                widest,
                features,
                threads,
                roof,
                dict(r.resources),
                r.launch,
                (counters or {}).get(r.name),
                occupancy(r.launch, r.resources, str(r.resources.get("arch", "sm_90"))),
                r.ir,
            )
        )
    return sorted(out, key=lambda k: -k.seconds)


def hot(kernels: Sequence[KernelEvidence], cover: float, most: int) -> list[KernelEvidence]:
    """The slowest kernels that together hold `cover` of the time, at most `most`."""
    out: list[KernelEvidence] = []
    held = 0.0
    for k in kernels:
        if held >= cover or len(out) >= most:
            break
        out.append(k)
        held += k.share
    return out
