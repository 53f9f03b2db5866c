"""Attribution: what each optional pass of a pipeline buys, measured with confidence intervals.

A *variant* is the pipeline with some subset of its optional passes removed (required
passes, such as the lowering, always run). A strategy chooses which variants to measure
and how to turn their times into one contribution per pass, in seconds saved per call:

- `prefix`: passes switched on cumulatively in pipeline order; a pass's contribution is
  T(before it) - T(with it). Contributions sum to the total (order-dependent).
- `ablation`: leave one out; T(all but it) - T(all). Does not sum to the total; the
  remainder is the interaction between passes, reported as such.
- `shapley`: the Shapley value of each pass, the average of its marginal contribution over
  every order of the passes: exact over all 2^k subsets up to 8 passes, over `permutations`
  sampled orders beyond. Contributions sum to T(no optional pass) - T(all) exactly (the
  efficiency property), for the point estimate and for every bootstrap resample.

Protocol:
1. The graph's reference is evaluated once (float64 numpy) on inputs from `seed`; every
   variant is compiled and checked against it before anything is timed. A wrong variant is
   an error naming its passes: the attribution invariant is broken.
2. Variants whose compiled programs hash the same are compiled once and measured once; a
   pass that changes no code gets exactly zero.
3. Every distinct program is bound as `placements` separate copies, each its own
   placement of code, scratch and buffers (the first compiled, the others the same machine
   code linked again into an engine of their own, `exe.copy()` where the backend has it:
   two copies of one program differ by a few percent on a CPU, consistently, so one copy
   per program would freeze that offset into every comparison it is in). A/A twins (the full pipeline's program, and the one
   without optional passes, copied and bound again as many times) are timed as programs
   of their own. All are timed in interleaved rounds, in a fresh random order per round,
   round r running copy r mod `placements` of every program, until every pass's verdict is
   known (`stop="verdicts"`: its 99.9% CI excludes 0 or is narrower than `precision` of
   the full program either side; `"medians"`: every median's 95% CI half-width under
   `precision`) or their share of the budget is spent (`budget_s` is all the measuring:
   two thirds for the programs, one third for the kernels of step 5; all of it for the
   programs without kernel times).
4. A program's time is the mean over its copies of each copy's median round. CIs come
   from one bootstrap: whole cycles of rounds resampled (the j-th round of every
   copy; the same draws for every program, so the pairing by round is kept) and spread
   about the point for the few cycles resampled (`_expansion`), then each program's copy-to-copy
   variance (its own estimate, from its own copies) added as Student-t noise scaled by its
   standard error over the copies (`_round_bootstrap`); so a CI holds the copy-to-copy
   spread as well as the round-to-round one. A contribution, in seconds saved per call, is
   significant when its CI excludes zero. The A/A checks test that claim in every run: the twins against their
   programs (at 95% for the pair), and every program's two halves of copies against each other (per context, at
   95% for the family of programs, `_context_checks`);
   where a check fails, the passes it concerns (all, for a twin) are also judged beyond
   its floor, the ratio's distance from 1 in seconds at that program's scale. Each pass
   gets its minimum detectable effect beside its verdict: the saving it would be called
   significant for four times in five.
5. The kernels shown (the baseline's, the full pipeline's, and those each pass removed or
   added) are then timed alone, each once by hash, on the real intermediate data of its
   program; each pass's kernel view lists the kernels it removed and added, with the time
   they account for, and where they sit on the roofline.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import time
import warnings
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any, Literal, overload

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from irkit.errors import IrkitError, expect
from irkit.ir import model_function, structure_key, to_text
from irkit.limits import memory_limit
from irkit.measure import check_protocol
from irkit.measure.roofline import Ceilings, roof_point
from irkit.measure.slots import Rotation, bind_slots, check_placements, checked_bound, io_of
from irkit.measure.stats import Estimate, t_quantile
from irkit.measure.timers import Rounds, time_interleaved
from irkit.pipelines import Step, apply_pipelines, pipeline_steps
from irkit.runtime.backend import Bound, bound_bytes

STRATEGIES = ("prefix", "ablation", "shapley")
KERNEL_MAX_ROUNDS = 200
"""The most rounds of kernels timed alone (their medians, to `precision`); the programs'
rounds are bounded by `attribute`'s `max_rounds` and the budget: with the verdicts rule,
sampling goes on while a verdict is open. At 200 program rounds a 1.3 ms program stopped
after 2 s of a 6.7 s share, its 5% effects' CIs +-2.5% wide under load (significant in
55-65% of trials)."""
EXACT_SHAPLEY_MAX = 8

Mask = tuple[bool, ...]
Times = Mapping[Mask, np.ndarray]
"""Seconds per call of each variant: one value per bootstrap resample (or a 0-d array)."""


# --------------------------------------------------------------------------- strategies


@dataclass(frozen=True)
class Plan:
    """The variants a strategy measures and how it turns their times into contributions."""

    strategy: str
    k: int
    masks: tuple[Mask, ...]
    permutations: tuple[tuple[int, ...], ...] = ()

    @property
    def empty(self) -> Mask:
        return (False,) * self.k

    @property
    def full(self) -> Mask:
        return (True,) * self.k

    def pair(self, i: int) -> tuple[Mask, Mask]:
        """The (without, with) variants that show pass i's effect on kernels."""
        if self.strategy == "prefix":
            return _prefix(self.k, i), _prefix(self.k, i + 1)
        return _without(self.full, i), self.full

    def pairs(self, i: int) -> list[tuple[Mask, Mask]]:
        """Every (without, with) pair pass i's contribution is computed from."""
        if self.strategy != "shapley":
            return [self.pair(i)]
        if not self.permutations:
            return [(m, _with(m, i)) for m in self.masks if not m[i]]
        return [_marginal(p, i) for p in self.permutations]

    def weighted_pairs(self, i: int) -> list[tuple[float, Mask, Mask]]:
        """`pairs(i)` with the weight each has in pass i's contribution (they sum to 1)."""
        if self.strategy != "shapley":
            return [(1.0, *self.pair(i))]
        if self.permutations:
            return [(1 / len(self.permutations), a, b) for a, b in self.pairs(i)]
        k = self.k
        return [(math.factorial(sum(a)) * math.factorial(k - sum(a) - 1) / math.factorial(k), a, b)
                for a, b in self.pairs(i)]  # fmt: skip

    def contributions(self, t: Times) -> list[np.ndarray]:
        """Seconds saved per call by each pass (negative: the pass made it slower)."""
        if self.strategy in ("prefix", "ablation"):
            return [t[a] - t[b] for a, b in (self.pair(i) for i in range(self.k))]
        if self.permutations:
            return [
                np.asarray(sum(t[a] - t[b] for a, b in self.pairs(i))) / len(self.permutations)
                for i in range(self.k)
            ]
        k = self.k
        weight = [
            math.factorial(s) * math.factorial(k - s - 1) / math.factorial(k) for s in range(k)
        ]
        return [
            np.asarray(sum(weight[sum(a)] * (t[a] - t[b]) for a, b in self.pairs(i)))
            for i in range(k)
        ]

    def before(self, i: int) -> Mask:
        """The variant pass i's relative change is taken against."""
        return self.empty if self.strategy == "shapley" else self.pair(i)[0]


def _prefix(k: int, n: int) -> Mask:
    return tuple(j < n for j in range(k))


def _without(mask: Mask, i: int) -> Mask:
    return tuple(False if j == i else m for j, m in enumerate(mask))


def _with(mask: Mask, i: int) -> Mask:
    return tuple(True if j == i else m for j, m in enumerate(mask))


def _marginal(order: tuple[int, ...], i: int) -> tuple[Mask, Mask]:
    k = len(order)
    before = order[: order.index(i)]
    m = tuple(j in before for j in range(k))
    return m, _with(m, i)


def make_plan(strategy: str, k: int, permutations: int = 64, seed: int = 0) -> Plan:
    """The variants `strategy` needs for k optional passes."""
    if strategy not in STRATEGIES:
        raise IrkitError(f"unknown strategy '{strategy}'; choose from {', '.join(STRATEGIES)}")
    empty, full = (False,) * k, (True,) * k
    if strategy == "prefix":
        masks = [_prefix(k, n) for n in range(k + 1)]
        return Plan(strategy, k, tuple(masks))
    if strategy == "ablation":
        masks = [empty, full, *(_without(full, i) for i in range(k))]
        return Plan(strategy, k, tuple(dict.fromkeys(masks)))
    if k <= EXACT_SHAPLEY_MAX:
        return Plan(strategy, k, tuple(itertools.product((False, True), repeat=k)))
    rng = np.random.default_rng(seed)
    orders = tuple(tuple(int(x) for x in rng.permutation(k)) for _ in range(permutations))
    sampled = {empty, full}
    for order in orders:
        for n in range(k + 1):
            sampled.add(tuple(j in order[:n] for j in range(k)))
    return Plan(strategy, k, tuple(sorted(sampled, key=sum)), orders)


# --------------------------------------------------------------------------- variants


@dataclass
class Program:
    """One distinct compiled program, and the variants that compile to it."""

    key: str
    exe: object
    bound: Bound
    masks: list[Mask] = field(default_factory=list)


def variant_steps(steps: list[Step], optional: list[int], mask: Mask) -> list[str]:
    """The passes (`-p` items) of the variant with optional step optional[j] kept iff
    mask[j]."""
    off = {optional[j] for j, on in enumerate(mask) if not on}
    return [s.spec for n, s in enumerate(steps) if n not in off]


