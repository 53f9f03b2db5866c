"""A controlled comparison of two pipelines on one model, interleaved and paired, with an
A/A twin for its floor (`irkit-bench compare --pipelines`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from irkit.errors import expect
from irkit.measure import check_protocol
from irkit.measure.attribution.bootstrap import copy_variance, round_bootstrap
from irkit.measure.attribution.placements import copies_within_budget
from irkit.measure.attribution.sampling import BUDGET_ROUNDS_PER_COPY, MIN_ROUNDS_PER_COPY
from irkit.measure.slots import Rotation, bind_slots, check_placements, checked_bound, io_of
from irkit.measure.stats import Estimate, Interval
from irkit.measure.timers import time_interleaved


@dataclass(frozen=True)
class Comparison:
    """Pipeline B against pipeline A on one model, measured interleaved and paired, each
    bound as `placements` slots."""

    ratio: Interval
    """T(B) / T(A): below 1, B is faster."""
    a: Estimate
    b: Estimate
    floor: float
    rounds: int
    stop_reason: str
    placements: int = 1
    placement_io: str = "own"
    """"shared": the programs of a slot bound into one set of inputs and outputs."""
    copy_sd: float | None = None
    """A copy's offset, relative sd (`copy_variance`); None with one slot."""

    @property
    def significant(self) -> bool:
        return self.ratio.excludes(1.0) and abs(self.ratio.value - 1) > self.floor


def compare_pipelines(
    model: ModuleOp | str | Path,
    a: str,
    b: str,
    backend: str = "cpu",
    dims: Mapping[str, int] | None = None,
    precision: float = 0.01,
    budget_s: float = 5.0,
    seed: int = 0,
    resamples: int = 2000,
    min_rounds: int = 10,
    placements: int = 8,
) -> Comparison:
    """A controlled comparison of two pipelines (the A/A case included: a == b compiles
    twice and measures both). Both are checked first; an A/A twin of `a` sets the floor.
    Each of the three is bound as `placements` slots (`slots.bind_slots`: fewer where they
    would hold more than `placement_budget()`), a slot's programs into one set of inputs
    and outputs where the backend can, round r running slot r mod placements; the ratio's
    CI holds the copies' spread as attribution's does (`round_bootstrap` with the slots).
    With one placement, a copy's offset (a few percent on a CPU) is frozen into the ratio."""
    from irkit.frontend import load
    from irkit.runtime import compile, get_backend
    from irkit.runtime.check import reference_case

    check_protocol("compare_pipelines", precision, budget_s, seed)
    expect(
        "compare_pipelines", "model", model, ModuleOp | str | Path, "a module or a model file path"
    )
    check_placements("compare_pipelines", placements)
    graph = load(model, dims) if isinstance(model, str | Path) else model
    chosen, _ = get_backend(backend)
    case = reference_case(graph, seed)
    exes = {name: compile(graph, spec, chosen.name) for name, spec in (("a", a), ("b", b))}
    what = {
        "a": f"pipeline '{a}'",
        "b": f"pipeline '{b}'",
        "twin": f"the A/A twin of pipeline '{a}'",
    }
    first_a = checked_bound(exes["a"], graph, case, what["a"])
    first = {"a": first_a, "b": checked_bound(exes["b"], graph, case, what["b"], io_of(first_a))}
    shares = io_of(first_a) is not None
    copies = copies_within_budget(placements, list(exes.values()), 1, shares)[0]
    sources = {
        "a": (exes["a"], what["a"]),
        "b": (exes["b"], what["b"]),
        "twin": (exes["a"], what["twin"]),
    }
    bound = bind_slots(chosen, sources, copies, graph, case, seed, first)
    rotation = Rotation(bound)
    timings = time_interleaved(
        rotation.fns,
        precision,
        budget_s,
        max(min_rounds, MIN_ROUNDS_PER_COPY * copies),
        seed=seed,
        floor_rounds=max(min_rounds, BUDGET_ROUNDS_PER_COPY * copies),
        on_round=rotation.on_round,
    )
    samples = np.stack([timings[k].samples for k in ("a", "b", "twin")])
    slot_of = np.array(rotation.slots[: samples.shape[1]])
    point, boot = round_bootstrap(samples, resamples, seed, slot_of)
    groups = [np.flatnonzero(slot_of == s) for s in np.unique(slot_of)]
    aa = Interval.of(point[2] / point[0], boot[2] / boot[0])
    return Comparison(
        ratio=Interval.of(point[1] / point[0], boot[1] / boot[0]),
        a=timings["a"].estimate,
        b=timings["b"].estimate,
        floor=max(1 - aa.low, aa.high - 1, 0.0),
        rounds=samples.shape[1],
        stop_reason=timings["a"].stop_reason,
        placements=copies,
        placement_io="shared" if shares else "own",
        copy_sd=math.sqrt(copy_variance(samples, groups)) if len(groups) > 1 else None,
    )
