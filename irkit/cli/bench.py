"""irkit-bench: run, measure, attribute, compare and report.

    irkit-bench run FILE [-p PIPELINE] [--backend BACKEND] [--dim N=V] [--json OUT]
    irkit-bench attribute [FILE] [-p PIPELINE] [--backend BACKEND[,BACKEND...]] [--strategy S]
    irkit-bench suite | compare | bisect | slower | report ...
    irkit-bench reference FILE [--dim NAME=VALUE ...] [--seed N]

`run` compiles a model, checks every output against the float64 reference on fresh random
inputs, and only then times the whole graph and each kernel (median with a 95% bootstrap
CI), with GFLOP/s and GB/s from each kernel's static FLOPs and minimum bytes. A wrong result
is reported as such, never timed, and exits 1. `attribute` measures what each optional
pass buys (on two backends at once with `--backend cpu,cuda-host`, pass by pass where the
effects agree). `reference` evaluates a model with the numpy reference and summarises each
output.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import numpy as np

from irkit.cli.common import (
    OneLineArgumentParser,
    bounded_int,
    check_output,
    fraction,
    nonnegative_float,
    parse_dim,
    positive_float,
    positive_int,
    run_main,
    same_file,
    seed,
    write_output,
)
from irkit.cli.views import fmt_count, fmt_signed, fmt_time

BACKEND_HELP = (
    "cpu, cuda, cuda-sim (GPU-mapped IR run by the lockstep interpreter), cuda-host (the "
    "printed CUDA C compiled and run on the host), or auto (default)"
)


def _reference(args) -> None:
    from rich.console import Console
    from rich.table import Table
    from xdsl.dialects.builtin import StringAttr

    import irkit
    from irkit.ir import entry_function

    module = irkit.load(args.file, dict(args.dim))
    inputs = irkit.random_inputs(module, seed=args.seed)
    start = time.perf_counter()
    outputs = irkit.reference(module, *inputs)
    seconds = time.perf_counter() - start
    fn = entry_function(module)
    given = [d.data.get("irkit.name") for d in (fn.res_attrs.data if fn.res_attrs else [])]
    names = [n if isinstance(n, StringAttr) else None for n in given]
    table = Table(title=f"{args.file}: numpy reference (float64), inputs seed {args.seed}")
    for col in ("output", "shape", "min", "max", "mean", "finite"):
        table.add_column(col, justify="left" if col in ("output", "shape") else "right")
    for i, out in enumerate(outputs):
        named = names[i] if i < len(names) else None
        name = named.data if named is not None else f"#{i}"
        finite = bool(np.isfinite(out).all())
        table.add_row(
            name,
            str(list(out.shape)),
            f"{out.min():.4g}",
            f"{out.max():.4g}",
            f"{out.mean():.4g}",
            "yes" if finite else "NO",
        )
    console = Console()
    console.print(table)
    console.print(
        f"{len(fn.body.block.ops) - 1} graph ops evaluated in {seconds * 1e3:.1f} ms (wall, one run; not a benchmark)"
    )


def _run(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from irkit.measure.run import run_model

    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.json:
        check_output(args.json, [args.file], "--json", "json")
    result = run_model(args.file, args.passes, args.backend, dict(args.dim), args.seed,
                       args.precision, args.budget, tuned=args.tuned)  # fmt: skip
    console.print(
        f"[bold]{args.file}[/]  pipeline: {result.pipeline or '(none)'}  backend: {result.selection}"
    )
    console.print(
        f"compiled in {result.compile_seconds:.2f} s; checked against the float64 reference (seed {args.seed}):"
    )
    for c in result.checks:
        console.print(f"  {c.describe()}", style=None if c.passed else "bold red", highlight=False)
    if args.counters and result.passed:
        _read_counters(args, result, console)
    if args.json:
        path = _json_path(args.json, result.passed)
        _write_json(path, result.to_json(), args.file)
        if path != args.json:
            console.print(f"the failing run's record is in {path}; {args.json} is left as it was",
                          highlight=False)  # fmt: skip
    if not result.passed:
        console.print("[bold red]wrong result: not timed[/]")
        return 1
    timer = result.kernels[0].timing.timer if result.kernels else "perf_counter_ns"
    if result.backend == "cuda-sim":
        console.print("[yellow]cuda-sim: the kernels ran in the lockstep interpreter on the CPU; "
                      "the times below are the interpreter's, not a GPU's[/]")  # fmt: skip
    elif result.backend == "cuda-host":
        console.print("[yellow]cuda-host: the CUDA C ran on the host CPU, each block's threads as "
                      "fibers; the times below are the host's, not a GPU's[/]")  # fmt: skip
    copy_bw = result.copy_bandwidth
    if copy_bw:
        console.print(f"device copy bandwidth (1 GiB device-to-device, read + write): "
                      f"{copy_bw / 1e9:.0f} GB/s", highlight=False)  # fmt: skip
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
        table.add_row(name, fmt_time(e.median), f"{fmt_time(e.low)}-{fmt_time(e.high)}",
                      f"{k.gflops:.2f}", f"{k.gbps:.2f}", *bw, fmt_count(k.record.flops),
                      fmt_count(k.record.min_bytes), f"{e.n}x{k.timing.reps}", k.timing.stop_reason)  # fmt: skip
    g = result.graph
    assert g is not None
    total_flops = sum(k.record.flops for k in result.kernels if not k.record.once)
    table.add_section()
    table.add_row("graph (driver, one call)", fmt_time(g.estimate.median),
                  f"{fmt_time(g.estimate.low)}-{fmt_time(g.estimate.high)}",
                  f"{total_flops / g.estimate.median / 1e9:.2f}", "",
                  *([""] * (bool(copy_bw) + threaded)),
                  fmt_count(total_flops), "",
                  f"{g.estimate.n}x{g.reps}", g.stop_reason)  # fmt: skip
    if (r := result.replay) is not None:
        table.add_row("graph (CUDA graph replay)", fmt_time(r.estimate.median),
                      f"{fmt_time(r.estimate.low)}-{fmt_time(r.estimate.high)}",
                      f"{total_flops / r.estimate.median / 1e9:.2f}", "",
                      *([""] * (bool(copy_bw) + threaded)), fmt_count(total_flops), "",
                      f"{r.estimate.n}x{r.reps}", r.stop_reason)  # fmt: skip
    console.print(table)
    per_call = [k for k in result.kernels if not k.record.once]
    once = len(result.kernels) - len(per_call)
    kernel_sum = sum(k.seconds for k in per_call)
    if once:
        console.print(f"{once} once-per-bind kernel{'s' * (once > 1)} (weights transposed or packed) ran when "
                      "the inputs were bound; the graph's time leaves them out, the sum below too",
                      highlight=False)  # fmt: skip
    console.print(f"sum of kernel medians {fmt_time(kernel_sum)}; {len(per_call)} kernels; "
                  f"host {result.fingerprint.get('cpu')}, git {result.fingerprint.get('git_sha') or 'unknown'}",
                  highlight=False)  # fmt: skip
    return 0


def _read_counters(args, result, console) -> None:
    """ncu's counters into the run's kernel records, or one line saying why there are none."""
    from irkit.errors import IrkitError
    from irkit.measure.counters import collect

    if result.backend != "cuda":
        console.print(f"--counters: the {result.backend} backend has no hardware counters; "
                      "none read", style="yellow", highlight=False)  # fmt: skip
        return
    try:
        counters = collect(args.file, result.pipeline, dict(args.dim), args.seed, args.plugin)
    except IrkitError as e:
        console.print(e.message, style="yellow", highlight=False)
        return
    result.counters = counters
    for name, values in counters.items():
        shown = ", ".join(f"{k.removesuffix('_pct').replace('_', ' ')} {v:.1f}%"
                          for k, v in values.items())  # fmt: skip
        console.print(f"  counters {name}: {shown}", highlight=False)


def _progress():
    """A transient progress bar on stderr, and the callback that drives it."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                   console=Console(stderr=True), transient=True)  # fmt: skip
    tasks: dict[str, int] = {}
    labels = {"passes": "running passes (steps, shared by the variants)",
              "compile": "compiling variants' distinct programs", "measure": "timing variants (rounds, at most)",
              "kernels": "timing kernels alone (rounds, at most)"}  # fmt: skip

    def tick(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = bar.add_task(labels.get(phase, phase), total=total)
        bar.update(tasks[phase], completed=done, total=total)

    return bar, tick


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
        record = _attribute_once(args, model, dims, kernel_times=not args.no_kernel_times and i == 0)  # fmt: skip
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
        bar, tick = _progress()
        with bar:
            record = attribute(
                model, args.passes, args.backend, args.strategy, dims, precision=args.precision,
                budget_s=args.budget, seed=args.seed, permutations=args.permutations, progress=tick,
                kernel_times=kernel_times, timer=args.timer,
                placements=getattr(args, "placements", None),
            ).to_json()  # fmt: skip
        load = record["protocol"]["load"]
        attempts.append({"quiet_wait": waited, "loaded": load["loaded"]})
        if quiet is None or not load["loaded"] or len(attempts) == 3:
            break
        print(f"the machine was loaded while measuring (attempt {len(attempts)}); waiting for it to be quiet and measuring again", file=sys.stderr)  # fmt: skip
    if quiet is not None:
        record["protocol"]["quiet_machine"] = {"max_wait_s": quiet, "attempts": attempts}
    return record


def _cpu_list(text: str) -> set[int]:
    """`--pin`'s CPUs: comma-separated numbers, each one this process may run on."""
    import os

    try:
        cpus = {int(c) for c in text.split(",") if c.strip()}
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected CPU numbers like 0 or 0,1, got {text!r}") from None  # fmt: skip
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    if not cpus or not cpus <= allowed:
        raise argparse.ArgumentTypeError(f"CPUs {text!r}: this process may run on {','.join(map(str, sorted(allowed)))}")  # fmt: skip
    return cpus


def _attribute(args) -> int:
    from rich.console import Console

    from irkit.cli.views import show_attribution, show_cross_backend

    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.json:
        check_output(args.json, [args.file], "--json", "json")
    if "," in args.backend:
        from argparse import Namespace

        from irkit.measure.cross import attribute_across, common_pipeline
        from irkit.pipelines import parse_passes

        backends = [b.strip() for b in args.backend.split(",")]
        pipeline = args.passes or common_pipeline(backends)
        parse_passes(pipeline)

        def one(backend: str) -> dict:
            console.print(f"attributing on {backend} ...", style="dim", highlight=False)
            return attribute_file(Namespace(**{**vars(args), "backend": backend, "passes": pipeline}),
                                  args.file, dict(args.dim))  # fmt: skip

        record = attribute_across(backends, one, pipeline)
        for r in record["records"]:
            show_attribution(console, r)
        show_cross_backend(console, record)
    else:
        record = attribute_file(args, args.file, dict(args.dim))
        show_attribution(console, record)
    if args.json:
        _write_json(args.json, record, args.file)
        console.print(f"record written to {args.json}", highlight=False)
    return 0


def _suite(args) -> int:
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
    if args.jobs and same_file(out, args.jobs):
        from irkit.errors import IrkitError

        raise IrkitError("--out names the --jobs file; refusing to append results to it", str(out))  # fmt: skip
    console.print(f"suite: {len(jobs)} {'quick ' if args.quick else ''}jobs, pipeline {pipeline}, "
                  f"backend {why}; results appended to {out}", highlight=False)  # fmt: skip
    console.print(
        "GPU peers (cuBLAS, PyTorch eager, torch.compile) are not in the suite; "
        "benchmarks/gpu_targets.py measures them",
        style="dim",
    )

    options = SuiteOptions(pipeline, backend.name, args.precision, args.budget, args.seed,
                           timeout_s=args.job_timeout)  # fmt: skip
    from functools import partial

    from irkit.measure.executors import get_executor

    executor = get_executor(args.executor, out, args.ray_address, args.slurm_partition,
                            args.slurm_cluster)  # fmt: skip
    if args.in_process:
        if args.executor != "local":
            from irkit.errors import IrkitError

            raise IrkitError("--in-process runs jobs in this process; it needs --executor local")
        runner = partial(run_job, options=options)
    else:
        runner = partial(run_isolated, options=options)
        console.print(f"each job in its own worker process (deadline {options.deadline():g} s), "
                      f"executor {args.executor}; a crash or a hang is a failure record, and "
                      "the suite goes on", style="dim")  # fmt: skip
    failed = 0
    for job, record, status in run_suite(out, jobs, runner, backend.name, pipeline,
                                         args.retry_failed, executor):  # fmt: skip
        if record is None:
            failed += status.startswith("failed")
            style = "dim" if status.startswith("skipped") else "bold red"
            console.print(f"  {job.workload}: {status}", style=style, highlight=False)
            continue
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
        console.print(
            f"  {job.workload}: {fmt_time(t['baseline_s']['median'])} -> "
            f"{fmt_time(t['full_s']['median'])} ({t['speedup']['value']:.3f}x "
            f"[{t['speedup']['ci_low']:.3f}, {t['speedup']['ci_high']:.3f}]); {passes}; "
            f"{record['suite_seconds']:.0f} s",
            highlight=False,
        )
    return 1 if failed else 0


def _compare(args) -> int:
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


def _bisect(args) -> int:
    from pathlib import Path

    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 160)
    results = (".json", ".jsonl")
    if Path(args.file).suffix in results:
        if not args.slower_than or Path(args.slower_than).suffix not in results:
            from irkit.errors import IrkitError

            raise IrkitError("a results file is bisected against another: --slower-than BASE.jsonl", args.file)  # fmt: skip
        return _bisect_results(console, args.slower_than, args.file, args.threshold)
    if args.slower_than:
        return _bisect_slowdown(console, args)
    return _bisect_wrong(console, args)


