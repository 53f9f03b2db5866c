"""Re-analyse a fidelity run's measured rounds under other CI rules, against its truth.

    python benchmarks/fidelity.py ... --out run.jsonl --rounds rounds/
    python benchmarks/ci_reanalysis.py run.jsonl [--resamples 2000]

`fidelity.py --rounds DIR` saves every attribution run's rounds (`Attribution.rounds`);
this recomputes each run's planted passes' CIs from them, under the rule attribution uses
and under alternatives of its copy-variance term, and scores each against the run's truth
(`fidelity.assign_truth`) as `fidelity.summarize` does: coverage per planted size, the
median CI half-width, and how often 5% plants are significant (their CI excluding 0). The
same rounds under every rule: the differences are the rules', not the machine's.

Rules (the copy term of `attribution.bootstrap.round_bootstrap`):
- `own`: each program's copy variance from its own copies (attribution's rule);
- `pooled`: one variance pooled over the run's programs;
- `own, floor pooled/4`: each program's own, never below a quarter of the pooled one;
- `upper`: each program's own with the round noise left in (never below the copies' spread);
- `none`: no copy term (the rounds' bootstrap alone);
- `medians`: each program's own, on the copies' medians less a median's sampling variance
  (robust to a loaded machine's outlier rounds, which inflate a mean's noise).
Deterministic (seeded); prints a markdown table, times nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from irkit.measure import attribution
from irkit.measure.records import read_records

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import fidelity  # noqa: E402

PLANTS = ("plant-work", "plant-unwaste")
# The rounds of the curated fidelity runs (43 MB of timings) left the tracked tree after this commit.
ROUNDS_AT, ROUNDS_DIR = "12357f3", "benchmarks/results/fidelity/rounds"


def _floor_pooled(seconds: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    own = attribution.bootstrap.copy_variance(seconds, groups, per_program=True)
    return np.maximum(own, attribution.bootstrap.copy_variance(seconds, groups) / 4)


def _median_based(seconds: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    """Each program's copy variance on the copies' medians (the point estimate's levels):
    the variance of the copy medians of the log residuals (each round's common factor
    removed) less a median's own sampling variance, pi/2 (1.4826 MAD)^2 / n per copy.
    NaN (a round a program sat out, focused rounds) is left out."""
    logs = np.log(np.maximum(seconds, 1e-30))
    resid = logs - np.nanmedian(logs, axis=1, keepdims=True)
    programs = len(seconds)
    if programs > 1:
        resid = resid - np.nanmean(resid, axis=0, keepdims=True)
    meds = np.stack([np.nanmedian(resid[:, g], axis=1) for g in groups], axis=1)
    mads = np.stack([np.nanmedian(np.abs(resid[:, g] - meds[:, [i]]), axis=1) for i, g in enumerate(groups)], axis=1)  # fmt: skip
    sizes = np.stack([(~np.isnan(resid[:, g])).sum(axis=1) for g in groups], axis=1)
    noise = (np.pi / 2) * (1.4826 * mads) ** 2 / np.maximum(sizes, 1)
    scale = programs / (programs - 1) if programs > 1 else 1.0
    return np.maximum(meds.var(axis=1, ddof=1) - noise.mean(axis=1), 0.0) * scale


RULES = {
    "medians": _median_based,
    "own": lambda s, g: attribution.bootstrap.copy_variance(s, g, per_program=True),
    "pooled": lambda s, g: np.full(len(s), attribution.bootstrap.copy_variance(s, g)),
    "own, floor pooled/4": _floor_pooled,
    "upper": lambda s, g: attribution.bootstrap.copy_variance(s, g, per_program=True, upper=True),
    "none": lambda s, g: np.zeros(len(s)),
}


def bootstrap(seconds: np.ndarray, slots: np.ndarray, rule, resamples: int, seed: int):
    """`attribution.bootstrap.round_bootstrap` with the copy variance from `rule` (each program's,
    with the degrees of freedom of its copies)."""
    groups = [np.flatnonzero(slots == s) for s in np.unique(slots)]
    return attribution.bootstrap.round_bootstrap(seconds, resamples, seed, slots,
                                        pooled=(rule(seconds, groups), len(groups) - 1))  # fmt: skip


def contributions(saved, point: np.ndarray, boot: np.ndarray, strategy: str):
    masks = [tuple(bool(x) for x in m) for m in saved["masks"]]
    rows = saved["variant_program"]
    plan = attribution.make_plan(strategy, len(saved["passes"]))
    t_point = {m: point[i] for m, i in zip(masks, rows, strict=True)}
    t_boot = {m: boot[i] for m, i in zip(masks, rows, strict=True)}
    labels = [str(x) for x in saved["passes"]]
    return dict(zip(labels, plan.contributions(t_point), strict=True)), dict(
        zip(labels, plan.contributions(t_boot), strict=True)
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", help="a fidelity.py record file run with --rounds")
    ap.add_argument("--resamples", type=int, default=2000)
    args = ap.parse_args(argv)
    lines = ["| example | strategy | rule | planted | trials | coverage | median half-width (us) | 5% significant |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for rec in read_records(args.records):
        fidelity.assign_truth(rec["trials"], fidelity.record_truth(rec), rec.get("backend", "cpu"))
        sizes = {v: float(k) for k, v in rec["plant_iters"].items()}
        table: dict = {}
        for t in rec["trials"]:
            if "rounds_file" not in t:
                continue
            if not Path(t["rounds_file"]).is_file():
                sys.exit(f"{t['rounds_file']}: no such file; the curated runs' rounds are kept in git history, "
                         f"not the tree: `git checkout {ROUNDS_AT} -- {ROUNDS_DIR}` restores them")  # fmt: skip
            saved = np.load(t["rounds_file"])
            for rule_name, rule in RULES.items():
                point, boot = bootstrap(saved["seconds"], saved["slots"], rule, args.resamples, 0)
                value, replicates = contributions(saved, point, boot, t["strategy"])
                for name in PLANTS:
                    ci = attribution.Interval.of(float(value[name]), replicates[name])
                    truth = t["truth"][name]
                    key = (t["strategy"], rule_name, sizes[t["iters"][name]])
                    row = table.setdefault(key, {"n": 0, "covered": 0, "half": [], "sig": 0})
                    row["n"] += 1
                    row["covered"] += ci.low <= truth <= ci.high
                    row["half"].append((ci.high - ci.low) / 2)
                    row["sig"] += ci.excludes(0.0)
        for (strategy, rule_name, size), row in sorted(table.items()):
            n = row["n"]
            sig = f"{row['sig'] / n:.0%}" if size == 0.05 else ""
            lines.append(f"| {rec['example']} | {strategy} | {rule_name} | {size:.0%} | {n} | "
                         f"{row['covered'] / n:.1%} | {np.median(row['half']) * 1e6:.1f} | {sig} |")  # fmt: skip
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
