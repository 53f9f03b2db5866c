"""Fault isolation in the suite: a job whose generated code segfaults, or hangs, becomes a
failure record with a reproducer, and the suite goes on; an interrupted suite resumes
without losing or redoing a finished job (tests/crashing.py plants the faults)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from irkit.cli.bench import main as bench
from irkit.measure.records import append_record, read_records, repair_torn_tail

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = str(ROOT / "tests" / "crashing.py")
CHAIN = str(ROOT / "examples" / "elementwise_chain.graph")
SMALL = {"N": 8, "D": 8}


def _job(workload: str, pipeline: str, **extra) -> dict:
    return {"workload": workload, "model": CHAIN, "dims": SMALL, "pipeline": pipeline,
            "strategy": "prefix", **extra}  # fmt: skip


GOOD = "cse,fuse-kernels,lower-graph-to-loops"
CRASH = "fuse-kernels,lower-graph-to-loops,plant-crash"
HANG = "fuse-kernels,lower-graph-to-loops,plant-crash{hang=true}"


def _write_jobs(path: Path, jobs: list[dict]) -> str:
    path.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    return str(path)


def test_a_crashing_and_a_hanging_job_are_failure_records_and_the_suite_goes_on(
    tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.delenv("IRKIT_PLUGINS", raising=False)  # --plugin sets it for the workers
    jobs = _write_jobs(tmp_path / "jobs.jsonl", [
        _job("good1", GOOD), _job("crash", CRASH), _job("hang", HANG, timeout_s=6),
        _job("good2", GOOD.replace("cse,", "")),
    ])  # fmt: skip
    out = tmp_path / "r.jsonl"
    code = bench(["suite", "--jobs", jobs, "--backend", "cpu", "--budget", "0.2", "--out", str(out),
                  "--plugin", PLUGIN])  # fmt: skip
    shown = capsys.readouterr().out
    assert code == 1  # some jobs failed; the others are all there
    records = {r["workload"]: r for r in read_records(out)}
    assert list(records) == ["good1", "crash", "hang", "good2"]
    assert records["good1"]["kind"] == records["good2"]["kind"] == "irkit.attribution"
    crash, hang = records["crash"], records["hang"]
    assert crash["kind"] == hang["kind"] == "irkit.attribution.failed"
    assert crash["error"].startswith(
        "crashed: signal SIGSEGV (11) while compiling and checking variant"
    )
    assert hang["error"].startswith("timed out after 6 s while")
    assert "crash: failed: crashed: signal SIGSEGV" in shown
    # the reproducer runs the very variant that crashed, alone, with the plugin
    assert f"-p {CRASH} --backend cpu --dim N=8 --dim D=8" in crash["reproducer"]
    r = subprocess.run(crash["reproducer"], shell=True, capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)  # fmt: skip
    assert r.returncode in (-signal.SIGSEGV, 128 + signal.SIGSEGV), (r.returncode, r.stderr)


def test_an_interrupted_suite_resumes_without_losing_or_redoing_records(tmp_path) -> None:
    jobs = _write_jobs(tmp_path / "jobs.jsonl", [
        _job("good1", GOOD), _job("crash", CRASH), _job("hang", HANG, timeout_s=8),
        _job("good2", GOOD.replace("cse,", "")),
    ])  # fmt: skip
    out = tmp_path / "r.jsonl"
    argv = [sys.executable, "-m", "irkit.cli.bench", "suite", "--jobs", jobs, "--backend", "cpu",
            "--budget", "0.2", "--out", str(out), "--plugin", PLUGIN]  # fmt: skip
    # a suite started in the background by a non-interactive shell inherits SIGINT ignored
    # (and Python then never raises KeyboardInterrupt): the interrupted suite is a foreground one
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # interrupt while the hanging job runs
        if out.exists() and out.read_text().count("\n") >= 2:
            break
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err, (proc.returncode, err)
    first = out.read_text()
    assert [json.loads(line)["workload"] for line in first.splitlines()] == ["good1", "crash"]
    # a record torn by a kill mid-write is cut off before the next one is appended
    with out.open("a") as f:
        f.write('{"kind": "irkit.attribution", "workload": "go')
    r = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert r.returncode == 1, r.stderr  # the crash and the hang are failures
    assert "good1: skipped" in r.stdout and "crash: skipped: failed before" in r.stdout
    final = out.read_text()
    assert final.startswith(first)  # nothing finished was lost or rewritten
    workloads = [json.loads(line)["workload"] for line in final.splitlines()]
    assert workloads == ["good1", "crash", "hang", "good2"]  # each job once


def test_torn_tail_repair_keeps_whole_records(tmp_path) -> None:
    path = tmp_path / "r.jsonl"
    append_record(path, {"a": 1})
    assert not repair_torn_tail(path)
    with path.open("a") as f:
        f.write('{"b": ')
    assert repair_torn_tail(path)
    append_record(path, {"c": 3})
    assert list(read_records(path)) == [{"a": 1}, {"c": 3}]
    path.write_text('{"only": "torn')
    assert repair_torn_tail(path) and path.read_text() == ""


def test_gzipped_record_files_read_as_their_text(tmp_path) -> None:
    """Curated results are committed gzipped (benchmarks/results/fidelity); every reader
    takes them as they are, and a damaged one is an error naming the file."""
    import gzip

    import pytest

    from irkit.errors import IrkitError

    path = tmp_path / "r.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"a": 1}\n{"b": 2}\n'))
    assert list(read_records(path)) == [{"a": 1}, {"b": 2}]
    path.write_bytes(gzip.compress(b'{"a": 1}\n')[:-6])
    with pytest.raises(IrkitError) as e:
        list(read_records(path))
    assert "r.jsonl.gz" in str(e.value) and "cannot read" in str(e.value)


def test_plugins_load_from_the_command_line_and_the_environment(
    tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.delenv("IRKIT_PLUGINS", raising=False)
    from irkit.cli.opt import main as opt

    assert opt([CHAIN, "--dim", "N=4", "--dim", "D=4", "-p", "lower-graph-to-loops,plant-crash",
                "-L", PLUGIN]) == 0  # fmt: skip
    assert "func.func private @crash" in capsys.readouterr().out
    assert os.environ["IRKIT_PLUGINS"] == PLUGIN  # what a worker process will load
    assert bench(["run", CHAIN, "--plugin", str(tmp_path / "nope.py")]) == 1
    assert "--plugin: no such file" in capsys.readouterr().err
    assert bench(["run", CHAIN, "--plugin", "no_such_module_xyz"]) == 1
    assert (
        "--plugin no_such_module_xyz: cannot import it: ModuleNotFoundError"
        in capsys.readouterr().err
    )
