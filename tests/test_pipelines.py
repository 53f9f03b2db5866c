"""The pass runner: verification after each pass, failures that name the pass, reproducers."""

from __future__ import annotations

import random
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
from irkit.ir import content_hash, structure_key, to_text
from irkit.passes import register_pass
from irkit.pipelines import apply_passes, parse_passes, pipeline_steps
from irkit.shared_runs import apply_pipelines


@register_pass
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
    monkeypatch.setattr(pipelines, "verify", lambda m, *memo: (calls.append(1), real(m, *memo))[1])
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


# --------------------------------------------------------------------------- shared runs


@register_pass
@dataclass(frozen=True)
class SharedRaisingPass(ModulePass):
    """Test-only: raises, for apply_pipelines (which parses passes by name)."""

    name = "test-shared-raise"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        raise RuntimeError("boom")


def _subsets(spec: str, count: int, seed: int) -> tuple[list[str], list[list[bool]]]:
    """`spec`'s steps, and `count` choices among them: its required steps with random
    subsets of its optional ones (attribution's variants), the full and bare ones included."""
    steps = pipeline_steps(spec)
    rng = random.Random(seed)
    keep = [[True] * len(steps), [False] * len(steps)]
    keep += [[rng.random() < 0.5 for _ in steps] for _ in range(count - 2)]
    return [s.spec for s in steps], [[k or not s.optional for s, k in zip(steps, m, strict=True)]
                                     for m in keep]  # fmt: skip


@pytest.mark.parametrize("model", ["mlp", "conv_block", "transformer_block"])
def test_shared_pipelines_give_what_each_gives_alone(model: str) -> None:
    """apply_pipelines is apply_passes run once per pipeline, with the work shared: the same
    IR for every pipeline, fewer passes run, the input untouched."""
    module = irkit.load(f"examples/{model}.graph")
    before = to_text(module)
    steps, masks = _subsets("default-cpu", 14, seed=len(model))
    shared = apply_pipelines(module, steps, masks, content_hash)
    alone = [content_hash(apply_passes(module.clone(), [p for s, k in zip(steps, mask, strict=True)
                                                        if k for p in parse_passes(s)]))
             for mask in masks]  # fmt: skip
    assert shared.results == alone
    assert shared.pass_runs < sum(sum(m) for m in masks)
    assert shared.finished == len(set(alone)) <= shared.states
    assert to_text(module) == before


def test_a_final_state_reached_twice_is_finished_once() -> None:
    """Two pipelines that differ only by a pass that changes nothing meet in one state: the
    next pass runs once, and the result is verified and finished once, for both."""
    module = irkit.load("examples/gemm.graph", {"M": 4, "N": 4, "K": 4})
    finished: list[str] = []
    shared = apply_pipelines(module, ["conv-layout", "lower-graph-to-loops"],
                             [[True, True], [False, True]],
                             lambda m: finished.append(content_hash(m)) or len(finished))  # fmt: skip
    assert len(finished) == 1 and shared.results == [1, 1]
    assert shared.pass_runs == 2  # conv-layout, then lower-graph-to-loops once


def test_a_shared_run_names_the_failing_pass() -> None:
    """A pass that raises while the pipelines share work is reported as apply_passes
    reports it: replayed alone with verification after each pass, named."""
    module = irkit.load("examples/gemm.graph", {"M": 2, "N": 2, "K": 2})
    with pytest.raises(PassFailure, match="pass 'test-shared-raise' failed: boom"):
        apply_pipelines(module, ["cse", "test-shared-raise"], [[True, False], [True, True]],
                        content_hash)  # fmt: skip


@register_pass
@dataclass(frozen=True)
class MarkingPass(ModulePass):
    """Test-only: marks the module (a change) and, with `lie`, says it changed nothing;
    with `nest`, after marking runs a pass inside that truly changes nothing and says so."""

    name = "test-mark"
    lie: bool = False
    nest: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from xdsl.dialects.builtin import UnitAttr

        from irkit.ir import unchanged

        op.attributes["test.marked"] = UnitAttr()
        if self.nest:
            QuietPass().apply(ctx, op)
        if self.lie:
            unchanged(self)


@dataclass(frozen=True)
class QuietPass(ModulePass):
    name = "test-quiet"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from irkit.ir import unchanged

        unchanged(self)


