"""Attribution: what each optional pass of a pipeline buys, measured with confidence intervals.

A *variant* is the pipeline with some subset of its optional passes removed (required
passes, such as the lowering, always run). A strategy chooses which variants to measure
and how to turn their times into one contribution per pass, in seconds saved per call:

- `prefix`: passes switched on cumulatively in pipeline order; a pass's contribution is
  T(before it) - T(with it). Contributions sum to the total (order-dependent).
- `ablation`: leave one out; T(all but it) - T(all). Does not sum to the total; the
  remainder is the interaction between passes, reported as such.
- `shapley`: the Shapley value of each pass, the average of its marginal contribution over
  every order of the passes: exact over all 2^k subsets up to 8 passes, over `permutations`
  sampled orders beyond. Contributions sum to T(no optional pass) - T(all) exactly (the
  efficiency property), for the point estimate and for every bootstrap resample.

Protocol:
1. The graph's reference is evaluated once (float64 numpy) on inputs from `seed`; every
   variant is compiled and checked against it before anything is timed. A wrong variant is
   an error naming its passes: the attribution invariant is broken.
2. Variants whose compiled programs hash the same are compiled once and measured once; a
   pass that changes no code gets exactly zero.
3. Every distinct program is bound as `placements` separate copies, each its own
   placement of code, scratch and buffers (the first compiled, the others the same machine
   code linked again into an engine of their own, `exe.copy()` where the backend has it:
   two copies of one program differ by a few percent on a CPU, consistently, so one copy
   per program would freeze that offset into every comparison it is in). A/A twins (the full pipeline's program, and the one
   without optional passes, copied and bound again as many times) are timed as programs
   of their own. All are timed in interleaved rounds, in a fresh random order per round,
   round r running copy r mod `placements` of every program, until every pass's verdict is
   known (`stop="verdicts"`: its 99.9% CI excludes 0 or is narrower than `precision` of
   the full program either side; `"medians"`: every median's 95% CI half-width under
   `precision`) or their share of the budget is spent (`budget_s` is all the measuring:
   two thirds for the programs, one third for the kernels of step 5; all of it for the
   programs without kernel times).
4. A program's time is the mean over its copies of each copy's median round. CIs come
   from one bootstrap: whole cycles of rounds resampled (the j-th round of every
   copy; the same draws for every program, so the pairing by round is kept) and spread
   about the point for the few cycles resampled (`_expansion`), then each program's copy-to-copy
   variance (its own estimate, from its own copies) added as Student-t noise scaled by its
   standard error over the copies (`_round_bootstrap`); so a CI holds the copy-to-copy
   spread as well as the round-to-round one. A contribution, in seconds saved per call, is
   significant when its CI excludes zero. The A/A checks test that claim in every run: the twins against their
   programs (at 95% for the pair), and every program's two halves of copies against each other (per context, at
   95% for the family of programs, `_context_checks`);
   where a check fails, the passes it concerns (all, for a twin) are also judged beyond
   its floor, the ratio's distance from 1 in seconds at that program's scale. Each pass
   gets its minimum detectable effect beside its verdict: the saving it would be called
   significant for four times in five.
5. The kernels shown (the baseline's, the full pipeline's, and those each pass removed or
   added) are then timed alone, each once by hash, on the real intermediate data of its
   program; each pass's kernel view lists the kernels it removed and added, with the time
   they account for, and where they sit on the roofline.
"""

from irkit.measure.attribution.comparison import Comparison, compare_pipelines
from irkit.measure.attribution.engine import attribute
from irkit.measure.attribution.kernels import program_key
from irkit.measure.attribution.noise import significance
from irkit.measure.attribution.options import AttributeOptions
from irkit.measure.attribution.placements import (
    AUTO_COPIES,
    auto_placements,
    copies_within_budget,
    placement_budget,
)
from irkit.measure.attribution.plan import (
    EXACT_SHAPLEY_MAX,
    STRATEGIES,
    Plan,
    make_plan,
    variant_spec,
    variant_steps,
)
from irkit.measure.attribution.record import Attribution, KernelTime, PassResult
from irkit.measure.attribution.sampling import (
    BUDGET_ROUNDS_PER_COPY,
    MIN_ROUNDS_PER_COPY,
    STOPS,
    TIMERS,
)
from irkit.measure.attribution.types import Progress
from irkit.measure.stats import Interval

__all__ = [
    "AUTO_COPIES", "BUDGET_ROUNDS_PER_COPY", "EXACT_SHAPLEY_MAX", "MIN_ROUNDS_PER_COPY",
    "STOPS", "STRATEGIES", "TIMERS", "AttributeOptions", "Attribution", "Comparison",
    "Interval", "KernelTime", "PassResult", "Plan", "Progress", "attribute",
    "auto_placements", "compare_pipelines", "copies_within_budget", "make_plan",
    "placement_budget", "program_key", "significance", "variant_spec", "variant_steps",
]  # fmt: skip
