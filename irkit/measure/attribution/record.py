"""What an attribution finds, as typed values and their JSON record (`Attribution.to_json`,
kind "irkit.attribution", schema 1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from irkit.measure.roofline import Ceilings
from irkit.measure.stats import Estimate, Interval
from irkit.pipelines import Step


@dataclass(frozen=True)
class KernelTime:
    name: str
    hash: str
    seconds: float | None
    """None when the kernel phase was skipped (`kernel_times=False`): the kernel is known by
    its code, not timed."""
    ci: tuple[float, float] | None
    flops: int
    min_bytes: int
    roof: dict | None
    once: bool = False
    """A once-per-bind kernel (weight layout or packing): not in the time per call."""

    def to_json(self) -> dict:
        low, high = self.ci if self.ci is not None else (None, None)
        return {"name": self.name, "hash": self.hash, "seconds": self.seconds,
                "ci_low": low, "ci_high": high, "flops": self.flops,
                "min_bytes": self.min_bytes, "roofline": self.roof,
                "once_per_bind": self.once}  # fmt: skip


@dataclass(frozen=True)
class PassResult:
    label: str
    spec: str
    saved: Interval
    """Seconds per call saved by the pass (negative: slower)."""
    speedup: Interval
    relative: float
    """saved / T(before), the fraction of the reference variant's time."""
    significant: bool
    changes_code: bool
    removed: list[KernelTime]
    added: list[KernelTime]
    min_detectable: float | None = None
    """Seconds: the saving this run would call significant for this pass with 80% power
    (`significance`)."""

    @property
    def kernel_delta(self) -> float | None:
        """Seconds saved per call summed over the kernels this pass changed, each timed
        alone (None when kernels were not timed); once-per-bind kernels are not per call."""
        removed = [k for k in self.removed if not k.once]
        added = [k for k in self.added if not k.once]
        seconds = [k.seconds for k in removed], [k.seconds for k in added]
        if any(s is None for s in [*seconds[0], *seconds[1]]):
            return None
        return sum(s or 0.0 for s in seconds[0]) - sum(s or 0.0 for s in seconds[1])

    def to_json(self) -> dict:
        return {
            "pass": self.label,
            "spec": self.spec,
            "saved_s": self.saved.to_json(),
            "speedup": self.speedup.to_json(),
            "relative": self.relative,
            "significant": self.significant,
            "changes_code": self.changes_code,
            "min_detectable_s": self.min_detectable,
            "kernels": {
                "removed": [k.to_json() for k in self.removed],
                "added": [k.to_json() for k in self.added],
                "saved_s": self.kernel_delta,
            },
        }


@dataclass
class Attribution:
    model: str
    pipeline: str
    backend: str
    strategy: str
    steps: list[Step]
    passes: list[PassResult]
    variants: list[dict]
    total_saved: Interval
    total_speedup: Interval
    baseline: Estimate
    full: Estimate
    noise: dict
    kernels: dict[str, list[KernelTime]]
    """Per-kernel times of the variant with no optional pass ("baseline") and with all."""
    protocol: dict
    fingerprint: dict
    ceilings: Ceilings | None
    dims: dict = field(default_factory=dict)
    workload: str | None = None
    dtype: str = ""
    """The type the model's f32 tensors were converted to (`--dtype`); "" where none was.
    It names the workload too (gemm-bf16), so that histories and comparisons keep it apart."""
    moments: dict = field(default_factory=dict)
    """"baseline" and "full": each program's log moments and sample count (`log_moments`),
    what a later test between runs needs (the history database keeps them)."""
    rounds: dict | None = field(default=None, repr=False, compare=False)
    """The measured rounds, for re-analysis (not in `to_json`): "programs" (their keys, the
    twins' names last), "seconds" [program, round], "slots" (the slot each round ran on)
    and "variants" (each variant's mask, the passes on, and its program's key)."""

    def to_json(self) -> dict:
        return {
            "kind": "irkit.attribution",
            "schema": 1,
            "workload": self.workload
            or Path(self.model).stem + (f"-{self.dtype}" * bool(self.dtype)),
            "model": self.model,
            "dims": self.dims,
            **({"dtype": self.dtype} if self.dtype else {}),
            "pipeline": self.pipeline,
            "backend": self.backend,
            "strategy": self.strategy,
            "steps": [
                {"pass": s.label, "spec": s.spec, "optional": s.optional} for s in self.steps
            ],
            "passes": [p.to_json() for p in self.passes],
            "total": {
                "saved_s": self.total_saved.to_json(),
                "speedup": self.total_speedup.to_json(),
                "baseline_s": self.baseline.to_json(),
                "full_s": self.full.to_json(),
                "sum_of_contributions_s": sum(p.saved.value for p in self.passes),
                **{f"{k}_log": v for k, v in self.moments.items()},
            },
            "noise_floor": self.noise,
            "variants": self.variants,
            "kernels": {k: [t.to_json() for t in v] for k, v in self.kernels.items()},
            "ceilings": self.ceilings.to_json() if self.ceilings else None,
            "protocol": self.protocol,
            "fingerprint": self.fingerprint,
        }
