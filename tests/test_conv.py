"""Convolutions: the NHWC layout (conv-layout), im2col matmuls (conv-to-matmul), and what
they compute, checked against the float64 reference on the CPU and under lockstep, and
bit for bit against the direct loop nest they replace."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import arith, func, scf

import irkit
from irkit.dialects import graph as g
from irkit.errors import IrkitError
from irkit.frontend.onnx import import_model
from irkit.loops import KERNEL_ATTR
from irkit.pipelines import PIPELINES, apply_passes, parse_passes, pipeline_steps
from irkit.runtime.check import check, reference_case
from tests.test_onnx_frontend import cnn_model

# name: (input NCHW, weight OIHW, conv2d keyword arguments)
CONVS = {
    "3x3_pad": ((2, 5, 9, 11), (6, 5, 3, 3), "padding=[1, 1, 1, 1]"),
    "1x1": ((2, 8, 6, 7), (5, 8, 1, 1), ""),
    "1x1_stride2": ((1, 4, 9, 9), (3, 4, 1, 1), "strides=[2, 2]"),
    "5x3_strided_asym": ((1, 3, 13, 10), (4, 3, 5, 3), "strides=[2, 3], padding=[2, 0, 1, 1]"),
    "dilated": ((1, 2, 12, 12), (3, 2, 3, 3), "dilations=[2, 2], padding=[2, 2, 2, 2]"),
    "grouped": ((1, 6, 8, 8), (4, 3, 3, 3), "groups=2, padding=[1, 1, 1, 1]"),
    # kernel wider than a group's channels: conv-layout leaves it channels-first (keeps_nchw)
    "grouped_wide": ((1, 8, 1, 40), (8, 2, 1, 12), "groups=4, padding=[0, 6, 0, 5]"),
    # groups of 8 channels: conv-to-matmul splits it into a matmul per group (RegNet's kind)
    "split_groups": (
        (1, 16, 9, 9),
        (12, 8, 3, 3),
        "groups=2, padding=[1, 1, 1, 1], strides=[2, 2]",
    ),
    # groups of 16 channels under a kernel wider than the input (wav2vec2's positional
    # conv): NHWC, and with implicit GEMM one matmul a group past max-expansion
    "grouped_wide_kernel": ((1, 32, 1, 20), (32, 16, 1, 24), "groups=2, padding=[0, 12, 0, 12]"),
    # a 7 x 7 stem over 3 channels, stride 2 (ResNet's): a tiled implicit-GEMM matmul
    "stem_7x7": ((1, 3, 32, 32), (32, 3, 7, 7), "strides=[2, 2], padding=[3, 3, 3, 3]"),
    # depthwise, a window LLVM does not unroll by itself (ConvNeXt's): unroll-windows does
    "grouped_depthwise_7x7": ((1, 8, 10, 10), (8, 1, 7, 7), "groups=8, padding=[3, 3, 3, 3]"),
}


def conv_module(tmp_path: Path, name: str, tail: str = ""):
    x, w, kw = CONVS[name]
    conv = f"conv2d(x, w, {kw})" if kw else "conv2d(x, w)"
    path = tmp_path / f"{name}.graph"
    path.write_text(
        f"model conv_{name}\ninput x : f32{list(x)}\nparam w : f32{list(w)}\n"
        f"output y = {f'{tail}({conv})' if tail else conv}\n"
    )
    return irkit.load(path)


def _outputs(module, spec: str, backend: str = "cpu") -> list[np.ndarray]:
    exe = irkit.compile(module, spec, backend=backend)
    checks, _ = check(exe, module, seed=5)
    assert checks and all(c.passed for c in checks), (spec, [c.describe() for c in checks])
    inputs, _ = reference_case(module, 5)
    return exe(*inputs)


def _count(module, cls) -> int:
    return sum(isinstance(op, cls) for op in module.walk())


@pytest.mark.parametrize("name", CONVS)
def test_nhwc_conv_is_the_nchw_conv_bit_for_bit(tmp_path: Path, name: str) -> None:
    module = conv_module(tmp_path, name)
    nhwc = apply_passes(module.clone(), parse_passes("conv-layout"))
    (conv,) = [op for op in nhwc.walk() if isinstance(op, g.Conv2dOp)]
    assert g.conv_layout(conv.properties) == ("nchw" if name == "grouped_wide" else "nhwc")
    direct = _outputs(module, "lower-graph-to-loops")
    converted = _outputs(module, "conv-layout,lower-graph-to-loops")
    np.testing.assert_array_equal(direct[0], converted[0])


@pytest.mark.parametrize("name", CONVS)
def test_conv_to_matmul_is_the_direct_nest_bit_for_bit(tmp_path: Path, name: str) -> None:
    module = conv_module(tmp_path, name)
    spec = "conv-layout,fold-transposes,conv-to-matmul"
    rewritten = apply_passes(module.clone(), parse_passes(spec))
    grouped = name.startswith("grouped")
    groups = 2 if name == "split_groups" else 1  # one matmul a group, concatenated
    assert _count(rewritten, g.MatmulOp) == (0 if grouped else groups)
    assert _count(rewritten, g.Conv2dOp) == (1 if grouped else 0)
    assert _count(rewritten, g.ConcatOp) == (groups > 1)
    # a 1x1 convolution with unit strides and no padding needs no im2col
    assert _count(rewritten, g.Im2colOp) == (0 if grouped or name == "1x1" else groups)
    direct = _outputs(module, "conv-layout,lower-graph-to-loops")
    as_matmul = _outputs(module, f"{spec},lower-graph-to-loops")
    np.testing.assert_array_equal(direct[0], as_matmul[0])


IMPLICIT = "conv-layout,fold-transposes,conv-to-matmul{implicit=true},fuse-kernels{concat-transposes=false}"
EXPLICIT = "conv-layout,fold-transposes,conv-to-matmul,fuse-kernels"


@pytest.mark.parametrize("name", CONVS)
def test_implicit_gemm_is_the_direct_nest_bit_for_bit(tmp_path: Path, name: str) -> None:
    """The input padded by concats with zeros, the patches read in place by the matmul (no
    im2col matrix), in the same (ky, kx, c) order: the direct nest's bits, untiled; tiled,
    the bits of the tiled im2col matmul (the same FMAs on the same values)."""
    module = conv_module(tmp_path, name, "relu")
    rewritten = apply_passes(module.clone(), parse_passes(IMPLICIT))
    im2cols = [op for op in rewritten.walk() if isinstance(op, g.Im2colOp)]
    for op in im2cols:  # inside the matmul's kernel, with the padding done before it
        assert g.IMPLICIT_ATTR in op.attributes and not any(g.ints(op.properties, "padding"))
        assert isinstance(op.parent_op(), g.KernelOp)
        assert any(isinstance(o, g.MatmulOp) for o in op.parent_op().walk())
    assert (_count(rewritten, g.ConcatOp) > 0) == bool(im2cols and "padding" in CONVS[name][2])
    direct = _outputs(module, "conv-layout,lower-graph-to-loops")
    implicit = _outputs(module, f"{IMPLICIT},lower-graph-to-loops")
    tiled = "lower-graph-to-loops,cpu-tile-matmul{mr=3 nr=16 vector-bits=256}"
    if name == "grouped_wide_kernel":
        # a window of 384 terms, past block-reductions' 256: the direct nest sums blocks of
        # its window in f64, each group's matmul its k in f32 (not split without implicit
        # GEMM, the explicit form stays direct): the same sum to float tolerance
        np.testing.assert_allclose(direct[0], implicit[0], rtol=2e-5, atol=1e-5)
        return
    np.testing.assert_array_equal(direct[0], implicit[0])
    np.testing.assert_array_equal(
        _outputs(module, f"{EXPLICIT},{tiled}")[0], _outputs(module, f"{IMPLICIT},{tiled}")[0]
    )


def test_default_cpu_writes_no_im2col_matrix() -> None:
    """conv_block under default-cpu: no kernel argument has the im2col matrix's shape, and
    the tiled matmul reads the padded NHWC input (34x34 for 32x32 and padding 1)."""
    module = irkit.load("examples/conv_block.graph")
    passes = PIPELINES["default-cpu"].spec.replace(",cpu-parallelize", "")
    lowered = apply_passes(module, parse_passes(passes))
    kernels = [
        op for op in lowered.walk() if isinstance(op, func.FuncOp) and KERNEL_ATTR in op.attributes
    ]
    shapes = {tuple(a.type.get_shape()) for k in kernels for a in k.body.block.args}
    assert (2048, 144) not in shapes and (2, 34, 34, 16) in shapes
    (matmul,) = [
        k for k in kernels if "matmul" in k.sym_name.data and "pack" not in k.sym_name.data
    ]
    assert tuple(matmul.body.block.args[0].type.get_shape()) == (2, 34, 34, 16)
    assert any(op.name == "vector.fma" for op in matmul.walk())


@pytest.mark.parametrize("name", ["3x3_pad", "5x3_strided_asym"])
@pytest.mark.parametrize("pipeline", ["default-cpu", "baseline-cpu"])
def test_conv_pipelines_match_the_reference(tmp_path: Path, name: str, pipeline: str) -> None:
    _outputs(conv_module(tmp_path, name, "relu"), pipeline)


@pytest.mark.parametrize("name", ["3x3_pad", "dilated", "1x1"])
def test_conv_as_matmul_under_lockstep(tmp_path: Path, name: str) -> None:
    """The CUDA path: im2col and the shared-memory tiled matmul, NVRTC-built and run
    thread by thread."""
    module = conv_module(tmp_path, name, "relu")
    _outputs(module, "default-cuda", backend="cuda-sim")


def test_the_conv_block_becomes_one_matmul_with_its_epilogue() -> None:
    """conv + batch_norm + relu: the batch norm's per-channel ops sink below the NHWC
    transpose and the output reshape, and fuse into the matmul as its epilogue."""
    module = irkit.load("examples/conv_block.graph", {"N": 1, "H": 12})
    spec = "canonicalize,cse,conv-layout,fold-transposes,conv-to-matmul,fold-constants,fuse-kernels"
    fused = apply_passes(module, parse_passes(spec))
    kernels = [op for op in fused.walk() if isinstance(op, g.KernelOp)]
    (mm_kernel,) = [k for k in kernels if any(isinstance(o, g.MatmulOp) for o in k.walk())]
    inside = {type(o) for o in mm_kernel.walk()}
    assert {g.MatmulOp, g.SubOp, g.MulOp, g.AddOp, g.ReluOp} <= inside
    assert _count(fused, g.Conv2dOp) == 0 and _count(fused, g.BatchNormOp) == 0


@pytest.mark.parametrize(
    "pool",
    [
        "max_pool2d(r, kernel=[2, 2], strides=[2, 2])",
        "avg_pool2d(r, kernel=[3, 3], strides=[2, 1], padding=[1, 1, 1, 0])",
    ],
)
@pytest.mark.parametrize("backend", ["cpu", "cuda-sim", "cuda-host"])
def test_a_conv_block_pools_channels_last_bit_for_bit(
    tmp_path: Path, pool: str, backend: str
) -> None:
    """After conv-layout, the transpose back to NCHW sinks below the pool (an NHWC pool,
    fold-transposes); the pool, fused with the view that feeds it, gives the bits of the
    NCHW pool, and both match the reference."""
    path = tmp_path / "cb.graph"
    path.write_text("model cb\ninput x : f32[2, 5, 9, 11]\nparam w : f32[6, 5, 3, 3]\n"
                    "r = relu(conv2d(x, w, padding=[1, 1, 1, 1]))\n"
                    f"output y = {pool}\n")  # fmt: skip
    module = irkit.load(path)
    graph = "canonicalize,cse,conv-layout,fold-transposes,conv-to-matmul,fuse-kernels"
    nhwc = apply_passes(module.clone(), parse_passes(graph))
    pools = [op for op in nhwc.walk() if isinstance(op, g.Pool2dOp)]
    assert [g.pool_layout(p.properties) for p in pools] == ["nhwc"]
    lowered = "lower-graph-to-loops" if backend == "cpu" else "lower-graph-to-loops,map-to-gpu"
    a = _outputs(module, f"conv-layout,conv-to-matmul,{lowered}", backend)
    b = _outputs(module, f"{graph},{lowered}", backend)
    np.testing.assert_array_equal(a[0], b[0])


def test_conv_layout_on_the_exported_cnn() -> None:
    """An ONNX CNN (two conv blocks, one grouped, pools, a classifier head): the default
    pipeline keeps its result."""
    module = import_model(cnn_model(), "cnn.onnx")
    nhwc = apply_passes(module.clone(), parse_passes("conv-layout,fold-transposes"))
    layouts = [g.conv_layout(op.properties) for op in nhwc.walk() if isinstance(op, g.Conv2dOp)]
    assert layouts == ["nhwc", "nhwc"]
    _outputs(module, "default-cpu")


def test_conv_layout_back_to_nchw_is_the_identity_pair(tmp_path: Path) -> None:
    module = conv_module(tmp_path, "3x3_pad")
    there_and_back = apply_passes(
        module.clone(), parse_passes("conv-layout,conv-layout{layout=nchw},fold-transposes")
    )
    assert _count(there_and_back, g.TransposeOp) == 0
    assert str(there_and_back) == str(module)


def test_max_expansion_keeps_a_large_window_direct(tmp_path: Path) -> None:
    module = conv_module(tmp_path, "5x3_strided_asym")
    kept = apply_passes(module.clone(), parse_passes("conv-layout,conv-to-matmul{max-expansion=1}"))
    assert _count(kept, g.Conv2dOp) == 1 and _count(kept, g.Im2colOp) == 0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("conv-layout{layout=chwn}", "option layout=chwn: expected one of"),
        ("conv-to-matmul{max-expansion=0}", "max-expansion=0"),
    ],
)
def test_bad_options_are_one_line(spec: str, message: str) -> None:
    with pytest.raises(IrkitError, match=message):
        apply_passes(irkit.load("examples/conv_block.graph"), parse_passes(spec))
    run = subprocess.run(
        ["irkit-opt", "examples/conv_block.graph", "-p", spec],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode != 0
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert message in run.stderr


def test_a_bad_layout_in_a_graph_file_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.graph"
    path.write_text(
        "model bad\ninput x : f32[1, 4, 4, 2]\nparam w : f32[1, 1, 2, 3]\n"
        'output y = conv2d(x, w, layout="nwhc")\n'
    )
    run = subprocess.run(["irkit-opt", str(path)], capture_output=True, text=True, check=False)
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert f"{path}:4:" in run.stderr and "nwhc" in run.stderr


def test_an_exported_conv_bias_and_batch_norm_fuse_into_the_matmul() -> None:
    """ONNX's Conv carries its bias: conv -> add(bias) -> batch_norm -> relu. The batch norm
    behind the bias add is decomposed too, and the whole tail is the matmul's epilogue."""
    module = import_model(cnn_model(), "cnn.onnx")
    spec = "canonicalize,cse,conv-layout,fold-transposes,conv-to-matmul,fold-constants,fuse-kernels"
    fused = apply_passes(module.clone(), parse_passes(spec))
    assert _count(fused, g.BatchNormOp) == 0
    kernels = [op for op in fused.walk() if isinstance(op, g.KernelOp)]
    first = next(k for k in kernels if any(isinstance(o, g.MatmulOp) for o in k.walk()))
    assert {g.MatmulOp, g.AddOp, g.SubOp, g.MulOp, g.ReluOp} <= {type(o) for o in first.walk()}
    _outputs(module, "default-cpu")


