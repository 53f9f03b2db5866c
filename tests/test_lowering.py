"""Lowering to loops and the CPU backend, end to end on the examples and on kernel regions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import func, memref, scf

import irkit
from irkit.dialects import graph as g
from irkit.errors import IrkitError
from irkit.frontend.mlir import parse_mlir
from irkit.loops import is_loop_level
from irkit.pipelines import apply_passes, parse_passes
from irkit.runtime.check import check
from tests.conftest import SMALL


def test_every_example_has_small_dims(example: Path) -> None:
    assert example.stem in SMALL


def test_example_matches_reference_on_cpu(example: Path) -> None:
    module = irkit.load(example, SMALL[example.stem])
    exe = irkit.compile(module, backend="cpu")
    checks, _ = check(exe, module, seed=11)
    assert checks and all(c.passed for c in checks), [c.describe() for c in checks]


def test_baseline_is_one_kernel_per_graph_op(example: Path) -> None:
    """One kernel per graph op, attention counted as the ops the lowering decomposes it
    into (no fused pass takes it)."""
    from xdsl.pattern_rewriter import PatternRewriteWalker

    from irkit.passes.decompose_composites import DecomposeAttentionPattern

    module = irkit.load(example, SMALL[example.stem])
    decomposed = module.clone()
    PatternRewriteWalker(DecomposeAttentionPattern()).rewrite_module(decomposed)
    fn = irkit.ir.entry_function(decomposed)
    n_ops = sum(
        isinstance(op, g.GraphOp) and not isinstance(op, g.ConstantOp) for op in fn.body.block.ops
    )
    lowered = apply_passes(module.clone(), parse_passes("baseline-cpu"))
    assert is_loop_level(lowered)
    kernels = [
        op for op in lowered.ops if isinstance(op, func.FuncOp) and "irkit.kernel" in op.attributes
    ]
    assert len(kernels) == n_ops
    assert all(k.sym_visibility and k.sym_visibility.data == "private" for k in kernels)
    driver = irkit.ir.entry_function(lowered)
    calls = [op for op in driver.body.block.ops if isinstance(op, func.CallOp)]
    assert [c.callee.root_reference.data for c in calls] == [k.sym_name.data for k in kernels]


def test_every_allocation_is_freed_once(example: Path) -> None:
    lowered = apply_passes(irkit.load(example, SMALL[example.stem]), parse_passes("baseline-cpu"))
    driver = irkit.ir.entry_function(lowered)
    allocs = [op for op in driver.body.block.ops if isinstance(op, memref.AllocOp)]
    for a in allocs:
        deallocs = [u for u in a.memref.uses if isinstance(u.operation, memref.DeallocOp)]
        assert len(deallocs) == 1


FUSED = """
func.func @f(%x: tensor<5x9xf32>, %b: tensor<9xf32>) -> (tensor<5x9xf32>, tensor<5x1xf32>) {
  %0, %s = graph.kernel : tensor<5x9xf32>, tensor<5x1xf32> {
    %1 = graph.add %x, %b : (tensor<5x9xf32>, tensor<9xf32>) -> tensor<5x9xf32>
    %2 = graph.softmax %1 : tensor<5x9xf32>
    %3 = graph.reduce_sum %2 axes = [1] keepdims = true : tensor<5x9xf32> -> tensor<5x1xf32>
    graph.yield %2, %3 : tensor<5x9xf32>, tensor<5x1xf32>
  }
  func.return %0, %s : tensor<5x9xf32>, tensor<5x1xf32>
}
"""


def test_a_kernel_region_is_one_kernel_with_scratch_for_its_reductions() -> None:
    module = parse_mlir(FUSED, "fused.mlir")
    exe = irkit.compile(module, "lower-graph-to-loops", backend="cpu")
    assert [k.name for k in exe.kernels] == ["k0_add_softmax_reduce_sum"]
    kfn = next(
        op
        for op in exe.module.ops
        if isinstance(op, func.FuncOp) and "irkit.kernel" in op.attributes
    )
    scratch = [d for d in kfn.arg_attrs.data if "irkit.scratch" in d.data]
    assert len(scratch) == 2  # the row max and the row sum, [5, 1] each
    stages = [op for op in kfn.body.block.ops if isinstance(op, scf.ParallelOp)]
    assert len(stages) == 4  # max, sum, softmax (an output), the output's row sum
    checks, _ = check(exe, module, seed=2)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


def test_kernel_records_count_flops_and_bytes() -> None:
    module = irkit.load(
        Path(__file__).parent.parent / "examples/gemm.graph", {"M": 8, "N": 16, "K": 32}
    )
    exe = irkit.compile(module, backend="cpu")
    (k,) = exe.kernels
    assert k.flops == 2 * 8 * 16 * 32
    assert k.min_bytes == 4 * (8 * 32 + 32 * 16 + 8 * 16)
    assert len(k.hash) == 16 and f'define void @"irkit.k.{k.hash}"' in k.source
    assert "vector.fma" in k.ir  # default-cpu's cpu-tile-matmul; FLOPs count every lane


def test_outputs_that_are_inputs_or_constants_are_copied() -> None:
    src = """
