"""irkit-bench history: keep results over commits (`irkit.measure.history`).

irkit-bench history add RECORDS... [--db irkit-history.db]
irkit-bench history series [--db ...] [--workload W]
irkit-bench history show SERIES [--db ...]
"""

from __future__ import annotations

import argparse
import os
import sys

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
        "detect", help="change points in every time series: the triage list (suspected)"
    )
    detect.add_argument("--workload", help="only this workload's series")
    show = actions.add_parser("show", help="one series' points, oldest first")
    show.add_argument("series", type=int, help="a series' number (from `history series`)")
    for q in (add, listing, detect, show):
        q.add_argument("--db", default=os.environ.get("IRKIT_HISTORY", DEFAULT_DB), help=db_help)
    return p


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
    with History.open(args.db) as history:
        if args.action == "add":
            return _add(console, history, files)
        if args.action == "series":
            return _series(console, history, args.workload)
        if args.action == "detect":
            return _detect(console, history, args.workload)
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


def _detect(console, history, workload: str | None) -> int:
    """The triage list: each change point, suspected until a rerun confirms it (reruns are
    not built yet, so none is confirmed and the exit status is 0)."""
    from irkit.measure.history import triage

    found = triage(history, workload)
    for series, change in found:
        console.print(
            f"#{series.id} {series.label}: {change.describe()}; suspected",
            style="bold red" if change.slower else None,
            highlight=False,
        )
    slower = sum(change.slower for _, change in found)
    console.print(
        f"{len(found)} change point(s), {slower} of them slower; suspected, not yet "
        "confirmed by a rerun",
        highlight=False,
    )
    return 0


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
