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
        return [
            (math.factorial(sum(a)) * math.factorial(k - sum(a) - 1) / math.factorial(k), a, b)
            for a, b in self.pairs(i)
        ]

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
    # the full pipeline without each pass: `pair(i)`, what each pass's kernels are shown by,
    # is sampled only where pass i came last in some order (at k = 18 and 64 orders one of
    # them is missed four times in ten)
    sampled = {empty, full, *(_without(full, i) for i in range(k))}
    for order in orders:
        for n in range(k + 1):
            sampled.add(tuple(j in order[:n] for j in range(k)))
    return Plan(strategy, k, tuple(sorted(sampled, key=sum)), orders)


def variant_steps(steps: list[Step], optional: list[int], mask: Mask) -> list[str]:
    """The passes (`-p` items) of the variant with optional step optional[j] kept iff
    mask[j]."""
    off = {optional[j] for j, on in enumerate(mask) if not on}
    return [s.spec for n, s in enumerate(steps) if n not in off]


def variant_spec(steps: list[Step], optional: list[int], mask: Mask) -> str:
    """The `-p` spec of the variant with optional step optional[j] kept iff mask[j]."""
    return ",".join(variant_steps(steps, optional, mask))


def describe_variant(steps: list[Step], optional: list[int], mask: Mask) -> str:
    on = [steps[optional[j]].label for j, m in enumerate(mask) if m]
    if len(on) == len(mask):
        return "all optional passes"
    return "+".join(on) if on else "no optional pass"
