"""gpu-fuse-attention: attention as exporters write it recognized (`recognize-attention`)
and each `graph.attention` lowered as one fused GPU kernel (`emit_gpu_attention`).

Without it, the CUDA path runs attention as a batch matmul, the scale and masks, a softmax
and a batch matmul, with the S x S scores and probabilities in global memory between four
or more launches. With it, the op is marked (`irkit.fused`, target "gpu") and
`lower-graph-to-loops` emits one GPU-mapped kernel (launch mapping "attention"):

- prefill: a block of `block-q` threads a tile of query rows (one a thread), K and V
  streamed through shared memory `block-k` keys at a time, the online softmax and the
  accumulator in registers; causal key tiles past the query tile's last never loaded;
- decode (Sq <= `decode-rows`): a block of `warps` warps a query row, the warps over the
  keys, their lanes along the features, merged at the end through shared memory.

- prefill on tensor cores (`tensor-cores`, f16/bf16 inputs with head dims multiples of
  16): FlashAttention-2 on mma.sync m16n8k16 (`emit_gpu_attention_mma`), a warp 16 query
  rows, `block-q / 16` warps a block, K and V tiles of `mma-block-k` keys in shared memory.

Otherwise f32 SIMT (f16/bf16 inputs computed in f32).

Options:

    recognize=true   first make the chains exporters write `graph.attention` ops
    block-q=64       query rows (threads) a block in the prefill form: 32 to 1024, a
                     multiple of 32 (fewer where Sq is shorter)
    block-k=16       keys a shared-memory tile (the scores of a tile are registers)
    decode-rows=4    at most this many query rows: the decode form (0: never)
    warps=4          warps a block in the decode form
    tensor-cores=true  the prefill of f16/bf16 inputs on mma.sync (false: f32 SIMT)
    mma-block-k=64   keys a shared tile in the tensor-core form: 16 to 128, a multiple of
                     16 (halved where the tiles would pass 48 KiB)
    max-head-dim=128 the prefill form only where the head dim (of Q and V) is at most this;
                     wider heads stay the batch-matmul chain (a thread holds a query row
                     and its accumulator: at 512, transformer_block's single head, the
                     kernel spilled 24k stores on an H200 and ran 10x slower than the chain)

Optional: the same values up to the order of the f32 sums.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.passes import ModulePass

from irkit.dialects import graph as g
from irkit.errors import require
from irkit.ir import shape_of
from irkit.passes.emit_attention import FUSED_ATTR
from irkit.passes.emit_gpu_attention import TARGET
from irkit.passes.recognize_attention import RecognizeAttentionPass


@dataclass(frozen=True)
class GpuFuseAttentionPass(ModulePass):
    """Mark every graph.attention for the fused GPU kernel (see the module docstring)."""

    name = "gpu-fuse-attention"
    is_optimization = True

    recognize: bool = True
    SEARCH_SPACE: ClassVar[dict[str, tuple[int, ...]]] = {
        "block-q": (32, 64, 128),
        "block-k": (16, 32),
        "mma-block-k": (32, 64),
    }
    """What `tune --space gpu-fuse-attention` and `advise` try: the query and key tiles."""

    block_q: int = 64
    block_k: int = 16
    decode_rows: int = 4
    warps: int = 4
    max_head_dim: int = 128
    tensor_cores: bool = True
    mma_block_k: int = 64

    def check_options(self) -> None:
        require(
            32 <= self.block_q <= 1024 and self.block_q % 32 == 0,
            "block-q",
            self.block_q,
            "must be a multiple of 32 from 32 to 1024",
        )
        require(1 <= self.block_k <= 64, "block-k", self.block_k, "must be from 1 to 64")
        rows = self.decode_rows
        require(0 <= rows <= 64, "decode-rows", rows, "must be from 0 to 64")
        require(1 <= self.warps <= 32, "warps", self.warps, "must be from 1 to 32")
        require(
            16 <= self.mma_block_k <= 128 and self.mma_block_k % 16 == 0,
            "mma-block-k",
            self.mma_block_k,
            "must be a multiple of 16 from 16 to 128",
        )
        require(self.max_head_dim >= 1, "max-head-dim", self.max_head_dim, "must be at least 1")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.check_options()
        if self.recognize:
            RecognizeAttentionPass().apply(ctx, op)
        mark = DictionaryAttr(
            {
                "target": StringAttr(TARGET),
                "block-q": IntegerAttr(self.block_q, i64),
                "block-k": IntegerAttr(self.block_k, i64),
                "decode-rows": IntegerAttr(self.decode_rows, i64),
                "warps": IntegerAttr(self.warps, i64),
                "tensor-cores": IntegerAttr(int(self.tensor_cores), i64),
                "mma-block-k": IntegerAttr(self.mma_block_k, i64),
            }
        )
        for inner in op.walk():
            if isinstance(inner, g.AttentionOp) and self._fits(inner):
                inner.attributes[FUSED_ATTR] = mark

    def _fits(self, op: g.AttentionOp) -> bool:
        """The decode form (its lanes along the features) takes any head; the prefill form
        (a query row and its accumulator a thread) heads up to `max-head-dim`."""
        q, v = shape_of(op.inputs[0]), shape_of(op.inputs[2])
        return q[-2] <= self.decode_rows or max(q[-1], v[-1]) <= self.max_head_dim
