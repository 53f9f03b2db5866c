"""irkit-bench nightly: measure a coverage set at this commit, keep it, triage what moved.

irkit-bench nightly CONFIG [--db URL] [--no-rerun] [--executor local|ray|slurm]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from irkit.cli.bench.history import add_rerun_options
from irkit.cli.bench.options import executor_options


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "nightly",
        help="run a coverage set (a TOML file) at this commit, keep the records, detect "
        "change points and rerun them (exit 1 while a confirmed regression is open)",
    )
    p.add_argument("config", metavar="CONFIG", help="the coverage set (docs/history.md)")
    p.add_argument("--db", default=None, help="the history database (default: the CONFIG's db)")
    p.add_argument(
        "--no-rerun",
        dest="rerun",
        action="store_false",
        help="detect only: leave suspected changes undecided",
    )
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="run from work trees with uncommitted changes (their records are not rerun)",
    )
    add_rerun_options(p, nightly=True)
    executor_options(p)
    return p


def run(args) -> int:
    from rich.console import Console

    from irkit.cli.bench.history import detect
    from irkit.errors import IrkitError
    from irkit.measure.executors import get_executor
    from irkit.measure.fingerprint import plugin_repos, repo_commit
    from irkit.measure.history import History
    from irkit.measure.nightly import read_config, run_job
    from irkit.measure.records import append_record, check_appendable, read_records
    from irkit.measure.triage import check_clean, repos_for
    from irkit.plugins import load_plugins

    console = Console(width=None if sys.stdout.isatty() else 160, record=True)
    config = read_config(args.config, args.db)
    load_plugins(config.plugins)
    built = {"irkit": repo_commit(repos_for(["irkit"], config.repos)["irkit"]), **plugin_repos()}
    if not args.allow_dirty:
        check_clean(repos_for([n for n in built if n != "irkit"] + ["irkit"], config.repos))
    tag = "-".join(str(c or "unknown")[:10] for c in built.values())
    out = config.results / f"{tag}.jsonl"
    config.results.mkdir(parents=True, exist_ok=True)
    check_appendable(out)
    args.repo = [*config.repos.items(), *args.repo]
    args.rerun_budget = args.rerun_budget or config.rerun_budget
    args.min_change = args.min_change or config.min_change
    with History.open(config.db) as history:
        done = {r.get("nightly_key") for r in read_records(out)} if out.exists() else set()
        pending = [j for j in config.jobs if j.key() not in done]
        console.print(
            f"nightly at {' '.join(f'{Path(n).name}@{str(c)[:10]}' for n, c in built.items())}: "
            f"{len(pending)} of {len(config.jobs)} job(s) to run -> {out}",
            highlight=False,
        )
        executor = get_executor(
            args.executor, out, args.ray_address, args.slurm_partition, args.slurm_cluster
        )
        failed = 0
        for job, (tag_, record) in executor.map(run_job, pending):
            append_record(out, record)
            if tag_ != "ok" or not record.get("correct", False):
                failed += 1
                why = record.get("error") or "a wrong result"
                console.print(f"  {job.key()}: failed: {why}", style="red", highlight=False)
                continue
            history.add(record, str(out))
            seconds = ((record.get("graph") or {}).get("seconds") or {}).get("median")
            shown = f"{seconds * 1e3:.3f} ms" if seconds else "no time"
            console.print(f"  {job.key()}: {shown}", highlight=False)
        status = detect(console, history, args)
    triage = config.results / f"triage-{tag}.txt"
    triage.write_text(console.export_text())
    console.print(f"triage list: {triage}", style="dim", highlight=False)
    if failed:
        raise IrkitError(f"{failed} job(s) failed (their records are in {out})")
    return status
