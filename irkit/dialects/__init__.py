"""irkit's dialects."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import Dialect


def _graph() -> Dialect:
    from irkit.dialects.graph import Graph

    return Graph


def _warp() -> Dialect:
    from irkit.dialects.warp import Warp

    return Warp


def _math_ext() -> Dialect:
    from irkit.dialects.math_ext import MathExt

    return MathExt


def _cpu() -> Dialect:
    from irkit.dialects.cpu import Cpu

    return Cpu


IRKIT_DIALECTS: dict[str, Callable[[], Dialect]] = {
    "graph": _graph,
    "irkit_warp": _warp,
    "irkit_math": _math_ext,
    "irkit_cpu": _cpu,
}
"""irkit's dialects by name, loaded lazily (for contexts and xDSL's universe)."""
