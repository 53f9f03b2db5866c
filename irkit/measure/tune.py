"""Search pass options, and declare a winner only with a CI that excludes the default.

    result = tune("gemm.graph", "cpu-tile-matmul{mr=4,6,8;nr=32,48,64}", dims={"M": 512, ...})
    result.declared, result.choice, result.speedup        # or "default kept"

The space names passes of the pipeline and, per option, the values to try (xDSL's pipeline
syntax, where a comma-separated value is a list; options may be separated by `;` too); a
pass named alone (`--space cpu-tile-matmul`) brings the space it declares (`SEARCH_SPACE`). Every
combination is a candidate pipeline: the base pipeline with those options set. Candidates are
compiled, and those that compile to the same kernels are one program (timed once, the
default's own included). Every program is checked against the float64 reference before it is
timed; a wrong one is reported and never timed. Small spaces (at most `race` programs) are
timed all together, interleaved; larger ones by successive halving (rounds with part of the
budget; the slower half dropped each time, the default always kept: a coarse cut, each
program as it was bound for its check). The race that decides binds every program left as
several placement slots (`slots.bind_slots`, a slot's programs in one set of inputs and
outputs), the rounds rotating through them, so that where a copy landed (a few percent on
a CPU) is sampled, not frozen: bound once each, the fastest of several programs would often
be the one that landed well. The fastest program wins only if its speedup over the default,
paired by round, has a CI above 1 (widened by the slots' spread, `slots.slot_ratio_ci`) at
a confidence corrected for the number of programs compared (Bonferroni): otherwise the
default is kept and the output says why. The result goes to the tuning database
(`irkit.tuning`), which `irkit.compile(..., tuned=True)` reads.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from irkit.errors import IrkitError

MAX_CANDIDATES = 4096
RACE = 8
"""At most this many distinct programs are timed together from the start; more go through
successive halving first."""


@dataclass(frozen=True)
class Dimension:
    pass_name: str
    option: str
    values: tuple[Any, ...]

    @property
    def label(self) -> str:
        return f"{self.pass_name}.{self.option}"


def parse_space(space: str) -> list[Dimension]:
    """`pass{option=v1,v2;other=v3,...},...` (or with spaces between options) as dimensions;
    one-line IrkitError naming the pass or option that is not one."""
    from xdsl.utils.arg_spec import parse_pipeline
    from xdsl.utils.exceptions import ArgSpecParseError

    from irkit.passes import available_passes

    text = re.sub(r";\s*", " ", space)
    try:
        items = list(parse_pipeline(text))
    except ArgSpecParseError as e:
        raise IrkitError(f"--space: {str(e).splitlines()[0]}") from None
    dims = []
    for item in items:
        factory = available_passes().get(item.name)
        if factory is None:
            raise IrkitError(f"--space: unknown pass '{item.name}'")
        fields = {f.replace("_", "-") for f in factory().__dataclass_fields__}
        parameters = dict(item.parameters) or dict(getattr(factory(), "SEARCH_SPACE", {}))
        if not parameters:
            raise IrkitError(f"--space: {item.name} lists no option to tune, and the pass declares no search space (SEARCH_SPACE)")  # fmt: skip
        for option, values in parameters.items():
            if option not in fields:
                raise IrkitError(
                    f"--space: pass '{item.name}' has no option '{option}' (it has {', '.join(sorted(fields)) or 'none'})"
                )
            dims.append(Dimension(item.name, option, tuple(values)))
    return dims


def candidates(base: str, dims: list[Dimension]) -> list[tuple[dict[str, Any], str]]:
    """(choice, pipeline spec) for every combination of the dimensions' values: the base
    pipeline's passes with those options set (on every instance of a pass)."""
    from xdsl.utils.arg_spec import ArgSpec

    from irkit.pipelines import parse_passes

    passes = parse_passes(base)
    present = {p.name for p in passes}
    for d in dims:
        if d.pass_name not in present:
            raise IrkitError(f"--space: {d.pass_name} is not in the pipeline '{base}'")
    count = 1
    for d in dims:
        count *= len(d.values)
    if count > MAX_CANDIDATES:
        raise IrkitError(f"--space: {count} combinations; at most {MAX_CANDIDATES}")
    out = []
    for combo in itertools.product(*(d.values for d in dims)):
        choice = {d.label: v for d, v in zip(dims, combo, strict=True)}
        specs = []
        for p in passes:
            spec = p.pipeline_pass_spec(include_default=False)
            params = dict(spec.parameters)
            for d, v in zip(dims, combo, strict=True):
                if d.pass_name == p.name:
                    params[d.option] = (v,)
            specs.append(str(ArgSpec(p.name, params)))
        spec_text = ",".join(specs)
        parse_passes(spec_text)  # a value the option refuses: one line, naming it
        out.append((choice, spec_text))
    return out


