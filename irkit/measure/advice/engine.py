"""`advise`: evidence per kernel, hypotheses from rules, each measured; advice only where a
paired CI says so.

    result = advise("mlp.graph", pipeline="default-cpu", dims={"B": 64})
    result.advice            # confirmed edits, each with its gain and CI
    result.improved_pipeline # the pipeline with every confirmed edit, for irkit-opt -p

1. The current pipeline is compiled, checked against the float64 reference and bound; every
   kernel is timed alone, interleaved (`evidence.gather`), and placed on the roofline of the
   level its working set fits. The kernels that hold most of the time are examined.
2. Every registered rule for the backend's family (`rules`) reads each examined kernel's
   evidence and proposes pipeline edits. Each distinct edit is applied to the pipeline and
   compiled; edits that compile to the current program's code are dropped ("same code"),
   edits that compile to one program are one hypothesis.
3. Every hypothesis is checked against the reference, and bound on buffers of its own and
   called several times to see that it leaves its inputs alone (`guards`). A wrong or
   input-writing one is refused, never timed.
4. The rest are timed against the current program and an A/A twin of it (the current
   program bound again as separate copies), by successive halving where there are more
   than `race` (the slower half dropped each rung), then a race: every program bound as
   placement slots, interleaved rounds (`tune.race_programs`). Each hypothesis's speedup is
   the paired ratio over the rounds, widened by the slots' spread, at a confidence
   corrected for the comparisons made (Bonferroni over the hypotheses raced and the twin).
5. After timing each hypothesis is checked again (outputs as timed, then fresh inputs with
   its outputs left as they were: `guards.after_timing`), and held to its roof
   (`guards.roof_seconds`). It is *confirmed* when its speedup's CI lies above 1 (and above
   the A/A floor, where the twin's CI excluded 1) with a median gain of at least
   `min_gain`; otherwise *refuted*, with its CI.
6. The confirmed edits are applied together (in order of gain, one value per option); where
   that is a program of its own it is raced against the current and the best single edit,
   and the better of the two confirmed is the improved pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from irkit.errors import IrkitError
from irkit.measure.advice.edits import Edit
from irkit.measure.advice.evidence import KernelEvidence, gather, hot
from irkit.measure.advice.rules import Context, rules_for
from irkit.measure.advice.timing import combine, measure


@dataclass
class Hypothesis:
    """One distinct program that one or more proposed edits compile to."""

    edits: list[Edit]
    spec: str
    rules: list[str] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    """The examined kernels whose evidence proposed it."""
    status: str = "proposed"
    """"confirmed", "refuted", "dropped" (slower than those raced, in successive halving),
    "refused" (wrong, writes its inputs, or fails the checks after timing), "flagged"
    (beyond its roof) or "same code" (compiles to the current program)."""
    why: str = ""
    speedup: dict[str, float] | None = None
    seconds: dict[str, float] | None = None
    changed: dict[str, list[str]] = field(default_factory=dict)
    exe: Any = field(default=None, repr=False)
    key: tuple[str, ...] = ()

    def describe(self) -> str:
        return "; ".join(e.describe() for e in self.edits)

    def to_json(self) -> dict[str, Any]:
        return {
            "edits": [e.to_json() for e in self.edits],
            "describe": self.describe(),
            "pipeline": self.spec,
            "rules": self.rules,
            "kernels": self.kernels,
            "status": self.status,
            "why": self.why,
            "speedup": self.speedup,
            "seconds": self.seconds,
            "changed_kernels": self.changed,
        }


@dataclass
class AdviceResult:
    model: str
    dims: dict[str, int]
    backend: str
    pipeline: str
    evidence: list[KernelEvidence]
    examined: list[str]
    hypotheses: list[Hypothesis]
    improved_pipeline: str
    improvement: dict[str, float] | None
    protocol: dict[str, Any]
    fingerprint: dict[str, Any]
    seconds: dict[str, float] | None = None
    aa: dict[str, float] | None = None
    counters: str | None = None
    """Where counters were asked for: "collected", or the one line saying why not."""
    time_label: str = ""
    rules_used: list[str] = field(default_factory=list)
    dtype: str = ""
    """The type the model's f32 tensors were converted to (`--dtype`); "" where none was."""

    @property
    def advice(self) -> list[Hypothesis]:
        return sorted(
            (h for h in self.hypotheses if h.status == "confirmed"),
            key=lambda h: -(h.speedup or {}).get("median", 1.0),
        )

    @property
    def refuted(self) -> list[Hypothesis]:
        return [h for h in self.hypotheses if h.status != "confirmed"]

    def no_rule(self) -> list[str]:
        """Examined kernels for which no rule proposed an edit that changes code."""
        proposed = {k for h in self.hypotheses for k in h.kernels}
        return [k for k in self.examined if k not in proposed]

    def to_json(self) -> dict[str, Any]:
        advice = self.advice
        return {
            "kind": "irkit.advise",
            "schema": 1,
            "model": self.model,
            "dims": self.dims,
            **({"dtype": self.dtype} if self.dtype else {}),
            "backend": self.backend,
            "pipeline": self.pipeline,
            "time_label": self.time_label,
            "seconds": self.seconds,
            "evidence": [k.to_json() for k in self.evidence],
            "examined": self.examined,
            "advice": [h.to_json() for h in advice],
            "refuted": [h.to_json() for h in self.refuted],
            "no_advice": self.no_rule(),
            "improved_pipeline": self.improved_pipeline,
            "improvement": self.improvement,
            "aa": self.aa,
            "counters": self.counters,
            "rules": self.rules_used,
            "protocol": self.protocol,
            "fingerprint": self.fingerprint,
        }


