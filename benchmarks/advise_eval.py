"""How well `irkit-bench advise` finds planted inefficiencies, and how rarely it advises
where nothing was planted.

    python benchmarks/advise_eval.py --out benchmarks/results/advise_eval.jsonl
    python benchmarks/advise_eval.py --only mlp,softmax --budget 10
    python benchmarks/real_models.py --small --no-speed --export-dir models/
    python benchmarks/advise_eval.py --real models/ --out advise_real.jsonl
    python benchmarks/advise_eval.py --summarize advise_eval.jsonl advise_real.jsonl

For each workload (every example at its own dims; with `--real DIR`, the ONNX models that
`real_models.py --export-dir` wrote there) and the CPU's default pipeline:

- *Planted faults*: the pipeline with one optional pass removed (each optional pass of
  default-cpu whose removal changes the program's code), or one option set badly (a matmul
  tile too small, vectors too narrow, fusion off, one thread). A fault counts only where it
  is real: the planted program measured slower than the untouched one, paired and
  interleaved over placement slots (`tune.race_programs`), its slowdown's 95% CI above 2%.
- *Recall*: of the real faults, those where `advise` on the planted pipeline confirms the
  edit that undoes the fault (the pass added back, the option back to default-cpu's value).
  Also counted: those recovered by a rule that read the kernels' evidence, not only by
  `reference-passes` (the rule of last resort: every optional pass of the default pipeline
  that this one lacks).
- *Advice on untouched kernels*: `advise` on the untouched pipeline; the share of the
  kernels it examined that got confirmed advice.

Each planted run and each untouched run is one JSON line; the last line sums up. Goal
(issue 68): recall >= 80%, advice on untouched kernels <= 5%.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from irkit.measure.advice import AdviseOptions, Edit, advise  # noqa: E402
from irkit.pipelines import PIPELINES  # noqa: E402

REFERENCE = PIPELINES["default-cpu"]
OPTION_FAULTS = [
    ("a matmul tile too small", Edit.set("cpu-tile-matmul", "mr", 2), Edit.set("cpu-tile-matmul", "mr", None)),
    ("matmul vectors too narrow", Edit.set("cpu-tile-matmul", "vector-bits", 128), Edit.set("cpu-tile-matmul", "vector-bits", None)),
    ("transpose vectors too narrow", Edit.set("cpu-tile-transpose", "vector-bits", 128), Edit.set("cpu-tile-transpose", "vector-bits", None)),
    ("elementwise fusion off", Edit.set("fuse-kernels", "elementwise", False), Edit.set("fuse-kernels", "elementwise", None)),
    ("epilogue fusion off", Edit.set("fuse-kernels", "epilogues", False), Edit.set("fuse-kernels", "epilogues", None)),
    ("one thread", Edit.set("cpu-parallelize", "threads", 1), Edit.set("cpu-parallelize", "threads", None)),
]  # fmt: skip


def workloads(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(name, model path) for every workload asked for."""
    out = []
    if not args.real_only:
        for path in sorted((ROOT / "irkit" / "examples").glob("*.graph")):
            out.append((path.stem, str(path)))
    if args.real:
        for path in sorted(Path(args.real).glob("*.onnx")):
            out.append((path.stem, str(path)))
    if args.only:
        wanted = set(args.only.split(","))
        out = [w for w in out if w[0] in wanted]
    return out


def faults(model: str) -> list[tuple[str, Edit, Edit, str]]:
    """(what, the planting edit, the edit that undoes it, planted spec) for every fault
    that changes the program's code."""
    from irkit.runtime import compile

    base = REFERENCE.spec
    untouched = tuple(k.hash for k in compile(model, base, "cpu").kernels)
    out = []
    removable = [p.split("{")[0] for p in REFERENCE.passes if p.split("{")[0] in REFERENCE.optional]
    candidates = [(f"{p} removed", Edit.remove(p), Edit.add(p)) for p in removable]
    for what, plant, fix in [*candidates, *OPTION_FAULTS]:
        spec = plant.apply(base, REFERENCE.passes)
        if spec is None:
            continue
        try:
            planted = tuple(k.hash for k in compile(model, spec, "cpu").kernels)
        except Exception as e:  # noqa: BLE001 - a plant the compiler refuses is no fault
            print(f"  {what}: does not compile ({type(e).__name__})", file=sys.stderr)
            continue
        if planted != untouched:
            out.append((what, plant, fix, spec))
    return out


def slowdown(model: str, spec: str, budget: float, seed: int) -> dict:
    """The planted program's time over the untouched one's, paired, over placement slots."""
    from irkit.frontend import load
    from irkit.measure.tune import race_programs
    from irkit.runtime import compile, get_backend
    from irkit.runtime.check import reference_case

    graph = load(model)
    chosen, _ = get_backend("cpu")
    case = reference_case(graph, seed)
    sources = {
        "untouched": (compile(graph, REFERENCE.spec, "cpu"), "the untouched pipeline"),
        "planted": (compile(graph, spec, "cpu"), "the planted pipeline"),
    }
    race = race_programs(chosen, graph, case, sources, 0.005, budget, seed, 4)
    s = race.speedup("planted", "untouched", 0.95)
    return {"median": s.median, "ci_low": s.low, "ci_high": s.high}


def fixed(record: dict, fix: Edit) -> list[str] | None:
    """The rules of the confirmed hypothesis that carries the edit undoing the fault, None
    where none does."""
    want = fix.to_json()
    for h in record["advice"]:
        for e in h["edits"]:
            same = all(e[k] == want[k] for k in ("action", "pass", "option"))
            if same and str(e["value"]).lower() == str(want["value"]).lower():
                return h["rules"]
    return None