@dataclass
class Program:
    key: tuple[str, ...]
    spec: str
    choices: list[dict[str, Any]] = field(default_factory=list)
    bound: Any = None
    wrong: str | None = None
    seconds: dict[str, float] | None = None
    exe: Any = None
    """The compiled program (the race binds it again, as several placement slots)."""


@dataclass
class TuneResult:
    model: str
    base: str
    backend: str
    space: str
    dims: list[Dimension]
    programs: list[Program]
    default_key: tuple[str, ...]
    confidence: float
    protocol: dict[str, Any]
    fingerprint: dict[str, Any]
    pipeline: str
    """The pipeline to use: the winner's, or the base where the default is kept."""
    declared: bool = False
    verdict: str = ""
    choice: dict[str, Any] | None = None
    speedup: dict[str, float] | None = None
    database: str | None = None
    machine: dict[str, Any] | None = None
    dtype: str = ""
    """The type the model's f32 tensors were converted to (`--dtype`); "" where none was."""

    def to_json(self) -> dict:
        return {
            "kind": "irkit.tune", "schema": 1, "model": self.model, "base_pipeline": self.base,
            **({"dtype": self.dtype} if self.dtype else {}),
            "backend": self.backend, "space": self.space,
            "dimensions": [{"option": d.label, "values": list(d.values)} for d in self.dims],
            "programs": [{"spec": p.spec, "choices": p.choices, "is_default": p.key == self.default_key,
                          "wrong": p.wrong, "seconds": p.seconds} for p in self.programs],
            "declared": self.declared, "verdict": self.verdict, "choice": self.choice,
            "pipeline": self.pipeline, "speedup": self.speedup, "confidence": self.confidence,
            "protocol": self.protocol, "fingerprint": self.fingerprint, "database": self.database,
            "machine": self.machine,
        }  # fmt: skip


