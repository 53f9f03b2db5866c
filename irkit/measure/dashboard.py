"""The history's dashboard: a static site of every series, its change points and the triage.

    write_site(history, Path("site"))      # index.html, one page a series, change and record

- `index.html`: the triage list (each change point: series, the commits it lies between,
  the step with its CI, the rerun's verdict), then every series with its last point.
- `series-N.html`: the series over its points (plotly: each point's median with its 95% CI),
  the change points marked by status. Clicking a point opens its record; clicking a change
  point opens the change.
- `change-N-K.html`: a change: the detection, the rerun's verdict and protocol, the pass
  whose output changed with the IR diff, the kernels that changed, and the records on
  either side (an attribution record: what each pass bought).
- `record-N.html`: one record: what was measured, where, the kernels, the passes.

The pages load one script, plotly.js, written beside them: the site needs no network.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from irkit.measure.history import History, Point, Series
from irkit.measure.triage import Suspect, open_regressions, triage

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 72em; color: #222 }
table { border-collapse: collapse; margin: 0.5em 0 1.5em } td, th { padding: 0.2em 0.7em;
border-bottom: 1px solid #ddd; text-align: left; vertical-align: top }
.confirmed { color: #b00020; font-weight: 600 } .refuted { color: #888 } .open { background: #fde }
.faster { color: #1b5e20 } pre { background: #f6f6f6; padding: 0.7em; overflow-x: auto }
.add { color: #1b5e20 } .del { color: #b00020 } nav a { margin-right: 1em }
"""

STATUS_SYMBOL = {
    "confirmed": "x",
    "refuted": "circle-open",
    "undecided": "diamond",
    "suspected": "triangle-up",
}


def _page(title: str, body: str, plotly: bool = False) -> str:
    script = '<script src="plotly.min.js"></script>' if plotly else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}'
        f"</title><style>{STYLE}</style>{script}</head><body>"
        f'<nav><a href="index.html">triage</a></nav><h1>{html.escape(title)}</h1>{body}</body></html>'
    )


def _table(headers: list[str], rows: list[list[str]], row_class: list[str] | None = None) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        f'<tr class="{row_class[i] if row_class else ""}">'
        + "".join(f"<td>{c}</td>" for c in r)
        + "</tr>"
        for i, r in enumerate(rows)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _change_page(s: Suspect) -> str:
    return f"change-{s.series.id}-{s.change.at}.html"


def _e(text: object) -> str:
    return html.escape(str(text))


def write_site(history: History, out: Path) -> list[Path]:
    """Write the site into `out` (created; pages of an earlier run replaced); its pages."""
    import plotly.offline

    out.mkdir(parents=True, exist_ok=True)
    (out / "plotly.min.js").write_text(plotly.offline.get_plotlyjs())
    suspects = triage(history)
    still_open = open_regressions(suspects)
    written = [out / "index.html"]
    (out / "index.html").write_text(_index(history, suspects, still_open))
    records: set[int] = set()
    for series in history.series():
        points = history.points(series.id)
        mine = [s for s in suspects if s.series.id == series.id]
        page = out / f"series-{series.id}.html"
        page.write_text(_series_page(series, points, mine))
        written.append(page)
        records.update(p.record_id for p in points if p.record_id is not None)
        for s in mine:
            page = out / _change_page(s)
            page.write_text(_change(history, s, s in still_open))
            written.append(page)
    for record_id in sorted(records):
        page = out / f"record-{record_id}.html"
        page.write_text(_record(record_id, history.body(record_id)))
        written.append(page)
    return written


def _index(history: History, suspects: list[Suspect], still_open: list[Suspect]) -> str:
    rows, classes = [], []
    for s in suspects:
        c = s.change
        verdict = s.verdict
        rerun = (
            f"{verdict.ratio:.3f}x [{verdict.ci_low:.3f}, {verdict.ci_high:.3f}]"
            if verdict and verdict.ratio is not None
            else ""
        )
        rows.append(
            [
                f'<a href="series-{s.series.id}.html">{_e(s.series.label)}</a>',
                _e(s.span()),
                f'<span class="{"" if c.slower else "faster"}">{abs(c.ratio - 1):.1%} '
                f"{'slower' if c.slower else 'faster'}</span> ({c.ratio:.3f}x [{c.ci_low:.3f}, {c.ci_high:.3f}])",
                rerun,
                f'<a class="{s.status}" href="{_change_page(s)}">{s.status}'
                f"{' (open)' if s in still_open else ''}</a>",
            ]
        )
        classes.append("open" if s in still_open else "")
    triage_table = _table(["series", "commits", "detected step", "rerun", "status"], rows, classes)
    series_rows = []
    for series in history.series():
        points = history.points(series.id)
        last = points[-1]
        series_rows.append(
            [
                f'<a href="series-{series.id}.html">#{series.id}</a>',
                _e(series.label),
                str(len(points)),
                _value(last.value, series.metric),
                _e((last.commit or "?")[:10]),
            ]
        )
    summary = (
        f"<p>{len(suspects)} change point(s), {len(still_open)} open regression(s); "
        f"database {_e(history.where)}.</p>"
    )
    return _page(
        "irkit history: triage",
        summary
        + "<h2>Change points</h2>"
        + triage_table
        + "<h2>Series</h2>"
        + _table(["#", "series", "points", "last", "commit"], series_rows),
    )


