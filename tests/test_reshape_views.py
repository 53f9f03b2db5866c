"""reshape-views against the reference and against itself: a reshape standing alone made a
view gives the same bits as its copy on the CPU (real llvmlite JIT), under the lockstep
interpretation, through the printed CUDA C on the host (red zones around every buffer, views
included) and on a GPU (`pytest -m gpu`); the buffers that give way, the lifetimes of those
that stay, and where a reshape must stay a copy."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import func, memref

import irkit
from irkit.frontend import parse_source
from irkit.loops import RESHAPE_ATTR, VIEW_OPS, kernels
from irkit.passes.reshape_views import _groups
from irkit.pipelines import apply_passes, parse_passes
from irkit.runtime.check import check
from irkit.runtime.reference import random_inputs

from .test_cuda_path import HOST_AND_GPU, needs

# Every way a reshape meets the driver: an intermediate split (an expansion), a reshape of
# that view that neither splits nor merges (a collapse and an expansion), an input merged
# (a collapse) and read beside a param, an intermediate reshaped into an output (its kernel
# then writes the output in place), a weight reshaped and multiplied (a view of a param), and
# an input reshaped into an output, which stays a copy.
MODEL = """model views
input x : f32[4, 6]
param w : f32[24]
param v : f32[2, 3, 4]
a = exp(x)
b = reshape(a, shape=[2, 2, 6])
c = reshape(b, shape=[8, 3])
output y = neg(c)
d = reshape(x, shape=[24])
output z = d + w
e = tanh(x)
output o = reshape(e, shape=[24])
output m = matmul(x, reshape(v, shape=[6, 4]))
output p = reshape(x, shape=[6, 4])
"""

LOWERINGS = {
    "cpu": "lower-graph-to-loops,{views}cpu-tile-matmul",
    "cuda-sim": "lower-graph-to-loops,{views}gpu-tile-matmul,map-to-gpu",
    "cuda-host": "lower-graph-to-loops,{views}gpu-tile-matmul,map-to-gpu",
    "cuda": "lower-graph-to-loops,{views}gpu-tile-matmul,map-to-gpu",
}


def lowered(source: str, spec: str):
    module = parse_source(source, "views.graph", ".graph")
    return module, apply_passes(module.clone(), parse_passes(spec))


def driver_ops(module) -> list:
    driver = next(
        f for f in module.ops if isinstance(f, func.FuncOp) and f.sym_name.data == "views"
    )
    return list(driver.body.block.ops)


@pytest.mark.parametrize("backend", ["cpu", *HOST_AND_GPU])
def test_views_give_the_same_bits_as_copies(backend: str) -> None:
    if not isinstance(backend, str):
        backend = backend.values[0]
    needs(backend)
    module = parse_source(MODEL, "views.graph", ".graph")
    inputs = random_inputs(module, seed=5)
    copies = irkit.compile(module, LOWERINGS[backend].format(views=""), backend)
    views = irkit.compile(module, LOWERINGS[backend].format(views="reshape-views,"), backend)
    assert len(views.kernels) < len(copies.kernels)  # type: ignore[attr-defined]
    for want, got in zip(copies(*inputs), views(*inputs), strict=True):
        np.testing.assert_array_equal(want, got)
    checks, _ = check(views, module, seed=5)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


def test_which_buffer_gives_way() -> None:
    _, module = lowered(MODEL, "lower-graph-to-loops,reshape-views")
    ops = driver_ops(module)
    views = [o for o in ops if isinstance(o, VIEW_OPS)]
    shown = {o.results[0].name_hint: (o.name, tuple(o.results[0].type.get_shape())) for o in views}
    # b: a split; c: a collapse of b and an expansion; d: x merged; e: a view of output o,
    # which tanh's kernel writes; the reshaped weight v, a view of the param
    assert shown["b"] == ("memref.expand_shape", (2, 2, 6))
    assert shown["c"] == ("memref.expand_shape", (8, 3))
    assert (
        views[[o.results[0].name_hint for o in views].index("c") - 1].name
        == "memref.collapse_shape"
    )
    assert shown["d"] == ("memref.collapse_shape", (24,))
    assert shown["e"] == ("memref.expand_shape", (4, 6))
    assert any(o.src.name_hint == "v" for o in views)
    allocated = {o.memref.name_hint for o in ops if isinstance(o, memref.AllocOp)}
    assert not allocated & {"b", "c", "d", "e"}
    # x into output p: both the caller's arrays, so the copy stays, and only it
    remaining = [k for k in kernels(module) if RESHAPE_ATTR in k.attributes]
    assert len(remaining) == 1
    calls = [o for o in ops if isinstance(o, func.CallOp)]
    assert calls[-1].callee.root_reference.data == remaining[0].sym_name.data


def test_a_viewed_buffer_lives_until_the_last_reader_of_its_views() -> None:
    _, module = lowered(MODEL, "lower-graph-to-loops,reshape-views")
    ops = driver_ops(module)
    alloc_a = next(o for o in ops if isinstance(o, memref.AllocOp) and o.memref.name_hint == "a")
    (free_a,) = [
        u.operation for u in alloc_a.memref.uses if isinstance(u.operation, memref.DeallocOp)
    ]
    reader = next(
        o for o in ops if isinstance(o, func.CallOp) and "neg" in o.callee.root_reference.data
    )
    assert ops.index(free_a) > ops.index(reader)


def test_an_output_a_once_kernel_would_write_stays_a_copy() -> None:
    """neg(w) reads only a param: a once-per-bind kernel, whose buffer lives from one call to
    the next. The output is the caller's for one call, so the reshape into it stays a copy,
    and every call's output holds the values (two calls, two output arrays)."""
    source = "model views\ninput x : f32[3]\nparam w : f32[2, 3]\noutput y = reshape(neg(w), shape=[6])\noutput z = x + x\n"
    module, loops = lowered(source, "lower-graph-to-loops,reshape-views")
    assert [k for k in kernels(loops) if RESHAPE_ATTR in k.attributes]
    exe = irkit.compile(module, "lower-graph-to-loops,reshape-views", "cpu")
    inputs = random_inputs(module, seed=1)
    first = exe(*inputs)[0].copy()
    second = exe(*inputs)[0]
    np.testing.assert_array_equal(first, -inputs[1].reshape(6))
    np.testing.assert_array_equal(second, first)


