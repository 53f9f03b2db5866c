"""share-buffers against itself and the reference: the driver's intermediates placed in one
arena give the same bits as buffers of their own on the CPU (real llvmlite JIT), under the
lockstep interpretation, through the printed CUDA C on the host and on a GPU (`pytest -m
gpu`); no two buffers live at once share a byte (a property of the placement, over random
lives); once-per-bind outputs keep their memory from one call to the next."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects import func, memref

import irkit
from irkit.frontend import parse_source
from irkit.loops.costs import buffer_bytes
from irkit.passes.share_buffers import LINE, PAGE, _Buffer, place
from irkit.pipelines import apply_passes, parse_passes
from irkit.runtime.check import check
from irkit.runtime.reference import random_inputs

from .test_cuda_path import HOST_AND_GPU, needs

EXAMPLES = sorted(Path(irkit.__file__).parent.glob("examples/*.graph"))

# Buffers of several sizes dying at different points, views of them (a reshape standing
# alone), a weight transposed once per bind, and an output of a kernel reading a buffer
# that another took the bytes of.
MODEL = """model share
input x : f32[24, 40]
param w : f32[24, 40]
a = exp(x) * 0.5
b = reduce_sum(a, axes=[1], keepdims=true)
c = a / b
d = reshape(c, shape=[960])
e = tanh(d)
f = reshape(e, shape=[40, 24])
g = matmul(x, f)
output y = g + matmul(x, transpose(w, perm=[1, 0])) * 2.0
output z = reduce_max(f, axes=[0])
"""

LOWERINGS = {
    "cpu": "fuse-kernels{{reductions=false}},lower-graph-to-loops,reshape-views,{share}cpu-tile-matmul",
    "cuda-sim": "fuse-kernels{{reductions=false}},lower-graph-to-loops,reshape-views,{share}map-to-gpu",
    "cuda-host": "fuse-kernels{{reductions=false}},lower-graph-to-loops,reshape-views,{share}map-to-gpu",
    "cuda": "fuse-kernels{{reductions=false}},lower-graph-to-loops,reshape-views,{share}map-to-gpu",
}  # fmt: skip


def _driver(module) -> func.FuncOp:
    return next(
        f for f in module.ops if isinstance(f, func.FuncOp) and "irkit.kernel" not in f.attributes
    )


@pytest.mark.parametrize("backend", ["cpu", *HOST_AND_GPU])
def test_an_arena_gives_the_same_bits_as_buffers_of_their_own(backend: str) -> None:
    needs(backend)
    module = parse_source(MODEL, "share.graph", ".graph")
    inputs = random_inputs(module, seed=3)
    apart = irkit.compile(module, LOWERINGS[backend].format(share=""), backend)
    shared = irkit.compile(module, LOWERINGS[backend].format(share="share-buffers,"), backend)
    assert "memref.view" in str(shared.module)  # type: ignore[attr-defined]
    for _ in range(2):  # a second call: the once-per-bind transpose's output is still there
        for want, got in zip(apart(*inputs), shared(*inputs), strict=True):
            np.testing.assert_array_equal(want, got)
    checks, _ = check(shared, module, seed=3)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_default_cpu_with_and_without_it(example: Path) -> None:
    """Each example under default-cpu, with share-buffers and without: the same bits, and an
    arena no larger than the buffers it replaced (smaller where lives end)."""
    module = irkit.load(example)
    inputs = random_inputs(module, seed=1)
    full = parse_passes("default-cpu")
    without = [p for p in full if p.name != "share-buffers"]
    assert len(without) == len(full) - 1
    plain = apply_passes(module.clone(), without)
    shared = apply_passes(module.clone(), full)
    allocated = lambda m: [  # noqa: E731
        buffer_bytes(o.memref.type) for o in _driver(m).walk() if isinstance(o, memref.AllocOp)
    ]
    assert sum(allocated(shared)) <= sum(allocated(plain))
    outs = [irkit.compile(m, "", backend="cpu")(*inputs) for m in (plain, shared)]
    for want, got in zip(*outs, strict=True):
        np.testing.assert_array_equal(want, got)


def test_once_outputs_and_buffers_used_otherwise_keep_their_allocations() -> None:
    module = parse_source(MODEL, "share.graph", ".graph")
    spec = LOWERINGS["cpu"].format(share="share-buffers,")
    driver = _driver(apply_passes(module, parse_passes(spec)))
    allocs = [o for o in driver.body.block.ops if isinstance(o, memref.AllocOp)]
    arena = [a for a in allocs if a.memref.name_hint == "arena"]
    assert len(arena) == 1
    own = [a for a in allocs if a not in arena]
    # the transposed weight (read by every call's matmul, written at bind)
    assert [tuple(a.memref.type.get_shape()) for a in own] == [(40, 24)]
    views = [o for o in driver.body.block.ops if isinstance(o, memref.ViewOp)]
    assert len(views) >= 5
    assert all(o.source is arena[0].memref for o in views)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 3 * PAGE), st.integers(0, 30), st.integers(0, 10)),
        min_size=1,
        max_size=24,
    )
)
def test_placement_never_overlaps_buffers_alive_together(
    specs: list[tuple[int, int, int]],
) -> None:
    buffers = [_Buffer(None, size, start, start + length) for size, start, length in specs]  # type: ignore[arg-type]
    total = place(buffers)
    for b in buffers:
        assert b.offset % (PAGE if b.size >= PAGE else LINE) == 0
        assert b.offset + b.size <= total
    for i, p in enumerate(buffers):
        for q in buffers[i + 1 :]:
            if p.start <= q.end and q.start <= p.end:
                assert p.offset + p.size <= q.offset or q.offset + q.size <= p.offset, (p, q)
    assert total <= sum(-(-b.size // PAGE) * PAGE + PAGE for b in buffers)
