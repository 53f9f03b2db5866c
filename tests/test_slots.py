"""Placement slots (`irkit.measure.slots`), the one way every measured comparison binds its
programs: each program bound once per slot, a slot's programs into the same buffers; and
the paired ratio whose CI holds the slots' spread. Synthetic samples with known answers,
and real bindings (real llvmlite JIT) whose buffers are checked by identity; no timing is
asserted."""

from __future__ import annotations

import numpy as np
import pytest

import irkit.measure.plants  # noqa: F401  (registers plant-work)
from irkit import load
from irkit.errors import IrkitError
from irkit.measure.slots import bind_slots, check_placements, checked_bound, slot_ratio_ci
from irkit.measure.stats import ratio_ci
from irkit.runtime import compile, get_backend
from irkit.runtime.check import reference_case

CHAIN = "examples/elementwise_chain.graph"
SMALL = {"N": 64, "D": 256}


def _rounds(rng, ratio: float, slots: int, per_slot: int, offset_sd: float, noise_sd: float):
    """Paired rounds of two programs whose true ratio is `ratio`: each slot's copies of the
    new program sit off the base by a log-normal offset (sd `offset_sd`, drawn afresh: a
    new set of placements), every round has its own noise; round i on slot i mod slots."""
    offsets = rng.normal(0.0, offset_sd, slots)
    slot_of = np.arange(slots * per_slot) % slots
    base = 1e-3 * np.exp(rng.normal(0.0, noise_sd, slot_of.size))
    new = base * ratio * np.exp(offsets[slot_of] + rng.normal(0.0, noise_sd, slot_of.size))
    return base, new, slot_of


def test_a_slot_ratio_holds_the_slots_spread_that_the_rounds_alone_miss() -> None:
    # Four slots whose offsets spread 5% against 1% of noise per round: the rounds' CI
    # alone is a CI for these four slots' mixture and misses the true ratio most of the
    # time; with the slots' standard error added it covers it at about its level.
    rng = np.random.default_rng(0)
    runs = [_rounds(rng, 1.0, slots=4, per_slot=10, offset_sd=0.05, noise_sd=0.01)
            for _ in range(200)]  # fmt: skip
    slotted = sum(slot_ratio_ci(new, base, s).low <= 1.0 <= slot_ratio_ci(new, base, s).high
                  for base, new, s in runs)  # fmt: skip
    rounds_only = sum(ratio_ci(new, base).low <= 1.0 <= ratio_ci(new, base).high
                      for base, new, _ in runs)  # fmt: skip
    assert slotted >= 0.92 * len(runs)
    assert rounds_only <= 0.5 * len(runs)


def test_a_slot_ratio_finds_a_real_difference_and_is_the_rounds_ci_with_one_slot() -> None:
    rng = np.random.default_rng(1)
    base, new, slot_of = _rounds(rng, 1.2, slots=8, per_slot=10, offset_sd=0.02, noise_sd=0.01)
    ci = slot_ratio_ci(new, base, slot_of)
    assert ci.low > 1.1 and ci.high < 1.3
    assert ci.low <= ci.median <= ci.high and ci.median == ratio_ci(new, base).median
    one = slot_ratio_ci(new, base, np.zeros(base.size, int))
    assert one == ratio_ci(new, base)


def test_every_program_of_a_slot_is_bound_into_the_slot_s_buffers() -> None:
    graph = load(CHAIN, SMALL)
    case = reference_case(graph, 0)
    backend, _ = get_backend("cpu")
    exes = {"unfused": compile(graph, "cse,lower-graph-to-loops", "cpu"),
            "fused": compile(graph, "cse,fuse-kernels,lower-graph-to-loops", "cpu")}  # fmt: skip
    kept = checked_bound(exes["unfused"], graph, case, "the unfused")
    ticks: list[tuple[str, int, int]] = []
    bound = bind_slots(backend, {k: (e, k) for k, e in exes.items()}, 3, graph, case, seed=0,
                       first={"unfused": kept}, tick=lambda *t: ticks.append(t))  # fmt: skip
    assert [len(bound[k]) for k in exes] == [3, 3] and bound["unfused"][0] is kept
    assert ticks[-1] == ("placements", 5, 5)  # the kept one is not bound again
    for slot in range(3):
        a, b = bound["unfused"][slot].io, bound["fused"][slot].io
        assert all(x is y for x, y in zip(a, b, strict=True))
    slot_buffers = [{id(x) for x in bound["unfused"][s].io} for s in range(3)]
    assert not (slot_buffers[0] & slot_buffers[1]) and not (slot_buffers[1] & slot_buffers[2])
    # every copy another placement of the same code: the program itself, linked again
    assert len({id(b.exe) for b in bound["fused"]}) == 3


def test_a_wrong_copy_is_an_error_naming_it() -> None:
    import tests.broken  # noqa: F401  (registers break-add)

    graph = load(CHAIN, SMALL)
    case = reference_case(graph, 0)
    backend, _ = get_backend("cpu")
    bad = compile(graph, "lower-graph-to-loops,break-add", "cpu")
    with pytest.raises(IrkitError, match="the broken one computes a wrong result: .*not timed"):
        bind_slots(backend, {"bad": (bad, "the broken one")}, 2, graph, case)


@pytest.mark.parametrize("value", [0, 65, 2.0, True, None])
def test_placements_are_checked(value) -> None:
    with pytest.raises(IrkitError, match="tune: placements must be an integer from 1 to 64"):
        check_placements("tune", value)
    check_placements("attribute", None, automatic=True)
    check_placements("attribute", 64)
