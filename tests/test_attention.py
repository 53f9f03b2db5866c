"""graph.attention: its reference against PyTorch's scaled_dot_product_attention and onnx's
reference Attention (opset 23), its shape rules, and every backend against the reference
(the op decomposed into batch matmuls and a softmax where no fused pass takes it)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import irkit
from irkit.errors import IrkitError
from irkit.frontend import parse_source
from irkit.pipelines import PIPELINES
from irkit.runtime.check import check
from irkit.runtime.reference import random_inputs, reference

UNFUSED = ",".join(
    p
    for p in PIPELINES["default-cpu"].passes
    if p not in ("recognize-attention", "cpu-fuse-attention")
)
"""default-cpu as it was before attention was fused: the op decomposed by the lowering."""

UNFUSED_CUDA = ",".join(p for p in PIPELINES["default-cuda"].passes if p != "gpu-fuse-attention")
"""default-cuda as it was before attention was fused on the GPU."""
GPU_SMALL = "gpu-fuse-attention{block-q=32 block-k=5 decode-rows=6 warps=3}"
"""The GPU forms with small, uneven tiles: ragged key tiles, 3 warps, up to 6 rows decoded."""

# (heads, kv heads, query length, key length, head dim, causal, mask): multi-head,
# grouped-query (8:2), multi-query, a decode step (one query against a cache), masks
CASES = {
    "mha": (4, 4, 12, 12, 8, False, None),
    "mha-causal": (4, 4, 12, 12, 8, True, None),
    "gqa-causal": (8, 2, 10, 10, 16, True, None),
    "mqa": (4, 1, 6, 9, 8, False, None),
    "decode": (8, 2, 1, 17, 8, True, None),
    "prefill-with-cache": (2, 2, 5, 11, 8, True, None),
    "additive-mask": (4, 2, 7, 7, 8, False, "float"),
    "padding-mask": (4, 4, 7, 9, 8, False, "bool"),
    "causal-and-padding": (2, 1, 9, 9, 4, True, "bool"),
}


def _source(case: str) -> str:
    h, hk, sq, sk, d, causal, mask = CASES[case]
    lines = [
        "model att",
        f"input q : f32[2, {h}, {sq}, {d}]",
        f"input k : f32[2, {hk}, {sk}, {d}]",
        f"input v : f32[2, {hk}, {sk}, {d + 2}]",
    ]
    operands = "q, k, v"
    if mask == "float":
        lines.append(f"input m : f32[2, 1, {sq}, {sk}]")
        operands += ", m"
    elif mask == "bool":
        lines.append(f"input m : i1[2, 1, 1, {sk}]")
        operands += ", m"
    lines.append(f"output y = attention({operands}, causal={'true' if causal else 'false'})")
    return "\n".join(lines) + "\n"


def _inputs(case: str) -> list[np.ndarray]:
    module = parse_source(_source(case), "att.graph", ".graph")
    arrays = random_inputs(module, seed=7)
    if CASES[case][6] == "bool":  # keep the first key of each row: no row fully masked
        arrays[3][..., 0] = True
    return arrays


@pytest.mark.parametrize("case", sorted(CASES))
def test_reference_matches_pytorch_sdpa(case: str) -> None:
    torch = pytest.importorskip("torch")
    h, hk, sq, sk, _, causal, mask = CASES[case]
    module = parse_source(_source(case), "att.graph", ".graph")
    arrays = _inputs(case)
    (want,) = reference(module, *arrays)
    q, k, v = (torch.from_numpy(a.astype(np.float64)) for a in arrays[:3])
    k, v = k.repeat_interleave(h // hk, dim=1), v.repeat_interleave(h // hk, dim=1)
    bias = torch.zeros(sq, sk, dtype=torch.float64)
    if causal:  # the last sq of sk positions: bottom-right
        later = torch.arange(sk)[None, :] > torch.arange(sq)[:, None] + (sk - sq)
        bias = bias.masked_fill(later, float("-inf"))
    if mask == "float":
        bias = bias + torch.from_numpy(arrays[3].astype(np.float64))
    elif mask == "bool":
        bias = bias.masked_fill(~torch.from_numpy(arrays[3]), float("-inf"))
    got = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    np.testing.assert_allclose(want, got.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "case", ["mha", "mha-causal", "gqa-causal", "mqa", "additive-mask", "padding-mask"]
)
def test_reference_matches_onnx_attention(case: str) -> None:
    """onnx's reference Attention (opset 23) on the same arrays (its causal mask is
    top-left without a cache: the cases compared have Sq = Sk where causal)."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    module = parse_source(_source(case), "att.graph", ".graph")
    arrays = _inputs(case)
    (want,) = reference(module, *arrays)
    names = ["q", "k", "v", "m"][: len(arrays)]
    node = helper.make_node("Attention", names, ["y"], is_causal=int(CASES[case][5]))
    types = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.bool_): TensorProto.BOOL}
    graph = helper.make_graph(
        [node], "att",
        [helper.make_tensor_value_info(n, types[a.dtype], a.shape) for n, a in zip(names, arrays, strict=True)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    (got,) = ReferenceEvaluator(model).run(None, dict(zip(names, arrays, strict=True)))
    np.testing.assert_allclose(want, got, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize(
    ("spec", "backend"),
    [("default-cpu", "cpu"), ("baseline-cpu", "cpu"), ("decompose-composites,default-cpu", "cpu"),
     ("cpu-fuse-attention{tiles=false},default-cpu", "cpu"),
     ("cpu-fuse-attention{vector-bits=256 row-vectors=1 block=5},default-cpu", "cpu"),
     ("cpu-fuse-attention,lower-graph-to-loops", "cpu"), (UNFUSED, "cpu"),
     ("default-cuda", "cuda-sim"), ("default-cuda", "cuda-host"), (UNFUSED_CUDA, "cuda-sim"),
     (f"{GPU_SMALL},default-cuda", "cuda-host"), (f"{GPU_SMALL},default-cuda", "cuda-sim")],
)  # fmt: skip
def test_every_backend_matches_the_reference(case: str, spec: str, backend: str) -> None:
    module = parse_source(_source(case), "att.graph", ".graph")
    arrays = _inputs(case)
    (want,) = reference(module, *arrays)
    (got,) = irkit.compile(module, spec, backend=backend)(*arrays)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    if CASES[case][6] != "bool":
        checks, _ = check(irkit.compile(module, spec, backend=backend), module, seed=3)
        assert all(c.passed for c in checks), [c.describe() for c in checks]


@pytest.mark.parametrize(
    ("heads", "kv_heads", "sq", "sk", "causal", "mask"),
    [(8, 2, 1, 37, False, None), (8, 2, 3, 50, True, None), (4, 4, 1, 70, False, "float"),
     (4, 1, 2, 33, True, "bool"), (2, 2, 1, 5, True, None)],
)  # fmt: skip
@pytest.mark.parametrize("bits", [512, 256, 128])
@pytest.mark.parametrize("cache", [False, True])
def test_decode_steps_take_the_keys_along_the_lanes(
    heads: int,
    kv_heads: int,
    sq: int,
    sk: int,
    causal: bool,
    mask: str | None,
    bits: int,
    cache: bool,
) -> None:
    """A few query rows against a longer cache (Sq < lanes / 4): cpu-fuse-attention's
    decode form (`emit_decode`: the keys along the lanes, their dot products added across
    by shuffles, K and V read in place, a group's query heads sharing them) at each vector
    width, against the reference; K and V given whole, or as a cache concatenated with the
    new positions (computed, as a decode step's are), read part by part."""
    lines = [
        "model decode",
        f"input q : f32[2, {heads}, {sq}, 16]",
        f"input k : f32[2, {kv_heads}, {sk}, 16]",
        f"input v : f32[2, {kv_heads}, {sk}, 32]",
    ]
    operands = "q, k, v"
    if cache:
        lines += [
            f"input nk : f32[2, {kv_heads}, {sq}, 16]",
            f"input nv : f32[2, {kv_heads}, {sq}, 32]",
        ]
        operands = "q, concat(k, nk * 0.5, axis=2), concat(v, nv, axis=2)"
        sk += sq
    if mask is not None:
        lines.append(f"input m : {'f32' if mask == 'float' else 'i1'}[2, 1, {sq}, {sk}]")
        operands += ", m"
    lines.append(f"output y = attention({operands}, causal={str(causal).lower()})")
    module = parse_source("\n".join(lines) + "\n", "decode.graph", ".graph")
    arrays = random_inputs(module, seed=5)
    if mask == "bool":
        arrays[-1][..., 0] = True
    (want,) = reference(module, *arrays)
    spec = f"cpu-fuse-attention{{vector-bits={bits}}},default-cpu"
    if 4 * sq < bits // 32:
        from irkit.pipelines import apply_passes, parse_passes

        lowered = apply_passes(module.clone(), parse_passes(spec))
        assert "vector.shuffle" in str(lowered)
    (got,) = irkit.compile(module, spec, backend="cpu")(*arrays)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize(
    ("operands", "message"),
    [
        ("q : f32[1, 3, 4, 8]\ninput k : f32[1, 2, 4, 8]\ninput v : f32[1, 2, 4, 8]", "multiple"),
        ("q : f32[1, 2, 4, 8]\ninput k : f32[1, 2, 4, 6]\ninput v : f32[1, 2, 4, 8]", "head dims"),
        ("q : f32[1, 2, 4, 8]\ninput k : f32[1, 2, 5, 8]\ninput v : f32[1, 2, 4, 8]", "lengths"),
        ("q : f32[2, 4, 8]\ninput k : f32[2, 4, 8]\ninput v : f32[2, 4, 8]", "head dim]"),
    ],
)
def test_bad_shapes_are_one_line_errors(operands: str, message: str) -> None:
    source = f"model bad\ninput {operands}\noutput y = attention(q, k, v)\n"
    with pytest.raises(IrkitError, match=message) as info:
        parse_source(source, "bad.graph", ".graph")
    assert "bad.graph:" in str(info.value) and "\n" not in str(info.value)


def test_a_boolean_mask_written_with_minus_infinity_is_recognized() -> None:
    """where(keep, scores, -inf) before the softmax becomes attention's boolean mask, and
    the transpose the pass adds cancels the one that made the transposed keys; the values
    are the chain's."""
    from xdsl.dialects.builtin import TensorType

    from irkit.dialects import graph as g
    from irkit.dtypes import dense_attr
    from irkit.pipelines import apply_passes, parse_passes

    source = (
        "model where_mask\ninput q : f32[1, 2, 5, 8]\ninput k : f32[1, 2, 5, 8]\n"
        "input v : f32[1, 2, 5, 8]\ninput keep : i1[1, 1, 1, 5]\n"
        "s = batch_matmul(q, transpose(k, perm=[0, 1, 3, 2])) * 0.25\n"
        "output y = batch_matmul(softmax(where(keep, s, -12345.0), axis=3), v)\n"
    )
    module = parse_source(source, "w.graph", ".graph")
    (where,) = [op for op in module.walk() if isinstance(op, g.WhereOp)]
    const = where.rhs.owner
    assert isinstance(const, g.ConstantOp)
    t = const.results[0].type
    assert isinstance(t, TensorType)
    const.properties["value"] = dense_attr(t, np.array(-np.inf))
    arrays = random_inputs(module, seed=2)
    arrays[3][..., 0] = True
    (want,) = reference(module, *arrays)
    found = apply_passes(module.clone(), parse_passes("recognize-attention,fold-transposes"))
    ops = [op.name for op in found.walk() if op.name.startswith("graph.")]
    assert ops == ["graph.attention"], ops
    (got,) = irkit.compile(found, "default-cpu", backend="cpu")(*arrays)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "scores",
    [
        "batch_matmul(q * 0.5, transpose(k * 0.5, perm=[0, 1, 3, 2]))",  # torch's SDPA export
        "batch_matmul(0.5 * q, transpose(k, perm=[0, 1, 3, 2]) * 0.5)",
        "batch_matmul(q, transpose(k, perm=[0, 1, 3, 2])) * 0.25",
    ],
)
def test_scales_on_the_queries_and_keys_join_the_ops_scale(scores: str) -> None:
    """Scalar factors on q, on k under its transpose or on kT after it become the op's
    scale, and the scaled copies go (a decode step's export scaled the whole cache)."""
    from irkit.dialects import graph as g
    from irkit.pipelines import apply_passes, parse_passes

    source = (
        "model scaled\ninput q : f32[1, 2, 5, 8]\ninput k : f32[1, 2, 7, 8]\n"
        f"input v : f32[1, 2, 7, 8]\noutput y = batch_matmul(softmax({scores}, axis=3), v)\n"
    )
    module = parse_source(source, "s.graph", ".graph")
    arrays = random_inputs(module, seed=6)
    (want,) = reference(module, *arrays)
    found = apply_passes(module.clone(), parse_passes("recognize-attention"))
    ops = [op for op in found.walk() if op.name.startswith("graph.")]
    assert [op.name for op in ops] == ["graph.attention"]
    assert g.float_of(ops[0].properties, "scale") == pytest.approx(0.25)
    (got,) = irkit.compile(found, "default-cpu", backend="cpu")(*arrays)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("sq", "mask", "causal", "kept"),
    [
        (6, "causal", True, False),  # torch's is_causal: 0 and -inf, made causal, mask dropped
        (6, "causal+bias", True, True),  # a bias below the diagonal too: causal, mask kept
        (4, "causal", True, False),  # a query block after a cache: bottom-right
        (6, "other", False, True),  # -inf elsewhere: an ordinary mask
    ],
)
def test_a_constant_causal_mask_makes_the_op_causal(
    sq: int, mask: str, causal: bool, kept: bool, tmp_path
) -> None:
    """recognize-attention on an ONNX chain whose mask is a constant [Sq, Sk] initializer
    (as torch.onnx writes `is_causal`): where it hides every key after the query's own, the
    op is causal (the fused lowering skips that half), the mask kept only where it holds
    more; the values are the chain's either way."""
    from onnx import TensorProto, helper, numpy_helper

    from irkit.dialects import graph as g
    from irkit.frontend import load
    from irkit.pipelines import apply_passes, parse_passes

    sk = 6
    i, j = np.indices((sq, sk))
    later = j > i + sk - sq
    values = np.where(later, -np.inf, 0.0)
    if mask == "causal+bias":
        values = np.where(later, values, 0.5 * (i - j))
    elif mask == "other":
        values = np.where(j == (i + 1) % sk, -np.inf, 0.0)
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Add", ["m", "ss"], ["sm"]),
        helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"]),
    ]
    shapes = {"q": [1, 2, sq, 8], "k": [1, 2, sk, 8], "v": [1, 2, sk, 8]}
    graph = helper.make_graph(
        nodes, "masked",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, sq, 8])],
        initializer=[numpy_helper.from_array(values.astype(np.float32), "m"),
                     numpy_helper.from_array(np.array(0.25, np.float32), "scale")],
    )  # fmt: skip
    path = tmp_path / "masked.onnx"
    path.write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    )
    module = load(path)
    arrays = random_inputs(module, seed=4)
    (want,) = reference(module, *arrays)
    found = apply_passes(module.clone(), parse_passes("recognize-attention"))
    (att,) = [op for op in found.walk() if isinstance(op, g.AttentionOp)]
    assert g.bool_of(att.properties, "causal") == causal
    assert (len(att.operands) == 4) == kept
    (got,) = irkit.compile(found, "default-cpu", backend="cpu")(*arrays)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tiles", ["true", "false"])
