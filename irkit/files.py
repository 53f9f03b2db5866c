"""Files the user names for irkit to write: checked before any work whose result would be
lost (`check_writable`). The command line's fuller checks (never over an input, all or
nothing) are `irkit.cli.common.check_output` and `write_output`, built on this."""

from __future__ import annotations

import tempfile
from pathlib import Path

from irkit.errors import IrkitError


def check_writable(path: str | Path, flag: str, shown: str | Path | None = None) -> None:
    """A one-line error unless a file can be made where `path` is to be written: its
    directory exists, and a file made and removed beside it succeeds (the one test that
    holds for root, read-only filesystems and ACLs alike), before any work whose result
    would then be lost. The error names `shown` (by default `path`)."""
    p = Path(path)
    shown = str(path if shown is None else shown)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise IrkitError(f"{flag}: directory {parent} does not exist", shown)
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{p.name}.", suffix=".probe"):
            pass
    except OSError as e:
        raise IrkitError(f"{flag}: cannot write in {parent}: {e.strerror}", shown) from None
