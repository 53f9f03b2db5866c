"""Timers. On the CPU: `perf_counter_ns` around a batch of calls, after warm-up.

A sample times `reps` back-to-back calls and records the time per call; `reps` is chosen
once so that a sample lasts at least `min_sample_s`, keeping the clock's resolution and the
call overhead far below the quantity measured. Sampling stops when the median's CI
half-width is under `precision`, or at `max_samples`, or when the budget is spent; the
reason is recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

import numpy as np

from irkit.measure.stats import Estimate, median_ci
from irkit.runtime.backend import NamedTimer, SelfTimed


@dataclass(frozen=True)
class Timing:
    """Per-call times of one function, in seconds, and how they were obtained."""

    samples: np.ndarray
    reps: int
    warmup: int
    stop_reason: str
    estimate: Estimate
    timer: str = "perf_counter_ns"
    cpu_samples: np.ndarray | None = None
    """The process's CPU time per call (all its threads, `process_time_ns`), sample by
    sample beside `samples`: on one thread, much less than the wall time means the process
    waited for a core (a loaded machine), not that the code ran slower."""

    @property
    def cpu_over_wall(self) -> float | None:
        """The median per-sample ratio of CPU time to wall time (None without CPU times)."""
        if self.cpu_samples is None or not np.isfinite(self.cpu_samples).any():
            return None
        return float(np.nanmedian(self.cpu_samples / np.maximum(self.samples, 1e-12)))

    @property
    def log_moments(self) -> tuple[float, float] | None:
        """The mean and standard deviation of the log of the measured times: with the
        sample count, what a later two-sample test on the log scale (Welch's) needs of this
        timing, kept where the samples are not (`irkit.measure.history`)."""
        x = measured(list(self.samples))
        x = x[x > 0]
        if x.size < 2:
            return None
        logs = np.log(x)
        return float(logs.mean()), float(logs.std(ddof=1))

    def to_json(self) -> dict:
        out = {
            "timer": self.timer,
            "reps_per_sample": self.reps,
            "warmup": self.warmup,
            "stop_reason": self.stop_reason,
            "seconds": self.estimate.to_json(),
        }
        if self.cpu_over_wall is not None:
            out["cpu_over_wall"] = self.cpu_over_wall
        if (moments := self.log_moments) is not None:
            out["log_mean"], out["log_sd"] = moments
        return out


MIN_SAMPLE_S = 2e-4
"""The shortest sample the interleaved timers take: calls are batched back to back until one
batch lasts this long (`calibrate`)."""


def calibrate(fn: Callable[[], None], min_sample_s: float) -> int:
    """Calls per sample so that one sample lasts at least `min_sample_s`."""
    reps = 1
    while True:
        elapsed = _sample(fn, reps) * reps
        if elapsed >= min_sample_s or reps >= 1 << 20:
            return reps
        reps = max(reps * 2, int(reps * min_sample_s / max(elapsed, 1e-9) * 1.2))


def time_cpu(
    fn: Callable[[], None],
    precision: float = 0.01,
    budget_s: float = 2.0,
    min_samples: int = 10,
    max_samples: int = 200,
    warmup: int = 1,
    min_sample_s: float = MIN_SAMPLE_S,
    floor_samples: int = 3,
) -> Timing:
    """Time one function (see the module docstring); returns per-call seconds.

    Sampling goes on to `min_samples` unless the budget runs out first, and never stops
    before `floor_samples` (so a one-second kernel still gets a median of three)."""
    timings = time_interleaved(
        {"fn": fn},
        precision,
        budget_s,
        min_samples,
        max_samples,
        warmup,
        min_sample_s,
        floor_rounds=floor_samples,
    )
    return timings["fn"]


def _sample(fn: Callable[[], None], reps: int) -> float:
    """Seconds per call over one batch of `reps` back-to-back calls. A function that times
    itself (a `sample(reps)` method, as GPU runs have: device events) is asked to."""
    if isinstance(fn, SelfTimed):
        return fn.sample(reps)
    start = time.perf_counter_ns()
    for _ in range(reps):
        fn()
    return (time.perf_counter_ns() - start) * 1e-9 / reps


SETTLE_STEP_S = 0.01
"""`settle`'s step: the process's CPU time is read across sleeps this long (the kernel
charges other threads' CPU time at its scheduler tick, 4 ms at HZ=250: across 2 ms sleeps a
spinning pool showed 0.02-0.04 cores of its ~0.8)."""
SETTLE_MAX_S = 0.2
"""`settle` gives up (the process busy for another reason) after this long."""


def settle() -> float:
    """Wait until no thread of this process is running: sleep in `SETTLE_STEP_S` steps until
    the process used under a tenth of a core across one (at most `SETTLE_MAX_S`); the
    seconds waited. Libraries' thread pools spin after a call before their threads sleep
    (measured on a 2-core VM: PyTorch's OpenMP threads ~10 ms, onnxruntime's ~45 ms with
    spinning allowed, irkit's own under 1 ms); timed next, another function would share its
    cores with them. Waiting between samples lets each side's pool spin as it does in use,
    within its own sample, and never through another's."""
    start = time.perf_counter()
    while time.perf_counter() - start < SETTLE_MAX_S:
        cpu, wall = time.process_time_ns(), time.perf_counter_ns()
        time.sleep(SETTLE_STEP_S)
        if time.process_time_ns() - cpu < 0.1 * (time.perf_counter_ns() - wall):
            break
    return time.perf_counter() - start


def measured(samples: list[float]) -> np.ndarray:
    """A function's samples without the rounds it sat out (NaN, `Rounds.run`)."""
    values = np.array(samples)
    return values[~np.isnan(values)]


def _periods(asked: Mapping[str, int], still: Collection[str]) -> dict[str, int]:
    """`time_interleaved`'s periods from what `needed` asked: the functions still in the
    rounds only (one left out is never taken back), each at least 1, and scaled so that the
    shortest is 1 (no cycle without a sample)."""
    periods = {n: max(1, int(k)) for n, k in asked.items() if n in still}
    shortest = min(periods.values(), default=1)
    return {n: max(1, round(k / shortest)) for n, k in periods.items()}


class Rounds:
    """Interleaved sampling of several functions: after warm-up and calibration, each
    `run()` takes one sample of every function, in a fresh random order. The building block
    of `time_interleaved` and of sequential tests that decide as the samples come in.
    `quiesce`: `settle` after every sample (untimed), for functions whose thread pools spin
    after a call."""

    def __init__(
        self,
        fns: dict[str, Callable[[], None]],
        warmup: int = 1,
        min_sample_s: float = MIN_SAMPLE_S,
        seed: int = 0,
        quiesce: bool = False,
    ):
        self.fns = fns
        self.quiesce = quiesce
        self.rng = np.random.default_rng(seed)
        for fn in fns.values():
            for _ in range(warmup):
                fn()
        self.reps = {name: calibrate(fn, min_sample_s) for name, fn in fns.items()}
        self.samples: dict[str, list[float]] = {name: [] for name in fns}
        self.cpu: dict[str, list[float]] = {name: [] for name in fns}
        """CPU time per call of the process, beside each sample (`Timing.cpu_samples`)."""

    def cost(self, name: str) -> float:
        """Seconds one sample of `name` takes: its calls per sample times its median call
        (over the rounds it was in)."""
        return self.reps[name] * float(np.median(measured(self.samples[name])))

    def run(self, active: Collection[str] | None = None) -> None:
        """One round: a sample of every function, or of the `active` ones only (the others
        get NaN, so that round r is position r of every function's samples)."""
        names = list(self.fns) if active is None else [n for n in self.fns if n in active]
        for name in set(self.fns) - set(names):
            self.samples[name].append(float("nan"))
            self.cpu[name].append(float("nan"))
        for name in self.rng.permutation(names):
            start = time.process_time_ns()
            self.samples[name].append(_sample(self.fns[name], self.reps[name]))
            self.cpu[name].append((time.process_time_ns() - start) * 1e-9 / self.reps[name])
            if self.quiesce:
                settle()

    def timings(self, warmup: int, reason: str) -> dict[str, Timing]:
        """Every function's samples, median and CI, and why sampling stopped; the clock a
        function names (`NamedTimer`), and no CPU times for one that times itself."""
        out = {}
        for name, s in self.samples.items():
            fn = self.fns[name]
            timer = fn.timer if isinstance(fn, NamedTimer) else "perf_counter_ns"
            cpu = None if isinstance(fn, SelfTimed) else np.array(self.cpu[name])
            out[name] = Timing(np.array(s), self.reps[name], warmup, reason,
                               median_ci(measured(s)), timer, cpu)  # fmt: skip
        return out


def time_interleaved(
    fns: dict[str, Callable[[], None]],
    precision: float = 0.01,
    budget_s: float = 10.0,
    min_rounds: int = 10,
    max_rounds: int = 200,
    warmup: int = 1,
    min_sample_s: float = MIN_SAMPLE_S,
    seed: int = 0,
    floor_rounds: int | None = None,
    on_round: Callable[[int], None] | None = None,
    needed: Callable[[Rounds], Collection[str] | Mapping[str, int]] | None = None,
    quiesce: bool = False,
    cycle: int = 1,
) -> dict[str, Timing]:
    """Time several functions in interleaved rounds, each round in a fresh random order, so
    that drift (clocks, other load) hits every variant alike. One sample per function per
    round; stops when every median's CI half-width is under `precision` (checked from
    `min_rounds` on), at `max_rounds`, or when the budget is spent (checked from
    `floor_rounds` on, by default `min_rounds`). `on_round(n)` is called after round n.

    `needed(rounds)`, where given, replaces the precision rule and focuses the rounds: it
    is given the `Rounds` so far (their samples, NaN where a function sat a round out, and
    each function's calls per sample) and names the functions still to be sampled, or maps
    each to its period in cycles (a cycle: `cycle` rounds, one on every placement; a
    function of period k is sampled in the cycles whose index is a multiple of k, so that
    functions of one period, or of powers of two, share their cycles); the rounds from then
    on sample only those (the others' samples NaN; a function left out is never sampled
    again); sampling stops (reason "resolved") when it names none. It is asked from
    `min_rounds` on, every fifth round up to 100 rounds, then every twentieth part of the
    rounds so far (its bootstrap grows with the rounds: asked every fifth round, 2000
    rounds would ask 400 times), each time at the next multiple of `cycle` rounds, so a
    function leaves, or changes its period, at a cycle's end. `quiesce`: wait after every
    sample until no thread of the process runs (`settle`, untimed; the budget counts
    it)."""
    floor = min_rounds if floor_rounds is None else floor_rounds
    rounds = Rounds(fns, warmup, min_sample_s, seed, quiesce)
    samples = rounds.samples
    deadline = time.perf_counter() + budget_s
    reason = "max_samples"

    def on_cycle(n: int) -> int:  # the first whole cycle at or after round n
        return -(-n // cycle) * cycle

    next_ask = on_cycle(min_rounds)
    periods: dict[str, int] | None = None  # None: every function every round
    for r in range(max_rounds):
        if periods is None:
            rounds.run()
        else:
            rounds.run({n for n, k in periods.items() if (r // cycle) % k == 0})
        if on_round is not None:
            on_round(r + 1)
        if r + 1 >= min_rounds and needed is not None:
            if r + 1 >= next_ask:
                next_ask = on_cycle(r + 1 + max(5, (r + 1) // 20))
                asked = needed(rounds)
                asked = asked if isinstance(asked, Mapping) else dict.fromkeys(asked, 1)
                periods = _periods(asked, fns if periods is None else periods)
                if not periods:
                    reason = "resolved"
                    break
        elif r + 1 >= min_rounds and all(
            median_ci(np.array(s)).half_width <= precision for s in samples.values()
        ):
            reason = "precision"
            break
        if r + 1 >= floor and time.perf_counter() > deadline:
            reason = "budget"
            break
    return rounds.timings(warmup, reason)