def _bisect_wrong(console, args) -> int:
    import irkit
    from irkit.measure.bisect import first_wrong_pass
    from irkit.runtime import get_backend

    backend, _ = get_backend(args.backend)
    pipeline = args.passes or backend.default_pipeline
    graph = irkit.load(args.file, dict(args.dim))
    found = first_wrong_pass(graph, pipeline, backend.name, args.seed)
    if found is None:
        console.print(f"{args.file}: every prefix of '{pipeline}' matches the reference on "
                      f"{backend.name} (seed {args.seed}); nothing to bisect", highlight=False)  # fmt: skip
        return 0
    console.print(f"[bold red]{args.file}: first wrong after pass {found.index} '{found.spec}'[/] "
                  f"({found.compiles} prefixes compiled and checked on {backend.name}, seed {args.seed})",
                  highlight=False)  # fmt: skip
    console.print(f"  right: -p '{found.good_prefix or '(no pass)'}'", highlight=False)
    for c in found.checks:
        console.print(f"  wrong with '{found.spec}' added: {c.describe()}", highlight=False)
    lines = found.diff.splitlines()
    shown = lines[: args.diff_lines]
    console.print(f"the IR diff '{found.spec}' made ({len(lines)} lines"
                  f"{f', first {len(shown)}' if len(shown) < len(lines) else ''}):", highlight=False)  # fmt: skip
    console.out("\n".join(shown), highlight=False)
    return 1


