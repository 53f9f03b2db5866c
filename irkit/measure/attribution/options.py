"""Attribution's knobs as one frozen, validated value (`AttributeOptions`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from irkit.errors import IrkitError
from irkit.measure import check_protocol
from irkit.measure.attribution.plan import STRATEGIES
from irkit.measure.attribution.sampling import STOPS, TIMERS
from irkit.measure.slots import check_placements


@dataclass(frozen=True)
class AttributeOptions:
    """How `attribute` measures (the protocol in the package docstring). Checked when made,
    before anything is compiled, as the command line's flags are."""

    strategy: str = "shapley"
    precision: float = 0.01
    """The relative CI half-width sampling aims for (`stop`)."""
    budget_s: float = 30.0
    """Seconds of measuring in all, a third of it for the kernels unless `kernel_budget_s`."""
    kernel_budget_s: float | None = None
    seed: int = 0
    permutations: int = 16
    """Sampled orders for Shapley beyond `EXACT_SHAPLEY_MAX` passes (not null players), in
    antithetic pairs; the bootstrap resamples them, so their sampling is in the CIs. 16,
    from 64 (2026-11-29, transformer_block's 12 passes that change code): 168 variants and
    123 programs instead of 532 and 362, the main job 116 -> 45 s cold, every CI
    overlapping the 64 orders' and the same verdicts but for effects at the edge of
    significance (reshape-views' +5 us of 280, which runs at 64 orders also split on)."""
    prune_null: bool = True
    """Shapley: keep in every variant the passes shown to change no IR state in any
    (`engine._plan_and_compile`): the same values, fewer variants."""
    resamples: int = 2000
    min_rounds: int = 10
    max_rounds: int = 2000
    twin: bool = True
    """Measure the A/A twins (the full and the empty variant bound again)."""
    kernel_times: bool = True
    """Time the kernels shown alone, after the programs."""
    timer: str = "launches"
    """"launches" (the driver's launches, the backend's timer) or "graph" (the driver
    recorded once as a CUDA graph and replayed as one launch; backends that can replay)."""
    placements: int | None = None
    """Copies of every distinct program (None: `auto_placements`; fewer where they would
    hold more than `placement_budget()`)."""
    stop: str = "verdicts"
    """"verdicts" (every pass's verdict resolved, `open_passes`, the rounds focused on the
    open ones, `cost_periods`) or "medians" (every program's median within `precision`)."""

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise IrkitError(
                f"attribute: unknown strategy {self.strategy!r}; choose from {', '.join(STRATEGIES)}"
            )
        check_protocol("attribute", self.precision, self.budget_s, self.seed)
        check_protocol("attribute", self.precision, self.kernel_budget_s, self.seed)
        p = self.permutations
        if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 100_000:
            raise IrkitError(
                f"attribute: permutations must be a positive integer up to 100000, got {p!r}"
            )
        if self.stop not in STOPS:
            raise IrkitError(
                f"attribute: unknown stop rule {self.stop!r}; choose from {', '.join(STOPS)}"
            )
        check_placements("attribute", self.placements, automatic=True)
        if self.timer not in TIMERS:
            raise IrkitError(
                f"attribute: unknown timer {self.timer!r}; choose from {', '.join(TIMERS)}"
            )

    @classmethod
    def of(cls, options: AttributeOptions | None = None, **knobs: Any) -> AttributeOptions:
        """`options` (or the defaults) with `knobs` replacing its fields; a knob that is not
        a field is an error naming it."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(knobs) - names)
        if unknown:
            raise IrkitError(
                f"attribute: unknown option {unknown[0]!r}; the options are {', '.join(sorted(names))}"
            )
        return dataclasses.replace(options or cls(), **knobs)

    @property
    def kernel_share_s(self) -> float:
        """Seconds of the budget for the kernels timed alone."""
        return (self.kernel_budget_s or self.budget_s / 3) if self.kernel_times else 0.0

    @property
    def program_budget_s(self) -> float:
        """Seconds of the budget for the programs' interleaved rounds."""
        return max(self.budget_s - self.kernel_share_s, self.budget_s / 3)
