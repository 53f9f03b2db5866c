"""`attribute` as named phases over typed values: prepare, compile the variants, bind the
placements, measure, check the noise floor, time the kernels, judge the passes, record."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from irkit.errors import IrkitError, expect
from irkit.ir import model_function, structure_key
from irkit.measure.attribution.bootstrap import round_bootstrap
from irkit.measure.attribution.kernels import (
    kernel_diff,
    kernel_threads,
    program_key,
    shown_kernels,
    time_kernels,
)
from irkit.measure.attribution.noise import (
    aa_floor,
    context_checks,
    family_confidence,
    significance,
)
from irkit.measure.attribution.options import AttributeOptions
from irkit.measure.attribution.placements import auto_placements, copies_within_budget
from irkit.measure.attribution.plan import (
    Mask,
    Plan,
    describe_variant,
    kept,
    make_plan,
    option_chain,
    variant_spec,
)
from irkit.measure.attribution.protocol import (
    AA_TWIN,
    AA_TWIN_BASELINE,
    RULE,
    per_context_method,
    protocol_record,
)
from irkit.measure.attribution.record import Attribution, KernelTime, PassResult
from irkit.measure.attribution.sampling import (
    BUDGET_ROUNDS_PER_COPY,
    KERNEL_MAX_ROUNDS,
    MIN_ROUNDS_PER_COPY,
    cost_periods,
    open_passes,
    timed_call,
)
from irkit.measure.attribution.types import (
    Binding,
    Kernels,
    Measured,
    Noise,
    Program,
    Progress,
    Setup,
    Variants,
)
from irkit.measure.roofline import Ceilings
from irkit.measure.slots import Rotation, bind_slots, checked_bound, io_of
from irkit.measure.stats import Interval
from irkit.measure.timers import Rounds, time_interleaved
from irkit.pipelines import pipeline_steps


def attribute(
    model: ModuleOp | str | Path,
    pipeline: str | None = None,
    backend: str = "cpu",
    strategy: str | None = None,
    dims: Mapping[str, int] | None = None,
    *,
    dtype: str | None = None,
    option_steps: Sequence[str] = (),
    options: AttributeOptions | None = None,
    ceilings: Ceilings | None | Literal["backend"] = "backend",
    progress: Progress | None = None,
    **knobs: Any,
) -> Attribution:
    """Attribute the runtime of `model` under `pipeline` to its optional passes (the
    protocol: `irkit.measure.attribution`). How it measures is `options`, or the defaults,
    with any of `AttributeOptions`'s fields given as keywords (`budget_s=5`) replacing
    theirs; `strategy` likewise. `ceilings`: the roofline's, by default the backend's own
    (`Backend.ceilings()`); None for none. `dtype`: a model file's f32 tensors converted to
    "f16" or "bf16" first (`irkit.load`). `option_steps`: `plan.option_chain`'s."""
    if strategy is not None:
        knobs["strategy"] = strategy
    opts = AttributeOptions.of(options, **knobs)
    expect("attribute", "model", model, ModuleOp | str | Path, "a module or a model file path")
    expect("attribute", "pipeline", pipeline, str | None, "a pipeline spec")
    tick = progress or (lambda *_: None)
    setup = _prepare(model, pipeline, backend, dims, dtype, ceilings, opts, option_steps)
    setup, variants = _plan_and_compile(setup, opts, tick)
    binding = _bind_placements(setup, variants, opts, tick)
    measured = _measure(setup, variants, binding, opts, tick)
    noise = _noise_floor(setup, variants, binding, measured, opts)
    kernels = _kernel_times(setup, variants, opts, tick)
    passes = _judge_passes(setup, variants, measured, noise, kernels)
    record = _record(model, dims, opts, setup, variants, binding, measured, noise, kernels, passes)
    record.dtype = dtype if dtype and dtype != "f32" else ""
    return record


# --------------------------------------------------------------------------- the phases