def variant_spec(steps: list[Step], optional: list[int], mask: Mask) -> str:
    """The `-p` spec of the variant with optional step optional[j] kept iff mask[j]."""
    return ",".join(variant_steps(steps, optional, mask))


def _flush_bytes(fingerprint: dict) -> int | None:
    """The bytes the backend overwrites before each sample (a GPU's L2 flush), where its
    fingerprint says; None for a backend that times warm caches."""
    for value in fingerprint.values():
        if isinstance(value, dict) and value.get("l2_flush_bytes"):
            return int(value["l2_flush_bytes"])
    return None


def program_key(exe) -> str:
    """What identifies a compiled program: its kernels' compiled-code identities in order
    (`KernelRecord.code_hash`: on the CPU the kernel after O3, so a pass whose change LLVM
    folds away makes no new program and gets exactly zero), and its loop-level module's
    other ops (the driver, globals) as text. Two programs with equal keys run the same
    code; cheaper than hashing the whole module's text, which printed every kernel again."""
    kernels = getattr(exe, "kernels", [])
    names = {k.name for k in kernels}
    digest = hashlib.sha256()
    for k in kernels:
        digest.update(f"{k.name}:{getattr(k, 'code_hash', '') or k.hash};".encode())
    module = getattr(exe, "module", None)
    if isinstance(module, ModuleOp):
        for op in module.ops:
            if not (isinstance(op, func.FuncOp) and op.sym_name.data in names):
                digest.update(to_text(op, generic=True).encode())
    return digest.hexdigest()[:16]


def _describe(steps: list[Step], optional: list[int], mask: Mask) -> str:
    on = [steps[optional[j]].label for j, m in enumerate(mask) if m]
    if len(on) == len(mask):
        return "all optional passes"
    return "+".join(on) if on else "no optional pass"


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float

    @classmethod
    def of(cls, point: float, boot: np.ndarray, confidence: float = 0.95) -> Interval:
        a = (1 - confidence) / 2
        lo, hi = np.quantile(boot, [a, 1 - a]) if np.ndim(boot) else (point, point)
        return cls(float(point), float(lo), float(hi))

    def excludes(self, x: float) -> bool:
        return not (self.low <= x <= self.high)

    def to_json(self) -> dict:
        return {"value": self.value, "ci_low": self.low, "ci_high": self.high}


@dataclass(frozen=True)
class KernelTime:
    name: str
    hash: str
    seconds: float | None
    """None when the kernel phase was skipped (`kernel_times=False`): the kernel is known by
    its code, not timed."""
    ci: tuple[float, float] | None
    flops: int
    min_bytes: int
    roof: dict | None
    once: bool = False
    """A once-per-bind kernel (weight layout or packing): not in the time per call."""

    def to_json(self) -> dict:
        low, high = self.ci if self.ci is not None else (None, None)
        return {"name": self.name, "hash": self.hash, "seconds": self.seconds,
                "ci_low": low, "ci_high": high, "flops": self.flops,
                "min_bytes": self.min_bytes, "roofline": self.roof,
                "once_per_bind": self.once}  # fmt: skip


@dataclass(frozen=True)
class PassResult:
    label: str
    spec: str
    saved: Interval
    """Seconds per call saved by the pass (negative: slower)."""
    speedup: Interval
    relative: float
    """saved / T(before), the fraction of the reference variant's time."""
    significant: bool
    changes_code: bool
    removed: list[KernelTime]
    added: list[KernelTime]
    min_detectable: float | None = None
    """Seconds: the saving this run would call significant for this pass with 80% power
    (`significance`)."""

    @property
    def kernel_delta(self) -> float | None:
        """Seconds saved per call summed over the kernels this pass changed, each timed
        alone (None when kernels were not timed); once-per-bind kernels are not per call."""
        removed = [k for k in self.removed if not k.once]
        added = [k for k in self.added if not k.once]
        if any(k.seconds is None for k in [*removed, *added]):
            return None
        return sum(k.seconds for k in removed) - sum(k.seconds for k in added)  # type: ignore[misc]

    def to_json(self) -> dict:
        return {
            "pass": self.label, "spec": self.spec, "saved_s": self.saved.to_json(),
            "speedup": self.speedup.to_json(), "relative": self.relative,
            "significant": self.significant, "changes_code": self.changes_code,
            "min_detectable_s": self.min_detectable,
            "kernels": {"removed": [k.to_json() for k in self.removed],
                        "added": [k.to_json() for k in self.added],
                        "saved_s": self.kernel_delta},
        }  # fmt: skip


@dataclass
class Attribution:
    model: str
    pipeline: str
    backend: str
    strategy: str
    steps: list[Step]
    passes: list[PassResult]
    variants: list[dict]
    total_saved: Interval
    total_speedup: Interval
    baseline: Estimate
    full: Estimate
    noise: dict
    kernels: dict[str, list[KernelTime]]
    """Per-kernel times of the variant with no optional pass ("baseline") and with all."""
    protocol: dict
    fingerprint: dict
    ceilings: Ceilings | None
    dims: dict = field(default_factory=dict)
    workload: str | None = None
    rounds: dict | None = field(default=None, repr=False, compare=False)
    """The measured rounds, for re-analysis (not in `to_json`): "programs" (their keys, the
    twins' names last), "seconds" [program, round], "slots" (the slot each round ran on)
    and "variants" (each variant's mask, the passes on, and its program's key)."""

    def to_json(self) -> dict:
        return {
            "kind": "irkit.attribution",
            "schema": 1,
            "workload": self.workload or Path(self.model).stem,
            "model": self.model,
            "dims": self.dims,
            "pipeline": self.pipeline,
            "backend": self.backend,
            "strategy": self.strategy,
            "steps": [{"pass": s.label, "spec": s.spec, "optional": s.optional} for s in self.steps],
            "passes": [p.to_json() for p in self.passes],
            "total": {"saved_s": self.total_saved.to_json(),
                      "speedup": self.total_speedup.to_json(),
                      "baseline_s": self.baseline.to_json(), "full_s": self.full.to_json(),
                      "sum_of_contributions_s": sum(p.saved.value for p in self.passes)},
            "noise_floor": self.noise,
            "variants": self.variants,
            "kernels": {k: [t.to_json() for t in v] for k, v in self.kernels.items()},
            "ceilings": self.ceilings.to_json() if self.ceilings else None,
            "protocol": self.protocol,
            "fingerprint": self.fingerprint,
        }  # fmt: skip


# --------------------------------------------------------------------------- the engine


def significance(saved: Interval, changes: bool, floor_s: float = 0.0) -> tuple[bool, float | None]:
    """The rule every pass is judged by (module docstring, step 4): significant when the
    pass changes code and its saving's 95% CI, which holds the copy-to-copy spread as well
    as the round-to-round one, excludes zero; where an A/A check of the pass's own contexts
    failed (its CI did not cover equal programs), also beyond that A/A floor, `floor_s`
    seconds. Returns the verdict and the minimum detectable effect: the saving this run
    would call significant four times in five, (1.96 + 0.84) standard errors, the standard
    error read off the CI (half-width / 1.96), or the floor where that is larger (None for
    a pass that changes no code: exactly zero)."""
    if not changes:
        return False, None
    half = (saved.high - saved.low) / 2
    return (saved.excludes(0.0) and abs(saved.value) > floor_s,
            max(floor_s, half * (1.96 + 0.84) / 1.96))  # fmt: skip


TIMERS = ("launches", "graph")
STOPS = ("verdicts", "medians")
MIN_ROUNDS_PER_COPY = 8
"""Rounds per copy before attribution may stop on its verdicts or its precision (`stop`)."""
BUDGET_ROUNDS_PER_COPY = 2
"""Rounds per copy before the budget may stop it."""
RESOLVE_CONFIDENCE = 0.999
"""A verdict counts as resolved early when this CI excludes 0, or is narrower than the
precision either side (stricter than the reported 95%: looking again and again, a 95% rule
stops on chance exclusions, and on a chance-narrow interval: between two looks of one run
the 95% half-width moved by 0.3x to 2x (the copy variance is the spread of 16 copies' means
less their round noise, and both move), so sampling that stopped when it first dipped under
the precision kept the dip. On elementwise_chain, whose zero-cost plant's 95% CI sat just
above 1% of the program, trials that stopped so missed their plants' truth in 12-50% of
CIs, against 2-5% for the ones that ran to the budget (docs/results.md))."""