@pytest.mark.parametrize("name", ["grouped_depthwise_7x7", "grouped", "3x3_pad"])
def test_unroll_windows_is_bit_identical_and_leaves_a_depthwise_window_straight(
    tmp_path: Path, name: str
) -> None:
    """default-cpu with and without unroll-windows: the same bits (the same ops in the same
    order); a depthwise window's loops gone from its kernel, which vectorizes across the
    channels (ConvNeXt's 7 x 7: 4.5 -> 31 GFLOP/s on one znver5 core)."""
    module = conv_module(tmp_path, name, "relu")
    steps = [s.spec for s in pipeline_steps("default-cpu")]
    without = ",".join(s for s in steps if s != "unroll-windows")
    np.testing.assert_array_equal(_outputs(module, "default-cpu")[0], _outputs(module, without)[0])
    loops = apply_passes(module.clone(), parse_passes("default-cpu"))
    kernels = [f for f in loops.ops if isinstance(f, func.FuncOp) and KERNEL_ATTR in f.attributes]
    conv = next(f for f in kernels if "conv2d" in f.sym_name.data or "matmul" in f.sym_name.data)
    unrolled = not any(isinstance(op, scf.ForOp) for op in conv.walk())
    assert unrolled == (name == "grouped_depthwise_7x7")  # a dense conv is a tiled matmul


