"""Results as JSON Lines: one self-describing record per line, append-only, so a suite
that stops can resume where it stopped and records from several workers can be merged by
concatenation."""

from __future__ import annotations

import gzip
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path

from irkit.errors import IrkitError


def append_record(path: str | Path, record: dict) -> None:
    """Append one record to a JSONL file (created if missing): one `write` of the whole
    line with O_APPEND, then fsync, so a record is either all there or (killed mid-write)
    a torn last line that `repair_torn_tail` cuts off."""
    path = Path(path)
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = 0
            while written < len(line):
                written += os.write(fd, line[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise IrkitError(f"cannot write: {e.strerror}", str(path)) from None


def check_appendable(path: str | Path) -> None:
    """Refuse to append records to an existing file that is not JSON Lines: a model, or a
    pretty-printed single record (`--json`), would be left neither."""
    path = Path(path)
    if not path.exists() or not path.is_file() or path.stat().st_size == 0:
        return
    with path.open("rb") as f:
        first = f.readline(1 << 20)
    try:
        ok = isinstance(json.loads(first), dict)
    except (ValueError, UnicodeDecodeError):
        ok = False
    if not ok:
        raise IrkitError(
            "exists and is not a JSON Lines results file (one record per line); refusing to append to it",
            f"{path}:1",
        )


def repair_torn_tail(path: str | Path) -> bool:
    """Cut off a torn last line (a record whose write was interrupted), so that the next
    record starts on a line of its own. Returns whether anything was cut."""
    path = Path(path)
    if not path.is_file():
        return False
    with path.open("rb+") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        if size == 0:
            return False
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return False
        chunk = min(size, 1 << 20)
        f.seek(size - chunk)
        tail = f.read(chunk)
        cut = tail.rfind(b"\n")
        f.truncate(size - chunk + cut + 1 if cut >= 0 else (0 if chunk == size else size))
    return True


def read_records(path: str | Path) -> Iterator[dict]:
    """The records of a JSONL file (a single-record .json file, or either gzipped as
    `.gz`, works too). A line that is
    not a JSON object is an error naming the file and line; a torn last line (a run killed
    while writing) is skipped."""
    for _, record in numbered_records(path):
        yield record


def read_attributions(path: str | Path) -> Iterator[dict]:
    """The attribution records of a results file, each checked to hold every field that
    `compare` and `report` read (an error names the file, line and field)."""
    for line, record in numbered_records(path):
        if record.get("kind") == "irkit.attribution":
            problem = _invalid(record, ATTRIBUTION_FIELDS, "")
            if problem:
                raise IrkitError(f"malformed attribution record: {problem}", f"{path}:{line}")
            yield record


def numbered_records(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(line, record) for every record of a JSONL file; see `read_records`."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise IrkitError("not a regular file", str(path))
    try:
        text = (
            gzip.decompress(path.read_bytes()).decode()
            if path.suffix == ".gz"
            else path.read_text()
        )
    except FileNotFoundError:
        raise IrkitError("no such file", str(path)) from None
    except (OSError, EOFError, UnicodeDecodeError) as e:  # gzip's BadGzipFile is an OSError
        raise IrkitError(f"cannot read: {getattr(e, 'strerror', None) or e}", str(path)) from None
    stripped = text.strip()
    if stripped.startswith("{") and "\n{" not in stripped:
        try:  # one (possibly pretty-printed) JSON record
            yield 1, _object(json.loads(stripped), path, 1)
            return
        except json.JSONDecodeError:
            pass
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield n, _object(json.loads(line), path, n)
        except json.JSONDecodeError as e:
            if n == len(lines) and not text.endswith("\n"):
                return  # torn final line
            raise IrkitError(f"not a JSON record: {e.msg}", f"{path}:{n}:{e.colno}") from None


def _object(value: object, path: Path, line: int) -> dict:
    if not isinstance(value, dict):
        raise IrkitError("a record must be a JSON object", f"{path}:{line}:1")
    return value


def job_key(record: dict) -> str:
    """What identifies a suite job: workload, backend, pipeline, strategy and sizes, and
    the element type where the model was converted to f16 or bf16 (an f32 job's key is
    what it was before types were asked for)."""
    dims = ",".join(f"{k}={v}" for k, v in sorted(record.get("dims", {}).items()))
    dtype = record.get("dtype")
    return (
        "|".join(str(record.get(k)) for k in ("workload", "backend", "pipeline", "strategy"))
        + f"|{dims}"
        + (f"|{dtype}" if dtype in ("f16", "bf16") else "")
    )


class _Positive:
    """A finite number > 0 (a time a ratio is taken of)."""


_NUMBER = (int, float)
_CI = {"value": _NUMBER, "ci_low": _NUMBER, "ci_high": _NUMBER}
_TIME = {"median": _Positive, "ci_low": _NUMBER, "ci_high": _NUMBER}
_KERNEL = {"name": str, "seconds": (int, float, type(None)), "flops": _NUMBER, "min_bytes": _NUMBER}
ATTRIBUTION_FIELDS: dict = {
    "workload": str,
    "model": str,
    "backend": str,
    "pipeline": str,
    "strategy": str,
    "dims": dict,
    "total": {"baseline_s": _TIME, "full_s": _TIME, "speedup": _CI},
    "noise_floor": dict,
    "protocol": {
        "selection": str,
        "variants": int,
        "programs_measured": int,
        "rounds": int,
        "stop_reason": str,
    },
    "passes": [
        {
            "pass": str,
            "saved_s": _CI,
            "speedup": _CI,
            "significant": bool,
            "changes_code": bool,
            "kernels": {"removed": list, "added": list},
        }
    ],
    "kernels": {"baseline": [_KERNEL], "full": [_KERNEL]},
}
"""The fields of an attribution record that `compare` and `report` read, and their kinds."""


def _invalid(value: object, spec: object, where: str) -> str | None:
    """Why `value` does not fit `spec` (None if it does): a dict of fields, a one-element
    list (every item fits it), a type or tuple of types, or `_Positive`."""
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return f"{where or 'the record'} must be an object"
        for key, sub in spec.items():
            name = f"{where}.{key}" if where else key
            if key not in value:
                return f"field {name} is missing"
            problem = _invalid(value[key], sub, name)
            if problem:
                return problem
        return None
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"field {where} must be a list"
        return next(
            (p for i, v in enumerate(value) if (p := _invalid(v, spec[0], f"{where}[{i}]"))), None
        )
    if spec is _Positive:
        ok = (
            isinstance(value, _NUMBER)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value > 0
        )
        return None if ok else f"field {where} must be a positive number, got {value!r}"
    assert isinstance(spec, type | tuple)
    if isinstance(value, bool) and spec is not bool:
        return f"field {where} has the wrong kind of value ({value!r})"
    if not isinstance(value, spec):
        return f"field {where} has the wrong kind of value ({value!r})"
    if isinstance(value, float) and not math.isfinite(value):
        return f"field {where} is not finite ({value!r})"
    return None
