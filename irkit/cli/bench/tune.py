"""irkit-bench tune: search pass options; a winner only with a CI over the default."""

from __future__ import annotations

import argparse
import sys

from irkit.cli.bench.options import (
    executor_options,
    measure_options,
    progress,
)
from irkit.cli.common import (
    bounded_int,
    check_output,
    write_output,
)
from irkit.cli.views import fmt_time


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("tune", help="search pass options; a winner only with a CI over the default")
    p.add_argument("file", help="a .graph, .mlir or .onnx model")
    p.add_argument(
        "--space",
        required=True,
        metavar="SPACE",
        help="pass options and the values to try, e.g. 'cpu-tile-matmul{mr=4,6,8;nr=32,48,64}'",
    )
    measure_options(p, budget=30.0, dtype=True)
    p.add_argument(
        "--placements",
        type=bounded_int(1, 64),
        default=8,
        help="slots the final race binds every program in, the rounds rotating "
        "through them (default 8; fewer where memory is short)",
    )
    p.add_argument("--json", default=None, metavar="OUT", help="write the record as JSON")
    p.add_argument(
        "--no-store", action="store_true", help="do not record the result in the tuning database"
    )
    executor_options(p)
    return p


def run(args) -> int:
    import json

    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.json:
        check_output(args.json, [args.file], "--json", "json")
    record = _tune(args, console)
    _show(console, args.file, record)
    if args.json:
        write_output(args.json, json.dumps(record, indent=2) + "\n", [args.file], "--json", "json")
    return 0


def _tune(args, console) -> dict:
    """The tuning record: measured here, or as one job on the chosen executor."""
    from pathlib import Path

    from irkit.measure.executors import get_executor
    from irkit.measure.tune import TuneJob, tune_job, tune_on

    job = TuneJob(args.file, args.space, args.passes, args.backend, dict(args.dim) or None,
                  args.precision, args.budget, args.seed, placements=args.placements,
                  dtype=args.dtype)  # fmt: skip
    if args.executor == "local":
        bar, tick = progress()
        with bar:
            return tune_job(job, store=not args.no_store, progress=tick).to_json()
    import tempfile

    # submitit's logs go beside the record, or to a temporary folder (not the cwd)
    where = Path(args.json) if args.json else Path(tempfile.mkdtemp(prefix="irkit-tune-")) / "tune.json"  # fmt: skip
    executor = get_executor(
        args.executor, where, args.ray_address, args.slurm_partition, args.slurm_cluster
    )
    console.print(f"tuning as one job on the {args.executor} executor ...", style="dim")
    return tune_on(executor, job, store=not args.no_store)


def _show(console, file: str, record: dict) -> None:
    """The candidates' table against the default, and the verdict."""
    from rich.table import Table

    p = record["protocol"]
    console.print(
        f"[bold]{file}[/]  pipeline: {record['base_pipeline']}  backend: "
        f"{record['backend']}; {p['candidates']} candidates, {p['programs']} distinct "
        f"programs ({p['wrong']} wrong, never timed), each checked against the float64 "
        f"reference; {p['search']}",
        highlight=False,
    )
    table = Table(title="candidates (distinct programs), time per call, 95% CI")
    for col in ("options", "median", "95% CI", "vs default"):
        table.add_column(col, justify="left" if col == "options" else "right")
    base = next(x for x in record["programs"] if x["is_default"])["seconds"]
    for prog in sorted(
        record["programs"], key=lambda x: (x["seconds"] or {}).get("median", float("inf"))
    ):
        label = "; ".join(", ".join(f"{k}={v}" for k, v in c.items()) for c in prog["choices"][:3])
        label += f" (+{len(prog['choices']) - 3} more)" if len(prog["choices"]) > 3 else ""
        if prog["wrong"]:
            table.add_row(label, "wrong", "", "not timed", style="red")
        elif prog["seconds"] is None:
            table.add_row(label, "", "", "dropped by halving", style="dim")
        else:
            sec = prog["seconds"]
            rel = f"{base['median'] / sec['median']:.3f}x" if base else ""
            table.add_row(
                label,
                fmt_time(sec["median"]),
                f"[{fmt_time(sec['ci_low'])}, {fmt_time(sec['ci_high'])}]",
                rel,
            )
    console.print(table)
    console.print(record["verdict"], style="bold" if record["declared"] else None, highlight=False)
    if record.get("database"):
        console.print(
            f"recorded in the tuning database: {record['database']} "
            "(irkit.compile(..., tuned=True) reads it)",
            style="dim",
            highlight=False,
        )
