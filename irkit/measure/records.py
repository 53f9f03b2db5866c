"""Results as JSON Lines: one self-describing record per line, append-only, so a suite
that stops can resume where it stopped and records from several workers can be merged by
concatenation."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from irkit.errors import IrkitError


def append_record(path: str | Path, record: dict) -> None:
    """Append one record to a JSONL file (created if missing)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
    except OSError as e:
        raise IrkitError(f"cannot write: {e.strerror}", str(path)) from None


def read_records(path: str | Path) -> Iterator[dict]:
    """The records of a JSONL file (a single-record .json file works too). A line that is
    not a JSON object is an error naming the file and line; a torn last line (a run killed
    while writing) is skipped."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise IrkitError("no such file", str(path)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise IrkitError(f"cannot read: {getattr(e, 'strerror', None) or e}", str(path)) from None
    stripped = text.strip()
    if stripped.startswith("{") and "\n{" not in stripped:
        try:  # one (possibly pretty-printed) JSON record
            yield _object(json.loads(stripped), path, 1)
            return
        except json.JSONDecodeError:
            pass
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield _object(json.loads(line), path, n)
        except json.JSONDecodeError as e:
            if n == len(lines) and not text.endswith("\n"):
                return  # torn final line
            raise IrkitError(f"not a JSON record: {e.msg}", f"{path}:{n}:{e.colno}") from None


def _object(value: object, path: Path, line: int) -> dict:
    if not isinstance(value, dict):
        raise IrkitError("a record must be a JSON object", f"{path}:{line}:1")
    return value


def job_key(record: dict) -> str:
    """What identifies a suite job: workload, backend, pipeline, strategy and sizes."""
    dims = ",".join(f"{k}={v}" for k, v in sorted(record.get("dims", {}).items()))
    return (
        "|".join(str(record.get(k)) for k in ("workload", "backend", "pipeline", "strategy"))
        + f"|{dims}"
    )
