"""Run to run: how much does one comparison vary between runs, beyond what one run's CI holds?

    python benchmarks/run_to_run.py MODEL --a SPEC --b SPEC [--dim K=V ...] [--backend cpu]
        [--trials 40] [--placements 22] [--rounds 440] [--gap 0] [--recompile] [--load]
        [--pin {off,on,alternate}] [-L PLUGIN] [--out FILE]

A CI from one measurement holds what varies within it. Whatever varies only from one run to
the next (the machine's speed drifting over tens of seconds, a host's neighbours) it cannot
see, and a run-to-run check (Kalibera and Jones, "Rigorous benchmarking in reasonable
time", 2013: find the level of the experiment that varies, and repeat at it) is how to
find out how much there is. This measures it for one pair of pipelines on one model.

Each trial binds both programs as `--placements` slots (each slot's two programs in one set
of inputs and outputs where the backend can, `irkit.measure.slots`, as attribution binds
its programs) and times `--rounds` rounds, the slot rotating round by round and the two
programs in a fresh random order in each (single calls, `perf_counter_ns` around each to
its end on the device). A trial's difference (B less A) is the mean over its slots of each
slot's median difference; its standard error is the slots' spread over their square root,
every source a run samples (round noise, placements). Over the trials:

- the differences' spread against the trials' own standard errors;
- z = (difference - the trials' mean) / its SE: sd(z) about 1 when each run's SE holds what
  varies, above 1 by what varies only between runs;
- the run-to-run component: sqrt(max(var(differences) - mean(SE^2), 0)), in seconds, as a
  share of the difference and of A's time;
- the lag-1 autocorrelation of the differences (a drift over trials, not noise);
- the share of runs whose 95% CI would hold the mean of all of them (counted), and the
  share a normal model with that sd(z) expects: P(|z| < 1.96 / sd(z)).

Programs are compiled once and bound afresh in every trial (`--recompile`: compiled again
too); `--gap` seconds of sleep between trials spread them over a longer time; `--load`
keeps one core busy throughout. `--pin on` pins the timing process to the last CPU and the
loader to the others (`irkit-bench attribute --pin`'s placement, with the load kept off the
timed core); `--pin alternate` pins every other trial (even ones pinned), loader and timer
switched together, and summarizes the two groups apart as well: the same hours, the same
load, one thing changed. One JSON record is appended to `--out`. The record, and
nothing else, is the result: no target is asserted on it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path
from statistics import NormalDist

import numpy as np

import irkit
from irkit.cli.common import check_output, parse_dim, run_main
from irkit.errors import IrkitError
from irkit.frontend import load
from irkit.measure.fingerprint import host_fingerprint, load_average
from irkit.measure.slots import bind_slots
from irkit.plugins import load_plugins
from irkit.runtime import get_backend
from irkit.runtime.check import reference_case

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from fidelity import call_seconds, spin_forever  # noqa: E402 (the same timer and load)


def trial(backend, exes: dict, graph, case, placements: int, rounds: int, seed: int) -> dict:
    """Both programs bound as `placements` slots and timed `rounds` rounds: the mean over
    the slots of each slot's median difference (b - a), its standard error over the slots,
    and a's time (the mean of its slots' medians)."""
    bound = bind_slots(backend, {k: (e, f"pipeline {k}") for k, e in exes.items()},
                       placements, graph, case, seed)  # fmt: skip
    rng = np.random.default_rng(seed)
    times: dict[str, list[list[float]]] = {k: [[] for _ in range(placements)] for k in exes}
    for r in range(rounds):
        slot = r % placements
        for k in rng.permutation(list(exes)):
            times[str(k)][slot].append(call_seconds(bound[str(k)][slot]))
    medians = {k: np.array([np.median(t) for t in v]) for k, v in times.items()}
    diff = medians["b"] - medians["a"]
    se = float(diff.std(ddof=1) / np.sqrt(placements))
    return {"diff_s": float(diff.mean()), "se_s": se, "a_s": float(medians["a"].mean()),
            "b_s": float(medians["b"].mean())}  # fmt: skip


def summarize(trials: list[dict]) -> dict:
    """The trials' spread against their own standard errors (see the module's text)."""
    d = np.array([t["diff_s"] for t in trials])
    se = np.array([t["se_s"] for t in trials])
    a = np.array([t["a_s"] for t in trials])
    mean = float(d.mean())
    between = float(d.std(ddof=1))
    within = float(np.sqrt(np.mean(se**2)))
    # a trial whose copies timed identically (a tiny kernel, the timer's quantum) has no SE:
    # its z is undefined and left out of sd(z)
    z = np.divide(d - mean, se, out=np.full_like(d, np.nan), where=se > 0)
    z = z[np.isfinite(z)]
    sd_z = float(z.std(ddof=1)) if len(z) > 1 else None
    component = float(np.sqrt(max(between**2 - within**2, 0.0)))
    held = float(np.mean(np.abs(d - mean) <= 1.96 * se))
    normal = NormalDist()
    expected = 2 * normal.cdf(1.96 / sd_z) - 1 if sd_z else 1.0
    lag1 = float(np.corrcoef(d[:-1], d[1:])[0, 1]) if len(d) > 2 else float("nan")
    return {
        "trials": len(d), "mean_diff_s": mean, "between_sd_s": between,
        "within_se_rms_s": within, "sd_z": sd_z, "run_to_run_s": component,
        "run_to_run_of_diff": component / abs(mean) if mean else None,
        "run_to_run_of_a": component / float(a.mean()),
        "lag1_autocorrelation": lag1, "ci_held_mean": held, "ci_expected_to_hold": expected,
    }  # fmt: skip


def describe(s: dict) -> str:
    us = 1e6
    sd_z = "undefined (no run had an SE)" if s["sd_z"] is None else f"{s['sd_z']:.2f}"
    share = (
        f" ({s['run_to_run_of_diff']:.2%} of it, " if s["run_to_run_of_diff"] is not None else " ("
    )
    return (
        f"{s['trials']} runs: difference {s['mean_diff_s'] * us:.2f} us; between runs sd "
        f"{s['between_sd_s'] * us:.2f} us against each run's SE {s['within_se_rms_s'] * us:.2f} us "
        f"(rms); sd(z) {sd_z}; run-to-run component {s['run_to_run_s'] * us:.2f} us"
        f"{share}{s['run_to_run_of_a']:.3%} of A's time); lag-1 autocorrelation "
        f"{s['lag1_autocorrelation']:.2f}; a run's 95% CI held the runs' mean in "
        f"{s['ci_held_mean']:.0%} of runs ({s['ci_expected_to_hold']:.0%} expected at that sd(z))"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--a", required=True, help="pipeline A (the base)")
    ap.add_argument("--b", required=True, help="pipeline B (compared with A: B less A)")
    ap.add_argument("--dim", action="append", default=[], type=parse_dim, metavar="NAME=VALUE")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--placements", type=int, default=22, help="slots per trial (at least 2)")
    ap.add_argument("--rounds", type=int, default=440, help="rounds per trial")
    ap.add_argument("--gap", type=float, default=0.0, help="seconds of sleep between trials")
    ap.add_argument("--recompile", action="store_true", help="compile again in every trial")
    ap.add_argument("--load", action="store_true", help="keep one core busy throughout")
    ap.add_argument("--pin", choices=("off", "on", "alternate"), default="off",
                    help="the timing process on the last CPU, the loader on the others")  # fmt: skip
    ap.add_argument("-L", "--load-pass-plugin", dest="plugin", action="append", default=[])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="append the record (JSON Lines)")
    args = ap.parse_args(argv)
    return run_main("run_to_run", lambda: measure(args))


def measure(args: argparse.Namespace) -> int:
    if args.placements < 2 or args.trials < 3 or args.rounds < args.placements:
        raise IrkitError("--placements >= 2, --trials >= 3 and --rounds >= --placements are needed")  # fmt: skip
    if args.out:
        check_output(args.out, [args.model], "--out", "json")
    load_plugins(args.plugin)
    dims = dict(args.dim)
    graph = load(Path(args.model), dims)
    backend, _ = get_backend(args.backend)
    case = reference_case(graph, args.seed)

    def compiled() -> dict:
        return {k: irkit.compile(graph, spec, backend.name) for k, spec in (("a", args.a), ("b", args.b))}  # fmt: skip

    fingerprint = host_fingerprint()  # at the start: the code measured, not a later commit
    exes = compiled()
    loader = None
    if args.load:
        loader = multiprocessing.Process(target=spin_forever, daemon=True)
        loader.start()
    trials = []
    every = sorted(os.sched_getaffinity(0))
    timed_cpu, others = every[-1:], every[:-1] or every
    try:
        for i in range(args.trials):
            if i and args.gap:
                time.sleep(args.gap)
            if i and args.recompile:
                exes = compiled()
            pinned = args.pin == "on" or (args.pin == "alternate" and i % 2 == 0)
            os.sched_setaffinity(0, timed_cpu if pinned else every)
            if loader is not None:
                os.sched_setaffinity(loader.pid, others if pinned else every)
            row = trial(backend, exes, graph, case, args.placements, args.rounds, args.seed + i)
            trials.append({**row, "at": time.time(), "load": load_average(), "pinned": pinned})
            print(f"trial {i}: B-A {row['diff_s'] * 1e6:.2f} us, SE {row['se_s'] * 1e6:.2f} us, "
                  f"A {row['a_s'] * 1e6:.1f} us{' (pinned)' if pinned else ''}", flush=True)  # fmt: skip
    finally:
        os.sched_setaffinity(0, every)
        if loader is not None:
            loader.terminate()
    summary = summarize(trials)
    print(describe(summary))
    groups = {}
    if args.pin == "alternate":
        for name, flag in (("pinned", True), ("unpinned", False)):
            groups[name] = summarize([t for t in trials if t["pinned"] == flag])
            print(f"{name}: {describe(groups[name])}")
    record = {
        "kind": "irkit.run_to_run", "model": args.model, "dims": dims, "backend": backend.name,
        "a": args.a, "b": args.b, "placements": args.placements, "rounds": args.rounds,
        "gap_s": args.gap, "recompile": args.recompile, "loaded": args.load,
        "pin": args.pin, "pinned_cpu": timed_cpu, "groups": groups,
        "git_sha": fingerprint.get("git_sha"), "summary": summary, "trials": trials,
        "fingerprint": fingerprint,
        "method": "each trial: both programs bound as `placements` slots (one set of inputs and "
                  "outputs a slot where the backend can), `rounds` rounds, slot r mod placements, "
                  "the two in random order; a trial's difference is the mean of its slots' median "
                  "differences, its SE the slots' sd / sqrt(placements); z = (difference - mean "
                  "over trials) / SE",
    }  # fmt: skip
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
