"""Commit -> pass -> kernel: the commit of a repository that made a workload slower, then
what it changed.

    result = bisect_commits(Repo.at("../my-passes"), "v1", "main", Workload("m.graph", ...))
    print(result.summary())   # commit X made m 7% slower [5%, 9%]; the pass responsible: P; ...

`bisect_commits` searches a repository's commits between GOOD and BAD with the paired test
of `irkit.measure.revisions` (each side a few worker processes built from a git worktree),
each commit against GOOD, and at the first bad commit names what changed: the first pass
whose output differs between it and its parent (`changed_pass`, with the IR diff), and
the kernels whose code differs (`changed_kernels`, each timed on both sides).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field

from irkit.measure.revisions import (
    COPIES,
    Checkouts,
    Comparison,
    Repo,
    Revision,
    Side,
    Workload,
    close_all,
    paired_change,
    start_copies,
)
from irkit.measure.stats import Estimate


@dataclass(frozen=True)
class PassChange:
    """What differs in the IR between a commit and its parent, for one workload."""

    index: int | None
    """The first pass (1-based) whose output differs; 0: the imported model differs;
    None: every prefix's IR is the same (the change is in the lowering or the codegen)."""
    spec: str | None
    diff: str
    pipelines: tuple[str, str] | None = None
    """The two pipelines, where they differ (the default pipeline changed)."""

    def describe(self) -> str:
        if self.pipelines is not None:
            return f"the pipeline itself changed: {self.pipelines[0]} -> {self.pipelines[1]}"
        if self.index is None:
            return "no pass's output changed: the change is in the lowering or the code generator"
        if self.index == 0:
            return "the imported model differs (the frontend changed)"
        return f"the pass responsible: {self.spec} (pass {self.index} of the pipeline)"


def changed_pass(base: Side, new: Side) -> PassChange:
    a, b = base.ready, new.ready
    if a["passes"] != b["passes"]:
        return PassChange(None, None, "", (a["pipeline"], b["pipeline"]))
    for k, (x, y) in enumerate(zip(a["prefixes"], b["prefixes"], strict=True)):
        if x != y:
            spec = a["passes"][k - 1] if k else None
            where = f"after {spec}" if spec else "the imported model"
            diff = "".join(
                difflib.unified_diff(
                    base.ir(k).splitlines(keepends=True),
                    new.ir(k).splitlines(keepends=True),
                    f"{where} at {base.label}",
                    f"{where} at {new.label}",
                    n=2,
                )
            )
            return PassChange(k, spec, diff)
    return PassChange(None, None, "")


@dataclass(frozen=True)
class KernelChange:
    name: str
    how: str
    """"changed" (other code under the same name), "added" or "removed"."""
    ratio: Estimate | None = None
    """new / base seconds, for a changed kernel timed on both sides."""
    seconds: float | None = None
    """Its time on the side that has it, for an added or removed kernel."""

    def describe(self) -> str:
        if self.ratio is not None:
            r = self.ratio
            return f"{self.name} (changed: {r.median:.2f}x [{r.low:.2f}, {r.high:.2f}])"
        when = f", {self.seconds * 1e6:.1f} us" if self.seconds is not None else ""
        return f"{self.name} ({self.how}{when})"


def changed_kernels(base: Side, new: Side, rounds: int = 12) -> list[KernelChange]:
    """The kernels whose code differs between the two sides, each timed briefly."""
    import numpy as np

    from irkit.measure.stats import ratio_ci

    a = {name: (h, once) for name, h, once in base.ready["kernels"]}
    b = {name: (h, once) for name, h, once in new.ready["kernels"]}
    a_hashes = {h for h, _ in a.values()}
    b_hashes = {h for h, _ in b.values()}
    out: list[KernelChange] = []
    for name, (h, once) in b.items():
        if name in a and a[name][0] != h:
            x = [base.kernel_sample(name) for _ in range(rounds)]
            y = [new.kernel_sample(name) for _ in range(rounds)]
            out.append(KernelChange(name, "changed", ratio_ci(np.array(y), np.array(x), 0.95)))
        elif name not in a and h not in a_hashes:
            seconds = (
                None if once else float(np.median([new.kernel_sample(name) for _ in range(5)]))
            )
            out.append(KernelChange(name, "added", seconds=seconds))
    for name, (h, once) in a.items():
        if name not in b and h not in b_hashes:
            seconds = (
                None if once else float(np.median([base.kernel_sample(name) for _ in range(5)]))
            )
            out.append(KernelChange(name, "removed", seconds=seconds))
    return out