@pytest.mark.parametrize(
    "name", ["3x3_pad", "5x3_strided_asym", "dilated", "grouped", "1x1", "stem_7x7"]
)
def test_delinearize_loops_is_bit_identical_and_takes_the_window_apart(
    tmp_path: Path, name: str
) -> None:
    """default-cpu with and without delinearize-loops: the same bits (the same body in the
    same order, at every stride, padding, dilation and grouping of the table); where the conv
    is an implicit-GEMM matmul over a window, its k loop is a nest and no division by the
    window's sizes is left on the matmul's k (ResNet's 7 x 7 stem: 969 -> 689 us on one
    znver5 core)."""
    module = conv_module(tmp_path, name, "relu")
    steps = [s.spec for s in pipeline_steps("default-cpu")]
    without = ",".join(s for s in steps if s != "delinearize-loops")
    np.testing.assert_array_equal(_outputs(module, "default-cpu")[0], _outputs(module, without)[0])

    def k_divisions(spec: str) -> int:
        """Divisions and remainders of a k loop's own index in the matmul kernels."""
        loops = apply_passes(module.clone(), parse_passes(spec))
        count = 0
        for loop in loops.walk():
            if isinstance(loop, scf.ForOp):
                k = loop.body.block.args[0]
                count += sum(isinstance(u.operation, arith.DivUIOp | arith.RemUIOp) for u in k.uses)
        return count

    before, after = k_divisions(without), k_divisions("default-cpu")
    assert after == 0
    assert (before > 0) == (name not in ("1x1", "grouped"))  # a window of one: nothing to split
