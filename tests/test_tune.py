"""irkit-bench tune (issue 22): pass options searched, every candidate checked before it is
timed, a winner declared only when its speedup's CI is above 1, and the tuning database that
irkit.compile(..., tuned=True) reads. No test asserts which candidate is faster."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from xdsl.dialects import arith
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

import irkit
from irkit import tuning
from irkit.cli.bench import main as bench
from irkit.errors import IrkitError
from irkit.measure.tune import candidates, parse_space, tune
from irkit.passes import register_pass

GEMM = {"M": 64, "N": 64, "K": 64}
CHAIN = {"N": 8, "D": 64}


@register_pass
@dataclass(frozen=True)
class KnobPass(ModulePass):
    """Test only: `level` changes nothing; `wrong=true` turns every addf into subf."""

    name = "test-knob"
    is_optimization = True

    level: int = 1
    wrong: bool = False

    def apply(self, ctx, op) -> None:
        if self.wrong:
            for add in [o for o in op.walk() if isinstance(o, arith.AddfOp)]:
                Rewriter.replace_op(add, arith.SubfOp(add.lhs, add.rhs))


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("IRKIT_CACHE", str(tmp_path / "cache"))


def test_the_space_is_parsed_and_expanded_over_the_pipeline() -> None:
    dims = parse_space("cpu-tile-matmul{mr=4,6,8;nr=32,48,64,96}")
    assert [(d.label, d.values) for d in dims] == [
        ("cpu-tile-matmul.mr", (4, 6, 8)), ("cpu-tile-matmul.nr", (32, 48, 64, 96))]  # fmt: skip
    cands = candidates("default-cpu", dims)
    assert len(cands) == 12
    assert cands[0][0] == {"cpu-tile-matmul.mr": 4, "cpu-tile-matmul.nr": 32}
    assert "cpu-tile-matmul{mr=4 nr=32}" in cands[0][1] and cands[0][1].startswith("canonicalize")
    assert len({spec for _, spec in cands}) == 12


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ("cpu-tile-matmul{mr=4,6", "--space: "),
        ("no-such-pass{x=1}", "unknown pass 'no-such-pass'"),
        ("cpu-tile-matmul{mq=4}", "has no option 'mq'"),
        ("fuse-kernels", "lists no option to tune, and the pass declares no search space"),
        ("gpu-tile-matmul{block-m=64}", "gpu-tile-matmul is not in the pipeline"),
        ("cpu-tile-matmul{mr=0,4}", "mr"),
    ],
)
def test_a_bad_space_is_one_line(space: str, message: str, capsys) -> None:
    code = bench(["tune", "examples/gemm.graph", "--backend", "cpu", "--space", space])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1 and message in err, err


def test_gemm_over_twelve_tile_configurations_declares_a_winner_only_with_a_ci(tmp_path) -> None:
    """Whatever the timings, the verdict follows the CI: a winner exactly when the paired
    speedup's lower bound (at the Bonferroni-corrected confidence) is above 1."""
    out = tmp_path / "tune.json"
    code = bench(["tune", "examples/gemm.graph", "--backend", "cpu", *sum((["--dim", f"{k}={v}"] for k, v in GEMM.items()), []),
                  "--space", "cpu-tile-matmul{mr=4,6,8;nr=32,48,64,96}", "--budget", "3",
                  "--json", str(out)])  # fmt: skip
    assert code == 0
    record = json.loads(out.read_text())
    assert record["kind"] == "irkit.tune" and record["protocol"]["candidates"] == 12
    assert record["protocol"]["confidence"] == pytest.approx(
        1 - 0.05 / (len(record["programs"]) - 1)
    )
    assert record["protocol"]["placements"] == 8  # the race, bound as slots
    assert record["protocol"]["placement_io"] == "shared"
    s = record["speedup"]
    assert s["ci_low"] <= s["median"] <= s["ci_high"]
    assert record["declared"] == (s["ci_low"] > 1)
    if record["declared"]:
        assert record["verdict"].startswith("winner: ") and record["pipeline"] != "default-cpu"
    else:
        assert (
            record["verdict"].startswith("default kept: ") and record["pipeline"] == "default-cpu"
        )
    with open(record["database"]) as f:
        entry = json.load(f)
    assert entry["declared"] == record["declared"] and entry["pipeline"] == record["pipeline"]


