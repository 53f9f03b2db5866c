"""irkit-opt end to end, as a user runs it: output, round trips, and every bad input as one
line with a non-zero exit and no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def opt(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "irkit.cli.opt", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_example_prints_graph_ir_that_parses_back_identically(
    example: Path, tmp_path: Path
) -> None:
    first = opt(str(example))
    assert first.returncode == 0, first.stderr
    assert "graph." in first.stdout and "func.func" in first.stdout
    again = tmp_path / "again.mlir"
    again.write_text(first.stdout)
    second = opt(str(again))
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout


def test_pipeline_dims_and_output_file(tmp_path: Path) -> None:
    out = tmp_path / "mlp.mlir"
    r = opt(
        "examples/mlp.graph", "-p", "graph-cleanup", "--dim", "B=8", "-o", str(out), "--time-passes"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    assert "tensor<8x1024xf32>" in out.read_text()
    assert "// pass canonicalize:" in r.stderr and "// pass cse:" in r.stderr


def test_stdin_is_mlir() -> None:
    text = opt("examples/softmax.graph").stdout
    r = opt(stdin=text)
    assert r.returncode == 0 and r.stdout == text


def test_print_between_passes_goes_to_stderr() -> None:
    r = opt("examples/softmax.graph", "-p", "canonicalize,cse", "--print-between-passes")
    assert r.returncode == 0
    assert "IR after canonicalize" in r.stderr and "IR after cse" in r.stderr


def test_list_passes_includes_pipelines() -> None:
    r = opt("--list-passes")
    assert "pipeline graph-cleanup" in r.stdout and "pass canonicalize" in r.stdout


BAD_GRAPH = {
    "syntax.graph": ("model m\ninput x : f32[4]\noutput y = relu(x\n", "syntax.graph:3:", "unexpected"),
    "unknown_op.graph": ("model m\ninput x : f32[4]\noutput y = frob(x)\n", "unknown_op.graph:3:12", "unknown op 'frob'"),
    "arity.graph": ("model m\ninput x : f32[4]\noutput y = matmul(x)\n", "arity.graph:3:12", "takes 2 tensor operand"),
    "shape.graph": ("model m\ninput x : f32[4, 3]\noutput y = matmul(x, x)\n", "shape.graph:3:12", "contraction mismatch"),
    "dtype.graph": ("model m\ninput x : f32[4]\ninput z : f16[4]\noutput y = x * z\n", "dtype.graph:4:12", "element type"),
    "empty.graph": ("", "empty.graph", "file is empty"),
    "blank.mlir": ("\n  \n", "blank.mlir", "file is empty"),
    "syntax.mlir": ("func.func @f( {\n", "syntax.mlir:1:", "error"),
    "shape.mlir": (
        "func.func @f(%x: tensor<4x3xf32>) -> tensor<4x3xf32> {\n  %0 = graph.matmul %x, %x : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>\n  func.return %0 : tensor<4x3xf32>\n}\n",
        "shape.mlir:2:3", "contraction mismatch",
    ),
    "unknown_op.mlir": ("func.func @f() {\n  %0 = graph.frob : tensor<4xf32>\n  func.return\n}\n", "unknown_op.mlir:2:", "not registered"),
}  # fmt: skip


def _assert_one_line_error(
    r: subprocess.CompletedProcess[str], where: str, what: str, code: int = 1
) -> None:
    assert r.returncode == code, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert where in lines[0] and what in lines[0], lines[0]


@pytest.mark.parametrize("name", sorted(BAD_GRAPH))
def test_bad_files(name: str, tmp_path: Path) -> None:
    text, where, what = BAD_GRAPH[name]
    path = tmp_path / name
    path.write_text(text)
    _assert_one_line_error(opt(str(path)), where, what)


def test_binary_garbage(tmp_path: Path) -> None:
    path = tmp_path / "garbage.graph"
    path.write_bytes(bytes(range(256)) * 4)
    _assert_one_line_error(opt(str(path)), "garbage.graph:2:118", "invalid UTF-8 byte 0x80")


def test_missing_file_and_directory(tmp_path: Path) -> None:
    _assert_one_line_error(opt(str(tmp_path / "nope.graph")), "nope.graph", "no such file")
    _assert_one_line_error(opt(str(tmp_path)), str(tmp_path), "is a directory")


def test_unknown_extension(tmp_path: Path) -> None:
    path = tmp_path / "model.txt"
    path.write_text("model m\n")
    _assert_one_line_error(opt(str(path)), "model.txt", "unknown model format")


@pytest.mark.parametrize(
    "args, where, what, code",
    [
        (["-p", "cannonicalize"], "-p", "unknown pass 'cannonicalize'; did you mean 'canonicalize'?", 1),
        (["-p", "canonicalize{bogus=1}"], "-p", "pass 'canonicalize': unknown option 'bogus'", 1),
        (["-p", "cse,{"], "-p", "malformed pipeline at column 5", 1),
        (["-p", "graph-cleanup{x=1}"], "-p", "takes no options", 1),
        (["--dim", "Q=3"], "softmax.graph", "--dim Q: the model declares no such dim", 1),
        (["--dim", "R"], "irkit-opt", "expected NAME=VALUE", 2),
        (["--dim", "R=-4"], "irkit-opt", "must be positive", 2),
        (["-t", "nonsense"], "irkit-opt", "unknown target 'nonsense'", 2),
        (["--no-such-flag"], "irkit-opt", "unrecognized arguments", 2),
    ],
)  # fmt: skip
def test_bad_command_lines(args: list[str], where: str, what: str, code: int) -> None:
    _assert_one_line_error(opt("examples/softmax.graph", *args), where, what, code)


def test_dim_on_mlir_input(tmp_path: Path) -> None:
    path = tmp_path / "s.mlir"
    path.write_text(opt("examples/softmax.graph").stdout)
    _assert_one_line_error(
        opt(str(path), "--dim", "R=2"), "s.mlir", "--dim applies to .graph models"
    )


def test_never_overwrites_the_input(tmp_path: Path) -> None:
    src = tmp_path / "m.graph"
    text = (ROOT / "examples/softmax.graph").read_text()
    src.write_text(text)
    _assert_one_line_error(opt(str(src), "-o", str(src)), "m.graph", "refusing to write over it")
    assert src.read_text() == text


def test_failed_run_leaves_no_output_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.graph"
    bad.write_text(BAD_GRAPH["shape.graph"][0])
    out = tmp_path / "out.mlir"
    out.write_text("precious")
    r = opt(str(bad), "-o", str(out))
    assert r.returncode == 1
    assert out.read_text() == "precious"


def test_llvm_and_asm_targets_print_code_for_the_host() -> None:
    r = opt("examples/mlp.graph", "--dim", "B=2", "-p", "lower-graph-to-loops", "-t", "llvm")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith('; ModuleID = "irkit"')
    for name in ("k0_matmul", "k1_add", "k2_gelu", "k3_matmul", "mlp"):
        assert f'define void @"{name}"' in r.stdout
    assert 'call float @"erff"' in r.stdout  # exact gelu through libm's erf
    r = opt("examples/gemm.graph", "--dim", "M=8", "-p", "baseline-cpu", "-t", "asm")
    assert r.returncode == 0, r.stderr
    assert "k0_matmul:" in r.stdout and "\tret" in r.stdout


def test_llvm_target_on_graph_ir_says_to_lower_first() -> None:
    r = opt("examples/mlp.graph", "-t", "llvm")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().endswith(
        "-t llvm needs loop-level IR, but graph.matmul is still here; lower first with "
        "-p lower-graph-to-loops (or a pipeline such as baseline-cpu)"
    )


def test_a_file_system_refusal_is_a_user_error_not_an_internal_one(capsys) -> None:
    """A permission or a full disk is the environment's answer, not a bug in irkit: one line
    naming the file, the user-error exit code (as root, no directory refuses a write, so the
    refusal is raised where a write would meet it)."""
    from irkit.cli.common import EXIT_USER, run_main

    def body() -> None:
        raise PermissionError(13, "Permission denied", "/srv/out/model.mlir")

    assert run_main("irkit-opt", body) == EXIT_USER
    err = capsys.readouterr().err
    assert err == "irkit-opt: /srv/out/model.mlir: error: Permission denied\n"
