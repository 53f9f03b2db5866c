"""The bootstrap behind attribution's and comparison's confidence intervals: pure numpy
over a [program, round] array of seconds and the placement slot each round ran on.

Rounds are resampled by whole cycles (the j-th round of every copy), spread about the
point for the few units resampled, and each program's copy-to-copy variance is added as
Student-t noise (`round_bootstrap`); programs sampled in only some rounds (focused rounds)
are brought to the run's level by those sampled in every round (`_bridged`)."""

from __future__ import annotations

import warnings
from statistics import NormalDist
from typing import Literal, overload

import numpy as np

from irkit.measure.stats import t_quantile


def round_bootstrap(
    samples: np.ndarray,
    resamples: int,
    seed: int,
    slots: np.ndarray | None = None,
    pooled: tuple[float | np.ndarray, int] | None = None,
    upper: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Each variant's time from `samples` [variant, round] and its bootstrap replicates
    [variant, resample]: each resample draws round indices once for every variant, keeping
    the pairing by round. The time is the median of the rounds, or with `slots` the mean
    over the copies of each copy's median (`copy_medians_mean`), in the replicates too.

    With `slots` (the placement slot each round ran, `Placements`), the copies are a random
    sample of placements too, and the CI must hold their spread. Whole cycles of rounds are
    resampled, every slot keeping its share (`resampled_rounds`); then the copy-to-copy variance, the variance of
    the per-slot medians beyond what the round noise explains (a random-effects estimate,
    relative to each program's median, each program's own, zero when the round noise
    explains it all), is added to every program's replicates as Student-t noise (the
    degrees of freedom of its copies) scaled by its standard error over the copies.
    (Resampling slots and then rounds within them counts the round noise twice, and with
    four slots has a handful of distinct draws: CIs that covered planted effects every time
    but found a 5% one only half the time.) The
    noise added is independent per program: what a slot's copies share (their buffers,
    `_io`, and being bound together) is in every program of the slot alike, taken out with
    each round's common factor and cancelled in every difference, and what is left is each
    copy's own; sums of contributions stay exact replicate by replicate. `pooled` gives
    the relative copy variance (one, or one per program) and its degrees of freedom
    estimated elsewhere (over more programs) instead. `upper`: the copy variance bounded from above (`copy_variance`'s
    `upper`), for the stopping rule.

    Focused rounds (`time_interleaved`'s `needed`): a program sampled in only some of the
    rounds (it left once its passes had verdicts, or is sampled every k-th cycle for its
    cost) has NaN in the others. The rounds are resampled over the whole run as ever, the
    same draws for every program, and each program's time is from its own rounds among
    those drawn (`copy_medians_mean` leaves NaN out), brought to the whole run's level by
    the programs sampled in every round (`_bridged`); its t-expansion counts its own rounds.
    Rounds where no program was sampled are left out."""
    present = ~np.isnan(samples)
    measured = present.any(axis=0)
    samples, present = samples[:, measured], present[:, measured]
    rounds = samples.shape[1]
    slots = (
        np.zeros(rounds, dtype=np.int64)
        if slots is None
        else np.asarray(slots)[: len(measured)][measured]
    )
    rng = np.random.default_rng(seed)
    groups = slot_groups(slots)
    idx = resampled_rounds(slots, groups, resamples, rng)
    # every position of a resample holds a round of the same copy as in every other
    # resample (whole cycles, or rounds within each copy): group the positions once
    drawn = slot_groups(slots[idx[0]])
    if not present.all():
        idx = _redrawn_empty(idx, present, slots, groups, drawn, rng)
    point = np.empty(len(samples))
    boot = np.empty((len(samples), resamples))
    factor = np.ones(len(samples))
    patterns, which = np.unique(present, axis=0, return_inverse=True)
    for j, pattern in enumerate(patterns):
        rows = which.reshape(-1) == j
        point[rows] = copy_medians_mean(samples[rows], groups)
        boot[rows] = copy_medians_mean(samples[rows][:, idx], drawn)
        factor[rows] = expansion(slot_groups(slots[pattern]))
    point, boot = _bridged(samples, present, groups, idx, drawn, point, boot)
    boot = point[:, None] + (boot - point[:, None]) * factor[:, None]
    return point, _with_copy_noise(point, boot, samples, groups, pooled, upper, rng)


def _with_copy_noise(
    point: np.ndarray,
    boot: np.ndarray,
    samples: np.ndarray,
    groups: list[np.ndarray],
    pooled: tuple[float | np.ndarray, int] | None,
    upper: bool,
    rng: np.random.Generator,
) -> np.ndarray:
    """`boot` with each program's copy-to-copy variance added as Student-t noise, scaled by
    its standard error over the copies (`round_bootstrap`); unchanged with one copy."""
    copies = len(groups)
    if copies < 2:
        return boot
    relative: float | np.ndarray
    if pooled is not None:
        relative, df = pooled
    else:
        # each program's own estimate, with the degrees of freedom of its own copies
        # (Student's t: normal draws from one program's four copies covered a 3% copy
        # spread 92% of the time). Programs are not equally sensitive to where they land (a
        # copy's offset was about constant in seconds on elementwise_chain, so a relative
        # one differs by program), and pooling under-covers the sensitive ones: each
        # program's own averaged with the pooled estimate missed the true difference between
        # a program whose copies spread 2% and one whose copies spread 0.8% in 8.7% of
        # simulated runs (its own alone: 3.3%, CIs 2% wider where all spread alike), and
        # the full pipeline's A/A twin failed in 6.7% of 720 elementwise_chain runs
        relative = copy_variance(samples, groups, per_program=True, upper=upper)
        df = copies - 1
    copy_var = relative * np.maximum(point, 0.0) ** 2 / copies
    draws = rng.standard_t(df, size=boot.shape)
    return boot + draws * np.sqrt(copy_var)[:, None]


def slot_groups(slots: np.ndarray) -> list[np.ndarray]:
    """The positions of each slot in `slots`, slot by slot."""
    return [np.flatnonzero(slots == s) for s in np.unique(slots)]


def _redrawn_empty(
    idx: np.ndarray,
    present: np.ndarray,
    slots: np.ndarray,
    groups: list[np.ndarray],
    drawn: list[np.ndarray],
    rng: np.random.Generator,
) -> np.ndarray:
    """`idx` with the replicates that drew none of some program's rounds on some copy
    (`present` [program, round]) drawn again, until none does: a program's time is a mean
    over all its copies. Rare (a program sampled in 8 of 48 cycles: e^-8.8 of replicates),
    but a replicate without a value is a CI without ends (simulated, 1 in 50 CIs of a program
    that left after 8 cycles was NaN)."""
    idx = idx.copy()
    patterns = np.unique(present, axis=0)
    for _ in range(1000):
        empty = np.zeros(len(idx), dtype=bool)
        for pattern in patterns:
            here = pattern[idx]
            for positions in drawn:
                empty |= ~here[:, positions].any(axis=1)
        if not empty.any():
            return idx
        idx[empty] = resampled_rounds(slots, groups, int(empty.sum()), rng)
    raise ValueError("a program's rounds are too few to resample")


def _bridged(
    samples: np.ndarray,
    present: np.ndarray,
    groups: list[np.ndarray],
    idx: np.ndarray,
    drawn: list[np.ndarray],
    point: np.ndarray,
    boot: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Programs sampled in only some rounds (`present`), each brought to the level of the
    whole run: its time times the programs sampled in every round (the reference) over the
    whole run against the same programs over the rounds it was in (a geometric mean over
    the reference), in the point and in every replicate (the rounds `idx` drew, grouped by
    copy as `drawn`). So a machine that ran faster or slower after a program left, or in
    the cycles a thinned program sat out, is not taken for an effect: the difference
    between it and a reference program is their ratio over their common rounds, at the
    reference's whole-run level. Nothing changes where every program ran every round, or
    where none did."""
    reference = present.all(axis=1)
    if reference.all() or not reference.any():
        return point, boot
    point, boot = point.copy(), boot.copy()
    ref, ref_drawn = samples[reference], samples[reference][:, idx]
    full_point, full_boot = np.log(point[reference]), np.log(boot[reference])
    for pattern in np.unique(present[~reference], axis=0):
        then = np.log(copy_medians_mean(np.where(pattern, ref, np.nan), groups))
        then_boot = np.log(copy_medians_mean(np.where(pattern[idx], ref_drawn, np.nan), drawn))
        rows = (present == pattern).all(axis=1)
        point[rows] *= np.exp(np.mean(full_point - then))
        boot[rows] *= np.exp(np.mean(full_boot - then_boot, axis=0))[None, :]
    return point, boot


def nan_median(values: np.ndarray) -> np.ndarray:
    """The median over the last axis with NaN left out (NaN where all are): sorted, NaN
    last, the middle one or two of the values measured. (`np.nanmedian` goes row by row on
    long axes: seconds on a bootstrap's replicates.)"""
    ordered = np.sort(values, axis=-1)
    n = (~np.isnan(values)).sum(axis=-1, keepdims=True)
    low = np.take_along_axis(ordered, np.maximum(n - 1, 0) // 2, axis=-1)
    high = np.take_along_axis(ordered, n // 2, axis=-1)
    return ((low + high) / 2)[..., 0]


def copy_medians_mean(samples: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    """A program's time over its copies: each copy's median over its rounds (the last
    axis of `samples`, positions grouped by copy; NaN, rounds it sat out, left out),
    averaged over the copies (those with a round). Where copies
    differ by more than a round varies, the rounds pooled are a mixture, one narrow peak
    per copy, and their median moves like the median of the copy levels: up to pi/2 the
    variance of their mean, which is what the copy term of `round_bootstrap` allows for
    (simulated, `benchmarks/ci_coverage_sim.py`, 600 runs a case: 92.2-92.8% coverage for
    the pooled median, 94.2-95.3% for this, same widths). It is also what the copies' truth is: the mean
    offset of a placement is zero, the median of a handful of them is not."""
    if not np.isnan(samples).any():
        return np.mean([np.median(samples[..., g], axis=-1) for g in groups], axis=0)
    medians = np.stack([nan_median(samples[..., g]) for g in groups])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a replicate that drew none of a copy's
        return np.nanmean(medians, axis=0)


MIN_CYCLES = 8
"""Complete cycles (every copy's j-th round) before `resampled_rounds` resamples cycles
rather than rounds within each copy."""


def by_cycles(groups: list[np.ndarray]) -> bool:
    """Whether `resampled_rounds` draws whole cycles: several copies, each with at least
    `MIN_CYCLES` rounds."""
    return len(groups) > 1 and min(len(g) for g in groups) >= MIN_CYCLES


def resampled_rounds(
    slots: np.ndarray, groups: list[np.ndarray], resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """Round indices [resample, round] for `round_bootstrap`, every copy keeping its share:
    whole cycles resampled (cycle j: the j-th round of every copy; the rounds run the
    copies in turn, so a cycle is a stretch of consecutive rounds), rounds past the last
    complete cycle kept as they are; with fewer than `MIN_CYCLES` complete cycles, rounds
    resampled within each copy. Cycles, because a program's own noise is not independent
    from round to round under load: its residuals (each round's common factor and each
    copy's offset taken out) averaged over 20 consecutive rounds varied 14% more than
    independent rounds would (elementwise_chain, one core loaded, 16 runs), and resampling
    whole cycles gave its differences CIs 12-17% wider, 1.0x on the same rounds shuffled
    within their copies."""
    occurrence = np.empty(len(slots), dtype=np.int64)
    for g in groups:
        occurrence[g] = np.arange(len(g))
    complete = min(len(g) for g in groups)
    if not by_cycles(groups):
        return np.concatenate(
            [g[rng.integers(0, len(g), size=(resamples, len(g)))] for g in groups], axis=1
        )
    cycles = np.stack([g[:complete] for g in groups], axis=1)  # [cycle, copy]
    tail = np.flatnonzero(occurrence >= complete)
    drawn = cycles[rng.integers(0, complete, size=(resamples, complete))].reshape(resamples, -1)
    return np.concatenate([drawn, np.broadcast_to(tail, (resamples, len(tail)))], axis=1)


def expansion(groups: list[np.ndarray]) -> float:
    """The factor by which `resampled_rounds`'s replicates are spread about the point:
    Student's over the normal 97.5% quantile for a spread estimated from n units (the
    t part of Hesterberg's expanded percentile interval, "What teachers should know about
    the bootstrap", 2015). n: the complete cycles `resampled_rounds` draws, or below
    `MIN_CYCLES` the rounds per copy it draws within (the degrees of freedom those rounds
    less one per copy). 1 for a single copy (nothing resampled by cycles or copies).

    Hesterberg's other factor, sqrt(n/(n-1)) for the bootstrap's narrowness, is a mean's:
    resampling n units gives (n-1)/n of a mean's variance, but 1.14-1.29x the variance of a
    median of 8-20 (normal rounds, 300 samples each): the point is a mean of per-copy
    medians (`copy_medians_mean`), so it is left out. Simulated (`ci_coverage_sim.py`'s
    seven cases, 600 runs each, 2026-11-27), the 95% CI of a difference then covered
    94.2-99.2% with widths within 3% of the pooled median's with the factor in full, which
    covered 92.2-97.2% (in one-off runs of 400, the factor in full on the mean of copy
    medians: up to 9% wider; the pooled median without any factor: 89.5%)."""
    if len(groups) < 2:
        return 1.0
    return _t_over_z(_resampled_df(groups))


def _resampled_df(groups: list[np.ndarray]) -> int:
    """The degrees of freedom of what `resampled_rounds` draws from (`expansion`)."""
    if by_cycles(groups):
        return min(len(g) for g in groups) - 1
    return sum(len(g) for g in groups) - len(groups)


def _t_over_z(df: int) -> float:
    """Student's 97.5% quantile over the normal's (1 below one degree of freedom)."""
    if df < 1:
        return 1.0
    return float(t_quantile(0.975, df) / NormalDist().inv_cdf(0.975))


@overload
def copy_variance(samples: np.ndarray, groups: list[np.ndarray], *, upper: bool = ...) -> float: ...
@overload
def copy_variance(
    samples: np.ndarray, groups: list[np.ndarray], per_program: Literal[True], upper: bool = ...
) -> np.ndarray: ...
def copy_variance(
    samples: np.ndarray, groups: list[np.ndarray], per_program: bool = False, upper: bool = False
):
    """The variance of a copy's offset (relative: a placement slows a program by some
    fraction), pooled over the programs of `samples` [program, round], rounds grouped by
    the copy (slot) they ran on.

    On log times: each program's level removed, then each round's common factor (the mean
    over the programs: the machine's speed that round, and any drift, hit every program of
    a round alike), so what is left is each sample's own noise and its copy's offset. The
    offsets' variance is the variance of the per-copy means less the noise in them (the
    within-copy variance over the count), scaled back by P/(P-1) for the share of itself a
    program's common factor took out; zero when the noise explains it all. With one program
    there is no common factor to take out, and the round-to-round drift stays in the noise.
    `per_program`: each program's own estimate instead (one per row, from its own copies).
    `upper`: the noise not taken out (the per-copy means' variance itself): never below the
    copy variance, and never the zero that the subtraction gives when a few rounds per copy
    leave more noise than offset (elementwise_chain at 8 rounds per copy: pooled over the
    programs exactly 0 in 3 of 16 runs whose copies, run on, spread 1.5-4%); what
    `open_passes` judges by, so that such an estimate cannot end sampling."""
    logs = np.log(np.maximum(samples, 1e-30))  # NaN where a program sat a round out
    resid = logs - np.nanmedian(logs, axis=1, keepdims=True)
    present = (~np.isnan(resid)).sum(axis=0)  # programs in each round
    shared = present > 1
    if shared.any():  # the common factor out, each round's residuals scaled by P/(P-1) in
        # variance for the share of itself a program's common factor took out
        common = np.nanmean(resid[:, shared], axis=0, keepdims=True)
        resid[:, shared] = (resid[:, shared] - common) * np.sqrt(
            present[shared] / (present[shared] - 1)
        )
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a copy a program never ran on
        means = np.stack([np.nanmean(resid[:, g], axis=1) for g in groups], axis=1)
        noise = np.stack(
            [
                np.nanvar(resid[:, g], axis=1, ddof=1) / (~np.isnan(resid[:, g])).sum(axis=1)
                for g in groups
            ],
            axis=1,
        )
        own = np.nanvar(means, axis=1, ddof=1) - (0.0 if upper else np.nanmean(noise, axis=1))
    own = np.nan_to_num(own, nan=0.0)
    if per_program:
        return np.maximum(own, 0.0)
    return max(float(np.mean(own)), 0.0)
