"""The numpy reference on its own terms: every example, numerical properties, bad arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import irkit
from irkit.errors import IrkitError
from irkit.frontend.graph_lang import parse_graph


def test_every_example_runs(example: Path) -> None:
    module = irkit.load(example)
    inputs = irkit.random_inputs(module, seed=1)
    outputs = irkit.reference(module, *inputs)
    assert outputs and all(o.dtype == np.float64 and np.isfinite(o).all() for o in outputs)
    assert any(np.abs(o).max() > 0 for o in outputs)  # nothing trivially zero


def test_random_inputs_are_fresh_typed_and_positive_where_needed() -> None:
    module = irkit.load("examples/conv_block.graph", {"N": 1, "H": 8})
    a, b = irkit.random_inputs(module, seed=0), irkit.random_inputs(module, seed=1)
    assert not np.array_equal(a[0], b[0])
    assert all(x.dtype == np.float32 for x in a)
    var = a[-1]  # batch_norm's variance
    assert var.min() >= 0.5
    assert a[0].min() < 0  # ordinary inputs are signed


def test_f16_and_bf16_inputs() -> None:
    import ml_dtypes

    src = "model m\ninput x : f16[4]\ninput y : bf16[4]\noutput z = cast(x, dtype=bf16) + y\n"
    module = parse_graph(src, "m.graph")
    x, y = irkit.random_inputs(module)
    assert x.dtype == np.float16 and y.dtype == ml_dtypes.bfloat16
    (z,) = irkit.reference(module, x, y)
    expected = x.astype(ml_dtypes.bfloat16).astype(np.float64) + y.astype(np.float64)
    np.testing.assert_array_equal(z, expected)


def test_softmax_rows_sum_to_one_even_for_huge_logits() -> None:
    module = parse_graph("model m\ninput x : f32[3, 5]\noutput y = softmax(x)\n", "m.graph")
    x = np.array([[1000.0, 999.0, -1000.0, 0.0, 1.0]] * 3, dtype=np.float32)
    (y,) = irkit.reference(module, x)
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-12)
    assert np.isfinite(y).all()


def test_layer_norm_normalizes() -> None:
    src = "model m\ninput x : f32[4, 64]\nparam g : f32[64]\nparam b : f32[64]\noutput y = layer_norm(x, g, b)\n"
    module = parse_graph(src, "m.graph")
    x = np.random.default_rng(0).normal(3.0, 5.0, (4, 64)).astype(np.float32)
    (y,) = irkit.reference(module, x, np.ones(64, np.float32), np.zeros(64, np.float32))
    np.testing.assert_allclose(y.mean(axis=-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.std(axis=-1), 1.0, rtol=1e-3)


def test_nan_propagates() -> None:
    module = parse_graph(
        "model m\ninput x : f32[3]\noutput y = relu(x) + reduce_max(x, axes=[0])\n", "m.graph"
    )
    (y,) = irkit.reference(module, np.array([1.0, np.nan, -1.0], np.float32))
    assert np.isnan(y).all()


def test_conv2d_matches_direct_loops() -> None:
    src = "model m\ninput x : f32[1, 2, 5, 5]\nparam w : f32[3, 2, 3, 3]\noutput y = conv2d(x, w, strides=[2, 2], padding=[1, 1, 1, 1])\n"
    module = parse_graph(src, "m.graph")
    x, w = irkit.random_inputs(module, seed=3)
    (y,) = irkit.reference(module, x, w)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    direct = np.zeros((1, 3, 3, 3))
    for o in range(3):
        for i in range(3):
            for j in range(3):
                direct[0, o, i, j] = np.sum(xp[0, :, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3] * w[o])
    np.testing.assert_allclose(y, direct, rtol=1e-12)


def test_wrong_arrays_are_user_errors() -> None:
    module = irkit.load("examples/softmax.graph", {"R": 2, "C": 3})
    with pytest.raises(IrkitError, match=r"takes 1 input arrays \(x\), got 2"):
        irkit.reference(module, np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(IrkitError, match=r"input x has shape \[3, 2\], expected \[2, 3\]"):
        irkit.reference(module, np.zeros((3, 2)))


def test_stored_reference_is_what_an_unfused_narrow_program_computes() -> None:
    """An f16 sum stored at f16 then softmaxed differs from the float64 reference by 1.5%
    (an ill-conditioned chain, not an error); the reference with intermediates stored at
    their types is what the unfused CPU program computes, bit for bit, and the check holds
    such an output to it. A real miscompile fails against both."""
    import numpy as np

    import irkit
    from irkit.frontend.graph_lang import parse_graph
    from irkit.runtime.check import check

    src = ("model m\ninput x : f16[17, 17, 33]\n"
           "output y = softmax(reduce_sum(relu(x), axes=[0, 1]), axis=0)\n")  # fmt: skip
    module = parse_graph(src, "m.graph")
    inputs = irkit.random_inputs(module, seed=1)
    (wide,) = irkit.reference(module, *inputs)
    (stored,) = irkit.reference(module, *inputs, stored=True)
    (got,) = irkit.compile(module, "lower-graph-to-loops", "cpu")(*inputs)
    assert np.linalg.norm(stored - wide) / np.linalg.norm(wide) > 1e-2
    assert np.array_equal(got.astype(np.float64), stored)
    (c,) = check(irkit.compile(module, "lower-graph-to-loops", "cpu"), module, seed=1)[0]
    assert c.passed and c.reference == "stored" and c.rel_error == 0.0
