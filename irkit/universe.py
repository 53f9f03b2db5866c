"""irkit's dialects and passes for xDSL's `xdsl.universe` entry point, so that plain
`xdsl-opt` parses graph IR and runs irkit's passes too."""

from __future__ import annotations

from xdsl.universe import Universe

from irkit.dialects import IRKIT_DIALECTS
from irkit.passes import IRKIT_PASSES

IRKIT_UNIVERSE = Universe(all_dialects=IRKIT_DIALECTS, all_passes=IRKIT_PASSES)
