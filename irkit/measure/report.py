"""A self-contained HTML report of attribution records: per workload, a waterfall of the
per-pass contributions (with their 95% CIs) from the time with no optional pass to the time
with all of them, a roofline of the kernels before and after, and the tables and protocol
behind both. Figures are matplotlib PNGs embedded as data URIs: the page has no external
reference and reads offline."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from irkit.errors import IrkitError
from irkit.measure.records import read_attributions, read_records


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise IrkitError(
            "the report needs matplotlib: pip install 'irkit[plots]' (or matplotlib)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def waterfall(plt, rec: dict):
    """Bars from T(no optional pass) down (or up) by each pass's contribution to T(all)."""
    total = rec["total"]
    base = total["baseline_s"]["median"]
    scale, unit = (1e3, "ms") if base >= 1e-3 else (1e6, "us")
    fig, ax = plt.subplots(figsize=(7, 3.2))
    labels, level, peak = ["no optional pass"], base, base
    ax.bar(0, base * scale, color="#888888")
    for i, p in enumerate(rec["passes"], start=1):
        s = p["saved_s"]
        new = level - s["value"]
        color = "#2a9d8f" if s["value"] > 0 else "#e76f51"
        if not p["significant"]:
            color = "#cccccc"
        ax.bar(i, (level - new) * scale, bottom=new * scale, color=color)
        # the bar ends where T(before) less the saving puts it: a larger saving lower, so
        # the saving's CI [low, high] spans [level - high, level - low]. Drawn as a line with
        # caps, not as errors about the point: a percentile CI need not hold its point, and
        # errorbar refuses a negative error (a suite's report once died on one)
        low, high = (level - s["ci_high"]) * scale, (level - s["ci_low"]) * scale
        ax.vlines(i, low, high, colors="black", lw=1)
        ax.hlines([low, high], i - 0.08, i + 0.08, colors="black", lw=1)
        labels.append(p["pass"] + ("" if p["changes_code"] else "\n(no change)"))
        level = new
        peak = max(peak, high / scale)
    full = total["full_s"]["median"]
    ax.bar(len(labels), full * scale, color="#264653")
    labels.append("all passes")
    ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right")
    ax.set_ylabel(f"time per call ({unit})")
    ax.set_title(
        f"{rec['workload']}: {rec['strategy']} contributions (grey: not significant)", fontsize=10
    )
    low = min(full, base) * scale
    ax.set_ylim(
        bottom=max(0.0, low - 0.25 * abs(base - full) * scale - 0.02 * low), top=peak * scale * 1.05
    )
    return fig


