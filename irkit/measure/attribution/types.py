"""The values attribution's phases hand each other (`engine`), typed."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from irkit.measure.attribution.plan import Mask, Plan
from irkit.measure.attribution.record import KernelTime
from irkit.measure.roofline import Ceilings
from irkit.measure.slots import Rotation
from irkit.pipelines import Step
from irkit.runtime.backend import Bound, Executable

Progress = Callable[[str, int, int], None]
"""Called as progress(phase, done, total) while compiling and measuring."""


@dataclass
class Program:
    """One distinct compiled program, and the variants that compile to it."""

    key: str
    exe: Executable
    bound: Bound
    masks: list[Mask] = field(default_factory=list)


@dataclass(frozen=True)
class Setup:
    """What is measured: the model, the backend, the pipeline's steps and the plan."""

    graph: ModuleOp
    backend: Any
    selection: Any
    ceilings: Ceilings | None
    device_fingerprint: dict
    spec: str
    steps: list[Step]
    optional: list[int]
    plan: Plan
    case: Any
    """The reference's inputs and outputs every program is checked against."""
    null_candidates: str | None = None
    """Where the null players' candidates came from: "probe", "cache" (a run before,
    `_probed_before`), None where none were sought."""


@dataclass(frozen=True)
class Variants:
    """Every variant compiled and checked: the distinct programs, which variant is which."""

    programs: dict[str, Program]
    key_of: dict[Mask, str]
    records: list[dict]
    """Each variant's passes, spec, program and kernels, for the record."""
    compile_seconds: float
    shared: Any
    """`apply_pipelines`'s account of the walk (pass runs, IR states)."""
    full_key: str
    empty_key: str


@dataclass(frozen=True)
class Binding:
    """Every program (and A/A twin) bound as `copies` placements, and the rotation through
    them that the rounds call."""

    twins: dict[str, Mask]
    wanted: int
    copies: int
    copy_bytes: int
    copy_budget: int
    shares_io: bool
    rotation: Rotation


@dataclass(frozen=True)
class Measured:
    """The programs' interleaved rounds and their bootstrap."""

    timings: dict[str, Any]
    keys: list[str]
    """The rows of `samples`: the programs' keys, the twins' names last."""
    samples: np.ndarray
    """Seconds [program, round]; NaN where a program sat a round out."""
    slot_of: np.ndarray
    point: np.ndarray
    boot: np.ndarray
    row: dict[str, int]
    gone: set[str]
    """Programs that left the rounds for good (their passes had verdicts)."""
    periods: dict[str, int]
    """The last look's sampling periods, in cycles."""
    load: dict

    def times(self, key_of: Mapping[Mask, str], masks: tuple[Mask, ...]) -> tuple[dict, dict]:
        """Each variant's time: the point and the bootstrap replicates."""
        return (
            {m: self.point[self.row[key_of[m]]] for m in masks},
            {m: self.boot[self.row[key_of[m]]] for m in masks},
        )


@dataclass(frozen=True)
class Noise:
    """The run's A/A checks: the record's `noise_floor`, the floor every pass is judged
    beyond where the twins' check failed, and each program's own (its split halves')."""

    record: dict
    run_floor_s: float
    context_floor_s: dict[str, float]


@dataclass(frozen=True)
class Kernels:
    """Every kernel of every program by its code's hash, those shown timed alone."""

    by_hash: dict[str, KernelTime]
    shown: set[str]
    programs: dict[str, Program]

    def of(self, key: str) -> list[KernelTime]:
        """The program's kernels in order, under their own names, with the time measured
        for their hash."""
        kernels = self.programs[key].exe.kernels
        return [dataclasses.replace(self.by_hash[k.hash], name=k.name) for k in kernels]
