"""Attribution's strategies: which variants of a pipeline each measures, and how their times
become one contribution per optional pass (the module docstring of `irkit.measure.attribution`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from irkit.errors import IrkitError
from irkit.pipelines import Step

STRATEGIES = ("prefix", "ablation", "shapley")


EXACT_SHAPLEY_MAX = 8
ORDER_SEED = 20261129
"""The seed of the permutations' resampling in the bootstrap (`Plan._order_weights`)."""


Mask = tuple[bool, ...]


Times = Mapping[Mask, np.ndarray]
"""Seconds per call of each variant: one value per bootstrap resample (or a 0-d array)."""


@dataclass(frozen=True)
class Plan:
    """The variants a strategy measures and how it turns their times into contributions."""

    strategy: str
    k: int
    masks: tuple[Mask, ...]
    permutations: tuple[tuple[int, ...], ...] = ()
    fixed: frozenset[int] = frozenset()
    antithetic: bool = False
    """Permutations come in pairs, an order and its reverse (`make_plan`), which the
    bootstrap resamples together."""
    """Passes every variant keeps (Shapley's null players: shown to change no IR state in
    any variant, `engine._inert_passes`), each contributing exactly 0; the others' Shapley
    values are those of the game without them."""

    @property
    def empty(self) -> Mask:
        return tuple(i in self.fixed for i in range(self.k))

    @property
    def full(self) -> Mask:
        return (True,) * self.k

    def pair(self, i: int) -> tuple[Mask, Mask]:
        """The (without, with) variants that show pass i's effect on kernels."""
        if self.strategy == "prefix":
            return _prefix(self.k, i), _prefix(self.k, i + 1)
        if i in self.fixed:
            return self.full, self.full
        return _without(self.full, i), self.full

    def pairs(self, i: int) -> list[tuple[Mask, Mask]]:
        """Every (without, with) pair pass i's contribution is computed from."""
        if self.strategy != "shapley" or i in self.fixed:
            return [self.pair(i)]
        if not self.permutations:
            return [(m, _with(m, i)) for m in self.masks if not m[i]]
        return [_marginal(p, i, self.fixed, self.k) for p in self.permutations]

    def _weight(self, a: Mask) -> float:
        """Exact Shapley's weight of a context: |S|! (n - |S| - 1)! / n! over the n passes
        not fixed, S the ones `a` keeps."""
        n, s = self.k - len(self.fixed), sum(a) - len(self.fixed)
        return math.factorial(s) * math.factorial(n - s - 1) / math.factorial(n)

    def weighted_pairs(self, i: int) -> list[tuple[float, Mask, Mask]]:
        """`pairs(i)` with the weight each has in pass i's contribution (they sum to 1)."""
        if self.strategy != "shapley" or i in self.fixed:
            return [(1.0, *self.pair(i))]
        if self.permutations:
            return [(1 / len(self.permutations), a, b) for a, b in self.pairs(i)]
        return [(self._weight(a), a, b) for a, b in self.pairs(i)]

    def contributions(self, t: Times, orders: bool = True) -> list[np.ndarray]:
        """Seconds saved per call by each pass (negative: the pass made it slower). With
        sampled permutations and bootstrap replicates of the times (arrays), each replicate
        also resamples the permutations (an antithetic pair as one), so that the spread of
        the estimate holds the sampling of orders as well as the rounds' noise; `orders`
        False leaves the orders as drawn (the spread more rounds can narrow: what the
        stopping rule asks of)."""
        if self.strategy in ("prefix", "ablation"):
            return [t[a] - t[b] for a, b in (self.pair(i) for i in range(self.k))]
        if self.permutations:
            shape = np.shape(next(iter(t.values()))) if orders else ()
            weights = self._order_weights(shape)

            def mean(i: int) -> np.ndarray:
                if i in self.fixed:
                    return np.zeros(weights.shape[:-1])
                marginals = (t[a] - t[b] for a, b in self.pairs(i))
                return np.asarray(sum(weights[..., n] * x for n, x in enumerate(marginals)))

            return [mean(i) for i in range(self.k)]
        return [
            np.asarray(sum(w * (t[a] - t[b]) for w, a, b in self.weighted_pairs(i)))
            for i in range(self.k)
        ]

    def _order_weights(self, shape: tuple[int, ...]) -> np.ndarray:
        """Each permutation's weight: 1 / P for a point estimate (`shape` ()), else per
        replicate (`shape` (R,)) the permutations' groups (antithetic pairs, or single
        orders) drawn with replacement, as multinomial counts (seeded: the same draws for
        every pass and every call)."""
        n = len(self.permutations)
        if not shape:
            return np.full(n, 1 / n)
        groups = [[g, g + n // 2] for g in range(n // 2)] if self.antithetic else []
        groups += [[x] for x in range(2 * len(groups), n)]
        counts = np.random.default_rng(ORDER_SEED).multinomial(
            len(groups), [1 / len(groups)] * len(groups), size=shape[0]
        )
        weights = np.zeros((shape[0], n))
        for g, members in enumerate(groups):
            weights[:, members] = counts[:, [g]] / (len(groups) * len(members))
        return weights

    def before(self, i: int) -> Mask:
        """The variant pass i's relative change is taken against."""
        return self.empty if self.strategy == "shapley" else self.pair(i)[0]


def _prefix(k: int, n: int) -> Mask:
    return tuple(j < n for j in range(k))


def _without(mask: Mask, i: int) -> Mask:
    return tuple(False if j == i else m for j, m in enumerate(mask))


def _with(mask: Mask, i: int) -> Mask:
    return tuple(True if j == i else m for j, m in enumerate(mask))


def _marginal(
    order: tuple[int, ...], i: int, fixed: frozenset[int] = frozenset(), k: int | None = None
) -> tuple[Mask, Mask]:
    """Pass i's marginal pair in `order` (of the passes not fixed; the fixed ones kept)."""
    k = len(order) + len(fixed) if k is None else k
    before = set(order[: order.index(i)]) | fixed
    m = tuple(j in before for j in range(k))
    return m, _with(m, i)


def make_plan(
    strategy: str,
    k: int,
    permutations: int = 64,
    seed: int = 0,
    fixed: frozenset[int] = frozenset(),
) -> Plan:
    """The variants `strategy` needs for k optional passes; Shapley's with the passes in
    `fixed` kept in every variant (null players: each contributes 0, and the rest are
    those of the game of the others, exactly where they are at most `EXACT_SHAPLEY_MAX`)."""
    if strategy not in STRATEGIES:
        raise IrkitError(f"unknown strategy '{strategy}'; choose from {', '.join(STRATEGIES)}")
    if strategy == "shapley" and fixed:
        return _shapley_with_fixed(k, permutations, seed, frozenset(fixed))
    empty, full = (False,) * k, (True,) * k
    if strategy == "prefix":
        masks = [_prefix(k, n) for n in range(k + 1)]
        return Plan(strategy, k, tuple(masks))
    if strategy == "ablation":
        masks = [empty, full, *(_without(full, i) for i in range(k))]
        return Plan(strategy, k, tuple(dict.fromkeys(masks)))
    if k <= EXACT_SHAPLEY_MAX:
        return Plan(strategy, k, tuple(itertools.product((False, True), repeat=k)))
    orders = _antithetic_orders(list(range(k)), permutations, seed)
    # the full pipeline without each pass: `pair(i)`, what each pass's kernels are shown by,
    # is sampled only where pass i came last in some order (at k = 18 and 64 orders one of
    # them is missed four times in ten)
    sampled = {empty, full, *(_without(full, i) for i in range(k))}
    for order in orders:
        for n in range(k + 1):
            sampled.add(tuple(j in order[:n] for j in range(k)))
    return Plan(strategy, k, tuple(sorted(sampled, key=sum)), orders, antithetic=True)


def _shapley_with_fixed(k: int, permutations: int, seed: int, fixed: frozenset[int]) -> Plan:
    active = [i for i in range(k) if i not in fixed]
    full = (True,) * k

    def mask(on: set[int]) -> Mask:
        return tuple(i in fixed or i in on for i in range(k))

    if len(active) <= EXACT_SHAPLEY_MAX:
        subsets = itertools.product((False, True), repeat=len(active))
        masks = [mask({a for a, x in zip(active, s, strict=True) if x}) for s in subsets]
        return Plan("shapley", k, tuple(masks), fixed=fixed)
    orders = _antithetic_orders(active, permutations, seed)
    sampled = {mask(set()), full, *(_without(full, i) for i in active)}
    for order in orders:
        for n in range(len(active) + 1):
            sampled.add(mask(set(order[:n])))
    return Plan("shapley", k, tuple(sorted(sampled, key=sum)), orders, fixed, antithetic=True)


def _antithetic_orders(passes: list[int], count: int, seed: int) -> tuple[tuple[int, ...], ...]:
    """`count` orders of `passes`: count // 2 drawn at random, then each of them reversed
    (a pass early in one is late in the other: its marginals over small and large
    contexts, paired, vary less than two independent draws), and one more drawn where
    `count` is odd."""
    rng = np.random.default_rng(seed)
    drawn = [tuple(passes[int(x)] for x in rng.permutation(len(passes))) for _ in range(count // 2)]
    extra = [tuple(passes[int(x)] for x in rng.permutation(len(passes))) for _ in range(count % 2)]
    return (*drawn, *(order[::-1] for order in drawn), *extra)


def option_chain(steps: list[Step], changes: list[str], strategy: str = "prefix") -> list[Step]:
    """The steps with option steps added: each of `changes` (`pass{option=value ...}`) sets
    options of the pipeline's pass of that name, on top of the changes before it on the same
    pass. Each becomes a step placed after the pass (and its earlier changes), which runs
    the pass with them set instead of it (`refines`): attribution prices option changes as
    it prices passes, with the prefix strategy (each given the ones before; another is a
    one-line error). A change naming no pass of the pipeline, or an option the pass does
    not have, is a one-line error."""
    from xdsl.utils.arg_spec import ArgSpec, parse_pipeline

    from irkit.pipelines import parse_passes

    if changes and strategy != "prefix":
        raise IrkitError(
            "option steps build on each other: they are attributed with --strategy prefix",
            "--step",
        )
    out = list(steps)
    for change in changes:
        items = list(parse_pipeline(change)) if change.strip() else []
        if len(items) != 1 or not items[0].parameters:
            raise IrkitError(f"--step '{change}': one pass with the options it sets")
        item = items[0]
        bases = [n for n, s in enumerate(out) if _pass_of(s) == item.name and s.refines is None]
        if not bases:
            raise IrkitError(f"--step '{change}': the pipeline has no pass {item.name}")
        base = bases[0]
        last = max((n for n, s in enumerate(out) if s.refines == base), default=base)
        (previous,) = parse_pipeline(out[last].spec)
        merged = ArgSpec(item.name, {**previous.parameters, **item.parameters})
        parse_passes(str(merged))  # an option the pass lacks, or refuses: one line
        step = Step(f"{item.name}{{{_options_text(item)}}}", str(merged), True, base)
        out.insert(last + 1, step)
    return out


def _options_text(item) -> str:
    return str(item).split("{", 1)[1].rstrip("}")


def _pass_of(step: Step) -> str:
    return step.spec.split("{")[0]


def kept(steps: list[Step], optional: list[int], mask: Mask) -> list[bool]:
    """Which of `steps` the variant with optional step optional[j] kept iff mask[j] runs: a
    required step always; of a pass and its option steps (`option_chain`), the last one
    kept, the others not (the pass runs once, with the options of the changes kept)."""
    asked = [not s.optional or mask[optional.index(n)] for n, s in enumerate(steps)]
    on = list(asked)
    for n, s in enumerate(steps):
        if s.refines is None or not asked[n]:
            continue
        if not asked[s.refines]:  # the pass itself left out: so are its options
            on[n] = False
            continue
        for m in range(s.refines, n):  # the pass with fewer options gives way
            if m == s.refines or steps[m].refines == s.refines:
                on[m] = False
    return on


def variant_steps(steps: list[Step], optional: list[int], mask: Mask) -> list[str]:
    """The passes (`-p` items) of the variant with optional step optional[j] kept iff
    mask[j] (`kept`)."""
    return [s.spec for s, on in zip(steps, kept(steps, optional, mask), strict=True) if on]


def variant_spec(steps: list[Step], optional: list[int], mask: Mask) -> str:
    """The `-p` spec of the variant with optional step optional[j] kept iff mask[j]."""
    return ",".join(variant_steps(steps, optional, mask))


def describe_variant(steps: list[Step], optional: list[int], mask: Mask) -> str:
    on = [steps[optional[j]].label for j, m in enumerate(mask) if m]
    if len(on) == len(mask):
        return "all optional passes"
    return "+".join(on) if on else "no optional pass"
