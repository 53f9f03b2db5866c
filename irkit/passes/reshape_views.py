"""reshape-views: a reshape standing alone becomes a view of its buffer, not a copy.

`lower-graph-to-loops` gives every graph op outside a fused kernel a kernel of its own, and a
`graph.reshape` standing alone is then a kernel that copies the whole tensor into a buffer of
the new shape (marked `irkit.reshape`). A row-major buffer reshaped is the same bytes in the
same order, so the copy buys nothing: transformer_block has three (q, v and the attention
output; at B=8, S=512, D=512 each is 8 MB read, 8 MB written and a launch), and ONNX models
reshape around every attention and before every flattening Gemm.

This pass, at the loop level, puts a view in place of each such call in the driver:
`memref.expand_shape` where the reshape splits dimensions, `memref.collapse_shape` where it
merges them, and a collapse to one dimension followed by an expansion otherwise (MLIR's
view ops; runtimes alias the view to its source's buffer). Which buffer gives way:

- the result an intermediate (the source an intermediate, an input, a param or a constant):
  the result's buffer goes and its readers read the view of the source, whose buffer is then
  freed after the view's last reader;
- the result a model output, the source an intermediate: the source's buffer goes, and the
  kernel computing it writes a view of the output buffer in place (not where a once-per-bind
  kernel writes it: an output is the caller's for one call only);
- an input reshaped into an output stays a copy: both are the caller's arrays.

Kernels no longer called are removed. A buffer `pad-leading-dims` padded has more elements
than its logical shape (its kernel parameters carry `irkit.extent`): its reshapes stay copies.
Run this pass before padding, as the default pipelines do: padding then pads a buffer and
its views where they only split or merge leading dimensions (the rows stay rows), and leaves
a buffer unpadded where a view splits or merges its last dimension.

Optional and exact: a view reads the very bytes the copy would have written, so the values
are bit-identical with or without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    NoneAttr,
    i64,
)
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass

from irkit.loops import (
    EXTENT_ATTR,
    KERNEL_ATTR,
    RESHAPE_ATTR,
    is_scalar_function,
    kernels,
    once_kernels,
    require_loop_level,
    view_source,
)
from irkit.passes.loop_builder import free_after_last_use


@dataclass(frozen=True)
class ReshapeViewsPass(ModulePass):
    """Replace the calls of reshape kernels by views of their buffers (see the module
    docstring). Optional: the values are the same with or without it."""

    name = "reshape-views"
    is_optimization = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require_loop_level(op, self.name)
        reshapes = {k.sym_name.data: k for k in kernels(op) if RESHAPE_ATTR in k.attributes}
        if not reshapes:
            return
        once = once_kernels(op)
        drivers = [
            f
            for f in op.ops
            if isinstance(f, func.FuncOp)
            and not f.is_declaration
            and KERNEL_ATTR not in f.attributes
            and not is_scalar_function(f)
        ]
        for driver in drivers:
            for call in [c for c in driver.body.block.ops if isinstance(c, func.CallOp)]:
                kernel = reshapes.get(call.callee.root_reference.data)
                if kernel is not None and _viewable(kernel, call):
                    _replace(call, driver.body.block, once)
        called = {c.callee.root_reference.data for c in op.walk() if isinstance(c, func.CallOp)}
        for name, kernel in reshapes.items():
            if name not in called:
                kernel.detach()
                kernel.erase()


def _viewable(kernel: func.FuncOp, call: func.CallOp) -> bool:
    """Whether the call's source and result are one row-major sequence of elements each:
    identity layouts, the same element type and count, neither padded."""
    if len(call.arguments) != 2:
        return False
    types = [v.type for v in call.arguments]
    if not all(isinstance(t, MemRefType) and t.has_static_shape() for t in types):
        return False
    src, dst = types
    assert isinstance(src, MemRefType) and isinstance(dst, MemRefType)
    padded = kernel.arg_attrs is not None and any(
        EXTENT_ATTR in d.data for d in kernel.arg_attrs.data
    )
    return (
        not padded
        and src.element_type == dst.element_type
        and all(isinstance(t.layout, NoneAttr) for t in (src, dst))
        and math.prod(src.get_shape()) == math.prod(dst.get_shape())
    )


def _replace(call: func.CallOp, block: Block, once: set[str]) -> None:
    """The call replaced by a view (see the module docstring), or left where neither buffer
    may give way."""
    src, dst = call.arguments
    if isinstance(dst.owner, memref.AllocOp):
        view = _named(_insert_view(src, _shape(dst), block, call), dst)
        _drop_buffer(dst, view, call)
        root = view_source(src)
        if isinstance(root.owner, memref.AllocOp):
            free_after_last_use(block, root)
    elif (
        isinstance(src.owner, memref.AllocOp)
        and isinstance(dst, BlockArgument)
        and not any(
            isinstance(u.operation, func.CallOp) and u.operation.callee.root_reference.data in once
            for u in src.uses
        )
    ):
        view = _named(_insert_view(dst, _shape(src), block, src.owner), src)
        _drop_buffer(src, view, call)


def _shape(value: SSAValue) -> tuple[int, ...]:
    t = value.type
    assert isinstance(t, MemRefType)
    return tuple(t.get_shape())


def _drop_buffer(buffer: SSAValue, view: SSAValue, call: func.CallOp) -> None:
    """`buffer`'s allocation, deallocation and the reshape's call gone; every other reader
    or writer of it given `view`."""
    call.detach()
    call.erase()
    alloc = buffer.owner
    assert isinstance(alloc, memref.AllocOp)
    for use in list(buffer.uses):
        user = use.operation
        if isinstance(user, memref.DeallocOp):
            user.detach()
            user.erase()
        else:
            user.operands[use.index] = view
    alloc.detach()
    alloc.erase()


def _insert_view(
    value: SSAValue, shape: Sequence[int], block: Block, before: Operation
) -> SSAValue:
    """`value` shown with `shape`, the view ops inserted before `before`."""
    ops = reshape_view(value, shape)
    for op in ops:
        block.insert_op_before(op, before)
    return ops[-1].results[0] if ops else value


def _named(view: SSAValue, buffer: SSAValue) -> SSAValue:
    """`view` named as the buffer it stands for, where it is a new value."""
    if view is not buffer and buffer.name_hint:
        view.name_hint = buffer.name_hint
    return view


def reshape_view(value: SSAValue, shape: Sequence[int]) -> list[Operation]:
    """The ops showing `value` (a memref of identity layout) with `shape` (as many elements):
    none for the same shape, an expand_shape or a collapse_shape where one does it, else a
    collapse to one dimension and an expansion."""
    t = value.type
    assert isinstance(t, MemRefType)
    have, shape = tuple(t.get_shape()), tuple(shape)
    if have == shape:
        return []
    if len(shape) >= len(have) and (groups := _groups(shape, have)) is not None:
        return [_expand(value, shape, groups)]
    if len(shape) <= len(have) and (groups := _groups(have, shape)) is not None:
        return [_collapse(value, shape, groups)]
    flat = _collapse(value, (math.prod(have),), [list(range(len(have)))])
    return [flat, _expand(flat.results[0], shape, [list(range(len(shape)))])]


def _groups(big: Sequence[int], small: Sequence[int]) -> list[list[int]] | None:
    """Consecutive groups of `big`'s dimensions whose products are `small`'s, one per
    dimension of `small` (extents of 1 left over join the last group), or None. A `small` of
    rank 0 takes a `big` of ones with no groups, as MLIR writes it."""
    if not small:
        return [] if all(d == 1 for d in big) else None
    groups: list[list[int]] = []
    i = 0
    for extent in small:
        group = [i] if i < len(big) else []
        if not group:
            return None
        product = big[i]
        i += 1
        while product < extent and i < len(big):
            product *= big[i]
            group.append(i)
            i += 1
        if product != extent:
            return None
        groups.append(group)
    if any(big[j] != 1 for j in range(i, len(big))):
        return None
    groups[-1].extend(range(i, len(big)))
    return groups


def _reassociation(groups: Sequence[Sequence[int]]) -> ArrayAttr:
    return ArrayAttr([ArrayAttr([IntegerAttr(d, i64) for d in g]) for g in groups])


def _expand(value: SSAValue, shape: Sequence[int], groups: Sequence[Sequence[int]]) -> Operation:
    t = value.type
    assert isinstance(t, MemRefType)
    return memref.ExpandShapeOp.build(
        operands=[value, []],
        result_types=[MemRefType(t.element_type, shape)],
        properties={
            "reassociation": _reassociation(groups),
            "static_output_shape": DenseArrayBase.from_list(i64, shape),
        },
    )


def _collapse(value: SSAValue, shape: Sequence[int], groups: Sequence[Sequence[int]]) -> Operation:
    t = value.type
    assert isinstance(t, MemRefType)
    return memref.CollapseShapeOp.build(
        operands=[value],
        result_types=[MemRefType(t.element_type, shape)],
        properties={"reassociation": _reassociation(groups)},
    )
