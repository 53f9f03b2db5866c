"""The timing primitives behind irkit-bench run: CIs that cover, and honest stop reasons."""

from __future__ import annotations

import numpy as np

from irkit.measure.stats import median_ci, ratio_ci
from irkit.measure.timers import time_cpu, time_interleaved


def test_median_ci_covers_the_true_median_at_about_the_stated_rate() -> None:
    rng = np.random.default_rng(0)
    true_median = np.log(2)  # of an exponential(1) distribution: skewed, like timings
    covered = 0
    for trial in range(200):
        e = median_ci(rng.exponential(1.0, 60), seed=trial)
        assert e.low <= e.median <= e.high
        covered += e.low <= true_median <= e.high
    assert 0.88 <= covered / 200 <= 0.99


def test_ratio_ci_is_paired_by_round() -> None:
    rng = np.random.default_rng(1)
    drift = np.linspace(1.0, 3.0, 50)  # both variants slow down alike
    a = drift * 2.0 * rng.uniform(0.99, 1.01, 50)
    b = drift * rng.uniform(0.99, 1.01, 50)
    r = ratio_ci(a, b)
    assert r.low <= 2.0 <= r.high and r.half_width < 0.01


def test_time_cpu_stops_on_precision_or_budget_and_says_which() -> None:
    x = np.ones(1000)
    t = time_cpu(lambda: x.sum(), precision=0.5, budget_s=5.0)
    assert t.stop_reason == "precision" and t.estimate.n >= 10 and t.reps > 1
    t = time_cpu(lambda: x.sum(), precision=0.0, budget_s=0.01, min_samples=5)
    assert t.stop_reason == "budget" and t.estimate.n >= 3


def test_interleaved_timing_keeps_variants_apart() -> None:
    small, big = np.ones(100), np.ones(100_000)
    t = time_interleaved({"small": lambda: small.sum(), "big": lambda: big.sum()}, budget_s=2.0)
    assert t["small"].estimate.median < t["big"].estimate.median
    assert t["small"].stop_reason == t["big"].stop_reason