func.func @f(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<2xf32>, tensor<3xf32>) {
  %c = graph.constant dense<[1.5, -2.0]> : tensor<2xf32>
  %y = graph.neg %x : tensor<3xf32>
  func.return %x, %c, %y : tensor<3xf32>, tensor<2xf32>, tensor<3xf32>
}
"""
    exe = irkit.compile(parse_mlir(src, "copies.mlir"), backend="cpu")
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    a, c, y = exe(x)
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(c, [1.5, -2.0])
    np.testing.assert_array_equal(y, -x)
    bound = exe.bind(x)
    bound.run_graph()
    np.testing.assert_array_equal(bound.outputs[1], [1.5, -2.0])


def test_bound_kernels_run_alone_on_real_intermediates() -> None:
    module = irkit.load(
        Path(__file__).parent.parent / "examples/elementwise_chain.graph",
        SMALL["elementwise_chain"],
    )
    exe = irkit.compile(module, backend="cpu")
    inputs = irkit.random_inputs(module, seed=4)
    bound = exe.bind(*inputs)
    expected = exe(*inputs)[0]
    bound.outputs[0][...] = np.nan
    for i in range(len(exe.kernels)):
        bound.run_kernel(i)
    np.testing.assert_array_equal(bound.outputs[0], expected)


def test_bound_buffers_are_page_aligned_copies() -> None:
    # Where the allocator put a buffer moved small timings by ~5% through 4K aliasing;
    # bound buffers all start on a page, so two binds of a program place data alike.
    module = irkit.load(
        Path(__file__).parent.parent / "examples/elementwise_chain.graph",
        SMALL["elementwise_chain"],
    )
    exe = irkit.compile(module, "lower-graph-to-loops", "cpu")  # intermediates too
    inputs = irkit.random_inputs(module, seed=5)
    bound = exe.bind(*inputs)
    assert all(address % 4096 == 0 for address in bound.args)
    assert all(a.ctypes.data % 4096 == 0 for a in bound.keep if a.nbytes >= 4096)
    expected = exe(*inputs)[0]
    inputs[0][...] = np.nan  # the caller's arrays are not the bound ones
    bound.run_graph()
    np.testing.assert_array_equal(bound.outputs[0], expected)
    assert "aligned_alloc(i64 4096" in exe.llvm_ir.replace('"', "")


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        (lambda x, y, b: (x, y), "takes 3 arrays (x, y, bias), got 2"),
        (lambda x, y, b: (x, y[:3], b), "input y has shape [3, 96], expected [64, 96]"),
        (
            lambda x, y, b: (x, y.astype(np.float64), b),
            "input y has dtype float64, expected float32",
        ),
    ],
)
def test_bad_input_arrays_are_one_line_errors(arrays, message: str) -> None:
    module = irkit.load(
        Path(__file__).parent.parent / "examples/elementwise_chain.graph",
        SMALL["elementwise_chain"],
    )
    exe = irkit.compile(module, backend="cpu")
    with pytest.raises(IrkitError) as info:
        exe(*arrays(*irkit.random_inputs(module)))
    assert (
        str(info.value) == f"error: @elementwise_chain{':' if 'input' in message else ''} {message}"
    )


def test_non_contiguous_inputs_are_accepted() -> None:
    module = irkit.load(
        Path(__file__).parent.parent / "examples/gemm.graph", {"M": 4, "N": 6, "K": 5}
    )
    exe = irkit.compile(module, backend="cpu")
    a = np.asfortranarray(np.random.default_rng(0).uniform(-1, 1, (4, 5)).astype(np.float32))
    b = np.random.default_rng(1).uniform(-1, 1, (5, 6)).astype(np.float32)
    np.testing.assert_allclose(exe(a, b)[0], a @ b, rtol=1e-5)


def test_auto_backend_says_which_it_chose() -> None:
    exe = irkit.compile(
        Path(__file__).parent.parent / "examples/gemm.graph", backend="auto", dims={"M": 4}
    )
    assert exe.backend in ("cpu", "cuda")
    assert exe.selection.startswith(f"auto chose {exe.backend}")


def test_unknown_backend_is_a_clear_error() -> None:
    with pytest.raises(IrkitError, match="unknown backend 'tpu'"):
        irkit.compile(Path(__file__).parent.parent / "examples/gemm.graph", backend="tpu")


def test_llvm_target_rejects_ops_it_cannot_translate() -> None:
    src = """
