"""irkit-bench report: a self-contained HTML report of results."""

from __future__ import annotations

import argparse

from irkit.cli.common import (
    check_output,
    write_output,
)


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("report", help="write a self-contained HTML report of results")
    p.add_argument("results", help="a results .jsonl (or one attribute --json record)")
    p.add_argument("-o", "--output", default="report.html")
    return p


def run(args) -> int:
    from irkit.measure.report import render_report

    check_output(args.output, [args.results], "-o", "html")
    page, n = render_report(args.results)
    write_output(args.output, page, [args.results], "-o", "html")
    print(f"{args.output}: {n} workload(s)")
    return 0
