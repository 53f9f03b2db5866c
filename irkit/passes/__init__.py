"""irkit's pass registry: pass name -> a factory returning the pass class.

Factories import lazily so that listing passes (as xdsl-opt does on start-up) stays cheap.
A test checks that every key equals its class's `name`.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass

IRKIT_PASSES: dict[str, Callable[[], type[ModulePass]]] = {}