def _bisect_slowdown(console, args) -> int:
    from irkit.measure.bisect import slowing_edits
    from irkit.runtime import get_backend

    backend, _ = get_backend(args.backend)
    pipeline = args.passes or backend.default_pipeline
    result = slowing_edits(args.file, pipeline, args.slower_than, backend.name, dict(args.dim),
                           args.seed, args.threshold, args.budget, placements=args.placements)  # fmt: skip

    def said(d) -> str:
        r = d.ratio
        slots = (f"{d.placements} placements, {d.placement_io} I/O" if d.placements > 1
                 else "1 placement: copy offsets not sampled")  # fmt: skip
        return (f"{r.median:.3f}x [{r.low:.3f}, {r.high:.3f}] ({r.confidence:.2%} CI, "
                f"{d.rounds} paired rounds, {d.looks} look{'s' if d.looks != 1 else ''}, {slots})")  # fmt: skip

    o = result.overall
    console.print(f"{args.file}: '{pipeline}' vs the base '{args.slower_than}' on {backend.name}: "
                  f"{o.verdict} by more than {args.threshold:.0%}: {said(o)}", highlight=False)  # fmt: skip
    if o.verdict == "not slower":
        return 0
    if o.verdict == "undecided":
        console.print("[bold]undecided: the budget ran out before the CI cleared the threshold; "
                      "raise --budget or --threshold[/]")  # fmt: skip
        return 1
    for f in result.findings:
        kernels = ", ".join([f"+{k}" for k in f.kernels_added] + [f"-{k}" for k in f.kernels_removed]) or "none"  # fmt: skip
        console.print(f"  {f.edit.describe()}: {f.decision.verdict}: {said(f.decision)}; "
                      f"kernels {kernels}", highlight=False,
                      style="bold red" if f.decision.verdict == "slower" else None)  # fmt: skip
    culprits = result.culprits
    if culprits:
        worst = culprits[0]
        console.print(f"[bold red]responsible: {worst.edit.describe()}[/] "
                      f"({worst.decision.ratio.median:.3f}x the base's time alone)", highlight=False)  # fmt: skip
    else:
        console.print("no single edit is slower on its own: the slowdown comes from edits together")
    return 1


