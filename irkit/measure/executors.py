"""Where a suite's jobs run: `local` (this machine, one job after another), `ray` (Ray tasks
on a Ray cluster), `slurm` (Slurm jobs through submitit). An existing engine does the
scheduling; irkit only says what each job needs.

    executor = get_executor("ray", address=None)
    for job, outcome in executor.map(run, jobs): ...

`outcome` is ("ok", record) or ("failed", failure record). Timing jobs never share a core
with another timing job on one node: under Ray each job holds the node's one `irkit_timing`
resource (a cluster irkit starts gives every node one; on a cluster of your own, start each
node with `--resources='{"irkit_timing": 1}'`); under Slurm each job asks for its node
exclusively (submitit's local executor, for tests, runs them one after another). A lost
worker's job runs again elsewhere (Ray's task retries; a resubmission under Slurm), and the
suite writes one record per job whatever the retries. Each record gains `worker`: the host,
process and executor that produced it.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from irkit.errors import IrkitError, one_line

EXECUTORS = ("local", "ray", "slurm")
TIMING_RESOURCE = "irkit_timing"
RETRIES = 2
"""How many times a job whose worker was lost runs again."""

Outcome = tuple[str, dict]


class JobFailed(Exception):
    def __init__(self, record: dict):
        super().__init__(record["error"])
        self.record = record


def failure_record(
    job: Any, backend: str, pipeline: str, why: str, traceback_text: str | None = None
) -> dict:
    record = {"kind": "irkit.attribution.failed", "workload": job.workload, "model": job.model,
              "dims": job.dims, "backend": backend, "pipeline": pipeline,
              "strategy": job.strategy, "error": why}  # fmt: skip
    if traceback_text:
        record["traceback"] = traceback_text
    return record


class Executor(Protocol):
    name: str

    def map(self, fn: Callable[[Any], dict], jobs: Sequence[Any]) -> Iterator[tuple[Any, Outcome]]:
        """Run `fn(job)` for every job; yield (job, outcome) as they finish."""
        ...


def call(fn: Callable[[Any], dict], job: Any, executor: str) -> Outcome:
    """What a worker runs: `fn(job)`, its record stamped with the worker, or the failure
    record; never an exception (a tagged tuple crosses any process boundary)."""
    worker: dict[str, Any] = {
        "executor": executor,
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
    start = time.perf_counter()
    try:
        record = fn(job)
        worker["seconds"] = time.perf_counter() - start
        record["worker"] = worker
        return "ok", record
    except JobFailed as e:
        return "failed", {**e.record, "worker": worker}
    except IrkitError as e:
        return "failed", {**failure_record(job, "", "", str(e)), "worker": worker}
    except Exception as e:  # noqa: BLE001 - reported as the job's failure
        failure = failure_record(
            job,
            "",
            "",
            f"internal error: {type(e).__name__}: {one_line(e)}",
            traceback.format_exc(),
        )
        return "failed", {**failure, "worker": worker}


class LocalExecutor:
    name = "local"

    def map(self, fn, jobs):
        for job in jobs:
            yield job, call(fn, job, self.name)


def _ray_call(fn, job):  # pragma: no cover - runs in a Ray worker
    return call(fn, job, "ray")


class RayExecutor:
    """Ray tasks, one `irkit_timing` resource each (one timing job per node at a time)."""

    name = "ray"

    def __init__(self, address: str | None = None):
        try:
            import ray
        except ImportError:
            raise IrkitError("--executor ray needs Ray: pip install -e '.[ray]'") from None
        self.ray = ray
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=False)
            else:  # a local cluster of this machine: one timing slot
                ray.init(
                    num_cpus=os.cpu_count() or 1,
                    resources={TIMING_RESOURCE: 1},
                    include_dashboard=False,
                    log_to_driver=False,
                )
        if not ray.cluster_resources().get(TIMING_RESOURCE):
            raise IrkitError(
                f"--executor ray: the cluster has no '{TIMING_RESOURCE}' resource; start each node with --resources='{{\"{TIMING_RESOURCE}\": 1}}'"
            )

    def map(self, fn, jobs):
        ray = self.ray
        task = ray.remote(num_cpus=1, resources={TIMING_RESOURCE: 1}, max_retries=RETRIES)(
            _ray_call
        )
        pending = {task.remote(fn, job): job for job in jobs}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                job = pending.pop(ref)
                try:
                    yield job, ray.get(ref)
                except ray.exceptions.RayError as e:  # retries spent: the job's failure
                    yield (
                        job,
                        ("failed", failure_record(job, "", "", f"lost by Ray: {one_line(e)}")),
                    )


class SlurmExecutor:
    """Slurm jobs through submitit, each on a node of its own (`cluster="local"`: submitit's
    local executor, one job at a time)."""

    name = "slurm"

    def __init__(
        self,
        folder: Path,
        partition: str | None = None,
        cluster: str | None = None,
        timeout_min: int = 60,
    ):
        try:
            import submitit
        except ImportError:
            raise IrkitError("--executor slurm needs submitit: pip install -e '.[slurm]'") from None
        self.submitit = submitit
        self.local = cluster == "local"
        self.executor = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
        params: dict[str, Any] = {"timeout_min": timeout_min}
        if not self.local:
            params["slurm_additional_parameters"] = {"exclusive": True}
            if partition:
                params["slurm_partition"] = partition
        self.executor.update_parameters(**params)

    def _submit(self, fn, job):
        return self.executor.submit(call, fn, job, self.name)

    def map(self, fn, jobs):
        if self.local:  # one timing job at a time on this machine
            for job in jobs:
                yield job, self._result(fn, job, self._submit(fn, job))
            return
        submitted = [(job, self._submit(fn, job)) for job in jobs]
        for job, handle in submitted:
            yield job, self._result(fn, job, handle)

    def _result(self, fn, job, handle) -> Outcome:
        for attempt in range(RETRIES + 1):
            try:
                return handle.result()
            except self.submitit.core.utils.UncompletedJobError as e:  # the node was lost
                if attempt == RETRIES:
                    return "failed", failure_record(job, "", "", f"lost by Slurm: {one_line(e)}")
                handle = self._submit(fn, job)
        raise AssertionError("unreachable")


def get_executor(
    name: str,
    out: Path,
    address: str | None = None,
    partition: str | None = None,
    cluster: str | None = None,
) -> Executor:
    if name == "local":
        return LocalExecutor()
    if name == "ray":
        return RayExecutor(address)
    if name == "slurm":
        return SlurmExecutor(out.parent / f".{out.name}.submitit", partition, cluster)
    raise IrkitError(f"--executor: unknown executor {name!r}; choose from {', '.join(EXECUTORS)}")