func.func @k(%a: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %v = memref.load %a[%c0] : memref<4xf32>
  %s = math.tan %v : f32
  memref.store %s, %a[%c0] : memref<4xf32>
  func.return
}
"""
    from irkit.codegen.host import llvm_ir

    with pytest.raises(IrkitError, match="the llvm target cannot translate math.tan"):
        llvm_ir(parse_mlir(src, "tan.mlir"))


def test_driver_scratch_is_allocated_once_and_released() -> None:
    """The driver keeps its intermediate buffers between calls (no page faults per call):
    a second call with other inputs still computes its own result, and dropping the
    executable frees them through `irkit.release`."""
    import gc

    from irkit.runtime.check import check as check_outputs

    module = irkit.load("examples/mlp.graph", {"B": 4})
    exe = irkit.compile(module, "baseline-cpu", backend="cpu")
    assert (
        "internal global ptr null" in exe.llvm_ir
        and 'define void @"irkit.release"()' in exe.llvm_ir
    )
    for seed in (1, 2, 3):
        checks, _ = check_outputs(exe, module, seed=seed)
        assert checks and all(c.passed for c in checks), [c.describe() for c in checks]
    del exe
    gc.collect()


def test_bind_runs_the_timed_driver_on_poisoned_outputs() -> None:
    """Binding ends with one call of what `run_graph` times (the driver's steady form), on
    outputs poisoned again: the bound outputs a check reads are that code's, and its kept
    scratch is allocated at bind, not in the first timed call. A steady driver that wrote
    nothing would leave NaN behind, not the plan replay's results."""
    module = irkit.load("examples/elementwise_chain.graph", {"N": 8, "D": 16})
    exe = irkit.compile(module, "lower-graph-to-loops", backend="cpu")
    _, inputs = check(exe, module, seed=0)
    steady, calls = exe.steady, []
    exe.steady = lambda *args: (calls.append(args), steady(*args))[1]
    bound = exe.bind(*inputs)
    assert calls == [tuple(bound.args)]
    np.testing.assert_array_equal(bound.outputs[0], exe(*inputs)[0])
    exe.steady = lambda *args: None
    assert np.isnan(exe.bind(*inputs).outputs[0]).all()


ONCE_MODEL = """model once
input x : f32[4, 8]
param w : f32[6, 8]
output y = matmul(x, transpose(w, perm=[1, 0]) * 2.0)
output z = w + 1.0
"""


@pytest.mark.parametrize("backend", ["cpu", "cuda-sim"])
def test_weight_only_kernels_run_once_per_bind(backend: str) -> None:
    """The transposed, scaled weight is prepared at bind: the bound graph keeps using it
    when the bound copy of w changes afterwards, while z = w + 1, a per-call kernel that
    reads w itself, follows. A plain call computes everything from what it is given."""
    from irkit.frontend import parse_source

    module = parse_source(ONCE_MODEL, "once.graph", ".graph")
    cpu = backend == "cpu"  # unfused on the CPU: transpose, then scale; fused under default-cuda
    exe = irkit.compile(module, "lower-graph-to-loops" if cpu else None, backend=backend)
    assert [k.once for k in exe.kernels] == (
        [True, True, False, False] if cpu else [True, False, False]
    )
    checks, _ = check(exe, module, seed=2)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    if backend != "cpu":
        return
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 8), np.float32), rng.standard_normal((6, 8), np.float32)
    y, z = exe(x, w)
    np.testing.assert_allclose(y, x @ (2 * w.T), rtol=1e-5, atol=1e-5)
    bound = exe.bind(x, w)
    bound.run_graph()
    np.testing.assert_array_equal(bound.outputs[0], y)
    bound_w = next(a for a in bound.keep if a.ctypes.data == bound.args[1])
    bound_w += 1.0
    bound.run_graph()
    np.testing.assert_array_equal(bound.outputs[0], y)  # prepared at bind
    np.testing.assert_array_equal(bound.outputs[1], z + 1.0)  # read per call
    y2, _ = exe(x, w + 1.0)  # a plain call prepares the weights it is given
    np.testing.assert_allclose(y2, x @ (2 * (w + 1.0).T), rtol=1e-5, atol=1e-5)
