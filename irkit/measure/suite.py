"""The pass-impact suite: workloads x pipelines, each attributed to its optional passes.

A job is one attribution (see `irkit.measure.attribution`) of one workload at one size
under one pipeline. Jobs append one JSON Lines record each to the results file; a job
whose record is already there is skipped, so an interrupted suite resumes where it
stopped. A job that fails (a wrong variant, a compile error) appends a failure record
and the suite goes on.

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
from irkit.measure.records import append_record, job_key, read_records

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@dataclass(frozen=True)
class Job:
    workload: str
    model: str
    dims: dict[str, int] = field(default_factory=dict)
    strategy: str = "shapley"

    def key(self, backend: str, pipeline: str) -> str:
        return job_key({"workload": self.workload, "backend": backend, "pipeline": pipeline,
                        "strategy": self.strategy, "dims": self.dims})  # fmt: skip


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
    Job("mlp", _example("mlp"), {"B": 2}),
    Job("transformer_block", _example("transformer_block"), {"B": 1, "S": 16, "D": 32, "F": 64}),
    Job("conv_block", _example("conv_block"), {"N": 1, "H": 8}),
)


def done_keys(path: Path) -> set[str]:
    """Job keys already recorded in `path` (successes only: a failed job runs again)."""
    if not path.exists():
        return set()
    return {job_key(r) for r in read_records(path) if r.get("kind") == "irkit.attribution"}


def run_suite(
    out: Path,
    jobs: tuple[Job, ...],
    run_job: Callable[[Job], dict],
    backend: str,
    pipeline: str,
) -> Iterator[tuple[Job, dict | None, str]]:
    """Run the jobs not yet in `out`, appending a record per job. Yields (job, record,
    status) with status "done", "skipped" (already recorded) or "failed: why"."""
    done = done_keys(out)
    for job in jobs:
        if job.key(backend, pipeline) in done:
            yield job, None, "skipped"
            continue
        start = time.perf_counter()
        try:
            record = run_job(job)
            record["workload"] = job.workload
            record["suite_seconds"] = time.perf_counter() - start
            append_record(out, record)
            yield job, record, "done"
        except IrkitError as e:
            why = str(e)
            append_record(out, _failure(job, backend, pipeline, why))
            yield job, None, f"failed: {why}"
        except Exception as e:  # an internal error in one job must not end the suite
            why = f"internal error: {type(e).__name__}: {one_line(e)}"
            failure = _failure(job, backend, pipeline, why)
            failure["traceback"] = traceback.format_exc()
            append_record(out, failure)
            yield job, None, f"failed: {why}"


def _failure(job: Job, backend: str, pipeline: str, why: str) -> dict:
    return {"kind": "irkit.attribution.failed", "workload": job.workload, "model": job.model,
            "dims": job.dims, "backend": backend, "pipeline": pipeline,
            "strategy": job.strategy, "error": why}  # fmt: skip