def tune(
    model: ModuleOp | str | Path,
    space: str,
    pipeline: str | None = None,
    backend: str = "cpu",
    dims: dict[str, int] | None = None,
    precision: float = 0.01,
    budget_s: float = 30.0,
    seed: int = 0,
    race: int = RACE,
    store: bool = True,
    progress: Callable[[str, int, int], None] | None = None,
    placements: int = 8,
    dtype: str | None = None,
) -> TuneResult:
    """Search `space` over `pipeline` (see the module docstring). `placements`: the slots
    the final race binds every program in (`slots.bind_slots`); `dtype`: a model file's
    f32 tensors converted to "f16" or "bf16" first (`irkit.load`)."""
    from irkit.frontend import load
    from irkit.measure.fingerprint import host_fingerprint
    from irkit.measure.slots import check_placements
    from irkit.runtime import get_backend
    from irkit.runtime.check import reference_case

    check_placements("tune", placements)
    tick = progress or (lambda *_: None)
    graph = load(model, dims, dtype) if isinstance(model, str | Path) else model
    chosen, _ = get_backend(backend)
    base = pipeline if pipeline is not None else chosen.default_pipeline
    dimensions = parse_space(space)
    cands = candidates(base, dimensions)
    case = reference_case(graph, seed)
    programs, default = _compile_candidates(graph, chosen.name, base, cands, case, tick)
    timed = [p for p in programs.values() if p.wrong is None]
    others = [p for p in timed if p is not default]
    confidence = 1 - 0.05 / max(1, len(others))
    protocol: dict[str, Any] = {
        "timer": chosen.timer,
        "candidates": len(cands),
        "programs": len(programs),
        "wrong": sum(p.wrong is not None for p in programs.values()),
        "search": "all together" if len(timed) <= race else "successive halving, then a race",
        "comparison": "speedup over the default paired by round; declared when its CI is above 1",
        "confidence": confidence,
        "precision": precision,
        "budget_s": budget_s,
        "seed": seed,
        "check": "every distinct program against the float64 reference before timing",
    }
    res = TuneResult(str(model), base, chosen.name, space, dimensions, list(programs.values()),
                     default.key, confidence, protocol, host_fingerprint(), base)  # fmt: skip
    res.dtype = dtype if dtype and dtype != "f32" else ""
    if not others:
        why = (
            "every candidate compiles to the default's code"
            if not protocol["wrong"]
            else "no candidate that compiles to other code is correct"
        )
        res.verdict = f"default kept: {why}"
        return _finish(res, graph, store)
    survivors, spent = _halve(default, others, race, precision, budget_s / 3, seed, tick)
    best, ratio = _race(res, chosen, graph, case, default, survivors, precision,
                        budget_s - spent, seed, placements)  # fmt: skip
    _judge(res, best, ratio)
    return _finish(res, graph, store)


def _compile_candidates(
    graph: ModuleOp, backend: str, base: str, cands: list, case: Any, tick: Callable
) -> tuple[dict[tuple[str, ...], Program], Program]:
    """Every candidate compiled; each distinct program (by its kernels' code) bound once and
    checked against the reference. The default first; a wrong default is an error."""
    from irkit.runtime import compile
    from irkit.runtime.check import check_bound

    programs: dict[tuple[str, ...], Program] = {}

    def program_of(spec: str) -> Program:
        exe = compile(graph, spec, backend)
        key = tuple(k.hash for k in exe.kernels)
        if key not in programs:
            checks, bound = check_bound(exe, graph, case)
            wrong = (
                None
                if all(c.passed for c in checks)
                else "; ".join(c.describe() for c in checks if not c.passed)
            )
            programs[key] = Program(key, spec, [], None if wrong else bound, wrong, exe=exe)
        return programs[key]

    default = program_of(base)
    default.choices.append({"default": base})
    if default.wrong:
        raise IrkitError(f"the default pipeline '{base}' computes a wrong result: {default.wrong}")
    for n, (choice, spec) in enumerate(cands):
        program_of(spec).choices.append(choice)
        tick("compile", n + 1, len(cands))
    return programs, default


