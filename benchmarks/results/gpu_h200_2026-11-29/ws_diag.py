"""Which warp-specialized gemms are wrong on the device, and where (one-off diagnosis)."""

import time

import numpy as np

import irkit
from irkit.frontend import parse_source
from irkit.runtime.reference import random_inputs

GEMM = "model g\ninput a : f16[{m}, {k}]\ninput b : f16[{k}, {n}]\noutput c = matmul(a, b)\n"
WS = "wgmma=true tma=true warp-specialize=true"
cases = [
    ((4096, 4096, 4096), WS),
    ((4096, 4096, 4096), WS + " stages=2"),
    ((4096, 4096, 4096), WS + " persistent=true"),
    ((4096, 4096, 4096), WS + " persistent=true group-m=8"),
    ((4096, 4096, 4096), WS + " block-m=64"),
    ((8192, 8192, 8192), WS + " persistent=true group-m=8"),
    ((4096, 4096, 64), WS),
]
for (m, n, k), opts in cases:
    t0 = time.time()
    try:
        mod = parse_source(GEMM.format(m=m, n=n, k=k), "g.graph", ".graph")
        exe = irkit.compile(
            mod,
            f"fuse-kernels,lower-graph-to-loops,gpu-tile-matmul{{{opts} fill-sms=false}},map-to-gpu",
            backend="cuda",
        )
        a, b = random_inputs(mod, 0)
        ref = a.astype(np.float32) @ b.astype(np.float32)
        bad_sets = []
        for _rep in range(2):
            c = np.asarray(exe(a, b)[0], np.float32)
            bad = np.abs(c - ref) > 0.05 + 0.01 * np.abs(ref)
            bad_sets.append(bad)
        bad = bad_sets[0]
        tm, tn = 128, 128
        tiles = (
            bad[: m // tm * tm, : n // tn * tn].reshape(m // tm, tm, n // tn, tn).any(axis=(1, 3))
        )
        rows = bad.reshape(-1, 128, n).any(axis=(0, 2)) if m % 128 == 0 else np.zeros(128, bool)
        wrong_rows = np.flatnonzero(rows)
        print(
            f"{m}x{n}x{k} {{{opts}}}: {bad.sum()} wrong ({bad.mean():.2%}), run2 {bad_sets[1].sum()}, "
            f"same set {np.array_equal(bad_sets[0], bad_sets[1])}; tiles wrong {tiles.sum()}/{tiles.size}; "
            f"rows-in-tile wrong {wrong_rows[:8].tolist()}..{len(wrong_rows)}; first tiles {np.argwhere(tiles)[:6].tolist()} "
            f"({time.time() - t0:.1f} s)",
            flush=True,
        )
        if bad.any():
            i, j = np.argwhere(bad)[0]
            print(f"   first wrong c[{i},{j}] = {c[i, j]:.3f}, ref {ref[i, j]:.3f}", flush=True)
    except Exception as e:
        print(f"{m}x{n}x{k} {{{opts}}}: ERROR {type(e).__name__}: {str(e)[:300]}", flush=True)
