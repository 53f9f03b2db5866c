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
timed against BASE in interleaved rounds. Each comparison is a *sequential test*: rounds
are added in batches until the ratio's distribution-free CI is wholly above `1 + threshold`
(slower), wholly below it (not slower by that much), or the budget is spent, in which case
the answer is *undecided* and said so, never guessed. The CI of the k-th look is taken at
confidence `1 - alpha * 6 / (pi^2 k^2)`, so the chance of any wrong decision over all looks
stays under `alpha` however long the test runs. PIPELINE itself is tested against BASE
first: when it is not slower, there is nothing to find.
"""

from __future__ import annotations

import difflib
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from irkit.errors import IrkitError
from irkit.ir import to_text
from irkit.measure.stats import Estimate, median_ci
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
        raise IrkitError(f"the model is wrong on {chosen.name} with no pass of the pipeline "
                         f"applied ({wrong(0)[0].describe()}): the fault is in the required "
                         "lowering or the backend, not in a pass")  # fmt: skip
    if not wrong(len(passes)):
        return None
    good, bad = 0, len(passes)
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (good, mid) if wrong(mid) else (mid, bad)
    specs = [str(p.pipeline_pass_spec()) for p in passes]
    diff = "".join(difflib.unified_diff(
        to_text(modules[bad - 1]).splitlines(keepends=True),
        to_text(modules[bad]).splitlines(keepends=True),
        f"before {specs[bad - 1]}", f"after {specs[bad - 1]}", n=2,
    ))  # fmt: skip
    return WrongPass(bad, specs[bad - 1], wrong(bad), diff, ",".join(specs[: bad - 1]),
                     len(verdicts))  # fmt: skip


# --- slowdowns ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """A sequential test's outcome: 'slower', 'not slower' or 'undecided', with the
    paired ratio (new / base) it ended on."""

    verdict: str
    ratio: Estimate
    rounds: int
    looks: int


def sequential_slower(
    sample: Callable[[], tuple[float, float]],
    threshold: float = 0.05,
    alpha: float = 0.05,
    min_rounds: int = 10,
    batch: int = 5,
    max_rounds: int = 400,
    budget_s: float = 30.0,
) -> Decision:
    """Decide whether `new` is slower than `base` by more than `threshold`, from paired
    samples `sample() -> (base_seconds, new_seconds)` taken one round at a time (see the
    module docstring for the error control)."""
    base: list[float] = []
    new: list[float] = []
    deadline = time.perf_counter() + budget_s
    looks = 0
    while True:
        for _ in range(min_rounds if not base else batch):
            b, n = sample()
            base.append(b)
            new.append(n)
        looks += 1
        confidence = 1 - alpha * 6 / (math.pi**2 * looks**2)
        ratio = median_ci(np.array(new) / np.array(base), confidence)
        bar = 1 + threshold
        if ratio.confidence >= confidence and ratio.low > bar:
            return Decision("slower", ratio, len(base), looks)
        if ratio.confidence >= confidence and ratio.high < bar:
            return Decision("not slower", ratio, len(base), looks)
        if len(base) >= max_rounds or time.perf_counter() > deadline:
            return Decision("undecided", ratio, len(base), looks)


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
        return sorted((f for f in self.findings if f.decision.verdict == "slower"),
                      key=lambda f: -f.decision.ratio.median)  # fmt: skip


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
) -> Slowdown:
    """Which edits from `base` to `pipeline` make `model` slower (see the module docstring).
    `budget_s` bounds each sequential test."""
    from irkit.frontend import load
    from irkit.runtime import compile

    graph = load(model, dims) if isinstance(model, str | Path) else model
    base_specs, edits = pipeline_edits(base, pipeline)
    if not edits:
        raise IrkitError(f"'{pipeline}' and the base '{base}' are the same passes: nothing to bisect", "--slower-than")  # fmt: skip
    case = reference_case(graph, seed)

    def program(spec: str):
        exe = compile(graph, spec, backend)
        bad = [c for c in check(exe, graph, seed, case)[0] if not c.passed]
        if bad:
            raise IrkitError(f"pipeline '{spec}' computes a wrong result: {bad[0].describe()}; not timed (bisect without --slower-than finds the pass)")  # fmt: skip
        return exe, exe.bind(*case[0]).timed_graph()

    base_exe, base_fn = program(",".join(base_specs))
    base_kernels = {k.name for k in base_exe.kernels}

    def versus(fn: Callable[[], None]) -> Decision:
        rounds = Rounds({"base": base_fn, "new": fn}, seed=seed)

        def sample() -> tuple[float, float]:
            rounds.run()
            return rounds.samples["base"][-1], rounds.samples["new"][-1]

        return sequential_slower(sample, threshold, alpha, budget_s=budget_s)

    overall = versus(program(pipeline)[1])
    if overall.verdict != "slower":
        return Slowdown(overall, [])
    findings = []
    for edit in edits:
        spec = ",".join(edit.apply(base_specs))
        exe, fn = program(spec)
        decision = overall if len(edits) == 1 else versus(fn)
        names = {k.name for k in exe.kernels}
        findings.append(EditFinding(edit, spec, decision, tuple(sorted(names - base_kernels)),
                                    tuple(sorted(base_kernels - names))))  # fmt: skip
    return Slowdown(overall, findings)
