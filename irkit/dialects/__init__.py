"""irkit's dialects."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import Dialect


def _graph() -> Dialect:
    from irkit.dialects.graph import Graph

    return Graph


IRKIT_DIALECTS: dict[str, Callable[[], Dialect]] = {"graph": _graph}
"""irkit's dialects by name, loaded lazily (for contexts and xDSL's universe)."""
