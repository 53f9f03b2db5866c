"""irkit-bench as a user runs it."""

from __future__ import annotations

import subprocess
import sys

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
        == "irkit-bench: examples/mlp.graph: error: --dim Z: the model declares no such dim (declared: B)"
    )
    r = bench()
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
