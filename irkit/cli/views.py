"""How irkit-bench shows measured results to people (rich tables over result records).

Everything here reads the JSON records (`Attribution.to_json()`), so a table printed
during a run and one printed later from a results file are the same."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from irkit.limits import fmt_bytes


def fmt_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns" if seconds else "0"


def fmt_signed(seconds: float) -> str:
    return ("+" if seconds > 0 else "") + fmt_time(seconds)


def fmt_count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.3g}"


def fmt_ci(ci: dict, fmt=fmt_time) -> str:
    return f"[{fmt(ci['ci_low'])}, {fmt(ci['ci_high'])}]"


def _focused(proto: dict) -> str:
    """How many rounds the programs had, where some left early or were sampled every few
    cycles for their cost (focused rounds)."""
    per = proto.get("rounds_per_program") or {}
    counts = sorted(set(per.values()))
    if len(counts) < 2:
        return ""
    programs = [k for k in per if not k.startswith("aa-twin")]
    left = proto.get("programs_left")
    if left is None:  # records before 2026-11-28's periods: every program short of the most left
        left = [k for k in programs if per[k] < counts[-1]]
    said = []
    if left:
        rounds = sorted({per[k] for k in left})
        said.append(
            f"{len(left)} of {len(programs)} programs left once their passes had "
            f"verdicts, after {rounds[0]}{'' if len(rounds) == 1 else f'-{rounds[-1]}'} "
            "rounds"
        )
    periods = {k: p for k, p in (proto.get("periods") or {}).items() if p > 1}
    if periods:
        ks = sorted(set(periods.values()))
        said.append(
            f"{len(periods)} sampled in one cycle of every {ks[0]}"
            f"{'' if len(ks) == 1 else f'-{ks[-1]}'} for their cost at the end"
        )
    return f" ({'; '.join(said)})" if said else ""


def show_attribution(console: Console, rec: dict) -> None:
    """The pass table, the per-kernel view and the roofline of one attribution record."""
    _show_header(console, rec)
    _show_load(console, rec["protocol"].get("load"))
    _show_placements(console, rec["protocol"])
    _show_aa(console, rec["noise_floor"])
    _show_passes(console, rec)
    _show_runs(console, rec)
    _show_changed_kernels(console, rec)
    show_roofline(console, rec)


def _show_header(console: Console, rec: dict) -> None:
    """What was measured, how, and the two ends: no optional pass and all of them."""
    total, proto = rec["total"], rec["protocol"]
    console.print(
        f"[bold]{rec['model']}[/]  pipeline: {rec['pipeline']}  backend: {proto['selection']}  "
        f"strategy: {rec['strategy']}",
        highlight=False,
    )
    console.print(
        f"{proto['variants']} variants, {proto['programs_measured']} distinct programs, each "
        f"checked against the float64 reference before timing; {proto['rounds']} interleaved "
        f"rounds{_focused(proto)}, stopped by {proto['stop_reason']} (precision {proto['precision']:.1%}, "
        f"budget {proto['budget_s']:g} s); timer {proto['timer']}{_sampling(proto)}",
        highlight=False,
    )
    base, full = total["baseline_s"], total["full_s"]
    sp = total["speedup"]
    console.print(
        f"no optional pass: {fmt_time(base['median'])} {fmt_ci(base)}   all: "
        f"{fmt_time(full['median'])} {fmt_ci(full)}   total speedup {sp['value']:.3f}x "
        f"[{sp['ci_low']:.3f}, {sp['ci_high']:.3f}]",
        highlight=False,
    )


def _show_load(console: Console, load: dict | None) -> None:
    """A warning where the machine was loaded while measuring, with what was seen."""
    if load and load.get("loaded"):
        loads = [load.get("load_1min_start"), load.get("load_1min_end")]
        said = (
            f"1-minute load {loads[0]:.2f} at the start, {loads[1]:.2f} at the end, on "
            f"{load['cpus']} CPUs"
            if None not in loads
            else f"{load['cpus']} CPUs"
        )
        if load.get("run_queue_mean") is not None:
            said = (
                f"other processes' threads runnable {load['run_queue_mean']:.2f} on average "
                f"over {load['run_queue_samples']} readings; {said}"
            )
        if load.get("crowded"):
            said += (
                f"; {max(q for q in (load.get('run_queue_start'), load.get('run_queue_end')) if q is not None)} "
                f"other threads runnable beside the program's {load.get('threads') or 1}"
            )
        if load.get("waited_for_a_core"):
            said += (
                f"; the full program had the CPU {load['cpu_over_wall']:.0%} of its wall "
                "time on one thread (it waited for a core)"
            )
        console.print(
            f"the machine was loaded: {said}; expect a wider noise floor and copy-to-copy "
            "offsets (run again on a quiet machine to confirm, or with --quiet-machine)",
            style="yellow",
            highlight=False,
        )


def _show_placements(console: Console, proto: dict) -> None:
    """How many copies of every program were bound, and where memory limited them."""
    placements = proto.get("placements")
    if placements:
        spread = proto.get("copy_sd")
        said = f"; a copy's offset {spread:.2%} (sd), in every CI" if spread is not None else ""
        console.print(
            f"{placements} placements: every program linked and bound {placements} times, "
            f"rounds rotating through the copies{said}; CIs resample rounds within copies and "
            "hold the copy-to-copy spread"
            + (
                "; a slot's programs share its input and output buffers"
                if proto.get("placement_io") == "shared"
                else ""
            ),
            highlight=False,
        )
    limited = proto.get("placements_limited")
    if limited:
        console.print(
            f"only {placements} of the {limited} copies wanted fit in memory: they hold "
            f"{fmt_bytes(proto['placement_bytes'])} of the "
            f"{fmt_bytes(proto['placement_budget_bytes'])} copies may take (two thirds of "
            "IRKIT_MAX_MEMORY, or half of this machine's memory); fewer copies, wider CIs",
            style="yellow",
            highlight=False,
        )


def _show_aa(console: Console, noise: dict) -> None:
    """The A/A checks: the twins' ratios, their verdict, and the per-context splits."""
    if "aa_ratio" in noise:
        aa = noise["aa_ratio"]
        failed = noise.get("aa_failed")
        level = noise.get("aa_confidence")
        line = (
            "A/A check"
            + (f" ({level:.1%} CIs: 95% for the twins together)" if level and level != 0.95 else "")
            + ": the full pipeline's program against its own copies, ratio "
            f"{aa['value']:.4f} [{aa['ci_low']:.4f}, {aa['ci_high']:.4f}]"
        )
        if "aa_ratio_baseline" in noise:
            base = noise["aa_ratio_baseline"]
            line += (
                f"; without optional passes {base['value']:.4f} "
                f"[{base['ci_low']:.4f}, {base['ci_high']:.4f}]"
            )
        if failed is None:  # a record from before placements: the floor was the rule
            line += f"; noise floor ±{noise['floor']:.2%} = ±{fmt_time(noise['floor_s'])}"
        elif failed:
            line += (
                f"; FAILED: the CIs did not cover equal programs, so every verdict is also "
                f"judged beyond the floor ±{fmt_time(noise['floor_s'])}"
            )
        else:
            line += "; passed (both cover 1)"
        context = noise.get("per_context")
        if context:
            line += (
                f". Per context: {context['failed']} of {len(context['programs'])} programs' "
                "halves of copies differ (their passes judged beyond that floor)"
            )
        console.print(line, highlight=False, style="yellow" if failed else None)


