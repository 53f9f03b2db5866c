"""Loop lowerings of contractions and windows: matmul, batch_matmul, conv2d, im2col and
pooling, as rows of the kernel emitter's `EMITTERS` table (the scalar at one result index).
A contraction is a k loop whose accumulator starts at 0; the tile passes match that nest."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from xdsl.dialects import arith
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue

from irkit.dialects import graph as g
from irkit.passes.loop_builder import compute_type

if TYPE_CHECKING:  # the kernel emitter calls these; they only need its type
    from irkit.passes.kernel_emitter import Index, KernelEmitter

dtype_of = g.element_type_of


def shape_of(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType), value.type
    return value.type.get_shape()


def _batch_index(em: KernelEmitter, operand: SSAValue, batch: Index) -> Index:
    """The batch part of an operand's index, broadcast against the result's batch index."""
    dims = shape_of(operand)[:-2]
    tail = batch[len(batch) - len(dims) :] if dims else []
    return [em.b.index(0) if d == 1 else i for d, i in zip(dims, tail, strict=True)]


def matmul(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
    lhs, rhs = op.operands
    *batch, i, j = idx
    lb, rb = _batch_index(em, lhs, batch), _batch_index(em, rhs, batch)
    ct = compute_type(dtype_of(lhs))

    def body(ivs: Index, accs: Index) -> Index:
        (k,) = ivs
        a = em.value_at(lhs, [*lb, i, k])
        b = em.value_at(rhs, [*rb, k, j])
        return [em.fop(arith.AddfOp, accs[0], em.fop(arith.MulfOp, a, b))]

    (acc,) = em.b.for_nest([shape_of(lhs)[-1]], [em.b.float(0.0, ct)], body)
    return acc


def _window_index(
    em: KernelEmitter, out: SSAValue, k: SSAValue, window: tuple[int, int, int, int, int, int]
) -> tuple[SSAValue, SSAValue | None]:
    """The input coordinate out*stride + k*dil - pad, and whether it is inside the input.

    `window` is (stride, dilation, pad before, input size, output extent, kernel extent).
    Bounds that cannot fail (known from the static extents) are not tested; when one can,
    the coordinate is clamped so the load stays in bounds and the caller selects."""
    stride, dil, pad, size, out_extent, k_extent = window
    pos = em.b.iadd(em.b.iadd(em.b.imul(out, stride), em.b.imul(k, dil)), -pad)
    last = (out_extent - 1) * stride + (k_extent - 1) * dil - pad
    checks = ([em.cmpi("sge", pos, 0)] if pad > 0 else []) + (
        [em.cmpi("slt", pos, size)] if last >= size else []
    )
    if not checks:
        return pos, None
    return em.clamp(pos, size - 1), em.all_of(checks)


def conv2d(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
    x, w = op.operands
    nhwc = g.conv_layout(op.properties) == "nhwc"
    if nhwc:  # name every extent and index as in NCHW / OIHW
        n, oy, ox, o = idx
        _, h, wd, _ = shape_of(x)
        kh, kw, cg, kout = shape_of(w)
        oh, ow = shape_of(op.results[0])[1:3]
    else:
        n, o, oy, ox = idx
        _, _, h, wd = shape_of(x)
        kout, cg, kh, kw = shape_of(w)
        oh, ow = shape_of(op.results[0])[2:]
    strides, pad, dil = (g.ints(op.properties, p) for p in ("strides", "padding", "dilations"))
    groups = g.int_of(op.properties, "groups")
    ct = compute_type(dtype_of(x))
    base = em.b.imul(em.b.add(arith.DivUIOp(o, em.b.index(kout // groups))), cg)

    def body(ivs: Index, accs: Index) -> Index:
        ky, kx, ci = ivs
        iy, vy = _window_index(em, oy, ky, (strides[0], dil[0], pad[0], h, oh, kh))
        ix, vx = _window_index(em, ox, kx, (strides[1], dil[1], pad[1], wd, ow, kw))
        c = em.b.iadd(base, ci)
        v = em.value_at(x, [n, iy, ix, c] if nhwc else [n, c, iy, ix])
        checks = [cond for cond in (vy, vx) if cond is not None]
        if checks:
            v = em.select(em.all_of(checks), v, em.b.float(0.0, ct))
        prod = em.fop(arith.MulfOp, v, em.value_at(w, [ky, kx, ci, o] if nhwc else [o, ci, ky, kx]))
        return [em.fop(arith.AddfOp, accs[0], prod)]

    (acc,) = em.b.for_nest([kh, kw, cg], [em.b.float(0.0, ct)], body)
    return acc


def im2col_window(op: Operation) -> tuple[int, ...]:
    """(N, OH, OW, KH, KW, C): im2col's result is this shape, collapsed to 2-D."""
    n, h, wd, c = shape_of(op.operands[0])
    kh, kw = g.ints(op.properties, "kernel")
    oh, ow = g.window_output(op.properties, (h, wd), (kh, kw))
    return n, oh, ow, kh, kw, c


