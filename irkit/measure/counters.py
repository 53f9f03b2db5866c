"""Hardware counters per GPU kernel, read by Nsight Compute (`ncu`): `irkit-bench run --counters`.

ncu replays each kernel it profiles many times, so the counters come from a separate child
process, never from the timed run: the child compiles the same model with the same pipeline,
dims and seed, binds it and runs the driver once (one launch of each kernel); ncu profiles
only irkit's kernels (names `k<N>_...`), not the L2 flush or copies. What is kept per kernel:

- achieved occupancy: `sm__warps_active.avg.pct_of_peak_sustained_active` (%)
- DRAM throughput: `dram__throughput.avg.pct_of_peak_sustained_elapsed` (% of peak)
- L2 hit rate: `lts__t_sector_hit_rate.pct` (%)

Where ncu is missing, is refused the counters (a container without profiling rights, gVisor),
or fails, `collect` raises IrkitError with one line saying so and what ncu said last.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
from collections.abc import Mapping

from irkit.errors import IrkitError

METRICS = {
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "dram_throughput_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "l2_hit_rate_pct": "lts__t_sector_hit_rate.pct",
}


def collect(
    model: str,
    pipeline: str | None,
    dims: Mapping[str, int],
    seed: int,
    plugins: list[str] | None = None,
    timeout_s: float = 300.0,
) -> dict[str, dict[str, float]]:
    """{kernel name: {counter: value}} for each irkit kernel of the model, one launch each."""
    ncu = shutil.which("ncu")
    if ncu is None:
        raise IrkitError("--counters: ncu (Nsight Compute) is not on the PATH; no counters")
    child = [sys.executable, "-m", "irkit.measure.counters", model, "--seed", str(seed)]
    child += ["-p", pipeline] if pipeline else []
    child += [a for name, v in dims.items() for a in ("--dim", f"{name}={v}")]
    child += [a for p in plugins or [] for a in ("-L", p)]
    command = [ncu, "--csv", "--target-processes", "all", "--kernel-name", r"regex:^k\d+_",
               "--metrics", ",".join(METRICS.values()), *child]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise IrkitError(f"--counters: ncu did not finish in {timeout_s:.0f} s") from None
    counters = parse_ncu_csv(done.stdout)
    if done.returncode != 0 or not counters:
        said = [ln for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
        last = next(
            (ln for ln in reversed(said) if "==ERROR==" in ln or "error" in ln.lower()),
            said[-1] if said else "no output",
        )
        raise IrkitError(
            f"--counters: ncu exited {done.returncode} and read no counters: {last.strip()}"
        )
    return counters


def parse_ncu_csv(text: str) -> dict[str, dict[str, float]]:
    """ncu's --csv report (one row per kernel launch and metric) as {kernel: {counter: value}};
    a kernel launched more than once keeps its last launch's values."""
    names = {metric: ours for ours, metric in METRICS.items()}
    start = text.find('"ID"')
    if start < 0:
        return {}
    out: dict[str, dict[str, float]] = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        metric = names.get(row.get("Metric Name", ""))
        kernel = row.get("Kernel Name", "")
        if metric is None or not kernel:
            continue
        try:
            value = float(row.get("Metric Value", "").replace(",", ""))
        except ValueError:
            continue
        out.setdefault(kernel, {})[metric] = value
    return out


def _child() -> int:
    """Compile, bind and run the model once: the process that ncu profiles."""
    import argparse

    from irkit.frontend import load
    from irkit.plugins import load_plugins
    from irkit.runtime import compile
    from irkit.runtime.reference import random_inputs

    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("-p", dest="pipeline", default=None)
    parser.add_argument("--dim", action="append", default=[])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-L", dest="plugins", action="append", default=[])
    args = parser.parse_args()
    load_plugins(args.plugins)
    dims = {k: int(v) for k, v in (d.split("=", 1) for d in args.dim)}
    module = load(args.model, dims)
    exe = compile(module, args.pipeline, backend="cuda")
    exe.bind(*random_inputs(module, args.seed)).synchronize()  # bind runs the driver once
    return 0


if __name__ == "__main__":
    sys.exit(_child())