def _prepare(
    model: ModuleOp | str | Path,
    pipeline: str | None,
    backend: str,
    dims: Mapping[str, int] | None,
    dtype: str | None,
    ceilings: Ceilings | None | Literal["backend"],
    opts: AttributeOptions,
    option_steps: Sequence[str] = (),
) -> Setup:
    from irkit.frontend import load
    from irkit.runtime import get_backend
    from irkit.runtime.check import reference_case

    graph = load(model, dims, dtype) if isinstance(model, str | Path) else model
    model_function(graph)
    chosen, selection = get_backend(backend)
    if chosen.name == "reference":
        raise IrkitError("attribution needs a compiling backend (cpu or cuda), not the reference")
    spec = pipeline if pipeline is not None else chosen.default_pipeline
    steps = option_chain(pipeline_steps(spec), list(option_steps), opts.strategy)
    optional = [n for n, s in enumerate(steps) if s.optional]
    if not optional:
        raise IrkitError(f"pipeline '{spec}' has no optional pass to attribute", "-p")
    return Setup(graph, chosen, selection,
                 chosen.ceilings() if ceilings == "backend" else ceilings,
                 chosen.fingerprint(), spec, steps, optional,
                 make_plan(opts.strategy, len(optional), opts.permutations, opts.seed),
                 reference_case(graph, opts.seed))  # fmt: skip


def _plan_and_compile(
    setup: Setup, opts: AttributeOptions, tick: Progress
) -> tuple[Setup, Variants]:
    """Shapley's plan without its null players, and its variants compiled. A pass that
    changed no IR state in a probe of every pass left out of and added to the extremes
    (`_inert_passes`) is kept in every variant; the run then shows whether it changed any
    state it ran on in any variant. None did: each is a null player of the whole game
    (with it on or off, every variant's states are the same), its value exactly 0 and the
    others' those of the game without it, exact where they are few (transformer_block's 22
    optional passes under default-cpu: 10 such, 12 left). One did: it is dropped from the
    fixed set and the plan made again. A run before on the same model, pipeline and
    backend gives its confirmed set as the candidates instead of the probe
    (`_probed_before`)."""
    if opts.strategy != "shapley" or opts.prune_null is False:
        return setup, _compile_variants(setup, tick)
    probed = _probed_before(setup)
    fixed = probed if probed is not None else _inert_passes(setup)
    while True:
        plan = make_plan("shapley", len(setup.optional), opts.permutations, opts.seed, fixed)
        planned = dataclasses.replace(
            setup, plan=plan, null_candidates="probe" if probed is None else "cache"
        )
        variants = _compile_variants(planned, tick)
        moved = {i for i in fixed if variants.shared.changed[setup.optional[i]]}
        if not moved:
            if probed != fixed:
                _probed_before(setup, fixed)
            return planned, variants
        fixed -= moved


def _probed_before(setup: Setup, inert: frozenset[int] | None = None) -> frozenset[int] | None:
    """The null players a run on this model (its IR, by content), pipeline and backend, at
    this irkit, found and confirmed before (the disk cache, kind `attribution`): the warm
    run's candidates instead of a probe (3 of its 31 s). They are candidates still: this
    run's own variants confirm them, or refute one and refit, as a probe's. With `inert`,
    store those."""
    from irkit.codegen.disk_cache import cache_key, read, write
    from irkit.ir import content_hash
    from irkit.measure.fingerprint import git_sha
    from irkit.version import __version__

    labels = [setup.steps[n].label for n in setup.optional]
    what = (content_hash(setup.graph), setup.spec, setup.backend.name, labels)
    name = cache_key("null-players-v1", *what, __version__, git_sha())
    if inert is not None:
        write("attribution", name, json.dumps(sorted(inert)).encode())
        return inert
    data = read("attribution", name)
    try:
        found = json.loads(data) if data is not None else None
    except ValueError:
        return None
    if not isinstance(found, list) or not all(
        isinstance(i, int) and 0 <= i < len(labels) for i in found
    ):
        return None
    return frozenset(found)


def _inert_passes(setup: Setup) -> frozenset[int]:
    """The optional passes (indices into `setup.optional`) that changed no IR state when
    each was left out of the full pipeline and added to the empty one: candidates for
    Shapley's null players, which the plan's own run then confirms or refutes."""
    from irkit.shared_runs import apply_pipelines

    steps, optional = setup.steps, setup.optional
    k = len(optional)
    masks = {(False,) * k, (True,) * k}
    for i in range(k):
        masks |= {tuple(j != i for j in range(k)), tuple(j == i for j in range(k))}
    choices = [kept(steps, optional, m) for m in sorted(masks)]
    shared = apply_pipelines(setup.graph, [s.spec for s in steps], choices, lambda m: None)
    return frozenset(i for i, n in enumerate(optional) if not shared.changed[n])