@pytest.mark.parametrize("backend", ["cpu", "cuda-sim"])
def test_padding_carries_over_views_that_keep_the_rows(backend: str) -> None:
    """Rows of 1024 floats are padded to 1040 (a cache line of skew). A view splitting the
    leading dimension shows the padded rows (its kernel's parameter [4, 4, 1040], logical
    [4, 4, 1024]); a view merging the rows into one dimension keeps its buffer unpadded; and
    with the padding first, the reshape of a padded buffer stays a copy. Every order gives
    the unpadded copies' bits."""
    split = "model views\ninput x : f32[16, 1024]\na = exp(x)\nb = reshape(a, shape=[4, 4, 1024])\noutput y = reduce_sum(b, axes=[1])\n"
    merged = split + "c = reshape(a, shape=[16384])\noutput z = neg(c)\n"
    tail = "" if backend == "cpu" else ",map-to-gpu"
    for source, spec, a_shape, copies in (
        (split, "lower-graph-to-loops,reshape-views,pad-leading-dims", (16, 1040), 0),
        (merged, "lower-graph-to-loops,reshape-views,pad-leading-dims", (16, 1024), 0),
        (split, "lower-graph-to-loops,pad-leading-dims,reshape-views", (16, 1040), 1),
    ):
        module, loops = lowered(source, spec)
        assert len([k for k in kernels(loops) if RESHAPE_ATTR in k.attributes]) == copies
        a = next(
            o for o in loops.walk() if isinstance(o, memref.AllocOp) and o.memref.name_hint == "a"
        )
        assert a.memref.type.get_shape() == a_shape
        if copies == 0 and a_shape[-1] == 1040:
            reader = next(k for k in kernels(loops) if "reduce_sum" in k.sym_name.data)
            assert reader.function_type.inputs.data[0].get_shape() == (4, 4, 1040)
        inputs = random_inputs(module, seed=2)
        want = irkit.compile(module, "lower-graph-to-loops" + tail, backend)(*inputs)
        got = irkit.compile(module, spec + tail, backend)(*inputs)
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(w, g)


@pytest.mark.parametrize(
    "big,small,groups",
    [
        ((8, 512, 512), (4096, 512), [[0, 1], [2]]),
        ((2, 3, 1), (6,), [[0, 1, 2]]),
        ((1, 6), (6,), [[0, 1]]),
        ((1, 1), (), []),
        ((6, 1, 4), (6, 4), [[0], [1, 2]]),
        ((2, 3, 4), (4, 6), None),
        ((4, 6), (24, 1), None),
    ],
)
def test_reassociation_groups(big, small, groups) -> None:
    assert _groups(big, small) == groups
