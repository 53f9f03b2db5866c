"""irkit-bench advise: what bounds each slow kernel, and which pipeline edits measurably help."""

from __future__ import annotations

import argparse
import sys

from irkit.cli.bench.options import measure_options, progress
from irkit.cli.common import bounded_int, check_output, fraction, write_output
from irkit.cli.views import fmt_time


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "advise",
        help="evidence per slow kernel, and pipeline edits proposed by rules, each compiled, "
        "checked and timed paired against the pipeline: advice only with a CI over 1",
    )
    p.add_argument("file", nargs="?", help="a .graph, .mlir or .onnx model")
    measure_options(p, budget=60.0, dtype=True)
    p.add_argument(
        "--kernels",
        type=bounded_int(1, 64),
        default=6,
        help="examine at most this many of the slowest kernels (those holding 90%% of the time)",
    )
    p.add_argument(
        "--min-gain",
        type=fraction,
        default=0.01,
        help="the smallest median gain advised (default 0.01: 1%%; a CI over 1 is needed too)",
    )
    p.add_argument(
        "--rules", default=None, metavar="NAMES", help="only these rules, comma-separated"
    )
    p.add_argument(
        "--placements",
        type=bounded_int(1, 64),
        default=8,
        help="slots the race binds every program in (default 8)",
    )
    p.add_argument(
        "--counters",
        action="store_true",
        help="read ncu's counters per kernel as evidence (the cuda backend, where ncu works)",
    )
    p.add_argument(
        "--store",
        action="store_true",
        help="record the improved pipeline in the tuning database "
        "(irkit.compile(..., tuned=True) then uses it)",
    )
    p.add_argument("--json", default=None, metavar="OUT", help="write the record as JSON")
    p.add_argument(
        "--list-rules", action="store_true", help="list the rules and their reasoning, and exit"
    )
    return p


def run(args) -> int:
    import json

    from rich.console import Console

    from irkit.measure.advice import AdviseOptions, advise

    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.list_rules:
        return _list_rules(console)
    if args.file is None:
        from irkit.errors import IrkitError

        raise IrkitError("advise: a model file is needed (or --list-rules)")
    if args.json:
        check_output(args.json, [args.file], "--json", "json")
    rules = tuple(r.strip() for r in args.rules.split(",") if r.strip()) if args.rules else None
    opts = AdviseOptions(
        budget_s=args.budget,
        seed=args.seed,
        precision=args.precision,
        max_kernels=args.kernels,
        min_gain=args.min_gain,
        rules=rules,
        placements=args.placements,
        counters=args.counters,
        plugins=tuple(args.plugin or ()),
    )
    bar, tick = progress()
    with bar:
        dims = dict(args.dim) or None
        result = advise(args.file, args.passes, args.backend, dims, opts, tick, args.dtype)
    record = result.to_json()
    if args.store and result.advice:
        record["database"] = _store(result)
    show(console, record)
    if args.json:
        write_output(args.json, json.dumps(record, indent=2) + "\n", [args.file], "--json", "json")
    return 0


def _list_rules(console) -> int:
    from irkit.measure.advice import RULES

    for name, cls in sorted(RULES.items()):
        families = ", ".join(sorted(cls.families))
        console.print(f"[bold]{name}[/] ({families}): {cls.reasoning()}", highlight=False)
    return 0


def _store(result) -> str:
    from irkit import tuning
    from irkit.frontend import load
    from irkit.runtime import device_name, get_backend

    chosen, _ = get_backend(result.backend)
    graph = load(result.model, result.dims or None, result.dtype or None)
    where = tuning.machine(chosen.name, device_name(chosen))
    entry = {
        "declared": True,
        "choice": {"advice": [h.describe() for h in result.advice]},
        "pipeline": result.improved_pipeline,
        "speedup": result.improvement,
        "verdict": "advise: " + "; ".join(h.describe() for h in result.advice),
        "space": "advise",
    }
    return str(tuning.store(graph, result.pipeline, where, entry))


