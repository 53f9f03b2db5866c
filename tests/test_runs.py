"""Attribution repeated at the run level (`irkit-bench attribute --runs N`): the runs'
spread is the CI, so a run-level offset no single run's CI holds is in it."""

from __future__ import annotations

import copy
import json
import math

import pytest

from irkit.cli.bench import main as bench
from irkit.errors import IrkitError
from irkit.measure.attribution import attribute
from irkit.measure.runs import attribute_runs, combine_runs
from irkit.measure.stats import t_quantile

CHAIN = "examples/elementwise_chain.graph"
TINY = {"N": 8, "D": 16}


@pytest.fixture(scope="module")
def one_run() -> dict:
    return attribute(CHAIN, "cse,fuse-kernels,lower-graph-to-loops", "cpu", "prefix", TINY,
                     budget_s=0.3, kernel_times=False).to_json()  # fmt: skip


def _runs(record: dict, savings_us: list[float], half_us: float = 0.1) -> list[dict]:
    """Copies of `record` whose fuse-kernels saving is each of `savings_us`, each with a CI
    of +-`half_us` (a run sure of itself) and a total to match."""
    out = []
    for s in savings_us:
        r = copy.deepcopy(record)
        p = next(p for p in r["passes"] if p["pass"] == "fuse-kernels")
        p["saved_s"] = {"value": s * 1e-6, "ci_low": (s - half_us) * 1e-6, "ci_high": (s + half_us) * 1e-6}  # fmt: skip
        p["speedup"] = {"value": 1 + s / 10, "ci_low": 1.0, "ci_high": 2.0}
        r["total"]["saved_s"] = dict(p["saved_s"])
        r["total"]["speedup"] = dict(p["speedup"])
        out.append(r)
    return out


def test_a_run_level_offset_widens_the_ci_beyond_each_run_s(one_run: dict) -> None:
    """Three runs each sure of its own saving (+-0.1 us) but 1 us apart: the combined CI is
    Student's t on their spread, wide enough to hold them, and the verdict follows it."""
    rec = combine_runs(_runs(one_run, [1.0, 2.0, 3.0]), gap_s=5.0)
    fk = next(p for p in rec["passes"] if p["pass"] == "fuse-kernels")
    half = t_quantile(0.975, 2) * 1.0 / math.sqrt(3)  # sd of 1, 2, 3 is 1
    assert fk["saved_s"]["value"] == pytest.approx(2e-6)
    assert fk["saved_s"]["ci_low"] == pytest.approx((2 - half) * 1e-6)
    assert fk["saved_s"]["ci_high"] == pytest.approx((2 + half) * 1e-6)
    assert not fk["significant"]  # each run alone called it, the runs do not
    assert fk["min_detectable_s"] == pytest.approx((t_quantile(0.975, 2) + t_quantile(0.8, 2)) / math.sqrt(3) * 1e-6)  # fmt: skip
    # what each run claimed against what the runs did: only the middle run's CI held 2 us
    assert fk["run_to_run"]["runs_holding_mean"] == 1
    assert fk["run_to_run"]["sd_s"] == pytest.approx(1e-6)
    assert fk["run_to_run"]["run_se_rms_s"] == pytest.approx(0.1e-6 / 1.96)
    # a pass that changes no code stays exactly 0; the sum stays exact
    cse = next(p for p in rec["passes"] if p["pass"] == "cse")
    assert cse["saved_s"] == {"value": 0.0, "ci_low": 0.0, "ci_high": 0.0} and not cse["significant"]  # fmt: skip
    assert rec["total"]["sum_of_contributions_s"] == sum(p["saved_s"]["value"] for p in rec["passes"])  # fmt: skip
    assert rec["protocol"]["runs"]["count"] == 3 and rec["protocol"]["runs"]["gap_s"] == 5.0
    assert len(rec["runs"]) == 3 and rec["runs"][2]["passes"]["fuse-kernels"]["value"] == 3e-6
    # runs that agree: a narrow CI, significant
    agree = combine_runs(_runs(one_run, [2.0, 2.01, 1.99]))
    assert next(p for p in agree["passes"] if p["pass"] == "fuse-kernels")["significant"]
    # speedups combine on logs: the geometric mean
    assert fk["speedup"]["value"] == pytest.approx((1.1 * 1.2 * 1.3) ** (1 / 3))


def test_runs_of_different_attributions_are_refused(one_run: dict) -> None:
    other = copy.deepcopy(one_run)
    other["pipeline"] = "fuse-kernels,lower-graph-to-loops"
    with pytest.raises(IrkitError, match="the runs differ in pipeline"):
        combine_runs([one_run, other])
    with pytest.raises(IrkitError, match="needs two runs or more"):
        combine_runs([one_run])


def test_attribute_runs_spreads_the_runs_and_checks_its_arguments(one_run: dict) -> None:
    slept: list[float] = []
    calls: list[int] = []

    def run(i: int) -> dict:
        calls.append(i)
        return _runs(one_run, [1.0 + i])[0]

    rec = attribute_runs(run, 4, 2.5, sleep=slept.append)
    assert calls == [0, 1, 2, 3] and slept == [2.5, 2.5, 2.5]
    assert rec["protocol"]["runs"]["count"] == 4
    assert attribute_runs(lambda i: one_run, 1) is one_run  # one run: its record as it is
    for bad in (0, 65, True, 2.0):
        with pytest.raises(IrkitError, match="runs must be an integer from 1 to 64"):
            attribute_runs(run, bad)  # type: ignore[arg-type]
    with pytest.raises(IrkitError, match="gap between runs"):
        attribute_runs(run, 2, -1.0)


def test_t_quantiles_at_one_and_two_degrees_of_freedom_are_exact() -> None:
    assert t_quantile(0.975, 1) == pytest.approx(12.7062, abs=1e-4)
    assert t_quantile(0.975, 2) == pytest.approx(4.3027, abs=1e-4)
    assert t_quantile(0.80, 2) == pytest.approx(1.0607, abs=1e-4)
    assert t_quantile(0.975, 3) == pytest.approx(3.1824, abs=5e-3)


def test_the_cli_repeats_the_run_and_says_so(tmp_path, capsys) -> None:
    out = tmp_path / "runs.json"
    code = bench(["attribute", CHAIN, "--backend", "cpu", "--dim", "N=8", "--dim", "D=16",
                  "-p", "cse,fuse-kernels,lower-graph-to-loops", "--strategy", "prefix",
                  "--budget", "0.3", "--runs", "2", "--run-gap", "0.1", "--json", str(out)])  # fmt: skip
    text = " ".join(capsys.readouterr().out.split())
    assert code == 0
    assert "95% CI over 2 runs, Student's t on their spread" in text
    assert "run to run (2 runs, 0.1 s apart" in text
    record = json.loads(out.read_text())
    assert record["protocol"]["runs"]["count"] == 2 and len(record["runs"]) == 2
    assert record["kernels"]["full"]  # the first run's kernels, timed alone
    with pytest.raises(SystemExit) as exit_:
        bench(["attribute", CHAIN, "--runs", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1
    assert "argument --runs: must be an integer from 1 to 64, got '0'" in err[0]