def _open_passes(
    plan: Plan,
    key_of: Mapping[Mask, str],
    row_of: Mapping[str, int],
    rows: np.ndarray,
    slots: np.ndarray,
    precision: float,
    seed: int,
    left: Collection[str] = (),
) -> list[set[str]]:
    """The passes that change code and have no verdict yet, each as the programs of its
    contexts. A verdict: the saving's 99.9% CI
    (`RESOLVE_CONFIDENCE`) excludes 0 (a clear effect), or is narrower than `precision` of
    the full program's time or of the programs it is measured between, whichever is
    longer, either side (an effect smaller than that, known well enough; its contexts: the
    slower of each pair, weighted as the pair enters the contribution. Against the full
    program's time alone, conv_block's `fold-transposes`, 56 us between two 8.3 ms
    programs, its full program 0.59 ms, never got a verdict under load; against its
    contexts alone, a pass between two 5 us programs of a 0.2 ms pipeline ran to the
    rounds' cap). A quick
    bootstrap (300 resamples) over the samples so far, its copy variance bounded from above
    (`_copy_variance`'s `upper`): the reported CIs take the round noise out of it, and
    early on that can leave zero. None needed: every verdict is in. A pass one of whose
    programs has left the rounds (`left`) needs nothing more: the others alone would be
    sampled for nothing.

    (Tried and taken out, 2026-11-28: a pass whose verdict looked out of reach in the rest
    of the budget, its half-width shrunk by the rounds to come against its present saving,
    gave its rounds to the others. On conv_block it gave up 5% plants whose estimate sat
    near 0 a few cycles in, and runs ended with the budget unspent once the passes within
    reach had their verdicts.)"""
    point, boot = _round_bootstrap(rows, 300, seed, slots[: rows.shape[1]], upper=True)
    t_point = {m: point[row_of[key_of[m]]] for m in plan.masks}
    t_boot = {m: boot[row_of[key_of[m]]] for m in plan.masks}
    c_point, c_boot = plan.contributions(t_point), plan.contributions(t_boot)
    needed: list[set[str]] = []
    for i in range(plan.k):
        contexts = [(key_of[a], key_of[b]) for a, b in plan.pairs(i) if key_of[a] != key_of[b]]
        if not contexts or set(left).intersection(k for pair in contexts for k in pair):
            continue  # nothing to resolve, or a program of it left: its CI is what it is
        context = sum(w * max(t_point[a], t_point[b]) for w, a, b in plan.weighted_pairs(i))
        scale = precision * max(context, float(t_point[plan.full]))
        ci = Interval.of(float(c_point[i]), c_boot[i], RESOLVE_CONFIDENCE)
        if not ci.excludes(0.0) and (ci.high - ci.low) / 2 > scale:
            needed.append({k for pair in contexts for k in pair})
    return needed


MAX_PERIOD = 16
"""The longest period, in cycles, `_cost_periods` gives a program still needed."""


def _cost_periods(
    rows: np.ndarray, slots: np.ndarray, costs: np.ndarray, passes: list[list[int]]
) -> np.ndarray:
    """The period, in cycles, at which each program of `rows` [program, round] (NaN: a
    round it sat out) is sampled from now on, for the open `passes` (each the rows of the
    programs it is measured between; `costs`: seconds a sample of each): powers of two
    from 1 (the pass that needs rounds most) to `MAX_PERIOD`, a program at the shortest
    period of the passes it serves. Neyman's allocation: a pass whose programs' rounds
    spread sigma_p (a fraction of their time) and cost c_p, n rounds of them, the budget
    fixing the sum of n sum(c_p), makes the sum over passes of the relative variances,
    sum(sigma_p^2) / n each, least at n in proportion to sqrt(sum(sigma_p^2) / sum(c_p)).
    Each verdict is judged relative to the programs the pass is measured between
    (`_open_passes`), so a slow pair's rounds buy as much of its verdict as a fast pair's of
    its own, at many times the price: conv_block's two 8.3 ms programs around
    `fold-transposes` (rounds spreading 3-6%) took 80% of every round while its plants'
    0.6 ms programs (13-17% under load) had a fifth of the rounds they could have. sigma_p:
    the median absolute deviation (times 1.4826) of the log times about each copy's median.
    A period doubles only where a pass needs half the rounds or fewer (rounded down, so
    that chance differences in two alike pairs' spreads do not split them); powers of two,
    so that programs of different periods share the longer period's cycles."""
    logs = np.log(np.maximum(rows, 1e-30))
    resid = np.full_like(logs, np.nan)
    for g in _groups(slots[: rows.shape[1]]):
        resid[:, g] = logs[:, g] - _nan_median(logs[:, g])[:, None]
    variance = (1.4826 * _nan_median(np.abs(resid))) ** 2
    need = np.array([math.sqrt(np.nansum(variance[p]) / max(float(np.sum(costs[p])), 1e-12))
                     for p in passes])  # fmt: skip
    periods = np.full(len(rows), MAX_PERIOD, dtype=np.int64)
    if not (need > 0).any():
        periods[[r for p in passes for r in p]] = 1
        return periods
    with np.errstate(divide="ignore"):
        steps = np.floor(np.log2(need.max() / need))
    for p, step in zip(passes, np.clip(steps, 0, math.log2(MAX_PERIOD)), strict=True):
        periods[p] = np.minimum(periods[p], 2 ** int(step))
    return periods


def _timed(bound: Any, timer: str, backend: str) -> Callable[[], None]:
    """What a round calls for one program: its launches, or its replayed graph."""
    if timer == "launches":
        return bound.timed_graph()
    replay = bound.timed_replay()
    if replay is None:
        raise IrkitError(f"--timer graph: the {backend} backend cannot replay a graph (CUDA graphs: --backend cuda)")  # fmt: skip
    return replay


Progress = Callable[[str, int, int], None]
"""Called as progress(phase, done, total) while compiling and measuring."""


def _check_arguments(
    strategy: str,
    precision: float,
    budget_s: float,
    kernel_budget_s: float | None,
    permutations: int,
    seed: int,
) -> None:
    """The protocol's knobs, checked before anything is compiled (as the CLI's flags are)."""
    if strategy not in STRATEGIES:
        raise IrkitError(f"attribute: unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")  # fmt: skip
    check_protocol("attribute", precision, budget_s, seed)
    check_protocol("attribute", precision, kernel_budget_s, seed)
    if isinstance(permutations, bool) or not isinstance(permutations, int) or not 1 <= permutations <= 100_000:  # fmt: skip
        raise IrkitError(f"attribute: permutations must be a positive integer up to 100000, got {permutations!r}")  # fmt: skip