def test_fused_attention_stores_nothing_of_size_s_squared(tiles: str) -> None:
    """cpu-fuse-attention: one kernel, whose buffers (the packed keys and values, a band's
    queries, scores and accumulator; or a row's) grow with S at most linearly, where
    default-cpu without it keeps the S x S scores and probabilities in the driver."""
    from xdsl.dialects import memref

    from irkit.pipelines import apply_passes, parse_passes

    def buffers(seq: int, spec: str) -> tuple[list[int], list[int]]:
        source = (
            f"model att\ninput q : f32[1, 2, {seq}, 8]\ninput k : f32[1, 2, {seq}, 8]\n"
            f"input v : f32[1, 2, {seq}, 8]\noutput y = attention(q, k, v, causal=true)\n"
        )
        module = apply_passes(parse_source(source, "att.graph", ".graph"), parse_passes(spec))
        sizes: tuple[list[int], list[int]] = ([], [])
        for fn in module.ops:
            kernel = "irkit.kernel" in fn.attributes
            for op in fn.walk():
                if isinstance(op, memref.AllocOp | memref.AllocaOp):
                    sizes[0 if kernel else 1].append(math.prod(op.memref.type.get_shape()))
        return sizes

    spec = f"cpu-fuse-attention{{tiles={tiles}}},default-cpu"
    (small, driver), (large, _) = buffers(100, spec), buffers(200, spec)
    assert driver == [] and small and max(small) < 100 * 100
    assert max(large) <= 2 * max(small)  # linear in S (the packed keys and values)
    _, plain = buffers(100, UNFUSED)
    assert max(plain) >= 2 * 100 * 100  # the decomposed chain's scores, per head


