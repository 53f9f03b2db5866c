"""The unoptimized CPU lowering against numpy, single-threaded, measured in the same run.

    python benchmarks/cpu_baseline.py [--quick] [--out benchmarks/results/cpu_baseline.jsonl]

Workloads: examples/elementwise_chain.graph and examples/gemm.graph at sizes where irkit's
baseline takes tens of milliseconds. Each irkit variant is first checked against the float64
reference; then irkit and the numpy peer (the same computation written in numpy, float32)
are timed in interleaved rounds on the same inputs. Reported: each median with a 95%
CI, and the speed ratio numpy_time / irkit_time paired by round (> 1 means irkit
is faster). No target is set for the baseline; the optimization passes set them.
"""

from __future__ import annotations

import os
import sys


def _threads_option(argv: list[str]) -> int:
    """`--threads N` (default 1), read before numpy's import, which fixes OpenBLAS's pool."""
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--threads=") else None
        if arg == "--threads" and i + 1 < len(argv):
            value = argv[i + 1]
        if value is not None:
            if not value.isdigit() or int(value) < 1:
                raise SystemExit(f"--threads must be a positive integer, not {value!r}")
            return int(value)
    return 1


THREADS = _threads_option(sys.argv)


def _pin(threads: int) -> list[int]:
    """Confine the process to `threads` of its CPUs (the first ones it may run on), so that
    no library can use more cores than the protocol says: XLA's YNNPACK dots ran on two
    threads under `--xla_cpu_multi_thread_eigen=false` (1.3 cores on gemm, 0.80x "one
    thread" irkit, 1.05x once confined). Thread pools sized from the affinity mask size
    themselves to it. Returns the CPUs the process runs on."""
    allowed = sorted(os.sched_getaffinity(0))
    if threads < len(allowed):
        os.sched_setaffinity(0, allowed[:threads])
    return sorted(os.sched_getaffinity(0))


CPUS = _pin(THREADS)
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "IRKIT_NUM_THREADS"):
    os.environ[var] = str(THREADS)  # irkit and numpy alike; must precede numpy's import
# OpenBLAS's workers spin for ~2^28 cycles after a call before they sleep: interleaved with
# irkit's threads on the same cores, they halved irkit's speed (measured: 2-thread gemm 1024^3
# 10.1 ms alone, 19.3 ms right after a numpy call). 2^4 cycles: they sleep at once.
os.environ["OPENBLAS_THREAD_TIMEOUT"] = "4"

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import irkit  # noqa: E402
from irkit.measure.fingerprint import host_fingerprint  # noqa: E402
from irkit.measure.stats import ratio_ci  # noqa: E402
from irkit.measure.timers import time_interleaved  # noqa: E402
from irkit.runtime.check import check  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def elementwise_peer(x, y, bias):
    t = (x + bias) * y
    t = np.maximum(t, np.float32(0)) - x
    return np.float32(1) / (np.float32(1) + np.exp(-t)) * np.float32(2)


