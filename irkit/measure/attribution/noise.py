"""The A/A checks every attribution runs on itself, and the rule a pass is judged by: the
twins' ratio and each program's split halves, their floors in seconds, and `significance`."""

from __future__ import annotations

from collections.abc import Mapping
from statistics import NormalDist

import numpy as np

from irkit.measure.attribution.bootstrap import copy_variance, round_bootstrap
from irkit.measure.stats import Interval


def significance(saved: Interval, changes: bool, floor_s: float = 0.0) -> tuple[bool, float | None]:
    """The rule every pass is judged by (module docstring, step 4): significant when the
    pass changes code and its saving's 95% CI, which holds the copy-to-copy spread as well
    as the round-to-round one, excludes zero; where an A/A check of the pass's own contexts
    failed (its CI did not cover equal programs), also beyond that A/A floor, `floor_s`
    seconds. Returns the verdict and the minimum detectable effect: the saving this run
    would call significant four times in five, (1.96 + 0.84) standard errors, the standard
    error read off the CI (half-width / 1.96), or the floor where that is larger (None for
    a pass that changes no code: exactly zero)."""
    if not changes:
        return False, None
    half = (saved.high - saved.low) / 2
    return (
        saved.excludes(0.0) and abs(saved.value) > floor_s,
        max(floor_s, half * (1.96 + 0.84) / 1.96),
    )


def aa_floor(ratio: Interval, scale_s: float) -> tuple[float, float]:
    """An A/A ratio's floor: the farthest end of its CI from 1, as a fraction and in seconds
    at `scale_s`."""
    fraction = max(1 - ratio.low, ratio.high - 1, 0.0)
    return fraction, fraction * scale_s


def split_aa(row: np.ndarray, slots: np.ndarray, resamples: int, seed: int) -> Interval:
    """One program's A/A: its time on the even slots over its time on the odd slots (each
    half's time as `round_bootstrap` gives it: the mean of its copies' medians, the median
    of its rounds where a half has one copy; alternate rounds where it has one copy), the
    CI from resampling each half as `round_bootstrap` does."""
    return Interval.of(*_split_ratio(row, slots, resamples, seed))


def family_confidence(n: int) -> float:
    """The confidence each of `n` checks needs for 95% over the family (Bonferroni)."""
    return 1 - 0.05 / max(n, 1)


def context_checks(
    rows: Mapping[str, np.ndarray], slots: np.ndarray, resamples: int, seed: int
) -> tuple[dict[str, Interval], dict[str, bool]]:
    """Every program's split A/A (`split_aa`): its 95% CI, and whether it fails at 95% for
    the family of programs (Bonferroni: its CI at 1 - 0.05/n excludes 1)."""
    family = family_confidence(len(rows))
    labels = np.unique(slots)
    pooled = None
    if len(labels) > 2:  # the copy variance pooled over every program (each half alone has
        # two or so copies: one degree of freedom, Cauchy tails that no family level survives)
        groups = [np.flatnonzero(slots == s) for s in labels]
        pooled = (
            copy_variance(np.stack(list(rows.values())), groups),
            len(rows) * (len(labels) - 1),
        )
    split = {
        k: Interval.of(*_split_ratio(r, slots, resamples, seed, pooled)) for k, r in rows.items()
    }
    return split, {k: _widened(r, family).excludes(1.0) for k, r in split.items()}


def _widened(ci: Interval, confidence: float) -> Interval:
    """A 95% `ci` stretched about its point to `confidence` by the normal quantiles' ratio,
    each side by its own width. The family's level lies in the replicates' far tails, one
    or two of them at most (1 - 0.05/60 of 1000), which moved with the resampling scheme:
    resampling cycles, 4 of 600 alike programs failed at the family's 95% against 0.5
    expected; stretched from the 95% interval, 1 of 1200 (1.0 expected)."""
    scale = NormalDist().inv_cdf(1 - (1 - confidence) / 2) / NormalDist().inv_cdf(0.975)
    return Interval(
        ci.value, ci.value - (ci.value - ci.low) * scale, ci.value + (ci.high - ci.value) * scale
    )


def _split_ratio(
    row: np.ndarray,
    slots: np.ndarray,
    resamples: int,
    seed: int,
    pooled: tuple[float, int] | None = None,
) -> tuple[float, np.ndarray]:
    """`split_aa`'s ratio and its bootstrap replicates (`pooled`: `round_bootstrap`'s)."""
    halves = (slots % 2 == 0) if len(np.unique(slots)) > 1 else (np.arange(len(row)) % 2 == 0)
    parts = []
    for half in (halves, ~halves):
        sub = slots[half] // 2 if len(np.unique(slots)) > 1 else None
        parts.append(round_bootstrap(row[half][None, :], resamples, seed, sub, pooled))
    (pa, ba), (pb, bb) = parts
    return float(pa[0] / pb[0]), ba[0] / bb[0]