def attribute(
    model: ModuleOp | str | Path,
    pipeline: str | None = None,
    backend: str = "cpu",
    strategy: str = "shapley",
    dims: Mapping[str, int] | None = None,
    precision: float = 0.01,
    budget_s: float = 30.0,
    kernel_budget_s: float | None = None,
    seed: int = 0,
    permutations: int = 64,
    resamples: int = 2000,
    min_rounds: int = 10,
    max_rounds: int = 2000,
    ceilings: Ceilings | None | Literal["backend"] = "backend",
    progress: Progress | None = None,
    twin: bool = True,
    kernel_times: bool = True,
    timer: str = "launches",
    placements: int | None = None,
    stop: str = "verdicts",
) -> Attribution:
    """Attribute the runtime of `model` under `pipeline` to its optional passes (see the
    module docstring for the protocol). `budget_s`: seconds of measuring in all, a third of
    it for the kernels unless `kernel_budget_s` says. `ceilings`: the roofline's, by default
    the backend's own (`Backend.ceilings()`); None for none. `timer`: "launches" (the
    driver's launches, timed by the backend's timer) or "graph" (the driver recorded once as
    a CUDA graph and replayed as one launch: microsecond kernels without the host's launch
    cost; backends that can replay only). `placements`: copies of every distinct program,
    each compiled and bound separately, the rounds rotating through them (`Placements`;
    None: `auto_placements`, by the count of programs; fewer where their buffers and kept
    scratch would hold more than `placement_budget()`). `stop`: "verdicts"
    (sampling stops when every pass's verdict is resolved, `_open_passes`; the rounds go on
    with the programs of the passes still open, each every k-th cycle by its need and cost,
    `_cost_periods`) or
    "medians" (when every program's median is within `precision`)."""
    from irkit.frontend import load
    from irkit.measure.fingerprint import (
        RunQueueSampler,
        host_fingerprint,
        load_average,
        load_record,
        run_queue,
    )
    from irkit.runtime import get_backend
    from irkit.runtime.check import reference_case

    _check_arguments(strategy, precision, budget_s, kernel_budget_s, permutations, seed)
    if stop not in STOPS:
        raise IrkitError(f"attribute: unknown stop rule {stop!r}; choose from {', '.join(STOPS)}")
    check_placements("attribute", placements, automatic=True)
    if timer not in TIMERS:
        raise IrkitError(f"attribute: unknown timer {timer!r}; choose from {', '.join(TIMERS)}")
    expect("attribute", "model", model, ModuleOp | str | Path, "a module or a model file path")
    expect("attribute", "pipeline", pipeline, str | None, "a pipeline spec")
    tick = progress or (lambda *_: None)
    graph = load(model, dims) if isinstance(model, str | Path) else model
    model_function(graph)
    chosen, selection = get_backend(backend)
    if chosen.name == "reference":
        raise IrkitError("attribution needs a compiling backend (cpu or cuda), not the reference")
    if ceilings == "backend":
        ceilings = chosen.ceilings()
    device_fingerprint = chosen.fingerprint()
    spec = pipeline if pipeline is not None else chosen.default_pipeline
    steps = pipeline_steps(spec)
    optional = [n for n, s in enumerate(steps) if s.optional]
    if not optional:
        raise IrkitError(f"pipeline '{spec}' has no optional pass to attribute", "-p")
    plan = make_plan(strategy, len(optional), permutations, seed)
    case = reference_case(graph, seed)

    programs: dict[str, Program] = {}
    key_of: dict[Mask, str] = {}
    variants: list[dict] = []
    compiled: dict[tuple[int, int], tuple[Any, str]] = {}  # lowered IR -> (exe, program key)

    def finish(module: ModuleOp) -> tuple[Any, str]:
        """A distinct pipeline result: lowered for the backend and compiled, unless an
        equal lowered module was already."""
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
    choices = [[not s.optional or m[optional.index(n)] for n, s in enumerate(steps)]
               for m in plan.masks]  # fmt: skip
    shared = apply_pipelines(graph, [s.spec for s in steps], choices, finish,
                             on_result=lambda n: tick("compile", n, len(plan.masks)),
                             on_step=lambda j: tick("passes", j, len(steps)))  # fmt: skip
    compile_seconds = time.perf_counter() - started
    for mask, (exe, key) in zip(plan.masks, shared.results, strict=True):
        vspec = variant_spec(steps, optional, mask)
        key_of[mask] = key
        if key not in programs:
            what = f"the variant with {_describe(steps, optional, mask)} ({vspec})"
            first = next(iter(programs.values()), None)  # slot 0's buffers (`Placements`)
            io = io_of(first.bound) if first else None
            programs[key] = Program(key, exe, checked_bound(exe, graph, case, what, io))
        programs[key].masks.append(mask)
        variants.append({"passes": [steps[optional[j]].label for j, m in enumerate(mask) if m],
                         "spec": vspec, "program": key,
                         "kernels": [k.hash for k in exe.kernels]})  # fmt: skip
    tick("compile", len(plan.masks), len(plan.masks))

    twins = {"aa-twin": plan.full}
    if key_of[plan.empty] != key_of[plan.full]:  # the other end of every context, too
        twins["aa-twin-baseline"] = plan.empty
    if not twin:
        twins = {}
    wanted = placements if placements is not None else auto_placements(len(programs) + len(twins))
    shares = io_of(next(iter(programs.values())).bound) is not None
    copies, copy_bytes, copy_budget = _placements(
        wanted, [p.exe for p in programs.values()], len(twins), shares
    )

    # every program (and twin) bound as `copies` slots, slot 0's programs at compile time
    # above (`bind_slots`: slot by slot, each slot into one set of inputs and outputs)
    sources = {k: (p.exe, f"a copy of program {k}") for k, p in programs.items()}
    sources.update({name: (programs[key_of[mask]].exe, f"the {name}")  # the twins: the same
                    for name, mask in twins.items()})  # program, bound again as many times  # fmt: skip
    bound = bind_slots(chosen, sources, copies, graph, case, seed,
                       first={k: p.bound for k, p in programs.items()}, tick=tick)  # fmt: skip
    rotation = Rotation(bound, lambda b: _timed(b, timer, chosen.name))
    fns, slots = rotation.fns, rotation.slots

    others = RunQueueSampler()  # other processes' runnable threads, through the rounds

    def on_round(r: int) -> None:
        rotation.on_round(r)
        others()
        tick("measure", r, max_rounds)

    kernel_share = (kernel_budget_s or budget_s / 3) if kernel_times else 0.0
    program_budget = max(budget_s - kernel_share, budget_s / 3)
    # no separate warm-up call: binding ran every program once, and calibration calls each
    # at least once more before its first sample (a slow variant's call can take seconds)
    load_start, queue_start = load_average(), run_queue()

    full_key, empty_key = key_of[plan.full], key_of[plan.empty]
    gone: set[str] = set()  # programs out of the rounds for good
    periods_now: dict[str, int] = {}  # the last look's periods, in cycles

    def needed(now: Rounds) -> dict[str, int]:
        """The programs (and twins) the rounds go on with, and each one's period in cycles:
        those of the passes without a verdict (`_open_passes`), sampled by their need and
        cost (`_cost_periods`), each twin with its program; and while any is, the full
        program in every round, the reference that brings the others to the run's level
        (`_round_bootstrap`)."""
        rows = np.array([now.samples[k] for k in programs])
        row_of = {k: i for i, k in enumerate(programs)}
        slots_now = np.array(slots)
        passes = _open_passes(plan, key_of, row_of, rows, slots_now, precision, seed, gone)
        if not passes:
            return {}
        order = sorted(set().union(*passes), key=row_of.__getitem__)
        at = {k: j for j, k in enumerate(order)}
        periods = _cost_periods(rows[[row_of[k] for k in order]], slots_now,
                                np.array([now.cost(k) for k in order]),
                                [[at[k] for k in p] for p in passes])  # fmt: skip
        out = {k: int(p) for k, p in zip(order, periods, strict=True)} | {full_key: 1}
        gone.update(set(programs) - set(out))
        periods_now.clear()
        periods_now.update(out)
        return out | {name: out[key_of[mask]] for name, mask in twins.items()
                      if key_of[mask] in out}  # fmt: skip

    # the budget may end sampling after BUDGET_ROUNDS_PER_COPY; verdicts (or precision) only
    # after MIN_ROUNDS_PER_COPY: mlp's Shapley (40 programs, 5 copies, one core loaded)
    # stopped on its verdicts after 10-15 rounds, a copy's offset then known from two or
    # three rounds: its 20% plant's CIs held the truth in 15 of 20 trials and its A/A twins
    # failed 12 of 120; from 40 rounds on, 19 of 20 and 3 of 120 (docs/results.md)
    timings = time_interleaved(dict[str, Callable[[], None]](fns), precision, program_budget,
                               max(min_rounds, MIN_ROUNDS_PER_COPY * copies), max_rounds,
                               warmup=0, seed=seed, floor_rounds=max(min_rounds, BUDGET_ROUNDS_PER_COPY * copies),
                               on_round=on_round, needed=needed if stop == "verdicts" else None,
                               cycle=copies)  # fmt: skip
    tick("measure", max_rounds, max_rounds)
    keys = list(fns)
    samples = np.stack([timings[k].samples for k in keys])
    slot_of = np.array(slots[: samples.shape[1]])
    point, boot = _round_bootstrap(samples, resamples, seed, slot_of)
    groups = [np.flatnonzero(slot_of == s) for s in np.unique(slot_of)]
    copy_sd = math.sqrt(_copy_variance(samples, groups)) if len(groups) > 1 else None
    row = {k: i for i, k in enumerate(keys)}
    t_point = {m: point[row[key_of[m]]] for m in plan.masks}
    t_boot = {m: boot[row[key_of[m]]] for m in plan.masks}

    # the twins are one family: the run's A/A check fails when either does, so each is
    # judged at 95% for the pair (Bonferroni), as the per-context checks are for theirs;
    # each at 95% alone, one of the two excluded 1 in 5.8-6.7% of checks and a run in
    # about twice that (the 2026-11-25 records under load)
    aa_confidence = _family_confidence(len(twins))

    def aa_pair(name: str, key: str) -> tuple[Interval, float, float]:
        """An A/A ratio at the twins' family confidence, its floor (the farthest end of its
        CI from 1) and that floor in seconds at the program's own scale."""
        ratio = Interval.of(point[row[name]] / point[row[key]],
                            boot[row[name]] / boot[row[key]], aa_confidence)  # fmt: skip
        return ratio, *_floor(ratio, float(point[row[key]]))

    noise: dict[str, Any] = {"floor": 0.0, "floor_s": 0.0, "aa_failed": False}
    if twin:
        aa, floor, floor_s = aa_pair("aa-twin", full_key)
        noise.update({"aa_ratio": aa.to_json(), "aa_confidence": aa_confidence,
                      "floor": floor, "floor_full_s": floor_s,
                      "method": "A/A: the full pipeline's program compiled and bound again, "
                                "as many copies, timed interleaved as a program of its own; "
                                "each twin's ratio CI at aa_confidence (95% for the twins "
                                "together, Bonferroni); the check fails when a CI excludes 1; "
                                "floor = the farthest end of that CI from 1"})  # fmt: skip
        failed = aa.excludes(1.0)
        if "aa-twin-baseline" in row:
            aa_base, floor_base, floor_base_s = aa_pair("aa-twin-baseline", empty_key)
            noise.update({"aa_ratio_baseline": aa_base.to_json(), "floor_baseline": floor_base,
                          "floor_baseline_s": floor_base_s})  # fmt: skip
            noise["method"] += ("; the program without optional passes likewise (every "
                                "context a strategy measures lies between the two)")  # fmt: skip
            floor_s = max(floor_s, floor_base_s)
            failed = failed or aa_base.excludes(1.0)
        noise.update({"floor_s": floor_s, "aa_failed": failed})
    else:
        noise["method"] = "none (no A/A twin measured)"
    # per context: every program's copies split in two halves (alternate slots), compared.
    # A context fails when its ratio's CI excludes 1 at 95% for the family (Bonferroni over
    # the programs): each at 95% alone, one of 10-80 programs failed by chance in most runs,
    # and Shapley's passes, which touch every context, were then judged beyond its floor
    # (a 5% plant was called significant in 60% of trials with CIs a quarter its size)
    family = _family_confidence(len(programs))
    split, failed_context = _context_checks(
        {k: samples[row[k]] for k in programs}, slot_of, resamples, seed
    )
    context_floor_s = {k: _floor(r, float(point[row[k]]))[1] if failed_context[k] else 0.0
                       for k, r in split.items()}  # fmt: skip
    noise["per_context"] = {
        "method": "each program's rounds split by placement slot (alternate slots) and the "
        "two halves' medians compared; a program fails when the ratio's CI excludes 1 at "
        f"{family:.4%} (95% for the family of {len(programs)}, Bonferroni); a pass whose "
        "contexts fail is also judged beyond that program's floor (its 95% CI's distance "
        "from 1)",
        "programs": {k: {"ratio": r.to_json(), "failed": failed_context[k]} for k, r in split.items()},
        "failed": sum(failed_context.values()),
    }  # fmt: skip
    noise["rule"] = (
        "significant when the pass changes code and its saving's 95% CI (rounds and "
        "placements resampled) excludes 0; where the twin's A/A check failed, beyond that "
        "floor; where some of the pass's own contexts failed their split A/A, beyond their "
        "floors weighted as those contexts enter the contribution (seconds per call, the A/A "
        "ratio's distance from 1 times that program's median)"
    )
    noise["base"] = "seconds per call"
    run_floor_s = noise["floor_s"] if noise["aa_failed"] else 0.0

    contributions_point = plan.contributions(t_point)
    contributions_boot = plan.contributions(t_boot)

    # the kernels are known by their code; those the result shows are timed alone: the
    # baseline's, the full pipeline's, and what each pass removed or added
    kernel_times_by_hash = {
        r.hash: KernelTime(r.name, r.hash, None, None, r.flops, r.min_bytes, None, r.once)
        for p in programs.values() for r in p.exe.kernels  # type: ignore[attr-defined]
    }  # fmt: skip
    shown = _shown_kernels(programs, [key_of[m] for i in range(plan.k) for m in plan.pair(i)],
                           (empty_key, full_key))  # fmt: skip
    if kernel_times:
        kernel_times_by_hash.update(_time_kernels(programs, shown, precision,
                                                  kernel_share, min_rounds,
                                                  min(max_rounds, KERNEL_MAX_ROUNDS), seed,
                                                  ceilings, tick))  # fmt: skip

    def kernels_of(key: str) -> list[KernelTime]:
        """The program's kernels in order, under their own names, with the time measured
        for their hash."""
        return [
            dataclasses.replace(kernel_times_by_hash[k.hash], name=k.name)
            for k in programs[key].exe.kernels  # type: ignore[attr-defined]
        ]

    results = []
    for i in range(plan.k):
        saved = Interval.of(float(contributions_point[i]), contributions_boot[i])
        before = plan.before(i)
        t_before_point, t_before_boot = t_point[before], t_boot[before]
        speedup = Interval.of(t_before_point / (t_before_point - saved.value),
                              t_before_boot / (t_before_boot - contributions_boot[i]))  # fmt: skip
        relative = float(saved.value / t_before_point)
        changes = any(key_of[a] != key_of[b] for a, b in plan.pairs(i))
        a, b = plan.pair(i)
        removed, added = _kernel_diff(kernels_of(key_of[a]), kernels_of(key_of[b]))
        # a failed context's floor enters as much as that context enters the contribution:
        # the larger of a pair's two floors, weighted as the pair is (one pair for prefix and
        # ablation; Shapley's many, where the largest alone, the floor of one slow program
        # among dozens, hid 20% effects whose CIs excluded 0 in every trial)
        floor_i = max(run_floor_s, sum(w * max(context_floor_s[key_of[a]], context_floor_s[key_of[b]])
                                       for w, a, b in plan.weighted_pairs(i)
                                       if key_of[a] != key_of[b]))  # fmt: skip
        significant, mde = significance(saved, changes, floor_i)
        results.append(PassResult(steps[optional[i]].label, steps[optional[i]].spec, saved,
                                  speedup, relative, significant, changes, removed, added,
                                  mde))  # fmt: skip

    total_point = t_point[plan.empty] - t_point[plan.full]
    total = Interval.of(total_point, t_boot[plan.empty] - t_boot[plan.full])
    total_speedup = Interval.of(t_point[plan.empty] / t_point[plan.full],
                                t_boot[plan.empty] / t_boot[plan.full])  # fmt: skip
    rounds = samples.shape[1]
    stop = next(iter(timings.values())).stop_reason
    protocol = {
        "timer": chosen.timer
        + (", the driver replayed as one CUDA graph" if timer == "graph" else ""),
        "graph_replay": timer == "graph",
        "sampling": "interleaved, randomized order per round",
        "buffers": "bound once per copy, page-aligned (4 KiB)",
        "placements": copies,
        "placement_io": "shared" if shares else "own",
        "placement_io_method": "shared: every program (and twin) of a slot bound into the "
        "same input and output buffers, the slot's placement common to all of them and "
        "cancelled in differences; own: each copy its own buffers",
        "placements_wanted": placements if placements is not None else "auto",
        "placements_limited": wanted if copies < wanted else None,
        "placement_bytes": copy_bytes,
        "placement_budget_bytes": copy_budget,
        "placement_method": "every distinct program (and A/A twin) bound as this many "
        "separate copies, each its machine code linked into an engine of its own; round r "
        "runs copy r mod placements of every program; "
        "a program's time is the mean over its copies of each copy's median; "
        "the bootstrap resamples whole cycles of rounds (the j-th round of every copy; "
        f"rounds within each copy below {MIN_CYCLES} complete cycles) and adds the copy-to-copy variance "
        "as Student-t noise; the replicates spread about the point by ci_expansion "
        "(t(n-1)/z at 97.5%, n the units resampled)",
        "bootstrap_unit": "cycles" if _by_cycles(groups) else "rounds",
        "ci_expansion": _expansion(groups),
        "copy_sd": copy_sd,
        "copy_sd_method": "the relative standard deviation of a copy's offset, pooled over "
        "the programs (random effects on log times, each round's common factor removed)",
        "rounds": rounds,
        "rounds_per_program": {
            k: int(n) for k, n in zip(keys, (~np.isnan(samples)).sum(axis=1), strict=True)
        },
        "programs_left": sorted(gone),
        "periods": periods_now or None,
        "focus_method": "from the first look on (see stop_method), the rounds go on with only "
        "the programs in the contexts of passes without a verdict (and their twins), each "
        "sampled every k-th cycle, k a power of two from 1 to "
        f"{MAX_PERIOD} by Neyman's allocation over the open passes (rounds in proportion to "
        "the square root of their programs' relative round variance over their cost), and "
        "the full program in every round as the reference; a program's time is from its "
        "own rounds, brought to the whole run's level by the programs sampled in every round "
        "(their time over the run against over its rounds); the bootstrap resamples whole "
        "cycles of the run, each program's median over its own rounds among those drawn; "
        "periods: the last look's"
        if stop == "verdicts"
        else None,
        "stop_reason": stop,
        "precision": precision,
        "stop": stop,
        "stop_method": "verdicts: every pass's 99.9% CI (its copy variance bounded from above: "
        "the copies' means' spread, round noise left in) excludes 0 or is within "
        "precision x the full program's time or the time of the programs it is measured "
        "between (the slower of each pair, weighted as the pairs enter it), whichever is "
        f"longer, either side, checked from {MIN_ROUNDS_PER_COPY} rounds per "
        "copy on, every fifth round up to 100 rounds, then every twentieth part of the rounds "
        f"so far; the budget may end sampling after {BUDGET_ROUNDS_PER_COPY} rounds per copy"
        if stop == "verdicts"
        else f"medians: every program's median within precision, from {MIN_ROUNDS_PER_COPY} rounds per copy on",
        "budget_s": budget_s,
        "budget_split_s": {"programs": program_budget, "kernels": kernel_share},
        "min_rounds": min_rounds,
        "max_rounds": max_rounds,
        "reps_per_sample": {k: timings[k].reps for k in keys},
        "warmup_calls": next(iter(timings.values())).warmup,
        "warm_by": "binding (each program run once) and calibration (at least one call each)",
        "confidence": 0.95,
        "bootstrap_resamples": resamples,
        "seed": seed,
        "check": "every distinct program against the float64 numpy reference before timing",
        "l2_flush": _flush_bytes(device_fingerprint),
        "kernel_times": kernel_times,
        "kernels_timed": len(shown) if kernel_times else 0,
        "kernels_distinct": len(kernel_times_by_hash),
        "programs_measured": len(programs),
        "programs_bound": len(fns) * copies,
        "compile": {
            "seconds": compile_seconds,
            "pass_runs": shared.pass_runs,
            "ir_states": shared.states,
            "pipeline_results": shared.finished,
            "method": "one walk of the variants' common prefixes; IR states that "
            "meet continue once (apply_pipelines)",
        },
        "variants": len(plan.masks),
        "permutations": len(plan.permutations) or None,
        "selection": selection,
        "load": load_record(
            load_start,
            load_average(),
            timings[full_key].cpu_over_wall,
            _threads(programs[full_key].exe),
            queue_start,
            run_queue(),
            others.mean,
            len(others.samples),
        ),
    }
    for v in variants:
        v["seconds"] = timings[v["program"]].estimate.to_json()
    return Attribution(
        model=str(model) if not isinstance(model, ModuleOp) else "<module>",
        pipeline=spec,
        backend=chosen.name,
        strategy=strategy,
        steps=steps,
        passes=results,
        variants=variants,
        total_saved=total,
        total_speedup=total_speedup,
        baseline=timings[empty_key].estimate,
        full=timings[full_key].estimate,
        noise=noise,
        kernels={"baseline": kernels_of(empty_key), "full": kernels_of(full_key)},
        protocol=protocol,
        fingerprint={**host_fingerprint(), **device_fingerprint},
        ceilings=ceilings,
        dims=dict(dims or {}),
        rounds={
            "programs": keys,
            "seconds": samples,
            "slots": slot_of,
            "variants": [(m, key_of[m]) for m in plan.masks],
        },  # fmt: skip
    )