def _bisect_results(console, base: str, new: str, threshold: float) -> int:
    from irkit.measure.compare import compare_files

    verdicts, _ = compare_files(base, new, threshold)
    if not verdicts:
        from irkit.errors import IrkitError

        raise IrkitError(f"no workload appears in both {base} and {new}")
    for v in verdicts:
        console.print(v.describe(), style="bold red" if v.regression else None, highlight=False)
    return 1 if any(v.regression for v in verdicts) else 0


def _report(args) -> int:
    from irkit.measure.report import render_report

    check_output(args.output, [args.results], "-o", "html")
    page, n = render_report(args.results)
    write_output(args.output, page, [args.results], "-o", "html")
    print(f"{args.output}: {n} workload(s)")
    return 0


def _json_path(path: str, passed: bool) -> str:
    """Where a run's record goes: `path`, except that a failing run never replaces an
    existing record (a good run's, most likely); it goes beside it as NAME.wrong.json."""
    from pathlib import Path

    p = Path(path)
    if passed or not p.exists():
        return path
    return str(p.with_name(f"{p.stem}.wrong{p.suffix or '.json'}"))


def _tune(args) -> int:
    import json
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from irkit.measure.executors import get_executor
    from irkit.measure.tune import TuneJob, tune, tune_on

    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.json:
        check_output(args.json, [args.file], "--json", "json")
    dims = dict(args.dim) or None
    if args.executor == "local":
        bar, tick = _progress()
        with bar:
            record = tune(args.file, args.space, args.passes, args.backend, dims, args.precision,
                          args.budget, args.seed, store=not args.no_store, progress=tick,
                          placements=args.placements).to_json()  # fmt: skip
    else:
        job = TuneJob(args.file, args.space, args.passes, args.backend, dims, args.precision,
                      args.budget, args.seed, placements=args.placements)  # fmt: skip
        import tempfile

        # submitit's logs go beside the record, or to a temporary folder (not the cwd)
        where = (
            Path(args.json)
            if args.json
            else Path(tempfile.mkdtemp(prefix="irkit-tune-")) / "tune.json"
        )
        executor = get_executor(args.executor, where, args.ray_address, args.slurm_partition,
                                args.slurm_cluster)  # fmt: skip
        console.print(f"tuning as one job on the {args.executor} executor ...", style="dim")
        record = tune_on(executor, job, store=not args.no_store)
    p = record["protocol"]
    console.print(f"[bold]{args.file}[/]  pipeline: {record['base_pipeline']}  backend: "
                  f"{record['backend']}; {p['candidates']} candidates, {p['programs']} distinct "
                  f"programs ({p['wrong']} wrong, never timed), each checked against the float64 "
                  f"reference; {p['search']}", highlight=False)  # fmt: skip
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
            table.add_row(label, fmt_time(sec["median"]),
                          f"[{fmt_time(sec['ci_low'])}, {fmt_time(sec['ci_high'])}]", rel)  # fmt: skip
    console.print(table)
    console.print(record["verdict"], style="bold" if record["declared"] else None, highlight=False)
    if record.get("database"):
        console.print(f"recorded in the tuning database: {record['database']} "
                      "(irkit.compile(..., tuned=True) reads it)", style="dim", highlight=False)  # fmt: skip
    if args.json:
        write_output(args.json, json.dumps(record, indent=2) + "\n", [args.file], "--json", "json")
    return 0


