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


IRKIT_DIALECTS: dict[str, Callable[[], Dialect]] = {"graph": _graph, "irkit_warp": _warp}
"""irkit's dialects by name, loaded lazily (for contexts and xDSL's universe)."""
