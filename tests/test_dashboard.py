"""The history's dashboard (`irkit-bench dashboard`), loaded in a real headless Chromium
(Debian's `chromium`, which .ci/run installs, driven by playwright): no console errors, and
a click on a change point in a series' plot leads to the change, and from there to the
attribution record behind it."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from irkit.measure.attribution import attribute
from tests.conftest import ROOT

CHAIN = "examples/elementwise_chain.graph"
SPEC = "fuse-kernels,lower-graph-to-loops,expand-math"
STEP_AT = 10


def _scaled(record: dict, factor: float) -> dict:
    """`record` with every time in it multiplied by `factor`."""
    out = copy.deepcopy(record)

    def walk(x: object) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if k in ("median", "ci_low", "ci_high", "seconds") and isinstance(v, float):
                    x[k] = v * factor
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(out["total"])
    walk(out["kernels"])
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A history of 20 attribution records of one workload (a real record, its times
    scaled: 0.3% scatter, 12% slower from commit 10), as a dashboard."""
    import numpy as np

    base = tmp_path_factory.mktemp("dashboard")
    template = attribute(CHAIN, SPEC, "cpu", "shapley", {"N": 8, "D": 16}, budget_s=0.3).to_json()
    rng = np.random.default_rng(1)
    lines = []
    for i in range(20):
        factor = (1.12 if i >= STEP_AT else 1.0) * (1 + 0.003 * rng.standard_normal())
        record = _scaled(template, factor)
        record["fingerprint"] = {
            **record["fingerprint"],
            "git_sha": f"{i:02d}" * 20,
            "time": f"2026-11-{i + 1:02d}T00:00:00+0000",
        }
        lines.append(json.dumps(record) + "\n")
    (base / "runs.jsonl").write_text("".join(lines))
    bench = [sys.executable, "-m", "irkit.cli.bench"]
    db, out = str(base / "h.db"), base / "site"
    added = subprocess.run(
        [*bench, "history", "add", str(base / "runs.jsonl"), "--db", db], cwd=ROOT
    )
    assert added.returncode == 0
    done = subprocess.run(
        [*bench, "dashboard", "--db", db, "-o", str(out)], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return out


def test_the_site_has_each_series_change_and_record(site: Path) -> None:
    index = (site / "index.html").read_text()
    import re

    assert "irkit history: triage" in index
    steps = [float(x) for x in re.findall(r"([0-9.]+)% slower", index)]
    assert steps and all(10 < x < 14 for x in steps), steps  # the planted 12%, per series
    changes = sorted(site.glob("change-*.html"))
    assert changes, "the planted step has a change page"
    page = changes[0].read_text()
    assert "attribution record" in page and f"{STEP_AT - 1:02d}" * 5 in page
    assert (site / "plotly.min.js").stat().st_size > 1_000_000  # no network needed


def test_writing_again_is_allowed_but_a_foreign_folder_is_refused(
    site: Path, tmp_path: Path
) -> None:
    bench = [sys.executable, "-m", "irkit.cli.bench", "dashboard"]
    db = str(site.parent / "h.db")
    again = subprocess.run(
        [*bench, "--db", db, "-o", str(site)], capture_output=True, text=True, cwd=ROOT
    )
    assert again.returncode == 0, again.stderr
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    refused = subprocess.run(
        [*bench, "--db", db, "-o", str(mine)], capture_output=True, text=True, cwd=ROOT
    )
    assert refused.returncode == 1 and "is not a dashboard irkit wrote" in refused.stderr
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


@pytest.fixture(scope="module")
def browser() -> Iterator:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (the test extra)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no Chromium here (Debian's chromium: .ci/run installs it)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


def test_in_chromium_a_change_point_leads_to_its_attribution(site: Path, browser) -> None:
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((site / "index.html").as_uri())
    page.click("text=seconds (attribution) >> nth=0")  # the series with the change
    page.wait_for_selector("#plot .scatterlayer")
    assert "series-" in page.url
    # the change point: the marker of the "change point" trace, clicked where plotly drew it
    marker = page.locator("#plot .scatterlayer .trace").nth(1).locator("path.point").first
    box = marker.bounding_box()
    assert box is not None
    with page.expect_navigation():
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    assert "change-" in page.url and f"-{STEP_AT}.html" in page.url
    page.click("#after-record")
    assert "record-" in page.url
    heading = page.locator("#attribution")
    assert heading.is_visible() and "what each pass bought" in heading.inner_text()
    assert page.locator("text=fuse-kernels").count() >= 1
    for name in ("index.html", "series-1.html"):
        page.goto((site / name).as_uri())
    page.close()
    assert errors == []
