"""One measured run of a model: compile, check against the reference, then time.

Nothing is timed before it is checked: a run whose outputs disagree with the reference
returns its checks and no timings.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from irkit.measure import check_protocol
from irkit.measure.fingerprint import host_fingerprint
from irkit.measure.timers import Timing, time_cpu
from irkit.runtime import compile, get_backend
from irkit.runtime.backend import KernelRecord
from irkit.runtime.check import OutputCheck, check


@dataclass(frozen=True)
class KernelTiming:
    record: KernelRecord
    timing: Timing

    @property
    def seconds(self) -> float:
        return self.timing.estimate.median

    @property
    def gflops(self) -> float:
        return self.record.flops / self.seconds / 1e9

    @property
    def gbps(self) -> float:
        return self.record.min_bytes / self.seconds / 1e9

    def to_json(self) -> dict:
        r = self.record
        return {"name": r.name, "hash": r.hash, "flops": r.flops, "min_bytes": r.min_bytes,
                "once_per_bind": r.once, "gflops": self.gflops, "gbps": self.gbps,
                **self.timing.to_json()}  # fmt: skip


@dataclass
class RunResult:
    model: str
    pipeline: str
    backend: str
    selection: str
    compile_seconds: float
    checks: list[OutputCheck]
    kernels: list[KernelTiming] = field(default_factory=list)
    graph: Timing | None = None
    replay: Timing | None = None  # the driver as one CUDA graph, replayed (GPU backends)
    fingerprint: dict = field(default_factory=dict)
    fingerprint_end: dict = field(default_factory=dict)  # the backend's, after timing
    copy_bandwidth: float | None = None  # bytes/s, read + write: the backend's copy ceiling
    counters: dict[str, dict[str, float]] = field(default_factory=dict)  # ncu's, per kernel name
    dims: dict[str, int] = field(default_factory=dict)
    """The sizes given (the model's own where none): with the model, the workload."""
    seed: int = 0
    dtype: str = ""
    """The type the model's f32 tensors were converted to (`--dtype`); "" where none was."""

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def to_json(self) -> dict:
        return {
            "kind": "irkit.run",
            "model": self.model,
            "dims": self.dims,
            # a converted model is a workload of its own (gemm-bf16): histories keep it apart
            **self._dtype_fields(),
            "seed": self.seed,
            "pipeline": self.pipeline,
            "backend": self.backend,
            "selection": self.selection,
            "compile_seconds": self.compile_seconds,
            "correct": self.passed,
            "checks": [c.to_json() for c in self.checks],
            "graph": self.graph.to_json() if self.graph else None,
            "graph_replay": self.replay.to_json() if self.replay else None,
            "kernels": [self._kernel_json(k) for k in self.kernels],
            "copy_bandwidth_gbps": self.copy_bandwidth / 1e9 if self.copy_bandwidth else None,
            "fingerprint": self.fingerprint,
            "fingerprint_end": self.fingerprint_end,
        }

    def _dtype_fields(self) -> dict:
        if not self.dtype:
            return {}
        return {"dtype": self.dtype, "workload": f"{Path(self.model).stem}-{self.dtype}"}

    def copy_fraction(self, kernel: KernelTiming) -> float | None:
        """The kernel's minimal traffic per second over the device's copy bandwidth."""
        return kernel.gbps * 1e9 / self.copy_bandwidth if self.copy_bandwidth else None

    def _kernel_json(self, kernel: KernelTiming) -> dict:
        fraction = self.copy_fraction(kernel)
        record = kernel.to_json() | ({"copy_bw_fraction": fraction} if fraction is not None else {})
        if kernel.record.name in self.counters:
            record["counters"] = self.counters[kernel.record.name]
        return record


def run_model(
    model: ModuleOp | str | Path,
    pipeline: str | None = None,
    backend: str = "auto",
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
    precision: float = 0.01,
    budget_s: float = 1.0,
    tuned: bool = False,
    dtype: str | None = None,
) -> RunResult:
    """Compile, check on fresh inputs (seed), and if correct time the graph and each kernel
    (each with its own `budget_s`); `tuned`: the tuning database's winner for this
    workload, pipeline and machine where it has one (`irkit.compile(..., tuned=True)`);
    `dtype`: the model's f32 tensors converted to "f16" or "bf16" first (`irkit.load`)."""
    from irkit.frontend import load

    check_protocol("run_model", precision, budget_s, seed)
    start = time.perf_counter()
    graph = load(model, dims, dtype) if isinstance(model, str | Path) else model
    exe = compile(graph, pipeline, backend, tuned=tuned)
    compile_seconds = time.perf_counter() - start
    assert exe.graph is not None  # irkit.compile records it
    checks, inputs = check(exe, exe.graph, seed)
    result = RunResult(
        model=str(model) if not isinstance(model, ModuleOp) else "<module>",
        pipeline=exe.pipeline or "",
        backend=exe.backend,
        selection=exe.selection or exe.backend,
        compile_seconds=compile_seconds,
        checks=checks,
        fingerprint=host_fingerprint(),
        dims=dict(dims or {}),
        seed=seed,
        dtype=dtype or "",
    )
    if not result.passed:
        return result
    bound = exe.bind(*inputs)
    chosen, _ = get_backend(exe.backend)
    result.fingerprint.update(chosen.fingerprint())  # the device (clocks now), before timing
    ceilings = chosen.ceilings()
    result.copy_bandwidth = ceilings.bandwidth if ceilings else None
    result.graph = time_cpu(bound.timed_graph(), precision, budget_s)
    replay = bound.timed_replay()  # CUDA: the same launches as one graph
    if replay is not None:
        result.replay = time_cpu(replay, precision, budget_s)
    for i, record in enumerate(exe.kernels):
        timing = time_cpu(bound.timed_kernel(i), precision, budget_s)
        result.kernels.append(KernelTiming(record, timing))
    result.fingerprint_end = chosen.fingerprint()  # a throttled or reclocked run shows
    return result
