"""irkit-bench run: compile, check against the reference, then time the graph and each kernel."""

from __future__ import annotations

import argparse
import sys

from irkit.cli.bench.history import add_db_option, check_db, keep
from irkit.cli.bench.options import (
    json_path,
    measure_options,
    write_json,
)
from irkit.cli.common import (
    check_output,
)
from irkit.cli.views import fmt_count, fmt_time


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("run", help="compile, check against the reference, then time each kernel")
    p.add_argument(
        "--tuned",
        action="store_true",
        help="use the tuning database's winner for this workload, pipeline and "
        "machine, where `tune` recorded one (the header says which)",
    )
    p.add_argument("file", help="a .graph or .mlir model")
    measure_options(p, budget=1.0, dtype=True)
    p.add_argument("--json", default=None, metavar="OUT", help="write the run's record as JSON")
    add_db_option(p)
    p.add_argument(
        "--counters",
        action="store_true",
        help="cuda: also read each kernel's achieved occupancy, DRAM throughput and "
        "L2 hit rate with Nsight Compute (ncu), in a separate run",
    )
    return p


def run(args) -> int:
    from rich.console import Console

    from irkit.measure.run import run_model

    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.json:
        check_output(args.json, [args.file], "--json", "json")
    check_db(args.db)
    result = run_model(
        args.file,
        args.passes,
        args.backend,
        dict(args.dim),
        args.seed,
        args.precision,
        args.budget,
        tuned=args.tuned,
        dtype=args.dtype,
    )
    console.print(
        f"[bold]{args.file}[/]{f' as {args.dtype}' if args.dtype else ''}  "
        f"pipeline: {result.pipeline or '(none)'}  backend: {result.selection}"
    )
    console.print(
        f"compiled in {result.compile_seconds:.2f} s; checked against the float64 reference (seed {args.seed}):"
    )
    for c in result.checks:
        console.print(f"  {c.describe()}", style=None if c.passed else "bold red", highlight=False)
    if args.counters and result.passed:
        _read_counters(args, result, console)
    if result.passed:
        keep(args.db, [result.to_json()], args.file, console)
    if args.json:
        path = json_path(args.json, result.passed)
        write_json(path, result.to_json(), args.file)
        if path != args.json:
            console.print(
                f"the failing run's record is in {path}; {args.json} is left as it was",
                highlight=False,
            )
    if not result.passed:
        console.print("[bold red]wrong result: not timed[/]")
        return 1
    _say_where_it_ran(console, result)
    console.print(_kernel_table(result))
    _show_totals(console, result)
    return 0


def _say_where_it_ran(console, result) -> None:
    """Whose times these are where no GPU ran them, and the device's copy bandwidth."""
    if result.backend == "cuda-sim":
        console.print(
            "[yellow]cuda-sim: the kernels ran in the lockstep interpreter on the CPU; "
            "the times below are the interpreter's, not a GPU's[/]"
        )
    elif result.backend == "cuda-host":
        console.print(
            "[yellow]cuda-host: the CUDA C ran on the host CPU, each block's threads as "
            "fibers; the times below are the host's, not a GPU's[/]"
        )
    if result.copy_bandwidth:
        copy_bw = result.copy_bandwidth
        what = ("device copy bandwidth (1 GiB device-to-device" if result.backend == "cuda"
                else "memory copy bandwidth (256 MiB, numpy")  # fmt: skip
        console.print(f"{what}, read + write): {copy_bw / 1e9:.0f} GB/s", highlight=False)