def _value(value: float, metric: str) -> str:
    if "seconds" not in metric:
        return f"{value:.4g}"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value * 1e9:.4g} ns"


def _revision_text(p: Point) -> str:
    repos = p.repos or {"irkit": p.commit}
    return " ".join(f"{Path(n).name}@{str(c)[:10]}" for n, c in repos.items())


def _series_page(series: Series, points: list[Point], suspects: list[Suspect]) -> str:
    import plotly.graph_objects as go

    x = list(range(len(points)))
    values = [p.value for p in points]
    plus = [(p.ci_high - p.value) if p.ci_high is not None else 0 for p in points]
    minus = [(p.value - p.ci_low) if p.ci_low is not None else 0 for p in points]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=x,
            y=values,
            mode="lines+markers",
            name="median (95% CI)",
            error_y={"type": "data", "array": plus, "arrayminus": minus, "visible": True},
            customdata=[f"record-{p.record_id}.html" for p in points],
            text=[_revision_text(p) for p in points],
            hovertemplate="%{text}<br>%{y:.4g}<extra>click: its record</extra>",
        )
    )
    for status in sorted({s.status for s in suspects}):
        mine = [s for s in suspects if s.status == status]
        fig.add_trace(
            go.Scatter(
                x=[s.change.at for s in mine],
                y=[points[s.change.at].value for s in mine],
                mode="markers",
                name=f"change point: {status}",
                marker={
                    "symbol": STATUS_SYMBOL.get(status, "x"),
                    "size": 16,
                    "color": "#b00020" if status == "confirmed" else "#555",
                },
                customdata=[_change_page(s) for s in mine],
                text=[s.describe() for s in mine],
                hovertemplate="%{text}<extra>click: the change</extra>",
            )
        )
    names = sorted({n for p in points for n in (p.repos or {})})
    varying = [n for n in names if len({(p.repos or {}).get(n) for p in points}) > 1] or names
    ticks = ["/".join(str((p.repos or {}).get(n) or p.commit)[:7] for n in varying) for p in points]
    fig.update_layout(
        xaxis={
            "title": "run (oldest first), by the commit of "
            + ", ".join(Path(n).name for n in varying),
            "tickmode": "array",
            "tickvals": x,
            "ticktext": ticks,
        },
        yaxis={"title": series.metric},
        hovermode="x",
        height=480,
        margin={"l": 60, "r": 20, "t": 20, "b": 60},
    )
    plot = fig.to_html(full_html=False, include_plotlyjs=False, div_id="plot")
    click = (  # a click on a change point opens the change; on any other point, its record
        "<script>document.getElementById('plot').on('plotly_click', function (e) {"
        " var ps = e.points, to = ps[0].customdata;"
        " for (var i = 0; i < ps.length; i++) {"
        " if (String(ps[i].customdata).indexOf('change-') === 0) { to = ps[i].customdata; } }"
        " if (to) { window.location.href = to; } });</script>"
    )
    rows = [
        [f'<a href="{_change_page(s)}">{_e(s.span())}</a>', _e(s.describe()), _e(s.status)]
        for s in suspects
    ]
    return _page(
        series.label,
        plot + click + "<h2>Change points</h2>" + _table(["commits", "change", "status"], rows),
        plotly=True,
    )


def _diff_html(diff: str) -> str:
    lines = []
    for line in diff.splitlines():
        kind = "add" if line.startswith("+") else "del" if line.startswith("-") else ""
        lines.append(f'<span class="{kind}">{_e(line)}</span>')
    return "<pre>" + "\n".join(lines) + "</pre>"


