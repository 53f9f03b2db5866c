"""Errors that reach the user as one line.

irkit separates *user* errors (bad files, bad options, shapes that do not fit) from
*internal* errors (a pass that broke the IR). Both carry enough context to be printed as a
single line by the command-line layer; nothing below `irkit.cli` prints.
"""

from __future__ import annotations

from dataclasses import dataclass


def one_line(text: object, fallback: str = "no detail") -> str:
    """`text` with all whitespace runs (newlines included) collapsed to single spaces."""
    return " ".join(str(text).split()) or fallback


@dataclass(frozen=True)
class SourceLocation:
    """A 1-based position in a user's file."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class IrkitError(Exception):
    """A user error: the message is complete, one line, and names what was wrong where.

    `location` (file:line:col) is prefixed when known; otherwise the message itself names
    the culprit (a pass, an option, an ONNX node).
    """

    def __init__(self, message: str, location: SourceLocation | str | None = None):
        super().__init__(message)
        self.message = message
        self.location = location

    def __str__(self) -> str:
        text = one_line(self.message)  # one line, whatever the cause said
        return f"{self.location}: error: {text}" if self.location else f"error: {text}"


class PassFailure(IrkitError):
    """A pass raised, or left IR that does not verify. Names the pass and a reproducer."""

    def __init__(self, pass_name: str, cause: str, reproducer: str | None = None):
        where = f" (reproducer: {reproducer})" if reproducer else ""
        super().__init__(f"pass '{pass_name}' failed: {cause}{where}")
        self.pass_name = pass_name
        self.reproducer = reproducer


class OptionError(ValueError):
    """A pass option out of its domain, raised by a pass's `check_options()`; the pipeline
    parser reports it as `-p: error: pass 'NAME' option OPTION=VALUE: why`."""

    def __init__(self, option: str, value: object, why: str):
        shown = str(value).lower() if isinstance(value, bool) else value
        super().__init__(f"option {option}={shown}: {why}")
        self.option = option


def require(ok: bool, option: str, value: object, why: str) -> None:
    """Raise OptionError(option, value, why) unless `ok`: the one-liner of `check_options`."""
    if not ok:
        raise OptionError(option, value, why)


def require_vector_bits(bits: int) -> None:
    """A CPU pass's `vector-bits` option: a vector register width, or 0 for the host's."""
    require(
        bits in (0, 128, 256, 512),
        "vector-bits",
        bits,
        "must be 128, 256 or 512 (or 0: the host's)",
    )


def expect(function: str, name: str, value: object, kind: object, description: str) -> None:
    """The Python API's argument check: an IrkitError naming the function, the argument and
    what it takes, instead of a TypeError or AttributeError from deep inside."""
    if isinstance(value, bool) and kind in (int, float):
        ok = False
    else:
        ok = isinstance(value, kind)  # type: ignore[arg-type]
    if not ok:
        shown = repr(value) if len(repr(value)) <= 40 else type(value).__name__
        raise IrkitError(f"{function}: {name} must be {description}, got {shown}")
