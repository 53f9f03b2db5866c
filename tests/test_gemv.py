"""gpu-tile-matmul's GEMV kernel (`irkit.passes.gpu_gemv`): a matmul of one row (a decode
step's projections) as 8 warps interleaved along k, a lane 16 bytes of W's row, the warps'
sums meeting in shared memory, k ranges (split-K's partial rows and reduction kernel) where
the columns alone would leave the GPU idle. Checked against the reference on cuda-host (the
printed CUDA C) and cuda-sim (the IR in lockstep); NVRTC's resources and SASS for the
shapes of a Llama-3-8B layer's decode projections. No GPU needed."""

from __future__ import annotations

from pathlib import Path

import pytest

import irkit
from irkit.frontend import parse_source
from irkit.loops import LAUNCH_ATTR
from irkit.pipelines import PIPELINES
from irkit.runtime.check import check

GEMV = "model g\ninput x : {t}[1, {k}]\ninput w : {t}[{k}, {n}]\ninput b : {t}[{n}]\noutput y = relu(add(b, matmul(x, w)))\n"


def _launches(module) -> dict[str, tuple[str, int]]:
    return {
        op.sym_name.data: (
            op.attributes[LAUNCH_ATTR].data["mapping"].data,
            op.attributes[LAUNCH_ATTR].data["grid"].get_values()[0],
        )
        for op in module.walk()
        if hasattr(op, "sym_name") and LAUNCH_ATTR in op.attributes
    }


@pytest.mark.parametrize("backend", ["cuda-host", "cuda-sim"])
@pytest.mark.parametrize(
    ("k", "n", "dtype", "splits"),
    [(256, 512, "bf16", True), (4096, 1000, "f16", True), (100, 300, "f32", False),
     (96, 264, "bf16", False), (50, 77, "f32", False), (1000, 40, "bf16", True)],
)  # fmt: skip
def test_a_row_times_a_matrix_is_the_gemv_kernel_and_matches(
    k: int, n: int, dtype: str, splits: bool, backend: str
) -> None:
    """A bias and a ReLU after x @ W (the epilogue fused: in the GEMV kernel where there is
    one k range, in split-K's reduction kernel where there are several); columns no tile
    divides (N = 1000, 300, 40), rows no 16 bytes divide (N = 77: one column a lane), k
    ranges of unequal length (K = 4096 in ranges of 410...)."""
    module = parse_source(GEMV.format(t=dtype, k=k, n=n), "g.graph", ".graph")
    exe = irkit.compile(module, "default-cuda", backend=backend)
    launches = _launches(exe.module)
    (mapping, _) = launches["k0_matmul_add_relu"]
    assert mapping == "gemv"
    assert ("k0_matmul_add_relu_splitk" in launches) == splits, launches
    checks, _ = check(exe, module, seed=3)
    assert all(c.passed for c in checks), [c.describe() for c in checks]


def test_gemv_false_leaves_it_to_map_to_gpu() -> None:
    module = parse_source(GEMV.format(t="bf16", k=256, n=512), "g.graph", ".graph")
    steps = [p if not p.startswith("gpu-tile-matmul") else "gpu-tile-matmul{gemv=false}"
             for p in PIPELINES["default-cuda"].passes]  # fmt: skip
    exe = irkit.compile(module, ",".join(steps), backend="cuda-host")
    assert _launches(exe.module) == {"k0_matmul_add_relu": ("flat", 2)}
    checks, _ = check(exe, module, seed=3)
    assert all(c.passed for c in checks)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_llama_decode_projections_stream_w_by_16_byte_loads(arch: str, tmp_path: Path) -> None:
    """A Llama-3-8B layer's widest decode projection (1 x 4096 @ 4096 x 14336, bf16): 56
    column tiles x 10 k ranges (560 blocks: 4 an SM on 132), W read by 16-byte loads
    (LDG.E.128), no local memory; the reduction kernel after it."""
    from irkit.codegen.cuda import gpu_kernels, kernel_source
    from irkit.codegen.nvrtc import compile_cuda
    from irkit.pipelines import apply_passes, parse_passes
    from tests.test_sass import _disassemble

    source = (
        "model g\ninput x : bf16[1, 4096]\ninput w : bf16[4096, 14336]\noutput y = matmul(x, w)\n"
    )
    module = apply_passes(parse_source(source, "g.graph", ".graph"), parse_passes("default-cuda"))
    assert _launches(module) == {"k0_matmul": ("gemv", 560), "k0_matmul_splitk": ("flat", 56)}
    fn = next(f for f in gpu_kernels(module) if f.sym_name.data == "k0_matmul")
    compiled = compile_cuda(kernel_source(module, fn), "k0_matmul", arch)
    assert compiled.resources.spill_stores == compiled.resources.spill_loads == 0
    cubin = tmp_path / "gemv.cubin"
    cubin.write_bytes(compiled.cubin)
    text = _disassemble(cubin)
    assert "LDG.E.128" in text, text[:2000]
    assert not any(op in text for op in ("LDL", "STL"))
