"""The machine code NVRTC builds for the tensor-core matmuls holds the instructions meant,
for sm_80 and sm_90, read from the cubin with cuobjdump and nvdisasm (the
`nvidia-cuda-cuobjdump` and `nvidia-cuda-nvdisasm` wheels): HMMA for the mma.sync tiles,
LDSM (and LDSM.MT, the transposed load of B) for `ldmatrix`, LDGSTS for the cp.async copies
(16-byte global loads and shared stores where they are staged through registers), and no
local memory (no spills). No GPU needed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from irkit.codegen.cuda import gpu_kernels, kernel_source
from irkit.codegen.nvrtc import compile_cuda
from irkit.frontend import parse_source
from irkit.pipelines import apply_passes, parse_passes, pipeline_steps

GEMM = "model g\ninput a : {t}[{n}, {n}]\ninput b : {t}[{n}, {n}]\noutput c = matmul(a, b)\n"


def resources(model: Path, spec: str) -> list[str]:
    """`irkit-opt MODEL -p SPEC -t resources`, as a user runs it: its lines, one per kernel
    and architecture (the command must succeed)."""
    done = subprocess.run(
        [sys.executable, "-m", "irkit.cli.opt", str(model), "-p", spec, "-t", "resources"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()


def _cuda_tool(name: str, wheel: str) -> str:
    """The CUDA binary `name`, from PATH or from the `wheel` that installs it."""
    found = shutil.which(name)
    if found:
        return found
    try:
        import nvidia  # the namespace package the CUDA wheels install into
    except ImportError:
        pytest.skip(f"no {name}: pip install {wheel}")
    for root in nvidia.__path__:
        for candidate in sorted(Path(root).glob(f"cu*/bin/{name}")):
            return str(candidate)
    pytest.skip(f"no {name}: pip install {wheel}")


def _disassemble(cubin: Path) -> str:
    """cuobjdump -sass of `cubin` (cuobjdump runs nvdisasm, which it is told where to find)."""
    nvdisasm = _cuda_tool("nvdisasm", "nvidia-cuda-nvdisasm")
    env = {**os.environ, "NVDISASM_PATH": str(Path(nvdisasm).parent)}
    command = [_cuda_tool("cuobjdump", "nvidia-cuda-cuobjdump"), "-sass", str(cubin)]
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=60,
                          env=env).stdout  # fmt: skip


def _sass(dtype: str, options: str, arch: str, tmp_path: Path) -> tuple[Counter, dict]:
    """The opcode counts of the tiled matmul's SASS, and its ptxas resources."""
    steps = [s.spec for s in pipeline_steps("default-cuda")]
    spec = ",".join(f"gpu-tile-matmul{{{options}}}" if s.startswith("gpu-tile-matmul") else s
                    for s in steps)  # fmt: skip
    graph = parse_source(GEMM.format(t=dtype, n=1024), "g.graph", ".graph")
    module = apply_passes(graph, parse_passes(spec))
    (fn,) = gpu_kernels(module)
    compiled = compile_cuda(kernel_source(module, fn), fn.sym_name.data, arch)
    cubin = tmp_path / f"{arch}.cubin"
    cubin.write_bytes(compiled.cubin)
    return _opcodes(_disassemble(cubin)), compiled.resources.__dict__


def _opcodes(text: str) -> Counter:
    """The opcodes of disassembled SASS, counted (`@!PT` marks an instruction never
    executed: ptxas's padding beside LDGDEPBAR)."""
    return Counter(
        re.findall(r"/\*[0-9a-f]{4}\*/\s+(?!@!PT)(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", text)
    )


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize(("dtype", "hmma"), [("f16", "HMMA.16816.F32"),
                                             ("bf16", "HMMA.16816.F32.BF16")])  # fmt: skip