def _snapshot(args) -> int:
    from irkit.measure.snapshot import take_snapshot

    check_output(args.output, [args.file], "-o", "snapshot")
    snap = take_snapshot(args.file, args.kernel, args.passes, args.backend, dict(args.dim) or None,
                         args.seed)  # fmt: skip
    snap.save(args.output)
    meta = snap.meta
    written = sum(a["written"] for a in meta["arguments"])
    size = sum(a.nbytes for a in [*snap.before, *snap.after])
    print(f"{meta['kernel']} ({meta['backend']}, code {meta['hash']}): {len(meta['arguments'])} "
          f"arguments ({written} written), {size / 2**20:.1f} MiB of data before and after its call; "
          f"written to {args.output}")  # fmt: skip
    return 0


def _replay(args) -> int:
    import json

    from irkit.measure.snapshot import Snapshot, replay

    if args.json:
        check_output(args.json, [args.snapshot], "--json", "json")
    snap = Snapshot.load(args.snapshot)
    result = replay(snap, args.backend, args.precision, args.budget, args.against_current)
    held = "bit-identical to" if result.exact else "within tolerance of"
    verdict = (f"{held} the recorded outputs" if result.identical
               else f"not {held} the recorded outputs: {', '.join(result.mismatches)}")  # fmt: skip
    code = "the recorded code" if result.same_code else "code other than the recorded"
    print(f"{result.kernel} on {result.backend} ({code}): {verdict}")
    s = result.seconds
    print(f"  alone: {fmt_time(s.median)} [{fmt_time(s.low)}, {fmt_time(s.high)}] (median, 95% CI)")
    if result.compare is not None:
        c = result.compare
        x = c["speedup"]
        same = "the same code" if c["same_code"] else "different code"
        print(f"  current commit's {result.kernel} ({same}, "
              f"{'bit-identical' if c['current_bit_identical'] else 'DIFFERENT outputs'}): "
              f"{fmt_time(c['current_s']['median'])}; recorded / current = {x['median']:.3f}x "
              f"[{x['ci_low']:.3f}, {x['ci_high']:.3f}]")  # fmt: skip
    for note in result.notes:
        print(f"  note: {note}")
    if args.json:
        write_output(args.json, json.dumps(result.to_json(), indent=2) + "\n", [args.snapshot],
                     "--json", "json")  # fmt: skip
    return 0 if result.identical else 1


