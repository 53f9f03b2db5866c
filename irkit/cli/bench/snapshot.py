"""irkit-bench snapshot: keep one kernel's code, launch and real data for replay."""

from __future__ import annotations

import argparse

from irkit.cli.common import (
    check_output,
    dtype_option,
    parse_dim,
    seed,
)


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("snapshot", help="keep one kernel's code, launch and real data for replay")
    p.add_argument("file", help="a .graph, .mlir or .onnx model")
    p.add_argument("--kernel", required=True, help="the kernel's name, as `run` lists it")
    p.add_argument("-o", "--output", required=True, metavar="K.snap")
    p.add_argument(
        "-p",
        "--passes",
        default=None,
        metavar="PIPELINE",
        help="pipeline (default: the backend's own)",
    )
    p.add_argument("--backend", default="cpu", help="cpu (default), cuda-sim or cuda-host")
    p.add_argument("--dim", action="append", default=[], type=parse_dim, metavar="NAME=VALUE")
    p.add_argument("--seed", type=seed, default=0, help="seed of the model's random inputs")
    dtype_option(p)
    return p


def run(args) -> int:
    from irkit.measure.snapshot import take_snapshot

    check_output(args.output, [args.file], "-o", "snapshot")
    snap = take_snapshot(
        args.file,
        args.kernel,
        args.passes,
        args.backend,
        dict(args.dim) or None,
        args.seed,
        args.dtype,
    )
    snap.save(args.output)
    meta = snap.meta
    written = sum(a["written"] for a in meta["arguments"])
    size = sum(a.nbytes for a in [*snap.before, *snap.after])
    print(
        f"{meta['kernel']} ({meta['backend']}, code {meta['hash']}): {len(meta['arguments'])} "
        f"arguments ({written} written), {size / 2**20:.1f} MiB of data before and after its call; "
        f"written to {args.output}"
    )
    return 0