def _kernel_table(result):
    """Every kernel's time with its CI, rates and samples; the graph's (and its replay's)."""
    from rich.table import Table

    timer = result.kernels[0].timing.timer if result.kernels else "perf_counter_ns"
    copy_bw = result.copy_bandwidth
    warm = "" if timer.startswith("cuda") else ", warm caches"
    table = Table(title=f"per-call times: median [95% CI], {timer}{warm}")
    columns = ["kernel", "time", "95% CI", "GFLOP/s", "GB/s"]
    columns += ["% copy BW"] if copy_bw else []
    threads = [(k.record.launch or {}).get("threads") for k in result.kernels]
    threaded = any((t or 1) > 1 for t in threads)
    columns += ["threads"] if threaded else []
    columns += ["FLOPs", "min bytes", "samples", "stop"]
    for col in columns:
        table.add_column(
            col, justify="left" if col in ("kernel", "stopped by") else "right", no_wrap=True
        )
    for k, t in zip(result.kernels, threads, strict=True):
        e = k.timing.estimate
        fraction = result.copy_fraction(k)
        bw = [f"{100 * fraction:.1f}%"] if fraction is not None else []
        bw += [str(t or 1)] if threaded else []
        name = f"{k.record.name} (once per bind)" if k.record.once else k.record.name
        table.add_row(
            name,
            fmt_time(e.median),
            f"{fmt_time(e.low)}-{fmt_time(e.high)}",
            f"{k.gflops:.2f}",
            f"{k.gbps:.2f}",
            *bw,
            fmt_count(k.record.flops),
            fmt_count(k.record.min_bytes),
            f"{e.n}x{k.timing.reps}",
            k.timing.stop_reason,
        )
    g = result.graph
    assert g is not None
    total_flops = sum(k.record.flops for k in result.kernels if not k.record.once)
    table.add_section()
    table.add_row(
        "graph (driver, one call)",
        fmt_time(g.estimate.median),
        f"{fmt_time(g.estimate.low)}-{fmt_time(g.estimate.high)}",
        f"{total_flops / g.estimate.median / 1e9:.2f}",
        "",
        *([""] * (bool(copy_bw) + threaded)),
        fmt_count(total_flops),
        "",
        f"{g.estimate.n}x{g.reps}",
        g.stop_reason,
    )
    if (r := result.replay) is not None:
        table.add_row(
            "graph (CUDA graph replay)",
            fmt_time(r.estimate.median),
            f"{fmt_time(r.estimate.low)}-{fmt_time(r.estimate.high)}",
            f"{total_flops / r.estimate.median / 1e9:.2f}",
            "",
            *([""] * (bool(copy_bw) + threaded)),
            fmt_count(total_flops),
            "",
            f"{r.estimate.n}x{r.reps}",
            r.stop_reason,
        )
    return table


def _show_totals(console, result) -> None:
    """The sum of the per-call kernels' medians, the once-per-bind ones, and the host."""
    per_call = [k for k in result.kernels if not k.record.once]
    once = len(result.kernels) - len(per_call)
    kernel_sum = sum(k.seconds for k in per_call)
    if once:
        console.print(
            f"{once} once-per-bind kernel{'s' * (once > 1)} (weights transposed or packed) ran when "
            "the inputs were bound; the graph's time leaves them out, the sum below too",
            highlight=False,
        )
    console.print(
        f"sum of kernel medians {fmt_time(kernel_sum)}; {len(per_call)} kernels; "
        f"host {result.fingerprint.get('cpu')}, git {result.fingerprint.get('git_sha') or 'unknown'}",
        highlight=False,
    )


def _read_counters(args, result, console) -> None:
    """ncu's counters into the run's kernel records, or one line saying why there are none."""
    from irkit.errors import IrkitError
    from irkit.measure.counters import collect

    if result.backend != "cuda":
        console.print(
            f"--counters: the {result.backend} backend has no hardware counters; none read",
            style="yellow",
            highlight=False,
        )
        return
    try:
        counters = collect(args.file, result.pipeline, dict(args.dim), args.seed, args.plugin)
    except IrkitError as e:
        console.print(e.message, style="yellow", highlight=False)
        return
    result.counters = counters
    for name, values in counters.items():
        shown = ", ".join(
            f"{k.removesuffix('_pct').replace('_', ' ')} {v:.1f}%" for k, v in values.items()
        )
        console.print(f"  counters {name}: {shown}", highlight=False)
