"""The optimized CUDA pipeline against cuBLAS, PyTorch eager and torch.compile (issue 18's ladder).

    python benchmarks/gpu_targets.py [--quick] [-p default-cuda] [--no-compile] [--only NAME]
                                     [--variant 'WORKLOAD:PASS{OPTIONS}[;PASS{...}]']
                                     [--out benchmarks/results/gpu_targets.jsonl]

`--variant` times a workload once more with pass options of your own (added to its own; each
replaces the pipeline's pass of its name), in the same rounds as the default pipeline: a
one-off question on a lent device without a new entry in WORKLOADS below. With `--variant`
and no `--only`, the variants alone run.

With no device it says so in one line and exits 1.

Workloads (fp32, plain CUDA C from irkit; peers in the same process, on the same device):

- gemm 4096^3 against `torch.matmul` with TF32 off (cuBLAS SGEMM): the ladder's targets are
  0.5x, then 0.7x, then 0.9x, then 0.93x cuBLAS's speed for the default pipeline (warp-tiled),
  a rung reached when the ratio's CI's low end is at or above it; and the
  same gemm with `gpu-tile-matmul{warp-tile=false}` (threads strided over the block tile,
  word reads of shared memory), so the run shows what warp tiling is worth;
- bias + GELU on 4096 x 4096 (64 MB), softmax over 4096 x 4096 rows, layer_norm over
  16384 x 1024: targets >= 80% of the device's measured copy bandwidth and >= 1.0x
  torch.compile's speed (PyTorch eager timed too);
- mlp and transformer_block end to end, at sizes that fill the device, against PyTorch eager
  and torch.compile (target >= 1.0x torch.compile), irkit timed launch by launch and as one
  replayed CUDA graph.

torch.compile runs in two modes, both timed: the default, and "reduce-overhead" (its CUDA
graphs: `torch_compile_graphs`), whose replay takes the host's guards and launches out of what
is timed; the target is against the faster of the two by median. (A mode that fails to
compile or run is recorded under `peers_dropped`; the workload still runs.)

The tensor-core steps (`TENSOR_CORE_LADDER`), bf16 fused attention against
`scaled_dot_product_attention` held to its flash backend (`ATTENTION_LADDER`: head dim 64 and
128, sequence 1k and 4k, causal and not; issue 70's 0.7x and 0.9x) and a Llama-3-8B layer in
bf16, prefill of 2048 tokens and decode at a 2048-position cache, against the same layer in
PyTorch under torch.compile (`LLAMA_LADDER`; issue 70's >= 1.0x) run only when named with
`--only` (gpu_acceptance.sh's `tensor_cores`, `flash_attention` and `llama` steps name them).

Variants, each timed in the same rounds as the unchanged pipeline (`speed_vs_irkit_default`,
what the change is worth) and torch eager: gemm with `gpu-tile-matmul{min-blocks=2}` (at most
128 registers a thread) and with 16-byte stores of C (`vector-stores=true`); a 256^3 gemm (the
example's size, whose default `fill-sms` makes 32 x 32 tiles and split-K) with 64 x 64 tiles
and with the 128 x 128 tiles' 4 blocks (`fill-sms=false`); gemm with
`gpu-tile-matmul{tf32=true}` against cuBLAS with TF32 on (target 0.8x), f16 and bf16
gemms on tensor cores, 4096^3 and 8192^3, against cuBLAS's at the same precision (issue 70's
ladder: 0.6x, 0.8x, 0.95x) with each step of issue 69 (`TENSOR_CORE_STEPS`: copies staged
through registers, 2 and 3 cp.async stages, wgmma, TMA, warp specialization, persistent),
bias + GELU one point per thread (`gpu-coarsen{factor=1}`) and 8,
layer_norm with `map-to-gpu{row-items=1}` (256 threads a row, as before 2026-11-26) and 8
(128 threads), mlp without split-K, and with `fill-sms`'s smaller tiles instead of it,
transformer_block with its batch matmuls one thread per output (`batch=false`) and with
`fill-sms` and split-K aiming at two blocks an SM (`sms=264`: its 128-block matmuls, 128 x
128 tiles at one 8-warp block per SM, get split-K 4, 512 blocks and a reduction kernel each;
its batch matmuls 64 x 64 tiles, 512 blocks), and the row
kernels (layer_norm, softmax, transformer_block's) with their reductions by a shared-memory
tree and statistics read back from global memory, as before 2026-11-27
(`map-to-gpu{shuffle=false forward=false}`, the `*_tree` workloads), layer_norm with
shuffles but no forwarding (`forward=false`), and softmax with 512 threads a row
(`row-items=8`, which made layer_norm 1.06x faster on the H200 at dbb5b27).

Protocol: each irkit variant is first checked against the float64 reference (never timed if
wrong) and against each peer's output; then all are timed in interleaved, randomly ordered
rounds, one sample per round each, with CUDA events around back-to-back calls after an L2
flush (2x the L2 size). Printed: medians with 95% CIs, the speed ratios paired by round,
GFLOP/s, and the fraction of copy bandwidth (bytes each kernel must move / time / measured
device-to-device copy bandwidth). A workload that fails is reported and recorded with its
error, and the others still run.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

import irkit
from irkit.errors import IrkitError
from irkit.frontend import parse_source
from irkit.measure.fingerprint import host_fingerprint
from irkit.measure.stats import ratio_ci
from irkit.measure.timers import time_interleaved
from irkit.pipelines import pipeline_steps
from irkit.runtime.check import check
from irkit.runtime.reference import random_inputs, reference

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_baseline import benchmark_parser  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

GEMM_F16 = """model gemm_f16
dim M = 4096
dim N = 4096
dim K = 4096
input a : f16[M, K]
input b : f16[K, N]
output c = matmul(a, b)
"""
GEMM_BF16 = GEMM_F16.replace("f16", "bf16")

GEMM_FP8 = """model gemm_fp8
dim M = 4096
dim N = 4096
dim K = 4096
input a : f8e4m3[M, K]
param b : f8e4m3[K, N]
input sa : f32[]
param sb : f32[1]
output c = cast(scaled_matmul(a, b, sa, sb), dtype=bf16)
"""
FP8_STEPS = {"mma": "", "wgmma": "gpu-tile-matmul{wgmma=true}"}
"""8-bit floats (issue 69's last item) against cuBLAS's through torch._scaled_mm: mma.sync
m16n8k32 (the default: QMMA on sm_89; on sm_90 ptxas's F2FP and HMMA, since Hopper's
mma.sync has no 8-bit form) and wgmma m64nNk32 (QGMMA, sm_90a). No rung: the ratio is
recorded (not yet timed on a GPU)."""

TENSOR_CORE_RUNGS = (0.6, 0.8, 0.95)
"""Issue 70's ladder for bf16 and f16 against cuBLAS: 0.6x (mma.sync), 0.8x, 0.95x (wgmma)."""
TF32_RUNGS = (0.8,)
"""TF32 against cuBLAS with TF32 on."""

BIAS_GELU = """model bias_gelu
dim N = 4096
dim D = 4096
input x : f32[N, D]
param b : f32[D]
output y = gelu(x + b)
"""


@dataclass
class Workload:
    name: str
    source: str  # a path under the repository, or .graph text
    dims: dict[str, int]
    quick_dims: dict[str, int]
    peer: str  # the name of a torch function of the inputs in irkit's order (PEERS below)
    target: str  # "cublas", "flash", "bandwidth" or "end_to_end"
    passes: str = ""  # pass specs this variant changes (see `variant`)
    peer_tolerance: float = 1e-3  # largest |peer - irkit| / max |irkit| accepted
    targeted: bool = True  # False: no target at this size or precision, the ratio recorded
    rungs: tuple[float, ...] = (0.5, 0.7, 0.9, 0.93)  # the ladder against cuBLAS (target "cublas")
    dtype: str = ""  # the model converted to "f16" or "bf16" (`irkit.load(dtype=)`)
    inputs: str = ""  # "llama": a trained model's scales (`llama_inputs`); else uniform [-1, 1)


TENSOR_CORE_STEPS = {
    "staged": "gpu-tile-matmul{async-copy=false}",  # the default until cp.async (2 stages)
    "stages2": "gpu-tile-matmul{stages=2}",
    "stages3": "gpu-tile-matmul{stages=3}",
    "wgmma": "gpu-tile-matmul{wgmma=true}",
    "tma": "gpu-tile-matmul{wgmma=true tma=true}",
    "specialized": "gpu-tile-matmul{wgmma=true tma=true warp-specialize=true}",
    "persistent": "gpu-tile-matmul{wgmma=true tma=true warp-specialize=true persistent=true}",
    "grouped": "gpu-tile-matmul{wgmma=true tma=true warp-specialize=true persistent=true group-m=8}",
    "wide": "gpu-tile-matmul{wgmma=true tma=true warp-specialize=true persistent=true group-m=8 "
    "block-n=256}",
    "clustered": "gpu-tile-matmul{wgmma=true tma=true warp-specialize=true persistent=true "
    "group-m=8 block-n=256 cluster-m=2}",
}
"""Issue 69's steps, each a variant of the f16/bf16 gemms timed in the same rounds as the
default (cp.async, four stages, mma.sync): register-staged copies, two and three stages,
then Hopper's (sm_90a): wgmma on the cp.async ring, its tiles filled by TMA on mbarriers
(128-byte swizzled), warp-specialized (a producer warpgroup, setmaxnreg), persistent, and
its tiles taken in groups of 8 tile rows (`group-m`, for L2 reuse), and with 128 x 256 tiles
(`wide`: 0.843x cuBLAS at 4096^3 f16 on an H200 where `grouped` ran 0.747x, 2026-11-29),
then in clusters of two blocks sharing B's k tile by TMA multicast (`clustered`, not yet
timed).
Their `speed_vs_irkit_default` is what each step is worth; each is also timed against
cuBLAS (the ladder's rungs)."""
TENSOR_CORE_8192 = ("wgmma", "grouped", "wide", "clustered")
"""The steps also timed at 8192^3 (the published ladder's size): the first and the last
three."""

TENSOR_CORE_LADDER = [
    Workload(f"gemm_{t}{'' if n == 4096 else f'_{n}'}_{step}", source,
             {"M": n, "N": n, "K": n}, {"M": 512, "N": 512, "K": 512}, "matmul", "cublas",
             TENSOR_CORE_STEPS[step], peer_tolerance=1e-2 if t == "f16" else 2e-2,
             rungs=TENSOR_CORE_RUNGS)
    for t, source in (("f16", GEMM_F16), ("bf16", GEMM_BF16))
    for n, steps in ((4096, TENSOR_CORE_STEPS), (8192, TENSOR_CORE_8192))
    for step in steps
]  # fmt: skip

FP8_LADDER = [
    Workload(f"gemm_fp8{'' if n == 4096 else f'_{n}'}{'' if step == 'mma' else f'_{step}'}",
             GEMM_FP8, {"M": n, "N": n, "K": n}, {"M": 512, "N": 512, "K": 512}, "scaled_mm",
             "cublas", passes, peer_tolerance=2e-2, targeted=False)
    for n in (4096, 8192)
    for step, passes in FP8_STEPS.items()
]  # fmt: skip

ATTENTION = """model attention
dim S = 1024
dim D = 64
input q : bf16[1, 16, S, D]
input k : bf16[1, 16, S, D]
input v : bf16[1, 16, S, D]
output y = attention(q, k, v, causal={causal})
"""
FLASH_RUNGS = (0.7, 0.9)
"""Issue 70's ladder for fused attention against torch's flash-attention backend."""

ATTENTION_LADDER = [
    Workload(f"attention_bf16_{s}_d{d}{'_causal' if causal else ''}",
             ATTENTION.format(causal=str(causal).lower()), {"S": s, "D": d}, {"S": 128, "D": d},
             "sdpa_causal" if causal else "sdpa", "flash", peer_tolerance=3e-2, rungs=FLASH_RUNGS)
    for s in (1024, 4096) for d in (64, 128) for causal in (False, True)
] + [
    Workload(f"attention_bf16_8192_d128{'_causal' if causal else ''}",
             ATTENTION.format(causal=str(causal).lower()), {"S": 8192, "D": 128}, {"S": 128, "D": 128},
             "sdpa_causal" if causal else "sdpa", "flash", peer_tolerance=3e-2, rungs=FLASH_RUNGS)
    for causal in (False, True)
] + [
    Workload(f"attention_bf16_1024_d{d}{'_causal' if causal else ''}_simt",
             ATTENTION.format(causal=str(causal).lower()), {"S": 1024, "D": d}, {"S": 128, "D": d},
             "sdpa_causal" if causal else "sdpa", "flash", "gpu-fuse-attention{tensor-cores=false}",
             peer_tolerance=3e-2, rungs=FLASH_RUNGS)
    for d in (64, 128) for causal in (False, True)
]  # fmt: skip
"""bf16 attention (one batch, 16 heads, head dim 64 and 128, sequence 1k, 4k and (head dim
128) 8k, causal and not), irkit's default-cuda (graph.attention fused by
gpu-fuse-attention: the tensor-core form since 0e7f76b) against
`scaled_dot_product_attention` held to its flash backend; and at 1k the f32 SIMT form
(`tensor-cores=false`, the only form before 0e7f76b) in the same rounds, so that
`speed_vs_irkit_default` says what the tensor cores are worth. Run when named with
`--only`."""

LLAMA_3_8B = {"D": 4096, "H": 32, "HK": 8, "HD": 128, "F": 14336}
"""One decoder layer of Llama-3-8B (the examples' own comments give the same)."""
LLAMA_LADDER = [
    Workload("llama_prefill_bf16", "examples/llama_block.graph", {"B": 1, "S": 2048, **LLAMA_3_8B},
             {"B": 1, "S": 64, "D": 256, "H": 8, "HK": 2, "HD": 32, "F": 512}, "llama_block",
             "end_to_end", peer_tolerance=3e-2, dtype="bf16", inputs="llama"),
    Workload("llama_decode_bf16", "examples/llama_decode.graph", {"B": 1, "L": 2048, **LLAMA_3_8B},
             {"B": 1, "L": 256, "D": 256, "H": 8, "HK": 2, "HD": 32, "F": 512}, "llama_decode",
             "end_to_end", peer_tolerance=3e-2, dtype="bf16", inputs="llama"),
    Workload("llama_prefill_bf16_hopper", "examples/llama_block.graph",
             {"B": 1, "S": 2048, **LLAMA_3_8B},
             {"B": 1, "S": 64, "D": 256, "H": 8, "HK": 2, "HD": 32, "F": 512}, "llama_block",
             "end_to_end", TENSOR_CORE_STEPS["wide"], peer_tolerance=3e-2, dtype="bf16",
             inputs="llama"),
]  # fmt: skip
"""Issue 70's LLM rungs: a Llama-3-8B decoder layer in bf16, prefill of 2048 tokens and one
decode step against a 2048-position cache, irkit's default-cuda against the same layer in
PyTorch (`torch_peers`: RMSNorm, rotary, grouped-query SDPA, SwiGLU) eager and under
torch.compile (target >= 1.0x the faster compile mode). Run when named with `--only`.
Their inputs have a trained layer's scales (`llama_inputs`): with weights uniform in [-1, 1)
at width 4096 the attention scores reach thousands, the softmax picks one key by a margin
below bf16's rounding, and no two correct bf16 programs agree (the 2026-11-29 H200 run).
`llama_prefill_bf16_hopper` runs the prefill with its matmuls on the best measured Hopper
step (`wide`: wgmma, TMA, warp-specialized, persistent, grouped, 128 x 256 tiles; 1.9x the
mma.sync default on a 4096^3 gemm), its speed against the default in the same rounds: what
making those options the sm_90 default would buy the layer."""


def llama_inputs(module, dims: dict[str, int], seed: int = 0) -> list[np.ndarray]:
    """Inputs for examples/llama_block.graph and llama_decode.graph as a trained layer sees
    them: activations and cached keys/values uniform in [-1, 1), weights scaled by
    1/sqrt(fan-in) (variance 1/fan-in, as the usual initialisations), norm gains near 1, and
    the rotary tables of Llama 3 (theta 500000) at the positions the graph takes: 0 .. S-1
    (prefill) or L (decode)."""
    arrays = random_inputs(module, seed)
    decode = "L" in dims
    positions = np.array([dims["L"]]) if decode else np.arange(dims["S"])
    hd = dims["HD"]
    freqs = np.outer(positions, 500000.0 ** (-np.arange(0, hd, 2) / hd))
    angles = np.concatenate([freqs, freqs], axis=-1)  # transformers' rotate_half layout
    first_param = 5 if decode else 3  # x, cos, sin (and past_k, past_v), then the params
    out = []
    for i, a in enumerate(arrays):
        dtype, values = a.dtype, a.astype(np.float64)
        if i in (1, 2):
            values = (np.cos if i == 1 else np.sin)(angles)
        elif i >= first_param and a.ndim == 1:  # attn_norm, mlp_norm
            values = 1.0 + 0.1 * values
        elif i >= first_param:  # a weight [fan_in, fan_out]
            values = values * np.sqrt(3.0 / a.shape[0])
        out.append(values.astype(dtype))
    return out


WORKLOADS = [
    Workload("gemm", "examples/gemm.graph", {"M": 4096, "N": 4096, "K": 4096},
             {"M": 512, "N": 512, "K": 512}, "matmul", "cublas"),
    Workload("gemm_strided", "examples/gemm.graph", {"M": 4096, "N": 4096, "K": 4096},
             {"M": 512, "N": 512, "K": 512}, "matmul", "cublas", "gpu-tile-matmul{warp-tile=false}"),
    Workload("gemm_min_blocks2", "examples/gemm.graph", {"M": 4096, "N": 4096, "K": 4096},
             {"M": 512, "N": 512, "K": 512}, "matmul", "cublas", "gpu-tile-matmul{min-blocks=2}"),
    Workload("gemm_vector_stores", "examples/gemm.graph", {"M": 4096, "N": 4096, "K": 4096},
             {"M": 512, "N": 512, "K": 512}, "matmul", "cublas",
             "gpu-tile-matmul{vector-stores=true}"),
    Workload("gemm256", "examples/gemm.graph", {"M": 256, "N": 256, "K": 256},
             {"M": 256, "N": 256, "K": 256}, "matmul", "cublas", targeted=False),
    Workload("gemm256_tiles64", "examples/gemm.graph", {"M": 256, "N": 256, "K": 256},
             {"M": 256, "N": 256, "K": 256}, "matmul", "cublas",
             "gpu-tile-matmul{block-m=64 block-n=64 thread-m=4 thread-n=4 fill-sms=false}",
             targeted=False),
    Workload("gemm256_no_fill", "examples/gemm.graph", {"M": 256, "N": 256, "K": 256},
             {"M": 256, "N": 256, "K": 256}, "matmul", "cublas",
             "gpu-tile-matmul{fill-sms=false}", targeted=False),
    Workload("gemm_tf32", "examples/gemm.graph", {"M": 4096, "N": 4096, "K": 4096},
             {"M": 512, "N": 512, "K": 512}, "matmul_tf32", "cublas", "gpu-tile-matmul{tf32=true}",
             peer_tolerance=1e-2, rungs=TF32_RUNGS),
    Workload("gemm_f16", GEMM_F16, {"M": 4096, "N": 4096, "K": 4096},
             {"M": 512, "N": 512, "K": 512}, "matmul", "cublas", peer_tolerance=1e-2,
             rungs=TENSOR_CORE_RUNGS),
    Workload("gemm_bf16", GEMM_BF16, {"M": 4096, "N": 4096, "K": 4096},
             {"M": 512, "N": 512, "K": 512}, "matmul", "cublas", peer_tolerance=2e-2,
             rungs=TENSOR_CORE_RUNGS),
    Workload("gemm_f16_8192", GEMM_F16, {"M": 8192, "N": 8192, "K": 8192},
             {"M": 512, "N": 512, "K": 512}, "matmul", "cublas", peer_tolerance=1e-2,
             rungs=TENSOR_CORE_RUNGS),
    Workload("gemm_bf16_8192", GEMM_BF16, {"M": 8192, "N": 8192, "K": 8192},
             {"M": 512, "N": 512, "K": 512}, "matmul", "cublas", peer_tolerance=2e-2,
             rungs=TENSOR_CORE_RUNGS),
    *TENSOR_CORE_LADDER,
    *FP8_LADDER,
    *LLAMA_LADDER,
    *ATTENTION_LADDER,
    Workload("bias_gelu", BIAS_GELU, {"N": 4096, "D": 4096}, {"N": 512, "D": 512},
             "bias_gelu", "bandwidth"),
    Workload("bias_gelu_one_point", BIAS_GELU, {"N": 4096, "D": 4096}, {"N": 512, "D": 512},
             "bias_gelu", "bandwidth", "gpu-coarsen{factor=1}"),
    Workload("bias_gelu_coarsen8", BIAS_GELU, {"N": 4096, "D": 4096}, {"N": 512, "D": 512},
             "bias_gelu", "bandwidth", "gpu-coarsen{factor=8 sms=1}"),
    Workload("softmax", "examples/softmax.graph", {"R": 4096, "C": 4096}, {"R": 512, "C": 512},
             "softmax", "bandwidth"),
    Workload("layernorm", "examples/layernorm.graph", {"T": 16384, "H": 1024},
             {"T": 1024, "H": 1024}, "layer_norm", "bandwidth"),
    Workload("layernorm_row_items1", "examples/layernorm.graph", {"T": 16384, "H": 1024},
             {"T": 1024, "H": 1024}, "layer_norm", "bandwidth", "map-to-gpu{row-items=1}"),
    Workload("layernorm_row_items8", "examples/layernorm.graph", {"T": 16384, "H": 1024},
             {"T": 1024, "H": 1024}, "layer_norm", "bandwidth", "map-to-gpu{row-items=8}"),
    Workload("layernorm_tree", "examples/layernorm.graph", {"T": 16384, "H": 1024},
             {"T": 1024, "H": 1024}, "layer_norm", "bandwidth",
             "map-to-gpu{shuffle=false forward=false}"),
    Workload("layernorm_no_forward", "examples/layernorm.graph", {"T": 16384, "H": 1024},
             {"T": 1024, "H": 1024}, "layer_norm", "bandwidth", "map-to-gpu{forward=false}"),
    Workload("softmax_row_items8", "examples/softmax.graph", {"R": 4096, "C": 4096},
             {"R": 512, "C": 512}, "softmax", "bandwidth", "map-to-gpu{row-items=8}"),
    Workload("softmax_tree", "examples/softmax.graph", {"R": 4096, "C": 4096},
             {"R": 512, "C": 512}, "softmax", "bandwidth", "map-to-gpu{shuffle=false forward=false}"),
    Workload("mlp", "examples/mlp.graph", {"B": 512, "D": 1024, "F": 4096},
             {"B": 64, "D": 256, "F": 1024}, "mlp", "end_to_end"),
    Workload("mlp_no_split_k", "examples/mlp.graph", {"B": 512, "D": 1024, "F": 4096},
             {"B": 64, "D": 256, "F": 1024}, "mlp", "end_to_end",
             "gpu-tile-matmul{split-k=1 fill-sms=false}"),
    Workload("mlp_fill_not_split", "examples/mlp.graph", {"B": 512, "D": 1024, "F": 4096},
             {"B": 64, "D": 256, "F": 1024}, "mlp", "end_to_end", "gpu-tile-matmul{split-k=1}"),
    Workload("transformer_block", "examples/transformer_block.graph",
             {"B": 8, "S": 512, "D": 512, "F": 2048}, {"B": 2, "S": 64, "D": 128, "F": 512},
             "transformer_block", "end_to_end"),
    Workload("transformer_block_flat_batch", "examples/transformer_block.graph",
             {"B": 8, "S": 512, "D": 512, "F": 2048}, {"B": 2, "S": 64, "D": 128, "F": 512},
             "transformer_block", "end_to_end", "gpu-tile-matmul{batch=false}"),
    Workload("transformer_block_fill2", "examples/transformer_block.graph",
             {"B": 8, "S": 512, "D": 512, "F": 2048}, {"B": 2, "S": 64, "D": 128, "F": 512},
             "transformer_block", "end_to_end", "gpu-tile-matmul{sms=264}"),
    Workload("transformer_block_tree", "examples/transformer_block.graph",
             {"B": 8, "S": 512, "D": 512, "F": 2048}, {"B": 2, "S": 64, "D": 128, "F": 512},
             "transformer_block", "end_to_end", "map-to-gpu{shuffle=false forward=false}"),
]  # fmt: skip


def torch_peers(torch: Any) -> dict[str, Any]:
    """Each workload's computation in PyTorch, a function of irkit's inputs in order."""
    F = torch.nn.functional

    def layer_norm(x, g, b):
        return F.layer_norm(x, x.shape[-1:], g, b, eps=1e-5)

    def transformer_block(x, ln1_g, ln1_b, wq, wk, wv, wo, ln2_g, ln2_b, w1, b1, w2, b2):
        h = layer_norm(x, ln1_g, ln1_b)
        q, k, v = h @ wq, h @ wk, h @ wv
        p = torch.softmax(q @ k.transpose(1, 2) * 0.08838834764831845, dim=-1)
        x1 = x + (p @ v) @ wo
        return x1 + F.gelu(layer_norm(x1, ln2_g, ln2_b) @ w1 + b1) @ w2 + b2

    def rms_norm(x, g):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * g

    def rotary(t, cos, sin):  # transformers' rotate_half
        half = t.shape[-1] // 2
        return t * cos + torch.cat((-t[..., half:], t[..., :half]), dim=-1) * sin

    def llama(x, cos, sin, past_k, past_v, attn_norm, wq, wk, wv, wo, mlp_norm, wg, wu, wd):
        """A Llama decoder layer as examples/llama_block.graph (past_k None: a prompt, causal)
        and llama_decode.graph (the new position's keys and values appended to the cache;
        its one query sees every key) compute it; the block's output."""
        b, s, d = x.shape
        hd = cos.shape[-1]
        heads, kv_heads = wq.shape[1] // hd, wk.shape[1] // hd
        h = rms_norm(x, attn_norm).reshape(b * s, d)
        q = rotary((h @ wq).view(b, s, heads, hd).transpose(1, 2), cos, sin)
        k = rotary((h @ wk).view(b, s, kv_heads, hd).transpose(1, 2), cos, sin)
        v = (h @ wv).view(b, s, kv_heads, hd).transpose(1, 2)
        if past_k is not None:
            k, v = torch.cat((past_k, k), dim=2), torch.cat((past_v, v), dim=2)
        k = k.repeat_interleave(heads // kv_heads, dim=1)  # transformers' repeat_kv
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=past_k is None)
        x1 = x + (a.transpose(1, 2).reshape(b * s, heads * hd) @ wo).view(b, s, d)
        h2 = rms_norm(x1, mlp_norm).reshape(b * s, d)
        return x1 + ((F.silu(h2 @ wg) * (h2 @ wu)) @ wd).view(b, s, d)

    def matmul_tf32(a, b):  # cuBLAS on TF32 tensor cores for this call only
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return torch.matmul(a, b)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False

    column_major: dict[int, Any] = {}

    def scaled_mm(a, b, sa, sb):  # cuBLAS's 8-bit gemm: B column-major (made once, untimed)
        if b.data_ptr() not in column_major:
            column_major[b.data_ptr()] = b.t().contiguous().t()
        out = torch._scaled_mm(a, column_major[b.data_ptr()], scale_a=sa.reshape(1),
                               scale_b=sb.reshape(1), out_dtype=torch.bfloat16)  # fmt: skip
        return out[0] if isinstance(out, tuple) else out  # torch < 2.4 also gave the amax

    def sdpa(causal: bool) -> Any:
        def attention(q, k, v):  # flash attention only: an error, not a fallback, without it
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return attention

    return {
        "sdpa": sdpa(False),
        "sdpa_causal": sdpa(True),
        "matmul": torch.matmul,
        "matmul_tf32": matmul_tf32,
        "scaled_mm": scaled_mm,
        "bias_gelu": lambda x, b: F.gelu(x + b),
        "softmax": lambda x: torch.softmax(x, dim=-1),
        "layer_norm": layer_norm,
        "mlp": lambda x, w1, b1, w2: F.gelu(x @ w1 + b1) @ w2,
        "transformer_block": transformer_block,
        "llama_block": lambda x, cos, sin, *params: llama(x, cos, sin, None, None, *params),
        "llama_decode": llama,
    }


class TorchTimed:
    """A torch callable with the `sample(reps)` interface irkit's timers use: CUDA events on
    torch's stream around each of `reps` calls, each after overwriting a buffer twice the
    L2's size (every call cold, as `irkit.runtime.cuda.GpuTimed`)."""

    timer = "cuda_events (torch stream, L2 flushed before each call)"

    def __init__(self, fn: Any, torch: Any, l2_bytes: int):
        self.fn, self.torch = fn, torch
        self.flush = torch.empty(max(2 * l2_bytes, 1 << 20), dtype=torch.uint8, device="cuda")
        self.events: list[Any] = []

    def __call__(self) -> None:
        self.fn()
        self.torch.cuda.synchronize()

    def sample(self, reps: int) -> float:
        while len(self.events) < 2 * reps:
            self.events.append(self.torch.cuda.Event(enable_timing=True))
        for i in range(reps):
            self.flush.zero_()
            self.events[2 * i].record()
            self.fn()
            self.events[2 * i + 1].record()
        self.events[2 * reps - 1].synchronize()
        ms = sum(self.events[2 * i].elapsed_time(self.events[2 * i + 1]) for i in range(reps))
        return ms * 1e-3 / reps


def _to_torch(torch: Any, a: np.ndarray) -> Any:
    """An input on the device; bf16 and 8-bit floats (ml_dtypes, which torch.from_numpy
    refuses) by their bits."""
    a = np.ascontiguousarray(a)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16).cuda()
    eight = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
    if a.dtype.name in eight:
        return torch.from_numpy(a.view(np.uint8)).view(eight[a.dtype.name]).cuda()
    return torch.from_numpy(a).cuda()