def im2col_at(em: KernelEmitter, op: Operation, fine: Index) -> SSAValue:
    """The patch element at (n, oy, ox, ky, kx, c): the input pixel or a padding zero."""
    x = op.operands[0]
    _, h, wd, _ = shape_of(x)
    _, oh, ow, kh, kw, _ = im2col_window(op)
    strides, pad, dil = (g.ints(op.properties, p) for p in ("strides", "padding", "dilations"))
    n, oy, ox, ky, kx, ci = fine
    iy, vy = _window_index(em, oy, ky, (strides[0], dil[0], pad[0], h, oh, kh))
    ix, vx = _window_index(em, ox, kx, (strides[1], dil[1], pad[1], wd, ow, kw))
    v = em.value_at(x, [n, iy, ix, ci])
    checks = [cond for cond in (vy, vx) if cond is not None]
    if checks:
        v = em.select(em.all_of(checks), v, em.b.float(0.0, compute_type(dtype_of(x))))
    return v


def im2col(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
    """out[m, k] read elsewhere than im2col's own nest: m and k split by division (by
    constants, which LLVM and NVCC turn into multiplies)."""
    n, oh, ow, kh, kw, c = im2col_window(op)

    def split(value: SSAValue, extents: Sequence[int]) -> Index:
        parts: Index = []
        for d in reversed(extents[1:]):
            parts.append(em.b.add(arith.RemUIOp(value, em.b.index(d))))
            value = em.b.add(arith.DivUIOp(value, em.b.index(d)))
        return [value, *reversed(parts)]

    return im2col_at(em, op, [*split(idx[0], [n, oh, ow]), *split(idx[1], [kh, kw, c])])


def pool(em: KernelEmitter, op: Operation, idx: Index) -> SSAValue:
    x = op.operands[0]
    nhwc = g.pool_layout(op.properties) == "nhwc"
    (n, oy, ox, c), (_, h, wd, _) = (
        (idx, shape_of(x))
        if nhwc
        else ([idx[0], idx[2], idx[3], idx[1]], [shape_of(x)[i] for i in (0, 2, 3, 1)])
    )
    kh, kw = g.ints(op.properties, "kernel")
    oh, ow = shape_of(op.results[0])[1:3] if nhwc else shape_of(op.results[0])[2:]
    strides, pad = g.ints(op.properties, "strides"), g.ints(op.properties, "padding")
    dil = g.pool_dilations(op.properties)
    ct = compute_type(dtype_of(x))
    is_max = isinstance(op, g.MaxPool2dOp)
    neutral = em.b.float(-math.inf if is_max else 0.0, ct)

    def body(ivs: Index, accs: Index) -> Index:
        ky, kx = ivs
        iy, vy = _window_index(em, oy, ky, (strides[0], dil[0], pad[0], h, oh, kh))
        ix, vx = _window_index(em, ox, kx, (strides[1], dil[1], pad[1], wd, ow, kw))
        v = em.value_at(x, [n, iy, ix, c] if nhwc else [n, c, iy, ix])
        checks = [cond for cond in (vy, vx) if cond is not None]
        if checks:
            v = em.select(em.all_of(checks), v, neutral)
        out = [em.fop(arith.MaximumfOp if is_max else arith.AddfOp, accs[0], v)]
        if counting:  # a dilated window's taps inside the input, counted as they come
            one = (
                em.select(em.all_of(checks), em.b.float(1.0, ct), neutral)
                if checks
                else em.b.float(1.0, ct)
            )
            out.append(em.fop(arith.AddfOp, accs[1], one))
        return out

    exact = is_max or g.bool_of(op.properties, "count_include_pad") or not any(pad)
    counting = not is_max and not exact and tuple(dil) != (1, 1)
    accs = em.b.for_nest([kh, kw], [neutral, neutral] if counting else [neutral], body)
    acc = accs[0]
    if is_max:
        return acc
    if exact:
        return em.fop(arith.DivfOp, acc, em.b.float(kh * kw, ct))
    if counting:
        return em.fop(arith.DivfOp, acc, accs[1])
    count_y = _window_count(em, oy, strides[0], pad[0], kh, h)
    count_x = _window_count(em, ox, strides[1], pad[1], kw, wd)
    count = em.b.add(arith.MuliOp(count_y, count_x))
    return em.fop(arith.DivfOp, acc, em.to_float(count, acc))


def _window_count(em: KernelEmitter, out: SSAValue, stride: int, pad: int, k: int, size: int):
    """How many window positions fall inside the input: min(s+k, size) - max(s, 0)."""
    start = em.b.iadd(em.b.imul(out, stride), -pad)
    end = em.b.add(arith.MinSIOp(em.b.iadd(start, k), em.b.index(size)))
    begin = em.b.add(arith.MaxSIOp(start, em.b.index(0)))
    return em.b.add(arith.SubiOp(end, begin))
