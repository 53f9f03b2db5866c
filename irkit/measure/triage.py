"""The triage list: change points in a history's series, and the reruns that decide them.

    suspects = triage(history)                          # change points, with stored verdicts
    rerun(history, suspects, repos={"irkit": "."})      # confirm or refute each undecided one

`triage` runs `irkit.measure.changepoints.detect` over every time series and pairs each
change with the two points around it: the last before the step and the first after, each
with the revisions (a commit per repository) its record was built from. A step between two
points of one revision is not a commit's doing (the machine moved) and is dropped.

`rerun` applies the rerun rules to each suspect still without a verdict: both revisions
are built (`irkit.measure.revisions`: git worktrees), the workload is compiled by each,
and the two are timed interleaved, the whole graph or the one kernel of the series, with
the paired sequential test, in the direction the step went, against a threshold (the
series' A/A floor, at least `min_change`). "slower"/"faster" as detected confirms it, "no
change" refutes it, the budget spent leaves it undecided; the verdict and its protocol
are kept in the database, and a refuted change is not reported again. A confirmed
regression is *open* while the confirmed changes after it in its series have not brought
the time back within the threshold.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from irkit.errors import IrkitError
from irkit.measure.changepoints import Change, detect
from irkit.measure.history import History, Point, Series, Verdict, machine_key, revision_key

DETECTED = (
    "seconds",
    "baseline seconds",
    "tuned seconds",
    "compile seconds",
    "warm compile seconds",
)
"""The metrics searched for change points: times (a pass's saving, a difference, is not)."""

MAX_DIFF = 200_000
"""Characters of a confirmed change's IR diff kept with its verdict."""

RERUN = ("seconds",)
"""The metrics a rerun can measure again (the baseline's pipeline is not the record's)."""


@dataclass(frozen=True)
class Suspect:
    series: Series
    change: Change
    before: Point
    after: Point
    verdict: Verdict | None
    threshold: float
    detected: bool = True
    """False for a confirmed change the detector no longer places (its series grew, the
    penalty with it): kept on its rerun's word."""

    @property
    def status(self) -> str:
        return self.verdict.verdict if self.verdict else "suspected"

    @property
    def slower(self) -> bool:
        return self.change.slower

    def revisions(self) -> tuple[dict, dict]:
        return dict(self.before.repos or {}), dict(self.after.repos or {})

    def span(self) -> str:
        """The commits the step lies between, per repository that changed."""
        before, after = self.revisions()
        moved = _moved(before, after)
        return ", ".join(
            f"{_short(n)} {str(before.get(n))[:10]}..{str(after.get(n))[:10]}" for n in moved
        )

    def describe(self) -> str:
        c = self.change
        way = "slower" if c.slower else "faster"
        seen = (
            f"detected {c.ratio:.3f}x [{c.ci_low:.3f}, {c.ci_high:.3f}]"
            if self.detected
            else "no longer a change point of the detector"
        )
        text = f"{abs(c.ratio - 1):.1%} {way} at {self.span()} ({seen})"
        v = self.verdict
        if v is not None and v.ratio is not None:
            text += (
                f"; rerun {v.ratio:.3f}x [{v.ci_low:.3f}, {v.ci_high:.3f}] over {v.rounds} rounds"
            )
        return f"{text}: {self.status}"


def _short(name: str) -> str:
    return Path(name).name if "/" in name else name


def triage(
    history: History, workload: str | None = None, min_change: float = 0.02
) -> list[Suspect]:
    """Every change point in the time series of `history` (of one workload), oldest series
    first, each with its stored verdict; refuted ones included (callers hide them)."""
    out: list[Suspect] = []
    for s in history.series():
        if s.metric not in DETECTED or (workload is not None and s.workload != workload):
            continue
        points = history.points(s.id)
        floor = max((p.floor for p in points if p.floor is not None), default=0.0)
        found = detect(
            [p.value for p in points],
            [p.ci_low for p in points],
            [p.ci_high for p in points],
            [(p.repos or {}).get("irkit") or p.commit for p in points],
            floor,
        )
        threshold = max(floor, min_change)
        mine = []
        for change in found:
            before, after = points[change.at - 1], points[change.at]
            if before.repos == after.repos:  # no commit between: the machine moved
                continue
            verdict = history.verdict(s.id, before.repos or {}, after.repos or {})
            mine.append(Suspect(s, change, before, after, verdict, threshold))
        mine += _kept(history, s, points, mine, threshold)
        out += sorted(mine, key=lambda x: x.change.at)
    return out


def _kept(
    history: History, series: Series, points: list[Point], found: list[Suspect], threshold: float
) -> list[Suspect]:
    """The confirmed changes of a series that detection no longer finds."""
    seen = {(revision_key(s.before.repos or {}), revision_key(s.after.repos or {})) for s in found}
    out = []
    for before, after, verdict in history.verdicts(series.id):
        key = (revision_key(before), revision_key(after))
        if verdict.verdict != "confirmed" or key in seen or verdict.ratio is None:
            continue
        at = next(
            (
                i
                for i in range(1, len(points))
                if points[i - 1].repos == before and points[i].repos == after
            ),
            None,
        )
        if at is None:
            continue
        change = Change(
            at,
            points[at - 1].commit,
            points[at].commit,
            verdict.ratio,
            verdict.ci_low or verdict.ratio,
            verdict.ci_high or verdict.ratio,
            math.nan,
        )
        out.append(Suspect(series, change, points[at - 1], points[at], verdict, threshold, False))
    return out


def open_regressions(suspects: list[Suspect]) -> list[Suspect]:
    """The confirmed regressions not since undone by confirmed changes after them."""
    out = []
    for s in suspects:
        if s.status != "confirmed" or not s.slower:
            continue
        later = [
            t
            for t in suspects
            if t.series.id == s.series.id and t.status == "confirmed" and t.change.at > s.change.at
        ]
        ratio = _ratio(s) * math.prod(_ratio(t) for t in later)
        if ratio > 1 + s.threshold:
            out.append(s)
    return out


def _ratio(s: Suspect) -> float:
    return s.verdict.ratio if s.verdict and s.verdict.ratio else s.change.ratio


def repos_for(names: Iterable[str], given: Mapping[str, str]) -> dict[str, Path]:
    """Where each repository of a revision is on this machine: `given` (name -> path),
    else irkit's own source checkout for "irkit", else a plugin's path (its repository)."""
    out: dict[str, Path] = {}
    for name in names:
        if name in given:
            out[name] = Path(given[name])
        elif name == "irkit":
            out[name] = Path(__file__).resolve().parents[2]
        else:
            out[name] = Path(name)
    return out


def rerun(
    history: History,
    suspects: list[Suspect],
    repos: Mapping[str, str] | None = None,
    budget_s: float = 30.0,
    say: Callable[[str], None] | None = None,
) -> list[Suspect]:
    """Decide each suspect without a verdict whose metric a rerun measures (`RERUN`) and
    that was recorded on this machine; the suspects, with their verdicts."""
    from irkit.measure.fingerprint import host_fingerprint

    say = say or (lambda _: None)
    here = machine_key(host_fingerprint())
    out: list[Suspect] = []
    for s in suspects:
        if s.verdict is not None or s.series.metric not in RERUN or s.series.machine != here:
            out.append(s)
            continue
        before, after = s.revisions()
        moved = _moved(before, after)
        sides = [r.get(n) for r in (before, after) for n in moved]
        if any(c is None or str(c).endswith("-dirty") for c in sides):
            say(f"#{s.series.id}: not rerun: a side was built from a dirty or unknown tree")
            out.append(s)
            continue
        where = repos_for(moved, repos or {})
        say(f"#{s.series.id} {s.series.label}: rerunning {s.span()}")
        try:
            test, found = _rerun_one(history, s, where, budget_s)
        except IrkitError as e:  # a side that no longer builds: said, left suspected
            place = f"{e.location}: " if e.location else ""
            say(f"#{s.series.id}: not rerun: {place}{e.message}")
            out.append(s)
            continue
        verdict = {"slower": "confirmed", "faster": "confirmed", "no change": "refuted"}.get(
            test.verdict, "undecided"
        )
        kept = history.decide(
            s.series.id,
            before,
            after,
            Verdict(
                verdict,
                test.ratio.median,
                test.ratio.low,
                test.ratio.high,
                test.rounds,
                {**test.to_json(), "budget_s": budget_s, "machine": here, **found},
                time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            ),
        )
        say(f"#{s.series.id}: {kept.verdict} ({test.describe()})")
        out.append(Suspect(s.series, s.change, s.before, s.after, kept, s.threshold))
    return out


def _moved(before: dict, after: dict) -> list[str]:
    """The repositories whose commit differs between two revisions."""
    return [n for n in sorted({*before, *after}) if before.get(n) != after.get(n)]


def _rerun_one(history: History, s: Suspect, where: Mapping[str, Path], budget_s: float):
    """Both revisions built and timed interleaved: the paired test's comparison."""
    from functools import partial

    from irkit.measure.culprits import changed_kernels, changed_pass
    from irkit.measure.revisions import (
        Checkouts,
        Repo,
        Workload,
        close_all,
        paired_change,
        start_copies,
    )

    workload = Workload.of_record(history.body(s.after.record_id or 0))
    revisions = []
    for revision in s.revisions():
        resolved = {}
        for name, path in where.items():  # the moved ones; the others: as installed here
            repo = Repo.at(path)
            resolved[repo] = repo.commit(str(revision[name]))
        revisions.append(resolved)
    with Checkouts() as trees:
        sides = start_copies(trees, revisions, workload)
        try:
            a, b = sides
            if s.series.kernel:
                test = paired_change(
                    [partial(x.kernel_sample, s.series.kernel) for x in a],
                    [partial(x.kernel_sample, s.series.kernel) for x in b],
                    s.threshold,
                    s.slower,
                    budget_s,
                )
            else:
                test = paired_change(a, b, s.threshold, s.slower, budget_s)
            found: dict = {}
            if test.verdict in ("slower", "faster"):  # confirmed: what changed, for triage
                change = changed_pass(a[0], b[0])
                found = {
                    "pass": change.describe(),
                    "pass_spec": change.spec,
                    "ir_diff": change.diff[:MAX_DIFF],
                    "kernels": [k.describe() for k in changed_kernels(a[0], b[0])],
                }
            return test, found
        finally:
            close_all(sides)


def check_clean(repos: Mapping[str, Path]) -> None:
    """An IrkitError naming a repository with uncommitted changes: its results would name a
    commit that is not what ran."""
    from irkit.measure.revisions import Repo

    for name, path in repos.items():
        try:
            repo = Repo.at(path)
        except IrkitError:
            continue  # not in git: nothing to name
        if repo.dirty:
            raise IrkitError(
                f"the work tree of {_short(name)} has uncommitted changes: commit or stash "
                "them first (its results would name a commit that is not what ran)",
                str(repo.path),
            )