def _ratio(s: dict | None) -> str:
    if not s:
        return ""
    return f"{s['median']:.3f}x [{s['ci_low']:.3f}, {s['ci_high']:.3f}]"


def show(console, record: dict) -> None:
    """The evidence per examined kernel, the advice, what was refuted, and the pipeline."""
    from rich.table import Table

    p = record["protocol"]
    console.print(
        f"[bold]{record['model']}[/]  pipeline: {record['pipeline']}  backend: "
        f"{record['backend']} ({record['time_label']})",
        highlight=False,
    )
    if record.get("counters"):
        console.print(record["counters"], style="dim", highlight=False)
    table = Table(title=f"evidence: {p['examined']}")
    for col in ("kernel", "kind", "time", "share", "bound", "% of roof", "vector bits", "notes"):
        table.add_column(col, justify="left" if col in ("kernel", "kind", "notes") else "right")
    for k in record["evidence"]:
        if k["name"] not in record["examined"]:
            continue
        roof = k["roof"] or {}
        notes = ", ".join(k["features"])
        gpu = k.get("gpu")
        if gpu:
            notes += (
                f"; {k['resources'].get('registers')} registers, {gpu['spills']} spills, "
                f"occupancy {gpu['occupancy_pct']:.0f}%, {gpu['waves']:.2f} waves"
            )
        if k.get("counters"):
            notes += "; " + ", ".join(f"{key} {v:.0f}" for key, v in sorted(k["counters"].items()))
        table.add_row(
            k["name"],
            k["kind"],
            fmt_time(k["seconds"]),
            f"{k['share']:.0%}",
            f"{roof['bound']} ({roof['level']})" if roof else "",
            f"{roof['percent_of_roof']:.0f}%" if roof else "",
            str(k["vector_bits"] or "scalar"),
            notes,
        )
    console.print(table)
    _outcome(console, record)


def _outcome(console, record: dict) -> None:
    """The advice, what was refuted or refused, and the improved pipeline."""
    advice = record["advice"]
    if advice:
        console.print("[bold]advice[/] (confirmed: speedup of the program, 95% family CI):")
        for h in advice:
            console.print(
                f"  {h['describe']}: {_ratio(h['speedup'])}  rules: {', '.join(h['rules'])}; "
                f"for {', '.join(h['kernels'])}; kernels changed: "
                f"{len(h['changed_kernels']['removed'])} out, {len(h['changed_kernels']['added'])} in",
                highlight=False,
            )
    else:
        console.print("[bold]no advice[/]: no hypothesis was confirmed faster", highlight=False)
    tried = [h for h in record["refuted"] if h["status"] != "same code"]
    if tried:
        console.print("refuted, dropped or refused:", style="dim")
        for h in tried:
            console.print(
                f"  {h['describe']}: {h['status']} {_ratio(h['speedup'])} {h['why']}".rstrip(),
                style="dim",
                highlight=False,
            )
    same = [h for h in record["refuted"] if h["status"] == "same code"]
    if same:
        console.print(
            f"{len(same)} proposed edit(s) compile to the current code (not timed)", style="dim"
        )
    if record["no_advice"]:
        console.print(
            f"no rule applies to: {', '.join(record['no_advice'])}", style="dim", highlight=False
        )
    if record.get("aa"):
        aa = record["aa"]
        console.print(
            f"A/A twin: {_ratio(aa)} (floor {aa['floor']:.1%}); current program "
            f"{fmt_time(record['seconds']['median'])} per call",
            style="dim",
            highlight=False,
        )
    if advice:
        console.print(
            f"[bold]improved pipeline[/] ({_ratio(record['improvement'])}):", highlight=False
        )
        console.print(record["improved_pipeline"], highlight=False, soft_wrap=True)
    if record.get("database"):
        console.print(f"recorded in the tuning database: {record['database']}", style="dim")