def _compile_variants(setup: Setup, tick: Progress) -> Variants:
    """Every variant of the plan through its pipeline (one walk of their common prefixes,
    `apply_pipelines`), lowered and compiled once per distinct lowered module, and each
    distinct program bound once and checked against the reference (slot 0's copy)."""
    from irkit.shared_runs import apply_pipelines

    plan, steps, optional, chosen = setup.plan, setup.steps, setup.optional, setup.backend
    compiled: dict[tuple[int, int], tuple[Any, str]] = {}  # lowered IR -> (exe, program key)

    def finish(module: ModuleOp) -> tuple[Any, str]:
        lowered = chosen.lower(module)
        if lowered is module:  # a final state, which apply_pipelines finishes once each
            exe = chosen.compile(lowered)
            return exe, program_key(exe)
        ir_key = structure_key(lowered)
        if ir_key not in compiled:
            exe = chosen.compile(lowered)
            compiled[ir_key] = (exe, program_key(exe))
        return compiled[ir_key]

    started = time.perf_counter()
    choices = [kept(steps, optional, m) for m in plan.masks]
    shared = apply_pipelines(
        setup.graph,
        [s.spec for s in steps],
        choices,
        finish,
        on_result=lambda n: tick("compile", n, len(plan.masks)),
        on_step=lambda j: tick("passes", j, len(steps)),
    )
    compile_seconds = time.perf_counter() - started
    programs: dict[str, Program] = {}
    key_of: dict[Mask, str] = {}
    records: list[dict] = []
    for mask, (exe, key) in zip(plan.masks, shared.results, strict=True):
        vspec = variant_spec(steps, optional, mask)
        key_of[mask] = key
        if key not in programs:
            what = f"the variant with {describe_variant(steps, optional, mask)} ({vspec})"
            first = next(iter(programs.values()), None)  # slot 0's buffers (`Placements`)
            io = io_of(first.bound) if first else None
            programs[key] = Program(key, exe, checked_bound(exe, setup.graph, setup.case, what, io))
        programs[key].masks.append(mask)
        records.append(
            {
                "passes": [steps[optional[j]].label for j, m in enumerate(mask) if m],
                "spec": vspec,
                "program": key,
                "kernels": [k.hash for k in exe.kernels],
            }
        )
    tick("compile", len(plan.masks), len(plan.masks))
    return Variants(
        programs, key_of, records, compile_seconds, shared, key_of[plan.full], key_of[plan.empty]
    )


def _bind_placements(
    setup: Setup, variants: Variants, opts: AttributeOptions, tick: Progress
) -> Binding:
    """Every program and twin bound as `copies` slots (`bind_slots`: slot by slot, each slot
    into one set of inputs and outputs where the backend can), slot 0's programs those
    bound at compile time; the copies as many as asked, or `auto_placements`, fewer where
    they would hold more than `placement_budget()`."""
    plan, programs, key_of = setup.plan, variants.programs, variants.key_of
    twins = {"aa-twin": plan.full}
    if variants.empty_key != variants.full_key:  # the other end of every context, too
        twins["aa-twin-baseline"] = plan.empty
    if not opts.twin:
        twins = {}
    wanted = (
        opts.placements
        if opts.placements is not None
        else auto_placements(len(programs) + len(twins))
    )
    shares = io_of(next(iter(programs.values())).bound) is not None
    copies, copy_bytes, copy_budget = copies_within_budget(
        wanted, [p.exe for p in programs.values()], len(twins), shares
    )
    sources = {k: (p.exe, f"a copy of program {k}") for k, p in programs.items()}
    sources.update(
        {
            name: (programs[key_of[mask]].exe, f"the {name}")  # the twins: the same
            for name, mask in twins.items()
        }
    )  # program, bound again as many times
    bound = bind_slots(setup.backend, sources, copies, setup.graph, setup.case, opts.seed,
                       first={k: p.bound for k, p in programs.items()}, tick=tick)  # fmt: skip
    rotation = Rotation(bound, lambda b: timed_call(b, opts.timer, setup.backend.name))
    return Binding(twins, wanted, copies, copy_bytes, copy_budget, shares, rotation)


