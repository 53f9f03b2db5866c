"""Comparing two result files: is NEW a significant regression from BASE?

Records are matched by workload, backend and sizes (the pipeline may differ: comparing
two pipelines, or two versions of one pipeline, is the point). Two runs are not paired,
so the test is the conservative one: the full pipeline's time regressed when the two
medians' 95% CIs are disjoint *and* the change exceeds the threshold, which is at least
each run's own A/A noise floor and by default 5% (run-to-run drift on a shared host is
larger than one run's CI).

A regression is then explained: the pass whose contribution fell the most (a pass new in
NEW counts from zero; one that is gone counts to zero), and the kernel of the full
pipeline whose time grew the most (matched by name, a new kernel counting from zero).
"""

from __future__ import annotations

from dataclasses import dataclass

from irkit.measure.records import read_attributions


@dataclass(frozen=True)
class Verdict:
    workload: str
    base_s: dict
    new_s: dict
    change: float
    """new / base - 1 of the full pipeline's median."""
    threshold: float
    regression: bool
    improvement: bool
    culprit_pass: str | None = None
    culprit_pass_delta: float = 0.0
    culprit_kernel: str | None = None
    culprit_kernel_delta: float = 0.0

    def describe(self) -> str:
        b, n = self.base_s["median"], self.new_s["median"]
        head = f"{self.workload}: {b * 1e3:.4g} ms -> {n * 1e3:.4g} ms ({self.change:+.1%})"
        if not self.regression:
            kind = "faster" if self.improvement else "no significant change"
            return f"{head}: {kind} (threshold {self.threshold:.1%})"
        why = []
        if self.culprit_pass:
            why.append(
                f"pass {self.culprit_pass} now saves {-self.culprit_pass_delta * 1e3:+.4g} ms less"
            )
        if self.culprit_kernel:
            why.append(f"kernel {self.culprit_kernel} +{self.culprit_kernel_delta * 1e3:.4g} ms")
        return f"{head}: REGRESSION; " + "; ".join(why)


def _key(r: dict) -> str:
    dims = ",".join(f"{k}={v}" for k, v in sorted(r.get("dims", {}).items()))
    return f"{r.get('workload')}|{r.get('backend')}|{dims}"


def _latest(path: str) -> dict[str, dict]:
    out = {}
    for r in read_attributions(path):
        out[_key(r)] = r  # the last record of a job wins
    return out


def compare_files(base: str, new: str, threshold: float = 0.05) -> tuple[list[Verdict], list[str]]:
    """Verdicts for every workload in both files, and the keys found in only one."""
    a, b = _latest(base), _latest(new)
    verdicts = [_verdict(a[k], b[k], threshold) for k in a if k in b]
    unmatched = sorted(set(a) ^ set(b))
    return verdicts, unmatched


def _verdict(base: dict, new: dict, threshold: float) -> Verdict:
    bs, ns = base["total"]["full_s"], new["total"]["full_s"]
    floor = max(threshold, base["noise_floor"].get("floor", 0), new["noise_floor"].get("floor", 0))
    change = ns["median"] / bs["median"] - 1
    disjoint_slower = ns["ci_low"] > bs["ci_high"]
    disjoint_faster = ns["ci_high"] < bs["ci_low"]
    regression = disjoint_slower and change > floor
    v = Verdict(
        base["workload"], bs, ns, change, floor, regression, disjoint_faster and -change > floor
    )
    if not regression:
        return v
    saved_b = {p["pass"]: p["saved_s"]["value"] for p in base["passes"]}
    saved_n = {p["pass"]: p["saved_s"]["value"] for p in new["passes"]}
    deltas = {p: saved_n.get(p, 0.0) - saved_b.get(p, 0.0) for p in {*saved_b, *saved_n}}
    worst_pass = min(deltas, key=deltas.__getitem__, default=None)
    kb = _by_name(base["kernels"]["full"])
    kn = _by_name(new["kernels"]["full"])
    growth = {k: kn[k] - kb.get(k, 0.0) for k in kn}
    worst_kernel = max(growth, key=growth.__getitem__, default=None)
    return Verdict(
        v.workload,
        bs,
        ns,
        change,
        floor,
        True,
        False,
        worst_pass if worst_pass is not None and deltas[worst_pass] < 0 else None,
        deltas.get(worst_pass, 0.0) if worst_pass else 0.0,
        worst_kernel if worst_kernel is not None and growth[worst_kernel] > 0 else None,
        growth.get(worst_kernel, 0.0) if worst_kernel else 0.0,
    )


def _by_name(kernels: list[dict]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k in kernels:
        out[k["name"]] = out.get(k["name"], 0.0) + (k["seconds"] or 0.0)  # None: not timed
    return out
