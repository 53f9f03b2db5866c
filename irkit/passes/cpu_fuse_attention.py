"""cpu-fuse-attention: attention as exporters write it recognized (`recognize-attention`)
and each `graph.attention` lowered as one fused loop nest on the CPU.

Without it, the lowering decomposes attention into a batch matmul, the scale and masks, a
softmax and a batch matmul, with the S x S scores and probabilities in memory between them.
With it, the op is marked (`irkit.fused`, with the register tile) and `lower-graph-to-loops`
emits one kernel by `irkit/passes/emit_attention.py`, in one of three forms:

- prefill (Sq >= lanes / 4, f32/f64): per head, K and V packed once; per band of query
  rows (the vector lanes), the keys in blocks with an online softmax (a running maximum and
  sum, the accumulator rescaled), the scores and the accumulator in vector registers, every
  softmax statistic a vertical vector op; causal keys past the band's last query never
  visited, the causal diagonal masked only in the blocks that cross it;
- decode (fewer query rows, K and V buffers with whole vectors of features;
  `emit_decode.py`): the keys along the lanes, read in place, their dot products added
  across by shuffles, a grouped-query head's rows sharing each block of K and V;
- otherwise (f16/bf16, or tiles=false) the same algorithm one query row at a time.

Nothing of size S x S is stored. Its loops and buffers make it CPU-only (the GPU path has
its own mapping).

Options:

    recognize=true  first make the chains exporters write `graph.attention` ops (the
                    `recognize-attention` pass), so that one optional pass is attributed
                    the whole effect (recognition alone changes nothing on the CPU: the
                    lowering decomposes the op again)
    tiles=true      register tiles (false: one query row at a time, the keys' dot products
                    along the head dimension)
    vector-bits=0   vector register width: 512, 256 or 128; 0 (auto): the host's widest
                    (IRKIT_VECTOR_BITS=256 narrows an AVX-512 host's)
    row-vectors=0   vectors of query rows a band (its rows: this x the lanes); 0 (auto): 4
                    with 32 vector registers, 2 with 16; never more than Sq needs
    block=32        keys a block (rounded up to the microkernel's keys)

Optional: the same values up to the order of the f32 sums (the softmax's denominator
accumulated block by block, the dot products d by d).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass

from irkit.dialects import graph as g
from irkit.errors import require, require_vector_bits
from irkit.host import vector_bits as host_vector_bits
from irkit.host import vector_registers as host_vector_registers
from irkit.passes.emit_attention import FUSED_ATTR
from irkit.passes.recognize_attention import RecognizeAttentionPass


@dataclass(frozen=True)
class CpuFuseAttentionPass(ModulePass):
    """Mark every graph.attention for the fused CPU loops (see the module docstring)."""

    name = "cpu-fuse-attention"
    is_optimization = True

    recognize: bool = True
    tiles: bool = True
    SEARCH_SPACE: ClassVar[dict[str, tuple[int, ...]]] = {"block": (16, 32, 64)}
    """What `tune --space cpu-fuse-attention` and `advise` try: the key block."""

    vector_bits: int = 0
    row_vectors: int = 0
    block: int = 32

    def check_options(self) -> None:
        require_vector_bits(self.vector_bits)
        require(
            0 <= self.row_vectors <= 8,
            "row-vectors",
            self.row_vectors,
            "must be from 1 to 8 (or 0: 4 with 32 vector registers, 2 with 16)",
        )
        require(1 <= self.block <= 1024, "block", self.block, "must be from 1 to 1024")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.check_options()
        if self.recognize:
            RecognizeAttentionPass().apply(ctx, op)
        bits = self.vector_bits or host_vector_bits()
        registers = host_vector_registers() if bits >= 256 else 16
        row_vectors = self.row_vectors or (4 if registers >= 32 else 2)
        tile = DictionaryAttr(
            {
                "vector-bits": IntegerAttr(bits, i64),
                "row-vectors": IntegerAttr(row_vectors, i64),
                "block": IntegerAttr(self.block, i64),
                "registers": IntegerAttr(registers, i64),
            }
        )
        for inner in op.walk():
            if isinstance(inner, g.AttentionOp):
                inner.attributes[FUSED_ATTR] = tile if self.tiles else DictionaryAttr({})