def test_half_tiles_are_ldmatrix_and_hmma_without_spills(
    arch: str, dtype: str, hmma: str, tmp_path: Path
) -> None:
    """The default f16/bf16 kernel (128 x 128 tiles 32 deep, four swizzled cp.async stages,
    64 KB of dynamic shared memory): per k tile, 32 HMMA fed by 8 LDSM of A and 4
    transposed LDSM of B; the copies LDGSTS (cp.async.cg: global straight to shared, 4 a
    thread a tile, 12 more for the three tiles before the loop), committed by LDGDEPBAR and
    waited for by DEPBAR, one barrier a tile; no register-staged copy (LDG, STS) and no LDS
    (every fragment by ldmatrix), no local memory. With `async-copy=false`, 64 deep through
    registers: 64 HMMA, 16 + 8 LDSM, 16-byte LDG and STS."""
    ops, resources = _sass(dtype, "fill-sms=false split-k=1", arch, tmp_path)
    assert ops[hmma] == 32, ops
    assert ops["LDSM.16.M88.4"] == 8 and ops["LDSM.16.MT88.4"] == 4, ops
    assert ops["LDGSTS.E.BYPASS.128"] == 16 and ops["LDGDEPBAR"] >= 1, ops
    assert ops["DEPBAR.LE"] >= 1 and ops["BAR.SYNC.DEFER_BLOCKING"] == 1, ops
    assert not any(op.startswith(("LDG.", "STS", "LDS.")) or op == "LDS" for op in ops), ops
    assert not any(op.startswith(("LDL", "STL")) for op in ops), ops
    assert resources["spill_stores"] == 0 and resources["shared_bytes"] == 0, resources
    ops, resources = _sass(dtype, "fill-sms=false split-k=1 async-copy=false", arch, tmp_path)
    assert ops[hmma] == 64 and ops["LDSM.16.M88.4"] == 16 and ops["LDSM.16.MT88.4"] == 8, ops
    assert ops["STS.128"] == 16 and not any(op.startswith("LDS.") or op == "LDS" for op in ops)
    assert any(op.startswith("LDG.E.128") for op in ops) and "LDGSTS.E.BYPASS.128" not in ops
    assert not any(op.startswith(("LDL", "STL")) for op in ops), ops


def test_pair_loads_and_tf32_keep_their_own_instructions(tmp_path: Path) -> None:
    """ldmatrix=false: fragments by 32-bit shared loads, no LDSM; TF32: the m16n8k8 TF32
    HMMA from word loads. Both without local memory."""
    ops, _ = _sass("f16", "fill-sms=false split-k=1 ldmatrix=false", "sm_90", tmp_path)
    assert ops["HMMA.16816.F32"] > 0 and ops["LDS"] > 0, ops
    assert not any(op.startswith(("LDSM", "LDL", "STL")) for op in ops), ops
    ops, _ = _sass("f32", "fill-sms=false split-k=1 tf32=true", "sm_90", tmp_path)
    assert ops["HMMA.1688.F32.TF32"] > 0, ops
    assert not any(op.startswith(("LDL", "STL")) for op in ops), ops


@pytest.mark.parametrize(
    ("dtype", "options"),
    [("f32", ""), ("f32", "tf32=true"), ("f16", ""), ("bf16", ""), ("f16", "async-copy=false"),
     ("bf16", "stages=4"), ("f16", "wgmma=true"), ("bf16", "wgmma=true")],
)  # fmt: skip
def test_every_matmul_variant_reports_its_resources_without_spills(
    dtype: str, options: str, tmp_path: Path
) -> None:
    """`irkit-opt -t resources` under default-cuda (its default tiles, split-K and fill-sms
    as the policy chooses): every kernel on sm_80 and sm_90 with its registers, shared
    memory, blocks per SM, occupancy and waves; no spill and no stack at the default tiles,
    every step of the tensor-core ladder included (register-staged copies, four cp.async
    stages, wgmma: built for sm_90a, and said not to be for sm_80)."""
    model = tmp_path / "g.graph"
    model.write_text(GEMM.format(t=dtype, n=1024))
    steps = [s.spec for s in pipeline_steps("default-cuda")]
    spec = ",".join(f"gpu-tile-matmul{{{options}}}" if options and s.startswith("gpu-tile-matmul")
                    else s for s in steps)  # fmt: skip
    lines = resources(model, spec)
    hopper = "sm_90a" if "wgmma" in options else "sm_90"
    assert {line.split(":")[0].split()[1] for line in lines} >= {"sm_80", hopper}
    skipped = [line for line in lines if line.endswith("not built (wgmma needs sm_90a)")]
    assert bool(skipped) == ("wgmma" in options) and all(" sm_80:" in line for line in skipped)
    lines = [line for line in lines if line not in skipped]
    pattern = (
        r"(\w+) (sm_\d+a?): (\d+) registers, (\d+) spill stores, (\d+) spill loads, (\d+) B stack, "
        r"\d+ B static \+ \d+ B dynamic shared; block [\dx]+, grid [\dx]+: (\d+) blocks/SM "
        r"\([a-z ]+\), occupancy (\d+)%, [\d.]+ waves on 132 SMs"
    )
    for line in lines:
        m = re.fullmatch(pattern, line)
        assert m is not None, line
        registers, stores, loads, stack, blocks, occupancy = map(int, m.groups()[2:])
        assert 0 < registers <= 255 and stores == loads == stack == 0, line
        assert blocks >= 1 and 0 < occupancy <= 100, line
