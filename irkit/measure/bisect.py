"""Bisection: the pass after which a model's result is wrong, and the pass that made it slower.

**Wrong results** (`first_wrong_pass`). The pipeline's prefixes are compiled for the backend
(its required lowering added to each) and checked against the float64 reference; a binary
search over prefix lengths finds the first prefix that is wrong after one that is right, in
about log2(passes) compiles. The pass between them is the culprit; its IR diff is what it
did. Prefix 0 (no pass but the backend's required lowering) is checked first: when it is
already wrong, the fault is below the pipeline (the lowering or the backend).

**Slowdowns** (`slowing_edits`). PIPELINE is compared with a BASE pipeline that is not
slow: the edits that turn BASE into PIPELINE (a pass inserted, removed, or given other
options; found by aligning the two pass lists) are each applied to BASE alone, checked, and
timed against BASE in interleaved rounds, both bound as several placement slots that the
rounds rotate through (`slots`), a slot's two programs in one set of inputs and outputs,
so that where each copy landed is sampled rather than frozen into the ratio. Each
comparison is a *sequential test*: rounds are added in batches until the ratio's CI
(distribution-free over the rounds, widened by the slots' spread, `slots.slot_ratio_ci`)
is wholly above `1 + threshold` (slower), wholly below it (not slower by that much), or
the budget is spent, in which case the answer is *undecided* and said so, never guessed.
The rounds' CI of the k-th look is taken at confidence `1 - a * 6 / (pi^2 k^2)`, with `a`
all of `alpha` for one slot and half of it with several (the other half is the slots'
term's, spent once), so the chance of any wrong decision over all looks stays under
`alpha` however long the test runs. PIPELINE itself is tested against BASE
first: when it is not slower, there is nothing to find.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from irkit.errors import IrkitError
from irkit.ir import to_text
from irkit.measure.slots import Placements, bind_slots, check_placements, io_of, slot_ratio_ci
from irkit.measure.stats import Estimate, ratio_ci
from irkit.measure.timers import Rounds
from irkit.pipelines import apply_passes, parse_passes
from irkit.runtime.check import OutputCheck, check, reference_case

# --- wrong results ----------------------------------------------------------------------------


@dataclass(frozen=True)
class WrongPass:
    """The first pass after which the model's result is wrong (index is 1-based)."""

    index: int
    spec: str
    checks: list[OutputCheck]
    diff: str
    good_prefix: str
    compiles: int


def first_wrong_pass(
    graph: ModuleOp, pipeline: str, backend: str = "cpu", seed: int = 0
) -> WrongPass | None:
    """The first pass of `pipeline` after which `graph` computes a wrong result on
    `backend`, or None when the whole pipeline is right (see the module docstring)."""
    from irkit.runtime import get_backend

    chosen, _ = get_backend(backend)
    passes = parse_passes(pipeline)
    case = reference_case(graph, seed)
    modules = [graph.clone()]
    for p in passes:  # every prefix's module, each pass run once
        modules.append(apply_passes(modules[-1].clone(), [p]))
    verdicts: dict[int, list[OutputCheck]] = {}

    def wrong(k: int) -> list[OutputCheck]:
        if k not in verdicts:
            exe = chosen.compile(chosen.lower(modules[k].clone()))
            verdicts[k] = [c for c in check(exe, graph, seed, case)[0] if not c.passed]
        return verdicts[k]

    if wrong(0):
        raise IrkitError(
            f"the model is wrong on {chosen.name} with no pass of the pipeline "
            f"applied ({wrong(0)[0].describe()}): the fault is in the required "
            "lowering or the backend, not in a pass"
        )
    if not wrong(len(passes)):
        return None
    good, bad = 0, len(passes)
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (good, mid) if wrong(mid) else (mid, bad)
    specs = [str(p.pipeline_pass_spec()) for p in passes]
    diff = "".join(
        difflib.unified_diff(
            to_text(modules[bad - 1]).splitlines(keepends=True),
            to_text(modules[bad]).splitlines(keepends=True),
            f"before {specs[bad - 1]}",
            f"after {specs[bad - 1]}",
            n=2,
        )
    )
    return WrongPass(
        bad, specs[bad - 1], wrong(bad), diff, ",".join(specs[: bad - 1]), len(verdicts)
    )


