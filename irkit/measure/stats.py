"""Statistics for timing samples: medians with bootstrap confidence intervals."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Estimate:
    """A median and its (percentile-bootstrap) confidence interval, in the samples' unit."""

    median: float
    low: float
    high: float
    confidence: float
    n: int

    @property
    def half_width(self) -> float:
        """Half the CI width relative to the median (0.01 = +-1%)."""
        return (self.high - self.low) / 2 / self.median if self.median else float("inf")

    def to_json(self) -> dict:
        return {"median": self.median, "ci_low": self.low, "ci_high": self.high,
                "confidence": self.confidence, "n": self.n}  # fmt: skip


def median_ci(
    samples: np.ndarray, confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> Estimate:
    """The median of `samples` with a percentile-bootstrap CI (deterministic for a seed)."""
    x = np.asarray(samples, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no samples")
    med = float(np.median(x))
    if x.size == 1:
        return Estimate(med, med, med, confidence, 1)
    rng = np.random.default_rng(seed)
    boot = np.median(x[rng.integers(0, x.size, size=(resamples, x.size))], axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(boot, [alpha, 1 - alpha])
    return Estimate(med, float(low), float(high), confidence, int(x.size))


def ratio_ci(
    numer: np.ndarray,
    denom: np.ndarray,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Estimate:
    """The ratio of two variants' times, paired by round: the median of numer[i]/denom[i]
    with a bootstrap CI over rounds (pairing cancels drift that hits both alike)."""
    a, b = np.asarray(numer, dtype=np.float64), np.asarray(denom, dtype=np.float64)
    n = min(a.size, b.size)
    return median_ci(a[:n] / b[:n], confidence, resamples, seed)
