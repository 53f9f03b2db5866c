"""The optimized CPU pipeline against numpy at the sizes issue 7 sets targets for.

    python benchmarks/cpu_targets.py [--quick] [-p default-cpu] [--threads 1] [--out benchmarks/results/cpu_targets.jsonl]

One thread by default (the targets are single-threaded), fp32; `--threads N` gives irkit
(IRKIT_NUM_THREADS, what `cpu-parallelize` uses) and numpy's OpenBLAS N threads each.
Targets (numpy_time / irkit_time, paired by round, > 1: irkit faster):

- gemm 1024^3 at >= 1.0x numpy's matmul (OpenBLAS, single-threaded);
- elementwise_chain (6 ops) at 4096 x 2048 at >= 2.0x numpy (numpy makes one pass over
  memory per op; the fused kernel makes one in all).

Also measured, with no target: conv_block (conv 3x3 + batch norm + relu + max pool, NCHW,
ResNet's first stage at batch 8: 64 -> 64 channels, 56 x 56) against numpy's im2col
route (a window view copied to a matrix, one OpenBLAS matmul, the epilogue and pool).

Each variant is checked against the float64 reference before it is timed (a wrong result is
never timed), then irkit and numpy run in interleaved, randomly ordered rounds on the same
inputs. Printed: medians with 95% CIs, the ratio with its CI, GFLOP/s, and whether
the target is met by the ratio's lower CI bound ("met"), by its median only ("median"),
or not at all. `--baseline` adds the same workloads under baseline-cpu for the pass's worth.
"""

from __future__ import annotations

import json
import sys

from cpu_baseline import (  # sets the thread counts before numpy's import
    CPUS,
    THREADS,
    _ms,
    benchmark_parser,
    conv_block_peer,
    elementwise_peer,
    measure_against_numpy,
    thread_note,
)

from irkit.measure.fingerprint import host_fingerprint  # noqa: E402

TARGETS = {
    # name: (model, dims, quick dims, numpy peer, target ratio)
    "gemm": ("examples/gemm.graph", {"M": 1024, "N": 1024, "K": 1024},
             {"M": 256, "N": 256, "K": 256}, lambda a, b: a @ b, 1.0),
    "elementwise_chain": ("examples/elementwise_chain.graph", {"N": 4096, "D": 2048},
                          {"N": 512, "D": 512}, elementwise_peer, 2.0),
    # no issue target: conv-layout + conv-to-matmul against numpy's im2col route
    "conv_block": ("examples/conv_block.graph", {"N": 8, "C": 64, "K": 64, "H": 56},
                   {"N": 1, "C": 16, "K": 32, "H": 16}, conv_block_peer, None),
}  # fmt: skip


def verdict(ratio: dict, target: float | None) -> str:
    if target is None:
        return "no target"
    if ratio["ci_low"] >= target:
        return "met"
    return "median" if ratio["median"] >= target else "NOT MET"


def main() -> int:
    parser = benchmark_parser(__doc__, "default-cpu")
    parser.add_argument("--baseline", action="store_true", help="also time baseline-cpu")
    args = parser.parse_args()
    budget = args.budget or (2.0 if args.quick else 20.0)
    pipelines = [args.pipeline] + (["baseline-cpu"] if args.baseline else [])
    print(
        f"{'workload':18} {'pipeline':13} {'irkit (median, 95% CI)':>28} {'numpy':>28} "
        f"{'numpy/irkit':>22} {'GFLOP/s':>8}  target"
    )
    for name, (path, dims, quick_dims, peer, target) in TARGETS.items():
        for pipeline in pipelines:
            rec = measure_against_numpy(
                "cpu_targets", name, path, quick_dims if args.quick else dims, peer, pipeline,
                budget,
            )  # fmt: skip
            rec["target_ratio"] = target
            rec["verdict"] = verdict(rec["speedup_vs_numpy"], target)
            it, npy, sp = rec["irkit"]["seconds"], rec["numpy"]["seconds"], rec["speedup_vs_numpy"]
            gflops = sum(k["flops"] for k in rec["kernels"]) / it["median"] / 1e9
            print(
                f"{name:18} {pipeline:13} {_ms(it):>28} {_ms(npy):>28} "
                f"{sp['median']:6.3f}x [{sp['ci_low']:.3f}, {sp['ci_high']:.3f}] {gflops:8.1f}  "
                f"{f'>= {target}x: ' if target else ''}"
                f"{rec['verdict'] if pipeline == args.pipeline else '-'}{thread_note(rec)}"
            )
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(rec) + "\n")
    fp = host_fingerprint()
    print(
        f"host {fp['cpu']}; {THREADS} thread(s) each on CPUs {CPUS}; numpy/irkit > 1 means irkit is faster"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
