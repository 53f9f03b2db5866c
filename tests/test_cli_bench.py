"""irkit-bench as a user runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "irkit.cli.bench", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_reference_command_summarises_outputs() -> None:
    r = bench("reference", "examples/mlp.graph", "--dim", "B=2")
    assert r.returncode == 0, r.stderr
    assert "[2, 1024]" in r.stdout and "yes" in r.stdout


def test_reference_command_errors_are_one_line() -> None:
    r = bench("reference", "examples/mlp.graph", "--dim", "Z=2")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert (
        r.stderr.strip()
        == "irkit-bench: examples/mlp.graph: error: --dim Z: the model declares no such dim (declared: B, D, F)"
    )
    r = bench()
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_run_checks_then_times_every_kernel(tmp_path) -> None:
    import json

    out = tmp_path / "run.json"
    r = bench("run", "examples/elementwise_chain.graph", "-p", "baseline-cpu", "--backend", "cpu", "--dim", "N=32",
              "--dim", "D=64", "--budget", "0.05", "--json", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "z: ok (relative error" in r.stdout
    for kernel in (
        "k0_add",
        "k1_mul",
        "k2_relu",
        "k3_sub",
        "k4_sigmoid",
        "k5_mul",
        "graph (driver",
    ):
        assert kernel in r.stdout
    record = json.loads(out.read_text())
    assert record["correct"] is True and record["backend"] == "cpu"
    assert record["pipeline"] == "baseline-cpu"
    assert [k["name"] for k in record["kernels"]][:2] == ["k0_add", "k1_mul"]
    for k in record["kernels"]:
        s = k["seconds"]
        assert 0 < s["ci_low"] <= s["median"] <= s["ci_high"]
        assert k["flops"] == 32 * 64 * (3 if k["name"] == "k4_sigmoid" else 1)
        assert k["stop_reason"] in ("precision", "budget", "max_samples")
    assert record["fingerprint"]["cpu"]


def test_a_wrong_result_is_reported_and_never_timed(tmp_path, monkeypatch, capsys) -> None:
    """A deliberately broken pass (addf -> subf at the loop level) must be caught."""
    import json

    import tests.broken  # noqa: F401  (registers break-add)
    from irkit.cli.bench import main

    out = tmp_path / "wrong.json"
    code = main(["run", "examples/elementwise_chain.graph", "--backend", "cpu", "--dim", "N=8",
                 "--dim", "D=8", "-p", "lower-graph-to-loops,break-add", "--json", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 1
    assert "z: WRONG" in printed and "wrong result: not timed" in printed
    record = json.loads(out.read_text())
    assert record["correct"] is False and record["kernels"] == [] and record["graph"] is None

    # A wrong run never replaces an existing record (a good run's): it goes beside it.
    out.write_text('{"kept": true}\n')
    code = main(["run", "examples/elementwise_chain.graph", "--backend", "cpu", "--dim", "N=8",
                 "--dim", "D=8", "-p", "lower-graph-to-loops,break-add", "--json", str(out)])  # fmt: skip
    assert code == 1
    assert out.read_text() == '{"kept": true}\n'
    beside = tmp_path / "wrong.wrong.json"
    assert json.loads(beside.read_text())["correct"] is False
    assert f"the failing run's record is in {beside}" in capsys.readouterr().out.replace("\n", "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wrong.json", "wrong.wrong.json"]


def test_run_errors_are_one_line() -> None:
    r = bench("run", "examples/nope.graph")
    assert (
        r.returncode == 1
        and r.stderr.strip() == "irkit-bench: examples/nope.graph: error: no such file"
    )
    r = bench("run", "examples/gemm.graph", "--backend", "tpu")
    assert r.returncode == 1
    assert (
        r.stderr.strip()
        == "irkit-bench: error: unknown backend 'tpu'; choose from auto, cpu, cuda, cuda-sim, cuda-host, reference"
    )


def test_run_on_cuda_without_a_device_is_one_line() -> None:
    from irkit.runtime import BACKENDS

    if BACKENDS["cuda"]().available()[0]:
        pytest.skip("a CUDA device is present")
    r = bench("run", "examples/gemm.graph", "--backend", "cuda")
    assert r.returncode == 1
    assert (
        r.stderr.strip()
        == "irkit-bench: error: backend cuda is not available: no CUDA device available"
    )


def test_run_on_cuda_sim_checks_and_says_its_times_are_not_a_gpus() -> None:
    r = bench("run", "examples/softmax.graph", "--backend", "cuda-sim", "--dim", "R=8",
              "--dim", "C=40", "--budget", "0.05")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "y: ok" in r.stdout and "not a GPU's" in r.stdout and "k0_softmax" in r.stdout