def _gpu_kernels(module) -> list:
    from xdsl.dialects import func

    from irkit.loops import launch_of

    return [op for op in module.ops if isinstance(op, func.FuncOp) and launch_of(op) is not None]


@pytest.mark.parametrize(
    ("heads", "kv_heads", "sq", "sk", "dim", "causal", "dtype"),
    [(4, 2, 70, 70, 64, True, "f32"), (4, 4, 33, 45, 24, False, "f32"), (8, 2, 1, 90, 64, True, "f32"),
     (2, 1, 3, 40, 40, True, "f32"), (4, 2, 37, 37, 32, True, "f16"), (4, 2, 1, 50, 32, False, "bf16")],
)  # fmt: skip
def test_gpu_fused_attention_runs_on_cuda_host(
    heads: int, kv_heads: int, sq: int, sk: int, dim: int, causal: bool, dtype: str
) -> None:
    """gpu-fuse-attention's kernels (prefill tiles, and decode where Sq <= 4) printed as CUDA
    C, compiled for the host and run there, against the reference: causal and not, grouped-
    query heads, lengths no tile divides (ragged query tiles, ragged key tiles), head dims
    a warp does not divide, f16 and bf16 inputs computed in f32. The fused program is one
    launch whose mapping is "attention"."""
    source = (
        f"model att\ninput q : {dtype}[1, {heads}, {sq}, {dim}]\n"
        f"input k : {dtype}[1, {kv_heads}, {sk}, {dim}]\ninput v : {dtype}[1, {kv_heads}, {sk}, {dim}]\n"
        f"output y = attention(q, k, v, causal={str(causal).lower()})\n"
    )
    module = parse_source(source, "att.graph", ".graph")
    arrays = random_inputs(module, seed=11)
    (want,) = reference(module, *arrays)
    exe = irkit.compile(module, "default-cuda", backend="cuda-host")
    ((kernel,),) = [_gpu_kernels(exe.module)]
    assert kernel.attributes["irkit.launch"].data["mapping"].data == "attention"
    (got,) = exe(*arrays)
    tol = 1e-5 if dtype == "f32" else 4e-3
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("max_head_dim", [128, 256])
def test_wide_heads_match_the_reference_fused_or_not(max_head_dim: int) -> None:
    """Heads 256 wide (a causal prefill and a decode step): past `max-head-dim` the prefill
    stays the batch-matmul chain (transformer_block's 512-wide head, fused, spilled 24k
    stores on an H200 and ran 10x slower than the chain), the decode step fuses at any
    width; both programs match the reference on cuda-host."""
    source = (
        "model att\ninput q : f32[1, 2, 24, 256]\ninput k : f32[1, 2, 24, 256]\n"
        "input v : f32[1, 2, 24, 256]\ninput q1 : f32[1, 2, 1, 256]\n"
        "output y = attention(q, k, v, causal=true)\noutput y1 = attention(q1, k, v)\n"
    )
    module = parse_source(source, "att.graph", ".graph")
    steps = [p if p != "gpu-fuse-attention" else f"{p}{{max-head-dim={max_head_dim}}}"
             for p in PIPELINES["default-cuda"].passes]  # fmt: skip
    exe = irkit.compile(module, ",".join(steps), backend="cuda-host")
    fused = [k for k in _gpu_kernels(exe.module) if k.attributes["irkit.launch"].data["mapping"].data == "attention"]  # fmt: skip
    assert len(fused) == (2 if max_head_dim == 256 else 1)
    checks, _ = check(exe, module, seed=3)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


