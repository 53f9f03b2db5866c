"""Synthetic histories: a repository of plugin passes over many commits, some of which make a
pass emit slower or faster code by a planted amount (for checking `nightly`, the rerun
rules and `history bisect` against the truth: tests/test_nightly.py,
benchmarks/history_detection.py).

    shas = plugin_history(root, works=[20000] * 6 + [30000] * 6 + [10000] * 6)
    config = coverage_config(root, db=..., results=...)

The plugin's one pass, `synthetic-schedule` (optional), adds a spin kernel
(`irkit.measure.plants.spin_kernel`) of `WORK` dependent multiply-adds to a loop-level
program; each commit sets `WORK` (a commit that keeps it changes only a note), so the
program's time at each commit is known up to the spin's cost per iteration.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

PASS = "synthetic-schedule"
PIPELINE = f"fuse-kernels,lower-graph-to-loops,cpu-tile-matmul,{PASS}"
MODEL = Path(__file__).resolve().parents[1] / "examples" / "mlp.graph"
DIMS = {"B": 8, "D": 64, "F": 256}

SOURCE = '''"""A plugin pass whose code changes over the history (irkit.measure.histories)."""

from dataclasses import dataclass

from xdsl.passes import ModulePass

from irkit.loops import require_loop_level
from irkit.measure.plants import call_from_driver, spin_kernel
from irkit.passes import register_pass

WORK = {work}


@register_pass
@dataclass(frozen=True)
class SyntheticSchedulePass(ModulePass):
    """Schedules the program's loops (here: adds WORK multiply-adds of its own)."""

    name = "{name}"
    is_optimization = True

    def apply(self, ctx, op):
        require_loop_level(op, self.name)
        call_from_driver(op, spin_kernel("synthetic_schedule_work", WORK))
'''


def _git(root: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_DATE": "2026-01-01T00:00:00", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00"}
    import os

    done = subprocess.run(
        ["git", "-C", str(root), *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    return done.stdout.strip()


def plugin_history(root: Path, works: Sequence[int]) -> list[str]:
    """A git repository at `root` with one commit per entry of `works` (the pass's WORK at
    that commit); the commits' hashes, oldest first."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.email", "history@irkit.invalid")
    _git(root, "config", "user.name", "synthetic history")
    shas = []
    for i, work in enumerate(works):
        (root / "passes.py").write_text(SOURCE.format(work=work, name=PASS))
        (root / "NOTES").write_text(f"commit {i}\n")
        _git(root, "add", "passes.py", "NOTES")
        previous = works[i - 1] if i else None
        what = "a note" if work == previous else f"schedule: WORK {previous} -> {work}"
        _git(root, "commit", "-q", "-m", f"{i}: {what}")
        shas.append(_git(root, "rev-parse", "HEAD"))
    return shas


def coverage_config(
    root: Path, db: Path, results: Path, budget: float = 0.3, rerun_budget: float = 20.0
) -> Path:
    """A nightly configuration measuring the synthetic workload with the plugin at `root`
    (`budget`: each night's timing; `rerun_budget`: each rerun's at most)."""
    dims = ", ".join(f"{k} = {v}" for k, v in DIMS.items())
    path = root.parent / f"{root.name}-nightly.toml"
    path.write_text(
        f'db = "{db}"\nresults = "{results}"\nbudget = {budget}\nrerun_budget = {rerun_budget}\n'
        f'plugins = ["{root / "passes.py"}"]\n\n[[workloads]]\nname = "synthetic"\n'
        f'model = "{MODEL}"\ndims = {{ {dims} }}\npipelines = ["{PIPELINE}"]\n'
    )
    return path
