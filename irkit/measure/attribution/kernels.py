"""Programs known by their kernels' code (`program_key`), and the kernels an attribution
shows, timed alone on their program's data and placed on the roofline."""

from __future__ import annotations

import functools
import hashlib
from collections import Counter
from collections.abc import Callable
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from irkit.ir import to_text
from irkit.measure.attribution.record import KernelTime
from irkit.measure.attribution.types import Program, Progress
from irkit.measure.roofline import Ceilings, roof_point
from irkit.measure.stats import median_ci
from irkit.measure.timers import Rounds, measured, time_interleaved
from irkit.runtime.backend import Executable


def program_key(exe: Executable) -> str:
    """What identifies a compiled program: its kernels' compiled-code identities in order
    (`KernelRecord.code_hash`: on the CPU the kernel after O3, so a pass whose change LLVM
    folds away makes no new program and gets exactly zero), and its loop-level module's
    other ops (the driver, globals) as text. Two programs with equal keys run the same
    code; cheaper than hashing the whole module's text, which printed every kernel again."""
    kernels = exe.kernels
    names = {k.name for k in kernels}
    digest = hashlib.sha256()
    for k in kernels:
        digest.update(f"{k.name}:{k.code_hash or k.hash};".encode())
    if isinstance(exe.module, ModuleOp):
        for op in exe.module.ops:
            if not (isinstance(op, func.FuncOp) and op.sym_name.data in names):
                digest.update(to_text(op, generic=True).encode())
    return digest.hexdigest()[:16]


def flush_bytes(fingerprint: dict) -> int | None:
    """The bytes the backend overwrites before each call (a GPU's L2 flush), where its
    fingerprint says; None for a backend that times warm caches."""
    for value in fingerprint.values():
        if isinstance(value, dict) and value.get("l2_flush_bytes"):
            return int(value["l2_flush_bytes"])
    return None


def kernel_threads(exe: Executable) -> int:
    """The most threads one of the program's kernels runs on."""
    return max([(k.launch or {}).get("threads", 1) for k in exe.kernels] or [1])


def shown_kernels(
    programs: dict[str, Program], pairs: list[str], whole: tuple[str, ...]
) -> set[str]:
    """The hashes of the kernels an attribution shows: every kernel of the programs in
    `whole`, and those that differ between the programs of each pair (`pairs` flattened:
    before, after, before, after...)."""

    def kernels(key: str) -> list[Any]:
        return programs[key].exe.kernels

    shown = {k.hash for key in whole for k in kernels(key)}
    for before, after in zip(pairs[::2], pairs[1::2], strict=True):
        a, b = Counter(k.hash for k in kernels(before)), Counter(k.hash for k in kernels(after))
        shown |= set((a - b) + (b - a))
    return shown


def time_kernels(
    programs: dict[str, Program],
    hashes: set[str],
    precision: float,
    budget_s: float,
    min_rounds: int,
    max_rounds: int,
    seed: int,
    ceilings: Ceilings | None,
    tick: Progress,
) -> dict[str, KernelTime]:
    """Time each kernel of `hashes` once, alone, on the data of a program that has it."""
    fns: dict[str, Callable[[], None]] = {}
    records = {}
    for p in programs.values():
        for i, record in enumerate(p.exe.kernels):
            if record.hash in hashes and record.hash not in fns:
                fns[record.hash] = p.bound.timed_kernel(i)
                records[record.hash] = record
    timings = time_interleaved(fns, precision, budget_s, min_rounds, max_rounds, warmup=0,
                               seed=seed + 1, on_round=lambda r: tick("kernels", r, max_rounds),
                               needed=functools.partial(_imprecise, precision=precision))  # fmt: skip
    tick("kernels", max_rounds, max_rounds)
    out = {}
    for h, t in timings.items():
        r, e = records[h], t.estimate
        threads = int((r.launch or {}).get("threads", 1))  # CPU kernels; a GPU launch has none
        roof = (
            roof_point(r.flops, r.min_bytes, e.median, ceilings, threads).to_json()
            if ceilings
            else None
        )
        out[h] = KernelTime(
            r.name, h, e.median, (e.low, e.high), r.flops, r.min_bytes, roof, r.once
        )
    return out


def _imprecise(rounds: Rounds, precision: float) -> list[str]:
    """The kernels whose median is not yet within `precision`: each leaves the rounds when
    its own is (the main job's 49 kernels all ran to the 200 rounds' cap for the 3 or 4 of
    them that never got to 1%, the others at 0.1-0.2%: 3.1 s, now 0.6)."""
    out = []
    for name, samples in rounds.samples.items():
        x = measured(samples)
        if x.size == 0 or median_ci(x).half_width > precision:
            out.append(name)
    return out


def kernel_diff(
    before: list[KernelTime], after: list[KernelTime]
) -> tuple[list[KernelTime], list[KernelTime]]:
    """Kernels in `before` but not `after` (removed), and the other way round (added),
    counting repeats: a program that runs the same kernel twice has it twice."""
    return _only_in(before, after), _only_in(after, before)


def _only_in(xs: list[KernelTime], ys: list[KernelTime]) -> list[KernelTime]:
    left = Counter(k.hash for k in xs) - Counter(k.hash for k in ys)
    out = []
    for k in xs:
        if left[k.hash] > 0:
            left[k.hash] -= 1
            out.append(k)
    return out
