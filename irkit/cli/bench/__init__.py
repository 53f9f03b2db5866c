"""irkit-bench: run, measure, attribute, compare and report.

    irkit-bench run FILE [-p PIPELINE] [--backend BACKEND] [--dim N=V] [--json OUT]
    irkit-bench attribute [FILE] [-p PIPELINE] [--backend BACKEND[,BACKEND...]] [--strategy S]
    irkit-bench suite | compare | bisect | tune | advise | report | history | nightly | dashboard ...
    irkit-bench reference FILE [--dim NAME=VALUE ...] [--seed N]

`run` compiles a model, checks every output against the float64 reference on fresh random
inputs, and only then times the whole graph and each kernel (median with a 95% bootstrap
CI), with GFLOP/s and GB/s from each kernel's static FLOPs and minimum bytes. A wrong result
is reported as such, never timed, and exits 1. `attribute` measures what each optional
pass buys (on two backends at once with `--backend cpu,cuda-host`, pass by pass where the
effects agree). `reference` evaluates a model with the numpy reference and summarises each
output.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from irkit.cli.bench import (
    advise,
    attribute,
    bisect,
    compare,
    dashboard,
    history,
    nightly,
    reference,
    replay,
    report,
    run,
    snapshot,
    suite,
    tune,
)
from irkit.cli.bench.options import default_model
from irkit.cli.common import OneLineArgumentParser, add_plugin_option, run_main

COMMANDS = (
    reference,
    run,
    attribute,
    suite,
    compare,
    bisect,
    tune,
    advise,
    snapshot,
    replay,
    report,
    history,
    nightly,
    dashboard,
)
"""One module a command, each with `add_parser(subparsers)` and `run(args) -> int`."""

__all__ = ["COMMANDS", "default_model", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="irkit-bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=OneLineArgumentParser
    )
    commands = {}
    for module in COMMANDS:
        p = module.add_parser(sub)
        add_plugin_option(p, "; IRKIT_PLUGINS lists more")
        commands[p.prog.split()[-1]] = module.run
    args = parser.parse_args(argv)

    def body() -> int | None:
        from irkit.plugins import load_plugins

        load_plugins(args.plugin)
        return commands[args.command](args)

    return run_main("irkit-bench", body)


if __name__ == "__main__":
    sys.exit(main())