def test_gpu_fused_attention_compiles_with_nvrtc_without_spills() -> None:
    """The prefill and decode kernels at a real head dim (64, S = 512, GQA 8:2) compile with
    NVRTC for sm_90: the row of q, the accumulator and a tile's scores in registers, no
    spills; shared memory only the K and V tiles (prefill) or the warps' states (decode)."""
    from irkit.codegen.cuda import kernel_source
    from irkit.codegen.nvrtc import compile_cuda
    from irkit.pipelines import apply_passes, lower_for_gpu, parse_passes

    for sq in (512, 1):
        source = (
            f"model att\ninput q : f32[1, 8, {sq}, 64]\ninput k : f32[1, 2, 512, 64]\n"
            "input v : f32[1, 2, 512, 64]\noutput y = attention(q, k, v, causal=true)\n"
        )
        module = parse_source(source, "att.graph", ".graph")
        lowered = lower_for_gpu(apply_passes(module, parse_passes("default-cuda")))
        (kernel,) = _gpu_kernels(lowered)
        resources = compile_cuda(kernel_source(lowered, kernel), kernel.sym_name.data).resources
        assert resources.spill_stores == resources.spill_loads == 0, resources
        assert resources.shared_bytes <= (16 * 128 * 4 if sq > 1 else 4 * 64 * 4 + 2 * 4 * 4)
        assert resources.registers <= 255


