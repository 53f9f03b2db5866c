"""Runtimes: backends behind one protocol (see `backend.py`), and `compile`.

    exe = irkit.compile("examples/mlp.graph")              # backend="auto"
    exe.backend, exe.selection                             # "cpu", and why
    outputs = exe(*irkit.random_inputs(exe.graph))

`auto` picks cuda when a GPU is usable and the CUDA backend is installed, else cpu, and
records which it picked and why in `exe.selection`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from irkit.errors import IrkitError
from irkit.runtime.backend import Backend, Executable, KernelRecord, TensorSpec


def _cpu() -> Backend:
    from irkit.runtime.cpu import CpuBackend

    return CpuBackend()


def _reference() -> Backend:
    from irkit.runtime.reference import ReferenceBackend

    return ReferenceBackend()


def _cuda() -> Backend:
    from irkit.runtime.cuda import CudaBackend

    return CudaBackend()


def _cuda_sim() -> Backend:
    from irkit.runtime.cuda_sim import LockstepBackend

    return LockstepBackend()


def _cuda_host() -> Backend:
    from irkit.runtime.cuda_host import CudaHostBackend

    return CudaHostBackend()


BACKENDS: dict[str, Callable[[], Backend]] = {
    "cpu": _cpu,
    "cuda": _cuda,
    "cuda-sim": _cuda_sim,
    "cuda-host": _cuda_host,
    "reference": _reference,
}
"""Backend name -> factory. `auto` tries cuda, then cpu; cuda-sim and cuda-host are chosen
only by name."""


def register_backend(name: str, factory: Callable[[], Backend]) -> None:
    """Make a backend available by name (`--backend NAME`, `irkit.compile(..., backend=NAME)`);
    a plugin module (`-L`) calls this when it is imported."""
    if not name or name == "auto":
        raise IrkitError(f"a backend cannot be called {name!r}")
    BACKENDS[name] = factory


def lower_for(module: ModuleOp, backend: str) -> ModuleOp:
    """`module` with the lowering `backend` requires run where the pipeline left it out."""
    if backend not in BACKENDS:
        raise IrkitError(f"unknown backend '{backend}'; choose from auto, {', '.join(BACKENDS)}")
    return BACKENDS[backend]().lower(module)


def get_backend(name: str) -> tuple[Backend, str]:
    """The backend called `name` ("auto" chooses), and a line saying which and why."""
    if name == "auto":
        reasons = []
        for candidate in ("cuda", "cpu"):
            if candidate not in BACKENDS:
                reasons.append(f"{candidate}: not built")
                continue
            backend = BACKENDS[candidate]()
            ok, why = backend.available()
            if ok:
                skipped = f" ({'; '.join(reasons)})" if reasons else ""
                return backend, f"auto chose {candidate}: {why}{skipped}"
            reasons.append(f"{candidate}: {why}")
        raise IrkitError(f"no backend is available: {'; '.join(reasons)}")
    if name not in BACKENDS:
        raise IrkitError(f"unknown backend '{name}'; choose from auto, {', '.join(BACKENDS)}")
    backend = BACKENDS[name]()
    ok, why = backend.available()
    if not ok:
        raise IrkitError(f"backend {name} is not available: {why}")
    return backend, f"{name}: {why}"


def device_name(backend: Backend) -> str | None:
    """The name of the backend's device, where its fingerprint has one (a GPU's)."""
    for value in backend.fingerprint().values():
        if isinstance(value, dict) and isinstance(value.get("name"), str):
            return value["name"]
    return None


def compile(  # noqa: A001 - the verb users expect, as in torch.compile
    model: ModuleOp | str | Path,
    pipeline: str | None = None,
    backend: str = "auto",
    dims: Mapping[str, int] | None = None,
    tuned: bool = False,
) -> Executable:
    """Compile a model (a module or a model file) for a backend.

    `pipeline` is a `-p` spec or a named pipeline (default: the backend's own); the
    backend's required lowering runs after it when the pipeline did not lower to loops.
    With `tuned`, the tuning database (`irkit-bench tune`) is consulted: where it holds a
    winner for this workload, pipeline and machine, its pipeline is used instead (and
    `selection` says so). The input module is not modified. The Executable carries `graph`
    (the graph-level module, for the reference), `pipeline` and `selection` (which backend,
    and why)."""
    from irkit.errors import expect
    from irkit.frontend import load
    from irkit.ir import model_function
    from irkit.loops import is_loop_level
    from irkit.pipelines import apply_passes, parse_passes
    from irkit.runtime.reference import check_footprint, graph_values

    expect("irkit.compile", "model", model, ModuleOp | str | Path, "a module or a model file path")
    expect("irkit.compile", "pipeline", pipeline, str | None, "a pipeline spec")
    expect("irkit.compile", "backend", backend, str, "a backend name")
    graph = load(model, dims) if isinstance(model, str | Path) else model
    fn = model_function(graph)
    if not is_loop_level(graph):  # what the backend will allocate: every value, its own type
        check_footprint(fn, graph_values(fn), None, "buffers")
    chosen, selection = get_backend(backend)
    spec = pipeline if pipeline is not None else chosen.default_pipeline
    if tuned:
        from irkit import tuning

        entry = tuning.lookup(graph, spec, tuning.machine(chosen.name, device_name(chosen)))
        if entry is not None and entry.get("declared"):
            chose = ", ".join(f"{k}={v}" for k, v in entry["choice"].items())
            selection += f"; tuned: {chose} (irkit-bench tune, {entry['speedup']['median']:.3f}x)"
            spec = entry["pipeline"]
        else:
            selection += "; tuned: no winner recorded for this workload, pipeline and machine"
    module = chosen.lower(apply_passes(graph.clone(), parse_passes(spec) if spec else []))
    exe = chosen.compile(module)
    exe.graph, exe.pipeline, exe.selection = graph, spec, selection
    return exe


__all__ = [
    "BACKENDS",
    "Backend",
    "Executable",
    "KernelRecord",
    "TensorSpec",
    "compile",
    "get_backend",
    "lower_for",
    "register_backend",
]
