"""The pass-impact suite: workloads x pipelines, each attributed to its optional passes.

A job is one attribution (see `irkit.measure.attribution`) of one workload at one size
under one pipeline. Jobs append one JSON Lines record each to the results file; a job
whose record is already there is skipped, so an interrupted suite resumes where it
stopped. A job that fails (a wrong variant, a compile error) appends a failure record
and the suite goes on.

Fault isolation: each job runs in a fresh worker process (`run_isolated`), so a job whose
generated code crashes the process (a segfault, an abort, a GPU fault) or hangs past its
deadline becomes a failure record (the signal or the timeout, the phase it was in, and a
command that reproduces it alone: the very variant when it died compiling or checking one)
and the suite goes on. A record is written whole (one `write` of one line, then fsync), the
parent alone writes, and a torn last line left by a killed run is cut off before the next
record is appended: an interrupted suite resumes without losing or redoing a finished job.

`--quick` runs every workload at small sizes with a short budget: a smoke test of the
whole chain in about a minute, not a measurement to quote.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from irkit.errors import IrkitError, one_line
from irkit.measure.executors import Executor, JobFailed, LocalExecutor, failure_record
from irkit.measure.records import (
    append_record,
    check_appendable,
    job_key,
    numbered_records,
    read_records,
    repair_torn_tail,
)

_failure = failure_record

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@dataclass(frozen=True)
class Job:
    workload: str
    model: str
    dims: dict[str, int] = field(default_factory=dict)
    strategy: str = "shapley"
    pipeline: str | None = None
    """The job's own pipeline (None: the suite's)."""
    timeout_s: float | None = None
    """The job's own deadline in a worker (None: the suite's)."""
    dtype: str | None = None
    """The model's f32 tensors converted to "f16" or "bf16" first (None: as it is)."""

    def key(self, backend: str, pipeline: str) -> str:
        return job_key(
            {
                "workload": self.workload,
                "backend": backend,
                "pipeline": self.pipeline or pipeline,
                "strategy": self.strategy,
                "dims": self.dims,
                "dtype": self.dtype,
            }
        )


def _example(name: str) -> str:
    return str(EXAMPLES / f"{name}.graph")


FULL: tuple[Job, ...] = (
    Job("gemm_256", _example("gemm"), {"M": 256, "N": 256, "K": 256}),
    Job("gemm_512", _example("gemm"), {"M": 512, "N": 512, "K": 512}),
    Job("elementwise_chain", _example("elementwise_chain"), {"N": 2048, "D": 2048}),
    Job("softmax", _example("softmax"), {"R": 2048, "C": 1024}),
    Job("layernorm", _example("layernorm"), {"T": 2048, "H": 768}),
    Job("mlp", _example("mlp"), {"B": 16}),
    Job("transformer_block", _example("transformer_block")),
    Job("conv_block", _example("conv_block")),
)
"""CPU sizes: large enough that every graph call takes at least ~1 ms on one core."""

QUICK: tuple[Job, ...] = (
    Job("gemm_64", _example("gemm"), {"M": 64, "N": 64, "K": 64}),
    Job("elementwise_chain", _example("elementwise_chain"), {"N": 256, "D": 256}),
    Job("softmax", _example("softmax"), {"R": 64, "C": 256}),
    Job("layernorm", _example("layernorm"), {"T": 64, "H": 256}),
    Job("mlp", _example("mlp"), {"B": 2, "D": 256, "F": 1024}),
    Job("transformer_block", _example("transformer_block"), {"B": 1, "S": 16, "D": 32, "F": 64}),
    Job("conv_block", _example("conv_block"), {"N": 1, "H": 8}),
)


def done_keys(path: Path, kind: str = "irkit.attribution") -> set[str]:
    """Job keys with a record of `kind` in `path` (the successes, by default)."""
    if not path.exists():
        return set()
    return {job_key(r) for r in read_records(path) if r.get("kind") == kind}


