"""Correctness before timing: run an Executable on fresh random inputs, compare with the
float64 reference.

The error measure is ||out - ref|| / ||ref|| over the finite reference values, with a
tolerance by element type. Outputs are poisoned with NaN before the run, so an element a
kernel never wrote shows up; a NaN or inf where the reference is finite always fails, and
non-finite reference values must be matched exactly.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp, TensorType

from irkit import dtypes
from irkit.dtypes import numpy_dtype
from irkit.runtime.backend import Bound, Executable
from irkit.runtime.reference import random_inputs, reference

TOLERANCE = {"float64": 1e-10, "float32": 1e-4, "tfloat32": 2e-3, "float16": 5e-3, "bfloat16": 3e-2}
"""Relative-norm error allowed per element type (f32 accumulates in f32; f16 and bf16 are
rounded at every kernel boundary). A model is held to the tolerance of the narrowest type
anywhere in it: an f32 output computed from an f16 intermediate carries f16 rounding."""


def model_tolerance(graph: ModuleOp) -> float:
    """The loosest tolerance among the element types of every tensor in `graph`."""
    dtypes = {
        str(numpy_dtype(t.element_type))
        for op in graph.walk()
        for t in [*op.result_types, *op.operand_types]
        if isinstance(t, TensorType)
    }
    return max((TOLERANCE.get(d, 1e-4) for d in dtypes), default=1e-4)


@dataclass(frozen=True)
class OutputCheck:
    name: str
    dtype: str
    rel_error: float
    max_abs_error: float
    tolerance: float
    bad_nonfinite: int
    """Elements that are NaN/inf in one of output and reference but not both alike."""
    reference: str = "float64"
    """Which reference it was held to: "float64" (intermediates unrounded) or "stored"
    (every intermediate rounded to its type, as an unfused program computes)."""

    @property
    def passed(self) -> bool:
        return self.bad_nonfinite == 0 and self.rel_error <= self.tolerance

    def describe(self) -> str:
        verdict = "ok" if self.passed else "WRONG"
        if np.dtype(self.dtype).kind in "biu":
            return (
                f"{self.name}: {verdict} (exact {self.dtype}: {self.rel_error:.2%} of elements "
                f"differ, max |error| {self.max_abs_error:.0f})"
            )
        extra = f", {self.bad_nonfinite} non-finite mismatches" if self.bad_nonfinite else ""
        against = (
            ", against the reference with intermediates stored at their types"
            if self.reference == "stored"
            else ""
        )
        return (
            f"{self.name}: {verdict} (relative error {self.rel_error:.2e}, "
            f"tolerance {self.tolerance:.0e}, max |error| {self.max_abs_error:.2e}{extra}{against})"
        )

    def to_json(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def compare(
    name: str,
    out: np.ndarray,
    ref: np.ndarray,
    dtype: np.dtype,
    tolerance: float | None = None,
    reference: str = "float64",
) -> OutputCheck:
    """Check one output against the reference. The reference is first rounded to the
    output's element type: storing the result in that type is part of what the model
    computes, and a value the type cannot hold (3.8e-30 in f16 is 0; 7e4 is inf) would
    otherwise be an error no backend could avoid (a fuzzing campaign found the first)."""
    if np.dtype(dtype).kind in "biu":
        return _compare_exact(name, np.asarray(out), ref, np.dtype(dtype), reference)
    got = np.asarray(out, dtype=np.float64)
    with np.errstate(over="ignore", under="ignore"):
        ref = np.asarray(ref, dtype=np.float64).astype(dtype).astype(np.float64)
    finite = np.isfinite(ref)
    same_nonfinite = (np.isnan(got) & np.isnan(ref)) | (np.isinf(ref) & (got == ref))
    bad = int(
        np.count_nonzero(~finite & ~same_nonfinite) + np.count_nonzero(finite & ~np.isfinite(got))
    )
    with np.errstate(invalid="ignore"):  # inf - inf where both are infinite: not counted
        diff = np.where(finite & np.isfinite(got), got - ref, 0.0)
    norm = float(np.linalg.norm(np.where(finite, ref, 0.0)))
    err = float(np.linalg.norm(diff)) / (norm if norm > 0 else 1.0)
    max_abs = float(np.max(np.abs(diff))) if diff.size else 0.0
    tol = tolerance if tolerance is not None else TOLERANCE.get(str(dtype), 1e-4)
    return OutputCheck(name, str(dtype), err, max_abs, tol, bad, reference)


def _compare_exact(
    name: str, out: np.ndarray, ref: np.ndarray, dtype: np.dtype, reference: str
) -> OutputCheck:
    """Integers and booleans must be exact: the error is the fraction of elements that
    differ (an unwritten boolean byte counts as a mismatch), the tolerance 0, and
    `max_abs_error` the largest difference."""
    unwritten = dtypes.unwritten(out)
    got = out.astype(np.int64) if dtype != np.bool_ else out.view(np.uint8).astype(np.int64)
    want = np.asarray(ref).astype(dtype).astype(np.int64)
    wrong = (got != want) | unwritten
    count = int(np.count_nonzero(wrong))
    max_abs = float(np.max(np.abs(got - want))) if got.size else 0.0
    return OutputCheck(name, str(dtype), count / max(got.size, 1), max_abs, 0.0, 0, reference)


def check(
    exe: Executable,
    graph: ModuleOp,
    seed: int = 0,
    expected: tuple[list[np.ndarray], list[np.ndarray]] | None = None,
) -> tuple[list[OutputCheck], list[np.ndarray]]:
    """Run `exe` and the reference on the same fresh inputs; one check per output, and the
    inputs used (so a caller can time on exactly what was checked). `expected`, when given,
    is (inputs, reference outputs) from `reference_case`, to check many variants of one
    graph against one reference evaluation."""
    inputs, expected_outputs = expected or reference_case(graph, seed)
    poisoned = [dtypes.poisoned(s.shape, s.dtype) for s in exe.outputs]
    got = exe(*inputs, out=poisoned)
    return compare_outputs(exe, graph, inputs, got, expected_outputs), inputs


def check_bound(
    exe: Executable,
    graph: ModuleOp,
    expected: tuple[list[np.ndarray], list[np.ndarray]],
    io: Sequence[Any] | None = None,
) -> tuple[list[OutputCheck], Bound]:
    """`check` on the call that binding makes: bind `exe` to the reference case's inputs
    (a bound executable's outputs start poisoned, and binding runs the graph once) and
    check what it wrote. One call of the program instead of two, where a program that
    takes seconds is then timed on those buffers (attribution's slow variants). `io`:
    another bound program's buffers to bind into (`Bound.io`)."""
    inputs, expected_outputs = expected
    bound = exe.bind(*inputs) if io is None else exe.bind(*inputs, io=io)  # type: ignore[call-arg]
    return compare_outputs(exe, graph, inputs, bound.outputs, expected_outputs), bound


def compare_outputs(
    exe: Executable,
    graph: ModuleOp,
    inputs: list[np.ndarray],
    got: Sequence[np.ndarray],
    expected_outputs: list[np.ndarray],
) -> list[OutputCheck]:
    """One check per output of `exe`: what it computed from `inputs` against the reference."""
    tol = max(model_tolerance(graph), program_tolerance(exe))
    checks = [
        compare(spec.name, o, r, spec.dtype, tol)
        for spec, o, r in zip(exe.outputs, got, expected_outputs, strict=True)
    ]
    if not all(c.passed for c in checks) and _has_narrow_values(graph):
        # Intermediates stored at their types are as correct as intermediates kept wide (a
        # fused kernel); an ill-conditioned chain (a softmax of a large f16 sum, an f16 dot
        # product that cancels) tells the two apart by more than the tolerance.
        stored = reference(graph, *inputs, stored=True)
        checks = [
            c if c.passed else _better(c, compare(spec.name, o, r, spec.dtype, tol, "stored"))
            for c, spec, o, r in zip(checks, exe.outputs, got, stored, strict=True)
        ]
    return checks


def program_tolerance(exe: Executable) -> float:
    """The loosest tolerance an op of the compiled program asks for by its `PRECISION`
    (an opt-in reduced precision such as TF32 tensor cores); 0 where none does. Once per
    compiled module (a compiled program's module does not change): attribution checks
    every placement of every program, 500 checks of 123 modules in the main job."""
    module = getattr(exe, "module", None)
    if module is None:
        return 0.0
    known = _PROGRAM_TOLERANCE.get(module)
    if known is None:
        kinds = {getattr(type(op), "PRECISION", None) for op in module.walk()}
        known = max((TOLERANCE[k] for k in kinds if k in TOLERANCE), default=0.0)
        _PROGRAM_TOLERANCE[module] = known
    return known


_PROGRAM_TOLERANCE: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def _better(a: OutputCheck, b: OutputCheck) -> OutputCheck:
    return b if b.passed or (not a.passed and b.rel_error < a.rel_error) else a


def _has_narrow_values(graph: ModuleOp) -> bool:
    return any(
        isinstance(t, TensorType) and numpy_dtype(t.element_type) != np.float64
        for op in graph.walk()
        for t in op.result_types
    )


def reference_case(graph: ModuleOp, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Fresh random inputs for `graph` (from `seed`) and the float64 reference outputs."""
    inputs = random_inputs(graph, seed)
    return inputs, reference(graph, *inputs)