def test_a_space_of_equal_options_keeps_the_default() -> None:
    result = tune("examples/gemm.graph", "test-knob{level=1,2,3,4}", "default-cpu,test-knob",
                  "cpu", GEMM, budget_s=1)  # fmt: skip
    assert not result.declared and result.pipeline == "default-cpu,test-knob"
    assert result.verdict == "default kept: every candidate compiles to the default's code"
    assert len(result.programs) == 1 and len(result.programs[0].choices) == 5


def test_a_wrong_candidate_is_never_timed() -> None:
    result = tune("examples/elementwise_chain.graph", "test-knob{wrong=false,true}",
                  "default-cpu,test-knob", "cpu", CHAIN, budget_s=1)  # fmt: skip
    wrong = [p for p in result.programs if p.wrong]
    assert len(wrong) == 1 and wrong[0].seconds is None
    assert wrong[0].choices == [{"test-knob.wrong": True}]
    assert result.protocol["wrong"] == 1 and not result.declared


def test_compile_tuned_uses_a_recorded_winner_and_only_there() -> None:
    graph = irkit.load("examples/gemm.graph", GEMM)
    where = tuning.machine("cpu", None)
    winner = "default-cpu,cpu-tile-matmul{mr=8 nr=48}"
    tuning.store(graph, "default-cpu", where, {"declared": True, "pipeline": winner,
                 "choice": {"cpu-tile-matmul.mr": 8}, "speedup": {"median": 1.2}})  # fmt: skip
    exe = irkit.compile(graph, backend="cpu", tuned=True)
    assert exe.pipeline == winner  # type: ignore[attr-defined]
    assert "tuned: cpu-tile-matmul.mr=8" in exe.selection  # type: ignore[attr-defined]
    other = irkit.compile(irkit.load("examples/gemm.graph", {"M": 32, "N": 64, "K": 64}),
                          backend="cpu", tuned=True)  # fmt: skip
    assert other.pipeline == "default-cpu" and "no winner recorded" in other.selection  # type: ignore[attr-defined]
    untuned = irkit.compile(graph, backend="cpu")
    assert untuned.pipeline == "default-cpu"  # type: ignore[attr-defined]


def test_the_default_must_be_correct() -> None:
    with pytest.raises(IrkitError, match="the default pipeline .* computes a wrong result"):
        tune("examples/elementwise_chain.graph", "test-knob{level=1,2}",
             "default-cpu,test-knob{wrong=true}", "cpu", CHAIN, budget_s=1)  # fmt: skip


def test_the_report_shows_the_option_space_as_a_heatmap(tmp_path) -> None:
    out = tmp_path / "tune.json"
    assert bench(["tune", "examples/gemm.graph", "--backend", "cpu", "--dim", "M=32", "--dim", "N=64",
                  "--dim", "K=32", "--space", "cpu-tile-matmul{mr=4,6;nr=32,64}", "--budget", "1",
                  "--json", str(out)]) == 0  # fmt: skip
    page = tmp_path / "report.html"
    assert bench(["report", str(out), "-o", str(page)]) == 0
    html = page.read_text()
    assert "tuning: gemm" in html and "data:image/png;base64," in html
    assert json.loads(out.read_text())["verdict"] in html


def test_run_tuned_uses_the_recorded_winner(tmp_path) -> None:
    graph = irkit.load("examples/gemm.graph", GEMM)
    winner = "default-cpu,cpu-tile-matmul{mr=4 nr=32}"
    tuning.store(graph, "default-cpu", tuning.machine("cpu", None), {"declared": True,
                 "pipeline": winner, "choice": {"cpu-tile-matmul.mr": 4}, "speedup": {"median": 1.1}})  # fmt: skip
    out = tmp_path / "run.json"
    assert bench(["run", "examples/gemm.graph", "--backend", "cpu", "--dim", "M=64", "--dim", "N=64",
                  "--dim", "K=64", "--tuned", "--budget", "0.05", "--json", str(out)]) == 0  # fmt: skip
    record = json.loads(out.read_text())
    assert record["pipeline"] == winner and "tuned: cpu-tile-matmul.mr=4" in record["selection"]