@dataclass(frozen=True)
class AdviseOptions:
    budget_s: float = 60.0
    """Seconds of timing at most (compiling and checking come on top)."""
    seed: int = 0
    precision: float = 0.01
    cover: float = 0.9
    """Examine the slowest kernels that together hold this share of the time..."""
    max_kernels: int = 6
    """...at most this many."""
    min_gain: float = 0.01
    """The smallest median gain advised (a CI above 1 is needed too)."""
    race: int = 8
    placements: int = 8
    rules: tuple[str, ...] | None = None
    counters: bool = False
    plugins: tuple[str, ...] = ()


def advise(
    model: str | Path | ModuleOp,
    pipeline: str | None = None,
    backend: str = "cpu",
    dims: dict[str, int] | None = None,
    options: AdviseOptions | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    dtype: str | None = None,
) -> AdviceResult:
    """Advise on `pipeline` (default: the backend's own) for `model`; see the module doc.
    `dtype`: a model file's f32 tensors converted to "f16" or "bf16" first (`irkit.load`)."""
    from irkit.frontend import load
    from irkit.host import vector_bits
    from irkit.measure.fingerprint import host_fingerprint
    from irkit.pipelines import PIPELINES
    from irkit.runtime import compile, get_backend
    from irkit.runtime.check import check_bound, reference_case

    opts = options or AdviseOptions()
    tick = progress or (lambda *_: None)
    graph = load(model, dims, dtype) if isinstance(model, str | Path) else model
    chosen, _ = get_backend(backend)
    base = pipeline if pipeline is not None else chosen.default_pipeline
    family = "cpu" if chosen.name == "cpu" else "gpu"
    reference = PIPELINES[chosen.default_pipeline]
    case = reference_case(graph, opts.seed)
    current = compile(graph, base, chosen.name)
    checks, bound = check_bound(current, graph, case)
    bad = [c for c in checks if not c.passed]
    if bad:
        raise IrkitError(f"the pipeline '{base}' computes a wrong result: {bad[0].describe()}")
    ceilings = chosen.ceilings()
    counters, counters_line = _counters(model, base, dims, opts, chosen.name)
    evidence = gather(
        current, bound, ceilings, opts.precision, opts.budget_s * 0.15, opts.seed, counters, tick
    )
    examined = hot(evidence, opts.cover, opts.max_kernels)
    ctx = Context(
        chosen.name,
        family,
        base,
        reference.passes,
        reference.optional,
        evidence,
        vector_bits() if family == "cpu" else 0,
        _cores(current),
        _tuned(graph, base, chosen),
    )
    rules = rules_for(family, opts.rules)
    proposals = _propose(examined, rules, ctx)
    hyps = _compile(graph, base, reference.passes, chosen.name, current, proposals, case, tick)
    result = AdviceResult(
        str(model) if not isinstance(model, ModuleOp) else "<module>",
        dict(dims or {}),
        chosen.name,
        base,
        evidence,
        [k.name for k in examined],
        hyps,
        base,
        None,
        _protocol(chosen, opts),
        host_fingerprint(),
        time_label=_time_label(chosen),
        counters=counters_line,
        rules_used=[r.name for r in rules],
        dtype=dtype if dtype and dtype != "f32" else "",
    )
    raced = [h for h in hyps if h.status == "proposed"]
    if raced:
        measure(result, chosen, graph, case, current, raced, ceilings, opts, tick)
        combine(result, chosen, graph, case, current, reference.passes, opts)
    return result


def _counters(model: Any, base: str, dims: Any, opts: AdviseOptions, backend: str):
    """ncu's counters per kernel where asked for on the real GPU; (None, why) elsewhere."""
    if not opts.counters:
        return None, None
    if backend != "cuda":
        return None, f"counters: only on the cuda backend (this is {backend}); none read"
    from irkit.measure.counters import collect

    try:
        return collect(str(model), base, dims or {}, opts.seed, list(opts.plugins)), "collected"
    except IrkitError as e:
        return None, str(e)


def _cores(exe: Any) -> int:
    import os

    return max(1, len(os.sched_getaffinity(0))) if exe.backend == "cpu" else 1


def _tuned(graph: ModuleOp, base: str, chosen: Any) -> dict[str, Any] | None:
    from irkit import tuning
    from irkit.runtime import device_name

    return tuning.lookup(graph, base, tuning.machine(chosen.name, device_name(chosen)))


