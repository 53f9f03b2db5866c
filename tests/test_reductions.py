"""f32 reductions on the CPU: accuracy against float64 (block-reductions) and the numeric
effect of each reduction pass against the reference (real llvmlite JIT)."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import arith, scf

import irkit
from irkit.dialects import graph as g
from irkit.frontend import parse_source
from irkit.ir import to_text
from irkit.pipelines import apply_passes, parse_passes
from irkit.runtime.check import check
from irkit.runtime.reference import reference

PIPELINES = ["lower-graph-to-loops", "baseline-cpu", "default-cpu"]
"""The first leaves block-reductions out: the backend must run it anyway."""


def relative_errors(text: str, arrays: list[np.ndarray], spec: str) -> list[float]:
    module = parse_source(text, "t.graph", ".graph")
    outs = irkit.compile(module, spec, backend="cpu")(*arrays)
    refs = reference(module, *arrays)
    return [
        float(np.max(np.abs(o.astype(np.float64) - r)) / np.max(np.abs(r)))
        for o, r in zip(outs, refs, strict=True)
    ]


@pytest.mark.parametrize("n", [10**6, 3 * 10**6 + 7])
@pytest.mark.parametrize("values", ["uniform", "offset-normal", "constant"])
@pytest.mark.parametrize("spec", PIPELINES)
def test_long_f32_sums_stay_within_1e_5_of_float64(n: int, values: str, spec: str) -> None:
    # a sequential f32 sum of 3M copies of 0.1 is off by 3e-2; of uniform values by 4e-5
    rng = np.random.default_rng(n)
    x = {
        "uniform": lambda: rng.random(n),
        "offset-normal": lambda: rng.standard_normal(n) + 0.1,
        "constant": lambda: np.full(n, 0.1),
    }[values]().astype(np.float32)
    text = f"model s\ninput x : f32[{n}]\noutput y = reduce_sum(x, axes=[0])\n"
    text += "output z = reduce_mean(x, axes=[0])\n"
    assert max(relative_errors(text, [x], spec)) < 1e-5


@pytest.mark.parametrize("spread", [1e-2, 1e-3, 1e-4, 1e-5])
@pytest.mark.parametrize("spec", PIPELINES)
def test_layer_norm_of_nearly_equal_values(spread: float, spec: str) -> None:
    # issue 23's case: over axes [0, 1] of a [1024, 33] tensor the mean was summed element
    # by element, and the normalized values came out far from float64
    rng = np.random.default_rng(7)
    x = (3.0 * (1.0 + spread * rng.standard_normal((1024, 33)))).astype(np.float32)
    gamma, beta = np.ones_like(x), np.zeros_like(x)
    text = (
        "model l\ninput x : f32[1024, 33]\nparam g : f32[1024, 33]\nparam b : f32[1024, 33]\n"
        "output y = layer_norm(x, g, b, axes=[0, 1], eps=0)\n"
    )
    assert max(relative_errors(text, [x, gamma, beta], spec)) < 1e-5


CASES = {
    "row-with-rest": "input x : f32[6, 600]\noutput y = reduce_sum(x, axes=[1])",
    "whole-blocks": "input x : f32[3, 1024]\noutput y = reduce_mean(x, axes=[-1])",
    "column": "input x : f32[5000, 3]\noutput y = reduce_sum(x, axes=[0])",
    "two-axes": "input x : f32[300, 33]\noutput y = reduce_mean(x, axes=[0, 1], keepdims=true)",
    "outer-and-inner": "input x : f32[40, 7, 90]\noutput y = reduce_sum(x, axes=[0, 2])",
    "softmax": "input x : f32[4, 3001]\noutput y = softmax(x, axis=-1)",
    "layer-norm": "input x : f32[2, 1500]\nparam g : f32[1500]\nparam b : f32[1500]\n"
    "output y = layer_norm(x, g, b, axes=[-1], eps=1e-5)",
    "long-dot": "input a : f32[3, 2000]\nparam w : f32[2000, 5]\noutput y = matmul(a, w)",
    "max": "input x : f32[4, 5000]\noutput y = reduce_max(x, axes=[1])",
    "f16": "input x : f16[2, 3000]\noutput y = reduce_sum(x, axes=[1])",
    "f64": "input x : f64[2, 3000]\noutput y = reduce_sum(x, axes=[1])",
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize(
    "spec",
    [
        "lower-graph-to-loops,block-reductions{block=1}",
        "lower-graph-to-loops,block-reductions{block=7}",
        "lower-graph-to-loops,block-reductions",
        "lower-graph-to-loops,block-reductions{block=100000}",
        "lower-graph-to-loops,reassociate-reductions",
        "fuse-kernels,lower-graph-to-loops,block-reductions,reassociate-reductions",
    ],
)
def test_reduction_passes_match_the_reference(case: str, spec: str) -> None:
    module = parse_source(f"model r\n{CASES[case]}\n", "r.graph", ".graph")
    checks, _ = check(irkit.compile(module, spec, backend="cpu"), module, seed=len(case))
    assert all(c.passed for c in checks), [c.describe() for c in checks]


def test_block_reductions_changes_nothing_run_twice() -> None:
    module = parse_source(f"model r\n{CASES['outer-and-inner']}\n", "r.graph", ".graph")
    once = apply_passes(module, parse_passes("lower-graph-to-loops,block-reductions"))
    twice = apply_passes(once.clone(), parse_passes("block-reductions"))
    assert to_text(once) == to_text(twice)
    assert any(str(op.result.type) == "f64" for op in once.walk() if isinstance(op, arith.ExtFOp))


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("block", [1, 7, 256, 100000])
def test_needs_blocking_says_whether_block_reductions_would_change_the_module(
    case: str, block: int
) -> None:
    """The query the CPU backend asks before running block-reductions (a module that needs
    nothing is neither copied nor verified again): true exactly where the pass changes the
    IR, and false after it."""
    from irkit.passes.reductions import needs_blocking
    from irkit.pipelines import lower_for_cpu

    module = parse_source(f"model r\n{CASES[case]}\n", "r.graph", ".graph")
    loops = apply_passes(module, parse_passes("lower-graph-to-loops"))
    blocked = apply_passes(loops.clone(), parse_passes(f"block-reductions{{block={block}}}"))
    assert needs_blocking(loops, block) == (to_text(blocked) != to_text(loops))
    assert not needs_blocking(blocked, block)
    if block == 256:
        assert lower_for_cpu(blocked) is blocked


def test_reassociate_marks_only_innermost_combiners() -> None:
    module = parse_source(f"model r\n{CASES['row-with-rest']}\n", "r.graph", ".graph")
    spec = "lower-graph-to-loops,block-reductions,reassociate-reductions"
    out = apply_passes(module, parse_passes(spec))
    adds = [op for op in out.walk() if isinstance(op, arith.AddfOp)]
    marked = {str(op.result.type) for op in adds if "reassoc" in str(op.fastmath)}
    assert marked == {"f32"}  # the two f32 block sums; the f64 sum of blocks stays in order
    assert any("reassoc" not in str(op.fastmath) for op in adds if str(op.result.type) == "f64")


@pytest.mark.parametrize("spec", ["lower-graph-to-loops", "default-cpu"])
def test_max_reductions_propagate_nan_and_softmax_rows_go_nan(spec: str) -> None:
    """`reassociate-reductions` marks max combiners `nsz` (vmaxps with no sign handling): a
    NaN must still come out of the row holding it, and only that row."""
    text = (
        "model m\ninput x : f32[6, 1000]\noutput a = reduce_max(x, axes=[1])\n"
        "output c = softmax(x, axis=-1)\n"
    )
    x = np.random.default_rng(1).standard_normal((6, 1000)).astype(np.float32)
    x[2, 517] = np.nan
    x[4, 3] = np.inf
    exe = irkit.compile(parse_source(text, "m.graph", ".graph"), spec, backend="cpu")
    a, c = exe(x)
    assert np.isnan(a[2]) and np.isnan(c[2]).all()
    assert a[4] == np.inf
    rows = [0, 1, 3, 5]
    assert np.array_equal(a[rows], x[rows].max(axis=1))
    assert np.isfinite(c[rows]).all()
    assert np.allclose(c[rows].sum(axis=1), 1.0, atol=1e-5)


def test_block_option_is_checked() -> None:
    with pytest.raises(irkit.IrkitError, match="block"):
        apply_passes(
            parse_source(f"model r\n{CASES['max']}\n", "r.graph", ".graph"),
            parse_passes("lower-graph-to-loops,block-reductions{block=0}"),
        )


ROW_CASES = {
    "softmax": "input x : f32[64, 200]\noutput y = softmax(x, axis=-1)",
    "softmax-3d": "input x : f32[4, 5, 60]\noutput y = softmax(x, axis=-1)",
    "softmax-axis-0": "input x : f32[64, 20]\noutput y = softmax(x, axis=0)",
    "layer-norm": "input x : f32[16, 300]\nparam g : f32[300]\nparam b : f32[300]\n"
    "output y = layer_norm(x, g, b, axes=[-1], eps=1e-5)",
    "layer-norm-2-axes": "input x : f32[3, 16, 30]\nparam g : f32[16, 30]\nparam b : f32[16, 30]\n"
    "output y = layer_norm(x, g, b, axes=[-2, -1], eps=1e-5)",
    "normalize": "input x : f32[8, 9, 70]\n"
    "output y = x / reduce_sum(x * x, axes=[-1], keepdims=true) + reduce_max(x, axes=[-1], keepdims=true)",
}


def _model_and_inputs(text: str, seed: int) -> tuple:
    """A one-file model and standard-normal f32 inputs for it."""
    module = parse_source(f"model r\n{text}\n", "r.graph", ".graph")
    inputs = [np.random.default_rng(seed).standard_normal(a.type.get_shape()).astype(np.float32)
              for a in module.body.block.first_op.args]  # fmt: skip
    return module, inputs


@pytest.mark.parametrize("case", sorted(ROW_CASES))
def test_cpu_fuse_rows_is_bit_identical(case: str) -> None:
    """Row by row, every element is computed by the same ops in the same order; the row
    statistics become per-row stack buffers (per thread, on two threads)."""
    module, inputs = _model_and_inputs(ROW_CASES[case], seed=3)
    base = "fuse-kernels,lower-graph-to-loops"
    fused = apply_passes(module.clone(), parse_passes(base + ",cpu-fuse-rows"))
    loops = [o for o in fused.walk() if type(o).__name__ == "ParallelOp"]
    rows = case != "softmax-axis-0"
    assert (len(loops) == 1) == rows, case
    allocas = [o for o in fused.walk() if o.name == "memref.alloca"]
    assert bool(allocas) == rows and all(loops[0].is_ancestor(o) for o in allocas), case
    assert ("irkit.scratch" in str(fused)) != rows, case
    threads = ",cpu-parallelize{threads=2 min-work=0}"
    outs = [
        irkit.compile(module, spec, backend="cpu")(*inputs)
        for spec in (base, base + ",cpu-fuse-rows", base + ",cpu-fuse-rows" + threads)
    ]
    for a, b, c in zip(*outs, strict=True):
        assert np.array_equal(a, b, equal_nan=True), case
        assert np.array_equal(a, c, equal_nan=True), case
    checks, _ = check(irkit.compile(module, base + ",cpu-fuse-rows", backend="cpu"), module, seed=1)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


KEPT_CASES = {
    "softmax-kept": "input x : f32[16, 300]\noutput y = softmax(x, axis=-1)",
    "softmax-3d-kept": "input x : f32[4, 5, 60]\noutput y = softmax(x, axis=-1)",
    "tanh-sum-kept": "input x : f32[8, 50]\n"
    "output y = tanh(x) * reduce_sum(tanh(x), axes=[-1], keepdims=true)",
    "two-outputs-kept": "input x : f32[8, 50]\noutput y = softmax(x, axis=-1)\n"
    "output z = exp(x) / reduce_sum(exp(x), axes=[-1], keepdims=true)",
}


@pytest.mark.parametrize("case", sorted(KEPT_CASES))
def test_cpu_fuse_rows_on_kept_transcendentals_is_bit_identical(case: str) -> None:
    """Stored transcendentals held in the output's row, and summed in the loop computing
    them: the same ops on the same values in the same order, so the same bits."""
    module, inputs = _model_and_inputs(KEPT_CASES[case], seed=5)
    base = "cse,fuse-kernels,lower-graph-to-loops{keep-transcendentals=true}"
    fused = apply_passes(module.clone(), parse_passes(base + ",cpu-fuse-rows"))
    assert "irkit.scratch" not in str(fused), case
    outs = [irkit.compile(module, spec, backend="cpu")(*inputs)
            for spec in (base, base + ",cpu-fuse-rows")]  # fmt: skip
    for a, b in zip(*outs, strict=True):
        assert np.array_equal(a, b, equal_nan=True), case


def test_cpu_fuse_rows_keeps_apart_what_it_may_not_merge() -> None:
    """The loop-level kernels of cpu-fuse-rows-limits.mlir (a sum reading back to front, an
    output phase reading another column): the same bits with the pass as without."""
    module = irkit.load("tests/filecheck/passes/cpu-fuse-rows-limits.mlir")
    x = np.random.default_rng(6).standard_normal((4, 8)).astype(np.float32)
    plain = irkit.compile(module, "", backend="cpu")(x)
    fused = irkit.compile(module, "cpu-fuse-rows", backend="cpu")(x)
    for a, b in zip(plain, fused, strict=True):
        assert np.array_equal(a, b)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    assert np.allclose(plain[0], want, rtol=1e-5)
    assert np.allclose(plain[1], np.roll(want, -1, axis=1), rtol=1e-5)


@pytest.mark.parametrize(
    "text",
    [
        "input x : f32[16, 300]\noutput y = softmax(x, axis=-1)",
        "input x : f32[8, 50]\noutput y = tanh(x) * reduce_sum(tanh(x), axes=[-1], keepdims=true)",
        "input x : f32[6, 40]\nt = gelu(x)\noutput y = t * t + sigmoid(x) / reduce_max(sigmoid(x), axes=[1], keepdims=true)",
    ],
)
def test_keep_transcendentals_stores_them_once_and_matches(text: str) -> None:
    module = parse_source(f"model k\n{text}\n", "k.graph", ".graph")
    spec = "cse,fuse-kernels,lower-graph-to-loops{keep-transcendentals=true}"
    kept = apply_passes(module.clone(), parse_passes(spec))
    plain = apply_passes(module.clone(), parse_passes("cse,fuse-kernels,lower-graph-to-loops"))
    count = lambda m: sum(op.name.startswith("math.") for op in m.walk())  # noqa: E731
    assert count(kept) < count(plain)
    for s in (spec, spec + ",cpu-fuse-rows,block-reductions,reassociate-reductions"):
        checks, _ = check(irkit.compile(module, s, backend="cpu"), module, seed=4)
        assert all(c.passed for c in checks), [c.describe() for c in checks]


INTERCHANGE = {
    "pool-nhwc": "input x : f32[2, 9, 8, 24]\noutput y = reduce_mean(x, axes=[1, 2], keepdims=true)\n",
    "column-sum": "input x : f32[300, 40]\noutput y = reduce_sum(x, axes=[0])\n",
    "column-max": "input x : f32[100, 16]\noutput y = reduce_max(x, axes=[0]) * 2.0\n",
    "se-block": "input x : f32[1, 9, 9, 16]\nm = reduce_mean(x, axes=[1, 2], keepdims=true)\n"
    "output y = x * sigmoid(m)\n",
    "row-sum": "input x : f32[8, 64]\noutput y = reduce_sum(x, axes=[1])\n",
    "window": "input x : f32[1, 7, 7, 16]\noutput y = reduce_sum(x, axes=[1, 2])\n",
    # 400 elements a channel: summed in blocks of a row (20) in f32, the blocks in f64
    "pool-blocked": "input x : f32[1, 20, 20, 16]\noutput y = reduce_sum(x, axes=[1, 2])\n",
}


@pytest.mark.parametrize("case", sorted(INTERCHANGE))
def test_interchange_reductions_is_bit_identical(case: str) -> None:
    """Column reductions as row updates (interchange-reductions) give the very bits of the
    loops they replace (each column's sum in the same order; past a block, in the blocks
    block-reductions would have made), and default-cpu matches the reference."""
    module = parse_source(f"model m\n{INTERCHANGE[case]}", "t.graph", ".graph")
    inputs = irkit.random_inputs(module, seed=4)
    base = "fuse-kernels,lower-graph-to-loops"
    changed = apply_passes(module.clone(), parse_passes(f"{base},interchange-reductions"))
    unchanged = apply_passes(module.clone(), parse_passes(base))
    # left alone: a row sum (its columns are not what the reads run along), a column sum
    # whose rows alone pass a block (block-reductions splits those) and a window
    assert (to_text(changed) == to_text(unchanged)) == (case in ("row-sum", "column-sum", "window"))
    plain = irkit.compile(module, base, backend="cpu")(*inputs)
    rows = irkit.compile(module, f"{base},interchange-reductions", backend="cpu")(*inputs)
    for a, b in zip(plain, rows, strict=True):
        np.testing.assert_array_equal(a, b)
    default = irkit.compile(module, "default-cpu", backend="cpu")
    checks, _ = check(default, module, seed=4)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


SHARED_WORK = {
    # ConvNeXt v2's GRN after its GELU: the GELU read by a spatial sum and the output, the
    # channel norms by the channel mean and the division
    "grn": "input x : f32[1, 6, 7, 16]\nparam w : f32[1, 1, 1, 16]\n"
    "a = x * (erf(x / 1.41421356) + 1.0) * 0.5\n"
    "n = sqrt(reduce_sum(a * a, axes=[1, 2], keepdims=true))\n"
    "m = n / (reduce_mean(n, axes=[3], keepdims=true) + 0.000001)\n"
    "output y = w * (a * m) + a\n",
    # a layer norm written out of primitives over a tanh: the tanh read in three phases
    "tanh-norm": "input x : f32[5, 48]\nt = tanh(x) * 2.0\n"
    "d = t - reduce_mean(t, axes=[1], keepdims=true)\n"
    "output y = d / sqrt(reduce_mean(d * d, axes=[1], keepdims=true) + 0.00001)\n",
    # row sums read by a column max and by the division
    "sum-twice": "input x : f32[12, 20]\ns = reduce_sum(x, axes=[1])\n"
    "output y = s / reduce_max(s, axes=[0], keepdims=true)\n",
    # one exponential expression read by two reductions of one nest
    "two-reductions": "input x : f32[9, 33]\ne = exp(x - 1.0) * 0.5\n"
    "output y = reduce_sum(e, axes=[1]) + reduce_max(e, axes=[1])\n",
}


@pytest.mark.parametrize("case", sorted(SHARED_WORK))
def test_a_fused_kernel_computes_shared_work_once(case: str) -> None:
    """A reduction, or (keeping transcendentals) an expression holding one, that a kernel
    reads in two places is stored and read back, not computed again: every transcendental
    and every reduction of the model appears once in its lowered kernel. default-cpu and
    the GPU path (under lockstep) match the reference."""
    module = parse_source(f"model m\n{SHARED_WORK[case]}", "t.graph", ".graph")
    lowered = apply_passes(
        module.clone(),
        parse_passes("cse,fuse-kernels,lower-graph-to-loops{keep-transcendentals=true}"),
    )
    kernels = [op for op in lowered.ops if "irkit.kernel" in op.attributes]
    assert len(kernels) == 1, case
    math_ops = [op.name for op in kernels[0].walk() if op.name.startswith("math.")]
    model_math = [
        op.name for op in module.walk() if op.name.split(".")[-1] in ("erf", "tanh", "exp", "sqrt")
    ]
    assert sorted(math_ops) == sorted(n.replace("graph.", "math.") for n in model_math), case
    loops = sum(isinstance(op, scf.ForOp) for op in kernels[0].walk())
    reduced = [len(op.axes) for op in module.walk() if isinstance(op, g.ReduceOp)]
    assert loops == sum(reduced), (case, loops, reduced)
    for spec, backend in (("default-cpu", "cpu"), ("default-cuda", "cuda-sim")):
        checks, _ = check(irkit.compile(module, spec, backend=backend), module, seed=7)
        assert all(c.passed for c in checks), (case, spec, [c.describe() for c in checks])
