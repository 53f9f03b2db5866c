"""The pass-impact suite: every workload attributed to the optional passes of the
backend's default pipeline, appended to a JSON Lines file (resumable), then reported.

    python benchmarks/pass_impact.py [--quick] [--backend cpu|cuda] [--out FILE]

is `irkit-bench suite` with this repository's results file as the default output,
followed by `irkit-bench report`. Curated runs are committed under benchmarks/results/
with their fingerprint (inside every record).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from irkit.cli.bench import main as bench

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--out", default=None)
    parser.add_argument("--budget", default=None)
    args = parser.parse_args()
    out = args.out or str(
        RESULTS / f"pass_impact_{'quick_' if args.quick else ''}{args.backend}.jsonl"
    )
    argv = ["suite", "--backend", args.backend, "--out", out]
    argv += ["--quick"] if args.quick else []
    argv += ["--budget", args.budget] if args.budget else []
    code = bench(argv)
    if code == 0:
        code = bench(["report", out, "-o", str(Path(out).with_suffix(".html"))])
    return code


if __name__ == "__main__":
    sys.exit(main())