def _write_json(path: str, record: dict, model: str) -> None:
    import json

    write_output(path, json.dumps(record, indent=2) + "\n", [model], "--json", "json")


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="irkit-bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=OneLineArgumentParser
    )
    ref = sub.add_parser(
        "reference", help="evaluate a model with the numpy reference on random inputs"
    )
    ref.add_argument("file", help="a .graph or .mlir model")
    ref.add_argument("--dim", action="append", default=[], type=parse_dim, metavar="NAME=VALUE")
    ref.add_argument("--seed", type=seed, default=0)
    run = sub.add_parser("run", help="compile, check against the reference, then time each kernel")
    run.add_argument("--tuned", action="store_true",
                     help="use the tuning database's winner for this workload, pipeline and "
                          "machine, where `tune` recorded one (the header says which)")  # fmt: skip
    run.add_argument("file", help="a .graph or .mlir model")
    _measure_options(run, budget=1.0)
    run.add_argument("--json", default=None, metavar="OUT", help="write the run's record as JSON")
    run.add_argument("--counters", action="store_true",
                     help="cuda: also read each kernel's achieved occupancy, DRAM throughput and "
                          "L2 hit rate with Nsight Compute (ncu), in a separate run")  # fmt: skip
    att = sub.add_parser(
        "attribute", help="measure what each optional pass of a pipeline buys, with CIs"
    )
    att.add_argument("file", nargs="?", default=None,
                     help=f"a .graph, .mlir or .onnx model (default: the embedded {DEFAULT_MODEL})")  # fmt: skip
    _measure_options(att, budget=30.0, several=True)
    att.add_argument("--strategy", default="shapley", choices=("prefix", "ablation", "shapley"))
    att.add_argument("--permutations", type=bounded_int(1, 100_000), default=64,
                     help="sampled orders for shapley beyond 8 passes (default 64)")  # fmt: skip
    att.add_argument("--json", default=None, metavar="OUT", help="write the record as JSON")
    att.add_argument("--timer", default="launches", choices=("launches", "graph"),
                     help="launches: the driver's launches as they run (default); graph: the "
                          "driver captured once as a CUDA graph and replayed as one launch "
                          "(microsecond kernels without the host's launch cost; --backend cuda)")  # fmt: skip
    att.add_argument("--placements", type=bounded_int(1, 64), default=None,
                     help="copies of every distinct program, each linked and bound "
                          "separately, the rounds rotating through them so their offsets are "
                          "in the CIs (default: 200 copies in all, 32 to 4 per program: 32 "
                          "for up to 6 programs, 16 for 12, 8 for 25, 4 from 50)")  # fmt: skip
    att.add_argument("--quiet-machine", type=positive_float, nargs="?", const=300.0,
                     default=None, metavar="SECONDS",
                     help="wait (at most SECONDS, default 300) until no other thread is "
                          "runnable before measuring, and measure again (twice at most) when "
                          "the record says the machine was loaded")  # fmt: skip
    att.add_argument("--pin", default=None, metavar="CPUS", type=_cpu_list,
                     help="pin this process (and the threads it starts) to these CPUs, "
                          "e.g. 1 or 0,1; recorded")  # fmt: skip
    att.add_argument("--runs", type=bounded_int(1, 64), default=1,
                     help="repeat the whole measurement this many times (each bound afresh, "
                          "same inputs) and take every CI from the runs' spread (Student's "
                          "t): what a run's state does to the comparison, which one run's CI "
                          "cannot hold (default 1)")  # fmt: skip
    att.add_argument(
        "--run-gap",
        type=nonnegative_float,
        default=0.0,
        metavar="SECONDS",
        help="seconds between runs, to spread them in time (default 0)",
    )
    att.add_argument("--no-kernel-times", action="store_true",
                     help="skip timing each kernel alone (a third of the budget); passes still "
                          "list the kernels they removed and added")  # fmt: skip
    suite = sub.add_parser("suite", help="run the pass-impact suite (resumable)")
    suite.add_argument(
        "--quick", action="store_true", help="small sizes, short budgets: a smoke run"
    )
    suite.add_argument("-p", "--passes", default=None, metavar="PIPELINE",
                       help="pipeline to attribute (default: the backend's own)")  # fmt: skip
    suite.add_argument(
        "--backend",
        default="auto",
        help=BACKEND_HELP,
    )
    suite.add_argument("--out", default="results.jsonl", help="JSON Lines results (appended)")
    suite.add_argument("--precision", type=fraction, default=0.01)
    suite.add_argument("--budget", type=positive_float, default=None,
                       help="seconds of sampling per job (default 20, or 2 with --quick)")  # fmt: skip
    suite.add_argument("--seed", type=seed, default=0)
    suite.add_argument("--jobs", default=None, metavar="FILE",
                       help="JSON Lines jobs ({workload, model, dims?, strategy?, pipeline?} each) "
                            "instead of the built-in workloads")  # fmt: skip
    suite.add_argument("--job-timeout", type=positive_float, default=None, metavar="SECONDS",
                       help="a job's deadline (default 30 x budget + 300 s)")  # fmt: skip
    suite.add_argument("--retry-failed", action="store_true",
                       help="run again the jobs whose failure is recorded (default: skip them)")  # fmt: skip
    _executor_options(suite)
    suite.add_argument("--in-process", action="store_true",
                       help="run jobs in this process (no crash isolation; for debugging)")  # fmt: skip
    cmp_ = sub.add_parser("compare", help="exit 1 when NEW significantly regresses from BASE")
    cmp_.add_argument("base")
    cmp_.add_argument("new")
    cmp_.add_argument("--threshold", type=positive_float, default=0.05,
                      help="smallest relative slowdown reported (default 0.05; never below "
                           "either run's A/A noise floor)")  # fmt: skip
    bis = sub.add_parser("bisect", help="find the pass that makes a result wrong, or slower")
    bis.add_argument("file", help="a model (.graph, .mlir, .onnx), or a results file with --slower-than BASE.jsonl")  # fmt: skip
    bis.add_argument("-p", "--passes", default=None, metavar="PIPELINE",
                     help="the pipeline to bisect (default: the backend's own)")  # fmt: skip
    bis.add_argument("--backend", default="auto", help=BACKEND_HELP)
    bis.add_argument("--dim", action="append", default=[], type=parse_dim, metavar="NAME=VALUE")
    bis.add_argument("--seed", type=seed, default=0, help="seed of the random inputs")
    bis.add_argument("--slower-than", default=None, metavar="BASE",
                     help="a pipeline that is not slow: find the edit from it that slows PIPELINE "
                          "(or, with a results file, the results of the base commit)")  # fmt: skip
    bis.add_argument("--threshold", type=positive_float, default=0.05,
                     help="the smallest relative slowdown that counts (default 0.05)")  # fmt: skip
    bis.add_argument("--budget", type=positive_float, default=30.0,
                     help="seconds of sampling per sequential test at most (default 30)")  # fmt: skip
    bis.add_argument("--placements", type=bounded_int(1, 64), default=8,
                     help="slots the base and each edited program are bound as, the rounds "
                          "rotating through them (default 8; fewer where memory is short)")  # fmt: skip
    bis.add_argument("--diff-lines", type=positive_int, default=80,
                     help="lines of the culprit's IR diff to print (default 80)")  # fmt: skip
    tun = sub.add_parser(
        "tune", help="search pass options; a winner only with a CI over the default"
    )
    tun.add_argument("file", help="a .graph, .mlir or .onnx model")
    tun.add_argument("--space", required=True, metavar="SPACE",
                     help="pass options and the values to try, e.g. "
                          "'cpu-tile-matmul{mr=4,6,8;nr=32,48,64}'")  # fmt: skip
    _measure_options(tun, budget=30.0)
    tun.add_argument("--placements", type=bounded_int(1, 64), default=8,
                     help="slots the final race binds every program in, the rounds rotating "
                          "through them (default 8; fewer where memory is short)")  # fmt: skip
    tun.add_argument("--json", default=None, metavar="OUT", help="write the record as JSON")
    tun.add_argument("--no-store", action="store_true",
                     help="do not record the result in the tuning database")  # fmt: skip
    _executor_options(tun)
    snap = sub.add_parser(
        "snapshot", help="keep one kernel's code, launch and real data for replay"
    )
    snap.add_argument("file", help="a .graph, .mlir or .onnx model")
    snap.add_argument("--kernel", required=True, help="the kernel's name, as `run` lists it")
    snap.add_argument("-o", "--output", required=True, metavar="K.snap")
    snap.add_argument("-p", "--passes", default=None, metavar="PIPELINE",
                      help="pipeline (default: the backend's own)")  # fmt: skip
    snap.add_argument("--backend", default="cpu", help="cpu (default), cuda-sim or cuda-host")
    snap.add_argument("--dim", action="append", default=[], type=parse_dim, metavar="NAME=VALUE")
    snap.add_argument("--seed", type=seed, default=0, help="seed of the model's random inputs")
    rpl = sub.add_parser("replay", help="run, check and time a snapshot's kernel alone")
    rpl.add_argument("snapshot", help="a .snap file from `irkit-bench snapshot`")
    rpl.add_argument("--backend", default=None, help="where to run it (default: the snapshot's)")
    rpl.add_argument("--against-current", action="store_true",
                     help="also rebuild the kernel from the model at this commit and time both")  # fmt: skip
    rpl.add_argument("--precision", type=fraction, default=0.01)
    rpl.add_argument("--budget", type=positive_float, default=2.0)
    rpl.add_argument("--json", default=None, metavar="OUT", help="write the result as JSON")
    rep = sub.add_parser("report", help="write a self-contained HTML report of results")
    rep.add_argument("results", help="a results .jsonl (or one attribute --json record)")
    rep.add_argument("-o", "--output", default="report.html")
    for p in sub.choices.values():
        p.add_argument("-L", "--load-pass-plugin", "--plugin", dest="plugin", action="append",
                       default=[], metavar="MODULE_OR_FILE",
                       help="import a module (or .py file) that registers passes first; "
                            "repeatable; IRKIT_PLUGINS lists more")  # fmt: skip
    args = parser.parse_args(argv)
    if args.command == "suite" and args.budget is None:
        args.budget = 2.0 if args.quick else 20.0
    if args.command == "attribute" and args.file is None:
        args.file = str(default_model())
    commands = {"suite": _suite, "compare": _compare, "report": _report, "bisect": _bisect,
                "run": _run, "attribute": _attribute, "reference": _reference,
                "snapshot": _snapshot, "replay": _replay, "tune": _tune}  # fmt: skip

    def body() -> int | None:
        from irkit.plugins import load_plugins

        load_plugins(args.plugin)
        return commands[args.command](args)

    return run_main("irkit-bench", body)