def _measure(
    setup: Setup, variants: Variants, binding: Binding, opts: AttributeOptions, tick: Progress
) -> Measured:
    """Interleaved rounds in a fresh random order each, round r on copy r mod copies, until
    every verdict is known (`stop="verdicts"`, the rounds focused on the open passes'
    programs) or every median within precision, or the programs' share of the budget is
    spent; then one bootstrap of the times (`round_bootstrap`)."""
    from irkit.measure.fingerprint import RunQueueSampler, load_average, load_record, run_queue

    plan, programs, key_of, twins = setup.plan, variants.programs, variants.key_of, binding.twins
    rotation, copies = binding.rotation, binding.copies
    fns, slots = rotation.fns, rotation.slots
    others = RunQueueSampler()  # other processes' runnable threads, through the rounds

    def on_round(r: int) -> None:
        rotation.on_round(r)
        others()
        tick("measure", r, opts.max_rounds)

    # no separate warm-up call: binding ran every program once, and calibration calls each
    # at least once more before its first sample (a slow variant's call can take seconds)
    load_start, queue_start = load_average(), run_queue()
    focus = _Focus(plan, programs, key_of, twins, variants.full_key, slots, opts)
    # the budget may end sampling after BUDGET_ROUNDS_PER_COPY; verdicts (or precision) only
    # after MIN_ROUNDS_PER_COPY: mlp's Shapley (40 programs, 5 copies, one core loaded)
    # stopped on its verdicts after 10-15 rounds, a copy's offset then known from two or
    # three rounds: its 20% plant's CIs held the truth in 15 of 20 trials and its A/A twins
    # failed 12 of 120; from 40 rounds on, 19 of 20 and 3 of 120 (docs/results.md)
    timings = time_interleaved(
        dict[str, Callable[[], None]](fns),
        opts.precision,
        opts.program_budget_s,
        max(opts.min_rounds, MIN_ROUNDS_PER_COPY * copies),
        opts.max_rounds,
        warmup=0,
        seed=opts.seed,
        floor_rounds=max(opts.min_rounds, BUDGET_ROUNDS_PER_COPY * copies),
        on_round=on_round,
        needed=focus if opts.stop == "verdicts" else None,
        cycle=copies,
    )
    tick("measure", opts.max_rounds, opts.max_rounds)
    keys = list(fns)
    samples = np.stack([timings[k].samples for k in keys])
    slot_of = np.array(slots[: samples.shape[1]])
    point, boot = round_bootstrap(samples, opts.resamples, opts.seed, slot_of)
    full = variants.full_key
    load = load_record(load_start, load_average(), timings[full].cpu_over_wall,
                       kernel_threads(programs[full].exe), queue_start, run_queue(),
                       others.mean, len(others.samples))  # fmt: skip
    return Measured(timings, keys, samples, slot_of, point, boot,
                    {k: i for i, k in enumerate(keys)}, focus.gone, focus.periods, load)  # fmt: skip


class _Focus:
    """The rounds' focus under the verdicts rule (`time_interleaved`'s `needed`): the
    programs (and twins) the rounds go on with, and each one's period in cycles: those of
    the passes without a verdict (`open_passes`), sampled by their need and cost
    (`cost_periods`), each twin with its program; and while any is, the full program in
    every round, the reference that brings the others to the run's level
    (`round_bootstrap`)."""

    def __init__(
        self,
        plan: Plan,
        programs: dict[str, Program],
        key_of: dict[Mask, str],
        twins: dict[str, Mask],
        full_key: str,
        slots: list[int],
        opts: AttributeOptions,
    ):
        self.plan, self.programs, self.key_of, self.twins = plan, programs, key_of, twins
        self.full_key, self.slots, self.opts = full_key, slots, opts
        self.gone: set[str] = set()
        """Programs out of the rounds for good."""
        self.periods: dict[str, int] = {}
        """The last look's periods, in cycles."""

    def __call__(self, now: Rounds) -> dict[str, int]:
        programs, key_of = self.programs, self.key_of
        rows = np.array([now.samples[k] for k in programs])
        row_of = {k: i for i, k in enumerate(programs)}
        slots_now = np.array(self.slots)
        passes = open_passes(self.plan, key_of, row_of, rows, slots_now, self.opts.precision,
                             self.opts.seed, self.gone)  # fmt: skip
        if not passes:
            return {}
        order = sorted(set().union(*passes), key=row_of.__getitem__)
        at = {k: j for j, k in enumerate(order)}
        periods = cost_periods(rows[[row_of[k] for k in order]], slots_now,
                               np.array([now.cost(k) for k in order]),
                               [[at[k] for k in p] for p in passes])  # fmt: skip
        out = {k: int(p) for k, p in zip(order, periods, strict=True)} | {self.full_key: 1}
        self.gone.update(set(programs) - set(out))
        self.periods.clear()
        self.periods.update(out)
        return out | {name: out[key_of[mask]] for name, mask in self.twins.items()
                      if key_of[mask] in out}  # fmt: skip


