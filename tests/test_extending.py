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


def run_recipe(tmp_path: Path, code: str, shell: str, plugin: str, model: str) -> list[str]:
    """The page's plugin block written as `plugin`, and each line of its shell block run
    beside it (irkit-bench's with a short budget), each required to succeed: their outputs."""
    ((tmp_path / plugin).write_text(blocks(code)[0]), (tmp_path / "m.graph").write_text(model))
    outputs = []
    for line in blocks(shell)[0].strip().splitlines():
        argv = shlex.split(line) + ["--budget", "0.2"] * ("irkit-bench" in line)
        r = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, (line, r.stdout, r.stderr)
        outputs.append(r.stdout)
    return outputs


def test_the_pass_recipe_runs_as_written(tmp_path: Path) -> None:
    assert len(blocks("python")) == len(blocks("sh")) == 1
    model = "model m\ninput x : f32[4, 8]\nparam w : f32[8, 8]\noutput y = relu(-(-matmul(x, w)))\n"
    ir, run, attribute = run_recipe(tmp_path, "python", "sh", "my_passes.py", model)
    assert "graph.neg" not in ir and "graph.matmul" in ir  # the double negation is gone
    assert "ok (relative error" in run  # checked against the reference, then timed
    assert "drop-double-neg" in attribute  # attribution measured the plugin's pass


def test_the_op_recipe_names_every_table(monkeypatch) -> None:
    """docs/extending.md's op steps, done in a test: a softsign op (x / (1 + |x|)) defined as
    step 1 says, its float64 meaning (step 2) and its loop lowering (step 3) registered where
    the steps name them; then a model using it parses, fuses, lowers, runs on the CPU and in
    the lockstep GPU interpretation, and matches the reference. (The dialect's op list is
    read into the language's table at import, so the test adds to that table.)"""
    import numpy as np
    from xdsl.dialects import arith
    from xdsl.dialects import math as xmath
    from xdsl.irdl import irdl_op_definition

    import irkit
    from irkit.dialects import graph as g
    from irkit.dialects.semantics import IMPLS
    from irkit.frontend import graph_lang, parse_source
    from irkit.passes.kernel_emitter import EMITTERS, _unary
    from irkit.runtime.check import check

    @irdl_op_definition
    class SoftsignOp(g.UnaryOp):  # step 1
        """x / (1 + |x|)."""

        name = "graph.softsign"

    monkeypatch.setitem(graph_lang.OPS, "softsign", SoftsignOp)
    monkeypatch.setitem(IMPLS, SoftsignOp, lambda op, a: a[0] / (1 + np.abs(a[0])))  # step 2

    def lower(em, x, op):  # step 3: arith/math ops on the element
        one = em.const(1.0, x)
        return em.fop(arith.DivfOp, x, em.fop(arith.AddfOp, one, em.fop(xmath.AbsFOp, x)))

    monkeypatch.setitem(EMITTERS, SoftsignOp, _unary(lower))
    source = "model m\ninput x : f32[8, 16]\noutput y = softsign(x) * 2\n"
    module = parse_source(source, "m.graph", ".graph")
    for backend in ("cpu", "cuda-sim"):
        exe = irkit.compile(module, backend=backend)
        checks, _ = check(exe, module, seed=4)
        assert all(c.passed for c in checks), (backend, [c.describe() for c in checks])
        assert len(exe.kernels) == 1  # fused with the multiply: fusion knew it as elementwise


def test_the_loop_pass_recipe_runs_as_written(tmp_path: Path) -> None:
    """The loop-pass recipe: its plugin unrolls the matmul's k loop (8 trips) and nothing
    else, the result is checked against the reference before it is timed, attribution
    measures the pass, and a bad option is one line naming it."""
    assert len(blocks("py")) == len(blocks("shell")) == 1
    model = "model m\ninput x : f32[4, 8]\nparam w : f32[8, 8]\noutput y = relu(matmul(x, w))\n"
    ir, run, attribute = run_recipe(tmp_path, "py", "shell", "my_loop_passes.py", model)
    assert "scf.for" not in ir and "scf.parallel" in ir  # the k loop is gone, the rest kept
    assert ir.count("memref.load %w") == 8 and "arith.constant 7 : index" in ir
    assert "ok (relative error" in run
    assert "unroll-short-loops" in attribute
    bad = subprocess.run(["irkit-opt", "m.graph", "-L", "my_loop_passes.py", "-p",
                          "unroll-short-loops{max-trips=0}"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1
    assert "unroll-short-loops" in bad.stderr and "max-trips=0" in bad.stderr