DEFAULT_MODEL = "transformer_block.graph"


def default_model():
    """The example model `attribute` measures when given no file (shipped with irkit)."""
    from pathlib import Path

    return Path(__file__).resolve().parents[1] / "examples" / DEFAULT_MODEL


def _executor_options(p) -> None:
    p.add_argument("--executor", default="local", choices=("local", "ray", "slurm"),
                   help="where jobs run: here (default), Ray tasks (pip install -e '.[ray]'), "
                        "or Slurm jobs through submitit ('.[slurm]'); one timing job per node "
                        "at a time")  # fmt: skip
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="a running Ray cluster (default: start one on this machine)")  # fmt: skip
    p.add_argument("--slurm-partition", default=None, metavar="NAME")
    p.add_argument("--slurm-cluster", default=None, choices=("local",),
                   help="local: submitit's local executor instead of Slurm (testing)")  # fmt: skip


def _measure_options(p, budget: float, several: bool = False) -> None:
    p.add_argument("-p", "--passes", default=None, metavar="PIPELINE",
                   help="pass pipeline or named pipeline (default: the backend's own)")  # fmt: skip
    across = ("; two or more, comma-separated (cpu,cuda-host), attribute one pipeline on each "
              "and compare the passes' effects (default pipeline: the passes their own "
              "pipelines share)") if several else ""  # fmt: skip
    p.add_argument("--backend", default="auto", help=BACKEND_HELP + across)
    p.add_argument("--dim", action="append", default=[], type=parse_dim, metavar="NAME=VALUE")
    p.add_argument("--seed", type=seed, default=0, help="seed of the random inputs")
    precision = (
        "stop sampling when every pass's verdict is known: its 99.9%% CI excludes 0 "
        "or is narrower than this fraction of the full program (or of the programs it is "
        "measured between, if slower) either side; the rounds go on with the programs of "
        "the passes still open, a slow pair every few cycles (by need and cost)"
        if several
        else "stop sampling when every median's 95%% CI half-width is under this fraction"
    )
    p.add_argument("--precision", type=fraction, default=0.01, help=precision)
    p.add_argument("--budget", type=positive_float, default=budget,
                   help=f"seconds of sampling at most (default {budget:g})")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
