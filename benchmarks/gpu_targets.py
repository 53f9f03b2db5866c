"""The optimized CUDA pipeline against cuBLAS and PyTorch eager, at issue 7's target sizes.

    python benchmarks/gpu_targets.py [--quick] [-p default-cuda] [--out benchmarks/results/gpu_targets.jsonl]

NOT YET RUN ON A GPU: no device has been lent to this work so far. Written to be the first
thing a session with one runs; with no device it says so in one line and exits 1.

Workloads (fp32, plain CUDA C from irkit; peers in the same process, on the same device):

- gemm 4096^3 against `torch.matmul` with TF32 off (cuBLAS SGEMM): target >= 0.5x cuBLAS's
  speed for the default pipeline (warp-tiled); and the same gemm with
  `gpu-tile-matmul{warp-tile=false}` (threads strided over the block tile, word reads of
  shared memory), so the run shows what warp tiling is worth;
- bias + GELU on 4096 x 4096 (64 MB), softmax over 4096 x 4096 rows, layer_norm over
  16384 x 1024: targets >= 80% of the device's measured copy bandwidth, and faster than
  PyTorch eager.

Protocol: each irkit variant is first checked against the float64 reference (never timed if
wrong) and against the peer's output; then both are timed in interleaved, randomly ordered
rounds, one sample per round each, with CUDA events around back-to-back calls after an L2
flush (2x the L2 size). Printed: medians with 95% CIs, the speed ratio paired by
round, GFLOP/s, and the fraction of copy bandwidth (bytes each kernel must move / time /
measured device-to-device copy bandwidth).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_baseline import benchmark_parser  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

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
    peer: str  # a torch expression over the inputs a0, a1, ...
    target: str  # "cublas" (ratio >= 0.5) or "bandwidth" (>= 80% copy BW, faster than eager)
    tile_options: str = ""  # gpu-tile-matmul's options in this variant of the pipeline


WORKLOADS = [
    Workload("gemm", "examples/gemm.graph", {"M": 4096, "N": 4096, "K": 4096},
             {"M": 512, "N": 512, "K": 512}, "torch.matmul(a0, a1)", "cublas"),
    Workload("gemm_strided", "examples/gemm.graph", {"M": 4096, "N": 4096, "K": 4096},
             {"M": 512, "N": 512, "K": 512}, "torch.matmul(a0, a1)", "cublas",
             "warp-tile=false"),
    Workload("bias_gelu", BIAS_GELU, {"N": 4096, "D": 4096}, {"N": 512, "D": 512},
             "torch.nn.functional.gelu(a0 + a1)", "bandwidth"),
    Workload("softmax", "examples/softmax.graph", {"R": 4096, "C": 4096}, {"R": 512, "C": 512},
             "torch.softmax(a0, dim=-1)", "bandwidth"),
    Workload("layernorm", "examples/layernorm.graph", {"T": 16384, "H": 1024},
             {"T": 1024, "H": 1024}, "torch.nn.functional.layer_norm(a0, a0.shape[-1:], a1, a2)",
             "bandwidth"),
]  # fmt: skip


class TorchTimed:
    """A torch callable with the `sample(reps)` interface irkit's timers use: CUDA events on
    torch's stream around `reps` calls, after overwriting a buffer twice the L2's size."""

    timer = "cuda_events (torch stream, L2 flushed before each sample)"

    def __init__(self, fn: Any, torch: Any, l2_bytes: int):
        self.fn, self.torch = fn, torch
        self.flush = torch.empty(max(2 * l2_bytes, 1 << 20), dtype=torch.uint8, device="cuda")
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def __call__(self) -> None:
        self.fn()
        self.torch.cuda.synchronize()

    def sample(self, reps: int) -> float:
        self.flush.zero_()
        self.start.record()
        for _ in range(reps):
            self.fn()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e-3 / reps


def load(w: Workload, dims: dict[str, int]):
    if w.source.endswith(".graph"):
        return irkit.load(ROOT / w.source, dims)
    return parse_source(w.source, f"{w.name}.graph", ".graph", dims)


def variant(pipeline: str, w: Workload) -> str:
    """The pipeline as a pass list, with gpu-tile-matmul given the workload's options."""
    if not w.tile_options:
        return pipeline
    steps = [s.spec for s in pipeline_steps(pipeline)]
    if "gpu-tile-matmul" not in steps:
        raise SystemExit(f"{w.name}: the pipeline has no gpu-tile-matmul to give {w.tile_options}")
    return ",".join(
        f"gpu-tile-matmul{{{w.tile_options}}}" if s == "gpu-tile-matmul" else s for s in steps
    )


