"""irkit's pass registry: pass name -> a factory returning the pass class.

Factories import lazily so that listing passes (as xdsl-opt does on start-up) stays cheap.
A test checks that every key equals its class's `name`.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass


def _decompose_composites() -> type[ModulePass]:
    from irkit.passes.decompose_composites import DecomposeCompositesPass

    return DecomposeCompositesPass


def _lower_graph_to_loops() -> type[ModulePass]:
    from irkit.passes.lower_graph_to_loops import LowerGraphToLoopsPass

    return LowerGraphToLoopsPass


IRKIT_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "decompose-composites": _decompose_composites,
    "lower-graph-to-loops": _lower_graph_to_loops,
}
