"""The pass runner: verification after each pass, failures that name the pass, reproducers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType, f32
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

import irkit
from irkit.dialects import graph as g
from irkit.errors import PassFailure
from irkit.frontend.mlir import parse_mlir
from irkit.ir import to_text
from irkit.pipelines import apply_passes, parse_passes


@dataclass(frozen=True)
class BreakSoftmaxPass(ModulePass):
    """Test-only: corrupts every softmax's result type, leaving IR that does not verify."""

    name = "test-break-softmax"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for inner in list(op.walk()):
            if isinstance(inner, g.SoftmaxOp):
                bad = g.SoftmaxOp.create(
                    operands=[inner.input],
                    properties=dict(inner.properties),
                    result_types=[TensorType(f32, [1])],
                )
                Rewriter.replace_op(inner, bad)


@dataclass(frozen=True)
class RaisingPass(ModulePass):
    """Test-only: raises inside apply."""

    name = "test-raise"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        raise RuntimeError("boom")


def test_pass_that_breaks_the_ir_is_named_with_a_reproducer(tmp_path: Path) -> None:
    module = irkit.load("examples/softmax.graph", {"R": 2, "C": 3})
    original = to_text(module)
    with pytest.raises(PassFailure) as info:
        apply_passes(module, [*parse_passes("cse"), BreakSoftmaxPass()], reproducer_dir=tmp_path)
    err = info.value
    assert err.pass_name == "test-break-softmax"
    assert "graph.softmax: result 'result' at position 0 does not verify" in str(err)
    assert "tensor<1xf32>" in str(err)  # the reason, not just the headline
    repro = Path(err.reproducer)
    assert repro.parent == tmp_path
    text = repro.read_text()
    assert "// RUN: irkit-opt %s -p 'test-break-softmax'" in text
    body = "\n".join(line for line in text.splitlines() if not line.startswith("//")) + "\n"
    assert to_text(parse_mlir(body, "repro.mlir")) == original  # the IR the pass was given


def test_pass_that_raises_is_named(tmp_path: Path) -> None:
    module = irkit.load("examples/gemm.graph", {"M": 2, "N": 2, "K": 2})
    with pytest.raises(PassFailure, match="pass 'test-raise' failed: boom"):
        apply_passes(module, [RaisingPass()], reproducer_dir=tmp_path)


def test_after_pass_callback_sees_each_pass() -> None:
    module = irkit.load("examples/mlp.graph", {"B": 2})
    seen: list[str] = []
    apply_passes(
        module, parse_passes("graph-cleanup"), after_pass=lambda p, m, s: seen.append(p.name)
    )
    assert seen == ["canonicalize", "cse"]
