"""Differential fuzzing (irkit/fuzz.py) with a small, derandomized budget: random valid
models x random subsets and options of the default pipeline's optional passes, on the CPU
and on cuda-sim, against the reference. Also: a planted miscompiling pass is found and
shrunk to a small reproducer, and every past finding (tests/fuzz_regressions) stays fixed."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

import tests.broken  # noqa: F401  (registers break-add)
from irkit.fuzz import check_case, fuzz_round, graph_sources, pipelines, write_reproducer

ROOT = Path(__file__).resolve().parent.parent
REGRESSIONS = sorted((ROOT / "tests" / "fuzz_regressions").glob("*.graph"))
BUDGET = {"cpu": 100, "cuda-sim": 40}


@pytest.mark.parametrize("backend", ["cpu", "cuda-sim"])
def test_random_models_and_pipelines_match_the_reference(backend: str) -> None:
    @settings(max_examples=BUDGET[backend], deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(graph_sources(backend), pipelines(backend))
    def prop(source: str, pipeline: str) -> None:
        check_case(source, pipeline, backend)

    prop()


def test_a_planted_miscompile_is_found_and_shrunk(tmp_path) -> None:
    counts: dict[str, int] = {}
    finding = fuzz_round("cpu", 30, seed=1, counts=counts, append="break-add")
    assert finding is not None and "WRONG" in finding.error and "break-add" in finding.pipeline
    body = [ln for ln in finding.source.splitlines() if ln and not ln.startswith(("model", "input", "param", "output"))]  # fmt: skip
    assert len(body) <= 2, finding.source  # shrunk to (about) the one op break-add breaks
    path = write_reproducer(finding, tmp_path)
    header = path.read_text().splitlines()[:2]
    assert header[0].startswith("# irkit fuzz reproducer: AssertionError: ")
    run = re.match(r"# RUN: (irkit-bench run \S+ -p '[^']+' --backend cpu)$", header[1])
    assert run, header[1]
    r = subprocess.run(f"{run.group(1)} --plugin {ROOT / 'tests' / 'broken.py'} --budget 0.1",
                       shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 1 and "WRONG" in r.stdout, (r.stdout, r.stderr)


@pytest.mark.parametrize("path", REGRESSIONS, ids=lambda p: p.stem)
def test_past_findings_stay_fixed(path: Path) -> None:
    run = re.search(r"# RUN: irkit-bench run \S+ -p '([^']*)' --backend (\S+)", path.read_text())
    assert run, path
    check_case(path.read_text(), run.group(1), run.group(2))


KNOWN = sorted((ROOT / "tests" / "fuzz_known").glob("*.graph"))


@pytest.mark.xfail(strict=True, reason="an open finding (its header says which issue)")
@pytest.mark.parametrize("path", KNOWN, ids=lambda p: p.stem)
def test_open_findings_still_fail(path: Path) -> None:
    """Findings not fixed yet: each must still fail, so that a fix moves it (strict xfail)
    to tests/fuzz_regressions."""
    run = re.search(r"# RUN: irkit-bench run \S+ -p '([^']*)' --backend (\S+)", path.read_text())
    assert run, path
    check_case(path.read_text(), run.group(1), run.group(2))
