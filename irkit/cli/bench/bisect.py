"""irkit-bench bisect: the pass that makes a result wrong, or slower (or the results that regressed between commits)."""

from __future__ import annotations

import argparse
import sys

from irkit.cli.bench.options import (
    BACKEND_HELP,
)
from irkit.cli.common import (
    bounded_int,
    dtype_option,
    parse_dim,
    positive_float,
    positive_int,
    seed,
)


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("bisect", help="find the pass that makes a result wrong, or slower")
    p.add_argument(
        "file",
        help="a model (.graph, .mlir, .onnx), or a results file with --slower-than BASE.jsonl",
    )
    p.add_argument(
        "-p",
        "--passes",
        default=None,
        metavar="PIPELINE",
        help="the pipeline to bisect (default: the backend's own)",
    )
    p.add_argument("--backend", default="auto", help=BACKEND_HELP)
    p.add_argument("--dim", action="append", default=[], type=parse_dim, metavar="NAME=VALUE")
    p.add_argument("--seed", type=seed, default=0, help="seed of the random inputs")
    dtype_option(p)
    p.add_argument(
        "--slower-than",
        default=None,
        metavar="BASE",
        help="a pipeline that is not slow: find the edit from it that slows PIPELINE "
        "(or, with a results file, the results of the base commit)",
    )
    p.add_argument(
        "--threshold",
        type=positive_float,
        default=0.05,
        help="the smallest relative slowdown that counts (default 0.05)",
    )
    p.add_argument(
        "--budget",
        type=positive_float,
        default=30.0,
        help="seconds of sampling per sequential test at most (default 30)",
    )
    p.add_argument(
        "--placements",
        type=bounded_int(1, 64),
        default=8,
        help="slots the base and each edited program are bound as, the rounds "
        "rotating through them (default 8; fewer where memory is short)",
    )
    p.add_argument(
        "--diff-lines",
        type=positive_int,
        default=80,
        help="lines of the culprit's IR diff to print (default 80)",
    )
    return p


def run(args) -> int:
    from pathlib import Path

    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 160)
    results = (".json", ".jsonl")
    if Path(args.file).suffix in results:
        if not args.slower_than or Path(args.slower_than).suffix not in results:
            from irkit.errors import IrkitError

            raise IrkitError(
                "a results file is bisected against another: --slower-than BASE.jsonl", args.file
            )
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
    graph = irkit.load(args.file, dict(args.dim), dtype=args.dtype)
    found = first_wrong_pass(graph, pipeline, backend.name, args.seed)
    if found is None:
        console.print(
            f"{args.file}: every prefix of '{pipeline}' matches the reference on "
            f"{backend.name} (seed {args.seed}); nothing to bisect",
            highlight=False,
        )
        return 0
    console.print(
        f"[bold red]{args.file}: first wrong after pass {found.index} '{found.spec}'[/] "
        f"({found.compiles} prefixes compiled and checked on {backend.name}, seed {args.seed})",
        highlight=False,
    )
    console.print(f"  right: -p '{found.good_prefix or '(no pass)'}'", highlight=False)
    for c in found.checks:
        console.print(f"  wrong with '{found.spec}' added: {c.describe()}", highlight=False)
    lines = found.diff.splitlines()
    shown = lines[: args.diff_lines]
    console.print(
        f"the IR diff '{found.spec}' made ({len(lines)} lines"
        f"{f', first {len(shown)}' if len(shown) < len(lines) else ''}):",
        highlight=False,
    )
    console.out("\n".join(shown), highlight=False)
    return 1


def _bisect_slowdown(console, args) -> int:
    from irkit.measure.bisect import slowing_edits
    from irkit.runtime import get_backend

    backend, _ = get_backend(args.backend)
    pipeline = args.passes or backend.default_pipeline
    import irkit

    model = irkit.load(args.file, dict(args.dim), dtype=args.dtype) if args.dtype else args.file
    result = slowing_edits(
        model,
        pipeline,
        args.slower_than,
        backend.name,
        dict(args.dim),
        args.seed,
        args.threshold,
        args.budget,
        placements=args.placements,
    )

    def said(d) -> str:
        r = d.ratio
        slots = (
            f"{d.placements} placements, {d.placement_io} I/O"
            if d.placements > 1
            else "1 placement: copy offsets not sampled"
        )
        return (
            f"{r.median:.3f}x [{r.low:.3f}, {r.high:.3f}] ({r.confidence:.2%} CI, "
            f"{d.rounds} paired rounds, {d.looks} look{'s' if d.looks != 1 else ''}, {slots})"
        )

    o = result.overall
    console.print(
        f"{args.file}: '{pipeline}' vs the base '{args.slower_than}' on {backend.name}: "
        f"{o.verdict} by more than {args.threshold:.0%}: {said(o)}",
        highlight=False,
    )
    if o.verdict == "not slower":
        return 0
    if o.verdict == "undecided":
        console.print(
            "[bold]undecided: the budget ran out before the CI cleared the threshold; "
            "raise --budget or --threshold[/]"
        )
        return 1
    for f in result.findings:
        kernels = (
            ", ".join([f"+{k}" for k in f.kernels_added] + [f"-{k}" for k in f.kernels_removed])
            or "none"
        )
        console.print(
            f"  {f.edit.describe()}: {f.decision.verdict}: {said(f.decision)}; kernels {kernels}",
            highlight=False,
            style="bold red" if f.decision.verdict == "slower" else None,
        )
    culprits = result.culprits
    if culprits:
        worst = culprits[0]
        console.print(
            f"[bold red]responsible: {worst.edit.describe()}[/] "
            f"({worst.decision.ratio.median:.3f}x the base's time alone)",
            highlight=False,
        )
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
