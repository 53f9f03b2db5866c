"""Regression triage against the truth: how often `nightly` finds and confirms a planted 5%
change, and how often it confirms a change where there is none.

Each *history* is a repository of plugin passes (`irkit.measure.histories`) over COMMITS
commits; `irkit-bench nightly` runs at every commit in turn, as a CI job would, each into a
history database of its own (detection, then the rerun rules: both revisions built from
git worktrees and timed interleaved). A *planted* history has one commit at which the
pass's code makes the whole program 5% slower (or faster: the sign alternates), at a random
commit; an *A/A* history has none (its commits change notes only).

Scored on the whole program's series (`seconds`, not a kernel's), from the last night's
triage, and again over every time series of the workload (each kernel's too: a regression
confirmed in its kernel's series is found; a change confirmed in any series elsewhere is
false):
- detection: a planted history whose change is confirmed at its commit with its sign;
- found late or early: confirmed, with its sign, at another commit (a miss for the rate);
- false confirmation: a confirmed change in an A/A history, or one at a commit other than
  the planted one in a planted history.
Each rate with its Wilson 95% interval. `--load` runs the same with one core kept busy by
another process (a CI runner's neighbour). Goal (issue 67): detection >= 90%, false
confirmations <= 5%, also loaded.

    python benchmarks/history_detection.py --histories 10 [--load] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from irkit.measure.fingerprint import host_fingerprint  # noqa: E402
from irkit.measure.histories import (  # noqa: E402
    DIMS,
    MODEL,
    PIPELINE,
    coverage_config,
    plugin_history,
)
from irkit.measure.history import History  # noqa: E402
from irkit.measure.records import append_record  # noqa: E402
from irkit.measure.triage import triage  # noqa: E402

BASE_WORK = 20000


def calibrate(planted: float) -> int:
    """The WORK step that makes the program `planted` slower: from the program's time at
    BASE_WORK and the spin's cost per iteration, both timed in worker processes."""
    from irkit.measure.revisions import Checkouts, Side, Workload

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "passes"
        plugin_history(root, [BASE_WORK, BASE_WORK + 20000])
        from irkit.measure.revisions import Repo

        repo = Repo.at(root)
        shas = repo.commits(repo.commit("HEAD~1"), "HEAD")
        workload = Workload(str(MODEL), DIMS, PIPELINE, "cpu", 0, (str(root / "passes.py"),))
        with Checkouts() as trees:  # both sides alive, asked in turn: the machine's drift cancels
            with (
                Side.start(trees, {repo: repo.commit("HEAD~1")}, workload) as base,
                Side.start(trees, {repo: shas[-1]}, workload) as more,
            ):
                pairs = [(base.sample(), more.sample()) for _ in range(60)]
    times = [sorted(p[0] for p in pairs)[30], sorted(p[1] for p in pairs)[30]]
    per_iteration = (times[1] - times[0]) / 20000
    return max(1, round(planted * times[0] / per_iteration))


