"""fuse-kernels computes what the baseline computes, with fewer kernels; and the
attribution invariant for default-cpu: every subset of its optional passes compiles and
matches the reference."""

from __future__ import annotations

from pathlib import Path

import pytest
from xdsl.dialects import func

import irkit
from irkit.dialects import graph as g
from irkit.pipelines import apply_passes, parse_passes
from irkit.runtime.check import check
from tests.conftest import SMALL, check_every_subset

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


def test_every_subset_of_default_cpu_matches_the_reference(example: Path) -> None:
    """The invariant attribution stands on, over all 2^k subsets of the optional passes."""
    module = irkit.load(example, SMALL[example.stem])
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