def _show_passes(console: Console, rec: dict) -> None:
    """The per-pass table: saving, speedup, share, verdict, detectable effect, kernels."""
    total, noise, proto = rec["total"], rec["noise_floor"], rec["protocol"]
    sp = total["speedup"]
    rule = (
        "CI excludes 0 (beyond an A/A floor only where a check failed)"
        if noise.get("aa_failed") is not None
        else "CI excludes 0 and beyond the A/A floor"
    )
    runs = proto.get("runs")
    held = (
        f"over {runs['count']} runs, Student's t on their spread (each run's state sampled)"
        if runs
        else "over this run's rounds and placements (a run's state is not in it: --runs N "
        "repeats the run, benchmarks/run_to_run.py measures it)"
    )
    if runs:
        rule = noise["rule"]
    table = Table(
        title=f"per-pass contribution: time saved per call (negative = slower), 95% CI {held}; "
        f"significant: {rule}; detectable: the effect this measurement calls significant 4 "
        "times in 5"
    )
    for col in ("pass", "saved", "95% CI", "speedup", "95% CI ", "of total", "significant",
                "detectable", "kernels changed"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("pass", "kernels changed") else "right")
    saved_total = total["saved_s"]["value"]
    for p in rec["passes"]:
        s, x = p["saved_s"], p["speedup"]
        k = p["kernels"]
        if not p["changes_code"]:
            table.add_row(p["pass"], "0", "", "1x", "", "", "no", "", "none: no code change")
            continue
        mde = p.get("min_detectable_s")
        detectable = f"±{fmt_time(mde)}" if mde is not None else ""
        share = f"{s['value'] / saved_total:.0%}" if saved_total else ""
        verdict = "yes" if p["significant"] else "no (within noise)"
        alone = fmt_signed(k["saved_s"]) if k["saved_s"] is not None else "not timed"
        changed = f"-{len(k['removed'])} +{len(k['added'])}; alone: {alone}"
        if not k["removed"] and not k["added"]:  # the program changed outside its kernels
            changed = "none: the driver's (buffers, views, calls)"
        table.add_row(p["pass"], fmt_signed(s["value"]), fmt_ci(s, fmt_signed),
                      f"{x['value']:.3f}x", f"[{x['ci_low']:.3f}, {x['ci_high']:.3f}]", share,
                      verdict, detectable, changed, style=None if p["significant"] else "dim")  # fmt: skip
    table.add_section()
    gap = saved_total - total["sum_of_contributions_s"]
    note = (
        "= sum"
        if abs(gap) <= 1e-12 + 1e-9 * abs(saved_total)
        else f"sum + {fmt_signed(gap)} interaction"
    )
    table.add_row("total", fmt_signed(saved_total), fmt_ci(total["saved_s"], fmt_signed),
                  f"{sp['value']:.3f}x", f"[{sp['ci_low']:.3f}, {sp['ci_high']:.3f}]", note, "", "", "")  # fmt: skip
    console.print(table)


