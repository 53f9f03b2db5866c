"""Where and with what a number was measured: every result record carries this."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import time
from functools import cache
from pathlib import Path

import numpy as np


@cache
def git_sha() -> str | None:
    """The git commit of the irkit source tree (with "-dirty" if modified), if it is one. The
    curated records under benchmarks/results/ do not count as a modification: a benchmark
    appending to one must not mark the next run's commit dirty. A
    copy of the tree shipped elsewhere (to a GPU host) names its commit in `$IRKIT_SOURCE_SHA`,
    which wins (the copy's own .git, if any, may be stale), recorded with " (copy)"."""
    copied = os.environ.get("IRKIT_SOURCE_SHA")
    if copied:
        return f"{copied} (copy)"
    return repo_commit(Path(__file__).resolve().parents[2], (".", ":(exclude)benchmarks/results"))


def repo_commit(path: Path, pathspec: tuple[str, ...] = ()) -> str | None:
    """The commit of the git repository holding `path` (with "-dirty" where its tracked
    files, or those of `pathspec`, are modified), or None outside one."""
    folder = path if path.is_dir() else path.parent
    try:
        git = ["git", "--no-optional-locks", "-C", str(folder)]
        sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return None
        status = [*git, "status", "--porcelain", "--untracked-files=no"]
        if pathspec:
            status += ["--", *pathspec]
        dirty = subprocess.run(status, capture_output=True, text=True, timeout=5)
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def plugin_repos() -> dict[str, str | None]:
    """Each loaded plugin (`IRKIT_PLUGINS`: a file, or a module by name) and the commit of
    the repository it came from: with irkit's own, what a result was built from (a
    regression may come from a plugin repository's commit, not irkit's)."""
    import sys

    from irkit.plugins import ENV

    out: dict[str, str | None] = {}
    for name in [n for n in os.environ.get(ENV, "").split(os.pathsep) if n]:
        path = Path(name)
        if not path.is_file():
            module = sys.modules.get(name)
            path = Path(getattr(module, "__file__", None) or ".")
        key = str(path.resolve()) if Path(name).is_file() else name  # a file: where it is
        out[key] = repo_commit(path.resolve()) if path.exists() else None
    return out


def host_fingerprint() -> dict:
    """The host CPU and software stack (for CPU results)."""
    import llvmlite
    import llvmlite.binding as llvm

    from irkit.codegen.host import host_target, thread_pool
    from irkit.host import instruction_set, vector_bits, vector_registers
    from irkit.version import __version__

    target = host_target()
    plugins = plugin_repos()
    return {
        "irkit_version": __version__,
        "git_sha": git_sha(),
        **({"plugins": plugins} if plugins else {}),
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "llvmlite": llvmlite.__version__,
        "llvm": ".".join(map(str, llvm.llvm_version_info)),
        "cpu": target.cpu,
        "cpu_features_sha": hashlib.sha256(target.features.encode()).hexdigest()[:12],
        "cpu_count": os.cpu_count(),
        # what cpu-parallelize{threads=0} resolves to: the CPUs this process may use,
        # unless IRKIT_NUM_THREADS says otherwise
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "irkit_num_threads": os.environ.get("IRKIT_NUM_THREADS"),
        # threaded loops: libgomp's pool, or threads created per loop; 512- or 256-bit vectors
        "thread_pool": {"irkit": "irkit", "gomp": "libgomp"}.get(thread_pool(), "pthreads"),
        "gomp_spincount": os.environ.get("GOMP_SPINCOUNT") if thread_pool() == "gomp" else None,
        "vector_bits_pref": os.environ.get("IRKIT_VECTOR_BITS", "512"),
        # what cpu-tile-matmul's and cpu-tile-transpose's vector-bits=0 resolve to here
        "vector_bits": vector_bits(),
        "vector_registers": vector_registers(),
        # the widest x86 vector extension the host has, by name (records from AVX2 and
        # AVX-512 hosts are not comparable figure for figure)
        "isa": instruction_set(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def load_average() -> float | None:
    """The host's 1-minute load average (None where the OS has none)."""
    import os

    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def run_queue() -> int | None:
    """Threads of other processes runnable on the host right now (`procs_running` of
    /proc/stat, less this process's own threads in state R: its measuring thread, and any
    pool it has running, such as numpy's BLAS workers still spinning after a reference
    computation, which on a 16-CPU GPU host had read as 15 other runnable threads); None
    where the OS has none."""
    try:
        with open("/proc/stat") as f:
            total = next(
                (int(line.split()[1]) for line in f if line.startswith("procs_running")), None
            )
    except OSError:
        return None
    if total is None:
        return None
    return max(total - max(_own_running(), 1), 0)


def _own_running() -> int:
    """This process's threads in state R (/proc/self/task/*/stat), the calling one included."""
    import os

    running = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 1
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # the thread ended
        running += stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] == "R"
    return running


class RunQueueSampler:
    """Other processes' runnable threads sampled through a measurement (at most one reading
    per `interval_s`): their mean is the load the measurement shared the host with, which
    the 1-minute load average gives only with a minute's lag (it still held a finished
    compilation's threads when the GPU host's next step began)."""

    def __init__(self, interval_s: float = 0.05):
        self.interval_s = interval_s
        self.samples: list[int] = []
        self._last = -1e9

    def __call__(self) -> None:
        import time

        now = time.perf_counter()
        if now - self._last < self.interval_s:
            return
        self._last = now
        q = run_queue()
        if q is not None:
            self.samples.append(q)

    @property
    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


QUIET_RUN_QUEUE = 0.25
"""A quiet machine: other threads runnable, averaged over a second, at most this many."""


def wait_until_quiet(max_wait_s: float, poll_s: float = 0.05) -> dict:
    """Wait until the host is quiet (`QUIET_RUN_QUEUE`: the run queue, the measuring
    process excluded, averaged over one-second windows) or `max_wait_s` has passed; returns
    what happened: seconds waited, whether it got quiet, the last window's mean run queue."""
    import time

    start = time.perf_counter()
    mean = None
    while True:
        window = []
        end = time.perf_counter() + 1.0
        while time.perf_counter() < end:
            q = run_queue()
            if q is None:
                return {"waited_s": 0.0, "quiet": None, "run_queue": None}
            window.append(q)
            time.sleep(poll_s)
        mean = sum(window) / len(window)
        waited = time.perf_counter() - start
        if mean <= QUIET_RUN_QUEUE or waited >= max_wait_s:
            return {"waited_s": waited, "quiet": mean <= QUIET_RUN_QUEUE, "run_queue": mean}


CPU_SHARE_FLOOR = 0.9
"""Below this share of the wall time on the CPU, a one-thread program was kept waiting."""


def load_record(
    start: float | None,
    end: float | None,
    cpu_over_wall: float | None = None,
    threads: int | None = None,
    run_queue_start: int | None = None,
    run_queue_end: int | None = None,
    run_queue_mean: float | None = None,
    run_queue_samples: int = 0,
) -> dict:
    """The machine's load around a measurement, and whether it was loaded: other
    processes' threads runnable on average more than half a core through the measurement
    (`RunQueueSampler`), or, where the OS gives no run queue, the 1-minute load average less
    the measuring process above 0.5 at the start or the end; or other runnable threads
    plus the program's more than the CPUs by half a core on average (where sampled: one
    reading at the start or the end of a quiet run may catch a thread awake for a moment,
    and on 2 CPUs with a 2-thread program that alone read as crowded; unsampled, more than
    the CPUs at the start or the end); or a program
    on one thread that had the CPU for less than `CPU_SHARE_FLOOR` of its wall time (its
    process CPU time per call over the wall time, median over the samples: it waited for a
    core). The load average is recorded either way; it lags by a minute, so beside a
    sampled run queue it decides nothing. A loaded machine widens copy-to-copy and
    round-to-round spread; records say so."""
    import os

    cpus = os.cpu_count() or 1
    busy = [x for x in (start, end) if x is not None]
    waited = threads == 1 and cpu_over_wall is not None and cpu_over_wall < CPU_SHARE_FLOOR
    if run_queue_mean is not None:  # sampled through the rounds: the mean decides
        others = run_queue_mean > 0.5
        crowded = run_queue_mean + (threads or 1) > cpus + 0.5
    else:  # single readings (a thread that woke for a moment counts as much as a busy one)
        others = bool(busy) and max(busy) - 1 > 0.5
        queues = [q for q in (run_queue_start, run_queue_end) if q is not None]
        crowded = bool(queues) and max(queues) + (threads or 1) > cpus
    return {
        "load_1min_start": start,
        "load_1min_end": end,
        "cpus": cpus,
        "run_queue_start": run_queue_start,
        "run_queue_end": run_queue_end,
        "run_queue_mean": run_queue_mean,
        "run_queue_samples": run_queue_samples,
        "cpu_over_wall": cpu_over_wall,
        "threads": threads,
        "waited_for_a_core": waited,
        "crowded": crowded,
        "others_busy": others,
        "loaded": others or waited or crowded,
        "rule": "other processes' runnable threads (this process's own excluded) above 0.5 "
        "on average through the measurement (where the OS gives no run queue: the "
        "1-minute load average minus the measuring process above 0.5 at the start or "
        "end), or other runnable threads plus the program's threads more than the "
        "CPUs by half a core on average (unsampled: more than the CPUs at the start or the "
        "end), or a one-thread program on the CPU "
        f"under {CPU_SHARE_FLOOR:.0%} of its wall time (process CPU time per call / "
        "wall time per call, median)",
    }