def _time_label(chosen: Any) -> str:
    if chosen.name == "cuda-host":
        return "host times: cuda-host runs the CUDA C on the CPU; not GPU times"
    return f"{chosen.name} times ({chosen.timer})"


def _protocol(chosen: Any, opts: AdviseOptions) -> dict[str, Any]:
    return {
        "timer": chosen.timer,
        "budget_s": opts.budget_s,
        "precision": opts.precision,
        "seed": opts.seed,
        "examined": f"the slowest kernels holding {opts.cover:.0%} of the time, at most {opts.max_kernels}",
        "check": "every hypothesis against the float64 reference before timing; bound on its "
        "own buffers and called 3 times, its inputs compared bit for bit",
        "after_timing": "outputs as timed checked; fresh inputs (seed + 1; parameters that "
        "once-per-bind kernels packed kept) written into the same buffers, outputs left as "
        "they were, one call, checked; every slot's inputs compared",
        "roof": "a hypothesis faster than ROOF_SLACK of its kernels' roof time is flagged",
        "comparison": "speedup of each hypothesis over the current program, paired by round, "
        "widened by the placement slots' spread; Bonferroni over the hypotheses raced and the "
        "A/A twin",
        "confirmed": f"CI above 1 (above the A/A floor where the twin's CI excluded 1) and "
        f"median gain at least {opts.min_gain:.1%}",
        "search": f"successive halving down to {opts.race} programs where more, then a race "
        f"bound as up to {opts.placements} placement slots",
        "seed_fresh": opts.seed + 1,
    }


def _propose(
    examined: Sequence[KernelEvidence], rules: Sequence[Any], ctx: Context
) -> dict[Edit, tuple[list[str], list[str]]]:
    """Every edit the rules propose, with the rules and kernels that proposed it."""
    out: dict[Edit, tuple[list[str], list[str]]] = {}
    for kernel in examined:
        for rule in rules:
            for edit in rule.propose(kernel, ctx):
                names, kernels = out.setdefault(edit, ([], []))
                if rule.name not in names:
                    names.append(rule.name)
                if kernel.name not in kernels:
                    kernels.append(kernel.name)
    return out


def _compile(
    graph: ModuleOp,
    base: str,
    reference: Sequence[str],
    backend: str,
    current: Any,
    proposals: dict[Edit, tuple[list[str], list[str]]],
    case: Any,
    tick: Callable[[str, int, int], None],
) -> list[Hypothesis]:
    """Each proposed edit applied and compiled; one hypothesis per distinct program, checked
    and tried for input writes. Edits that change nothing, or compile to the current code,
    are kept as "same code"."""
    from irkit.measure.advice.guards import writes_inputs
    from irkit.runtime import compile
    from irkit.runtime.check import check_bound

    now = tuple(k.hash for k in current.kernels)
    by_key: dict[tuple[str, ...], Hypothesis] = {}
    same: list[Hypothesis] = []
    for n, (edit, (rules, kernels)) in enumerate(proposals.items()):
        tick("compile", n + 1, len(proposals))
        spec = edit.apply(base, reference)
        if spec is None:
            same.append(
                Hypothesis(
                    [edit], base, rules, kernels, "same code", "changes nothing in the pipeline"
                )
            )
            continue
        try:
            exe = compile(graph, spec, backend)
        except IrkitError as e:
            same.append(
                Hypothesis([edit], spec, rules, kernels, "refused", f"does not compile: {e}")
            )
            continue
        key = tuple(k.hash for k in exe.kernels)
        if key == now:
            same.append(
                Hypothesis(
                    [edit],
                    spec,
                    rules,
                    kernels,
                    "same code",
                    "compiles to the current program's code",
                )
            )
            continue
        if key in by_key:
            h = by_key[key]
            h.edits.append(edit)
            h.rules += [r for r in rules if r not in h.rules]
            h.kernels += [k for k in kernels if k not in h.kernels]
            continue
        h = Hypothesis([edit], spec, list(rules), list(kernels), exe=exe, key=key)
        h.changed = _changed(current, exe)
        if (why := writes_inputs(exe, case)) is not None:
            h.status, h.why = "refused", why
        else:
            checks, _ = check_bound(exe, graph, case)
            wrong = [c for c in checks if not c.passed]
            if wrong:
                h.status, h.why = "refused", f"computes a wrong result: {wrong[0].describe()}"
        by_key[key] = h
    return [*by_key.values(), *same]


def _changed(before: Any, after: Any) -> dict[str, list[str]]:
    """The kernels (by name) only one of two programs has, counting repeats."""
    return {
        "removed": _only_in(before.kernels, after.kernels),
        "added": _only_in(after.kernels, before.kernels),
    }


def _only_in(these: Sequence[Any], those: Sequence[Any]) -> list[str]:
    from collections import Counter

    left = Counter(k.hash for k in those)
    out = []
    for k in these:
        if left[k.hash] > 0:
            left[k.hash] -= 1
        else:
            out.append(k.name)
    return out
