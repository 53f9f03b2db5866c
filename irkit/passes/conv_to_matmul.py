"""conv-to-matmul: channels-last convolutions as matrix products (im2col).

A direct convolution loop nest computes each output by a dot product over (ky, kx, c): the
loop emitters cannot register-block or vectorize it, so it runs at scalar speed. An NHWC
convolution (groups = 1; grouped ones are split first, below) is exactly

    reshape(matmul(im2col(x), reshape(w, [KH*KW*C, O])), [N, OH, OW, O])

where `graph.im2col` writes each output pixel's receptive field as one row (KH*KW times
the input's size; zero where the window hangs over the padding). The matmul is then what
`cpu-tile-matmul` and `gpu-tile-matmul` tile. A 1x1 convolution with unit strides and no
padding needs no im2col: the input reshaped to [N*H*W, C] is already the matrix. This is
IREE's `convert-conv2d-to-img2col`.

The product's [N*OH*OW, O] rows are NHWC output pixels, so a per-channel epilogue
broadcasts along the matmul's columns: the pass sinks the output reshape below elementwise
consumers whose other operands vary along the channel axis only (bias, batch-norm factors,
activations), so that `fuse-kernels` fuses them into the matmul as an epilogue on 2-D data.

NCHW convolutions are left alone: run `conv-layout` first (the default pipelines do).

**Implicit GEMM** (`implicit=true`, what `default-cpu` runs): the im2col matrix is never
written. The input is padded once (a `graph.concat` with zeros, which `fuse-kernels` fuses
with the layout transpose before it), and the im2col over the padded input, which then has
no padding, is marked `irkit.implicit`: `fuse-kernels` puts it in the matmul's kernel and
the lowering reads each patch element in place, `x[n, oy*s + ky*d, ox*s + kx*d, c]`, where
the matmul reads A (`cpu-tile-matmul` tiles such a gathered A like a plain one). conv_block
(2x16x32x32, 3x3, 32 channels) wrote a 1.2 MB im2col matrix, 20 us of its 225 us on one
znver4 core, for a padded input of 148 KB; the matmul then reads its rows 9 times from L1
and L2 instead of once from a matrix larger than L2. The CUDA pipeline keeps the im2col
matrix (`gpu-tile-matmul` stages A tiles from a plain matrix).

**Grouped convolutions** of at most `max-groups` groups holding at least `min-group-channels`
channels each become one
dense convolution per group (its slices of the input and the weights), concatenated, each
then a matmul (`SplitGroups`); depthwise ones stay direct.

Options:
  max-expansion=16      leave a convolution direct when its im2col matrix would hold more
                        than this many times the input's elements (KH*KW/stride^2, roughly);
                        with `implicit` no such matrix is written and every conv is a matmul
                        (wav2vec2's positional conv, a 128-wide kernel over 49 frames: 130x)
  implicit=false        implicit GEMM (above)
  min-group-channels=8  the fewest channels a group needs to be split into its own matmul
  max-groups=16         the most groups split so (each is its own kernels: regnet_y_400mf's
                        55 groups of 8 made 972 kernels and a 31 s compile)

Semantics: the same products, summed in the same (ky, kx, c) order; padded taps multiply
zeros, as the direct loop's selects do. Bit-identical to the direct loop nest where a window
holds at most 256 terms; past that (`block-reductions`' block) the direct nest sums blocks
of its window in f64 and the matmul its k in f32: equal to float tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, TensorType, UnitAttr, i64
from xdsl.ir import Operation, SSAValue
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
from irkit.ir import holds


def _shape(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return value.type.get_shape()


def _placed(op: g.GraphOp, like: Operation) -> g.GraphOp:
    op.location = like.location
    return op


class ConvToMatmul(RewritePattern):
    def __init__(self, max_expansion: int, implicit: bool = False):
        self.max_expansion = max_expansion
        self.implicit = implicit

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.Conv2dOp, rewriter: PatternRewriter) -> None:
        p = op.properties
        if g.conv_layout(p) != "nhwc" or g.int_of(p, "groups") != 1:
            return
        n, h, w, c = _shape(op.input)
        kh, kw, _, o = _shape(op.weight)
        _, oh, ow, _ = _shape(op.result)
        if not self.implicit and kh * kw * oh * ow > self.max_expansion * h * w:
            return
        window = {k: p[k] for k in ("strides", "padding", "dilations")}
        direct = (
            (kh, kw) == (1, 1) and g.ints(p, "strides") == (1, 1) and not any(g.ints(p, "padding"))
        )
        padding: list[g.GraphOp] = []
        source = op.input
        if self.implicit and not direct:
            padding = _padded(op.input, g.ints(p, "padding"))
            source = padding[-1].results[0] if padding else op.input
            window["padding"] = g.int_array([0, 0, 0, 0])
        new: list[g.GraphOp] = [
            *padding,
            cols := g.ReshapeOp.build_to(op.input, [n * h * w, c])
            if direct
            else g.Im2colOp.create_inferred([source], {"kernel": g.int_array([kh, kw]), **window}),
            rhs := g.ReshapeOp.build_to(op.weight, [kh * kw * c, o]),
            mm := g.MatmulOp.create_inferred([cols, rhs]),
            out := g.ReshapeOp.build_to(mm, [n, oh, ow, o]),
        ]
        for x in new:
            _placed(x, op)
        if self.implicit and not direct:
            cols.attributes[g.IMPLICIT_ATTR] = UnitAttr()
        mm.attributes.update(op.attributes)
        rewriter.replace(op, new, [out.result])


MIN_GROUP_CHANNELS = 8
MAX_GROUPS = 16


def splits_into_matmuls(
    groups: int, per_group: int, min_channels: int = MIN_GROUP_CHANNELS,
    max_groups: int = MAX_GROUPS,
) -> bool:  # fmt: skip
    """Whether `SplitGroups` turns a grouped convolution of `groups` groups of `per_group`
    input channels into one matmul per group (at conv-to-matmul's default options unless
    given): `conv-layout` converts such a conv to NHWC where it would otherwise keep it
    channels-first."""
    return 1 < groups <= max_groups and per_group >= min_channels


class SplitGroups(RewritePattern):
    """A grouped NHWC convolution whose groups hold at least `min_channels` channels
    becomes one dense convolution per group, on its slice of the input's channels and of the
    weights' output channels, concatenated along the channels: each then becomes a matmul
    (`ConvToMatmul`). The direct grouped loop runs at scalar speed (RegNet's 3 x 3 groups of
    16 channels: ~6 GFLOP/s, 88% of the model); the same products, summed in the same
    (ky, kx, c) order. Depthwise convolutions (one channel a group) stay direct: with their
    window unrolled they vectorize across the channels (`unroll-windows`)."""

    def __init__(
        self, max_expansion: int, min_channels: int, max_groups: int, implicit: bool = False
    ):
        self.max_expansion = max_expansion
        self.min_channels = min_channels
        self.max_groups = max_groups
        self.implicit = implicit

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: g.Conv2dOp, rewriter: PatternRewriter) -> None:
        p = op.properties
        if g.conv_layout(p) != "nhwc":
            return
        n, h, w, c = _shape(op.input)
        kh, kw, per_group, o = _shape(op.weight)
        _, oh, ow, _ = _shape(op.result)
        groups = g.int_of(p, "groups")
        if not splits_into_matmuls(groups, per_group, self.min_channels, self.max_groups):
            return
        if not self.implicit and kh * kw * oh * ow > self.max_expansion * h * w:
            return
        out_group = o // groups
        props = {**p, "groups": IntegerAttr(1, i64)}
        new: list[g.GraphOp] = []
        parts = []
        for k in range(groups):
            x = g.SliceOp.create_inferred([op.input], {
                "starts": g.int_array([0, 0, 0, k * per_group]),
                "limits": g.int_array([n, h, w, (k + 1) * per_group]),
                "strides": g.int_array([1, 1, 1, 1])})  # fmt: skip
            wk = g.SliceOp.create_inferred([op.weight], {
                "starts": g.int_array([0, 0, 0, k * out_group]),
                "limits": g.int_array([kh, kw, per_group, (k + 1) * out_group]),
                "strides": g.int_array([1, 1, 1, 1])})  # fmt: skip
            conv = g.Conv2dOp.create_inferred([x, wk], props)
            conv.attributes.update(op.attributes)
            new += [x, wk, conv]
            parts.append(conv.results[0])
        new.append(cat := g.ConcatOp.create_inferred(parts, {"axis": IntegerAttr(3, i64)}))
        for made in new:
            _placed(made, op)
        rewriter.replace(op, new, [cat.results[0]])


def _padded(x: SSAValue, padding: tuple[int, ...]) -> list[g.GraphOp]:
    """The ops padding NHWC `x` with zeros by [top, left, bottom, right] (a concat along H,
    then one along W; none where the padding is zero); the last one's result is the padded
    input."""
    ops: list[g.GraphOp] = []
    element = g.element_type_of(x)
    value = x
    made: dict[tuple[int, ...], SSAValue] = {}

    def zeros(axis: int, extent: int) -> SSAValue:
        shape = list(_shape(value))
        shape[axis] = extent
        if tuple(shape) not in made:
            ops.append(g.ConstantOp.from_values(element, shape, [0.0]))
            made[tuple(shape)] = ops[-1].results[0]
        return made[tuple(shape)]

    for axis, before, after in ((1, padding[0], padding[2]), (2, padding[1], padding[3])):
        if before or after:
            parts = [
                *([zeros(axis, before)] if before else []),
                value,
                *([zeros(axis, after)] if after else []),
            ]
            ops.append(g.ConcatOp.create_inferred(parts, {"axis": IntegerAttr(axis, i64)}))
            value = ops[-1].results[0]
    return ops


def _channel_only(value: SSAValue, rank: int) -> bool:
    """Whether `value`, broadcast to `rank` axes, varies along the last axis only."""
    shape = _shape(value)
    return len(shape) <= rank and all(d == 1 for d in shape[:-1])


class SinkReshape(RewritePattern):
    """f(reshape(m, [..., O]), c) -> reshape(f(m, c'), [..., O]) for a 2-D m = [M, O] whose
    reshape only splits rows, an elementwise f, and operands c that vary along the channel
    axis only (c' is c as [1, O], or a scalar)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(
        self, op: g.UnaryOp | g.BinaryOp | g.CastOp, rewriter: PatternRewriter
    ) -> None:
        operands = list(op.operands)
        found = [
            i
            for i, v in enumerate(operands)
            if isinstance(r := v.owner, g.ReshapeOp)
            and v.has_one_use()
            and len(_shape(r.input)) == 2
            and _shape(r.input)[-1] == _shape(v)[-1]
            and _shape(v) == _shape(op.results[0])
            and _shape(r.input) != _shape(v)  # an identity reshape splits nothing: sinking
            # one would build another below it, forever (found by fuzzing)
        ]
        if len(found) != 1:
            return
        (i,) = found
        reshape = operands[i].owner
        assert isinstance(reshape, g.ReshapeOp)
        full = _shape(op.results[0])
        moved_operands: list[SSAValue] = []
        for k, v in enumerate(operands):
            if k == i:
                moved_operands.append(reshape.input)
            elif not _shape(v):
                moved_operands.append(v)
            elif _channel_only(v, len(full)) and list(_shape(v)) == [1, _shape(v)[-1]]:
                moved_operands.append(v)  # already [1, O]
            elif _channel_only(v, len(full)):
                r = _placed(g.ReshapeOp.build_to(v, [1, _shape(v)[-1]]), op)
                rewriter.insert(r)
                moved_operands.append(r.results[0])
            else:
                return
        element = g.element_type_of(op.results[0])
        m = _shape(reshape.input)
        moved: Operation
        if isinstance(op, g.BinaryOp):
            moved = type(op).create_inferred(moved_operands, dict(op.properties))
        else:
            moved = type(op).create(
                operands=moved_operands,
                properties=dict(op.properties),
                result_types=[g.tensor(element, m)],
            )
        moved.attributes.update(op.attributes)
        _placed(moved, op)
        after = _placed(g.ReshapeOp.build_to(moved, full), op)
        rewriter.replace(op, [moved, after], [after.results[0]])
        rewriter.erase(reshape)


@dataclass(frozen=True)
class ConvToMatmulPass(ModulePass):
    """Rewrite NHWC convolutions as im2col + matmul (see the module docstring)."""

    name = "conv-to-matmul"
    is_optimization = True

    max_expansion: int = 16
    implicit: bool = False
    min_group_channels: int = MIN_GROUP_CHANNELS
    max_groups: int = MAX_GROUPS

    def check_options(self) -> None:
        require(self.max_expansion >= 1, "max-expansion", self.max_expansion, "must be >= 1")
        require(self.min_group_channels >= 1, "min-group-channels", self.min_group_channels,
                "must be >= 1")  # fmt: skip
        require(self.max_groups >= 2, "max-groups", self.max_groups, "must be >= 2")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not holds(op, (g.Conv2dOp, g.ReshapeOp)):  # the patterns' roots
            return
        PatternRewriteWalker(
            GreedyRewritePatternApplier(
                [
                    ConvToMatmul(self.max_expansion, self.implicit),
                    SinkReshape(),
                    SplitGroups(
                        self.max_expansion, self.min_group_channels, self.max_groups, self.implicit
                    ),  # fmt: skip
                ]
            )
        ).rewrite_module(op)
