"""irkit's dialects and passes for xDSL's `xdsl.universe` entry point, so that plain
`xdsl-opt` parses graph IR and runs irkit's passes too."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import Dialect
from xdsl.universe import Universe

from irkit.passes import IRKIT_PASSES


def _graph() -> Dialect:
    from irkit.dialects.graph import Graph

    return Graph


IRKIT_DIALECTS: dict[str, Callable[[], Dialect]] = {"graph": _graph}

IRKIT_UNIVERSE = Universe(all_dialects=IRKIT_DIALECTS, all_passes=IRKIT_PASSES)
