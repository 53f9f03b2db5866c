"""Measurement: timers, statistics and the fingerprint every result carries."""

from __future__ import annotations

import math

from irkit.errors import IrkitError


def check_protocol(function: str, precision: float, budget_s: float | None, seed: int) -> None:
    """A measurement's knobs from the Python API, checked before anything is compiled (as
    the command line's typed flags are): precision in (0, 1), a positive finite budget
    (None: none given), a seed from 0 to 2^64-1."""
    for name, value in (("precision", precision), ("budget", budget_s)):
        if value is None and name == "budget":
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise IrkitError(f"{function}: {name} must be a positive finite number, got {value!r}")
    if precision >= 1:
        raise IrkitError(
            f"{function}: precision is a relative CI half-width below 1, got {precision!r}"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise IrkitError(f"{function}: seed must be an integer from 0 to 2^64-1, got {seed!r}")