def _show_runs(console: Console, rec: dict) -> None:
    """With --runs N: each pass's run-to-run spread against a run's own SE."""
    runs = rec["protocol"].get("runs")
    if runs:
        gap = f", {runs['gap_s']:g} s apart" if runs["gap_s"] else ""
        console.print(
            f"run to run ({runs['count']} runs{gap}; loaded in {sum(runs['loaded'])}):",
            highlight=False,
        )
        for p in rec["passes"]:
            r = p.get("run_to_run")
            if r:
                console.print(
                    f"  {p['pass']}: the runs' savings spread {fmt_time(r['sd_s'])} (sd) against "
                    f"a run's own SE of {fmt_time(r['run_se_rms_s'])}; {r['runs_holding_mean']} "
                    f"of {runs['count']} runs' CIs held their mean",
                    highlight=False,
                )


def _show_changed_kernels(console: Console, rec: dict) -> None:
    """For each pass that changed kernels, those it removed and added, timed alone."""
    for p in rec["passes"]:
        k = p["kernels"]
        if not (k["removed"] or k["added"]):
            continue
        timed = k["saved_s"] is not None
        kt = Table(
            title=f"kernels changed by {p['pass']}"
            + (" (each timed alone)" if timed else " (not timed: --no-kernel-times)"),
            title_justify="left",
        )
        for col in ("", "kernel", "count", "time each", "% of roof", "bound"):
            kt.add_column(
                col, justify="right" if col in ("count", "time each", "% of roof") else "left"
            )
        for sign, ks in (("-", k["removed"]), ("+", k["added"])):
            for kk, count in _collapse(ks):
                roof = kk.get("roofline") or {}
                kt.add_row(
                    sign,
                    _kernel_name(kk),
                    str(count),
                    fmt_time(kk["seconds"]) if timed else "",
                    f"{roof['percent_of_roof']:.1f}%" if roof else "",
                    _bound(roof),
                )
        console.print(kt)


def _bound(roof: dict) -> str:
    """ "compute", or "memory" with the level the working set came from ("memory (L2)")."""
    bound = roof.get("bound", "")
    level = roof.get("level")
    return f"{bound} ({level})" if bound == "memory" and level and level != "memory" else bound


def _kernel_name(kernel: dict) -> str:
    """A kernel's name, marked where it runs once per bind, not per call."""
    return kernel["name"] + (" (once per bind)" if kernel.get("once_per_bind") else "")


def _collapse(kernels: list[dict]) -> list[tuple[dict, int]]:
    """Kernels with the same code (hash) as one row with a count, first name shown."""
    rows: dict[str, list] = {}
    for k in kernels:
        rows.setdefault(k["hash"], [k, 0])[1] += 1
    return [(k, n) for k, n in rows.values()]


