"""Attention on the CPU (issue 65): irkit against PyTorch's scaled_dot_product_attention and
onnxruntime, at the issue's sizes, one run interleaved, every output checked first.

    python benchmarks/attention.py [--seq 512,1024,2048] [--threads 1] [--out FILE]

Each case is a module computing attention over [1, H=8, S, D=64] queries (keys and values
with 8 heads, or 2: grouped-query attention 8:2), causal or not, exported by torch.onnx
(TorchScript exporter, opset 17: the matmul, scale, mask, softmax, matmul chain, with the
key/value heads repeated for GQA as transformers' models do) and run three ways on the
same inputs: irkit (default-cpu on the export), onnxruntime (the export) and PyTorch eager
(`scaled_dot_product_attention`, `enable_gqa` for grouped heads: its own fused CPU kernel).
Timing is `real_models.py`'s protocol: interleaved rounds, the order rotating, ratio = peer
time / irkit time (> 1: irkit faster) with a 95% bootstrap interval; one thread confines
the process to one CPU. Memory: the bytes one bound irkit program holds (inputs, outputs
and every intermediate buffer, each twice: the driver's arena and the per-kernel timing
plan's buffers; `bound_bytes`), against S: with the S x S scores in memory it grows as
S^2, a fused attention's as S.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads its OpenMP runtime

HEADS, HEAD_DIM = 8, 64


def module(kv_heads: int, causal: bool) -> Any:
    import torch

    group = HEADS // kv_heads

    class Attention(torch.nn.Module):
        def forward(self, q: Any, k: Any, v: Any) -> Any:
            if (
                torch.onnx.is_in_onnx_export()
            ):  # the chain exporters write (transformers' repeat_kv)
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal, enable_gqa=group > 1
            )

    return Attention().eval()


def case(seq: int, kv_heads: int, causal: bool, threads: int, folder: Path) -> dict:
    import torch
    from real_models import time_against_onnxruntime

    import irkit
    from irkit.runtime.backend import bound_bytes

    rng = np.random.default_rng(seq)
    inputs = {
        "q": rng.standard_normal((1, HEADS, seq, HEAD_DIM)).astype(np.float32),
        "k": rng.standard_normal((1, kv_heads, seq, HEAD_DIM)).astype(np.float32),
        "v": rng.standard_normal((1, kv_heads, seq, HEAD_DIM)).astype(np.float32),
    }
    path = folder / f"attention_{seq}_{kv_heads}_{int(causal)}.onnx"
    model = module(kv_heads, causal)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = tuple(torch.from_numpy(a) for a in inputs.values())
        torch.onnx.export(model, args, str(path), input_names=list(inputs), output_names=["out"],
                          opset_version=17, dynamo=False)  # fmt: skip
    exe = irkit.compile(irkit.load(str(path)), backend="cpu")
    record = {"seq": seq, "heads": HEADS, "kv_heads": kv_heads, "head_dim": HEAD_DIM,
              "causal": causal, "irkit_bound_bytes": bound_bytes(exe), "kernels": len(exe.kernels)}  # fmt: skip
    record.update(time_against_onnxruntime(path, inputs, threads, torch_model=model))
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", default="512,1024,2048")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    from irkit.measure.fingerprint import host_fingerprint

    header = {"kind": "run", "benchmark": "attention", "fingerprint": host_fingerprint(),
              "threads": args.threads}  # fmt: skip
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for seq in [int(s) for s in args.seq.split(",")]:
            for kv_heads, causal in ((HEADS, False), (HEADS, True), (2, True)):
                r = case(seq, kv_heads, causal, args.threads, Path(tmp))
                records.append(r)
                t = args.threads
                print(f"S={seq:5d} {'GQA 8:2' if kv_heads != HEADS else 'MHA    '} "
                      f"{'causal' if causal else 'full  '}  irkit {r[f'irkit_ms_{t}t']:8.2f} ms  "
                      f"{r[f'speed_vs_torch_{t}t']:.2f}x PyTorch SDPA "
                      f"[{r[f'speed_ci_torch_{t}t'][0]:.2f}, {r[f'speed_ci_torch_{t}t'][1]:.2f}]  "
                      f"{r[f'speed_vs_ort_{t}t']:.2f}x onnxruntime  "
                      f"memory {r['irkit_bound_bytes'] / 2**20:7.1f} MiB", flush=True)  # fmt: skip
    if args.out:
        from irkit.measure.records import append_record

        for r in [header, *records]:
            append_record(args.out, r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