def roofline(plt, rec: dict):
    """Kernels with no optional pass (hollow) and with all (filled) under the measured roofs."""
    c = rec.get("ceilings")
    fig, ax = plt.subplots(figsize=(6, 3.8))
    points = []
    for variant, style in (
        ("baseline", dict(facecolors="none", edgecolors="#e76f51")),
        ("full", dict(color="#264653")),
    ):
        timed = [
            k for k in rec["kernels"][variant] if k["flops"] and k["min_bytes"] and k["seconds"]
        ]
        xs = [k["flops"] / k["min_bytes"] for k in timed]
        ys = [k["flops"] / k["seconds"] / 1e9 for k in timed]
        points += xs
        ax.scatter(
            xs,
            ys,
            s=28,
            label=f"{'no optional pass' if variant == 'baseline' else 'all passes'}",
            **style,
        )
    if c:
        import numpy as np

        lo = min(points + [c["flops"] / c["bandwidth"]]) / 4
        hi = max(points + [c["flops"] / c["bandwidth"]]) * 4
        x = np.geomspace(lo, hi, 200)
        ax.plot(x, np.minimum(c["flops"], x * c["bandwidth"]) / 1e9, color="black", lw=1)
        ax.set_title(
            f"roofline: {c['device']} (copy {c['bandwidth'] / 1e9:.1f} GB/s, "
            f"fma {c['flops'] / 1e9:.0f} GFLOP/s, measured)",
            fontsize=9,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("FLOPs per minimum byte")
    ax.set_ylabel("GFLOP/s")
    ax.legend(fontsize=8)
    return fig


_STYLE = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;font-size:13px;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}
.dim{color:#999}.bad{color:#b00020;font-weight:bold}
img{max-width:100%} code{font-size:12px}
"""


def _ms(s: float) -> str:
    return f"{s * 1e3:.4g} ms"


def _section(plt, rec: dict) -> str:
    t = rec["total"]
    p = rec["protocol"]
    rows = []
    for q in rec["passes"]:
        s, x = q["saved_s"], q["speedup"]
        cls = "" if q["significant"] else " class='dim'"
        rows.append(
            f"<tr{cls}><td>{html.escape(q['pass'])}</td><td>{_ms(s['value'])}</td>"
            f"<td>[{_ms(s['ci_low'])}, {_ms(s['ci_high'])}]</td><td>{x['value']:.3f}x</td>"
            f"<td>{'yes' if q['significant'] else 'no'}</td><td>{'yes' if q['changes_code'] else 'no'}</td>"
            f"<td>-{len(q['kernels']['removed'])} +{len(q['kernels']['added'])}</td></tr>"
        )
    figs = [waterfall(plt, rec), roofline(plt, rec)]
    images = "".join(f"<img src='{_png(f)}'>" for f in figs)
    for f in figs:
        plt.close(f)
    noise = rec["noise_floor"]
    return f"""
<h2>{html.escape(rec["workload"])} <small class='dim'>{html.escape(str(rec["dims"]))}</small></h2>
<p>pipeline <code>{html.escape(rec["pipeline"])}</code>, backend {html.escape(p["selection"])},
strategy {rec["strategy"]}; {p["variants"]} variants, {p["programs_measured"]} distinct programs;
{p["rounds"]} interleaved rounds over {p.get("placements", 1)} placements, stopped by
{p["stop_reason"]}; A/A {"check failed, floor" if noise.get("aa_failed", True) else "check passed, floor"}
±{noise.get("floor", 0):.2%}.<br>
no optional pass {_ms(t["baseline_s"]["median"])}, all {_ms(t["full_s"]["median"])}:
speedup {t["speedup"]["value"]:.3f}x [{t["speedup"]["ci_low"]:.3f}, {t["speedup"]["ci_high"]:.3f}]</p>
{images}
<table><tr><th>pass</th><th>saved per call</th><th>95% CI</th><th>speedup</th><th>significant</th>
<th>changes code</th><th>kernels</th></tr>{"".join(rows)}</table>
"""


def tuning_heatmap(plt, rec: dict):
    """A tune record's option space as a heatmap: each cell the speedup over the default of
    the program that combination compiled to (grey where it was wrong or dropped by
    halving); the first two options as axes, the best over any others."""
    import numpy as np

    dims = rec["dimensions"]
    default = next((p for p in rec["programs"] if p["is_default"]), None)
    base = default["seconds"]["median"] if default and default["seconds"] else None
    speed: dict[tuple, float] = {}
    for prog in rec["programs"]:
        value = base / prog["seconds"]["median"] if base and prog["seconds"] else float("nan")
        for choice in prog["choices"]:
            if "default" in choice:
                continue
            cell = tuple(choice.get(d["option"]) for d in dims[:2])
            old = speed.get(cell, float("nan"))
            speed[cell] = value if np.isnan(old) else max(old, value)
    xs = dims[0]["values"]
    ys = dims[1]["values"] if len(dims) > 1 else [None]
    grid = np.array(
        [[speed.get((x, y) if len(dims) > 1 else (x,), np.nan) for x in xs] for y in ys]
    )
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(xs), 1.2 + 0.6 * len(ys)))
    cmap = plt.get_cmap("RdYlGn").with_extremes(bad="lightgrey")  # wrong, or dropped
    image = ax.imshow(
        np.ma.masked_invalid(grid),
        cmap=cmap,
        vmin=min(0.8, np.nanmin(grid, initial=1)),
        vmax=max(1.2, np.nanmax(grid, initial=1)),
        aspect="auto",
    )
    ax.set_xticks(range(len(xs)), [str(x) for x in xs])
    ax.set_xlabel(dims[0]["option"])
    if len(dims) > 1:
        ax.set_yticks(range(len(ys)), [str(y) for y in ys])
        ax.set_ylabel(dims[1]["option"])
    else:
        ax.set_yticks([])
    for (i, j), v in np.ndenumerate(grid):
        if not np.isnan(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=8)
    fig.colorbar(image, ax=ax, label="speedup over the default")
    rest = f" (best over {', '.join(d['option'] for d in dims[2:])})" if len(dims) > 2 else ""
    ax.set_title(f"{Path(rec['model']).stem}: {rec['verdict'][:60]}{rest}", fontsize=9)
    return fig


def _tuning_section(plt, rec: dict) -> str:
    fig = tuning_heatmap(plt, rec)
    image = _png(fig)
    plt.close(fig)
    s = rec["speedup"]
    ci = f" [{s['ci_low']:.3f}, {s['ci_high']:.3f}]" if s else ""
    return f"""
<h2>tuning: {html.escape(Path(rec["model"]).stem)} <small class='dim'>{html.escape(rec["space"])}</small></h2>
<p>base pipeline <code>{html.escape(rec["base_pipeline"])}</code>, backend {html.escape(rec["backend"])};
{rec["protocol"]["candidates"]} candidates, {rec["protocol"]["programs"]} distinct programs,
{rec["protocol"]["wrong"]} wrong (never timed); {html.escape(rec["protocol"]["search"])}.<br>
<b>{html.escape(rec["verdict"])}</b>{ci}</p>
<img src='{image}'>
"""


ADVICE_FIELDS = (
    "evidence",
    "examined",
    "advice",
    "refuted",
    "no_advice",
    "model",
    "backend",
    "pipeline",
    "time_label",
    "improved_pipeline",
    "improvement",
)
"""What `_advice_section` reads of an `irkit.advise` record."""


def _ratio(s: dict | None) -> str:
    return f"{s['median']:.3f}x [{s['ci_low']:.3f}, {s['ci_high']:.3f}]" if s else ""


def _advice_section(rec: dict) -> str:
    """An `irkit-bench advise` record: the evidence per examined kernel, the advice with
    its measured gains, what was refuted, and the improved pipeline."""
    esc = html.escape
    rows = "".join(
        f"<tr><td>{esc(k['name'])}</td><td>{esc(k['kind'])}</td><td>{k['seconds'] * 1e3:.3f} ms</td>"
        f"<td>{k['share']:.0%}</td><td>{esc(str((k['roof'] or {}).get('bound', '')))}</td>"
        f"<td>{(k['roof'] or {}).get('percent_of_roof', float('nan')):.0f}%</td>"
        f"<td>{esc(', '.join(k['features']))}</td></tr>"
        for k in rec["evidence"]
        if k["name"] in rec["examined"]
    )
    advice = "".join(
        f"<tr><td>{esc(h['describe'])}</td><td>{_ratio(h['speedup'])}</td>"
        f"<td>{esc(', '.join(h['rules']))}</td><td>{esc(', '.join(h['kernels']))}</td></tr>"
        for h in rec["advice"]
    )
    refuted = "".join(
        f"<tr class='dim'><td>{esc(h['describe'])}</td><td>{esc(h['status'])}</td>"
        f"<td>{_ratio(h['speedup'])}</td><td>{esc(h['why'])}</td></tr>"
        for h in rec["refuted"]
        if h["status"] != "same code"
    )
    none = ", ".join(rec["no_advice"]) or "none"
    return f"""
<h2>advice: {esc(Path(rec["model"]).stem)} <small class='dim'>{esc(rec["backend"])}; {esc(rec["time_label"])}</small></h2>
<p>pipeline <code>{esc(rec["pipeline"])}</code></p>
<table><tr><th>kernel</th><th>kind</th><th>time</th><th>share</th><th>bound</th><th>% of roof</th><th>code</th></tr>{rows}</table>
<h3>confirmed (speedup of the program, family CI)</h3>
{f"<table><tr><th>edit</th><th>speedup</th><th>rules</th><th>kernels</th></tr>{advice}</table>" if advice else "<p>no advice: no hypothesis was confirmed faster</p>"}
{f"<h3>refuted, dropped or refused</h3><table><tr><th>edit</th><th>status</th><th>speedup</th><th>why</th></tr>{refuted}</table>" if refuted else ""}
<p class='dim'>no rule applies to: {esc(none)}</p>
<p>improved pipeline ({_ratio(rec["improvement"]) or "unchanged"}): <code>{esc(rec["improved_pipeline"])}</code></p>
"""


def _workers_section(records: list[dict]) -> str:
    """Which workers produced the records (a distributed suite's)."""
    rows: dict[tuple, list[float]] = {}
    for r in records:
        w = r.get("worker") or {}
        fp = r.get("fingerprint") or {}
        key = (w.get("executor", "local"), w.get("host") or fp.get("host"), fp.get("cpu"))
        rows.setdefault(key, []).append(float(w.get("seconds") or r.get("suite_seconds") or 0))
    if len(rows) < 2 and not any(r.get("worker") for r in records):
        return ""
    body = "".join(
        f"<tr><td>{html.escape(str(e))}</td><td>{html.escape(str(h))}</td><td>{html.escape(str(c))}</td>"
        f"<td>{len(t)}</td><td>{sum(t):.1f} s</td></tr>"
        for (e, h, c), t in sorted(rows.items(), key=str)
    )
    return (
        "<h2>workers</h2><table><tr><th>executor</th><th>host</th><th>cpu</th><th>jobs</th>"
        f"<th>time</th></tr>{body}</table>"
    )


def render_report(results: str) -> tuple[str, int]:
    """The self-contained HTML report of every attribution record in `results`, and how
    many workloads it shows."""
    records = list(read_attributions(results))
    failed = [
        r
        for r in read_records(results)
        if r.get("kind") == "irkit.attribution.failed" and isinstance(r.get("workload"), str)
    ]
    tunes = [r for r in read_records(results) if r.get("kind") == "irkit.tune"]
    advice = [r for r in read_records(results) if r.get("kind") == "irkit.advise"]
    for r in advice:
        for key in ADVICE_FIELDS:
            if key not in r:
                raise IrkitError(f"advise record without {key}", results)
    if not records and not tunes and not advice:
        raise IrkitError("no attribution, tuning or advice records to report", results)
    plt = _pyplot()
    latest: dict[str, dict] = {}
    for r in records:
        latest[f"{r['workload']}|{r['backend']}|{r['pipeline']}|{r['dims']}"] = r
    fp = (records or tunes or advice)[-1].get("fingerprint", {})
    body = _workers_section(records) + "".join(_section(plt, r) for r in latest.values())
    body += "".join(_tuning_section(plt, r) for r in tunes)
    body += "".join(_advice_section(r) for r in advice)
    failures = "".join(
        f"<li class='bad'>{html.escape(r['workload'])}: {html.escape(str(r.get('error', 'no reason recorded')))}</li>"
        for r in failed
    )
    page = f"""<!doctype html><html><head><meta charset='utf-8'><title>irkit pass-impact report</title>
<style>{_STYLE}</style></head><body>
<h1>irkit pass-impact report</h1>
<p>{len(latest)} workloads from <code>{html.escape(results)}</code>. Host {html.escape(str(fp.get("cpu")))},
irkit {html.escape(str(fp.get("irkit_version")))} at git {html.escape(str(fp.get("git_sha")))},
LLVM {html.escape(str(fp.get("llvm")))}, measured {html.escape(str(fp.get("time")))}.
Contributions are time saved per call, with 95% bootstrap CIs over placements (separately
linked and bound copies) and interleaved rounds; a contribution is significant when its
CI excludes 0, and also beyond the A/A floor where the run's A/A check failed.</p>
{f"<h2>failed jobs</h2><ul>{failures}</ul>" if failures else ""}
{body}
</body></html>
"""
    return page, len(latest) + len(tunes) + len(advice)
