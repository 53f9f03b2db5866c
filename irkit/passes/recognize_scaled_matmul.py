"""recognize-scaled-matmul: a matmul of dequantized 8-bit floats as one `graph.scaled_matmul`.

A quantized export (a QDQ graph: `irkit.frontend.onnx_quantize`) multiplies 8-bit floats
after widening each operand and scaling it per tensor:

    matmul(cast(a) * scale_a, cast(b) * scale_b)        (a, b f8e4m3 or f8e5m2; the
                                                         scales f32 with one element)

which is `scaled_matmul(a, b, scale_a, scale_b)`, whose nest `gpu-tile-matmul` runs on the
8-bit tensor cores reading the bytes (`irkit.passes.gpu_tile_fp8`), where the chain as
written widens both operands into f32 copies first. Either operand order of each
multiplication; a reshape between the scaling and the matmul (ONNX's MatMul of a rank-3
activation, which the importer writes as rows) moves onto the bytes; the widened or scaled
values may have other readers (they stay for them).

Optional, in `default-cuda` only (on the CPU the chain's f32 weights fold into constants
that `cpu-tile-matmul` packs, which the 8-bit nest would not get). It changes no value
beyond rounding: the scales multiply the sum instead of each operand. No options.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import Float32Type, ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from irkit.dialects import graph as g
from irkit.dtypes import is_fp8
from irkit.ir import element_type_of, shape_of


def _dequantized(value: SSAValue) -> tuple[SSAValue, SSAValue] | None:
    """(the 8-bit tensor, its scale) where `value` is `cast(x) * scale` (either order), x an
    8-bit float widened to f32 and the scale f32 with one element, or a reshape of that
    (a Linear on a rank-3 activation: the importer's rows; x is then to be reshaped the
    same way); else None."""
    op = value.owner
    if isinstance(op, g.ReshapeOp):
        return _dequantized(op.input)
    if not isinstance(op, g.MulOp):
        return None
    for widened, scale in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
        cast = widened.owner
        if not isinstance(cast, g.CastOp):
            continue
        x = cast.input
        if (
            is_fp8(element_type_of(x))
            and isinstance(element_type_of(widened), Float32Type)
            and isinstance(element_type_of(scale), Float32Type)
            and tuple(shape_of(scale)) in ((), (1,))
        ):
            return x, scale
    return None


class _ScaledMatmul(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.MatmulOp, rewriter: PatternRewriter) -> None:
        found = [(v, _dequantized(v)) for v in op.operands]
        if any(pair is None for _, pair in found):
            return
        operands, scales = [], []
        for value, pair in found:
            assert pair is not None
            x, scale = pair
            if shape_of(x) != shape_of(value):  # the bytes reshaped as the values were
                rows = g.ReshapeOp.build_to(x, list(shape_of(value)))
                rewriter.insert(rows)
                x = rows.results[0]
            operands.append(x)
            scales.append(scale)
        new = g.ScaledMatmulOp.create_inferred([*operands, *scales], {})
        new.location = op.location
        dead = [op.lhs.owner, op.rhs.owner]
        rewriter.replace(op, new)
        while dead:  # the widened copies (and their reshapes) nothing else reads
            old = dead.pop()
            if isinstance(old, g.ReshapeOp | g.MulOp | g.CastOp) and not old.results[0].uses:
                dead += [v.owner for v in old.operands]
                rewriter.erase(old)


@dataclass(frozen=True)
class RecognizeScaledMatmulPass(ModulePass):
    """matmul(cast(a) * sa, cast(b) * sb) of 8-bit a, b as scaled_matmul(a, b, sa, sb)."""

    name = "recognize-scaled-matmul"
    is_optimization = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(_ScaledMatmul(), apply_recursively=False).rewrite_module(op)
