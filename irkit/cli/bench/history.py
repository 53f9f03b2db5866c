"""irkit-bench history: keep results over commits (`irkit.measure.history`).

irkit-bench history add RECORDS... [--db irkit-history.db]
irkit-bench history series [--db ...] [--workload W]
irkit-bench history show SERIES [--db ...]
irkit-bench history detect [--db ...] [--rerun [--repo NAME=PATH]] [--all]
irkit-bench history bisect --repo PATH GOOD BAD MODEL [-p PIPELINE] [--dim N=V]
"""

from __future__ import annotations

import argparse
import os
import sys

from irkit.cli.common import parse_dim, positive_float

DEFAULT_DB = "irkit-history.db"


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("history", help="keep results over commits: add records, list series")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    db_help = (
        f"the database: a SQLite file (default $IRKIT_HISTORY, else {DEFAULT_DB} here; created "
        "where missing), or a PostgreSQL URL (postgresql://user@host/db)"
    )
    add = actions.add_parser("add", help="keep records (JSONL or JSON files irkit wrote)")
    add.add_argument("records", nargs="+", help="results files: run, attribute, suite, benchmarks")
    listing = actions.add_parser("series", help="list the series and their last points")
    listing.add_argument("--workload", help="only this workload's series")
    detect = actions.add_parser(
        "detect",
        help="change points in every time series, confirmed or refuted by reruns: the "
        "triage list (exit 1 while a confirmed regression is open)",
    )
    detect.add_argument("--workload", help="only this workload's series")
    add_rerun_options(detect)
    detect.add_argument(
        "--all", action="store_true", help="list refuted changes too (hidden by default)"
    )
    bisect = actions.add_parser(
        "bisect",
        help="the commit of a repository (irkit's, or one of plugins) that made a workload "
        "slower, then the pass and the kernels",
    )
    bisect.add_argument(
        "--repo", required=True, help="the git repository whose commits are searched"
    )
    bisect.add_argument("good", metavar="GOOD", help="a commit where the workload is not slow")
    bisect.add_argument("bad", metavar="BAD", help="a later commit where it is")
    bisect.add_argument(
        "model",
        metavar="MODEL",
        help="the workload's model (a path in the repository is read from each commit's checkout)",
    )
    bisect.add_argument("-p", "--passes", default=None, metavar="PIPELINE")
    bisect.add_argument("--backend", default="cpu", help="the backend (default cpu)")
    bisect.add_argument("--dim", action="append", default=[], type=parse_dim, metavar="N=V")
    bisect.add_argument(
        "-L",
        "--plugin",
        action="append",
        default=argparse.SUPPRESS,
        metavar="MODULE_OR_FILE",
        help="a plugin the workload needs (a file in the repository is taken from each "
        "commit's checkout)",
    )
    bisect.add_argument(
        "--threshold",
        type=positive_float,
        default=0.03,
        help="the smallest slowdown of BAD against GOOD searched for (default 0.03)",
    )
    bisect.add_argument(
        "--budget",
        type=positive_float,
        default=30.0,
        help="seconds of timing per paired test at most (default 30)",
    )
    show = actions.add_parser("show", help="one series' points, oldest first")
    show.add_argument("series", type=int, help="a series' number (from `history series`)")
    for q in (add, listing, detect, show, bisect):
        q.add_argument("--db", default=os.environ.get("IRKIT_HISTORY", DEFAULT_DB), help=db_help)
    return p


def add_rerun_options(p: argparse.ArgumentParser, nightly: bool = False) -> None:
    """The rerun rules' options (history detect; nightly, whose defaults are its file's)."""
    if not nightly:
        p.add_argument(
            "--rerun",
            action="store_true",
            help="rerun each suspected change: build both revisions (git worktrees) and time "
            "them interleaved until a paired test decides; the verdict is kept",
        )
    p.add_argument(
        "--repo",
        action="append",
        default=[],
        type=_named_path,
        metavar="NAME=PATH",
        help="where a repository of the records is (irkit=PATH; a plugin by its path); "
        "default: irkit's own checkout, and each plugin's own repository",
    )
    p.add_argument(
        "--rerun-budget",
        type=positive_float,
        default=None if nightly else 30.0,
        help="seconds of timing per rerun at most, then undecided (default 30)",
    )
    p.add_argument(
        "--min-change",
        type=positive_float,
        default=None if nightly else 0.02,
        help="the smallest relative change confirmed (or the series' A/A floor where "
        "larger; default 0.02)",
    )


