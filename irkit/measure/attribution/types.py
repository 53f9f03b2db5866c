"""The values attribution's phases hand each other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from irkit.measure.attribution.plan import Mask
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
