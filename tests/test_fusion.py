"""fuse-kernels computes what the baseline computes, with fewer kernels; and the
attribution invariant for default-cpu: every subset of its optional passes compiles and
matches the reference."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects import func

import irkit
from irkit.dialects import graph as g
from irkit.frontend import parse_source
from irkit.fuzz import graph_sources
from irkit.pipelines import apply_passes, parse_passes
from irkit.runtime.check import check
from tests.conftest import EXAMPLES, SMALL, check_every_subset

OPTIONS = [
    "fuse-kernels",
    "fuse-kernels{elementwise=false}",
    "fuse-kernels{reductions=false}",
    "fuse-kernels{epilogues=false}",
    "fuse-kernels{max-group-size=2}",
]


def _kernels(module) -> int:
    return sum(isinstance(op, func.FuncOp) and "irkit.kernel" in op.attributes for op in module.ops)


@pytest.mark.parametrize("spec", OPTIONS)
def test_fusion_matches_the_reference(example: Path, spec: str) -> None:
    module = irkit.load(example, SMALL[example.stem])
    exe = irkit.compile(module, f"{spec},lower-graph-to-loops", backend="cpu")
    checks, _ = check(exe, module, seed=5)
    assert checks and all(c.passed for c in checks), [c.describe() for c in checks]


def test_fusion_never_adds_kernels_and_groups_respect_the_size_limit(example: Path) -> None:
    module = irkit.load(example, SMALL[example.stem])
    base = _kernels(apply_passes(module.clone(), parse_passes("baseline-cpu")))
    fused_graph = apply_passes(module.clone(), parse_passes("fuse-kernels{max-group-size=3}"))
    for k in fused_graph.walk():
        if isinstance(k, g.KernelOp):
            assert 2 <= len(list(k.body.block.ops)) - 1 <= 3
    fused = _kernels(
        apply_passes(module.clone(), parse_passes("fuse-kernels,lower-graph-to-loops"))
    )
    assert fused <= base
    if example.stem in ("elementwise_chain", "mlp", "transformer_block", "conv_block"):
        assert fused < base


def test_a_bad_option_names_the_pass() -> None:
    from irkit.errors import IrkitError

    with pytest.raises(IrkitError, match="fuse-kernels"):
        apply_passes(
            irkit.load("examples/mlp.graph", SMALL["mlp"]),
            parse_passes("fuse-kernels{max-group-size=0}"),
        )


def test_every_subset_of_default_cpu_matches_the_reference(subset_example: Path) -> None:
    """The invariant attribution stands on, over all 2^k subsets of the optional passes."""
    module = irkit.load(subset_example, SMALL[subset_example.stem])
    assert check_every_subset("default-cpu", module, "cpu", seed=3) >= 1


def test_movement_of_a_contraction_result_stays_out_of_its_kernel() -> None:
    """A reshape of a matmul's result would move the matmul's nest into the reshaped domain,
    which the tilers cannot match; with movement-epilogues=true it is fused as before. A
    reshape preparing an epilogue operand (cnn's bias) is still fused (tests/test_onnx_*)."""
    path = "examples/transformer_block.graph"

    def kernels(spec: str) -> list[str]:
        module = apply_passes(irkit.load(path, SMALL["transformer_block"]), parse_passes(spec))
        return [f.sym_name.data for f in module.ops if "irkit.kernel" in f.attributes]

    default = kernels("fuse-kernels,lower-graph-to-loops")
    assert any(k.split("_", 1)[1] == "matmul" for k in default)
    assert not any("matmul_reshape" in k for k in default)
    moved = kernels("fuse-kernels{movement-epilogues=true},lower-graph-to-loops")
    assert "k1_matmul_reshape" in moved


CONCATS = {
    "channels": "input a : f32[1, 3, 5, 8]\ninput b : f32[1, 3, 5, 4]\ninput d : f32[1, 3, 5, 20]\n"
    "param bias : f32[32]\noutput y = relu(concat(a, b, d, axis=3) + bias)\n",
    "rows": "input a : f32[3, 7]\ninput b : f32[5, 7]\noutput y = sigmoid(concat(a, b, axis=0))\n",
    "many": "".join(f"input x{i} : f32[2, 3]\n" for i in range(6))
    + "output y = concat("
    + ", ".join(f"x{i}" for i in range(6))
    + ", axis=1) * 2.0\n",
}


@pytest.mark.parametrize("case", sorted(CONCATS))
def test_split_concat_is_exact_and_reads_one_input_an_element(case: str) -> None:
    """A fused concatenation split at its inputs' boundaries gives the bits of the loop it
    replaces, with no select left; max-pieces bounds the split."""
    from xdsl.dialects import arith

    from irkit.frontend import parse_source

    module = parse_source(f"model m\n{CONCATS[case]}", "t.graph", ".graph")
    inputs = irkit.random_inputs(module, seed=6)
    base = "fuse-kernels,lower-graph-to-loops"
    split = apply_passes(module.clone(), parse_passes(f"{base},split-concat"))
    assert not any(isinstance(op, arith.SelectOp) for op in split.walk())
    capped = apply_passes(module.clone(), parse_passes(f"{base},split-concat{{max-pieces=2}}"))
    assert any(isinstance(op, arith.SelectOp) for op in capped.walk()) == (case != "rows")
    plain = irkit.compile(module, base, backend="cpu")(*inputs)
    pieces = irkit.compile(module, f"{base},split-concat", backend="cpu")(*inputs)
    for a, b in zip(plain, pieces, strict=True):
        assert a.tobytes() == b.tobytes()


TRANSCENDENTALS = ("math.exp", "math.erf", "math.tanh", "math.log")
"""What exp, sigmoid, GELU, tanh, erf and log lower to: the ops `keep-transcendentals` stores
rather than computes twice (abs or sqrt, a few cycles, are recomputed where that saves a
store and a load)."""


def _transcendentals_executed(module) -> int:
    """Executions of `TRANSCENDENTALS` over a lowered module's kernels."""
    from irkit.loops.costs import _executed

    kernels_ = [
        op for op in module.ops if isinstance(op, func.FuncOp) and "irkit.kernel" in op.attributes
    ]
    return sum(_executed(k, lambda o: int(o.name in TRANSCENDENTALS)) for k in kernels_)


@st.composite
def _phased_models(draw) -> str:
    """An expression holding a transcendental (as exporters write GELU: arithmetic around
    the erf, so the value read is not the transcendental op itself) read in several phases
    of one fused kernel: by reductions over
    random axes (some reduced again, or normalised), their results broadcast back onto it,
    the way norms, softmaxes, squeeze-excites and ConvNeXt v2's GRN read their input."""
    rank = draw(st.integers(2, 4))
    shape = draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank))
    unary = draw(st.sampled_from(["exp", "tanh", "erf", "sigmoid", "gelu"]))
    lines = [f"input x : f32[{', '.join(map(str, shape))}]", f"t = {unary}(x * 0.5) * 1.5"]
    terms = ["t"]
    for i in range(draw(st.integers(1, 3))):
        axes = draw(st.sets(st.integers(0, rank - 1), min_size=1, max_size=rank))
        kind = draw(st.sampled_from(["sum", "max", "mean"]))
        read = draw(st.sampled_from(["t", "t * t"]))
        lines.append(f"r{i} = reduce_{kind}({read}, axes={sorted(axes)}, keepdims=true)")
        rest = sorted(set(range(rank)) - axes)
        if rest and draw(st.booleans()):  # a statistic of the statistic (GRN's channel mean)
            lines.append(
                f"r{i} = r{i} / (reduce_mean(r{i}, axes=[{rest[-1]}], keepdims=true) + 1.0)"
            )
        terms.append(draw(st.sampled_from([f"t * r{i}", f"t / (r{i} + 2.0)", f"t - r{i}"])))
    lines.append(f"output y = {' + '.join(terms)}")
    return "model phased\n" + "\n".join(lines) + "\n"


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.one_of(graph_sources(), _phased_models()))
def test_fusion_never_computes_a_transcendental_more_often(source: str) -> None:
    """The fusion cost model as a property, over the fuzzer's models and models that read a
    transcendental in several phases: fused kernels (with the CPU's keep-transcendentals)
    execute no more exp, erf, tanh or log than the same model with one kernel per op.
    Fusion may recompute cheap arithmetic where that saves a round trip through memory; an
    expensive value a kernel needs in two places it stores
    (`materialize.materialized_values`)."""
    module = parse_source(source, "fuzz.graph", ".graph")
    lower = "lower-graph-to-loops{keep-transcendentals=true}"
    fused = apply_passes(module.clone(), parse_passes(f"cse,fuse-kernels,{lower}"))
    apart = apply_passes(module.clone(), parse_passes(f"cse,{lower}"))
    assert _transcendentals_executed(fused) <= _transcendentals_executed(apart), source


