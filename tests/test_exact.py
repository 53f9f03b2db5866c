"""Integer and boolean tensors as run-time values: token ids, masks and comparisons flow
through kernels exactly, on every backend, from the .graph language and from ONNX.

The ONNX models here are the patterns today's exporters write (an embedding lookup on
int64 token ids, an attention mask turned into an additive bias, the newer exporter's
Softmax -> IsNaN -> Where), built with onnx.helper and checked against onnxruntime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import irkit
from irkit.errors import IrkitError
from irkit.frontend.graph_lang import parse_graph
from irkit.runtime.check import check

BACKENDS = ["cpu", "cuda-sim", "cuda-host"]

EMBED = """
model embed
input ids : i64[2, 7]
input mask : i1[2, 7]
param table : f32[50, 16]
input x : f32[2, 7, 16]
e = gather(table, ids, axis=0)
hit = greater(x, e)
m3 = reshape(mask, shape=[2, 7, 1])
y = where(hit, x, e * 2.0) + cast(m3, dtype=f32)
output out = where(m3, y, broadcast_to(x - x - 1.0, shape=[2, 7, 16]))
output count = reduce_sum(cast(hit, dtype=i64), axes=[2])
output ids_plus = ids * 3 - 7
output wrapped = cast(ids, dtype=i32) * 1000000 * 1000
output q = (ids - 20) / (cast(mask, dtype=i64) * 3 - 1)
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pipeline", ["default", "baseline"])
def test_integer_model_matches_the_reference(backend: str, pipeline: str) -> None:
    module = parse_graph(EMBED, "embed.graph")
    target = "cpu" if backend == "cpu" else "cuda"
    exe = irkit.compile(module, backend=backend, pipeline=f"{pipeline}-{target}")
    checks, _ = check(exe, module, seed=5)
    assert [c.name for c in checks] == ["out", "count", "ids_plus", "wrapped", "q"]
    for c in checks:
        assert c.passed, c.describe()
    assert [str(s.dtype) for s in exe.outputs] == ["float32", "int64", "int64", "int32", "int64"]


def test_integer_arithmetic_is_exact_and_wraps() -> None:
    """i32 products wrap as two's complement, and divisions round toward zero with x/0 = 0
    and MIN/-1 = MIN on every backend (a machine divide would trap)."""
    source = """
model ints
input a : i32[6]
input b : i32[6]
output p = a * b
output q = a / b
output s = a - b
"""
    module = parse_graph(source, "ints.graph")
    a = np.array([2**31 - 1, -(2**31), 7, -7, 5, 123456], np.int32)
    b = np.array([2, -1, 2, 2, 0, 654321], np.int32)
    want = irkit.reference(module, a, b)
    assert want[1].tolist() == [2**30 - 1, -(2**31), 3, -3, 0, 0]
    assert want[0][0] == np.int32(-2)  # (2^31 - 1) * 2 wraps
    for backend in BACKENDS:
        got = irkit.compile(module, backend=backend)(a, b)
        for w, o in zip(want, got, strict=True):
            np.testing.assert_array_equal(o, w.astype(np.int32), err_msg=backend)


def test_float_to_integer_casts_saturate() -> None:
    source = """
model casts
input x : f32[6]
output i = cast(x, dtype=i32)
output b = cast(x, dtype=i1)
"""
    module = parse_graph(source, "casts.graph")
    x = np.array([np.nan, np.inf, -np.inf, 3e9, -2.7, 0.0], np.float32)
    expected_i = [0, 2**31 - 1, -(2**31), 2**31 - 1, -2, 0]
    expected_b = [True, True, True, True, True, False]
    for backend in ["reference", *BACKENDS]:
        i, b = irkit.compile(module, backend=backend)(x)
        assert i.tolist() == expected_i, backend
        assert b.tolist() == expected_b, backend


def test_an_out_of_range_gather_index_is_an_error_never_a_read() -> None:
    """Token ids outside the table: the reference says so at the gather's line, and every
    backend refuses the input before any kernel runs (the input names the axis it indexes,
    through a cast and a reshape)."""
    module = parse_graph(
        "model g\ninput ids : i64[3]\nparam t : f32[4, 2]\n"
        "output y = gather(t, reshape(cast(ids, dtype=i32), shape=[3]), axis=0)\n",
        "g.graph",
    )
    table = np.arange(8, dtype=np.float32).reshape(4, 2)
    with pytest.raises(IrkitError, match=r"g.graph:4:\d+: error: graph.gather: index 4 is out of range for axis 0 of extent 4"):  # fmt: skip
        irkit.reference(module, np.array([0, 4, -1]), table)
    for backend in BACKENDS:
        exe = irkit.compile(module, backend=backend)
        with pytest.raises(IrkitError, match=r"input ids holds -5 at \[2\], outside \[-4, 4\)"):
            exe(np.array([0, 3, -5]), table)
        (y,) = exe(np.array([0, 3, -4]), table)  # in range, negative from the end
        np.testing.assert_array_equal(y, table[[0, 3, 0]])