def load(w: Workload, dims: dict[str, int]):
    if w.source.endswith(".graph"):
        return irkit.load(ROOT / w.source, dims, dtype=w.dtype or None)
    return parse_source(w.source, f"{w.name}.graph", ".graph", dims)


def variant(pipeline: str, w: Workload) -> str:
    """The pipeline as a pass list, changed by the workload's pass specs: each replaces the
    pipeline's pass of its name (`gpu-tile-matmul{split-k=1}`), or where the pipeline has
    none, is inserted before `map-to-gpu` (`gpu-coarsen{factor=8}`)."""
    if not w.passes:
        return pipeline
    steps = [s.spec for s in pipeline_steps(pipeline)]
    names = [s.split("{")[0] for s in steps]
    for spec in w.passes.split(";"):
        name = spec.split("{")[0]
        if name in names:
            steps[names.index(name)] = spec
        elif "map-to-gpu" in names:
            steps.insert(names.index("map-to-gpu"), spec)
            names.insert(names.index("map-to-gpu"), name)
        else:
            raise SystemExit(f"{w.name}: the pipeline has no {name} and no map-to-gpu")
    return ",".join(steps)


def measure(
    w: Workload, dims, pipeline: str, budget: float, torch, dev, copy_bw: float, compile_peer: bool
) -> dict:
    module = load(w, dims)
    base_pipeline, pipeline = pipeline, variant(pipeline, w)
    exe = irkit.compile(module, pipeline, backend="cuda")
    expected = None
    if w.inputs == "llama":
        case = llama_inputs(module, dims)
        expected = (case, reference(module, *case))
    checks, inputs = check(exe, module, seed=0, expected=expected)
    if not all(c.passed for c in checks):
        raise IrkitError(f"irkit's result is wrong; not timed: {[c.describe() for c in checks]}")
    ours = exe(*inputs)[0]
    args = [_to_torch(torch, a) for a in inputs]
    fn = torch_peers(torch)[w.peer]
    peers = {w.target: fn} if w.target in ("cublas", "flash") else {"torch_eager": fn}
    dropped: dict[str, str] = {}
    if compile_peer and w.target not in ("cublas", "flash") and not w.passes:  # variants: eager
        peers["torch_compile"] = torch.compile(fn)
        # CUDA graphs ("reduce-overhead"): the default mode's host side (guards, launches)
        # outlasted softmax's and layer_norm's kernels in the 2026-11-27 run, so its ratio
        # measured the host; replayed, the kernels are what is timed
        peers["torch_compile_graphs"] = torch.compile(fn, mode="reduce-overhead")
    ours64 = np.asarray(ours, np.float64)
    for name, peer in list(peers.items()):  # torch.compile compiles here, before any timing
        try:
            for _ in range(3 if name == "torch_compile_graphs" else 1):  # warm-up, recording
                theirs = peer(*args).float().cpu().numpy().astype(np.float64)
        except Exception as e:  # a peer that cannot run is recorded, not the workload lost
            if name != "torch_compile_graphs":
                raise
            dropped[name] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            del peers[name]
            continue
        scale = max(float(np.abs(ours64).max()), 1e-30)
        if float(np.abs(theirs - ours64).max()) / scale > w.peer_tolerance:
            raise IrkitError(f"the {name} peer disagrees with irkit "
                             f"({float(np.abs(theirs - ours64).max()):.3g}); not timed")  # fmt: skip
    bound = exe.bind(*inputs)
    gpu = dev.fingerprint()  # clocks at the start, and at the end below: throttling shows
    fns: dict[str, Any] = {"irkit": bound.timed_graph()}
    if w.passes:  # the unchanged pipeline in the same rounds: what the variant is worth
        default = irkit.compile(module, base_pipeline, backend="cuda")
        fns["irkit_default"] = default.bind(*inputs).timed_graph()
    if w.target == "end_to_end":
        fns["irkit_replay"] = bound.timed_replay()
    for name, peer in peers.items():
        fns[name] = TorchTimed(lambda peer=peer: peer(*args), torch, dev.l2_bytes)
    timings = time_interleaved(fns, budget_s=budget)
    t = timings["irkit"].estimate.median
    flops = sum(k.flops for k in exe.kernels)
    moved = sum(k.min_bytes for k in exe.kernels)
    rec = {
        "kind": "irkit.benchmark", "benchmark": "gpu_targets", "workload": w.name, "dims": dims,
        "pipeline": exe.pipeline, "peers": list(peers), "peer_function": w.peer,
        "kernels": [{"name": k.name, "hash": k.hash, "flops": k.flops, "min_bytes": k.min_bytes,
                     "launch": k.launch, "resources": k.resources} for k in exe.kernels],
        "checks": [c.to_json() for c in checks],
        **{name: timing.to_json() for name, timing in timings.items()},
        **{f"speed_vs_{name}": ratio_ci(timings[name].samples, timings["irkit"].samples).to_json()
           for name in peers},
        "gflops": flops / t / 1e9,
        "copy_bandwidth_bytes_s": copy_bw, "fraction_of_copy_bw": moved / t / copy_bw,
        "protocol": "interleaved randomized rounds, CUDA events, L2 flushed before each call, "
                    "TF32 off, irkit checked against float64 and against each peer first",
        "versions": {"torch": torch.__version__},
        "fingerprint": {**host_fingerprint(), "gpu": {**gpu, "clocks_end": dev.clocks()}},
    }  # fmt: skip
    if dropped:
        rec["peers_dropped"] = dropped
    if "irkit_default" in timings:
        rec["variant_of"] = base_pipeline
        rec["speed_vs_irkit_default"] = ratio_ci(
            timings["irkit_default"].samples, timings["irkit"].samples
        ).to_json()
    if "irkit_replay" in timings:
        rec["speed_replay_vs_launches"] = ratio_ci(
            timings["irkit"].samples, timings["irkit_replay"].samples
        ).to_json()
    fraction_ci = [moved / timings["irkit"].estimate.high / copy_bw,
                   moved / timings["irkit"].estimate.low / copy_bw]  # fmt: skip
    rec["fraction_of_copy_bw_ci"] = fraction_ci
    if not w.targeted:
        rec["target"] = "none: cuBLAS at the same precision, recorded"
        rec["verdict"] = None
    elif w.target in ("cublas", "flash"):
        speed = rec[f"speed_vs_{w.target}"]
        peer = "cuBLAS" if w.target == "cublas" else "SDPA (flash)"
        rec["target"] = f"ladder: {', '.join(f'{r}x' for r in w.rungs)} {peer}"
        rec["rungs"] = list(w.rungs)
        rec["rung"] = max([r for r in w.rungs if speed["ci_low"] >= r], default=None)
        rec["verdict"] = speed["ci_low"] >= w.rungs[0]
    else:
        compiled = [p for p in ("torch_compile", "torch_compile_graphs") if p in peers]
        # the faster torch.compile mode (by median) is the peer the target names
        best = min(compiled, key=lambda p: timings[p].estimate.median, default="torch_eager")
        speed = rec[f"speed_vs_{best}"]
        if w.target == "bandwidth":
            rec["target"] = f">= 80% of copy bandwidth and >= 1.0x {best}"
            rec["verdict"] = rec["fraction_of_copy_bw"] >= 0.8 and speed["ci_low"] >= 1.0
        else:
            rec["target"] = f">= 1.0x {best}"
            rec["verdict"] = speed["ci_low"] >= 1.0
    return rec


