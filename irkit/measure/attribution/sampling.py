"""When attribution stops sampling and what it samples meanwhile: the verdict rule
(`open_passes`) and the focused rounds' periods by need and cost (`cost_periods`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np

from irkit.errors import IrkitError
from irkit.measure.attribution.bootstrap import nan_median, round_bootstrap, slot_groups
from irkit.measure.attribution.plan import Mask, Plan
from irkit.measure.stats import Interval

KERNEL_MAX_ROUNDS = 200
"""The most rounds of kernels timed alone (their medians, to `precision`); the programs'
rounds are bounded by `attribute`'s `max_rounds` and the budget: with the verdicts rule,
sampling goes on while a verdict is open. At 200 program rounds a 1.3 ms program stopped
after 2 s of a 6.7 s share, its 5% effects' CIs +-2.5% wide under load (significant in
55-65% of trials)."""


TIMERS = ("launches", "graph")


STOPS = ("verdicts", "medians")


MIN_ROUNDS_PER_COPY = 8
"""Rounds per copy before attribution may stop on its verdicts or its precision (`stop`)."""


BUDGET_ROUNDS_PER_COPY = 2
"""Rounds per copy before the budget may stop it."""


RESOLVE_CONFIDENCE = 0.999
"""A verdict counts as resolved early when this CI excludes 0, or is narrower than the
precision either side (stricter than the reported 95%: looking again and again, a 95% rule
stops on chance exclusions, and on a chance-narrow interval: between two looks of one run
the 95% half-width moved by 0.3x to 2x (the copy variance is the spread of 16 copies' means
less their round noise, and both move), so sampling that stopped when it first dipped under
the precision kept the dip. On elementwise_chain, whose zero-cost plant's 95% CI sat just
above 1% of the program, trials that stopped so missed their plants' truth in 12-50% of
CIs, against 2-5% for the ones that ran to the budget (docs/results.md))."""


def open_passes(
    plan: Plan,
    key_of: Mapping[Mask, str],
    row_of: Mapping[str, int],
    rows: np.ndarray,
    slots: np.ndarray,
    precision: float,
    seed: int,
    left: Collection[str] = (),
) -> list[set[str]]:
    """The passes that change code and have no verdict yet, each as the programs of its
    contexts. A verdict: the saving's 99.9% CI
    (`RESOLVE_CONFIDENCE`) excludes 0 (a clear effect), or is narrower than `precision` of
    the full program's time or of the programs it is measured between, whichever is
    longer, either side (an effect smaller than that, known well enough; its contexts: the
    slower of each pair, weighted as the pair enters the contribution. Against the full
    program's time alone, conv_block's `fold-transposes`, 56 us between two 8.3 ms
    programs, its full program 0.59 ms, never got a verdict under load; against its
    contexts alone, a pass between two 5 us programs of a 0.2 ms pipeline ran to the
    rounds' cap). A quick
    bootstrap (300 resamples) over the samples so far, its copy variance bounded from above
    (`copy_variance`'s `upper`): the reported CIs take the round noise out of it, and
    early on that can leave zero. None needed: every verdict is in. A pass one of whose
    programs has left the rounds (`left`) needs nothing more: the others alone would be
    sampled for nothing.

    (Tried and taken out, 2026-11-28: a pass whose verdict looked out of reach in the rest
    of the budget, its half-width shrunk by the rounds to come against its present saving,
    gave its rounds to the others. On conv_block it gave up 5% plants whose estimate sat
    near 0 a few cycles in, and runs ended with the budget unspent once the passes within
    reach had their verdicts.)"""
    point, boot = round_bootstrap(rows, 300, seed, slots[: rows.shape[1]], upper=True)
    t_point = {m: point[row_of[key_of[m]]] for m in plan.masks}
    t_boot = {m: boot[row_of[key_of[m]]] for m in plan.masks}
    c_point, c_boot = plan.contributions(t_point), plan.contributions(t_boot, orders=False)
    needed: list[set[str]] = []
    for i in range(plan.k):
        contexts = [(key_of[a], key_of[b]) for a, b in plan.pairs(i) if key_of[a] != key_of[b]]
        if not contexts or set(left).intersection(k for pair in contexts for k in pair):
            continue  # nothing to resolve, or a program of it left: its CI is what it is
        context = sum(w * max(t_point[a], t_point[b]) for w, a, b in plan.weighted_pairs(i))
        scale = precision * max(context, float(t_point[plan.full]))
        ci = Interval.of(float(c_point[i]), c_boot[i], RESOLVE_CONFIDENCE)
        if not ci.excludes(0.0) and (ci.high - ci.low) / 2 > scale:
            needed.append({k for pair in contexts for k in pair})
    return needed


MAX_PERIOD = 16
"""The longest period, in cycles, `cost_periods` gives a program still needed."""


def cost_periods(
    rows: np.ndarray, slots: np.ndarray, costs: np.ndarray, passes: list[list[int]]
) -> np.ndarray:
    """The period, in cycles, at which each program of `rows` [program, round] (NaN: a
    round it sat out) is sampled from now on, for the open `passes` (each the rows of the
    programs it is measured between; `costs`: seconds a sample of each): powers of two
    from 1 (the pass that needs rounds most) to `MAX_PERIOD`, a program at the shortest
    period of the passes it serves. Neyman's allocation: a pass whose programs' rounds
    spread sigma_p (a fraction of their time) and cost c_p, n rounds of them, the budget
    fixing the sum of n sum(c_p), makes the sum over passes of the relative variances,
    sum(sigma_p^2) / n each, least at n in proportion to sqrt(sum(sigma_p^2) / sum(c_p)).
    Each verdict is judged relative to the programs the pass is measured between
    (`open_passes`), so a slow pair's rounds buy as much of its verdict as a fast pair's of
    its own, at many times the price: conv_block's two 8.3 ms programs around
    `fold-transposes` (rounds spreading 3-6%) took 80% of every round while its plants'
    0.6 ms programs (13-17% under load) had a fifth of the rounds they could have. sigma_p:
    the median absolute deviation (times 1.4826) of the log times about each copy's median.
    A period doubles only where a pass needs half the rounds or fewer (rounded down, so
    that chance differences in two alike pairs' spreads do not split them); powers of two,
    so that programs of different periods share the longer period's cycles."""
    logs = np.log(np.maximum(rows, 1e-30))
    resid = np.full_like(logs, np.nan)
    for g in slot_groups(slots[: rows.shape[1]]):
        resid[:, g] = logs[:, g] - nan_median(logs[:, g])[:, None]
    variance = (1.4826 * nan_median(np.abs(resid))) ** 2
    need = np.array(
        [math.sqrt(np.nansum(variance[p]) / max(float(np.sum(costs[p])), 1e-12)) for p in passes]
    )
    periods = np.full(len(rows), MAX_PERIOD, dtype=np.int64)
    if not (need > 0).any():
        periods[[r for p in passes for r in p]] = 1
        return periods
    with np.errstate(divide="ignore"):
        steps = np.floor(np.log2(need.max() / need))
    for p, step in zip(passes, np.clip(steps, 0, math.log2(MAX_PERIOD)), strict=True):
        periods[p] = np.minimum(periods[p], 2 ** int(step))
    return periods


def timed_call(bound: Any, timer: str, backend: str) -> Callable[[], None]:
    """What a round calls for one program: its launches, or its replayed graph."""
    if timer == "launches":
        return bound.timed_graph()
    replay = bound.timed_replay()
    if replay is None:
        raise IrkitError(
            f"--timer graph: the {backend} backend cannot replay a graph (CUDA graphs: --backend cuda)"
        )
    return replay