def _noise_floor(
    setup: Setup, variants: Variants, binding: Binding, m: Measured, opts: AttributeOptions
) -> Noise:
    """The A/A checks: each twin against its program, at 95% for the twins together
    (Bonferroni: each at 95% alone, one of the two excluded 1 in 5.8-6.7% of checks, a run
    in about twice that, the 2026-11-25 records under load); and every program's copies
    split in two halves (alternate slots) compared, each at 95% for the family of programs
    (each at 95% alone, one of 10-80 programs failed by chance in most runs, and Shapley's
    passes, which touch every context, were then judged beyond its floor: a 5% plant was
    called significant in 60% of trials with CIs a quarter its size)."""
    aa_confidence = family_confidence(len(binding.twins))

    def aa_pair(name: str, key: str) -> tuple[Interval, float, float]:
        """An A/A ratio at the twins' family confidence, its floor (the farthest end of its
        CI from 1) and that floor in seconds at the program's own scale."""
        ratio = Interval.of(
            m.point[m.row[name]] / m.point[m.row[key]],
            m.boot[m.row[name]] / m.boot[m.row[key]],
            aa_confidence,
        )
        return ratio, *aa_floor(ratio, float(m.point[m.row[key]]))

    noise: dict[str, Any] = {"floor": 0.0, "floor_s": 0.0, "aa_failed": False}
    if opts.twin:
        aa, floor, floor_s = aa_pair("aa-twin", variants.full_key)
        noise.update({"aa_ratio": aa.to_json(), "aa_confidence": aa_confidence,
                      "floor": floor, "floor_full_s": floor_s, "method": AA_TWIN})  # fmt: skip
        failed = aa.excludes(1.0)
        if "aa-twin-baseline" in m.row:
            aa_base, floor_base, floor_base_s = aa_pair("aa-twin-baseline", variants.empty_key)
            noise.update(
                {
                    "aa_ratio_baseline": aa_base.to_json(),
                    "floor_baseline": floor_base,
                    "floor_baseline_s": floor_base_s,
                }
            )
            noise["method"] += AA_TWIN_BASELINE
            floor_s = max(floor_s, floor_base_s)
            failed = failed or aa_base.excludes(1.0)
        noise.update({"floor_s": floor_s, "aa_failed": failed})
    else:
        noise["method"] = "none (no A/A twin measured)"
    programs = variants.programs
    family = family_confidence(len(programs))
    split, failed_context = context_checks(
        {k: m.samples[m.row[k]] for k in programs}, m.slot_of, opts.resamples, opts.seed
    )
    noise["per_context"] = {
        "method": per_context_method(family, len(programs)),
        "programs": {
            k: {"ratio": r.to_json(), "failed": failed_context[k]} for k, r in split.items()
        },
        "failed": sum(failed_context.values()),
    }
    noise["rule"] = RULE
    noise["base"] = "seconds per call"
    context_floor_s = {
        k: aa_floor(r, float(m.point[m.row[k]]))[1] if failed_context[k] else 0.0
        for k, r in split.items()
    }
    return Noise(noise, noise["floor_s"] if noise["aa_failed"] else 0.0, context_floor_s)


def _kernel_times(
    setup: Setup, variants: Variants, opts: AttributeOptions, tick: Progress
) -> Kernels:
    """The kernels the result shows (the baseline's, the full pipeline's, and what each
    pass removed or added), timed alone on their program's data, with the kernels'
    share of the budget; the others known by their code only."""
    programs, plan, key_of = variants.programs, setup.plan, variants.key_of
    by_hash = {
        r.hash: KernelTime(r.name, r.hash, None, None, r.flops, r.min_bytes, None, r.once)
        for p in programs.values()
        for r in p.exe.kernels
    }
    shown = shown_kernels(
        programs,
        [key_of[m] for i in range(plan.k) for m in plan.pair(i)],
        (variants.empty_key, variants.full_key),
    )
    if opts.kernel_times:
        by_hash.update(time_kernels(programs, shown, opts.precision, opts.kernel_share_s,
                                    opts.min_rounds, min(opts.max_rounds, KERNEL_MAX_ROUNDS),
                                    opts.seed, setup.ceilings, tick))  # fmt: skip
    return Kernels(by_hash, shown, programs)


