"""Cross-backend attribution: passes attributed on two (or more) backends, and, pass by
pass, where their effects agree and where they differ.

    backends = ["cpu", "cuda-host"]
    record = attribute_across(backends, attribute_one, common_pipeline(backends))

Each backend runs its own default pipeline's shared passes (`common_pipeline`), or one
pipeline given for all. Passes pair by what they do (`kin`): a target's own form of a pass
(`cpu-fuse-attention`, `gpu-fuse-attention`) is compared with the other target's.

Each backend's attribution is a full record of its own (protocol, fingerprint, timer); the
comparison reads their speedups (T without the pass / T with it, unitless, so a CPU's
milliseconds and a GPU's microseconds compare), their CIs and significance. A backend whose
timer is not a GPU's (`cuda-sim`, `cuda-host`) keeps its timer in its record and the
comparison repeats it, so a host figure is never read as a GPU one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from irkit.errors import IrkitError

TARGET_PREFIXES = ("cpu-", "gpu-")


def kin(name: str) -> str:
    """What a pass does, whichever target it does it for: its name without a `cpu-` or
    `gpu-` prefix (`cpu-fuse-attention` and `gpu-fuse-attention` are both
    `fuse-attention`, `cpu-tile-matmul` and `gpu-tile-matmul` both `tile-matmul`). The
    comparison pairs passes by it."""
    for prefix in TARGET_PREFIXES:
        if name.startswith(prefix):
            return name.removeprefix(prefix)
    return name


def common_pipeline(backends: Sequence[str]) -> dict[str, str]:
    """By backend: the passes of its default pipeline, in its order and with its options,
    whose kind (`kin`) every backend's default pipeline has; what the passes are attributed
    in where no pipeline is given (each backend's required lowering finishes the program).
    A target's own form of a pass stays its own: default-cpu's `cpu-fuse-attention` beside
    default-cuda's `gpu-fuse-attention`, compared as `fuse-attention`."""
    from irkit.pipelines import PIPELINES, parse_passes
    from irkit.runtime import get_backend

    specs = {b: PIPELINES[get_backend(b)[0].default_pipeline].passes for b in backends}
    names = {b: [parse_passes(spec)[0].name for spec in s] for b, s in specs.items()}
    shared = set.intersection(*({kin(n) for n in ns} for ns in names.values()))
    kept = {
        b: ",".join(spec for spec, n in zip(specs[b], names[b], strict=True) if kin(n) in shared)
        for b in backends
    }
    if not shared:
        raise IrkitError(
            f"the default pipelines of {', '.join(backends)} share no pass; give one with -p"
        )
    return kept


def attribute_across(
    backends: Sequence[str], attribute_one: Callable[[str], dict], pipelines: dict[str, str]
) -> dict:
    """Attribute on each backend (`attribute_one(backend)` returns its record, measured with
    `pipelines[backend]`) and compare."""
    if len(backends) < 2 or len(set(backends)) != len(backends):
        raise IrkitError(
            f"--backend: a comparison needs two or more different backends, got {','.join(backends)}"
        )
    records = [attribute_one(b) for b in backends]
    return {
        "kind": "irkit.attribution.cross_backend",
        "schema": 2,
        "pipelines": {b: pipelines[b] for b in backends},
        "backends": list(backends),
        "timers": {r["backend"]: r["protocol"]["timer"] for r in records},
        "comparison": compare_passes(records),
        "records": records,
    }


def compare_passes(records: Sequence[dict]) -> list[dict]:
    """Per kind of pass (`kin`; in the first record's order): each backend's speedup with
    its CI, whether it changed code and was significant there, the pass's own name on each
    backend, and a verdict."""
    by_backend = [{kin(p["pass"]): p for p in r["passes"]} for r in records]
    kinds = [kin(p["pass"]) for p in records[0]["passes"]]
    kinds += [k for table in by_backend[1:] for k in table if k not in kinds]
    rows = []
    for k in kinds:
        effects, names = {}, {}
        for record, table in zip(records, by_backend, strict=True):
            p = table.get(k)
            names[record["backend"]] = None if p is None else p["pass"]
            effects[record["backend"]] = (
                None
                if p is None
                else {
                    "speedup": p["speedup"],
                    "significant": p["significant"],
                    "changes_code": p["changes_code"],
                }
            )
        rows.append({"pass": k, "names": names, "effects": effects, "verdict": verdict(effects)})
    return rows


def verdict(effects: dict[str, Any]) -> str:
    """One phrase: where the pass's effects agree, and how they differ."""
    absent = [b for b, e in effects.items() if e is None]
    if absent:
        return f"not in the pipeline on {', '.join(absent)}"
    changes = [b for b, e in effects.items() if e["changes_code"]]
    if not changes:
        return "agree: no code change on any"
    if len(changes) < len(effects):
        return f"differ: changes code on {', '.join(changes)} only"
    significant = {b: e for b, e in effects.items() if e["significant"]}
    if not significant:
        return "agree: within noise on all"
    if len(significant) < len(effects):
        return f"differ: an effect on {', '.join(significant)} only"
    faster = [b for b, e in effects.items() if e["speedup"]["value"] > 1]
    if 0 < len(faster) < len(effects):
        slower = [b for b in effects if b not in faster]
        return f"differ: faster on {', '.join(faster)}, slower on {', '.join(slower)}"
    lows = [e["speedup"]["ci_low"] for e in effects.values()]
    highs = [e["speedup"]["ci_high"] for e in effects.values()]
    direction = "faster" if faster else "slower"
    if max(lows) <= min(highs):
        return f"agree: {direction} on all, CIs overlap"
    return f"differ in size: {direction} on all, CIs apart"