def show_roofline(console: Console, rec: dict) -> None:
    ceilings = rec.get("ceilings")
    kernels = [k for k in rec["kernels"]["full"] if k["seconds"]]
    if not kernels:
        return  # not timed (--no-kernel-times)
    title = "kernels of the full pipeline"
    if ceilings:
        title += (
            f" on the roofline: {ceilings['device']}, copy {ceilings['bandwidth'] / 1e9:.1f} GB/s, "
            f"fma {ceilings['flops'] / 1e9:.0f} GFLOP/s "
            f"({ceilings.get('flops_source', 'measured')})"
        )
    table = Table(title=title, title_justify="left")
    for col in ("kernel", "time", "GFLOP/s", "GB/s", "FLOP/byte", "% of roof", "bound"):
        table.add_column(col, justify="left" if col in ("kernel", "bound") else "right")
    for k in kernels:
        roof = k.get("roofline") or {}
        table.add_row(
            _kernel_name(k),
            fmt_time(k["seconds"]),
            f"{k['flops'] / k['seconds'] / 1e9:.2f}",
            f"{k['min_bytes'] / k['seconds'] / 1e9:.2f}",
            f"{k['flops'] / k['min_bytes']:.2f}" if k["min_bytes"] else "",
            f"{roof['percent_of_roof']:.1f}%" if roof else "",
            _bound(roof),
        )
    console.print(table)
    levels = ", ".join(
        f"{lv['name']} {lv['bandwidth'] / 1e9:.0f} GB/s"
        for lv in (ceilings or {}).get("levels", ())
    )
    if levels and ceilings:
        console.print(
            f"memory roofs by where a kernel's working set fits (timed warm, back to back): "
            f"{levels}, memory {ceilings['bandwidth'] / 1e9:.1f} GB/s; one core's, times the "
            "kernel's threads for the FMA rate and the private caches",
            style="dim",
        )
    if any((k.get("roofline") or {}).get("percent_of_roof", 0) > 100 for k in kernels):
        console.print(
            "above 100%: faster than the roof measured for its level (a working set split "
            "between levels, or a roof measured on a busier machine)",
            style="dim",
        )


def _sampling(proto: dict) -> str:
    """How Shapley's variants were chosen: the null players kept in every one, the orders."""
    said = ""
    if proto.get("null_passes"):
        said += f"; {len(proto['null_passes'])} passes that changed no IR state kept in every variant (value 0)"
    if proto.get("permutations"):
        pairs = " in antithetic pairs" if proto.get("antithetic") else ""
        said += f"; {proto['permutations']} sampled orders{pairs}, their sampling in the CIs"
    return said


def show_cross_backend(console: Console, rec: dict) -> None:
    """Pass by pass, each backend's speedup and where the effects agree or differ."""
    backends = rec["backends"]
    console.print(
        f"[bold]cross-backend attribution[/]  backends: {', '.join(backends)}", highlight=False
    )
    pipelines = rec["pipelines"]
    if len(set(pipelines.values())) == 1:
        console.print(f"  pipeline: {pipelines[backends[0]]}", highlight=False)
    else:
        for b in backends:
            console.print(f"  pipeline on {b}: {pipelines[b]}", highlight=False)
    for b, timer in rec["timers"].items():
        if "not a GPU" in timer or "interpreter" in timer:
            console.print(f"  {b}: times are {timer}", style="yellow", highlight=False)
    table = Table(title="speedup of each pass (T without / T with it), 95% CI; * significant")
    table.add_column("pass")
    for b in backends:
        table.add_column(b, justify="right")
    table.add_column("effects")
    for row in rec["comparison"]:
        cells = []
        for b in backends:
            e = row["effects"][b]
            if e is None:
                cells.append("absent")
            elif not e["changes_code"]:
                cells.append("no code change")
            else:
                x = e["speedup"]
                star = "*" if e["significant"] else " "
                cells.append(f"{x['value']:.3f}x{star} [{x['ci_low']:.3f}, {x['ci_high']:.3f}]")
        agree = row["verdict"].startswith("agree")
        own = sorted({n for n in row.get("names", {}).values() if n and n != row["pass"]})
        label = f"{row['pass']} ({' / '.join(own)})" if own else row["pass"]
        table.add_row(label, *cells, row["verdict"], style=None if agree else "bold")
    console.print(table)