@dataclass
class CommitBisection:
    """`bisect_commits`' answer: the first bad commit (None where undecided or where BAD
    is not slower), the tests it took, and at that commit what changed."""

    repo: Repo
    workload: Workload
    overall: Comparison
    tested: list[tuple[str, Comparison]]
    first_bad: str | None = None
    parent: str | None = None
    range_left: tuple[str, str] | None = None
    """Where the search stopped undecided: the commits it lies between."""
    step: Comparison | None = None
    """The first bad commit against its parent."""
    pass_change: PassChange | None = None
    kernels: list[KernelChange] = field(default_factory=list)

    def summary(self) -> str:
        name = self.workload.label
        o = self.overall
        if o.verdict == "undecided":
            return (
                f"undecided whether {name} is slower at BAD than at GOOD by more than "
                f"{o.threshold:.0%} ({o.describe()}): a larger --budget, or a quieter machine"
            )
        if o.verdict != "slower":
            return (
                f"{name} is not slower at BAD than at GOOD by more than {o.threshold:.0%} "
                f"({o.verdict}: {o.describe()}): nothing to bisect"
            )
        if self.first_bad is None:
            low, high = self.range_left or ("?", "?")
            return (
                f"undecided: the regression lies after {low[:10]} and at or before "
                f"{high[:10]}; a test in between could not decide at its budget"
            )
        s = self.step or o
        pct = f"{s.ratio.median - 1:.1%} slower [{s.ratio.low - 1:.1%}, {s.ratio.high - 1:.1%}]"
        line = (
            f"commit {self.first_bad[:10]} ({self.repo.subject(self.first_bad)}) made {name} {pct}"
        )
        if self.pass_change is not None:
            line += f"; {self.pass_change.describe()}"
        if self.kernels:
            line += "; kernels changed: " + ", ".join(k.describe() for k in self.kernels)
        return line


def bisect_commits(
    repo: Repo,
    good: str,
    bad: str,
    workload: Workload,
    threshold: float = 0.03,
    budget_s: float = 30.0,
    fixed: Revision | None = None,
    progress: Callable[[str], None] | None = None,
    copies: int = COPIES,
) -> CommitBisection:
    """The first commit of `repo` after `good`, up to `bad`, at which `workload` is slower
    than at `good` (see the module docstring). `fixed`: the commits of the other
    repositories (default: what is installed here). `threshold`: the smallest slowdown of
    BAD against GOOD that is searched for; each commit in between is called bad when it is
    slower than GOOD by more than half the regression BAD shows (its paired median)."""
    say = progress or (lambda _: None)
    commits = repo.commits(good, bad)
    good = repo.commit(good)
    others = dict(fixed or {})

    def revision(sha: str) -> dict[Repo, str]:
        return {**others, repo: sha}

    with Checkouts() as trees:
        (base,) = start_copies(trees, [revision(good)], workload, copies)
        try:
            (last,) = start_copies(trees, [revision(commits[-1])], workload, copies)
            overall = paired_change(base, last, threshold, budget_s=budget_s)
            close_all([last])
            say(
                f"BAD {commits[-1][:10]} against GOOD {good[:10]}: {overall.verdict}, "
                f"{overall.describe()}"
            )
            result = CommitBisection(repo, workload, overall, [(commits[-1], overall)])
            if overall.verdict != "slower":
                return result
            half = max((overall.ratio.median - 1) / 2, 0.005)
            low, high = -1, len(commits) - 1  # index -1: GOOD itself
            while high - low > 1:
                mid = (low + high) // 2
                (side,) = start_copies(trees, [revision(commits[mid])], workload, copies)
                test = paired_change(base, side, half, budget_s=budget_s)
                close_all([side])
                result.tested.append((commits[mid], test))
                say(f"{commits[mid][:10]}: {test.verdict}, {test.describe()}")
                if test.verdict == "slower":
                    high = mid
                elif test.verdict == "no change":
                    low = mid
                else:
                    result.range_left = (good if low < 0 else commits[low], commits[high])
                    return result
        finally:
            close_all([base])
        result.first_bad = commits[high]
        result.parent = good if high == 0 else commits[high - 1]
        pair = start_copies(
            trees, [revision(result.parent), revision(result.first_bad)], workload, copies
        )
        try:
            result.step = paired_change(pair[0], pair[1], half, budget_s=budget_s)
            result.pass_change = changed_pass(pair[0][0], pair[1][0])
            result.kernels = changed_kernels(pair[0][0], pair[1][0])
        finally:
            close_all(pair)
        return result