def _judge_passes(
    setup: Setup, variants: Variants, m: Measured, noise: Noise, kernels: Kernels
) -> list[PassResult]:
    """Each pass's saving and speedup with their CIs, its verdict (`significance`, beyond
    the floors of the A/A checks that concern it) and the kernels it removed and added."""
    plan, steps, optional, key_of = setup.plan, setup.steps, setup.optional, variants.key_of
    t_point, t_boot = m.times(key_of, plan.masks)
    c_point, c_boot = plan.contributions(t_point), plan.contributions(t_boot)
    results = []
    for i in range(plan.k):
        saved = Interval.of(float(c_point[i]), c_boot[i])
        before = plan.before(i)
        t_before_point, t_before_boot = t_point[before], t_boot[before]
        speedup = Interval.of(
            t_before_point / (t_before_point - saved.value),
            t_before_boot / (t_before_boot - c_boot[i]),
        )
        changes = any(key_of[a] != key_of[b] for a, b in plan.pairs(i))
        a, b = plan.pair(i)
        removed, added = kernel_diff(kernels.of(key_of[a]), kernels.of(key_of[b]))
        # a failed context's floor enters as much as that context enters the contribution:
        # the larger of a pair's two floors, weighted as the pair is (one pair for prefix and
        # ablation; Shapley's many, where the largest alone, the floor of one slow program
        # among dozens, hid 20% effects whose CIs excluded 0 in every trial)
        floors = noise.context_floor_s
        floor_i = max(
            noise.run_floor_s,
            sum(
                w * max(floors[key_of[a]], floors[key_of[b]])
                for w, a, b in plan.weighted_pairs(i)
                if key_of[a] != key_of[b]
            ),
        )
        significant, mde = significance(saved, changes, floor_i)
        step = steps[optional[i]]
        results.append(PassResult(step.label, step.spec, saved, speedup,
                                  float(saved.value / t_before_point), significant, changes,
                                  removed, added, mde))  # fmt: skip
    return results


def _record(
    model: ModuleOp | str | Path,
    dims: Mapping[str, int] | None,
    opts: AttributeOptions,
    setup: Setup,
    variants: Variants,
    binding: Binding,
    m: Measured,
    noise: Noise,
    kernels: Kernels,
    passes: list[PassResult],
) -> Attribution:
    """The attribution with its protocol: every knob, what the run did, and the host."""
    from irkit.measure.fingerprint import host_fingerprint

    plan, key_of = setup.plan, variants.key_of
    t_point, t_boot = m.times(key_of, (plan.empty, plan.full))
    full, empty = variants.full_key, variants.empty_key
    for v in variants.records:
        v["seconds"] = m.timings[v["program"]].estimate.to_json()
    return Attribution(
        model=str(model) if not isinstance(model, ModuleOp) else "<module>",
        pipeline=setup.spec,
        backend=setup.backend.name,
        strategy=opts.strategy,
        steps=setup.steps,
        passes=passes,
        variants=variants.records,
        total_saved=Interval.of(
            t_point[plan.empty] - t_point[plan.full], t_boot[plan.empty] - t_boot[plan.full]
        ),
        total_speedup=Interval.of(
            t_point[plan.empty] / t_point[plan.full], t_boot[plan.empty] / t_boot[plan.full]
        ),
        baseline=m.timings[empty].estimate,
        full=m.timings[full].estimate,
        moments={
            name: {"mean": mo[0], "sd": mo[1], "n": m.timings[key].estimate.n}
            for name, key in (("baseline", empty), ("full", full))
            if (mo := m.timings[key].log_moments) is not None
        },
        noise=noise.record,
        kernels={"baseline": kernels.of(empty), "full": kernels.of(full)},
        protocol=protocol_record(opts, setup, variants, binding, m, kernels),
        fingerprint={**host_fingerprint(), **setup.device_fingerprint},
        ceilings=setup.ceilings,
        dims=dict(dims or {}),
        rounds={
            "programs": m.keys,
            "seconds": m.samples,
            "slots": m.slot_of,
            "variants": [(mask, key_of[mask]) for mask in plan.masks],
        },
    )