# --- slowdowns ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """A sequential test's outcome: 'slower', 'not slower' or 'undecided', with the
    paired ratio (new / base) it ended on, and the placement slots its rounds rotated
    through."""

    verdict: str
    ratio: Estimate
    rounds: int
    looks: int
    placements: int = 1
    placement_io: str = "own"


def sequential_slower(
    sample: Callable[[], tuple[float, float]],
    threshold: float = 0.05,
    alpha: float = 0.05,
    min_rounds: int = 10,
    batch: int = 5,
    max_rounds: int = 400,
    budget_s: float = 30.0,
    slots: int = 1,
) -> Decision:
    """Decide whether `new` is slower than `base` by more than `threshold`, from paired
    samples `sample() -> (base_seconds, new_seconds)` taken one round at a time (see the
    module docstring for the error control). `slots`: the rounds rotate through that many
    placement slots (round i on slot i mod slots, as the caller's `sample` does), and the
    ratio's CI holds their spread (`slot_ratio_ci`); a look comes after two rounds on
    every slot, then after each further round on every slot. With slots, half of `alpha`
    is spent over the looks on the rounds and half, once, on the slots (Bonferroni): the
    slots are drawn once, and more rounds only bring their means closer to where those
    slots truly sit, so spending it look by look would widen a term that does not shrink."""
    base: list[float] = []
    new: list[float] = []
    deadline = time.perf_counter() + budget_s
    looks = 0
    first, more = max(min_rounds, 2 * slots), max(batch, slots) if slots > 1 else batch
    while True:
        for _ in range(first if not base else more):
            b, n = sample()
            base.append(b)
            new.append(n)
        looks += 1
        spent = alpha / 2 if slots > 1 else alpha  # the other half: the slots, drawn once
        confidence = 1 - spent * 6 / (math.pi**2 * looks**2)
        rounds = np.arange(len(base))
        ratio = slot_ratio_ci(
            np.array(new), np.array(base), rounds % slots, confidence, 1 - alpha / 2
        )
        # the rounds' order statistics reach the look's confidence (not below 6 rounds)
        reached = ratio_ci(np.array(new), np.array(base), confidence).confidence >= confidence
        bar = 1 + threshold
        if reached and ratio.low > bar:
            return Decision("slower", ratio, len(base), looks, slots)
        if reached and ratio.high < bar:
            return Decision("not slower", ratio, len(base), looks, slots)
        if len(base) >= max_rounds or time.perf_counter() > deadline:
            return Decision("undecided", ratio, len(base), looks, slots)


@dataclass(frozen=True)
class Edit:
    """One difference between BASE and PIPELINE: BASE's passes `removed` at `position`
    replaced by PIPELINE's `added`."""

    position: int
    removed: tuple[str, ...]
    added: tuple[str, ...]

    def describe(self) -> str:
        if not self.removed:
            return f"inserting {', '.join(self.added)}"
        if not self.added:
            return f"removing {', '.join(self.removed)}"
        return f"replacing {', '.join(self.removed)} by {', '.join(self.added)}"

    def apply(self, base: list[str]) -> list[str]:
        return base[: self.position] + list(self.added) + base[self.position + len(self.removed) :]


def pipeline_edits(base: str, pipeline: str) -> tuple[list[str], list[Edit]]:
    """BASE's pass specs (named pipelines expanded) and the edits that turn them into
    PIPELINE's, aligned by difflib on the specs."""
    a = [_spec(p) for p in parse_passes(base)]
    b = [_spec(p) for p in parse_passes(pipeline)]
    edits: list[Edit] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        removed, added = a[i1:i2], b[j1:j2]
        if tag == "insert":  # each pass on its own, so that one pass can be named
            edits += [Edit(i1, (), (x,)) for x in added]
        elif tag == "delete":
            edits += [Edit(i1 + n, (x,), ()) for n, x in enumerate(removed)]
        elif tag == "replace" and len(removed) == len(added):
            edits += [
                Edit(i1 + n, (x,), (y,))
                for n, (x, y) in enumerate(zip(removed, added, strict=True))
            ]
        elif tag == "replace":
            edits.append(Edit(i1, tuple(removed), tuple(added)))
    return a, edits


def _spec(p: ModulePass) -> str:
    return str(p.pipeline_pass_spec())


@dataclass(frozen=True)
class EditFinding:
    edit: Edit
    pipeline: str
    decision: Decision
    kernels_added: tuple[str, ...]
    kernels_removed: tuple[str, ...]


@dataclass(frozen=True)
class Slowdown:
    overall: Decision
    findings: list[EditFinding]

    @property
    def culprits(self) -> list[EditFinding]:
        return sorted(
            (f for f in self.findings if f.decision.verdict == "slower"),
            key=lambda f: -f.decision.ratio.median,
        )


def slowing_edits(
    model: ModuleOp | str | Path,
    pipeline: str,
    base: str,
    backend: str = "cpu",
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
    threshold: float = 0.05,
    budget_s: float = 30.0,
    alpha: float = 0.05,
    placements: int = 8,
) -> Slowdown:
    """Which edits from `base` to `pipeline` make `model` slower (see the module docstring).
    `budget_s` bounds each sequential test. Each test binds the base and the edited
    program as `placements` slots (`slots.bind_slots`: each slot's two into one set of
    inputs and outputs where the backend can; fewer slots where they would hold more than
    `placement_budget()`), the rounds rotating through them: bound once each, two
    programs differ by their copies' offsets too (elementwise_chain's spread 5-7% on a
    CPU), which no number of rounds takes out and which a 5% threshold cannot tell from
    a slowdown."""
    from irkit.frontend import load
    from irkit.measure.attribution.placements import copies_within_budget
    from irkit.runtime import compile, get_backend

    check_placements("slowing_edits", placements)
    graph = load(model, dims) if isinstance(model, str | Path) else model
    chosen, _ = get_backend(backend)
    base_specs, edits = pipeline_edits(base, pipeline)
    if not edits:
        raise IrkitError(
            f"'{pipeline}' and the base '{base}' are the same passes: nothing to bisect",
            "--slower-than",
        )
    case = reference_case(graph, seed)

    def program(spec: str):
        exe = compile(graph, spec, chosen.name)
        bad = [c for c in check(exe, graph, seed, case)[0] if not c.passed]
        if bad:
            raise IrkitError(
                f"pipeline '{spec}' computes a wrong result: {bad[0].describe()}; not timed (bisect without --slower-than finds the pass)"
            )
        return exe

    base_exe = program(",".join(base_specs))
    base_kernels = {k.name for k in base_exe.kernels}
    tests = 0

    def versus(exe: Any, spec: str) -> Decision:
        nonlocal tests
        tests += 1
        copies = copies_within_budget(placements, [base_exe, exe], 0)[0]  # as if unshared: at most
        sources = {"base": (base_exe, "the base"), "new": (exe, f"pipeline '{spec}'")}
        bound = bind_slots(chosen, sources, copies, graph, case, seed + tests)
        shares = io_of(bound["base"][0]) is not None
        fns = {k: Placements([c.timed_graph() for c in bs]) for k, bs in bound.items()}
        rounds = Rounds(dict[str, Callable[[], None]](fns), seed=seed)

        def sample() -> tuple[float, float]:
            for fn in fns.values():
                fn.select(len(rounds.samples["base"]))  # round i on slot i mod copies
            rounds.run()
            return rounds.samples["base"][-1], rounds.samples["new"][-1]

        decision = sequential_slower(sample, threshold, alpha, budget_s=budget_s, slots=copies)
        return dataclasses.replace(decision, placement_io="shared" if shares else "own")

    overall = versus(program(pipeline), pipeline)
    if overall.verdict != "slower":
        return Slowdown(overall, [])
    findings = []
    for edit in edits:
        spec = ",".join(edit.apply(base_specs))
        exe = program(spec)
        decision = overall if len(edits) == 1 else versus(exe, spec)
        names = {k.name for k in exe.kernels}
        findings.append(EditFinding(edit, spec, decision, tuple(sorted(names - base_kernels)),
                                    tuple(sorted(base_kernels - names))))  # fmt: skip
    return Slowdown(overall, findings)
