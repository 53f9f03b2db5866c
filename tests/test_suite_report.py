"""irkit-bench suite, compare and report, end to end on the CPU."""

from __future__ import annotations

import json

import pytest

import irkit.measure.plants  # noqa: F401  (registers plant-work)
from irkit.cli.bench import main as bench

CHAIN = ["examples/elementwise_chain.graph", "--backend", "cpu", "--dim", "N=128", "--dim", "D=256"]


def test_quick_suite_resumes_and_reports(tmp_path, capsys) -> None:
    out = tmp_path / "results.jsonl"
    # A light pipeline (the default one's 2^11 variants per job take minutes): this is about
    # the suite's machinery, every job in its own worker process.
    light = ["-p", "cse,fuse-kernels,lower-graph-to-loops"]
    assert (
        bench(
            ["suite", "--quick", "--backend", "cpu", "--out", str(out), "--budget", "0.5", *light,
             "--db", str(tmp_path / "h.db")]
        )
        == 0
    )  # fmt: skip
    records = [json.loads(line) for line in out.read_text().splitlines()]
    from irkit.measure.history import History

    with History.open(tmp_path / "h.db") as h:  # --db: each record kept as it came
        assert sorted(r["workload"] for r in h.record("")) == sorted(r["workload"] for r in records)
    workloads = [r["workload"] for r in records]
    assert workloads == ["gemm_64", "elementwise_chain", "softmax", "layernorm", "mlp",
                         "transformer_block", "conv_block"]  # fmt: skip
    assert all(r["kind"] == "irkit.attribution" for r in records)
    chain = records[1]
    fuse = next(p for p in chain["passes"] if p["pass"] == "fuse-kernels")
    assert fuse["changes_code"] and fuse["kernels"]["removed"] and fuse["kernels"]["added"]
    capsys.readouterr()
    # Resumable: a second run finds every job done and measures nothing.
    assert bench(["suite", "--quick", "--backend", "cpu", "--out", str(out), *light]) == 0
    assert capsys.readouterr().out.count(": skipped") == 7
    assert len(out.read_text().splitlines()) == 7

    html = tmp_path / "report.html"
    assert bench(["report", str(out), "-o", str(html)]) == 0
    page = html.read_text()
    assert page.count("<img src='data:image/png;base64,") == 14  # waterfall + roofline each
    assert "src='http" not in page and "<script" not in page  # self-contained, offline
    for w in workloads:
        assert f"<h2>{w} " in page


def _attribute(tmp_path, name: str, pipeline: str) -> str:
    path = tmp_path / f"{name}.json"
    code = bench(["attribute", *CHAIN, "-p", pipeline, "--budget", "2", "--json", str(path)])
    assert code == 0
    return str(path)


@pytest.mark.timing
def test_compare_flags_a_planted_regression_and_passes_an_a_a_pair(tmp_path, capsys) -> None:
    base = _attribute(tmp_path, "base", "fuse-kernels,lower-graph-to-loops")
    again = _attribute(tmp_path, "again", "fuse-kernels,lower-graph-to-loops")
    slow = _attribute(tmp_path, "slow", "fuse-kernels,lower-graph-to-loops,plant-work")
    capsys.readouterr()
    assert bench(["compare", base, again]) == 0
    assert "0 significant regression(s) in 1 workload(s)" in capsys.readouterr().out
    assert bench(["compare", base, slow]) == 1
    shown = capsys.readouterr().out
    assert "elementwise_chain" in shown and "REGRESSION" in shown
    assert "pass plant-work" in shown and "kernel planted_work" in shown


def test_compare_errors_are_one_line(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "irkit.other"}\nnot json\n')
    assert bench(["compare", str(bad), str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"irkit-bench: {bad}:2:1: error: not a JSON record") and "\n" not in err
    bad.write_text('{"kind": "irkit.attribution"}\n')
    assert bench(["compare", str(bad), str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"irkit-bench: {bad}:1: error: malformed attribution record: field workload is missing"
    )
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert bench(["report", str(empty)]) == 1
    assert "no attribution, tuning or advice records to report" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["compare", "only-one"], ["suite", "--backend"], ["report"]])
