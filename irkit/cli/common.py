"""What every irkit command shares: one-line errors, exit codes, argument parsing.

Exit codes: 0 success; 1 a user error (bad file, option, shape, pass failure); 2 a
command-line usage error; 70 an internal error (a bug in irkit: please report it).
No Python traceback reaches the user unless IRKIT_DEBUG is set.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import stat
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NoReturn

from irkit.errors import IrkitError, one_line
from irkit.files import check_writable

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
    except OSError as e:  # the file system said no (a permission, a full disk): not a bug
        if debug_level():
            raise
        where = f"{e.filename}: " if e.filename else ""
        print(f"{prog}: {where}error: {e.strerror or one_line(e)}", file=sys.stderr)
        return EXIT_USER
    except Exception as e:
        if debug_level():
            raise
        detail = one_line(e)
        print(
            f"{prog}: internal error: {type(e).__name__}: {detail} (set IRKIT_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


# --- typed command-line values -------------------------------------------------------------


def _number(text: str, kind: type) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
        ) from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    value = _number(text, float)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def nonnegative_float(text: str) -> float:
    value = _number(text, float)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
    return value


def fraction(text: str) -> float:
    """A relative precision or threshold: a number in (0, 1)."""
    value = _number(text, float)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {text!r}")
    return value


def positive_int(text: str) -> int:
    value = int(_number(text, int))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer from `low` to `high`."""

    def parse(text: str) -> int:
        value = int(_number(text, int))
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"must be an integer from {low} to {high}, got {text!r}"
            )
        return value

    return parse


def seed(text: str) -> int:
    value = int(_number(text, int))
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"a seed is an integer from 0 to 2^64-1, got {text!r}")
    return value


# --- outputs: never over an input, all or nothing ------------------------------------------


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file (hard and symbolic links included)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


_KINDS = {
    "json": ("a JSON record", lambda head: head[:1] in (b"{", b"[")),
    "html": ("an HTML report", lambda head: head[:1] == b"<"),
    "snapshot": ("a snapshot (a zip archive)", lambda head: head[:4] == b"PK\x03\x04"),
    "text": ("a text file", lambda head: b"\x00" not in head and _utf8(head)),
}
"""What an existing output file must already look like to be replaced: a typo that names a
model (an .onnx file, a .graph, a results file) must not destroy it."""


def _utf8(head: bytes) -> bool:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start >= len(head) - 3  # a character cut by the 4 KiB window
    return True


def check_output(
    path: str | Path, inputs: Iterable[str | Path] = (), flag: str = "-o", kind: str = "text"
) -> None:
    """Refuse, before any work, an output path that is one of the command's inputs, a
    directory, in a directory that does not exist, or an existing file that is not of the
    `kind` written there (json, html or text)."""
    for source in inputs:
        if source is not None and same_file(path, source):
            raise IrkitError(
                f"{flag} names an input of this command; refusing to write over it", str(path)
            )
    p = Path(path)
    if p.is_dir():
        raise IrkitError(f"{flag}: is a directory", str(path))
    if p.exists() and not stat.S_ISREG(p.stat().st_mode):
        raise IrkitError(f"{flag}: not a regular file", str(path))
    if p.exists() and p.stat().st_size:
        what, looks_right = _KINDS[kind]
        with p.open("rb") as f:
            head = f.read(4096).lstrip()
        if head and not looks_right(head):
            raise IrkitError(
                f"{flag}: the file exists and is not {what}; refusing to replace it (remove it first)",
                str(path),
            )
    check_writable(path, flag)


def write_output(
    path: str | Path,
    data: str | bytes,
    inputs: Iterable[str | Path] = (),
    flag: str = "-o",
    kind: str = "text",
) -> None:
    """Write `data` to `path` all or nothing: to a temporary file beside it, then renamed
    over it, so a failed or interrupted write never leaves half a file. Refuses what
    `check_output` refuses."""
    check_output(path, inputs, flag, kind)
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data)
        tmp.replace(p)
    except OSError as e:
        with contextlib.suppress(OSError):  # on a read-only filesystem, unlink fails too
            tmp.unlink(missing_ok=True)
        raise IrkitError(f"cannot write: {e.strerror}", str(path)) from None


def dtype_option(p: argparse.ArgumentParser, effect: str = "first") -> None:
    """`--dtype f32|f16|bf16`: the model's f32 tensors converted (`irkit.frontend.precision`)."""
    p.add_argument(
        "--dtype",
        default=None,
        choices=("f32", "f16", "bf16"),
        help="convert the model's f32 tensors (inputs, weights, outputs) to this type "
        f"{effect}, as torch's model.half() does; the reference and the check follow",
    )


def add_plugin_option(parser: argparse.ArgumentParser, also: str = "") -> None:
    """`-L/--load-pass-plugin/--plugin MODULE_OR_FILE`, repeatable: what irkit-opt and every
    irkit-bench command take to import a module that registers passes first."""
    parser.add_argument(
        "-L", "--load-pass-plugin", "--plugin", dest="plugin", action="append", default=[],
        metavar="MODULE_OR_FILE",
        help=f"import a module (or .py file) that registers passes first (repeatable){also}",
    )  # fmt: skip