def test_random_indices_stay_in_range() -> None:
    """Inputs that are gather indices (here through a reshape and a cast) are drawn within
    the axis, negative ones included; other integers 0 or 1 (a mask's values)."""
    module = parse_graph(
        "model g\ninput ids : i32[64]\ninput k : i64[64]\nparam t : f32[5, 3]\n"
        "output y = gather(t, reshape(cast(ids, dtype=i64), shape=[8, 8]), axis=0)\n"
        "output z = k + 1\n",
        "g.graph",
    )
    ids, k, _ = irkit.random_inputs(module, seed=1)
    assert ids.min() >= -5 and ids.max() < 5 and ids.min() < 0
    assert set(np.unique(k)) == {0, 1}


# --- ONNX -------------------------------------------------------------------------------------


def _attention_model() -> onnx.ModelProto:
    """Token ids -> embeddings; a padding mask -> a -inf bias; scores -> Softmax -> IsNaN ->
    Where (the newer exporter's guard for fully masked rows); a position lookup by Gather on
    a constant; Split, Clip, HardSwish and Expand on the way."""
    rng = np.random.default_rng(0)
    vocab, seq, dim = 40, 6, 8
    init = [
        numpy_helper.from_array(rng.normal(size=(vocab, dim)).astype(np.float32), "emb"),
        numpy_helper.from_array(rng.normal(size=(seq, dim)).astype(np.float32), "pos"),
        numpy_helper.from_array(np.arange(seq, dtype=np.int64), "positions"),
        numpy_helper.from_array(np.array(0, np.int64), "zero_i"),
        numpy_helper.from_array(np.array(-np.inf, np.float32), "neg_inf"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero_f"),
        numpy_helper.from_array(np.array([1, seq, seq], np.int64), "score_shape"),
        numpy_helper.from_array(np.array([4, 4], np.int64), "halves"),
    ]
    n = helper.make_node
    nodes = [
        n("Gather", ["emb", "ids"], ["tok"], axis=0),
        n("Gather", ["pos", "positions"], ["p"], axis=0),
        n("Add", ["tok", "p"], ["h"]),
        n("Split", ["h", "halves"], ["h1", "h2"], axis=2),
        n("Clip", ["h1", "", ""], ["c1"]),
        n("HardSwish", ["h2"], ["c2"]),
        n("Concat", ["c1", "c2"], ["h3"], axis=2),
        n("Transpose", ["h3"], ["ht"], perm=[0, 2, 1]),
        n("MatMul", ["h3", "ht"], ["scores"]),
        n("Equal", ["mask", "zero_i"], ["pad"]),
        n("Unsqueeze", ["pad", "one_axis"], ["pad3"]),
        n("Expand", ["pad3", "score_shape"], ["pad_full"]),
        n("Where", ["pad_full", "neg_inf", "scores"], ["masked"]),
        n("Softmax", ["masked"], ["probs"], axis=-1),
        n("IsNaN", ["probs"], ["nan"]),
        n("Where", ["nan", "zero_f", "probs"], ["safe"]),
        n("MatMul", ["safe", "h3"], ["y"]),
        n("Cast", ["mask"], ["mask_f"], to=TensorProto.FLOAT),
        n("ReduceSum", ["mask_f"], ["lengths"], keepdims=0),
    ]
    init.append(numpy_helper.from_array(np.array([1], np.int64), "one_axis"))
    graph = helper.make_graph(
        nodes,
        "attn",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, [1, seq]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, [1, seq]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, dim]),
            helper.make_tensor_value_info("lengths", TensorProto.FLOAT, []),
        ],
        init,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_token_ids_and_masks_through_onnx_match_onnxruntime(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    model = _attention_model()
    path = tmp_path / "attn.onnx"
    onnx.save(model, path)
    ids = np.array([[3, 17, 39, 0, 5, 22]], np.int64)
    mask = np.array([[1, 1, 1, 1, 0, 0]], np.int64)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"ids": ids, "mask": mask})
    module = irkit.load(str(path))
    for backend in BACKENDS:
        got = irkit.compile(module, backend=backend)(ids, mask)
        for e, o in zip(expected, got, strict=True):
            np.testing.assert_allclose(o, e, rtol=1e-5, atol=1e-5, err_msg=backend)
    # and on random inputs, against irkit's reference (every mask pattern, ids in range)
    for backend in BACKENDS:
        checks, _ = check(irkit.compile(module, backend=backend), module, seed=2)
        assert all(c.passed for c in checks), [c.describe() for c in checks]