def test_a_pass_that_says_it_changed_nothing_is_taken_at_its_word_and_checked(monkeypatch) -> None:
    """`unchanged`: the state key after a pass that said it changed nothing is not computed
    (the pipelines with and without it go on as one); under IRKIT_CHECK_UNCHANGED=1 (the
    tests' setting) a false word is an error naming the pass. A pass run inside another
    speaks for itself only."""
    from irkit.errors import IrkitError
    from irkit.ir import apply_saying

    module = irkit.load("examples/gemm.graph", {"M": 2, "N": 2, "K": 2})
    masks = [[True, True], [True, False]]
    with pytest.raises(IrkitError, match="pass 'test-mark{lie=true}' said it changed nothing"):
        apply_pipelines(module, ["cse", "test-mark{lie=true}"], masks, content_hash)
    honest = apply_pipelines(module, ["cse", "test-mark"], masks, content_hash)
    assert honest.changed == [False, True] and honest.finished == 2
    monkeypatch.setenv("IRKIT_CHECK_UNCHANGED", "0")  # unchecked, the word is taken
    taken = apply_pipelines(module, ["cse", "test-mark{lie=true}"], masks, content_hash)
    assert taken.changed == [False, False] and taken.finished == 1
    assert apply_saying(MarkingPass(nest=True), Context(), module.clone())  # the inner word
    assert not apply_saying(QuietPass(), Context(), module.clone())  # is not the outer's


def test_a_final_state_that_does_not_verify_is_named_before_what_finishing_it_raised() -> None:
    """The final states are verified in a forked process while this one finishes them;
    one that does not verify is replayed and its pass named, whatever `finish` did with
    it meanwhile (here: failed on it), and good states alone finish as before."""
    module = irkit.load("examples/softmax.graph", {"R": 2, "C": 3})
    finished: list[str] = []

    def finish(m: ModuleOp) -> int:
        finished.append(content_hash(m))
        if len(finished) == 2:
            raise RuntimeError("finishing the broken state failed")
        return len(finished)

    with pytest.raises(PassFailure, match="pass 'test-break-softmax'"):
        apply_pipelines(module, ["cse", "test-break-softmax"], [[True, False], [True, True]],
                        finish)  # fmt: skip
    good = apply_pipelines(module, ["cse", "lower-graph-to-loops"], [[True, False], [True, True]],
                           lambda m: content_hash(m))  # fmt: skip
    assert good.finished == 2 and len(set(good.results)) == 2


def test_structure_key_tells_apart_what_printing_does() -> None:
    """Equal for a copy; different for a changed constant (-0.0 against 0.0 too), a changed
    type (f32 and f64 have equal hashes in xDSL: a kernel of one was once given the other's
    code), or operands swapped."""
    text = """func.func @f(%a: f32, %b: f32) -> f32 {
  %c = arith.constant 0.0 : f32
  %s = arith.subf %a, %b : f32
  %t = arith.addf %s, %c : f32
  func.return %t : f32
}
"""
    base = parse_mlir(text, "k.mlir")
    assert structure_key(base) == structure_key(base.clone())
    for changed in (text.replace("0.0 : f32", "-0.0 : f32"), text.replace("%a, %b", "%b, %a"),
                    text.replace("subf", "mulf"), text.replace("%s, %c", "%c, %s"),
                    text.replace("f32", "f64")):  # fmt: skip
        assert structure_key(parse_mlir(changed, "k.mlir")) != structure_key(base)


def test_verifying_many_modules_skips_only_functions_already_verified_in_their_context() -> None:
    """verify(module, verified) skips a function verified before in an equal context, and
    still catches a function that changed, or a callee of it that changed or went."""
    from irkit.errors import IrkitError
    from irkit.ir import verify

    def module(callee: str) -> ModuleOp:
        return parse_mlir(f"""
func.func private @{callee}
func.func @f(%x: f32) {{
  func.call @k(%x) : (f32) -> ()
  func.return
}}
""", "g.mlir")  # fmt: skip

    seen: set[tuple] = set()
    verify(module("k(%a: f32)"), seen)
    assert len(seen) == 2  # @k and @f
    verify(module("k(%a: f32)"), seen)  # the same functions in the same context: skipped
    with pytest.raises(IrkitError, match="operand type mismatch"):
        verify(module("k(%a: f64)"), seen)  # the same @f, calling a callee that changed
    with pytest.raises(IrkitError, match="could not be found"):
        verify(module("kk(%a: f32)"), seen)
    softmax = irkit.load("examples/softmax.graph", {"R": 2, "C": 3})
    verify(softmax, seen)
    broken = softmax.clone()
    BreakSoftmaxPass().apply(Context(), broken)
    with pytest.raises(IrkitError, match="graph.softmax"):
        verify(broken, seen)


def test_passes_run_with_the_cyclic_gc_paused_and_restored_as_it_was() -> None:
    """Issue 25: collections during a pipeline walked every IR object again and again
    (superlinear pass times); the collector is paused around it and restored after."""
    import gc

    from xdsl.passes import ModulePass

    from irkit.frontend import parse_source
    from irkit.pipelines import apply_passes

    seen: list[bool] = []

    class Probe(ModulePass):
        name = "probe-gc"

        def apply(self, ctx, op) -> None:
            seen.append(gc.isenabled())

    text = "model m\ninput x : f32[4]\noutput y = relu(x)\n"
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            apply_passes(parse_source(text, "m.graph", ".graph"), [Probe()])
            assert gc.isenabled() is enabled
        finally:
            gc.enable()
    assert seen == [False, False]
