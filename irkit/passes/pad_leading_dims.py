"""pad-leading-dims: give intermediate buffers a padded row stride (leading dimension).

A row-major buffer `[..., R, C]` is stored with rows `C` elements apart. Two row lengths
are costly:

- rows that are not a whole number of vectors: a row then starts at an arbitrary address,
  so no row can be read with aligned 16-byte (GPU) or cache-line (CPU) accesses. The
  matmul tilings read A by `float4` only where every row starts 16-byte aligned; an
  im2col matrix of a 7x7x3 stem convolution has rows of 147 floats;
- rows a multiple of a large power of two bytes (4 KiB: 1024 floats): every row then maps
  to the same cache sets (a 48 KiB 12-way L1 has 64 sets of 64 B, so addresses 4 KiB apart
  share a set), and a walk down a column (a transpose, a reduction over rows, a matmul's
  A rows read together) keeps evicting its own lines.

This pass runs on the loop level, after `lower-graph-to-loops`. Each intermediate buffer
(a `memref.alloc` of the driver function, rank >= 2, passed only to kernels) gets its last
dimension padded: rounded up to a multiple of `align-bytes`, then, when the row is a
multiple of `conflict-bytes`, lengthened by `skew-bytes`. Only the allocation grows: every
index stays what it was (the kernels' loop bounds are the logical extents, not the
buffer's), so the padding is never read or written and the values are bit-identical. The
kernels' parameter types follow, and so does everything that derives a stride from them
(the LLVM and CUDA address arithmetic, the runtimes' allocations, the interpreters). Each
padded parameter carries `irkit.extent`, its logical shape, so a kernel's minimal traffic
does not count the padding.

Inputs and outputs are left alone: they are the caller's arrays, in the caller's layout.
A buffer is also left alone when padding would grow it by more than `max-growth` (a row
of 10 floats is not worth 6 more), or when the driver uses it other than as a kernel
argument or through views (`reshape-views`) that only split or merge its leading
dimensions: those keep its rows, so they show the padded rows too (their kernels' parameters
carry the view's logical shape); a view that splits or merges the last dimension keeps the
buffer unpadded.

Options:

    align-bytes=16      rows rounded up to a multiple of this many bytes (16: one float4)
    conflict-bytes=4096 rows whose size is a multiple of this...
    skew-bytes=64       ...get this many bytes more (one cache line); 0 turns skewing off
    max-growth=0.125    the largest fraction a buffer may grow by
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    MemRefType,
    ModuleOp,
    i64,
)
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from irkit.dtypes import numpy_dtype
from irkit.errors import require
from irkit.ir import unchanged
from irkit.loops import EXTENT_ATTR, KERNEL_ATTR, SCRATCH_ATTR, VIEW_OPS, require_loop_level

"""On a kernel parameter whose buffer is padded: the logical shape (array<i64>)."""


@dataclass(frozen=True)
class PadLeadingDimsPass(ModulePass):
    """Pad the row stride of intermediate buffers (see the module docstring). Optional:
    the values are the same with or without it."""

    name = "pad-leading-dims"
    is_optimization = True

    align_bytes: int = 16
    conflict_bytes: int = 4096
    skew_bytes: int = 64
    max_growth: float = 0.125

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_loop_level(op, "pad-leading-dims")
        kernels = {
            fn.sym_name.data: fn
            for fn in op.ops
            if isinstance(fn, func.FuncOp) and KERNEL_ATTR in fn.attributes
        }
        calls = Counter(o.callee.string_value() for o in op.walk() if isinstance(o, func.CallOp))
        moved = False
        for fn in op.ops:
            if not isinstance(fn, func.FuncOp) or fn.is_declaration or fn.sym_name.data in kernels:
                continue
            for alloc in [o for o in fn.body.block.ops if isinstance(o, memref.AllocOp)]:
                moved = self._pad(alloc, kernels, calls) or moved
        if not moved:
            unchanged(self)

    def check_options(self) -> None:
        require(self.align_bytes >= 1, "align-bytes", self.align_bytes, "must be positive")
        require(self.conflict_bytes >= 1, "conflict-bytes", self.conflict_bytes, "must be positive")
        require(self.skew_bytes >= 0, "skew-bytes", self.skew_bytes, "must be non-negative")
        require(
            math.isfinite(self.max_growth) and self.max_growth >= 0,
            "max-growth",
            self.max_growth,
            "must be a finite non-negative number",
        )

    def padded_row(self, t: MemRefType) -> int:
        """The row length (elements) `t`'s buffer gets: its last dimension, rounded up to
        `align-bytes`, plus `skew-bytes` where the row is a multiple of `conflict-bytes`."""
        size = numpy_dtype(t.element_type).itemsize
        row = t.get_shape()[-1]
        align = max(1, self.align_bytes // size) if self.align_bytes % size == 0 else 1
        padded = -(-row // align) * align
        if self.skew_bytes and (padded * size) % self.conflict_bytes == 0:
            padded += max(1, self.skew_bytes // size)
        return padded

    def _pad(
        self, alloc: memref.AllocOp, kernels: dict[str, func.FuncOp], calls: Counter[str]
    ) -> bool:
        """Pad `alloc`'s rows where every use allows it; whether it did."""
        t = alloc.memref.type
        assert isinstance(t, MemRefType)
        shape = list(t.get_shape())
        if len(shape) < 2 or any(d <= 0 for d in shape):
            return False
        row = self.padded_row(t)
        if row == shape[-1] or (row - shape[-1]) > self.max_growth * shape[-1]:
            return False
        # every use as a kernel argument, and every view that keeps the rows, each with the
        # logical type it shows
        targets: list[tuple[func.FuncOp, int, MemRefType]] = []
        views: list[tuple[Operation, MemRefType]] = []
        pending: list[SSAValue] = [alloc.memref]
        while pending:
            value = pending.pop()
            logical = value.type
            assert isinstance(logical, MemRefType)
            for use in value.uses:
                user = use.operation
                if isinstance(user, memref.DeallocOp):
                    continue
                if isinstance(user, VIEW_OPS) and _keeps_rows(user):
                    shown = user.results[0].type
                    assert isinstance(shown, MemRefType)
                    views.append((user, shown))
                    pending.append(user.results[0])
                    continue
                if not isinstance(user, func.CallOp):
                    return False
                callee = user.callee.string_value()
                fn = kernels.get(callee)
                if fn is None or calls.get(callee) != 1 or _is_scratch(fn, use.index):
                    return False
                targets.append((fn, use.index, logical))
        Rewriter.replace_value_with_new_type(alloc.memref, _padded_like(t, row))
        for view, logical in views:
            view_type = _padded_like(logical, row)
            if isinstance(view, memref.ExpandShapeOp):
                view.properties["static_output_shape"] = DenseArrayBase.from_list(
                    i64, view_type.get_shape()
                )
            Rewriter.replace_value_with_new_type(view.results[0], view_type)
        for fn, index, logical in targets:
            Rewriter.replace_value_with_new_type(
                fn.body.block.args[index], _padded_like(logical, row)
            )
            _set_arg_attr(
                fn, index, EXTENT_ATTR, DenseArrayBase.from_list(i64, logical.get_shape())
            )
            fn.update_function_type()
        return True


def _padded_like(logical: MemRefType, row: int) -> MemRefType:
    """`logical`'s type with its rows `row` elements long."""
    return MemRefType(logical.element_type, [*logical.get_shape()[:-1], row])


def _keeps_rows(view: Operation) -> bool:
    """Whether a driver view (`reshape-views`) only splits or merges leading dimensions, the
    last one a group of its own on both sides: a padded row stride then carries over."""
    groups = view.properties["reassociation"]
    assert isinstance(groups, ArrayAttr)
    return bool(groups.data) and len(groups.data[-1].data) == 1


def _is_scratch(fn: func.FuncOp, index: int) -> bool:
    attrs = fn.arg_attrs
    return attrs is not None and SCRATCH_ATTR in attrs.data[index].data


def _set_arg_attr(fn: func.FuncOp, index: int, name: str, value) -> None:
    n = len(fn.body.block.args)
    attrs = list(fn.arg_attrs.data) if fn.arg_attrs else [DictionaryAttr({})] * n
    attrs[index] = DictionaryAttr({**attrs[index].data, name: value})
    fn.arg_attrs = ArrayAttr(attrs)
