"""irkit-bench reference: evaluate a model with the numpy reference and summarise each output."""

from __future__ import annotations

import argparse
import time

import numpy as np

from irkit.cli.common import (
    dtype_option,
    parse_dim,
    seed,
)


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "reference", help="evaluate a model with the numpy reference on random inputs"
    )
    p.add_argument("file", help="a .graph or .mlir model")
    p.add_argument("--dim", action="append", default=[], type=parse_dim, metavar="NAME=VALUE")
    dtype_option(p)
    p.add_argument("--seed", type=seed, default=0)
    return p


def run(args) -> None:
    from rich.console import Console
    from rich.table import Table
    from xdsl.dialects.builtin import StringAttr

    import irkit
    from irkit.ir import entry_function

    module = irkit.load(args.file, dict(args.dim), args.dtype)
    inputs = irkit.random_inputs(module, seed=args.seed)
    start = time.perf_counter()
    outputs = irkit.reference(module, *inputs)
    seconds = time.perf_counter() - start
    fn = entry_function(module)
    given = [d.data.get("irkit.name") for d in (fn.res_attrs.data if fn.res_attrs else [])]
    names = [n if isinstance(n, StringAttr) else None for n in given]
    as_dtype = f" as {args.dtype}" if args.dtype else ""
    table = Table(
        title=f"{args.file}{as_dtype}: numpy reference (float64), inputs seed {args.seed}"
    )
    for col in ("output", "shape", "min", "max", "mean", "finite"):
        table.add_column(col, justify="left" if col in ("output", "shape") else "right")
    for i, out in enumerate(outputs):
        named = names[i] if i < len(names) else None
        name = named.data if named is not None else f"#{i}"
        finite = bool(np.isfinite(out).all())
        table.add_row(
            name,
            str(list(out.shape)),
            f"{out.min():.4g}",
            f"{out.max():.4g}",
            f"{out.mean():.4g}",
            "yes" if finite else "NO",
        )
    console = Console()
    console.print(table)
    console.print(
        f"{len(fn.body.block.ops) - 1} graph ops evaluated in {seconds * 1e3:.1f} ms (wall, one run; not a benchmark)"
    )