def run_suite(
    out: Path,
    jobs: tuple[Job, ...],
    run_job: Callable[[Job], dict],
    backend: str,
    pipeline: str,
    retry_failed: bool = False,
    executor: Executor | None = None,
) -> Iterator[tuple[Job, dict | None, str]]:
    """Run the jobs not yet in `out` on `executor` (default: here, one after another),
    appending one record per job as each finishes. Yields (job, record, status) with status
    "done", "skipped" (already recorded), "skipped: failed before" (a failure record is
    there; `retry_failed` runs such a job again) or "failed: why". `run_job` must be
    picklable for an executor that runs jobs elsewhere (`functools.partial(run_isolated,
    options=...)` is)."""
    check_appendable(out)
    repair_torn_tail(out)
    done = done_keys(out)
    failed = set() if retry_failed else done_keys(out, "irkit.attribution.failed")
    pending = []
    for job in jobs:
        if job.key(backend, pipeline) in done:
            yield job, None, "skipped"
        elif job.key(backend, pipeline) in failed:
            yield job, None, "skipped: failed before (--retry-failed runs it again)"
        else:
            pending.append(job)
    written: set[str] = set()
    for job, (tag, record) in (executor or LocalExecutor()).map(run_job, pending):
        key = job.key(backend, pipeline)
        if key in written:  # a job run twice (a lost worker retried) counts once
            continue
        written.add(key)
        record["workload"] = job.workload
        if tag == "ok":
            record["suite_seconds"] = record.get("worker", {}).get("seconds")
            append_record(out, record)
            yield job, record, "done"
            continue
        record["backend"] = record.get("backend") or backend
        record["pipeline"] = record.get("pipeline") or job.pipeline or pipeline
        append_record(out, record)
        yield job, None, f"failed: {record['error']}"


def read_jobs(path: str | Path) -> tuple[Job, ...]:
    """Jobs from a JSON Lines file: {"workload", "model", "dims"?, "strategy"?, "pipeline"?,
    "timeout_s"?, "dtype"?} per line; a relative model path is taken from the file's
    directory."""
    jobs = []
    base = Path(path).parent
    for line, r in numbered_records(path):
        if not isinstance(r.get("workload"), str) or not isinstance(r.get("model"), str):
            raise IrkitError('a job needs "workload" and "model" strings', f"{path}:{line}")
        dims = r.get("dims", {})
        if not isinstance(dims, dict) or not all(
            isinstance(v, int) and v > 0 for v in dims.values()
        ):
            raise IrkitError('a job\'s "dims" maps names to positive integers', f"{path}:{line}")
        model = r["model"] if Path(r["model"]).is_absolute() else str(base / r["model"])
        timeout = r.get("timeout_s")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise IrkitError(
                'a job\'s "timeout_s" is a positive number of seconds', f"{path}:{line}"
            )
        dtype = r.get("dtype")
        if dtype not in (None, "f32", "f16", "bf16"):
            raise IrkitError('a job\'s "dtype" is "f32", "f16" or "bf16"', f"{path}:{line}")
        strategy, pipeline = r.get("strategy", "shapley"), r.get("pipeline")
        jobs.append(Job(r["workload"], model, dims, strategy, pipeline, timeout, dtype))
    if not jobs:
        raise IrkitError("no jobs in the file", str(path))
    return tuple(jobs)


# --- jobs in worker processes ----------------------------------------------------------------


@dataclass(frozen=True)
class SuiteOptions:
    """What every job of a suite shares (picklable: it travels to the worker)."""

    pipeline: str
    backend: str
    precision: float = 0.01
    budget: float = 20.0
    seed: int = 0
    permutations: int = 16
    timeout_s: float | None = None
    """A job's deadline (None: 30 x budget + 300 s, enough for compiling and timing)."""

    def deadline(self) -> float:
        return self.timeout_s if self.timeout_s is not None else 30 * self.budget + 300


def run_job(job: Job, options: SuiteOptions, progress=None) -> dict:
    """One job in this process: its attribution record."""
    from irkit.measure.attribution import attribute

    result = attribute(job.model, job.pipeline or options.pipeline, options.backend,
                       job.strategy, job.dims, dtype=job.dtype, precision=options.precision, budget_s=options.budget,
                       seed=options.seed, permutations=options.permutations,
                       progress=progress)  # fmt: skip
    return result.to_json()


