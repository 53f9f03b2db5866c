"""pad-leading-dims against the reference and against itself: padded intermediates give the
same bits on the CPU (real llvmlite JIT) and under the lockstep interpretation, whose
buffers start NaN-filled, so a kernel that read the padding would show it. Also: the
matmul tiling's 16-byte loads across a padded row, and the logical byte counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import memref, vector

import irkit
from irkit.codegen.cuda import gpu_kernels, kernel_source
from irkit.codegen.nvrtc import compile_cuda
from irkit.errors import IrkitError
from irkit.frontend import parse_source
from irkit.loops import EXTENT_ATTR, SHARED_SPACE
from irkit.passes.pad_leading_dims import PadLeadingDimsPass
from irkit.pipelines import PIPELINES, apply_passes, parse_passes
from irkit.runtime.check import check
from irkit.runtime.reference import random_inputs

# A column walk over a 4 KiB-row intermediate (the reduction over rows), a row length that
# is not a whole float4 (147: a 7x7x3 stem convolution's im2col row) feeding a matmul as A,
# a transpose of a padded buffer, and a small row that stays as it is.
MODEL = """model pad
input y : f32[48, 1024]
input x : f32[40, 147]
param w : f32[147, 24]
input a : f32[6, 10]
e = exp(y)
output s = reduce_sum(e, axes=[0])
h = relu(x)
output m = matmul(h, w)
output t = transpose(h)
output u = reduce_max(neg(a), axes=[0])
"""

STEM = """model stem
input x : f32[1, 3, 20, 20]
param w : f32[16, 3, 7, 7]
output y = relu(conv2d(x, w, strides=[2, 2], padding=[3, 3, 3, 3]))
"""


def padded_allocs(module) -> dict[str, tuple[int, ...]]:
    return {
        o.memref.name_hint or "?": o.memref.type.get_shape()
        for o in module.walk()
        if isinstance(o, memref.AllocOp)
    }


def run(module, spec: str, backend: str, inputs):
    exe = irkit.compile(module, spec, backend=backend)
    return exe, exe(*inputs)


@pytest.mark.parametrize(
    "backend,lowering",
    [
        ("cpu", "lower-graph-to-loops,{pad}cpu-tile-matmul"),
        ("cuda-sim", "lower-graph-to-loops,{pad}gpu-tile-matmul,map-to-gpu"),
    ],
)
def test_padding_gives_the_same_bits(backend: str, lowering: str) -> None:
    module = parse_source(MODEL, "pad.graph", ".graph")
    inputs = random_inputs(module, seed=3)
    plain = lowering.format(pad="")
    padded = lowering.format(pad="pad-leading-dims,")
    lowered = apply_passes(module.clone(), parse_passes(padded))
    shapes = padded_allocs(lowered)
    assert shapes["e"] == (48, 1040) and shapes["h"] == (40, 148)
    assert (6, 10) in shapes.values()  # neg(a): 2 more of 10 is above max-growth
    _, want = run(module, plain, backend, inputs)
    exe, got = run(module, padded, backend, inputs)
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(a, b)
    checks, _ = check(exe, module, seed=3)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


def test_a_matmul_reads_a_padded_row_by_vectors_across_its_end() -> None:
    """The stem conv's im2col matrix has rows of 147 floats: unpadded, the GPU matmul reads
    A element by element; padded to 148, by 16-byte vectors, the one vector across k = 147
    masked element by element. Lockstep checks the values (the padding is NaN there)."""
    module = parse_source(STEM, "stem.graph", ".graph")
    spec = PIPELINES["default-cuda"].spec
    unpadded = spec.replace("pad-leading-dims,", "")
    for pipeline, vectors in ((unpadded, False), (spec, True)):
        mapped = apply_passes(module.clone(), parse_passes(pipeline))
        tiled = [k for k in gpu_kernels(mapped) if "matmul" in k.sym_name.data]
        (kernel,) = tiled
        a = kernel.body.block.args[0]
        assert a.type.get_shape()[-1] == (148 if vectors else 147)
        loads = [
            op
            for op in kernel.walk()
            if isinstance(op, vector.LoadOp) and op.base.type.memory_space != SHARED_SPACE
        ]
        assert any(op.base is a for op in loads) == vectors
        source = kernel_source(mapped, kernel)
        r = compile_cuda(source, kernel.sym_name.data, "sm_90").resources
        assert r.spill_stores == 0 and r.spill_loads == 0
        exe = irkit.compile(module, pipeline, backend="cuda-sim")
        checks, _ = check(exe, module, seed=1)
        assert all(c.passed for c in checks), [c.describe() for c in checks]


def test_minimal_bytes_count_the_logical_elements() -> None:
    module = parse_source(MODEL, "pad.graph", ".graph")
    plain = irkit.compile(module, "lower-graph-to-loops", backend="cpu")
    padded = irkit.compile(module, "lower-graph-to-loops,pad-leading-dims", backend="cpu")
    assert [k.min_bytes for k in plain.kernels] == [k.min_bytes for k in padded.kernels]


def test_the_skew_and_alignment_rules() -> None:
    from xdsl.dialects.builtin import MemRefType, f16, f32

    p = PadLeadingDimsPass()
    assert p.padded_row(MemRefType(f32, [8, 1024])) == 1040  # 4 KiB rows: + a cache line
    assert p.padded_row(MemRefType(f32, [8, 2048])) == 2064
    assert p.padded_row(MemRefType(f32, [8, 1000])) == 1000  # whole float4s, not 4 KiB
    assert p.padded_row(MemRefType(f32, [8, 147])) == 148
    assert p.padded_row(MemRefType(f16, [8, 147])) == 152  # 16 bytes = 8 halves
    assert PadLeadingDimsPass(skew_bytes=0).padded_row(MemRefType(f32, [8, 1024])) == 1024


def test_inputs_and_outputs_keep_their_layout_and_only_kernels_see_the_padding() -> None:
    module = parse_source(MODEL, "pad.graph", ".graph")
    lowered = apply_passes(module.clone(), parse_passes("lower-graph-to-loops,pad-leading-dims"))
    driver = next(f for f in lowered.ops if "irkit.kernel" not in f.attributes)
    shapes = [a.type.get_shape() for a in driver.body.block.args]
    assert shapes == [
        (48, 1024),
        (40, 147),
        (147, 24),
        (6, 10),
        (1024,),
        (40, 24),
        (147, 40),
        (10,),
    ]
    extents = [
        d.data[EXTENT_ATTR].get_values()
        for f in lowered.ops
        if f.arg_attrs
        for d in f.arg_attrs.data
        if EXTENT_ATTR in d.data
    ]
    assert sorted(map(tuple, extents)) == [(40, 147)] * 3 + [(48, 1024)] * 2


@pytest.mark.parametrize(
    "spec,message",
    [
        ("lower-graph-to-loops,pad-leading-dims{align-bytes=0}", "align-bytes"),
        ("lower-graph-to-loops,pad-leading-dims{skew-bytes=-4}", "skew-bytes"),
        ("lower-graph-to-loops,pad-leading-dims{max-growth=-1.0}", "max-growth"),
        ("pad-leading-dims", "needs loop-level IR"),
    ],
)
def test_bad_options_are_one_line_errors(spec: str, message: str) -> None:
    module = parse_source(MODEL, "pad.graph", ".graph")
    with pytest.raises(IrkitError, match=message):
        apply_passes(module, parse_passes(spec))


def test_both_default_pipelines_pad_as_an_optional_pass() -> None:
    for name in ("default-cpu", "default-cuda"):
        assert "pad-leading-dims" in PIPELINES[name].optional


def test_a_padding_around_a_computed_tensor_matches_the_reference() -> None:
    """The FileCheck model of a zero padding around x * sigmoid(x) in two axes (computed at
    a clamped index, zero selected outside, no branch) beside a concat of two computed
    tensors (a branch): both outputs the reference's, on one thread and two."""
    root = Path(__file__).resolve().parent
    source = (root / "filecheck/passes/lower-graph-to-loops-pad-expr.mlir").read_text()
    module = parse_source(source, "pad-expr.mlir", ".mlir")
    for pipeline in ("default-cpu", "fuse-kernels,lower-graph-to-loops"):
        checks, _ = check(irkit.compile(module, pipeline, backend="cpu"), module, seed=5)
        assert len(checks) == 2 and all(c.passed for c in checks), [c.describe() for c in checks]
