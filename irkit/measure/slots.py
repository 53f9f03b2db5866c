"""Placement slots: programs bound as several separate copies, so that comparisons between
them sample where their code and buffers landed instead of freezing it.

Two copies of one program, compiled or linked and bound separately, differ by a few
percent on a CPU, consistently, through cache-set and 4K-aliasing accidents of where things
landed (elementwise_chain's copies spread 5-7%, sd, on the 2-core VM). A comparison of two
programs bound once each measures their difference plus the difference of two such
offsets, and no number of rounds takes it out: it is frozen. Every measured comparison in
irkit therefore binds its programs as `copies` *slots*: in slot s every program is bound
once, into the same input and output buffers where the backend can (`Bound.io`, a block of
the experiment whose placement cancels in differences), and round r runs slot r mod
`copies` of every program (`Placements`). Attribution (`attribution.attribute`), the
slowdown bisection (`bisect.slowing_edits`), the tuner (`tune.tune`) and
`attribution.compare_pipelines` all measure this way.

`slot_ratio_ci` is the paired ratio of two programs over such rounds, its CI holding the
slot-to-slot spread as well as the rounds' noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from irkit.errors import IrkitError
from irkit.measure.stats import Estimate, ratio_ci, t_quantile
from irkit.runtime.backend import Copyable, ReleasesKernels, SharesIO

MAX_PLACEMENTS = 64


def check_placements(what: str, placements: Any, automatic: bool = False) -> None:
    """A one-line IrkitError unless `placements` is an integer from 1 to `MAX_PLACEMENTS`
    (or None, where `automatic`)."""
    if automatic and placements is None:
        return
    if (
        isinstance(placements, bool)
        or not isinstance(placements, int)
        or not 1 <= placements <= MAX_PLACEMENTS
    ):
        also = " (or None: automatic)" if automatic else ""
        raise IrkitError(
            f"{what}: placements must be an integer from 1 to {MAX_PLACEMENTS}{also}, got {placements!r}"
        )


class Placements:
    """One program as several copies, each linked and bound separately (its own code,
    scratch and buffer placement). A round calls one copy, `select`ed for the round, the
    same slot for every program, so the copy-to-copy offsets are sampled across rounds
    instead of frozen into one program's median. Where the backend can, the programs of a
    slot share its input and output buffers (`io_of`): a block of the experiment, its
    placement common to every program in it."""

    def __init__(self, fns: list[Callable[[], None]]):
        self.fns = fns
        self.current = fns[0]

    def select(self, slot: int) -> None:
        self.current = self.fns[slot % len(self.fns)]

    def __call__(self) -> None:
        self.current()

    def __getattr__(self, name: str) -> Any:  # the copy's timer name, or its own `sample`
        return getattr(self.current, name)


class Rotation:
    """Bound copies (`bind_slots`) as one `Placements` a program, every program on the same
    slot in a round: `on_round(r)`, `time_interleaved`'s callback, notes the slot round r
    ran on (`slots`) and selects slot r for the next. `timed`: what a round calls for a
    bound copy (its driver's launches by default)."""

    def __init__(
        self,
        bound: Mapping[str, list[Any]],
        timed: Callable[[Any], Callable[[], None]] | None = None,
    ) -> None:
        timed = timed or (lambda b: b.timed_graph())
        self.fns: dict[str, Callable[[], None]] = {
            k: Placements([timed(c) for c in bs]) for k, bs in bound.items()
        }
        self.copies = max(len(bs) for bs in bound.values())
        self.slots: list[int] = []

    def on_round(self, r: int) -> None:
        self.slots.append((r - 1) % self.copies)  # round r ran on it; the next runs on slot r
        for fn in self.fns.values():
            fn.select(r)  # type: ignore[attr-defined]


def copy_of(backend: Any, exe: Any) -> Any:
    """Another placement of a compiled program: the backend's own copy (`exe.copy()`, the
    same code linked or loaded again) where it has one, else a fresh compile."""
    if isinstance(exe, Copyable):
        return exe.copy()
    return backend.compile(exe.module.clone())


def io_of(bound: Any) -> list[Any] | None:
    """A bound program's inputs' and outputs' buffers, for the other programs of its
    placement slot to be bound into, where its backend can (`Bound.io`); else None.

    Why: a copy's offset comes mostly from where its inputs and outputs landed. On this VM
    elementwise_chain's copies spread 5-7% (sd), and a 5% plant's program and the program
    without it, bound one after the other with buffers of their own, differed by 80-120 us
    (sd over 24 slots); bound into the same buffers, by 28-44 us (their slot medians
    correlated 0.97 where they had 0.65-0.78). The effect measured is the same: fusion's
    saving, 75.2-76.5% of the program in three runs each way."""
    return bound.io if isinstance(bound, SharesIO) else None


def checked_bound(
    exe: Any, graph: ModuleOp, case: Any, what: str, io: list[Any] | None = None
) -> Any:
    """`exe` bound to the reference case's inputs, its outputs from binding checked against
    the reference (one call, not a check and a bind: a slow variant's call takes seconds);
    an error naming `what` (a variant or a pipeline) if wrong. Nothing wrong is ever timed.
    `io`: bound into these inputs' and outputs' buffers (`io_of` another bound program)."""
    from irkit.runtime.check import check_bound

    checks, bound = check_bound(exe, graph, case, io)
    bad = [c for c in checks if not c.passed]
    if bad:
        raise IrkitError(f"{what} computes a wrong result: {bad[0].describe()}; not timed")
    return bound


def bind_slots(
    backend: Any,
    sources: Mapping[str, tuple[Any, str]],
    copies: int,
    graph: ModuleOp,
    case: Any,
    seed: int = 0,
    first: Mapping[str, Any] | None = None,
    tick: Callable[[str, int, int], None] | None = None,
) -> dict[str, list[Any]]:
    """Every program of `sources` (name -> (compiled program, what to call it in an
    error)) bound `copies` times, each copy checked against the reference: slot by slot,
    the programs in a fresh random order in each slot, every program of a slot bound into
    that slot's input and output buffers where the backend can (the first bound's
    `io_of`). `first`: copies already bound for slot 0 (into one set of buffers), kept.

    Slot by slot, because copies bound one after another share much of their offset (four
    copies of one program bound in a row, then four more, differed as sets by up to 2.5%;
    bound alternately, by 0.15%), so a program's copies bound in a row would look alike
    while the program as a whole sat off by that much. A copy after slot 0 releases its
    kernel plan (`release_kernels`): kernels are timed alone on the first."""
    first = first or {}
    bound: dict[str, list[Any]] = {k: [first[k]] if k in first else [] for k in sources}
    slot0_io = io_of(next(iter(first.values()))) if first else None
    total = sum(copies - len(b) for b in bound.values())
    order = np.random.default_rng(seed)
    done = 0
    for slot in range(copies):
        io = slot0_io if slot == 0 else None
        for k in order.permutation(list(sources)):
            if len(bound[k]) > slot:
                continue
            exe, what = sources[k]
            copy = checked_bound(copy_of(backend, exe), graph, case, what, io)
            io = io if io is not None else io_of(copy)
            if isinstance(copy, ReleasesKernels):
                copy.release_kernels()
            bound[k].append(copy)
            done += 1
            if tick is not None:
                tick("placements", done, total)
    return bound


def slot_ratio_ci(
    numer: np.ndarray,
    denom: np.ndarray,
    slots: np.ndarray,
    confidence: float = 0.95,
    slot_confidence: float | None = None,
) -> Estimate:
    """The ratio of two programs' times paired by round (`ratio_ci`: the median of the
    ratios, its distribution-free CI over the rounds), with the spread of the slots the
    rounds ran on (`slots`, one per round) added: the CI's half-widths on the log scale
    summed in quadrature with t(S-1) times the standard error of the S slots' mean log
    ratios. The rounds' CI alone holds the slots that were bound, as if they were all
    the placements there are; the slot term holds that they are S of many. The slots'
    means carry the rounds' noise too, so the sum counts that twice: conservative, by
    little once a slot has several rounds. One slot: the rounds' CI alone.
    The confidence recorded is the lower of the two parts' levels (each part holds its
    own error at its level; their sum in quadrature, about the lower one's).
    `slot_confidence`: the slot term's own level (default `confidence`), for a sequential
    test whose looks spend their error on the rounds: the slots are drawn once, and more
    rounds only bring their means closer to where those slots truly sit."""
    est = ratio_ci(numer, denom, confidence)
    labels = np.unique(slots)
    if len(labels) < 2 or est.low <= 0:
        return est
    n = min(len(numer), len(denom), len(slots))
    logs = np.log(np.asarray(numer[:n], np.float64) / np.asarray(denom[:n], np.float64))
    means = np.array([logs[slots[:n] == s].mean() for s in labels])
    level = confidence if slot_confidence is None else slot_confidence
    term = (
        t_quantile(1 - (1 - level) / 2, len(labels) - 1)
        * means.std(ddof=1)
        / math.sqrt(len(labels))
    )
    below, above = math.log(est.median / est.low), math.log(est.high / est.median)
    return Estimate(
        est.median,
        est.median * math.exp(-math.hypot(below, term)),
        est.median * math.exp(math.hypot(above, term)),
        min(est.confidence, level),
        est.n,
    )
