"""Many pipelines over one module at once, their common work done once: attribution's
variants (every subset of a pipeline's optional passes that its plan needs) are this."""

from __future__ import annotations

import os
import typing
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from irkit.errors import IrkitError, expect, require
from irkit.ir import apply_saying, make_context, structure_key, verify
from irkit.pipelines import apply_verifying_each, check_options, parse_passes, without_cyclic_gc

T = typing.TypeVar("T")


@dataclass
class SharedRun(typing.Generic[T]):
    """What `apply_pipelines` did: each pipeline's result, and the work it shared."""

    results: list[T]
    pass_runs: int
    """Passes applied (a pipeline applied alone would have run all of its own)."""
    states: int
    """Distinct IR states the passes went through."""
    finished: int
    """Distinct final states, each verified once and given to `finish` once."""
    changed: list[bool] = field(default_factory=list)
    """By step: whether its pass changed any state it ran on (False: it left every one as
    it was, so no pipeline here depends on whether it ran)."""


@without_cyclic_gc
def apply_pipelines(
    module: ModuleOp,
    steps: Sequence[str],
    masks: Sequence[Sequence[bool]],
    finish: Callable[[ModuleOp], T],
    ctx: Context | None = None,
    on_result: Callable[[int], None] | None = None,
    on_step: Callable[[int], None] | None = None,
) -> SharedRun[T]:
    """Run many pipelines that choose among one list of `-p` items over copies of `module`
    (left unmodified), sharing their work: pipeline i keeps `steps[j]` where `masks[i][j]`,
    and `results[i]` is `finish(apply_passes(module.clone(), <its passes>))`, as if each ran
    alone. Attribution's variants (subsets of one pipeline's optional passes) are this.

    The pipelines advance together, one step at a time, and IR states are told apart by
    `structure_key`: at each step the pass runs once per distinct state that keeps it, and
    pipelines whose states meet (a pass that changed nothing, two routes to one IR) go on as
    one. A final state is verified and finished once, whichever pipelines reach it. Passes
    must be deterministic, as `apply_passes` assumes. A failure is reported as
    `apply_passes` reports it: the failing pipeline is replayed from the input with
    verification after each pass, which names the pass. `on_result(n)` is called as the
    number of finished pipelines grows, `on_step(j)` after the j-th step."""
    expect("apply_pipelines", "module", module, ModuleOp, "a module")
    for mask in masks:
        require(len(mask) == len(steps), "masks", len(mask), f"{len(steps)} choices per mask")
    ctx = ctx or make_context()
    parsed = {spec: parse_passes(spec) for spec in dict.fromkeys(steps)}
    for passes in parsed.values():
        for p in passes:
            check_options(p)
    state_ids: dict[tuple[int, int], int] = {}
    pass_runs = 0
    checking = os.environ.get("IRKIT_CHECK_UNCHANGED") == "1"  # the passes' `unchanged`

    def state_of(m: ModuleOp) -> int:
        return state_ids.setdefault(structure_key(m), len(state_ids))

    def replay(index: int) -> typing.NoReturn:
        passes = [p for j, spec in enumerate(steps) if masks[index][j] for p in parsed[spec]]
        apply_verifying_each(module.clone(), passes, ctx, None, None)
        raise IrkitError(
            f"pipeline '{','.join(s for j, s in enumerate(steps) if masks[index][j])}' "
            "failed when run with others sharing its passes, and not when "
            "replayed alone: a pass is not deterministic"
        )

    work = module.clone()
    frontier: dict[int, tuple[ModuleOp, list[int]]] = {
        state_of(work): (work, list(range(len(masks))))
    }
    changed = [False] * len(steps)
    for j, spec in enumerate(steps):
        after: dict[int, tuple[ModuleOp, list[int]]] = {}
        for state, (m, indices) in frontier.items():
            keep = [i for i in indices if masks[i][j]]
            skip = [i for i in indices if not masks[i][j]]
            if skip:  # where states meet (a pass that changed nothing...), one goes on
                if state not in after:
                    after[state] = (m.clone() if keep else m, [])
                after[state][1].extend(skip)
            if keep:
                moved = False
                try:
                    for p in parsed[spec]:
                        moved |= apply_saying(p, ctx, m)
                        pass_runs += 1
                except Exception:  # noqa: BLE001 - replayed, where it is reported by name
                    replay(keep[0])
                now = state_of(m) if moved or checking else state
                if not moved and now != state:
                    raise IrkitError(f"pass '{spec}' said it changed nothing, and it did")
                changed[j] = changed[j] or now != state
                after.setdefault(now, (m, []))[1].extend(keep)
        frontier = after
        if on_step is not None:
            on_step(j + 1)
    results: list[typing.Any] = [None] * len(masks)
    done = 0
    finals = list(frontier.values())
    verdict = _verify_aside([m for m, _ in finals])
    try:
        for m, indices in finals:
            result = finish(m)
            for i in indices:
                results[i] = result
            done += len(indices)
            if on_result is not None:
                on_result(done)
    finally:  # a state that does not verify is named first, whatever finishing it did
        failed = verdict()
        if failed is not None:
            replay(finals[failed][1][0])
    return SharedRun(results, pass_runs, len(state_ids), len(frontier), changed)


def _verify_aside(states: list[ModuleOp]) -> Callable[[], int | None]:
    """Verify `states` (`verify`, each function once in an equal context) in a forked
    process while this one finishes them (lowers, compiles, checks: the main job's 123
    final states took 2.3 s to verify, on the machine's other core now); returns what
    waits for the verdict: the index of the first state that does not verify, or None.
    Verified here, before returning, where fork is not available or the child fails."""

    def here() -> int | None:
        verified: set[tuple] = set()
        for n, m in enumerate(states):
            try:
                verify(m, verified)
            except IrkitError:
                return n
        return None

    if not hasattr(os, "fork") or len(states) < 2:
        found = here()
        return lambda: found
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():  # Python 3.12 warns of fork beside other threads: the
        warnings.simplefilter("ignore", DeprecationWarning)  # child takes no lock of theirs
        pid = os.fork()
    if pid == 0:  # the child: verify, say which failed (-1: none), and leave at once
        code = -2
        try:
            code = -1 if (n := here()) is None else n
        finally:
            os.write(write_end, str(code).encode())
            os._exit(0)
    os.close(write_end)

    def wait() -> int | None:
        with os.fdopen(read_end, "rb") as f:
            said = f.read()
        os.waitpid(pid, 0)
        code = int(said) if said.strip().lstrip(b"-").isdigit() else -2
        return here() if code == -2 else None if code == -1 else code  # -2: the child failed

    return wait