def summarize(paths: list[str]) -> str:
    """A markdown table of result files (plain or gzipped JSON lines): per workload, the
    real faults, those recovered (and by a rule reading evidence), and the untouched
    kernels advised; then the totals."""
    import gzip

    rows: dict[str, list[int]] = {}
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            for line in f:
                r = json.loads(line)
                row = rows.setdefault(r.get("workload", ""), [0, 0, 0, 0, 0])
                if r["kind"] == "advise_eval.fault" and r["real"]:
                    row[0] += 1
                    row[1] += bool(r["recovered"])
                    row[2] += bool(r.get("by_evidence", r["recovered"]))
                elif r["kind"] == "advise_eval.untouched":
                    row[3] += len(r["advised"])
                    row[4] += len(r["examined"])
    rows.pop("", None)
    total = [sum(col) for col in zip(*rows.values(), strict=True)] if rows else [0] * 5
    lines = ["| workload | real faults | recovered | by evidence | untouched kernels advised |",
             "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for name, (real, rec, ev, adv, exam) in [*sorted(rows.items()), ("all", total)]:
        lines.append(f"| {name} | {real} | {rec} | {ev} | {adv} of {exam} |")
    real, rec, ev, adv, exam = total
    lines.append(
        f"\nrecall {rec}/{real} = {rec / max(real, 1):.0%} ({ev / max(real, 1):.0%} by evidence); "
        f"advice on untouched kernels {adv}/{exam} = {adv / max(exam, 1):.0%}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="workloads by name, comma-separated")
    ap.add_argument("--real", default=None, metavar="DIR", help="also the ONNX models in DIR")
    ap.add_argument("--real-only", action="store_true", help="only the models of --real")
    ap.add_argument("--budget", type=float, default=15.0, help="advise's budget per run (s)")
    ap.add_argument("--plant-budget", type=float, default=3.0, help="seconds to measure a plant")
    ap.add_argument("--threshold", type=float, default=0.02, help="a real fault's least slowdown")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="append JSON lines here")
    ap.add_argument("--summarize", nargs="+", metavar="FILE", help="only summarize result files")
    args = ap.parse_args(argv)
    if args.summarize:
        print(summarize(args.summarize))
        return 0
    out = open(args.out, "a") if args.out else None  # noqa: SIM115 - lines as they come

    def emit(rec: dict) -> None:
        print(json.dumps(rec), file=out or sys.stdout, flush=True)

    from irkit.measure.fingerprint import host_fingerprint

    opts = AdviseOptions(budget_s=args.budget, seed=args.seed)
    emit({"kind": "advise_eval.header", "fingerprint": host_fingerprint(), "budget": args.budget,
          "plant_budget": args.plant_budget, "threshold": args.threshold})  # fmt: skip
    real, recovered, by_evidence, examined, advised = 0, 0, 0, 0, 0
    for name, model in workloads(args):
        start = time.perf_counter()
        untouched = advise(model, REFERENCE.spec, "cpu", None, opts).to_json()
        kernels = set(untouched["examined"])
        given = {k for h in untouched["advice"] for k in h["kernels"]} & kernels
        examined, advised = examined + len(kernels), advised + len(given)
        emit({"kind": "advise_eval.untouched", "workload": name, "examined": sorted(kernels),
              "advised": sorted(given), "advice": [h["describe"] for h in untouched["advice"]],
              "speedups": [h["speedup"] for h in untouched["advice"]],
              "seconds": time.perf_counter() - start})  # fmt: skip
        print(f"{name}: untouched: {len(given)} of {len(kernels)} kernels advised "
              f"{[h['describe'] for h in untouched['advice']]}", file=sys.stderr)  # fmt: skip
        for what, plant, fix, spec in faults(model):
            start = time.perf_counter()
            slow = slowdown(model, spec, args.plant_budget, args.seed)
            is_real = slow["ci_low"] > 1 + args.threshold
            rec = {"kind": "advise_eval.fault", "workload": name, "fault": what,
                   "plant": plant.to_json(), "fix": fix.to_json(), "slowdown": slow, "real": is_real}  # fmt: skip
            if is_real:
                record = advise(model, spec, "cpu", None, opts).to_json()
                rules = fixed(record, fix)
                ok = rules is not None
                specific = ok and rules != ["reference-passes"]
                real, recovered, by_evidence = real + 1, recovered + ok, by_evidence + specific
                rec |= {"recovered": ok, "rules": rules, "by_evidence": specific, "advice": [h["describe"] for h in record["advice"]],
                        "refuted": [(h["describe"], h["status"], h["speedup"]) for h in record["refuted"] if h["status"] != "same code"],
                        "no_advice": record["no_advice"]}  # fmt: skip
            rec["seconds"] = time.perf_counter() - start
            emit(rec)
            print(f"  {what}: {slow['median']:.3f}x slower [{slow['ci_low']:.3f}, {slow['ci_high']:.3f}]"
                  + (f" -> {'recovered' if rec['recovered'] else 'MISSED'}" if is_real else " (not real)"),
                  file=sys.stderr)  # fmt: skip
    summary = {"kind": "advise_eval.summary", "real_faults": real, "recovered": recovered,
               "recall": recovered / real if real else None, "recovered_by_evidence": by_evidence, "examined_kernels": examined,
               "advised_kernels": advised, "advice_rate_untouched": advised / examined if examined else None}  # fmt: skip
    emit(summary)
    print(json.dumps(summary), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
