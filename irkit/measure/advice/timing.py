"""`advise`'s measurements (steps 4-6 of `engine`): the hypotheses raced against the current
program and its A/A twin, each judged, and the confirmed edits combined."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from xdsl.dialects.builtin import ModuleOp

from irkit.errors import IrkitError

if TYPE_CHECKING:
    from irkit.measure.advice.engine import AdviceResult, AdviseOptions, Hypothesis

CURRENT, TWIN = "current", "current (A/A twin)"


def measure(
    result: AdviceResult,
    chosen: Any,
    graph: ModuleOp,
    case: Any,
    current: Any,
    raced: list[Hypothesis],
    ceilings: Any,
    opts: AdviseOptions,
    tick: Callable[[str, int, int], None],
) -> None:
    """Successive halving where there are more than `race`, then the race; each hypothesis
    judged (module doc, steps 4-5)."""
    from irkit.measure.advice.guards import inputs_intact
    from irkit.measure.attribution.noise import family_confidence
    from irkit.measure.tune import Program, _halve, race_programs

    budget, spent = opts.budget_s * 0.65, 0.0
    kept = {h.spec for h in raced}
    if len(raced) + 1 > opts.race:  # halving times each program bound once, as tune's does
        base = Program((), CURRENT, bound=current.bind(*case[0]), exe=current)
        programs = [Program(h.key, h.spec, bound=h.exe.bind(*case[0]), exe=h.exe) for h in raced]
        survivors, spent = _halve(
            base, programs, opts.race, opts.precision, budget / 3, opts.seed, tick
        )
        kept = {p.spec for p in survivors}
    for h in raced:
        if h.spec not in kept:
            h.status, h.why = "dropped", f"slower than the {len(kept)} raced, in successive halving"
    finalists = [h for h in raced if h.spec in kept]
    sources = {
        CURRENT: (current, "the current pipeline"),
        TWIN: (current, "the current pipeline (A/A twin)"),
    }
    sources |= {h.spec: (h.exe, f"hypothesis '{h.describe()}'") for h in finalists}
    tick("race", 0, 1)
    confidence = family_confidence(len(finalists) + 1)
    race = race_programs(
        chosen,
        graph,
        case,
        sources,
        opts.precision,
        budget - spent,
        opts.seed,
        opts.placements,
        needed=_deciding([h.spec for h in finalists], confidence, opts.min_gain),
        max_rounds=5000,
    )
    if not all(inputs_intact(copies, case) for copies in race.bound.values()):
        raise IrkitError("a program changed its inputs during the race; its timings are void")
    aa = race.speedup(CURRENT, TWIN, confidence)
    floor = _floor(aa)
    result.aa = {
        "median": aa.median,
        "ci_low": aa.low,
        "ci_high": aa.high,
        "floor": floor,
        "confidence": confidence,
    }
    result.protocol.update(race.protocol())
    result.protocol["confidence"] = confidence
    e = race.timings[CURRENT].estimate
    result.seconds = {"median": e.median, "ci_low": e.low, "ci_high": e.high}
    for h in finalists:
        _judge(h, race, graph, case, ceilings, confidence, floor, opts)


def _floor(aa: Any) -> float:
    """The A/A floor: where the twin's CI excludes 1, its farthest end from 1; else 0."""
    return max(aa.high - 1, 1 - aa.low) if (aa.low > 1 or aa.high < 1) else 0.0


def _judge(
    h: Hypothesis,
    race: Any,
    graph: ModuleOp,
    case: Any,
    ceilings: Any,
    confidence: float,
    floor: float,
    opts: AdviseOptions,
) -> None:
    """One raced hypothesis: its speedup, the checks after timing, its roof, its verdict."""
    from irkit.measure.advice.guards import (
        ROOF_SLACK,
        after_timing,
        fresh_case,
        prepared_inputs,
        roof_seconds,
    )

    s = race.speedup(CURRENT, h.spec, confidence)
    t = race.timings[h.spec].estimate
    h.speedup = {"median": s.median, "ci_low": s.low, "ci_high": s.high, "confidence": confidence}
    h.seconds = {"median": t.median, "ci_low": t.low, "ci_high": t.high}
    fresh = fresh_case(graph, case, opts.seed + 1, prepared_inputs(h.exe))
    roof = roof_seconds(h.exe, ceilings)
    if (why := after_timing(h.exe, race.bound[h.spec][0], graph, case, fresh)) is not None:
        h.status, h.why = "refused", why
    elif roof is not None and t.median < ROOF_SLACK * roof:
        h.status = "flagged"
        h.why = (
            f"beyond its roof: {t.median * 1e6:.1f} us where its kernels' ceilings allow "
            f"{roof * 1e6:.1f} us at least; not reported"
        )
    elif s.low > 1 + floor and s.median >= 1 + opts.min_gain:
        h.status = "confirmed"
    elif s.high < 1:
        h.status, h.why = "refuted", "slower"
    else:
        h.status = "refuted"
        h.why = (
            "its CI does not exclude no change"
            if s.low <= 1 + floor
            else f"gain under {opts.min_gain:.1%}"
        )


