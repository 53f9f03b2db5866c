"""Cross-backend attribution: one pipeline's passes attributed on two (or more) backends,
and, pass by pass, where their effects agree and where they differ.

    record = attribute_across("mlp.graph", ["cpu", "cuda-host"], pipeline)

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


def common_pipeline(backends: Sequence[str]) -> str:
    """The passes every backend's default pipeline has, in the first one's order and with
    its options: what one pipeline attributed on all of them defaults to (each backend's
    required lowering finishes the program)."""
    from irkit.pipelines import PIPELINES, parse_passes
    from irkit.runtime import get_backend

    pipelines = [PIPELINES[get_backend(b)[0].default_pipeline] for b in backends]
    first, *others = pipelines
    names = [{p.name for p in parse_passes(",".join(o.passes))} for o in others]
    kept = [spec for spec in first.passes if all(parse_passes(spec)[0].name in n for n in names)]
    if not kept:
        raise IrkitError(
            f"the default pipelines of {', '.join(backends)} share no pass; give one with -p"
        )
    return ",".join(kept)


def attribute_across(
    backends: Sequence[str], attribute_one: Callable[[str], dict], pipeline: str
) -> dict:
    """Attribute on each backend (`attribute_one(backend)` returns its record) and compare."""
    if len(backends) < 2 or len(set(backends)) != len(backends):
        raise IrkitError(
            f"--backend: a comparison needs two or more different backends, got {','.join(backends)}"
        )
    records = [attribute_one(b) for b in backends]
    return {
        "kind": "irkit.attribution.cross_backend",
        "schema": 1,
        "pipeline": pipeline,
        "backends": list(backends),
        "timers": {r["backend"]: r["protocol"]["timer"] for r in records},
        "comparison": compare_passes(records),
        "records": records,
    }


def compare_passes(records: Sequence[dict]) -> list[dict]:
    """Per pass (in the first record's order): each backend's speedup with its CI, whether
    it changed code and was significant there, and a verdict."""
    by_backend = [{p["pass"]: p for p in r["passes"]} for r in records]
    names = [p["pass"] for p in records[0]["passes"]]
    names += [n for table in by_backend[1:] for n in table if n not in names]
    rows = []
    for name in names:
        effects = {}
        for record, table in zip(records, by_backend, strict=True):
            p = table.get(name)
            effects[record["backend"]] = (
                None
                if p is None
                else {
                    "speedup": p["speedup"],
                    "significant": p["significant"],
                    "changes_code": p["changes_code"],
                }
            )
        rows.append({"pass": name, "effects": effects, "verdict": verdict(effects)})
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
