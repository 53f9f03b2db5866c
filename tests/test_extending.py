"""docs/extending.md's pass recipe, run as written: its Python block is the plugin file, its
shell block the commands (each must succeed), and the pass does what it says."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "extending.md").read_text()


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", PAGE, re.S)


def test_the_pass_recipe_runs_as_written(tmp_path: Path) -> None:
    (plugin,) = blocks("python")
    (commands,) = blocks("sh")
    (tmp_path / "my_passes.py").write_text(plugin)
    (tmp_path / "m.graph").write_text(
        "model m\ninput x : f32[4, 8]\nparam w : f32[8, 8]\noutput y = relu(-(-matmul(x, w)))\n"
    )
    outputs = []
    for line in commands.strip().splitlines():
        argv = shlex.split(line) + ["--budget", "0.2"] * ("irkit-bench" in line)
        r = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, (line, r.stdout, r.stderr)
        outputs.append(r.stdout)
    ir, run, attribute = outputs
    assert "graph.neg" not in ir and "graph.matmul" in ir  # the double negation is gone
    assert "ok (relative error" in run  # checked against the reference, then timed
    assert "drop-double-neg" in attribute  # attribution measured the plugin's pass