COMMUTATIVE = (g.AddOp, g.MulOp, g.MaxOp, g.MinOp)

# Patterns as exporters write them, each order: a linear layer with its bias first (torch's
# Add(bias, MatMul)), a residual h + f(h), a scaled product, a convolution's bias and
# activation, a batch matmul's scale, a clamp written with max and min.
ORDER_PATTERNS = {
    "linear": "input x : f32[24, 32]\nparam w : f32[32, 48]\nparam b : f32[48]\n"
    "output y = gelu(b + matmul(x, w))\n",
    "residual": "input h : f32[16, 32]\nparam w : f32[32, 32]\nparam b : f32[32]\n"
    "output y = h + (matmul(h, w) + b) * 0.5\n",
    "conv": "input x : f32[1, 8, 12, 12]\nparam w : f32[16, 8, 3, 3]\nparam b : f32[1, 16, 1, 1]\n"
    "output y = max(0.0, b + conv2d(x, w, padding=[1, 1, 1, 1]))\n",
    "attention-scale": "input q : f32[2, 16, 8]\ninput k : f32[2, 8, 16]\n"
    "output y = softmax(0.125 * batch_matmul(q, k), axis=-1)\n",
    "clamp": "input x : f32[8, 40]\nparam w : f32[40, 16]\n"
    "output y = min(6.0, max(0.0, matmul(x, w)))\n",
}


