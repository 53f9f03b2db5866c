"""irkit-bench: run, measure, attribute, compare and report.

    irkit-bench reference FILE [--dim NAME=VALUE ...] [--seed N]

`reference` evaluates a model with the numpy reference on fresh random inputs and
summarises each output. (run, attribute, suite, compare and report arrive with the CPU
backend and the measurement engine.)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

import numpy as np

from irkit.cli.common import OneLineArgumentParser, parse_dim, run_main


def _reference(args) -> None:
    from rich.console import Console
    from rich.table import Table

    import irkit
    from irkit.ir import entry_function

    module = irkit.load(args.file, dict(args.dim))
    inputs = irkit.random_inputs(module, seed=args.seed)
    start = time.perf_counter()
    outputs = irkit.reference(module, *inputs)
    seconds = time.perf_counter() - start
    fn = entry_function(module)
    names = [d.data.get("irkit.name") for d in (fn.res_attrs.data if fn.res_attrs else [])]
    table = Table(title=f"{args.file}: numpy reference (float64), inputs seed {args.seed}")
    for col in ("output", "shape", "min", "max", "mean", "finite"):
        table.add_column(col, justify="left" if col in ("output", "shape") else "right")
    for i, out in enumerate(outputs):
        name = names[i].data if i < len(names) and names[i] is not None else f"#{i}"
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="irkit-bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=OneLineArgumentParser
    )
    ref = sub.add_parser(
        "reference", help="evaluate a model with the numpy reference on random inputs"
    )
    ref.add_argument("file", help="a .graph or .mlir model")
    ref.add_argument("--dim", action="append", default=[], type=parse_dim, metavar="NAME=VALUE")
    ref.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    return run_main("irkit-bench", lambda: _reference(args))


if __name__ == "__main__":
    sys.exit(main())
