"""Change points in a series of results over commits: where a workload's time stepped.

    changes = detect(points, floor=0.02)      # -> [Change(at, before, after, ratio, ...)]

Candidates come from `ruptures` (PELT on the log of each point's median, an L2 cost, BIC's
penalty 2 sigma^2 log n, sigma the larger of the points' own noise, from their 95% CIs, and
the scatter from run to run that those CIs do not hold). A candidate is a change only where the step is real in both senses:

- larger than the series' A/A floor (the largest floor among its points: on this machine
  and protocol, an A/A pair differs by that much without any change);
- and the two segments' means differ beyond their standard errors (Welch's t-test on the
  log medians, at `confidence`), each segment's spread its points' scatter.

A cut that fails is tested again between the nearest cuts that passed (or the series'
ends), until no more pass.

(apache-otava's E-divisive with its t-test was the first choice; its releases pin numpy
2.2 on Python < 3.14, and MongoDB's signal-processing-algorithms pins numpy < 2: both
would take irkit's numpy back. ruptures runs on the numpy irkit has.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Step = tuple[float, float, float]
"""A cut's test: the step of the mean log, Welch's p-value, the CI's half-width."""
MIN_POINTS = 4
"""Fewer points than this (two a side) are not searched."""


@dataclass(frozen=True)
class Change:
    at: int
    """The index of the first point after the step."""
    before: str | None
    """The last commit before the step, and the first after (`after`)."""
    after: str | None
    ratio: float
    """After over before (the geometric means of the two segments' medians)."""
    ci_low: float
    ci_high: float
    p_value: float

    @property
    def slower(self) -> bool:
        return self.ratio > 1

    def describe(self) -> str:
        way = "slower" if self.slower else "faster"
        span = f"{(self.before or '?')[:10]}..{(self.after or '?')[:10]}"
        return (
            f"{abs(self.ratio - 1):.1%} {way} between {span} ({self.ratio:.3f}x "
            f"[{self.ci_low:.3f}, {self.ci_high:.3f}], p = {self.p_value:.2g})"
        )


def detect(
    values: Sequence[float],
    ci_low: Sequence[float | None],
    ci_high: Sequence[float | None],
    commits: Sequence[str | None],
    floor: float = 0.0,
    confidence: float = 0.99,
) -> list[Change]:
    """The changes in one series of positive values (oldest first), each point's 95% CI
    beside it; `floor`: the relative A/A floor under which no step is a change. PELT's cuts
    are tested between their neighbours; one that fails is tested again between the
    nearest cuts that passed (or the series' ends): a noisy night that PELT cut off as a
    segment of its own would otherwise leave the real step beside it with two points a
    side, too few for the test."""
    x = np.log(np.asarray(values, dtype=np.float64))
    n = len(x)
    if n < MIN_POINTS:
        return []
    sigma = _point_noise(values, ci_low, ci_high, x)
    cuts = _candidates(x, sigma)

    def passing(t: Step | None) -> Step | None:
        ok = t is not None and abs(math.expm1(t[0])) > floor and t[1] <= 1 - confidence
        return t if ok else None

    kept: dict[int, Step] = {}
    for k, c in enumerate(cuts):
        first = passing(_step(x, [0, *cuts, n], k, confidence))
        if first is not None:
            kept[c] = first
    while True:  # failing cuts again, between the nearest kept cuts (or the series' ends)
        more: dict[int, Step] = {}
        for c in cuts:
            if c in kept:
                continue
            left = max((k for k in kept if k < c), default=0)
            right = min((k for k in kept if k > c), default=n)
            again = passing(_step(x, [left, c, right], 0, confidence))
            if again is not None:
                more[c] = again
        if not more:
            break
        best = min(more, key=lambda c: more[c][1])  # one a round, the strongest: a cut
        kept[best] = more[best]  # beside a real step is then tested against it
    changes = []
    for cut in sorted(kept):
        step, p, half = kept[cut]
        changes.append(
            Change(
                cut,
                commits[cut - 1],
                commits[cut],
                math.exp(step),
                math.exp(step - half),
                math.exp(step + half),
                p,
            )
        )
    return changes


def _step(x: np.ndarray, edges: list[int], k: int, confidence: float) -> Step | None:
    """Cut k's step between its neighbouring segments (edges[k]..cut..edges[k + 2]): the
    difference of their mean logs, Welch's p-value and the CI's half-width; None where a
    side has fewer than 2 points."""
    from scipy import stats

    left, right = x[edges[k] : edges[k + 1]], x[edges[k + 1] : edges[k + 2]]
    if len(left) < 2 or len(right) < 2:
        return None
    step = float(right.mean() - left.mean())
    test = stats.ttest_ind(right, left, equal_var=False)
    p = float(test.pvalue) if np.isfinite(test.pvalue) else 0.0
    se = math.sqrt(left.var(ddof=1) / len(left) + right.var(ddof=1) / len(right))
    half = float(stats.t.ppf(0.5 + confidence / 2, max(len(left) + len(right) - 2, 1))) * se
    return step, p, half


def _point_noise(
    values: Sequence[float],
    low: Sequence[float | None],
    high: Sequence[float | None],
    x: np.ndarray,
) -> float:
    """The series' noise on the log scale: the larger of its points' own (their CIs' median
    half-width over 1.96) and the scatter from run to run, which a point's CI does not hold
    (a VM's speed moves between runs: 1% where each run's CI said 0.25%), read robustly
    from successive differences (their MAD over sqrt 2: a step moves one difference only)."""
    halves = [
        (math.log(h) - math.log(lo)) / 2 / 1.96
        for v, lo, h in zip(values, low, high, strict=True)
        if lo is not None and h is not None and 0 < lo <= v <= h
    ]
    own = float(np.median(halves)) if halves else 0.0
    scatter = 1.4826 * float(np.median(np.abs(np.diff(x)))) / math.sqrt(2)
    return max(own, scatter, 1e-6)


def _candidates(x: np.ndarray, sigma: float) -> list[int]:
    """Where PELT (L2 cost, BIC's penalty for noise `sigma`) cuts the series."""
    try:
        import ruptures
    except ImportError:
        from irkit.errors import IrkitError

        raise IrkitError("change points need ruptures: pip install 'irkit[history]'") from None
    penalty = 2 * sigma**2 * math.log(len(x))
    cuts = ruptures.Pelt(model="l2", min_size=2, jump=1).fit(x.reshape(-1, 1)).predict(pen=penalty)
    return [int(c) for c in cuts if c < len(x)]
