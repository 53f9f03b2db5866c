"""Attribution fidelity: does `irkit-bench attribute` find effects of known size (issue 24)?

    python benchmarks/fidelity.py [--examples elementwise_chain,mlp] [--strategies
        prefix,ablation,shapley] [--trials 20] [--budget 6] [--load] [--out FILE]

Passes of known cost are planted through irkit's public pass API (`irkit.measure.plants`,
a plugin) into an example's pipeline, after its real optional passes:

- `plant-work{iters=N}`: a spin kernel costing about 2%, 5% or 20% of the full program's
  time (the pass makes the program *slower*);
- `plant-waste{iters=N}` (required) and `plant-unwaste` (optional, removes it): the pass
  makes it *faster* by about 2%, 5% or 20%;
- `plant-zero`: new machine code, a call that costs nanoseconds (true effect 0);
- `plant-ir-only`: an IR change LLVM folds away (must get exactly 0).

Each trial is one `attribute` run with one slower plant and one faster plant of different
sizes (the sizes rotate over trials, so every size and direction gets `--trials` trials per
strategy). The truth is the plant's cost in the program, measured by an independent timer
(`perf_counter_ns` around single calls, not irkit's timers): the full program with and
without the spin, many fresh copies of each (`Truth`), sampled before the trials and
after every trial and pooled over the run, on the CPU scaled per trial by the machine's
speed then: the spins alone, timed in each trial, over their means, averaged over the
neighbouring trials (`assign_truth`). On a GPU (`--backend cuda`) the truth is not scaled,
plant-zero's truth is its kernel launch's measured cost (it is scored as the effects are),
and `--truth-timer device` takes the truth with the device's events after an L2 flush
around back-to-back calls batched as attribution batches them (its protocol there) instead
of the host's clock around one call.
The spin alone is not the truth itself: after the matmuls' AVX-512 code a 2% spin cost
mlp ~15 us more in the program than alone. Reported, per strategy and planted effect:
coverage (the true effect inside the 95% CI), sign accuracy, the significance rate (power), and the
false-positive rate for the zero-cost plant and for the A/A twins (a twin's CI excluding
equality). `--load` runs a process spinning on one core throughout (a loaded machine). One
JSON record per example and condition is appended to `--out`.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
import time
from pathlib import Path

import numpy as np

import irkit.measure.plants  # noqa: F401 (registers the plants)
from irkit.frontend import load
from irkit.measure.attribution import attribute
from irkit.measure.fingerprint import host_fingerprint, load_average
from irkit.measure.records import read_records
from irkit.measure.runs import combine_runs
from irkit.measure.stats import t_quantile
from irkit.measure.timers import MIN_SAMPLE_S, calibrate
from irkit.pipelines import apply_passes, parse_passes
from irkit.runtime import get_backend

HERE = Path(__file__).resolve().parent

EXAMPLES = {
    # backend: {example: (model, dims, the real optional passes and required lowering before
    # the plants)}; on the GPU path the plants come before map-to-gpu, which the backend adds
    "cpu": {
        "elementwise_chain": ("examples/elementwise_chain.graph", {},
                              "canonicalize,lower-graph-to-loops{keep-transcendentals=true},expand-math"),
        "mlp": ("examples/mlp.graph", {"D": 256, "F": 1024},
                "fuse-kernels,lower-graph-to-loops,cpu-tile-matmul"),
        # two more, not in the runs before 2026-11-27 night: a row kernel (exp, max and sum
        # per row) and a whole block (matmuls, softmax, layer norms, GELU), ~1.4 and ~0.7 ms
        "softmax": ("examples/softmax.graph", {},
                    "fuse-kernels,lower-graph-to-loops{keep-transcendentals=true},expand-math,"
                    "cpu-fuse-rows"),
        "transformer_block": ("examples/transformer_block.graph", {},
                              "fuse-kernels,lower-graph-to-loops{keep-transcendentals=true},"
                              "cpu-tile-matmul,expand-math,cpu-fuse-rows"),
        # and two more since 2026-11-27, late night: a convolution block (NHWC, an implicit
        # GEMM with its epilogue, a pool) and a layer norm's rows
        "conv_block": ("examples/conv_block.graph", {},
                       "conv-layout,fold-transposes,conv-to-matmul{implicit=true},fold-constants,"
                       "fuse-kernels{concat-transposes=false},lower-graph-to-loops,"
                       "cpu-tile-matmul,cpu-tile-transpose"),
        "layernorm": ("examples/layernorm.graph", {},
                      "fuse-kernels,lower-graph-to-loops,cpu-fuse-rows"),
    },
    "gpu": {
        "elementwise_chain": ("examples/elementwise_chain.graph", {},
                              "canonicalize,fuse-kernels,lower-graph-to-loops"),
        "mlp": ("examples/mlp.graph", {},
                "fuse-kernels,lower-graph-to-loops,pad-leading-dims,gpu-tile-matmul"),
        # a row kernel (map-to-gpu's block per row) and a whole block, as on the CPU
        "softmax": ("examples/softmax.graph", {}, "fuse-kernels,lower-graph-to-loops,gpu-coarsen"),
        "transformer_block": ("examples/transformer_block.graph", {},
                              "fuse-kernels,lower-graph-to-loops,pad-leading-dims,gpu-tile-matmul,"
                              "gpu-coarsen"),
    },
}  # fmt: skip
ZERO = -1
"""`Truth`'s key for plant-zero's program (measured off the CPU, where a launch costs)."""
QUICK_DIMS = {
    "elementwise_chain": {"N": 64, "D": 96},
    "mlp": {"B": 4, "D": 64, "F": 256},
    "softmax": {"R": 16, "C": 64},
    "transformer_block": {"S": 8, "D": 32, "F": 64},
    "conv_block": {"N": 1, "H": 12},
    "layernorm": {"T": 16, "H": 96},
}
"""`--quick`: test sizes (a check that the run works, e.g. the GPU path on the host)."""
SIZES = (0.02, 0.05, 0.20)


def examples_for(backend: str) -> dict[str, tuple[str, dict, str]]:
    return EXAMPLES["cpu" if backend == "cpu" else "gpu"]


def compiled(backend: str, model: Path, dims: dict, spec: str):
    """`model` through `spec` (and the backend's required lowering), compiled."""
    target, _ = get_backend(backend)
    return target.compile(target.lower(apply_passes(load(model, dims), parse_passes(spec))))


def another(backend: str, exe):
    """Another placement of `exe`: the backend's own copy (the same code linked or loaded
    again) where it has one, else a fresh compile (attribution's `_copy`)."""
    if callable(getattr(exe, "copy", None)):
        return exe.copy()
    return get_backend(backend)[0].compile(exe.module.clone())


def call_seconds(bound) -> float:
    """One call of a bound program, to its end on the device, by `perf_counter_ns`."""
    start = time.perf_counter_ns()
    bound.run_graph()
    bound.synchronize()
    return (time.perf_counter_ns() - start) * 1e-9


def call_timer(bound, timer: str = "host"):
    """A callable timing a call of `bound`: by the host's clock around one call
    (`call_seconds`), or with `timer="device"` as attribution times there: the device's
    events after an L2 flush around as many back-to-back calls as make a sample last
    `MIN_SAMPLE_S`, per call (the host's clock where the device has no events). With one call
    a sample, on an H200 (mlp, 2026-11-28), attribution measured every plant 0.2-0.45 us
    above this truth, plant-zero's launch 1.95 us against 1.75: the batching is the one
    difference left between the two protocols, so the truth now batches too."""
    if timer == "device":
        timed = bound.timed_graph()
        if callable(getattr(timed, "sample", None)):
            reps = calibrate(timed, MIN_SAMPLE_S)
            return lambda: timed.sample(reps)
    return lambda: call_seconds(bound)


def spin_seconds(iters: int, kind: str = "plant-work", backend: str = "cpu") -> float:
    """The spin kernel's time per call, by an independent timer, less the same for a spin
    of no iterations (the call's own cost). On the CPU the kernel is compiled alone and
    called directly in batches under `perf_counter_ns` (median of 15 batches); elsewhere a
    tiny program holding it runs as a whole, each call to its end on the device (median of
    41 calls)."""
    return _spin_call(iters, kind, backend) - _spin_call(0, kind, backend)


def _spin_call(iters: int, kind: str, backend: str = "cpu") -> float:
    tiny = HERE.parent / "examples" / "elementwise_chain.graph"
    exe = compiled(backend, tiny, {"N": 8, "D": 8}, f"lower-graph-to-loops,{kind}{{iters={iters}}}")
    if backend != "cpu":
        from irkit.runtime.check import reference_case

        bound = exe.bind(*reference_case(load(tiny, {"N": 8, "D": 8}), 0)[0])
        return float(np.median([call_seconds(bound) for _ in range(41)]))
    name = "planted_work" if kind == "plant-work" else "planted_waste"
    buf = [np.zeros(1, np.float32)]
    exe.launch(name, buf)
    reps = max(1, int(2e-3 / max(_batch(exe, name, buf, 3), 1e-9)))
    return float(np.median([_batch(exe, name, buf, reps) for _ in range(15)]))


def _batch(exe, name: str, buf, reps: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(reps):
        exe.launch(name, buf)
    return (time.perf_counter_ns() - start) * 1e-9 / reps


def program_seconds(model: Path, dims: dict, spec: str, backend: str = "cpu", copies: int = 6,
                    seconds: float = 3.0) -> float:  # fmt: skip
    """The program's time per call, by which the plants are sized: `copies` fresh copies
    timed in turn for `seconds`, the median of their medians. (One copy's 30 calls had sized
    elementwise_chain at 1.42 ms under load where its trials then ran 2.12 ms, and at 2.72
    ms where they ran 2.03: plants of 1.4-2.7% where 2% was meant.)"""
    from irkit.runtime.check import reference_case

    exe = compiled(backend, model, dims, spec)
    inputs = reference_case(load(model, dims), 0)[0]
    bound = [another(backend, exe).bind(*inputs) for _ in range(copies)]
    times: list[list[float]] = [[] for _ in bound]
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times[-1]) < 5:
        for b, t in zip(bound, times, strict=True):
            t.append(call_seconds(b))
    return float(np.median([np.median(t) for t in times]))


class Truth:
    """The plants' cost inside the program, by an independent timer, sampled through the run.

    The base program (`real`) and the program with each plant (`real` + `plant-work{iters=N}`)
    are compiled once. Each `sample` links and binds `copies` fresh copies of every one of
    them (new code and buffer addresses, as attribution's placements are), slot by slot in a
    random order, and times single calls of the bound programs (`perf_counter_ns`, not
    irkit's timers), the slot rotating round by round, the programs in a random order in
    each round; each slot gives one difference per plant: the median of the plant's copy
    less the median of the base's. The truth is the mean of those differences over every
    sample of the run (one before the trials, one after each trial), with its standard
    error over them.

    Why so many copies: two copies of one program differ by ~40-60 us (elementwise_chain,
    2 ms, quiet), so a difference taken over six copies moved by 30-100 us between two
    measurements (and under load from 11.6 to 113 us for a 37 us plant); ~700 copy pairs
    pin it to a few microseconds. Why not time the plant within one binding (the kernels
    replayed with and without the spin): the kernel before it then runs on the buffers it
    just wrote, warm, where attribution's calls follow another program's; that measured
    the spin 10-15 us cheaper than it is alone, and than attribution found."""

    def __init__(self, model: Path, dims: dict, real: str, iters: list[int], seed: int = 0,
                 backend: str = "cpu", timer: str = "host"):  # fmt: skip
        from irkit.runtime.check import reference_case

        self.backend, self.timer = backend, timer
        self.inputs = reference_case(load(model, dims), 0)[0]
        specs = {0: real, **{n: f"{real},plant-work{{iters={n}}}" for n in iters}}
        if backend != "cpu":  # a kernel launch is not free there: plant-zero's cost measured
            specs[ZERO] = f"{real},plant-zero"
        self.exes = {n: compiled(backend, model, dims, spec) for n, spec in specs.items()}
        self.rng = np.random.default_rng(seed)
        self.samples: list[dict] = []

    def sample(self, copies: int = 8, seconds: float = 2.0, min_calls: int = 5) -> dict:
        """One sample: `copies` fresh copies of every program, timed interleaved for
        `seconds` (and at least `min_calls` calls of each copy); returns and keeps
        {"at": time, "diffs": {iters: [one difference per slot]}, "base_s": [the base
        program's median per slot]}."""
        keys = list(self.exes)
        bound: list[dict[int, object]] = [{} for _ in range(copies)]
        for slot in range(copies):
            for n in self.rng.permutation(keys):
                copy = another(self.backend, self.exes[int(n)]).bind(*self.inputs)
                bound[slot][int(n)] = call_timer(copy, self.timer)
        times: list[dict[int, list[float]]] = [{n: [] for n in keys} for _ in range(copies)]
        deadline = time.perf_counter() + seconds
        r = 0
        while time.perf_counter() < deadline or r < min_calls * copies:
            slot = r % copies
            for n in self.rng.permutation(keys):
                times[slot][int(n)].append(bound[slot][int(n)]())
            r += 1
        diffs = {n: [float(np.median(t[n]) - np.median(t[0])) for t in times] for n in keys if n}
        # the base program's own time by slot, near the trial: kept for analysis, not used
        # in scoring (a run's plant cost follows it only weakly, 0.85% for a program 5%
        # slower: docs/results.md, 2026-11-27, night)
        base = [float(np.median(t[0])) for t in times]
        sample = {"at": time.time(), "rounds": r, "diffs": diffs, "base_s": base}
        self.samples.append(sample)
        return sample

    def summary(self) -> dict[str, dict]:
        """Per plant (its iterations): the mean difference over every sample's slots so
        far, its standard error and the number of copy pairs."""
        return summarize_truth(self.samples)


def summarize_truth(samples: list[dict]) -> dict[str, dict]:
    pooled: dict[str, list[float]] = {}
    for s in samples:
        for n, d in s["diffs"].items():
            pooled.setdefault(str(n), []).extend(d)
    return {n: {"seconds": float(np.mean(d)), "se": float(np.std(d, ddof=1) / np.sqrt(len(d))),
                "pairs": len(d)} for n, d in pooled.items()}  # fmt: skip


def spin_forever() -> None:
    """A busy loop: what `--load` runs in a process of its own (one core loaded)."""
    x = 1.0
    while True:
        x = x * 0.999 + 1e-3


def trial(model: Path, dims: dict, real: str, strategy: str, slow: int, fast: int,
          budget: float, seed: int, placements: int | None = None, stop: str = "verdicts",
          backend: str = "cpu", rounds_to: Path | None = None, runs: int = 1) -> dict:  # fmt: skip
    """One attribution run with the plants; the spin kernels alone timed before and after
    (a drift check); the truth (in the program) is filled in by `main`. `rounds_to`: a
    folder the run's measured rounds go to (`save_rounds`), for re-analysis. `runs`: the
    attribution repeated that many times and combined (`irkit.measure.runs`, as `attribute
    --runs`; the twins and the rounds saved are the first run's)."""
    before = (spin_seconds(slow, backend=backend), spin_seconds(fast, backend=backend))
    spec = (f"{real},plant-waste{{iters={fast}}},plant-work{{iters={slow}}},plant-unwaste,"
            "plant-zero,plant-ir-only")  # fmt: skip
    load_start = load_average()

    def once():
        return attribute(model, spec, backend, strategy, dims, budget_s=budget, seed=seed,
                         kernel_times=False, placements=placements, stop=stop)  # fmt: skip

    measured = once()
    result = measured.to_json()
    if runs > 1:
        result = combine_runs([result, *(once().to_json() for _ in range(runs - 1))])
    saved = save_rounds(measured, rounds_to, f"{model.stem}_{strategy}_{seed:03d}_{slow}_{fast}") if rounds_to else None  # fmt: skip
    after = (spin_seconds(slow, backend=backend), spin_seconds(fast, backend=backend))
    passes = {p["pass"]: p for p in result["passes"]}
    noise = result["noise_floor"]
    twins = [noise[k] for k in ("aa_ratio", "aa_ratio_baseline") if k in noise]
    return {
        "strategy": strategy,
        "iters": {"plant-work": slow, "plant-unwaste": fast},
        "spin_alone_s": {"plant-work": (before[0] + after[0]) / 2,
                         "plant-unwaste": (before[1] + after[1]) / 2},
        "spin_drift": [after[0] / before[0] - 1, after[1] / before[1] - 1],
        "passes": {name: {"saved_s": p["saved_s"], "significant": p["significant"],
                          "changes_code": p["changes_code"], "mde_s": p["min_detectable_s"]}
                   for name, p in passes.items()},
        "twins_exclude_1": [t["ci_low"] > 1 or t["ci_high"] < 1 for t in twins],
        "full_s": result["total"]["full_s"]["median"],
        "rounds": result["protocol"]["rounds"],
        "stop_reason": result["protocol"]["stop_reason"],
        "placements": result["protocol"]["placements"],
        "placement_io": result["protocol"].get("placement_io"),
        "copy_sd": result["protocol"].get("copy_sd"),
        "load": [load_start, load_average()],
        "aa_failed": noise.get("aa_failed"),
        **({"rounds_file": saved} if saved else {}),
    }  # fmt: skip


def save_rounds(measured, folder: Path, name: str) -> str:
    """A run's measured rounds (`Attribution.rounds`) as `folder/name.npz`: "seconds"
    [program, round], "slots", "programs" (keys), "masks" [variant, pass] and "variant_program"
    (each variant's row in "seconds"), "passes" (the optional passes' labels)."""
    r = measured.rounds
    folder.mkdir(parents=True, exist_ok=True)
    row = {k: i for i, k in enumerate(r["programs"])}
    path = folder / f"{name}.npz"
    np.savez_compressed(path, seconds=r["seconds"], slots=r["slots"], programs=np.array(r["programs"]),
                        masks=np.array([m for m, _ in r["variants"]], dtype=bool),
                        variant_program=np.array([row[k] for _, k in r["variants"]]),
                        passes=np.array([s.label for s in measured.steps if s.optional]))  # fmt: skip
    return str(path)


SPEED_WINDOW = 5
"""Trials either side whose spins `assign_truth` averages into a trial's machine speed."""


SPIN_OUTLIER = 1.25
"""A trial's spin timed alone above this multiple of that spin's median over the run is an
interruption, not the machine's speed: the trial takes its neighbours' speed."""


def assign_truth(trials: list[dict], truth: dict[str, dict], backend: str = "cpu") -> None:
    """Each trial's true effects: each plant's cost in the program (`truth`, by its iterations:
    `Truth.summary`, pooled over the run), on the CPU scaled by the machine's speed at the
    trial (`_speeds`): the spins timed alone (`spin_alone_s`, an independent timer) over their
    means through the run, both spins of a trial averaged, and averaged again over the trials
    within `SPEED_WINDOW` either side in run order. (A run where this VM slowed by ~4% over its
    last third, the spin alone 312 -> 300 us, put a 20% plant's global truth outside 12 of 20
    Shapley CIs; scaled, 2 of 20. Scaled by each trial's own spins alone, the truth took their
    noise: 1-2% trial to trial, uncorrelated with the effects measured in the trials
    (correlation -0.1 to 0.1 in the 20% plants of the six runs of 2026-11-24/25) and with the
    next trial's, and mlp's 20% prefix cell covered 33/40 against 36/40 with the scale
    smoothed, which still follows the slow drift.) A trial whose spins alone took more than
    `SPIN_OUTLIER` times their median was interrupted while they were timed (one timed 3.2x
    while a test suite ran beside the run, and the mean over its window raised eleven trials'
    truth by 5-10%): its speed is left out, here and in the means. The zero-cost plants' truth
    is 0 on the CPU; off it plant-zero's is its kernel launch's cost, measured in the program
    as the spins' are (`ZERO`).

    Off the CPU the truth is not scaled. The spin alone is timed there by the host's clock
    around a whole tiny program's launch and synchronization, whose spread (-8 to +8 us for
    a 3-us spin, in the H200 runs of 2026-11-27) scaled the truth by up to 1.5; a GPU's
    clock is read at each record's start and end instead (nvidia-smi)."""
    zero = truth[str(ZERO)]["seconds"] if str(ZERO) in truth else 0.0
    scales = _speeds(trials) if backend == "cpu" else np.ones(len(trials))
    for t, scale in zip(trials, scales, strict=True):
        cost = {k: truth[str(n)]["seconds"] * float(scale) for k, n in t["iters"].items()}
        t["truth"] = {"plant-work": -cost["plant-work"], "plant-unwaste": cost["plant-unwaste"],
                      "plant-zero": -zero, "plant-ir-only": 0.0}  # fmt: skip


def _speeds(trials: list[dict]) -> np.ndarray:
    """The machine's speed at each trial, relative to the run (`assign_truth`)."""
    alone = {n: np.array(v) for n, v in _spin_alone(trials).items()}
    typical = {n: float(np.median(v)) for n, v in alone.items()}
    speed = {n: float(np.mean(v[v <= typical[n] * SPIN_OUTLIER])) for n, v in alone.items()}
    own = np.array([np.nan if any(t["spin_alone_s"][k] > typical[str(n)] * SPIN_OUTLIER
                                  for k, n in t["iters"].items())
                    else np.mean([t["spin_alone_s"][k] / speed[str(n)] for k, n in t["iters"].items()])
                    for t in trials])  # fmt: skip
    scales = []
    for i in range(len(trials)):
        window = own[max(0, i - SPEED_WINDOW) : i + SPEED_WINDOW + 1]
        scales.append(float(np.nanmean(window)) if not np.isnan(window).all() else 1.0)
    return np.array(scales)


def record_truth(rec: dict) -> dict[str, dict]:
    """A record's truth by plant iterations (`Truth.summary`); records before the sampled
    truth (`truths`: six copies each, before and after each strategy) give the mean of
    their measurements, its standard error over them, and `pairs` six per measurement."""
    if "truth_samples" in rec:
        return summarize_truth(rec["truth_samples"])
    seen: dict[str, list[float]] = {}
    for m in [rec["truths"][0]["before"], *(b["after"] for b in rec["truths"])]:
        for n, v in m.items():
            seen.setdefault(str(n), []).append(v["seconds"])
    return {n: {"seconds": float(np.mean(v)),
                "se": float(np.std(v, ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan"),
                "pairs": 6 * len(v)} for n, v in seen.items()}  # fmt: skip


def _spin_alone(trials: list[dict]) -> dict[str, list[float]]:
    """The spin's time alone in every trial, by its iteration count."""
    alone: dict[str, list[float]] = {}
    for t in trials:
        for k, n in t["iters"].items():
            alone.setdefault(str(n), []).append(t["spin_alone_s"][k])
    return alone


def summarize(trials: list[dict], iters: dict[float, int]) -> dict:
    """Coverage, sign accuracy and power per strategy and planted effect; the false-positive
    rates of the zero-cost plants and the twins."""
    table: dict = {}
    for t in trials:
        for name, truth in t["truth"].items():
            p = t["passes"][name]
            s = p["saved_s"]
            if name in ("plant-work", "plant-unwaste"):
                size = next(f for f, n in iters.items() if n == t["iters"][name])
                key = f"{'slower' if name == 'plant-work' else 'faster'} {size:.0%}"
            else:
                key = name
            row = table.setdefault(t["strategy"], {}).setdefault(key, {"n": 0, "covered": 0, "sign": 0, "significant": 0, "exact_zero": 0})  # fmt: skip
            row["n"] += 1
            row["covered"] += s["ci_low"] <= truth <= s["ci_high"]
            row["sign"] += (s["value"] > 0) == (truth > 0) if truth else 0
            row["significant"] += bool(p["significant"])
            row["exact_zero"] += s["value"] == 0 and s["ci_low"] == 0 and s["ci_high"] == 0
        row = table[t["strategy"]].setdefault("A/A twins", {"n": 0, "excluded_1": 0})
        row["n"] += len(t["twins_exclude_1"])
        row["excluded_1"] += sum(t["twins_exclude_1"])
    return table


def run_example(example: str, args: argparse.Namespace) -> dict:
    """Every strategy's trials on one example, the truth sampled before the first trial and
    after every trial (`Truth`); returns the example's record."""
    model_name, dims, real = examples_for(args.backend)[example]
    if args.quick:
        dims = QUICK_DIMS[example]
    model = HERE.parent / model_name
    fingerprint = host_fingerprint()  # at the start: the code measured, not a later commit
    full_s = program_seconds(model, dims, real, args.backend, seconds=0.3 if args.quick else 3.0)
    # the median of five: one measurement sized a run's plants at 2.02 ns an iteration
    # where its trials' spins ran 1.65, plants of 1.6%, 4.1% and 16% meant as 2, 5 and 20%
    per_iter = float(np.median([spin_seconds(100_000, backend=args.backend)
                                for _ in range(1 if args.quick else 5)])) / 100_000  # fmt: skip
    iters = {size: max(1, round(size * full_s / per_iter)) for size in SIZES}
    print(f"{example}: full program {full_s * 1e3:.3f} ms; spin {per_iter * 1e9:.2f} ns/iter; "
          f"plants {iters}", flush=True)  # fmt: skip
    trials = []
    runs = len(SIZES) * args.trials  # each size once slower and once faster per cycle
    truth = Truth(model, dims, real, list(iters.values()), backend=args.backend,
                  timer=args.truth_timer)  # fmt: skip

    def sample_truth() -> None:
        truth.sample(args.truth_copies, args.truth_seconds)

    for _ in range(args.truth_first):
        sample_truth()
    for strategy in args.strategies.split(","):
        for j in range(runs):
            slow = iters[SIZES[j % 3]]
            fast = iters[SIZES[(j + 1 + (j // 3) % 2) % 3]]
            t = trial(model, dims, real, strategy, slow, fast, args.budget, seed=j,
                      placements=args.placements, stop=args.stop, backend=args.backend,
                      rounds_to=Path(args.rounds) if args.rounds else None, runs=args.runs)  # fmt: skip
            trials.append(t)
            sample_truth()
            w, u = (
                t["passes"]["plant-work"]["saved_s"],
                t["passes"]["plant-unwaste"]["saved_s"],
            )
            print(f"  {strategy} {j}: work ({slow}) in [{w['ci_low'] * 1e6:+.1f}, "
                  f"{w['ci_high'] * 1e6:+.1f}] us, unwaste ({fast}) in "
                  f"[{u['ci_low'] * 1e6:+.1f}, {u['ci_high'] * 1e6:+.1f}], zero "
                  f"{'SIG' if t['passes']['plant-zero']['significant'] else 'ok'}, "
                  f"twins {t['twins_exclude_1']}", flush=True)  # fmt: skip
        print("  truth so far (in the program): "
              + ", ".join(f"{n}: {v['seconds'] * 1e6:.1f} +- {v['se'] * 1e6:.1f} us "
                          f"({v['pairs']} pairs)" for n, v in truth.summary().items()),
              flush=True)  # fmt: skip
    assign_truth(trials, truth.summary(), args.backend)
    table = summarize(trials, iters)
    _print(example, table, zero_costs=args.backend != "cpu")
    return {
        "kind": "irkit.fidelity", "example": example, "backend": args.backend, "dims": dims,
        "pipeline": real, "loaded": args.load, "quick": args.quick, "budget_s": args.budget,
        "runs": args.runs,
        "placements": args.placements,
        "stop": args.stop, "git_sha": fingerprint.get("git_sha"), "full_s": full_s,
        "plant_iters": iters, "summary": table, "truth": truth.summary(),
        "truth_method": "the plant's cost in the full program: T(with) - T(without), each "
                        f"sample {args.truth_copies} fresh copies (linked and bound) of the "
                        "base program and of each planted one, single calls timed "
                        "interleaved under "
                        + ("perf_counter_ns" if args.truth_timer == "host" else
                           "the device's events, the L2 flushed before each call")
                        + f", one difference of medians per copy slot; {args.truth_first} "
                        "samples before the trials and one after each trial, the mean of "
                        "every difference of the run"
                        + (", scaled per trial by the spins alone timed in that trial over "
                           f"their means, averaged over the trials within {SPEED_WINDOW} "
                           "either side (the machine's speed then)"
                           if args.backend == "cpu" else " (not scaled off the CPU)"),
        "truth_timer": args.truth_timer,
        "truth_samples": truth.samples, "trials": trials, "fingerprint": fingerprint,
        **({} if args.backend == "cpu" else {"device": get_backend(args.backend)[0].fingerprint()}),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", default="elementwise_chain,mlp")
    ap.add_argument("--backend", default="cpu",
                    help="cpu, or on a GPU host cuda (cuda-host runs the GPU path on this CPU: "
                         "a check that it works, not a fidelity measurement)")  # fmt: skip
    ap.add_argument("--strategies", default="prefix,ablation,shapley")
    ap.add_argument("--trials", type=int, default=20,
                    help="trials per strategy and planted size (each run plants two sizes)")  # fmt: skip
    ap.add_argument("--budget", type=float, default=10.0, help="attribute's budget_s per run")
    ap.add_argument("--runs", type=int, default=1,
                    help="each trial's attribution repeated this many times and combined "
                         "(attribute --runs: every CI from the runs' spread)")  # fmt: skip
    ap.add_argument("--placements", type=int, default=None,
                    help="attribute's placements (default: attribute's own, automatic)")  # fmt: skip
    ap.add_argument("--truth-seconds", type=float, default=2.0,
                    help="seconds of each sample of the plants' cost in the program (one "
                         "sample after every trial)")  # fmt: skip
    ap.add_argument(
        "--truth-copies", type=int, default=8, help="fresh copies of every program per truth sample"
    )
    ap.add_argument("--truth-timer", default="host", choices=("host", "device"),
                    help="the truth's clock: the host's around each call to its end on the device "
                         "(perf_counter_ns), or the device's own (a GPU's events after an L2 "
                         "flush, attribution's protocol there)")  # fmt: skip
    ap.add_argument(
        "--truth-first", type=int, default=4, help="truth samples before the first trial"
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="test sizes: a check that the run works, not a measurement",
    )
    ap.add_argument("--stop", default="verdicts", choices=("verdicts", "medians"))
    ap.add_argument("--load", action="store_true", help="keep one core busy throughout")
    ap.add_argument("--rounds", default=None, metavar="DIR",
                    help="save every run's measured rounds here (.npz, one per run), for "
                         "re-analysing the CIs against the truth")  # fmt: skip
    ap.add_argument("--out", default=None, help="append the records (JSON Lines)")
    ap.add_argument("--markdown", default=None, metavar="RECORDS",
                    help="print the records of a JSON Lines file as a markdown table, and exit")  # fmt: skip
    args = ap.parse_args(argv)
    if args.markdown:
        print(markdown(list(read_records(args.markdown))))
        return 0
    loader = None
    if args.load:
        loader = multiprocessing.Process(target=spin_forever, daemon=True)
        loader.start()
    try:
        for example in args.examples.split(","):
            record = run_example(example, args)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(record) + "\n")
    finally:
        if loader is not None:
            loader.terminate()
    return 0


ORDER = ("slower 2%", "faster 2%", "slower 5%", "faster 5%", "slower 20%", "faster 20%")


def _machine(rec: dict) -> str:
    machine = "one core loaded" if rec["loaded"] else "quiet"
    backend = rec.get("backend", "cpu")
    return machine if backend == "cpu" else f"{backend}, host {machine}"


def markdown(records: list[dict]) -> str:
    """The records as one table: a row per example, condition, strategy and effect (counts
    and rates as measured), then one per strategy for the zero-cost plants and twins."""
    lines = ["| example | machine | strategy | planted | trials | coverage | sign | significant |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    zero = ["| example | machine | strategy | zero-cost plant called significant | IR-only plant exactly 0 | A/A twins excluding 1 |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for rec in records:
        machine = _machine(rec)
        iters = {float(k): v for k, v in rec["plant_iters"].items()}
        assign_truth(rec["trials"], record_truth(rec), rec.get("backend", "cpu"))
        rec["summary"] = summarize(rec["trials"], iters)
        # off the CPU plant-zero costs a kernel launch: scored as the effects are
        launch = rec.get("backend", "cpu") != "cpu"
        for strategy, rows in rec["summary"].items():
            for key in (*ORDER, "plant-zero") if launch else ORDER:
                r = rows.get(key)
                if r:
                    n = r["n"]
                    label = "plant-zero (a launch)" if key == "plant-zero" else key
                    lines.append(f"| {rec['example']} | {machine} | {strategy} | {label} | {n} | "
                                 f"{r['covered'] / n:.0%} | {r['sign'] / n:.0%} | "
                                 f"{r['significant'] / n:.0%} |")  # fmt: skip
            z, ir, aa = rows["plant-zero"], rows["plant-ir-only"], rows["A/A twins"]
            called = "(a launch: above)" if launch else f"{z['significant']}/{z['n']}"
            zero.append(f"| {rec['example']} | {machine} | {strategy} | {called} | "
                        f"{ir['exact_zero']}/{ir['n']} | {aa['excluded_1']}/{aa['n']} |")  # fmt: skip
    truth = ["| example | machine | planted (iterations) | spin alone | in the program | its standard error |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for rec in records:
        machine = _machine(rec)
        alone = _spin_alone(rec["trials"])
        for size, n in rec["plant_iters"].items():
            v = record_truth(rec)[str(n)]
            truth.append(f"| {rec['example']} | {machine} | {float(size):.0%} ({n}) | "
                         f"{np.mean(alone[str(n)]) * 1e6:.1f} us | {v['seconds'] * 1e6:.1f} us | "
                         f"{v['se'] * 1e6:.1f} us ({v['pairs']} copy pairs) |")  # fmt: skip
    tables = ["\n".join(lines), "\n".join(zero), "\n".join(truth), calibration(records)]
    return "\n\n".join(tables)


def ci_quantile(record: dict) -> float:
    """The quantile a record's 95% CIs were built with: the normal's 1.96 for one run a
    trial (bootstrap CIs), Student's t with runs - 1 degrees of freedom for `--runs N`
    (`irkit.measure.runs`: 3.18 for 4 runs)."""
    runs = int(record.get("runs") or 1)
    return 1.96 if runs <= 1 else t_quantile(0.975, runs - 1)


def standard_errors(trial: dict, quantile: float = 1.96) -> dict[str, float]:
    """Each planted pass's error in units of its CI's standard error: (estimate - truth)
    over the CI's half on the truth's side / `quantile` (`ci_quantile`). A calibrated 95%
    CI gives errors beyond `quantile` 5% of the time, with standard deviation ~1 (normal)
    or sqrt(df / (df - 2)) (t: 1.73 for 3 degrees of freedom); per-cell coverage of 20-40
    trials cannot tell 93% from 95%, the errors pooled over a run's plants come closer."""
    out = {}
    for name in ("plant-work", "plant-unwaste", "plant-zero"):
        s, truth = trial["passes"][name]["saved_s"], trial["truth"][name]
        half = (s["value"] - s["ci_low"]) if s["value"] > truth else (s["ci_high"] - s["value"])
        if half > 0:
            out[name] = (s["value"] - truth) / (half / quantile)
    return out


def calibration(records: list[dict]) -> str:
    """Per example, condition and strategy, the planted passes' standardized errors
    (`standard_errors`, truth assigned): their count, mean, standard deviation beside the
    one a calibrated CI's errors have, and the share beyond the CI's quantile (the CI
    missing the truth) with its Wilson 95% interval."""
    lines = ["| example | machine | strategy | planted passes | mean error (SE units) | its sd (calibrated) | CI missed the truth (95% interval) |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for rec in records:
        assign_truth(rec["trials"], record_truth(rec), rec.get("backend", "cpu"))
        q = ci_quantile(rec)
        runs = int(rec.get("runs") or 1)
        df = runs - 1
        expected = 1.0 if runs <= 1 else (math.sqrt(df / (df - 2)) if df > 2 else math.inf)
        by: dict[str, list[float]] = {}
        for t in rec["trials"]:
            by.setdefault(t["strategy"], []).extend(standard_errors(t, q).values())
        for strategy, z in by.items():
            z_ = np.array(z)
            n, k = len(z_), int(np.sum(np.abs(z_) > q))
            lo, hi = _wilson(k, n)
            lines.append(f"| {rec['example']} | {_machine(rec)} | {strategy} | {n} | {z_.mean():+.2f} | "
                         f"{z_.std(ddof=1):.2f} ({expected:.2f}) | {k / n:.1%} ({lo:.1%}-{hi:.1%}) |")  # fmt: skip
    return "\n".join(lines)


def _wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion k/n."""
    p, d = k / n, 1 + z * z / n
    centre, half = (p + z * z / (2 * n)) / d, z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, centre - half), min(1.0, centre + half)


def _print(example: str, table: dict, zero_costs: bool = False) -> None:
    """`table` (`summarize`) as lines; `zero_costs`: plant-zero has a true cost (a kernel
    launch, off the CPU) and is scored as the effects are."""
    print(f"\n{example}")
    for strategy, rows in table.items():
        for key, r in rows.items():
            n = r["n"]
            if key == "A/A twins":
                print(f"  {strategy:9} {key:14} n={n:3}  false positives {r['excluded_1'] / n:.0%}")
            elif key.startswith(("slower", "faster")) or (zero_costs and key == "plant-zero"):
                print(f"  {strategy:9} {key:14} n={n:3}  coverage {r['covered'] / n:.0%}  "
                      f"sign {r['sign'] / n:.0%}  significant {r['significant'] / n:.0%}")  # fmt: skip
            else:
                print(f"  {strategy:9} {key:14} n={n:3}  false positives {r['significant'] / n:.0%}  "
                      f"exactly zero {r['exact_zero'] / n:.0%}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
