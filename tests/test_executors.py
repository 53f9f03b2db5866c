"""The suite on existing engines (issue 22): the same jobs through `--executor local`, Ray
tasks on a local Ray cluster the test starts, and submitit's local executor (Slurm's stand-in)
give the same set of records, one per job, each stamped with the worker that made it."""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

import pytest

from irkit.cli.bench import main as bench
from irkit.errors import IrkitError
from irkit.measure.executors import LocalExecutor, call, get_executor
from irkit.measure.suite import Job, SuiteOptions, run_job, run_suite
from tests.conftest import ROOT

JOBS = [
    {"workload": "chain", "model": str(ROOT / "examples/elementwise_chain.graph"),
     "dims": {"N": 8, "D": 32}, "strategy": "prefix"},
    {"workload": "softmax", "model": str(ROOT / "examples/softmax.graph"),
     "dims": {"R": 8, "C": 32}, "strategy": "prefix"},
]  # fmt: skip


def _suite(tmp_path: Path, executor: str, *extra: str) -> list[dict]:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps(j) + "\n" for j in JOBS))
    out = tmp_path / f"{executor}.jsonl"
    code = bench(["suite", "--jobs", str(jobs), "--backend", "cpu", "--budget", "0.3",
                  "--executor", executor, *extra, "--out", str(out)])  # fmt: skip
    assert code == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def _shape(records: list[dict]) -> set[tuple]:
    """What must agree between executors (timings may not): which jobs, done how."""
    return {(r["kind"], r["workload"], r["backend"], r["pipeline"], r["strategy"],
             tuple(p["pass"] for p in r["passes"]), tuple(p["changes_code"] for p in r["passes"]))
            for r in records}  # fmt: skip


@pytest.fixture(scope="module")
def local_records(tmp_path_factory) -> list[dict]:
    return _suite(tmp_path_factory.mktemp("local"), "local")


@pytest.mark.slow
def test_ray_gives_the_same_records_as_local(tmp_path, local_records) -> None:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, resources={"irkit_timing": 1}, include_dashboard=False,
             log_to_driver=False)  # fmt: skip
    try:
        records = _suite(tmp_path, "ray")
    finally:
        ray.shutdown()
    assert len(records) == len(JOBS) == len(local_records)
    assert _shape(records) == _shape(local_records)
    assert all(r["worker"]["executor"] == "ray" and r["fingerprint"]["git_sha"] for r in records)


@pytest.mark.slow
def test_slurm_through_submitit_gives_the_same_records_as_local(tmp_path, local_records) -> None:
    pytest.importorskip("submitit")
    records = _suite(tmp_path, "slurm", "--slurm-cluster", "local")
    assert _shape(records) == _shape(local_records)
    assert all(r["worker"]["executor"] == "slurm" for r in records)


class Twice:
    """An executor whose engine ran every job twice (a lost worker retried after all)."""

    name = "twice"

    def map(self, fn, jobs):
        for job in jobs:
            outcome = call(fn, job, self.name)
            yield job, outcome
            yield job, outcome


def test_a_job_run_twice_is_recorded_once(tmp_path) -> None:
    options = SuiteOptions("default-cpu", "cpu", budget=0.2)
    job = Job("chain", JOBS[0]["model"], JOBS[0]["dims"], "prefix")
    out = tmp_path / "out.jsonl"
    statuses = [s for _, _, s in run_suite(out, (job,), partial(run_job, options=options), "cpu",
                                           "default-cpu", executor=Twice())]  # fmt: skip
    assert statuses == ["done"]
    assert len(out.read_text().splitlines()) == 1


def test_a_failing_job_is_a_record_with_its_worker(tmp_path) -> None:
    def broken(job):
        raise IrkitError("no such model")

    (job_, (tag, record)), = LocalExecutor().map(broken, [Job("x", "x.graph")])  # fmt: skip
    assert tag == "failed" and record["error"] == "error: no such model"
    assert record["worker"]["executor"] == "local"


@pytest.mark.parametrize(
    ("name", "module", "extra"), [("ray", "ray", "ray"), ("slurm", "submitit", "slurm")]
)
def test_a_missing_engine_is_one_line(
    name: str, module: str, extra: str, monkeypatch, tmp_path
) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(IrkitError, match=rf"pip install -e '\.\[{extra}\]'"):
        get_executor(name, tmp_path / "out.jsonl")


def _dies_once(marker: str, job) -> dict:
    """The first attempt kills its worker process outright; the retry returns a record."""
    import os

    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return {"kind": "irkit.attribution", "workload": job.workload, "backend": "cpu",
            "pipeline": "p", "strategy": job.strategy, "passes": []}  # fmt: skip


@pytest.mark.slow
def test_a_lost_ray_worker_is_retried_and_counted_once(tmp_path) -> None:
    ray = pytest.importorskip("ray")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, resources={"irkit_timing": 1}, include_dashboard=False,
             log_to_driver=False)  # fmt: skip
    try:
        out = tmp_path / "out.jsonl"
        job = Job("chain", JOBS[0]["model"], JOBS[0]["dims"], "prefix")
        run = partial(_dies_once, str(tmp_path / "died"))
        results = list(run_suite(out, (job,), run, "cpu", "p", executor=get_executor("ray", out)))
    finally:
        ray.shutdown()
    assert [s for _, _, s in results] == ["done"] and (tmp_path / "died").exists()
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["worker"]["executor"] == "ray"


def test_the_report_lists_the_workers(tmp_path, local_records) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in local_records))
    page = tmp_path / "report.html"
    assert bench(["report", str(results), "-o", str(page)]) == 0
    html = page.read_text()
    assert "<h2>workers</h2>" in html and "<td>local</td>" in html


@pytest.mark.slow
def test_tune_runs_on_an_executor_and_records_here(tmp_path, monkeypatch) -> None:
    """`tune --executor slurm` (submitit's local executor): the whole search is one job on a
    worker; its record comes back stamped with the worker and lands in this machine's
    tuning database for the machine it was measured on."""
    pytest.importorskip("submitit")
    import irkit
    from irkit import tuning

    monkeypatch.setenv("IRKIT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "tune.json"
    code = bench(["tune", "examples/gemm.graph", "--backend", "cpu", "--dim", "M=32", "--dim", "N=64",
                  "--dim", "K=32", "--space", "cpu-tile-matmul{mr=4,6;nr=32,64}", "--budget", "1",
                  "--executor", "slurm", "--slurm-cluster", "local", "--json", str(out)])  # fmt: skip
    assert code == 0
    record = json.loads(out.read_text())
    assert record["worker"]["executor"] == "slurm" and record["machine"]["backend"] == "cpu"
    graph = irkit.load("examples/gemm.graph", {"M": 32, "N": 64, "K": 32})
    entry = tuning.lookup(graph, "default-cpu", record["machine"])
    assert entry is not None and entry["verdict"] == record["verdict"]
