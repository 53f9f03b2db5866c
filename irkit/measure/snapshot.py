"""Snapshot and replay: one kernel, its code and its real data, reproduced in isolation.

    snap = take_snapshot("mlp.graph", "k1_matmul", backend="cpu")   # -> Snapshot
    snap.save("k1.snap")
    result = replay(Snapshot.load("k1.snap"))                       # runs, checks, times

A snapshot holds the kernel's loop-level (or GPU-mapped) IR with the shared buffers it
declares, its generated code as the backend compiled it (LLVM IR; CUDA C and the cubin for
the GPU backends), its launch configuration, the contents of every argument just before the
call in the model's own run (inputs from `seed`) and just after it, and where it came from
(model, pipeline, dims, seed, backend, irkit version and commit, host and device
fingerprint). The file is a compressed numpy archive (`.snap`): the arrays, and the rest as
JSON.

`replay` builds a one-kernel program from the IR (a driver that copies the recorded inputs
into the arguments and calls the kernel), compiles it for a backend (the snapshot's, or
another that can lower it), runs it on the recorded inputs and compares every argument with
the recorded outputs bit for bit; then times the kernel alone. `against_current` rebuilds
the kernel of the same name from the model at the current commit and times both versions on
the snapshot's data, interleaved, with the ratio's CI.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FunctionType,
    ModuleOp,
    StringAttr,
    UnitAttr,
)
from xdsl.ir import Block, Region

from irkit.errors import IrkitError
from irkit.ir import shape_of

FORMAT = "irkit.snapshot"
NOT_A_SNAPSHOT = "not an irkit snapshot (irkit-bench snapshot writes them)"
VERSION = 1


@dataclass
class Snapshot:
    meta: dict[str, Any]
    before: list[np.ndarray]
    after: list[np.ndarray]
    cubin: bytes | None = None

    @property
    def kernel(self) -> str:
        return self.meta["kernel"]

    @property
    def written(self) -> list[int]:
        """Positions of the arguments the kernel writes."""
        return [i for i, a in enumerate(self.meta["arguments"]) if a["written"]]

    def save(self, path: str | Path) -> None:
        """Write the archive atomically (a temporary file renamed into place)."""
        arrays: dict[str, Any] = {f"before_{i}": a for i, a in enumerate(self.before)}
        arrays.update({f"after_{i}": a for i, a in enumerate(self.after)})
        meta = dict(self.meta)
        if self.cubin is not None:
            meta["cubin_base64"] = base64.b64encode(self.cubin).decode()
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
        target = Path(path)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez_compressed(f, **arrays)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @staticmethod
    def load(path: str | Path) -> Snapshot:
        """Read an archive `save` wrote (bf16 arguments, which npz keeps as raw 2-byte
        records, viewed as bfloat16 again from the meta)."""
        try:
            with np.load(Path(path), allow_pickle=False) as archive:
                meta = json.loads(bytes(archive["meta"]).decode())
                count = len(meta["arguments"])
                before = [_typed(archive[f"before_{i}"], meta, i) for i in range(count)]
                after = [_typed(archive[f"after_{i}"], meta, i) for i in range(count)]
        except FileNotFoundError:
            raise IrkitError("no such file", str(path)) from None
        except (OSError, KeyError, ValueError, json.JSONDecodeError):
            raise IrkitError(NOT_A_SNAPSHOT, str(path)) from None
        if meta.get("format") != FORMAT:
            raise IrkitError(NOT_A_SNAPSHOT, str(path))
        cubin = meta.pop("cubin_base64", None)
        return Snapshot(meta, before, after, base64.b64decode(cubin) if cubin else None)


# --- taking one ------------------------------------------------------------------------------


def run_plan(
    exe: Any,
    inputs: Sequence[np.ndarray],
    on_call: Callable[[str, list[np.ndarray], bool], None],
) -> list[np.ndarray]:
    """Run `exe`'s driver plan step by step on host buffers (fresh buffers poisoned with
    NaN), each kernel through `exe.launch(name, buffers)`; `on_call(name, buffers, after)`
    before and after each call. Returns the outputs."""
    from irkit.runtime.backend import LaunchesOnHost, driver_plan, run_steps

    host: LaunchesOnHost | None = exe if isinstance(exe, LaunchesOnHost) else None
    if host is None:
        raise IrkitError(
            f"the {exe.backend} backend cannot run its kernels one by one on the host (snapshot needs cpu, cuda-sim or cuda-host)"
        )
    outputs = [_fresh(s.shape, s.dtype) for s in exe.outputs]
    env = dict(zip(exe.entry.body.block.args, [*inputs, *outputs], strict=True))
    run_steps(
        driver_plan(exe.module),
        env,
        _fresh,
        lambda step: np.array(step.constant),
        host.launch,
        on_call,
    )
    return outputs


def _fresh(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    return np.full(shape, np.nan if dtype.kind == "f" else 0, dtype)


def take_snapshot(
    model: str | Path,
    kernel: str,
    pipeline: str | None = None,
    backend: str = "cpu",
    dims: dict[str, int] | None = None,
    seed: int = 0,
    dtype: str | None = None,
) -> Snapshot:
    """Compile `model` (its f32 tensors converted to `dtype` first, where given), run it on
    inputs from `seed`, and keep kernel `kernel` (its name, as `irkit-bench run` lists
    them): its code, launch, IR and arguments around its call."""
    return take_snapshots(model, [kernel], pipeline, backend, dims, seed, dtype)[0]


def take_snapshots(
    model: str | Path,
    kernels: Sequence[str] | None = None,
    pipeline: str | None = None,
    backend: str = "cpu",
    dims: dict[str, int] | None = None,
    seed: int = 0,
    dtype: str | None = None,
) -> list[Snapshot]:
    """`take_snapshot` for several kernels (None: every kernel) from one compile and run."""
    from irkit.frontend import load
    from irkit.measure.fingerprint import host_fingerprint
    from irkit.runtime import compile, get_backend
    from irkit.runtime.backend import HasGpuKernels
    from irkit.runtime.reference import random_inputs

    graph = load(model, dims, dtype)
    exe = compile(graph, pipeline, backend)
    names = [k.name for k in exe.kernels]
    wanted = list(names if kernels is None else kernels)
    for kernel in wanted:
        if kernel not in names:
            raise IrkitError(
                f"--kernel: no kernel {kernel!r} in this program; it has {', '.join(names) or 'none'}"
            )
    captured: dict[str, dict[str, list[np.ndarray]]] = {k: {} for k in wanted}

    def on_call(name: str, buffers: list[np.ndarray], after: bool) -> None:
        if name in captured and "after" not in captured[name]:
            captured[name]["after" if after else "before"] = [np.array(b) for b in buffers]

    run_plan(exe, random_inputs(graph, seed), on_call)
    chosen, _ = get_backend(exe.backend)
    fingerprint = {**host_fingerprint(), **chosen.fingerprint()}
    functions = {f.sym_name.data: f for f in exe.module.ops if isinstance(f, func.FuncOp)}
    gpu = {k.name: k for k in exe.gpu_kernels} if isinstance(exe, HasGpuKernels) else {}
    out = []
    for kernel in wanted:
        record, fn, data = exe.kernels[names.index(kernel)], functions[kernel], captured[kernel]
        written = _written(fn)
        meta = {
            "format": FORMAT, "version": VERSION, "kernel": kernel, "hash": record.hash,
            "backend": exe.backend, "source": record.source, "launch": record.launch,
            "resources": record.resources, "once_per_bind": record.once,
            "module": standalone_text(exe.module, fn),
            "arguments": [{"name": a.name_hint or f"arg{i}", "shape": list(b.shape),
                           "dtype": str(b.dtype), "written": i in written}
                          for i, (a, b) in enumerate(zip(fn.body.block.args, data["before"],
                                                         strict=True))],
            "model": str(model), "pipeline": exe.pipeline or pipeline,
            "dims": dims or {}, "seed": seed, "dtype": dtype or "f32",
            "fingerprint": fingerprint,
        }  # fmt: skip
        meta = json.loads(json.dumps(meta))  # as the file will hold it (lists, not tuples)
        compiled = gpu[kernel].compiled if kernel in gpu else None
        out.append(
            Snapshot(
                meta,
                data["before"],
                data["after"],
                compiled.cubin if compiled is not None else None,
            )
        )
    return out


def _written(fn: func.FuncOp) -> set[int]:
    """Positions of the arguments the kernel may store to."""
    from xdsl.dialects import vector

    args = list(fn.body.block.args)
    stored = {o.memref for o in fn.walk() if isinstance(o, memref.StoreOp)}
    stored |= {o.base for o in fn.walk() if isinstance(o, vector.StoreOp)}
    return {i for i, a in enumerate(args) if a in stored}


def standalone_text(module: ModuleOp, fn: func.FuncOp) -> str:
    """The kernel, the module-level buffers it names (shared memory, constants) and the
    scalar functions it calls, as the text of a module of their own (the kernel its first
    function)."""
    from irkit.ir import to_text
    from irkit.loops import callees

    used = {op.name_.root_reference.data for op in fn.walk() if isinstance(op, memref.GetGlobalOp)}
    globals_ = [
        op.clone()
        for op in module.ops
        if isinstance(op, memref.GlobalOp) and op.sym_name.data in used
    ]
    called = [f.clone() for f in callees(module, fn)]
    return to_text(ModuleOp([*globals_, fn.clone(), *called]))


# --- replaying one ---------------------------------------------------------------------------


def replay_module(snap: Snapshot) -> ModuleOp:
    """The snapshot's kernel with a driver of its own: inputs are the recorded arguments;
    the arguments the kernel writes are outputs, which the driver first fills with their
    recorded contents (a kernel may read what it then overwrites), then the call."""
    from irkit.frontend import parse_source

    module = parse_source(snap.meta["module"], f"{snap.kernel}.snap", ".mlir")
    fn = next(f for f in module.ops if isinstance(f, func.FuncOp))
    types = list(fn.function_type.inputs.data)
    written = snap.written
    outputs = [types[i] for i in written]
    block = Block(arg_types=[*types, *outputs])
    args = list(block.args)[: len(types)]
    for n, i in enumerate(written):
        out = block.args[len(types) + n]
        block.add_op(memref.CopyOp(block.args[i], out))
        args[i] = out
    block.add_op(func.CallOp(fn.sym_name.data, args, []))
    block.add_op(func.ReturnOp())
    attrs = [DictionaryAttr({})] * len(types) + [
        DictionaryAttr({"irkit.output": StringAttr(snap.meta["arguments"][i]["name"])})
        for i in written
    ]
    driver = func.FuncOp(
        "replay",
        FunctionType.from_lists([*types, *outputs], []),
        Region(block),
        arg_attrs=ArrayAttr(attrs),
    )
    fn.attributes.setdefault("irkit.kernel", UnitAttr())
    module.body.block.add_op(driver)
    return module


@dataclass
class ReplayResult:
    kernel: str
    backend: str
    identical: bool
    mismatches: list[str]
    same_code: bool
    """The replayed kernel's code hash is the recorded one."""
    seconds: Any = None
    compare: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    exact: bool = True
    """Held to bit identity (the snapshot's backend), else to the type's tolerance."""

    def to_json(self) -> dict:
        return {
            "kernel": self.kernel,
            "backend": self.backend,
            "matches": self.identical,
            "held_to": "bit identity" if self.exact else "the element type's tolerance",
            "mismatches": self.mismatches,
            "same_code": self.same_code,
            "seconds": self.seconds.to_json() if self.seconds else None,
            "against_current": self.compare,
            "notes": self.notes,
        }