def _line(rec: dict) -> str:
    it = rec["irkit"]["seconds"]
    ratios = "  ".join(f"vs {p}: {rec[f'speed_vs_{p}']['median']:.3f}x "
                       f"[{rec[f'speed_vs_{p}']['ci_low']:.3f}, {rec[f'speed_vs_{p}']['ci_high']:.3f}]"
                       for p in rec["peers"])  # fmt: skip
    verdict = {True: "met", False: "NOT MET", None: "-"}[rec["verdict"]]
    if "rung" in rec:  # the ladder's highest rung whose ratio the CI's low end reaches
        lowest = rec.get("rungs", [0.5])[0]
        verdict = f"{rec['rung']}x rung reached" if rec["rung"] else f"NOT MET (below {lowest}x)"
    against_default = ""
    if "speed_vs_irkit_default" in rec:
        d = rec["speed_vs_irkit_default"]
        against_default = (f"  vs the default pipeline: {d['median']:.3f}x "
                           f"[{d['ci_low']:.3f}, {d['ci_high']:.3f}]")  # fmt: skip
    replay = ""
    if "irkit_replay" in rec:
        replay = f"  replay {rec['irkit_replay']['seconds']['median'] * 1e3:.3f} ms"
    return (f"{rec['workload']:24} irkit {it['median'] * 1e3:9.3f} ms{replay}  "
            f"{rec['gflops']:8.1f} GFLOP/s  {rec['fraction_of_copy_bw']:6.1%} of copy BW  {ratios}  "
            f"{rec['target']}: {verdict}{against_default}")  # fmt: skip


