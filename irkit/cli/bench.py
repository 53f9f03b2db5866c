"""irkit-bench: run, measure, attribute, compare and report. (Subcommands arrive with the
CPU backend and the measurement engine; see the README.)"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from irkit.cli.common import OneLineArgumentParser, run_main


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="irkit-bench", description=__doc__.splitlines()[0])
    parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    args = parser.parse_args(argv)
    return run_main("irkit-bench", lambda: parser.error(f"unknown command {args.command}"))


if __name__ == "__main__":
    sys.exit(main())
