"""cpu-fuse-attention: lower each `graph.attention` as one fused loop nest on the CPU.

Without it, the lowering decomposes attention into a batch matmul, the scale and masks, a
softmax and a batch matmul, with the S x S scores and probabilities in memory between them.
With it, the op is marked (`irkit.fused`) and `lower-graph-to-loops` emits the loops of
`irkit/passes/emit_attention.py`: each query row's keys in blocks with an online softmax
(a running maximum and sum, the accumulator rescaled), causal keys past the query's own
never visited, nothing of size S x S stored. Its stack buffers make it CPU-only (the GPU
path has its own mapping to come).

Optional: the same values up to the order of the f32 sums (the softmax's denominator
accumulated block by block). No options.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.passes import ModulePass

from irkit.dialects import graph as g
from irkit.passes.emit_attention import FUSED_ATTR


@dataclass(frozen=True)
class CpuFuseAttentionPass(ModulePass):
    """Mark every graph.attention for the fused CPU loops (see the module docstring)."""

    name = "cpu-fuse-attention"
    is_optimization = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for inner in op.walk():
            if isinstance(inner, g.AttentionOp):
                inner.attributes[FUSED_ATTR] = UnitAttr()
