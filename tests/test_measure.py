"""The timing primitives behind irkit-bench run: CIs that cover, and honest stop reasons."""

from __future__ import annotations

import numpy as np
import pytest

from irkit.measure.stats import median_ci, ratio_ci
from irkit.measure.timers import time_cpu, time_interleaved


def test_median_ci_covers_the_true_median_at_about_the_stated_rate() -> None:
    rng = np.random.default_rng(0)
    true_median = np.log(2)  # of an exponential(1) distribution: skewed, like timings
    covered = 0
    for _ in range(200):
        e = median_ci(rng.exponential(1.0, 60))
        assert e.low <= e.median <= e.high
        covered += e.low <= true_median <= e.high
    assert 0.92 <= covered / 200 <= 1.0


def test_median_ci_keeps_its_coverage_at_ten_samples() -> None:
    # Where a comparison may stop, and where the percentile bootstrap covered about 90%.
    rng = np.random.default_rng(2)
    trials = [median_ci(rng.lognormal(0.0, 0.5, 10)) for _ in range(2000)]
    covered = np.mean([e.low <= 1.0 <= e.high for e in trials])  # the lognormal's median
    assert trials[0].confidence == 1 - 2 * 11 / 1024  # [x(2), x(9)]: P(Bin(10, 1/2) < 2)
    assert covered >= 0.96, covered


def test_median_ci_reports_the_coverage_it_attains() -> None:
    e = median_ci(np.arange(5.0))  # five samples: [min, max] covers 1 - 2/32 only
    assert (e.low, e.high) == (0.0, 4.0) and e.confidence == 1 - 2 / 32
    big = median_ci(np.random.default_rng(3).normal(size=5000))  # the normal approximation
    assert 0.95 <= big.confidence <= 0.96 and big.low < 0 < big.high


def test_ratio_ci_is_paired_by_round() -> None:
    rng = np.random.default_rng(1)
    drift = np.linspace(1.0, 3.0, 50)  # both variants slow down alike
    a = drift * 2.0 * rng.uniform(0.99, 1.01, 50)
    b = drift * rng.uniform(0.99, 1.01, 50)
    r = ratio_ci(a, b)
    assert r.low <= 2.0 <= r.high and r.half_width < 0.01


@pytest.mark.timing
def test_time_cpu_stops_on_precision_and_says_so() -> None:
    x = np.ones(1000)
    t = time_cpu(lambda: x.sum(), precision=0.5, budget_s=5.0)
    assert t.stop_reason == "precision" and t.estimate.n >= 10 and t.reps > 1


def test_time_cpu_stops_on_its_budget_and_says_so() -> None:
    # A precision of 0 can never be met, so the budget ends it whatever the machine's load.
    x = np.ones(1000)
    t = time_cpu(lambda: x.sum(), precision=0.0, budget_s=0.01, min_samples=5)
    assert t.stop_reason == "budget" and t.estimate.n >= 3


@pytest.mark.timing
def test_interleaved_timing_keeps_variants_apart() -> None:
    small, big = np.ones(100), np.ones(100_000)
    t = time_interleaved({"small": lambda: small.sum(), "big": lambda: big.sum()}, budget_s=2.0)
    assert t["small"].estimate.median < t["big"].estimate.median


def test_interleaved_timing_samples_every_variant_in_every_round() -> None:
    small, big = np.ones(100), np.ones(100_000)
    t = time_interleaved({"small": lambda: small.sum(), "big": lambda: big.sum()}, budget_s=0.2)
    assert t["small"].stop_reason == t["big"].stop_reason
    assert t["small"].estimate.n == t["big"].estimate.n