def _bound_kernel(snap: Snapshot, module: ModuleOp, backend: str):
    """Compile a one-kernel module for `backend`, check it on the recorded inputs, bind it:
    (executable, bound, mismatching arguments). On the snapshot's own backend an argument
    must be bit-identical; on another, within its element type's tolerance of the recorded
    values (another backend's math functions and sum order may differ in the last bits)."""
    from irkit.runtime import get_backend
    from irkit.runtime.check import TOLERANCE, compare

    chosen, _ = get_backend(backend)
    exe = chosen.compile(chosen.lower(module))
    bound = exe.bind(*[np.array(b) for b in snap.before])  # binding runs it once: checked
    exact = chosen.name == snap.meta["backend"]
    mismatches = []
    for i, out in zip(snap.written, bound.outputs, strict=True):
        want = np.ascontiguousarray(snap.after[i])
        name = snap.meta["arguments"][i]["name"]
        if exact:
            same = out.shape == want.shape and out.tobytes() == want.tobytes()
        else:
            tol = TOLERANCE.get(str(want.dtype), 1e-4)
            same = compare(name, out, want.astype(np.float64), want.dtype, tol).passed
        if not same:
            mismatches.append(name)
    return exe, bound, mismatches


def replay(
    snap: Snapshot,
    backend: str | None = None,
    precision: float = 0.01,
    budget_s: float = 2.0,
    against_current: bool = False,
) -> ReplayResult:
    """Run the snapshot's kernel alone on its recorded inputs (see the module docstring)."""
    from irkit.measure.timers import time_cpu, time_interleaved

    backend = backend or snap.meta["backend"]
    exe, bound, mismatches = _bound_kernel(snap, replay_module(snap), backend)
    index = [k.name for k in exe.kernels].index(snap.kernel)
    same_code = exe.kernels[index].hash == snap.meta["hash"]
    result = ReplayResult(snap.kernel, backend, not mismatches, mismatches, same_code)
    result.exact = exe.backend == snap.meta["backend"]
    if not same_code:
        result.notes.append(
            "the replayed kernel's code differs from the recorded code "
            f"({exe.kernels[index].hash} vs {snap.meta['hash']}): another backend, "
            "compiler or commit"
        )
    if not against_current:
        result.seconds = time_cpu(bound.timed_kernel(index), precision, budget_s).estimate
        return result
    current = rebuilt_module(snap)
    cexe, cbound, cmismatch = _bound_kernel(snap, current, backend)
    cindex = [k.name for k in cexe.kernels].index(snap.kernel)
    timings = time_interleaved(
        {"recorded": bound.timed_kernel(index), "current": cbound.timed_kernel(cindex)},
        precision,
        budget_s,
    )
    from irkit.measure.stats import ratio_ci

    ratio = ratio_ci(timings["recorded"].samples, timings["current"].samples)
    result.seconds = timings["recorded"].estimate
    result.compare = {
        "current_hash": cexe.kernels[cindex].hash,
        "same_code": cexe.kernels[cindex].hash == exe.kernels[index].hash,
        "current_bit_identical": not cmismatch,
        "current_mismatches": cmismatch,
        "current_s": timings["current"].estimate.to_json(),
        "speedup": {"median": ratio.median, "ci_low": ratio.low, "ci_high": ratio.high},
    }
    return result