def _change(history: History, s: Suspect, still_open: bool) -> str:
    c, v = s.change, s.verdict
    body = [
        f"<p>{_e(s.series.label)}</p>",
        f'<p class="{s.status}">{_e(s.describe())}{" &mdash; open" if still_open else ""}</p>',
        _table(
            ["", "before", "after"],
            [
                ["revision", _e(_revision_text(s.before)), _e(_revision_text(s.after))],
                ["value", f"{s.before.value:.4g}", f"{s.after.value:.4g}"],
                [
                    "record",
                    f'<a href="record-{s.before.record_id}.html">{_record_name(history, s.before)}</a>',
                    f'<a id="after-record" href="record-{s.after.record_id}.html">'
                    f"{_record_name(history, s.after)}</a>",
                ],
            ],
        ),
        f"<h2>Detection</h2><p>step {c.ratio:.4f}x [{c.ci_low:.4f}, {c.ci_high:.4f}], "
        f"p = {c.p_value:.2g}, threshold {s.threshold:.1%}</p>",
    ]
    if v is None:
        body.append("<h2>Rerun</h2><p>not rerun yet (irkit-bench history detect --rerun)</p>")
    else:
        protocol = dict(v.protocol)
        diff = protocol.pop("ir_diff", "")
        body.append(f"<h2>Rerun: {_e(v.verdict)}</h2><p>decided {_e(v.decided_at)}</p>")
        if protocol.get("pass"):
            body.append(f"<h2>What changed</h2><p>{_e(protocol['pass'])}</p>")
        if protocol.get("kernels"):
            body.append("<p>kernels changed: " + _e(", ".join(protocol["kernels"])) + "</p>")
        if diff:
            body.append("<h3>IR diff</h3>" + _diff_html(diff))
        body.append("<h3>Protocol</h3><pre>" + _e(json.dumps(protocol, indent=1)) + "</pre>")
    body.append("<h2>Kernels, before and after</h2>" + _kernel_diff(history, s))
    return _page(f"change in #{s.series.id} at {s.span()}", "".join(body))


def _record_name(history: History, p: Point) -> str:
    kind = history.body(p.record_id or 0).get("kind", "record")
    return (
        "attribution record"
        if kind == "irkit.attribution"
        else _e(kind.removeprefix("irkit.") + " record")
    )


def _kernels_of(record: dict) -> dict[str, dict]:
    kernels = record.get("kernels")
    if isinstance(kernels, dict):
        kernels = kernels.get("full", [])
    return {k["name"]: k for k in kernels or [] if isinstance(k, dict) and "name" in k}


def _seconds(k: dict) -> float | None:
    t = k.get("seconds")
    return t.get("median") if isinstance(t, dict) else t


def _kernel_diff(history: History, s: Suspect) -> str:
    a = _kernels_of(history.body(s.before.record_id or 0))
    b = _kernels_of(history.body(s.after.record_id or 0))
    rows = []
    for name in sorted({*a, *b}):
        x, y = a.get(name, {}), b.get(name, {})
        tx, ty = _seconds(x), _seconds(y)
        same = x.get("hash") is not None and x.get("hash") == y.get("hash")
        how = "added" if not x else "removed" if not y else "same code" if same else "changed"
        ratio = f"{ty / tx:.3f}x" if tx and ty else ""
        rows.append(
            [
                _e(name),
                _e(how),
                f"{tx * 1e6:.2f} us" if tx else "",
                f"{ty * 1e6:.2f} us" if ty else "",
                ratio,
            ]
        )
    return _table(["kernel", "code", "before", "after", "after / before"], rows)


def _record(record_id: int, record: dict) -> str:
    kind = str(record.get("kind", "record"))
    fingerprint = record.get("fingerprint") or {}
    facts = [
        ["kind", _e(kind)],
        ["workload", _e(record.get("workload") or record.get("model"))],
        ["pipeline", _e(record.get("pipeline"))],
        ["backend", _e(record.get("backend"))],
        ["commit", _e(fingerprint.get("git_sha"))],
        ["plugins", _e(json.dumps(fingerprint.get("plugins") or {}))],
        ["recorded", _e(fingerprint.get("time"))],
    ]
    body = [_table(["", ""], facts)]
    if kind == "irkit.attribution":
        rows = [_pass_row(p) for p in record.get("passes") or []]
        body.append('<h2 id="attribution">Attribution: what each pass bought</h2>')
        body.append(_table(["pass", "saved", "95% CI", "verdict"], rows))
    kernels = _kernels_of(record)
    rows = [
        [_e(n), f"{(_seconds(k) or 0) * 1e6:.2f} us", _e(k.get("hash", ""))]
        for n, k in kernels.items()
    ]
    body.append("<h2>Kernels</h2>" + _table(["kernel", "median", "code hash"], rows))
    body.append(
        "<details><summary>the record</summary><pre>"
        + _e(json.dumps(record, indent=1))
        + "</pre></details>"
    )
    title = (
        "attribution record"
        if kind == "irkit.attribution"
        else f"{kind.removeprefix('irkit.')} record"
    )
    return _page(f"{title} {record_id}", "".join(body))


def _pass_row(p: dict[str, Any]) -> list[str]:
    saved = p.get("saved_s") or {}
    value = saved.get("value", saved.get("median"))
    ci = (
        f"[{saved.get('ci_low', 0) * 1e6:.2f}, {saved.get('ci_high', 0) * 1e6:.2f}] us"
        if saved
        else ""
    )
    shown = f"{value * 1e6:.2f} us" if isinstance(value, int | float) else ""
    return [_e(p.get("pass")), shown, ci, _e(p.get("verdict", ""))]
