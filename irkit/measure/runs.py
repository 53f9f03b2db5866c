"""Attribution repeated at the run level: several whole runs, their spread the CI.

A run's CI holds what varies inside it, its rounds and its placements (`attribution`).
What the machine's state does to a comparison, which process shares the core, where the
process runs, a neighbour's memory traffic, is fixed for the seconds a run lasts and moves
between runs: on the 2-core VM, mlp with and without `cpu-tile-matmul` fell in two per-run
states 55 us (6%) apart, four times a run's SE (docs/results.md, 2026-11-27, late). The
remedy (Kalibera and Jones, "Rigorous benchmarking in reasonable time", 2013) is to repeat
at the level that varies: `runs` independent runs, spread in time, each bound afresh, on
the same inputs (the same seed: an effect that depends on the data is one input's), and
every estimate taken from their spread.

`combine_runs` does that on the runs' records: a pass's saving is the mean of the runs'
savings, its 95% CI Student's t with runs - 1 degrees of freedom on their standard error
(each run's estimate carries its own within-run noise, so their spread holds both terms),
significant when that CI excludes 0 and the pass changes code, detectable at (t_0.975 +
t_0.80) standard errors. Shapley's sums stay exact (a mean of exact sums). Speedups are
combined on logs. The kernels, the roofline and the protocol are the first run's; each
run's own estimates are kept under `runs`, and `run_to_run` says, pass by pass, how the
runs' spread compares with what each run's CI claimed.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import numpy as np

from irkit.errors import IrkitError
from irkit.measure.stats import t_quantile

MAX_RUNS = 64


def check_runs(what: str, runs: object) -> None:
    """A one-line IrkitError unless `runs` is an integer from 1 to `MAX_RUNS`."""
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= MAX_RUNS:
        raise IrkitError(f"{what}: runs must be an integer from 1 to {MAX_RUNS}, got {runs!r}")


def _interval(values: Sequence[float], confidence: float, log: bool = False) -> dict:
    v = np.log(values) if log else np.asarray(values, dtype=float)
    n = len(v)
    se = float(v.std(ddof=1)) / math.sqrt(n)
    half = t_quantile(0.5 + confidence / 2, n - 1) * se
    mean = float(v.mean())
    if log:
        return {
            "value": math.exp(mean),
            "ci_low": math.exp(mean - half),
            "ci_high": math.exp(mean + half),
        }
    return {"value": mean, "ci_low": mean - half, "ci_high": mean + half}


def _run_to_run(values: Sequence[float], cis: Sequence[dict]) -> dict:
    """How the runs' spread compares with their own CIs: the runs' sd, the rms of their
    standard errors (each CI's half-width over 1.96), and the share of runs whose CI held
    the runs' mean."""
    v = np.asarray(values, dtype=float)
    se = np.array([(c["ci_high"] - c["ci_low"]) / (2 * 1.96) for c in cis])
    mean = float(v.mean())
    held = sum(c["ci_low"] <= mean <= c["ci_high"] for c in cis)
    return {
        "sd_s": float(v.std(ddof=1)),
        "run_se_rms_s": float(np.sqrt((se**2).mean())),
        "runs_holding_mean": int(held),
    }


def combine_runs(records: Sequence[dict], gap_s: float = 0.0, confidence: float = 0.95) -> dict:
    """One attribution record from `records`, independent runs of one attribution (same
    model, pipeline, strategy and backend): see the module docstring."""
    n = len(records)
    if n < 2:
        raise IrkitError(f"combine_runs: needs two runs or more, got {n}")
    first = records[0]
    same = ("model", "pipeline", "backend", "strategy", "dims")
    for r in records[1:]:
        for key in same:
            if r.get(key) != first.get(key):
                raise IrkitError(
                    f"combine_runs: the runs differ in {key} ({first.get(key)!r} and {r.get(key)!r})"
                )
    out = copy.deepcopy(first)
    t975, t80 = t_quantile(0.5 + confidence / 2, n - 1), t_quantile(0.80, n - 1)
    failed_floor = max(
        (r["noise_floor"]["floor_s"] for r in records if r["noise_floor"].get("aa_failed")),
        default=0.0,
    )
    for i, p in enumerate(out["passes"]):
        each = [r["passes"][i] for r in records]
        if any(e["pass"] != p["pass"] for e in each):
            raise IrkitError(f"combine_runs: the runs' passes differ at {i} ({p['pass']!r})")
        if not any(e["changes_code"] for e in each):
            continue  # exactly 0 in every run
        saved = [e["saved_s"]["value"] for e in each]
        p["saved_s"] = _interval(saved, confidence)
        p["speedup"] = _interval([e["speedup"]["value"] for e in each], confidence, log=True)
        p["relative"] = float(np.mean([e["relative"] for e in each]))
        ci = p["saved_s"]
        p["significant"] = bool(
            (ci["ci_low"] > 0 or ci["ci_high"] < 0) and abs(ci["value"]) > failed_floor
        )
        se = float(np.std(saved, ddof=1)) / math.sqrt(n)
        p["min_detectable_s"] = max(failed_floor, (t975 + t80) * se)
        p["run_to_run"] = _run_to_run(saved, [e["saved_s"] for e in each])
    _combine_totals(out["total"], records, confidence)
    _combine_protocol(out, records, gap_s, failed_floor, confidence)
    return out


def _combine_totals(total: dict, records: Sequence[dict], confidence: float) -> None:
    """The totals: the runs' mean saving and speedup, and each end's time, over the runs."""
    n = len(records)
    total["saved_s"] = _interval([r["total"]["saved_s"]["value"] for r in records], confidence)
    total["speedup"] = _interval(
        [r["total"]["speedup"]["value"] for r in records], confidence, log=True
    )
    for key in ("baseline_s", "full_s"):
        est = _interval([r["total"][key]["median"] for r in records], confidence)
        total[key] = {
            "median": est["value"],
            "ci_low": est["ci_low"],
            "ci_high": est["ci_high"],
            "confidence": confidence,
            "n": n,
            "unit": "runs",
        }


def _combine_protocol(
    out: dict, records: Sequence[dict], gap_s: float, failed_floor: float, confidence: float
) -> None:
    """The rule the passes were judged by, the runs' protocol, and each run in brief."""
    n = len(records)
    out["total"]["sum_of_contributions_s"] = float(
        sum(p["saved_s"]["value"] for p in out["passes"])
    )
    out["noise_floor"]["rule"] = (
        f"over {n} runs: significant when the pass changes code and the 95% CI of the mean of "
        f"the runs' savings (Student's t, {n - 1} degrees of freedom, on their spread) "
        "excludes 0"
        + (f", beyond {failed_floor:.3g} s where a run's A/A check failed" if failed_floor else "")
    )
    out["noise_floor"]["aa_failed_runs"] = sum(
        bool(r["noise_floor"].get("aa_failed")) for r in records
    )
    out["protocol"]["runs"] = {
        "count": n,
        "gap_s": gap_s,
        "method": "independent runs, each bound afresh on the same inputs, the next after "
        "the gap; every estimate the mean over the runs with Student's t on their spread "
        "(irkit.measure.runs)",
        "loaded": [r["protocol"]["load"]["loaded"] for r in records],
    }
    out["runs"] = [
        {
            "passes": {e["pass"]: e["saved_s"] for e in r["passes"]},
            "total_saved_s": r["total"]["saved_s"],
            "full_s": r["total"]["full_s"]["median"],
            "load": r["protocol"]["load"],
            "stop_reason": r["protocol"].get("stop_reason"),
            "rounds": r["protocol"].get("rounds"),
            "time": r.get("fingerprint", {}).get("time"),
        }
        for r in records
    ]


def attribute_runs(
    run: Callable[[int], dict],
    runs: int,
    gap_s: float = 0.0,
    sleep: Callable[[float], None] | None = None,
) -> dict:
    """`runs` records from `run(i)` (run i, from 0), `gap_s` seconds apart, combined
    (`combine_runs`); one run's record as it is."""
    import time

    check_runs("attribute", runs)
    if not (isinstance(gap_s, int | float) and gap_s >= 0 and math.isfinite(gap_s)):
        raise IrkitError(f"attribute: the gap between runs must be seconds >= 0, got {gap_s!r}")
    records = []
    for i in range(runs):
        if i:
            (sleep or time.sleep)(gap_s)
        records.append(run(i))
    return records[0] if runs == 1 else combine_runs(records, gap_s)
