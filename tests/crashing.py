"""A test-only pass whose generated code kills the process: `plant-crash`.

It adds a kernel, called from the driver, that stores 4 TiB past the end of a one-element
scratch buffer (an address no process has mapped): the JIT-compiled code takes a SIGSEGV.
With `hang=true` it adds instead irkit.measure.plants' dependent multiply-add chain at 10^15
iterations (days).
It claims to be an optimization, so a suite or an attribution runs it like any other pass;
isolation in worker processes is what keeps the suite alive. Loaded as a plugin:
`irkit-bench suite --plugin tests/crashing.py`, or imported by the tests."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from irkit.passes import register_pass

# Loaded as a plugin file (by path) in a worker whose working directory is elsewhere: make
# the repository's `tests` package importable for the shared planting helper.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from irkit.measure.plants import call_from_driver, spin_kernel  # noqa: E402

CRASH = """
func.func private @crash(%buf: memref<1xf32> {irkit.scratch}) attributes {irkit.kernel} {
  %far = arith.constant 1099511627776 : index
  %v = arith.constant 1.0 : f32
  memref.store %v, %buf[%far] : memref<1xf32>
  func.return
}
"""


@register_pass
@dataclass(frozen=True)
class PlantCrashPass(ModulePass):
    """Add a kernel that crashes (or, with `hang`, never ends) to the driver (test only)."""

    name = "plant-crash"
    is_optimization = True

    hang: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        call_from_driver(op, spin_kernel("planted_work", 10**15) if self.hang else CRASH)
