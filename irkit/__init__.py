"""irkit: prototype compiler passes over xDSL IR and measure what each pass is worth.

>>> import irkit
>>> module = irkit.load("examples/mlp.graph", dims={"B": 8})
>>> inputs = irkit.random_inputs(module, seed=0)
>>> outputs = irkit.reference(module, *inputs)
>>> exe = irkit.compile(module, backend="cpu")      # lowered to loops, JIT-compiled
>>> results = exe(*inputs)                           # numpy arrays, one per output
"""

from __future__ import annotations

from irkit.errors import IrkitError
from irkit.frontend import load
from irkit.runtime import compile
from irkit.runtime.reference import random_inputs, reference
from irkit.version import __version__

__all__ = ["IrkitError", "compile", "load", "random_inputs", "reference", "__version__"]
