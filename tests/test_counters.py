"""`irkit-bench run --counters`: ncu's CSV read into kernel records, and a clear line where
ncu cannot be used. The CSV is what ncu 2025.3.1 printed for irkit's softmax kernel on an
H100 (benchmarks/gpu_acceptance.sh's ncu probe)."""

from __future__ import annotations

from pathlib import Path

import pytest

from irkit.errors import IrkitError
from irkit.measure.counters import collect, parse_ncu_csv

DATA = Path(__file__).parent / "data"


def test_ncu_csv_becomes_counters_per_kernel() -> None:
    text = "==PROF== Connected to process 1049\nsome program output\n"
    text += (DATA / "ncu_softmax_h100.csv").read_text()
    assert parse_ncu_csv(text) == {
        "k0_softmax": {
            "dram_throughput_pct": 8.19,
            "l2_hit_rate_pct": 60.63,
            "achieved_occupancy_pct": 42.48,
        }
    }


def test_no_report_means_no_counters() -> None:
    assert parse_ncu_csv("==ERROR== the profiler could not start\n") == {}


def test_missing_ncu_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(IrkitError, match="ncu .* is not on the PATH"):
        collect("examples/softmax.graph", None, {}, 0)


def test_counters_on_a_backend_without_them(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "irkit.cli.bench", "run", "examples/softmax.graph",
         "--backend", "cpu", "--dim", "R=4", "--dim", "C=32", "--budget", "0.05", "--counters"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "--counters: the cpu backend has no hardware counters" in done.stdout
