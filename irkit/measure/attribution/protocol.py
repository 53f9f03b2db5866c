"""What an attribution record says about how it was measured: the protocol's prose, once,
and the `protocol` and `noise_floor` sections built from a run's values."""

from __future__ import annotations

from typing import Any

from irkit.measure.attribution.bootstrap import MIN_CYCLES
from irkit.measure.attribution.sampling import (
    BUDGET_ROUNDS_PER_COPY,
    MAX_PERIOD,
    MIN_ROUNDS_PER_COPY,
)

AA_TWIN = (
    "A/A: the full pipeline's program compiled and bound again, as many copies, timed "
    "interleaved as a program of its own; each twin's ratio CI at aa_confidence (95% for the "
    "twins together, Bonferroni); the check fails when a CI excludes 1; floor = the farthest "
    "end of that CI from 1"
)
AA_TWIN_BASELINE = (
    "; the program without optional passes likewise (every context a strategy measures lies "
    "between the two)"
)
RULE = (
    "significant when the pass changes code and its saving's 95% CI (rounds and placements "
    "resampled) excludes 0; where the twin's A/A check failed, beyond that floor; where some "
    "of the pass's own contexts failed their split A/A, beyond their floors weighted as those "
    "contexts enter the contribution (seconds per call, the A/A ratio's distance from 1 times "
    "that program's median)"
)


def per_context_method(family: float, programs: int) -> str:
    return (
        "each program's rounds split by placement slot (alternate slots) and the two halves' "
        f"medians compared; a program fails when the ratio's CI excludes 1 at {family:.4%} (95% "
        f"for the family of {programs}, Bonferroni); a pass whose contexts fail is also judged "
        "beyond that program's floor (its 95% CI's distance from 1)"
    )


PLACEMENT_IO = (
    "shared: every program (and twin) of a slot bound into the same input and output "
    "buffers, the slot's placement common to all of them and cancelled in differences; own: "
    "each copy its own buffers"
)
PLACEMENT = (
    "every distinct program (and A/A twin) bound as this many separate copies, each its "
    "machine code linked into an engine of its own; round r runs copy r mod placements of "
    "every program; a program's time is the mean over its copies of each copy's median; the "
    "bootstrap resamples whole cycles of rounds (the j-th round of every copy; rounds within "
    f"each copy below {MIN_CYCLES} complete cycles) and adds the copy-to-copy variance as "
    "Student-t noise; the replicates spread about the point by ci_expansion (t(n-1)/z at "
    "97.5%, n the units resampled)"
)
COPY_SD = (
    "the relative standard deviation of a copy's offset, pooled over the programs (random "
    "effects on log times, each round's common factor removed)"
)
FOCUS = (
    "from the first look on (see stop_method), the rounds go on with only the programs in the "
    "contexts of passes without a verdict (and their twins), each sampled every k-th cycle, k "
    f"a power of two from 1 to {MAX_PERIOD} by Neyman's allocation over the open passes "
    "(rounds in proportion to the square root of their programs' relative round variance over "
    "their cost), and the full program in every round as the reference; a program's time is "
    "from its own rounds, brought to the whole run's level by the programs sampled in every "
    "round (their time over the run against over its rounds); the bootstrap resamples whole "
    "cycles of the run, each program's median over its own rounds among those drawn; periods: "
    "the last look's"
)
STOP_VERDICTS = (
    "verdicts: every pass's 99.9% CI (its copy variance bounded from above: the copies' means' "
    "spread, round noise left in) excludes 0 or is within precision x the full program's time "
    "or the time of the programs it is measured between (the slower of each pair, weighted as "
    "the pairs enter it), whichever is longer, either side, checked from "
    f"{MIN_ROUNDS_PER_COPY} rounds per copy on, every fifth round up to 100 rounds, then every "
    "twentieth part of the rounds so far; the budget may end sampling after "
    f"{BUDGET_ROUNDS_PER_COPY} rounds per copy"
)
STOP_MEDIANS = (
    f"medians: every program's median within precision, from {MIN_ROUNDS_PER_COPY} rounds per "
    "copy on"
)
COMPILE = (
    "one walk of the variants' common prefixes; IR states that meet continue once (apply_pipelines)"
)
FIXED: dict[str, Any] = {
    "sampling": "interleaved, randomized order per round",
    "buffers": "bound once per copy, page-aligned (4 KiB)",
    "placement_io_method": PLACEMENT_IO,
    "placement_method": PLACEMENT,
    "copy_sd_method": COPY_SD,
    "warm_by": "binding (each program run once) and calibration (at least one call each)",
    "confidence": 0.95,
    "check": "every distinct program against the float64 numpy reference before timing",
}
"""The protocol's fields that are the same in every run."""