def one_history(base: Path, works: list[int], budget: float) -> dict:
    """Nightly at each commit of a history with these WORKs; the last night's triage of the
    whole program's series."""
    root = base / "passes"
    shas = plugin_history(root, works)
    config = coverage_config(root, base / "history.db", base / "nightly", budget)
    codes = []
    for sha in shas:
        subprocess.run(["git", "-C", str(root), "checkout", "-q", sha], check=True)
        done = subprocess.run(
            [sys.executable, "-m", "irkit.cli.bench", "nightly", str(config), "--allow-dirty"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        if done.returncode not in (0, 1):
            raise RuntimeError(done.stderr.strip()[-500:])
        codes.append(done.returncode)
    plugin = str(root / "passes.py")
    with History.open(base / "history.db") as h:
        found = [s for s in triage(h) if s.series.metric == "seconds"]
    return {
        "codes": codes,
        "changes": [
            {
                "series": "whole program" if not s.series.kernel else s.series.kernel,
                "at": shas.index(s.after.repos[plugin])
                if s.after.repos.get(plugin) in shas
                else None,
                "slower": s.slower,
                "status": s.status,
                "detected": s.change.ratio,
                "rerun": s.verdict.ratio if s.verdict else None,
                "rerun_ci": [s.verdict.ci_low, s.verdict.ci_high] if s.verdict else None,
            }
            for s in found
        ],
    }


def score(trial: dict, whole_only: bool) -> tuple[bool, int]:
    """(the planted change confirmed at its commit with its sign; how many changes were
    confirmed elsewhere), over the whole program's series or every time series."""
    changes = [c for c in trial["changes"] if not whole_only or c["series"] == "whole program"]
    confirmed = [c for c in changes if c["status"] == "confirmed"]
    planted, at, slower = trial["planted"], trial["at"], trial["sign"] > 0
    hit = planted and any(c["at"] == at and c["slower"] == slower for c in confirmed)
    return hit, len([c for c in confirmed if not planted or c["at"] != at])


def wilson(k: int, n: int) -> list[float]:
    if n == 0:
        return [0.0, 1.0]
    z, p = 1.96, k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--histories", type=int, default=10, help="planted histories (and as many A/A)")
    ap.add_argument("--commits", type=int, default=12)
    ap.add_argument("--planted", type=float, default=0.05)
    ap.add_argument("--budget", type=float, default=0.3, help="each night's timing budget (s)")
    ap.add_argument("--load", action="store_true", help="keep one core busy meanwhile")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="append the summary record here (JSONL)")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    fingerprint = host_fingerprint()
    step = calibrate(args.planted)
    print(f"a {args.planted:.0%} change is WORK {BASE_WORK} -> +/-{step}", flush=True)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.load else None
    start = time.time()
    trials = []
    try:
        for i in range(2 * args.histories):
            planted = i % 2 == 0
            at = rng.randrange(4, args.commits - 2) if planted else None
            sign = 1 if (i // 2) % 2 == 0 else -1
            works = [
                BASE_WORK + (sign * step if at is not None and c >= at else 0)
                for c in range(args.commits)
            ]
            base = Path(tempfile.mkdtemp(prefix="irkit-history-bench-"))
            try:
                result = one_history(base, works, args.budget)
            finally:
                shutil.rmtree(base, ignore_errors=True)
            trial = {"planted": planted, "at": at, "sign": sign, **result}
            trial["hit"], trial["false_confirmations"] = score(trial, whole_only=True)
            trial["hit_any_series"], trial["false_any_series"] = score(trial, whole_only=False)
            trials.append(trial)
            what = (
                f"planted {'+' if sign > 0 else '-'}{args.planted:.0%} at {at}"
                if planted
                else "A/A"
            )
            print(
                f"history {i + 1}: {what}: {'found' if trial['hit'] else 'missed' if planted else 'none'} "
                f"(any series: {'found' if trial['hit_any_series'] else '-'}); "
                f"{trial['false_confirmations']} false confirmation(s) "
                f"({trial['false_any_series']} in any series); "
                f"{[(c['series'], c['at'], c['status']) for c in result['changes'] if c['status'] != 'refuted']}",
                flush=True,
            )
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    planted_trials = [t for t in trials if t["planted"]]
    hits = sum(t["hit"] for t in planted_trials)
    falsely = sum(t["false_confirmations"] > 0 for t in trials)
    any_hits = sum(t["hit_any_series"] for t in planted_trials)
    any_false = sum(t["false_any_series"] > 0 for t in trials)
    summary = {
        "kind": "irkit.benchmark",
        "benchmark": "history_detection",
        "planted": args.planted,
        "commits": args.commits,
        "budget_s": args.budget,
        "loaded": args.load,
        "detection": {
            "value": hits / len(planted_trials),
            "ci": wilson(hits, len(planted_trials)),
            "hits": hits,
            "histories": len(planted_trials),
            "scored_on": "the whole program's series",
        },
        "false_confirmation": {
            "value": falsely / len(trials),
            "ci": wilson(falsely, len(trials)),
            "histories_with_one": falsely,
            "histories": len(trials),
        },
        "any_series": {
            "detection": {"hits": any_hits, "ci": wilson(any_hits, len(planted_trials))},
            "false_confirmation": {
                "histories_with_one": any_false,
                "ci": wilson(any_false, len(trials)),
            },
        },
        "seconds": time.time() - start,
        "trials": trials,
        "fingerprint": fingerprint,
    }
    d, f = summary["detection"], summary["false_confirmation"]
    print(
        f"detection {d['value']:.0%} [{d['ci'][0]:.0%}, {d['ci'][1]:.0%}] ({hits}/{len(planted_trials)}); "
        f"histories with a false confirmation {f['value']:.0%} [{f['ci'][0]:.0%}, {f['ci'][1]:.0%}] "
        f"({falsely}/{len(trials)}); {'one core loaded' if args.load else 'quiet'}; {summary['seconds']:.0f} s"
    )
    if args.out:
        append_record(args.out, summary)
    print(
        f"in any time series of the workload (its kernels too): found {any_hits}/{len(planted_trials)}, "
        f"histories with a false confirmation {any_false}/{len(trials)}"
    )
    print(json.dumps({k: summary[k] for k in ("detection", "false_confirmation", "any_series")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
