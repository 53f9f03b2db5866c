"""The tuning database: what `irkit-bench tune` found, for `irkit.compile(..., tuned=True)`.

An entry is keyed by the workload (the graph module's content hash: its ops, shapes and
dims), the pipeline it tuned, the backend, and the machine (the host CPU and its features,
and the device's name where the backend has one): a result never leaks to another shape,
pipeline or machine. It holds the pipeline to use (the winner's, or the default's where no
candidate beat it beyond its CI), the verdict and the evidence. Entries live in
`$IRKIT_CACHE/tuning/` (default `~/.cache/irkit/tuning/`), one JSON file each, written
atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp


def machine(backend: str, device: str | None = None) -> dict[str, str | None]:
    """What a tuning result depends on beyond the workload: the backend, the host CPU (LLVM's
    name and a hash of its features) and the device, if any."""
    from irkit.codegen.host import host_target

    target = host_target()
    features = hashlib.sha256(target.features.encode()).hexdigest()[:12]
    return {"backend": backend, "cpu": target.cpu, "cpu_features_sha": features, "device": device}


def key(graph: ModuleOp, pipeline: str, where: dict[str, Any]) -> str:
    from irkit.ir import content_hash

    text = json.dumps([content_hash(graph), pipeline, where], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def folder() -> Path:
    root = Path(os.environ.get("IRKIT_CACHE", Path.home() / ".cache" / "irkit"))
    return root / "tuning"


def lookup(graph: ModuleOp, pipeline: str, where: dict[str, Any]) -> dict[str, Any] | None:
    """The entry for this workload, pipeline and machine, or None."""
    try:
        return json.loads((folder() / f"{key(graph, pipeline, where)}.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def store(graph: ModuleOp, pipeline: str, where: dict[str, Any], entry: dict[str, Any]) -> Path:
    """Write the entry (replacing an older one for the same key) and return its path."""
    target = folder() / f"{key(graph, pipeline, where)}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        json.dump({**entry, "machine": where, "base_pipeline": pipeline}, f, indent=2)
    os.replace(tmp, target)
    return target
