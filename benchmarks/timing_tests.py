"""The timing tests: the ones that assert a wall-clock outcome, run apart from the default suite.

    python benchmarks/timing_tests.py [--repeat N] [--out benchmarks/results/timing_tests.jsonl]

The default `pytest -q` deselects tests marked `timing` (a planted effect recovered by every
attribution strategy, A/A pairs not significant at the stated rate, a real difference found,
`compare` flagging a planted regression): their outcome depends on the machine's load, and a
loaded CI machine once failed two of them. Here they run `--repeat` times each, in a fresh
pytest process per repetition, and every outcome is recorded with the machine's load before
and after and its fingerprint, so a failure is read against the conditions it happened in
rather than hidden.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from irkit.measure.fingerprint import host_fingerprint

ROOT = Path(__file__).resolve().parent.parent


def run_once(junit: Path) -> list[dict]:
    """One `pytest -m timing` run; each test's outcome and duration from its JUnit XML."""
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-o", "addopts=", "-p", "no:benchmark", "-m", "timing", "-p", "no:cacheprovider",
         f"--junitxml={junit}"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    outcomes = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped") is not None
        outcome = "failed" if failed else "skipped" if skipped else "passed"
        outcomes.append({"test": f"{case.get('classname')}::{case.get('name')}",
                         "outcome": outcome, "seconds": float(case.get("time", 0))})  # fmt: skip
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs of the whole set (default 1)")
    parser.add_argument("--out", default=None, help="append one JSON Lines record per run")
    args = parser.parse_args()
    tally: dict[str, list[str]] = {}
    for n in range(args.repeat):
        load_before = os.getloadavg()
        start = time.time()
        with tempfile.TemporaryDirectory() as tmp:
            outcomes = run_once(Path(tmp) / "junit.xml")
        rec = {"kind": "irkit.timing_tests", "run": n, "seconds": time.time() - start,
               "load_before": load_before, "load_after": os.getloadavg(),
               "outcomes": outcomes, "fingerprint": host_fingerprint()}  # fmt: skip
        for o in outcomes:
            tally.setdefault(o["test"], []).append(o["outcome"])
        failed = [o["test"] for o in outcomes if o["outcome"] == "failed"]
        print(f"run {n}: {len(outcomes) - len(failed)}/{len(outcomes)} passed in "
              f"{rec['seconds']:.0f} s; 1-min load {load_before[0]:.1f} -> "
              f"{rec['load_after'][0]:.1f}" + (f"; failed: {', '.join(failed)}" if failed else ""))  # fmt: skip
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
    for test, results in sorted(tally.items()):
        print(f"  {results.count('passed')}/{len(results)} passed  {test}")
    return 0 if all(r == "passed" for rs in tally.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