def test_gpu_fuse_attention_stores_nothing_of_size_s_squared() -> None:
    """default-cuda: the attention's kernel holds no buffer of S x S (the decomposed chain
    without gpu-fuse-attention holds the scores in global memory between launches)."""
    from xdsl.dialects import memref

    from irkit.pipelines import apply_passes, parse_passes

    def largest(spec: str) -> int:
        source = (
            "model att\ninput q : f32[1, 2, 100, 8]\ninput k : f32[1, 2, 100, 8]\n"
            "input v : f32[1, 2, 100, 8]\noutput y = attention(q, k, v, causal=true)\n"
        )
        module = apply_passes(parse_source(source, "att.graph", ".graph"), parse_passes(spec))
        shapes = [
            op.memref.type.get_shape() for op in module.walk() if isinstance(op, memref.AllocOp)
        ]
        shapes += [op.type.get_shape() for op in module.walk() if isinstance(op, memref.GlobalOp)]
        return max((math.prod(s) for s in shapes), default=0)

    assert largest("default-cuda") < 100 * 100
    assert largest(UNFUSED_CUDA) >= 2 * 100 * 100


@pytest.mark.parametrize(
    ("option", "message"),
    [("block-q=48", "block-q.*multiple of 32"), ("block-k=0", "block-k"), ("warps=0", "warps"),
     ("decode-rows=-1", "decode-rows"), ("max-head-dim=0", "max-head-dim")],
)  # fmt: skip
def test_gpu_fuse_attention_options_are_checked(option: str, message: str) -> None:
    from irkit.pipelines import parse_passes

    with pytest.raises(IrkitError, match=message):
        parse_passes(f"gpu-fuse-attention{{{option}}}")


