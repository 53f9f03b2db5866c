"""Reading model files: every failure (missing, a directory, a FIFO or device, not UTF-8,
NUL bytes, empty) is one IrkitError naming the file, before anything else happens."""

from __future__ import annotations

from pathlib import Path

from irkit.errors import IrkitError, SourceLocation


def check_model_file(path: str | Path) -> Path:
    """The path, checked to be an existing regular file: a FIFO or a device would block or
    never end, so they are refused before they are opened."""
    p = Path(path)
    if not p.exists():
        raise IrkitError("no such file", str(path))
    if p.is_dir():
        raise IrkitError("is a directory, not a model file", str(path))
    if not p.is_file():
        raise IrkitError(
            "not a regular file (a pipe, socket or device); irkit reads model files", str(path)
        )
    return p


def read_text(path: str | Path) -> str:
    """The file's text, or an IrkitError for a missing, unreadable, empty or binary file."""
    p = check_model_file(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise IrkitError(f"cannot read: {e.strerror}", str(path)) from None
    if not data.strip():
        raise IrkitError("file is empty", str(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise IrkitError(
            f"not a text file (invalid UTF-8 byte 0x{data[e.start]:02x})",
            SourceLocation(str(path), line, col),
        ) from None
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise IrkitError("not a text file (contains NUL bytes)", SourceLocation(str(path), line, 1))
    return text
