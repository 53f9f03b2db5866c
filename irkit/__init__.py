"""irkit: prototype compiler passes over xDSL IR and measure what each pass is worth.

>>> import irkit
>>> module = irkit.load("examples/mlp.graph", dims={"B": 8})
>>> inputs = irkit.random_inputs(module, seed=0)
>>> outputs = irkit.reference(module, *inputs)
>>> exe = irkit.compile(module, backend="cpu")      # lowered to loops, JIT-compiled
>>> results = exe(*inputs)                           # numpy arrays, one per output
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from irkit.errors import IrkitError
from irkit.version import __version__

if TYPE_CHECKING:
    from irkit.frontend import load
    from irkit.runtime import compile
    from irkit.runtime.reference import random_inputs, reference

__all__ = ["IrkitError", "compile", "load", "random_inputs", "reference", "__version__"]

_LAZY = {
    "load": "irkit.frontend",
    "compile": "irkit.runtime",
    "random_inputs": "irkit.runtime.reference",
    "reference": "irkit.runtime.reference",
}
"""The API's entry points, imported on first use (PEP 562): the command-line tools that need
none of them, `irkit-opt` above all, start without the runtime's imports."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'irkit' has no attribute {name!r}")
