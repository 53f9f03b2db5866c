"""irkit-bench attribute: what each optional pass of a pipeline buys, with CIs (on several backends at once)."""

from __future__ import annotations

import argparse
import sys

from irkit.cli.bench.history import add_db_option, check_db, keep
from irkit.cli.bench.options import (
    DEFAULT_MODEL,
    cpu_list,
    default_model,
    measure_options,
    progress,
    write_json,
)
from irkit.cli.common import (
    bounded_int,
    check_output,
    nonnegative_float,
    positive_float,
)


def _plan_options(p: argparse.ArgumentParser) -> None:
    """What is attributed: the strategy, option steps, Shapley's sampled orders."""
    p.add_argument("--strategy", default="shapley", choices=("prefix", "ablation", "shapley"))
    p.add_argument(
        "--step",
        action="append",
        default=[],
        metavar="PASS{OPTION=VALUE}",
        help="an option change of a pass of the pipeline, attributed as a step after the pass "
        "and the changes before it (repeatable, cumulative: 'gpu-tile-matmul{wgmma=true}' "
        "then 'gpu-tile-matmul{tma=true}'; with --strategy prefix)",
    )
    p.add_argument(
        "--permutations",
        type=bounded_int(1, 100_000),
        default=16,
        help="sampled orders for shapley beyond 8 passes that change code, in antithetic "
        "pairs, their sampling inside the CIs (default 16)",
    )


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "attribute", help="measure what each optional pass of a pipeline buys, with CIs"
    )
    p.add_argument(
        "file",
        nargs="?",
        default=None,
        help=f"a .graph, .mlir or .onnx model (default: the embedded {DEFAULT_MODEL})",
    )
    measure_options(p, budget=30.0, several=True, dtype=True)
    _plan_options(p)
    p.add_argument("--json", default=None, metavar="OUT", help="write the record as JSON")
    add_db_option(p)
    p.add_argument(
        "--timer",
        default="launches",
        choices=("launches", "graph"),
        help="launches: the driver's launches as they run (default); graph: the "
        "driver captured once as a CUDA graph and replayed as one launch "
        "(microsecond kernels without the host's launch cost; --backend cuda)",
    )
    p.add_argument(
        "--placements",
        type=bounded_int(1, 64),
        default=None,
        help="copies of every distinct program, each linked and bound "
        "separately, the rounds rotating through them so their offsets are "
        "in the CIs (default: 200 copies in all, 32 to 4 per program: 32 "
        "for up to 6 programs, 16 for 12, 8 for 25, 4 from 50)",
    )
    p.add_argument(
        "--quiet-machine",
        type=positive_float,
        nargs="?",
        const=300.0,
        default=None,
        metavar="SECONDS",
        help="wait (at most SECONDS, default 300) until no other thread is "
        "runnable before measuring, and measure again (twice at most) when "
        "the record says the machine was loaded",
    )
    p.add_argument(
        "--pin",
        default=None,
        metavar="CPUS",
        type=cpu_list,
        help="pin this process (and the threads it starts) to these CPUs, e.g. 1 or 0,1; recorded",
    )
    p.add_argument(
        "--runs",
        type=bounded_int(1, 64),
        default=1,
        help="repeat the whole measurement this many times (each bound afresh, "
        "same inputs) and take every CI from the runs' spread (Student's "
        "t): what a run's state does to the comparison, which one run's CI "
        "cannot hold (default 1)",
    )
    p.add_argument(
        "--run-gap",
        type=nonnegative_float,
        default=0.0,
        metavar="SECONDS",
        help="seconds between runs, to spread them in time (default 0)",
    )
    p.add_argument(
        "--no-kernel-times",
        action="store_true",
        help="skip timing each kernel alone (a third of the budget); passes still "
        "list the kernels they removed and added",
    )
    return p


def run(args) -> int:
    if args.file is None:
        args.file = str(default_model())
    from rich.console import Console

    from irkit.cli.views import show_attribution, show_cross_backend

    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.json:
        check_output(args.json, [args.file], "--json", "json")
    check_db(args.db)
    if "," in args.backend:
        from argparse import Namespace

        from irkit.measure.cross import attribute_across, common_pipeline
        from irkit.pipelines import parse_passes

        backends = [b.strip() for b in args.backend.split(",")]
        pipelines = {b: args.passes for b in backends} if args.passes else common_pipeline(backends)
        for spec in pipelines.values():
            parse_passes(spec)

        def one(backend: str) -> dict:
            console.print(f"attributing on {backend} ...", style="dim", highlight=False)
            return attribute_file(
                Namespace(**{**vars(args), "backend": backend, "passes": pipelines[backend]}),
                args.file,
                dict(args.dim),
            )

        record = attribute_across(backends, one, pipelines)
        for r in record["records"]:
            show_attribution(console, r)
        show_cross_backend(console, record)
    else:
        record = attribute_file(args, args.file, dict(args.dim))
        show_attribution(console, record)
    keep(args.db, record.get("records", [record]), args.file, console)
    if args.json:
        write_json(args.json, record, args.file)
        console.print(f"record written to {args.json}", highlight=False)
    return 0


def attribute_file(args, model: str, dims: dict) -> dict:
    """Run one attribution with the command line's options; returns its record. With
    `--quiet-machine`, wait for a quiet host first and measure again (twice at most) while
    the record says the machine was loaded; every attempt's load is in the record. With
    `--runs N`, N such runs `--run-gap` seconds apart, combined (`irkit.measure.runs`; the
    kernels timed alone in the first only)."""
    import os

    from irkit.measure.runs import attribute_runs

    pinned = getattr(args, "pin", None)
    if pinned:
        os.sched_setaffinity(0, pinned)
    runs = getattr(args, "runs", 1)

    def one(i: int) -> dict:
        if runs > 1:
            print(f"run {i + 1} of {runs}", file=sys.stderr)
        record = _attribute_once(
            args, model, dims, kernel_times=not args.no_kernel_times and i == 0
        )
        record["protocol"]["pinned_cpus"] = sorted(pinned) if pinned else None
        return record

    return attribute_runs(one, runs, getattr(args, "run_gap", 0.0))


def _attribute_once(args, model: str, dims: dict, kernel_times: bool) -> dict:
    from irkit.measure.attribution import attribute
    from irkit.measure.fingerprint import wait_until_quiet

    quiet = getattr(args, "quiet_machine", None)
    attempts: list[dict] = []
    while True:
        waited = wait_until_quiet(quiet) if quiet is not None else None
        bar, tick = progress()
        with bar:
            record = attribute(
                model,
                args.passes,
                args.backend,
                args.strategy,
                dims,
                dtype=args.dtype,
                option_steps=tuple(args.step),
                precision=args.precision,
                budget_s=args.budget,
                seed=args.seed,
                permutations=args.permutations,
                progress=tick,
                kernel_times=kernel_times,
                timer=args.timer,
                placements=getattr(args, "placements", None),
            ).to_json()
        load = record["protocol"]["load"]
        attempts.append({"quiet_wait": waited, "loaded": load["loaded"]})
        if quiet is None or not load["loaded"] or len(attempts) == 3:
            break
        print(
            f"the machine was loaded while measuring (attempt {len(attempts)}); waiting for it to be quiet and measuring again",
            file=sys.stderr,
        )
    if quiet is not None:
        record["protocol"]["quiet_machine"] = {"max_wait_s": quiet, "attempts": attempts}
    return record
