"""irkit-bench suite: the pass-impact suite: attribution jobs, resumable, crash-isolated."""

from __future__ import annotations

import argparse
import sys
from functools import partial

from irkit.cli.bench.history import add_db_option, check_db, keep
from irkit.cli.bench.options import (
    BACKEND_HELP,
    executor_options,
)
from irkit.cli.common import (
    check_writable,
    fraction,
    positive_float,
    same_file,
    seed,
)
from irkit.cli.views import fmt_signed, fmt_time


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("suite", help="run the pass-impact suite (resumable)")
    p.add_argument("--quick", action="store_true", help="small sizes, short budgets: a smoke run")
    p.add_argument(
        "-p",
        "--passes",
        default=None,
        metavar="PIPELINE",
        help="pipeline to attribute (default: the backend's own)",
    )
    p.add_argument(
        "--backend",
        default="auto",
        help=BACKEND_HELP,
    )
    p.add_argument("--out", default="results.jsonl", help="JSON Lines results (appended)")
    add_db_option(p)
    p.add_argument("--precision", type=fraction, default=0.01)
    p.add_argument(
        "--budget",
        type=positive_float,
        default=None,
        help="seconds of sampling per job (default 20, or 2 with --quick)",
    )
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument(
        "--jobs",
        default=None,
        metavar="FILE",
        help="JSON Lines jobs ({workload, model, dims?, strategy?, pipeline?} each) "
        "instead of the built-in workloads",
    )
    p.add_argument(
        "--job-timeout",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help="a job's deadline (default 30 x budget + 300 s)",
    )
    p.add_argument(
        "--retry-failed",
        action="store_true",
        help="run again the jobs whose failure is recorded (default: skip them)",
    )
    executor_options(p)
    p.add_argument(
        "--in-process",
        action="store_true",
        help="run jobs in this process (no crash isolation; for debugging)",
    )
    return p


def run(args) -> int:
    if args.budget is None:
        args.budget = 2.0 if args.quick else 20.0
    from pathlib import Path

    from rich.console import Console

    from irkit.measure.suite import (
        FULL,
        QUICK,
        SuiteOptions,
        read_jobs,
        run_isolated,
        run_job,
        run_suite,
    )
    from irkit.pipelines import parse_passes
    from irkit.runtime import get_backend

    console = Console(width=None if sys.stdout.isatty() else 160)
    backend, why = get_backend(args.backend)
    pipeline = args.passes or backend.default_pipeline
    parse_passes(pipeline)  # a bad pipeline or option stops the suite before any job
    jobs = read_jobs(args.jobs) if args.jobs else QUICK if args.quick else FULL
    for job in jobs:
        if job.pipeline:
            parse_passes(job.pipeline)
    out = Path(args.out)
    check_writable(out, "--out")
    check_db(args.db)
    if args.jobs and same_file(out, args.jobs):
        from irkit.errors import IrkitError

        raise IrkitError("--out names the --jobs file; refusing to append results to it", str(out))
    console.print(
        f"suite: {len(jobs)} {'quick ' if args.quick else ''}jobs, pipeline {pipeline}, "
        f"backend {why}; results appended to {out}",
        highlight=False,
    )
    console.print(
        "GPU peers (cuBLAS, PyTorch eager, torch.compile) are not in the suite; "
        "benchmarks/gpu_targets.py measures them",
        style="dim",
    )

    options = SuiteOptions(
        pipeline, backend.name, args.precision, args.budget, args.seed, timeout_s=args.job_timeout
    )
    from irkit.measure.executors import get_executor

    executor = get_executor(
        args.executor, out, args.ray_address, args.slurm_partition, args.slurm_cluster
    )
    if args.in_process:
        if args.executor != "local":
            from irkit.errors import IrkitError

            raise IrkitError("--in-process runs jobs in this process; it needs --executor local")
        runner = partial(run_job, options=options)
    else:
        runner = partial(run_isolated, options=options)
        console.print(
            f"each job in its own worker process (deadline {options.deadline():g} s), "
            f"executor {args.executor}; a crash or a hang is a failure record, and "
            "the suite goes on",
            style="dim",
        )
    failed = 0
    for job, record, status in run_suite(
        out, jobs, runner, backend.name, pipeline, args.retry_failed, executor
    ):
        if record is None:
            failed += status.startswith("failed")
            style = "dim" if status.startswith("skipped") else "bold red"
            console.print(f"  {job.workload}: {status}", style=style, highlight=False)
            continue
        console.print(_job_line(job.workload, record), highlight=False)
        keep(args.db, [record], str(out), console)
    return 1 if failed else 0


def _job_line(workload: str, record: dict) -> str:
    """One finished job: its two ends, the speedup's CI, and what each pass saved."""
    t = record["total"]
    changed = [p for p in record["passes"] if p["changes_code"]]
    passes = (
        "; ".join(
            f"{p['pass']} {fmt_signed(p['saved_s']['value'])}"
            f"{'' if p['significant'] else ' (not significant)'}"
            for p in changed
        )
        or "no optional pass changed the code"
    )
    return (
        f"  {workload}: {fmt_time(t['baseline_s']['median'])} -> "
        f"{fmt_time(t['full_s']['median'])} ({t['speedup']['value']:.3f}x "
        f"[{t['speedup']['ci_low']:.3f}, {t['speedup']['ci_high']:.3f}]); {passes}; "
        f"{record['suite_seconds']:.0f} s"
    )
