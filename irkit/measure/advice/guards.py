"""What `advise` refuses before it reports a speed-up: the harness exploits that published
kernel generators' "10-100x" came from.

- A program that writes its inputs (a kernel storing into a graph input: later calls then
  run on other data, a zeroed tensor is cheap to multiply). Checked before the race, on
  buffers of its own over several calls, and after it: every input buffer of every
  placement slot must still hold the case's inputs, bit for bit.
- A program that skips work on later calls (a result kept from an earlier call, keyed on
  its output buffer or a flag). Checked after timing: the outputs as timed must still be
  right, and then, on fresh inputs written into the same buffers, the outputs *left as
  they were* (not poisoned: a program keyed on a poisoned output would recompute) must be
  the reference's for the fresh inputs after one more call. Inputs that once-per-bind
  kernels prepared (packed weights) keep their values: they are parameters, prepared once.
- A speed-up beyond the roof: a program faster than its kernels' ceilings allow (the sum,
  over its kernels, of the larger of FLOPs over peak and minimum bytes over the bandwidth
  of the level its working set fits) is measuring something else (a cache warmed by the
  harness, work skipped); it is flagged, never reported as advice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

ROOF_SLACK = 0.8
"""A program is beyond its roof when it runs in less than this fraction of the roof's time:
the ceilings are measured (a cache level's bandwidth by a streaming kernel), and a kernel's
minimum bytes can be served partly from a faster level than the one its working set fits."""


def _read(buffer: Any) -> np.ndarray:
    return buffer if isinstance(buffer, np.ndarray) else buffer.download()


def _write(buffer: Any, array: np.ndarray) -> None:
    if isinstance(buffer, np.ndarray):
        np.copyto(buffer, array.astype(buffer.dtype, copy=False))
    else:
        buffer.upload(array)


def prepared_inputs(exe: Any) -> set[int]:
    """The positions of the inputs that once-per-bind kernels read (parameters packed when
    bound): a fresh-input check keeps them."""
    from irkit.ir import entry_function
    from irkit.loops import once_calls, view_source

    module = getattr(exe, "module", None)
    if module is None:
        return set()
    entry = entry_function(module)
    args = list(entry.body.block.args[: len(exe.inputs)])
    read = {view_source(v) for call in once_calls(module, entry) for v in call.arguments}
    return {i for i, a in enumerate(args) if a in read}


def fresh_case(graph: ModuleOp, case: Any, seed: int, keep: set[int]) -> tuple[list, list]:
    """Inputs from another seed (those at `keep` as in `case`) and their reference outputs."""
    from irkit.runtime.check import reference_case
    from irkit.runtime.reference import reference

    other, _ = reference_case(graph, seed)
    inputs = [case[0][i] if i in keep else a for i, a in enumerate(other)]
    return inputs, reference(graph, *inputs)


def writes_inputs(exe: Any, case: Any, calls: int = 3) -> str | None:
    """Whether the program changes its inputs: bound on buffers of its own, called `calls`
    times, each input compared bit for bit. Before the race (a slot's programs share their
    input buffers: one that wrote them would change what the others are timed on)."""
    from irkit.measure.slots import io_of

    bound = exe.bind(*case[0])
    for _ in range(calls):
        bound.run_graph()
    bound.synchronize()
    io = io_of(bound)
    buffers = io[: len(case[0])] if io is not None else getattr(bound, "inputs", [])
    for spec, buffer, want in zip(exe.inputs, buffers, case[0], strict=False):
        if not np.array_equal(_read(buffer), want, equal_nan=True):
            return f"it writes its input '{spec.name}'"
    return None


def inputs_intact(copies: Sequence[Any], case: Any) -> bool:
    """Whether every bound copy's input buffers still hold the case's inputs."""
    from irkit.measure.slots import io_of

    for bound in copies:
        io = io_of(bound)
        for buffer, want in zip((io or [])[: len(case[0])], case[0], strict=False):
            if not np.array_equal(_read(buffer), want, equal_nan=True):
                return False
    return True


def after_timing(exe: Any, bound: Any, graph: ModuleOp, case: Any, fresh: Any) -> str | None:
    """The checks on a bound copy after timing: None where it passes, else why it is
    refused. Its outputs as timed must be right; then, on fresh inputs written into its
    buffers and its outputs left as they were, one more call must give the fresh inputs'
    reference. The buffers hold the case again afterwards."""
    from irkit.measure.slots import io_of
    from irkit.runtime.check import compare_outputs

    n = len(case[0])
    timed = [np.array(o, copy=True) for o in bound.outputs]
    bad = [c for c in compare_outputs(exe, graph, case[0], timed, case[1]) if not c.passed]
    if bad:
        return f"its outputs after timing are wrong: {bad[0].describe()}"
    io = io_of(bound)
    if io is None:
        return None
    for buffer, a in zip(io[:n], fresh[0], strict=True):
        _write(buffer, a)
    bound.run_graph()
    bound.synchronize()
    got = [np.array(o, copy=True) for o in bound.outputs]
    for buffer, a in zip(io[:n], case[0], strict=True):
        _write(buffer, a)
    bound.run_graph()
    bound.synchronize()
    bad = [c for c in compare_outputs(exe, graph, fresh[0], got, fresh[1]) if not c.passed]
    if bad:
        return (
            "on fresh inputs after timing its outputs are wrong (a result kept from an "
            f"earlier call?): {bad[0].describe()}"
        )
    return None


def roof_seconds(exe: Any, ceilings: Any) -> float | None:
    """The least time the program's steady kernels can take under the backend's ceilings
    (None where it has none)."""
    if ceilings is None:
        return None
    total = 0.0
    for r in exe.kernels:
        if r.once:
            continue
        threads = int((r.launch or {}).get("threads", 1))
        _, bandwidth = ceilings.memory_roof(r.min_bytes, threads)
        total += max(r.flops / (ceilings.flops * threads), r.min_bytes / bandwidth)
    return total
