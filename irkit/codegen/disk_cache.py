"""irkit's on-disk cache of compiled code: `$IRKIT_CACHE` (default `~/.cache/irkit`), one
folder per kind (`nvrtc`, `llvm`). An entry is written to a temporary name and renamed into
place, so a reader sees a whole entry or none; a damaged or unreadable entry is recompiled,
and a cache that cannot be written costs time, never correctness. A folder is kept under
`$IRKIT_CACHE_MAX_MB` (default 1024): past it, the least recently used entries go."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def cache_dir(kind: str) -> Path:
    root = Path(os.environ.get("IRKIT_CACHE", Path.home() / ".cache" / "irkit"))
    return root / kind


def cache_key(*parts: Any) -> str:
    """A short hash of everything the cached bytes depend on."""
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:24]


_CHECK = 16  # bytes of sha256 before each entry's data: a damaged entry reads as absent


def read(kind: str, name: str) -> bytes | None:
    """The entry's bytes, or None where it is absent, unreadable or damaged."""
    try:
        raw = (cache_dir(kind) / name).read_bytes()
    except OSError:
        return None
    check, data = raw[:_CHECK], raw[_CHECK:]
    return data if hashlib.sha256(data).digest()[:_CHECK] == check else None


def write(kind: str, name: str, data: bytes) -> None:
    """Store `data` under `name`, atomically; silently nothing where the cache is read-only."""
    folder = cache_dir(kind)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(hashlib.sha256(data).digest()[:_CHECK] + data)
        os.replace(tmp, folder / name)
        _prune(folder)
    except OSError:
        pass


def _prune(folder: Path) -> None:
    """Remove the least recently used entries while the folder is over its limit (checked
    on about one write in 32, so that a write stays cheap)."""
    if int.from_bytes(os.urandom(1), "little") % 32:
        return
    limit = float(os.environ.get("IRKIT_CACHE_MAX_MB", "1024")) * 2**20
    entries = [
        (e.stat().st_atime, e.stat().st_size, e.path) for e in os.scandir(folder) if e.is_file()
    ]
    total = sum(size for _, size, _ in entries)
    if total <= limit:
        return
    for _, size, path in sorted(entries):
        if total <= 0.75 * limit:
            break
        os.remove(path)
        total -= size