def _deciding(
    names: list[str], confidence: float, min_gain: float
) -> Callable[[Any, Any], list[str]]:
    """The race's stopping rule: sample until every hypothesis is decided. Refuted early
    where its CI lies under the smallest gain advised; confirmed early only where its CI
    lies above 1 (and the A/A twin's floor) at a confidence 50 times stricter, so that
    looking at the rounds as they come does not spend the confirmation's error (the
    verdict itself is taken once, at the end, at `confidence`)."""
    import numpy as np

    from irkit.measure.tune import paired_speedup

    strict = 1 - (1 - confidence) / 50

    def ratio(rounds: Any, slots: Any, name: str, level: float) -> Any:
        x, y = np.asarray(rounds.samples[CURRENT]), np.asarray(rounds.samples[name])
        n = min(len(x), len(y), len(slots))
        if np.count_nonzero(~np.isnan(x[:n]) & ~np.isnan(y[:n])) < 10:
            return None
        return paired_speedup(x, y, slots, level)

    def needed(rounds: Any, slots: Any) -> list[str]:
        aa = ratio(rounds, slots, TWIN, confidence)
        if aa is None:
            return [CURRENT, TWIN, *names]
        floor = _floor(aa)
        open_ = []
        for name in names:
            s = ratio(rounds, slots, name, strict)
            r = ratio(rounds, slots, name, confidence)
            if s is None or r is None or not (s.low > 1 + floor or r.high < 1 + min_gain):
                open_.append(name)
        return [CURRENT, TWIN, *open_] if open_ else []

    return needed


def combine(
    result: AdviceResult,
    chosen: Any,
    graph: ModuleOp,
    case: Any,
    current: Any,
    reference: Sequence[str],
    opts: AdviseOptions,
) -> None:
    """The improved pipeline: the best confirmed edit, or every confirmed edit together
    where that program is confirmed faster than the best alone (module doc, step 6)."""
    from irkit.measure.attribution.noise import family_confidence
    from irkit.measure.tune import race_programs
    from irkit.runtime import compile
    from irkit.runtime.check import check_bound

    advice = result.advice
    if not advice:
        return
    best = advice[0]
    result.improved_pipeline, result.improvement = best.spec, best.speedup
    spec, taken = result.pipeline, set[tuple[str, str | None]]()
    for h in advice:
        for edit in h.edits:
            slot = (edit.pass_name, edit.option)
            if slot in taken:
                continue
            applied = edit.apply(spec, reference)
            if applied is not None:
                spec, taken = applied, taken | {slot}
            break  # one edit of each hypothesis: its others give the same program
    if spec == best.spec or len(advice) < 2:
        return
    exe = compile(graph, spec, chosen.name)
    checks, _ = check_bound(exe, graph, case)
    if not all(c.passed for c in checks) or tuple(k.hash for k in exe.kernels) == best.key:
        return
    sources = {
        CURRENT: (current, "the current pipeline"),
        best.spec: (best.exe, "the best edit"),
        spec: (exe, "the confirmed edits together"),
    }
    race = race_programs(
        chosen,
        graph,
        case,
        sources,
        opts.precision,
        opts.budget_s * 0.2,
        opts.seed + 7,
        opts.placements,
    )
    confidence = family_confidence(2)
    together = race.speedup(CURRENT, spec, confidence)
    over_best = race.speedup(best.spec, spec, confidence)
    result.protocol["combined"] = {
        "pipeline": spec,
        "speedup": {"median": together.median, "ci_low": together.low, "ci_high": together.high},
        "over_best": {
            "median": over_best.median,
            "ci_low": over_best.low,
            "ci_high": over_best.high,
        },
        "confidence": confidence,
    }
    if together.low > 1 and over_best.median > 1:
        result.improved_pipeline = spec
        result.improvement = {
            "median": together.median,
            "ci_low": together.low,
            "ci_high": together.high,
            "confidence": confidence,
        }