def _named_path(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {text!r}")
    return name, path


def add_db_option(p: argparse.ArgumentParser) -> None:
    """`--db URL` on a command that writes records: keep them in a history database too."""
    p.add_argument(
        "--db",
        default=None,
        metavar="URL",
        help="also keep the record(s) in this history database (a SQLite file, or "
        "postgresql://...; irkit-bench history)",
    )


def check_db(url: str | None) -> None:
    """Open (and so create or migrate) the database before any work, so that a bad --db
    stops the command at once, not after the measurement."""
    if url is not None:
        from irkit.measure.history import History

        with History.open(url):
            pass


def keep(url: str | None, records: list[dict], source: str, console) -> None:
    """Keep `records` in the history database at `url` (nothing without one)."""
    if url is None:
        return
    from irkit.measure.history import History

    with History.open(url) as history:
        added = history.add_all((r, source) for r in records)
    console.print(
        f"history: {added.records} record(s), {added.points} point(s) kept in {history.where}",
        style="dim",
        highlight=False,
    )


def run(args) -> int:
    from rich.console import Console

    from irkit.measure.history import History
    from irkit.measure.records import numbered_records

    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.action == "add":  # every record read and checked before the database is touched
        files = {p: [(r, f"{p}:{n}") for n, r in numbered_records(p)] for p in args.records}
        for records in files.values():
            for record, source in records:
                History.check(record, source)
    if args.action == "bisect":  # builds commits, keeps nothing
        return _bisect(console, args)
    with History.open(args.db) as history:
        if args.action == "add":
            return _add(console, history, files)
        if args.action == "series":
            return _series(console, history, args.workload)
        if args.action == "detect":
            return detect(console, history, args)
        return _show(console, history, args.series)


def _add(console, history, files: dict[str, list[tuple[dict, str]]]) -> int:
    for path, records in files.items():
        added = history.add_all(records)
        console.print(
            f"{path}: {added.records} record(s) kept, {added.points} point(s); "
            f"{added.skipped} skipped (kept before, or no measurements)",
            highlight=False,
        )
    console.print(f"history: {history.where}", style="dim", highlight=False)
    return 0


def _series(console, history, workload: str | None) -> int:
    from rich.table import Table

    table = Table(title=f"series in {history.where}")
    for column in ("#", "workload", "pipeline on backend", "metric", "points", "last", "95% CI"):
        table.add_column(
            column,
            justify="right" if column in ("#", "points") else "left",
            no_wrap=column in ("#", "metric"),
        )
    table.add_column("commit")
    for s in history.series():
        if workload is not None and s.workload != workload:
            continue
        points = history.points(s.id)
        last = points[-1]
        ci = f"[{last.ci_low:.4g}, {last.ci_high:.4g}]" if last.ci_low is not None else ""
        dims = ",".join(f"{k}={v}" for k, v in sorted(s.dims.items()))
        table.add_row(
            str(s.id),
            s.workload + (f"[{dims}]" if dims else ""),
            f"{s.pipeline} on {s.backend}",
            f"{s.metric} {s.kernel}".strip(),
            str(len(points)),
            f"{last.value:.4g}",
            ci,
            (last.commit or "?")[:10],
        )
    console.print(table)
    return 0


def detect(console, history, args, workload: str | None = None) -> int:
    """The triage list, after the rerun rules where asked (`args.rerun`); 1 while a
    confirmed regression is open, else 0."""
    from irkit.measure.triage import open_regressions, rerun, triage

    suspects = triage(history, workload or getattr(args, "workload", None), args.min_change)
    if args.rerun:
        suspects = rerun(
            history,
            suspects,
            dict(args.repo),
            args.rerun_budget,
            say=lambda line: console.print(line, style="dim", highlight=False),
        )
    still_open = open_regressions(suspects)
    refuted = [s for s in suspects if s.status == "refuted"]
    shown = suspects if getattr(args, "all", False) else [s for s in suspects if s not in refuted]
    for s in shown:
        style = "bold red" if s in still_open else ("red" if s.slower else None)
        if s.status == "refuted":
            style = "dim"
        console.print(
            f"#{s.series.id} {s.series.label}: {s.describe()}", style=style, highlight=False
        )
    counts = {
        k: sum(s.status == k for s in suspects)
        for k in ("confirmed", "refuted", "undecided", "suspected")
    }
    console.print(
        f"{len(suspects)} change point(s): {counts['confirmed']} confirmed, "
        f"{counts['refuted']} refuted{' (not listed)' if refuted and len(shown) < len(suspects) else ''}, "
        f"{counts['undecided']} undecided, {counts['suspected']} suspected (not rerun); "
        f"{len(still_open)} open regression(s)",
        highlight=False,
    )
    return 1 if still_open else 0


def _bisect(console, args) -> int:
    from irkit.measure.culprits import bisect_commits
    from irkit.measure.revisions import Repo, Workload

    repo = Repo.at(args.repo)
    workload = Workload(
        args.model, dict(args.dim), args.passes, args.backend, 0, tuple(args.plugin)
    )
    result = bisect_commits(
        repo,
        args.good,
        args.bad,
        workload,
        args.threshold,
        args.budget,
        progress=lambda line: console.print(line, style="dim", highlight=False),
    )
    console.print(result.summary(), highlight=False)
    if result.pass_change is not None and result.pass_change.diff:
        lines = result.pass_change.diff.splitlines()
        console.print("\n".join(lines[:80]), highlight=False, markup=False)
        if len(lines) > 80:
            console.print(f"... {len(lines) - 80} more lines of the IR diff", style="dim")
    if result.first_bad is not None:
        return 1  # a regression, and the commit that made it (as `bisect` exits 1 on a culprit)
    return 2 if result.overall.verdict == "undecided" or result.range_left else 0


def _show(console, history, series_id: int) -> int:
    from rich.table import Table

    from irkit.errors import IrkitError

    found = [s for s in history.series() if s.id == series_id]
    if not found:
        raise IrkitError(f"no series {series_id} in {history.where} (irkit-bench history series)")
    table = Table(title=found[0].label)
    for column in ("recorded", "commit", "value", "95% CI", "n", "A/A floor"):
        table.add_column(column)
    for p in history.points(series_id):
        ci = f"[{p.ci_low:.4g}, {p.ci_high:.4g}]" if p.ci_low is not None else ""
        floor = f"{p.floor:.2%}" if p.floor is not None else ""
        table.add_row(
            p.recorded_at or "?",
            (p.commit or "?")[:10],
            f"{p.value:.4g}",
            ci,
            str(p.n or ""),
            floor,
        )
    console.print(table)
    return 0