TENSOR_CORE_CASES = [(4, 2, 37, 45, 32, False, "f16"), (8, 2, 70, 70, 64, True, "bf16"),
                     (2, 1, 100, 40, 48, True, "f16"), (2, 2, 20, 83, 16, True, "bf16"),
                     (1, 1, 16, 16, 128, False, "bf16")]  # fmt: skip
"""(heads, kv heads, Sq, Sk, head dim, causal, type): ragged query and key tiles, GQA and
MQA-like groups, a query longer than its keys under a causal mask (its first rows see no
key: NaN in the reference and here), a prefill after a cache, head dims 16 to 128."""


def _tensor_core_run(case: tuple, backend: str, spec: str = "default-cuda") -> tuple:
    heads, kv_heads, sq, sk, dim, causal, dtype = case
    source = (
        f"model att\ninput q : {dtype}[2, {heads}, {sq}, {dim}]\n"
        f"input k : {dtype}[2, {kv_heads}, {sk}, {dim}]\ninput v : {dtype}[2, {kv_heads}, {sk}, {dim}]\n"
        f"output y = attention(q, k, v, causal={str(causal).lower()})\n"
    )
    module = parse_source(source, "att.graph", ".graph")
    arrays = random_inputs(module, seed=5)
    (want,) = reference(module, *arrays)
    exe = irkit.compile(module, spec, backend=backend)
    (got,) = exe(*arrays)
    return exe, got.astype(np.float64), want.astype(np.float64)