def _mirrored(module):
    """`module` with the operands of every commutative op swapped."""
    out = module.clone()
    for op in out.walk():
        if isinstance(op, COMMUTATIVE):
            op.operands = (op.operands[1], op.operands[0])
    return out


@pytest.mark.parametrize("case", sorted(ORDER_PATTERNS) + ["examples"])
def test_every_pattern_accepts_either_operand_order(case: str) -> None:
    """Every matcher over a commutative op (fusion's epilogues, the tile passes' matmul and
    epilogue forms, the row and reduction passes) takes its operands in either order: with
    every add, mul, max and min of a model mirrored, default-cpu and default-cuda build the
    same program, op for op (by name and count), and the mirrored one still matches the
    reference. A matcher that wanted the bias second had left torch's linear layers untiled
    (64.2 ms a kernel against 0.80 with the bias last)."""
    from collections import Counter

    if case == "examples":
        modules = [irkit.load(p, SMALL[p.stem]) for p in EXAMPLES]
    else:
        modules = [parse_source(f"model m\n{ORDER_PATTERNS[case]}", "m.graph", ".graph")]
    for module in modules:
        mirror = _mirrored(module)
        for spec in ("default-cpu", "default-cuda"):
            built = [apply_passes(m.clone(), parse_passes(spec)) for m in (module, mirror)]
            shapes = [Counter(op.name for op in b.walk()) for b in built]
            assert shapes[0] == shapes[1], (
                case,
                spec,
                shapes[0] - shapes[1],
                shapes[1] - shapes[0],
            )
        checks, _ = check(irkit.compile(mirror, "default-cpu", backend="cpu"), mirror, seed=2)
        assert all(c.passed for c in checks), [c.describe() for c in checks]
