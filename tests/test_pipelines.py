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


@pytest.mark.parametrize("verify_each", [True, False])
def test_pass_that_breaks_the_ir_is_named_with_a_reproducer(
    tmp_path: Path, verify_each: bool
) -> None:
    """Verifying after each pass, or only the result (then the failure is replayed with
    verification after each pass): the same pass named, the same reproducer."""
    module = irkit.load("examples/softmax.graph", {"R": 2, "C": 3})
    original = to_text(module)
    passes = [*parse_passes("cse"), BreakSoftmaxPass(), *parse_passes("canonicalize")]
    with pytest.raises(PassFailure) as info:
        apply_passes(module, passes, reproducer_dir=tmp_path, verify_each=verify_each)
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


@pytest.mark.parametrize("verify_each", [True, False])
def test_pass_that_raises_is_named(tmp_path: Path, verify_each: bool) -> None:
    module = irkit.load("examples/gemm.graph", {"M": 2, "N": 2, "K": 2})
    original = to_text(module)
    passes = [*parse_passes("cse"), RaisingPass()]
    with pytest.raises(PassFailure, match="pass 'test-raise' failed: boom") as info:
        apply_passes(module, passes, reproducer_dir=tmp_path, verify_each=verify_each)
    text = Path(info.value.reproducer).read_text()
    body = "\n".join(line for line in text.splitlines() if not line.startswith("//")) + "\n"
    assert to_text(parse_mlir(body, "repro.mlir")) == original  # what the pass was given


def test_only_the_result_is_verified_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without verify-each, the IR is verified once, at the end (IRKIT_VERIFY_EACH=1 or
    verify_each=True: after every pass), and the result is the same."""
    import irkit.pipelines as pipelines

    calls: list[int] = []
    real = pipelines.verify
    monkeypatch.setattr(pipelines, "verify", lambda m: (calls.append(1), real(m))[1])
    monkeypatch.delenv("IRKIT_VERIFY_EACH", raising=False)
    module = irkit.load("examples/mlp.graph", {"B": 2})
    fast = to_text(apply_passes(module.clone(), parse_passes("default-cpu")))
    assert len(calls) == 1
    monkeypatch.setenv("IRKIT_VERIFY_EACH", "1")
    calls.clear()
    slow = to_text(apply_passes(module.clone(), parse_passes("default-cpu")))
    assert len(calls) == len(parse_passes("default-cpu")) and slow == fast


def test_after_pass_callback_sees_each_pass() -> None:
    module = irkit.load("examples/mlp.graph", {"B": 2})
    seen: list[str] = []
    apply_passes(
        module, parse_passes("graph-cleanup"), after_pass=lambda p, m, s: seen.append(p.name)
    )
    assert seen == ["canonicalize", "cse"]


def test_a_pass_that_fails_only_once_is_named_as_not_deterministic() -> None:
    """Without verify-each a failure is replayed; a pass that raised and then did not is
    named, in one line, not turned into an internal error."""
    from irkit.errors import PassFailure

    class FlakyPass(ModulePass):
        name = "test-flaky"
        calls = 0

        def apply(self, ctx: Context, op: ModuleOp) -> None:
            FlakyPass.calls += 1
            if FlakyPass.calls == 1:
                raise RuntimeError("first time only")

    module = irkit.load("examples/gemm.graph", {"M": 2, "N": 2, "K": 2})
    with pytest.raises(PassFailure, match="pass 'test-flaky' failed: .*not deterministic"):
        apply_passes(module, [FlakyPass()], verify_each=False)