def rebuilt_module(snap: Snapshot) -> ModuleOp:
    """The kernel of the same name, rebuilt from the snapshot's model with the current
    commit's passes, as a one-kernel module on the snapshot's arguments."""
    from irkit.frontend import load
    from irkit.runtime import compile, get_backend

    meta = snap.meta
    chosen, _ = get_backend(meta["backend"])
    graph = load(meta["model"], meta["dims"] or None)
    exe = compile(graph, meta["pipeline"], chosen.name)
    fn = next(
        (
            f
            for f in exe.module.ops
            if isinstance(f, func.FuncOp) and f.sym_name.data == snap.kernel
        ),
        None,
    )
    if fn is None:
        raise IrkitError(
            f"the current commit's program has no kernel {snap.kernel!r}; its kernels: {', '.join(k.name for k in exe.kernels)}"
        )
    types = [list(a["shape"]) for a in meta["arguments"]]
    if [shape_of(a) for a in fn.args] != [tuple(s) for s in types]:
        raise IrkitError(f"the current {snap.kernel} takes other arguments than the recorded one")
    rebuilt = Snapshot({**meta, "module": standalone_text(exe.module, fn)}, snap.before, snap.after)
    return replay_module(rebuilt)


def _typed(array: np.ndarray, meta: dict, i: int) -> np.ndarray:
    """Argument `i`'s array with the element type the meta names (npz writes ml_dtypes'
    bfloat16 as a 2-byte void record)."""
    import ml_dtypes  # noqa: F401  (numpy knows "bfloat16" by name once it is imported)

    try:
        want = np.dtype(meta["arguments"][i]["dtype"])
    except TypeError:
        return array
    if array.dtype != want and array.dtype.itemsize == want.itemsize:
        return array.view(want)
    return array
