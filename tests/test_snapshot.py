"""Snapshot and replay (issue 22): one kernel's code, launch and real data kept in a file,
then run alone, checked bit for bit against what it computed in its model, and timed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from irkit.cli.bench import main as bench
from irkit.measure.snapshot import Snapshot, replay, take_snapshots
from tests.conftest import EXAMPLES, SMALL


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpu", "cuda-sim"])
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_kernel_round_trips_bit_identically(
    example: Path, backend: str, tmp_path: Path
) -> None:
    snaps = take_snapshots(example, None, None, backend, SMALL[example.stem], seed=3)
    assert snaps
    for snap in snaps:
        path = tmp_path / f"{snap.kernel}.snap"
        snap.save(path)
        loaded = Snapshot.load(path)
        assert loaded.meta == snap.meta
        assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(loaded.after, snap.after, strict=True))  # fmt: skip
        if backend == "cuda-sim":
            assert loaded.cubin is not None and loaded.cubin[:4] == b"\x7fELF"
        result = replay(loaded, budget_s=0.01)
        assert result.identical and result.exact, (snap.kernel, result.mismatches)
        assert result.same_code, (snap.kernel, result.notes)
        assert result.seconds.median > 0


def _mlp_snapshot(tmp_path: Path, kernel: str = "k1_matmul") -> Path:
    out = tmp_path / "k.snap"
    code = bench(["snapshot", "examples/mlp.graph", "--kernel", kernel, "--dim", "B=4",
                  "--dim", "D=64", "--dim", "F=256", "-o", str(out)])  # fmt: skip
    assert code == 0 and out.exists()
    return out


def test_the_cli_snapshots_replays_and_compares_with_the_current_commit(tmp_path, capsys) -> None:
    path = _mlp_snapshot(tmp_path)
    meta = Snapshot.load(path).meta
    assert meta["backend"] == "cpu" and meta["model"] == "examples/mlp.graph"
    assert meta["fingerprint"]["git_sha"] and "define" in meta["source"]  # LLVM IR
    assert [a["written"] for a in meta["arguments"]].count(True) == 1
    record = tmp_path / "replay.json"
    code = bench(["replay", str(path), "--against-current", "--budget", "0.2",
                  "--json", str(record)])  # fmt: skip
    shown = capsys.readouterr().out
    assert code == 0, shown
    assert "bit-identical to the recorded outputs" in shown and "recorded / current" in shown
    result = json.loads(record.read_text())
    assert result["matches"] and result["same_code"]
    assert (
        result["against_current"]["same_code"]
        and result["against_current"]["current_bit_identical"]
    )


def test_a_replay_that_computes_something_else_fails(tmp_path, capsys) -> None:
    path = _mlp_snapshot(tmp_path)
    snap = Snapshot.load(path)
    written = [i for i, a in enumerate(snap.meta["arguments"]) if a["written"]]
    snap.after[written[0]] = snap.after[written[0]] + np.float32(1e-3)
    snap.save(path)
    code = bench(["replay", str(path), "--budget", "0.05"])
    shown = capsys.readouterr().out
    assert code == 1 and "not bit-identical to the recorded outputs" in shown


def test_a_gpu_snapshot_replays_on_the_other_host_path_within_tolerance(tmp_path) -> None:
    (snap,) = take_snapshots("examples/softmax.graph", ["k0_softmax"], None, "cuda-sim",
                             {"R": 8, "C": 40})  # fmt: skip
    result = replay(snap, backend="cuda-host", budget_s=0.02)
    assert result.identical and not result.exact


def test_snapshot_errors_are_one_line(tmp_path, capsys) -> None:
    code = bench(
        ["snapshot", "examples/mlp.graph", "--kernel", "k9", "-o", str(tmp_path / "x.snap")]
    )
    err = capsys.readouterr().err.strip()
    assert (
        code == 1 and len(err.splitlines()) == 1 and "no kernel 'k9'" in err and "k1_matmul" in err
    )
    code = bench(
        ["snapshot", "examples/mlp.graph", "--kernel", "k1_matmul", "-o", "examples/mlp.graph"]
    )
    err = capsys.readouterr().err.strip()
    assert code == 1 and "refusing to write over it" in err
    code = bench(["replay", "examples/mlp.graph"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and err.endswith("not an irkit snapshot (irkit-bench snapshot writes them)")
    assert not (tmp_path / "x.snap").exists()


def test_a_bf16_snapshot_keeps_its_type_and_replays_bit_identically(tmp_path, capsys) -> None:
    """`snapshot --dtype bf16`: the model converted first; the archive's bf16 arguments
    (which npz stores as raw 2-byte records) come back as bfloat16, and the replay of the
    recorded code is bit-identical (it had refused: "dtype |V2, expected bfloat16")."""
    out = tmp_path / "k.snap"
    code = bench(["snapshot", "examples/gemm.graph", "--kernel", "k0_matmul", "--backend",
                  "cuda-host", "--dtype", "bf16", "--dim", "M=64", "--dim", "N=64", "--dim",
                  "K=64", "-o", str(out)])  # fmt: skip
    assert code == 0
    snap = Snapshot.load(out)
    assert snap.meta["dtype"] == "bf16"
    assert {a.dtype.name for a in snap.before} == {"bfloat16"}
    capsys.readouterr()
    assert bench(["replay", str(out), "--budget", "0.05"]) == 0
    assert "bit-identical to the recorded outputs" in capsys.readouterr().out


def test_bisect_and_suite_jobs_take_the_dtype(tmp_path, capsys) -> None:
    """`bisect --dtype` checks the converted model; a suite job's "dtype" reaches its
    attribution and its key (an f32 job's key is what it was), and a wrong one is refused."""
    from irkit.errors import IrkitError
    from irkit.measure.suite import Job, read_jobs

    code = bench(["bisect", "examples/gemm.graph", "--backend", "cuda-host", "--dtype", "bf16",
                  "--dim", "M=32", "--dim", "N=32", "--dim", "K=32"])  # fmt: skip
    assert code == 0 and "nothing to bisect" in capsys.readouterr().out
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(
        '{"workload": "g", "model": "m.graph", "dtype": "bf16"}\n{"workload": "h", "model": "m.graph"}\n'
    )
    bf16, f32 = read_jobs(jobs)
    assert bf16.dtype == "bf16" and f32.dtype is None
    assert bf16.key("cpu", "default-cpu") != Job("g", bf16.model).key("cpu", "default-cpu")
    assert f32.key("cpu", "p") == Job("h", f32.model).key("cpu", "p")
    jobs.write_text('{"workload": "g", "model": "m.graph", "dtype": "f8"}\n')
    with pytest.raises(IrkitError, match='"dtype" is'):
        read_jobs(jobs)