def test_usage_errors_exit_2(argv) -> None:
    with pytest.raises(SystemExit) as e:
        bench(argv)
    assert e.value.code == 2


def _record(full_median: float, plant_saved: float, kernel_s: float) -> dict:
    """A complete attribution record with chosen numbers (compare's logic, without timing)."""
    import json

    from tests.bad_inputs.cases import record

    rec = json.loads(record())
    half = 0.01 * full_median
    rec["total"]["full_s"] = {"median": full_median, "ci_low": full_median - half,
                              "ci_high": full_median + half}  # fmt: skip
    ci = {"value": plant_saved, "ci_low": plant_saved, "ci_high": plant_saved}
    rec["passes"] = [{"pass": "plant-work", "saved_s": ci, "speedup": ci, "significant": True,
                      "changes_code": True, "kernels": {"removed": [], "added": []}}]  # fmt: skip
    rec["kernels"]["full"] = [{"name": "planted_work", "seconds": kernel_s, "flops": 1.0,
                               "min_bytes": 4.0}]  # fmt: skip
    return rec


def test_the_waterfall_draws_a_ci_that_does_not_hold_its_point() -> None:
    # a percentile bootstrap CI need not hold its point estimate; the report drew it as
    # errors about the point, and matplotlib refused the negative one
    from irkit.measure.report import _pyplot, waterfall

    rec = _record(1e-3, 2e-4, 1e-4)
    rec["passes"][0]["saved_s"] = {"value": 2e-4, "ci_low": 2.1e-4, "ci_high": 2.5e-4}
    plt = _pyplot()
    fig = waterfall(plt, rec)
    bounds = sorted(y for line in fig.axes[0].collections[-2:] for seg in line.get_segments() for _, y in seg)  # fmt: skip
    # the saving's CI [0.21, 0.25] ms under T(before) = 1 ms: the bar's end between 0.75 and 0.79
    assert bounds[0] == pytest.approx(0.75) and bounds[-1] == pytest.approx(0.79)
    plt.close(fig)


def test_compare_names_the_pass_and_kernel_of_a_regression(tmp_path, capsys) -> None:
    import json

    base, slow, same = tmp_path / "base.jsonl", tmp_path / "slow.jsonl", tmp_path / "same.jsonl"
    base.write_text(json.dumps(_record(1e-3, 0.0, 1e-4)) + "\n")
    same.write_text(json.dumps(_record(1.001e-3, 0.0, 1e-4)) + "\n")
    slow.write_text(json.dumps(_record(1.5e-3, -5e-4, 6e-4)) + "\n")
    assert bench(["compare", str(base), str(same)]) == 0
    assert "0 significant regression(s) in 1 workload(s)" in capsys.readouterr().out
    assert bench(["compare", str(base), str(slow)]) == 1
    shown = capsys.readouterr().out
    assert "w: 1 ms -> 1.5 ms (+50.0%): REGRESSION" in shown
    assert "pass plant-work now saves" in shown and "kernel planted_work +0.5 ms" in shown
    # within both runs' CIs' reach, or under the threshold, it is not called a regression
    assert bench(["compare", str(base), str(slow), "--threshold", "0.6"]) == 0


def test_no_kernel_times_skips_the_kernel_phase_and_its_record_still_reports(
    tmp_path, capsys
) -> None:
    out = tmp_path / "nk.json"
    assert bench(["attribute", *CHAIN, "-p", "cse,fuse-kernels,lower-graph-to-loops", "--budget",
                  "0.5", "--no-kernel-times", "--json", str(out)]) == 0  # fmt: skip
    shown = capsys.readouterr().out
    assert "kernels changed by fuse-kernels (not timed: --no-kernel-times)" in shown
    record = json.loads(out.read_text())
    assert record["protocol"]["kernel_times"] is False
    fuse = next(p for p in record["passes"] if p["pass"] == "fuse-kernels")
    assert fuse["kernels"]["saved_s"] is None and fuse["kernels"]["added"]  # known, not timed
    assert all(k["seconds"] is None for k in record["kernels"]["full"])
    assert bench(["compare", str(out), str(out)]) == 0
    assert bench(["report", str(out), "-o", str(tmp_path / "nk.html")]) == 0