def measure(w: Workload, dims, pipeline: str, budget: float, torch, dev, copy_bw: float) -> dict:
    module = load(w, dims)
    pipeline = variant(pipeline, w)
    exe = irkit.compile(module, pipeline, backend="cuda")
    checks, inputs = check(exe, module, seed=0)
    if not all(c.passed for c in checks):
        raise SystemExit(f"{w.name}: irkit's result is wrong; not timed: "
                         f"{[c.describe() for c in checks]}")  # fmt: skip
    ours = exe(*inputs)[0]
    args = {f"a{i}": torch.from_numpy(np.ascontiguousarray(a)).cuda() for i, a in enumerate(inputs)}
    peer = eval(f"lambda: {w.peer}", {"torch": torch, **args})  # noqa: S307 (fixed strings above)
    theirs = peer().cpu().numpy()
    if not np.allclose(theirs, ours, rtol=1e-3, atol=1e-3):
        raise SystemExit(f"{w.name}: the torch peer disagrees with irkit; not timed")
    bound = exe.bind(*inputs)
    peer_name = "cublas" if w.target == "cublas" else "torch_eager"
    gpu = dev.fingerprint()  # clocks at the start, and at the end below: throttling shows
    timings = time_interleaved(
        {"irkit": bound.timed_graph(), peer_name: TorchTimed(peer, torch, dev.l2_bytes)},
        budget_s=budget,
    )
    speed = ratio_ci(timings[peer_name].samples, timings["irkit"].samples)
    t = timings["irkit"].estimate.median
    flops = sum(k.flops for k in exe.kernels)
    moved = sum(k.min_bytes for k in exe.kernels)
    rec = {
        "kind": "irkit.benchmark", "benchmark": "gpu_targets", "workload": w.name, "dims": dims,
        "pipeline": exe.pipeline, "peer": peer_name, "peer_expr": w.peer,
        "kernels": [{"name": k.name, "hash": k.hash, "flops": k.flops, "min_bytes": k.min_bytes,
                     "launch": k.launch, "resources": k.resources} for k in exe.kernels],
        "checks": [c.to_json() for c in checks],
        "irkit": timings["irkit"].to_json(), peer_name: timings[peer_name].to_json(),
        "speed_vs_peer": speed.to_json(), "gflops": flops / t / 1e9,
        "copy_bandwidth_bytes_s": copy_bw, "fraction_of_copy_bw": moved / t / copy_bw,
        "protocol": "interleaved randomized rounds, CUDA events, L2 flushed before each sample, "
                    "TF32 off, irkit checked against float64 and against the peer first",
        "fingerprint": {**host_fingerprint(), "gpu": {**gpu, "clocks_end": dev.clocks()}},
    }  # fmt: skip
    if w.target == "cublas":
        rec["target"] = ">= 0.5x cuBLAS"
        rec["verdict"] = speed.low >= 0.5
    else:
        rec["target"] = ">= 80% of copy bandwidth and faster than PyTorch eager"
        rec["verdict"] = rec["fraction_of_copy_bw"] >= 0.8 and speed.low > 1.0
    return rec


def main() -> int:
    args = benchmark_parser(__doc__, "default-cuda").parse_args()
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
    print(f"device {dev.name}; copy bandwidth {copy_bw / 1e9:.0f} GB/s")
    for w in WORKLOADS:
        dims = w.quick_dims if args.quick else w.dims
        rec = measure(w, dims, args.pipeline, budget, torch, dev, copy_bw)
        sp, it = rec["speed_vs_peer"], rec["irkit"]["seconds"]
        print(f"{w.name:10} irkit {it['median'] * 1e3:9.3f} ms  {rec['gflops']:8.1f} GFLOP/s  "
              f"{rec['fraction_of_copy_bw']:6.1%} of copy BW  vs {rec['peer']}: "
              f"{sp['median']:.3f}x [{sp['ci_low']:.3f}, {sp['ci_high']:.3f}]  "
              f"{rec['target']}: {'met' if rec['verdict'] else 'NOT MET'}")  # fmt: skip
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(rec, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
