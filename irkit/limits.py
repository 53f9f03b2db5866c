"""Resource limits: what irkit refuses before it starts, rather than hang or run out of memory.

Every limit is checked before the work it bounds (a size before the allocation, a depth
before the recursion), and its error names the size, the limit and how to change it.

- `INT64_MAX`: static integers (dims, extents, attribute arithmetic) live in int64, as in
  MLIR; tensor element counts too.
- `MAX_RANK`: the highest tensor rank.
- `MAX_NESTING`: how deeply a `.graph` expression may nest (Python's own parser allows 200).
- `model_lines_limit()`: the most lines a `.graph` or `.mlir` model may have
  (`IRKIT_MAX_MODEL_LINES`, default 200,000: a 200-layer transformer in `.graph` is a few
  thousand), checked before parsing, which takes about 50 us a line: a 50 MB file whose last
  line is wrong answers at once instead of after a minute.
- `model_ops_limit()`: the most operations a `.graph` or `.mlir` model may spell out
  (`IRKIT_MAX_MODEL_OPS`, default 200,000), counted before parsing from the characters that
  make one (a call's or a bracket's `(` and the operators `+ - * / @` in `.graph`, an `=` that
  binds results in `.mlir`; an overestimate): parsing, inference and verification take about
  100 us an operation, so a file of few but long lines (150,000 lines of 80-term sums, 50 MB)
  is refused at once rather than after minutes.
- `memory_limit()`: the bytes a run may allocate at once: `IRKIT_MAX_MEMORY` (bytes, or with
  a K/M/G/T suffix) or, by default, three quarters of this machine's physical memory.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable

from xdsl.dialects.builtin import ShapedType

from irkit.errors import IrkitError

INT64_MAX = (1 << 63) - 1
MAX_NESTING = 200
MAX_RANK = 32
"""The highest tensor rank (numpy stops at 64; no model needs more than a handful)."""

_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def fmt_bytes(n: float) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def memory_limit() -> tuple[int, str]:
    """The byte limit for one run's allocations, and where it comes from (for messages)."""
    text = os.environ.get("IRKIT_MAX_MEMORY", "").strip()
    if text:
        number, suffix = text[:-1], text[-1].upper()
        if suffix not in _SUFFIXES or suffix == "":
            number, suffix = text, ""
        try:
            value = int(float(number) * _SUFFIXES[suffix])
        except ValueError:
            raise IrkitError(
                f"IRKIT_MAX_MEMORY={text!r}: expected bytes, optionally with K, M, G or T"
            ) from None
        if value <= 0:
            raise IrkitError(f"IRKIT_MAX_MEMORY={text!r}: must be positive")
        return value, "IRKIT_MAX_MEMORY"
    total = physical_memory()
    if total is None:
        return 1 << 40, "the default (set IRKIT_MAX_MEMORY to change it)"
    return total * 3 // 4, "75% of this machine's memory; set IRKIT_MAX_MEMORY to change it"


MAX_MODEL_LINES = 200_000


def _count_setting(name: str, default: int, unit: str) -> tuple[int, str]:
    """A positive count from the environment variable `name` (or `default`), and where it
    comes from."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default, f"set {name} to change it"
    if not text.isdigit() or int(text) <= 0:
        raise IrkitError(f"{name}={text!r}: expected a positive number of {unit}")
    return int(text), name


def model_lines_limit() -> tuple[int, str]:
    """The most lines a text model may have, and where the limit comes from."""
    return _count_setting("IRKIT_MAX_MODEL_LINES", MAX_MODEL_LINES, "lines")


def check_model_lines(text: str, filename: str) -> None:
    """Refuse a model text longer than `model_lines_limit()` before parsing it, naming the
    first line past the limit."""
    limit, source = model_lines_limit()
    if text.count("\n", 0, len(text)) > limit:
        raise IrkitError(
            f"the model has more than {limit:,} lines, irkit's limit ({source})",
            f"{filename}:{limit + 1}:1",
        )


MAX_MODEL_OPS = 200_000
_OP_MARKS = {".graph": ("(", "+", "-", "*", "/", "@"), ".mlir": (" = ",)}
"""Per text format, the strings of which at least one occurs per operation the text spells."""


def model_ops_limit() -> tuple[int, str]:
    """The most operations a text model may spell out, and where the limit comes from."""
    return _count_setting("IRKIT_MAX_MODEL_OPS", MAX_MODEL_OPS, "operations")


def check_model_ops(text: str, filename: str, kind: str) -> None:
    """Refuse a model text that spells out more than `model_ops_limit()` operations before
    parsing it, naming where the count passes the limit."""
    limit, source = model_ops_limit()
    marks = _OP_MARKS[kind]
    if sum(text.count(m) for m in marks) <= limit:
        return
    seen = 0
    for match in re.finditer("|".join(map(re.escape, marks)), text):
        seen += 1
        if seen > limit:
            line = text.count("\n", 0, match.start()) + 1
            column = match.start() - text.rfind("\n", 0, match.start())
            raise IrkitError(
                f"the model spells out more than {limit:,} operations, irkit's limit ({source})",
                f"{filename}:{line}:{column}",
            )


def check_bytes(nbytes: int, what: str) -> None:
    """Refuse an allocation of `nbytes` (described by `what`) beyond `memory_limit()`."""
    limit, source = memory_limit()
    if nbytes > limit:
        raise IrkitError(
            f"{what}: {fmt_bytes(nbytes)} needed, over the limit of {fmt_bytes(limit)} ({source})"
        )


def element_count(shape: Iterable[int]) -> int:
    return math.prod(shape)


def tensor_bytes(t: ShapedType, itemsize: int) -> int:
    return element_count(t.get_shape()) * itemsize


def check_extents(shape: Iterable[int]) -> str | None:
    """Why `shape` cannot be a static tensor shape (None when it can)."""
    shape = list(shape)
    if len(shape) > MAX_RANK:
        return f"rank {len(shape)} is over irkit's limit of {MAX_RANK}"
    if any(d < 0 for d in shape):
        return "dynamic extents (?) are not supported: irkit needs static shapes"
    big = [d for d in shape if d > INT64_MAX]
    if big:
        return f"extent {big[0]} is out of the int64 range (at most 2^63-1)"
    if element_count(shape) > INT64_MAX:
        return f"{shape} has {element_count(shape)} elements, more than int64 indexing holds"
    return None
