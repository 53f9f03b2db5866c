"""What an attribution record says about how it was measured: the protocol's prose, once,
and the `protocol` and `noise_floor` sections built from a run's values."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from irkit.measure.attribution.bootstrap import (
    MIN_CYCLES,
    by_cycles,
    copy_variance,
    expansion,
    slot_groups,
)
from irkit.measure.attribution.kernels import flush_bytes
from irkit.measure.attribution.options import AttributeOptions
from irkit.measure.attribution.sampling import (
    BUDGET_ROUNDS_PER_COPY,
    MAX_PERIOD,
    MIN_ROUNDS_PER_COPY,
)
from irkit.measure.attribution.types import Binding, Kernels, Measured, Setup, Variants

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


def protocol_record(
    opts: AttributeOptions,
    setup: Setup,
    variants: Variants,
    binding: Binding,
    m: Measured,
    kernels: Kernels,
) -> dict:
    """The record's `protocol`: how this run measured, in its own numbers."""
    groups = slot_groups(m.slot_of)
    verdicts = opts.stop == "verdicts"
    first = next(iter(m.timings.values()))
    shared = variants.shared
    return {
        **FIXED,
        "timer": setup.backend.timer
        + (", the driver replayed as one CUDA graph" if opts.timer == "graph" else ""),
        "graph_replay": opts.timer == "graph",
        "placements": binding.copies,
        "placement_io": "shared" if binding.shares_io else "own",
        "placements_wanted": opts.placements if opts.placements is not None else "auto",
        "placements_limited": binding.wanted if binding.copies < binding.wanted else None,
        "placement_bytes": binding.copy_bytes,
        "placement_budget_bytes": binding.copy_budget,
        "bootstrap_unit": "cycles" if by_cycles(groups) else "rounds",
        "ci_expansion": expansion(groups),
        "copy_sd": math.sqrt(copy_variance(m.samples, groups)) if len(groups) > 1 else None,
        "rounds": m.samples.shape[1],
        "rounds_per_program": {
            k: int(n) for k, n in zip(m.keys, (~np.isnan(m.samples)).sum(axis=1), strict=True)
        },
        "programs_left": sorted(m.gone),
        "periods": m.periods or None,
        "focus_method": FOCUS if verdicts else None,
        "stop_reason": first.stop_reason,
        "precision": opts.precision,
        "stop": opts.stop,
        "stop_method": STOP_VERDICTS if verdicts else STOP_MEDIANS,
        "budget_s": opts.budget_s,
        "budget_split_s": {"programs": opts.program_budget_s, "kernels": opts.kernel_share_s},
        "min_rounds": opts.min_rounds,
        "max_rounds": opts.max_rounds,
        "reps_per_sample": {k: m.timings[k].reps for k in m.keys},
        "warmup_calls": first.warmup,
        "bootstrap_resamples": opts.resamples,
        "seed": opts.seed,
        "l2_flush": flush_bytes(setup.device_fingerprint),
        "kernel_times": opts.kernel_times,
        "kernels_timed": len(kernels.shown) if opts.kernel_times else 0,
        "kernels_distinct": len(kernels.by_hash),
        "programs_measured": len(variants.programs),
        "programs_bound": len(binding.rotation.fns) * binding.copies,
        "compile": {
            "seconds": variants.compile_seconds,
            "pass_runs": shared.pass_runs,
            "ir_states": shared.states,
            "pipeline_results": shared.finished,
            "method": COMPILE,
        },
        "variants": len(setup.plan.masks),
        "permutations": len(setup.plan.permutations) or None,
        "antithetic": setup.plan.antithetic,
        "null_passes": [setup.steps[setup.optional[i]].label for i in sorted(setup.plan.fixed)],
        "null_candidates": setup.null_candidates,
        "selection": setup.selection,
        "load": m.load,
    }