def conv_block_peer(x, w, scale, shift, mean, var):
    """examples/conv_block.graph the way a numpy user writes a convolution: im2col through
    a strided window view (one copy), one OpenBLAS matmul, then the batch norm, relu and the
    2x2 max pool on the NHWC result (3x3 kernel, stride 1, padding 1)."""
    n, c, h, wd = x.shape
    k = w.shape[0]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # n c h w 3 3
    cols = windows.transpose(0, 2, 3, 4, 5, 1).reshape(n * h * wd, 9 * c)
    y = cols @ w.transpose(2, 3, 1, 0).reshape(9 * c, k)
    factor = scale / np.sqrt(var + np.float32(1e-5))
    y = np.maximum((y - mean) * factor + shift, np.float32(0)).reshape(n, h // 2, 2, wd // 2, 2, k)
    return y.max(axis=(2, 4)).transpose(0, 3, 1, 2)


WORKLOADS = {
    # name: (model, dims, quick dims, numpy peer)
    "elementwise_chain": ("examples/elementwise_chain.graph", {"N": 4096, "D": 2048},
                          {"N": 512, "D": 512}, elementwise_peer),
    "gemm": ("examples/gemm.graph", {"M": 384, "N": 384, "K": 384},
             {"M": 128, "N": 128, "K": 128}, lambda a, b: a @ b),
}  # fmt: skip


def measure(name: str, quick: bool, pipeline: str, budget: float) -> dict:
    path, dims, quick_dims, peer = WORKLOADS[name]
    return measure_against_numpy(
        "cpu_baseline", name, path, quick_dims if quick else dims, peer, pipeline, budget
    )


def measure_against_numpy(
    benchmark: str, name: str, path: str, dims: dict, peer, pipeline: str, budget: float
) -> dict:
    """Check irkit's compiled model against the float64 reference (refusing to time a wrong
    result), check the numpy peer against irkit, then time both in interleaved rounds."""
    module = irkit.load(ROOT / path, dims)
    exe = irkit.compile(module, pipeline, backend="cpu")
    checks, inputs = check(exe, module, seed=0)
    if not all(c.passed for c in checks):
        raise SystemExit(
            f"{name}: irkit's result is wrong; not timed: {[c.describe() for c in checks]}"
        )
    peer_out = peer(*inputs)
    assert np.allclose(peer_out, exe(*inputs)[0], rtol=1e-3, atol=1e-4), f"{name}: peer disagrees"
    bound = exe.bind(*inputs)
    timings = time_interleaved(
        {"irkit": bound.run_graph, "numpy": lambda: peer(*inputs)}, budget_s=budget
    )
    speed = ratio_ci(timings["numpy"].samples, timings["irkit"].samples)
    return {
        "kind": "irkit.benchmark", "benchmark": benchmark, "workload": name, "dims": dims,
        "pipeline": exe.pipeline, "kernels": [{"name": k.name, "hash": k.hash, "flops": k.flops,
                                               "min_bytes": k.min_bytes} for k in exe.kernels],
        "checks": [c.to_json() for c in checks],
        "irkit": timings["irkit"].to_json(), "numpy": timings["numpy"].to_json(),
        "speedup_vs_numpy": speed.to_json(),
        **thread_record(timings),
        "threads": THREADS, "kernel_threads": [(k.launch or {}).get("threads", 1)
                                                for k in exe.kernels],
        "protocol": f"interleaved randomized rounds, perf_counter_ns, warm caches, {THREADS} "
                    "thread(s) for irkit (IRKIT_NUM_THREADS) and numpy's OpenBLAS alike, the "
                    "process confined to as many CPUs (cpus), "
                    "OpenBLAS workers sleeping after each call (OPENBLAS_THREAD_TIMEOUT=4), same "
                    "inputs, irkit checked against float64 first",
        "numpy_blas": _blas(), "fingerprint": host_fingerprint(),
    }  # fmt: skip


def cores_used(timings: dict) -> dict[str, float]:
    """Each timed function's cores in use while it ran (the process's CPU time over the
    wall time, the median over samples), rounded, where it has CPU times."""
    return {name: round(t.cpu_over_wall, 2) for name, t in timings.items()
            if t.cpu_over_wall is not None}  # fmt: skip


def thread_record(timings: dict) -> dict:
    """The record's evidence that every side ran on the protocol's thread count: the CPUs
    the process was confined to, each function's cores in use, and those over THREADS.
    A side can use more than THREADS cores only where the process may run on more CPUs
    than that (`_pin` could not confine it); confined, a reading above THREADS is the two
    clocks' skew on a loaded machine (torch read 1.2 on one CPU), kept in `cores_used` but
    not flagged."""
    cores = cores_used(timings)
    could = len(CPUS) > THREADS
    over = sorted(name for name, used in cores.items() if could and used > THREADS * 1.1)
    return {"cpus": CPUS, "cores_used": cores, "over_threads": over}


def thread_note(rec: dict) -> str:
    """A table line's warning where a side used more cores than the protocol's THREADS
    (10% slack for the timer's own bookkeeping): that comparison is not the one claimed."""
    over = rec.get("over_threads") or []
    used = rec.get("cores_used", {})
    return "".join(f"  (!) {name} used {used[name]:.2f} cores" for name in over)


def _blas() -> str:
    try:
        info = np.show_config(mode="dicts")["Build Dependencies"]["blas"]  # type: ignore[index]
        return f"{info.get('name')} {info.get('version')}"
    except Exception:  # show_config's shape varies across numpy versions
        return "unknown"


def benchmark_parser(doc: str, pipeline: str) -> argparse.ArgumentParser:
    """The options every benchmark script here takes."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, short budget")
    parser.add_argument("-p", "--pipeline", default=pipeline)
    parser.add_argument("--budget", type=float, default=None, help="seconds per workload")
    parser.add_argument("--out", default=None, help="append records to this JSON Lines file")
    parser.add_argument(
        "--threads", type=int, default=1,
        help="threads for irkit (IRKIT_NUM_THREADS) and for numpy's OpenBLAS alike (default 1)",
    )  # fmt: skip
    return parser


def main() -> int:
    args = benchmark_parser(__doc__, "baseline-cpu").parse_args()
    budget = args.budget or (2.0 if args.quick else 20.0)
    print(f"{'workload':20} {'irkit (median, 95% CI)':>28} {'numpy':>28} {'numpy/irkit':>22}")
    for name in WORKLOADS:
        rec = measure(name, args.quick, args.pipeline, budget)
        it, npy, sp = rec["irkit"]["seconds"], rec["numpy"]["seconds"], rec["speedup_vs_numpy"]
        print(f"{name:20} {_ms(it):>28} {_ms(npy):>28} "
              f"{sp['median']:6.3f}x [{sp['ci_low']:.3f}, {sp['ci_high']:.3f}]"
              f"{thread_note(rec)}")  # fmt: skip
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
    print(
        f"host {host_fingerprint()['cpu']}; {THREADS} thread(s) on CPUs {CPUS}; "
        f"pipeline {args.pipeline}; numpy/irkit > 1 means irkit is faster"
    )
    return 0


def _ms(s: dict) -> str:
    return f"{s['median'] * 1e3:.3f} ms [{s['ci_low'] * 1e3:.3f}, {s['ci_high'] * 1e3:.3f}]"


if __name__ == "__main__":
    sys.exit(main())
