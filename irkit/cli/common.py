"""What every irkit command shares: one-line errors, exit codes, argument parsing.

Exit codes: 0 success; 1 a user error (bad file, option, shape, pass failure); 2 a
command-line usage error; 70 an internal error (a bug in irkit: please report it).
No Python traceback reaches the user unless IRKIT_DEBUG is set.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from irkit.errors import IrkitError, one_line

EXIT_USER, EXIT_USAGE, EXIT_INTERNAL = 1, 2, 70


def debug_level() -> int:
    try:
        return int(os.environ.get("IRKIT_DEBUG", "0") or 0)
    except ValueError:
        return 1


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def parse_dim(text: str) -> tuple[str, int]:
    """`B=4096` -> ('B', 4096), for `--dim`."""
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        size = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"dim {name} needs an integer value, got {value!r}"
        ) from None
    if size <= 0:
        raise argparse.ArgumentTypeError(f"dim {name} must be positive, got {size}")
    return name, size


def run_main(prog: str, body: Callable[[], int | None]) -> int:
    """Run a command's body, turning every failure into one line and an exit code."""
    try:
        return body() or 0
    except IrkitError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return EXIT_USER
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (e.g. `| head`); nothing left to say
        return 0
    except Exception as e:
        if debug_level():
            raise
        detail = one_line(e)
        print(
            f"{prog}: internal error: {type(e).__name__}: {detail} (set IRKIT_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