def test_an_op_on_the_wrong_kind_names_the_node(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Exp", ["ids"], ["y"], name="bad_exp")],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [4])],
    )
    path = tmp_path / "g.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(IrkitError, match=r"node 'bad_exp' \(Exp.*operand #0 is i64 \(int\); graph.exp takes float"):  # fmt: skip
        irkit.load(str(path))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("expr", ["bias + matmul(a, w)", "r + (bias + matmul(a, w))"])
def test_a_bias_written_first_is_still_a_tiled_epilogue(backend: str, expr: str) -> None:
    """`bias + matmul(...)` (torch's Add(bias, MatMul)) and a residual around it are tiled
    like `matmul(...) + bias` and compute the same."""
    module = parse_graph(
        "model b\ninput a : f32[37, 64]\nparam w : f32[64, 48]\nparam bias : f32[48]\n"
        f"input r : f32[37, 48]\noutput y = {expr}\noutput z = r * 2.0\n",
        "b.graph",
    )
    exe = irkit.compile(module, backend=backend)
    checks, _ = check(exe, module, seed=4)
    assert all(c.passed for c in checks), [c.describe() for c in checks]
    if backend == "cpu":
        kernels = [f for f in exe.module.ops if "matmul" in str(getattr(f, "sym_name", ""))]
        assert kernels and all(any(op.name == "vector.fma" for op in f.walk()) for f in kernels)


def test_argmax_and_argmin_follow_numpy_on_ties_and_nans() -> None:
    source = """
model a
input x : f32[3, 5]
output first = argmax(x, axis=1, keepdims=false)
output last = argmax(x, axis=1, keepdims=false, select_last_index=true)
output low = argmin(x, axis=1, keepdims=false)
"""
    module = parse_graph(source, "a.graph")
    nan = np.nan
    x = np.array(
        [[1, 3, 3, 0, 3], [2, nan, 5, nan, 1], [-np.inf, -np.inf, -np.inf, -np.inf, -np.inf]],
        np.float32,
    )
    want = ([1, 1, 0], [4, 3, 4], [3, 1, 0])
    for backend in ["reference", *BACKENDS]:
        got = irkit.compile(module, backend=backend)(x)
        assert [g.tolist() for g in got] == [list(w) for w in want], backend


def test_a_kv_cache_update_by_scatter_nd_matches_onnxruntime(tmp_path: Path) -> None:
    """Decode's cache update: the new token's keys written at a run-time position of a
    [batch, heads, positions, dim] cache (ScatterND with int64 indices), then read back."""
    ort = pytest.importorskip("onnxruntime")
    n = helper.make_node
    graph = helper.make_graph(
        [n("ScatterND", ["cache", "where", "new"], ["updated"]),
         n("ReduceSum", ["updated", "axes"], ["y"], keepdims=0)],
        "kv",
        [helper.make_tensor_value_info("cache", TensorProto.FLOAT, [1, 2, 8, 4]),
         helper.make_tensor_value_info("where", TensorProto.INT64, [1, 2, 3]),
         helper.make_tensor_value_info("new", TensorProto.FLOAT, [1, 2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4]),
         helper.make_tensor_value_info("updated", TensorProto.FLOAT, [1, 2, 8, 4])],
        [numpy_helper.from_array(np.array([2], np.int64), "axes")],
    )  # fmt: skip
    path = tmp_path / "kv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    rng = np.random.default_rng(3)
    cache = rng.normal(size=(1, 2, 8, 4)).astype(np.float32)
    where = np.array([[[0, 0, 5], [0, 1, -1]]], np.int64)  # head 1 at the last position
    new = rng.normal(size=(1, 2, 4)).astype(np.float32)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"cache": cache, "where": where, "new": new})
    module = irkit.load(str(path))
    for backend in BACKENDS:
        got = irkit.compile(module, backend=backend)(cache, where, new)
        for e, o in zip(expected, got, strict=True):
            np.testing.assert_allclose(o, e, rtol=1e-6, atol=1e-6, err_msg=backend)


def test_a_row_read_after_a_tiled_transpose_wrote_it_is_not_fused_across_rows() -> None:
    """MobileNetV3's squeeze-excite: a kernel writes a transposed tensor by vector stores
    (cpu-tile-transpose) and averages it per channel in a second nest. cpu-fuse-rows had
    checked scalar accesses only, fused the two nests by rows and read planes other rows had
    not written yet: NaN on a first call, the previous call's values after (no test of one
    call per input could see it). Every call on fresh inputs must match."""
    module = parse_graph(
        "model se\ninput x : f32[1, 16, 16, 16]\nt = transpose(x, perm=[0, 3, 1, 2])\n"
        "output y = t\noutput m = global_avg_pool(t)\n",
        "se.graph",
    )
    exe = irkit.compile(module, backend="cpu")
    for seed in range(3):
        x = np.random.default_rng(seed).normal(size=(1, 16, 16, 16)).astype(np.float32)
        for want, got in zip(irkit.reference(module, x), exe(x), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
