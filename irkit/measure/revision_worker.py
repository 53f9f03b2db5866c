"""One side of a comparison across commits: a workload compiled by the irkit (and plugins) of
one revision, timed one round at a time on request (`irkit.measure.revisions` runs it).

It runs as `python -c <this file's text>` with the revision's checkouts first on the path,
so that `import irkit` is that commit's irkit: it uses only what irkit has long had
(`irkit.frontend.load`, `irkit.runtime.compile`, `irkit.runtime.check.check`, `bind` and `timed_graph`,
`irkit.pipelines.parse_passes`/`apply_passes`, `irkit.ir.to_text`), and says in one line
what it could not do. It speaks JSON lines: the job in, then `ready` (the pipeline's
passes, each prefix's IR hash, the kernels' names and code hashes) or `error`; then one
reply per request: `t` (seconds per call of the whole graph, one round), `k NAME` (one
kernel's), `ir K` (the IR after K passes), `q` (quit).
"""

import hashlib
import json
import math
import os
import sys
import time
import traceback

MIN_SAMPLE_S = 0.01
"""A round is one batch of back-to-back calls lasting at least this long."""

WARM_S = 0.05
"""Calls before the batch size is chosen: the first ones run on cold caches and pages."""


def _sample(fn, reps):
    if hasattr(fn, "sample"):  # a callable that times itself (device events)
        return float(fn.sample(reps))
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps


class _Timed:
    """A callable's rounds: `reps` calls each, chosen once (after WARM_S of calls) from the
    fastest of five calls, so that a round lasts MIN_SAMPLE_S even where the machine is
    slow for a moment while it is chosen."""

    def __init__(self, fn):
        self.fn = fn
        deadline = time.perf_counter() + WARM_S
        calls = 0
        while calls < 3 or time.perf_counter() < deadline:
            fn()
            calls += 1
        fastest = min(_sample(fn, 1) for _ in range(5))
        self.reps = max(1, min(1 << 20, math.ceil(MIN_SAMPLE_S / max(fastest, 1e-9))))

    def round(self):
        return _sample(self.fn, self.reps)


def _prepare(job):
    from irkit.frontend import load
    from irkit.ir import to_text
    from irkit.pipelines import apply_passes, parse_passes
    from irkit.plugins import load_plugins
    from irkit.runtime import compile
    from irkit.runtime.check import check

    if job.get("irkit_root"):
        where = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["irkit"].__file__)))
        if os.path.realpath(where) != os.path.realpath(job["irkit_root"]):
            raise RuntimeError(f"imported irkit from {where}, not the checkout {job['irkit_root']}")
    load_plugins(job.get("plugins") or [])
    dims = job.get("dims") or None
    module = load(job["model"], dims=dims)
    exe = compile(module.clone(), job.get("pipeline"), job.get("backend", "cpu"), dims)
    checks, inputs = check(exe, exe.graph if exe.graph is not None else module, job.get("seed", 0))
    wrong = [c for c in checks if not c.passed]
    if wrong:
        raise RuntimeError(f"a wrong result: {wrong[0].describe()}")
    passes = parse_passes(exe.pipeline or "")
    texts, current = [to_text(module)], module.clone()
    for p in passes:  # each prefix's IR, each pass run once
        current = apply_passes(current.clone(), [p])
        texts.append(to_text(current))
    bound = exe.bind(*inputs)
    timed = _Timed(bound.timed_graph())
    kernels = {r.name: i for i, r in enumerate(exe.kernels)}
    ready = {
        "ready": True,
        "irkit": os.path.abspath(sys.modules["irkit"].__file__),
        "pipeline": exe.pipeline,
        "passes": [str(p.pipeline_pass_spec()) for p in passes],
        "prefixes": [hashlib.sha256(t.encode()).hexdigest()[:16] for t in texts],
        "kernels": [[r.name, r.hash, bool(getattr(r, "once", False))] for r in exe.kernels],
        "reps": timed.reps,
    }
    return ready, texts, timed, bound, kernels


def main():
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # what irkit prints goes to stderr
    sys.stdout = sys.stderr

    def say(message):
        out.write(json.dumps(message) + "\n")
        out.flush()

    try:
        job = json.loads(sys.stdin.readline())
        ready, texts, timed, bound, kernels = _prepare(job)
    except Exception as e:  # everything goes back to the coordinator, in one line
        text = str(e).strip().splitlines()
        where = getattr(e, "location", None)  # an IrkitError's file:line:column
        first = f"{where}: {text[0] if text else ''}" if where else (text[0] if text else "")
        kind = "" if type(e).__name__ == "IrkitError" else f"{type(e).__name__}: "
        say({"error": kind + first, "trace": traceback.format_exc()})
        return
    say(ready)
    kernel_timers = {}
    for line in sys.stdin:
        request = line.split()
        if not request or request[0] == "q":
            break
        if request[0] == "t":
            say({"s": timed.round()})
        elif request[0] == "k" and len(request) == 2 and request[1] in kernels:
            name = request[1]
            if name not in kernel_timers:
                kernel_timers[name] = _Timed(bound.timed_kernel(kernels[name]))
            say({"s": kernel_timers[name].round()})
        elif (
            request[0] == "ir"
            and len(request) == 2
            and request[1].isdigit()
            and int(request[1]) < len(texts)
        ):
            say({"ir": texts[int(request[1])]})
        else:
            say({"error": f"unknown request {line.strip()!r}"})


if __name__ == "__main__":
    main()