def test_a_kernel_is_placed_under_the_roof_of_the_level_its_working_set_fits() -> None:
    """A working set that fits L2 is held to L2's bandwidth, one past every cache to
    memory's; a kernel on two threads gets twice the FMA rate and private-cache bandwidth,
    not twice the shared L3's."""
    from irkit.measure.roofline import roof_point
    from irkit.runtime.ceilings import Ceilings

    ceilings = Ceilings("cpu", bandwidth=20e9, flops=100e9, method="test", measured_at="now",
                        levels=({"name": "L1d", "bytes": 48 << 10, "bandwidth": 200e9, "private": True},
                                {"name": "L2", "bytes": 2 << 20, "bandwidth": 80e9, "private": True},
                                {"name": "L3", "bytes": 32 << 20, "bandwidth": 30e9, "private": False}))  # fmt: skip
    copy_l2 = roof_point(0, 1 << 20, (1 << 20) / 40e9, ceilings)
    assert (copy_l2.level, copy_l2.bound) == ("L2", "memory")
    assert copy_l2.percent_of_roof == pytest.approx(50.0)
    big = roof_point(0, 1 << 30, (1 << 30) / 10e9, ceilings)
    assert big.level == "memory" and big.percent_of_roof == pytest.approx(50.0)
    two = roof_point(0, 1 << 20, (1 << 20) / 80e9, ceilings, threads=2)
    assert two.percent_of_roof == pytest.approx(50.0)  # 2 x 80 GB/s
    shared = roof_point(0, 8 << 20, (8 << 20) / 15e9, ceilings, threads=2)
    assert (shared.level, shared.percent_of_roof) == ("L3", pytest.approx(50.0))
    gemm = roof_point(2 * 64**3, 3 * 4 * 64**2, 2 * 64**3 / 100e9, ceilings, threads=2)
    assert (gemm.bound, gemm.percent_of_roof) == ("compute", pytest.approx(50.0))


def test_the_cpu_ceilings_measure_each_cache_level() -> None:
    """Levels from sysfs, smallest first, each with a positive copy bandwidth."""
    from irkit.runtime.ceilings import _cache_sizes, cpu_ceilings

    ceilings = cpu_ceilings()
    names = [level["name"] for level in ceilings.levels]
    assert names == [n for n in ("L1d", "L2", "L3") if n in _cache_sizes()][: len(names)]
    sizes = [level["bytes"] for level in ceilings.levels]
    assert sizes == sorted(sizes)
    assert all(level["bandwidth"] > 0 for level in ceilings.levels)


def test_timings_carry_the_process_cpu_time_beside_the_wall_time() -> None:
    """Issue 24: a call that waits (here, sleeps) has a small share of its wall time on the
    CPU; the record says so beside the times."""
    import time as _time

    from irkit.measure.timers import time_interleaved

    timings = time_interleaved({"waits": lambda: _time.sleep(0.002)}, budget_s=0.2,
                               min_rounds=3, max_rounds=3)  # fmt: skip
    t = timings["waits"]
    assert t.cpu_samples is not None and len(t.cpu_samples) == len(t.samples) == 3
    assert t.cpu_over_wall is not None and t.cpu_over_wall < 0.5
    assert t.to_json()["cpu_over_wall"] == t.cpu_over_wall


def test_quiesced_rounds_settle_after_every_sample_and_not_inside_one(monkeypatch) -> None:
    """cpu_peers --quiesce: after each sample, untimed, the rounds wait until no thread of the
    process runs (a pool spinning after a call would otherwise share its cores with the next
    side's sample); without the flag they never wait."""
    from irkit.measure import timers

    calls: list[str] = []
    monkeypatch.setattr(timers, "settle", lambda: calls.append("settle") or 0.0)
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    timers.time_interleaved(fns, budget_s=1.0, min_rounds=4, max_rounds=4, warmup=0,
                            min_sample_s=0.0, quiesce=True)  # fmt: skip
    sampled = calls[calls.index("settle") - 1 :]  # calibration's calls come first, unsettled
    assert sampled.count("settle") == 8 and len(sampled) == 16
    assert all(x == "settle" for x in sampled[1::2]) and set(sampled[0::2]) == {"a", "b"}
    calls.clear()
    timers.time_interleaved(fns, budget_s=1.0, min_rounds=4, max_rounds=4, warmup=0)
    assert "settle" not in calls


def test_settle_returns_at_once_where_no_thread_runs() -> None:
    from irkit.measure.timers import SETTLE_MAX_S, settle

    assert settle() < SETTLE_MAX_S