@pytest.mark.parametrize("backend", ["cuda-host", "cuda-sim"])
@pytest.mark.parametrize("case", TENSOR_CORE_CASES, ids=lambda c: "-".join(map(str, c)))
def test_tensor_core_attention_matches_the_reference(case: tuple, backend: str) -> None:
    """f16/bf16 prefill under default-cuda takes the tensor-core form: Q K^T and P V on
    mma.sync m16n8k16 from ldmatrix fragments, the online softmax on the C fragments (a
    row's statistics across its quad by shuffles), P rounded to the input type as the next
    mma's A. It matches the reference on cuda-host (the printed CUDA C) and cuda-sim (the
    IR in lockstep) within the type's tolerance."""
    from irkit.dialects.warp import LdmatrixX4Op, MmaM16n8k16Op

    exe, got, want = _tensor_core_run(case, backend)
    ops = list(exe.module.walk())
    assert any(isinstance(op, MmaM16n8k16Op) for op in ops)
    assert any(isinstance(op, LdmatrixX4Op) and op.transpose for op in ops)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2, equal_nan=True)


@pytest.mark.parametrize("backend", ["cuda-host", "cuda-sim"])
@pytest.mark.parametrize(
    ("constant", "planted"),
    [("A_PAIRS", [(0, 0), (0, 8), (8, 0), (8, 8)]),  # Q's fragments: pairs 2 and 3 swapped
     ("B_TRANS_ORIGINS", [(0, 0), (0, 8), (8, 0), (8, 8)]),  # V's: as if stored [n][k]
     ("QUAD", (1,)),  # a row's maximum and sum over 2 of its 4 lanes
     ("RING_WAIT", 2)],  # the wait lets this tile's K and V copies stay in flight
)  # fmt: skip
def test_tensor_core_attention_planted_slips_fail(
    backend: str, constant: str, planted: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fragment layout off, a row statistic missing lanes, or a key tile read before its
    copies have landed gives wrong attention on both host paths (what passes above is not
    passing by accident)."""
    from irkit.passes import emit_gpu_attention_mma

    monkeypatch.setattr(emit_gpu_attention_mma, constant, planted)
    _, got, want = _tensor_core_run((2, 2, 40, 40, 32, False, "bf16"), backend)
    assert not np.allclose(got, want, rtol=2e-2, atol=2e-2)


def test_tensor_core_attention_compiles_to_hmma_and_ldsm_without_spills(tmp_path) -> None:
    """NVRTC for sm_80 and sm_90: the bf16 prefill at head dims 64 and 128 (S = 1024,
    causal) is HMMA fed by LDSM (K's fragments) and LDSM.MT (V's, transposed), K and V
    staged by cp.async (LDGSTS, 16 bytes) into a two-stage ring, no local memory;
    `tensor-cores=false` keeps the f32 SIMT form (no HMMA)."""
    from irkit.codegen.cuda import kernel_source
    from irkit.codegen.nvrtc import compile_cuda
    from irkit.pipelines import apply_passes, lower_for_gpu, parse_passes
    from tests.test_sass import _disassemble

    def sass(dim: int, spec: str, arch: str) -> tuple[str, object]:
        source = (
            f"model att\ninput q : bf16[1, 8, 1024, {dim}]\ninput k : bf16[1, 8, 1024, {dim}]\n"
            f"input v : bf16[1, 8, 1024, {dim}]\noutput y = attention(q, k, v, causal=true)\n"
        )
        module = parse_source(source, "att.graph", ".graph")
        lowered = lower_for_gpu(apply_passes(module, parse_passes(spec)))
        (kernel,) = _gpu_kernels(lowered)
        compiled = compile_cuda(kernel_source(lowered, kernel), kernel.sym_name.data, arch)
        cubin = tmp_path / f"{dim}{arch}.cubin"
        cubin.write_bytes(compiled.cubin)
        return _disassemble(cubin), compiled.resources

    for dim in (64, 128):
        for arch in ("sm_80", "sm_90"):
            text, resources = sass(dim, "default-cuda", arch)
            assert "HMMA.16816.F32.BF16" in text and "LDSM.16.M88.4" in text, dim
            assert "LDSM.16.MT88.4" in text and "LDGSTS.E.BYPASS.128" in text, dim
            assert "DEPBAR" in text, dim
            assert resources.spill_stores == resources.spill_loads == 0, resources
            assert not any(op in text for op in ("LDL", "STL")), dim
    steps = ",".join(p if p != "gpu-fuse-attention" else f"{p}{{tensor-cores=false}}"
                     for p in PIPELINES["default-cuda"].passes)  # fmt: skip
    text, _ = sass(64, steps, "sm_90")
    assert "HMMA" not in text
