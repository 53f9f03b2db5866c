"""irkit-bench compare: exit 1 when NEW significantly regresses from BASE."""

from __future__ import annotations

import argparse
import sys

from irkit.cli.common import (
    positive_float,
)


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("compare", help="exit 1 when NEW significantly regresses from BASE")
    p.add_argument("base")
    p.add_argument("new")
    p.add_argument(
        "--threshold",
        type=positive_float,
        default=0.05,
        help="smallest relative slowdown reported (default 0.05; never below "
        "either run's A/A noise floor)",
    )
    return p


def run(args) -> int:
    from rich.console import Console

    from irkit.measure.compare import compare_files

    console = Console(width=None if sys.stdout.isatty() else 160)
    verdicts, unmatched = compare_files(args.base, args.new, args.threshold)
    for v in verdicts:
        console.print(v.describe(), style="bold red" if v.regression else None, highlight=False)
    for key in unmatched:
        console.print(f"{key}: in one file only, not compared", style="dim", highlight=False)
    if not verdicts:
        from irkit.errors import IrkitError

        raise IrkitError(f"no workload appears in both {args.base} and {args.new}")
    regressions = [v for v in verdicts if v.regression]
    console.print(f"{len(regressions)} significant regression(s) in {len(verdicts)} workload(s)")
    return 1 if regressions else 0