def _halve(
    default: Program,
    others: list[Program],
    race: int,
    precision: float,
    rung_budget: float,
    seed: int,
    tick: Callable,
) -> tuple[list[Program], float]:
    """Successive halving until `race` programs are left (the default always among them):
    at rung r the slower half out, timed on rung_budget / r. Returns the survivors and the
    seconds the rungs were given (0 where none ran)."""
    from irkit.measure.timers import time_interleaved

    survivors = list(others)
    rung = 0
    while len(survivors) + 1 > race:
        rung += 1
        fns = {p.spec: p.bound.timed_graph() for p in [default, *survivors]}
        t = time_interleaved(fns, precision, rung_budget / rung, min_rounds=5, seed=seed + rung)
        survivors.sort(key=lambda p: t[p.spec].estimate.median)
        survivors = survivors[: max(race - 1, len(survivors) // 2)]
        tick("halving", rung, rung)
    return survivors, rung_budget * bool(rung)


def _race(
    res: TuneResult,
    chosen: Any,
    graph: ModuleOp,
    case: Any,
    default: Program,
    survivors: list[Program],
    precision: float,
    budget_s: float,
    seed: int,
    placements: int,
) -> tuple[Program, Any]:
    """The race (`race_programs`) of the default and the survivors. Returns the fastest and
    its speedup over the default, paired by round, at the result's confidence."""
    racers = [default, *survivors]
    sources = {p.spec: (p.exe, f"candidate '{p.spec}'") for p in racers}
    race = race_programs(chosen, graph, case, sources, precision, budget_s, seed, placements)
    for p in racers:
        e = race.timings[p.spec].estimate
        p.seconds = {"median": e.median, "ci_low": e.low, "ci_high": e.high}
    best = min(survivors, key=lambda p: race.timings[p.spec].estimate.median)
    ratio = race.speedup(default.spec, best.spec, res.confidence)
    res.protocol.update(race.protocol())
    res.speedup = {"median": ratio.median, "ci_low": ratio.low, "ci_high": ratio.high}
    return best, ratio


def paired_speedup(base: Any, other: Any, slots: Any, confidence: float) -> Any:
    """`base`'s samples over `other`'s, paired by round over the rounds both were sampled
    in (a program `needed` left out has NaN in the rest), widened by the spread of the
    `slots` those rounds ran on (`slots.slot_ratio_ci`)."""
    import numpy as np

    from irkit.measure.slots import slot_ratio_ci

    x, y = np.asarray(base, np.float64), np.asarray(other, np.float64)
    n = min(len(x), len(y), len(slots))
    both = ~np.isnan(x[:n]) & ~np.isnan(y[:n])
    return slot_ratio_ci(x[:n][both], y[:n][both], np.asarray(slots)[:n][both], confidence)


@dataclass
class Race:
    """What `race_programs` measured: each program's timing, the slot each round ran on,
    and the bound copies (slot by slot, for checks after timing)."""

    timings: dict[str, Any]
    slots: Any
    copies: int
    bound: dict[str, list[Any]]

    def speedup(self, base: str, other: str, confidence: float) -> Any:
        """`base`'s time over `other`'s (above 1: `other` is faster), paired by round, its
        CI widened by the slots' spread (`slots.slot_ratio_ci`)."""
        return paired_speedup(
            self.timings[base].samples, self.timings[other].samples, self.slots, confidence
        )

    def protocol(self) -> dict[str, Any]:
        from irkit.measure.slots import io_of

        first = next(iter(self.bound.values()))[0]
        return {
            "placements": self.copies,
            "placement_io": "shared" if io_of(first) is not None else "own",
            "placement_method": "the race binds every program as this many slots "
            "(a slot's programs into one set of inputs and outputs where the backend "
            "can), round r running slot r mod placements; a speedup's CI is the "
            "paired ratio's over the rounds, widened by the slots' spread "
            "(slot_ratio_ci)",
        }


def race_programs(
    chosen: Any,
    graph: ModuleOp,
    case: Any,
    sources: dict[str, tuple[Any, str]],
    precision: float,
    budget_s: float,
    seed: int,
    placements: int,
    needed: Callable[[Any, Any], Any] | None = None,
    max_rounds: int | None = None,
) -> Race:
    """Every program of `sources` (name -> (compiled program, what to call it)) bound as
    `placements` slots, a slot's programs in one set of inputs and outputs, the rounds
    rotating through them (bound once each, the programs would differ by their copies'
    offsets too, a few percent on a CPU, and the fastest of several would often be the one
    that landed well), timed interleaved within `budget_s`. `needed(rounds, slots)`, where
    given, names the programs still to be sampled (`time_interleaved`'s `needed`, with the
    slot each round ran on): sampling stops when it names none."""
    import numpy as np

    from irkit.measure.attribution.placements import copies_within_budget
    from irkit.measure.slots import Rotation, bind_slots
    from irkit.measure.timers import time_interleaved

    exes = [exe for exe, _ in sources.values()]
    copies = copies_within_budget(placements, exes, 0)[0]  # as if unshared
    bound = bind_slots(chosen, sources, copies, graph, case, seed)
    rotation = Rotation(bound)
    decide = None if needed is None else (lambda rounds: needed(rounds, np.array(rotation.slots)))
    timings = time_interleaved(
        rotation.fns,
        precision,
        budget_s,
        max(10, 4 * copies),
        max_rounds or max(200, 25 * copies),
        seed=seed,
        floor_rounds=max(10, 2 * copies),
        on_round=rotation.on_round,
        needed=decide,
    )
    return Race(timings, np.array(rotation.slots), copies, bound)


def _judge(res: TuneResult, best: Program, ratio: Any) -> None:
    """A winner only where its speedup's CI is above 1; otherwise the default is kept."""
    choice = best.choices[0]
    described = ", ".join(f"{k}={v}" for k, v in choice.items())
    confidence = res.confidence
    if ratio.low > 1:
        res.declared, res.choice, res.pipeline = True, choice, best.spec
        res.verdict = (
            f"winner: {described}, {ratio.median:.3f}x the default "
            f"[{ratio.low:.3f}, {ratio.high:.3f}] ({confidence:.1%} CI)"
        )
    else:
        res.verdict = (
            f"default kept: the fastest candidate ({described}) is {ratio.median:.3f}x "
            f"the default [{ratio.low:.3f}, {ratio.high:.3f}] ({confidence:.1%} CI), "
            "not beyond it"
        )


def _finish(result: TuneResult, graph: ModuleOp, store: bool) -> TuneResult:
    """Note the machine the result holds for, and record it in the tuning database (winner
    or default kept)."""
    from irkit import tuning
    from irkit.runtime import device_name, get_backend

    chosen, _ = get_backend(result.backend)
    result.machine = tuning.machine(chosen.name, device_name(chosen))
    if store:
        result.database = str(store_result(graph, result.to_json()))
    return result


def store_result(graph: ModuleOp, record: dict) -> Path:
    """A tune record's entry in this machine's tuning database, for the machine it was
    measured on (a record from a remote worker carries that worker's)."""
    from irkit import tuning

    fp = record["fingerprint"]
    entry = {
        "declared": record["declared"],
        "choice": record["choice"],
        "pipeline": record["pipeline"],
        "speedup": record["speedup"],
        "verdict": record["verdict"],
        "space": record["space"],
        "git_sha": fp.get("git_sha"),
        "time": fp.get("time"),
    }
    return tuning.store(graph, record["base_pipeline"], record["machine"], entry)


@dataclass(frozen=True)
class TuneJob:
    """A whole tuning run as one job for an executor (it holds a timing slot where it runs)."""

    model: str
    space: str
    pipeline: str | None
    backend: str
    dims: dict[str, int] | None
    precision: float
    budget_s: float
    seed: int
    workload: str = "tune"
    strategy: str = "tune"
    placements: int = 8
    dtype: str | None = None


def tune_job(
    job: TuneJob, store: bool = True, progress: Callable[[str, int, int], None] | None = None
) -> TuneResult:
    """`tune` with the job's arguments."""
    return tune(job.model, job.space, job.pipeline, job.backend, job.dims, job.precision,
                job.budget_s, job.seed, store=store, progress=progress,
                placements=job.placements, dtype=job.dtype)  # fmt: skip


def _run_tune_job(job: TuneJob) -> dict:  # pragma: no cover - runs on a worker
    return tune_job(job, store=False).to_json()


def tune_on(executor: Any, job: TuneJob, store: bool = True) -> dict:
    """Run a tuning job on `executor` (a suite executor: local, ray or slurm) and record its
    result here, for the machine it ran on. Returns the record."""
    from irkit.frontend import load

    ((_, (tag, record)),) = executor.map(_run_tune_job, [job])
    if tag != "ok":
        raise IrkitError(f"the tuning job failed on its worker: {record.get('error')}")
    if store:
        record["database"] = str(store_result(load(job.model, job.dims, job.dtype), record))
    return record