def _worker(conn, job: Job, options: SuiteOptions) -> None:  # pragma: no cover - in a child
    from irkit.plugins import load_plugins

    def progress(phase: str, done: int, total: int) -> None:
        conn.send(("stage", phase, done, total))

    try:
        load_plugins()
        conn.send(("done", run_job(job, options, progress)))
    except IrkitError as e:
        conn.send(("failed", str(e)))
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
        conn.send(
            ("failed", f"internal error: {type(e).__name__}: {one_line(e)}", traceback.format_exc())
        )
    finally:
        conn.close()


def run_isolated(job: Job, options: SuiteOptions) -> dict:
    """Run `job` in a fresh worker process; its record, or raise `JobFailed` with the failure
    record (crash, timeout, or error) for the suite to append."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # no fork of a process holding JIT'd code
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_worker, args=(child, job, options), daemon=True)
    proc.start()
    child.close()
    limit = job.timeout_s or options.deadline()
    deadline = time.monotonic() + limit
    stage: tuple[str, int, int] | None = None
    try:
        while True:
            if parent.poll(max(0.0, min(1.0, deadline - time.monotonic()))):
                try:
                    message = parent.recv()
                except EOFError:  # the worker died without a word: a crash
                    break
                if message[0] == "stage":
                    stage = message[1:]
                    continue
                proc.join(10)
                if message[0] == "done":
                    return message[1]
                raise JobFailed(failure_record(job, options.backend, job.pipeline or options.pipeline,
                                         message[1], traceback_text=message[2] if len(message) > 2 else None))  # fmt: skip
            if time.monotonic() >= deadline:
                proc.kill()
                proc.join(10)
                why = f"timed out after {limit:g} s{_during(stage)}"
                raise JobFailed(_crash_record(job, options, why, stage))
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(10)
        parent.close()
    proc.join(10)
    why = f"crashed: {_signal_name(proc.exitcode)}{_during(stage)}"
    raise JobFailed(_crash_record(job, options, why, stage))


def _during(stage: tuple | None) -> str:
    if stage is None:
        return " while starting"
    phase, done, total = stage
    what = {
        "compile": "compiling and checking variant",
        "measure": "timing round",
        "kernels": "timing kernels, round",
    }.get(phase, phase)
    return f" while {what} {min(done + 1, total)} of {total}"


def _signal_name(code: int | None) -> str:
    import signal

    if code is not None and code < 0:
        try:
            return f"signal {signal.Signals(-code).name} ({-code})"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def _crash_record(job: Job, options: SuiteOptions, why: str, stage: tuple | None) -> dict:
    pipeline = job.pipeline or options.pipeline
    record = failure_record(job, options.backend, pipeline, why)
    record["reproducer"] = reproducer(job, options, stage)
    return record


def reproducer(job: Job, options: SuiteOptions, stage: tuple | None) -> str:
    """A command that runs the failing work alone: the variant being compiled or checked
    when the worker died (`irkit-bench run ... -p VARIANT`), else the whole job."""
    import os
    import shlex

    dims = " ".join(f"--dim {k}={v}" for k, v in job.dims.items())
    plugins = os.environ.get("IRKIT_PLUGINS")
    env = f"IRKIT_PLUGINS={shlex.quote(plugins)} " if plugins else ""
    pipeline = job.pipeline or options.pipeline
    if stage is not None and stage[0] == "compile":
        from irkit.measure.attribution import make_plan, variant_spec
        from irkit.pipelines import pipeline_steps

        steps = pipeline_steps(pipeline)
        optional = [n for n, s in enumerate(steps) if s.optional]
        plan = make_plan(job.strategy, len(optional), options.permutations, options.seed)
        if stage[1] < len(plan.masks):
            spec = variant_spec(steps, optional, plan.masks[stage[1]])
            return (
                f"{env}irkit-bench run {shlex.quote(job.model)} -p {shlex.quote(spec)} "
                f"--backend {options.backend} {dims} --seed {options.seed}"
                f"{f' --dtype {job.dtype}' if job.dtype else ''}"
            ).strip()
    return (
        f"{env}irkit-bench attribute {shlex.quote(job.model)} -p {shlex.quote(pipeline)} "
        f"--backend {options.backend} {dims} --strategy {job.strategy} --seed {options.seed}"
        f"{f' --dtype {job.dtype}' if job.dtype else ''}"
    ).strip()
