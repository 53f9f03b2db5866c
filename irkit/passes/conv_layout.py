"""conv-layout: convert convolutions to one data layout (NCHW -> NHWC by default).

ONNX and PyTorch models are channels-first (NCHW activations, OIHW weights). Channels-last
(NHWC activations, HWIO weights) is what a convolution computed as a matrix product wants:
the C values an output pixel reads from one input pixel are contiguous, the im2col matrix
of an NHWC input is [pixels, KH*KW*C] with no transpose, HWIO weights are already the
[KH*KW*C, O] right-hand side, and the [pixels, O] product *is* the NHWC output, so a
per-channel epilogue (bias, batch norm) broadcasts along the rows of the matmul's tile.
This is IREE's `convert-conv-nchw-to-nhwc` (and cuDNN's preferred layout for the same
reason).

Each conv2d not in the target layout becomes (but for grouped convolutions whose kernel is
wider than a group's channels, which stay channels-first: `keeps_nchw`)

    transpose(conv2d(transpose(x), transpose(w), layout = target), back)

and each batch_norm fed by such a conv (directly, or through elementwise ops such as an
exported conv's bias add) is decomposed into per-channel elementwise ops, so
that `fold-transposes` (which runs later in the default pipelines) can sink the `back`
transpose through the block's elementwise tail and cancel it against the next conv's
forward transpose. What remains are one transpose into the block and one out of it, each a
strided read fused into the kernel that consumes it. Weight transposes of constants are
folded by `fold-constants`; of run-time weights they are one small copy per call.

Options:
  layout=nhwc    the target layout: nhwc or nchw (nchw converts channels-last models back)

Exact data movement only: semantics-preserving bit for bit (the sum over a window runs in
the same (ky, kx, c) order in either layout).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from irkit.dialects import graph as g
from irkit.errors import require
from irkit.ir import holds, shape_of
from irkit.passes.decompose_composites import DecomposeBatchNormPattern
from irkit.passes.fold_transposes import inverse_perm

# How each operand of a conv2d is permuted from one layout into the other.
_INPUT = {"nhwc": (0, 2, 3, 1), "nchw": (0, 3, 1, 2)}  # NCHW -> NHWC, NHWC -> NCHW
_WEIGHT = {"nhwc": (2, 3, 1, 0), "nchw": (3, 2, 0, 1)}  # OIHW -> HWIO, HWIO -> OIHW


class ConvertConvLayout(RewritePattern):
    def __init__(self, layout: str):
        self.layout = layout

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.Conv2dOp, rewriter: PatternRewriter) -> None:
        if g.conv_layout(op.properties) == self.layout:
            return
        if self.layout == "nhwc" and keeps_nchw(op):
            return
        new_ops: list[g.GraphOp] = [
            x := g.TransposeOp.create_inferred(
                [op.input], {"perm": g.int_array(_INPUT[self.layout])}
            ),
            w := g.TransposeOp.create_inferred(
                [op.weight], {"perm": g.int_array(_WEIGHT[self.layout])}
            ),
            conv := g.Conv2dOp.create_inferred(
                [x, w], {**op.properties, "layout": StringAttr(self.layout)}
            ),
            back := g.TransposeOp.create_inferred(
                [conv], {"perm": g.int_array(inverse_perm(_INPUT[self.layout]))}
            ),
        ]
        for new in new_ops:
            new.location = op.location
        conv.attributes.update(op.attributes)
        rewriter.replace(op, new_ops, [back.result])


def keeps_nchw(op: g.Conv2dOp) -> bool:
    """Whether an NCHW conv is better left channels-first: a grouped convolution (more than
    one input channel a group: `conv-to-matmul` leaves it a direct loop nest) whose kernel
    is wider than its group's channels. A direct nest vectorizes along its innermost
    reduction: over a group's channels in NHWC, along the kernel's row in NCHW, contiguous in
    either; the longer one wins. wav2vec2's positional convolution (16 groups of 16
    channels, a 128-wide kernel) direct: 38.7 ms at 1.4 GFLOP/s in NHWC, 5.1 ms in NCHW (one
    znver5 core, 2026-11-28). A grouped conv that `conv-to-matmul` splits into one matmul
    per group (`splits_into_matmuls`, at its default options) is converted all the same:
    that wav2vec2 conv as 16 implicit-GEMM matmuls in NHWC, 5.0 ms -> ~0.3 ms (the model
    8.1 -> 3.4 ms). The choice assumes default-cpu's implicit GEMM: without it the split
    stops at `max-expansion` and such a conv runs direct in NHWC. Depthwise convolutions
    (one channel a group) stay converted: with their short
    window unrolled, NHWC vectorizes them across channels (a 3 x 3 at 99 GFLOP/s)."""
    from irkit.passes.conv_to_matmul import splits_into_matmuls

    groups = g.int_of(op.properties, "groups")
    _, per_group, _, width = shape_of(op.weight)  # OIHW
    if splits_into_matmuls(groups, per_group):  # dense matmuls per group: NHWC is theirs
        return False
    return groups > 1 and per_group > 1 and width > per_group


class DecomposeTransposedBatchNorm(RewritePattern):
    """A batch_norm of a converted conv's output becomes per-channel elementwise ops, which
    fold-transposes can sink the conv's transpose through (batch_norm has no layout)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.BatchNormOp, rewriter: PatternRewriter) -> None:
        if _from_converted_conv(op.input):
            DecomposeBatchNormPattern().match_and_rewrite(op, rewriter)


def _from_converted_conv(value: SSAValue) -> bool:
    """Whether `value` is a converted conv's transposed output, possibly through elementwise
    ops (an exported conv's bias add) whose result-shaped operand leads back to it."""
    owner = value.owner
    while isinstance(owner, g.UnaryOp | g.BinaryOp | g.CastOp):
        shape = owner.results[0].type
        full = [v for v in owner.operands if v.type == shape]
        if not full:
            return False
        owner = full[0].owner
    return isinstance(owner, g.TransposeOp) and isinstance(owner.input.owner, g.Conv2dOp)


@dataclass(frozen=True)
class ConvLayoutPass(ModulePass):
    """Put every conv2d in `layout`, with transposes around it (see the module docstring)."""

    name = "conv-layout"
    is_optimization = True

    layout: str = "nhwc"

    def check_options(self) -> None:
        choices = ", ".join(g.Conv2dOp.LAYOUTS)
        require(
            self.layout in g.Conv2dOp.LAYOUTS, "layout", self.layout, f"expected one of {choices}"
        )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not holds(op, (g.Conv2dOp, g.BatchNormOp)):
            return
        patterns = [ConvertConvLayout(self.layout), DecomposeTransposedBatchNorm()]
        walker = PatternRewriteWalker(
            GreedyRewritePatternApplier(patterns), apply_recursively=False
        )
        walker.rewrite_module(op)
