"""`history detect`'s detector alone (`irkit.measure.changepoints.detect`), on synthetic
series of 12 nights: how often a planted 5% step (slower and faster in turn) is placed at
its commit with its sign, how often a planted series also gets a change at another commit
(which the rerun rules then have to refute), and how often an A/A series gets any change.
Noise is lognormal from night to night, with a share of nights slowed by a load spike
(+|N(0, 0.2)| on the log scale). Against `--against FILE`, an older changepoints.py, the
same series go through both. No timing: seconds to run, deterministic.

    python benchmarks/detector_synthetic.py [--against OLD_CHANGEPOINTS.py] [--series 400]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from irkit.measure import changepoints  # noqa: E402

NIGHTS, STEP, FLOOR = 12, 1.05, 0.02
CONDITIONS = ((0.01, 0.0), (0.01, 0.1), (0.02, 0.1), (0.005, 0.05))
"""(night-to-night noise, share of load spikes)."""


def series(rng: np.random.Generator, at: int | None, ratio: float, noise: float, spikes: float):
    v = np.exp(rng.normal(0, noise, NIGHTS)) * 100
    if at is not None:
        v[at:] *= ratio
    hit = rng.random(NIGHTS) < spikes
    v[hit] *= np.exp(np.abs(rng.normal(0, 0.2, hit.sum())))
    return list(v)


def score(module, count: int, noise: float, spikes: float) -> tuple[int, int, int]:
    """(placed at its commit, planted series with a change elsewhere, A/A series with any)."""
    placed = elsewhere = aa = 0
    for t in range(count):
        at = int(np.random.default_rng(t).integers(3, NIGHTS - 2))
        ratio = STEP if t % 2 == 0 else 1 / STEP
        for planted in (True, False):
            rng = np.random.default_rng((1000 if planted else 5000) + t)
            v = series(rng, at if planted else None, ratio, noise, spikes)
            found = module.detect(v, [x * 0.995 for x in v], [x * 1.005 for x in v],
                                  [str(i) for i in range(NIGHTS)], floor=FLOOR)  # fmt: skip
            if planted:
                placed += any(c.at == at and c.slower == (ratio > 1) for c in found)
                elsewhere += any(c.at != at for c in found)
            else:
                aa += bool(found)
    return placed, elsewhere, aa


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", help="an older irkit/measure/changepoints.py")
    ap.add_argument("--series", type=int, default=400, help="planted series (and as many A/A)")
    args = ap.parse_args()
    sides = [("this", changepoints)]
    if args.against:
        spec = importlib.util.spec_from_file_location("changepoints_against", args.against)
        assert spec is not None and spec.loader is not None
        other = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = other
        spec.loader.exec_module(other)
        sides.insert(0, ("against", other))
    print(f"{args.series} planted 5% steps and {args.series} A/A series of {NIGHTS} nights each")
    print(
        "| noise | load spikes | side | placed at its commit | planted + change elsewhere | A/A with a change |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for noise, spikes in CONDITIONS:
        for name, module in sides:
            placed, elsewhere, aa = score(module, args.series, noise, spikes)
            print(f"| {noise:.1%} | {spikes:.0%} | {name} | {placed} | {elsewhere} | {aa} |")


if __name__ == "__main__":
    main()
