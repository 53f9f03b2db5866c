"""Runs the lit/FileCheck suite in tests/filecheck, so that `pytest` alone runs everything."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import ROOT


def test_filecheck_suite() -> None:
    for tool in ("filecheck", "lit", "irkit-opt"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not on PATH: pip install -e '.[test]'")
    r = subprocess.run(
        ["lit", "-v", str(ROOT / "tests" / "filecheck")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert "Failed" not in r.stdout