def _threads(exe: Any) -> int | None:
    """The most threads one of the program's kernels runs on (None where unknown)."""
    kernels = getattr(exe, "kernels", None)
    if kernels is None:
        return None
    return max([(k.launch or {}).get("threads", 1) for k in kernels] or [1])


def _round_bootstrap(
    samples: np.ndarray,
    resamples: int,
    seed: int,
    slots: np.ndarray | None = None,
    pooled: tuple[float | np.ndarray, int] | None = None,
    upper: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Each variant's time from `samples` [variant, round] and its bootstrap replicates
    [variant, resample]: each resample draws round indices once for every variant, keeping
    the pairing by round. The time is the median of the rounds, or with `slots` the mean
    over the copies of each copy's median (`_copy_medians_mean`), in the replicates too.

    With `slots` (the placement slot each round ran, `Placements`), the copies are a random
    sample of placements too, and the CI must hold their spread. Whole cycles of rounds are
    resampled, every slot keeping its share (`_resampled_rounds`); then the copy-to-copy variance, the variance of
    the per-slot medians beyond what the round noise explains (a random-effects estimate,
    relative to each program's median, each program's own, zero when the round noise
    explains it all), is added to every program's replicates as Student-t noise (the
    degrees of freedom of its copies) scaled by its standard error over the copies.
    (Resampling slots and then rounds within them counts the round noise twice, and with
    four slots has a handful of distinct draws: CIs that covered planted effects every time
    but found a 5% one only half the time.) The
    noise added is independent per program: what a slot's copies share (their buffers,
    `_io`, and being bound together) is in every program of the slot alike, taken out with
    each round's common factor and cancelled in every difference, and what is left is each
    copy's own; sums of contributions stay exact replicate by replicate. `pooled` gives
    the relative copy variance (one, or one per program) and its degrees of freedom
    estimated elsewhere (over more programs) instead. `upper`: the copy variance bounded from above (`_copy_variance`'s
    `upper`), for the stopping rule.

    Focused rounds (`time_interleaved`'s `needed`): a program sampled in only some of the
    rounds (it left once its passes had verdicts, or is sampled every k-th cycle for its
    cost) has NaN in the others. The rounds are resampled over the whole run as ever, the
    same draws for every program, and each program's time is from its own rounds among
    those drawn (`_copy_medians_mean` leaves NaN out), brought to the whole run's level by
    the programs sampled in every round (`_bridged`); its t-expansion counts its own rounds.
    Rounds where no program was sampled are left out."""
    present = ~np.isnan(samples)
    measured = present.any(axis=0)
    samples, present = samples[:, measured], present[:, measured]
    rounds = samples.shape[1]
    slots = (np.zeros(rounds, dtype=np.int64) if slots is None
             else np.asarray(slots)[: len(measured)][measured])  # fmt: skip
    rng = np.random.default_rng(seed)
    groups = _groups(slots)
    idx = _resampled_rounds(slots, groups, resamples, rng)
    # every position of a resample holds a round of the same copy as in every other
    # resample (whole cycles, or rounds within each copy): group the positions once
    drawn = _groups(slots[idx[0]])
    if not present.all():
        idx = _redrawn_empty(idx, present, slots, groups, drawn, rng)
    point = np.empty(len(samples))
    boot = np.empty((len(samples), resamples))
    factor = np.ones(len(samples))
    patterns, which = np.unique(present, axis=0, return_inverse=True)
    for j, pattern in enumerate(patterns):
        rows = which.reshape(-1) == j
        point[rows] = _copy_medians_mean(samples[rows], groups)
        boot[rows] = _copy_medians_mean(samples[rows][:, idx], drawn)
        factor[rows] = _expansion(_groups(slots[pattern]))
    point, boot = _bridged(samples, present, groups, idx, drawn, point, boot)
    boot = point[:, None] + (boot - point[:, None]) * factor[:, None]
    copies = len(groups)
    if copies < 2:
        return point, boot
    relative: float | np.ndarray
    if pooled is not None:
        relative, df = pooled
    else:
        # each program's own estimate, with the degrees of freedom of its own copies
        # (Student's t: normal draws from one program's four copies covered a 3% copy
        # spread 92% of the time). Programs are not equally sensitive to where they land (a
        # copy's offset was about constant in seconds on elementwise_chain, so a relative
        # one differs by program), and pooling under-covers the sensitive ones: each
        # program's own averaged with the pooled estimate missed the true difference between
        # a program whose copies spread 2% and one whose copies spread 0.8% in 8.7% of
        # simulated runs (its own alone: 3.3%, CIs 2% wider where all spread alike), and
        # the full pipeline's A/A twin failed in 6.7% of 720 elementwise_chain runs
        relative = _copy_variance(samples, groups, per_program=True, upper=upper)
        df = copies - 1
    copy_var = relative * np.maximum(point, 0.0) ** 2 / copies
    draws = rng.standard_t(df, size=boot.shape)
    return point, boot + draws * np.sqrt(copy_var)[:, None]


def _groups(slots: np.ndarray) -> list[np.ndarray]:
    """The positions of each slot in `slots`, slot by slot."""
    return [np.flatnonzero(slots == s) for s in np.unique(slots)]


def _redrawn_empty(
    idx: np.ndarray,
    present: np.ndarray,
    slots: np.ndarray,
    groups: list[np.ndarray],
    drawn: list[np.ndarray],
    rng: np.random.Generator,
) -> np.ndarray:
    """`idx` with the replicates that drew none of some program's rounds on some copy
    (`present` [program, round]) drawn again, until none does: a program's time is a mean
    over all its copies. Rare (a program sampled in 8 of 48 cycles: e^-8.8 of replicates),
    but a replicate without a value is a CI without ends (simulated, 1 in 50 CIs of a program
    that left after 8 cycles was NaN)."""
    idx = idx.copy()
    patterns = np.unique(present, axis=0)
    for _ in range(1000):
        empty = np.zeros(len(idx), dtype=bool)
        for pattern in patterns:
            here = pattern[idx]
            for positions in drawn:
                empty |= ~here[:, positions].any(axis=1)
        if not empty.any():
            return idx
        idx[empty] = _resampled_rounds(slots, groups, int(empty.sum()), rng)
    raise ValueError("a program's rounds are too few to resample")


def _bridged(
    samples: np.ndarray,
    present: np.ndarray,
    groups: list[np.ndarray],
    idx: np.ndarray,
    drawn: list[np.ndarray],
    point: np.ndarray,
    boot: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Programs sampled in only some rounds (`present`), each brought to the level of the
    whole run: its time times the programs sampled in every round (the reference) over the
    whole run against the same programs over the rounds it was in (a geometric mean over
    the reference), in the point and in every replicate (the rounds `idx` drew, grouped by
    copy as `drawn`). So a machine that ran faster or slower after a program left, or in
    the cycles a thinned program sat out, is not taken for an effect: the difference
    between it and a reference program is their ratio over their common rounds, at the
    reference's whole-run level. Nothing changes where every program ran every round, or
    where none did."""
    reference = present.all(axis=1)
    if reference.all() or not reference.any():
        return point, boot
    point, boot = point.copy(), boot.copy()
    ref, ref_drawn = samples[reference], samples[reference][:, idx]
    full_point, full_boot = np.log(point[reference]), np.log(boot[reference])
    for pattern in np.unique(present[~reference], axis=0):
        then = np.log(_copy_medians_mean(np.where(pattern, ref, np.nan), groups))
        then_boot = np.log(_copy_medians_mean(np.where(pattern[idx], ref_drawn, np.nan), drawn))
        rows = (present == pattern).all(axis=1)
        point[rows] *= np.exp(np.mean(full_point - then))
        boot[rows] *= np.exp(np.mean(full_boot - then_boot, axis=0))[None, :]
    return point, boot


def _nan_median(values: np.ndarray) -> np.ndarray:
    """The median over the last axis with NaN left out (NaN where all are): sorted, NaN
    last, the middle one or two of the values measured. (`np.nanmedian` goes row by row on
    long axes: seconds on a bootstrap's replicates.)"""
    ordered = np.sort(values, axis=-1)
    n = (~np.isnan(values)).sum(axis=-1, keepdims=True)
    low = np.take_along_axis(ordered, np.maximum(n - 1, 0) // 2, axis=-1)
    high = np.take_along_axis(ordered, n // 2, axis=-1)
    return ((low + high) / 2)[..., 0]


def _copy_medians_mean(samples: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    """A program's time over its copies: each copy's median over its rounds (the last
    axis of `samples`, positions grouped by copy; NaN, rounds it sat out, left out),
    averaged over the copies (those with a round). Where copies
    differ by more than a round varies, the rounds pooled are a mixture, one narrow peak
    per copy, and their median moves like the median of the copy levels: up to pi/2 the
    variance of their mean, which is what the copy term of `_round_bootstrap` allows for
    (simulated, `benchmarks/ci_coverage_sim.py`, 600 runs a case: 92.2-92.8% coverage for
    the pooled median, 94.2-95.3% for this, same widths). It is also what the copies' truth is: the mean
    offset of a placement is zero, the median of a handful of them is not."""
    if not np.isnan(samples).any():
        return np.mean([np.median(samples[..., g], axis=-1) for g in groups], axis=0)
    medians = np.stack([_nan_median(samples[..., g]) for g in groups])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a replicate that drew none of a copy's
        return np.nanmean(medians, axis=0)


MIN_CYCLES = 8
"""Complete cycles (every copy's j-th round) before `_resampled_rounds` resamples cycles
rather than rounds within each copy."""


def _by_cycles(groups: list[np.ndarray]) -> bool:
    """Whether `_resampled_rounds` draws whole cycles: several copies, each with at least
    `MIN_CYCLES` rounds."""
    return len(groups) > 1 and min(len(g) for g in groups) >= MIN_CYCLES


def _resampled_rounds(
    slots: np.ndarray, groups: list[np.ndarray], resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """Round indices [resample, round] for `_round_bootstrap`, every copy keeping its share:
    whole cycles resampled (cycle j: the j-th round of every copy; the rounds run the
    copies in turn, so a cycle is a stretch of consecutive rounds), rounds past the last
    complete cycle kept as they are; with fewer than `MIN_CYCLES` complete cycles, rounds
    resampled within each copy. Cycles, because a program's own noise is not independent
    from round to round under load: its residuals (each round's common factor and each
    copy's offset taken out) averaged over 20 consecutive rounds varied 14% more than
    independent rounds would (elementwise_chain, one core loaded, 16 runs), and resampling
    whole cycles gave its differences CIs 12-17% wider, 1.0x on the same rounds shuffled
    within their copies."""
    occurrence = np.empty(len(slots), dtype=np.int64)
    for g in groups:
        occurrence[g] = np.arange(len(g))
    complete = min(len(g) for g in groups)
    if not _by_cycles(groups):
        return np.concatenate([g[rng.integers(0, len(g), size=(resamples, len(g)))]
                               for g in groups], axis=1)  # fmt: skip
    cycles = np.stack([g[:complete] for g in groups], axis=1)  # [cycle, copy]
    tail = np.flatnonzero(occurrence >= complete)
    drawn = cycles[rng.integers(0, complete, size=(resamples, complete))].reshape(resamples, -1)
    return np.concatenate([drawn, np.broadcast_to(tail, (resamples, len(tail)))], axis=1)


def _expansion(groups: list[np.ndarray]) -> float:
    """The factor by which `_resampled_rounds`'s replicates are spread about the point:
    Student's over the normal 97.5% quantile for a spread estimated from n units (the
    t part of Hesterberg's expanded percentile interval, "What teachers should know about
    the bootstrap", 2015). n: the complete cycles `_resampled_rounds` draws, or below
    `MIN_CYCLES` the rounds per copy it draws within (the degrees of freedom those rounds
    less one per copy). 1 for a single copy (nothing resampled by cycles or copies).

    Hesterberg's other factor, sqrt(n/(n-1)) for the bootstrap's narrowness, is a mean's:
    resampling n units gives (n-1)/n of a mean's variance, but 1.14-1.29x the variance of a
    median of 8-20 (normal rounds, 300 samples each): the point is a mean of per-copy
    medians (`_copy_medians_mean`), so it is left out. Simulated (`ci_coverage_sim.py`'s
    seven cases, 600 runs each, 2026-11-27), the 95% CI of a difference then covered
    94.2-99.2% with widths within 3% of the pooled median's with the factor in full, which
    covered 92.2-97.2% (in one-off runs of 400, the factor in full on the mean of copy
    medians: up to 9% wider; the pooled median without any factor: 89.5%)."""
    if len(groups) < 2:
        return 1.0
    return _t_over_z(_resampled_df(groups))


def _resampled_df(groups: list[np.ndarray]) -> int:
    """The degrees of freedom of what `_resampled_rounds` draws from (`_expansion`)."""
    if _by_cycles(groups):
        return min(len(g) for g in groups) - 1
    return sum(len(g) for g in groups) - len(groups)


def _t_over_z(df: int) -> float:
    """Student's 97.5% quantile over the normal's (1 below one degree of freedom)."""
    if df < 1:
        return 1.0
    return float(t_quantile(0.975, df) / NormalDist().inv_cdf(0.975))


@overload
def _copy_variance(
    samples: np.ndarray, groups: list[np.ndarray], *, upper: bool = ...
) -> float: ...
@overload
def _copy_variance(
    samples: np.ndarray, groups: list[np.ndarray], per_program: Literal[True], upper: bool = ...
) -> np.ndarray: ...
def _copy_variance(
    samples: np.ndarray, groups: list[np.ndarray], per_program: bool = False, upper: bool = False
):
    """The variance of a copy's offset (relative: a placement slows a program by some
    fraction), pooled over the programs of `samples` [program, round], rounds grouped by
    the copy (slot) they ran on.

    On log times: each program's level removed, then each round's common factor (the mean
    over the programs: the machine's speed that round, and any drift, hit every program of
    a round alike), so what is left is each sample's own noise and its copy's offset. The
    offsets' variance is the variance of the per-copy means less the noise in them (the
    within-copy variance over the count), scaled back by P/(P-1) for the share of itself a
    program's common factor took out; zero when the noise explains it all. With one program
    there is no common factor to take out, and the round-to-round drift stays in the noise.
    `per_program`: each program's own estimate instead (one per row, from its own copies).
    `upper`: the noise not taken out (the per-copy means' variance itself): never below the
    copy variance, and never the zero that the subtraction gives when a few rounds per copy
    leave more noise than offset (elementwise_chain at 8 rounds per copy: pooled over the
    programs exactly 0 in 3 of 16 runs whose copies, run on, spread 1.5-4%); what
    `_open_passes` judges by, so that such an estimate cannot end sampling."""
    logs = np.log(np.maximum(samples, 1e-30))  # NaN where a program sat a round out
    resid = logs - np.nanmedian(logs, axis=1, keepdims=True)
    present = (~np.isnan(resid)).sum(axis=0)  # programs in each round
    shared = present > 1
    if shared.any():  # the common factor out, each round's residuals scaled by P/(P-1) in
        # variance for the share of itself a program's common factor took out
        common = np.nanmean(resid[:, shared], axis=0, keepdims=True)
        resid[:, shared] = (resid[:, shared] - common) * np.sqrt(
            present[shared] / (present[shared] - 1)
        )
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a copy a program never ran on
        means = np.stack([np.nanmean(resid[:, g], axis=1) for g in groups], axis=1)
        noise = np.stack([np.nanvar(resid[:, g], axis=1, ddof=1) / (~np.isnan(resid[:, g])).sum(axis=1)
                          for g in groups], axis=1)  # fmt: skip
        own = np.nanvar(means, axis=1, ddof=1) - (0.0 if upper else np.nanmean(noise, axis=1))
    own = np.nan_to_num(own, nan=0.0)
    if per_program:
        return np.maximum(own, 0.0)
    return max(float(np.mean(own)), 0.0)


def _floor(ratio: Interval, scale_s: float) -> tuple[float, float]:
    """An A/A ratio's floor: the farthest end of its CI from 1, as a fraction and in seconds
    at `scale_s`."""
    fraction = max(1 - ratio.low, ratio.high - 1, 0.0)
    return fraction, fraction * scale_s


def _split_aa(row: np.ndarray, slots: np.ndarray, resamples: int, seed: int) -> Interval:
    """One program's A/A: its time on the even slots over its time on the odd slots (each
    half's time as `_round_bootstrap` gives it: the mean of its copies' medians, the median
    of its rounds where a half has one copy; alternate rounds where it has one copy), the
    CI from resampling each half as `_round_bootstrap` does."""
    return Interval.of(*_split_ratio(row, slots, resamples, seed))


def _family_confidence(n: int) -> float:
    """The confidence each of `n` checks needs for 95% over the family (Bonferroni)."""
    return 1 - 0.05 / max(n, 1)


def _context_checks(
    rows: Mapping[str, np.ndarray], slots: np.ndarray, resamples: int, seed: int
) -> tuple[dict[str, Interval], dict[str, bool]]:
    """Every program's split A/A (`_split_aa`): its 95% CI, and whether it fails at 95% for
    the family of programs (Bonferroni: its CI at 1 - 0.05/n excludes 1)."""
    family = _family_confidence(len(rows))
    labels = np.unique(slots)
    pooled = None
    if len(labels) > 2:  # the copy variance pooled over every program (each half alone has
        # two or so copies: one degree of freedom, Cauchy tails that no family level survives)
        groups = [np.flatnonzero(slots == s) for s in labels]
        pooled = (_copy_variance(np.stack(list(rows.values())), groups),
                  len(rows) * (len(labels) - 1))  # fmt: skip
    split = {k: Interval.of(*_split_ratio(r, slots, resamples, seed, pooled))
             for k, r in rows.items()}  # fmt: skip
    return split, {k: _widened(r, family).excludes(1.0) for k, r in split.items()}


def _widened(ci: Interval, confidence: float) -> Interval:
    """A 95% `ci` stretched about its point to `confidence` by the normal quantiles' ratio,
    each side by its own width. The family's level lies in the replicates' far tails, one
    or two of them at most (1 - 0.05/60 of 1000), which moved with the resampling scheme:
    resampling cycles, 4 of 600 alike programs failed at the family's 95% against 0.5
    expected; stretched from the 95% interval, 1 of 1200 (1.0 expected)."""
    scale = NormalDist().inv_cdf(1 - (1 - confidence) / 2) / NormalDist().inv_cdf(0.975)
    return Interval(ci.value, ci.value - (ci.value - ci.low) * scale,
                    ci.value + (ci.high - ci.value) * scale)  # fmt: skip


def _split_ratio(
    row: np.ndarray,
    slots: np.ndarray,
    resamples: int,
    seed: int,
    pooled: tuple[float, int] | None = None,
) -> tuple[float, np.ndarray]:
    """`_split_aa`'s ratio and its bootstrap replicates (`pooled`: `_round_bootstrap`'s)."""
    halves = (slots % 2 == 0) if len(np.unique(slots)) > 1 else (np.arange(len(row)) % 2 == 0)
    parts = []
    for half in (halves, ~halves):
        sub = slots[half] // 2 if len(np.unique(slots)) > 1 else None
        parts.append(_round_bootstrap(row[half][None, :], resamples, seed, sub, pooled))
    (pa, ba), (pb, bb) = parts
    return float(pa[0] / pb[0]), ba[0] / bb[0]


def _placements(
    wanted: int, exes: list[Any], twins: int, shared_io: bool = False
) -> tuple[int, int, int]:
    """How many copies of each program to bind: `wanted`, fewer where they would hold more
    than `placement_budget()` (at least 1); with the bytes that many hold and the budget.
    A program's first copy holds its kernel plan too (`bound_bytes`), for its kernels timed
    alone; its further copies and every twin's release it (`kernels=False`). On
    elementwise_chain a first copy holds 54.5 MB: 12.6 MB of inputs and outputs and 21 MB of
    intermediates, twice (the kernel plan's and the driver's kept scratch), a further copy
    33.5 MB; when only inputs and outputs were counted, prefix's 28 copies of 5 programs and
    2 twins took the process to 9.4 GB resident. `shared_io`: the programs of a slot are
    bound into one set of inputs and outputs (`_io`), held once a slot."""
    io = bound_bytes(exes[0], io_only=True) if shared_io and exes else 0
    shared = io * (len(exes) + twins - 1)  # held once a slot, counted by every program
    lean = [bound_bytes(exe, kernels=False) for exe in exes]
    twin_bytes = twins * max(lean, default=0)  # a twin is the largest program, at most
    first = sum(bound_bytes(exe) for exe in exes) + twin_bytes - shared  # slot 0
    per_slot = sum(lean) + twin_bytes - shared
    budget = placement_budget()
    copies = max(1, min(wanted, 1 + (budget - first) // max(per_slot, 1)))
    return copies, first + (copies - 1) * per_slot, budget


def placement_budget() -> int:
    """What the copies of `Placements` may hold in all: two thirds of a run's memory limit
    (`irkit.limits.memory_limit`: `IRKIT_MAX_MEMORY`, or 75% of the machine's memory, so
    half of it), the rest left to compiling, checking and the reference."""
    return memory_limit()[0] * 2 // 3


def auto_placements(programs: int) -> int:
    """Copies per program when none is asked for: 32 for a few programs, down to 4 as they
    grow (`AUTO_COPIES` bound in all). A contribution's CI holds both programs' copy
    variance over the copies: on elementwise_chain with one core loaded, prefix and
    ablation (one pair of programs a pass) found 5% effects in 30-70% of trials with 4
    copies, 45-65% with 8 and 85-88% with 16 (20 trials per cell, docs/results.md; their
    CIs a third narrower, the twins failing 6 of 240 checks). Shapley averages each pass
    over many contexts, which averages the copies' offsets too (80% at 4 copies), and
    binding its 82 programs 8 times made the main job 28 -> 37 s. On this VM a copy's offset
    was about constant in seconds (35-40 us on elementwise_chain), so a 1.3 ms program's 5%
    effect (68 us) stood at about twice the CI's half-width with 16 copies and ablation
    found it in 70% of trials; the copy term falls as 1/copies at the same rounds."""
    return max(4, min(32, AUTO_COPIES // max(programs, 1)))


AUTO_COPIES = 200
"""The copies `auto_placements` binds in all, when each program gets from 4 to 32."""


def _shown_kernels(
    programs: dict[str, Program], pairs: list[str], whole: tuple[str, ...]
) -> set[str]:
    """The hashes of the kernels an attribution shows: every kernel of the programs in
    `whole`, and those that differ between the programs of each pair (`pairs` flattened:
    before, after, before, after...)."""

    def kernels(key: str) -> list[Any]:
        return programs[key].exe.kernels  # type: ignore[attr-defined]

    shown = {k.hash for key in whole for k in kernels(key)}
    for before, after in zip(pairs[::2], pairs[1::2], strict=True):
        a, b = Counter(k.hash for k in kernels(before)), Counter(k.hash for k in kernels(after))
        shown |= set((a - b) + (b - a))
    return shown


def _time_kernels(
    programs: dict[str, Program],
    hashes: set[str],
    precision: float,
    budget_s: float,
    min_rounds: int,
    max_rounds: int,
    seed: int,
    ceilings: Ceilings | None,
    tick: Progress,
) -> dict[str, KernelTime]:
    """Time each kernel of `hashes` once, alone, on the data of a program that has it."""
    fns: dict[str, Callable[[], None]] = {}
    records = {}
    for p in programs.values():
        for i, record in enumerate(p.exe.kernels):  # type: ignore[attr-defined]
            if record.hash in hashes and record.hash not in fns:
                fns[record.hash] = p.bound.timed_kernel(i)
                records[record.hash] = record
    timings = time_interleaved(fns, precision, budget_s, min_rounds, max_rounds, warmup=0,
                               seed=seed + 1, on_round=lambda r: tick("kernels", r, max_rounds))  # fmt: skip
    tick("kernels", max_rounds, max_rounds)
    out = {}
    for h, t in timings.items():
        r, e = records[h], t.estimate
        threads = int((r.launch or {}).get("threads", 1))  # CPU kernels; a GPU launch has none
        roof = (roof_point(r.flops, r.min_bytes, e.median, ceilings, threads).to_json()
                if ceilings else None)  # fmt: skip
        out[h] = KernelTime(r.name, h, e.median, (e.low, e.high), r.flops, r.min_bytes, roof,
                            r.once)  # fmt: skip
    return out


def _kernel_diff(
    before: list[KernelTime], after: list[KernelTime]
) -> tuple[list[KernelTime], list[KernelTime]]:
    """Kernels in `before` but not `after` (removed), and the other way round (added),
    counting repeats: a program that runs the same kernel twice has it twice."""
    return _only_in(before, after), _only_in(after, before)


def _only_in(xs: list[KernelTime], ys: list[KernelTime]) -> list[KernelTime]:
    left = Counter(k.hash for k in xs) - Counter(k.hash for k in ys)
    out = []
    for k in xs:
        if left[k.hash] > 0:
            left[k.hash] -= 1
            out.append(k)
    return out


@dataclass(frozen=True)
class Comparison:
    """Pipeline B against pipeline A on one model, measured interleaved and paired, each
    bound as `placements` slots."""

    ratio: Interval
    """T(B) / T(A): below 1, B is faster."""
    a: Estimate
    b: Estimate
    floor: float
    rounds: int
    stop_reason: str
    placements: int = 1
    placement_io: str = "own"
    """"shared": the programs of a slot bound into one set of inputs and outputs."""
    copy_sd: float | None = None
    """A copy's offset, relative sd (`_copy_variance`); None with one slot."""

    @property
    def significant(self) -> bool:
        return self.ratio.excludes(1.0) and abs(self.ratio.value - 1) > self.floor


def compare_pipelines(
    model: ModuleOp | str | Path,
    a: str,
    b: str,
    backend: str = "cpu",
    dims: Mapping[str, int] | None = None,
    precision: float = 0.01,
    budget_s: float = 5.0,
    seed: int = 0,
    resamples: int = 2000,
    min_rounds: int = 10,
    placements: int = 8,
) -> Comparison:
    """A controlled comparison of two pipelines (the A/A case included: a == b compiles
    twice and measures both). Both are checked first; an A/A twin of `a` sets the floor.
    Each of the three is bound as `placements` slots (`slots.bind_slots`: fewer where they
    would hold more than `placement_budget()`), a slot's programs into one set of inputs
    and outputs where the backend can, round r running slot r mod placements; the ratio's
    CI holds the copies' spread as attribution's does (`_round_bootstrap` with the slots).
    With one placement, a copy's offset (a few percent on a CPU) is frozen into the ratio."""
    from irkit.frontend import load
    from irkit.runtime import compile, get_backend
    from irkit.runtime.check import reference_case

    check_protocol("compare_pipelines", precision, budget_s, seed)
    expect("compare_pipelines", "model", model, ModuleOp | str | Path, "a module or a model file path")  # fmt: skip
    check_placements("compare_pipelines", placements)
    graph = load(model, dims) if isinstance(model, str | Path) else model
    chosen, _ = get_backend(backend)
    case = reference_case(graph, seed)
    exes = {name: compile(graph, spec, chosen.name) for name, spec in (("a", a), ("b", b))}
    what = {"a": f"pipeline '{a}'", "b": f"pipeline '{b}'", "twin": f"the A/A twin of pipeline '{a}'"}  # fmt: skip
    first_a = checked_bound(exes["a"], graph, case, what["a"])
    first = {"a": first_a, "b": checked_bound(exes["b"], graph, case, what["b"], io_of(first_a))}
    shares = io_of(first_a) is not None
    copies = _placements(placements, list(exes.values()), 1, shares)[0]
    sources = {"a": (exes["a"], what["a"]), "b": (exes["b"], what["b"]), "twin": (exes["a"], what["twin"])}  # fmt: skip
    bound = bind_slots(chosen, sources, copies, graph, case, seed, first)
    rotation = Rotation(bound)
    timings = time_interleaved(rotation.fns, precision, budget_s,
                               max(min_rounds, MIN_ROUNDS_PER_COPY * copies), seed=seed,
                               floor_rounds=max(min_rounds, BUDGET_ROUNDS_PER_COPY * copies),
                               on_round=rotation.on_round)  # fmt: skip
    samples = np.stack([timings[k].samples for k in ("a", "b", "twin")])
    slot_of = np.array(rotation.slots[: samples.shape[1]])
    point, boot = _round_bootstrap(samples, resamples, seed, slot_of)
    groups = [np.flatnonzero(slot_of == s) for s in np.unique(slot_of)]
    aa = Interval.of(point[2] / point[0], boot[2] / boot[0])
    return Comparison(
        ratio=Interval.of(point[1] / point[0], boot[1] / boot[0]),
        a=timings["a"].estimate,
        b=timings["b"].estimate,
        floor=max(1 - aa.low, aa.high - 1, 0.0),
        rounds=samples.shape[1],
        stop_reason=timings["a"].stop_reason,
        placements=copies,
        placement_io="shared" if shares else "own",
        copy_sd=math.sqrt(_copy_variance(samples, groups)) if len(groups) > 1 else None,
    )