def _device_usable(torch: Any) -> bool:
    """Whether the CUDA context still runs work: an illegal address or a trap poisons it for
    every later workload of this process."""
    try:
        return float(torch.ones(8, device="cuda").sum().item()) == 8.0
    except Exception:  # noqa: BLE001 - any failure here means the context is gone
        return False


def main() -> int:
    parser = benchmark_parser(__doc__, "default-cuda")
    parser.add_argument("--no-compile", action="store_true", help="no torch.compile peers")
    parser.add_argument("--only", action="append", default=[], help="a workload (repeatable)")
    parser.add_argument("--progress", type=Path, metavar="FILE",
                        help="write each workload's name into FILE as it starts (a watcher "
                             "that kills a hung run knows which workload hung)")  # fmt: skip
    parser.add_argument("--tile", action="append", default=[], metavar="OPTIONS",
                        help="also time the gemm with gpu-tile-matmul{OPTIONS} (repeatable), "
                             "e.g. --tile block-k=16")  # fmt: skip
    parser.add_argument("--variant", action="append", default=[], metavar="WORKLOAD:PASSES",
                        help="time WORKLOAD with these pass options against its default "
                             "(repeatable; without --only, the variants alone), "
                             "e.g. 'transformer_block:gpu-tile-matmul{min-blocks=2}'")  # fmt: skip
    args = parser.parse_args()
    by_name = {w.name: w for w in WORKLOADS}
    variants = [("gemm", f"gpu-tile-matmul{{{t}}}") for t in args.tile]
    for spec in args.variant:
        name, _, passes = spec.partition(":")
        if name not in by_name or not passes:
            parser.error(f"--variant {spec!r}: expected WORKLOAD:PASSES, WORKLOAD one of "
                         f"{', '.join(by_name)}")  # fmt: skip
        variants.append((name, passes))
    unknown = [n for n in args.only if n not in by_name]
    if unknown:
        parser.error(f"--only {', '.join(unknown)}: no such workload; one of {', '.join(by_name)}")
    tiled = [replace(by_name[n], name=f"{n}[{p}]", passes=";".join(filter(None, [by_name[n].passes, p])))
             for n, p in variants]  # fmt: skip
    try:
        from irkit.runtime.cuda import copy_bandwidth, device

        dev = device()
    except IrkitError as e:
        print(f"gpu_targets: {e}", file=sys.stderr)
        return 1
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # cuBLAS SGEMM, as irkit computes
    torch.backends.cudnn.allow_tf32 = False
    budget = args.budget or (2.0 if args.quick else 20.0)
    copy_bw = copy_bandwidth(dev)
    print(f"device {dev.name}; copy bandwidth {copy_bw / 1e9:.0f} GB/s; torch {torch.__version__}",
          flush=True)  # fmt: skip
    failed = []
    for w in WORKLOADS + tiled:
        if w not in tiled and (w.name not in args.only if args.only else bool(args.variant)):
            continue  # not named; with --variant and no --only, the variants alone run
        if not args.only and (
            w in TENSOR_CORE_LADDER or w in FP8_LADDER or w in ATTENTION_LADDER or w in LLAMA_LADDER
        ):
            continue  # issue 69's steps: by name (gpu_acceptance.sh's tensor_cores step)
        dims = w.quick_dims if args.quick else w.dims
        if args.progress:
            args.progress.write_text(w.name + "\n")
        try:
            rec = measure(w, dims, args.pipeline, budget, torch, dev, copy_bw, not args.no_compile)
        except Exception as e:  # noqa: BLE001 - one workload's failure must not stop the rest
            failed.append(w.name)
            text = e.message if isinstance(e, IrkitError) else f"{type(e).__name__}: {e}"
            print(f"{w.name:18} FAILED: {text}", flush=True)
            rec = {"kind": "irkit.benchmark", "benchmark": "gpu_targets", "workload": w.name,
                   "dims": dims, "error": text, "fingerprint": host_fingerprint()}  # fmt: skip
        else:
            print(_line(rec), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(rec, default=str) + "\n")
        if "error" in rec and not _device_usable(torch):
            print("gpu_targets: the device is unusable after that failure (a sticky CUDA error); "
                  "the workloads after it need a new process (gpu_acceptance.sh starts one)",
                  file=sys.stderr)  # fmt: skip
            return 3
    if failed:
        print(
            f"gpu_targets: {len(failed)} workload(s) failed: {', '.join(failed)}", file=sys.stderr
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
