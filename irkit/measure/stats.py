"""Statistics for timing samples: medians with distribution-free confidence intervals."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np


@dataclass(frozen=True)
class Estimate:
    """A median and its confidence interval (order statistics), in the samples' unit."""

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
        return {
            "median": self.median,
            "ci_low": self.low,
            "ci_high": self.high,
            "confidence": self.confidence,
            "n": self.n,
        }


def median_ci(samples: np.ndarray, confidence: float = 0.95) -> Estimate:
    """The median of `samples` with a distribution-free CI: the order statistics
    x(k) <= median <= x(n+1-k) that cover it with probability 1 - 2 P(Binomial(n, 1/2) < k)
    for independent samples from any continuous distribution. The widest k keeping that at
    or above `confidence` is chosen; the coverage it attains is what `confidence` records
    (below the request only for n < 6, where [min, max] is all there is). The percentile
    bootstrap this replaces undercovered at the 10 rounds a comparison may stop at."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    if x.size == 0:
        raise ValueError("no samples")
    med = float(np.median(x))
    n = int(x.size)
    if n == 1:
        return Estimate(med, med, med, 0.0, 1)
    k, coverage = _order_rank(n, confidence)
    return Estimate(med, float(x[k - 1]), float(x[n - k]), coverage, n)


def _order_rank(n: int, confidence: float) -> tuple[int, float]:
    """The largest k >= 1 with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2, and the
    coverage 1 - 2 P(Binomial(n, 1/2) < k). Exact to n = 1000, normal beyond."""
    tail = (1 - confidence) / 2
    if n > 1000:
        z = NormalDist().inv_cdf(1 - tail)
        k = max(1, math.floor(n / 2 - z * math.sqrt(n) / 2))
        return k, 1 - 2 * NormalDist(n / 2, math.sqrt(n) / 2).cdf(k - 0.5)
    total, k, below = 2**n, 1, 1  # below = P(B < k) * 2**n = sum of C(n, i), i < k
    while k < n // 2 and below + math.comb(n, k) <= tail * total:
        below += math.comb(n, k)
        k += 1
    return k, 1 - 2 * below / total


def ratio_ci(
    numer: np.ndarray,
    denom: np.ndarray,
    confidence: float = 0.95,
) -> Estimate:
    """The ratio of two variants' times, paired by round: the median of numer[i]/denom[i]
    with its distribution-free CI (pairing cancels drift that hits both alike)."""
    a, b = np.asarray(numer, dtype=np.float64), np.asarray(denom, dtype=np.float64)
    n = min(a.size, b.size)
    return median_ci(a[:n] / b[:n], confidence)


def t_cdf(t: float, df: int) -> float:
    """Student's t distribution function at `t` for a whole number of degrees of freedom,
    exactly, by its finite series in theta = atan(t / sqrt(df)) (Abramowitz and Stegun
    26.7.3-4: A = P(|T| < t) a sum of df // 2 cosine powers)."""
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:
        term, total = math.cos(theta), math.cos(theta) if df > 1 else 0.0
        for k in range(3, df - 1, 2):  # cos^(k) theta * (2 4 ... (k - 1)) / (1 3 ... k)
            term *= c2 * (k - 1) / k
            total += term
        a = 2 / math.pi * (theta + s * total)
    else:
        term, total = 1.0, 1.0
        for k in range(2, df - 1, 2):  # cos^(k) theta * (1 3 ... (k - 1)) / (2 4 ... k)
            term *= c2 * (k - 1) / k
            total += term
        a = s * total
    return 0.5 + math.copysign(a / 2, t)


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile: for a whole number of degrees of freedom up to 100 (irkit's:
    runs - 1, slots - 1, samples - groups), `t_cdf` inverted by bisection to 1e-12; beyond,
    or for a fractional df, its Cornish-Fisher expansion in 1/df (four terms: within 1e-7
    from 100 degrees of freedom, but 4e-3 low at 3; numpy has neither)."""
    if 1 <= df <= 100 and float(df).is_integer():
        n = int(df)
        lo, hi = -1.0, 1.0
        while t_cdf(lo, n) > p:
            lo *= 2
        while t_cdf(hi, n) < p:
            hi *= 2
        while hi - lo > 1e-12 * max(1.0, abs(hi)):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if t_cdf(mid, n) < p else (lo, mid)
        return (lo + hi) / 2
    z = NormalDist().inv_cdf(p)
    terms = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
    )
    return z + sum(g / df ** (i + 1) for i, g in enumerate(terms))


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float

    @classmethod
    def of(cls, point: float, boot: np.ndarray, confidence: float = 0.95) -> Interval:
        a = (1 - confidence) / 2
        lo, hi = np.quantile(boot, [a, 1 - a]) if np.ndim(boot) else (point, point)
        return cls(float(point), float(lo), float(hi))

    def excludes(self, x: float) -> bool:
        return not (self.low <= x <= self.high)

    def to_json(self) -> dict:
        return {"value": self.value, "ci_low": self.low, "ci_high": self.high}
